"""DuckDB SQL function for private KDE: ``gp_kde_contribution``.

``docs/operations/kde.md`` and ``docs/sql.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026),
Alg. 7.

``register_kde(con, session)`` adds, on the connection ``con``:

``gp_kde_contribution(user_id, x, y, qx, qy, bandwidth_m, rho, rounds [, n_users := NULL])``
    A ``DOUBLE``: the row's privatized contribution exp(−d̂²/(2b²)) to the KDE at the query point
    (qx, qy), from ``pt-elim`` (Algorithm 7: Algorithm 4 with h = ||x − q||, ν = 3b, doubling split
    over ``rounds`` rounds, β = 0.05; ``docs/operations/kde.md``). A row eliminated as farther than
    ν contributes 0. The KDE is post-processing: ``AVG(gp_kde_contribution(...))``. The user's CGP
    budget is charged the parts of the rounds the row ran (``docs/operations/range_count.md``): a
    far row stopped at round r pays ρ·(2^r − 1)/(2^c − 1), a near one ρ. A user with several rows
    pays for each row.

Units: x, y, qx, qy are **metres of one projected CRS**; the function never projects. With
``register(con, session, crs=...)`` points outside that CRS's area of use are refused and its
k_max divides rho, as the accessor's ``to_crs=`` does (:mod:`gpframe.duckdb`, "Units"). NULL in any
argument (but ``n_users``) gives NULL and no charge; a user whose budget cannot pay gets NULL.
``n_users`` fixes the union bound of the elimination widths (pass ``(SELECT count(*) FROM t)``) so
outcomes and charges do not depend on DuckDB's batching. With the same inputs, order, rng and n,
the charges equal those of ``kde(bound, q, method="pt-elim", rounds=c, rho=...)`` in Python.

Charging follows :mod:`gpframe.duckdb` / :mod:`gpframe.duckdb.range_count`: one ``reserve`` and one
``charge`` per Arrow batch, under the shared process-wide lock, through the Session's own store;
every evaluated row is charged (over-charging on re-evaluation is allowed, under-charging never).

Examples
--------
>>> import duckdb, gpframe as gp
>>> from gpframe.ledger import Session
>>> con = duckdb.connect()
>>> session = Session(budget=gp.CGP(rho=1e-3))
>>> reg = register_kde(con, session)
>>> reg is register_kde(con, session)
True
>>> q = "SELECT gp_kde_contribution(7, 90000.0, 0.0, 0.0, 0.0, 500.0, 1e-4, 10)"
>>> con.execute(q).fetchall()                    # 90 km from q: eliminated, contributes 0
[(0.0,)]
>>> bool(0 < session.spent().loc[7] < 1e-4)      # after a few rounds: the rest stays
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.duckdb import udf as _u
from gpframe.duckdb.preview import dry_helper, helper_on_exhausted
from gpframe.errors import InvalidInputError

__all__ = ["KdeRegistration", "kde_raster", "register_kde"]

_UDF = "gp_kde_contribution_udf"
_MACRO = "gp_kde_contribution"
METHOD = "pt-elim"
SPLIT, BETA = _u.SPLIT, _u.BETA
_REGISTRY = _u.Registry()
_np, _nulls, _objects = _u.to_numpy, _u.nulls, _u.objects


@dataclass
class KdeRegistration(_u.UdfRegistration):
    """``gp_kde_contribution`` on one connection, with counters (rows drawn / excluded, batches)."""


def register_kde(
    con: Any, session: Any, *, crs: Any = None, domain: Any = None, rng: Any = None
) -> KdeRegistration:
    """Register ``gp_kde_contribution`` on ``con``, charging ``session``.

    Idempotent per connection.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    session : gpframe.Session
        Must have a CGP metric budget (the SQL form is the Gaussian ``pt-elim``).
    crs, domain
        The projected metre CRS of the coordinates, as in :func:`gpframe.duckdb.register`:
        points and query points outside its area of use (or ``domain``) are refused and the
        amount is divided by its k_max as the accessor's ``to_crs=`` does. Without it,
        coordinates are taken as ground metres.
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    KdeRegistration
    """
    from duckdb.sqltypes import BIGINT, DOUBLE, INTEGER

    def create(con: Any, reg: KdeRegistration) -> None:
        args = ("CAST(x AS DOUBLE), CAST(y AS DOUBLE), CAST(qx AS DOUBLE), CAST(qy AS DOUBLE), "
                "CAST(bandwidth_m AS DOUBLE), CAST(rho AS DOUBLE), CAST(rounds AS INTEGER), "
                "CAST(n_users AS BIGINT)")  # fmt: skip
        _u.create_id_udfs(
            con, _MACRO, lambda _ints: _make_udf(reg),
            "x, y, qx, qy, bandwidth_m, rho, rounds, n_users := NULL", args,
            [DOUBLE, DOUBLE, DOUBLE, DOUBLE, DOUBLE, DOUBLE, INTEGER, BIGINT], DOUBLE,
        )  # fmt: skip

    return _REGISTRY.install(con, session, KdeRegistration, create, rng=rng, crs=crs, domain=domain)


def _make_udf(reg: KdeRegistration) -> Any:
    def udf(user_id: Any, x: Any, y: Any, qx: Any, qy: Any, bw: Any, rho: Any, rounds: Any,
            n_users: Any) -> Any:  # fmt: skip
        import pyarrow as pa

        n = len(x)
        null = _nulls(user_id) | _nulls(x) | _nulls(y) | _nulls(qx) | _nulls(qy) | _nulls(bw)
        null |= _nulls(rho) | _nulls(rounds)
        out = np.zeros(n)
        if (~null).any():
            rows = np.flatnonzero(~null)
            nus = _u.union_sizes(n_users)
            f = {k: _np(v, np.float64)[rows] for k, v in
                 dict(x=x, y=y, qx=qx, qy=qy, bw=bw, rho=rho, c=rounds).items()}  # fmt: skip
            val, done = _batch(reg, _u.factorize_ids(user_id, rows), f, nus[rows])
            out[rows] = val
            null[rows[~done]] = True
        return pa.array(out, mask=null, type=pa.float64())

    udf.__name__ = _UDF
    return udf


def _batch(reg: KdeRegistration, users: tuple[np.ndarray, np.ndarray], f: dict[str, np.ndarray],
           n_users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Validate, reserve, eliminate and charge one batch; returns (contribution, ran) per row."""
    from gpframe.queries.kde import kde_point

    fname = "gp_kde_contribution"
    units, scale = reg.units, reg.scale_max  # one registration state for the whole batch
    # without crs= the metres are taken as given (no degrees guess), as before
    _u.check_points(np.column_stack([f["x"], f["y"]]), fname, units, "x/y", guess=False)
    _u.check_points(np.column_stack([f["qx"], f["qy"]]), fname, units, "qx/qy", guess=False)
    bad = ~np.isfinite(f["bw"]) | (f["bw"] <= 0)
    if bad.any():
        raise InvalidInputError(
            f"{fname}: bandwidth_m={float(f['bw'][bad][0])!r} must be finite and > 0. Nothing was "
            "charged for this batch."
        )
    exact = _u.exact_amounts(f["rho"], fname, "rho", "CGP, per m²")
    bw = f["bw"]
    out = (bw < 2.0**-10) | (bw > 2.0**40)  # tiny ones divided by zero in the kernel
    if out.any():
        raise InvalidInputError(
            f"{fname}: bandwidth_m={float(bw[out][0])!r} must be between 2**-10 and 2**40 "
            "metres. Nothing was charged for this batch."
        )
    rounds = _u.check_rounds(f["c"].astype(np.int64), fname)
    # rows that share (query point, bandwidth, rho, rounds, n) run as one elimination
    gcode = _u.group_codes({"qx": f["qx"], "qy": f["qy"], "b": f["bw"], "r": f["rho"],
                            "c": rounds, "n": n_users})  # fmt: skip
    val = np.zeros(len(rounds))

    def release(sel: np.ndarray, alloc: np.ndarray, unit: Fraction) -> Any:
        i0 = sel[0]
        out = kde_point(
            np.column_stack([f["x"][sel], f["y"][sel]]), [f["qx"][i0], f["qy"][i0]],
            bandwidth_m=float(f["bw"][i0]), kind="cgp", amount=alloc, method=METHOD,
            rounds=int(rounds[i0]), split=SPLIT, beta=BETA, unit=unit, scale_max=scale,
            n_union=_u.union_of(n_users[i0]), rng=reg.rng,
        )  # fmt: skip
        val[sel] = out.contributions
        return out.charges

    admitted = _u.elimination_batch(
        reg, fname, METHOD, users, (f["rho"], exact), rounds, gcode, release,
        scale_max=scale, params={"rows": len(rounds)},
        note=lambda i: {"q": (float(f["qx"][i]), float(f["qy"][i])), "b": float(f["bw"][i]),
                        "n_union": _u.union_of(n_users[i])},
    )  # fmt: skip
    return val, admitted


# ---------------------------------------------------------------------------------------------
# gp.duckdb.kde_raster: the heatmap over a grid, run once (not one elimination per probe row)


def kde_raster(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    x: str,
    y: str,
    bandwidth_m: float,
    cell_m: float = 100,
    bounds: Any = None,
    rho: float | None = None,
    eps: float | None = None,
    correct: bool = True,
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Private density raster of one point per user, as a relation of cells (x, y, density).

    The SQL counterpart of ``df.geopriv(...).kde_raster(...)``, with the same parameters,
    defaults, noise and charges: each user's point is released once (the ``pt`` baseline) and
    the Gaussian KDE of the released points is evaluated on every cell at once (binning and
    FFT convolution, bias-corrected), so a heatmap of 10⁴ cells costs one release per user and
    seconds, where ``AVG(gp_kde_contribution(...))`` over a probe grid runs one elimination
    (and one charge) per user and probe. Read the input once, run once, return the cells.

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
    bandwidth_m : float
        h, metres: the raster estimates the users' Gaussian KDE with this bandwidth.
    cell_m : float
        Cell side, metres (default 100).
    bounds : (xmin, ymin, xmax, ymax), optional
        Public extent in the same metres. None: the extent of the released points (0.5 %-99.5 %
        quantiles, post-processing), padded by 3h.
    rho, eps : float
        Allocation per user: ``rho`` on a CGP session (Gaussian noise, exact bias correction),
        ``eps`` on a GP session (planar Laplace, second-moment correction).
    correct : bool
        Remove the noise's extra smoothing (bandwidth √(h² − σ²)); with σ ≥ h this is refused
        before anything is charged.
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
        One row per cell, north row first: ``x``, ``y`` (the cell centre, same metres) and
        ``density`` (per m²; Σ density × cell_m² is the share of the mass inside the grid). The
        relation holds the fetched result: reading it again draws and charges nothing.

    Notes
    -----
    Noise: one release per user at the allocation (CGP σ = (1 + √2·g/r_min)/√(2ρ) per
    coordinate; GP planar Laplace). Charge: the allocation's guarantee once per user, however
    many cells — the same charges as ``df.geopriv(...).kde_raster(...)`` on the same points.
    The units are the caller's: metres of the CRS named by ``register(con, session, crs=...)``
    (points outside its area of use are refused; its k_max divides the amount, as the
    accessor's ``to_crs=`` does), or, without ``crs=``, ground metres as given
    (:mod:`gpframe.duckdb`, "Units").

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT i AS boat, 1000.0 * (i % 20) AS x, 1000.0 * (i // 20) AS y FROM range(400) t(i)"
    >>> cells = kde_raster(con, q, user="boat", x="x", y="y", bandwidth_m=2000, cell_m=500,
    ...                    bounds=(0, 0, 20_000, 20_000), rho=1e-4)
    >>> cells.columns, len(cells.fetchall())
    (['x', 'y', 'density'], 1600)
    >>> float(session.spent().max())          # once per user, however many cells
    0.0001
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(kde_raster, locals(), "kde_raster")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(kde_raster, locals(), "gp.duckdb.kde_raster")
    import pyarrow as pa

    from gpframe.duckdb.relations import check_input, kind_amount, one_point_per_user, source
    from gpframe.queries import kde as _k

    fname = "gp.duckdb.kde_raster"
    reg = _REGISTRY.require(con, fname)
    session = reg.session
    kind, amount, _ = kind_amount(session, rho, eps, fname, gp_on_cgp=False)
    try:
        h = _k.check_length(bandwidth_m, "bandwidth_m")
        c = _k.check_length(cell_m, "cell_m")
        bm = None if bounds is None else _bounds_m(bounds)
    except InvalidInputError as exc:  # name the SQL entry point (the checks are the accessor's)
        raise InvalidInputError(f"{fname}: {exc}") from None
    rel = source(con, query_or_relation, fname)
    u, qx, qy = check_input(rel, fname, {"user": user, "x": x, "y": y})
    units = reg.units
    _tbl, _codes, keys, xy = one_point_per_user(rel, fname, (user, x, y), (u, qx, qy), units)
    with _u.LEDGER_LOCK:  # the SQL functions of other threads charge the same session
        r = _k.raster_from_points(
            session, keys, xy, bandwidth_m=h, cell_m=c, bounds_m=bm, kind=kind, amount=amount,
            correct=bool(correct), scale_max=1 if units is None else units.scale_max,
            crs_m=None if units is None else units.crs.to_string(), rng=reg.rng,
            noise_inflation=reg.noise_inflation,
            bandwidth_arg=bandwidth_m,
        )  # fmt: skip
    dens = np.asarray(r.value, dtype=np.float64)
    a, _b, x0, _d, e, y0 = (float(v) for v in r.transform)
    ny, nx = dens.shape
    cx = x0 + (np.arange(nx) + 0.5) * a
    cy = y0 + (np.arange(ny) + 0.5) * e  # e < 0: row 0 is the northern edge
    cells = pa.table({
        "x": pa.array(np.tile(cx, ny)),
        "y": pa.array(np.repeat(cy, nx)),
        "density": pa.array(dens.ravel()),
    })  # fmt: skip
    return con.from_arrow(cells)


def _bounds_m(bounds: Any) -> tuple[float, float, float, float]:
    """Public bounds (xmin, ymin, xmax, ymax) in the input's metres, checked (never projected)."""
    import math

    try:
        x0, y0, x1, y1 = (float(v) for v in bounds)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInputError(
            f"bounds={bounds!r} must be (xmin, ymin, xmax, ymax) in the input's metres. "
            "Nothing was charged."
        ) from None
    if not all(map(math.isfinite, (x0, y0, x1, y1))) or not (x1 > x0 and y1 > y0):
        raise InvalidInputError(
            f"bounds={bounds!r} must be finite with xmax > xmin and ymax > ymin. Nothing was "
            "charged."
        )
    if max(abs(x0), abs(y0), abs(x1), abs(y1)) >= 2.0**40:
        raise InvalidInputError(
            f"bounds={bounds!r} are beyond ±2**40 m; give them in the input's projected metres. "
            "Nothing was charged."
        )
    return x0, y0, x1, y1
