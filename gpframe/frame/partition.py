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

_NOTHING = "Nothing was charged."

__all__ = ["Merged", "Part", "check_partition", "describe", "split"]


@dataclass(frozen=True, eq=False)
class Part:
    """One part of a split: its public value, its row positions and its projected points."""

    value: Any
    rows: np.ndarray
    projected: Any


def _refuse(partition: Any, why: str) -> InvalidInputError:
    return InvalidInputError(
        f"partition={partition!r}: {why} A released point lies on the lattice of the metric CRS "
        "it was noised in, so the output reveals each row's part: a part computed from the "
        "coordinates would release a function of the true point. Split by a public column "
        f"fixed without looking at the points (a state, a fleet, a study area). {_NOTHING}"
    )


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
        raise _refuse(partition, "it holds the coordinates (or the geometry).")
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
    derived = _derived_from_points(col, located)
    if derived is not None:
        raise _refuse(partition, f"column {partition!r} equals {derived} on every row.")
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


def _derived_from_points(col: pd.Series, located: Any) -> str | None:
    """Name the function of the points ``col`` equals on every row, or None.

    A safety net for the commonest cases (the UTM zone as a number, an EPSG code or a name such
    as ``18N``; an H3 cell id at the cells' own resolution). Other functions of the points
    (a relabelled zone, a rounded longitude) cannot be recognised: only the caller knows what
    is public.
    """
    lon, lat = located.lonlat()
    lon = (np.asarray(lon, dtype=np.float64) + 180.0) % 360.0 - 180.0
    lat = np.asarray(lat, dtype=np.float64)
    zone = (np.floor((lon + 180.0) / 6.0).astype(np.int64) % 60) + 1
    north = lat >= 0
    epsg = np.where(north, 32600, 32700) + zone
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=np.float64)
        if np.array_equal(v, zone):
            return "the UTM zone number of the points"
        if np.array_equal(v, epsg):
            return "the EPSG code of the points' UTM zones"
    text = col.astype(str).str.upper().str.replace(" ", "", regex=False).to_numpy()
    names = {
        "the UTM zone of the points": np.char.add(zone.astype(str), np.where(north, "N", "S")),
        "the EPSG code of the points' UTM zones": np.char.add("EPSG:", epsg.astype(str)),
    }
    for what, ref in names.items():
        if np.array_equal(text, ref.astype(object)):
            return what
    return _h3_of_points(col, lon, lat)


def _h3_of_points(col: pd.Series, lon: np.ndarray, lat: np.ndarray) -> str | None:
    """Return a description if ``col`` holds each point's H3 cell (int or hex), else None."""
    import h3

    uniq = pd.unique(col)
    try:
        cells = [h3.int_to_str(int(u)) if not isinstance(u, str) else u.lower() for u in uniq]
    except (TypeError, ValueError, OverflowError):
        return None
    if not all(h3.is_valid_cell(c) for c in cells):
        return None
    res = {h3.get_resolution(c) for c in cells}
    if len(res) != 1:
        return None
    r = res.pop()
    to_cell = dict(zip(uniq.tolist(), cells, strict=True))
    have = [to_cell[v] for v in col.tolist()]
    want = [h3.latlng_to_cell(b, a, r) for a, b in zip(lon.tolist(), lat.tolist(), strict=True)]
    return f"the H3 cell (resolution {r}) of the points" if have == want else None


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
        p = bound.located.subset(rows, domain=domains.get(v)).project()
        # reads the rows only to refuse public columns that copy the coordinates; outputs nothing
        refuse_copies(bound.frame.iloc[rows], bound.public[1:], p)  # public-only: a check
        parts.append(Part(value=v, rows=rows, projected=p))
    return parts


def describe(parts: list[Part]) -> list[dict[str, Any]]:
    """Each part's value, metric CRS, ``scale_max`` and noise inflation (for ``params``)."""
    out = []
    for part in parts:
        p = part.projected
        v = part.value.item() if hasattr(part.value, "item") else part.value
        out.append({
            "value": v if isinstance(v, (str, int, float, bool)) else str(v),
            "crs_m": p.crs_m.to_string(),
            "scale_max": float(p.scale_max),
            "noise_inflation": float(p.noise_inflation),
            "n_points": len(p),
        })  # fmt: skip
    return out


@dataclass(frozen=True, eq=False)
class Merged:
    """The parts' privatize arrays merged in input row order (what the result builder reads)."""

    xy: np.ndarray
    max_error_m: np.ndarray
    max_error_all_m: float
    n_calls: int
    guarantees: list[Any]
