"""``ddf.geopriv(...).nearest_users``: the k users nearest to a public point, rounds on the client.

See ``docs/beyond-one-machine.md`` and ``docs/operations/nearest_users.md``; Liang & Yi,
'Adaptive Privacy Budgeting' (2026), Alg. 8 over Alg. 5. Each user's one point (``component=``)
is selected on the partition that holds all of the user's rows and stays there. The elimination
is interactive (a round's survivors depend on every user's estimate, through the k-th smallest
right end), so the client runs the rounds: it asks each partition to release the round's values
of its users still in the running (:func:`release_round`, on the worker, with the round's part),
receives only those released values, and decides the next round and the final selection with
the pandas face's array code (:func:`gpframe.queries.nearest.nearest_rounds`). Noise, charges,
error and Result are the pandas face's (``dist``: the distance, ``pt``: the point, at each
round's part; a user dropped at round r pays the parts of rounds 1..r).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries import preview_bounds as _pb

__all__ = ["nearest_users", "release_round"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class RoundTask:
    """The public parameters of one round's release on a partition (never the session)."""

    kind: str
    triple: str  # "dist" (the distance to the point) or "pt" (the point)
    point_m: Any
    scale_max: Fraction


def release_round(
    prepared: Any, i: int, task: RoundTask, local: np.ndarray, part: Fraction, want: str,
    rng: Any,
) -> tuple[Any, Fraction]:  # fmt: skip
    """Release one round's values of the users ``local`` of partition ``i`` (a worker).

    ``prepared`` is the partition's first pass (:func:`gpframe.dask.partitions.prepare`),
    kept on the worker; recomputed after a worker's death, it must hold the same users.
    Returns the ``Released`` values and their charge (ground units), nothing else.
    """
    from gpframe.dask.partitions import check_same_users, worker_rng
    from gpframe.queries.elimination import release_part
    from gpframe.queries.nearest import distance_to

    check, xy = prepared
    check_same_users(i, check.users, check.counts, want)
    pts = xy[np.asarray(local, dtype=np.int64)]
    data = distance_to(task.point_m)(pts) if task.triple == "dist" else pts
    return release_part(task.kind, task.triple, data, part, task.scale_max, worker_rng(rng))


def nearest_users(
    bound: Any, point: Any, k: int, *, rho: Any, eps: Any, method: str, rounds: int,
    split: str, beta: float, component: Any, reduce: Any, rng: Any,
    on_exhausted: str = "exclude", dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run nearest_users on a bound dask frame (:meth:`gpframe.dask.DaskGeoPriv.nearest_users`)."""
    import dask
    import pyproj

    from gpframe.accounting.amounts import metric_amount, probability
    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.dask.knn import _point_m
    from gpframe.dask.one_point import one_point_pass
    from gpframe.dask.partitions import Component, spawn_rng
    from gpframe.ledger.charges import filter_kind, ledger_keys
    from gpframe.ledger.run import Charge, run
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.elimination import check_method_parts, split_fractions
    from gpframe.queries.knn import _check_extent, check_k
    from gpframe.queries.nearest import (
        METHODS,
        admitted_allocations,
        check_admitted,
        nearest_result,
        nearest_rounds,
        refuse_if_fewer_can_pay,
    )

    # -- on the client, before anything is computed or reserved (the pandas face's checks)
    session = bound.session
    rng = resolve_rng(rng)
    fk = filter_kind(session, "knn or convex_hull")
    kind, amount = metric_amount(rho, eps, example=".nearest_users(..., rho=1e-5)",
                                 filter_kind=fk)  # fmt: skip
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
    kk = check_k(k)
    check_on_exhausted(on_exhausted)
    cols = bound.cols

    # -- first pass: whole users per partition, one point each, kept there; nothing drawn
    fp = one_point_pass(bound.ddf, cols, Component(component, reduce, "nearest_users"),
                        "the selected component has no rows.")  # fmt: skip
    users, offsets, ref, parts = fp.users, fp.offsets, fp.ref, fp.parts
    # the ids' own dtype (int64 ...) as on the pandas face: the Result's indexes and value
    users = pd.Series(users).infer_objects().to_numpy()
    crs_m = pyproj.CRS.from_wkt(ref.crs_m)
    q = _point_m(point, pyproj.CRS.from_wkt(ref.crs_in), crs_m)
    _check_extent(q[None, :])  # the points were checked by the first pass
    if kk > users.size:
        raise InvalidInputError(f"k={k!r} exceeds the {users.size} users. {_NOTHING}")
    lu = session.ledger.units["metric"]
    unit = Fraction(1) / lu.scale
    scale_max = Fraction(float(ref.scale_max))
    checks = dict(kind=kind, method=method, rounds=rounds, split=split, beta=b, unit=unit,
                  scale_max=scale_max)  # fmt: skip
    check_method_parts(amount, **checks)
    refuse_if_fewer_can_pay(session, ledger_keys(users), amount, kk)
    params = {"method": method, "rounds": rounds, "split": split, "beta": b, "k": kk,
              "point_m": q.tolist(), "crs_m": crs_m.to_string(),
              "scale_max": float(ref.scale_max),
              "noise_inflation": float(ref.noise_inflation)}  # fmt: skip
    triple = "dist" if method.startswith("dist") else "pt"
    task = RoundTask(kind=kind, triple=triple, point_m=q, scale_max=scale_max)
    wants = fp.wants()

    def allocations(r: Any) -> np.ndarray:
        return admitted_allocations(r.admitted, amount)

    def check(r: Any) -> None:
        check_admitted(r.admitted, amount, kk, checks)

    def compute(r: Any) -> Charge[Any]:
        calls = [0]

        def draw(idx: np.ndarray, part: Fraction) -> list[Any]:
            # one task per partition holding some of ``idx``; each (call, partition) draws
            # from its own stream; only the released values come back
            pending = []
            for i in range(len(parts)):
                sel = idx[(idx >= offsets[i]) & (idx < offsets[i + 1])]
                if sel.size:
                    stream = spawn_rng(rng, calls[0] * len(parts) + i)
                    pending.append(
                        (
                            sel,
                            dask.delayed(release_round)(
                                parts[i], i, task, sel - offsets[i], part, wants[i], stream
                            ),
                        )
                    )
            calls[0] += 1
            outs = dask.compute(*[t for _, t in pending])
            got = zip(pending, outs, strict=True)
            return [(sel, rel, charge) for (sel, _), (rel, charge) in got]

        shape = (users.size,) if triple == "dist" else (users.size, 2)
        out = nearest_rounds(np.zeros(shape), q, kk, kind=kind, amount=allocations(r),
                             method=method, rounds=rounds, split=split, beta=b, unit=unit,
                             scale_max=scale_max, rng=rng, draw=draw)  # fmt: skip
        return Charge(out, out.charges)

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        ran = run(session, ledger_keys(users), amount, notion="metric", query="nearest_users",
                  params=params, check=check, compute=compute)  # fmt: skip
        # -- the charge is committed: only now the selection leaves the client's hands
        return nearest_result(ran.value, ran.admitted, users, params=params, beta=b, kind=kind,
                              fkind=fk, query_id=ran.query_id)  # fmt: skip

    return settle(session, "nearest_users", go, on_exhausted=on_exhausted, dry_run=dry_run,
                  adaptive=method.endswith("-elim"),
                  **_pb.hooks(session, ref.scale_max, _pb.nearest_error, kind=kind,
                              amount=amount))  # fmt: skip
