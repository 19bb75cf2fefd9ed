"""``ddf.geopriv(...).privatize``: the pandas face's privatize, one partition per task.

See ``docs/beyond-one-machine.md`` and ``docs/operations/privatize.md``. The order of a call:

1. the client validates the amounts, ``rng=`` and ``to=`` (nothing reserved yet);
2. a first pass validates every partition where it lies and counts each user's points there
   (:mod:`gpframe.dask.partitions`): no noise, nothing written. The workers sum each user's
   points over the partitions (:func:`gpframe.dask.partitions.summed_tree`) and the client
   receives each user once: the noise per point and the charge read only that total, so no
   row is shuffled (``FULL_SHUFFLE``, for tests and benchmarks, shuffles on the user column
   first, the former way);
3. the driver (:func:`gpframe.ledger.run.run`) reserves the users' allocations in the client's
   ledger, then its ``compute`` puts every user's total and admission in the graph once
   (:class:`Totals`, one key every task depends on) and runs one task per partition: the
   partition's rows of admitted users are noised by
   :func:`gpframe.queries.privatize.privatize_points` (with each user's total points,
   ``n_of=``) with the worker's own OS CSPRNG, and the output is built by
   :func:`gpframe.release.privatized_frame` and written to the staging directory (``to=``)
   or sent back to the client, in the input's row order; each user's bound, noise scale and
   per-point charge are merged on the workers (:func:`merge_users`);
4. the driver commits the charge, computed on the client from the mechanisms' guarantees the
   tasks report (the same :func:`gpframe.queries.privatize_plan.actual_units` as pandas);
5. only then the client publishes the staging directory (one rename) or returns the frame.

``on_exhausted=`` and ``dry_run=`` apply to steps 3 to 5 (:mod:`gpframe.dask.driver`): a dry
run stops at the driver's planned reservation, before any release task is submitted.

Noise: per user, exactly the pandas face's (GP planar Laplace at ε/n per point, CGP lattice
Gaussian at ρ/n, ``per="user"``; the amount per point with ``per="point"``). Charge: the same
per-user amounts as the pandas face (ε or ρ per user; n × amount per point).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, GpframeWarning
from gpframe.queries.privatize import PrivatizeArrays

__all__ = [
    "PartOut",
    "PerUser",
    "Plan",
    "Totals",
    "merge_users",
    "privatize",
    "release_partition",
]


@dataclass(frozen=True)
class Plan:
    """The public parameters every release task gets (never the session, never the ledger)."""

    cols: Any
    kind: str
    amount: Fraction
    per: str
    beta: float


@dataclass
class Totals:
    """Every user of the call, one key of the release graph (never copied into each task).

    ``users``: the distinct users, sorted (the reservation's order); ``counts``: each user's
    points in the whole frame; ``admitted``: whether the reservation admitted them.
    ``summed``: a user's rows may lie in several partitions (each task noises with the
    user's total, ``n_of=``). A task finds its own users' positions by a hash lookup
    (:meth:`positions`), so the graph does not grow with partitions x users.
    """

    users: np.ndarray
    counts: np.ndarray
    admitted: np.ndarray
    summed: bool

    def positions(self, users: np.ndarray, i: int) -> np.ndarray:
        """Positions of partition ``i``'s users among :attr:`users` (refused if one is not)."""
        index = self.__dict__.get("_index")
        if index is None:  # built once per worker: the tasks there share this object
            index = self.__dict__["_index"] = pd.Index(self.users, dtype=object)
        pos = index.get_indexer(pd.Index(users, dtype=object))
        if bool((pos < 0).any()):
            raise GpframeInternalError(f"partition {i} holds a user the first pass did not count.")
        return pos.astype(np.int64)

    def __getstate__(self) -> dict[str, Any]:  # the lookup table is rebuilt where needed
        return {k: v for k, v in self.__dict__.items() if k != "_index"}


@dataclass
class PartOut:
    """What one release task sends back to the client."""

    n_users: int = 0
    where: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # users' positions
    groups: list[tuple[np.ndarray, Fraction]] = field(default_factory=list)
    max_error_m: np.ndarray = field(default_factory=lambda: np.zeros(0))
    max_error_all_m: float = float("nan")
    n_calls: int = 0
    guarantees: list[Any] = field(default_factory=list)
    noise_scale_m: np.ndarray = field(default_factory=lambda: np.zeros(0))
    xy: np.ndarray | None = None  # released metres (in memory only)
    frame: Any = None  # the output partition (in memory only)
    file: tuple[str, str] | None = None  # (name, sha256) of the staged file


def release_partition(
    part: pd.DataFrame, i: int, plan: Plan, totals: Totals, want: str, rng: Any,
    n_all: int, staging: str | None,
) -> PartOut:  # fmt: skip
    """Noise one partition's admitted users; write or return its output (runs on a worker).

    ``want`` is the first pass's digest of the partition's users and counts: a recomputed
    shuffle must give the partition the same users, or the task fails (the driver then
    settles the reservation in full). ``totals``: every user's admission and total points,
    the same object for every task (:class:`Totals`).
    """
    from gpframe.dask.partitions import digest, located_users, shipped_privatized, worker_rng
    from gpframe.dask.staging import write_part
    from gpframe.queries.privatize import privatize_points
    from gpframe.release import privatized_frame

    if len(part) == 0:
        if want != digest(np.array([], dtype=object), np.zeros(0, np.int64)):
            raise GpframeInternalError(f"partition {i} lost its rows between the two passes.")
        return PartOut()
    with warnings.catch_warnings():
        # the client warns once (dropped columns); a worker's warning would be lost in its log
        warnings.simplefilter("ignore", GpframeWarning)
        frame, p, users, codes = located_users(part, plan.cols, i, want)
        where = totals.positions(users, i)
        admitted = totals.admitted[where]
        n_of = totals.counts[where] if totals.summed else None
        out = privatize_points(
            p.xy, codes, len(users), kind=plan.kind, amount=plan.amount,  # type: ignore[arg-type]
            per=plan.per, admitted=admitted, scale_max=float(p.scale_max), beta=plan.beta,  # type: ignore[arg-type]
            rng=worker_rng(rng), n_all=n_all, n_of=n_of,
        )  # fmt: skip
        if staging is None:  # the points travel as floats (pickling shapely objects is slow)
            frame_out = shipped_privatized(frame, p, out.xy, out.released, plan.cols.public)
        else:
            frame_out = privatized_frame(frame, p, out.xy, out.released, plan.cols.public)
    res = PartOut(
        n_users=len(users), where=where, groups=out.charge_groups, max_error_m=out.max_error_m,
        max_error_all_m=out.max_error_all_m, n_calls=out.n_calls, guarantees=out.guarantees,
        noise_scale_m=out.noise_scale_m,
    )  # fmt: skip
    if staging is None:
        res.xy, res.frame = out.xy, frame_out
    else:
        res.file = write_part(frame_out, staging, i)
    return res


@dataclass
class PerUser:
    """The per-user outputs of one or several release tasks, in the call's user order.

    Merged on the workers (:func:`merge_users`), so the client receives each user once, not
    once per partition they have rows in. ``cid``: each user's per-point charge, an index
    into ``amounts`` (-1: no point released).
    """

    err: np.ndarray
    scale: np.ndarray
    cid: np.ndarray
    amounts: list[Fraction]

    def groups(self) -> list[tuple[np.ndarray, Fraction]]:
        """Return the users of each per-point charge (ascending positions), as charged."""
        order = np.argsort(self.cid, kind="stable")
        bounds = np.searchsorted(self.cid[order], np.arange(len(self.amounts) + 1))
        return [(order[bounds[k] : bounds[k + 1]], c) for k, c in enumerate(self.amounts)]


def merge_users(n_users: int, *inputs: PartOut | PerUser) -> PerUser:
    """Merge release tasks' per-user outputs (or earlier merges) into one :class:`PerUser`.

    Runs on a worker (:func:`gpframe.dask.partitions.tree`). A user whose rows lie in several
    partitions has one bound, scale and per-point charge in all of them (they depend on the
    user's total points only): their maximum is taken, and two charges are refused as a bug.
    """
    err = np.full(n_users, np.nan)
    scale = np.full(n_users, np.nan)
    cid = np.full(n_users, -1, np.int64)
    ids: dict[Fraction, int] = {}

    def put(g: Any, k: np.ndarray | int) -> None:
        if bool(((cid[g] >= 0) & (cid[g] != k)).any()):
            raise GpframeInternalError(
                "a user's points were released at different amounts in two partitions."
            )
        cid[g] = k

    for x in inputs:
        if isinstance(x, PerUser):
            # its ids in this merge's numbering; -1 (no charge) stays -1 (the last entry)
            remap = np.array([ids.setdefault(c, len(ids)) for c in x.amounts] + [-1], np.int64)
            new = remap[x.cid]
            some = new >= 0
            put(some, new[some])
            np.fmax(err, x.err, out=err)
            np.fmax(scale, x.scale, out=scale)
        elif x.n_users:
            w = x.where
            err[w] = np.fmax(err[w], x.max_error_m)
            scale[w] = np.fmax(scale[w], x.noise_scale_m)
            for u, c in x.groups:
                put(w[np.asarray(u, np.int64)], ids.setdefault(c, len(ids)))
    return PerUser(err, scale, cid, list(ids))


def light(out: PartOut) -> PartOut:
    """Return a task's output without its per-user arrays (merged by :func:`merge_users`)."""
    from dataclasses import replace

    return replace(out, where=np.zeros(0, np.int64), groups=[], max_error_m=np.zeros(0),
                   noise_scale_m=np.zeros(0))  # fmt: skip


def merge(outs: list[PartOut], users: PerUser) -> PrivatizeArrays:
    """Merge the partitions' outputs into one :class:`PrivatizeArrays` (client's user order).

    ``users``: the per-user outputs, merged on the workers (:func:`merge_users`).
    """
    xys = [o.xy for o in outs if o.xy is not None]
    alls = [o.max_error_all_m for o in outs if not np.isnan(o.max_error_all_m)]
    return PrivatizeArrays(
        xy=np.concatenate(xys) if xys else np.zeros((0, 2)),
        released=np.zeros(0, dtype=bool),  # per row, in the partitions' frames
        charges=[],  # the client computes them from charge_groups
        max_error_m=users.err,
        max_error_all_m=max(alls) if alls else float("nan"),
        noise_scale_m=users.scale,
        n_calls=sum(o.n_calls for o in outs),
        guarantees=[g for o in outs for g in o.guarantees],
        charge_groups=users.groups(),
    )


@dataclass(frozen=True)
class _Metric:
    """The public metric CRS of the call, as the result builder reads it."""

    crs_m: Any
    scale_max: float
    noise_inflation: float


def client_checks(
    bound: Any, *, rho: Any, eps: Any, per: str, beta: float, to: Any, rng: Any,
    on_exhausted: str,
) -> tuple[Any, str, Fraction, Any, Plan]:  # fmt: skip
    """Check a privatize call on the client (nothing read, nothing reserved).

    Returns the resolved ``rng``, the kind, the exact amount, the ``to=`` target (or None) and
    the tasks' :class:`Plan`.
    """
    from gpframe.accounting.amounts import metric_amount, probability
    from gpframe.dask.driver import check_on_exhausted
    from gpframe.dask.staging import check_target
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries import privatize as _pv
    from gpframe.release import check_reserved

    rng = resolve_rng(rng)
    kind, amount = metric_amount(rho, eps, example=".privatize(rho=1e-4)")
    _pv.check_amount(kind, per, amount)
    probability(beta)
    check_on_exhausted(on_exhausted)
    target = check_target(to) if to is not None else None
    if not bound.is_geo:  # a DataFrame input gets a new geometry column
        check_reserved(bound.cols.public, ["geometry"], "privatize")
    plan = Plan(cols=bound.cols, kind=kind, amount=amount, per=per, beta=float(beta))
    return rng, kind, amount, target, plan


def privatize(
    bound: Any, *, rho: Any, eps: Any, per: str, beta: float, to: Any, rng: Any,
    on_exhausted: str = "exclude", dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run privatize on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.privatize`)."""
    import dask
    import pyproj

    from gpframe.accounting.amounts import LedgerUnits
    from gpframe.dask import partitions as _parts
    from gpframe.dask.driver import settle
    from gpframe.dask.partitions import (
        by_user,
        check_partition,
        combine,
        common_check,
        digest,
        graph_allowance,
        persisted_futures,
        share,
        spawn_rng,
        summed_tree,
        tree,
        without_users,
    )
    from gpframe.dask.staging import discard, staging_dir
    from gpframe.ledger.charges import filter_kind, ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.queries import privatize as _pv
    from gpframe.queries.privatize_plan import actual_units, amount_keyword, preflight, unit_floats
    from gpframe.release import warn_dropped

    # -- on the client, before anything is computed or reserved
    rng, kind, amount, target, plan = client_checks(
        bound, rho=rho, eps=eps, per=per, beta=beta, to=to, rng=rng, on_exhausted=on_exhausted
    )
    cols = bound.cols

    # -- first pass: every partition validated and counted where it lies; nothing drawn. A
    # user's points are summed over the partitions (the noise per point and the charge read
    # only that total): no shuffle, unless FULL_SHUFFLE asks for the former way
    full = _parts.FULL_SHUFFLE and not cols.index_is_user
    data, _ = by_user(bound.ddf, cols) if full else (bound.ddf, False)
    if full:  # both passes read the shuffled partitions: move the rows once
        data = data.persist()
    # a persisted frame: its partitions' futures, not the collection's graph of aliases
    parts = (None if full else persisted_futures(data)) or data.to_delayed()
    firsts = [dask.delayed(check_partition)(d, cols) for d in parts]
    summed = not (full or cols.index_is_user)
    if summed:  # the workers sum the counts: the client gets each user once, not per partition
        *checks, (users, counts) = dask.compute(*[dask.delayed(without_users)(c) for c in firsts],
                                                summed_tree(firsts))  # fmt: skip
        ref = common_check(checks, len(users))
    else:  # whole users per partition
        checks = list(dask.compute(*firsts))
        users, counts, _, ref = combine(checks)
    preflight(kind, amount, per, counts, ref.scale_max)
    warn_dropped(bound.dropped, "privatize", stacklevel=3)

    session = bound.session
    ledger = session.ledger
    fkind = filter_kind(session)
    n_users = len(users)
    mult = np.ones(n_users, np.int64) if per == "user" else counts
    alloc_units, too_big = ledger.units_for("metric", amount, mult, kind=kind)
    alloc_in = alloc_units.copy()
    alloc_in[too_big] = LedgerUnits.MAX  # cannot be admitted (a budget is at most MAX units)
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    params = {
        amount_keyword(kind): float(amount),
        "per": per,
        "beta": float(beta),
        "n_points": int(counts.sum()),
        "crs_m": crs_m.to_string(),
        "scale_max": float(ref.scale_max),
    }
    wants = [c.fingerprint or digest(c.users, c.counts) for c in checks]
    del checks  # the client keeps each user once (users, counts), not once per partition
    staged: dict[str, Any] = {}

    def compute(r: Any) -> Charge[Any]:
        admitted = np.asarray(r.admitted, dtype=bool) & ~too_big
        n_all = int(counts[admitted].sum())
        staging = staging_dir(target, r.query_id) if target is not None else None
        staged["dir"] = staging
        try:
            # in the graph once, not once per task (a partition may hold most of the users)
            totals, nbytes = share(Totals(users, counts, admitted, summed))
            tasks = [
                dask.delayed(release_partition)(
                    d,
                    i,
                    plan,
                    totals,
                    wants[i],
                    spawn_rng(rng, i),
                    n_all,
                    None if staging is None else str(staging),
                )
                for i, d in enumerate(parts)
            ]
            # each user's outputs merged on the workers: the client gets them once
            with graph_allowance(nbytes):
                *outs, per_user = dask.compute(*[dask.delayed(light)(t) for t in tasks],
                                               tree(merge_users, tasks, n_users))  # fmt: skip
            del totals, tasks
            merged = merge(outs, per_user)
            act_u, act_f = actual_units(ledger, fkind, kind, per, merged, counts, n_users)
        except BaseException:
            discard(staging)  # nothing in it was published; the driver settles the reservation
            raise
        return Charge((admitted, outs, merged, act_f), act_u, units=True)

    def finish(ran: Any) -> Any:
        """Build the Result once the charge is committed, then publish or return."""
        admitted, outs, merged, act_f = ran.value
        # the workers' noise-scale warning, once for the whole query (as the pandas face warns)
        _pv._warn_scales(merged.noise_scale_m, kind, per)
        result = _pv.make_privatize_result(
            kind=kind, amount=amount, per=per, beta=float(beta), users=users, counts=counts,
            admitted=admitted, charges=act_f, out=merged, query_id=ran.query_id, fkind=fkind,
            projected=_Metric(crs_m, ref.scale_max, ref.noise_inflation),
            allocations=unit_floats(ledger, alloc_units),
        )  # fmt: skip
        return deliver(result, outs, target, staged["dir"])

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        ran = run(
            session, ledger_keys(users), alloc_in, notion="metric", query="privatize",
            params=params, units=True, compute=compute,
        )  # fmt: skip
        return finish(ran)

    info = (
        _preview_info(kind, amount, per, float(beta), users, counts, ref.scale_max)
        if (dry_run)
        else {}
    )
    return settle(session, "privatize", go, on_exhausted=on_exhausted, dry_run=dry_run, **info)


def _preview_info(
    kind: str, amount: Fraction, per: str, beta: float, users: Any, counts: np.ndarray,
    scale_max: float,
) -> dict[str, Any]:  # fmt: skip
    """Return the pandas face's preview fields of privatize: ``per``, its note, the error.

    The radii read only each user's number of points, from the first pass
    (``docs/operations/privatize.md``).
    """
    from gpframe.ledger.charges import ledger_keys
    from gpframe.queries import privatize as _pv

    errs = _pv.nominal_errors(kind, amount, per, counts, beta, float(scale_max))
    count_of = dict(zip(list(ledger_keys(users)), counts.tolist(), strict=True))

    def error(table: pd.DataFrame, calls: Any = None) -> tuple[float, str, float] | None:
        n = [count_of.get(u, 0) for u in table.index[table["status"] == "reserved"]]
        if not sum(n):
            return None
        e = _pv.nominal_errors(kind, amount, per, np.array(n), beta, float(scale_max),
                               overall=True)  # fmt: skip
        return float(e), "max point error (m)", 1 - beta

    return {"per": per, "per_note": _pv.per_note(kind, per, errs, counts), "error": error}


def deliver(result: Any, outs: list[PartOut], target: Any, staging: Any) -> Any:
    """Hand over a charged privatize: the frame in memory, or publish the staged Parquet.

    Called only once the charge is committed. In memory: the partitions' frames concatenated,
    the Result in ``attrs["geopriv"]``. With ``to=``: the staged files are published under
    ``target`` with the Result (and each file's digest, to check a part against what its
    accepted task wrote), and the Result is returned.
    """
    from gpframe.dask.partitions import from_xy_all
    from gpframe.dask.staging import publish

    if target is None:  # the partitions' points created once, on the whole output
        frame = from_xy_all([o.frame for o in outs if o.frame is not None])
        frame.attrs["geopriv"] = result.to_attr()
        return frame
    result = _with_value(result, None, output=str(target))
    files = dict(o.file for o in outs if o.file is not None)
    saved = {**result.to_dict(value=False), "files": files}
    publish(staging, target, files, json.dumps(saved))
    return result


def _with_value(result: Any, value: Any, **params: Any) -> Any:
    """Return the result with another ``value`` and extra public parameters (it is frozen)."""
    import dataclasses

    return dataclasses.replace(result, value=value, params={**result.params, **params})
