"""DuckDB SQL function for range counting: ``gp_in_region``.

See ``docs/sql.md``; ``docs/operations/range_count.md``.

``register_range_count(con, session)`` adds, on the connection ``con``:

``gp_in_region(user_id, x, y, region_wkb, rho, rounds [, n_users := NULL]) -> BOOLEAN``
    The row's privatized in/out outcome of ``dist-elim`` (Algorithm 4 with h = the signed
    distance to the region's boundary, doubling split over ``rounds`` rounds, β = 0.05, then the
    Appendix B threshold shift for users still undecided; ``docs/operations/range_count.md``). The
    count is post-processing: ``SUM(gp_in_region(...)::INT)`` (local model: each user's outcome is
    released independently). The user's CGP budget is charged the parts of the rounds the row ran
    (``docs/operations/range_count.md``): a row decided at round r pays ρ·(2^r − 1)/(2^c − 1), an
    undecided one ρ.

    **Per row, not per user.** Each row is released and charged on its own, so
    ``SUM(gp_in_region(...)::INT)`` over a table of fixes counts *rows* (a user with 500 fixes
    is counted up to 500 times and pays 500 times). Give it one row per user (the user's
    component: e.g. ``arg_max(x, ts)`` per user, see ``sql/range_count.sql``), or call
    :func:`range_count`, which picks one point per user with the accessor's ``component=``
    rules and returns the count of users.

Noise: lattice Gaussian on the signed distance, σ_j = (1 + g)/√(2ρ_j) metres in round j, ρ_j the
round's part (``docs/noise.md``). Units: x, y and the region are **metres of one projected
CRS** (the function never projects; the region is WKB, e.g. ``ST_AsWKB(geom)`` or
``shapely.to_wkb``). NULL in any argument (but ``n_users``) gives NULL and no charge; a user whose
budget cannot pay for the batch's rows gets NULL and no charge.

``n_users`` is the n of the union bounds behind the elimination widths (β/(n·c) per test). Pass the
number of rows the query asks (e.g. ``(SELECT count(*) FROM t)``) so the outcome and the charges
do not depend on DuckDB's batching; NULL uses the admitted rows of each ≤ 2,048-row batch, which is
what the Python ``range_count`` uses for a table that fits one batch. With the same inputs, order,
rng and n, the charges equal those of ``df.geopriv(...).range_count(region, rho=..., rounds=...)``.

Charging follows :mod:`gpframe.duckdb`: one ``session.reserve`` and one ``charge`` per Arrow batch,
under the same process-wide lock, through the Session's own store; every evaluated row is charged
(over-charging on re-evaluation is allowed, under-charging never).

Examples
--------
>>> import duckdb, shapely, gpframe as gp
>>> from gpframe.ledger import Session
>>> con = duckdb.connect()
>>> session = Session(budget=gp.CGP(rho=1e-3))
>>> reg = register_range_count(con, session)
>>> reg is register_range_count(con, session)
True
>>> wkb = shapely.to_wkb(shapely.box(0, 0, 10_000, 10_000))
>>> q = "SELECT gp_in_region(7, 5000.0, 5000.0, $w, 1e-4, 10)"
>>> con.execute(q, {"w": wkb}).fetchall()                  # 5 km inside: decided early
[(True,)]
>>> bool(0 < session.spent().loc[7] < 1e-4)                # the saving stays in the budget
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

# the lock, the id dispatch, the registry, the Arrow helpers and the reserve/charge step are
# shared with every gpframe UDF (one lock: a Session must see one reserve/charge at a time)
from gpframe.duckdb import udf as _u
from gpframe.duckdb.preview import dry_helper, helper_on_exhausted
from gpframe.errors import InvalidInputError

__all__ = ["RangeRegistration", "range_count", "register_range_count"]

_UDF = "gp_in_region_udf"
_MACRO = "gp_in_region"
#: fixed public parameters of the SQL form (the Python API exposes them)
METHOD = "dist-elim"
SPLIT, BETA, _MAX_ROUNDS = _u.SPLIT, _u.BETA, _u.MAX_ROUNDS

_REGISTRY = _u.Registry()

_np, _nulls = _u.to_numpy, _u.nulls


@dataclass
class RangeRegistration(_u.UdfRegistration):
    """``gp_in_region`` on one connection, with counters for audits and tests.

    Attributes
    ----------
    session : gpframe.Session
        The session charged (the latest passed to :func:`register_range_count`).
    rows_drawn, rows_excluded, batches : int
        Rows that ran the elimination (all charged); non-NULL rows refused for lack of budget;
        Arrow batches that drew noise.
    """


def register_range_count(
    con: Any, session: Any, *, crs: Any = None, domain: Any = None, rng: Any = None
) -> RangeRegistration:
    """Register ``gp_in_region`` on ``con``, charging ``session`` (idempotent per connection).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    session : gpframe.Session
        Must have a CGP metric budget (the SQL form is the Gaussian ``dist-elim``).
    crs, domain
        The projected metre CRS of x, y and the region, as in :func:`gpframe.duckdb.register`:
        points outside its area of use (or ``domain``) are refused, and its k_max divides rho
        (ρ/k_max²) as the accessor's ``to_crs=`` does. Without it: unchecked metres, scale 1.
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    RangeRegistration
    """
    from duckdb.sqltypes import BIGINT, BLOB, BOOLEAN, DOUBLE, INTEGER

    def create(con: Any, reg: RangeRegistration) -> None:
        args = ("CAST(x AS DOUBLE), CAST(y AS DOUBLE), CAST(region_wkb AS BLOB), "
                "CAST(rho AS DOUBLE), CAST(rounds AS INTEGER), "
                "CAST(n_users AS BIGINT)")  # fmt: skip
        _u.create_id_udfs(
            con, _MACRO, lambda _ints: _make_udf(reg),
            "x, y, region_wkb, rho, rounds, n_users := NULL", args,
            [DOUBLE, DOUBLE, BLOB, DOUBLE, INTEGER, BIGINT], BOOLEAN,
        )  # fmt: skip

    return _REGISTRY.install(
        con, session, RangeRegistration, create, rng=rng, crs=crs, domain=domain
    )


def _make_udf(reg: RangeRegistration) -> Any:
    def udf(user_id: Any, x: Any, y: Any, wkb: Any, rho: Any, rounds: Any, n_users: Any) -> Any:
        import pyarrow as pa

        n = len(x)
        null = _nulls(user_id) | _nulls(x) | _nulls(y) | _nulls(wkb) | _nulls(rho) | _nulls(rounds)
        out = np.zeros(n, dtype=bool)
        if (~null).any():
            rows = np.flatnonzero(~null)
            nus = _u.union_sizes(n_users)
            wk = _distinct_wkb(wkb, rows)
            inside, done = _batch(
                reg, _u.factorize_ids(user_id, rows), _np(x, np.float64)[rows],
                _np(y, np.float64)[rows], wk, _np(rho, np.float64)[rows],
                _np(rounds, np.float64)[rows].astype(np.int64), nus[rows],
            )  # fmt: skip
            out[rows] = inside
            null[rows[~done]] = True
        return pa.array(out, mask=null, type=pa.bool_())

    udf.__name__ = "gp_in_region_udf"
    return udf


def _check_batch(
    xs: np.ndarray, ys: np.ndarray, rhos: np.ndarray, rounds: np.ndarray, units: Any = None
) -> dict[float, Fraction]:
    """Check a batch's arguments; return the exact amount of each distinct rho."""
    exact = _u.exact_amounts(rhos, "gp_in_region", "rho", "CGP, per m²")
    _u.check_rounds(rounds, "gp_in_region")
    _u.check_points(np.column_stack([xs, ys]), "gp_in_region", units)
    return exact


def _distinct_wkb(wkb: Any, rows: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """(code per row, distinct WKB values) of the non-NULL ``rows``: one ``bytes`` per value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    a = _u.arrow(wkb)
    if len(rows) != len(a):
        a = a.take(pa.array(rows, type=pa.int64()))
    enc = pc.dictionary_encode(a)
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, [bytes(w) for w in enc.dictionary.to_pylist()]


def _region(wkb: bytes, cache: dict[bytes, Any]) -> Any:
    import shapely

    from gpframe.queries.range_count import _check_region

    if wkb not in cache:
        try:
            geom = shapely.from_wkb(wkb)
        except Exception as exc:  # shapely raises GEOSException for bad WKB
            raise InvalidInputError(
                f"gp_in_region: region_wkb is not valid WKB ({exc}). Pass ST_AsWKB(geom) or "
                "shapely.to_wkb(polygon). Nothing was charged for this batch."
            ) from None
        from gpframe.queries.privatize import COORD_MAX_M

        xy = shapely.get_coordinates(geom)
        if xy.size and not (np.abs(xy) < COORD_MAX_M).all():  # NaN fails too
            # the signed distance overflowed inside the reservation (a RuntimeWarning)
            raise InvalidInputError(
                "gp_in_region: region_wkb has coordinates beyond ±2**40 m (or NaN); it must be "
                "in the metres of the points' projected CRS. Nothing was charged for this batch."
            )
        try:
            cache[wkb] = _check_region(geom, name="gp_in_region: region_wkb")
        except InvalidInputError as exc:
            raise InvalidInputError(f"{exc} (for this batch)") from None
    return cache[wkb]


def _check_region_units(units: Any, geom: Any, fname: str) -> None:
    """Refuse a region wholly outside the declared CRS's area of use (degrees given as metres)."""
    import shapely

    if units is None:
        return
    xy = shapely.get_coordinates(geom)
    if xy.size and _u.outside(units, xy).all():  # the shared footprint: under GEOS_LOCK
        raise InvalidInputError(
            f"{fname}: the region lies wholly outside the area of use of crs={units.label}: it "
            "must be in the metres of that CRS, like the points (degrees passed as metres land "
            "here). Project it first (shapely.ops.transform with pyproj, GeoSeries.to_crs, or "
            "DuckDB spatial's ST_Transform). Nothing was charged for this batch."
        )


def _batch(
    reg: RangeRegistration,
    users: tuple[np.ndarray, np.ndarray],
    xs: np.ndarray,
    ys: np.ndarray,
    wkbs: tuple[np.ndarray, list[bytes]],
    rhos: np.ndarray,
    rounds: np.ndarray,
    n_users: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate, reserve, eliminate and charge one batch; returns (inside, ran) per row."""
    from gpframe.queries.range_count import range_count_arrays

    exact = _check_batch(xs, ys, rhos, rounds, reg.units)
    cache: dict[bytes, Any] = {}
    wcodes, distinct = wkbs
    regions = [_region(w, cache) for w in distinct]  # one per distinct WKB value
    for geom in regions:
        _check_region_units(reg.units, geom, "gp_in_region")
    # rows that share (region, rho, rounds, n) run as one elimination
    gcode = _u.group_codes({"w": wcodes, "r": rhos, "c": rounds, "n": n_users})
    inside = np.zeros(len(xs), dtype=bool)
    scale = reg.scale_max

    def release(sel: np.ndarray, alloc: np.ndarray, unit: Fraction) -> Any:
        out = range_count_arrays(
            np.column_stack([xs[sel], ys[sel]]), np.arange(sel.size), regions[wcodes[sel[0]]],
            kind="cgp", amount=alloc, method=METHOD, rounds=int(rounds[sel[0]]),
            split=SPLIT, beta=BETA, unit=unit, scale_max=scale,
            n_union=_u.union_of(n_users[sel[0]]), rng=reg.rng,
        )  # fmt: skip
        inside[sel] = out.inside
        el = out.elimination  # the charges by value: each distinct value converted once
        return el.charge_codes, el.charge_table.tolist()

    params = {"rows": len(xs), "rho": [float(v) for v in np.unique(rhos)[:16]]}
    admitted = _u.elimination_batch(
        reg, "gp_in_region", METHOD, users, (rhos, exact), rounds, gcode, release,
        scale_max=scale, params=params, note=lambda i: {"n_union": _u.union_of(n_users[i])},
    )  # fmt: skip
    return inside, admitted


# ------------------------------------------------------------------------------ relation helper


def range_count(
    con: Any,
    query_or_relation: Any,
    region: Any,
    *,
    user: str,
    x: str,
    y: str,
    rho: float,
    rounds: int = 10,
    component: Any = None,
    reduce: str | None = None,
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Count the **users** inside ``region`` privately: one component (one point) per user.

    ``SUM(gp_in_region(...)::INT)`` over a table of fixes counts rows, each charged: a user
    with 500 fixes is counted up to 500 times and pays 500 times. This helper first picks each
    user's one point with the accessor's own rule (``component=`` / ``reduce=``, exactly as
    ``df.geopriv(...).range_count``), then runs ``gp_in_region`` once per selected user and
    region with ``n_users`` set to the number of selected users.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session, crs=...)`` ran.
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con``: one row per fix.
    region : shapely Polygon / MultiPolygon, WKB bytes, or a dict {name: polygon}
        In the metres of the registered CRS. A dict gives one row per region (each region is
        one query: a user is charged once per region).
    user, x, y : str
        Columns: user id and coordinates (metres of the registered CRS).
    rho : float
        CGP budget per user and region (ρ per m²), split over ``rounds`` (doubling split).
    rounds : int
        Elimination rounds, 1..64.
    component : None, (column, value), callable, "first", "last", First, Last
        Which row is each user's point (:func:`gpframe.queries.range_count.select_component`
        on the fetched rows): ``None`` needs one row per user (several rows are refused),
        ``("hour", 7)`` keeps the rows where a public column equals a value, ``"last"`` /
        ``"first"`` (or ``Last("ts", before=...)`` / ``First("ts", after=...)``) keep each
        user's last / first row by a time column. The rule must read public columns only.
    reduce : {"first", "last"}, optional
        Keep the first / last selected row (row order) of a user with several.
    on_exhausted : {"exclude", "raise"}, optional
        A user whose budget cannot pay: left out and charged nothing (``"exclude"``), or the
        whole query refused before anything is charged, naming them (``"raise"``: its query is
        planned read-only first). None: the ``register(..., on_exhausted=)`` setting.
    dry_run : bool
        Return a :class:`~gpframe.results.Preview` instead (``docs/ledger.md``, "Previewing a
        query"): the helper's query planned as by ``gp.duckdb.preview``, nothing drawn,
        charged or written.

    Returns
    -------
    duckdb.DuckDBPyRelation
        One row per region: ``region`` (the dict key, or NULL), ``count`` (users whose released
        outcome is "inside"; post-processing), ``users`` (users asked) and ``excluded`` (users
        whose budget could not pay: not counted, not charged). The relation holds the fetched
        result: reading it again charges nothing.

    Examples
    --------
    >>> import duckdb, shapely, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1.0))
    >>> _ = gp.duckdb.register(con, session, crs="EPSG:32724")
    >>> from gpframe.queries.range_count import Last
    >>> q = ("SELECT * FROM (VALUES (1, 1, 5e5, 88e5), (1, 2, 5e5, 88e5), (2, 1, 6e5, 88e5)) "
    ...      "t(u, ts, x, y)")
    >>> box = shapely.box(4.9e5, 87.9e5, 5.1e5, 88.1e5)      # user 1's point, not user 2's
    >>> rel = gp.duckdb.range_count(con, q, box, user="u", x="x", y="y", rho=0.1,
    ...                             component=Last("ts"))
    >>> rel.fetchall()                                       # users, not rows: 3 rows, 2 users
    [(None, 1, 2, 0)]
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(range_count, locals(), "range_count")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(range_count, locals(), "gp.duckdb.range_count")
    import pandas as pd
    import pyarrow as pa
    import shapely

    from gpframe.duckdb.relations import check_input, frame_points, kind_amount, source
    from gpframe.queries.range_count import select_component

    fname = "gp.duckdb.range_count"
    reg = _REGISTRY.require(con, fname)
    regions = region if isinstance(region, dict) else {None: region}
    if not regions:
        raise InvalidInputError(f"{fname}: region is an empty dict. Nothing was charged.")
    wkbs: dict[Any, bytes] = {}
    for name, geom in regions.items():
        g = geom
        if isinstance(g, (bytes, bytearray, memoryview)):
            try:
                g = shapely.from_wkb(bytes(g))
            except Exception as exc:  # shapely raises GEOSException for bad WKB
                raise InvalidInputError(
                    f"{fname}: region {name!r} is not valid WKB ({exc}). Nothing was charged."
                ) from None
        if not isinstance(g, shapely.Geometry):
            raise InvalidInputError(
                f"{fname}: region {name!r} must be a shapely polygon, WKB bytes or a dict of "
                f"them, got {type(geom).__name__}. Nothing was charged."
            )
        # the UDF's own region checks, before anything runs
        _check_region_units(reg.units, _region(shapely.to_wkb(g), {}), fname)
        wkbs[name] = shapely.to_wkb(g)
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)):
        raise InvalidInputError(f"{fname}: rounds={rounds!r} must be an int. Nothing was charged.")
    if not 1 <= int(rounds) <= _MAX_ROUNDS:
        raise InvalidInputError(
            f"{fname}: rounds={rounds!r} must be in 1..{_MAX_ROUNDS}. Nothing was charged."
        )
    if rho is None:  # the SQL form is the Gaussian dist-elim: no eps=
        raise InvalidInputError(f"{fname}: pass rho= (CGP, per m²). Nothing was charged.")
    _, _, rho = kind_amount(reg.session, rho, None, fname)  # the accessor's check
    rel = source(con, query_or_relation, fname)
    names = {"user": user, "x": x, "y": y}
    check_input(rel, fname, names, rows=False)  # the rows: as fetched, one run of the query
    # the rows stay in this process: the rule reads public columns and row order only
    frame = rel.df()
    frame_points(frame, fname, names)
    pos = select_component(
        frame, frame[user].to_numpy(), component, reduce, operation=fname, skip=(user, x, y)
    )
    picked = frame.iloc[pos]
    n = len(picked)
    rows = []
    if n:
        # the selected users run as ONE batch of the UDF's own function (its checks, one
        # reservation and one charge per region): through gp_in_region they were one durable
        # write and ten sampler calls per 2,048-row vector. Keyed as the UDFs key them: the
        # Arrow type of the ids picks the integer or the text key path
        users = _u.factorize_ids(pa.Array.from_pandas(picked[user]))
        xs, ys = (picked[c].to_numpy(np.float64) for c in (x, y))
        for name, wkb in wkbs.items():
            inside, ran = _batch(
                reg, users, xs, ys, (np.zeros(n, dtype=np.int64), [wkb]),
                np.full(n, float(rho)), np.full(n, int(rounds), dtype=np.int64),
                np.full(n, n, dtype=np.int64),
            )  # fmt: skip
            rows.append((name, int(inside[ran].sum()), n, int(n - ran.sum())))
    else:
        rows = [(name, 0, 0, 0) for name in wkbs]
    out = pd.DataFrame(rows, columns=["region", "count", "users", "excluded"])
    return con.from_arrow(pa.Table.from_pandas(out, preserve_index=False))
