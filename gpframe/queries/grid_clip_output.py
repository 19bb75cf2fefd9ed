"""``grid_stats(epsilon_per_statistic=ε, occupancy="public")``: the output frame and Result.

See ``docs/operations/grid_stats.md`` (Clip-User, release, the per-statistic form). Built from a
:class:`gpframe.queries.grid_stats.GridStatsRun` after its charge is committed, the same for
the pandas accessor and the Dask face: one row per occupied cell with the released statistics,
their error bounds and public occupancy facts, hexagons in the input CRS, and the
:class:`~gpframe.results.GridStatsResult` in ``attrs["geopriv"]``. Draws no noise.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.queries.clip_user import ClipUserPlan
from gpframe.queries.grid_cells import hexagons
from gpframe.results import GridStatsResult

__all__ = ["clip_stats_output"]


def clip_stats_output(
    session: Any, run: Any, *, crs_in: Any, eps: Fraction, lo: Fraction, hi: Fraction,
    clip: str, cells: Any, beta: float,
) -> Any:  # fmt: skip
    """Return the GeoDataFrame of a committed Clip-User run (``attrs["geopriv"]``: its Result)."""
    from gpframe.queries.grid_private import spent_bound

    occ = run.plan.occupancy
    out = _build_frame(run.plan, run.release, crs_in)
    result = GridStatsResult(
        value=out,
        error=float(np.nanmax(run.release.mean_error)) if run.release.released.any() else None,
        confidence=1.0 - beta,
        params={
            "epsilon": float(eps),
            "bounds": (float(lo), float(hi)),
            "clip": clip,
            "cells": cells,
            "beta": beta,
            "worst_case_epsilon": float(run.plan.worst_case_loss),
        },
        kind=run.fkind,
        query_id=run.query_id,
        spent_at_most=spent_bound(
            session, [run.plan.eps_cell * x for x in run.plan.split], run.plan.Gamma_prime
        ),
        Gamma=run.plan.Gamma,
        Gamma_prime=run.plan.Gamma_prime,
        E_star=run.plan.E_star,
        E_new=run.plan.E_new,
        n_suppressed_pairs=int(((run.plan.r == 0) & ~run.plan.excluded[occ.u]).sum()),
    )
    # ResultAttr: pandas deep-copies attrs, and the result holds this very frame as its value
    out.attrs["geopriv"] = result.to_attr()
    return out


def _build_frame(plan: ClipUserPlan, rel: Any, crs_in: Any) -> Any:
    import geopandas as gpd
    import h3

    occ = plan.occupancy
    users_per = np.bincount(occ.j, minlength=occ.n_cells)
    kept_per = np.bincount(occ.j[plan.r > 0], minlength=occ.n_cells)
    idx = pd.Index([h3.int_to_str(int(c)) for c in occ.cells.tolist()], name="cell")
    df = pd.DataFrame(
        {
            "mean": rel.mean,
            "variance": rel.var,
            "variance_unbiased": rel.var_unbiased,
            "mean_error": rel.mean_error,
            "variance_error": rel.var_error,
            "n_samples": plan.m,
            "n_kept": plan.r_cell,
            "n_suppressed": plan.m - plan.r_cell,
            "users": users_per,
            "users_kept": kept_per,
            "m_ub": plan.m_ub,
            "released": rel.released,
        },
        index=idx,
    )
    geom = hexagons(occ.cells, crs_in)
    return gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geom.array, index=idx), crs=crs_in)
