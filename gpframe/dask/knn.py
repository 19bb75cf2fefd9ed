"""``ddf.geopriv(...).knn``: each user's k private nearest neighbours, on its own partition.

See ``docs/beyond-one-machine.md`` and ``docs/operations/knn.md``; Liang & Yi, 'Concentrated
Geo-Privacy' (2023), Alg. 2. k-PNN is per user (a user's calls read that user's rows only), so
every partition runs :func:`gpframe.queries.knn.knn_indices` on its users with the reserved
amount and its worker's own OS CSPRNG, and builds its rows of the output with the release
boundary (row labels, declared-public columns, ``knn_rank``). Noise and charge are the pandas
face's: ρ (or ε) once per admitted user (PNN calls at ε = √(2ρ/k) per call; GP ε/k); a GP run on
a CGP budget costs ε²/2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, GpframeWarning, InvalidInputError
from gpframe.queries import preview_bounds as _pb

__all__ = ["KnnOut", "knn", "knn_partition"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class KnnTask:
    """The public parameters every task gets (never the session)."""

    cols: Any
    point_m: Any
    k: int
    kind: str
    amount: Fraction
    gamma0: float
    scan_order: str
    max_cycles: int
    beta: float
    scale_max: Fraction


@dataclass(frozen=True)
class KnnOut:
    """One partition's selected rows (the output frame) and its users' charges and bounds."""

    frame: Any = None
    labels: Any = None  # per user (sorted), the selected rows' labels in rank order
    charges: Any = None  # per user, in the mechanism's units
    error: Any = None
    capped: int = 0
    r_min: float = 1.0


def knn_partition(
    part: pd.DataFrame, i: int, task: KnnTask, admitted: np.ndarray, want: str, rng: Any
) -> KnnOut:
    """Select the k private nearest rows of each admitted user of one partition (a worker)."""
    import warnings

    from gpframe.dask.partitions import located_users, worker_rng
    from gpframe.queries.knn import knn_indices
    from gpframe.release import protected_columns, release_frame

    if len(admitted) == 0:
        return KnnOut()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpframeWarning)  # the client warns once
        frame, p, users, codes = located_users(part, task.cols, i, want)
        out = knn_indices(
            p.xy, codes, task.point_m, task.k, kind=task.kind,  # type: ignore[arg-type]
            amount=task.amount, n_users=len(users), admitted=admitted, gamma0=task.gamma0,
            scan_order=task.scan_order, max_cycles=task.max_cycles, beta=task.beta,
            scale_max=task.scale_max, rng=worker_rng(rng),
        )  # fmt: skip
        live = np.flatnonzero(admitted)
        pos = np.concatenate([out.rows[u] for u in live] or [np.empty(0, np.int64)])
        ranks = np.concatenate([np.arange(1, out.k[u] + 1) for u in live]
                               or [np.empty(0, np.int64)])  # fmt: skip
        rows = release_frame(
            frame, public=task.cols.public, protected=protected_columns(frame, p.coords),
            rows=pos, released={"knn_rank": np.asarray(ranks, dtype=np.int64)}, what="knn",
        )  # fmt: skip
    labels = [list(frame.index[out.rows[u]]) if admitted[u] else None for u in range(len(users))]
    return KnnOut(
        frame=rows, labels=labels, charges=out.charges, error=np.asarray(out.error),
        capped=int(sum(int(out.capped[u].sum()) for u in live)), r_min=float(out.r_min),
    )  # fmt: skip


def _point_m(point: Any, crs_in: Any, crs_m: Any) -> np.ndarray:
    """Return the public query point (a shapely Point or (x, y), data CRS) in metres."""
    import shapely

    from gpframe.geo import project_geometry

    if not isinstance(point, shapely.Point):
        try:
            x, y = (float(v) for v in point)
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"point must be a shapely Point or (x, y) in the data's CRS on the Dask face, "
                f"got {point!r}. {_NOTHING}"
            ) from None
        point = shapely.Point(x, y)
    geom = project_geometry(point, crs_in, crs_m, name="point")
    q = np.array([geom.x, geom.y], dtype=np.float64) if not geom.is_empty else np.full(2, np.nan)
    if not np.isfinite(q).all():
        raise InvalidInputError(f"point {point!r} is empty or not finite. {_NOTHING}")
    return q


def _check_scan(gamma0: Any, max_cycles: Any) -> None:
    """Check ``gamma0`` and ``max_cycles`` as the pandas face does (public numbers)."""
    if gamma0 is not None and (
        isinstance(gamma0, (bool, np.bool_))
        or not isinstance(gamma0, (int, float, np.number))
        or not -20 <= gamma0 <= 20
    ):
        raise InvalidInputError(
            f"gamma0={gamma0!r} must be a number in [-20, 20] (units of each call's b). {_NOTHING}"
        )
    if (
        isinstance(max_cycles, bool)
        or not isinstance(max_cycles, (int, np.integer))
        or (max_cycles < 1)
    ):
        raise InvalidInputError(f"max_cycles={max_cycles!r} must be an integer >= 1. {_NOTHING}")


def client_checks(
    bound: Any, k: int, *, rho: Any, eps: Any, compat: Any, gamma0: Any, scan_order: Any,
    max_cycles: int, beta: float, rng: Any, on_exhausted: str,
) -> tuple[Any, str, str, Any, int, float, Any, Any]:  # fmt: skip
    """Check knn's arguments on the client, before anything is computed or reserved.

    Returns ``(rng, filter kind, kind, amount, k asked, beta, gamma0, scan order)``; shared by
    the whole-frame and the split (``partition=``) forms.
    """
    from gpframe.accounting.amounts import metric_amount, probability
    from gpframe.dask.driver import check_on_exhausted
    from gpframe.ledger.charges import filter_kind
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries import knn as _k
    from gpframe.release import check_reserved

    rng = resolve_rng(rng)
    fk = filter_kind(bound.session, "knn")
    kind, amount = metric_amount(rho, eps, example=".knn(..., rho=1e-5)", filter_kind=fk)
    k_asked = _k.check_k(k)
    b = probability(beta)
    _check_scan(gamma0, max_cycles)
    check_on_exhausted(on_exhausted)
    g0, order = _k.resolve_compat(compat, gamma0, scan_order)
    check_reserved(bound.cols.public, ["knn_rank"], "knn")
    return rng, fk, kind, amount, k_asked, b, g0, order


def knn(
    bound: Any, point: Any, k: int, *, rho: Any, eps: Any, compat: Any, gamma0: Any,
    scan_order: Any, max_cycles: int, beta: float, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run knn on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.knn`)."""
    import dask
    import pyproj

    from gpframe.accounting.filters import charge_for
    from gpframe.dask.driver import settle
    from gpframe.dask.partitions import by_user, check_partition, combine, digest, spawn_rng
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.queries import knn as _k
    from gpframe.release import warn_dropped
    from gpframe.results import KnnResult

    # -- on the client, before anything is computed or reserved
    session, cols = bound.session, bound.cols
    rng, fk, kind, amount, k_asked, b, g0, order = client_checks(
        bound, k, rho=rho, eps=eps, compat=compat, gamma0=gamma0, scan_order=scan_order,
        max_cycles=max_cycles, beta=beta, rng=rng, on_exhausted=on_exhausted,
    )  # fmt: skip

    # -- first pass: whole users per partition, validated and counted; nothing drawn
    data, shuffled = by_user(bound.ddf, cols)
    if shuffled:
        data = data.persist()
    parts = data.to_delayed()
    checks = list(dask.compute(*[dask.delayed(check_partition)(d, cols) for d in parts]))
    users, counts, offsets, ref = combine(checks)
    kk = min(k_asked, max(int(counts.sum()), 1))
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    q = _point_m(point, pyproj.CRS.from_wkt(ref.crs_in), crs_m)
    _k._check_extent(q)
    ks = Fraction(float(ref.scale_max))
    for n_k in np.unique(np.minimum(counts, kk)).tolist():  # calibrate before reserving
        _k.pnn_calibration(_k.call_eps(kind, amount, int(n_k), ks))
    warn_dropped(bound.dropped, "knn", stacklevel=3)
    params = {"k": kk, "gamma0": g0, "scan_order": order, "compat": compat, "beta": b,
              "max_cycles": int(max_cycles), "crs_m": crs_m.to_string(),
              "scale_max": float(ref.scale_max), "noise_inflation": float(ref.noise_inflation),
              "point_m": q.tolist()}  # fmt: skip
    task = KnnTask(cols=cols, point_m=q, k=kk, kind=kind, amount=amount, gamma0=g0,
                   scan_order=order, max_cycles=int(max_cycles), beta=b, scale_max=ks)  # fmt: skip
    wants = [digest(c.users, c.counts) for c in checks]

    def compute(r: Any) -> Charge[Any]:
        adm = np.asarray(r.admitted, dtype=bool)
        tasks = [
            dask.delayed(knn_partition)(
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
        ran = run(session, ledger_keys(users), amount, notion="metric", kind=kind, query="knn",
                  params=params, compute=compute)  # fmt: skip
        # -- the charge is committed: build the output and its Result
        outs, adm = ran.value, ran.admitted
        frames = [o.frame for o in outs if o.frame is not None]
        frame = pd.concat(frames) if len(frames) > 1 else frames[0]
        labels = [lab for o in outs if o.labels is not None for lab in o.labels]
        errors = np.concatenate([o.error for o in outs if o.error is not None])
        value = {users[u]: labels[u] for u in np.flatnonzero(adm)}
        c = float(charge_for(fk, kind, amount))
        live = [o for o in outs if o.frame is not None]
        res = KnnResult(
            value=value,
            error=float(np.nanmax(errors[adm])) if adm.any() else None,
            confidence=1.0 - b,
            mechanism="pnn (laplace_gp draws, docs/noise.md)",
            params={**params, "capped": sum(o.capped for o in outs)},
            kind=fk,
            metric=("floor", max([1.0, *(o.r_min for o in live)])),
            r_min=max([1.0, *(o.r_min for o in live)]),
            charges=pd.Series(np.full(int(adm.sum()), c), index=pd.Index(users[adm], name="user")),
            excluded=users[~adm].tolist(),
            query_id=ran.query_id,
            errors=pd.Series(errors[adm], index=pd.Index(users[adm], name="user")),
        )
        frame.attrs["geopriv"] = res.to_attr()
        return frame

    return settle(
        session,
        "knn",
        go,
        on_exhausted=on_exhausted,
        dry_run=dry_run,
        **_pb.hooks(
            session,
            ref.scale_max,
            _pb.knn_error,
            least=False,
            kind=kind,
            amount=amount,
            counts=(ledger_keys(users), counts),
        ),
    )
