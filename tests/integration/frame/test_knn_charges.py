"""Issue 8 checklist, items 5-6: charges per user, one-point users, empty users refused.

Spec: concentrated-geo-privacy.md §7.3 / §8.1 / §8.5 (knn and convex_hull charge ρ or ε once per
user), §10 P-B1, P-B3, P-B4, P-B6; adaptive-budgeting.md §4.6, §5.3, §5.5 (nearest users: the
baselines charge the allocation, elimination a_i Σ_{j≤r} π_j). Through the public frame functions
of ``gpframe.frame.knn`` and the array entry points.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)
from gpframe.accounting.budgets import CGP, GP
from gpframe.errors import GpframeError, InvalidInputError
from gpframe.frame import knn as kf
from gpframe.ledger import Session
from gpframe.queries.elimination import split_fractions
from gpframe.queries.hull import private_hulls
from gpframe.queries.knn import knn_indices
from gpframe.queries.nearest import nearest_users_arrays
from gpframe.testing import seeded_rng

Q = (501_000.0, 4_501_000.0)


def _frame(sizes, seed=0):
    rs = np.random.default_rng(seed)  # the true data only
    n = sum(sizes)
    return pd.DataFrame({"boat": np.repeat(np.arange(1, len(sizes) + 1), sizes),
                         "x": 500_000 + rs.uniform(0, 2000, n),
                         "y": 4_500_000 + rs.uniform(0, 2000, n)})  # fmt: skip


def _bound(df, s):
    return df.geopriv(s, user="boat", x="x", y="y", crs="EPSG:32618")


# ------------------------------------------------------------------------------------------
# 5. charges equal the requested budget per user


@pytest.mark.parametrize(
    ("budget", "call_kw", "expected"),
    [
        (CGP(rho=1e-2), {"rho": 1e-3}, 1e-3),
        (GP(eps=1.0), {"eps": 0.05}, 0.05),
        (CGP(rho=1e-2), {"eps": 0.05}, 0.05**2 / 2),  # a GP run on a CGP filter: ε²/2 (P-B4)
    ],
    ids=["cgp", "gp", "gp-on-cgp"],
)
@pytest.mark.parametrize("op", ["knn", "convex_hull"])
def test_knn_and_hull_charge_the_requested_budget_per_user(op, budget, call_kw, expected):
    """Item 5. Every user, including one with fewer rows than k (knn: ρ/n_u per call) or than the
    anchors (hull: Remark 1), is charged exactly the requested amount, once."""
    df = _frame([300, 2, 1])
    s = Session(budget=budget)
    b = _bound(df, s)
    if op == "knn":
        out = kf.knn(b, Q, 4, rng=seeded_rng(1), **call_kw)
    else:
        out = kf.convex_hull(b, rng=seeded_rng(1), **call_kw)
        spend = out.attrs["geopriv"].params["spend"]
        amount = next(iter(call_kw.values()))
        assert sum(spend.values()) == pytest.approx(amount, rel=1e-12)
    assert s.spent().tolist() == pytest.approx([expected] * 3, rel=1e-9)
    res = out.attrs["geopriv"]
    assert res.charges.tolist() == pytest.approx([expected] * 3, rel=1e-9)


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_array_level_charges_are_the_exact_amount(kind):
    """Item 5 (arrays): ``charges`` are the exact Fraction amount for every admitted user, 0 for
    the others; PCH's four shares sum exactly to it (P-B3)."""
    amount = Fraction(1, 1000) if kind == "cgp" else Fraction(1, 20)
    rs = np.random.default_rng(1)
    xy = rs.uniform(0, 3000, (203, 2))
    codes = np.array([0] * 200 + [1] * 2 + [2])
    kn = knn_indices(xy, codes, (1500.0, 1500.0), 5, kind=kind, amount=amount,
                     admitted=[True, True, False], rng=seeded_rng(2))  # fmt: skip
    assert list(kn.charges) == [amount, amount, 0]
    assert kn.rows[2].size == 0 and kn.k.tolist() == [5, 2, 0]
    hu = private_hulls(xy, codes, kind=kind, amount=amount, admitted=[True, True, False],
                       rng=seeded_rng(3))  # fmt: skip
    assert list(hu.charges) == [amount, amount, 0]
    assert sum(hu.spend.values()) == amount


@pytest.mark.parametrize(("budget", "kw"), [(CGP(rho=1e-2), {"rho": 1e-3}),
                                            (GP(eps=1.0), {"eps": 0.05})],
                         ids=["cgp", "gp"])  # fmt: skip
@pytest.mark.parametrize("method", ["pt", "dist", "pt-elim", "dist-elim"])
def test_nearest_users_charges_match_the_rounds_run(budget, kw, method):
    """Item 5 for nearest_users: baselines charge each user its allocation; elimination charges
    a_i Σ_{j ≤ r_i} π_j for the r_i rounds the user took part in (the eliminating round is paid),
    never more than a_i; the ledger records exactly the result's charges."""
    rs = np.random.default_rng(4)
    df = pd.DataFrame({"boat": np.arange(40), "x": 500_000 + rs.uniform(0, 40_000, 40),
                       "y": 4_500_000 + rs.uniform(0, 40_000, 40)})  # fmt: skip
    s = Session(budget=budget)
    res = kf.nearest_users(df.geopriv(s, user="boat", x="x", y="y", crs="EPSG:32618"),
                           (500_000.0, 4_500_000.0), 3, method=method, rng=seeded_rng(5),
                           **kw)  # fmt: skip
    a = next(iter(kw.values()))
    spent = s.spent().sort_index()
    charges = res.charges.sort_index()
    assert spent.tolist() == pytest.approx(charges.tolist(), rel=1e-9, abs=1e-15)
    assert (spent <= a * (1 + 1e-12)).all()
    if method in ("pt", "dist"):
        assert spent.tolist() == pytest.approx([a] * 40, rel=1e-9)
        return
    rounds = res.params["rounds_histogram"]
    assert sum(rounds) == 40
    pi = split_fractions("doubling", 10)
    allowed = [float(a * sum(pi[:r])) for r in range(0, 11)]
    for c in spent.tolist():
        assert min(abs(c - v) for v in allowed) <= 1e-6 * a, c
    assert spent.min() < a  # far users are dropped early and pay less


# ------------------------------------------------------------------------------------------
# 6. one-point users work; empty users are refused with nothing charged


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_one_point_user_knn_and_hull(kind):
    """Item 6. A user with a single row: knn returns that row at rank 1; convex_hull releases it
    (Remark 1) as a degenerate Point hull (P-D2); both charge the full amount."""
    df = _frame([1, 50])
    budget = CGP(rho=1e-2) if kind == "cgp" else GP(eps=1.0)
    kw = {"rho": 1e-3} if kind == "cgp" else {"eps": 0.05}
    s = Session(budget=budget)
    out = kf.knn(_bound(df, s), Q, 3, rng=seeded_rng(6), **kw)
    one = out[out["boat"] == 1]
    assert one.index.tolist() == [0] and one["knn_rank"].tolist() == [1]
    g = kf.convex_hull(_bound(df, s), rng=seeded_rng(7), **kw)
    assert g.loc[1, "fallback"] and g.loc[1, "k"] == 1 and g.loc[1].geometry.geom_type == "Point"
    assert g.loc[2].geometry.geom_type == "Polygon"
    a = next(iter(kw.values()))
    assert s.spent().tolist() == pytest.approx([2 * a, 2 * a], rel=1e-9)


def test_nearest_users_with_one_point_users_works():
    """Item 6: nearest_users reads one point per user; many one-row users work."""
    df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_000.0, 500_010.0, 530_000.0],
                       "y": [4_500_000.0] * 3})  # fmt: skip
    s = Session(budget=CGP(rho=1e-2))
    res = kf.nearest_users(_bound(df, s), (500_000.0, 4_500_000.0), 2, rho=1e-3,
                           rng=seeded_rng(8))  # fmt: skip
    assert sorted(res.value) == [1, 2]


@pytest.mark.parametrize("method", ["dist", "dist-elim"])
def test_nearest_users_single_user_k1_works_without_warnings(method):
    """Item 6: a frame with one user (one point), k = 1, answers [that user] cleanly."""
    df = pd.DataFrame({"boat": [7], "x": [500_000.0], "y": [4_500_000.0]})
    s = Session(budget=CGP(rho=1e-2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = kf.nearest_users(_bound(df, s), (500_000.0, 4_500_000.0), 1, rho=1e-3,
                               method=method, rng=seeded_rng(9))  # fmt: skip
    assert res.value == [7]


@pytest.mark.parametrize(
    "call",
    [
        lambda b: kf.knn(b, Q, 1, rho=1e-3),
        lambda b: kf.convex_hull(b, rho=1e-3),
        lambda b: kf.nearest_users(b, Q, 1, rho=1e-3),
    ],
    ids=["knn", "convex_hull", "nearest_users"],
)
@pytest.mark.parametrize("frame", ["empty", "missing-user-id"])
def test_empty_or_unowned_rows_are_refused_untouched(call, frame):
    """Item 6: an empty frame, or rows without a user, are refused with a GpframeError before
    the ledger is touched (P-B6)."""
    if frame == "empty":
        df = _frame([3]).iloc[:0]
    else:
        df = _frame([3, 2]).astype({"boat": "float64"})
        df.loc[1, "boat"] = np.nan
    s = Session(budget=CGP(rho=1e-2))
    before = s.ledger.snapshot()
    with pytest.raises(GpframeError, match=r"empty|missing user"):
        call(_bound(df, s))
    assert s.ledger.snapshot() == before


def test_array_entry_points_refuse_a_user_without_points():
    """Item 6 (arrays): a declared user with no point is refused (InvalidInputError, raised
    before any draw) by knn_indices and private_hulls."""
    xy = np.array([[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(InvalidInputError, match="no points"):
        knn_indices(xy, [0, 0], (0.0, 0.0), 1, kind="gp", amount=0.1, n_users=2)
    with pytest.raises(InvalidInputError, match="no points"):
        private_hulls(xy, [0, 2], kind="cgp", amount=1e-3)


def test_nearest_users_arrays_refuses_zero_users():
    with pytest.raises(InvalidInputError):
        nearest_users_arrays(np.zeros((0, 2)), (0.0, 0.0), 1, kind="cgp", amount=1e-3,
                             rng=seeded_rng(1))  # fmt: skip
