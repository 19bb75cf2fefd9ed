"""The pandas / geopandas face of the private KDE: ``kde`` (point queries) and ``kde_raster``.

See ``docs/operations/kde.md`` and ``docs/ledger.md`` (KDE, Algorithm 7, rasters, charges, one point
per user, pitfalls); Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 7, Thm. 5.1. The
algorithms are :mod:`gpframe.queries.kde`; this module picks each user's point (with
:func:`gpframe.queries.range_count.select_component`), projects query points and bounds into the
data's metric CRS, reserves, runs, charges and builds the result.

Units: ``bandwidth_m`` and ``cell_m`` are metres on the ground, also for lon/lat input: the points
are projected with :mod:`gpframe.geo` (local UTM or a transverse Mercator, scale within ±0.1 %), and
the amounts are divided by the projection's ``scale_max`` as ``privatize`` does.

The accessor methods ``df.geopriv(session, user=...).kde(...)`` / ``.kde_raster(...)`` delegate to
:func:`kde` / :func:`kde_raster` with the bound :class:`~gpframe.frame.accessor.GeoPriv` object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import probability
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import Charge, PreviewStop, end_preview, run, with_on_exhausted
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.queries import kde as _k
from gpframe.queries import preview_bounds as _pb
from gpframe.queries.elimination import check_method_parts
from gpframe.queries.kde_bounds import bounds_m as _bounds_m
from gpframe.queries.kde_bounds import kde_points_result, query_points
from gpframe.results import KdeResult
from gpframe.results.preview import dry

__all__ = ["kde", "kde_raster"]

_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# inputs


def _check_amount(session: Any, rho: Any, eps: Any) -> tuple[str, Fraction]:
    from gpframe.accounting.amounts import metric_amount
    from gpframe.ledger.charges import filter_kind

    kind = filter_kind(session, "kde")
    return metric_amount(rho, eps, example=".kde(at, bandwidth_m=500, rho=1e-5)",
                         filter_kind=kind, same_kind=True)  # fmt: skip


def _component(bound: Any, component: Any, reduce: Any, operation: str) -> Any:
    from gpframe.queries.range_count import select_component

    p = bound.projected
    users_all = np.asarray(p.users)
    pos = select_component(
        bound.frame,
        users_all,
        component,
        reduce,
        operation=operation,
        skip=(bound.user, *bound.protected),
    )
    if pos.size == 0:
        raise InvalidInputError(
            f"the selected component has no rows. Check component={component!r}. {_NOTHING}"
        )
    every = pos.size == len(users_all)  # ascending distinct rows: all of them, in order
    xy = p.xy if every else p.xy[pos]
    from gpframe.queries.privatize import COORD_MAX_M

    if not (np.abs(xy) < COORD_MAX_M).all():
        raise InvalidInputError(
            f"a projected coordinate is beyond ±2**40 m; check the CRS. {_NOTHING}"
        )
    if every:  # no copies of every row
        return p if p.users is users_all else dataclasses.replace(p, users=users_all)
    return dataclasses.replace(p, xy=xy, users=users_all[pos], index=p.index[pos])


#: the range of a length argument (bandwidth, ν, cell side): below the 2⁻¹⁰ m lattice step a
def _check_options(method: str, rounds: Any, split: str, beta: Any) -> None:
    from gpframe.queries.elimination import split_fractions

    if method not in _k.METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, _k.METHODS))}. {_NOTHING}"
        )
    split_fractions(split, rounds)
    probability(beta)


def _ledger_allocation(lu: Any, amount: Fraction) -> Fraction:
    """Return the allocation :meth:`Session.reserve` will hold for ``amount`` (rounded up)."""
    return lu.to_fraction(lu.up(amount))


def _check_reserved(lu: Any, checks: dict[str, Any]) -> Callable[[Any], None]:
    """Return the driver's check of the reserved allocations' parts (no noise drawn yet)."""

    def check(r: Any) -> None:
        check_method_parts(_alloc_fractions(r, lu), **checks)

    return check


def _alloc_fractions(r: Any, lu: Any) -> np.ndarray:
    adm = np.asarray(r.admitted, dtype=bool)
    units = np.where(adm, r.allocation_units, 0)
    uniq, inv = np.unique(units, return_inverse=True)
    fr = np.array([lu.to_fraction(int(u)) for u in uniq], dtype=object)
    return fr[inv]


# ---------------------------------------------------------------------------------------------
# kde


def kde(
    bound: Any,
    at: Any,
    *,
    bandwidth_m: float,
    rho: float | None = None,
    eps: float | None = None,
    method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "pt-elim",
    rounds: int = 10,
    split: Literal["doubling", "even"] = "doubling",
    beta: float = 0.05,
    nu_m: float | None = None,
    component: Any = None,
    reduce: str | None = None,
    progress: bool | None = None,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> KdeResult:
    """Private Gaussian KDE at the query point(s) ``at``.

    See ``docs/operations/kde.md`` (kernel exp(−d²/(2b²)), baselines, error bounds, Algorithm 7 with
    ν = 3b), ``docs/operations/kde.md`` and ``docs/operations/range_count.md`` (elimination and its
    exact charge, GP: Laplace, charges).

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
        ``df.geopriv(session, user=...)``.
    at : shapely Point, GeoSeries / GeoDataFrame of points, or array (m, 2)
        Query points (public), in the data's CRS unless a GeoSeries carries its own.
    bandwidth_m : float
        b in ground metres.
    rho, eps : float
        Allocation per user (and per query point for the methods tied to one point): ``rho``
        (m⁻², CGP session) or ``eps`` (m⁻¹, GP session).
    method : {"pt-elim", "dist-elim", "pt", "dist"}
        ``pt`` privatizes each point once and reuses it for every query point (one charge);
        ``dist``, ``pt-elim`` and ``dist-elim`` are one query per query point (charges add up);
        the ``*-elim`` versions stop far users early (they pay the rounds run).
    rounds, split : int, {"doubling", "even"}
        Elimination rounds c and split π (``docs/operations/range_count.md``).
    beta : float
        Failure probability of each point's error bound.
    nu_m : float, optional
        Elimination distance ν (default 3 × bandwidth).
    component, reduce
        Which row is each user's point (:func:`gpframe.queries.range_count.select_component`).
    progress : bool or None
        tqdm bar over query points (None: on in a terminal or notebook when there are several).
    rng : BitSource or None
        Randomness; None is the OS CSPRNG.

    Returns
    -------
    KdeResult

    Notes
    -----
    Noise: point releases σ = (1 + √2·g/r_min)·k/√(2ρ_j) per coordinate (GP: planar Laplace),
    distance releases σ = (1 + g/r_min)·k/√(2ρ_j) (GP: Laplace), ρ_j the round's part, k the
    projection scale (``docs/noise.md``: noise parameters and charges, projection scale). Charge per
    user: ``pt`` the allocation once; ``dist`` the allocation per query point; ``*-elim`` per query
    point the parts of the rounds run. Error: with probability ≥ 1 − β, |kde − KDE| ≤
    (L_K/n)·Σ_{i∈S} w_i + (n_far/n)·e^{−ν²/(2b²)}, L_K = e^{−1/2}/b, w_i from the noise actually
    sampled (capped at 1).

    Examples
    --------
    >>> import shapely
    >>> import gpframe as gp, gpframe.frame.accessor
    >>> from gpframe.ledger import Session
    >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 540_000.0],
    ...                    "y": [4_500_100.0, 4_500_300.0, 4_540_000.0]})
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
    >>> res = kde(bound, shapely.Point(500_000, 4_500_000), bandwidth_m=2000, rho=1e-4)
    >>> res.n_charged, int(res.points["n_far"].iloc[0])     # the boat 56 km away stops early
    (3, 1)
    >>> bool(session.spent().loc[3] < 1e-4)             # and keeps most of its allocation
    True
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(
            kde,
            locals(),
            "kde",
            adaptive=method.endswith("-elim"),
            error=_pb.bound_for(bound.session, _pb.scale_of(bound), _pb.kde_error),
            least=_pb.least_for(bound.session),
        )
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(kde, locals())
    session = bound.session
    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    _check_options(method, rounds, split, beta)
    b = _k.check_length(bandwidth_m, "bandwidth_m")
    if nu_m is not None:
        nu_m = _k.check_length(nu_m, "nu_m")
    kind, amount = _check_amount(session, rho, eps)
    p = _component(bound, component, reduce, "kde")
    q_m, q_series, many = query_points(at, p.crs_in, p.crs_m)
    _k.preflight(kind, amount, float(p.scale_max), method)
    users = np.asarray(p.users)
    if len(pd.unique(users)) != users.size:
        raise InvalidInputError(
            "several rows per user: kde reads one point per user; select it with component=... "
            f"or reduce='last' (docs/ledger.md). {_NOTHING}"
        )
    from gpframe.ledger.charges import ledger_keys

    keys = ledger_keys(users)
    led = session.ledger
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    params = {"method": method, "bandwidth_m": b, "rounds": int(rounds), "split": split,
              "beta": float(beta), "nu_m": _k.NU_FACTOR * b if nu_m is None else float(nu_m),
              "crs_m": p.crs_m.to_string(), "scale_max": float(p.scale_max),
              "noise_inflation": float(p.noise_inflation),
              ("rho" if kind == "cgp" else "eps"): float(amount)}  # fmt: skip
    charges = np.full(users.size, Fraction(0), dtype=object)
    allocs = np.full(users.size, Fraction(0), dtype=object)
    admitted_any = np.zeros(users.size, dtype=bool)
    rows: list[dict[str, Any]] = []
    qids: list[str] = []
    r_min = 1.0
    hist = np.zeros(int(rounds) + 1 if method.endswith("-elim") else 2, dtype=np.int64)
    # every admitted user's allocation is the amount rounded up to the ledger's unit, known now:
    # check the per-round parts (too small to split, outside the wrappers' ranges) before any
    # reservation, so such parameters never touch the ledger
    checks = dict(kind=kind, method=method, rounds=int(rounds), split=split, beta=beta,
                  unit=unit, scale_max=p.scale_max)  # fmt: skip
    check_method_parts(_ledger_allocation(lu, amount), **checks)
    if method == "pt":

        def compute_pt(r: Any) -> Charge[Any]:
            alloc = _alloc_fractions(r, lu)
            out = _k.kde_points_pt(p.xy, q_m, bandwidth_m=b, kind=kind, amount=alloc,
                                   beta=beta, unit=unit, scale_max=p.scale_max,
                                   rng=rng)  # fmt: skip
            return Charge((out, alloc), out.privatized.charges)

        r = run(session, keys, amount, notion="metric", query="kde",
                params={**params, "n_points": len(q_m)}, check=_check_reserved(lu, checks),
                compute=compute_pt)  # fmt: skip
        out, alloc = r.value
        qids.append(r.query_id)
        admitted_any = np.asarray(r.admitted, dtype=bool)
        charges, allocs = out.privatized.charges, alloc
        r_min = out.privatized.r_min
        hist[1] = out.n_queried
        for j in range(len(q_m)):
            rows.append(dict(kde=float(out.values[j]), error=float(out.errors[j]), n_far=0,
                             n_near=out.n_queried, saving=0.0, query_id=r.query_id))  # fmt: skip
    else:
        iterator: Any = range(len(q_m))
        from gpframe.queries.privatize import progress_enabled

        if len(q_m) > 1 and progress_enabled(progress):
            from tqdm.auto import tqdm

            iterator = tqdm(iterator, desc=f"kde ({method})", unit="point")
        for j in iterator:

            def compute_one(r: Any, j: int = j) -> Charge[Any]:
                alloc = _alloc_fractions(r, lu)
                out1 = _k.kde_point(p.xy, q_m[j], bandwidth_m=b, kind=kind, amount=alloc,
                                    method=method, rounds=int(rounds), split=split, beta=beta,
                                    nu_m=nu_m, unit=unit, scale_max=p.scale_max,
                                    rng=rng)  # fmt: skip
                return Charge((out1, alloc), out1.charges)

            try:
                r = run(session, keys, amount, notion="metric", query="kde",
                        params={**params, "q_m": q_m[j].tolist()},
                        check=_check_reserved(lu, checks), compute=compute_one)  # fmt: skip
            except PreviewStop:  # a dry run: this point's reservation is planned, go on
                continue
            out1, alloc = r.value
            adm = np.asarray(r.admitted, dtype=bool)
            admitted_any |= adm
            charges = charges + out1.charges
            allocs = allocs + alloc
            r_min = max(r_min, out1.r_min)
            hist[: out1.rounds_histogram.size] += out1.rounds_histogram
            qids.append(r.query_id)
            rows.append(dict(kde=out1.value, error=out1.error, n_far=out1.n_far,
                             n_near=out1.n_near, saving=float(out1.saving),
                             query_id=r.query_id))  # fmt: skip
    end_preview()  # a dry run planned every query point: nothing to build
    return kde_points_result(
        rows, q_series, keys, admitted_any, many=many, beta=beta, kind=kind, method=method,
        params=params, n_points=len(q_m), hist=hist, r_min=r_min, charges=charges,
        allocs=allocs, qids=qids,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# kde_raster


def kde_raster(
    bound: Any,
    *,
    bandwidth_m: float,
    cell_m: float = 100,
    bounds: Any = None,
    rho: float | None = None,
    eps: float | None = None,
    correct: bool = True,
    component: Any = None,
    reduce: str | None = None,
    progress: bool | None = None,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> Any:
    """Private density raster: each user's point privatized once, KDE with the noise removed.

    See ``docs/operations/kde.md`` and ``docs/noise.md`` (Rasters, the ``pt`` baseline, charged once
    however many cells; its bias correction, charges, σ actually sampled); Liang & Yi, 'Adaptive
    Privacy Budgeting' (2026), Alg. 7.

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
    bandwidth_m : float
        h, ground metres: the raster estimates the users' Gaussian KDE with this bandwidth.
    cell_m : float
        Cell side, metres.
    bounds : (xmin, ymin, xmax, ymax), optional
        Public extent in the data's CRS (degrees for lon/lat input). None: the extent of the
        released points (post-processing; never the true points), padded by 3h.
    rho, eps : float
        The allocation per user: ``rho`` (CGP, Gaussian noise, exact bias correction) or ``eps``
        (GP, planar Laplace, second-moment correction).
    correct : bool
        Remove the noise's extra smoothing (see :func:`gpframe.queries.kde.kde_raster_arrays`).
        With Gaussian noise σ ≥ h this is impossible: the call raises ``InvalidInputError``
        before anything is charged, suggesting a larger bandwidth, a larger rho or correct=False.
    component, reduce
        Which row is each user's point.
    progress : bool or None
        Unused (one sampler call per distinct allocation); kept for a uniform signature.
    rng : BitSource or None

    Returns
    -------
    Raster
        ``value`` the density per m² (it integrates to 1 over the plane; Σ cells × cell_m² is the
        share inside the grid), in the metric CRS of the projection, not the input's: a density
        per m² needs equal square cells, which lon/lat has not (``Raster.cells()`` returns the
        cells as polygons in the input CRS, ``crs_in``); ``params`` carry σ, the bandwidth
        applied and the correction used.

    Notes
    -----
    Noise: one release per user at the allocation (CGP σ = (1 + √2·g/r_min)·k/√(2ρ) per
    coordinate; GP planar Laplace). Charge: the allocation's guarantee, once per user.
    Bias: CGP with ``correct=True``: unbiased for the true KDE with bandwidth h (convolution of
    Gaussians); otherwise the expected raster is the density smoothed by the noise as well.

    Examples
    --------
    >>> import gpframe as gp, gpframe.frame.accessor
    >>> from gpframe.ledger import Session
    >>> df = pd.DataFrame({"boat": range(200), "x": 500_000.0 + np.arange(200),
    ...                    "y": 4_500_000.0 + np.arange(200)})
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
    >>> r = kde_raster(bound, bandwidth_m=1000, cell_m=200, rho=1e-4,
    ...                bounds=(490_000, 4_490_000, 510_000, 4_510_000))
    >>> r.shape, round(r.mass, 2), r.n_charged
    ((100, 100), 1.0, 200)
    >>> float(session.spent().max())      # once per user, however many cells
    0.0001
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(
            kde_raster,
            locals(),
            "kde_raster",
            error=_pb.bound_for(bound.session, _pb.scale_of(bound), _pb.kde_raster_sigma),
        )
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(kde_raster, locals())
    session = bound.session
    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    h = _k.check_length(bandwidth_m, "bandwidth_m")
    c = _k.check_length(cell_m, "cell_m")
    kind, amount = _check_amount(session, rho, eps)
    # one point per user: _component refused (or reduced) several rows of one user already
    p = _component(bound, component, reduce, "kde_raster")
    users = np.asarray(p.users)
    bm = _bounds_m(bounds, p) if bounds is not None else None
    from gpframe.ledger.charges import ledger_key_array

    raster = _k.raster_from_points(
        session, ledger_key_array(users), p.xy, bandwidth_m=h, cell_m=c, bounds_m=bm, kind=kind,
        amount=amount, correct=correct, scale_max=p.scale_max, crs_m=p.crs_m.to_string(),
        rng=rng, bandwidth_arg=bandwidth_m, noise_inflation=p.noise_inflation,
    )  # fmt: skip
    # the grid stays in the metric CRS (docs/operations/kde.md: rasters); say where the input was
    return dataclasses.replace(raster, crs_in=p.crs_in.to_string())
