"""``grid_stats(..., occupancy="private")``: the public cell list and the output, for every face.

See ``docs/operations/grid_stats.md`` (private occupancy: contribution bounding, every public
cell released). Built from a :class:`gpframe.queries.contribution_bounding.PrivateRun` after
its charge is committed, the same for the pandas accessor and the Dask face: one row per public
cell with the released ``count``, ``mean``, ``variance``, ``mean_error`` and ``released``,
hexagons in the input CRS, and the :class:`~gpframe.results.GridStatsResult` in
``attrs["geopriv"]``. Draws no noise.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.queries.grid_cells import as_h3, hexagons
from gpframe.results import GridStatsResult

__all__ = ["private_stats_output", "public_cell_keys", "spent_bound"]

_NOTHING = "Nothing was charged."


def public_cell_keys(public_cells: Any, cells: Any, crs_in: Any) -> np.ndarray:
    """Return the public cell list as uint64 H3 indexes (an explicit list, or an area cover).

    ``public_cells`` is a list of H3 cells (str or int), or an area (a shapely geometry in
    ``crs_in``, or a GeoSeries / GeoDataFrame) covered by the cells of resolution ``cells``.

    >>> public_cell_keys(["8828308281fffff"], 8, "EPSG:4326").tolist()
    [613196570331971583]
    """
    import shapely

    if public_cells is None:
        from gpframe.queries.contribution_bounding import public_cell_list

        public_cell_list(None)  # raises the explanatory error
    geom = public_cells
    if hasattr(geom, "union_all") and hasattr(geom, "crs"):  # GeoSeries / GeoDataFrame
        geom = geom.to_crs("EPSG:4326").union_all()
    elif isinstance(geom, shapely.Geometry):
        import geopandas as gpd

        geom = gpd.GeoSeries([geom], crs=crs_in).to_crs("EPSG:4326").iloc[0]
    else:
        return np.unique(as_h3(pd.Series(list(public_cells)), "public_cells"))
    if isinstance(cells, str):
        raise InvalidInputError(
            "public_cells is an area, so cells= must be an H3 resolution (to cover the area "
            f"with cells of that resolution). {_NOTHING}"
        )
    import h3

    out = h3.geo_to_cells(geom, int(cells))
    if not out:
        raise InvalidInputError(
            f"public_cells covers no H3 cell at resolution {cells}; use a larger area or a "
            f"finer resolution. {_NOTHING}"
        )
    return np.unique(np.array([h3.str_to_int(c) for c in out], dtype=np.uint64))


def spent_bound(session: Any, amounts: Any, cells: int) -> float:
    """Return the public per-user bound: one ε-DP draw per amount in each of ``cells`` cells.

    In the central filter's units, rounded up exactly as the ledger charges, so no user's
    charge exceeds it; it depends on public parameters only (Γ′ is a function of the declared
    public occupancy, ``max_cells`` a public cap).
    """
    ledger = session.ledger
    units = 0
    for amt in amounts:
        u, _big = ledger.units_for("central", amt, np.array([int(cells)]), kind="dp")
        units += int(u[0])
    return units / 10.0 ** ledger.units["central"].exponent


def private_stats_output(
    session: Any, run: Any, *, crs_in: Any, eps: Fraction, total: Fraction,
    epsilons: tuple[Fraction, ...] | None, lo: Fraction, hi: Fraction, cells: Any, beta: float,
    shrink: bool = True,
) -> Any:  # fmt: skip
    """Return the GeoDataFrame of a committed private-occupancy run (``attrs["geopriv"]``).

    ``epsilons`` is the per-user-total form's (ε_n, ε_1, ε_2) (``total`` its
    ``epsilon_per_user``), None for the per-statistic form (``eps`` per statistic).
    """
    import geopandas as gpd
    import h3

    from gpframe.queries.contribution_bounding import STATISTICS_PRIVATE

    per_user = epsilons is not None
    rel, b = run.release, run.bounded
    idx = pd.Index([h3.int_to_str(int(c)) for c in b.cells.tolist()], name="cell")
    stat_eps = (eps,) * STATISTICS_PRIVATE if epsilons is None else epsilons
    df = pd.DataFrame(
        {
            "count": rel.count,
            "mean": rel.mean,
            "variance": rel.var,
            "mean_error": rel.mean_error,
            "released": (np.ones(b.cells.size, dtype=bool) if rel.released is None
                         else rel.released),
        },
        index=idx,
    )  # fmt: skip
    geom = hexagons(b.cells, crs_in)
    out = gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geom.array, index=idx), crs=crs_in)
    finite = np.isfinite(rel.mean_error)
    result = GridStatsResult(
        value=out,
        error=float(np.max(rel.mean_error[finite])) if finite.any() else None,
        confidence=1.0 - beta,
        params={
            **({} if per_user else {"epsilon": float(eps)}),
            "bounds": (float(lo), float(hi)),
            "occupancy": "private",
            "cells": cells,
            "beta": beta,
            "max_cells": b.max_cells,
            "max_per_cell": b.max_per_cell,
            "worst_case_epsilon": float(sum(stat_eps)) * b.max_cells,
            **(
                {
                    "epsilon_per_user": float(total),
                    "epsilons": tuple(float(e) for e in stat_eps),
                    "estimator": "per-user averages",
                    "shrink": bool(shrink),
                }
                if per_user
                else {}
            ),
        },
        kind=run.fkind,
        query_id=run.query_id,
        # the public bound (3 draws per cell, at most max_cells cells), never the realised
        # charges: those count each user's occupied cells, which this mode protects
        spent_at_most=spent_bound(session, stat_eps, b.max_cells),
        Gamma=b.max_cells,
        Gamma_prime=b.max_cells,
    )
    out.attrs["geopriv"] = result.to_attr()
    return out
