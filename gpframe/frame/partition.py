"""``df.geopriv(..., partition="region")``: one public projection per part of a public column.

Data spanning a country or a continent is noised in one metric CRS chosen over its whole public
extent, at a noise inflation of up to a few percent (``docs/wide-extents.md``). A split by a
*public* column (a state, a fleet, a study area, fixed without looking at the points) lets each
part choose its metric CRS from its own public extent (its ``domain=`` or its data extent
rounded outward to whole degrees), so each part is noised at the inflation of a small extent.

Why the column must be public and must not be computed from the coordinates: a released point
lies exactly on the lattice of the metric CRS it was noised in, so the output reveals which CRS,
and so which part, each row belongs to. A part computed from the point itself (its UTM zone, an
H3 cell, a rounded longitude) would therefore release a function of the protected point with no
noise, outside the guarantee. The partition column is kept in the output like every other
declared-public column; the coordinate columns, the geometry and columns detected as UTM zones
or H3 cells of the points are refused.

Charge model: the call is one query (one query id in the ledger); each part is a release of its
own, so a user is charged the operation's amount once per part they have rows in (a user in two
parts pays twice). Operations: ``privatize`` (each part's points at the amount, ``per="user"``
dividing it among the user's points of that part), ``range_count``, ``knn`` and
``convex_hull`` (``gpframe.frame.knn_parts``: k-PNN per part with ranks within a user's rows
of one part; one hull per user and part); the
other operations refuse a split (run them once per part with ``domain=`` instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries.partition_check import derived_from_points, describe_part, refuse

_NOTHING = "Nothing was charged."

__all__ = ["Merged", "Part", "check_partition", "describe", "split"]


@dataclass(frozen=True, eq=False)
class Part:
    """One part of a split: its public value, its row positions and its projected points."""

    value: Any
    rows: np.ndarray
    projected: Any


def check_partition(
    frame: pd.DataFrame, partition: Any, *, located: Any, protected: Any, to_crs: Any, domain: Any
) -> dict[Any, Any] | None:
    """Validate ``partition=`` (and a per-part ``domain=``) before anything is charged.

    Returns the per-part ``domain=`` boxes (None: each part uses ``domain=`` if one box was
    given, else its own data extent rounded outward to whole degrees). Raises
    :class:`~gpframe.errors.InvalidInputError` for a column that is missing, has missing
    values, holds the coordinates or the geometry, or is detected as computed from the points
    (their UTM zone or H3 cell); ``to_crs=`` with a partition (one named CRS for every part
    defeats the split) is refused too. See ``docs/wide-extents.md``.
    """
    try:
        known = partition in frame.columns
    except TypeError:
        known = False
    if not known:
        raise InvalidInputError(
            f"partition={partition!r} is not a column of the frame (columns: "
            f"{list(map(str, frame.columns))[:12]}). Name a public column, e.g. "
            f"partition='region'. {_NOTHING}"
        )
    if partition in tuple(protected) or partition in tuple(getattr(located, "coords", ())):
        raise refuse(partition, "it holds the coordinates (or the geometry).")
    if to_crs is not None:
        raise InvalidInputError(
            f"partition={partition!r} with to_crs={to_crs!r}: a split chooses one metric CRS per "
            "part, to_crs= names one for all. Pass one of them (per-part public extents go in "
            f"domain={{part: (lon_min, lat_min, lon_max, lat_max), ...}}). {_NOTHING}"
        )
    col = frame[partition]
    if col.isna().any():
        raise InvalidInputError(
            f"partition={partition!r}: column {partition!r} has missing values; every row needs "
            f"its part. Fill or drop them. {_NOTHING}"
        )
    derived = derived_from_points(col, located)
    if derived is not None:
        raise refuse(partition, f"column {partition!r} equals {derived} on every row.")
    if not isinstance(domain, Mapping):
        return None
    values = pd.unique(col)
    missing = [v for v in values.tolist() if v not in domain]
    if missing:
        raise InvalidInputError(
            f"domain=: no public extent for the part(s) {missing[:5]!r} of partition="
            f"{partition!r}. Give every part a box (lon_min, lat_min, lon_max, lat_max), or "
            f"pass one box for all. {_NOTHING}"
        )
    for v in values.tolist():  # validate every box now, not at the first metric operation
        located.subset(np.zeros(0, dtype=np.int64), domain=domain[v])
    return {v: domain[v] for v in values.tolist()}


def split(bound: Any, refuse_copies: Callable[..., None]) -> list[Part]:
    """Project each part with its own public extent (may warn or raise, before any charge).

    ``refuse_copies(frame, public, projected)`` refuses a public column that copies a part's
    projected coordinates (the accessor's check, passed in: the accessor imports this module).
    """
    col = bound.frame[bound.partition]
    try:
        codes, values = pd.factorize(col, sort=True)
    except TypeError:  # values of mixed types: order of first appearance
        codes, values = pd.factorize(col, sort=False)
    domains = bound.partition_domains or {}
    parts = []
    for i, v in enumerate(values.tolist()):
        rows = np.flatnonzero(codes == i)
        p = bound.located.subset(rows, domain=domains.get(v)).project(threads=None)
        # reads the rows only to refuse public columns that copy the coordinates; outputs nothing
        refuse_copies(bound.frame.iloc[rows], bound.public[1:], p)  # public-only: a check
        parts.append(Part(value=v, rows=rows, projected=p))
    return parts


def describe(parts: list[Part]) -> list[dict[str, Any]]:
    """Each part's value, metric CRS, ``scale_max`` and noise inflation (for ``params``)."""
    return [describe_part(part.value, part.projected) for part in parts]


@dataclass(frozen=True, eq=False)
class Merged:
    """The parts' privatize arrays merged in input row order (what the result builder reads)."""

    xy: np.ndarray
    max_error_m: np.ndarray
    max_error_all_m: float
    n_calls: int
    guarantees: list[Any]
