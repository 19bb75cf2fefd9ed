"""DuckDB SQL functions for k-PNN and the private convex hull (STYLE.md §9; spec §7, §8).

``register_knn(con, session)`` adds, on the connection ``con``:

``gp_knn(user_id, xs, ys, px, py, k, rho) -> LIST<BIGINT>``
    The 1-based positions, in rank order, of the user's k private nearest neighbours of the public
    point (px, py) among the points (xs[i], ys[i]) of the user's aggregated lists (k-PNN,
    concentrated-geo-privacy.md §7.3: k PNN calls at ε = √(2ρ/k) each, random scan order,
    γ₀ = 0). A list shorter than k gives all its positions ranked. ``list_extract(xs, pos)`` or
    an ``UNNEST`` joins them back to the rows. The user is charged ``rho`` for the row.
``gp_convex_hull(user_id, xs, ys, rho) -> BLOB``
    The user's private convex hull as WKB (PCH, §8.1: reference split, α = 0.92, β = 0.1, k from
    the noisy radius by the reference rule clamped to [16, 128]); a Point or LineString when the
    noisy anchors are degenerate. ``ST_GeomFromWKB`` (spatial extension) or ``shapely.from_wkb``
    reads it. The user is charged ``rho`` for the row.

Both take **one row per user** holding the user's whole tuple, e.g.
``SELECT user_id, list(x ORDER BY ts) AS xs, list(y ORDER BY ts) AS ys FROM pings GROUP BY
user_id``: the tuple is the privacy unit (§0.2), so the function must see all of a user's points at
once. Units are **metres of one projected CRS** for the points and the query point (the functions
never project, P-U1..P-U4); the WKB is in that CRS.

Semantics shared with :mod:`gpframe.duckdb` and :mod:`gpframe.duckdb_range`: NULL in any argument
gives NULL and no charge; a user whose remaining budget cannot pay gets NULL and no charge; one
``session.reserve`` and one ``charge`` per Arrow batch under the process-wide ledger lock, through
the Session's own store; every evaluated row is charged (a user appearing in two rows is charged
twice; re-evaluation over-charges, never under-charges). CGP sessions only (Gaussian steps, and
a ρ amount); use the Python API for GP. With the same rows, order and seeded rng, the charges
equal those of ``df.geopriv(...).knn(point, k, rho=...)`` and ``.convex_hull(rho=...)``.

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

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe import _duckdb_udf as _u
from gpframe.errors import InvalidInputError

__all__ = ["KnnRegistration", "register_knn"]

_KNN, _HULL = "gp_knn", "gp_convex_hull"
_NOTHING = "Nothing was charged for this batch."

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


def register_knn(con: Any, session: Any, *, rng: Any = None) -> KnnRegistration:
    """Register ``gp_knn`` and ``gp_convex_hull`` on ``con``, charging ``session`` (idempotent).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    session : gpframe.Session
        Must have a CGP metric budget.
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    KnnRegistration
    """
    import duckdb
    from duckdb.sqltypes import BIGINT, BLOB, DOUBLE

    _u.check_session(session)
    rng = _u.checked_rng(rng)
    reg = _u.reuse(_REGISTRY, con, session, rng)
    if reg is not None:
        return reg
    reg = KnnRegistration(session=session, rng=rng)
    dlist = duckdb.list_type(DOUBLE)
    knn_udf, hull_udf = _make_knn_udf(reg), _make_hull_udf(reg)  # one function for _int and _str
    _u.create_id_udfs(
        con, _KNN, lambda _ints: knn_udf, "xs, ys, px, py, k, rho",
        "CAST(xs AS DOUBLE[]), CAST(ys AS DOUBLE[]), CAST(px AS DOUBLE), CAST(py AS DOUBLE), "
        "CAST(k AS BIGINT), CAST(rho AS DOUBLE)",
        [dlist, dlist, DOUBLE, DOUBLE, BIGINT, DOUBLE], duckdb.list_type(BIGINT),
    )  # fmt: skip
    _u.create_id_udfs(
        con, _HULL, lambda _ints: hull_udf, "xs, ys, rho",
        "CAST(xs AS DOUBLE[]), CAST(ys AS DOUBLE[]), CAST(rho AS DOUBLE)",
        [dlist, dlist, DOUBLE], BLOB,
    )  # fmt: skip
    _REGISTRY.put(con, reg)
    return reg


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
    if vx.null_count or vy.null_count:
        # checked over the whole backing arrays: a NULL coordinate anywhere in the batch
        idx = np.concatenate([np.arange(ox[r], ox[r + 1]) for r in rows.tolist()])
        if _nulls(vx.take(idx)).any() or _nulls(vy.take(idx)).any():
            raise InvalidInputError(
                f"{fname}: a point list holds NULL coordinates; aggregate with "
                f"list(x) FILTER (WHERE x IS NOT NULL AND y IS NOT NULL). {_NOTHING}"
            )
    ax = np.asarray(vx.to_numpy(zero_copy_only=False), dtype=np.float64)
    ay = np.asarray(vy.to_numpy(zero_copy_only=False), dtype=np.float64)
    idx = np.concatenate([np.arange(ox[r], ox[r + 1]) for r in rows.tolist()])
    idy = np.concatenate([np.arange(oy[r], oy[r + 1]) for r in rows.tolist()])
    xy = np.column_stack([ax[idx], ay[idy]])
    if not np.isfinite(xy).all():
        raise InvalidInputError(
            f"{fname}: a coordinate is NaN or infinite; filter with isfinite(x). {_NOTHING}"
        )
    from gpframe.queries.knn import COORD_MAX_M

    if (np.abs(xy) >= COORD_MAX_M).any():
        raise InvalidInputError(
            f"{fname}: a coordinate is beyond ±2**40 m; xs and ys must be metres of a projected "
            f"CRS. {_NOTHING}"
        )
    return xy, lx


def _rho(rhos: np.ndarray, fname: str) -> dict[float, Fraction]:
    from gpframe.accounting.amounts import positive

    bad = ~np.isfinite(rhos) | (rhos <= 0)
    if bad.any():
        raise InvalidInputError(
            f"{fname}: rho={rhos[bad][0]!r} must be finite and > 0 (CGP, per m²). {_NOTHING}"
        )
    return {f: positive(f, "rho") for f in np.unique(rhos).tolist()}


def _check_session(session: Any, fname: str) -> None:
    from gpframe.accessor import filter_kind

    if filter_kind(session) != "cgp":
        raise InvalidInputError(
            f"{fname} releases under CGP (rho=): the session's filters must be CGP (a Gaussian "
            f"step is never admitted by a pure-GP filter). Use the Python API with eps= for GP "
            f"sessions. {_NOTHING}"
        )


def _run(
    reg: KnnRegistration,
    fname: str,
    users: np.ndarray,
    amounts: list[Fraction],
    params: dict[str, Any],
    work: Any,
) -> np.ndarray:
    """Reserve each row's user, run ``work(admitted_rows)``, charge; returns admitted per row.

    A user with several rows in the batch is reserved (and charged) the sum of their amounts.
    """
    from gpframe.accessor import ledger_keys

    codes, uniques = _u.factorize_objects(users)
    alloc = _u.per_user_sum(codes, len(uniques), amounts)

    def work_and_charge(adm_u: np.ndarray) -> list[Fraction]:
        admitted = adm_u[codes]
        if admitted.any():
            work(np.flatnonzero(admitted))
        return [a if ok else Fraction(0) for a, ok in zip(alloc, adm_u.tolist(), strict=True)]

    with _u.LEDGER_LOCK:
        session = reg.session
        _check_session(session, fname)
        admitted = _u.charge_batch(
            session, ledger_keys(uniques), alloc, work_and_charge, query=fname,
            params={**params, "source": "duckdb"}, kind="cgp",
        )[codes]  # fmt: skip
        _u.tally(reg, int(admitted.sum()), int((~admitted).sum()))
    return admitted


# --------------------------------------------------------------------------------------- gp_knn


def _make_knn_udf(reg: KnnRegistration) -> Any:
    def udf(user_id: Any, xs: Any, ys: Any, px: Any, py: Any, k: Any, rho: Any) -> Any:
        import pyarrow as pa

        n = len(user_id)
        null = _nulls(user_id) | _nulls(xs) | _nulls(ys) | _nulls(px) | _nulls(py)
        null |= _nulls(k) | _nulls(rho)
        out: list[Any] = [None] * n
        rows = np.flatnonzero(~null)
        if rows.size:
            res = _knn_batch(
                reg, _objects(user_id)[rows], xs, ys, rows, _np(px, np.float64)[rows],
                _np(py, np.float64)[rows], _np(k, np.float64)[rows], _np(rho, np.float64)[rows],
            )  # fmt: skip
            for i, r in enumerate(rows.tolist()):
                out[r] = res[i]
        return pa.array(out, type=pa.list_(pa.int64()))

    udf.__name__ = "gp_knn_udf"
    return udf


def _knn_batch(
    reg: KnnRegistration,
    users: np.ndarray,
    xs: Any,
    ys: Any,
    rows: np.ndarray,
    px: np.ndarray,
    py: np.ndarray,
    ks: np.ndarray,
    rhos: np.ndarray,
) -> list[Any]:
    import pandas as pd

    from gpframe.queries import knn as _k

    xy, lens = _lists(xs, ys, rows, _KNN)
    if not (np.isfinite(px).all() and np.isfinite(py).all()):
        raise InvalidInputError(f"{_KNN}: the query point (px, py) must be finite. {_NOTHING}")
    if (ks < 1).any() or (ks != np.floor(ks)).any():
        raise InvalidInputError(f"{_KNN}: k={ks[ks < 1][0] if (ks < 1).any() else ks[0]!r} must "
                                f"be an integer >= 1. {_NOTHING}")  # fmt: skip
    exact_rho = _rho(rhos, _KNN)
    ks = ks.astype(np.int64)
    # calibrate every (rho, k) before the ledger is touched (bad amounts charge nothing)
    for f, kk, m in zip(rhos.tolist(), ks.tolist(), lens.tolist(), strict=True):
        _k.pnn_calibration(_k.call_eps("cgp", exact_rho[f], min(int(kk), int(m)), Fraction(1)))
    _k._check_extent(xy, np.column_stack([px, py]))
    start = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lens, out=start[1:])
    result: list[Any] = [None] * rows.size
    # rows sharing (point, k, rho) run as one k-PNN over several users, in batch order
    key = pd.DataFrame({"x": px, "y": py, "k": ks, "r": rhos})
    gcode, _ = pd.factorize(pd.MultiIndex.from_frame(key), sort=False)

    def work(adm: np.ndarray) -> None:
        for g in range(int(gcode.max()) + 1):
            sel = adm[gcode[adm] == g]
            if sel.size == 0:
                continue
            pts = np.concatenate([xy[start[i] : start[i + 1]] for i in sel.tolist()])
            codes = np.repeat(np.arange(sel.size, dtype=np.int64), lens[sel])
            i0 = int(sel[0])
            out = _k.knn_indices(pts, codes, (px[i0], py[i0]), int(ks[i0]), kind="cgp",
                                 amount=exact_rho[float(rhos[i0])], rng=reg.rng)  # fmt: skip
            off = np.zeros(sel.size, dtype=np.int64)
            np.cumsum(lens[sel][:-1], out=off[1:])
            for j, i in enumerate(sel.tolist()):
                result[i] = (out.rows[j] - off[j] + 1).tolist()  # 1-based list positions

    amounts = [exact_rho[f] for f in rhos.tolist()]
    params = {"rows": int(rows.size), "k": sorted({int(v) for v in ks.tolist()})[:16]}
    _run(reg, _KNN, users, amounts, params, work)
    return result


# ------------------------------------------------------------------------------ gp_convex_hull


def _make_hull_udf(reg: KnnRegistration) -> Any:
    def udf(user_id: Any, xs: Any, ys: Any, rho: Any) -> Any:
        import pyarrow as pa

        n = len(user_id)
        null = _nulls(user_id) | _nulls(xs) | _nulls(ys) | _nulls(rho)
        out: list[Any] = [None] * n
        rows = np.flatnonzero(~null)
        if rows.size:
            res = _hull_batch(reg, _objects(user_id)[rows], xs, ys, rows,
                              _np(rho, np.float64)[rows])  # fmt: skip
            for i, r in enumerate(rows.tolist()):
                out[r] = res[i]
        return pa.array(out, type=pa.binary())

    udf.__name__ = "gp_convex_hull_udf"
    return udf


def _hull_batch(
    reg: KnnRegistration, users: np.ndarray, xs: Any, ys: Any, rows: np.ndarray, rhos: np.ndarray
) -> list[Any]:
    import shapely

    from gpframe.queries import hull as _h

    xy, lens = _lists(xs, ys, rows, _HULL)
    exact_rho = _rho(rhos, _HULL)
    for a in exact_rho.values():  # every check of PCH before the ledger is touched
        _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind="cgp", amount=a,
                         admitted=np.zeros(1, bool))  # fmt: skip
    start = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lens, out=start[1:])
    result: list[Any] = [None] * rows.size

    def work(adm: np.ndarray) -> None:
        for f, a in exact_rho.items():
            sel = adm[rhos[adm] == f]
            if sel.size == 0:
                continue
            pts = np.concatenate([xy[start[i] : start[i + 1]] for i in sel.tolist()])
            codes = np.repeat(np.arange(sel.size, dtype=np.int64), lens[sel])
            out = _h.private_hulls(pts, codes, kind="cgp", amount=a, rng=reg.rng)
            wkb = shapely.to_wkb(out.hulls)
            for j, i in enumerate(sel.tolist()):
                result[i] = bytes(wkb[j])

    amounts = [exact_rho[f] for f in rhos.tolist()]
    _run(reg, _HULL, users, amounts, {"rows": int(rows.size)}, work)
    return result
