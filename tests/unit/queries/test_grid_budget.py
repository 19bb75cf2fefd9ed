"""A per-user total for grid statistics: the plan's per-user bound, the charges, the noise.

docs/operations/grid_stats.md, section "A per-user total: how gpframe spends it".
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp
from gpframe.queries.clip_user import occupancy_from_records
from gpframe.queries.grid_budget import (
    EPS_CELL_MAX,
    expected_error,
    plan_budget,
    water_fill,
)
from gpframe.queries.grid_user_stats import release_user_stats, run_user_grid_stats
from gpframe.testing import seeded_rng

GRID = Fraction(1, 10**9)
TOTALS = [Fraction(1, 3), Fraction(1), Fraction(4), Fraction(16), Fraction(256)]


@st.composite
def occupancies(draw, max_users=10, max_cells=8):
    n_u = draw(st.integers(1, max_users))
    n_c = draw(st.integers(1, max_cells))
    pairs = draw(
        st.lists(st.tuples(st.integers(0, n_u - 1), st.integers(0, n_c - 1)), min_size=1,
                 max_size=40, unique=True)
    )  # fmt: skip
    counts = draw(st.lists(st.integers(1, 6), min_size=len(pairs), max_size=len(pairs)))
    u = np.array([p[0] for p in pairs])
    c = np.array([p[1] for p in pairs])
    return occupancy_from_records(u, c, np.array(counts))


def _per_user(plan):
    occ = plan.occupancy
    out = [Fraction(0)] * occ.n_users
    for p in np.flatnonzero(plan.keep).tolist():
        j = int(occ.j[p])
        out[int(occ.u[p])] += plan.eps_mu[j] + plan.eps_v[j]
    return out


@settings(max_examples=150, deadline=None)
@given(occupancies(), st.sampled_from(TOTALS), st.sampled_from([(3, 4), (1, 2), (1, 1)]))
def test_no_user_pays_more_than_the_total(occ, total, split):
    """The per-user bound, exactly: max over users of Σ kept cells' ε_μ + ε_V ≤ E."""
    s = (Fraction(*split), 1 - Fraction(*split))
    plan = plan_budget(occ, total, lower=Fraction(0), upper=Fraction(15), grid=GRID, split=s)
    per_user = _per_user(plan)
    assert max(per_user) <= total
    assert per_user == list(plan.charge)
    # amounts are on the grid, in the samplers' range, and only where a cell is released
    for j in range(occ.n_cells):
        for e in (plan.eps_mu[j], plan.eps_v[j]):
            in_range = Fraction(2) ** -40 <= e <= EPS_CELL_MAX
            assert e == 0 or (in_range and (e / GRID).denominator == 1)
        kept = plan.keep[occ.j == j]
        assert plan.released[j] == (plan.eps_mu[j] > 0) == bool(kept.any())
        assert plan.users_kept[j] == int(kept.sum())


@settings(max_examples=60, deadline=None)
@given(occupancies(max_users=6, max_cells=5), st.sampled_from(TOTALS[1:]))
def test_excluded_users_keep_nothing(occ, total):
    ex = np.zeros(occ.n_users, bool)
    ex[0] = True
    plan = plan_budget(occ, total, lower=Fraction(0), upper=Fraction(1), grid=GRID, excluded=ex)
    assert not plan.keep[occ.u == 0].any() and plan.charge[0] == 0


def test_water_fill_is_feasible_and_spends_what_it_can():
    rs = np.random.default_rng(0)  # test data only
    pu = rs.integers(0, 30, 200)
    pj = rs.integers(0, 25, 200)
    code = np.unique(pu * 100 + pj)
    pu, pj = code // 100, code % 100
    w = rs.uniform(0.1, 1, 25)
    eps = water_fill(pu, pj, 30, 25, w, 5.0)
    spent = np.bincount(pu, weights=eps[pj], minlength=30)
    assert spent.max() <= 5.0 * (1 + 1e-9)
    # every cell is frozen by a user who spent everything (else it would have risen further)
    for j in np.unique(pj).tolist():
        assert spent[pu[pj == j]].max() >= 5.0 * (1 - 1e-9)


def test_light_users_spend_the_rest_of_their_total():
    # user 0 is in cells 0..9, user 1 in cells 0 and 10: an equal split E/|G| would give user 1
    # E/2 in cell 10; the filling freezes cell 0 at E/10 (user 0) and gives cell 10 the rest
    pu = np.array([0] * 10 + [1, 1])
    pj = np.array([*list(range(10)), 0, 10])
    eps = water_fill(pu, pj, 2, 11, np.ones(11), 20.0)
    assert np.allclose(eps, [2.0] * 10 + [18.0])


def test_expected_error_limits():
    b = np.array([1e-6, 0.1, 1.0, 1e3, 1e8])
    e = expected_error(b)
    assert np.all(np.diff(e) > 0) and abs(e[0] - 1e-6) < 1e-9 and 0.49 < e[-1] <= 0.5


def _cell_data(n_cells, per_cell_users, rs):
    users, cells, vals = [], [], []
    for j in range(n_cells):
        for k in range(per_cell_users):
            m = int(rs.integers(1, 5))
            users += [j * per_cell_users + k] * m
            cells += [j] * m
            vals += rs.uniform(0, 10, m).tolist()
    return np.array(users), np.array(cells), np.array(vals)


def test_noise_scales_match_the_plan():
    """Seeded statistical test: the mean's noise is Laplace(2H/(k ε_μ)) (std √2·scale)."""
    rs = np.random.default_rng(1)  # test data only
    users, cells, vals = _cell_data(400, 3, rs)
    occ = occupancy_from_records(users, cells)
    plan = plan_budget(occ, Fraction(2), lower=Fraction(0), upper=Fraction(10), grid=GRID)
    assert plan.released.all() and (plan.users_kept == 3).all() and (plan.weight_cap == 1).all()
    ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
    rel = release_user_stats(plan, ru, rj, vals, rng=seeded_rng(7))
    eps_mu = float(plan.eps_mu[0])
    H = 5.0 * (1 - 2**-16)  # T·q/2 with T = ⌊W/q⌋
    want = 2 * H / 3 / eps_mu
    # the lattice scale (⌊Δ/g⌋ + 1)·g/ε: Δ/ε rounded up by at most one lattice step
    assert np.all(rel.scale_mu >= want) and np.allclose(rel.scale_mu, want, rtol=1e-4)
    # the truth: mean over users of each user's mean (no clamping bites for most cells)
    tru = np.array([np.mean([vals[(users == u)].mean() for u in np.unique(users[cells == j])])
                    for j in range(400)])  # fmt: skip
    d = rel.mean - tru
    inner = np.abs(tru - 5) < 5 - 3 * want  # cells where clamping cannot move the noise
    if inner.sum() > 100:
        assert abs(np.std(d[inner]) / (np.sqrt(2) * want) - 1) < 0.25
    assert abs(np.median(np.abs(d))) < 2 * want


def test_estimates_stay_in_their_ranges():
    rs = np.random.default_rng(2)  # test data only
    users, cells, vals = _cell_data(50, 1, rs)
    occ = occupancy_from_records(users, cells)
    plan = plan_budget(occ, Fraction(1, 2), lower=Fraction(0), upper=Fraction(10), grid=GRID)
    ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
    rel = release_user_stats(plan, ru, rj, vals, rng=seeded_rng(3))
    m, v = rel.mean[plan.released], rel.var[plan.released]
    assert np.all((m >= 0) & (m <= 10)) and np.all((v >= 0) & (v <= 25))
    # unreleased cells: NaN without the shrinkage, its centre (one value, bound W) with it
    raw = release_user_stats(plan, ru, rj, vals, rng=seeded_rng(3), shrink=False)
    assert np.isnan(raw.mean[~plan.released]).all()
    filled = rel.mean[~plan.released]
    if filled.size and np.isfinite(filled).any():  # the centre, when it is told from 5
        assert np.all(filled == filled[0]) and 0 <= filled[0] <= 10
        assert np.all(rel.mean_error[~plan.released] == 10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(occupancies(max_users=8, max_cells=6), st.sampled_from(TOTALS))
def test_ledger_charges_equal_the_plan(occ, total):
    """The ledger records exactly each user's planned charge, and none exceeds the total."""
    rows_u = np.repeat(occ.u, occ.m)
    rows_j = np.repeat(occ.j, occ.m)
    vals = np.linspace(0, 15, rows_u.size)
    s = gp.Session(central=gp.DP(epsilon=1000.0))
    ran = run_user_grid_stats(
        s, occ, rows_u, rows_j, vals, lower=Fraction(0), upper=Fraction(15), total=total,
        rng=seeded_rng(1),
    )  # fmt: skip
    spent = 1000 - s.remaining_exact(occ.users.tolist(), notion="central").to_numpy()
    assert [Fraction(x) for x in spent.tolist()] == list(ran.plan.charge)
    assert max(spent.tolist()) <= total
    assert ran.spent_at_most == float(max(ran.plan.charge))


def test_users_who_cannot_pay_are_left_out():
    occ = occupancy_from_records(np.array([0, 1, 2]), np.array([0, 0, 1]))
    s = gp.Session(central=gp.DP(epsilon=4.0))
    s.ledger.set_budget([1], 1.0, notion="central") if hasattr(s.ledger, "set_budget") else None
    ran = run_user_grid_stats(
        s, occ, occ.u.copy(), occ.j.copy(), np.array([1.0, 2.0, 3.0]), lower=Fraction(0),
        upper=Fraction(15), total=Fraction(2), rng=seeded_rng(1),
    )  # fmt: skip
    assert max(ran.charges) <= 2.0


def test_too_small_a_total_is_refused_before_the_ledger():
    occ = occupancy_from_records(np.array([0]), np.array([0]))
    s = gp.Session(central=gp.DP(epsilon=4.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.errors.InvalidInputError, match="Nothing was charged"):
        run_user_grid_stats(s, occ, np.array([0]), np.array([0]), np.array([1.0]),
                            lower=Fraction(0), upper=Fraction(1), total=Fraction(1, 10**12),
                            rng=seeded_rng(1))  # fmt: skip
    assert s.ledger.snapshot() == before


def test_spread_order_reads_only_the_users_own_rows():
    """Private occupancy: adding a user (rows interleaved anywhere) changes no other row's key."""
    from gpframe.queries.contribution_bounding import spread_order

    u = np.array([1, 2, 1, 2, 1])
    u2 = np.array([9, 1, 2, 9, 1, 2, 9, 1])
    o, o2 = spread_order(u), spread_order(u2)
    assert o[u == 1].tolist() == o2[u2 == 1].tolist()
    assert o[u == 2].tolist() == o2[u2 == 2].tolist()
    assert len(set(o.tolist())) == u.size


def test_compiled_water_filling_is_bit_identical_to_numpy() -> None:
    """The compiled filling (the plan's hot loop) gives the numpy reference's ε to the bit."""
    from gpframe.queries.grid_budget import water_fill, water_fill_numpy

    rs = np.random.default_rng(11)  # test inputs only
    for trial in range(300):
        n_u, n_c = int(rs.integers(1, 40)), int(rs.integers(1, 30))
        n = int(rs.integers(1, 4 * (n_u + n_c)))
        pairs = np.unique(np.stack([rs.integers(0, n_u, n), rs.integers(0, n_c, n)], 1), axis=0)
        pu, pj = pairs[:, 0], pairs[:, 1]
        w = rs.uniform(0.05, 3.0, n_c) ** (1 + trial % 3)
        total = float(rs.choice([0.5, 1.0, 4.0, 17.3]))
        cap = float(rs.choice([np.inf, 0.2, 1.0]))
        want = water_fill_numpy(pu, pj, n_u, n_c, w, total, cap=cap)
        got = water_fill(pu, pj, n_u, n_c, w, total, cap=cap)
        assert got.tobytes() == want.tobytes(), trial


@pytest.mark.parametrize("budget", [gp.DP(epsilon=50.0), gp.DP(epsilon=1e6), gp.zCDP(rho=50.0)])
def test_units_of_a_plan_equal_the_per_amount_conversion(monkeypatch, budget):
    """The DP filter's one-pass sum of kept cells' units is the ledger's per-amount conversion."""
    from gpframe.queries import grid_user_stats as gus

    rs = np.random.default_rng(11)  # test occupancy only
    occ = occupancy_from_records(rs.integers(0, 40, 600), rs.integers(0, 25, 600))
    s = gp.Session(central=budget)
    got = []
    for total in TOTALS:
        plan = plan_budget(occ, total, lower=Fraction(0), upper=Fraction(10),
                           grid=gus._grid(s.ledger))  # fmt: skip
        got.append(gus._units(s.ledger, plan))
    monkeypatch.setattr(gus, "_units_dp", lambda *a: None)
    for total, (units, big) in zip(TOTALS, got, strict=True):
        plan = plan_budget(occ, total, lower=Fraction(0), upper=Fraction(10),
                           grid=gus._grid(s.ledger))  # fmt: skip
        want_units, want_big = gus._units(s.ledger, plan)
        assert np.array_equal(units, want_units) and np.array_equal(big, want_big)
        assert units.max() > 0
