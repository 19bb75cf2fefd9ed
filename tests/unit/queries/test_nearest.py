"""Nearest users, Algorithm 8 (adaptive-budgeting.md §5.3): selection, charges, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.queries.nearest import nearest_users_arrays
from gpframe.testing import seeded_rng


def _users(seed, n=200):
    rs = np.random.default_rng(seed)
    return rs.uniform(-20000, 20000, (n, 2))


def test_elimination_charges_dropped_users_less_and_finds_the_true_k():
    xy = _users(1)
    out = nearest_users_arrays(xy, (0.0, 0.0), 5, kind="cgp", amount=1e-4, rng=seeded_rng(1))
    true = np.argsort(np.hypot(*xy.T))[:5]
    ch = np.array([float(c) for c in out.charges])
    if out.exact:
        assert set(out.selected.tolist()) == set(true.tolist())
    far = np.argsort(np.hypot(*xy.T))[-50:]
    assert (ch[far] < 1e-4).all() and ch.max() <= 1e-4


@pytest.mark.parametrize("method", ["pt", "dist"])
def test_baselines_charge_every_user_the_allocation(method):
    xy = _users(2, 50)
    out = nearest_users_arrays(
        xy, (0.0, 0.0), 3, kind="gp", amount=0.01, method=method, rng=seeded_rng(2)
    )
    assert [float(c) for c in out.charges] == [0.01] * 50 and len(out.selected) == 3
    assert not out.exact and out.error > 0


@pytest.mark.statistical
def test_error_statement_holds_at_its_probability():
    """Over 60 seeded queries (β = 0.1) the stated error holds in ≥ 80 % (false failure < 1e-6
    at the true rate ≥ 0.9; the bound is loose so the rate is ~1)."""
    ok = 0
    for s in range(60):
        xy = _users(100 + s, 100)
        d = np.hypot(*xy.T)
        out = nearest_users_arrays(
            xy, (0.0, 0.0), 4, kind="cgp", amount=2e-6, method="dist", beta=0.1, rng=seeded_rng(s)
        )
        true = np.sort(d)[:4]
        got = np.sort(d[out.selected])
        ok += bool(np.all(got <= true + out.error + 1e-9))
    assert ok >= 48


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"method": "elim"}, "method"),
        ({"k": 0}, "k="),
        ({"point_m": (np.nan, 0)}, "point"),
        ({"beta": 0.0}, "beta"),
    ],
)
def test_bad_inputs_raise(kw, match):
    args = {"point_m": (0.0, 0.0), "k": 2, **kw}
    with pytest.raises(InvalidInputError, match=match):
        nearest_users_arrays(
            _users(3, 10), args.pop("point_m"), args.pop("k"), kind="cgp", amount=1e-4, **args
        )
