"""Checks and descriptions of a split by a public column, shared by the pandas and Dask faces.

See ``docs/wide-extents.md``: ``df.geopriv(..., partition="region")`` gives each part its own
metric CRS from its own public extent. A released point lies on the lattice of the metric CRS it
was noised in, so the output reveals each row's part: the column must be public and must not be
computed from the coordinates. :func:`derived_matches` recognises the commonest such columns
(a UTM zone, an EPSG code, an H3 cell of the points) on a block of rows; the pandas face reads
the whole frame at once, the Dask face intersects the matches of its partitions (a function of
the points on every row of the frame is one on every row of each partition).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError

__all__ = ["derived_from_points", "derived_matches", "describe_part", "refuse"]

_NOTHING = "Nothing was charged."


def refuse(partition: Any, why: str) -> InvalidInputError:
    """Build the refusal of a partition column that holds or is computed from the points."""
    return InvalidInputError(
        f"partition={partition!r}: {why} A released point lies on the lattice of the metric CRS "
        "it was noised in, so the output reveals each row's part: a part computed from the "
        "coordinates would release a function of the true point. Split by a public column "
        f"fixed without looking at the points (a state, a fleet, a study area). {_NOTHING}"
    )


def derived_from_points(col: pd.Series, located: Any) -> str | None:
    """Name the function of the points ``col`` equals on every row, or None.

    A safety net for the commonest cases (the UTM zone as a number, an EPSG code or a name such
    as ``18N``; an H3 cell id at the cells' own resolution). Other functions of the points
    (a relabelled zone, a rounded longitude) cannot be recognised: only the caller knows what
    is public.
    """
    found = derived_matches(col, located)
    return found[0] if found else None


def derived_matches(col: pd.Series, located: Any) -> list[str]:
    """Every function of the points that ``col`` equals on every row, in a fixed order.

    Examples
    --------
    >>> from gpframe.geo import locate_points
    >>> df = pd.DataFrame({"u": [1, 2], "lon": [-74.0, -73.5], "lat": [40.7, 40.8],
    ...                    "zone": [18, 18], "fleet": ["a", "b"]})
    >>> loc = locate_points(df, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    >>> derived_matches(df["zone"], loc), derived_matches(df["fleet"], loc)
    (['the UTM zone number of the points'], [])
    """
    lon, lat = located.lonlat()
    lon = (np.asarray(lon, dtype=np.float64) + 180.0) % 360.0 - 180.0
    lat = np.asarray(lat, dtype=np.float64)
    zone = (np.floor((lon + 180.0) / 6.0).astype(np.int64) % 60) + 1
    north = lat >= 0
    epsg = np.where(north, 32600, 32700) + zone
    found: list[str] = []
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=np.float64)
        if np.array_equal(v, zone):
            found.append("the UTM zone number of the points")
        if np.array_equal(v, epsg):
            found.append("the EPSG code of the points' UTM zones")
    text = col.astype(str).str.upper().str.replace(" ", "", regex=False).to_numpy()
    names = {
        "the UTM zone of the points": np.char.add(zone.astype(str), np.where(north, "N", "S")),
        "the EPSG code of the points' UTM zones": np.char.add("EPSG:", epsg.astype(str)),
    }
    for what, ref in names.items():
        if what not in found and np.array_equal(text, ref.astype(object)):
            found.append(what)
    h3_match = _h3_of_points(col, lon, lat)
    if h3_match is not None:
        found.append(h3_match)
    return found


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


def describe_part(value: Any, p: Any, n_points: int | None = None) -> dict[str, Any]:
    """One part's value, metric CRS, ``scale_max``, noise inflation and points (``params``).

    ``p`` is the part's :class:`~gpframe.geo.Projected` points (or any object with their
    ``crs_m``, ``scale_max`` and ``noise_inflation``); ``n_points`` defaults to ``len(p)``.
    """
    v = value.item() if hasattr(value, "item") else value
    return {
        "value": v if isinstance(v, (str, int, float, bool)) else str(v),
        "crs_m": p.crs_m.to_string(),
        "scale_max": float(p.scale_max),
        "noise_inflation": float(p.noise_inflation),
        "n_points": len(p) if n_points is None else int(n_points),
    }
