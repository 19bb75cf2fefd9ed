"""DuckDB SQL functions that privatize points and charge the session (DESIGN.md §5, STYLE.md §9).

``gp.duckdb.register(con, session)`` adds, on the connection ``con``:

``gp_privatize(user_id, x, y, rho)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus lattice Gaussian noise at ``rho`` (CGP, per m²): σ = (1 + √2·g)/√(2ρ)
    metres per coordinate, g = 2⁻¹⁰ m (secure-noise.md §8, §9.3; concentrated-geo-privacy.md §6.2
    with n = 1). The user's metric budget is charged ``rho`` for the row.
``gp_privatize_gp(user_id, x, y, eps)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus planar lattice Laplace noise at ``eps`` (GP, per m): mean radius
    2·(1 + √2·g)/ε metres (secure-noise.md §7, §9.3). Charged ``eps`` (ε²/2 on a CGP budget).

Both are SQL macros over Arrow UDFs (``gp_privatize_udf_int`` / ``_str`` and
``gp_privatize_gp_udf_int`` / ``_str``); the macro picks the UDF from the type of ``user_id``.
Integer ids (up to BIGINT) are charged as integers, anything else as ``CAST(user_id AS VARCHAR)``,
exactly as the Python accessor keys the same column.

Units: **metres in, metres out.** The functions never project. Give them coordinates of a
projected metre CRS (pre-projected columns, or DuckDB spatial's ``ST_Transform``); a row in
degrees would be protected at ε per degree, i.e. almost not at all. The Python accessor
(``df.geopriv``) projects for you.

Semantics of a row (``per="point"`` in Python terms): each row is one point of its user, released
at the row's amount; a user with m rows in a query is charged m × amount. The same rows through
``df.geopriv(...).privatize(rho=..., per="point")`` are charged exactly the same.

NULL in any argument gives NULL and no charge. A user whose remaining budget cannot pay for the
batch's rows gets NULL for those rows and no charge.

Charging, and why it may over-charge
------------------------------------
DuckDB calls an Arrow UDF once per batch of up to 2,048 rows, from several threads. Each call
draws the noise for all of its rows in one sampler call per distinct amount (never per row:
secure-noise.md §10), and makes one ``session.reserve`` and one ``charge`` for the batch, under a
process-wide lock, through the Session's own store (never through this DuckDB connection, so a
failed or rolled-back query cannot undo a charge). Consequences, all on the safe side:

* Every draw is charged, never deduplicated: if DuckDB evaluates the function twice for one row
  (it may, e.g. when an optimiser duplicates an expression), both draws are charged.
* Rows that the query later discards (a ``LIMIT``, a filter on the output, an aborted query) were
  drawn and are charged. DuckDB may also process more rows than a ``LIMIT`` needs.
* A query that fails half way keeps the charges of the batches that ran.
* A column the query never uses may be pruned, and then nothing is drawn or charged for it.

Call the functions directly on rows, never inside a scalar subquery (``(SELECT gp_privatize(...))``
runs once per query). ``side_effects=True`` stops DuckDB from folding constant arguments, merging
repeated calls and running the UDFs during ``EXPLAIN``.

Examples
--------
>>> import duckdb, gpframe as gp
>>> from gpframe.duckdb import register
>>> from gpframe.ledger import Session
>>> con = duckdb.connect()
>>> session = Session(budget=gp.CGP(rho=1e-3))
>>> reg = register(con, session)
>>> reg is register(con, session)       # idempotent
True
>>> q = "SELECT p.x IS NOT NULL FROM (SELECT gp_privatize(7, 500.0, 800.0, 1e-4) AS p)"
>>> con.sql(q).fetchall()
[(True,)]
>>> session.spent().tolist()
[0.0001]
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.queries import privatize as _pv

__all__ = ["Registration", "register"]

#: the UDFs and macros register() creates: (udf name, macro name, mode, amount keyword); each
#: macro dispatches to an integer-id UDF or a text-id UDF, so user 7 is the same ledger user in
#: SQL and in Python (the ledger keeps 7 and "7" apart)
FUNCTIONS = (
    ("gp_privatize_udf", "gp_privatize", "cgp", "rho"),
    ("gp_privatize_gp_udf", "gp_privatize_gp", "gp", "eps"),
)
#: DuckDB types whose values are charged as Python ints (typeof() is folded when planning)
_INT_TYPES = "'TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'UTINYINT', 'USMALLINT', 'UINTEGER'"

# One lock for every gpframe UDF in the process: DuckDB runs UDF calls on several threads, and
# a Session (an SQLite connection) must see one reserve/charge at a time.
_LEDGER_LOCK = threading.RLock()

# con -> Registration, so that register() is idempotent per connection.
_REGISTRY: weakref.WeakKeyDictionary[Any, Registration] = weakref.WeakKeyDictionary()
_REGISTRY_BY_ID: dict[int, Registration] = {}


@dataclass
class Registration:
    """The functions registered on one connection, and counters for audits and tests.

    Attributes
    ----------
    session : gpframe.Session
        The session the functions charge (the latest one passed to :func:`register`).
    rows_drawn : int
        Rows that received noise (every one of them was charged).
    rows_excluded : int
        Non-NULL rows of users whose budget could not pay (NULL out, no charge).
    batches : int
        UDF calls (Arrow batches) that drew noise.
    """

    session: Any
    rng: Any = None
    rows_drawn: int = 0
    rows_excluded: int = 0
    batches: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def register(con: Any, session: Any, *, rng: Any = None) -> Registration:
    """Register ``gp_privatize`` and ``gp_privatize_gp`` on ``con``, charging ``session``.

    Idempotent: calling it again on the same connection returns the same registration (and
    points it at ``session`` if another one is passed). UDFs are not stored in a database file,
    so register them in every process; the helper macros are ``TEMP`` for the same reason.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection to add the functions to.
    session : gpframe.Session
        The ledger the functions charge. It uses its own store connection, never ``con``.
    rng : BitSource or None
        Randomness source; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    Registration
    """
    import duckdb
    from duckdb.sqltypes import BIGINT, DOUBLE, VARCHAR

    if not hasattr(session, "reserve"):
        raise InvalidInputError(
            f"session={session!r} is not a gpframe Session; pass gp.Session(budget=...). "
            "Nothing was charged."
        )
    reg = _lookup(con)
    if reg is not None:
        reg.session = session
        reg.rng = rng
        return reg
    reg = Registration(session=session, rng=rng)
    existing = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_name LIKE 'gp_privatize%'"
        ).fetchall()
    }
    rtype = duckdb.struct_type({"x": DOUBLE, "y": DOUBLE})
    for udf, macro, mode, param in FUNCTIONS:
        for suffix, utype in (("_int", BIGINT), ("_str", VARCHAR)):
            if udf + suffix in existing:  # left by an earlier import of this module: replace
                con.remove_function(udf + suffix)
            con.create_function(
                udf + suffix,
                _make_udf(reg, mode),
                [utype, DOUBLE, DOUBLE, DOUBLE],
                rtype,
                type="arrow",
                null_handling="special",
                side_effects=True,
            )
        args = f"CAST(x AS DOUBLE), CAST(y AS DOUBLE), CAST({param} AS DOUBLE)"
        con.execute(
            f"CREATE OR REPLACE TEMP MACRO {macro}(user_id, x, y, {param}) AS "
            f"CASE WHEN typeof(user_id) IN ({_INT_TYPES}) "
            f"THEN {udf}_int(TRY_CAST(user_id AS BIGINT), {args}) "
            f"ELSE {udf}_str(CAST(user_id AS VARCHAR), {args}) END"
        )
    _remember(con, reg)
    return reg


def _lookup(con: Any) -> Registration | None:
    try:
        return _REGISTRY.get(con)
    except TypeError:
        return _REGISTRY_BY_ID.get(id(con))


def _remember(con: Any, reg: Registration) -> None:
    try:
        _REGISTRY[con] = reg
    except TypeError:
        _REGISTRY_BY_ID[id(con)] = reg


def _np(a: Any, dtype: Any = None) -> np.ndarray:
    if hasattr(a, "combine_chunks"):
        a = a.combine_chunks()
    return np.asarray(a.to_numpy(zero_copy_only=False), dtype=dtype)


def _user_ids(a: Any) -> np.ndarray:
    """User ids as Python objects (int or str), the keys the ledger and the accessor use."""
    if hasattr(a, "combine_chunks"):
        a = a.combine_chunks()
    out = np.empty(len(a), dtype=object)
    out[:] = a.to_pylist()
    return out


def _nulls(a: Any) -> np.ndarray:
    if hasattr(a, "combine_chunks"):
        a = a.combine_chunks()
    return np.asarray(a.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _make_udf(reg: Registration, mode: str) -> Any:
    param = "rho" if mode == "cgp" else "eps"

    def udf(user_id: Any, x: Any, y: Any, amount: Any) -> Any:
        import pyarrow as pa

        n = len(x)
        null = _nulls(user_id) | _nulls(x) | _nulls(y) | _nulls(amount)
        ok = ~null
        out_x = np.full(n, np.nan)
        out_y = np.full(n, np.nan)
        if ok.any():
            rows = np.flatnonzero(ok)
            xs = _np(x, np.float64)[rows]
            ys = _np(y, np.float64)[rows]
            amts = _np(amount, np.float64)[rows]
            users = _user_ids(user_id)[rows]
            released, xy = _privatize_batch(reg, mode, param, users, xs, ys, amts)
            out_x[rows[released]] = xy[released, 0]
            out_y[rows[released]] = xy[released, 1]
            null[rows[~released]] = True
        valid = ~null
        fx = pa.array(out_x, mask=null)
        fy = pa.array(out_y, mask=null)
        del valid
        return pa.StructArray.from_arrays([fx, fy], names=["x", "y"], mask=pa.array(null))

    udf.__name__ = f"gp_privatize_{mode}_udf"
    return udf


def _privatize_batch(
    reg: Registration,
    mode: str,
    param: str,
    users: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    amts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate, reserve, draw and charge one Arrow batch; returns (released mask, noisy xy)."""
    import pandas as pd

    from gpframe.accessor import filter_charges, filter_kind, ledger_keys

    bad = ~np.isfinite(amts) | (amts <= 0)
    if bad.any():
        raise InvalidInputError(
            f"gp_privatize: {param}={amts[bad][0]!r} in {int(bad.sum())} row(s) must be finite "
            f"and > 0. Nothing was charged for this batch."
        )
    xy = np.column_stack([xs, ys])
    nonfinite = ~np.isfinite(xy).all(axis=1)
    if nonfinite.any():
        raise InvalidInputError(
            f"gp_privatize: x/y has {int(nonfinite.sum())} NaN or infinite value(s); filter them "
            "out (WHERE isfinite(x) AND isfinite(y)). Nothing was charged for this batch."
        )
    if (np.abs(xy) >= _pv.COORD_MAX_M).any():
        raise InvalidInputError(
            "gp_privatize: a coordinate is beyond ±2**40 m; x and y must be metres of a "
            "projected CRS. Nothing was charged for this batch."
        )
    codes, uniques = pd.factorize(pd.Series(users, dtype=object), sort=False)
    n_users = len(uniques)
    distinct = np.unique(amts)
    exact = {float(a): _amount(float(a), param) for a in distinct}
    for a in exact.values():
        _pv.check_amount(mode, "point", a)
        _preflight_one(mode, a)

    with _LEDGER_LOCK:
        session = reg.session
        fkind = filter_kind(session)
        # per-row charge in the filter's units, summed per user (each row is one point)
        row_charge = {
            f: filter_charges(fkind, mode, [a], np.array([1]))[0] for f, a in exact.items()
        }
        if len(row_charge) == 1:  # the usual case: one amount for the whole batch
            (c,) = row_charge.values()
            cnt = np.bincount(codes, minlength=n_users)
            alloc = filter_charges(fkind, mode, [exact[float(distinct[0])]] * n_users, cnt)
        else:
            alloc = [Fraction(0)] * n_users
            for f, c in row_charge.items():
                cnt = np.bincount(codes[amts == f], minlength=n_users)
                for u in np.flatnonzero(cnt):
                    alloc[u] += c * int(cnt[u])
        params = {param: [float(a) for a in distinct[:16]], "rows": len(xs), "source": "duckdb"}
        with session.reserve(
            ledger_keys(uniques),
            alloc,
            notion="metric",
            kind=None,
            query="gp_privatize",
            params=params,
        ) as r:
            admitted = np.asarray(r.admitted, dtype=bool)
            noisy = np.full(xy.shape, np.nan)
            released = np.zeros(len(xs), dtype=bool)
            actual = [Fraction(0)] * n_users
            for f, a in exact.items():
                sel = np.flatnonzero(amts == f)
                res = _pv.privatize_points(
                    xy[sel],
                    codes[sel],
                    n_users,
                    mode=mode,  # type: ignore[arg-type]
                    amount=a,
                    per="point",
                    admitted=admitted,
                    scale_max=1.0,
                    rng=reg.rng,
                    progress=False,
                )
                noisy[sel] = res.xy
                released[sel] = res.released
                cnt = np.bincount(codes[sel], minlength=n_users)
                pp = _pv.split_charges(res.charges, cnt)
                part = filter_charges(fkind, mode, pp, cnt)
                for u in np.flatnonzero(admitted & (cnt > 0)):
                    actual[u] += part[u]
            r.charge(actual)
        reg.rows_drawn += int(released.sum())
        reg.rows_excluded += int((~released).sum())
        reg.batches += 1
    return released, noisy


def _amount(value: float, param: str) -> Fraction:
    from gpframe.accounting.amounts import positive

    if not math.isfinite(value):
        raise InvalidInputError(
            f"gp_privatize: {param}={value!r} is not finite. Nothing was charged."
        )
    return positive(value, param)


def _preflight_one(mode: str, a: Fraction) -> None:
    from gpframe.mechanisms.calibration import cgp_gaussian, gp_laplace

    if mode == "gp":
        gp_laplace(a, d=2)
    else:
        cgp_gaussian(a, d=2)
