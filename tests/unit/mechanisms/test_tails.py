"""Error-bound helpers against the oracle tables of concentrated-geo-privacy.md §4.3–§4.4, §6."""

import math

import pytest

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.tails import (
    cgp_sigma,
    gaussian_bound,
    gaussian_radius_bound,
    gaussian_radius_nominal,
    gp_scale,
    gp_to_rate,
    laplace_bound,
    lem45_bound,
    planar_bound,
    planar_quantile,
)


@pytest.mark.parametrize(("u", "r"), [(0.5, 167.8346990), (0.9, 388.9720170), (0.99, 663.8352068)])
def test_planar_inverse_cdf_oracle(u, r):
    # §4.4 "Oracles: noise laws", ε' = 0.01
    assert planar_quantile(1 - u, 100) == pytest.approx(r, rel=1e-9)
    assert planar_quantile(1 - u, 10) == pytest.approx(r / 10, rel=1e-9)


@pytest.mark.parametrize(
    ("eps1", "beta", "exact", "lem"),
    [
        (0.01, 0.1, 388.9720170, 444.8551119),
        (0.01, 0.01, 663.8352068, 764.0024445),
        (4.565530324e-7, 2e-5, 29555114.11, 33887874.71),
    ],
)
def test_planar_tail_vs_lemma_4_5_oracle(eps1, beta, exact, lem):
    assert planar_quantile(beta, 1 / eps1) == pytest.approx(exact, rel=1e-9)
    assert lem45_bound(beta, 1 / eps1) == pytest.approx(lem, rel=1e-9)


@pytest.mark.parametrize(
    ("rho", "beta", "r"),
    [(5e-5, 0.1, 214.5966026), (5e-5, 0.01, 303.4854259), (1e-9, 2e-5, 104018.1632)],
)
def test_gaussian_radius_nominal_oracle(rho, beta, r):
    assert gaussian_radius_nominal(rho, beta) == pytest.approx(r, rel=1e-9)
    # the proven lattice bound (σ = 1/√(2ρ), default g) is never below the continuous quantile
    sigma = 1 / math.sqrt(2 * rho)
    assert gaussian_radius_bound(beta, sigma, 2**-10) >= r


@pytest.mark.parametrize(
    ("n", "rho", "eps", "beta", "cgp", "gp", "gp_exact"),
    [  # concentrated-geo-privacy.md §6 "Oracles: identity", max-error bounds
        (5000, 5e-6, 0.003162277660, 0.1, 104018.1632, 24462766.44, 21335060.39),
        (20000, 5e-4, 0.03162277660, 0.05, 22714.94647, 11370561.47, 9939392.759),
    ],
)
def test_privatize_max_error_oracle(n, rho, eps, beta, cgp, gp, gp_exact):
    assert gaussian_radius_nominal(rho / n, beta, n=n) == pytest.approx(cgp, rel=1e-9)
    assert lem45_bound(beta, gp_scale(eps, n=n), n=n) == pytest.approx(gp, rel=1e-8)
    assert planar_quantile(beta, gp_scale(eps, n=n), n=n) == pytest.approx(gp_exact, rel=1e-8)


@pytest.mark.parametrize(
    ("n", "eps", "rate", "mean", "median"),
    [
        (5000, 0.2282765162, 4.565530324e-5, 43806.52100, 36761.27133),
        (5000, 0.002282765162, 4.565530324e-7, 4380652.100, 3676127.133),
        (20000, 0.2282765162, 1.141382581e-5, 175226.0840, 147045.0853),
    ],
)
def test_privatize_per_point_error_oracle(n, eps, rate, mean, median):
    assert gp_to_rate(eps, n=n) == pytest.approx(rate, rel=1e-9)
    assert 2 * gp_scale(eps, n=n) == pytest.approx(mean, rel=1e-9)
    assert planar_quantile(0.5, gp_scale(eps, n=n)) == pytest.approx(median, rel=1e-9)


def test_cgp_sigma_is_exact_for_the_style_example():
    assert cgp_sigma(rho=5e-5, n=1) == 100.0
    assert cgp_sigma(rho=1e-11, n=1) == pytest.approx(223606.7977, rel=1e-9)


def test_proven_bounds_dominate_continuous_quantiles():
    g = 2**-10
    for beta in (0.1, 0.01, 1e-6):
        assert planar_bound(beta, 100, g) >= planar_quantile(beta, 100) + math.sqrt(2) * g
        assert laplace_bound(beta, 100, g) >= 100 * math.log(1 / beta)
        assert gaussian_bound(beta, 100, g) >= 100 * math.sqrt(2 * math.log(2 / beta))
        for d in (3, 4):
            assert gaussian_radius_bound(beta, 100, g, d=d) > gaussian_radius_bound(beta, 100, g)
            assert planar_bound(beta, 100, g, d=d) > planar_bound(beta, 100, g)


def test_gaussian_bound_close_to_continuous_at_fine_lattice():
    # the unit-cell comparison keeps the bound within 0.2 % of the continuous r_β at σ = 100 m
    r = gaussian_radius_bound(0.01, 100, 2**-10)
    assert 303.4854259 < r < 303.4854259 * 1.002


def test_union_bound_splits_beta():
    assert planar_bound(0.1, 100, 2**-10, n=10) == pytest.approx(planar_bound(0.01, 100, 2**-10))


@pytest.mark.parametrize("beta", [0, 1, -0.1, 1.5, float("nan")])
def test_bad_beta(beta):
    with pytest.raises(InvalidInputError, match="beta"):
        planar_quantile(beta, 100)
