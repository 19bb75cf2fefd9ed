"""``range_count`` on a dask frame split by a public column (``partition=``).

See ``docs/wide-extents.md`` and ``docs/beyond-one-machine.md``. As on the pandas face
(:func:`gpframe.queries.range_count_parts.run_range_count_parts`): each user's one point (the
component, selected over all of the user's rows) lies in one part; each region is projected to
every part's metric CRS and is one query (one query id) covering all parts, each part counted
in its own metres at failure probability β/k for the k parts holding a selected point, so the
summed error holds at 1 − β; a user is charged as by a count over their own part alone.

On the cluster, the first pass (:func:`prepare_split`) validates and splits every partition,
selects each user's point and keeps it, in its part's metres, on the worker. For each region,
one task per (partition, part) runs :func:`gpframe.dask.range_count.count_partition` on the
part's users of that partition with the part's union-bound n (its users queried over all
partitions), so each user's noise and stopping round have the law of the pandas face's call on
the part; the client adds the tasks' integer counts, errors and histograms per part.

Noise: as range_count (``dist`` the signed distance, ``pt`` the point; lattice Gaussian or
Laplace at each round's part of the allocation). Charge: per user, the allocation (``pt``,
``dist``) or the parts of the rounds run (``*-elim``), once per region, committed before the
result is returned.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries import preview_bounds as _pb

__all__ = ["prepare_split", "range_count_split"]

_NOTHING = "Nothing was charged."


def prepare_split(part: pd.DataFrame, cols: Any, select: Any) -> tuple[Any, list[Any]]:
    """First pass of a split count on one partition: (its check, each part's selected points).

    The check is a :class:`gpframe.dask.parts.SplitCheck` whose users are the partition's users
    with a selected row (each counted once); the points (one per user, sorted by user, in the
    part's metres) stay on the worker for the release tasks. Nothing is drawn.
    """
    from gpframe.dask.parts import PartFacts, SplitCheck, split_rows
    from gpframe.queries.partition_check import derived_matches
    from gpframe.queries.range_count import select_component
    from gpframe.release import protected_columns

    empty = SplitCheck(users=np.array([], dtype=object), counts=np.zeros(0, np.int64), values=[],
                       facts=[], local_users=[], local_counts=[], derived=())  # fmt: skip
    if len(part) == 0:
        return (empty, ""), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the client states its own warnings
        s = split_rows(part, cols)
        derived = tuple(derived_matches(s.frame[cols.partition], s.located))
        row_users = np.asarray(s.located.users)
        skip = (cols.user, *protected_columns(s.frame, s.located.coords))
        pos = select_component(s.frame, row_users, select.component, select.reduce,
                               operation=select.operation, skip=skip)  # fmt: skip
    n = len(s.frame)
    part_of = np.empty(n, np.int64)
    local_of = np.empty(n, np.int64)
    for j, rows in enumerate(s.rows):
        part_of[rows] = j
        local_of[rows] = np.arange(len(rows))
    codes, uniq = pd.factorize(pd.Series(row_users[pos]), sort=True)
    users = np.asarray(uniq, dtype=object)
    facts, lus, xys, values = [], [], [], []
    for j, p in enumerate(s.projected):
        mine = part_of[pos] == j
        order = np.argsort(codes[mine], kind="stable")
        lus.append(codes[mine][order].astype(np.int64))
        xys.append(p.xy[local_of[pos[mine]][order]])
        values.append(s.values[j])
        facts.append(PartFacts(crs_m=p.crs_m.srs,
                               scale_max=float(p.scale_max),
                               noise_inflation=float(p.noise_inflation),
                               n_points=len(s.rows[j])))  # fmt: skip
    check = SplitCheck(users=users, counts=np.ones(len(users), np.int64), values=values,
                       facts=facts, local_users=lus,
                       local_counts=[np.ones(len(u), np.int64) for u in lus],
                       derived=derived)  # fmt: skip
    return (check, s.located.crs_in.to_wkt()), xys


def first_split(prepared: tuple[Any, list[Any]]) -> tuple[Any, str]:
    """Return what the client fetches of a prepared partition (its check, the input CRS)."""
    return prepared[0]


def block(prepared: tuple[Any, list[Any]], jj: int) -> tuple[Any, np.ndarray]:
    """One part's selected points of a prepared partition, as ``count_partition`` reads them."""
    (check, _), xys = prepared
    users = check.users[check.local_users[jj]]
    return SimpleNamespace(users=users, counts=np.ones(len(users), np.int64)), xys[jj]


def range_count_split(
    bound: Any, region: Any, *, rho: Any, eps: Any, method: str, rounds: int, split: str,
    beta: float, component: Any, reduce: Any, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False, progress: Any = None,
) -> Any:  # fmt: skip
    """Run range_count on a split dask frame (see :meth:`gpframe.dask.DaskGeoPriv.range_count`)."""
    import dask
    import pyproj

    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.dask.partitions import Component, by_user, digest, metric_kind, spawn_rng
    from gpframe.dask.parts import StatedCrs, combine_split
    from gpframe.dask.range_count import CountTask, count_partition, merge
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import Charge, PreviewStop, end_preview, run
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.elimination import GroupedAmounts
    from gpframe.queries.partition_check import describe_part
    from gpframe.queries.range_count import _check_parts_for, _ledger_allocations, check_options
    from gpframe.queries.range_count_parts import parts_result
    from gpframe.queries.range_count_regions import combine_regions, project_regions, zone_columns
    from gpframe.release import zones_builder

    # -- on the client, before anything is computed or reserved
    session = bound.session
    rng = resolve_rng(rng)
    check_options(method, rounds, split, beta)
    check_on_exhausted(on_exhausted)
    rounds = int(rounds)
    kind, _ = metric_kind(session, rho, eps, ".range_count(region, rho=1e-5)")
    cols = bound.cols
    select = Component(component, reduce)

    # -- first pass: whole users per partition, split by part, one point each; nothing drawn
    data, _ = by_user(bound.ddf, cols)
    prepared = dask.persist(*[dask.delayed(prepare_split)(d, cols, select)
                              for d in data.to_delayed()])  # fmt: skip
    fetched = list(dask.compute(*[dask.delayed(first_split)(p) for p in prepared]))
    checks = [f[0] for f in fetched]
    if not any(len(ch.users) for ch in checks):
        raise InvalidInputError(
            f"the selected component has no rows: nobody to count. Check component={component!r}. "
            f"{_NOTHING}"
        )
    c = combine_split(checks, cols.partition)
    crs_in = pyproj.CRS.from_wkt(next(f[1] for f in fetched if f[1]))
    n_parts = len(c.values)
    # each part's users, part by part then partition by partition (the order of its Result)
    blocks = [(i, jj) for j in range(n_parts) for i in range(len(checks))
              for jj in range(len(checks[i].values)) if c.index[i][jj] == j]  # fmt: skip
    where = [c.offsets[i] + checks[i].local_users[jj] for i, jj in blocks]
    part_of_block = [c.index[i][jj] for i, jj in blocks]
    size = np.zeros(n_parts, np.int64)
    for j, w in zip(part_of_block, where, strict=True):
        size[j] += len(w)
    live = [j for j in range(n_parts) if size[j]]
    perm = np.concatenate(where) if where else np.zeros(0, np.int64)
    users = c.users
    wants = [digest(checks[i].users[checks[i].local_users[jj]],
                    np.ones(len(checks[i].local_users[jj]), np.int64))
             for i, jj in blocks]  # fmt: skip
    # the region(s), validated and projected into every part's metres before the ledger
    polys: dict[int, list[Any]] = {}
    labels = series = crs = many = None
    for j in live:
        crs_m = pyproj.CRS(c.facts[j].crs_m)
        polys[j], labels, series, crs, many = project_regions(
            region, SimpleNamespace(crs_in=crs_in, crs_m=crs_m)
        )
    n_regions = len(polys[live[0]])
    build = zones_builder(region, zone_columns(region))
    led = session.ledger
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    amt = rho if kind == "cgp" else eps
    k_parts = max(len(live), 1)
    b = beta / k_parts  # each part at beta / k: the summed error holds at 1 - beta
    for j in live:
        _check_parts_for(_ledger_allocations(lu, amt, int(size[j])), kind, method, rounds, split,
                         b, unit, c.facts[j].scale_max)  # fmt: skip
    metrics = [SimpleNamespace(crs_m=StatedCrs(f.crs_text), scale_max=f.scale_max,
                               noise_inflation=f.noise_inflation) for f in c.facts]  # fmt: skip
    described = [describe_part(v, m, f.n_points)
                 for v, m, f in zip(c.values, metrics, c.facts, strict=True)]  # fmt: skip
    extra = {"partition": str(cols.partition), "partitions": described}
    worst_live = metrics[max(live, key=lambda j: c.facts[j].noise_inflation)]
    worst_all = metrics[max(range(n_parts), key=lambda j: c.facts[j].noise_inflation)]

    def grouped(r: Any) -> Any:
        units = np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0)
        return GroupedAmounts.from_units(units, unit)

    def per_part(alloc: Any, j: int) -> Any:
        idx = [w for w, q in zip(where, part_of_block, strict=True) if q == j]
        return GroupedAmounts(alloc.codes[np.concatenate(idx)], alloc.values)

    def check(r: Any) -> None:
        alloc = grouped(r)
        for j in live:
            _check_parts_for(per_part(alloc, j), kind, method, rounds, split, b, unit,
                             c.facts[j].scale_max)  # fmt: skip

    def one(k: int) -> Any:  # region k: one reservation, as on the pandas face
        def compute(r: Any) -> Charge[Any]:
            alloc = grouped(r)
            nz = np.asarray(alloc.to_array()) != 0
            n_union = {j: max(int(sum(nz[w].sum() for w, q in zip(where, part_of_block,
                                                                   strict=True) if q == j)), 1)
                       for j in live}  # fmt: skip
            tasks = []
            for t, ((i, jj), w, j) in enumerate(zip(blocks, where, part_of_block, strict=True)):
                task = CountTask(cols=cols, region_m=polys[j][k], kind=kind, method=method,
                                 rounds=rounds, split=split, beta=float(b), unit=unit,
                                 scale_max=c.facts[j].scale_max)  # fmt: skip
                tasks.append(dask.delayed(count_partition)(
                    dask.delayed(block)(prepared[i], jj), i, task,
                    GroupedAmounts(alloc.codes[w], alloc.values), wants[t],
                    spawn_rng(rng, k * len(blocks) + t), n_union[j],
                ))  # fmt: skip
            outs = list(dask.compute(*tasks))
            charged = np.zeros(len(users), np.int64)
            merged = []
            for j in live:
                mine = [o for o, q in zip(outs, part_of_block, strict=True) if q == j]
                m = merge(mine, 1.0 - float(b))
                el = m.elimination
                table = np.array([lu.up(v) for v in el.charge_table.tolist()], dtype=np.int64)
                idx = np.concatenate([w for w, q in zip(where, part_of_block, strict=True)
                                      if q == j])  # fmt: skip
                charged[idx] = table[el.charge_codes]
                merged.append((m, per_part(alloc, j)))
            return Charge(merged, charged, units=True)

        ran = run(session, ledger_keys(users), amt, notion="metric", query="range_count",
                  params={"method": method, "rounds": rounds, "split": split, "beta": beta,
                          **extra},
                  check=check, compute=compute)  # fmt: skip
        return parts_result(ran.value, users[perm], np.asarray(ran.admitted)[perm], worst_live,
                            kind=kind, method=method, rounds=rounds, split=split, beta=beta,
                            params=extra, query_id=ran.query_id)  # fmt: skip

    def go(**_: Any) -> Any:  # the reservations and releases (on_exhausted: see settle)
        from gpframe.queries.privatize import progress_enabled

        results, rows = [], []
        iterator: Any = range(n_regions)
        if n_regions > 1 and progress_enabled(progress):
            from tqdm.auto import tqdm

            iterator = tqdm(iterator, desc="range_count", unit="region")
        for k in iterator:
            try:
                res = one(k)
            except PreviewStop:  # a dry run: this region's reservation is planned, go on
                continue
            results.append(res)
            rows.append(dict(
                count=int(res.value), error=float(res.error), n_charged=res.n_charged,
                n_excluded=res.n_excluded, saving=res.saved, n_low=res.params["n_low"],
                n_high=res.params["n_high"], n_undecided=res.params["n_undecided"],
                rounds_histogram=list(res.params["rounds_histogram"]), query_id=res.query_id,
            ))  # fmt: skip
        end_preview()  # a dry run planned every region: nothing to combine
        summary = dict(
            method=method, rounds=rounds, split=split, beta=beta,
            rho=None if rho is None else float(rho), eps=None if eps is None else float(eps),
            component=repr(component), reduce=reduce, n_regions=n_regions,
            crs_m=worst_all.crs_m.to_string(), scale_max=float(worst_all.scale_max),
            noise_inflation=float(worst_all.noise_inflation), **extra,
        )  # fmt: skip
        return combine_regions(results, rows, labels, series, crs, many, users, None, None,
                               params=summary, confidence=1.0 - float(beta), kind=kind,
                               build=build)  # fmt: skip

    scale = max(f.scale_max for f in c.facts)
    return settle(session, "range_count", go, on_exhausted=on_exhausted, dry_run=dry_run,
                  adaptive=method.endswith("-elim"),
                  **_pb.hooks(session, scale, _pb.range_count_band))  # fmt: skip
