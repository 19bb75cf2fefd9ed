"""The pandas / geopandas face of ``knn``, ``convex_hull`` and ``nearest_users``.

See ``docs/operations/knn.md``, ``docs/operations/convex_hull.md`` and
``docs/operations/nearest_users.md`` (k-PNN, PCH, pitfalls, nearest users, charges); Liang & Yi,
'Concentrated Geo-Privacy' (2023), Alg. 2, 3, Alg. 4; Liang & Yi, 'Adaptive Privacy Budgeting'
(2026), Alg. 8. The algorithms are :mod:`gpframe.queries.knn`, :mod:`gpframe.queries.hull` and
:mod:`gpframe.queries.nearest`; this module validates everything before the ledger is touched,
reserves, runs, charges, and shapes the output.

The accessor's bound object (``df.geopriv(session, user=...)``, a
:class:`gpframe.frame.accessor.GeoPriv` holding ``frame``, ``session``, ``projected`` and ``user``)
delegates ``.knn(...)``, ``.convex_hull(...)`` and ``.nearest_users(...)`` to the functions here.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import probability
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import Charge, run, with_on_exhausted
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.queries import preview_bounds as _pb
from gpframe.results import HullResult, KnnResult
from gpframe.results.preview import dry

__all__ = ["convex_hull", "knn", "nearest_users"]

_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# shared checks (all before the ledger is touched)


def _filter_kind(session: Any) -> str:
    from gpframe.ledger.charges import filter_kind

    return filter_kind(session, "knn or convex_hull")


def _amount(session: Any, rho: Any, eps: Any, what: str) -> tuple[str, Fraction, str]:
    """(mechanism kind, exact amount, filter kind); GP mechanisms may run on a CGP filter."""
    from gpframe.accounting.amounts import metric_amount

    fk = _filter_kind(session)
    kind, amount = metric_amount(rho, eps, example=f".{what}(..., rho=1e-5)", filter_kind=fk)
    return kind, amount, fk


def _bound(bound: Any, rho: Any, eps: Any, what: str) -> Any:
    """Return the preview's a-priori error hook of a knn, hull or nearest query (docs/ledger.md)."""
    from gpframe.ledger.charges import ledger_keys

    def extra() -> dict[str, Any]:
        kind, amount, _ = _amount(bound.session, rho, eps, what)
        if what == "nearest_users":
            return {"kind": kind, "amount": amount}
        split = getattr(bound, "partition", None) is not None
        users = bound.located.users if split else bound.projected.users
        codes, uniques = pd.factorize(pd.Series(users), sort=False)
        n = np.bincount(codes, minlength=len(uniques)).tolist()
        return {"kind": kind, "amount": amount,
                "counts": dict(zip(list(ledger_keys(uniques)), n, strict=True))}  # fmt: skip

    fn = {
        "knn": _pb.knn_error,
        "nearest_users": _pb.nearest_error,
        "convex_hull": _pb.hull_error_known,
    }[what]
    return _pb.bound_for(bound.session, _pb.scale_of(bound), fn, extra)


def _point_m(point: Any, projected: Any) -> np.ndarray:
    """Return the query point in the metric CRS: a Point (data CRS), (x, y) or a GeoSeries."""
    import shapely

    from gpframe.geo import project_geometry

    if isinstance(point, pd.Series):
        if len(point) != 1:
            raise InvalidInputError(f"point has {len(point)} geometries; pass one. {_NOTHING}")
        g0 = point.iloc[0]
        # a None / polygon entry has no .x: refuse it by name (was an AttributeError)
        if not isinstance(g0, shapely.Point) or g0.is_empty:
            raise InvalidInputError(
                f"point must hold one non-empty shapely Point, got {g0!r}. {_NOTHING}"
            )
        crs = getattr(point, "crs", None) or projected.crs_in
        geom = project_geometry(point, crs, projected.crs_m, name="point").iloc[0]
    else:
        if not isinstance(point, shapely.Point):
            try:
                x, y = (float(v) for v in point)
            except (TypeError, ValueError):
                raise InvalidInputError(
                    f"point must be a shapely Point or (x, y) in the data's CRS, got {point!r}. "
                    f"{_NOTHING}"
                ) from None
            point = shapely.Point(x, y)
        geom = project_geometry(point, projected.crs_in, projected.crs_m, name="point")
    q = np.array([geom.x, geom.y], dtype=np.float64) if not geom.is_empty else np.full(2, np.nan)
    if not np.isfinite(q).all():
        raise InvalidInputError(f"point {point!r} is empty or not finite. {_NOTHING}")
    return q


def _codes(projected: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, uniques = pd.factorize(pd.Series(projected.users), sort=False)
    counts = np.bincount(codes, minlength=len(uniques)).astype(np.int64)
    return codes.astype(np.int64), np.asarray(uniques), counts


def _run(bound: Any, users: np.ndarray, kind: str, amount: Fraction, query: str,
         params: dict[str, Any], compute: Callable[[np.ndarray], Any]) -> Any:  # fmt: skip
    """Run ``compute(admitted)`` through the driver; each admitted user pays its ``charges``."""
    from gpframe.ledger.charges import ledger_keys

    def charged(r: Any) -> Charge[Any]:
        adm = np.asarray(r.admitted, dtype=bool)
        out = compute(adm)
        return Charge(out, np.where(adm, out.charges, 0))

    return run(bound.session, ledger_keys(users), amount, notion="metric", kind=kind,
               query=query, params=params, compute=charged)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# knn


def knn(
    bound: Any,
    point: Any,
    k: int,
    *,
    rho: float | None = None,
    eps: float | None = None,
    compat: Literal["reference"] | None = None,
    gamma0: float | None = None,
    scan_order: Literal["random", "input"] | None = None,
    max_cycles: int = 1000,
    beta: float = 0.05,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> Any:
    """Each user's k private nearest neighbours of ``point`` among the user's own rows (k-PNN).

    See ``docs/operations/knn.md`` (PNN, k-PNN, contract, ``compat``); Liang & Yi, 'Concentrated
    Geo-Privacy' (2023), Alg. 2.

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
        ``df.geopriv(session, user=...)``.
    point : shapely Point, (x, y) or one-row GeoSeries
        The public query point (in the data's CRS unless a GeoSeries brings its own).
    k : int
        Neighbours per user (a user with fewer rows gets all of them, ranked).
    rho, eps : float
        Each user's budget: ``rho`` (CGP, PNN calls at ε = √(2ρ/k)) or ``eps`` (GP, ε/k).
    compat : {None, "reference"}
        "reference": the authors' input-order scan and γ₀ = −2·3/ε (``docs/operations/knn.md``:
        parity mode).
    gamma0, scan_order, max_cycles
        Public threshold shift (units of b = 3/ε_call), scan order and cap
        (``docs/operations/knn.md``).
    beta : float
        Failure probability of the reported error bound.
    rng : BitSource or None

    Returns
    -------
    pandas.DataFrame
        One row per selected row, sorted by user then rank: the index holds the selected rows'
        labels (what k-PNN releases), then the declared-public columns (``public=`` of
        ``df.geopriv``; by default the user column) and ``knn_rank`` (1 = first selected). No
        coordinate or geometry of a true point: join the labels back to your own frame only
        as the data holder. Other columns are dropped with a ``GpframeWarning`` naming them.
        ``attrs["geopriv"]`` is the :class:`KnnResult` (charges, per-user error bounds).

    Notes
    -----
    Noise and charge as :func:`gpframe.queries.knn.knn_indices`: ρ (or ε) once per user; a GP
    run on a CGP budget costs ε²/2.

    Examples
    --------
    >>> import gpframe as gp
    >>> from gpframe.ledger import Session
    >>> df = pd.DataFrame({"boat": [1, 1, 1, 2], "x": [500_000.0, 500_050.0, 509_000.0, 500_010.0],
    ...                    "y": [4_500_000.0] * 4})
    >>> s = Session(budget=gp.CGP(rho=1e-3))
    >>> out = knn(df.geopriv(s, user="boat", x="x", y="y", crs="EPSG:32618"),
    ...           (500_000.0, 4_500_000.0), 2, rho=1e-4)
    >>> out["knn_rank"].tolist(), list(out.columns), s.spent().tolist()
    ([1, 2, 1], ['boat', 'knn_rank'], [0.0001, 0.0001])
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(knn, locals(), "knn", error=_bound(bound, rho, eps, "knn"))
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(knn, locals())
    from gpframe.queries import knn as _k

    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    kind, amount, _ = _amount(bound.session, rho, eps, "knn")
    # a k above the number of rows answers the same (each user gets all of theirs, ranked);
    # clamping keeps a k like 2**70 out of int64 arithmetic (it raised OverflowError)
    split = getattr(bound, "partition", None) is not None
    kk = min(_k.check_k(k), max(len(bound.located if split else bound.projected.xy), 1))
    b = probability(beta)
    if gamma0 is not None and (
        isinstance(gamma0, (bool, np.bool_)) or not isinstance(gamma0, (int, float, np.number))
    ):  # resolve_compat's float() would raise ValueError / TypeError on a str or an object
        raise InvalidInputError(
            f"gamma0={gamma0!r} must be a number in [-20, 20] (units of each call's b). {_NOTHING}"
        )
    if gamma0 is not None and not -20 <= gamma0 <= 20:  # before float(): 10**400 overflows
        raise InvalidInputError(
            f"gamma0={gamma0!r} must be a finite public shift in [-20, 20]. {_NOTHING}"
        )
    g0, order = _k.resolve_compat(compat, gamma0, scan_order)
    if isinstance(max_cycles, bool) or not isinstance(max_cycles, (int, np.integer)):
        raise InvalidInputError(f"max_cycles={max_cycles!r} must be an integer >= 1. {_NOTHING}")
    if max_cycles < 1:
        raise InvalidInputError(f"max_cycles={max_cycles!r} must be an integer >= 1. {_NOTHING}")
    from gpframe.release import check_reserved

    check_reserved(getattr(bound, "public", (bound.user,)), ["knn_rank"], "knn")
    if split:  # each part in its own metric CRS, one query id (gpframe.frame.knn_parts)
        from gpframe.frame.knn_parts import knn_partitioned

        return knn_partitioned(bound, point, kk, kind=kind, amount=amount, g0=g0, order=order,
                               compat=compat, max_cycles=int(max_cycles), b=b, rng=rng,
                               helpers=(_point_m, _filter_kind, _filter_units))  # fmt: skip
    p = bound.projected
    q = _point_m(point, p)
    _k._check_extent(p.xy, q)
    codes, uniques, counts = _codes(p)
    if not len(uniques):
        raise InvalidInputError(f"the frame has no rows: nobody to ask. {_NOTHING}")
    ks = Fraction(float(p.scale_max))
    for n_k in np.unique(np.minimum(counts, kk)).tolist():  # calibrate before reserving
        _k.pnn_calibration(_k.call_eps(kind, amount, int(n_k), ks))
    params = {"k": kk, "gamma0": g0, "scan_order": order, "compat": compat, "beta": b,
              "max_cycles": int(max_cycles), "crs_m": p.crs_m.to_string(),
              "scale_max": float(p.scale_max), "noise_inflation": float(p.noise_inflation),
              "point_m": q.tolist()}  # fmt: skip

    def compute(adm: np.ndarray) -> Any:
        return _k.knn_indices(p.xy, codes, q, kk, kind=kind, amount=amount,
                              n_users=len(uniques), admitted=adm, gamma0=g0, scan_order=order,
                              max_cycles=int(max_cycles), beta=b, scale_max=ks,
                              rng=rng)  # fmt: skip

    ran = _run(bound, uniques, kind, amount, "knn", params, compute)
    out, adm, qid = ran.value, ran.admitted, ran.query_id
    pos = np.concatenate([out.rows[u] for u in np.flatnonzero(adm)] or [np.empty(0, np.int64)])
    ranks = np.concatenate([np.arange(1, out.k[u] + 1) for u in np.flatnonzero(adm)]
                           or [np.empty(0, np.int64)])  # fmt: skip
    frame = _knn_output(bound, pos, ranks)
    value = {uniques[u]: list(bound.frame.index[out.rows[u]]) for u in np.flatnonzero(adm)}
    errs = pd.Series(out.error[adm], index=pd.Index(uniques[adm], name="user"))
    res = KnnResult(
        value=value,
        error=float(np.nanmax(out.error[adm])) if adm.any() else None,
        confidence=1.0 - b,
        mechanism="pnn (laplace_gp draws, docs/noise.md)",
        params={
            **params,
            "capped": int(sum(int(out.capped[u].sum()) for u in np.flatnonzero(adm))),
        },
        kind=_filter_kind(bound.session),
        metric=("floor", out.r_min),
        r_min=out.r_min,
        charges=_filter_units(bound, kind, amount, uniques[adm]),
        excluded=uniques[~adm].tolist(),
        query_id=qid,
        errors=errs,
    )
    frame.attrs["geopriv"] = res.to_attr()
    return frame


def _filter_units(bound: Any, kind: str, amount: Fraction, users: np.ndarray) -> pd.Series:
    """Per-user charge in the filter's units (a GP run on a CGP filter costs ε²/2)."""
    from gpframe.accounting.filters import charge_for

    c = float(charge_for(_filter_kind(bound.session), kind, amount))
    return pd.Series(np.full(len(users), c), index=pd.Index(users, name="user"))


def _knn_output(bound: Any, pos: np.ndarray, ranks: np.ndarray) -> pd.DataFrame:
    """Build the selected rows as k-PNN releases them: row labels (index), public columns, rank.

    k-PNN releases indices only: the selected rows' true coordinates (and anything computed
    from them) stay out; :func:`gpframe.release.release_frame` builds the frame from nothing.
    """
    from gpframe.release import release_frame

    return release_frame(
        bound.frame,
        public=getattr(bound, "public", (bound.user,)),
        protected=_protected(bound),
        rows=pos,
        released={"knn_rank": np.asarray(ranks, dtype=np.int64)},
        what="knn",
        stacklevel=4,
    )


def _protected(bound: Any) -> tuple[Any, ...]:
    from gpframe.release import protected_columns

    return protected_columns(bound.frame, getattr(bound.projected, "coords", ()))


# ---------------------------------------------------------------------------------------------
# convex_hull


def convex_hull(
    bound: Any,
    *,
    rho: float | None = None,
    eps: float | None = None,
    beta: float = 0.1,
    k: int | None = None,
    alpha: float = 0.92,
    k_rule: Literal["reference", "consistent"] = "reference",
    radius_floor_m: float = 10.0,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> Any:
    """One private convex hull per user.

    See ``docs/operations/convex_hull.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 4.

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
    rho, eps : float
        Each user's budget (CGP: Gaussian centre/radius/release; GP: Laplace).
    beta : float
        Failure probability of the radius enlargement and of the reported error (default 0.1).
    k : int, optional
        Anchors; None picks k per user from the noisy radius (``k_rule``, clamped to [16, 128]).
    alpha, k_rule, radius_floor_m
        As in :func:`gpframe.queries.hull.private_hulls`.
    rng : BitSource or None

    Returns
    -------
    geopandas.GeoDataFrame
        One row per admitted user (index: user id): ``geometry`` (the hull, input CRS), ``k``,
        ``radius_m`` (R̃), ``error_m``, ``fallback`` (Remark 1); ``attrs["geopriv"]`` is the
        :class:`HullResult` (its ``params["spend"]`` is the budget split; ``.plot()`` overlays).

    Notes
    -----
    Charge: ρ (or ε) per user, split ρ/20 (⅔ centre, ⅓ radius), 0.92·ρ₁ PNNs, 0.08·ρ₁ release.

    Examples
    --------
    >>> import gpframe as gp
    >>> from gpframe.ledger import Session
    >>> rs = np.random.default_rng(1)  # test-only: example data, never noise
    >>> df = pd.DataFrame({"u": np.repeat([1, 2], 300), "x": 500_000 + rs.uniform(0, 2000, 600),
    ...                    "y": 4_500_000 + rs.uniform(0, 2000, 600)})
    >>> s = Session(budget=gp.CGP(rho=1e-2))
    >>> hulls = convex_hull(df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618"), rho=1e-3)
    >>> hulls.index.tolist(), hulls["k"].tolist(), s.spent().tolist()
    ([1, 2], [16, 16], [0.001, 0.001])
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(
            convex_hull, locals(), "convex_hull", error=_bound(bound, rho, eps, "convex_hull")
        )
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(convex_hull, locals())
    import geopandas as gpd

    from gpframe.queries import hull as _h

    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    kind, amount, _ = _amount(bound.session, rho, eps, "convex_hull")
    b = probability(beta)
    if getattr(bound, "partition", None) is not None:  # gpframe.frame.knn_parts
        from gpframe.frame.knn_parts import hull_partitioned

        kw = {"alpha": alpha, "k": k, "k_rule": k_rule, "radius_floor_m": radius_floor_m}
        return hull_partitioned(
            bound,
            kind=kind,
            amount=amount,
            b=b,
            hull_kw=kw,
            rng=rng,
            helpers=(_filter_kind, _filter_units, _hulls_to_input_crs),
        )
    p = bound.projected
    codes, uniques, _counts = _codes(p)
    if not len(uniques):
        raise InvalidInputError(f"the frame has no rows: nobody to ask. {_NOTHING}")
    # a dry run of every check on one tiny input before the ledger is touched
    _h.private_hulls(
        np.zeros((1, 2)),
        np.zeros(1, np.int64),
        kind=kind,
        amount=amount,
        admitted=np.zeros(1, bool),
        beta=b,
        alpha=alpha,
        k=k,
        k_rule=k_rule,
        radius_floor_m=radius_floor_m,
        scale_max=Fraction(float(p.scale_max)),
    )
    _h.hull_preflight(kind, amount, b, alpha, k, radius_floor_m, _counts, float(p.scale_max))
    from gpframe.queries.knn import _check_extent

    _check_extent(p.xy)
    params = {"beta": b, "k": k, "alpha": float(alpha), "k_rule": k_rule,
              "radius_floor_m": float(radius_floor_m), "crs_m": p.crs_m.to_string(),
              "scale_max": float(p.scale_max),
              "noise_inflation": float(p.noise_inflation)}  # fmt: skip

    def compute(adm: np.ndarray) -> Any:
        return _h.private_hulls(p.xy, codes, kind=kind, amount=amount, n_users=len(uniques),
                                admitted=adm, beta=b, alpha=alpha, k=k, k_rule=k_rule,
                                radius_floor_m=radius_floor_m,
                                scale_max=Fraction(float(p.scale_max)), rng=rng)  # fmt: skip

    ran = _run(bound, uniques, kind, amount, "convex_hull", params, compute)
    out, adm, qid = ran.value, ran.admitted, ran.query_id
    idx = np.flatnonzero(adm)
    geoms = gpd.GeoSeries(out.hulls[idx], crs=p.crs_m)
    if not p.crs_m.equals(p.crs_in):
        geoms = _hulls_to_input_crs(geoms, p.crs_m, p.crs_in)
    from gpframe.release import release_frame

    # one row per user, from nothing: the user id (public) and the released hull and numbers
    users = pd.DataFrame({bound.user: uniques[idx]}, index=pd.Index(uniques[idx], name="user"))
    gdf = release_frame(
        users,
        public=(bound.user,),
        released={"k": out.k[idx], "radius_m": out.radius[idx], "error_m": out.error[idx],
                  "fallback": out.fallback[idx]},
        geometry=np.asarray(geoms.array),
        crs=p.crs_in,
        what="convex_hull",
    )  # fmt: skip
    spend = {name: float(v) for name, v in out.spend.items()}
    res = HullResult(
        value=gdf,
        error=float(np.nanmax(out.error[idx])) if idx.size else None,
        confidence=1.0 - b,
        mechanism="gaussian_cgp + pnn" if kind == "cgp" else "planar_laplace + pnn",
        params={**params, "spend": spend},
        kind=_filter_kind(bound.session),
        metric=("floor", out.r_min),
        r_min=out.r_min,
        charges=_filter_units(bound, kind, amount, uniques[idx]),
        excluded=uniques[~adm].tolist(),
        query_id=qid,
    )
    gdf.attrs["geopriv"] = res.to_attr()
    return gdf


def _hulls_to_input_crs(geoms: Any, crs_m: Any, crs_in: Any) -> Any:
    """Project the released hulls back to the input CRS; a hull that cannot be is None.

    The users were charged already (noise was drawn), so a hull whose noisy anchors fall outside
    the input CRS's valid area (small amounts on lon/lat data) must not turn into an error
    that discards every answer: it is returned as None, with a warning.
    """
    import warnings

    from gpframe.errors import CRSError, GpframeWarning
    from gpframe.geo import project_geometry

    try:
        return project_geometry(geoms, crs_m, crs_in)
    except CRSError:
        pass
    out = []
    for g in geoms.array:  # rare path: one geometry at a time to find the failures
        try:
            out.append(project_geometry(g, crs_m, crs_in))
        except CRSError:
            out.append(None)
    n_bad = sum(g is None for g in out)
    warnings.warn(
        f"{n_bad} private hull(s) lie outside the valid area of the input CRS and are returned "
        "as None (their users were charged); use a larger amount, or to_crs= a metric CRS.",
        GpframeWarning,
        stacklevel=3,
    )
    import geopandas as gpd

    return gpd.GeoSeries(out, index=geoms.index, crs=crs_in)


# ---------------------------------------------------------------------------------------------
# nearest users


def nearest_users(
    bound: Any,
    point: Any,
    k: int,
    *,
    rho: float | None = None,
    eps: float | None = None,
    method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
    rounds: int = 10,
    split: Literal["doubling", "even"] = "doubling",
    beta: float = 0.1,
    component: Any = None,
    reduce: str | None = None,
    progress: bool | None = None,
    rng: Any = None,
    on_exhausted: Literal["exclude", "raise"] = "exclude",
    dry_run: bool = False,
) -> Any:
    """Find the k users nearest to ``point``, one point per user.

    See ``docs/operations/nearest_users.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026),
    Alg. 8.

    Parameters
    ----------
    bound : gpframe.frame.accessor.GeoPriv
    point : shapely Point, (x, y) or one-row GeoSeries
    k : int
    rho, eps : float
        Allocation per user (``rho`` on a CGP session, ``eps`` on a GP session).
    method : {"pt", "dist", "pt-elim", "dist-elim"}
    rounds, split : int, {"doubling", "even"}
    beta : float
        β/2 eliminations, β/2 final selection.
    component, reduce
        Which row is each user's point (see
        :func:`gpframe.queries.range_count.select_component`).
    progress : bool or None
        tqdm bar over the stages (budget check, elimination; None: on in a terminal or notebook).
    rng : BitSource or None

    Returns
    -------
    NearestResult
        ``value`` the k user ids (nearest first); ``charges`` / ``allocations`` per user (users
        dropped early pay less: ``saved``); ``error`` 0 when elimination isolated exactly k users.

    Examples
    --------
    >>> import gpframe as gp
    >>> from gpframe.ledger import Session
    >>> df = pd.DataFrame({"boat": [1, 2, 3, 4], "x": [500_000.0, 500_010.0, 530_000.0, 560_000.0],
    ...                    "y": [4_500_000.0] * 4})
    >>> s = Session(budget=gp.CGP(rho=1e-2))
    >>> res = nearest_users(df.geopriv(s, user="boat", x="x", y="y", crs="EPSG:32618"),
    ...                     (500_000.0, 4_500_000.0), 2, rho=1e-3)
    >>> sorted(res.value), res.saved > 0
    ([1, 2], True)
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(
            nearest_users,
            locals(),
            "nearest_users",
            adaptive=method.endswith("-elim"),
            error=_bound(bound, rho, eps, "nearest_users"),
            least=_pb.least_for(
                bound.session, True, lambda: _amount(bound.session, rho, eps, "nearest_users")[1]
            ),
        )
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(nearest_users, locals())
    from gpframe.queries.elimination import split_fractions
    from gpframe.queries.nearest import METHODS, nearest_users_arrays
    from gpframe.queries.range_count import select_component

    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    fk = _filter_kind(bound.session)
    kind, amount, _ = _amount(bound.session, rho, eps, "nearest_users")
    if kind != fk:
        raise InvalidInputError(
            f"this session's filters are {fk.upper()}: pass "
            f"{'rho' if fk == 'cgp' else 'eps'}=... for nearest_users. {_NOTHING}"
        )
    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    split_fractions(split, rounds)
    b = probability(beta)
    p = bound.projected
    q = _point_m(point, p)
    users_all = np.asarray(p.users)
    pos = select_component(
        bound.frame,
        users_all,
        component,
        reduce,
        operation="nearest_users",
        skip=(bound.user, *bound.protected),
    )
    if pos.size == 0:
        raise InvalidInputError(f"the selected component has no rows. {_NOTHING}")
    users = users_all[pos]
    from gpframe.queries.knn import _check_extent

    # a query point beyond ±2**40 m was refused by the sampler inside the reservation (charged)
    _check_extent(p.xy[pos], q[None, :])
    if len(pd.unique(users)) != users.size:
        raise InvalidInputError(
            "several rows per user: nearest_users reads one point per user; select it with "
            f"component=... or reduce='last' (docs/ledger.md). {_NOTHING}"
        )
    from gpframe.queries.knn import check_k

    kk = check_k(k)
    if kk > users.size:
        raise InvalidInputError(f"k={k!r} exceeds the {users.size} users. {_NOTHING}")
    led = bound.session.ledger
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    from gpframe.queries.elimination import check_method_parts

    # every admitted user's parts come from ``amount`` at the ledger's unit, known now: check
    # them (too small to split, outside the wrappers' ranges) before reserving
    checks = dict(kind=kind, method=method, rounds=rounds, split=split, beta=b, unit=unit,
                  scale_max=p.scale_max)  # fmt: skip
    check_method_parts(amount, **checks)
    from gpframe.ledger.charges import ledger_keys
    from gpframe.queries.nearest import (
        admitted_allocations,
        check_admitted,
        nearest_result,
        refuse_if_fewer_can_pay,
    )
    from gpframe.queries.progress import Stages

    with Stages(progress, "nearest_users", 2) as bar:
        refuse_if_fewer_can_pay(bound.session, ledger_keys(users), amount, kk)
        bar.step("budget check")
        params = {"method": method, "rounds": rounds, "split": split, "beta": b, "k": kk,
                  "point_m": q.tolist(), "crs_m": p.crs_m.to_string(),
                  "scale_max": float(p.scale_max),
                  "noise_inflation": float(p.noise_inflation)}  # fmt: skip

        def allocations(r: Any) -> np.ndarray:
            return admitted_allocations(r.admitted, amount)

        def check(r: Any) -> None:
            check_admitted(r.admitted, amount, kk, checks)

        def compute(r: Any) -> Charge[Any]:
            out = nearest_users_arrays(p.xy[pos], q, kk, kind=kind, amount=allocations(r),
                                       method=method, rounds=rounds, split=split, beta=b, unit=unit,
                                       scale_max=p.scale_max, rng=rng)  # fmt: skip
            return Charge(out, out.charges)

        ran = run(bound.session, ledger_keys(users), amount, notion="metric",
                  query="nearest_users", params=params, check=check, compute=compute)  # fmt: skip
        bar.step("elimination")
    return nearest_result(ran.value, ran.admitted, users, params=params, beta=b, kind=kind,
                          fkind=fk, query_id=ran.query_id)  # fmt: skip
