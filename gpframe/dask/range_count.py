"""``ddf.geopriv(...).range_count``: the pandas face's count, one partition per task.

See ``docs/beyond-one-machine.md`` and ``docs/operations/range_count.md``; Liang & Yi, 'Adaptive
Privacy Budgeting' (2026), Alg. 4, Alg. 6. Each user's one point (``component=``) is selected on
the partition that holds all of the user's rows. The elimination is non-interactive (each user's
rounds depend on that user's own noisy values only), so every partition runs
:func:`gpframe.queries.range_count.range_count_arrays` on its users with the query's union-bound
``n`` (the users queried over all partitions): each user's noise and stopping round have the
law of one call over all users. The count, its error U, the rounds histogram and the numbers of
users eliminated are integer sums over the partitions; the charges are per user. Noise and
charges are the pandas face's (``dist``: the signed distance, ``pt``: the point; with
``*-elim`` a user decided at round r pays the parts of the rounds run).

Several regions (a GeoSeries / GeoDataFrame of zones) are validated and projected as on the
pandas face, before the ledger is touched; the first pass selects each user's point once, then
each region is one query with its own reservation and its own release tasks (a child stream per
region and partition), so K regions charge each user up to K times the allocation, exactly as
the pandas face. A GeoDataFrame's other columns are public and kept in the table of regions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries import preview_bounds as _pb
from gpframe.queries.range_count_parts import allocations_for

__all__ = ["CountOut", "count_partition", "range_count"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class CountTask:
    """The public parameters every count task gets (never the session)."""

    cols: Any
    region_m: Any
    kind: str
    method: str
    rounds: int
    split: str
    beta: float
    unit: Fraction
    scale_max: float


@dataclass(frozen=True)
class CountOut:
    """One partition's released aggregates and its users' charges (in the filter's units)."""

    estimate: int = 0
    error: int = 0
    hist: Any = None
    n_low: int = 0
    n_high: int = 0
    n_undecided: int = 0
    saving: float = 0.0
    n_calls: int = 0
    r_min: float = 1.0
    charge_table: tuple[Fraction, ...] = ()
    charge_codes: Any = None


def count_partition(
    prepared: Any, i: int, task: CountTask, alloc: Any, want: str | None, rng: Any, n_union: int
) -> CountOut:
    """Count one partition's queried users inside the region (runs on a worker).

    ``prepared`` is the partition's first pass (:func:`gpframe.dask.partitions.prepare`),
    kept on the worker; recomputed after a worker's death, it must hold the same users.
    """
    from gpframe.dask.partitions import check_same_users, worker_rng
    from gpframe.queries.range_count import range_count_arrays

    if len(alloc) == 0:
        return CountOut(charge_codes=np.zeros(0, np.int64))
    check, xy = prepared
    users = check.users
    if want is not None:  # points the client held came in the graph: nothing to recompute
        check_same_users(i, users, check.counts, want)
    out = range_count_arrays(
        xy, users, task.region_m, kind=task.kind, amount=alloc,  # type: ignore[arg-type]
        method=task.method, rounds=task.rounds, split=task.split, beta=task.beta,
        unit=task.unit, scale_max=task.scale_max, n_union=n_union, rng=worker_rng(rng),
    )  # fmt: skip
    el = out.elimination
    return CountOut(
        estimate=out.estimate, error=out.error, hist=np.asarray(out.rounds_histogram),
        n_low=out.n_low, n_high=out.n_high, n_undecided=out.n_undecided,
        saving=float(out.saving), n_calls=out.n_calls, r_min=out.r_min,
        charge_table=tuple(el.charge_table.tolist()), charge_codes=np.asarray(el.charge_codes),
    )  # fmt: skip


def merge(outs: list[CountOut], confidence: float) -> Any:
    """Merge the partitions' counts into one :class:`RangeCountArrays`-like record."""
    table: list[Fraction] = []
    codes = []
    for o in outs:
        codes.append(np.asarray(o.charge_codes, np.int64) + len(table))
        table += list(o.charge_table)
    hists = [np.asarray(o.hist, np.int64) for o in outs if o.hist is not None]
    hist = np.sum(hists, axis=0) if hists else np.zeros(1, np.int64)
    ch = np.empty(len(table), dtype=object)
    ch[:] = table
    return SimpleNamespace(
        estimate=sum(o.estimate for o in outs), error=sum(o.error for o in outs),
        confidence=confidence, rounds_histogram=hist, n_low=sum(o.n_low for o in outs),
        n_high=sum(o.n_high for o in outs), n_undecided=sum(o.n_undecided for o in outs),
        saving=sum(o.saving for o in outs), n_calls=sum(o.n_calls for o in outs),
        r_min=max([1.0, *(o.r_min for o in outs)]),
        elimination=SimpleNamespace(charge_table=ch, charge_codes=np.concatenate(codes)),
    )  # fmt: skip


def range_count(
    bound: Any, region: Any, *, rho: Any, eps: Any, method: str, rounds: int, split: str,
    beta: float, component: Any, reduce: Any, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False, allocations: Any = None, progress: Any = None,
) -> Any:  # fmt: skip
    """Run range_count on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.range_count`).

    ``allocations=`` (per user: a Series by user id, an array, a scalar, or a
    :class:`~gpframe.ledger.plan.SessionPlan` that gives each region its next allocations and
    records its charges) and ``progress=`` (a bar over the regions) are the pandas face's.
    """
    import pyproj

    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.dask.one_point import one_point_pass
    from gpframe.dask.partitions import Component, metric_kind, spawn_rng
    from gpframe.dask.privatize import _Metric
    from gpframe.ledger.charges import filter_kind, ledger_key_array
    from gpframe.ledger.plan import SessionPlan
    from gpframe.ledger.run import Charge, PreviewStop, active_preview, end_preview, run
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.elimination import GroupedAmounts, check_method_parts
    from gpframe.queries.privatize import progress_enabled
    from gpframe.queries.range_count import (
        _check_parts_for,
        _ledger_allocations,
        check_options,
        region_result,
    )
    from gpframe.queries.range_count_regions import combine_regions, project_regions, zone_columns
    from gpframe.release import zones_builder

    # -- on the client, before anything is computed or reserved
    session = bound.session
    rng = resolve_rng(rng)
    check_options(method, rounds, split, beta)
    check_on_exhausted(on_exhausted)
    rounds = int(rounds)
    plan = allocations if isinstance(allocations, SessionPlan) else None
    if allocations is None:
        kind, _ = metric_kind(session, rho, eps, ".range_count(region, rho=1e-5)")
    else:
        kind = filter_kind(session, "range_count")
        if rho is not None or eps is not None:
            raise InvalidInputError(f"pass either rho=/eps= or allocations=, not both. {_NOTHING}")
    if plan is not None and dry_run:
        raise InvalidInputError(_PLAN_PREVIEW)
    cols = bound.cols

    # -- first pass: whole users per partition, one point each; nothing drawn
    fp = one_point_pass(bound.ddf, cols, Component(component, reduce),
                        "the selected component has no rows: nobody to count. Check "
                        f"component={component!r}.", fetch=True)  # fmt: skip
    users, offsets, ref, parts = fp.users, fp.offsets, fp.ref, fp.parts
    crs_in = pyproj.CRS.from_wkt(ref.crs_in)
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    # the pandas face's validation and projection of the region(s), before the ledger is touched
    polys, labels, series, crs, many = project_regions(
        region, SimpleNamespace(crs_in=crs_in, crs_m=crs_m)
    )
    build = zones_builder(region, zone_columns(region))
    led = session.ledger
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    fixed = None
    if plan is not None:
        plan.check_users(users)
    elif allocations is not None:
        fixed = allocations_for(allocations, users)
    amt = rho if kind == "cgp" else eps
    if allocations is None:
        _check_parts_for(_ledger_allocations(lu, amt, len(users)), kind, method, rounds, split,
                         beta, unit, ref.scale_max)  # fmt: skip
    elif fixed is not None:
        _check_parts_for(_ledger_allocations(lu, fixed[fixed != 0], int((fixed != 0).sum())),
                         kind, method, rounds, split, beta, unit, ref.scale_max)  # fmt: skip
    task = CountTask(cols=cols, region_m=None, kind=kind, method=method,
                     rounds=rounds, split=split, beta=float(beta), unit=unit,
                     scale_max=ref.scale_max)  # fmt: skip
    base = {"method": method, "rounds": rounds, "split": split, "beta": beta}
    wants = fp.wants()

    def one(k: int, alloc_k: Any) -> Any:  # region k: one reservation, as on the pandas face
        task_k = replace(task, region_m=polys[k])
        # the users asked (all, or those with a non-zero allocation); the others are not
        # reserved and draw nothing: their allocation is 0 in their partition's task
        ask = np.ones(len(users), bool) if alloc_k is None else np.array(
            [a != 0 for a in alloc_k], dtype=bool)  # fmt: skip
        if not ask.any():
            return None
        amount = amt if alloc_k is None else alloc_k[ask]
        if alloc_k is not None:  # the plan's allocations: checked before they are reserved
            _check_parts_for(_ledger_allocations(lu, amount, int(ask.sum())), kind, method,
                             rounds, split, beta, unit, ref.scale_max)  # fmt: skip

        def full(r: Any) -> Any:  # the reserved units of the asked users, 0 for the others
            units = np.zeros(len(users), np.int64)
            units[ask] = np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0)
            return GroupedAmounts.from_units(units, unit)

        def check(r: Any) -> None:
            check_method_parts(GroupedAmounts.from_units(
                np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0), unit),
                kind=kind, method=method, rounds=rounds, split=split, beta=beta, unit=unit,
                scale_max=ref.scale_max)  # fmt: skip

        def compute(r: Any) -> Charge[Any]:
            alloc = full(r)
            n_union = max(int((np.asarray(alloc.to_array()) != 0).sum()), 1)
            # a child stream per (region, partition): no two tasks of a call share bits
            calls = [
                (d, i, task_k,
                 GroupedAmounts(alloc.codes[offsets[i] : offsets[i + 1]], alloc.values),
                 wants[i], spawn_rng(rng, k * len(parts) + i), n_union)
                for i, d in enumerate(parts)
            ]  # fmt: skip
            outs = fp.release(count_partition, calls)
            merged = merge(outs, 1.0 - float(beta))
            el = merged.elimination
            table = np.array([lu.up(v) for v in el.charge_table.tolist()], dtype=np.int64)
            # the asked users only, as the pandas face's call on them
            merged.elimination = SimpleNamespace(charge_table=el.charge_table,
                                                 charge_codes=el.charge_codes[ask])  # fmt: skip
            sub = GroupedAmounts(alloc.codes[ask], alloc.values)
            return Charge((merged, sub), table[el.charge_codes][ask], units=True)

        params = {**base, "region_wkt": polys[k].wkt[:200]}
        ran = run(session, ledger_key_array(users[ask]), amount, notion="metric",
                  query="range_count", params=params, check=check,
                  compute=compute)  # fmt: skip
        merged, alloc = ran.value
        metric = _Metric(crs_m, ref.scale_max, ref.noise_inflation)
        res = region_result(merged, alloc, users[ask], ran.admitted, params, metric, kind=kind,
                            method=method, query_id=ran.query_id)  # fmt: skip
        return res, int((~ask).sum())

    def go(**_: Any) -> Any:  # the reservations and releases (on_exhausted: see settle)
        if plan is not None and active_preview() is not None:
            raise InvalidInputError(_PLAN_PREVIEW)
        results, rows = [], []
        iterator: Any = range(len(polys))
        if len(polys) > 1 and progress_enabled(progress):
            from tqdm.auto import tqdm

            iterator = tqdm(iterator, desc="range_count", unit="region")
        for k in iterator:
            alloc_k = fixed
            if plan is not None:
                alloc_k = allocations_for(plan.next_allocations(users), users)
            try:
                got = one(k, alloc_k)
            except PreviewStop:  # a dry run: this region's reservation is planned, go on
                continue
            if plan is not None:
                plan.record(got[0].charges if got is not None else pd.Series(dtype=float))
            if got is None:  # nobody asked: nothing reserved, nothing drawn
                rows.append(dict(count=0, error=0.0, n_charged=0, n_excluded=len(users),
                                 saving=0.0, n_low=0, n_high=0, n_undecided=0,
                                 rounds_histogram=[0] * (rounds + 1), query_id=""))  # fmt: skip
                continue
            res, not_asked = got
            results.append(res)
            rows.append(dict(
                count=int(res.value), error=float(res.error), n_charged=res.n_charged,
                n_excluded=res.n_excluded + not_asked, saving=res.saved,
                n_low=res.params["n_low"], n_high=res.params["n_high"],
                n_undecided=res.params["n_undecided"],
                rounds_histogram=list(res.params["rounds_histogram"]), query_id=res.query_id,
            ))  # fmt: skip
        end_preview()  # a dry run planned every region: nothing to combine
        summary = dict(
            method=method, rounds=rounds, split=split, beta=beta,
            rho=None if rho is None else float(rho), eps=None if eps is None else float(eps),
            component=repr(component), reduce=reduce, n_regions=len(polys),
            crs_m=crs_m.to_string(), scale_max=float(ref.scale_max),
            noise_inflation=float(ref.noise_inflation),
        )  # fmt: skip
        return combine_regions(results, rows, labels, series, crs, many, users, fixed, plan,
                               params=summary, confidence=1.0 - float(beta), kind=kind,
                               build=build)  # fmt: skip

    return settle(session, "range_count", go, on_exhausted=on_exhausted, dry_run=dry_run,
                  adaptive=method.endswith("-elim"), **_pb.hooks(session, ref.scale_max,
                                                                 _pb.range_count_band))  # fmt: skip


_PLAN_PREVIEW = (
    "dry_run=True with allocations=plan would take the plan's next steps without recording any "
    "charge; preview with allocations=plan.next_allocations(users) of a copy, or with "
    f"rho=/eps=. {_NOTHING}"
)
