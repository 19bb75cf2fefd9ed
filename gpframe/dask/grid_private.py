"""``ddf.geopriv(...).grid_stats(..., occupancy="private")``: contribution bounding per partition.

See ``docs/beyond-one-machine.md`` and ``docs/operations/grid_stats.md`` (private occupancy).
The bounding rule is per user (a user's kept cells and rows depend on that user's rows and
public constants only), so after the shuffle on the user column every partition applies it to
the users it holds, with the pandas face's code
(:func:`gpframe.queries.contribution_bounding.bound_contributions`), and returns only each
user's number of kept cells and, per (user, public cell), the count, Σ k and Σ k² of the kept
values on the fixed-point grid (int64, exact). Every row carries its position in the input
(partition, row) across the shuffle, so "row position" (ties of ``order_by=``, the spread order
of the per-user form) means what it means on the pandas face. The client adds the sums of the
users the ledger admits and runs the pandas face's admission, charge and release
(:func:`gpframe.queries.contribution_bounding.run_private_grid_stats`): the noise is drawn on
the client, three ``laplace_dp`` calls for all the public cells; with the same seeded source
both faces release the same values. Noise and charge are the pandas face's: count, centred sum
and centred sum of squares per public cell; each kept user pays (ε_n + ε_1 + ε_2) per kept cell
(at most ``max_cells`` cells).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError

__all__ = ["BoundTask", "bound_partition", "grid_private", "with_positions"]

_NOTHING = "Nothing was charged."
#: the input position of every row, carried across the shuffle (dropped before validation)
_PART, _POS = "__gpframe_partition__", "__gpframe_row__"


@dataclass(frozen=True)
class BoundTask:
    """The public parameters of the bounding pass (never the session)."""

    cols: Any
    value: str
    cells: Any
    lo: Fraction
    hi: Fraction
    clamp: bool
    public_cells: Any
    max_cells: int
    max_per_cell: int
    order_by: Any
    salt: str
    user_averages: bool  # the per-user form: each kept row carries its user's cell average


@dataclass(frozen=True)
class BoundOut:
    """One partition's bounded contributions: nothing but counts and exact integer sums."""

    users: Any  # the partition's users (sorted) and their kept cells
    cells_kept: Any
    pair_user: Any  # per kept (user, public cell): the user, the cell's index and the sums
    pair_j: Any
    sums: Any  # int64, shape (3, pairs): count, Σ k, Σ (2k − T)²
    n_off_list: int = 0
    public: Any = None  # the public cells (uint64), from the partition's input CRS
    crs_in: str | None = None


def with_positions(part: pd.DataFrame, partition_info: Any = None) -> pd.DataFrame:
    """Add each row's input position (partition number, row number) as two int64 columns."""
    out = part.copy(deep=False)
    out[_PART] = np.int64(0 if partition_info is None else partition_info["number"])
    out[_POS] = np.arange(len(part), dtype=np.int64)
    return out


def read_rows(part: pd.DataFrame, task: Any) -> tuple[Any, np.ndarray, np.ndarray, Any]:
    """Read one partition with positions (a worker): (located points, values, cells, order).

    Restores the input order (row position means the same as on the pandas face), locates the
    points, checks the values against the bounds and reads each row's H3 cell and the
    ``order_by`` column (None without one), with the pandas face's checks. ``task`` carries
    ``cols``, ``value``, ``lo``, ``hi``, ``clamp``, ``cells`` and ``order_by``.
    """
    import warnings

    from gpframe.dask.partitions import _frame
    from gpframe.geo import locate_points
    from gpframe.queries.grid_cells import as_h3, h3_cells
    from gpframe.queries.grid_stats import checked_values

    cols = task.cols
    part = part.iloc[np.lexsort((part[_POS].to_numpy(), part[_PART].to_numpy()))]
    part = part.drop(columns=[_PART, _POS])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a worker's warning would stay in its log
        frame = _frame(part, cols)
        located = locate_points(
            frame, user=cols.user, x=cols.x, y=cols.y, lon=cols.lon, lat=cols.lat, crs=cols.crs,
            to_crs=cols.to_crs, domain=cols.domain,
        )  # fmt: skip
    x = checked_values(frame, task.value, task.lo, task.hi, clamp=task.clamp, name="ddf")
    if isinstance(task.cells, str):
        keys = as_h3(frame[task.cells], f"column {task.cells!r}")
    else:
        keys = h3_cells(located, int(task.cells))
    order = None
    if task.order_by is not None:
        if frame[task.order_by].isna().any():
            raise InvalidInputError(
                f"order_by={task.order_by!r} must be a column without missing values. {_NOTHING}"
            )
        order = frame[task.order_by].to_numpy()
    return located, x, keys, order


def bound_partition(part: pd.DataFrame, task: BoundTask) -> BoundOut:
    """Validate one partition (whole users), bound its users and sum their kept values."""
    from gpframe.queries.contribution_bounding import bound_contributions, pair_averages
    from gpframe.queries.grid_private import public_cell_keys
    from gpframe.queries.grid_user_stats import snap

    empty = np.zeros(0, np.int64)
    if len(part) == 0:
        return BoundOut(np.array([], dtype=object), empty, np.array([], dtype=object), empty,
                        np.zeros((3, 0), np.int64))  # fmt: skip
    located, x, keys, order = read_rows(part, task)
    users = np.asarray(located.users)
    pub = public_cell_keys(task.public_cells, task.cells, located.crs_in)
    b = bound_contributions(users, keys, pub, max_cells=task.max_cells,
                            max_per_cell=task.max_per_cell, order=order,
                            salt=task.salt)  # fmt: skip
    keep = np.flatnonzero(b.keep)
    if task.user_averages:  # whole users here: a user's averages read only their own rows
        kbar, d2bar = pair_averages(b, x, task.lo, task.hi)
        k, d2 = kbar[keep], d2bar[keep]
    else:
        k, T, _q = snap(x[keep], task.lo, task.hi)
        d2 = (2 * k - T) ** 2
    n_pub = np.int64(pub.size)
    pairs, inv = np.unique(b.row_u[keep] * n_pub + b.row_j[keep], return_inverse=True)
    inv = inv.reshape(-1)
    sums = np.zeros((3, pairs.size), np.int64)
    np.add.at(sums[0], inv, 1)
    np.add.at(sums[1], inv, k)
    np.add.at(sums[2], inv, d2)
    return BoundOut(
        users=b.users, cells_kept=b.cells_kept, pair_user=b.users[pairs // n_pub],
        pair_j=(pairs % n_pub).astype(np.int64), sums=sums, n_off_list=b.n_off_list,
        public=pub, crs_in=located.crs_in.to_wkt(),
    )  # fmt: skip


def _check(max_cells: Any, max_per_cell: Any, public_cells: Any, salt: Any) -> None:
    """Refuse the caps, the cell list and the salt as the pandas face does (no data read)."""
    from gpframe.queries.contribution_bounding import DEFAULT_SALT, bound_contributions

    if max_cells is None or max_per_cell is None:
        raise InvalidInputError(
            "occupancy='private' needs max_cells= and max_per_cell= (public caps on how many "
            "cells a user contributes to and how many samples per cell), e.g. max_cells=5, "
            f"max_per_cell=10. {_NOTHING}"
        )
    if public_cells is None:
        from gpframe.queries.contribution_bounding import public_cell_list

        public_cell_list(None)  # raises the explanatory error
    # the caps and the salt, checked on no data
    bound_contributions(np.zeros(0), np.zeros(0, np.uint64), [0], max_cells=max_cells,
                        max_per_cell=max_per_cell,
                        salt=DEFAULT_SALT if salt is None else salt)  # fmt: skip


def grid_private(
    bound: Any, *, value: str, lo: Fraction, hi: Fraction, eps: Fraction, per_user: bool,
    split: tuple[Any, Any], cells: Any, clamp: bool, beta: float, public_cells: Any,
    max_cells: Any, max_per_cell: Any, salt: Any, order_by: Any, rng: Any,
    on_exhausted: str, dry_run: bool, shrink: bool = True,
) -> Any:  # fmt: skip
    """Run ``grid_stats(..., occupancy="private")`` on a bound dask frame (client side)."""
    import dask
    import pyproj

    from gpframe.dask.driver import settle
    from gpframe.dask.partitions import by_user
    from gpframe.queries.contribution_bounding import (
        DEFAULT_SALT,
        BoundedContributions,
        run_private_grid_stats,
    )
    from gpframe.queries.grid_private import private_stats_output

    session, cols = bound.session, bound.cols
    _check(max_cells, max_per_cell, public_cells, salt)
    salt = DEFAULT_SALT if salt is None else salt
    if order_by is not None and order_by not in bound.ddf.columns:
        raise InvalidInputError(
            f"order_by={order_by!r} must be a column without missing values. {_NOTHING}"
        )
    total, epsilons = eps, None
    if per_user:
        from gpframe.queries.grid_user_stats import private_epsilons

        epsilons = private_epsilons(session, eps, max_cells, split)
        eps = max(epsilons)  # ignored by the release when epsilons is given
    task = BoundTask(cols=cols, value=value, cells=cells, lo=lo, hi=hi, clamp=bool(clamp),
                     public_cells=public_cells, max_cells=int(max_cells),
                     max_per_cell=int(max_per_cell), order_by=order_by, salt=salt,
                     user_averages=per_user)  # fmt: skip

    # -- the bounding pass: whole users per partition, in input order; nothing drawn
    ddf = bound.ddf
    meta = with_positions(ddf._meta)
    data, _ = by_user(ddf.map_partitions(with_positions, meta=meta), cols)
    outs = dask.compute(*[dask.delayed(bound_partition)(d, task) for d in data.to_delayed()])
    live = [o for o in outs if o.crs_in is not None]
    if not live:
        raise InvalidInputError(f"the frame has no rows: nothing to summarise. {_NOTHING}")
    pub = live[0].public
    users = np.concatenate([o.users for o in live])
    order = np.argsort(users, kind="stable")
    users, ck = users[order], np.concatenate([o.cells_kept for o in live])[order]
    if pd.Series(users).duplicated().any():
        raise InvalidInputError(  # pragma: no cover - the shuffle keeps a user in one partition
            f"a user's rows are in several partitions after the shuffle. {_NOTHING}"
        )
    pair_u = np.searchsorted(users, np.concatenate([o.pair_user for o in live]))
    pair_j = np.concatenate([o.pair_j for o in live])
    sums = np.concatenate([o.sums for o in live], axis=1)
    b = BoundedContributions(cells=pub, users=users, row_u=np.zeros(0, np.int64),
                             row_j=np.zeros(0, np.int64), keep=np.zeros(0, bool), cells_kept=ck,
                             max_cells=int(max_cells), max_per_cell=int(max_per_cell),
                             n_off_list=sum(o.n_off_list for o in live))  # fmt: skip

    def cell_sums(kept: np.ndarray) -> tuple[np.ndarray, ...]:
        # the kept rows of the admitted users only: exact int64 sums per public cell
        on = kept[pair_u]
        out = np.zeros((3, pub.size), np.int64)
        for i in range(3):
            np.add.at(out[i], pair_j[on], sums[i, on])
        return tuple(out)

    crs_in = pyproj.CRS.from_wkt(live[0].crs_in)

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        run = run_private_grid_stats(
            session, None, None, None, None, lower=lo, upper=hi, epsilon=eps,
            max_cells=max_cells, max_per_cell=max_per_cell, salt=salt, beta=beta, rng=rng,
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
            epsilons=epsilons, bounded=(b, cell_sums), user_averages=per_user,
            shrink=per_user and bool(shrink),
        )  # fmt: skip
        return private_stats_output(session, run, crs_in=crs_in, eps=eps, total=total,
                                    epsilons=epsilons, lo=lo, hi=hi, cells=cells,
                                    beta=beta, shrink=bool(shrink))  # fmt: skip

    return settle(session, "grid_stats", go, on_exhausted=on_exhausted, dry_run=dry_run)
