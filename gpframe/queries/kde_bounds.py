"""Public KDE inputs in metres (``docs/operations/kde.md``): raster bounds and query points.

Shared by the faces' ``kde_raster`` and ``kde``: both are public, so projecting them reads no
data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import shapely

from gpframe.errors import InvalidInputError
from gpframe.queries.kde import LENGTH_MAX_M

__all__ = ["bounds_m", "kde_points_result", "query_points"]

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


def query_points(at: Any, crs_in: Any, crs_m: Any) -> tuple[np.ndarray, Any, bool]:
    """Project public query points to metres: (m × 2 array, GeoSeries in their CRS, many).

    ``at``: a shapely Point, a GeoSeries / GeoDataFrame of points, or an (m, 2) array of (x, y)
    in the data's CRS ``crs_in``. Shared by the faces' ``kde`` at query points; the points are
    public, so projecting them reads no data.
    """
    import geopandas as gpd

    from gpframe.geo import project_geometry

    many = True
    if isinstance(at, shapely.Point):
        series, many = gpd.GeoSeries([at], crs=crs_in), False
    elif isinstance(at, pd.DataFrame):
        if not isinstance(at, gpd.GeoDataFrame):
            raise InvalidInputError(
                f"at is a DataFrame without geometry; pass a GeoSeries / GeoDataFrame of points "
                f"or an (m, 2) array in the data's CRS. {_NOTHING}"
            )
        series = at.geometry
    elif isinstance(at, gpd.GeoSeries):
        series = at
    else:
        try:
            arr = np.asarray(at, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        # ndim 0 first: at=None is a 0-d NaN array, whose shape[-1] raised IndexError
        if arr is None or arr.ndim not in (1, 2) or arr.size == 0 or arr.shape[-1] != 2:
            raise InvalidInputError(
                f"at={at!r} is not a shapely Point, a GeoSeries / GeoDataFrame of points or an "
                f"(m, 2) array of (x, y) (lon, lat for degrees) in the data's CRS. {_NOTHING}"
            )
        many = arr.ndim == 2
        arr = arr.reshape(-1, 2)
        if not np.isfinite(arr).all():
            raise InvalidInputError(f"at has NaN or infinite coordinates. {_NOTHING}")
        series = gpd.GeoSeries(gpd.points_from_xy(arr[:, 0], arr[:, 1]), crs=crs_in)
    if len(series) == 0:
        raise InvalidInputError(f"at is empty: pass at least one query point. {_NOTHING}")
    if series.isna().any() or not (series.geom_type == "Point").all() or series.is_empty.any():
        raise InvalidInputError(f"at must contain only non-empty Points. {_NOTHING}")
    if series.crs is None:
        series = series.set_crs(crs_in)
    m = project_geometry(series, crs_in, crs_m, name="at")
    xy = shapely.get_coordinates(np.asarray(m.array, dtype=object))
    from gpframe.queries.privatize import COORD_MAX_M

    if not (np.isfinite(xy).all() and (np.abs(xy) < COORD_MAX_M).all()):
        raise InvalidInputError(
            f"a query point does not land at finite metres in {crs_m.to_string()}; "
            f"check its CRS. {_NOTHING}"
        )
    return xy, series, many


def _floats(objs: np.ndarray) -> np.ndarray:
    uniq: dict[Any, float] = {}
    return np.array([uniq.setdefault(v, float(v)) for v in objs.tolist()], dtype=np.float64)


def kde_points_result(
    rows: list[dict[str, Any]], q_series: Any, keys: Any, admitted_any: np.ndarray, *,
    many: bool, beta: float, kind: str, method: str, params: dict[str, Any], n_points: int,
    hist: np.ndarray, r_min: float, charges: np.ndarray, allocs: np.ndarray, qids: list[str],
) -> Any:  # fmt: skip
    """Return the :class:`~gpframe.results.KdeResult` of committed point queries (both faces).

    ``rows`` holds one released row per query point (kde, error, n_far, n_near, saving,
    query_id); ``charges``/``allocs`` are per user in exact amounts, summed over the points.
    Called only after every point's charge is committed.
    """
    import geopandas as gpd

    from gpframe.results import KdeResult

    table = gpd.GeoDataFrame(pd.DataFrame(rows, index=q_series.index),
                             geometry=q_series.array, crs=q_series.crs)  # fmt: skip
    idx = pd.Index(np.asarray(keys, dtype=object)[admitted_any])
    return KdeResult(
        value=table if many else float(table["kde"].iloc[0]),
        error=None if many else float(table["error"].iloc[0]),
        confidence=1.0 - float(beta),
        mechanism=("gaussian_cgp" if kind == "cgp" else
                   ("laplace_gp" if method.startswith("dist") else "planar_laplace")),
        params={**params, "n_points": n_points, "rounds_histogram": hist.tolist()},
        kind=kind,
        metric=("floor", r_min),
        r_min=r_min,
        charges=pd.Series(_floats(charges[admitted_any]), index=idx, dtype=np.float64),
        allocations=pd.Series(_floats(allocs[admitted_any]), index=idx, dtype=np.float64),
        excluded=[k for k, a in zip(keys, admitted_any, strict=True) if not a],
        query_id=qids[0] + (f" (+{len(qids) - 1} more)" if len(qids) > 1 else ""),
        points=table,
    )  # fmt: skip
