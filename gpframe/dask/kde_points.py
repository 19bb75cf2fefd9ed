"""``ddf.geopriv(...).kde``: the pandas face's private KDE at query points, one partition a task.

See ``docs/beyond-one-machine.md`` and ``docs/operations/kde.md``; Liang & Yi, 'Adaptive Privacy
Budgeting' (2026), Alg. 7. As for ``range_count``, each user's one point (``component=``) is
selected on the partition that holds all of the user's rows, and the elimination is
non-interactive (a user's rounds depend on that user's own noisy values only): for each query
point, every partition runs :func:`gpframe.queries.kde.kde_point` on its users with the reserved
allocations and the query's union-bound ``n`` (the users queried over all partitions), so each
user's noise, stopping round and error width have the law of one call over all users. The
client adds the partitions' contributions, counts and error terms; the charges are per user.
Noise and charges are the pandas face's (``dist``: the distance, ``pt-elim``: the point, at each
round's part; a user stopped at round r pays the parts of the rounds run). The ``pt`` baseline
is one reservation for all the query points: every partition releases its users' points once
(:func:`gpframe.dask.kde.release_points`, as ``kde_raster`` does; 16 bytes a user come back)
and the client evaluates the kernel sums and the error at every query point from them
(:func:`gpframe.queries.kde.kde_points_pt`, post-processing). Charge: the allocation once.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import GpframeInternalError
from gpframe.queries import preview_bounds as _pb
from gpframe.queries.kde_bounds import kde_points_result

__all__ = ["KdeOut", "kde", "kde_partition"]

_NOTHING = "Nothing was charged."
METHODS = ("pt", "dist", "pt-elim", "dist-elim")


@dataclass(frozen=True)
class KdeTask:
    """The public parameters every task gets (never the session)."""

    kind: str
    method: str
    bandwidth_m: float
    rounds: int
    split: str
    beta: float
    nu_m: Any
    unit: Fraction
    scale_max: float


@dataclass(frozen=True)
class KdeOut:
    """One partition's released sums at one query point and its users' charges (ground units)."""

    total: float = 0.0  # Σ of the released kernel contributions
    err_sum: float = 0.0  # L_K·Σ w + n_far·cutoff, the error's numerator
    clipped: bool = False  # the partition's own error reached 1 (its numerator is unknown)
    n_queried: int = 0
    n_far: int = 0
    n_near: int = 0
    charges: Any = None
    hist: Any = None
    saving: Fraction = Fraction(0)
    n_calls: int = 0
    r_min: float = 1.0


def kde_partition(
    prepared: Any, i: int, task: KdeTask, q_m: Any, alloc: Any, want: str | None, rng: Any,
    n_union: int,
) -> KdeOut:  # fmt: skip
    """Run one query point's KDE on one partition's selected users (a worker)."""
    from gpframe.dask.partitions import check_same_users, worker_rng
    from gpframe.queries.kde import kde_point

    if len(alloc) == 0:
        return KdeOut(charges=np.zeros(0, dtype=object))
    check, xy = prepared
    if want is not None:  # points the client held came in the graph: nothing to recompute
        check_same_users(i, check.users, check.counts, want)
    out = kde_point(
        xy, q_m, bandwidth_m=task.bandwidth_m, kind=task.kind,  # type: ignore[arg-type]
        amount=alloc, method=task.method, rounds=task.rounds, split=task.split, beta=task.beta,
        nu_m=task.nu_m, unit=task.unit, scale_max=task.scale_max, n_union=n_union,
        rng=worker_rng(rng),
    )  # fmt: skip
    nq = out.n_queried
    return KdeOut(
        total=float(np.sum(out.contributions)), err_sum=float(out.error) * nq,
        clipped=bool(nq and out.error >= 1.0), n_queried=nq, n_far=out.n_far,
        n_near=out.n_near, charges=out.charges, hist=np.asarray(out.rounds_histogram),
        saving=Fraction(out.saving), n_calls=int(out.n_calls), r_min=float(out.r_min),
    )  # fmt: skip


def kde(
    bound: Any, at: Any, *, bandwidth_m: Any, rho: Any, eps: Any, method: str, rounds: int,
    split: str, beta: float, nu_m: Any, component: Any, reduce: Any, rng: Any,
    on_exhausted: str = "exclude", dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run kde on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.kde`)."""
    import pyproj

    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.dask.one_point import one_point_pass
    from gpframe.dask.partitions import Component, metric_kind, spawn_rng
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import Charge, PreviewStop, end_preview, run
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries import kde as _k
    from gpframe.queries.elimination import check_method_parts
    from gpframe.queries.kde_bounds import query_points
    from gpframe.queries.range_count import check_options

    # -- on the client, before anything is computed or reserved
    session = bound.session
    rng = resolve_rng(rng)
    check_options(method, rounds, split, beta)
    check_on_exhausted(on_exhausted)
    rounds = int(rounds)
    b = _k.check_length(bandwidth_m, "bandwidth_m")
    nu = None if nu_m is None else _k.check_length(nu_m, "nu_m")
    kind, amount = metric_kind(session, rho, eps, ".kde(at, bandwidth_m=500, rho=1e-5)")
    cols = bound.cols

    # -- first pass: whole users per partition, one point each; nothing drawn
    fp = one_point_pass(bound.ddf, cols, Component(component, reduce, operation="kde"),
                        "the selected component has no rows. Check "
                        f"component={component!r}.", fetch=True)  # fmt: skip
    users, offsets, ref, parts = fp.users, fp.offsets, fp.ref, fp.parts
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    q_m, q_series, many = query_points(at, pyproj.CRS.from_wkt(ref.crs_in), crs_m)
    _k.preflight(kind, amount, float(ref.scale_max), method)
    lu = session.ledger.units["metric"]
    unit = Fraction(1) / lu.scale
    checks = dict(kind=kind, method=method, rounds=rounds, split=split, beta=beta, unit=unit,
                  scale_max=ref.scale_max)  # fmt: skip
    check_method_parts(lu.to_fraction(lu.up(amount)), **checks)
    params = {"method": method, "bandwidth_m": b, "rounds": rounds, "split": split,
              "beta": float(beta), "nu_m": _k.NU_FACTOR * b if nu is None else float(nu),
              "crs_m": crs_m.to_string(), "scale_max": float(ref.scale_max),
              "noise_inflation": float(ref.noise_inflation),
              ("rho" if kind == "cgp" else "eps"): float(amount)}  # fmt: skip
    task = KdeTask(kind=kind, method=method, bandwidth_m=b, rounds=rounds, split=split,
                   beta=float(beta), nu_m=nu, unit=unit, scale_max=ref.scale_max)  # fmt: skip
    wants = fp.wants()
    keys = ledger_keys(users)

    def allocations(r: Any) -> np.ndarray:
        adm = np.asarray(r.admitted, dtype=bool)
        units = np.where(adm, r.allocation_units, 0)
        uniq, inv = np.unique(units, return_inverse=True)
        return np.array([lu.to_fraction(int(u)) for u in uniq], dtype=object)[inv]

    def check(r: Any) -> None:
        check_method_parts(allocations(r), **checks)

    def one(j: int) -> Any:
        def compute(r: Any) -> Charge[Any]:
            alloc = allocations(r)
            n_union = max(int((alloc != 0).sum()), 1)
            # a child stream per (query point, partition): no two tasks of a call share bits
            calls = [(d, i, task, q_m[j], alloc[offsets[i]:offsets[i + 1]], wants[i],
                      spawn_rng(rng, j * len(parts) + i), n_union)
                     for i, d in enumerate(parts)]  # fmt: skip
            outs = fp.release(kde_partition, calls)
            charges = np.concatenate([o.charges for o in outs])
            if charges.shape != alloc.shape:
                raise GpframeInternalError("the partitions returned charges for other users.")
            return Charge((outs, alloc), charges)

        return run(session, keys, amount, notion="metric", query="kde",
                   params={**params, "q_m": q_m[j].tolist()}, check=check,
                   compute=compute)  # fmt: skip

    def released_once(r: Any) -> Charge[Any]:
        # ``pt``: every user's point released once on its worker (the kde_raster release), the
        # kernel sums at every query point are post-processing on the client
        from gpframe.dask.kde import PointTask, merge, release_points

        alloc = allocations(r)
        units = np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0)
        codes, values, _ = _k._alloc_groups(units, lu)
        ptask = PointTask(kind=kind, unit=unit, scale_max=ref.scale_max)

        def privatize() -> Any:
            calls = [(d, i, ptask, values, codes[offsets[i]:offsets[i + 1]], wants[i],
                      spawn_rng(rng, i)) for i, d in enumerate(parts)]  # fmt: skip
            return merge(fp.release(release_points, calls), np.diff(offsets), kind)

        out = _k.kde_points_pt(np.zeros((users.size, 2)), q_m, bandwidth_m=b, kind=kind,
                               amount=alloc, beta=float(beta), unit=unit,
                               scale_max=ref.scale_max, rng=rng, privatize=privatize)  # fmt: skip
        return Charge((out, alloc), out.privatized.charges)

    def go(**_: Any) -> Any:  # the reservations and releases (on_exhausted: see settle)
        charges = np.full(users.size, Fraction(0), dtype=object)
        allocs = np.full(users.size, Fraction(0), dtype=object)
        admitted_any = np.zeros(users.size, dtype=bool)
        hist = np.zeros(rounds + 1 if method.endswith("-elim") else 2, dtype=np.int64)
        rows: list[dict[str, Any]] = []
        qids: list[str] = []
        r_min = 1.0
        if method == "pt":  # one reservation for every query point, as on the pandas face
            try:
                ran = run(session, keys, amount, notion="metric", query="kde",
                          params={**params, "n_points": len(q_m)}, check=check,
                          compute=released_once)  # fmt: skip
            except PreviewStop:
                ran = None
            if ran is not None:
                out, alloc = ran.value
                qids.append(ran.query_id)
                admitted_any = np.asarray(ran.admitted, dtype=bool)
                charges, allocs = out.privatized.charges, alloc
                r_min = out.privatized.r_min
                hist[1] = out.n_queried
                rows = [dict(kde=float(out.values[j]), error=float(out.errors[j]), n_far=0,
                             n_near=out.n_queried, saving=0.0, query_id=ran.query_id)
                        for j in range(len(q_m))]  # fmt: skip
        for j in range(len(q_m) if method != "pt" else 0):  # one query per point
            try:
                ran = one(j)
            except PreviewStop:  # a dry run: this point's reservation is planned, go on
                continue
            outs, alloc = ran.value
            admitted_any |= np.asarray(ran.admitted, dtype=bool)
            charges, allocs = charges + np.concatenate([o.charges for o in outs]), allocs + alloc
            nq = sum(o.n_queried for o in outs)
            n_far = sum(o.n_far for o in outs)
            # the error bound of one call over all users (kde_point's formula); a partition
            # whose own bound reached 1 hides its numerator: state the trivial bound 1
            err = (
                1.0
                if any(o.clipped for o in outs)
                else (min(1.0, sum(o.err_sum for o in outs) / nq) if nq else 0.0)
            )
            for o in outs:
                if o.hist is not None:
                    hist[: o.hist.size] += o.hist
                r_min = max(r_min, o.r_min)
            qids.append(ran.query_id)
            rows.append(dict(kde=sum(o.total for o in outs) / nq if nq else 0.0, error=err,
                             n_far=n_far, n_near=sum(o.n_near for o in outs),
                             saving=float(sum(o.saving for o in outs)),
                             query_id=ran.query_id))  # fmt: skip
        end_preview()  # a dry run planned every query point: nothing to build
        return kde_points_result(
            rows, q_series, keys, admitted_any, many=many, beta=beta, kind=kind, method=method,
            params=params, n_points=len(q_m), hist=hist, r_min=r_min, charges=charges,
            allocs=allocs, qids=qids,
        )  # fmt: skip

    return settle(session, "kde", go, on_exhausted=on_exhausted, dry_run=dry_run,
                  adaptive=method.endswith("-elim"), **_pb.hooks(session, ref.scale_max,
                                                                 _pb.kde_error))  # fmt: skip
