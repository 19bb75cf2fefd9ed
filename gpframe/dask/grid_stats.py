"""``ddf.geopriv(...).grid_stats``: per-user-total grid statistics, reduced over partitions.

See ``docs/beyond-one-machine.md`` and ``docs/operations/grid_stats.md`` (section "A per-user
total: how gpframe spends it"). Only ``epsilon_per_user=`` with ``occupancy="public"``: the
occupancy (who has how many samples in which cell) is public by declaration, and everything
the release needs from the data is a sum over rows, so no shuffle is needed:

1. each partition is validated as the pandas face validates a frame (coordinates, the value
   column, its bounds) and reduced to one row per (user, cell) it holds: the count, Σ k and
   Σ (2k − T)² of its values on the fixed-point grid (:func:`gpframe.queries.grid_user_stats.snap`),
   exact int64 integers; no noise is drawn;
2. the client adds the partitions' rows exactly (integers), builds the public occupancy and
   hands the sums to :func:`gpframe.queries.grid_user_stats.run_user_grid_stats`, which plans,
   reserves through the one driver, draws the noise **on the client** (one ``laplace_dp`` call
   per group of cells, as on the pandas face) and charges;
3. the output is :func:`gpframe.queries.grid_user_output.user_stats_output`'s, the pandas face's.

Noise and charge are the pandas face's: per released cell, discrete Laplace of scale
2H·max w/(Σw·ε_μ,j) (mean) and H²·max w/(Σw·ε_V,j) (second moment); each kept user pays
Σ over their kept cells of ε_μ,j + ε_V,j ≤ ``epsilon_per_user``. With the same seeded source,
both faces release the same values.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError

__all__ = ["grid_stats", "reduce_partition"]

_NOTHING = "Nothing was charged."
_TOTAL_MAX = 10**6  # the pandas face's largest epsilon_per_user (a total over cells)


def _which_epsilon(epsilon: Any, per_user: Any, per_statistic: Any) -> tuple[str, Any]:
    """Return the one ε argument given, with its name (``epsilon``: the per-statistic form)."""
    given = [(n, v) for n, v in (("epsilon_per_user", per_user),
                                  ("epsilon_per_statistic", per_statistic),
                                  ("epsilon", epsilon)) if v is not None]  # fmt: skip
    if len(given) != 1:
        raise InvalidInputError(
            "grid_stats needs exactly one of epsilon_per_user= (the total any one user pays "
            "for the call: recommended) or epsilon_per_statistic= (ε for each statistic of "
            f"each cell; 'epsilon=' is its former name); got {[n for n, _ in given] or 'none'}. "
            f"{_NOTHING}"
        )
    return given[0]


def _check_occupancy(occupancy: Any) -> tuple[str, Any]:
    """Return ("public" or "private", the caller's checked-later public table or None)."""
    if isinstance(occupancy, pd.DataFrame):  # read now; matched against the data's counts
        from gpframe.queries.grid_occupancy import table_occupancy

        return "public", table_occupancy(occupancy)
    if not (isinstance(occupancy, str) and occupancy in ("public", "private")):
        raise InvalidInputError(
            f"occupancy={occupancy!r}: pass occupancy='public' (the per-(user, cell) counts "
            "are public by declaration), the public occupancy table (columns user, cell, "
            "count), which is checked against the data, or 'private' (contribution bounding; "
            f"docs/operations/grid_stats.md). {_NOTHING}"
        )
    return occupancy, None


def _check_statistic(name: str, amount: Any, split: Any) -> tuple[Fraction, tuple[Any, Any]]:
    """Return the per-statistic ε and the (mean, variance) shares, checked as on pandas."""
    from gpframe.accounting.amounts import exact
    from gpframe.mechanisms.calibration import check_eps

    if isinstance(amount, (bool, np.bool_)):  # check_eps takes np.True_ as 1
        raise InvalidInputError(f"{name}={amount!r} must be a number > 0. {_NOTHING}")
    eps = exact(check_eps(amount, name), name)
    if split is None:
        return eps, (0.5, 0.5)
    try:
        a, b = split
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"split={split!r} must be a pair (mean share, variance share), e.g. (0.75, 0.25). "
            f"{_NOTHING}"
        ) from None
    return eps, (a, b)


def _check_args(
    meta: Any, value: Any, cells: Any, epsilon_per_user: Any, split: Any
) -> tuple[Fraction, tuple[Fraction, Fraction]]:
    """Check what the frame's ``meta`` and the arguments tell, before any data is read."""
    from gpframe.accounting.amounts import exact
    from gpframe.queries.grid_stats import check_cells_argument, check_value_column

    check_value_column(meta, value)
    check_cells_argument(meta, cells)
    try:
        total = exact(epsilon_per_user, "epsilon_per_user")
    except InvalidInputError:
        total = None
    if (
        isinstance(epsilon_per_user, (bool, np.bool_))
        or total is None
        or not (0 < total <= _TOTAL_MAX)
    ):
        raise InvalidInputError(
            f"epsilon_per_user={epsilon_per_user!r} must be a number in (0, {_TOTAL_MAX}]: the "
            f"total ε any one user pays for the call, e.g. epsilon_per_user=4. {_NOTHING}"
        )
    sp = (0.75, 0.25) if split is None else split
    try:
        a, b = sp
        ea, eb = exact(a, "split[0]"), exact(b, "split[1]")
        ok = ea > 0 and eb > 0 and ea + eb == 1
    except (TypeError, ValueError, InvalidInputError):
        ok = False
    if not ok:
        raise InvalidInputError(
            f"split={split!r} must be two positive shares (mean, variance) summing to 1, "
            f"e.g. split=(0.75, 0.25). {_NOTHING}"
        )
    return total, (ea, eb)


def reduce_partition(
    part: pd.DataFrame, cols: Any, value: str, cells: Any, lo: Fraction, hi: Fraction,
    clamp: bool,
) -> tuple[pd.DataFrame, str | None]:  # fmt: skip
    """Validate one partition and reduce it to (user, cell, m, s1, s2) rows (runs on a worker).

    Exact int64 sums of the snapped values; no noise, nothing written. Also returns the input
    CRS (WKT) the points were read in, or None for an empty partition.
    """
    import warnings

    from gpframe.dask.partitions import _frame
    from gpframe.geo import locate_points
    from gpframe.queries.grid_cells import as_h3, h3_cells
    from gpframe.queries.grid_stats import checked_values
    from gpframe.queries.grid_user_stats import snap

    out_cols = {"user": [], "cell": np.zeros(0, np.uint64), "m": np.zeros(0, np.int64),
                "s1": np.zeros(0, np.int64), "s2": np.zeros(0, np.int64)}  # fmt: skip
    if len(part) == 0:
        return pd.DataFrame(out_cols), None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a worker's warning would stay in its log
        frame = _frame(part, cols)
        located = locate_points(
            frame, user=cols.user, x=cols.x, y=cols.y, lon=cols.lon, lat=cols.lat, crs=cols.crs,
            to_crs=cols.to_crs, domain=cols.domain,
        )  # fmt: skip
    x = checked_values(frame, value, lo, hi, clamp=clamp, name="ddf")
    if isinstance(cells, str):
        keys = as_h3(frame[cells], f"column {cells!r}")
    else:
        keys = h3_cells(located, int(cells))
    k, T, _q = snap(x, lo, hi)
    d = 2 * k - T
    t = pd.DataFrame({"user": np.asarray(located.users), "cell": keys,
                      "m": np.ones(k.size, np.int64), "s1": k, "s2": d * d})  # fmt: skip
    return t.groupby(["user", "cell"], sort=True, as_index=False).sum(), located.crs_in.to_wkt()


#: partitions' sums added per task: a user's rows may be in every partition, so each table can
#: hold as many rows as there are (user, cell) pairs; a few at a time keep a worker's memory flat
FAN_IN = 4


def add_sums(*tables: pd.DataFrame) -> pd.DataFrame:
    """Add per-(user, cell) sums of several partitions (exact: int64 sums)."""
    t = pd.concat(tables, ignore_index=True)
    return t.groupby(["user", "cell"], sort=True, as_index=False).sum()


def tree_sum(tables: list[Any]) -> Any:
    """Build a dask.delayed tree of :func:`add_sums`, ``FAN_IN`` tables per task, one on top.

    The client receives only the final table (one row per (user, cell) pair), never every
    partition's: with users spread over all partitions the partitions' tables together can be
    as large as the input.
    """
    import dask

    level = list(tables)
    while len(level) > 1:
        level = [dask.delayed(add_sums)(*level[i:i + FAN_IN])
                 for i in range(0, len(level), FAN_IN)]  # fmt: skip
    return level[0]  # a dask frame has at least one partition


def split_by_user(table: pd.DataFrame, buckets: int) -> list[pd.DataFrame]:
    """Split a partition's sums into ``buckets`` tables by a hash of the user (pandas' own)."""
    if buckets == 1:
        return [table]
    h = pd.util.hash_array(np.asarray(table["user"])) % np.uint64(buckets)
    return [table[h == b] for b in range(buckets)]


def concat_sorted(*tables: pd.DataFrame) -> pd.DataFrame:
    """Concatenate the buckets' sums sorted by (user, cell) (users never span buckets)."""
    return pd.concat(tables, ignore_index=True).sort_values(["user", "cell"], ignore_index=True)


def pair_sums(
    parts: list[Any], cols: Any, value: str, cells: Any, lo: Fraction, hi: Fraction, clamp: bool
) -> tuple[Any, list[Any]]:
    """Delayed (one row per (user, cell) pair with its exact sums, each partition's input CRS).

    Each partition's sums are split by user into one bucket per ``FAN_IN`` partitions and each
    bucket is added in its own :func:`tree_sum`: no task holds more than ``FAN_IN`` tables of
    about one partition's pairs divided by the number of buckets, so a worker's memory stays
    flat however many partitions a user's rows are spread over.
    """
    import dask

    buckets = max(1, -(-len(parts) // FAN_IN))
    reduced = [dask.delayed(reduce_partition, nout=2)(d, cols, value, cells, lo, hi, clamp)
               for d in parts]  # fmt: skip
    split = [dask.delayed(split_by_user, nout=buckets)(r[0], buckets) for r in reduced]
    tops = [tree_sum([sp[b] for sp in split]) for b in range(buckets)]
    return dask.delayed(concat_sorted)(*tops), [r[1] for r in reduced]


def grid_stats(
    bound: Any, *, value: str, bounds: Any, epsilon_per_user: Any, cells: Any, occupancy: Any,
    clamp: bool, beta: float, split: Any, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False, shrink: bool = True, epsilon: Any = None,
    epsilon_per_statistic: Any = None, public_cells: Any = None, max_cells: Any = None,
    max_per_cell: Any = None, salt: Any = None, order_by: Any = None, clip: str = "clip-user",
    plan_options: dict[str, Any] | None = None,
) -> Any:  # fmt: skip
    """Run grid_stats on a bound dask frame (see :meth:`gpframe.dask.DaskGeoPriv.grid_stats`)."""
    import dask
    import pyproj

    from gpframe.accounting.amounts import probability
    from gpframe.dask.driver import check_on_exhausted, settle
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.clip_user import occupancy_from_records
    from gpframe.queries.grid_stats import central_kind, value_bounds
    from gpframe.queries.grid_user_output import user_stats_output
    from gpframe.queries.grid_user_stats import PairSums, run_user_grid_stats

    # -- on the client, before anything is computed or reserved
    session = bound.session
    rng = resolve_rng(rng)
    central_kind(session)
    probability(beta)
    check_on_exhausted(on_exhausted)
    from gpframe.queries.grid_stats import CLIPS

    if clip not in CLIPS:
        raise InvalidInputError(
            f"clip={clip!r} is not one of {', '.join(map(repr, CLIPS))}. {_NOTHING}"
        )
    name, amount = _which_epsilon(epsilon, epsilon_per_user, epsilon_per_statistic)
    per_user = name == "epsilon_per_user"
    if per_user and clip != "clip-user":
        raise InvalidInputError(
            f"clip={clip!r} applies to the per-statistic form only; epsilon_per_user plans its "
            f"own contribution bounds (docs/operations/grid_stats.md). Drop clip=. {_NOTHING}"
        )
    occupancy, table = _check_occupancy(occupancy)
    if occupancy == "public" and (public_cells, max_cells, max_per_cell) != (None,) * 3:
        raise InvalidInputError(
            "public_cells, max_cells and max_per_cell apply to occupancy='private' only. "
            f"{_NOTHING}"
        )
    if per_user:
        total, sp = _check_args(bound.ddf._meta, value, cells, amount, split)
    else:
        from gpframe.queries.grid_stats import check_cells_argument, check_value_column

        check_value_column(bound.ddf._meta, value)
        check_cells_argument(bound.ddf._meta, cells)
        total, sp = _check_statistic(name, amount, split)
    lo, hi = value_bounds(bounds)
    if occupancy == "private":
        from gpframe.dask.grid_private import grid_private

        return grid_private(
            bound, value=value, lo=lo, hi=hi, eps=total, per_user=per_user, split=sp,
            cells=cells, clamp=clamp, beta=beta, public_cells=public_cells, max_cells=max_cells,
            max_per_cell=max_per_cell, salt=salt, order_by=order_by, rng=rng,
            on_exhausted=on_exhausted, dry_run=dry_run, shrink=bool(shrink),
        )  # fmt: skip
    if not per_user:
        from gpframe.dask.grid_clip import grid_clip

        return grid_clip(
            bound, value=value, lo=lo, hi=hi, eps=total, split=sp, cells=cells, clamp=clamp,
            beta=beta, clip=clip, order_by=order_by, plan_options=dict(plan_options or {}),
            rng=rng, on_exhausted=on_exhausted, dry_run=dry_run, table=table,
        )  # fmt: skip
    if order_by is not None:
        raise InvalidInputError(
            f"order_by= applies to occupancy='private' and the per-statistic form. {_NOTHING}"
        )
    cols = bound.cols

    # -- first pass: per-(user, cell) exact sums per partition, added on the workers
    t, crs_wkt = dask.compute(*pair_sums(bound.ddf.to_delayed(), cols, value, cells, lo, hi,
                                         clamp))  # fmt: skip
    if len(t) == 0:
        raise InvalidInputError(f"the frame has no rows: nothing to summarise. {_NOTHING}")
    occ = occupancy_from_records(t["user"].to_numpy(), t["cell"].to_numpy(np.uint64),
                                 t["m"].to_numpy(np.int64))  # fmt: skip
    if table is not None:  # fail closed unless the declared table is the data's occupancy
        from gpframe.queries.grid_occupancy import check_matches

        occ = check_matches(table, occ)
    pos = occ.pair_rows(np.searchsorted(occ.users, t["user"].to_numpy()),
                        np.searchsorted(occ.cells, t["cell"].to_numpy(np.uint64)))  # fmt: skip
    s = [np.zeros(occ.u.size, np.int64) for _ in range(3)]
    for arr, name in zip(s, ("m", "s1", "s2"), strict=True):
        arr[pos] = t[name].to_numpy(np.int64)
    sums = PairSums(*s)
    crs_in = pyproj.CRS.from_wkt(next(c for c in crs_wkt if c is not None))

    def go(**_: Any) -> Any:  # the reservation and release (on_exhausted: see settle)
        ran = run_user_grid_stats(
            session, occ, None, None, None, lower=lo, upper=hi, total=total, split=sp,
            beta=beta, rng=rng, sums=sums, shrink=bool(shrink),
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
        )  # fmt: skip
        return user_stats_output(session, occ, ran, crs_in=crs_in, lo=lo, hi=hi, total=total,
                                 cells=cells, beta=beta)  # fmt: skip

    return settle(session, "grid_stats", go, on_exhausted=on_exhausted, dry_run=dry_run)
