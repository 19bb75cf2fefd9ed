"""The result of a ``range_count`` over one or several regions (``docs/operations/range_count.md``).

Each region is one query with its own :class:`~gpframe.results.Result`; :func:`combine_regions`
gathers them into the :class:`~gpframe.results.RangeCountResult` every face returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from gpframe.results import RangeCountResult, Result

__all__ = ["combine_regions"]


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
    if results:
        charges = pd.concat([r.charges for r in results]).groupby(level=0, sort=False).sum()
        allocs = pd.concat([r.allocations for r in results]).groupby(level=0, sort=False).sum()
    else:
        charges = pd.Series(dtype=np.float64)
        allocs = pd.Series(dtype=np.float64)
    seen = pd.Index(pd.unique(users))
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
