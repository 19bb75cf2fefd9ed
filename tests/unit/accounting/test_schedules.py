"""Algorithm 3 (adaptive-budgeting.md §3): the §3.4 oracle and the budget invariant."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpframe.accounting.schedules import SCHEDULES, Plan, schedule_lambda, simulate
from gpframe.errors import InvalidInputError


def _oracle_use(t, a):
    # query 1 uses 0.1, query 2 all, query 3 two thirds, query 4 all (spec §3.4)
    return [Fraction(1, 10)] * len(a) if t == 1 else a * 2 / 3 if t == 3 else a


@pytest.mark.parametrize(
    ("schedule", "allocs", "used"),
    [
        ("even", ["1/4", "3/10", "3/10", "2/5"], ["1/10", "3/10", "1/5", "2/5"]),
        ("linear", ["1/4", "3/10", "19/60", "7/18"], ["1/10", "3/10", "19/90", "7/18"]),
        ("proportion", ["1/4", "13/40", "23/80", "23/60"], ["1/10", "13/40", "23/120", "23/60"]),
    ],
)
def test_algorithm_3_oracle(schedule, allocs, used):
    a, u, plan = simulate(1, 4, schedule, _oracle_use)
    assert [x[0] for x in a] == [Fraction(v) for v in allocs]
    assert [x[0] for x in u] == [Fraction(v) for v in used]
    assert plan.spent[0] == 1 and plan.pool[0] == 0


def test_oracle_decimal_values():
    a, u, _ = simulate(1, 4, "linear", _oracle_use)
    assert float(a[2][0]) == pytest.approx(0.3166666667, rel=1e-9)
    assert float(a[3][0]) == pytest.approx(0.3888888889, rel=1e-9)
    assert float(u[2][0]) == pytest.approx(0.2111111111, rel=1e-9)


@given(
    T=st.integers(1, 12),
    schedule=st.sampled_from(SCHEDULES),
    budgets=st.lists(
        st.integers(0, 10**6).map(lambda k: Fraction(k, 10**5)), min_size=1, max_size=5
    ),
    fracs=st.lists(st.integers(0, 64).map(lambda k: Fraction(k, 64)), min_size=60, max_size=60),
    lam=st.integers(1, 100).map(lambda k: Fraction(k, 100)),
)
@settings(max_examples=150, deadline=None)
def test_never_exceeds_a_users_budget(T, schedule, budgets, fracs, lam):
    """Spec §3.3: every allocation fits the remaining budget; Σ charges = B − pool ≤ B."""
    n = len(budgets)
    plan = Plan(np.array(budgets, dtype=object), T, schedule, lam=lam)
    B = np.array(budgets, dtype=object)
    it = iter(fracs)
    for _ in range(T):
        a = plan.next_allocations()
        assert all(a[i] <= B[i] - plan.spent[i] for i in range(n))
        plan.record(np.array([a[i] * next(it) for i in range(n)], dtype=object))
        assert all(plan.spent[i] <= B[i] for i in range(n))
    assert all(plan.spent[i] + plan.pool[i] == B[i] for i in range(n))


def test_last_query_takes_the_whole_pool():
    for s in SCHEDULES:
        assert schedule_lambda(s, 5, 5) == 1 and schedule_lambda(s, 1, 5) == 0
    a, u, plan = simulate([2, 1], 3, "proportion", lambda t, a: a / 2)
    # after the last query the pool holds only that query's own saving
    assert list(plan.pool) == list(a[-1] - u[-1])


def test_remaining_caps_allocations_and_keeps_the_rest():
    plan = Plan([1, 1], 2, "even")
    a = plan.next_allocations(remaining=[Fraction(1, 10), 5])
    assert list(a) == [Fraction(1, 10), Fraction(1, 2)]
    plan.record(a)
    a2 = plan.next_allocations()
    assert list(a2) == [Fraction(9, 10), Fraction(1, 2)]


def test_protocol_errors():
    plan = Plan(1, 2)
    with pytest.raises(InvalidInputError, match="next_allocations"):
        plan.record(0)
    a = plan.next_allocations()
    with pytest.raises(InvalidInputError, match="record"):
        plan.next_allocations()
    with pytest.raises(InvalidInputError, match="outside"):
        plan.record(a * 2)
    with pytest.raises(InvalidInputError, match="schedule"):
        Plan(1, 2, "weird")
    with pytest.raises(InvalidInputError, match="queries"):
        Plan(1, 0)
