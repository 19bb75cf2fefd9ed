"""A caller-declared public occupancy table for ``grid_stats``, checked against the data.

See ``docs/operations/grid_stats.md``: with public occupancy, grid_stats protects the sample
values only, and the caller states that the occupancy (which users have how many samples in
which cells) is public, by ``occupancy="public"`` or by passing the public table itself
(columns ``user``, ``cell``, ``count``). The table is checked against the data's own
per-(user, cell) counts and the query fails closed, before anything is charged, when they
differ. Shared by the pandas face (which counts the frame's rows) and the Dask face (which
adds the partitions' counts exactly): :func:`table_occupancy` reads the table before the data
is read, :func:`check_matches` compares it with the data's counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries.clip_user import Occupancy, occupancy_from_records
from gpframe.queries.grid_cells import as_h3

__all__ = ["check_matches", "table_occupancy"]

_NOTHING = "Nothing was charged."


def table_occupancy(occupancy: pd.DataFrame) -> Occupancy:
    """Read a public occupancy table (user, cell, count) into an :class:`Occupancy`.

    Examples
    --------
    >>> import h3
    >>> c = h3.latlng_to_cell(40.7, -74.0, 7)
    >>> occ = table_occupancy(pd.DataFrame({"user": [1, 2], "cell": [c, c], "count": [3, 1]}))
    >>> occ.users.tolist(), occ.m.tolist()
    ([1, 2], [3, 1])
    """
    missing = [c for c in ("user", "cell", "count") if c not in occupancy.columns]
    if missing:
        raise InvalidInputError(
            f"the occupancy table lacks column(s) {missing}; it needs user, cell, count. {_NOTHING}"
        )
    t_cells = as_h3(occupancy["cell"], "the occupancy table's 'cell' column")
    cnt = occupancy["count"]
    if not pd.api.types.is_integer_dtype(cnt):
        raise InvalidInputError(f"the occupancy table's 'count' must be integers. {_NOTHING}")
    return occupancy_from_records(occupancy["user"].to_numpy(), t_cells, cnt.to_numpy())


def check_matches(table: Occupancy, data: Occupancy) -> Occupancy:
    """Return ``table`` if it equals the data's per-(user, cell) counts, else refuse (fail closed).

    Examples
    --------
    >>> import h3
    >>> c = h3.latlng_to_cell(40.7, -74.0, 7)
    >>> key = np.uint64(h3.str_to_int(c))  # the data's cells, as H3 integers
    >>> data = occupancy_from_records(np.array([1, 1, 2]), np.array([key] * 3))
    >>> t = table_occupancy(pd.DataFrame({"user": [1, 2], "cell": [c, c], "count": [2, 1]}))
    >>> check_matches(t, data) is t
    True
    """
    same = (
        np.array_equal(table.users, data.users)
        and np.array_equal(table.cells, data.cells)
        and np.array_equal(table.u, data.u)
        and np.array_equal(table.j, data.j)
        and np.array_equal(table.m, data.m)
    )
    if not same:
        raise InvalidInputError(
            "the public occupancy table does not match the data's per-(user, cell) counts; "
            "grid_stats fails closed (docs/operations/grid_stats.md). Rebuild the table from the "
            "same "
            f"cleaned data and cells. {_NOTHING}"
        )
    return table
