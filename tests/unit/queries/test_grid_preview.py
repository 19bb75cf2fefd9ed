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
