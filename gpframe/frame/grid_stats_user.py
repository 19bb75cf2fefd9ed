"""``grid_stats(..., epsilon_per_user=E, occupancy="public")``: the output frame and Result.

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it"). The
validation is :func:`gpframe.frame.grid_stats.grid_stats`'s (done before this is called); the
planning, charging and release are :func:`gpframe.queries.grid_user_stats.run_user_grid_stats`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import exact
from gpframe.results import GridStatsResult

__all__ = ["hexagons", "per_user_public"]


def hexagons(cells: np.ndarray, crs_in: Any) -> Any:
    """Return the H3 cells' hexagons as a GeoSeries in ``crs_in`` (built in WGS 84)."""
    import geopandas as gpd
    import h3.api.numpy_int as h3n
    import shapely

    polys = []
    for c in cells.tolist():
        ring = h3n.cell_to_boundary(int(c))  # (lat, lng) pairs
        polys.append(shapely.Polygon([(lng, lat) for lat, lng in ring]))
    gs = gpd.GeoSeries(polys, crs="EPSG:4326")
    return gs.to_crs(crs_in)


def per_user_public(
    bound: Any,
    x: np.ndarray,
    cell_keys: np.ndarray,
    users: np.ndarray,
    *,
    occ: Any,
    lo: Fraction,
    hi: Fraction,
    total: Fraction,
    split: tuple[Any, Any],
    beta: float,
    rng: Any,
    cells: Any,
    value: str,
    progress: bool | None,
) -> Any:
    """Run the per-user-total release and build its GeoDataFrame (one row per occupied cell).

    ``occ`` is the public occupancy, already checked by the caller.

    Noise and charges: :func:`gpframe.queries.grid_user_stats.run_user_grid_stats` (each user
    pays Σ ε_μ,j + ε_V,j over their kept cells, at most ``total``).
    """
    import geopandas as gpd
    import h3

    from gpframe.queries.grid_user_stats import run_user_grid_stats
    from gpframe.queries.progress import Stages

    session, p = bound.session, bound.located
    sp = (exact(split[0], "split[0]"), exact(split[1], "split[1]"))
    with Stages(progress, "grid_stats", 4) as bar:
        rows_u = np.searchsorted(occ.users, users)
        rows_j = np.searchsorted(occ.cells, cell_keys)
        bar.step("occupancy")
        ran = run_user_grid_stats(
            session, occ, rows_u, rows_j, x, lower=lo, upper=hi, total=total, split=sp,
            beta=beta, rng=rng, on_stage=bar.step,
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
        )  # fmt: skip
        bar.step("release")
        plan, rel = ran.plan, ran.release
        idx = pd.Index([h3.int_to_str(int(c)) for c in occ.cells.tolist()], name="cell")
        eps_cell = np.array([float(a + b) for a, b in zip(plan.eps_mu, plan.eps_v, strict=True)])
        df = pd.DataFrame(
            {
                "mean": rel.mean,
                "variance": rel.var,
                "mean_error": rel.mean_error,
                "variance_error": rel.var_error,
                "n_samples": np.bincount(occ.j, weights=occ.m, minlength=occ.n_cells).astype(
                    np.int64
                ),
                "users": np.bincount(occ.j, minlength=occ.n_cells),
                "users_kept": plan.users_kept,
                "epsilon_cell": eps_cell,
                "released": rel.released,
            },
            index=idx,
        )
        geom = hexagons(occ.cells, p.crs_in)
        out = gpd.GeoDataFrame(df, geometry=gpd.GeoSeries(geom.array, index=idx), crs=p.crs_in)
        bar.step("output frame")
    finite = np.isfinite(rel.mean_error)
    result = GridStatsResult(
        value=out,
        error=float(np.max(rel.mean_error[finite])) if finite.any() else None,
        confidence=1.0 - beta,
        params={
            "epsilon_per_user": float(total),
            "estimator": "per-user averages",
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
