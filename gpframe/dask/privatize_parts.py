"""``privatize`` on a dask frame split by a public column (``partition=``).

See ``docs/wide-extents.md`` and ``docs/beyond-one-machine.md``. The call is the pandas face's
split privatize: one query (one query id, one reservation); each part is noised in its own
metric CRS, and a user's allocation, and charge, is the sum over the parts they have rows in of
what a privatize call on that part alone would reserve (``per="user"``: the amount once per
part; ``per="point"``: n × amount as without a split). The first pass
(:func:`gpframe.dask.parts.split_check`) validates and counts every partition by part; each
release task runs :func:`gpframe.queries.privatize.privatize_points` once per part it holds,
with the part's metric CRS, the partition's own stream per part, and the union bound over the
part's admitted points in all partitions (the pandas face's bound for that part).

Noise: as privatize (GP planar Laplace at ε/n per point, CGP lattice Gaussian at ρ/n, n the
user's points in the part; the amount per point with ``per="point"``). Charge: per user, the
amount per part (``per="user"``) or n × amount (``per="point"``), committed before anything is
returned or published.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, GpframeWarning

__all__ = ["privatize_split", "release_split"]


@dataclass
class SplitOut:
    """What one release task of a split sends back: per part, the arrays the client charges."""

    n_users: int = 0
    local_users: list[np.ndarray] = field(default_factory=list)
    local_counts: list[np.ndarray] = field(default_factory=list)
    groups: list[list[tuple[np.ndarray, Fraction]]] = field(default_factory=list)
    max_error_m: list[np.ndarray] = field(default_factory=list)
    max_error_all_m: list[float] = field(default_factory=list)
    noise_scale_m: list[np.ndarray] = field(default_factory=list)
    n_calls: int = 0
    guarantees: list[Any] = field(default_factory=list)
    xy: np.ndarray | None = None  # released metres per row, each in its part's CRS (in memory)
    frame: Any = None
    file: tuple[str, str] | None = None


def release_split(
    part: pd.DataFrame, i: int, plan: Any, admitted: np.ndarray, want: str, rngs: list[Any],
    n_all: list[int], staging: str | None,
) -> SplitOut:  # fmt: skip
    """Noise one partition's admitted users, part by part; write or return its output.

    ``rngs`` and ``n_all`` are per part of this partition (in the first pass's order): the
    part's stream and its admitted points over all partitions.
    """
    from gpframe.dask.partitions import check_same_users, shipped_privatized, worker_rng
    from gpframe.dask.parts import split_rows
    from gpframe.dask.staging import write_part
    from gpframe.queries.privatize import privatize_points
    from gpframe.release import privatized_frame

    if len(part) == 0:
        if len(admitted):
            raise GpframeInternalError(f"partition {i} lost its rows between the two passes.")
        return SplitOut()
    with warnings.catch_warnings():
        # the client warns once per part; a worker's warning would be lost in its log
        warnings.simplefilter("ignore", GpframeWarning)
        s = split_rows(part, plan.cols)
        counts = np.bincount(s.codes, minlength=len(s.users)).astype(np.int64)
        check_same_users(i, s.users, counts, want)
        n = len(s.frame)
        res = SplitOut(n_users=len(s.users))
        xy = np.full((n, 2), np.nan)
        xs, ys = np.full(n, np.nan), np.full(n, np.nan)
        released = np.zeros(n, dtype=bool)
        for j, (rows, p) in enumerate(zip(s.rows, s.projected, strict=True)):
            lc, lu = pd.factorize(s.codes[rows], sort=True)
            lu = np.asarray(lu, dtype=np.int64)
            out = privatize_points(
                p.xy, lc, len(lu), kind=plan.kind, amount=plan.amount,  # type: ignore[arg-type]
                per=plan.per, admitted=admitted[lu], scale_max=float(p.scale_max),  # type: ignore[arg-type]
                beta=plan.beta, rng=worker_rng(rngs[j]), n_all=n_all[j],
            )  # fmt: skip
            res.local_users.append(lu)
            res.local_counts.append(np.bincount(lc, minlength=len(lu)).astype(np.int64))
            res.groups.append(out.charge_groups)
            res.max_error_m.append(out.max_error_m)
            res.max_error_all_m.append(float(out.max_error_all_m))
            res.noise_scale_m.append(out.noise_scale_m)
            res.n_calls += out.n_calls
            res.guarantees += list(out.guarantees)
            xy[rows] = out.xy
            released[rows] = out.released
            if out.released.any():
                r = rows[out.released]
                xs[r], ys[r] = p.to_input_crs(out.xy[out.released])
        if staging is None:  # the points travel as floats, created once on the client
            res.xy, res.frame = (
                xy,
                shipped_privatized(
                    s.frame, s.located, xy, released, plan.cols.public, xy_in=(xs, ys)
                ),
            )
            return res
        frame_out = privatized_frame(s.frame, s.located, xy, released, plan.cols.public,
                                     xy_in=(xs, ys))  # fmt: skip
    res.file = write_part(frame_out, staging, i)
    return res


def privatize_split(
    bound: Any, *, rho: Any, eps: Any, per: str, beta: float, to: Any, rng: Any,
    on_exhausted: str, dry_run: bool,
) -> Any:  # fmt: skip
    """Run privatize on a split dask frame (see :meth:`gpframe.dask.DaskGeoPriv.privatize`)."""
    import dask

    from gpframe.accounting.amounts import LedgerUnits
    from gpframe.dask.driver import settle
    from gpframe.dask.partitions import by_user, digest, spawn_rng
    from gpframe.dask.parts import StatedCrs, combine_split, split_check
    from gpframe.dask.privatize import _Metric, _preview_info, client_checks, deliver
    from gpframe.dask.staging import discard, staging_dir
    from gpframe.ledger.charges import filter_kind, ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.queries import privatize as _pv
    from gpframe.queries.partition_check import describe_part
    from gpframe.queries.privatize_plan import amount_keyword, preflight, unit_floats
    from gpframe.release import warn_dropped

    rng, kind, amount, target, plan = client_checks(
        bound, rho=rho, eps=eps, per=per, beta=beta, to=to, rng=rng, on_exhausted=on_exhausted
    )
    cols = bound.cols
    data, shuffled = by_user(bound.ddf, cols)
    if shuffled:  # both passes read the shuffled partitions: move the rows once
        data = data.persist()
    parts = data.to_delayed()
    checks = list(dask.compute(*[dask.delayed(split_check)(d, cols) for d in parts]))
    c = combine_split(checks, cols.partition)
    users, counts, offsets = c.users, c.counts, c.offsets
    n_users, n_parts = len(users), len(c.values)
    session = bound.session
    ledger = session.ledger
    fkind = filter_kind(session)
    # each user's allocation: the sum over their parts of a call on that part alone
    alloc_units = np.zeros(n_users, dtype=np.int64)
    too_big = np.zeros(n_users, dtype=bool)
    for i, ch in enumerate(checks):
        for j, lu, lc in zip(c.index[i], ch.local_users, ch.local_counts, strict=True):
            preflight(kind, amount, per, lc, c.facts[j].scale_max)
            g = offsets[i] + lu
            mult = np.ones(len(lu), np.int64) if per == "user" else lc
            u, big = ledger.units_for("metric", amount, mult, kind=kind)
            over = big | (alloc_units[g] > LedgerUnits.MAX - u)
            too_big[g] |= over
            alloc_units[g] = np.where(over, 0, alloc_units[g] + np.where(over, 0, u))
    warn_dropped(bound.dropped, "privatize", stacklevel=3)
    metrics = [_Metric(StatedCrs(f.crs_text), f.scale_max, f.noise_inflation)
               for f in c.facts]  # fmt: skip
    described = [describe_part(v, m, f.n_points)
                 for v, m, f in zip(c.values, metrics, c.facts, strict=True)]  # fmt: skip
    worst = max(range(n_parts), key=lambda j: c.facts[j].noise_inflation)
    params = {
        amount_keyword(kind): float(amount), "per": per, "beta": float(beta),
        "n_points": int(counts.sum()), "partition": str(cols.partition), "partitions": described,
    }  # fmt: skip
    alloc_in = alloc_units.copy()
    alloc_in[too_big] = LedgerUnits.MAX
    wants = [digest(ch.users, ch.counts) for ch in checks]
    staged: dict[str, Any] = {}

    def compute(r: Any) -> Charge[Any]:
        admitted = np.asarray(r.admitted, dtype=bool) & ~too_big
        n_all = np.zeros(n_parts, dtype=np.int64)  # each part's admitted points, all partitions
        for i, ch in enumerate(checks):
            for j, lu, lc in zip(c.index[i], ch.local_users, ch.local_counts, strict=True):
                n_all[j] += int(lc[admitted[offsets[i] + lu]].sum())
        staging = staging_dir(target, r.query_id) if target is not None else None
        staged["dir"] = staging
        try:
            tasks = [
                dask.delayed(release_split)(
                    d,
                    i,
                    plan,
                    admitted[offsets[i] : offsets[i + 1]],
                    wants[i],
                    [spawn_rng(rng, i * n_parts + j) for j in c.index[i]],
                    [int(n_all[j]) for j in c.index[i]],
                    None if staging is None else str(staging),
                )
                for i, d in enumerate(parts)
            ]
            outs = list(dask.compute(*tasks))
            merged, act_u, act_f, scales = _merge(outs, c, ledger, fkind, kind, per, n_users)
        except BaseException:
            discard(staging)  # nothing in it was published; the driver settles the reservation
            raise
        return Charge((admitted, outs, merged, act_f, scales), act_u, units=True)

    def finish(ran: Any) -> Any:
        admitted, outs, merged, act_f, scales = ran.value
        for s in scales:  # the samplers' noise-scale warning, once per part as on pandas
            _pv._warn_scales(s, kind, per)
        result = _pv.make_privatize_result(
            kind=kind, amount=amount, per=per, beta=float(beta), users=users, counts=counts,
            admitted=admitted, charges=act_f, out=merged, query_id=ran.query_id, fkind=fkind,
            projected=metrics[worst], allocations=unit_floats(ledger, alloc_units),
        )  # fmt: skip
        # the top-level crs_m / scale_max / noise_inflation are the worst part's; each part's
        # own are in params["partitions"]
        result.params.update(partition=str(cols.partition), partitions=described)
        return deliver(result, outs, target, staged["dir"])

    def go(**_: Any) -> Any:
        ran = run(
            session, ledger_keys(users), alloc_in, notion="metric", query="privatize",
            params=params, units=True, compute=compute,
        )  # fmt: skip
        return finish(ran)

    info = _preview_info(kind, amount, per, float(beta), users, counts,
                         max(f.scale_max for f in c.facts)) if dry_run else {}  # fmt: skip
    return settle(session, "privatize", go, on_exhausted=on_exhausted, dry_run=dry_run, **info)


def _merge(
    outs: list[SplitOut], c: Any, ledger: Any, fkind: str, kind: str, per: str, n_users: int
) -> tuple[Any, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Merge the parts' arrays per user (client's order); their charges; each part's scales."""
    from types import SimpleNamespace

    from gpframe.queries.privatize_plan import actual_units

    act_u = np.zeros(n_users, dtype=np.int64)
    act_f = np.zeros(n_users, dtype=np.float64)
    err = np.full(n_users, np.nan)
    err_all, calls, guarantees = np.nan, 0, []
    scales: list[list[np.ndarray]] = [[] for _ in c.values]
    for i, o in enumerate(outs):
        off = c.offsets[i]
        for j, lu, lc, groups, e, ea, sc in zip(c.index[i], o.local_users, o.local_counts,
                                                o.groups, o.max_error_m, o.max_error_all_m,
                                                o.noise_scale_m, strict=True):  # fmt: skip
            u, f = actual_units(ledger, fkind, kind, per, SimpleNamespace(charge_groups=groups),
                                lc, len(lu))  # fmt: skip
            act_u[off + lu] += u
            act_f[off + lu] += f
            err[off + lu] = np.fmax(err[off + lu], e)
            err_all = np.fmax(err_all, ea)
            scales[j].append(sc)
        calls += o.n_calls
        guarantees += o.guarantees
    xys = [o.xy for o in outs if o.xy is not None]
    merged = SimpleNamespace(
        xy=np.concatenate(xys) if xys else np.zeros((0, 2)), max_error_m=err,
        max_error_all_m=float(err_all), n_calls=calls, guarantees=guarantees,
    )  # fmt: skip
    return merged, act_u, act_f, [np.concatenate(s) if s else np.zeros(0) for s in scales]
