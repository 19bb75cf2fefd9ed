"""gpframe's exceptions and warnings.

Every message names the argument or column at fault, says how to fix it and what the ledger
did ("Nothing was charged."), because inside a DuckDB UDF only the text reaches the user.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "CRSError",
    "ChargeConflictError",
    "GpframeError",
    "GpframeInternalError",
    "GpframeWarning",
    "InsecureRandomnessError",
    "InvalidInputError",
    "LedgerCorruptError",
    "LedgerError",
    "NoiseOverflowError",
]


class GpframeError(Exception):
    """Base class of every error gpframe raises on purpose; catch this to catch them all."""


class InvalidInputError(GpframeError, ValueError):
    """Bad columns, NaN/inf values, invalid polygons or out-of-range parameters."""


class CRSError(InvalidInputError):
    """Degrees (or another non-metre unit) where metres are needed, or no CRS at all."""


class BudgetExceededError(GpframeError, RuntimeError):
    """A privacy budget cannot cover the requested amount."""


class LedgerError(GpframeError, RuntimeError):
    """The ledger store is unreadable, locked for too long, or lost a write race."""


class LedgerCorruptError(LedgerError):
    """A ledger file is missing (with ``create=False``), corrupted, or has a foreign schema."""


class ChargeConflictError(LedgerError):
    """A charge id was replayed with amounts that differ from the first charge under that id."""


class NoiseOverflowError(GpframeError, ArithmeticError):
    """A lattice noise draw does not fit in int64 (probability below exp(-2**22))."""


class InsecureRandomnessError(GpframeError, RuntimeError):
    """A seeded (test-only) randomness source reached a release path without being enabled."""


class GpframeInternalError(GpframeError, AssertionError):
    """An internal invariant failed. The message ends with "This is a bug: please report it."."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} This is a bug: please report it.")


class GpframeWarning(UserWarning):
    """A result is valid but probably not what the caller wanted (e.g. noise above 100 km)."""
