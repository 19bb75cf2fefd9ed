"""Hypothesis properties of the accounting layer (adaptive-budgeting.md §2.6 rule 5)."""

from __future__ import annotations

from fractions import Fraction

import mpmath
from hypothesis import given, settings
from hypothesis import strategies as st

import gpframe as gp
from gpframe.accounting import Filter, LedgerUnits, charge_for, exact
from gpframe.accounting import conversions as cv

eps_s = st.floats(1e-5, 10, allow_nan=False)
delta_s = st.sampled_from([1e-3, 1e-6, 1e-9, 1e-10, 1e-12, 1e-20])
A_s = st.floats(1, 1e5, allow_nan=False)
amount_s = st.floats(1e-9, 1.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(eps_s, delta_s, A_s)
def test_rho_max_is_a_lower_bound_and_round_trips(eps, delta, A):
    r = cv.rho_max(eps, delta, A)
    with mpmath.workdps(50):
        L = mpmath.log(1 / mpmath.mpf(repr(delta)))
        e, a = mpmath.mpf(repr(eps)), mpmath.mpf(repr(A))
        true = ((mpmath.sqrt(L + a * e) - mpmath.sqrt(L)) / a) ** 2
        mr = mpmath.mpf(r.numerator) / r.denominator
        assert mr <= true  # a budget: rounded down
        assert mr >= true * (1 - mpmath.mpf("1e-11"))  # but tight
        # round trip: the stored budget implies the target (eps_min <= eps, exactly in mp)
        back = mr * a + 2 * mpmath.sqrt(mr * L)
        assert back <= e
    assert cv.eps_min(r, delta, A) <= eps * (1 + 1e-11)


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-12, 100, allow_nan=False))
def test_cgp_block_eps_never_exceeds_its_charge(rho):
    r = exact(rho, "rho")
    e = cv.cgp_block_eps(rho)
    assert e * e / 2 <= r
    assert float(e) >= (2 * rho) ** 0.5 * (1 - 1e-15)
    # GP -> CGP -> GP round trip never gains epsilon
    assert cv.cgp_block_eps(cv.gp_to_cgp(e)) <= e


@settings(max_examples=300, deadline=None)
@given(st.fractions(min_value=0, max_value=10**6), st.integers(0, 30))
def test_ledger_units_round_charges_up_and_budgets_down(x, exponent):
    u = LedgerUnits(exponent)
    assert u.to_fraction(u.up(x)) >= x > u.to_fraction(u.up(x)) - u.to_fraction(1)
    assert u.to_fraction(u.down(x)) <= x < u.to_fraction(u.down(x)) + u.to_fraction(1)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["gp", "cgp"]),
    st.floats(1e-6, 1.0),
    st.lists(st.tuples(amount_s, st.floats(0, 1)), min_size=1, max_size=40),
)
def test_ledger_units_never_admit_more_than_exact(kind, budget, steps):
    b = gp.GP(eps=budget) if kind == "gp" else gp.CGP(rho=budget)
    rounded = Filter(b, LedgerUnits.for_budget(b.amount))
    exact_sum = Fraction(0)  # what the rounded filter really spent, in exact arithmetic
    for p, use in steps:
        pe = exact(p, "p")
        if rounded.admits(p):
            # whatever the rounded filter admits, the exact filter on the same history admits too
            assert exact_sum + pe <= b.amount
            tok = rounded.reserve(p)
            used = pe * exact(use, "use")
            rounded.commit(tok, used)
            exact_sum += used
        assert exact_sum <= rounded.spent <= b.amount


@settings(max_examples=200, deadline=None)
@given(st.lists(amount_s, min_size=1, max_size=30), st.floats(1e-6, 5.0))
def test_exact_filter_admits_iff_exact_sum_fits(charges, budget):
    f = Filter(gp.GP(eps=budget))
    total = Fraction(0)
    for c in charges:
        fits = total + exact(c, "c") <= exact(budget, "b")
        tok = f.reserve(c)
        assert (tok is not None) == fits
        if tok is not None:
            f.commit(tok, c)
            total += exact(c, "c")
    assert f.spent == total <= f.budget


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 10, allow_nan=False))
def test_gp_step_on_cgp_filter_costs_exactly_half_eps_squared(eps):
    assert charge_for("cgp", "gp", eps) == exact(eps, "eps") ** 2 / 2
    assert charge_for("zcdp", "dp", eps) == exact(eps, "eps") ** 2 / 2


@settings(max_examples=100, deadline=None)
@given(st.floats(1e-8, 1.0), st.floats(1e-4, 1.0), delta_s)
def test_printed_lemma_is_consistent(rho, eps, delta):
    # delta_for at A_max gives back delta (within the reporting margins), and the exact
    # Gaussian profile never exceeds the printed lemma at any d <= A_max
    a = cv.A_max(rho, eps, delta)
    if a <= 0:
        return
    assert cv.delta_for(rho, eps, a) <= delta * (1 + 1e-6) + 1e-300
    assert cv.eps_min(rho, delta, a) <= eps * (1 + 1e-10)
