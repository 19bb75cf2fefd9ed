"""Private occupancy, per-user total: per-user averages and the shrinkage of the means.

docs/operations/grid_stats.md, "A per-user total: how gpframe spends it" (private occupancy).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from gpframe.queries.contribution_bounding import (
    bound_contributions,
    pair_averages,
    release_private_cells,
)
from gpframe.queries.grid_stats import value_step
from gpframe.testing import seeded_rng

L, U = 0.0, 10.0
EPS3 = (Fraction(1, 5), Fraction(1, 2), Fraction(3, 10))


def _grid() -> tuple[float, int]:
    q = value_step(Fraction(L), Fraction(U))
    return float(q), int(Fraction(U - L) // q)


def test_pair_averages_use_every_row_of_the_user_in_the_cell():
    # user 1 has 3 rows in cell 10 (max_per_cell=1 keeps one) and one in cell 11 (not kept)
    b = bound_contributions([1, 1, 1, 1, 2], [10, 10, 10, 11, 10], [10, 11],
                            max_cells=1, max_per_cell=1)  # fmt: skip
    vals = np.array([0.0, 3.0, 9.0, 5.0, 7.0])
    k, d2 = pair_averages(b, vals, L, U)
    q, T = _grid()
    assert k[0] == k[1] == k[2] == round(4.0 / q)  # (0 + 3 + 9)/3, not the one kept row
    assert k[4] == round(7.0 / q) and k[3] == round(5.0 / q)
    dd = [(2 * round(v / q) - T) ** 2 for v in (0.0, 3.0, 9.0)]
    assert d2[0] == (2 * sum(dd) + 3) // 6  # the average square, rounded half up
    assert ((k >= 0) & (k <= T)).all() and ((d2 >= 0) & (d2 <= T * T)).all()


def test_averages_equal_the_rows_when_each_user_has_one_row():
    users, cells = np.arange(40), np.repeat(np.arange(4), 10)
    vals = np.random.default_rng(0).uniform(L, U, 40)  # test data only
    b = bound_contributions(users, cells, np.arange(4), max_cells=1, max_per_cell=1)
    k, d2 = pair_averages(b, vals, L, U)
    kw = dict(lower=L, upper=U, epsilon=1.0, max_per_cell=1, epsilons=EPS3)
    a = release_private_cells(vals, cells, 4, rng=seeded_rng(3), **kw)
    m = release_private_cells(vals, cells, 4, rng=seeded_rng(3), moments=(k, d2), **kw)
    np.testing.assert_array_equal(a.s1, m.s1)
    np.testing.assert_array_equal(a.s2, m.s2)


def _cells(n_cells: int, rs: np.random.Generator):
    """Cells of 1–6 users with several rows each; true means spread around 3 on [0, 10]."""
    users, cells, vals, truth = [], [], [], []
    uid = 0
    for j in range(n_cells):
        centre = float(np.clip(rs.normal(3.0, 1.0), 0.5, 9.5))
        means = []
        for _ in range(int(rs.integers(1, 7))):
            v = np.clip(rs.normal(centre, 0.3, int(rs.integers(1, 5))), L, U)
            users += [uid] * v.size
            cells += [j] * v.size
            vals += v.tolist()
            means.append(v.mean())
            uid += 1
        truth.append(np.mean(means))
    return np.array(users), np.array(cells), np.array(vals), np.array(truth)


def _release(shrink: bool, seed: int):
    users, cells, vals, truth = _cells(300, np.random.default_rng(5))  # test data only
    b = bound_contributions(users, cells, np.arange(300), max_cells=1, max_per_cell=1)
    k, d2 = pair_averages(b, vals, L, U)
    rel = release_private_cells(
        vals[b.keep], b.row_j[b.keep], 300, lower=L, upper=U, epsilon=1.0, max_per_cell=1,
        epsilons=EPS3, moments=(k[b.keep], d2[b.keep]), shrink=shrink, rng=seeded_rng(seed),
    )  # fmt: skip
    return rel, truth


def test_shrinkage_releases_every_cell_and_lowers_the_median_error():
    """Seeded: the withheld cells count as the midpoint; the shrunk means beat that."""
    raw, truth = _release(False, 7)
    shr, _ = _release(True, 7)
    assert shr.released.all() and np.isfinite(shr.mean).all()
    assert not raw.released.all()
    e_raw = np.median(np.abs(np.where(raw.released, raw.mean, (L + U) / 2) - truth))
    e_shr = np.median(np.abs(shr.mean - truth))
    assert e_shr < 0.7 * e_raw
    np.testing.assert_array_equal(raw.s1, shr.s1)  # the same draws: post-processing only
    assert ((shr.mean >= L) & (shr.mean <= U)).all()


def test_shrunk_error_bound_covers_and_never_exceeds_the_width():
    """Seeded: |shrunk − truth| ≤ mean_error in ≥ 1 − β of the cells; the bound is ≤ W."""
    shr, truth = _release(True, 11)
    cover = np.mean(np.abs(shr.mean - truth) <= shr.mean_error + 1e-9)
    assert cover >= 0.95
    assert np.isfinite(shr.mean_error).all() and (shr.mean_error <= U - L).all()
