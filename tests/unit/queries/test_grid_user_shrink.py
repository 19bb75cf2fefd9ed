"""Shrinkage of the per-user-total means toward their common centre (post-processing).

docs/operations/grid_stats.md, section "A per-user total: how gpframe spends it".
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import gpframe.queries.grid_user_stats as us
from gpframe.queries.clip_user import occupancy_from_records
from gpframe.queries.grid_budget import plan_budget
from gpframe.queries.grid_user_stats import release_user_stats, shrink_means
from gpframe.testing import seeded_rng

GRID = Fraction(1, 10**9)


def _data(n_cells: int, rs: np.random.Generator):
    """Cells of 1–3 users; true cell means spread around 3 on [0, 10] (test data only)."""
    users, cells, vals, truth = [], [], [], []
    uid = 0
    for j in range(n_cells):
        centre = float(np.clip(rs.normal(3.0, 1.0), 0.5, 9.5))
        means = []
        for _ in range(int(rs.integers(1, 4))):
            m = int(rs.integers(1, 4))
            v = np.clip(rs.normal(centre, 0.3, m), 0, 10)
            users += [uid] * m
            cells += [j] * m
            vals += v.tolist()
            means.append(v.mean())
            uid += 1
        truth.append(np.mean(means))
    return np.array(users), np.array(cells), np.array(vals), np.array(truth)


def _release(shrink: bool, total: Fraction, seed: int, monkeypatch):
    rs = np.random.default_rng(5)  # test data only
    users, cells, vals, truth = _data(300, rs)
    occ = occupancy_from_records(users, cells)
    plan = plan_budget(occ, total, lower=Fraction(0), upper=Fraction(10), grid=GRID)
    ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
    monkeypatch.setattr(us, "SHRINK", shrink)
    return release_user_stats(plan, ru, rj, vals, rng=seeded_rng(seed)), truth


def test_shrinkage_lowers_the_median_error_of_noisy_means(monkeypatch):
    """Seeded: at a small total most cells are noisy; pooling toward the centre helps."""
    raw, truth = _release(False, Fraction(4), 11, monkeypatch)
    shr, _ = _release(True, Fraction(4), 11, monkeypatch)
    ok = raw.released
    assert ok.sum() > 100
    e_raw = np.median(np.abs(raw.mean[ok] - truth[ok]))
    e_shr = np.median(np.abs(shr.mean[ok] - truth[ok]))
    assert e_shr < 0.8 * e_raw
    # the released variances, the scales and the released set are not touched (cells with
    # no variance get the pooled one)
    has = np.isfinite(raw.var)
    np.testing.assert_array_equal(raw.var[has], shr.var[has])
    assert np.isfinite(shr.var).all() and len(set(shr.var[~has].tolist())) <= 1
    np.testing.assert_array_equal(raw.scale_mu, shr.scale_mu)
    np.testing.assert_array_equal(raw.released, shr.released)


@pytest.mark.parametrize("total", [Fraction(2), Fraction(16)])
def test_the_error_bound_still_covers(total, monkeypatch):
    """Seeded: |shrunk − truth| ≤ mean_error in at least 1 − β of the cells (β = 0.05)."""
    shr, truth = _release(True, total, 3, monkeypatch)
    ok = shr.released
    cover = np.mean(np.abs(shr.mean[ok] - truth[ok]) <= shr.mean_error[ok] + 1e-9)
    assert cover >= 0.95
    assert np.all((shr.mean[ok] >= 0) & (shr.mean[ok] <= 10))


def test_precise_means_barely_move_and_noisy_ones_go_to_the_centre():
    mean = np.array([2.0, 3.0, 4.0, 3.5, 2.5, 14.0, np.nan])
    scale = np.array([0.01] * 5 + [100.0, np.nan])
    err = np.array([0.1] * 5 + [300.0, np.nan])
    m, e = shrink_means(mean, scale, err, 0.0, 10.0)
    np.testing.assert_allclose(m[:5], mean[:5], atol=1e-3)
    assert abs(m[5] - 3.0) < 0.05 and np.isnan(m[6]) and np.isnan(e[6])
    assert e[5] == pytest.approx(10.0) and np.all(e[:5] >= 0.1 - 1e-12)


def test_fewer_than_three_cells_are_only_clamped():
    m, e = shrink_means(np.array([-1.0, 12.0]), np.array([5.0, 5.0]), np.array([9.0, 9.0]), 0, 10)
    assert m.tolist() == [0.0, 10.0] and e.tolist() == [9.0, 9.0]


def test_the_bound_grows_by_at_most_the_shift_and_fill_gets_the_centre():
    mean = np.array([2.0, 3.0, 4.0, 3.5, 2.5, 6.0, np.nan, np.nan])
    scale = np.array([0.01] * 5 + [0.5, np.nan, np.nan])
    err = np.array([0.1] * 5 + [1.5, np.nan, np.nan])
    fill = np.array([False] * 7 + [True])
    m, e = shrink_means(mean, scale, err, 0.0, 10.0, fill=fill)
    ok = np.isfinite(mean)
    moved = np.abs(m[ok] - mean[ok])
    assert np.all(e[ok] <= err[ok] + moved + 1e-12)
    assert moved[5] > 0.1  # the noisy cell moved, and its bound is below λt + (1 − λ)W
    assert e[5] < 10.0 * 0.5
    assert np.isnan(m[6]) and np.isnan(e[6])  # not asked to fill: stays NaN
    assert 2.5 < m[7] < 4.0 and e[7] == 10.0  # filled: the centre, the trivial bound W
    # a centre within its standard error of the midpoint fills nothing
    m2, _ = shrink_means(
        np.array([0.0, 10.0, 5.0, np.nan]),
        np.full(4, 3.0),
        np.full(4, 9.0),
        0.0,
        10.0,
        fill=np.array([False, False, False, True]),
    )
    assert np.isnan(m2[3])
