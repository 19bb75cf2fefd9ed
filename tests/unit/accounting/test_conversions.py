"""Oracle tables of adaptive-budgeting.md §2.7 and concentrated-geo-privacy.md §2.2, §3.3, §3.4."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from scipy.stats import norm

import gpframe as gp
from gpframe.accounting import conversions as cv

REL = 1e-9


def close(a: float, b: float, rel: float = REL) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=0.0)


# ---------------------------------------------------------------- adaptive-budgeting.md §2.7


@pytest.mark.parametrize(
    ("rho", "K", "sigma"),
    [(2e-6, 1, 500.0), (1e-4, 1, 70.71067812), (0.02, 3, 15.0), (5e-5, 1, 100.0)],
)
def test_gaussian_sigma_table_2_7(rho, K, sigma):
    assert close(cv.gaussian_sigma(rho, K), sigma)
    # rounded up: never less noise than the nominal value
    assert Fraction(cv.gaussian_sigma(rho, K)) ** 2 >= Fraction(K) ** 2 / (2 * gp.CGP(rho).rho)


@pytest.mark.parametrize(("sigma", "K", "rho"), [(100, 1, 5e-5), (500, 1, 2e-6), (50, 1, 2e-4)])
def test_gaussian_rho_table_2_7_is_exact(sigma, K, rho):
    assert cv.gaussian_rho(sigma, K) == Fraction(repr(rho))


def test_renyi_check_2_7():
    # D_alpha = alpha * rho * d^2 for the Gaussian at rho = 1e-4, d = 100, alpha = 2
    sigma = cv.gaussian_sigma(1e-4)
    assert close(2 * 100**2 / (2 * sigma**2), 2.0)


@pytest.mark.parametrize(
    ("eps", "rho"), [(0.01, "5e-5"), (0.002, "2e-6"), (1, "0.5"), (0.008, "3.2e-5")]
)
def test_gp_to_cgp_is_exact_2_7(eps, rho):
    assert cv.gp_to_cgp(eps) == Fraction(rho)


@pytest.mark.parametrize(
    ("rho", "delta", "A", "eps"),
    [
        (1e-4, 1e-6, 100, 0.08433844378),
        (2e-6, 1e-9, 1000, 0.01487579616),
        (0.5, 1e-5, 1, 5.298525912),
        # concentrated-geo-privacy.md §2.2, printed Lem. 3.7
        (0.01, 1e-10, 10, 1.059705182),
        (5e-5, 1e-10, 1000, 0.1178614042),
        (5e-6, 1e-6, 500, 0.01912258136),
    ],
)
def test_eps_min_tables(rho, delta, A, eps):
    got = cv.eps_min(rho, delta, A)
    assert close(got, eps)


@pytest.mark.parametrize(
    ("rho", "eps", "delta", "A"),
    [
        (1e-4, 0.1, 1e-6, 256.6155622),
        (2e-6, 0.02, 1e-9, 3562.101921),
        (0.01, 1, 1e-10, 4.029481756),
        (5e-5, 0.1, 1e-10, 642.7719151),
        (5e-5, 0.5, 1e-10, 8642.771915),
    ],
)
def test_A_max_tables(rho, eps, delta, A):
    assert close(cv.A_max(rho, eps, delta), A)


def test_A_max_no_guarantee_is_zero():
    assert cv.A_max(1e-4, 1e-3, 1e-6) == 0.0


@pytest.mark.parametrize(
    ("rho", "eps", "A", "delta"),
    [
        (0.01, 1, 10, 1.605228055e-9),
        (5e-5, 0.1, 1000, 3.726653172e-6),
        (5e-5, 0.5, 5000, 1.918555669e-136),
        (1e-4, 0.1, 100, 1.605228055e-9),  # adaptive-budgeting.md §2.7 CKS table, last column
        (2e-6, 0.02, 1000, 2.576757109e-18),
    ],
)
def test_delta_for_tables(rho, eps, A, delta):
    assert close(cv.delta_for(rho, eps, A), delta)


def test_delta_for_without_margin_is_one():
    assert cv.delta_for(0.01, 0.1, 10) == 1.0


@pytest.mark.parametrize(
    ("eps", "delta", "A", "rho"),
    [
        (0.1, 1e-6, 100, 1.353014690e-4),
        (1, 1e-6, 1, 0.01746890477),
        (0.05, 1e-9, 2000, 1.035273285e-5),
        (1, 1e-10, 10, 0.008992469609),
        (0.1, 1e-10, 1000, 3.960406395e-5),
        (0.05, 1e-6, 200, 3.382536725e-5),
    ],
)
def test_rho_max_tables_round_down_and_check(eps, delta, A, rho):
    r = cv.rho_max(eps, delta, A)
    assert isinstance(r, Fraction)
    assert close(r, rho)
    # the check column: eps_min(rho_max) == target eps (up to the report's rounding margin)
    assert close(cv.eps_min(r, delta, A), eps)


@pytest.mark.parametrize(
    ("rho", "delta", "eps"),
    [
        (0.5, 1e-6, 5.756521770),
        (0.125, 1e-6, 2.753260885),
        (0.005, 1e-6, 0.5306521770),
        (0.1, 1e-9, 2.979115547),
        (0.01, 1e-10, 0.9697051824),  # concentrated-geo-privacy.md §3.4 central reference
    ],
)
def test_zcdp_to_dp_table(rho, delta, eps):
    assert close(cv.zcdp_to_dp(rho, delta), eps)


@pytest.mark.parametrize(
    ("rho", "eps", "A", "delta", "alpha"),
    [
        (1e-4, 0.1, 100, 1.171417231e-10, 5.598),
        (2e-6, 0.02, 1000, 1.889603387e-19, 5.550),
        (0.5, 5.298525912, 1, 6.834076567e-7, 5.981),
    ],
)
def test_cks_delta_table_2_7(rho, eps, A, delta, alpha):
    got, a_star = cv.cks_delta(rho, eps, A, return_alpha=True)
    assert close(got, delta, 1e-7)  # a numerical minimiser: 1e-7 relative is what it promises
    assert abs(a_star - alpha) < 1e-3
    # CKS is tighter than eq. (3), which stays the reported figure
    assert got <= cv.delta_for(rho, eps, A)


def test_cks_delta_without_margin_is_capped_at_one():
    assert cv.cks_delta(1.0, 0.5, 10) == 1.0


# ---------------------------------------------------------------- concentrated-geo-privacy.md §2


@pytest.mark.parametrize(("eps", "rho"), [(0.01, 5e-5), (0.002236067978, 2.5e-6), (0.2, 0.02)])
def test_exchange_rate_eps_to_rho(eps, rho):
    assert close(cv.gp_to_cgp(eps), rho)


@pytest.mark.parametrize(
    ("rho", "eps"), [(5e-8, 3.162277660e-4), (5e-6, 3.162277660e-3), (5e-4, 0.03162277660)]
)
def test_exchange_rate_rho_to_eps_rounds_down(rho, eps):
    e = cv.cgp_block_eps(rho)
    assert isinstance(e, Fraction)
    assert close(e, eps)
    assert e * e / 2 <= gp.CGP(rho).rho  # the block never gets less noise than rho pays for
    assert (e + Fraction(1, 2**40) * e) ** 2 / 2 > gp.CGP(rho).rho  # and it is tight


@pytest.mark.parametrize(
    ("rho", "eps_d", "A", "eps_min_at_A"),
    [
        (5e-8, 0.002282765162, 4389.933003, 0.002365462676),
        (9e-7, 0.009684952355, 1034.717132, 0.01003580820),
        (5e-6, 0.02282765162, 438.9933003, 0.02365462676),
        (5e-5, 0.07218737275, 138.8218707, 0.07480249778),
        (2.5e-4, 0.1614158726, 62.08302791, 0.1672634699),
        (5e-4, 0.2282765162, 43.89933003, 0.2365462676),
    ],
)
def test_harness_eps_delta_table(rho, eps_d, A, eps_min_at_A):
    e, a = cv.eps_delta(rho)
    assert close(e, eps_d)
    assert close(a, A)
    assert close(cv.eps_min(rho, 1e-10, a), eps_min_at_A)
    # the harness budget is NOT implied by the printed lemma at its own cap
    assert e < cv.eps_min(rho, 1e-10, a)


def test_harness_product_is_about_ten():
    e, a = cv.eps_delta(5e-5)
    assert close(e * a, 10.02118612)


@pytest.mark.parametrize(
    ("d", "exact", "alpha_form", "printed"),
    [
        (10, 5.024960587e-15, 9.531733146e-14, 6.928366402e-12),
        (100, 1.148144415e-12, 2.042286375e-11, 1.576387197e-10),
        (138.8218707, 5.786128559e-12, 9.999999983e-11, 5.699999989e-10),
    ],
)
def test_bounds_against_exact_gaussian_delta(d, exact, alpha_form, printed):
    rho, eps = 5e-5, 0.07218737275
    # exact Gaussian privacy profile (Balle–Wang), per pair at distance d
    s = math.sqrt(rho / 2)
    ex = norm.cdf(d * s - eps / math.sqrt(2 * rho)) - math.exp(eps * d) * norm.cdf(
        -d * s - eps / math.sqrt(2 * rho)
    )
    assert close(ex, exact, 1e-6)
    # alpha-form: delta = exp(-(eps - rho d)^2 / (4 rho)) / alpha*,
    # with alpha* = 1 + (eps - rho d)/(2 rho d)
    a_star = 1 + (eps - rho * d) / (2 * rho * d)
    af = math.exp(-((eps - rho * d) ** 2) / (4 * rho)) / a_star
    assert close(af, alpha_form, 1e-8)
    # printed Lem. 3.7 at d is delta_for(rho, eps, d)
    pr = cv.delta_for(rho, eps, d)
    assert close(pr, printed, 1e-8)
    assert ex <= af <= pr


def test_paper_remark_A_about_ten_does_not_match_printed_lemma():
    # concentrated-geo-privacy.md §2.2: eps=1, delta=1e-10, rho=0.01 -> printed A_max 4.029...
    assert close(cv.A_max(0.01, 1, 1e-10), 4.029481756)


# ---------------------------------------------------------------- §3.3 negative results


@pytest.mark.parametrize(
    ("eps", "k", "lam", "delta", "Delta", "p", "pp", "lb", "claim", "basic"),
    [
        (
            0.01,
            10,
            0.5,
            0.1,
            921.0340372,
            0.5987369392,
            9.765625000e-34,
            75.31334810,
            46.05170186,
            92.10340372,
        ),
        (
            0.001,
            100,
            0.2,
            0.01,
            46051.70186,
            0.6057704365,
            None,
            4213.449986,
            3684.136149,
            4605.170186,
        ),
    ],
)
def test_gp_has_no_advanced_composition_3_3(eps, k, lam, delta, Delta, p, pp, lb, claim, basic):
    c = cv.gp_composition_counterexample(eps, k, lam, delta)
    assert close(c["Delta"], Delta)
    assert close(c["p"], p)
    if pp is not None:
        assert close(math.exp(c["log_p_prime"]), pp)
    else:  # 7.888609052e-1831: compare in log10
        assert close(c["log_p_prime"] / math.log(10), math.log10(7.888609052) - 1831, 1e-12)
    assert close(c["lower_bound"], lb)
    assert close(c["claim"], claim)
    assert close(k * eps * Delta, basic)
    assert c["lower_bound"] > c["claim"]


@pytest.mark.parametrize(
    ("sigma", "eps", "delta", "Delta", "pp", "lb", "claim"),
    [
        (100, 0.01, 0.1, 401, 3.035937393e-5, 9.486114495, 4.01),
        (1000, 0.001, 0.01, 4010, 3.035937393e-5, 9.689055339, 4.01),
    ],
)
def test_gaussian_is_never_approx_gp_3_3(sigma, eps, delta, Delta, pp, lb, claim):
    c = cv.gaussian_gp_counterexample(sigma, eps, delta, Delta)
    assert close(c["p_prime"], pp)
    assert close(c["lower_bound"], lb)
    assert close(c["claim"], claim)
    assert c["lower_bound"] > c["claim"]


# ---------------------------------------------------------------- §3.4 composition


@pytest.mark.parametrize(
    ("eps1", "k", "A", "delta", "rho", "eps", "basic"),
    [
        (0.001, 100, 100, 1e-10, 5.0e-5, 0.07286140424, 0.1),
        (0.001, 1000, 100, 1e-10, 5.0e-4, 0.2645966026, 1.0),
        (0.001, 100, 1000, 1e-10, 5.0e-5, 0.1178614042, 0.1),
    ],
)
def test_gp_advanced_via_cgp_3_4(eps1, k, A, delta, rho, eps, basic):
    assert k * cv.gp_to_cgp(eps1) == Fraction(repr(rho))
    got = cv.gp_advanced_via_cgp(eps1, k, A, delta)
    assert close(got, eps)
    # it is the printed Lem. 3.7 applied to the composed rho
    assert close(cv.eps_min(rho, delta, A), eps)
    assert (got < basic) == (A == 100)


@pytest.mark.parametrize(
    ("eps1", "k", "delta", "eps"), [(0.1, 100, 1e-6, 6.308230951), (0.01, 1000, 1e-10, 2.246467697)]
)
def test_dp_advanced_composition_3_4(eps1, k, delta, eps):
    e, d = cv.dp_advanced_composition(eps1, k, delta)
    assert close(e, eps)
    assert d >= delta and close(d, delta, 1e-15)
    e2, d2 = cv.dp_advanced_composition(eps1, k, delta, delta_each=1e-8)
    assert e2 == e and close(d2, delta + k * 1e-8)


# ---------------------------------------------------------------- directions and bad input


def test_reporting_conversions_round_towards_weaker_claims():
    # eps and delta reported up, A down, budgets down (a few ulps' margin only)
    rho, delta, A = 1e-4, 1e-6, 100
    raw = rho * A + 2 * math.sqrt(rho * math.log(1 / delta))
    assert raw < cv.eps_min(rho, delta, A) < raw * (1 + 1e-11)
    raw_a = (0.1 - 2 * math.sqrt(rho * math.log(1 / delta))) / rho
    assert raw_a * (1 - 1e-11) < cv.A_max(rho, 0.1, delta) < raw_a


@pytest.mark.parametrize(
    "call",
    [
        lambda: cv.eps_min(-1e-4, 1e-6, 100),
        lambda: cv.eps_min(1e-4, 0, 100),
        lambda: cv.eps_min(1e-4, 1.5, 100),
        lambda: cv.rho_max(float("nan"), 1e-6, 100),
        lambda: cv.rho_max(0.1, 1e-6, float("inf")),
        lambda: cv.gp_to_cgp(-0.1),
        lambda: cv.cgp_block_eps(float("inf")),
        lambda: cv.dp_advanced_composition(0.1, 0, 1e-6),
        lambda: cv.dp_advanced_composition(0.1, 2.5, 1e-6),
        lambda: cv.gaussian_sigma(0),
        lambda: cv.eps_delta(1e-4, s=1),
    ],
)
def test_bad_parameters_raise_invalid_input(call):
    with pytest.raises(gp.InvalidInputError):
        call()


def test_exact_square_roots():
    assert cv.sqrt_floor(Fraction(9, 4)) == Fraction(3, 2) == cv.sqrt_ceil(Fraction(9, 4))
    assert cv.sqrt_floor(0) == 0 == cv.sqrt_ceil(0)
    lo, hi = cv.sqrt_floor(2), cv.sqrt_ceil(2)
    assert lo * lo < 2 < hi * hi and hi - lo <= lo / 2**62
    tiny = Fraction(1, 10**300)
    assert cv.sqrt_floor(tiny) ** 2 <= tiny <= cv.sqrt_ceil(tiny) ** 2


def test_approx_budgets_round_down_and_remember_target():
    b = gp.CGP.from_approx_gp(eps=0.1, delta=1e-6, A=100)
    assert isinstance(b, gp.CGP) and b.kind == "cgp"
    assert close(b.rho, 1.353014690e-4)
    assert b.approx == (Fraction(1, 10), Fraction(1, 10**6), Fraction(100))
    assert cv.eps_min(b.rho, 1e-6, 100) <= 0.1 * (1 + 1e-11)
    assert "delta=1e-06" in repr(b) and "A=100 m" in repr(b)
    assert gp.CGP(rho=1e-4).approx is None and repr(gp.CGP(rho=1e-4)) == "CGP(rho=0.0001)"
    z = gp.zCDP.from_approx_dp(epsilon=1, delta=1e-6)
    assert close(z.rho, 0.01746890477) and z.approx == (Fraction(1), Fraction(1, 10**6))
    assert cv.zcdp_to_dp(z.rho, 1e-6) <= 1 + 1e-11
    with pytest.raises(gp.InvalidInputError):
        gp.CGP.from_approx_gp(eps=0.1, delta=2, A=100)
