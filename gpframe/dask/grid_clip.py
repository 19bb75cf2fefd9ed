"""``ddf.geopriv(...).grid_stats(epsilon_per_statistic=ε, occupancy="public")``: Clip-User on Dask.

See ``docs/beyond-one-machine.md`` and ``docs/operations/grid_stats.md`` (Clip-User, release,
the per-statistic form); Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in
Differential Privacy for Fixed Estimation Error' (2024), Alg. 1, Prop. V.1. The plan reads the
public occupancy only, and which rows it keeps reads only each user's own rows (the first r of
a (user, cell) pair in the canonical order: ``order_by=``, then row position), so:

1. the frame is shuffled on the user column, every row carrying its input position (partition,
   row); each partition is validated as the pandas face validates a frame and returns its
   per-(user, cell) counts, the public occupancy; the validated rows stay on the worker;
2. the client plans, admits and reserves with the pandas face's code
   (:func:`gpframe.queries.grid_stats.run_grid_stats`); inside the reservation it sends each
   partition the plan's r of its pairs, and each returns, per cell, the count, Σ k and Σ k² of
   the rows it keeps (int64, exact; no noise);
3. the client adds them, draws the noise (one ``laplace_dp`` call per group of cells, as on the
   pandas face) and charges; the output is the pandas face's.

Noise and charge are the pandas face's: per released cell, discrete Laplace with sensitivity
W·r*/r (mean) and W²·h(r*, r) (variance) at ε each; each kept user pays 2ε per kept cell.
With the same seeded source both faces release the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = ["RowsTask", "grid_clip", "kept_sums", "prepare_rows"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class RowsTask:
    """The public parameters of the first pass (never the session)."""

    cols: Any
    value: str
    cells: Any
    lo: Fraction
    hi: Fraction
    clamp: bool
    order_by: Any


def prepare_rows(part: pd.DataFrame, task: RowsTask) -> tuple[Any, Any]:
    """First pass over one partition (whole users): ((counts per pair, CRS), rows kept here).

    The counts are a frame (user, cell, m); the rows (user, cell, k, order) stay on the
    worker for :func:`kept_sums`, in input order. No noise is drawn.
    """
    from gpframe.dask.grid_private import read_rows
    from gpframe.queries.grid_user_stats import snap

    if len(part) == 0:
        table = pd.DataFrame({"user": [], "cell": np.zeros(0, np.uint64),
                              "m": np.zeros(0, np.int64)})  # fmt: skip
        return (table, None), None
    located, x, keys, order = read_rows(part, task)
    users = np.asarray(located.users)
    k, _T, _q = snap(x, task.lo, task.hi)
    t = pd.DataFrame({"user": users, "cell": keys, "m": np.ones(users.size, np.int64)})
    table = t.groupby(["user", "cell"], sort=True, as_index=False).sum()
    return (table, located.crs_in.to_wkt()), (users, keys, k, order)


def first_rows(prepared: tuple[Any, Any]) -> Any:
    """Return what the client fetches of a prepared partition: its counts and CRS."""
    return prepared[0]


def kept_sums(prepared: tuple[Any, Any], r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of one partition: (cells, sums) of the rows the plan keeps (a worker).

    ``r`` is the plan's kept count of each pair of the partition's counts table (same order).
    In each (user, cell) pair the first r rows by (``order_by``, row position) are kept, as
    :func:`gpframe.queries.grid_stats.retained_rows` keeps them. ``sums`` is int64, shape (3,
    cells): the count, Σ k and Σ k².
    """
    (table, _), rows = prepared
    if rows is None:
        return np.zeros(0, np.uint64), np.zeros((3, 0), np.int64)
    users, keys, k, order = rows
    want = pd.MultiIndex.from_arrays([table["user"].to_numpy(), table["cell"].to_numpy()])
    code = want.get_indexer(pd.MultiIndex.from_arrays([users, keys]))
    if (code < 0).any() or len(r) != len(table):
        raise GpframeInternalError("a partition's rows differ from its first pass.")
    pos = np.arange(code.size)
    srt = np.lexsort((pos, code) if order is None else (pos, order, code))
    c_sorted = code[srt]
    rank = np.empty(code.size, np.int64)
    rank[srt] = np.arange(code.size) - np.searchsorted(c_sorted, c_sorted, side="left")
    keep = rank < np.asarray(r, dtype=np.int64)[code]
    cells, inv = np.unique(keys[keep], return_inverse=True)
    inv = inv.reshape(-1)
    sums = np.zeros((3, cells.size), np.int64)
    np.add.at(sums[0], inv, 1)
    np.add.at(sums[1], inv, k[keep])
    np.add.at(sums[2], inv, k[keep] * k[keep])
    return cells.astype(np.uint64), sums


def grid_clip(
    bound: Any, *, value: str, lo: Fraction, hi: Fraction, eps: Fraction, split: Any,
    cells: Any, clamp: bool, beta: float, clip: str, order_by: Any, plan_options: dict,
    rng: Any, on_exhausted: str, dry_run: bool, table: Any = None,
) -> Any:  # fmt: skip
    """Run the per-statistic form with public occupancy on a bound dask frame (client side).

    ``table``: the caller's public occupancy table (an :class:`Occupancy`), checked against
    the partitions' counts before anything is reserved; None: ``occupancy="public"``.
    """
    import dask
    import pyproj

    from gpframe.dask.driver import settle
    from gpframe.dask.grid_private import with_positions
    from gpframe.dask.partitions import by_user
    from gpframe.queries.clip_user import occupancy_from_records
    from gpframe.queries.grid_clip_output import clip_stats_output
    from gpframe.queries.grid_stats import cell_stats_from_sums, run_grid_stats

    session, cols = bound.session, bound.cols
    if order_by is not None and order_by not in bound.ddf.columns:
        raise InvalidInputError(
            f"order_by={order_by!r} must be a column without missing values. {_NOTHING}"
        )
    task = RowsTask(cols=cols, value=value, cells=cells, lo=lo, hi=hi, clamp=bool(clamp),
                    order_by=order_by)  # fmt: skip

    # -- first pass: whole users per partition in input order, counted; the rows stay there
    ddf = bound.ddf
    data, _ = by_user(ddf.map_partitions(with_positions, meta=with_positions(ddf._meta)), cols)
    prepared = dask.persist(*[dask.delayed(prepare_rows)(d, task) for d in data.to_delayed()])
    firsts = dask.compute(*[dask.delayed(first_rows)(p) for p in prepared])
    live = [c for _, c in firsts if c is not None]
    if not live:
        raise InvalidInputError(f"the frame has no rows: nothing to summarise. {_NOTHING}")
    t = pd.concat([tab for tab, _ in firsts], ignore_index=True)
    occ = occupancy_from_records(t["user"].to_numpy(), t["cell"].to_numpy(np.uint64),
                                 t["m"].to_numpy(np.int64))  # fmt: skip
    if table is not None:  # fail closed unless the declared table is the data's occupancy
        from gpframe.queries.grid_occupancy import check_matches

        occ = check_matches(table, occ)
    n_u = max(occ.n_users, 1)
    coo = occ.j.astype(np.int64) * n_u + occ.u
    # each partition's pairs, as positions in the occupancy's rows (sorted by cell, user)
    where = [np.searchsorted(coo, np.searchsorted(occ.cells, tab["cell"].to_numpy(np.uint64))
                             * n_u + np.searchsorted(occ.users, tab["user"].to_numpy()))
             for tab, _ in firsts]  # fmt: skip
    crs_in = pyproj.CRS.from_wkt(live[0])

    def cell_stats(plan: Any) -> Any:
        # inside the reservation, before any noise: the kept rows' exact sums per cell
        outs = dask.compute(*[dask.delayed(kept_sums)(p, plan.r[w])
                              for p, w in zip(prepared, where, strict=True)])  # fmt: skip
        s = np.zeros((3, occ.n_cells), np.int64)
        for got, sums in outs:
            j = np.searchsorted(occ.cells, got)
            for i in range(3):
                np.add.at(s[i], j, sums[i])
        return cell_stats_from_sums(s[0], s[1], s[2], lo, hi)

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        run = run_grid_stats(
            session, occ, None, None, None, lower=lo, upper=hi, epsilon=eps, clip=clip,
            beta=beta, rng=rng, plan_options={**plan_options, "split": split},
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
            cell_stats=cell_stats,
        )  # fmt: skip
        return clip_stats_output(session, run, crs_in=crs_in, eps=eps, lo=lo, hi=hi, clip=clip,
                                 cells=cells, beta=beta)  # fmt: skip

    from gpframe.queries.grid_preview import error_hook

    with error_hook() as error:  # the same a-priori mean error as the pandas face's preview
        return settle(session, "grid_stats", go, on_exhausted=on_exhausted, dry_run=dry_run,
                      error=error)  # fmt: skip
