"""grid_stats(epsilon_per_user=): the per-user total on the accessor.

docs/operations/grid_stats.md, "How much it costs: ask with a per-user total".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.testing import seeded_rng


def _frame(seed: int = 0, n_users: int = 30) -> pd.DataFrame:
    rs = np.random.default_rng(seed)  # test data only
    n = 600
    u = rs.integers(0, n_users, n)
    u[:80] = 0  # one heavy user, spread over many cells
    return pd.DataFrame({
        "u": u,
        "x": 500_000.0 + rs.uniform(0, 6_000, n),
        "y": 4_500_000.0 + rs.uniform(0, 6_000, n),
        "v": rs.uniform(0, 20, n),
    })  # fmt: skip


def _bound(df: pd.DataFrame, budget: float = 100.0):
    s = gp.Session(central=gp.DP(epsilon=budget))
    return s, df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")


def _spent(s, users, budget: float = 100.0) -> np.ndarray:
    return budget - s.remaining(list(users), notion="central").to_numpy(dtype=float)


@pytest.mark.parametrize("total", [0.5, 4.0, 300.0])
def test_public_no_user_pays_more_than_the_total(total):
    df = _frame()
    s, b = _bound(df, budget=1000.0)
    out = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=total, cells=8,
                       occupancy="public", rng=seeded_rng(1))  # fmt: skip
    spent = _spent(s, sorted(df.u.unique()), 1000.0)
    assert spent.max() <= total + 1e-12
    res = out.attrs["geopriv"]
    assert res.params["epsilon_per_user"] == total and res.spent_at_most <= total
    assert res.spent_at_most == pytest.approx(spent.max())
    # the cells say what they got and who was kept; unreleased cells got no ε and carry the
    # shrinkage centre (one value, bound W) when there are enough released cells to pool
    assert {"epsilon_cell", "users_kept", "users", "released"} <= set(out.columns)
    rel = out["released"].to_numpy()
    filled = out["mean"].to_numpy()[~rel]
    if np.isfinite(filled).any():  # when the centre is told apart from the midpoint
        assert np.all(filled == filled[:1]) and (out["mean_error"].to_numpy()[~rel] == 20).all()
    assert (out["epsilon_cell"].to_numpy()[~rel] == 0).all()
    m = out["mean"].to_numpy()[rel]
    assert ((m >= 0) & (m <= 20)).all()
    assert (out["users_kept"] <= out["users"]).all()


def test_public_heavy_user_pays_the_total_not_per_cell():
    # the per-statistic form charges 2ε per kept cell: the heavy user pays far more than 2ε
    df = _frame()
    s1, b1 = _bound(df, budget=1000.0)
    b1.grid_stats(value="v", bounds=(0, 20), epsilon_per_statistic=1.0, cells=8,
                  occupancy="public", rng=seeded_rng(1))  # fmt: skip
    s2, b2 = _bound(df, budget=1000.0)
    b2.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=2.0, cells=8, occupancy="public",
                  rng=seeded_rng(1))  # fmt: skip
    assert _spent(s1, [0], 1000.0)[0] > 2.0
    assert _spent(s2, [0], 1000.0)[0] <= 2.0


def test_private_no_user_pays_more_than_the_total_and_means_are_in_bounds():
    df = _frame(1)
    s, b = _bound(df)
    cells = np.unique(gp.frame.grid_stats.h3_cells(b.located, 8))
    out = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=3.0, cells=8,
                       occupancy="private", public_cells=cells.tolist(), max_cells=4,
                       max_per_cell=5, rng=seeded_rng(2))  # fmt: skip
    assert _spent(s, sorted(df.u.unique())).max() <= 3.0 + 1e-12
    res = out.attrs["geopriv"]
    assert res.params["epsilon_per_user"] == 3.0 and res.spent_at_most <= 3.0
    assert sum(res.params["epsilons"]) * 4 <= 3.0 + 1e-12
    assert (out["count"] >= 0).all()
    assert res.params["estimator"] == "per-user averages" and res.params["shrink"] is True
    # shrunk: every listed cell has a mean in [L, U] and a bound of at most W
    m, rel = out["mean"].to_numpy(), out["released"].to_numpy()
    assert rel.all() and np.isfinite(m).all() and ((m >= 0) & (m <= 20)).all()
    assert (out["mean_error"].to_numpy() <= 20).all()


def test_private_without_shrinkage_withholds_the_noisy_means():
    df = _frame(1)
    _s, b = _bound(df)
    cells = np.unique(gp.frame.grid_stats.h3_cells(b.located, 8))
    out = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=0.5, cells=8,
                       occupancy="private", public_cells=cells.tolist(), max_cells=4,
                       max_per_cell=5, rng=seeded_rng(2), shrink=False)  # fmt: skip
    m, rel = out["mean"].to_numpy(), out["released"].to_numpy()
    assert out.attrs["geopriv"].params["shrink"] is False
    assert not rel.all() and np.isnan(m[~rel]).all()
    assert np.isfinite(m[rel]).all() and ((m[rel] >= 0) & (m[rel] <= 20)).all()


def test_epsilon_is_the_former_name_of_epsilon_per_statistic():
    df = _frame(2)
    outs = []
    for kw in ({"epsilon": 0.5}, {"epsilon_per_statistic": 0.5}):
        _, b = _bound(df)
        outs.append(b.grid_stats(value="v", bounds=(0, 20), cells=8, occupancy="public",
                                 rng=seeded_rng(3), **kw))  # fmt: skip
    pd.testing.assert_frame_equal(outs[0], outs[1])


@pytest.mark.parametrize(
    "kw, match",
    [
        ({}, "exactly one of epsilon_per_user"),
        ({"epsilon": 1.0, "epsilon_per_user": 1.0}, "exactly one of epsilon_per_user"),
        ({"epsilon_per_user": 0}, "epsilon_per_user=0"),
        ({"epsilon_per_user": float("nan")}, "epsilon_per_user=nan"),
        ({"epsilon_per_user": 1e9}, "epsilon_per_user="),
        ({"epsilon_per_user": 1.0, "clip": "none"}, "clip='none' applies to the per-statistic"),
        ({"epsilon_per_user": 1.0, "split": (0.0, 1.0)}, "split="),
    ],
)
def test_bad_amounts_are_refused_before_the_ledger(kw, match):
    s, b = _bound(_frame(3))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=match) as ei:
        b.grid_stats(value="v", bounds=(0, 20), cells=8, occupancy="public",
                     rng=seeded_rng(1), **kw)  # fmt: skip
    assert str(ei.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_shrink_false_releases_the_plain_noisy_means_at_the_same_charge():
    # shrink= is post-processing: the same seeded draws give the same charges; with shrink=False
    # the released means are the plain noisy ones (clamped), with shrink=True they move toward
    # the released means' average and the Result says which
    df = _frame(seed=5, n_users=60)
    runs = {}
    for shrink in (True, False):
        s, b = _bound(df, budget=1000.0)
        out = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=300.0, cells=8,
                           occupancy="public", rng=seeded_rng(7), shrink=shrink)  # fmt: skip
        res = out.attrs["geopriv"]
        assert res.params["shrink"] is shrink
        runs[shrink] = (out, _spent(s, sorted(df.u.unique()), 1000.0))
    (on, spent_on), (off, spent_off) = runs[True], runs[False]
    np.testing.assert_array_equal(spent_on, spent_off)
    rel = off["released"].to_numpy()
    assert rel.sum() >= 3  # enough released cells for the shrinkage to act
    m_on, m_off = on["mean"].to_numpy()[rel], off["mean"].to_numpy()[rel]
    assert not np.allclose(m_on, m_off)
    # shrinking moves every mean toward one centre: the spread of the means can only narrow
    assert np.ptp(m_on) <= np.ptp(m_off) + 1e-12
    # the error bound widens to stay valid, never narrows
    assert (on["mean_error"].to_numpy()[rel] >= off["mean_error"].to_numpy()[rel] - 1e-12).all()
