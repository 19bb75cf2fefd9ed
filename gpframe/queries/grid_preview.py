"""The a-priori mean error of grid statistics for a preview (``dry_run=True``).

See ``docs/ledger.md`` ("Previewing a query") and ``docs/operations/grid_stats.md``. With public
occupancy and the per-statistic form (Clip-User), the plan reads only the public occupancy and
the ledger's budgets, and each released cell's ``mean_error`` is a function of the plan alone:
E_μ,j (the clipping bias bound) + the Laplace tail of the cell's noise at β/2 + q (the
fixed-point step of the exact sums). :func:`planned_mean_error` computes it with the same
calibration (:func:`~gpframe.mechanisms.calibration.central_laplace`) and tail
(:func:`~gpframe.mechanisms.tails.laplace_bound`) as
:func:`~gpframe.queries.grid_stats.release_cells`, without drawing anything.

During a dry run, :func:`~gpframe.queries.grid_stats.run_grid_stats` hands its admitted plan to
:func:`note_plan`; :func:`error_hook` collects it for the preview's ``error`` hook.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

__all__ = ["error_hook", "note_plan", "planned_mean_error"]

_PLANS: ContextVar[list[tuple[Any, float, Any]] | None] = ContextVar("gpframe_grid_plans",
                                                                 default=None)  # fmt: skip


def planned_mean_error(plan: Any, beta: float, q: Any) -> np.ndarray:
    """Return each cell's a-priori ``mean_error`` bound (NaN where no mean is released).

    Per cell with r ≥ 1: E_μ + scale·ln(2/(β(1 + e^{−λ}))) + g/2 + q, the scale and lattice g of
    discrete Laplace at ε_μ = ε_cell·split[0] and sensitivity W·r*/r (``docs/noise.md``); the
    very bound :func:`~gpframe.queries.grid_stats.release_cells` reports, which holds with
    probability ≥ 1 − β per cell. Reads the plan (public occupancy) only; ``q`` is
    :func:`~gpframe.queries.grid_stats.value_step` of the bounds.

    >>> from fractions import Fraction
    >>> from gpframe.queries.clip_user.planner import clip_user_plan, occupancy_from_records
    >>> occ = occupancy_from_records(["a", "b", "b"], ["c1", "c1", "c1"])
    >>> plan = clip_user_plan(occ, Fraction(0), Fraction(1), Fraction(2), clip="clip-user")
    >>> bool(planned_mean_error(plan, 0.05, Fraction(1, 2**20))[0] > 0)
    True
    """
    from gpframe.mechanisms.calibration import central_laplace
    from gpframe.mechanisms.tails import laplace_bound

    W = plan.upper - plan.lower
    eps_mu = plan.eps_cell * plan.split[0]
    out = np.full(plan.occupancy.n_cells, math.nan)
    todo = np.flatnonzero(plan.r_cell >= 1)
    keys = {(int(r), int(rs)) for r, rs in zip(plan.r_cell[todo], plan.r_star[todo], strict=True)}
    for r, rs in keys:
        cj = todo[(plan.r_cell[todo] == r) & (plan.r_star[todo] == rs)]
        cal = central_laplace(eps_mu, W * rs / r, integer=False)
        out[cj] = plan.E_mu[cj] + laplace_bound(beta / 2, cal.g / cal.param, cal.g) + float(q)
    return out


def note_plan(plan: Any, beta: float, q: Any) -> None:
    """Record the plan a dry run would release with (nothing outside a :func:`error_hook`)."""
    plans = _PLANS.get()
    if plans is not None:
        plans.append((plan, float(beta), q))


def _summary(per_cell: np.ndarray, beta: float) -> tuple[float, str, float] | None:
    finite = per_cell[np.isfinite(per_cell)]
    if not finite.size:
        return None
    kind = (f"mean error per cell, worst released cell (median {float(np.median(finite)):.4g}, "
            f"{finite.size} cells)")  # fmt: skip
    return float(np.max(finite)), kind, 1.0 - beta


@contextmanager
def error_hook() -> Iterator[Any]:
    """Yield the preview's ``error(table, calls)`` hook for grid statistics (Clip-User plans).

    The bound is that of the last plan :func:`note_plan` recorded within the block: the worst
    released cell's ``mean_error`` (the Result's ``error``), the median in the kind's text.
    """
    plans: list[tuple[Any, float, Any]] = []
    token = _PLANS.set(plans)

    def error(table: Any, calls: Sequence[Any]) -> tuple[float, str, float] | None:
        if not plans or not any(np.asarray(c.admitted, dtype=bool).any() for c in calls):
            return None
        plan, beta, q = plans[-1]
        return _summary(planned_mean_error(plan, beta, q), beta)

    try:
        yield error
    finally:
        _PLANS.reset(token)
