"""``ddf.geopriv(...).convex_hull``: one private convex hull per user, on the user's partition.

See ``docs/beyond-one-machine.md`` and ``docs/operations/convex_hull.md``; Liang & Yi,
'Concentrated Geo-Privacy' (2023), Alg. 4. The private hull is per user (a user's noisy centre,
radius, anchors' nearest neighbours and released anchors read that user's rows only), so every
partition runs :func:`gpframe.queries.hull.private_hulls` on its users with the reserved amount,
the projection's ``scale_max`` and its worker's own source, and returns the metric-CRS hulls
and numbers; the client projects them back and builds the output with the release boundary.
Noise and charge are the pandas face's: ρ (or ε) once per admitted user, split ρ/20 (⅔ centre,
⅓ radius), α·ρ₁ to the PNN calls, (1 − α)·ρ₁ to the anchors' release; a GP run on a CGP budget
costs ε²/2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, GpframeWarning, InvalidInputError
from gpframe.queries import preview_bounds as _pb

__all__ = ["HullOut", "convex_hull", "hull_partition"]

_NOTHING = "Nothing was charged."
_OUTPUT = ("k", "radius_m", "error_m", "fallback")


@dataclass(frozen=True)
class HullTask:
    """The public parameters every task gets (never the session)."""

    cols: Any
    kind: str
    amount: Fraction
    beta: float
    hull_kw: dict[str, Any]
    scale_max: Fraction


@dataclass(frozen=True)
class HullOut:
    """One partition's hulls (metric CRS) and numbers per user (sorted), and its charges."""

    hulls: Any = None
    k: Any = None
    radius: Any = None
    error: Any = None
    fallback: Any = None
    charges: Any = None  # per user, in the mechanism's units
    spend: Any = None
    r_min: float = 1.0


def hull_partition(
    part: pd.DataFrame, i: int, task: HullTask, admitted: np.ndarray, want: str, rng: Any
) -> HullOut:
    """Run the private hull of each admitted user of one partition (a worker)."""
    import warnings

    from gpframe.dask.partitions import located_users, worker_rng
    from gpframe.queries.hull import private_hulls

    if len(admitted) == 0:
        return HullOut()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpframeWarning)  # the client warns once
        # sorted codes: the users' order of the first pass (and of the reservation)
        _, p, users, codes = located_users(part, task.cols, i, want)
        out = private_hulls(
            p.xy, codes, kind=task.kind, amount=task.amount,  # type: ignore[arg-type]
            n_users=len(users), admitted=admitted, beta=task.beta, scale_max=task.scale_max,
            rng=worker_rng(rng), **task.hull_kw,
        )  # fmt: skip
    return HullOut(
        hulls=out.hulls, k=np.asarray(out.k), radius=np.asarray(out.radius),
        error=np.asarray(out.error), fallback=np.asarray(out.fallback), charges=out.charges,
        spend=out.spend, r_min=float(out.r_min),
    )  # fmt: skip


def _to_input_crs(geoms: Any, crs_m: Any, crs_in: Any) -> Any:
    """Project the released hulls to the input CRS; a hull that cannot be is None (warned).

    As on the pandas face: the users were charged already, so one hull outside the input CRS's
    valid area (small amounts on lon/lat data) must not discard every answer.
    """
    import warnings

    import geopandas as gpd

    from gpframe.errors import CRSError
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
    warnings.warn(
        f"{sum(g is None for g in out)} private hull(s) lie outside the valid area of the input "
        "CRS and are returned as None (their users were charged); use a larger amount, or "
        "to_crs= a metric CRS.",
        GpframeWarning,
        stacklevel=4,
    )
    return gpd.GeoSeries(out, index=geoms.index, crs=crs_in)


def client_checks(
    bound: Any, *, rho: Any, eps: Any, beta: float, k: Any, alpha: Any, k_rule: Any,
    radius_floor_m: Any, rng: Any, on_exhausted: str,
) -> tuple[Any, str, str, Any, float, dict[str, Any]]:  # fmt: skip
    """Check convex_hull's arguments on the client, before anything is computed or reserved.

    Returns ``(rng, filter kind, kind, amount, beta, PCH keywords)``; shared by the whole-frame
    and the split (``partition=``) forms.
    """
    from gpframe.accounting.amounts import metric_amount, probability
    from gpframe.dask.driver import check_on_exhausted
    from gpframe.ledger.charges import filter_kind
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries import hull as _h

    rng = resolve_rng(rng)
    fk = filter_kind(bound.session, "convex_hull")
    kind, amount = metric_amount(rho, eps, example=".convex_hull(..., rho=1e-5)", filter_kind=fk)
    b = probability(beta)
    check_on_exhausted(on_exhausted)
    kw = {"alpha": alpha, "k": k, "k_rule": k_rule, "radius_floor_m": radius_floor_m}
    # the pandas face's dry run of every parameter check on one tiny input (draws nothing)
    _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=amount,
                     admitted=np.zeros(1, bool), beta=b, **kw)  # fmt: skip
    if bound.cols.user in _OUTPUT:
        raise InvalidInputError(
            f"user={bound.cols.user!r} names a column of the convex_hull output; rename it. "
            f"{_NOTHING}"
        )
    return rng, fk, kind, amount, b, kw


def convex_hull(
    bound: Any, *, rho: Any, eps: Any, beta: float, k: Any, alpha: Any, k_rule: Any,
    radius_floor_m: Any, rng: Any, on_exhausted: str = "exclude", dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run convex_hull on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.convex_hull`)."""
    import dask
    import geopandas as gpd
    import pyproj

    from gpframe.accounting.filters import charge_for
    from gpframe.dask.driver import settle
    from gpframe.dask.partitions import by_user, check_partition, combine, digest, spawn_rng
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.queries import hull as _h
    from gpframe.release import release_frame, warn_dropped
    from gpframe.results import HullResult

    # -- on the client, before anything is computed or reserved
    session, cols = bound.session, bound.cols
    rng, fk, kind, amount, b, kw = client_checks(
        bound, rho=rho, eps=eps, beta=beta, k=k, alpha=alpha, k_rule=k_rule,
        radius_floor_m=radius_floor_m, rng=rng, on_exhausted=on_exhausted,
    )  # fmt: skip

    # -- first pass: whole users per partition, validated and counted; nothing drawn
    data, shuffled = by_user(bound.ddf, cols)
    if shuffled:
        data = data.persist()
    parts = data.to_delayed()
    checks = list(dask.compute(*[dask.delayed(check_partition)(d, cols) for d in parts]))
    users, counts, offsets, ref = combine(checks)
    ks = Fraction(float(ref.scale_max))
    # again at the projection's scale factor, then the checks PCH makes after its first draws,
    # for every k and n the run can meet
    _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=amount,
                     admitted=np.zeros(1, bool), beta=b, scale_max=ks, **kw)  # fmt: skip
    _h.hull_preflight(kind, amount, b, alpha, k, radius_floor_m, counts, float(ref.scale_max))
    warn_dropped(bound.dropped, "convex_hull", stacklevel=3)
    crs_m, crs_in = pyproj.CRS.from_wkt(ref.crs_m), pyproj.CRS.from_wkt(ref.crs_in)
    params = {"beta": b, "k": k, "alpha": float(alpha), "k_rule": k_rule,
              "radius_floor_m": float(radius_floor_m), "crs_m": crs_m.to_string(),
              "scale_max": float(ref.scale_max),
              "noise_inflation": float(ref.noise_inflation)}  # fmt: skip
    task = HullTask(cols=cols, kind=kind, amount=amount, beta=b, hull_kw=kw, scale_max=ks)
    wants = [digest(c.users, c.counts) for c in checks]

    def compute(r: Any) -> Charge[Any]:
        adm = np.asarray(r.admitted, dtype=bool)
        tasks = [
            dask.delayed(hull_partition)(
                d, i, task, adm[offsets[i] : offsets[i + 1]], wants[i], spawn_rng(rng, i)
            )
            for i, d in enumerate(parts)
        ]
        outs = list(dask.compute(*tasks))
        charges = np.concatenate([o.charges for o in outs if o.charges is not None]
                                 or [np.zeros(0, dtype=object)])  # fmt: skip
        if charges.shape != adm.shape:
            raise GpframeInternalError("the partitions returned charges for other users.")
        return Charge(outs, np.where(adm, charges, 0))

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        ran = run(session, ledger_keys(users), amount, notion="metric", kind=kind,
                  query="convex_hull", params=params, compute=compute)  # fmt: skip
        # -- the charge is committed: build the output and its Result
        outs, adm = [o for o in ran.value if o.hulls is not None], ran.admitted

        def cat(name: str) -> np.ndarray:
            return np.concatenate([np.asarray(getattr(o, name)) for o in outs])

        idx = np.flatnonzero(adm)
        geoms = gpd.GeoSeries(cat("hulls")[idx], crs=crs_m)
        if not crs_m.equals(crs_in):
            geoms = _to_input_crs(geoms, crs_m, crs_in)
        # one row per user, from nothing: the user id (public), the released hull and numbers
        kept = users[idx]
        rows = pd.DataFrame({cols.user: kept}, index=pd.Index(kept, name="user"))
        err = cat("error")[idx]
        gdf = release_frame(
            rows, public=(cols.user,),
            released={"k": cat("k")[idx], "radius_m": cat("radius")[idx], "error_m": err,
                      "fallback": cat("fallback")[idx]},
            geometry=np.asarray(geoms.array), crs=crs_in, what="convex_hull",
        )  # fmt: skip
        r_min = max([1.0, *(o.r_min for o in outs)])
        spend = {name: float(v) for name, v in outs[0].spend.items()}
        c = float(charge_for(fk, kind, amount))
        res = HullResult(
            value=gdf,
            error=float(np.nanmax(err)) if idx.size else None,
            confidence=1.0 - b,
            mechanism="gaussian_cgp + pnn" if kind == "cgp" else "planar_laplace + pnn",
            params={**params, "spend": spend},
            kind=fk,
            metric=("floor", r_min),
            r_min=r_min,
            charges=pd.Series(np.full(idx.size, c), index=pd.Index(kept, name="user")),
            excluded=users[~adm].tolist(),
            query_id=ran.query_id,
        )
        gdf.attrs["geopriv"] = res.to_attr()
        return gdf

    return settle(
        session,
        "convex_hull",
        go,
        on_exhausted=on_exhausted,
        dry_run=dry_run,
        **_pb.hooks(
            session,
            ref.scale_max,
            _pb.hull_error_known,
            least=False,
            kind=kind,
            amount=amount,
            counts=(ledger_keys(users), counts),
        ),
    )
