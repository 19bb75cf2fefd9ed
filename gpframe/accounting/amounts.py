"""Exact privacy amounts (``docs/ledger.md``).

Every amount a user types is read through its shortest decimal form (``repr`` of a float) into a
:class:`fractions.Fraction`, so that ``0.1 + 0.1 + 0.1`` is exactly ``0.3`` and the next float
above ``0.1`` is not. Ledger storage uses integers in units of ``10**-exponent``: charges round
up, budgets round down, so rounding can only refuse, never overspend.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from numbers import Rational, Real

from gpframe.errors import InvalidInputError

__all__ = ["LedgerUnits", "exact", "metric_amount", "nonnegative", "positive", "probability"]


def exact(value: object, name: str) -> Fraction:
    """Read ``value`` exactly: floats through their shortest decimal form, others as given.

    >>> exact(0.1, "eps")
    Fraction(1, 10)
    >>> exact(0.1, "eps") * 3 == exact(0.3, "eps")
    True
    >>> exact(0.10000000000000002, "eps") > Fraction(1, 10)
    True
    >>> import numpy as np
    >>> exact(np.True_, "eps")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: eps=...True... is a bool; pass a number. Nothing was charged.
    """
    # A bool is never an amount. numpy's (np.True_, a 0-d bool array) is not a Python bool but
    # converts through float() to 1.0, so it is recognised by its dtype.
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b":
        raise InvalidInputError(f"{name}={value!r} is a bool; pass a number. Nothing was charged.")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Rational):  # int, numpy ints register as Integral
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidInputError(f"{name}={value!r} is not finite. Nothing was charged.")
        return Fraction(value)
    if isinstance(value, Real) or hasattr(value, "__float__"):
        try:
            f = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"{name}={value!r} is not a number. Nothing was charged."
            ) from exc
        if not math.isfinite(f):
            raise InvalidInputError(
                f"{name}={value!r} is not finite; pass a finite positive number. "
                "Nothing was charged."
            )
        return Fraction(repr(f))
    if isinstance(value, str):
        try:
            return Fraction(value.strip())
        except (ValueError, ZeroDivisionError) as exc:
            raise InvalidInputError(
                f"{name}={value!r} is not a number. Nothing was charged."
            ) from exc
    raise InvalidInputError(
        f"{name} must be a number, got {type(value).__name__}. Nothing was charged."
    )


def positive(value: object, name: str) -> Fraction:
    """Exact value that must be finite and > 0 (budgets, privacy parameters).

    >>> positive(2e-6, "rho")
    Fraction(1, 500000)
    """
    x = exact(value, name)
    if x <= 0:
        raise InvalidInputError(f"{name}={value!r} must be > 0. Nothing was charged.")
    return x


def nonnegative(value: object, name: str) -> Fraction:
    """Exact value that must be finite and >= 0 (actual charges)."""
    x = exact(value, name)
    if x < 0:
        raise InvalidInputError(f"{name}={value!r} must be >= 0. Nothing was charged.")
    return x


def probability(value: object, name: str = "beta") -> float:
    """Return ``value`` as a float failure probability in (0, 1) (checked at the entry point).

    Any real number strictly between 0 and 1 (not a bool); compared without ``float()``, so
    ``10**400`` is refused instead of overflowing.

    >>> probability(0.05)
    0.05
    >>> probability(1, "beta")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: beta=1 must be a probability in (0, 1), ...
    """
    if isinstance(value, bool) or not (isinstance(value, Real) and 0 < value < 1):
        raise InvalidInputError(
            f"{name}={value!r} must be a probability in (0, 1), e.g. {name}=0.05. "
            "Nothing was charged."
        )
    return float(value)


def metric_amount(
    rho: object,
    eps: object,
    *,
    example: str,
    filter_kind: str | None = None,
    same_kind: bool = False,
) -> tuple[str, Fraction]:
    """Return ``(kind, exact amount)`` of exactly one of ``rho=`` (CGP) or ``eps=`` (GP).

    ``filter_kind`` (the session's metric filter, if known) refuses a CGP amount on a pure-GP
    filter, which never admits it; ``same_kind`` also refuses a GP amount on a CGP filter (for
    the operations that calibrate to the filter's own kind). ``example`` ends the message
    of a missing or doubled amount.

    >>> metric_amount(2e-6, None, example=".kde(at, rho=1e-5)")
    ('cgp', Fraction(1, 500000))
    """
    if (rho is None) == (eps is None):
        raise InvalidInputError(
            f"pass exactly one of eps= (GP, per m) or rho= (CGP, per m²), got eps={eps!r}, "
            f"rho={rho!r}. Example: {example}. Nothing was charged."
        )
    kind, name, amt = ("cgp", "rho", rho) if rho is not None else ("gp", "eps", eps)
    if filter_kind == "gp" and kind == "cgp":
        raise InvalidInputError(
            "this session's filters are pure GP: pass eps=... (a CGP or Gaussian charge is never "
            "admitted by a pure-GP filter). Nothing was charged."
        )
    if isinstance(amt, bool):  # exact() reads True as 1
        raise InvalidInputError(f"{name}={amt!r} must be a number > 0. Nothing was charged.")
    value = positive(amt, name)  # a bad amount is named first, whatever the filter
    if same_kind and filter_kind == "cgp" and kind == "gp":
        raise InvalidInputError("this session's filters are CGP: pass rho=... Nothing was charged.")
    return kind, value


class LedgerUnits:
    """Integer ledger units of ``10**-exponent`` of a notion's unit.

    Charges are rounded up and budgets down, so a rounded ledger never admits more than the
    exact one. The exponent is chosen from the largest budget the ledger must hold, so that
    every stored integer fits SQLite's signed 64-bit INTEGER with room for 1000x overrides.

    >>> u = LedgerUnits.for_budget(Fraction(3, 10))
    >>> u.exponent
    16
    >>> u.up(Fraction(1, 10)) * 3 <= u.down(Fraction(3, 10))
    True
    >>> u.up(exact(0.10000000000000002, "eps")) * 3 <= u.down(Fraction(3, 10))
    False
    """

    #: largest integer a ledger column may hold (SQLite INTEGER is signed 64-bit)
    MAX = 2**63 - 1

    def __init__(self, exponent: int) -> None:
        self.exponent = int(exponent)
        self.scale = Fraction(10) ** self.exponent

    @classmethod
    def for_budget(cls, budget: Fraction) -> LedgerUnits:
        """Units for a ledger whose default budget is ``budget`` (about 16 significant digits)."""
        if budget <= 0:
            raise InvalidInputError(f"budget={float(budget)!r} must be > 0. Nothing was charged.")
        # floor(log10(budget)) computed exactly from the Fraction
        e = len(str(budget.numerator)) - len(str(budget.denominator))
        if Fraction(10) ** e > budget:
            e -= 1
        return cls(15 - e)

    def up(self, amount: Fraction) -> int:
        """Ledger units of a charge: rounded up."""
        v = amount * self.scale
        return -((-v.numerator) // v.denominator)

    def down(self, amount: Fraction) -> int:
        """Ledger units of a budget: rounded down."""
        v = amount * self.scale
        return v.numerator // v.denominator

    def to_fraction(self, units: int) -> Fraction:
        """Return the exact amount that ``units`` ledger units stand for."""
        return Fraction(int(units)) / self.scale

    def __repr__(self) -> str:
        return f"LedgerUnits(exponent={self.exponent})"
