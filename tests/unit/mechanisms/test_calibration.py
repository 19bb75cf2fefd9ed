"""Calibration rows of secure-noise.md §9.3 against hand-computed Fractions, and the property
"noise is never smaller than what was paid for" (adaptive-budgeting.md §2.6 rule 5)."""

from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpframe.errors import InvalidInputError
from gpframe.mechanisms import calibration as cal
from gpframe.mechanisms.calibration import (
    central_gaussian,
    central_laplace,
    cgp_gaussian,
    check_eps,
    check_g,
    check_rho,
    floor_log2,
    gp_laplace,
    round_down_float,
    round_up_sigma2,
    sqrt_down,
    sqrt_up,
)
from gpframe.mechanisms.tails import cgp_sigma

getcontext().prec = 80
F = Fraction
G = F(1, 1024)


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


# ---------------------------------------------------------------- exact helpers


@given(st.fractions(min_value=F(1, 10**12), max_value=F(10**12)))
def test_sqrt_bounds_bracket_the_root(x):
    lo, hi = sqrt_down(x), sqrt_up(x)
    assert lo * lo <= x <= hi * hi
    assert hi - lo <= lo * F(1, 2**59) or lo * lo == x


def test_sqrt_up_of_two_is_a_ceiling_at_2_pow_minus_60():
    s = sqrt_up(2)
    assert s.denominator == 2**60 and s * s > 2 and (s - F(1, 2**60)) ** 2 < 2


@given(st.fractions(min_value=F(1, 10**15), max_value=F(10**15)))
def test_floor_log2_and_float_rounding(x):
    e = floor_log2(x)
    assert F(2) ** e <= x < F(2) ** (e + 1)
    r = round_down_float(x)
    assert r <= x and F(float(r)) == r and x - r <= r * F(1, 2**52)


@given(st.fractions(min_value=F(1, 2**8), max_value=F(2**48)))
def test_round_up_sigma2_is_6_3_representation(s2):
    r = round_up_sigma2(s2)
    assert r >= s2
    if s2 >= 2**16:
        assert r.denominator == 1 and r - s2 < 1
    else:
        assert (r * 2**16).denominator == 1 and r - s2 < F(1, 2**16)


# ---------------------------------------------------------------- §9.3 rows


def test_central_laplace_integer_row():
    c = central_laplace(F(1, 2), F(3), integer=True)
    assert (c.g, c.param, c.width) == (1, F(1, 6), 3)


def test_central_laplace_real_row_uses_floor_plus_one():
    # Δ = 1.5: g = 2^(0-20); width = floor(1.5 * 2^20) + 1 = 1572865
    c = central_laplace(F(1, 2), F(3, 2), integer=False)
    assert c.g == F(1, 2**20) and c.width == 1572865 and c.param == F(1, 2) / 1572865
    # Δ = 0.3: floor(log2 0.3) = -2, g = 2^-22, floor(0.3 * 2^22) = 1258291
    c = central_laplace(F(1), F(3, 10), integer=False)
    assert c.g == F(1, 2**22) and c.param == F(1, 1258292)
    # the scale is never below the nominal Δ/ε
    assert c.g / c.param >= F(3, 10)


def test_central_laplace_multi_draw_factor():
    assert central_laplace(F(1), F(1), integer=True, s=F(4)).param == F(1, 4)
    c = central_laplace(F(1), F(1), integer=False, s=F(2))
    assert c.param == F(1, 2 * (2**20 + 1))


def test_central_laplace_m_vector_adds_one_step_per_coordinate():
    c = central_laplace(F(1), F(1), integer=False, m=3)
    assert c.width == 2**20 + 3


def test_central_laplace_tiny_epsilon_coarsens_the_lattice():
    c = central_laplace(F(1, 2**35), F(1), integer=False)
    assert c.param >= cal.LAM_RANGE[0] and c.coarsen > 1 and c.g == F(1, 2**20) * c.coarsen


def test_central_gaussian_integer_row():
    assert central_gaussian(F(1, 2), F(1), integer=True).param == 1
    assert central_gaussian(F(1, 3), F(2), integer=True).param == 6
    # 1/(2*0.3) = 5/3 -> multiple of 2^-16, rounded up
    p = central_gaussian(F(3, 10), F(1), integer=True).param
    assert p == F(-((-5 * 2**16) // 3), 2**16)


def test_central_gaussian_real_row():
    # Δ2 = 1, ρ = 1/2: σ0 = 1, g = 2^-16; σ_g² = (2^16 + 1)² / 1 (m = 1, √1 = 1 exactly)
    c = central_gaussian(F(1, 2), F(1), integer=False)
    assert c.g == F(1, 2**16) and c.param == (2**16 + 1) ** 2
    # m = 2: (2^16 + √2)² rounded up to an integer
    c = central_gaussian(F(1, 2), F(1), integer=False, m=2)
    exact = (Decimal(2**16) + Decimal(2).sqrt()) ** 2
    assert Decimal(c.param.numerator) >= exact and Decimal(c.param.numerator) - exact < 1


def test_gp_1d_row():
    c = gp_laplace(F(1, 100))
    assert c.g == G and c.param == F(1, 100 * 1025) and c.r_min == 1
    c = gp_laplace(F(1, 100), K=F(2), g=F(1, 256), r_min=F(2))
    assert c.param == F(1, 51250)  # (1/100)(1/256) / (2 + 1/512)
    assert gp_laplace(F(1, 100), lattice_exact=True).param == F(1, 102400)
    assert gp_laplace(F(1, 100), lattice_exact=True).metric == "euclidean"


def test_gp_1d_multi_draw_rows_svt_and_pnn():
    # concentrated-geo-privacy.md §5.3 / §7.1: scales 2K'/ε, 4K'/ε, 3K'/ε, 6K'/ε
    base = gp_laplace(F(1, 100)).param
    for s in (2, 3, 4, 6):
        assert gp_laplace(F(1, 100), s=F(s)).param == base / s


def _exact_a(eps, K, d, g, r):
    return _dec(eps * g) / (_dec(K) + Decimal(d).sqrt() * _dec(g / r))


@pytest.mark.parametrize("d", [2, 3, 4])
def test_gp_planar_row_rounds_a_down_to_a_float(d):
    c = gp_laplace(F(1, 100), d=d)
    exact = _exact_a(F(1, 100), F(1), d, G, F(1))
    assert _dec(c.param) <= exact and _dec(c.param) >= exact * (1 - Decimal(2) ** -51)
    assert F(float(c.param)) == c.param


def test_gp_planar_default_cost_is_0_14_percent():
    # secure-noise.md §7.4(c2): ε_noise = ε / 1.00138
    c = gp_laplace(F(1, 100), d=2)
    assert abs(float(c.g / c.param) * 0.01 - 1.00138) < 1e-5


def test_cgp_rows():
    # 1-D value: σ_g = (1 + g)/(g√(2ρ)) -> σ_g² = 1025² / (2ρ) = 1025² · 10^4 at ρ = 5e-5
    assert cgp_gaussian(F(1, 20000), d=1).param == 1025**2 * 10**4
    # 2-D point: ((1 + √2 g)/g)² / (2ρ) rounded up to an integer
    c = cgp_gaussian(F(1, 20000), d=2)
    exact = (1024 + Decimal(2).sqrt()) ** 2 * 10**4
    assert Decimal(c.param.numerator) >= exact and Decimal(c.param.numerator) - exact < 1
    # lattice-exact: σ = K/√(2ρ) = 100 m -> σ_g² = (100 · 1024)²
    assert cgp_gaussian(F(1, 20000), lattice_exact=True).param == (100 * 1024) ** 2


def test_cgp_bounding_box_centre_K_sqrt2():
    c = cgp_gaussian(F(1, 2000), K=sqrt_up(2))
    # nominal σ = √2/√(2·5e-4) = 44.72135955 m; lattice term √2·g/r_min added to K
    s = float(sqrt_up(c.param) * c.g)
    assert abs(s - 44.72135955 * (1 + 2**-10)) < 1e-6


# ---------------------------------------------------------------- oracle tables


@pytest.mark.parametrize(
    ("rho", "K", "sigma"),
    [  # adaptive-budgeting.md §2.7 and concentrated-geo-privacy.md §4.2
        (2e-6, 1, 500.0000000),
        (1e-4, 1, 70.71067812),
        (0.02, 3, 15.00000000),
        (5e-5, 1, 100.0000000),
        (5e-8, 1, 3162.277660),
        (5e-4, 2**0.5, 44.72135955),
        (1e-6, 3, 2121.320344),
    ],
)
def test_gaussian_scale_oracle(rho, K, sigma):
    assert cgp_sigma(rho, K=K) == pytest.approx(sigma, rel=1e-9)
    # lattice-exact calibration reproduces the nominal σ (up to the §6.3 rounding, 2^-16 relative)
    Kf = sqrt_up(2) if K != int(K) else F(K)
    c = cgp_gaussian(check_rho(rho), K=Kf, lattice_exact=True)
    s = float(sqrt_up(c.param) * c.g)
    assert sigma * (1 - 1e-9) <= s <= sigma * (1 + 2**-16 + 1e-9)  # oracle has 10 digits


@pytest.mark.parametrize(
    ("n", "rho", "per_point_sigma"),
    [  # concentrated-geo-privacy.md §6 "Oracles: identity"
        (5000, 5e-6, 22360.67977),
        (20000, 5e-4, 4472.135955),
        (1, 5e-5, 100.0000000),
        (5000, 5e-8, 223606.7977),
    ],
)
def test_privatize_per_point_sigma_oracle(n, rho, per_point_sigma):
    assert cgp_sigma(rho, n=n) == pytest.approx(per_point_sigma, rel=1e-9)
    c = cgp_gaussian(check_rho(rho) / n, d=2)
    # per-coordinate σ = √(n/(2ρ))·(1 + √2·g/r_min) with the (possibly coarsened) g and r_min
    want = per_point_sigma * (1 + 2**0.5 * float(c.g / c.r_min))
    got = float(sqrt_up(c.param) * c.g)
    assert want * (1 - 1e-12) <= got <= want * (1 + 2**-16)


def test_location_coarsening_planar_small_eps():
    # ε g_loc = 1e-5 · 2^-10 < 2^-24: g -> 2^-7 and r_min -> 2^10 · g = 8 (secure-noise.md §9.1)
    c = gp_laplace(F(1, 10**5), d=2)
    assert c.g == F(1, 128) and c.r_min == 8 and c.coarsen == 8
    assert c.param >= cal.A_RANGE[0] and c.metric == ("floor", F(8))


def test_location_coarsening_cgp_small_rho():
    c = cgp_gaussian(F(1, 10**11), d=2)
    assert c.g == F(1, 64) and c.r_min == 16 and c.coarsen == 16
    assert c.param <= cal.LOC_SCALE_MAX**2


def test_coarsening_keeps_a_larger_user_r_min():
    c = gp_laplace(F(1, 10**5), d=2, r_min=F(50))
    assert c.r_min == 50


def test_lattice_exact_refuses_coarsening():
    with pytest.raises(InvalidInputError, match="lattice-exact"):
        gp_laplace(F(1, 10**5), d=2, lattice_exact=True)


def test_too_fine_noise_for_the_lattice_raises():
    with pytest.raises(InvalidInputError, match="rho"):
        cgp_gaussian(F(10**9), d=2)
    with pytest.raises(InvalidInputError, match="eps"):
        gp_laplace(F(100), d=2, g=F(1))


# ---------------------------------------------------------------- validation (R8)


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), -float("inf"), 0, -0.1, 101, 2.0**-41, True, "x", None]
)
def test_check_eps_rejects(bad):
    with pytest.raises(InvalidInputError, match="eps"):
        check_eps(bad, "eps")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -1e-5, False])
def test_check_rho_rejects(bad):
    with pytest.raises(InvalidInputError, match="rho"):
        check_rho(bad)


@pytest.mark.parametrize("bad", [3, 0.1, 0, -0.5, float("nan"), 2.0**-70])
def test_check_g_rejects_non_powers_of_two(bad):
    with pytest.raises(InvalidInputError, match="g="):
        check_g(bad)


def test_check_g_accepts_powers_of_two():
    assert check_g(1) == 1 and check_g(0.25) == F(1, 4) and check_g(F(1, 2**10)) == G


# ---------------------------------------------------------------- never less noise than paid for


def _sqrt_ge(A: Fraction, K: Fraction, c2: Fraction) -> bool:
    """Exact test of √A ≥ K + √c2 (all ≥ 0), without square roots."""
    if A < K * K:
        return False
    lhs = A + K * K - c2  # √A − K ≥ √c2  ⟺  A − 2K√A + K² ≥ c2
    return lhs >= 0 and lhs * lhs >= 4 * K * K * A


_eps = st.fractions(min_value=F(1, 10**7), max_value=F(100)).map(
    lambda x: x.limit_denominator(10**9)
)
_rho = st.fractions(min_value=F(1, 10**13), max_value=F(10)).map(
    lambda x: x.limit_denominator(10**15)
)
_K = st.fractions(min_value=F(1, 10), max_value=F(10)).map(lambda x: x.limit_denominator(1000))
_g = st.integers(-20, 0).map(lambda e: F(2) ** e)
_r = st.sampled_from([F(1, 2), F(1), F(3), F(100)])


@settings(max_examples=150, deadline=None)
@given(eps=_eps, K=_K, g=_g, r=_r, d=st.integers(1, 4), s=st.sampled_from([1, 2, 3, 4, 6]))
def test_gp_noise_never_smaller_than_paid(eps, K, g, r, d, s):
    try:
        c = gp_laplace(eps, K=K, d=d, g=g, r_min=r, s=F(s))
    except InvalidInputError:
        return  # out of the sampler's range: refused before any draw
    # privacy needs rate·(K·dist + √d·g_c) ≤ (ε/s)·g_c·max(dist, r_c),
    # i.e. rate·(K + √d g_c/r_c) ≤ ε g_c / s
    assert c.r_min >= r and c.g >= g
    # exact check, √d as an exact irrational: rate·√d·g/r ≤ εg/s − rate·K
    rhs = eps * c.g / s - c.param * K
    assert rhs >= 0 and rhs * rhs >= c.param**2 * d * c.g**2 / c.r_min**2


@settings(max_examples=150, deadline=None)
@given(rho=_rho, K=_K, g=_g, r=_r, d=st.integers(1, 4))
def test_cgp_noise_never_smaller_than_paid(rho, K, g, r, d):
    try:
        c = cgp_gaussian(rho, K=K, d=d, g=g, r_min=r)
    except InvalidInputError:
        return
    # need σ_g·g·√(2ρ) ≥ K + √d·g_c/r_c
    assert _sqrt_ge(2 * rho * c.param * c.g**2, K, d * c.g**2 / c.r_min**2)


@settings(max_examples=100, deadline=None)
@given(rho=_rho, delta=_K, m=st.integers(1, 6))
def test_central_gaussian_never_smaller_than_paid(rho, delta, m):
    try:
        c = central_gaussian(rho, delta, integer=False, m=m)
    except InvalidInputError:
        return
    assert _sqrt_ge(2 * rho * c.param, delta / c.g, F(m))


@settings(max_examples=100, deadline=None)
@given(eps=_eps, delta=_K, m=st.integers(1, 4), s=st.sampled_from([1, 2, 4]))
def test_central_laplace_never_smaller_than_paid(eps, delta, m, s):
    c = central_laplace(eps, delta, integer=False, m=m, s=F(s))
    # snapped ℓ1 difference ≤ ⌊Δ/g⌋ + m steps; rate × that ≤ ε/s
    assert c.width >= delta // c.g + m and c.param * c.width * s <= eps


@pytest.mark.parametrize("fn", [cal.check_eps, cal.check_rho, cal.check_positive, cal.check_g,
                                lambda v, name: cal.check_draw_scale(v)])  # fmt: skip
@pytest.mark.parametrize("value", [True, False, np.True_, np.False_, np.array(True)])
def test_checks_refuse_bools(fn, value):
    # regression: np.True_ passed `exact` as 1 and was accepted as eps = rho = 1
    with pytest.raises(InvalidInputError, match=r"is a bool; pass a positive number.*Nothing was"):
        fn(value, "draw_scale")
