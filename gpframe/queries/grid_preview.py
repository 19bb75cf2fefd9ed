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

The other two forms state their preview error through the dry run's notes
(:func:`note_error`, read by :func:`gpframe.results.preview.build`), from public inputs only:

* the per-user total with public occupancy (``epsilon_per_user=``):
  :func:`planned_user_mean_error`, each released cell's ``mean_error`` before the shrinkage,
  from the budget plan (public occupancy and budgets): equal to the Result's with
  ``shrink=False``; with ``shrink=True`` the Result's bound of a cell is at least this (the
  shrinkage widens the stated bound, at most to W) and cells filled with the centre state W;
* private occupancy (both forms): :func:`planned_private_error`, the count's noise bound t_n
  and the centred sum's t₁, from ε, ``max_per_cell`` and the bounds: the Result's per-cell
  ``mean_error`` divides them by its released noisy count, so no bound on it is known before
  the run; the preview states t_n, its scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

__all__ = [
    "error_hook",
    "note_error",
    "note_plan",
    "planned_mean_error",
    "planned_private_error",
    "planned_user_mean_error",
    "summary",
    "user_plan_error",
]

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


def summary(per_cell: np.ndarray, beta: float) -> tuple[float, str, float] | None:
    """Return the preview bound of per-cell mean errors: the worst, the median in the kind."""
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
        return summary(planned_mean_error(plan, beta, q), beta)

    try:
        yield error
    finally:
        _PLANS.reset(token)


# ---------------------------------------------------------------------------------------------
# the per-user total (public occupancy) and private occupancy: bounds noted during the dry run


def note_error(bound: tuple[float, str, float | None] | None) -> None:
    """Record an a-priori ``(error, kind, confidence)`` in the active dry run, if any."""
    from gpframe.ledger.run import active_preview

    planning = active_preview()
    if planning is not None and bound is not None:
        planning.notes["error"] = bound


def planned_user_mean_error(plan: Any, beta: float, q: Any, weights: Any) -> np.ndarray:
    """Each cell's ``mean_error`` before the shrinkage (NaN where the plan releases no mean).

    The per-user total with public occupancy (``docs/operations/grid_stats.md``): per released
    cell, min(b·ln(2/(β(1 + e^{−λ}))) + g/2 + q, W), b and g the scale and lattice of discrete
    Laplace at ε_μ,j and sensitivity 2H·max w/Σw (the kept users' weights min(m, c_j)): the very
    bound :func:`~gpframe.queries.grid_user_stats.release_user_stats` reports before
    :func:`~gpframe.queries.grid_user_stats.shrink_means`. Reads the budget plan only (public
    occupancy and budgets); ``q`` is :func:`~gpframe.queries.grid_stats.value_step` of the
    bounds and ``weights`` the plan's :func:`~gpframe.queries.grid_user_stats.cell_weights`.

    >>> from fractions import Fraction
    >>> from gpframe.queries.clip_user.planner import occupancy_from_records
    >>> from gpframe.queries.grid_budget import plan_budget
    >>> from gpframe.queries.grid_stats import value_step
    >>> from gpframe.queries.grid_user_stats import cell_weights
    >>> occ = occupancy_from_records(list(range(40)), ["c1"] * 40)
    >>> plan = plan_budget(occ, Fraction(2), lower=Fraction(0), upper=Fraction(10),
    ...                    grid=Fraction(1, 10**9), split=(Fraction(3, 4), Fraction(1, 4)))
    >>> q = value_step(Fraction(0), Fraction(10))
    >>> e = planned_user_mean_error(plan, 0.05, q, cell_weights(plan))
    >>> bool(0 < e[0] < 10)
    True
    """
    from fractions import Fraction

    from gpframe.mechanisms.calibration import central_laplace
    from gpframe.mechanisms.tails import laplace_bound

    L, U = plan.lower, plan.upper
    W = U - L
    H = int(W // q) * q / 2
    wsum, wmax = weights
    out = np.full(plan.occupancy.n_cells, math.nan)
    groups: dict[tuple[Any, Any], list[int]] = {}
    for j in np.flatnonzero(plan.released).tolist():
        groups.setdefault((Fraction(int(wmax[j]), int(wsum[j])), plan.eps_mu[j]), []).append(j)
    for (share, e_mu), cj in groups.items():
        cal = central_laplace(e_mu, 2 * H * share, integer=False)
        t = laplace_bound(beta / 2, cal.g / cal.param, cal.g) + float(q)
        out[np.array(cj, dtype=np.int64)] = min(t, float(W))
    return out


def user_plan_error(plan: Any, beta: float, shrink: bool, q: Any,
                    weights: Any) -> tuple[float, str, float] | None:  # fmt: skip
    """Return the per-user total's preview bound: the worst released cell's ``mean_error``.

    Equal to the Result's ``error`` with ``shrink=False``. With ``shrink=True`` it is a *lower*
    bound of the Result's (each shrunk cell states at least its noise bound, at most W, and a
    cell filled with the centre states W): the kind says so.
    """
    per = planned_user_mean_error(plan, beta, q, weights)
    finite = per[np.isfinite(per)]
    if not finite.size:
        return None
    w = float(plan.upper - plan.lower)
    kind = (f"mean error per cell, worst released cell (median {float(np.median(finite)):.4g}, "
            f"{finite.size} cells)")  # fmt: skip
    if shrink:
        kind += (f", before the shrinkage: shrink=True states per cell at least this and at "
                 f"most W = {w:.4g}")  # fmt: skip
    return float(np.max(finite)), kind, 1.0 - beta


def planned_private_error(
    epsilons: Sequence[Any], max_per_cell: int, lower: Any, upper: Any, beta: float, q: Any
) -> tuple[float, str, float]:
    """Private occupancy: the noise bound t_n of each released count, at confidence 1 − β/2.

    ``epsilons`` = (ε_n, ε₁, ε₂) per cell, p = ``max_per_cell``: t_n is the discrete Laplace
    tail of the count (g = 1, λ = ε_n/p) at β/2, t₁ that of the centred sum (sensitivity p·H,
    ``docs/noise.md``), the very bounds :func:`~gpframe.queries.contribution_bounding.
    release_private_cells` computes; a cell's ``mean_error`` is then
    (t₁ + |s̃₁|·t_n/ñ)/(ñ − t_n) + q for a released count ñ > t_n, which needs ñ (released), so
    the preview states t_n (rows per cell) and names t₁ in its kind. ``q``:
    :func:`~gpframe.queries.grid_stats.value_step` of the bounds.

    >>> from fractions import Fraction
    >>> t, kind, conf = planned_private_error([1, 1, 1], 2, 0, 10, 0.05, Fraction(1, 2**20))
    >>> round(t, 3), conf
    (8.316, 0.975)
    """
    from fractions import Fraction

    from gpframe.mechanisms.calibration import central_laplace
    from gpframe.mechanisms.tails import laplace_bound

    L, U = Fraction(lower), Fraction(upper)
    H = int((U - L) // q) * q / 2
    p = int(max_per_cell)
    e_n, e_1 = Fraction(epsilons[0]), Fraction(epsilons[1])
    cn = central_laplace(e_n, Fraction(p), integer=True)
    c1 = central_laplace(e_1, p * H, integer=False)
    tn = laplace_bound(beta / 2, cn.g / cn.param, cn.g)
    t1 = laplace_bound(beta / 2, c1.g / c1.param, c1.g)
    kind = (
        "count error per cell (rows); a cell's mean error is (t1 + |s1|·t_n/n)/(n − t_n) "
        f"+ q for its released count n > t_n, with t1 = {t1:.4g} (the centred sum's)"
    )
    return tn, kind, 1.0 - beta / 2
