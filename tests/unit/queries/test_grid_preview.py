"""The a-priori mean error of a Clip-User plan: release_cells' own bound, nothing drawn."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.queries.clip_user.planner import clip_user_plan, occupancy_from_records
from gpframe.queries.grid_preview import error_hook, note_plan, planned_mean_error
from gpframe.queries.grid_stats import release_cells, value_step
from gpframe.testing import seeded_rng


def _plan() -> object:
    rs = np.random.default_rng(0)  # test data only
    users = np.repeat(np.arange(40), 3)
    cells = np.tile(np.arange(3), 40) + 3 * (users % 2)  # distinct (user, cell) pairs
    occ = occupancy_from_records(users, cells, rs.integers(1, 9, users.size))
    return clip_user_plan(occ, Fraction(0), Fraction(10), Fraction(2), clip="clip-user")


@pytest.mark.parametrize("beta", [0.01, 0.3])
def test_planned_mean_error_is_release_cells_bound(beta: float) -> None:
    plan = _plan()
    kept = [Fraction(5) if r >= 1 else None for r in plan.r_cell.tolist()]
    rel = release_cells(plan, kept, kept, beta=beta, rng=seeded_rng(1))
    got = planned_mean_error(plan, beta, value_step(Fraction(0), Fraction(10)))
    fin = np.isfinite(rel.mean_error)
    assert fin.sum() >= 3 and np.array_equal(np.isfinite(got), fin)
    np.testing.assert_allclose(got[fin], rel.mean_error[fin], rtol=1e-12, atol=0)


def test_plans_are_recorded_only_inside_a_preview() -> None:
    plan, q = _plan(), value_step(Fraction(0), Fraction(10))
    note_plan(plan, 0.05, q)  # outside: dropped
    with error_hook() as error:

        class Call:
            admitted = np.array([True])

        assert error(None, [Call()]) is None  # no plan recorded yet
        note_plan(plan, 0.05, q)
        bound, kind, conf = error(None, [Call()])
        assert bound == pytest.approx(float(np.nanmax(planned_mean_error(plan, 0.05, q))))
        assert conf == pytest.approx(0.95) and "median" in kind


@pytest.mark.parametrize("beta", [0.01, 0.3])
def test_planned_user_mean_error_is_release_user_stats_bound(beta: float) -> None:
    """Per-user total: the plan's per-cell bound is the release's (shrink off), and with the
    shrinkage the release states at least it, at most W."""
    from gpframe.queries.grid_budget import plan_budget
    from gpframe.queries.grid_preview import planned_user_mean_error
    from gpframe.queries.grid_user_stats import release_user_stats

    rs = np.random.default_rng(0)  # test data only
    users = np.repeat(np.arange(60), 2)
    cells = rs.integers(0, 6, users.size)
    occ = occupancy_from_records(users, cells)
    plan = plan_budget(
        occ,
        Fraction(2),
        lower=Fraction(0),
        upper=Fraction(10),
        grid=Fraction(1, 10**9),
        split=(Fraction(3, 4), Fraction(1, 4)),
    )
    rows_u, rows_j = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
    x = rs.uniform(0, 10, users.size)
    from gpframe.queries.grid_user_stats import cell_weights

    got = planned_user_mean_error(
        plan, beta, value_step(Fraction(0), Fraction(10)), cell_weights(plan)
    )
    plain = release_user_stats(plan, rows_u, rows_j, x, beta=beta, rng=seeded_rng(1), shrink=False)
    fin = np.isfinite(plain.mean_error)
    assert fin.sum() >= 3 and np.array_equal(np.isfinite(got), fin)
    np.testing.assert_allclose(got[fin], plain.mean_error[fin], rtol=1e-12, atol=0)
    shrunk = release_user_stats(plan, rows_u, rows_j, x, beta=beta, rng=seeded_rng(1), shrink=True)
    assert (shrunk.mean_error[fin] >= got[fin] * (1 - 1e-12)).all()
    assert (shrunk.mean_error[np.isfinite(shrunk.mean_error)] <= 10).all()


@pytest.mark.parametrize("epsilons", [(1, 1, 1), (Fraction(1, 3), Fraction(2, 5), 1)])
def test_planned_private_error_is_release_private_cells_count_bound(epsilons: tuple) -> None:
    from gpframe.mechanisms.tails import laplace_bound
    from gpframe.queries.contribution_bounding import release_private_cells
    from gpframe.queries.grid_preview import planned_private_error

    rel = release_private_cells(np.array([1.0, 3.0, 9.0]), np.array([0, 0, 1]), 2, lower=0,
                                upper=10, epsilon=1.0, max_per_cell=3, beta=0.1,
                                epsilons=tuple(Fraction(e) for e in epsilons),
                                rng=seeded_rng(1))  # fmt: skip
    tn, kind, conf = planned_private_error(
        epsilons, 3, 0, 10, 0.1, value_step(Fraction(0), Fraction(10))
    )
    assert tn == pytest.approx(laplace_bound(0.05, rel.scales[0], 1), rel=1e-12)
    assert conf == pytest.approx(0.95) and "t1 = " in kind
