"""DuckDB SQL functions that privatize points and charge the session (DESIGN.md §5, STYLE.md §9).

``gp.duckdb.register(con, session)`` adds, on the connection ``con``:

``gp_privatize(user_id, x, y, rho)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus lattice Gaussian noise at ``rho`` (CGP, per m²): σ = (1 + √2·g)/√(2ρ)
    metres per coordinate, g = 2⁻¹⁰ m (secure-noise.md §8, §9.3; concentrated-geo-privacy.md §6.2
    with n = 1). The user's metric budget is charged ``rho`` for the row.
``gp_privatize_gp(user_id, x, y, eps)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus planar lattice Laplace noise at ``eps`` (GP, per m): mean radius
    2·(1 + √2·g)/ε metres (secure-noise.md §7, §9.3). Charged ``eps`` (ε²/2 on a CGP budget).

Per-user operations (issue 8; :mod:`gpframe.duckdb.knn`, ``sql/knn.sql``,
``sql/convex_hull.sql``, ``sql/nearest_users.sql``): the SQL functions ``gp_knn`` /
``gp_knn_gp`` and ``gp_convex_hull`` / ``gp_convex_hull_gp``, the table macros ``gp_knn_rows``,
``gp_convex_hulls`` (and ``_gp``), and the relation helpers :func:`knn`, :func:`convex_hulls`
and :func:`nearest_users`, which take a SQL string or a relation and return a relation.
KDE (:mod:`gpframe.duckdb.kde`, ``sql/kde.sql``): ``gp_kde_contribution`` for a few probes, and
the relation helper :func:`kde_raster` for a heatmap over a grid (one release per user, every
cell at once; the accessor's ``kde_raster`` parameters and charges).

``gp_privatize`` and ``gp_privatize_gp`` are SQL macros over Arrow UDFs
(``gp_privatize_udf_int`` / ``_str`` and ``gp_privatize_gp_udf_int`` / ``_str``); the macro
picks the UDF from the type of ``user_id``.
Integer ids (up to BIGINT) are charged as integers, anything else as ``CAST(user_id AS VARCHAR)``,
exactly as the Python accessor keys the same column.

Units: **metres of the CRS named at registration.** SQL has no CRS and the functions never
project, so name the projected metre CRS of x and y: ``register(con, session,
crs="EPSG:32724")``. Then a point outside that CRS's area of use (degrees passed as metres land
there) is refused before anything is charged, and the CRS's largest scale factor k_max over its
area of use divides the amount (ε/k_max, ρ/k_max²), exactly as the accessor's ``to_crs=`` does,
so the stated guarantee holds per ground metre. Feet, Web Mercator and geographic CRSs are
refused at registration. Without ``crs=`` the coordinates are taken as ground metres unchecked
(scale 1), except that a batch of 16 rows or more whose every x is within ±180 and y within ±90
is refused as degrees.

Projecting without DuckDB's spatial extension: project in Python before loading (pyproj
``Transformer.from_crs("EPSG:4326", "EPSG:32724", always_xy=True).transform(lon, lat)``, or
GeoPandas ``gdf.to_crs(...)``), or, with the extension, ``ST_Transform(ST_Point(lon, lat),
'EPSG:4326', 'EPSG:32724', always_xy := true)`` in SQL. The Python accessor (``df.geopriv``)
projects for you.

Semantics of a row (``per="point"`` in Python terms): each row is one point of its user, released
at the row's amount; a user with m rows in a query is charged m × amount. The same rows through
``df.geopriv(...).privatize(rho=..., per="point")`` are charged exactly the same.

NULL in any argument gives NULL and no charge. A user whose remaining budget cannot pay for the
batch's rows gets NULL for those rows and no charge.

Run a release once and keep it: ``con.sql("SELECT ... gp_privatize(...) ...")`` is a lazy
relation, and every display or fetch runs it again (fresh noise, charged again). Write it to a
table (``CREATE TABLE private AS SELECT ...``), fetch it once (``.df()``), or use
:func:`privatize`, which runs the query once and returns a relation over the fetched rows.

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
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.duckdb import udf as _u

# relation helpers of the per-user operations (issue 8): run a query once through the
# registered UDFs (nearest_users in Python) and hand back a DuckDBPyRelation
from gpframe.duckdb.kde import kde_raster
from gpframe.duckdb.knn import convex_hulls, knn, nearest_users
from gpframe.duckdb.privatize import privatize
from gpframe.duckdb.range_count import range_count
from gpframe.errors import InvalidInputError
from gpframe.queries import privatize as _pv

__all__ = [
    "Registration",
    "clip_user",
    "convex_hulls",
    "kde_raster",
    "knn",
    "nearest_users",
    "privatize",
    "range_count",
    "register",
]

#: the UDFs and macros register() creates: (udf name, macro name, mode, amount keyword); each
#: macro dispatches to an integer-id UDF or a text-id UDF, so user 7 is the same ledger user in
#: SQL and in Python (the ledger keeps 7 and "7" apart)
FUNCTIONS = (
    ("gp_privatize_udf", "gp_privatize", "cgp", "rho"),
    ("gp_privatize_gp_udf", "gp_privatize_gp", "gp", "eps"),
)
# the shared id dispatch types and the one process-wide ledger lock (gpframe.duckdb.udf),
# under their historical names
_INT_TYPES = _u.INT_TYPES
_LEDGER_LOCK = _u.LEDGER_LOCK

# con -> Registration, so that register() is idempotent per connection.
_REGISTRY = _u.Registry()


@dataclass
class Registration(_u.UdfRegistration):
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

    #: (mode, float amount) -> exact amount, validated and calibrated once
    _amounts: dict[tuple[str, float], Fraction] = field(default_factory=dict, repr=False)


def register(
    con: Any, session: Any, *, crs: Any = None, domain: Any = None, rng: Any = None
) -> Registration:
    """Register ``gp_privatize`` and ``gp_privatize_gp`` on ``con``, charging ``session``.

    Idempotent: calling it again on the same connection returns the same registration (and
    points it at ``session``, ``crs`` and ``rng`` if others are passed). UDFs are not stored in a
    database file, so register them in every process; the helper macros are ``TEMP`` for the
    same reason.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The connection to add the functions to.
    session : gpframe.Session
        The ledger the functions charge. It uses its own store connection, never ``con``.
    crs : str, int or pyproj.CRS, optional
        The projected metre CRS of every x / y the functions receive (e.g. ``"EPSG:32724"``, the
        data's UTM zone). SQL has no CRS, so name it here: coordinates outside its area of use
        (degrees passed as metres land there) are refused before anything is charged, and its
        largest scale factor k_max over that area divides the amount as the accessor's
        ``to_crs=`` does (ε/k_max, ρ/k_max²), so the guarantee holds per ground metre. Without
        it, x / y are taken as ground metres unchecked, except that a batch of 16 or more rows
        that all fit lon/lat ranges is refused as degrees (by ``gp_privatize``,
        ``gp_in_region`` and ``gp_knn``). Applies to ``gp_privatize`` / ``gp_privatize_gp``,
        ``gp_in_region``, ``gp_knn`` / ``gp_knn_gp``, ``gp_convex_hull`` /
        ``gp_convex_hull_gp``, ``gp_kde_contribution``, the table macros built on them and
        :func:`privatize`, :func:`range_count`, :func:`knn`, :func:`convex_hulls`,
        :func:`nearest_users` and :func:`kde_raster`; not to the grid functions
        (``gp_grid_release``, :func:`clip_user`), which take cells, not metres.
    domain : (lon_min, lat_min, lon_max, lat_max), optional
        A public box in degrees to use instead of the CRS's area of use (needed for a CRS that
        publishes none; a smaller box gives a k_max closer to 1).
    rng : BitSource or None
        Randomness source; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    Registration
    """
    import duckdb
    from duckdb.sqltypes import DOUBLE

    _u.check_session(session)
    rng = _u.checked_rng(rng)
    units = _u.units_for(crs, domain)
    reg = _u.reuse(_REGISTRY, con, session, rng, units)
    if reg is not None:
        _register_operations(con, session, rng, units)
        return reg
    reg = Registration(session=session, rng=rng, units=units)
    rtype = duckdb.struct_type({"x": DOUBLE, "y": DOUBLE})
    for _udf, macro, mode, param in FUNCTIONS:  # create_id_udfs names the pair f"{macro}_udf_*"
        _u.create_id_udfs(
            con, macro, lambda _id_type, mode=mode: _make_udf(reg, mode),
            f"x, y, {param}", f"CAST(x AS DOUBLE), CAST(y AS DOUBLE), CAST({param} AS DOUBLE)",
            [DOUBLE, DOUBLE, DOUBLE], rtype,
        )  # fmt: skip
    _REGISTRY.put(con, reg)
    _register_operations(con, session, rng, units)
    return reg


def _register_operations(con: Any, session: Any, rng: Any, units: Any) -> None:
    """Register the UDFs of the other operations (one module each; each is idempotent)."""
    # local imports: those modules once imported this one for its lock and id dispatch (now all
    # of them share gpframe.duckdb.udf); importing them here keeps the import graph acyclic
    from gpframe.duckdb.grid import register_grid
    from gpframe.duckdb.kde import register_kde
    from gpframe.duckdb.knn import register_knn
    from gpframe.duckdb.range_count import register_range_count

    register_range_count(con, session, crs=units, rng=rng)
    register_kde(con, session, crs=units, rng=rng)
    register_grid(con, session, rng=rng)
    register_knn(con, session, crs=units, rng=rng)


def clip_user(con: Any, table: str, **kwargs: Any) -> Any:
    """Run Clip-User on a DuckDB table and write its retention table (clip-user.md §7-§8).

    Parameters and examples: :func:`gpframe.duckdb.grid.clip_user`; ``sql/grid_stats.sql``
    then computes the clipped per-cell sums in SQL and releases them with noise.
    """
    from gpframe.duckdb.grid import clip_user as _clip_user

    return _clip_user(con, table, **kwargs)


# Arrow column helpers, shared with the other UDF modules
_np = _u.to_numpy
_nulls = _u.nulls
_factorize_ids = _u.factorize_ids


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
            # One batch at a time in the process: the work is Python under the GIL, so parallel
            # DuckDB threads only contend for it (measured: threads=4 on 2 cores ran ~1.4x
            # slower with the lock held only around reserve/charge); DuckDB's own scan and
            # conversion still run in parallel outside the lock.
            with _LEDGER_LOCK:
                codes, uniques = _factorize_ids(user_id, rows)
                released, xy = _privatize_batch(reg, mode, param, codes, uniques, xs, ys, amts)
            out_x[rows] = xy[:, 0]
            out_y[rows] = xy[:, 1]
            null[rows[~released]] = True
        mask = pa.array(null)
        fx = pa.array(out_x, mask=null)
        fy = pa.array(out_y, mask=null)
        return pa.StructArray.from_arrays([fx, fy], names=["x", "y"], mask=mask)

    udf.__name__ = f"gp_privatize_{mode}_udf"
    return udf


def _validate_batch(param: str, xy: np.ndarray, amts: np.ndarray, units: Any = None) -> None:
    bad = ~np.isfinite(amts) | (amts <= 0)
    if bad.any():
        raise InvalidInputError(
            f"gp_privatize: {param}={amts[bad][0]!r} in {int(bad.sum())} row(s) must be finite "
            f"and > 0. Nothing was charged for this batch."
        )
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
    _u.check_units(units, xy, "gp_privatize")


def _exact_amount(reg: Registration, mode: str, param: str, value: float) -> Fraction:
    """Return the exact amount of a float argument (validated and calibrated once per reg)."""
    key = (mode, value, reg.scale_max)
    a = reg._amounts.get(key)
    if a is None:
        a = _amount(value, param)
        _pv.check_amount(mode, "point", a)
        _preflight_one(mode, a, reg.scale_max)
        reg._amounts[key] = a
    return a


def _units_of_sum(ledger: Any, mode: str, parts: list[tuple[Fraction, np.ndarray]]) -> np.ndarray:
    """Ledger units of Σ_a cnt_a × charge_for(a) per user, rounded up once, exactly.

    With one amount this is ``ledger.units_for``; with several, the amounts are brought to a
    common denominator so that the sum is still rounded up only once (as a ``Fraction`` sum
    would be), in int64 when it cannot overflow, else in Python ints.
    """
    from gpframe.accounting.filters import charge_for

    if len(parts) == 1:
        ((a, cnt),) = parts
        units, big = ledger.units_for("metric", a, cnt, kind=mode)
    else:
        lu, fkind = ledger.units["metric"], ledger.kind["metric"]
        fr = [charge_for(fkind, mode, a) * lu.scale for a, _ in parts]
        den = math.lcm(*(f.denominator for f in fr))
        nums = [f.numerator * (den // f.denominator) for f in fr]
        top = max(int(c.max()) for _, c in parts)
        if top * sum(nums) + den < 2**62:
            tot = sum(c.astype(np.int64) * k for (_, c), k in zip(parts, nums, strict=True))
            units, big = (tot + (den - 1)) // den, np.zeros(tot.size, dtype=bool)
        else:
            tot = sum(c.astype(object) * k for (_, c), k in zip(parts, nums, strict=True))
            exact_u = -((-tot) // den)
            big = np.array([u > 2**63 - 1 for u in exact_u.tolist()], dtype=bool)
            units = np.array([min(u, 2**63 - 1) for u in exact_u.tolist()], dtype=np.int64)
    if big.any():
        raise InvalidInputError(
            "gp_privatize: a user's charge in this batch does not fit the ledger's units; use "
            "smaller amounts. Nothing was charged for this batch."
        )
    return np.asarray(units, dtype=np.int64)


def _privatize_batch(
    reg: Registration,
    mode: str,
    param: str,
    codes: np.ndarray,
    uniques: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    amts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate, reserve, draw and charge one Arrow batch; returns (released mask, noisy xy).

    The caller holds the process-wide lock. One reservation and one charge per batch, both in
    int64 ledger units computed once per distinct amount (no per-user ``Fraction``); the charge
    is durable before the batch's values are returned, and an error after the reservation
    charges the full allocation.
    """
    xy = np.column_stack([xs, ys])
    _validate_batch(param, xy, amts, reg.units)
    n_users = len(uniques)
    distinct = np.unique(amts)
    exact = [(float(f), _exact_amount(reg, mode, param, float(f))) for f in distinct]
    single = len(exact) == 1
    sels = [None] if single else [np.flatnonzero(amts == f) for f, _ in exact]
    cnts = [np.bincount(codes if sel is None else codes[sel], minlength=n_users) for sel in sels]
    from gpframe.ledger.charges import filter_kind

    session = reg.session
    filter_kind(session)  # a session without a metric budget: refuse before any write
    ledger = session.ledger
    alloc = _units_of_sum(ledger, mode, [(a, c) for (_, a), c in zip(exact, cnts, strict=True)])
    params = {param: [f for f, _ in exact[:16]], "rows": len(xs), "source": "duckdb"}
    noisy = np.full(xy.shape, np.nan)
    released = np.zeros(len(xs), dtype=bool)

    def work(admitted: np.ndarray) -> np.ndarray:
        nonlocal noisy, released
        charged: list[tuple[Fraction, np.ndarray]] = []
        for (_, a), sel, cnt in zip(exact, sels, cnts, strict=True):
            res = _pv.privatize_points(
                xy if sel is None else xy[sel],
                codes if sel is None else codes[sel],
                n_users,
                kind=mode,  # type: ignore[arg-type]
                amount=a,
                per="point",
                admitted=admitted,
                scale_max=reg.scale_max,
                rng=reg.rng,
                progress=False,
                bounds=False,
            )
            if sel is None:
                noisy, released = res.xy, res.released
            else:
                noisy[sel] = res.xy
                released[sel] = res.released
            # per point the mechanism's guarantee (<= a); one group with per="point"
            for _users, point_charge in res.charge_groups:
                charged.append((point_charge, np.where(admitted, cnt, 0)))
        actual = _units_of_sum(ledger, mode, charged) if charged else np.zeros(n_users, np.int64)
        return np.where(admitted, actual, 0)

    _u.charge_batch(
        session, np.asarray(uniques), alloc, work, query="gp_privatize", params=params,
        kind=None, units=True,
    )  # fmt: skip
    n_rel = int(released.sum())
    _u.tally(reg, n_rel, len(xs) - n_rel)
    return released, noisy


def _amount(value: float, param: str) -> Fraction:
    from gpframe.accounting.amounts import positive

    if not math.isfinite(value):
        raise InvalidInputError(
            f"gp_privatize: {param}={value!r} is not finite. Nothing was charged."
        )
    return positive(value, param)


def _preflight_one(mode: str, a: Fraction, scale_max: float = 1.0) -> None:
    # the wrapper's full parameter check (eps range of §9.4, calibration, largest noise
    # scale) on the amount the mechanism runs at (after the CRS's scale factor, as the
    # accessor): the calibration alone accepts eps below 2**-40, which planar_laplace then
    # refuses after reserve() has charged the user
    k = Fraction(scale_max)
    _pv.check_point_amount(mode, a / k if mode == "gp" else a / (k * k))
