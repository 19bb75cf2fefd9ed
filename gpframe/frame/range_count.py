"""The pandas / geopandas face of ``range_count``: components, regions, results, plots.

See ``docs/operations/range_count.md`` and ``docs/ledger.md`` (one component per user, charged to
the user's one filter, range counting, charges, pitfalls); Liang & Yi, 'Adaptive Privacy Budgeting'
(2026), Thm. 5.1, Alg. 6. The algorithm and the ledger driver are
:mod:`gpframe.queries.range_count`; this module only

* picks each user's component (one point per user) by a rule that reads no location
 : a column value, a callable on the public columns, or the user's first / last fix
  by a time column, optionally before / after a time;
* validates and projects the region(s) (a shapely Polygon / MultiPolygon in the data's CRS, or a
  GeoSeries / GeoDataFrame in any CRS) before the ledger is touched;
* runs one private count per region (each region is a query: K regions charge up to K times the
  allocation per user, ``docs/ledger.md``) and gathers them in a :class:`RangeCountResult`.

The accessor method ``df.geopriv(session, user=...).range_count(region, rho=...)`` delegates to
:func:`range_count` with the bound :class:`~gpframe.frame.accessor.GeoPriv` object.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.ledger.run import PreviewStop, active_preview, end_preview, with_on_exhausted
from gpframe.queries import preview_bounds as _pb
from gpframe.queries.range_count import check_options as _check_options
from gpframe.queries.range_count import run_range_count, select_component
from gpframe.queries.range_count_parts import allocations_for
from gpframe.queries.range_count_regions import combine_regions as _combine
from gpframe.queries.range_count_regions import project_regions as _regions
from gpframe.queries.range_count_regions import zone_columns as _zone_columns
from gpframe.release import zones_builder as _zones_frame
from gpframe.results import RangeCountResult, Result
from gpframe.results.preview import dry

__all__ = ["range_count"]

_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# the entry point


def _check_amount(session: Any, rho: Any, eps: Any, allocations: Any) -> None:
    from gpframe.accounting.amounts import metric_amount
    from gpframe.ledger.charges import filter_kind

    kind = filter_kind(session, "range_count")
    if allocations is not None:
        if rho is not None or eps is not None:
            raise InvalidInputError(f"pass either rho=/eps= or allocations=, not both. {_NOTHING}")
        return
    metric_amount(rho, eps, example=".range_count(region, rho=1e-5)", filter_kind=kind,
                  same_kind=True)  # fmt: skip


def range_count(
    bound: Any,
    region: Any,
    *,
    rho: float | None = None,
    eps: float | None = None,
    method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
    rounds: int = 10,
    split: Literal["doubling", "even"] = "doubling",
    beta: float = 0.05,
    component: Any = None,
    reduce: str | None = None,
    allocations: Any = None,
    progress: bool | None = None,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> RangeCountResult:
    """Private count of users inside ``region``.

    See ``docs/operations/range_count.md`` and ``docs/ledger.md`` (signed distance, ``pt`` /
    ``dist`` with the Appendix B shift, ``*-elim``, elimination and its exact charge, GP: Laplace,
    components, charges, allocations from a plan).

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
        ``df.geopriv(session, user=...)``: the frame, session and projected points.
    region : shapely Polygon / MultiPolygon, GeoSeries or GeoDataFrame
        A polygon (holes and several parts allowed) in the data's CRS, or a series of them in any
        CRS (reprojected to the data's metric CRS; one result row per region). Each region is one
        query: K regions charge each user up to K × the allocation.
    rho, eps : float
        Allocation per user and region: ``rho`` (m⁻², CGP session, Gaussian noise) or ``eps``
        (m⁻¹, GP session, Laplace noise).
    method : {"pt", "dist", "pt-elim", "dist-elim"}
        Point / distance privatization, without or with iterative elimination.
    rounds, split : int, {"doubling", "even"}
        Elimination rounds c and the split π (``docs/operations/range_count.md``; c4 / c64 = even,
        log-c10 = doubling 10).
    beta : float
        Failure probability of the error bound (β/2 eliminations, β/2 survivors for ``*-elim``).
    component : None, (column, value), callable, "first", "last", First, Last
        Which row is each user's point (see :func:`select_component`).
    reduce : {"first", "last"}, optional
        Keep the first / last row (row order) of a user with several rows in the component.
    allocations : Series by user, array, scalar or :class:`gpframe.ledger.plan.SessionPlan`
        Per-user allocations instead of ``rho`` / ``eps`` (a user missing from a Series is not
        asked and is reported excluded). A plan gives each region its next allocation
        (Algorithm 3) and records the charges.
    progress : bool or None
        tqdm bar over regions (None: on in a terminal or notebook when there are several).
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    RangeCountResult

    Notes
    -----
    Noise: ``dist``: the signed distance f(x) with lattice Gaussian σ = (1 + g/r_min)·k/√(2ρ_j) (GP:
    Laplace scale (1 + g/r_min)·k/ε_j); ``pt``: the point, σ = (1 + √2·g/r_min)·k/√(2ρ_j); ρ_j the
    round's part, k the projection scale factor (``docs/noise.md``: noise parameters and charges,
    projection scale). Charge per user and region: the allocation for ``pt`` / ``dist``; for
    ``*-elim`` the parts of the rounds run (a user decided at round r pays a·Σ_{j≤r} π_j, the rest
    stays in the budget). Error: with probability ≥ 1 − β, |count − true count| ≤ U = #{undecided
    users whose final estimate lies within its width of 0} (released values only).

    Examples
    --------
    >>> import gpframe as gp, shapely
    >>> from gpframe.ledger import Session
    >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 530_000.0],
    ...                    "y": [4_500_100.0, 4_500_300.0, 4_530_000.0]})
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
    >>> res = range_count(bound, shapely.box(490_000, 4_490_000, 510_000, 4_510_000), rho=1e-4)
    >>> res.n_charged, res.n_excluded, res.value        # far from the edges: all decided
    (3, 0, 2)
    >>> res.rounds_histogram.tolist()                   # doctest: +SKIP
    [0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0]
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(
            range_count,
            locals(),
            "range_count",
            adaptive=method.endswith("-elim"),
            error=_pb.bound_for(bound.session, _pb.scale_of(bound), _pb.range_count_band),
            least=_pb.least_for(bound.session),
        )
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(range_count, locals())
    from gpframe.ledger.plan import SessionPlan
    from gpframe.mechanisms.noise.bits import resolve_rng

    session = bound.session
    rng = resolve_rng(rng)  # before any reservation: a refused rng must not charge anyone
    _check_options(method, rounds, split, beta)
    plan = allocations if isinstance(allocations, SessionPlan) else None
    _check_amount(session, rho, eps, allocations)
    if getattr(bound, "partition", None) is not None:
        return _range_count_parts(bound, region, rho=rho, eps=eps, method=method, rounds=rounds,
                                  split=split, beta=beta, component=component, reduce=reduce,
                                  allocations=allocations, progress=progress, rng=rng)  # fmt: skip
    p = bound.projected
    users_all = np.asarray(p.users)
    pos = select_component(
        bound.frame,
        users_all,
        component,
        reduce,
        operation="range_count",
        skip=(bound.user, *bound.protected),
    )
    if pos.size == 0:
        raise InvalidInputError(
            f"the selected component has no rows: nobody to count. Check component={component!r}. "
            f"{_NOTHING}"
        )
    polys, labels, series, crs, many = _regions(region, p)
    zone_cols = _zone_columns(region)
    if plan is not None:
        plan.check_users(users_all[pos])
    # the component's points, with the metric CRS as "input" so each region (already in metres)
    # is not projected again by run_range_count
    if pos.size == len(users_all):  # ascending distinct rows: all of them, so views, no copies
        sub = dataclasses.replace(p, users=users_all, crs_in=p.crs_m)
    else:
        sub = dataclasses.replace(p, xy=p.xy[pos], users=users_all[pos], index=p.index[pos],
                                  crs_in=p.crs_m)  # fmt: skip
    del pos  # an index per row, no longer needed
    users = sub.users
    fixed = None
    if plan is None and allocations is not None:
        fixed = allocations_for(allocations, users)
    iterator: Any = range(len(polys))
    from gpframe.queries.privatize import progress_enabled

    if len(polys) > 1 and progress_enabled(progress):
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="range_count", unit="region")
    rows: list[dict[str, Any]] = []
    results: list[Result] = []
    if plan is not None and active_preview() is not None:
        raise InvalidInputError(
            "dry_run=True with allocations=plan would take the plan's next steps without "
            "recording any charge; preview with allocations=plan.next_allocations(users) of a "
            f"copy, or with rho=/eps=. {_NOTHING}"
        )
    for i in iterator:
        if plan is not None:
            alloc = allocations_for(plan.next_allocations(users), users)
        else:
            alloc = fixed
        ask = np.ones(users.size, dtype=bool) if alloc is None else np.array(
            [a != 0 for a in alloc], dtype=bool)  # fmt: skip
        q = sub if ask.all() else dataclasses.replace(
            sub, xy=sub.xy[ask], users=sub.users[ask], index=sub.index[ask])  # fmt: skip
        if not ask.any():
            res = None
        else:
            try:
                res = run_range_count(
                    session, q, polys[i], rho=rho, eps=eps, method=method, rounds=int(rounds),
                    split=split, beta=beta, allocations=None if alloc is None else alloc[ask],
                    rng=rng,
                )  # fmt: skip
            except PreviewStop:  # a dry run: this region's reservation is planned, go on
                continue
        if plan is not None:
            plan.record(res.charges if res is not None else pd.Series(dtype=float))
        not_asked = users[~ask].tolist()
        if res is None:
            rows.append(dict(count=0, error=0.0, n_charged=0, n_excluded=len(not_asked),
                             saving=0.0, n_low=0, n_high=0, n_undecided=0,
                             rounds_histogram=[0] * (int(rounds) + 1), query_id=""))  # fmt: skip
            continue
        results.append(res)
        hist = res.params["rounds_histogram"]
        rows.append(dict(
            count=int(res.value), error=float(res.error), n_charged=res.n_charged,
            n_excluded=res.n_excluded + len(not_asked), saving=res.saved,
            n_low=res.params["n_low"], n_high=res.params["n_high"],
            n_undecided=res.params["n_undecided"], rounds_histogram=list(hist),
            query_id=res.query_id,
        ))  # fmt: skip
    end_preview()  # a dry run planned every region: nothing to combine
    return _combine(results, rows, labels, series, crs, many, users, fixed, plan,
                    build=_zones_frame(region, zone_cols), params=dict(
        method=method, rounds=int(rounds), split=split, beta=beta,
        rho=None if rho is None else float(rho), eps=None if eps is None else float(eps),
        component=repr(component), reduce=reduce, n_regions=len(polys),
        crs_m=p.crs_m.to_string(), scale_max=float(p.scale_max),
        noise_inflation=float(p.noise_inflation),
    ), confidence=1.0 - float(beta), kind=session.ledger.kind["metric"])  # fmt: skip


def _range_count_parts(bound: Any, region: Any, *, rho: Any, eps: Any, method: str, rounds: int,
                       split: str, beta: float, component: Any, reduce: Any, allocations: Any,
                       progress: Any, rng: Any) -> RangeCountResult:  # fmt: skip
    """``range_count`` over a split by a public column (``docs/wide-extents.md``).

    Each user's one point (the component, selected over the whole frame) lies in one part; the
    region is projected to every part's metric CRS and each region is one query (one query id)
    covering all parts: a user is charged as in a count over their own part alone.
    """
    from gpframe.frame.partition import describe
    from gpframe.queries.privatize import progress_enabled
    from gpframe.queries.range_count_parts import run_range_count_parts

    if allocations is not None:
        raise InvalidInputError(
            f"allocations= is not supported with partition={bound.partition!r}; pass rho= or "
            f"eps=. {_NOTHING}"
        )
    parts = bound._parts()
    users_all = np.asarray(bound.located.users)
    pos = select_component(bound.frame, users_all, component, reduce, operation="range_count",
                           skip=(bound.user, *bound.protected))  # fmt: skip
    if pos.size == 0:
        raise InvalidInputError(
            f"the selected component has no rows: nobody to count. Check component={component!r}. "
            f"{_NOTHING}"
        )
    zone_cols = _zone_columns(region)
    chosen = np.zeros(len(users_all), dtype=bool)
    chosen[pos] = True
    subs: list[tuple[Any, list[Any]]] = []
    for part in parts:
        local = np.flatnonzero(chosen[part.rows])
        if not local.size:
            continue
        pp = part.projected
        polys, labels, series, crs, many = _regions(region, pp)
        sub = dataclasses.replace(pp, xy=pp.xy[local], users=np.asarray(pp.users)[local],
                                  index=pp.index[local], crs_in=pp.crs_m)  # fmt: skip
        subs.append((sub, polys))
    described = describe(parts)
    extra = {"partition": str(bound.partition), "partitions": described}
    iterator: Any = range(len(subs[0][1]))
    if len(subs[0][1]) > 1 and progress_enabled(progress):
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="range_count", unit="region")
    rows: list[dict[str, Any]] = []
    results: list[Result] = []
    for i in iterator:
        try:
            res = run_range_count_parts(
                bound.session, [(sub, polys[i]) for sub, polys in subs], rho=rho, eps=eps,
                method=method, rounds=int(rounds), split=split, beta=beta, rng=rng, params=extra,
            )  # fmt: skip
        except PreviewStop:  # a dry run: this region's reservation is planned, go on
            continue
        results.append(res)
        rows.append(dict(
            count=int(res.value), error=float(res.error), n_charged=res.n_charged,
            n_excluded=res.n_excluded, saving=res.saved, n_low=res.params["n_low"],
            n_high=res.params["n_high"], n_undecided=res.params["n_undecided"],
            rounds_histogram=list(res.params["rounds_histogram"]), query_id=res.query_id,
        ))  # fmt: skip
    end_preview()
    worst = max(parts, key=lambda q: q.projected.noise_inflation).projected
    return _combine(results, rows, labels, series, crs, many, users_all[pos], None, None,
                    build=_zones_frame(region, zone_cols), params=dict(
        method=method, rounds=int(rounds), split=split, beta=beta,
        rho=None if rho is None else float(rho), eps=None if eps is None else float(eps),
        component=repr(component), reduce=reduce, n_regions=len(subs[0][1]),
        crs_m=worst.crs_m.to_string(), scale_max=float(worst.scale_max),
        noise_inflation=float(worst.noise_inflation), **extra,
    ), confidence=1.0 - float(beta), kind=bound.session.ledger.kind["metric"])  # fmt: skip
