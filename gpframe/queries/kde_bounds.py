"""Public raster bounds in the data's CRS, as a metric envelope (``docs/operations/kde.md``).

Shared by the faces' ``kde_raster``: the bounds are public, so projecting them reads no data.
"""

from __future__ import annotations

import math
from typing import Any

import shapely

from gpframe.errors import InvalidInputError
from gpframe.queries.kde import LENGTH_MAX_M

__all__ = ["bounds_m"]

_NOTHING = "Nothing was charged."


def bounds_m(bounds: Any, projected: Any) -> tuple[float, float, float, float]:
    """Project public bounds (xmin, ymin, xmax, ymax) in the data's CRS to a metric envelope."""
    from gpframe.geo import project_geometry

    try:
        x0, y0, x1, y1 = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"bounds={bounds!r} must be (xmin, ymin, xmax, ymax) in the data's CRS. {_NOTHING}"
        ) from None
    if not all(map(math.isfinite, (x0, y0, x1, y1))) or not (x1 > x0 and y1 > y0):
        raise InvalidInputError(
            f"bounds={bounds!r} must be finite with xmax > xmin and ymax > ymin. {_NOTHING}"
        )
    if max(abs(x0), abs(y0), abs(x1), abs(y1)) >= LENGTH_MAX_M:
        # GEOS refuses to segmentize such a box; no CRS has coordinates this large
        raise InvalidInputError(
            f"bounds={bounds!r} are beyond ±2**40 in the data's CRS; give them in that CRS "
            f"(degrees for lon/lat data). {_NOTHING}"
        )
    box = shapely.box(x0, y0, x1, y1)
    box = shapely.segmentize(box, max(x1 - x0, y1 - y0) / 32)  # curved edges after projecting
    m = project_geometry(box, projected.crs_in, projected.crs_m, name="bounds")
    bx = m.bounds
    if not all(map(math.isfinite, bx)):
        raise InvalidInputError(f"bounds={bounds!r} do not project to finite metres. {_NOTHING}")
    return bx
