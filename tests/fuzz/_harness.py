"""Shared pieces of the bad-input fuzzers: the call checker, the ledger hash, value strategies.

Contract checked for every generated call (issue 10, "Bad-input fuzzing"):

* the call succeeds, or raises a :class:`gpframe.GpframeError` whose message names the argument
  or column at fault (any other exception is a bug);
* a rejected call leaves the ledger FILE byte-identical (the SQLite file and its ``-wal``);
* no output of a successful call holds NaN or inf for a valid (released) row.

``COUNTS`` records how many generated inputs reached each entry point; ``conftest.py`` prints the
table at the end of the run.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

import gpframe as gp

#: generated inputs per entry point (incremented by :func:`call`)
COUNTS: Counter[str] = Counter()

#: gpframe's error class names: the only ones allowed in a DuckDB UDF error text
GP_ERROR_NAMES = tuple(
    n
    for n in gp.__all__
    if isinstance(getattr(gp, n), type) and issubclass(getattr(gp, n), gp.GpframeError)
)


class Rejected(Exception):
    """Raised by :func:`call` for a clean rejection, carrying the message."""


def ledger_hash(path: str | Path) -> str:
    """SHA-256 of the ledger file and its write-ahead log (what a rejected call must not touch)."""
    h = hashlib.sha256()
    for p in (Path(path), Path(f"{path}-wal")):
        h.update(p.name.encode())
        h.update(p.read_bytes() if p.exists() else b"<absent>")
    return h.hexdigest()


def call(
    entry: str, names: str | tuple[str, ...], fn: Any, *args: Any, ledger: Any = None, **kw: Any
) -> Any:
    """Run ``fn(*args, **kw)`` under the fuzz contract; return its result.

    ``names``: the argument/column names one of which a rejection must mention. ``ledger``: a
    ledger file path whose bytes must not change if the call is rejected. Raises ``Rejected``
    (after the checks) when the call was refused cleanly, ``AssertionError`` on a breach.
    """
    COUNTS[entry] += 1
    names = (names,) if isinstance(names, str) else names
    before = ledger_hash(ledger) if ledger is not None else None
    try:
        with warnings.catch_warnings():
            # GpframeWarning (e.g. noise above 100 km) is an answer, not a failure; pytest turns
            # warnings into errors, which would abort the call half-way through a reservation.
            warnings.simplefilter("ignore", gp.GpframeWarning)
            out = fn(*args, **kw)
    except gp.GpframeError as exc:
        msg = str(exc)
        assert any(n in msg for n in names), (
            f"{entry}: the message does not name any of {names}: {msg!r}"
        )
        if before is not None:
            assert ledger_hash(ledger) == before, (
                f"{entry}: a rejected call changed the ledger: {msg}"
            )
        raise Rejected(msg) from exc
    except Exception as exc:
        raise AssertionError(f"{entry}: non-gpframe exception {type(exc).__name__}: {exc}") from exc
    return out


def attempt(entry: str, names: Any, fn: Any, *args: Any, **kw: Any) -> tuple[bool, Any]:
    """:func:`call`, returning ``(True, result)`` or ``(False, message)`` for a rejection."""
    try:
        return True, call(entry, names, fn, *args, **kw)
    except Rejected as r:
        return False, str(r)


def assert_finite(entry: str, values: Any) -> None:
    """No NaN or inf among the released values."""
    a = np.asarray(values, dtype=np.float64)
    assert np.isfinite(a).all(), f"{entry}: output holds NaN/inf: {a[~np.isfinite(a)][:5]!r}"


# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

_nan = float("nan")
_inf = float("inf")

#: hand-picked bad scalars: non-finite, zero, negative, tiny, huge, wrong types
SPECIAL = [
    _nan,
    _inf,
    -_inf,
    0,
    0.0,
    -0.0,
    -1,
    -1e-9,
    1e-300,
    5e-324,
    1e300,
    2**64,
    10**400,
    True,
    False,
    None,
    "0.1",
    "",
    "nan",
    "-1",
    b"1",
    [0.1],
    (0.1,),
    {},
    1j,
    np.nan,
    np.float32("nan"),
    np.float64("inf"),
    np.int64(-3),
    np.int64(0),
    np.bool_(True),
    Fraction(-1, 3),
    Fraction(0),
    Decimal("NaN"),
    Decimal("-1"),
    Decimal("Infinity"),
    np.array([0.1]),
    np.array(0.1),
    object(),
]

bad_scalars = st.one_of(
    st.sampled_from(SPECIAL),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=4),
)

#: plausible amounts, so that successes (and their outputs) are exercised too
good_amounts = st.floats(min_value=1e-6, max_value=5.0, allow_nan=False, allow_infinity=False)

scalars = st.one_of(bad_scalars, good_amounts)


def is_number(v: Any) -> bool:
    """True for a real, finite, non-bool scalar."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, Fraction, np.number)):
        return False
    try:
        return math.isfinite(float(v))
    except (OverflowError, TypeError, ValueError):
        return isinstance(v, int)


def assert_budgets(entry: str, session: Any) -> None:
    """No user has been charged past their budget (any notion), and the audit chain holds."""
    rep = session.report()
    if len(rep):
        over = rep["spent"].to_numpy(np.float64) > rep["budget"].to_numpy(np.float64)
        assert not over.any(), f"{entry}: charged past the budget:\n{rep[over]}"
    assert session.ledger.verify()


def sql_call(
    entry: str, con: Any, query: str, params: Any, names: tuple[str, ...], ledger: Any
) -> list[Any] | None:
    """Run one SQL query under the fuzz contract; return its rows, or None if it was refused.

    A refusal raised inside a gpframe UDF ("Python exception occurred") must carry a gpframe
    error class name and one of ``names``; a refusal by DuckDB itself (a cast, before gpframe
    ran) is allowed. Either way the ledger file must be byte-identical afterwards.
    """
    import duckdb

    COUNTS[entry] += 1
    before = ledger_hash(ledger)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gp.GpframeWarning)  # an answer, not an error
            return con.execute(query, params).fetchall()
    except duckdb.Error as exc:
        msg = str(exc)
        try:  # DuckDB 2.0 keeps a result that failed mid-fetch pending on the connection
            con.abort()
        except duckdb.Error:
            pass
        if "Python exception occurred" in msg:
            assert any(f"{n}:" in msg for n in GP_ERROR_NAMES), f"{entry}: {msg}"
            assert any(n in msg for n in names), f"{entry}: names none of {names}: {msg}"
        assert ledger_hash(ledger) == before, f"{entry}: rejected SQL changed the ledger: {msg}"
        return None
