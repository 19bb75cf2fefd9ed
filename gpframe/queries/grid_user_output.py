"""The output of ``grid_stats(epsilon_per_user=E, occupancy="public")``: frame and Result.

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it"). Built
from a :class:`gpframe.queries.grid_user_stats.UserStatsRun` after its charge is committed, the
same for every face (the pandas accessor, the Dask face): one row per occupied cell with the
released statistics and public occupancy facts, hexagons in the input CRS, and the
:class:`~gpframe.results.GridStatsResult` in ``attrs["geopriv"]``. Draws no noise.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.queries.grid_cells import hexagons
from gpframe.results import GridStatsResult

__all__ = ["user_stats_output"]


def user_stats_output(
    session: Any, occ: Any, ran: Any, *, crs_in: Any, lo: Fraction, hi: Fraction,
    total: Fraction, cells: Any, beta: float,
) -> Any:  # fmt: skip
    """Return the GeoDataFrame of a committed per-user-total run (``attrs["geopriv"]``: Result)."""
    import geopandas as gpd
    import h3

    plan, rel = ran.plan, ran.release
    idx = pd.Index([h3.int_to_str(int(c)) for c in occ.cells.tolist()], name="cell")
    eps_cell = np.array([float(a + b) for a, b in zip(plan.eps_mu, plan.eps_v, strict=True)])
    df = pd.DataFrame(
        {
            "mean": rel.mean,
            "variance": rel.var,
            "mean_error": rel.mean_error,
            "variance_error": rel.var_error,
            "n_samples": np.bincount(occ.j, weights=occ.m, minlength=occ.n_cells).astype(np.int64),
            "users": np.bincount(occ.j, minlength=occ.n_cells),
            "users_kept": plan.users_kept,
            "epsilon_cell": eps_cell,
            "released": rel.released,
        },
        index=idx,
    )
    geom = hexagons(occ.cells, crs_in)
    out = gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geom.array, index=idx), crs=crs_in)
    finite = np.isfinite(rel.mean_error)
    result = GridStatsResult(
        value=out,
        error=float(np.max(rel.mean_error[finite])) if finite.any() else None,
        confidence=1.0 - beta,
        params={
            "epsilon_per_user": float(total),
            "estimator": "per-user averages",
            "shrink": bool(rel.shrunk),
            "bounds": (float(lo), float(hi)),
            "cells": cells,
            "beta": beta,
            "split": tuple(float(s) for s in plan.split),
            "cap": plan.cap,
            "cells_released": int(plan.released.sum()),
            "cells_unreleased": int((~plan.released).sum()),
            "worst_case_epsilon": float(total),
        },
        kind=session.ledger.kind["central"],
        query_id=ran.query_id,
        spent_at_most=ran.spent_at_most,
        Gamma=int(np.bincount(occ.u, minlength=occ.n_users).max(initial=0)),
        Gamma_prime=int(plan.cells_kept.max(initial=0)),
        n_suppressed_pairs=int((~plan.keep).sum()),
    )
    out.attrs["geopriv"] = result.to_attr()
    return out
