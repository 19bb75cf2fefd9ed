"""``grid_stats(..., epsilon_per_user=E, occupancy="public")``: the output frame and Result.

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it"). The
validation is :func:`gpframe.frame.grid_stats.grid_stats`'s (done before this is called); the
planning, charging and release are :func:`gpframe.queries.grid_user_stats.run_user_grid_stats`,
the output :func:`gpframe.queries.grid_user_output.user_stats_output` (shared with the Dask face).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import exact

__all__ = ["per_user_public"]


def per_user_public(
    bound: Any,
    x: np.ndarray,
    rows: Any,
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
    shrink: bool = True,
) -> Any:
    """Run the per-user-total release and build its GeoDataFrame (one row per occupied cell).

    ``occ`` is the public occupancy, already checked by the caller; ``rows`` (a
    :class:`~gpframe.queries.clip_user.RecordRows`) where each data row sits in it.

    Noise and charges: :func:`gpframe.queries.grid_user_stats.run_user_grid_stats` (each user
    pays Σ ε_μ,j + ε_V,j over their kept cells, at most ``total``).
    """
    from gpframe.queries.grid_user_output import user_stats_output
    from gpframe.queries.grid_user_stats import run_user_grid_stats
    from gpframe.queries.progress import Stages

    session, p = bound.session, bound.located
    sp = (exact(split[0], "split[0]"), exact(split[1], "split[1]"))
    with Stages(progress, "grid_stats", 4) as bar:
        bar.step("occupancy")
        ran = run_user_grid_stats(
            session, occ, rows.u, rows.j, x, coo=rows.coo, lower=lo, upper=hi, total=total,
            split=sp, beta=beta, rng=rng, on_stage=bar.step, shrink=shrink,
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
        )  # fmt: skip
        bar.step("release")
        out = user_stats_output(session, occ, ran, crs_in=p.crs_in, lo=lo, hi=hi, total=total,
                                cells=cells, beta=beta)  # fmt: skip
        bar.step("output frame")
    return out
