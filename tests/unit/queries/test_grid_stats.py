"""Release after Clip-User: exact statistics, selection, charges (clip-user.md §2, §6, §8)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.ledger import Session
from gpframe.queries.clip_user import clip_user_plan, occupancy_from_records
from gpframe.queries.grid_stats import (
    check_data_matches,
    exact_cell_stats,
    retained_rows,
    run_grid_stats,
)
from gpframe.testing import seeded_rng


def _data(seed=0, n_users=6, n_cells=4, n=120):
    rs = np.random.default_rng(seed)
    users = rs.integers(0, n_users, n)
    users[0] = 0  # user 0 heavy in cell 0
    cells = rs.integers(0, n_cells, n)
    vals = rs.uniform(0, 65, n)
    return users, cells, vals


def test_exact_stats_are_order_independent_and_exact():
    """secure-noise.md §9.5: integer sums, so any permutation gives the same Fractions."""
    rs = np.random.default_rng(3)
    v = rs.uniform(0, 65, 5000)
    c = rs.integers(0, 7, 5000)
    a = exact_cell_stats(v, c, 7, Fraction(0), Fraction(65))
    p = rs.permutation(5000)
    b = exact_cell_stats(v[p], c[p], 7, Fraction(0), Fraction(65))
    assert a[0] == b[0] and a[1] == b[1]
    q = 65 / 2**16 * 2  # step 2**-10 here; snapping moves each value by <= q
    for j in range(7):
        x = v[c == j]
        assert abs(float(a[0][j]) - x.mean()) <= q
        assert abs(float(a[1][j]) - x.var()) <= q * (65 + q)


def test_exact_stats_keep_snapped_values_in_bounds():
    m, v, r = exact_cell_stats(
        np.array([40.0, 40.0]), np.array([0, 0]), 1, Fraction(10), Fraction(40)
    )
    assert m[0] <= 40 and v[0] == 0 and r.tolist() == [2]


def test_retained_rows_keep_first_r_in_canonical_order():
    users = np.array([0, 0, 0, 1, 0])
    cells = np.array([0, 0, 0, 0, 1])
    occ = occupancy_from_records(users, cells)
    plan = clip_user_plan(occ, 0, 1, 1, clip="none")
    r = plan.r.copy()
    r[0] = 2  # user 0 keeps two of three samples in cell 0
    object.__setattr__(plan, "r", r)
    keep = retained_rows(plan, occ_rows(occ, users), occ_cols(occ, cells))
    assert keep.tolist() == [True, True, False, True, True]
    order = np.array([3, 2, 1, 0, 0])  # timestamps: later rows first
    keep = retained_rows(plan, occ_rows(occ, users), occ_cols(occ, cells), order)
    assert keep.tolist() == [False, True, True, True, True]


def occ_rows(occ, users):
    return np.searchsorted(occ.users, users)


def occ_cols(occ, cells):
    return np.searchsorted(occ.cells, cells)


def test_data_must_match_occupancy_p15():
    users, cells, _ = _data()
    occ = occupancy_from_records(users, cells)
    check_data_matches(occ, occ_rows(occ, users), occ_cols(occ, cells))
    with pytest.raises(InvalidInputError, match="differ from the public occupancy"):
        check_data_matches(occ, occ_rows(occ, users[1:]), occ_cols(occ, cells[1:]))


def _run(session, clip="clip-user", epsilon=0.5, seed=1, users=None):
    u, c, v = _data() if users is None else users
    occ = occupancy_from_records(u, c)
    return run_grid_stats(
        session,
        occ,
        occ_rows(occ, u),
        occ_cols(occ, c),
        v,
        lower=Fraction(0),
        upper=Fraction(65),
        epsilon=Fraction(epsilon),
        clip=clip,
        rng=seeded_rng(seed),
    )


@pytest.mark.parametrize("clip", ["clip-user", "pseudo-user", "none"])
def test_charges_equal_epsilon_times_cells_kept_times_statistics(clip):
    s = Session(central=gp.DP(epsilon=100.0))
    run = _run(s, clip=clip)
    kept = run.plan.cells_kept
    expect = 0.5 * 2 * kept[kept > 0]
    assert np.allclose(run.charges, expect, rtol=0, atol=1e-12)
    spent = s.spent(notion="central").reindex(run.users).to_numpy()
    assert np.allclose(spent, expect, rtol=0, atol=1e-12)
    assert max(spent) <= float(run.plan.worst_case_loss)
    assert sum(spent) == pytest.approx(float(run.plan.eps_cell) * kept.sum())


def test_identical_input_and_seed_give_identical_output():
    a = _run(Session(central=gp.DP(epsilon=100.0)), seed=5)
    b = _run(Session(central=gp.DP(epsilon=100.0)), seed=5)
    assert np.array_equal(a.release.mean, b.release.mean, equal_nan=True)
    assert np.array_equal(a.release.var, b.release.var, equal_nan=True)
    assert a.plan.suppressed == b.plan.suppressed


def test_users_without_budget_are_suppressed_everywhere_and_counted():
    s = Session(central=gp.DP(epsilon=100.0))
    s.set_budget([0], gp.DP(epsilon=0.5))  # user 0 cannot pay for even one cell (2 x 0.5)
    run = _run(s)
    assert 0 in run.excluded and 0 not in run.users
    o = run.plan.occupancy
    assert (run.plan.r[o.u == 0] == 0).all()
    assert s.spent(notion="central").get(0, 0.0) == 0.0


def test_session_without_central_budget_raises_and_charges_nothing():
    s = Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="no central budget"):
        _run(s)
    assert s.ledger.snapshot() == before


@pytest.mark.statistical
def test_release_error_bounds_cover_the_truth():
    """Bounds hold w.p. >= 1 - beta per cell; with 4 cells x 30 seeds at beta=1e-6 a false
    failure has probability <= 1.2e-4."""
    u, c, v = _data()
    for seed in range(30):
        s = Session(central=gp.DP(epsilon=1000.0))
        occ = occupancy_from_records(u, c)
        run = run_grid_stats(
            s,
            occ,
            occ_rows(occ, u),
            occ_cols(occ, c),
            v,
            lower=Fraction(0),
            upper=Fraction(65),
            epsilon=Fraction(2),
            clip="pseudo-user",
            beta=1e-6,
            rng=seeded_rng(seed),
        )
        for j in range(occ.n_cells):
            x = v[c == occ.cells[j]]
            assert abs(run.release.mean[j] - x.mean()) <= run.release.mean_error[j]
            assert abs(run.release.var[j] - x.var()) <= run.release.var_error[j]


# ---------------------------------------------------------------------------------------------
# occupancy="private": contribution bounding (gpframe.queries.contribution_bounding)


def _priv_rows(seed=0, n=400, users=30, cells=12):
    rs = np.random.default_rng(seed)  # test data only
    return (
        rs.integers(0, users, n),
        rs.integers(100, 100 + cells, n).astype(np.uint64),
        rs.uniform(0, 10, n),
        rs.permutation(n),
    )


def test_bounding_respects_caps_and_the_public_list():
    from gpframe.queries.contribution_bounding import bound_contributions

    u, c, _, t = _priv_rows()
    pub = np.arange(100, 110)  # cells 110, 111 are off the list
    b = bound_contributions(u, c, pub, max_cells=3, max_per_cell=2, order=t)
    kept = pd.DataFrame({"u": u[b.keep], "c": c[b.keep]})
    assert kept.groupby("u")["c"].nunique().max() <= 3
    assert kept.groupby(["u", "c"]).size().max() <= 2
    assert kept["c"].isin(pub).all() and b.n_off_list == int((c >= 110).sum())
    assert (
        b.cells_kept.tolist()
        == kept.groupby("u")["c"].nunique().reindex(b.users, fill_value=0).tolist()
    )
    # the first rows by the public order are the ones kept
    df = pd.DataFrame({"u": u, "c": c, "t": t, "keep": b.keep})
    for _, g in df[df["c"] < 110].groupby(["u", "c"]):
        if g["keep"].any():
            assert g.sort_values("t")["keep"].tolist()[: int(g["keep"].sum())] == [True] * int(
                g["keep"].sum()
            )


def test_bounding_of_one_user_does_not_depend_on_the_others():
    from gpframe.queries.contribution_bounding import bound_contributions

    u, c, _, t = _priv_rows(1)
    pub = np.arange(100, 112)
    kw = {"max_cells": 2, "max_per_cell": 3}
    full = bound_contributions(u, c, pub, order=t, **kw)
    mine = u == 5
    alone = bound_contributions(u[mine], c[mine], pub, order=t[mine], **kw)
    assert np.array_equal(full.keep[mine], alone.keep)
    # removing user 5 leaves every other row's decision unchanged (add/remove neighbours)
    rest = bound_contributions(u[~mine], c[~mine], pub, order=t[~mine], **kw)
    assert np.array_equal(full.keep[~mine], rest.keep)
    # another salt picks other cells (the rule is keyed), the same salt the same ones
    other = bound_contributions(u, c, pub, order=t, salt="another public salt", **kw)
    assert not np.array_equal(full.keep, other.keep)


def test_private_run_charges_eps_times_three_per_kept_cell_and_releases_every_cell():
    from gpframe.queries.contribution_bounding import run_private_grid_stats

    u, c, v, t = _priv_rows(2)
    pub = np.arange(95, 112)  # includes empty cells 95..99
    s = Session(central=gp.DP(epsilon=50.0))
    run = run_private_grid_stats(
        s, u, c, v, pub, lower=0, upper=10, epsilon=0.25, max_cells=4, max_per_cell=2,
        order=t, rng=seeded_rng(5),
    )  # fmt: skip
    assert run.release.count.shape == (pub.size,)
    assert np.isfinite(run.release.count).all()  # empty cells are released too
    kept = dict(zip(run.bounded.users.tolist(), run.bounded.cells_kept.tolist(), strict=True))
    spent = s.spent_exact()
    for user in spent.index:
        assert spent[user] == Fraction(1, 4) * 3 * kept[user]
    assert max(kept.values()) <= 4
    again = run_private_grid_stats(
        Session(central=gp.DP(epsilon=50.0)), u, c, v, pub, lower=0, upper=10, epsilon=0.25,
        max_cells=4, max_per_cell=2, order=t, rng=seeded_rng(5),
    )  # fmt: skip
    assert np.array_equal(again.release.s1, run.release.s1)  # identical input, identical output


def test_private_run_excludes_users_over_budget_and_fails_closed_on_bad_values():
    from gpframe.queries.contribution_bounding import run_private_grid_stats

    u, c, v, _ = _priv_rows(3)
    pub = np.arange(100, 112)
    s = Session(central=gp.DP(epsilon=1.0))
    s.set_budget([0, 1], gp.DP(epsilon=0.1))
    run = run_private_grid_stats(
        s, u, c, v, pub, lower=0, upper=10, epsilon=0.2, max_cells=1, max_per_cell=1,
        rng=seeded_rng(1),
    )  # fmt: skip
    assert run.excluded == [0, 1] and s.spent().get(0, 0.0) == 0.0
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="bounds"):
        run_private_grid_stats(
            s, u, c, v + 20, pub, lower=0, upper=10, epsilon=0.2, max_cells=1, max_per_cell=1
        )
    with pytest.raises(InvalidInputError, match="max_cells"):
        run_private_grid_stats(
            s, u, c, v, pub, lower=0, upper=10, epsilon=0.2, max_cells=0, max_per_cell=1
        )
    assert s.ledger.snapshot() == before
