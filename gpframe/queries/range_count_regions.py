"""The result of a ``range_count`` over one or several regions (``docs/operations/range_count.md``).

Each region is one query with its own :class:`~gpframe.results.Result`; :func:`combine_regions`
gathers them into the :class:`~gpframe.results.RangeCountResult` every face returns. The
regions are validated and projected here once for every face (:func:`project_regions`, before
the ledger is touched), and a zones frame's public columns are named by :func:`zone_columns`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import shapely

from gpframe.errors import CRSError, InvalidInputError
from gpframe.results import RangeCountResult, Result

__all__ = [
    "REGION_TABLE_COLUMNS", "check_crs_extent", "combine_regions", "project_regions",
    "zone_columns",
]  # fmt: skip

_NOTHING = "Nothing was charged."


def project_regions(region: Any, projected: Any) -> tuple[list[Any], pd.Index, Any, Any, bool]:
    """Validate and project the region(s): (metre polygons, labels, input GeoSeries, CRS, many).

    Everything here happens before any reservation (bad regions leave the ledger untouched).
    """
    import geopandas as gpd

    from gpframe.geo import project_geometry, validate_polygons

    many = isinstance(region, (pd.Series, pd.DataFrame))
    if many:
        if isinstance(region, pd.DataFrame):
            if not isinstance(region, gpd.GeoDataFrame) or region._geometry_column_name not in (
                region.columns
            ):
                raise InvalidInputError(
                    f"region is a DataFrame without an active geometry column; pass a "
                    f"GeoDataFrame or GeoSeries of polygons. {_NOTHING}"
                )
            series = region.geometry
        else:
            series = gpd.GeoSeries(region) if not isinstance(region, gpd.GeoSeries) else region
        if len(series) == 0:
            raise InvalidInputError(f"region is empty: pass at least one polygon. {_NOTHING}")
        crs = series.crs if series.crs is not None else projected.crs_in
    elif isinstance(region, (shapely.Polygon, shapely.MultiPolygon)):
        series = gpd.GeoSeries([region], crs=projected.crs_in)
        crs = projected.crs_in
    else:
        raise InvalidInputError(
            f"region must be a shapely Polygon / MultiPolygon (in the data's CRS) or a GeoSeries / "
            f"GeoDataFrame of them, got {type(region).__name__}. {_NOTHING}"
        )
    validate_polygons(series, name="region")
    check_crs_extent(series, crs)
    projected_s = project_geometry(series, projected.crs_in, projected.crs_m, name="region")
    polys = list(projected_s.array)
    from gpframe.queries.privatize import COORD_MAX_M

    for label, p in zip(series.index, polys, strict=True):
        if not p.area > 0:
            raise InvalidInputError(
                f"region {label!r} has zero area in metres; pass a polygon with an interior. "
                f"{_NOTHING}"
            )
        if not np.all(np.abs(shapely.get_coordinates(p)) < COORD_MAX_M):
            raise CRSError(
                f"region {label!r} lands beyond ±2**40 m in {projected.crs_m.to_string()}; its "
                f"CRS does not match the data's. Set the right CRS on the GeoSeries. {_NOTHING}"
            )
    return polys, series.index, series, crs, many


#: the per-region columns the output adds (released values and their bookkeeping)
REGION_TABLE_COLUMNS = (
    "count", "error", "n_charged", "n_excluded", "saving", "n_low", "n_high", "n_undecided",
    "rounds_histogram", "query_id",
)  # fmt: skip


def zone_columns(region: Any) -> tuple[Any, ...]:
    """Return the columns of a GeoDataFrame of regions that the output keeps (all but geometry).

    They are public: the caller passed them as (part of) the query, and nothing in them depends
    on the data. A name the output uses for a released value is refused here, before the ledger
    is touched.
    """
    import geopandas as gpd

    if not isinstance(region, gpd.GeoDataFrame):
        return ()
    geom = region._geometry_column_name
    cols = tuple(c for c in region.columns if c != geom)
    clash = [c for c in cols if c in REGION_TABLE_COLUMNS]
    if clash:
        raise InvalidInputError(
            f"region has the column(s) {', '.join(map(repr, clash))}, which the output uses for "
            f"the private counts; rename them first (region.rename(columns={{{clash[0]!r}: "
            f"'zone_{clash[0]}'}})). {_NOTHING}"
        )
    return cols


def check_crs_extent(series: Any, crs: Any) -> None:
    """Refuse coordinates that cannot be in ``crs``: e.g. metres given for a degree CRS."""
    import pyproj

    c = pyproj.CRS(crs)
    if c.is_geographic:
        xy = shapely.get_coordinates(np.asarray(series.array, dtype=object))
        if xy.size and (np.abs(xy[:, 0]).max() > 360 or np.abs(xy[:, 1]).max() > 90):
            raise CRSError(
                f"region has coordinates outside degree ranges (e.g. {xy[0].tolist()}) but is "
                f"taken to be in {c.name} (degrees). A region in metres needs its CRS: pass "
                f"gpd.GeoSeries([poly], crs='EPSG:32618'). {_NOTHING}"
            )


def combine_regions(
    results: list[Result],
    rows: list[dict[str, Any]],
    labels: pd.Index,
    series: Any,
    crs: Any,
    many: bool,
    users: np.ndarray,
    fixed: Any,
    plan: Any,
    *,
    params: dict[str, Any],
    confidence: float,
    kind: str,
    build: Callable[[pd.DataFrame, Any, Any], Any] | None = None,
) -> RangeCountResult:
    """Gather one count per region (each a :class:`~gpframe.results.Result`) into the result.

    Shared by the pandas and the Dask faces (``docs/operations/range_count.md``): the table of
    regions (count, error, charges, rounds per region), the per-user charges summed over the
    regions, and the excluded users. ``build(table, geometry, crs)``, when given, builds the
    table of regions (the pandas face keeps a zones frame's public columns that way).
    """
    import geopandas as gpd

    table = pd.DataFrame(rows, index=labels)
    geometry = series.to_crs(crs).array if series.crs is not None else series.array
    regions = (
        build(table, geometry, crs)
        if build is not None
        else gpd.GeoDataFrame(table, geometry=geometry, crs=crs, index=labels)
    )
    seen = pd.Index(pd.unique(users))
    one = results[0] if len(results) == 1 else None
    if one is not None and len(seen) == len(users) and one.charges.index.dtype.kind in "iu":
        # one region, one row per user, integer keys (which a groupby keeps as they are): its
        # per-user Series are the sums already (a groupby would copy them twice for nothing)
        charges, allocs = one.charges, one.allocations
    elif results:
        charges = pd.concat([r.charges for r in results]).groupby(level=0, sort=False).sum()
        allocs = pd.concat([r.allocations for r in results]).groupby(level=0, sort=False).sum()
    else:
        charges = pd.Series(dtype=np.float64)
        allocs = pd.Series(dtype=np.float64)
    excluded = seen[~seen.isin(charges.index)].tolist()  # vectorised: no lookup per user
    # baselines run one round (histogram of length 2), elimination c rounds (length c + 1)
    hist = np.zeros(max(len(r["rounds_histogram"]) for r in rows), dtype=np.int64)
    for r in rows:
        h = np.asarray(r["rounds_histogram"], dtype=np.int64)
        hist[: h.size] += h
    first = results[0] if results else None
    value: Any = regions if many else int(table["count"].iloc[0])
    return RangeCountResult(
        value=value,
        # several regions: each row's error holds at 1 - beta on its own; no joint bound is claimed
        error=None if many else float(table["error"].iloc[0]),
        confidence=confidence,
        mechanism=first.mechanism if first is not None else "",
        params={**params, "rounds_histogram": hist.tolist()},
        kind=kind,
        metric=first.metric if first is not None else ("floor", 1.0),
        r_min=first.r_min if first is not None else 1.0,
        charges=charges,
        allocations=allocs,
        excluded=excluded,
        # one ledger query per region; the per-region ids are in the table
        query_id=(
            results[0].query_id + (f" (+{len(results) - 1} more)" if len(results) > 1 else "")
        )
        if results
        else "",
        regions=regions,
        rounds_histogram=hist,
    )
