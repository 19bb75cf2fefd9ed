"""DuckDB SQL functions for k-PNN and the private convex hull.

See ``docs/sql.md``; ``docs/operations/knn.md`` and ``docs/operations/convex_hull.md``.

``register_knn(con, session)`` (run by ``gp.duckdb.register``) adds, on the connection ``con``:

``gp_knn(user_id, xs, ys, px, py, k, rho) -> LIST<BIGINT>``
    The 1-based positions, in rank order, of the user's k private nearest neighbours of the public
    point (px, py) among the points (xs[i], ys[i]) of the user's aggregated lists (k-PNN,
    ``docs/operations/knn.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 3: k PNN calls
    at ε = √(2ρ/k) each, random scan order, γ₀ = 0). A list shorter than k gives all its positions
    ranked. ``list_extract(xs, pos)`` or an ``UNNEST`` joins them back to the rows. The user is
    charged ``rho`` for the row.
``gp_knn_gp(user_id, xs, ys, px, py, k, eps) -> LIST<BIGINT>``
    The same under GP (ε per m): k PNN calls at ε/k each. Charged ``eps`` on a GP budget, ε²/2
    on a CGP budget (as the Python ``eps=`` path).
``gp_convex_hull(user_id, xs, ys, rho [, beta := 0.1, k := 0]) -> VARCHAR``
    The user's private convex hull as hex-encoded WKB (PCH, ``docs/operations/convex_hull.md``:
    reference split, α = 0.92; ``beta`` the failure probability of the radius enlargement; ``k``
    anchors, 0 = from the noisy radius by the reference rule clamped to [16, 128]); a Point or
    LineString when the noisy anchors are degenerate. ``shapely.from_wkb`` and
    ``geopandas.GeoSeries.from_wkb`` read it as fetched, from ``fetchall()`` and ``.df()`` alike
    (text, because DuckDB hands every BLOB to pandas as a ``bytearray``, which neither accepts). In
    SQL, ``ST_GeomFromWKB(from_hex(hull))`` is a ``GEOMETRY``, which ``COPY ... TO 'x.parquet'``
    writes as GeoParquet. The user is charged ``rho`` for the row.
``gp_convex_hull_gp(user_id, xs, ys, eps [, beta := 0.1, k := 0]) -> VARCHAR``
    The same under GP (Laplace phases). Charged ``eps`` (ε²/2 on a CGP budget).

All four take **one row per user** holding the user's whole tuple, e.g.
``SELECT user_id, list(x ORDER BY ts) AS xs, list(y ORDER BY ts) AS ys FROM pings GROUP BY
user_id``: the tuple is the privacy unit (``docs/concepts.md``), so the function must see all of a
user's points at once. Units are **metres of one projected CRS** for the points and the query point
(the functions never project); the hull is in that CRS. With ``gp.duckdb.register(con, session,
crs=...)`` points outside that CRS's area of use are refused and its k_max divides the amount,
as the accessor's ``to_crs=`` does (:mod:`gpframe.duckdb`, "Units").

Table macros (SQL sugar, ``TEMP``): ``gp_knn_rows(q, px, py, k, rho [, user := 'user_id',
x := 'x', y := 'y'])`` (and ``gp_knn_rows_gp`` with ``eps``) returns the selected rows of the
query string ``q`` without its x and y columns, plus ``knn_rank``: the other columns of ``q`` are
its declaration of what is public, so select there only ids and columns that do not depend on the
locations (a timestamp, a row id), never one computed from them;
``gp_convex_hulls(q, rho [, beta := 0.1, k := 0, user := 'user_id', x := 'x', y := 'y'])`` (and
``gp_convex_hulls_gp``) returns the user column (under its own name) and ``hull``. ``user``, ``x``
and ``y`` name the columns of ``q`` (e.g. ``gp_knn_rows('SELECT * FROM pings', 5e5, 45e5, 3,
1e-4, user := 'vessel', x := 'x_m', y := 'y_m')``); a name that is not a column is a DuckDB
binder error naming it, before anything runs or is charged. The macros do the ``GROUP BY``.
Nearest users is multi-round (Algorithm 8), so it has no SQL function: use :func:`nearest_users`.

Relation helpers (re-exported as ``gp.duckdb.knn``, ``gp.duckdb.convex_hulls`` and
``gp.duckdb.nearest_users``): take a SQL string or a ``DuckDBPyRelation`` made on ``con``, check
the column names and rows before anything is charged, run the query **once**, and return a
relation over the fetched result (reading it again draws and charges nothing).

Semantics shared with :mod:`gpframe.duckdb` and :mod:`gpframe.duckdb.range_count`: NULL in any
argument
gives NULL and no charge; a user whose remaining budget cannot pay gets NULL and no charge; one
``session.reserve`` and one ``charge`` per Arrow batch under the process-wide ledger lock, through
the Session's own store; every evaluated row is charged (a user appearing in two rows is charged
twice; re-evaluation over-charges, never under-charges). The ``rho`` functions need a CGP session
(a Gaussian step is never admitted by a pure-GP filter); the ``_gp`` functions run on GP or CGP
sessions. Each row's amount is converted to the filter's units before the per-user sum. With the
same rows, order and seeded rng, the charges equal those of ``df.geopriv(...).knn(point, k,
rho=...)`` / ``eps=...`` and ``.convex_hull(rho=...)`` / ``eps=...``.

Examples
--------
>>> import duckdb, gpframe as gp
>>> from gpframe.ledger import Session
>>> con = duckdb.connect()
>>> session = Session(budget=gp.CGP(rho=1e-3))
>>> reg = register_knn(con, session)
>>> reg is register_knn(con, session)
True
>>> q = "SELECT gp_knn(7, [0.0, 50.0, 900.0], [0.0, 0.0, 0.0], 0.0, 0.0, 2, 1e-4)"
>>> sorted(con.execute(q).fetchone()[0]) in ([1, 2], [1, 3], [2, 3])
True
>>> float(session.spent().loc[7])
0.0001
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import probability
from gpframe.duckdb import udf as _u
from gpframe.duckdb.preview import dry_helper, helper_on_exhausted
from gpframe.duckdb.relations import (
    SRC,
    check_input,
    check_rel_units,
    kind_amount,
    literal,
    one_point_per_user,
    public_columns,
    query_point,
    quote,
    source,
    warn_dropped,
)
from gpframe.errors import InvalidInputError

__all__ = ["KnnRegistration", "convex_hulls", "knn", "nearest_users", "register_knn"]

_KNN, _HULL = "gp_knn", "gp_convex_hull"
_NOTHING = "Nothing was charged for this batch."
_NOT_CHARGED = "Nothing was charged."

_REGISTRY = _u.Registry()


@dataclass
class KnnRegistration(_u.UdfRegistration):
    """``gp_knn`` and ``gp_convex_hull`` on one connection, with counters for tests and audits.

    Attributes
    ----------
    session : gpframe.Session
        The session charged (the latest passed to :func:`register_knn`).
    rows_drawn, rows_excluded, batches : int
        Users answered (all charged); non-NULL rows refused for lack of budget; batches with draws.
    """


def register_knn(
    con: Any, session: Any, *, crs: Any = None, domain: Any = None, rng: Any = None
) -> KnnRegistration:
    """Register ``gp_knn`` and ``gp_convex_hull`` on ``con``, charging ``session`` (idempotent).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    session : gpframe.Session
        Must have a CGP metric budget.
    crs, domain
        The projected metre CRS of the coordinates, as in :func:`gpframe.duckdb.register`:
        ``gp_knn``, ``gp_convex_hull`` (and their ``_gp`` forms, the table macros and the
        relation helpers) refuse points and query points outside its area of use (or
        ``domain``) and divide the amount by its k_max as the accessor does.
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    KnnRegistration
    """
    import duckdb
    from duckdb.sqltypes import BIGINT, DOUBLE, VARCHAR

    def create(con: Any, reg: KnnRegistration) -> None:
        dlist = duckdb.list_type(DOUBLE)
        for kind, param in (("cgp", "rho"), ("gp", "eps")):
            sfx = "" if kind == "cgp" else "_gp"
            knn_udf, hull_udf = _make_knn_udf(reg, kind), _make_hull_udf(reg, kind)  # _int and _str
            _u.create_id_udfs(
                con, _KNN + sfx, lambda _ints, f=knn_udf: f, f"xs, ys, px, py, k, {param}",
                "CAST(xs AS DOUBLE[]), CAST(ys AS DOUBLE[]), CAST(px AS DOUBLE), "
                f"CAST(py AS DOUBLE), CAST(k AS BIGINT), CAST({param} AS DOUBLE)",
                [dlist, dlist, DOUBLE, DOUBLE, BIGINT, DOUBLE], duckdb.list_type(BIGINT),
            )  # fmt: skip
            # beta and k are optional named arguments (k := 0 picks k per user)
            _u.create_id_udfs(
                con, _HULL + sfx, lambda _ints, f=hull_udf: f,
                f"xs, ys, {param}, beta := 0.1, k := 0",
                f"CAST(xs AS DOUBLE[]), CAST(ys AS DOUBLE[]), CAST({param} AS DOUBLE), "
                "CAST(beta AS DOUBLE), CAST(k AS BIGINT)",
                [dlist, dlist, DOUBLE, DOUBLE, BIGINT], VARCHAR,
            )  # fmt: skip
            for sql in _table_macros(sfx, param):
                con.execute(sql)

    return _REGISTRY.install(con, session, KnnRegistration, create, rng=rng, crs=crs, domain=domain)


def _table_macros(sfx: str, param: str) -> list[str]:
    """Return the ``TEMP`` table macros ``gp_knn_rows{sfx}``, ``gp_convex_hulls{sfx}``.

    See ``docs/sql.md``.

    Both read a query string through ``query(q)`` and aggregate one row per user before calling
    the per-user UDF, so each user is charged once per call of the macro. The columns are named
    by the string parameters ``"user" := 'user_id'``, ``x := 'x'`` and ``y := 'y'``: each row is
    read as a struct and its fields picked with ``struct_extract`` (a missing column is a
    binder error naming it, raised before anything runs), and the output columns are chosen with
    ``COLUMNS(lambda c: ...)`` (exact names, never a regex).
    """
    cols = """"user" := 'user_id', x := 'x', y := 'y'"""
    # one row per user: the user's rows as a list of structs (all the query's columns)
    group = (
        'WITH __gp_t AS (SELECT struct_extract(__gp_s, "user") AS __gp_u, '
        "list(__gp_s) AS __gp_recs FROM query(q) __gp_s GROUP BY __gp_u)"
    )

    def coord(c: str) -> str:
        return f"list_transform(__gp_recs, lambda r: struct_extract(r, {c}))"

    knn = (
        f"CREATE OR REPLACE TEMP MACRO gp_knn_rows{sfx}(q, px, py, k, {param}, {cols}) AS TABLE "
        f"{group}, __gp_p AS (SELECT __gp_recs, "
        f"{_KNN}{sfx}(__gp_u, {coord('x')}, {coord('y')}, px, py, k, {param}) AS __gp_pos "
        "FROM __gp_t) "
        # k-PNN releases which rows were picked, never where they are: x and y stay out
        "SELECT COLUMNS(lambda c: c NOT IN (x, y)) FROM (SELECT UNNEST(list_transform(__gp_pos, "
        "lambda p, i: struct_insert(__gp_recs[p], knn_rank := i)), max_depth := 2) FROM __gp_p)"
    )
    hull = (
        f"CREATE OR REPLACE TEMP MACRO gp_convex_hulls{sfx}(q, {param}, beta := 0.1, k := 0, "
        f"{cols}) AS TABLE {group} "
        # the user column under its own name (first record's field), then the hull
        'SELECT COLUMNS(lambda c: c = "user"), __gp_hull AS hull FROM (SELECT '
        f"UNNEST(__gp_recs[1]), {_HULL}{sfx}(__gp_u, {coord('x')}, {coord('y')}, {param}, "
        "beta := beta, k := k) AS __gp_hull FROM __gp_t)"
    )
    return [knn, hull]


# --------------------------------------------------------------------------------- Arrow helpers

_arr, _np, _nulls, _objects = _u.arrow, _u.to_numpy, _u.nulls, _u.objects


def _lists(xs: Any, ys: Any, rows: np.ndarray, fname: str) -> tuple[np.ndarray, np.ndarray]:
    """(xy of the rows' points, concatenated; per-row lengths), validated."""
    xs, ys = _arr(xs), _arr(ys)
    ox = np.asarray(xs.offsets.to_numpy(), dtype=np.int64)
    oy = np.asarray(ys.offsets.to_numpy(), dtype=np.int64)
    lx, ly = np.diff(ox)[rows], np.diff(oy)[rows]
    if (lx != ly).any():
        raise InvalidInputError(
            f"{fname}: xs and ys of a row have different lengths ({int(lx[lx != ly][0])} vs "
            f"{int(ly[lx != ly][0])}); aggregate both in one GROUP BY. {_NOTHING}"
        )
    if (lx == 0).any():
        raise InvalidInputError(
            f"{fname}: a user's point list is empty; a user needs at least one point (filter "
            f"with WHERE len(xs) > 0). {_NOTHING}"
        )
    vx, vy = xs.values, ys.values
    # positions in each backing array of the answered rows' elements: xs and ys have their own
    # offsets (a NULL or skipped row elsewhere in the batch shifts one and not the other), so
    # ys must never be indexed with xs's offsets (that raised ArrowIndexError)
    idx = np.concatenate([np.arange(ox[r], ox[r + 1]) for r in rows.tolist()])
    idy = np.concatenate([np.arange(oy[r], oy[r + 1]) for r in rows.tolist()])
    if vx.null_count or vy.null_count:
        # only the answered rows' elements count: a NULL element in a NULL-out row is ignored;
        # one in an answered row is bad input, refused before the ledger is touched
        if _nulls(vx.take(idx)).any() or _nulls(vy.take(idy)).any():
            raise InvalidInputError(
                f"{fname}: a point list (xs or ys) holds NULL coordinates; aggregate with "
                f"list(x) FILTER (WHERE x IS NOT NULL AND y IS NOT NULL). {_NOTHING}"
            )
    ax = np.asarray(vx.to_numpy(zero_copy_only=False), dtype=np.float64)
    ay = np.asarray(vy.to_numpy(zero_copy_only=False), dtype=np.float64)
    return np.column_stack([ax[idx], ay[idy]]), lx


_PARAM = {"cgp": "rho", "gp": "eps"}
_UNIT = {"cgp": "CGP, per m²", "gp": "GP, per m"}


def _check_session(session: Any, fname: str, kind: str) -> str:
    """Return the filter kind; a CGP (rho) function refuses a pure-GP filter before any write."""
    from gpframe.ledger.charges import filter_kind

    fk = filter_kind(session)
    if kind == "cgp" and fk != "cgp":
        raise InvalidInputError(
            f"{fname} releases under CGP (rho=): the session's filters must be CGP (a Gaussian "
            f"step is never admitted by a pure-GP filter). Use {fname}_gp(..., eps) on GP "
            f"sessions. {_NOTHING}"
        )
    return fk


def _groups(key: dict[str, np.ndarray]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """(group code per row, the groups' key values): rows sharing every key column, in order."""
    import pandas as pd

    gcode, groups = pd.factorize(pd.MultiIndex.from_frame(pd.DataFrame(key)), sort=False)
    return np.asarray(gcode, dtype=np.int64), list(groups.tolist())


def _run(
    reg: KnnRegistration,
    fname: str,
    kind: str,
    users: np.ndarray,
    points: tuple[np.ndarray, np.ndarray],
    gcode: np.ndarray,
    amounts: list[Fraction],
    params: dict[str, Any],
    release: Callable[[int, np.ndarray, np.ndarray, np.ndarray], Any],
    note: Callable[[int], dict[str, Any]],
) -> list[Any]:
    """Answer one batch of per-user lists: reserve, release group by group, charge.

    The one runner of ``gp_knn`` and ``gp_convex_hull``. ``points`` are the rows' points
    (concatenated) and each row's count; the admitted rows of group ``g`` (rows sharing the
    public parameters) run as one call ``release(g, rows, pts, codes)`` over their users'
    points (``codes`` numbers the rows 0..), in batch order, so a one-group batch runs exactly
    as the Python path; it returns one value per row. Refused rows stay None.

    ``amounts`` are each row's amount in the mechanism's units (``kind``). Each is converted to
    the filter's units first (ε on a GP filter; ρ, or ε²/2 for a GP release, on a CGP filter:
    the charge of the Python ``eps=`` / ``rho=`` path), then summed per user: a user with several
    rows in the batch is reserved (and charged) the sum of their rows' charges.

    Inside ``gp.duckdb.preview`` each group's planned release is noted for the preview's error
    (:func:`gpframe.duckdb.udf.preview_note`): its admitted rows' point counts and the public
    parameters ``note(first row)`` gives.
    """
    from gpframe.accounting.filters import charge_for
    from gpframe.ledger.charges import ledger_keys

    xy, lens = points
    start = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=start[1:])
    result: list[Any] = [None] * lens.size
    codes, uniques = _u.factorize_objects(users)

    def work_and_charge(adm_u: np.ndarray) -> list[Fraction]:
        adm = np.flatnonzero(adm_u[codes])
        for g in range(int(gcode.max()) + 1) if adm.size else ():
            sel = adm[gcode[adm] == g]
            if sel.size == 0:
                continue
            pts = np.concatenate([xy[start[i] : start[i + 1]] for i in sel.tolist()])
            rows = np.repeat(np.arange(sel.size, dtype=np.int64), lens[sel])
            for i, v in zip(sel.tolist(), release(g, sel, pts, rows), strict=True):
                result[i] = v
        return [a if ok else Fraction(0) for a, ok in zip(alloc, adm_u.tolist(), strict=True)]

    session = reg.session  # read once: the allocation and the charge see the same session
    with _u.batch_lock(reg):
        fk = _check_session(session, fname, kind)
        conv = {a: charge_for(fk, kind, a) for a in set(amounts)}
        alloc = _u.per_user_sum(codes, len(uniques), [conv[a] for a in amounts])
        admitted = _u.charge_batch(
            session, ledger_keys(uniques), alloc, work_and_charge, query=fname,
            params={**params, _PARAM[kind]: sorted({float(a) for a in amounts})[:16],
                    "source": "duckdb", **_u.metric_params(reg)},
            kind=None, on_exhausted=reg.on_exhausted,
        )[codes]  # fmt: skip

        def planned(adm_u: np.ndarray) -> list[dict[str, Any]]:
            adm = adm_u[codes]
            sels = [np.flatnonzero((gcode == g) & adm) for g in range(int(gcode.max()) + 1)]
            return [{"n": lens[sel], **note(int(sel[0]))} for sel in sels if sel.size]

        _u.preview_note(session, fname, planned)
        _u.tally(reg, int(admitted.sum()), int((~admitted).sum()))
    return result


def _per_row(cols: tuple[Any, ...], batch: Any, typ: Any) -> Any:
    """Answer one Arrow batch of a list-valued UDF.

    Rows with a NULL argument give NULL and draw nothing (``docs/sql.md``); ``batch(rows)`` answers
    the others, in order.
    """
    import pyarrow as pa

    null = np.zeros(len(cols[0]), dtype=bool)
    for c in cols:
        null |= _nulls(c)
    out: list[Any] = [None] * null.size
    rows = np.flatnonzero(~null)
    if rows.size:
        for r, v in zip(rows.tolist(), batch(rows), strict=True):
            out[r] = v
    return pa.array(out, type=typ)


# --------------------------------------------------------------------------------------- gp_knn


def _make_knn_udf(reg: KnnRegistration, kind: str) -> Any:
    fname = _KNN if kind == "cgp" else _KNN + "_gp"

    def udf(user_id: Any, xs: Any, ys: Any, px: Any, py: Any, k: Any, amount: Any) -> Any:
        import pyarrow as pa

        def batch(rows: np.ndarray) -> list[Any]:
            return _knn_batch(
                reg, fname, kind, _u.user_objects(user_id, rows), xs, ys, rows,
                _np(px, np.float64)[rows], _np(py, np.float64)[rows], _np(k, np.float64)[rows],
                _np(amount, np.float64)[rows],
            )  # fmt: skip

        cols = (user_id, xs, ys, px, py, k, amount)
        return _per_row(cols, batch, pa.list_(pa.int64()))

    udf.__name__ = f"{fname}_udf"
    return udf


def _knn_batch(
    reg: KnnRegistration,
    fname: str,
    kind: str,
    users: np.ndarray,
    xs: Any,
    ys: Any,
    rows: np.ndarray,
    px: np.ndarray,
    py: np.ndarray,
    ks: np.ndarray,
    amts: np.ndarray,
) -> list[Any]:
    from gpframe.queries import knn as _k

    xy, lens = _lists(xs, ys, rows, fname)
    if not (np.isfinite(px).all() and np.isfinite(py).all()):
        raise InvalidInputError(f"{fname}: the query point (px, py) must be finite. {_NOTHING}")
    _u.check_points(xy, fname, reg.units, "xs/ys")
    _u.check_units(reg.units, np.column_stack([px, py]), fname, "px/py")
    scale = Fraction(reg.scale_max)
    if (ks < 1).any() or (ks != np.floor(ks)).any():
        raise InvalidInputError(f"{fname}: k={float(ks[ks < 1][0] if (ks < 1).any() else ks[0])!r} "
                                f"must be an integer >= 1. {_NOTHING}")  # fmt: skip
    exact = _u.exact_amounts(amts, fname, _PARAM[kind], _UNIT[kind])
    ks = ks.astype(np.int64)
    # calibrate every (amount, k) before the ledger is touched (bad amounts charge nothing)
    for f, kk, m in zip(amts.tolist(), ks.tolist(), lens.tolist(), strict=True):
        _k.pnn_calibration(_k.call_eps(kind, exact[f], min(int(kk), int(m)), scale))
    _k._check_extent(xy, np.column_stack([px, py]))
    # rows sharing (point, k, amount) run as one k-PNN over several users
    gcode, _ = _groups({"x": px, "y": py, "k": ks, "a": amts})

    def release(_g: int, sel: np.ndarray, pts: np.ndarray, codes: np.ndarray) -> list[Any]:
        i0 = int(sel[0])
        out = _k.knn_indices(pts, codes, (px[i0], py[i0]), int(ks[i0]), kind=kind,
                             amount=exact[float(amts[i0])], scale_max=scale,
                             rng=reg.rng)  # fmt: skip
        off = np.zeros(sel.size, dtype=np.int64)
        np.cumsum(lens[sel][:-1], out=off[1:])
        return [(out.rows[j] - off[j] + 1).tolist() for j in range(sel.size)]  # 1-based

    amounts = [exact[f] for f in amts.tolist()]
    params = {"rows": int(rows.size), "k": sorted({int(v) for v in ks.tolist()})[:16]}

    def note(i: int) -> dict[str, Any]:  # the public parameters of the row's group
        return {"kind": kind, "amount": exact[float(amts[i])], "k": int(ks[i]),
                "scale_max": scale}  # fmt: skip

    return _run(reg, fname, kind, users, (xy, lens), gcode, amounts, params, release, note)


# ------------------------------------------------------------------------------ gp_convex_hull


def _make_hull_udf(reg: KnnRegistration, kind: str) -> Any:
    fname = _HULL if kind == "cgp" else _HULL + "_gp"

    def udf(user_id: Any, xs: Any, ys: Any, amount: Any, beta: Any, k: Any) -> Any:
        import pyarrow as pa

        def batch(rows: np.ndarray) -> list[Any]:
            return _hull_batch(
                reg, fname, kind, _u.user_objects(user_id, rows), xs, ys, rows,
                _np(amount, np.float64)[rows], _np(beta, np.float64)[rows],
                _np(k, np.float64)[rows],
            )  # fmt: skip

        return _per_row((user_id, xs, ys, amount, beta, k), batch, pa.string())

    udf.__name__ = f"{fname}_udf"
    return udf


def _hull_batch(
    reg: KnnRegistration,
    fname: str,
    kind: str,
    users: np.ndarray,
    xs: Any,
    ys: Any,
    rows: np.ndarray,
    amts: np.ndarray,
    betas: np.ndarray,
    ks: np.ndarray,
) -> list[Any]:
    import shapely

    from gpframe.queries import hull as _h

    xy, lens = _lists(xs, ys, rows, fname)
    units, scale = reg.units, Fraction(reg.scale_max)  # one registration state per batch
    # without crs= the metres are taken as given (no degrees guess), as before
    _u.check_points(xy, fname, units, "xs/ys", guess=False)
    exact = _u.exact_amounts(amts, fname, _PARAM[kind], _UNIT[kind])
    bad = ~np.isfinite(betas) | (betas <= 0) | (betas >= 1)
    if bad.any():
        raise InvalidInputError(
            f"{fname}: beta={float(betas[bad][0])!r} must be a probability in (0, 1). {_NOTHING}"
        )
    bad = (ks < 0) | (ks != np.floor(ks))
    if bad.any():
        raise InvalidInputError(
            f"{fname}: k={float(ks[bad][0])!r} must be 0 (k per user from the noisy radius, "
            f"docs/operations/convex_hull.md) or an integer >= 1. {_NOTHING}"
        )
    ks = ks.astype(np.int64)
    gcode, keys = _groups({"a": amts, "b": betas, "k": ks})
    groups = [(exact[float(a)], float(b), int(k) or None) for a, b, k in keys]
    # every check of PCH before the ledger is touched. The dry run on one dummy point covers
    # the centre and radius phases only, so the k-dependent ones (PNN calls and anchor
    # releases at the largest k / n) are calibrated on each group's own point counts: without
    # them rho=5e-324 was refused inside the reservation and the batch charged. The accessor's
    # preflight keeps the same rows refused in SQL as in Python.
    try:
        for g, (a, b, k) in enumerate(groups):
            n_g = lens[gcode == g]
            _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=a,
                             beta=b, k=k, admitted=np.zeros(1, bool),
                             scale_max=scale)  # fmt: skip
            _h.hull_preflight(kind, a, b, _h.ALPHA, k, 10.0, n_g, float(scale))  # every k phase
    except InvalidInputError as exc:  # name the SQL function (the checks are shared with Python)
        raise InvalidInputError(f"{fname} ({_PARAM[kind]}={float(a)!r}): {exc}") from None

    def release(g: int, _sel: np.ndarray, pts: np.ndarray, codes: np.ndarray) -> list[Any]:
        a, b, k = groups[g]
        out = _h.private_hulls(
            pts, codes, kind=kind, amount=a, beta=b, k=k, scale_max=scale, rng=reg.rng
        )
        # hex text, not a BLOB: DuckDB's .df() turns every BLOB (and GEOMETRY) into a
        # bytearray, which shapely.from_wkb and GeoSeries.from_wkb refuse
        return [str(w) for w in shapely.to_wkb(out.hulls, hex=True)]

    amounts = [exact[f] for f in amts.tolist()]

    def note(i: int) -> dict[str, Any]:  # the public parameters of the row's group
        a, b, k = groups[int(gcode[i])]
        return {"kind": kind, "amount": a, "beta": b, "k": k, "scale_max": scale}

    return _run(reg, fname, kind, users, (xy, lens), gcode, amounts, {"rows": int(rows.size)},
                release, note)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# relation helpers: gp.duckdb.knn / convex_hulls / nearest_users (docs/sql.md)


def _registration(con: Any, fname: str) -> KnnRegistration:
    return _REGISTRY.require(con, fname)


def knn(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    x: str,
    y: str,
    point: Any,
    k: int,
    rho: float | None = None,
    eps: float | None = None,
    order_by: str | None = None,
    public: Any = None,
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Each user's k private nearest rows to a public point, as a relation.

    See ``docs/operations/knn.md`` (k-PNN).

    Runs ``gp_knn`` (``rho=``) or ``gp_knn_gp`` (``eps=``) once per user over the input's rows
    grouped by ``user``, executes the query once, and hands back the result.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` ran (its session is charged).
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con``; one row per point.
    user, x, y : str
        Columns: user id, and coordinates in metres of one projected CRS (never projected here).
    point : (x, y) or shapely Point
        The public query point, same CRS.
    k : int
        Neighbours per user (a user with fewer rows gets all of them, ranked).
    rho, eps : float
        Exactly one: CGP ρ per m² (k PNN calls at ε = √(2ρ/k)) or GP ε per m (calls at ε/k).
    order_by : str, optional
        Column ordering each user's rows in the list the UDF sees (default: input order).
    public : list of str, optional
        Columns that do not depend on the locations (a row id, a timestamp), kept in the
        output to identify the selected rows. Default: none besides ``user``. ``x`` and ``y``
        cannot be public.
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
        One row per selected row: ``user``, the ``public`` columns and ``knn_rank`` (1 = first
        selected), sorted by user (first appearance) then rank. k-PNN releases which rows were
        selected, never their coordinates: x, y and every column not declared public are left
        out (a ``GpframeWarning`` names the dropped ones). Users refused for lack of budget are
        absent (and charged nothing). The relation holds the fetched result: reading it again
        draws and charges nothing.

    Notes
    -----
    Noise per PNN call: discrete Laplace of scale 3K'/ε_call (Z, W) and 6K'/ε_call (V), K' = 1 +
    g/r_min (``docs/noise.md``). Charge per user: ρ (or ε; ε²/2 on a CGP filter) once, as
    ``df.geopriv(...).knn(point, k, rho=...)`` on the same rows.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT * FROM (VALUES (1, 0.0, 0.0), (1, 50.0, 0.0), (2, 9.0, 0.0)) t(boat, x, y)"
    >>> rel = knn(con, q, user="boat", x="x", y="y", point=(0.0, 0.0), k=2, rho=1e-4)
    >>> rel.columns, len(rel.fetchall()), session.spent().tolist()
    (['boat', 'knn_rank'], 3, [0.0001, 0.0001])
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(knn, locals(), "knn")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(knn, locals(), "gp.duckdb.knn")
    from gpframe.queries import knn as _k

    fname = "gp.duckdb.knn"
    reg = _registration(con, fname)
    kind, amount, f_amt = kind_amount(reg.session, rho, eps, fname)
    kk = _k.check_k(k)
    px, py = query_point(point, fname)
    rel = source(con, query_or_relation, fname)
    cols = {"user": user, "x": x, "y": y, "order_by": order_by}
    u, qx, qy = check_input(rel, fname, cols, reserved=("knn_rank",))
    keep = public_columns(rel, public, user, (x, y), fname, reserved=("knn_rank",))
    if not max(abs(px), abs(py)) < _k.COORD_MAX_M:
        raise InvalidInputError(f"{fname}: point is beyond ±2**40 m. {_NOT_CHARGED}")
    check_rel_units(reg, rel, qx, qy, fname)
    if reg.units is not None:
        _u.check_units(reg.units, np.array([[px, py]]), fname, "query")
    # calibrate every per-user k before anything runs (the UDF checks again per batch)
    sizes = rel.query(
        SRC, f"SELECT DISTINCT least(count(*), {kk}) FROM {SRC} GROUP BY {u}"
    ).fetchall()
    for (n_k,) in sizes:
        _k.pnn_calibration(_k.call_eps(kind, amount, int(n_k), Fraction(reg.scale_max)))
    ob = f"{quote(order_by, 'order_by')}, " if order_by is not None else ""
    fx, fy = (f"'{c.replace(chr(39), chr(39) * 2)}'" for c in (x, y))
    fn = _KNN if kind == "cgp" else _KNN + "_gp"
    sql = f"""
        WITH __gp_s AS MATERIALIZED (SELECT *, row_number() OVER () AS __gp_row FROM {SRC}),
        __gp_t AS (
            SELECT {u} AS __gp_u, min(__gp_row) AS __gp_first,
                   list(__gp_s ORDER BY {ob}__gp_row) AS __gp_recs
            FROM __gp_s GROUP BY {u} ORDER BY __gp_first),
        __gp_p AS (
            SELECT __gp_first, __gp_recs, {fn}(__gp_u,
                list_transform(__gp_recs, lambda r: CAST(struct_extract(r, {fx}) AS DOUBLE)),
                list_transform(__gp_recs, lambda r: CAST(struct_extract(r, {fy}) AS DOUBLE)),
                {literal(px)}, {literal(py)}, {kk}, {literal(f_amt)}) AS __gp_pos
            FROM __gp_t),
        __gp_o AS (
            SELECT __gp_first, UNNEST(list_transform(__gp_pos,
                lambda p, i: struct_insert(__gp_recs[p], knn_rank := i)), max_depth := 2)
            FROM __gp_p WHERE __gp_pos IS NOT NULL)
        SELECT {", ".join(quote(c, "public") for c in keep)}, knn_rank
        FROM __gp_o ORDER BY __gp_first, knn_rank
    """
    out = con.from_arrow(rel.query(SRC, sql).to_arrow_table())
    warn_dropped(rel, keep, (x, y), fname)
    return out


def convex_hulls(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    x: str,
    y: str,
    rho: float | None = None,
    eps: float | None = None,
    beta: float = 0.1,
    k: int | None = None,
    geometry: str = "wkb",
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """One private convex hull per user, as a relation.

    See ``docs/operations/convex_hull.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 4.

    Runs ``gp_convex_hull`` (``rho=``) or ``gp_convex_hull_gp`` (``eps=``) once per user over the
    input's rows grouped by ``user``, executes the query once, and hands back the result.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` ran (its session is charged).
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con``; one row per point.
    user, x, y : str
        Columns: user id, and coordinates in metres of one projected CRS (never projected here).
    rho, eps : float
        Exactly one: CGP ρ per m² (Gaussian phases) or GP ε per m (Laplace phases).
    beta : float
        Failure probability of the radius enlargement (default 0.1).
    k : int, optional
        Anchors per user; None picks k from the noisy radius (reference rule, clamped to
        [16, 128], ``docs/operations/convex_hull.md``).
    geometry : {"wkb", "wkt", "geometry"}
        Type of the ``hull`` column: hex-encoded WKB (VARCHAR, as ``gp_convex_hull`` returns
        it; ``shapely.from_wkb`` / ``GeoSeries.from_wkb`` read it from ``.df()`` and
        ``.fetchall()``), WKT (VARCHAR), or DuckDB's ``GEOMETRY`` (``COPY ... TO
        'hulls.parquet'`` writes GeoParquet; ``.to_arrow_table()`` is GeoArrow WKB, which
        ``geopandas.GeoDataFrame.from_arrow`` reads; note that ``.df()`` gives ``bytearray``).
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
        Columns ``user`` (named as the input column) and ``hull`` (same CRS as x/y; a Point or
        LineString when the noisy anchors are degenerate; NULL for a user refused for lack of
        budget, who was charged nothing), one row per user in order of first appearance. The
        relation holds the fetched result: reading it again draws and charges nothing.

    Notes
    -----
    Noise: as :func:`gpframe.queries.hull.private_hulls` (budget split ρ/20 centre and radius,
    0.92·ρ₁ PNN anchors, 0.08·ρ₁ anchor release). Charge per user: ρ (or ε; ε²/2 on a CGP
    filter) once, as ``df.geopriv(...).convex_hull(rho=...)`` on the same rows.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1e-2))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT i % 2 AS boat, (i * 37) % 900 AS x, (i * 91) % 700 AS y FROM range(60) t(i)"
    >>> rel = convex_hulls(con, q, user="boat", x="x", y="y", rho=1e-3, geometry="wkt")
    >>> rel.columns, rel.types, session.spent().tolist()
    (['boat', 'hull'], [BIGINT, VARCHAR], [0.001, 0.001])
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(convex_hulls, locals(), "convex_hulls")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(convex_hulls, locals(), "gp.duckdb.convex_hulls")
    import pyarrow as pa
    import shapely

    from gpframe.queries import hull as _h

    fname = "gp.duckdb.convex_hulls"
    reg = _registration(con, fname)
    kind, amount, f_amt = kind_amount(reg.session, rho, eps, fname)
    probability(beta)  # the one entry-point check of both faces
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise InvalidInputError(f"{fname}: k={k!r} must be None or an integer >= 1. {_NOT_CHARGED}")
    if geometry not in ("wkb", "wkt", "geometry"):
        raise InvalidInputError(
            f"{fname}: geometry={geometry!r} is not one of 'wkb', 'wkt', 'geometry'. {_NOT_CHARGED}"
        )
    rel = source(con, query_or_relation, fname)
    if user == "hull":
        raise InvalidInputError(
            f"{fname}: user='hull' clashes with the output column; rename it. {_NOT_CHARGED}"
        )
    u, qx, qy = check_input(rel, fname, {"user": user, "x": x, "y": y})
    check_rel_units(reg, rel, qx, qy, fname)
    scale = Fraction(reg.scale_max)
    # every check of PCH before anything runs (the UDF checks again per batch)
    _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=amount,
                     beta=float(beta), k=k, admitted=np.zeros(1, bool),
                     scale_max=scale)  # fmt: skip
    # ... including the k-dependent phases on the users' point counts: the UDF would refuse
    # them per batch, after earlier batches were charged
    sizes = rel.query(SRC, f"SELECT DISTINCT count(*) FROM {SRC} GROUP BY {u}").fetchall()
    counts = np.array([n for (n,) in sizes], dtype=np.int64)
    kk = None if k is None else int(k)
    _h.hull_preflight(kind, amount, float(beta), _h.ALPHA, kk, 10.0, counts, float(scale))
    fn = _HULL if kind == "cgp" else _HULL + "_gp"
    sql = f"""
        WITH __gp_s AS MATERIALIZED (
            SELECT {u} AS __gp_u, CAST({qx} AS DOUBLE) AS __gp_x, CAST({qy} AS DOUBLE) AS __gp_y,
                   row_number() OVER () AS __gp_row FROM {SRC})
        SELECT __gp_u AS {u}, {fn}(__gp_u, list(__gp_x ORDER BY __gp_row),
               list(__gp_y ORDER BY __gp_row), {literal(f_amt)}, beta := {literal(beta)},
               k := {int(k or 0)}) AS hull
        FROM __gp_s GROUP BY __gp_u ORDER BY min(__gp_row)
    """
    tbl = rel.query(SRC, sql).to_arrow_table()
    if geometry != "wkb":
        hulls = shapely.from_wkb(np.asarray(tbl.column("hull").to_pylist(), dtype=object))
        if geometry == "wkt":
            col, field = pa.array(shapely.to_wkt(hulls).tolist(), type=pa.string()), "hull"
        else:  # GeoArrow WKB: DuckDB reads the extension type as GEOMETRY
            col = pa.array(shapely.to_wkb(hulls).tolist(), type=pa.binary())
            field = pa.field(
                "hull",
                pa.binary(),
                metadata={
                    b"ARROW:extension:name": b"geoarrow.wkb",
                    b"ARROW:extension:metadata": b"{}",
                },
            )
        tbl = tbl.set_column(1, field, col)
    return con.from_arrow(tbl)


def nearest_users(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    x: str,
    y: str,
    point: Any,
    k: int,
    rho: float | None = None,
    eps: float | None = None,
    method: str = "dist-elim",
    rounds: int = 10,
    split: str = "doubling",
    beta: float = 0.1,
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Find the k users nearest to a public point, one point per user, as a relation (Alg. 8).

    See ``docs/operations/knn.md``, ``docs/operations/nearest_users.md`` and
    ``docs/operations/range_count.md`` (nearest users, interactive elimination, charges);
    Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 8, Alg. 5. Multi-round, so it runs in
    Python (``docs/sql.md``): the input is read once, the rounds run as
    :func:`gpframe.queries.nearest.nearest_users_arrays`, and the result comes back as a relation.
    There is no SQL function or table macro for it.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` ran (its session and rng).
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con`` with **one row per user** (pick
        it in SQL, e.g. ``SELECT boat, arg_max(x, ts) AS x, arg_max(y, ts) AS y ... GROUP BY
        boat``).
    user, x, y : str
        Columns: user id, and coordinates in metres of one projected CRS (never projected here).
    point : (x, y) or shapely Point
        The public query point, same CRS.
    k : int
        Users to return (at most the number of users).
    rho, eps : float
        Allocation per user: ``rho`` on a CGP session, ``eps`` on a GP session.
    method, rounds, split, beta
        As ``df.geopriv(...).nearest_users``: ``"pt"``, ``"dist"``, ``"pt-elim"`` or
        ``"dist-elim"``; c rounds of split π (``"doubling"`` or ``"even"``); β/2 eliminations,
        β/2 final selection.
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
        k rows: ``user`` (named as the input column; integer ids as BIGINT or UBIGINT, others
        as VARCHAR, as the SQL functions key them), ``nearest_rank`` (1 = nearest) and
        ``error_m`` (the distance error bound of every rank at confidence 1 − β; 0 when
        elimination isolated exactly k users).

    Notes
    -----
    Noise: round j releases ||x_i − q|| (``dist``; lattice Gaussian σ = (1 + g/r_min)/√(2ρ_j) or
    Laplace scale (1 + g/r_min)/ε_j) or x_i (``pt``) for the users still in play. Charge: the
    baselines the allocation; ``*-elim`` a_i·Σ_{j ≤ r_i} π_j for a user dropped at round r_i —
    the same charges as ``df.geopriv(...).nearest_users(...)`` on the same rows.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1e-2))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT * FROM (VALUES (1, 0.0), (2, 10.0), (3, 30000.0), (4, 60000.0)) t(boat, x)"
    >>> rel = nearest_users(con, f"SELECT boat, x, 0.0 AS y FROM ({q})", user="boat", x="x",
    ...                     y="y", point=(0.0, 0.0), k=2, rho=1e-3)
    >>> rel.columns, sorted(u for u, _r, _e in rel.fetchall())
    (['boat', 'nearest_rank', 'error_m'], [1, 2])
    >>> bool(session.spent().loc[3] < 1e-3)      # far users are dropped early and pay less
    True
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(nearest_users, locals(), "nearest_users")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(nearest_users, locals(), "gp.duckdb.nearest_users")
    import pyarrow as pa

    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.queries.elimination import check_method_parts, split_fractions
    from gpframe.queries.knn import check_k
    from gpframe.queries.nearest import (
        METHODS,
        nearest_users_arrays,
        refuse_if_fewer_can_pay,
        too_few_can_pay,
    )

    fname = "gp.duckdb.nearest_users"
    reg = _registration(con, fname)
    session = reg.session
    kind, amount, _ = kind_amount(session, rho, eps, fname, gp_on_cgp=False)
    if method not in METHODS:
        raise InvalidInputError(
            f"{fname}: method={method!r} is not one of {', '.join(map(repr, METHODS))}. "
            f"{_NOT_CHARGED}"
        )
    split_fractions(split, rounds)
    b = probability(beta)
    kk = check_k(k)
    q = np.array(query_point(point, fname))
    rel = source(con, query_or_relation, fname)
    if user in ("nearest_rank", "error_m"):
        raise InvalidInputError(
            f"{fname}: user={user!r} clashes with an output column; rename it. {_NOT_CHARGED}"
        )
    u, qx, qy = check_input(rel, fname, {"user": user, "x": x, "y": y})
    units = reg.units
    tbl, ucodes, ukeys, xy = one_point_per_user(rel, fname, (user, x, y), (u, qx, qy), units)
    users = _u.key_array(ukeys)[ucodes]
    if kk > users.size:
        raise InvalidInputError(f"{fname}: k={k!r} exceeds the {users.size} users. {_NOT_CHARGED}")
    if not np.abs(q).max() < 2.0**40:
        raise InvalidInputError(f"{fname}: point is beyond ±2**40 m. {_NOT_CHARGED}")
    if units is not None:  # the accessor's to_crs= check and scale; without crs= as given
        _u.check_units(units, q.reshape(1, 2), fname, "query")
    scale_max = 1 if units is None else units.scale_max
    unit = Fraction(1) / session.ledger.units["metric"].scale
    checks = dict(kind=kind, method=method, rounds=rounds, split=split, beta=b, unit=unit,
                  scale_max=scale_max)  # fmt: skip
    check_method_parts(amount, **checks)  # before reserving: nothing charged on refusal
    params = {"method": method, "rounds": rounds, "split": split, "beta": b, "k": kk,
              "point_m": q.tolist(), "source": "duckdb", **_u.metric_params(reg)}  # fmt: skip
    refuse_if_fewer_can_pay(session, ledger_keys(users), amount, kk, prefix=f"{fname}: ")

    def allocations(admitted: np.ndarray) -> np.ndarray:
        alloc = np.empty(users.size, dtype=object)
        alloc[:] = [amount if a else Fraction(0) for a in admitted.tolist()]
        return alloc

    def check(r: Any) -> None:  # no noise drawn yet: raising cancels the reservation
        adm = np.asarray(r.admitted, dtype=bool)
        if adm.sum() < kk:  # a writer spent budgets since the read-only check
            raise too_few_can_pay(int(adm.sum()), kk, prefix=f"{fname}: ")
        check_method_parts(allocations(adm), **checks)  # backstop on the allocations used

    def compute(r: Any) -> Charge[Any]:
        alloc = allocations(np.asarray(r.admitted, dtype=bool))
        out = nearest_users_arrays(xy, q, kk, kind=kind, amount=alloc, method=method,
                                   rounds=rounds, split=split, beta=b, unit=unit,
                                   scale_max=scale_max, rng=reg.rng)  # fmt: skip
        return Charge(out, out.charges)

    out = run(session, ledger_keys(users), amount, notion="metric", query="nearest_users",
              params=params, check=check, compute=compute, lock=_u.LEDGER_LOCK).value  # fmt: skip
    res = pa.table(
        {
            user: tbl.column("u").take(pa.array(np.asarray(out.selected, dtype=np.int64))),
            "nearest_rank": pa.array(np.arange(1, kk + 1, dtype=np.int64)),
            "error_m": pa.array(np.full(kk, float(out.error))),
        }
    )
    return con.from_arrow(res)
