"""Charging table and filter admission (adaptive-budgeting.md §2.6, §2.7; selection.md §0.4)."""

from __future__ import annotations

from fractions import Fraction

import pytest

import gpframe as gp
from gpframe.accounting import Filter, LedgerUnits, charge_for, exact, notion_of
from gpframe.accounting.conversions import gaussian_rho

# ---------------------------------------------------------------- charging table §2.6


@pytest.mark.parametrize(
    ("filter_kind", "kind", "amount", "charge"),
    [
        ("gp", "gp", 0.05, Fraction(1, 20)),
        ("cgp", "gp", 0.008, Fraction(32, 10**6)),
        ("cgp", "cgp", 2e-6, Fraction(2, 10**6)),
        ("dp", "dp", 1.0, Fraction(1)),
        ("dp", "dp_expost", 0.25, Fraction(1, 4)),
        ("zcdp", "dp", 1.0, Fraction(1, 2)),
        ("zcdp", "zcdp", 0.125, Fraction(1, 8)),
        ("cgp", "gp", 0, Fraction(0)),  # a user not queried (⊥) costs 0
    ],
)
def test_charge_for_table(filter_kind, kind, amount, charge):
    got = charge_for(filter_kind, kind, amount)
    assert isinstance(got, Fraction) and got == charge


def test_charge_for_accepts_budget_objects():
    assert charge_for(gp.CGP(rho=1e-4), "gp", 0.01) == Fraction(1, 20000)
    assert charge_for(gp.DP(epsilon=1), "dp_expost", 0.5) == Fraction(1, 2)


def test_gaussian_on_gp_filter_is_refused_with_a_fix():
    with pytest.raises(gp.BudgetExceededError) as err:
        charge_for("gp", "cgp", 5e-5)
    msg = str(err.value)
    assert "a pure-GP budget cannot pay for a Gaussian (CGP) mechanism" in msg
    assert "gp.CGP(" in msg and msg.endswith("Nothing was charged.")


def test_zcdp_on_dp_filter_is_refused():
    with pytest.raises(gp.BudgetExceededError, match="pure-DP budget cannot pay for a zCDP"):
        charge_for("dp", "zcdp", 0.5)


def test_expost_on_zcdp_filter_is_refused():
    with pytest.raises(gp.BudgetExceededError, match="ex-post"):
        charge_for("zcdp", "dp_expost", 0.1)


@pytest.mark.parametrize(
    ("filter_kind", "kind"),
    [
        ("gp", "dp"),
        ("gp", "zcdp"),
        ("gp", "dp_expost"),
        ("cgp", "dp"),
        ("cgp", "zcdp"),
        ("dp", "gp"),
        ("dp", "cgp"),
        ("zcdp", "gp"),
        ("zcdp", "cgp"),
    ],
)
def test_metric_and_central_never_mix(filter_kind, kind):
    with pytest.raises(gp.InvalidInputError, match="separate filters"):
        charge_for(filter_kind, kind, 0.1)


@pytest.mark.parametrize(
    ("filter_kind", "kind", "amount"),
    [
        ("ldp", "gp", 0.1),
        ("gp", "laplace", 0.1),
        ("dp_expost", "dp_expost", 0.1),
        ("gp", "gp", -0.1),
        ("gp", "gp", float("nan")),
        ("cgp", "cgp", float("inf")),
        ("gp", "gp", "abc"),
    ],
)
def test_charge_for_bad_input(filter_kind, kind, amount):
    with pytest.raises(gp.InvalidInputError):
        charge_for(filter_kind, kind, amount)


def test_notion_of():
    assert [notion_of(k) for k in ("gp", "cgp", "dp", "zcdp", "dp_expost")] == [
        "metric",
        "metric",
        "central",
        "central",
        "central",
    ]
    with pytest.raises(gp.InvalidInputError):
        notion_of("ldp")


# ---------------------------------------------------------------- admission oracle §2.7


def _filter(budget, committed, units=None):
    f = Filter(budget, units)
    for c in committed:
        tok = f.reserve(c)
        assert tok is not None
        f.commit(tok, c)
    return f


@pytest.mark.parametrize("ledger", [False, True])
def test_admission_table_2_7(ledger):
    def mk(budget, committed):
        units = LedgerUnits.for_budget(budget.amount) if ledger else None
        return _filter(budget, committed, units)

    # GP 0.05 with 0.01, 0.015, 0.02: Laplace 0.005 admitted (sum = 0.05 exactly), 0.006 refused
    f = mk(gp.GP(eps=0.05), [0.01, 0.015, 0.02])
    assert f.admits(0.005, kind="gp")
    assert not f.admits(0.006, kind="gp")
    # GP: Gaussian at any sigma refused, even on an empty filter, and nothing changes
    f = mk(gp.GP(eps=0.05), [])
    for sigma in (1, 100, 1e6):
        with pytest.raises(gp.BudgetExceededError):
            f.reserve(gaussian_rho(sigma), kind="cgp")
    assert f.spent == 0 and f.held == 0
    # CGP 1e-4 with 6e-5: Laplace 0.008 -> 3.2e-5 admitted (9.2e-5)
    f = mk(gp.CGP(rho=1e-4), [6e-5])
    assert f.admits(0.008, kind="gp")
    # Gaussian sigma = 50 -> 2e-4 refused; sigma = 100 -> 5e-5 refused (1.1e-4 > 1e-4)
    before = (f.spent, f.held)
    assert f.reserve(gaussian_rho(50), kind="cgp") is None
    assert f.reserve(gaussian_rho(100), kind="cgp") is None
    assert (f.spent, f.held) == before  # refusals cost nothing
    # then a Gaussian at rho = 4e-5 (sigma = 111.8033989 m) is admitted: 1e-4 <= 1e-4
    tok = f.reserve(4e-5, kind="cgp")
    assert tok is not None
    f.commit(tok, 4e-5, kind="cgp")
    assert f.spent == Fraction(1, 10**4) and f.remaining == 0
    # GP 0.3 with 0.1, 0.1: Laplace 0.1 admitted (exact), the next float above 0.1 refused
    f = mk(gp.GP(eps=0.3), [0.1, 0.1])
    assert f.admits(0.1, kind="gp")
    assert not f.admits(0.10000000000000002, kind="gp")
    assert sum([0.1, 0.1, 0.1]) > 0.3  # the float sum would wrongly refuse


def test_three_tenths_fit_exactly():
    f = _filter(gp.GP(eps=0.3), [0.1, 0.1, 0.1])
    assert f.spent == exact(0.3, "eps") and f.remaining == 0
    assert f.reserve(1e-300) is None


def test_reserve_commit_cancel_settle():
    f = Filter(gp.CGP(rho=1e-4))
    t1 = f.reserve(6e-5)
    assert f.held == Fraction(6, 10**5) and f.spent == 0
    assert f.reserve(5e-5) is None  # held counts against admission
    assert f.commit(t1, 2e-5) == Fraction(2, 10**5)  # elimination: used <= allocation
    assert f.held == 0 and f.spent == Fraction(2, 10**5)
    t2 = f.reserve(5e-5)
    f.cancel(t2)  # before noise: nothing charged
    assert f.spent == Fraction(2, 10**5) and f.held == 0
    t3 = f.reserve(5e-5)
    assert f.settle(t3) == Fraction(5, 10**5)  # left without commit: full allocation
    assert f.spent == Fraction(7, 10**5)
    for op in (lambda: f.commit(t3, 0), lambda: f.cancel(t1), lambda: f.settle(t2)):
        with pytest.raises(gp.InvalidInputError, match="not open"):
            op()


def test_commit_above_reservation_is_refused_and_keeps_the_hold():
    f = Filter(gp.GP(eps=1))
    t = f.reserve(0.1)
    with pytest.raises(gp.InvalidInputError, match="exceeds the reservation"):
        f.commit(t, 0.2)
    with pytest.raises(gp.InvalidInputError):
        f.commit(t, -0.1)
    assert f.held == Fraction(1, 10) and f.spent == 0
    f.commit(t, 0.1)
    assert f.spent == Fraction(1, 10)


def test_filter_rejects_non_budget():
    with pytest.raises(gp.InvalidInputError):
        Filter(0.3)  # type: ignore[arg-type]


def test_dp_filter_admits_expost_selection_but_not_zcdp():
    f = Filter(gp.DP(epsilon=1))
    t = f.reserve(0.6, kind="dp")  # reserve the run's worst case
    f.commit(t, 0.35, kind="dp_expost")  # settle to the realized ex-post epsilon
    assert f.spent == Fraction(35, 100)
    with pytest.raises(gp.BudgetExceededError):
        f.admits(0.01, kind="zcdp")


def test_ledger_units_filter_rounds_budget_down_and_charges_up():
    units = LedgerUnits(3)
    f = Filter(gp.CGP(rho=Fraction(10005, 10**6)), units)  # 0.010005 -> 0.010 in 1e-3 units
    assert f.budget == Fraction(1, 100)
    t = f.reserve(Fraction(1, 10**4))  # 0.0001 -> 0.001
    assert t.amount == Fraction(1, 1000)
    f.commit(t, Fraction(1, 10**5))
    assert f.spent == Fraction(1, 1000)
    assert "Filter(cgp" in repr(f)
