"""``ddf.geopriv(...).kde_raster``: each user's point released once on its partition's worker.

See ``docs/beyond-one-machine.md`` and ``docs/operations/kde.md``; Liang & Yi, 'Adaptive Privacy
Budgeting' (2026), Alg. 7. The reservation, the checks and the charge are the pandas face's
(:func:`gpframe.queries.kde.raster_from_points`, through the one driver); only the release moves:
every partition runs :func:`gpframe.queries.kde.privatize_once` on its users' selected points
with the reserved allocations and its worker's own OS CSPRNG, and sends the released points back.
The raster is post-processing of the released points on the client, as on the pandas face.
Noise: one release per user at the allocation (CGP σ = (1 + √2·g/r_min)·k/√(2ρ) per coordinate;
GP planar Laplace). Charge: the allocation's guarantee, once per user.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np

from gpframe.queries import preview_bounds as _pb

__all__ = ["kde_raster", "release_points"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class PointTask:
    """The public parameters every release task gets (never the session)."""

    kind: str
    unit: Fraction
    scale_max: float


def release_points(
    prepared: Any, i: int, task: PointTask, values: list[Fraction], codes: np.ndarray,
    want: str | None, rng: Any,
) -> Any:  # fmt: skip
    """Release one partition's selected points once each (runs on a worker).

    ``prepared`` is the partition's first pass (:func:`gpframe.dask.partitions.prepare`).
    """
    from gpframe.dask.partitions import check_same_users, worker_rng
    from gpframe.queries.kde import privatize_once

    if len(codes) == 0:
        return None
    check, xy = prepared
    if want is not None:  # points the client held came in the graph: nothing to recompute
        check_same_users(i, check.users, check.counts, want)
    return privatize_once(xy, values, kind=task.kind, unit=task.unit,  # type: ignore[arg-type]
                          scale_max=task.scale_max, rng=worker_rng(rng), codes=codes)  # fmt: skip


def merge(pvs: list[Any], sizes: np.ndarray, kind: str) -> Any:
    """Merge the partitions' releases into one :class:`~gpframe.queries.kde.Privatized`."""
    from gpframe.queries.kde import Privatized

    n = int(sizes.sum())
    xy, sigma = np.full((n, 2), np.nan), np.full(n, np.nan)
    group = np.full(n, -1, dtype=np.int64)
    charges: list[Fraction] = []
    allocs: list[Fraction] = []
    releases = []
    r_min = 1.0
    off = 0
    for pv, size in zip(pvs, sizes.tolist(), strict=True):
        if pv is not None and size:
            sl = slice(off, off + size)
            xy[sl], sigma[sl] = pv.xy, pv.sigma
            group[sl] = np.where(pv.group >= 0, pv.group + len(charges), -1)
            for idx, rel in pv.releases:
                releases.append((np.arange(size)[idx] + off, rel))
            charges += pv.group_charges
            allocs += pv.group_allocations
            r_min = max(r_min, pv.r_min)
        off += size
    return Privatized(xy, sigma, group, charges, allocs, group >= 0, releases, kind, r_min)


def kde_raster(
    bound: Any, *, bandwidth_m: float, cell_m: float, bounds: Any, rho: Any, eps: Any,
    correct: bool, component: Any, reduce: Any, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run kde_raster on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.kde_raster`)."""
    import pyproj

    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.dask.one_point import one_point_pass
    from gpframe.dask.partitions import Component, metric_kind, spawn_rng
    from gpframe.ledger.charges import ledger_key_array
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries import kde as _k
    from gpframe.queries.kde_bounds import bounds_m

    # -- on the client, before anything is computed or reserved
    session = bound.session
    rng = resolve_rng(rng)
    h = _k.check_length(bandwidth_m, "bandwidth_m")
    c = _k.check_length(cell_m, "cell_m")
    check_on_exhausted(on_exhausted)
    kind, amount = metric_kind(session, rho, eps, ".kde_raster(bandwidth_m=500, rho=1e-5)")
    cols = bound.cols

    # -- first pass: whole users per partition, one point each; nothing drawn
    fp = one_point_pass(bound.ddf, cols, Component(component, reduce, operation="kde_raster"),
                        f"the selected component has no rows. Check component={component!r}.",
                        fetch=True)  # fmt: skip
    users, offsets, ref, parts = fp.users, fp.offsets, fp.ref, fp.parts
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    crs = SimpleNamespace(crs_in=pyproj.CRS.from_wkt(ref.crs_in), crs_m=crs_m)
    bm = bounds_m(bounds, crs) if bounds is not None else None
    lu = session.ledger.units["metric"]
    task = PointTask(kind=kind, unit=Fraction(1) / lu.scale,
                     scale_max=ref.scale_max)  # fmt: skip
    wants = fp.wants()
    sizes = np.diff(offsets)

    def privatize(values: list[Fraction], codes: np.ndarray) -> Any:
        calls = [(d, i, task, values, codes[offsets[i] : offsets[i + 1]], wants[i],
                  spawn_rng(rng, i)) for i, d in enumerate(parts)]  # fmt: skip
        return merge(fp.release(release_points, calls), sizes, kind)

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        return _k.raster_from_points(
            session, ledger_key_array(users), np.zeros((len(users), 2)), bandwidth_m=h, cell_m=c,
            bounds_m=bm, kind=kind, amount=amount, correct=correct, scale_max=ref.scale_max,
            crs_m=crs_m.to_string(), rng=rng, bandwidth_arg=bandwidth_m,
            noise_inflation=ref.noise_inflation, privatize=privatize,
        )  # fmt: skip

    return settle(
        session,
        "kde_raster",
        go,
        on_exhausted=on_exhausted,
        dry_run=dry_run,
        **_pb.hooks(session, ref.scale_max, _pb.kde_raster_sigma, least=False),
    )
