"""gpframe.accounting.amounts: exact amounts everywhere; the entry-point checks of beta, rho, eps.

Amounts are exact on every path: 3 x 0.1 fits a budget of 0.3, and a bool is never an amount.

threshold_query used to read its amount with ``Fraction(0.1)``, the binary double
0.1000000000000000055..., which the ledger rounds up to 0.1000000000000001: the third query at
0.1 did not fit a budget of 0.3. Every amount a user types must go through
``gpframe.accounting.amounts.exact`` (shortest decimal form), which refuses bools of any kind.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import gpframe as gp
from gpframe import monitor
from gpframe.accounting.amounts import exact, metric_amount, nonnegative, positive, probability
from gpframe.accounting.schedules import Plan
from gpframe.errors import InvalidInputError
from gpframe.testing import seeded_rng

USERS = [1, 2, 3]


def _threshold(s: gp.Session, seed: int, **amount: float) -> None:
    # rounds=1: the single round spends the whole amount, so each query charges exactly it
    monitor.threshold_query(s, 900, tau=500, users=USERS, rounds=1, rng=seeded_rng(seed), **amount)


@pytest.mark.parametrize(
    ("budget", "amount"),
    [(gp.DP(epsilon=0.3), {"epsilon": 0.1}), (gp.zCDP(rho=0.3), {"rho": 0.1})],
    ids=["dp", "zcdp"],
)
def test_three_threshold_queries_at_a_tenth_fit_three_tenths_and_a_fourth_is_refused(
    budget, amount
):
    s = gp.Session(central=budget)
    for seed in range(3):
        _threshold(s, seed, **amount)
    spent = s.spent_exact(USERS, notion="central")
    assert spent.tolist() == [Fraction(3, 10)] * 3
    with pytest.raises(gp.BudgetExceededError, match="Nothing was charged"):
        _threshold(s, 3, **amount)
    assert s.spent_exact(USERS, notion="central").tolist() == [Fraction(3, 10)] * 3


@pytest.mark.parametrize("param", ["epsilon", "rho"])
@pytest.mark.parametrize("flag", [np.True_, np.array(True), True], ids=["np.bool_", "0-d", "bool"])
def test_threshold_query_refuses_a_bool_amount_and_leaves_the_ledger_untouched(param, flag):
    s = gp.Session(central=gp.DP(epsilon=5.0) if param == "epsilon" else gp.zCDP(rho=5.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=rf"{param}=\S+ is a bool.*Nothing was charged"):
        monitor.threshold_query(s, 900, tau=500, users=USERS, rng=seeded_rng(1), **{param: flag})
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    "flag", [np.True_, np.False_, np.array(True)], ids=["np.True_", "np.False_", "0-d"]
)
@pytest.mark.parametrize("reader", [exact, positive, nonnegative])
def test_exact_refuses_numpy_bools(reader, flag):
    with pytest.raises(gp.InvalidInputError, match=r"amount=\S+ is a bool"):
        reader(flag, "amount")


def test_session_reserve_and_budgets_refuse_numpy_bools():
    s = gp.Session(central=gp.DP(epsilon=5.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="is a bool"):
        s.reserve(USERS, np.True_, notion="central", query="bool amount")
    assert s.ledger.snapshot() == before
    with pytest.raises(gp.InvalidInputError, match="is a bool"):
        gp.DP(epsilon=np.True_)
    with pytest.raises(gp.InvalidInputError, match="is a bool"):
        Plan(np.True_, queries=2)


def test_numbers_still_read_exactly():
    assert exact(np.float64(0.1), "eps") * 3 == exact(0.3, "eps") == Fraction(3, 10)
    assert exact(np.int64(2), "eps") == 2 and exact(np.array(0.25), "eps") == Fraction(1, 4)


@pytest.mark.parametrize("beta", [0.05, 1e-300, Fraction(1, 3), np.float64(0.5), np.float32(0.25)])
def test_probability_accepts_reals_strictly_inside(beta):
    assert probability(beta) == float(beta)


@pytest.mark.parametrize("beta", [0, 1, 0.0, 1.0, -0.1, True, False, float("nan"), float("inf"),
                                  10**400, "0.05", None, [0.05]])  # fmt: skip
def test_probability_refuses_and_names_the_argument(beta):
    with pytest.raises(InvalidInputError, match=r"^gamma=.*probability in \(0, 1\).*charged\.$"):
        probability(beta, "gamma")


def test_metric_amount_kinds_and_exact_values():
    assert metric_amount(None, 0.1, example="x") == ("gp", Fraction(1, 10))
    assert metric_amount(1e-5, None, example="x", filter_kind="cgp", same_kind=True) == (
        "cgp", Fraction(1, 100000))  # fmt: skip
    # a GP mechanism may run on a CGP filter unless the operation needs the same kind
    assert metric_amount(None, 0.1, example="x", filter_kind="cgp")[0] == "gp"


@pytest.mark.parametrize(
    ("rho", "eps", "kw", "message"),
    [
        (None, None, {}, r"exactly one of eps=.*Example: \.op\(rho=1\)"),
        (1e-4, 0.1, {}, "exactly one of eps"),
        (1e-4, None, {"filter_kind": "gp"}, "pure GP: pass eps"),
        (None, 0.1, {"filter_kind": "cgp", "same_kind": True}, "CGP: pass rho"),
        (True, None, {}, "rho=True must be a number > 0"),
        (None, float("nan"), {}, "not finite"),
        (None, -1.0, {}, "must be > 0"),
    ],
)
def test_metric_amount_refusals(rho, eps, kw, message):
    with pytest.raises(InvalidInputError, match=message) as err:
        metric_amount(rho, eps, example=".op(rho=1)", **kw)
    assert str(err.value).endswith("Nothing was charged.")
