"""Seeded distribution checks of the released noise (secure-noise.md §12 T-PLANAR, T-UTIL).

Each test states its false-failure probability; thresholds are ≥ 6 standard errors (or a
Bernstein/normal bound at ≤ 1e-9), and each has a negative control showing it can fail.
"""

import math

import numpy as np
import pytest

from gpframe.mechanisms import error_bound, gaussian_cgp, laplace_gp, planar_laplace
from gpframe.testing import seeded_rng

pytestmark = pytest.mark.statistical

# off-lattice inputs, so the snapping is exercised too
X0 = np.array([500_000.123456789, 4_649_776.987654321])


def _points(n):
    return np.tile(X0, (n, 1))


@pytest.mark.parametrize("seed", [21, 22])
def test_planar_mean_radius_is_2_over_eps(seed):
    """T-PLANAR: mean radius within 1 % of 2/ε (ε = 0.01 m⁻¹, n = 250 000).

    The scale actually used is 1.00138/ε (§7.4(c2)); SE of the mean radius is √2·scale/√n, so the
    1 % band leaves ≥ 6 SE for sampling error: false failure < 2e-9.
    """
    n, eps = 250_000, 0.01
    r = planar_laplace(_points(n), eps=eps, rng=seeded_rng(seed))
    rad = np.linalg.norm(r.values - X0, axis=1)
    mean = rad.mean()
    assert abs(mean - 2 / eps) < 0.01 * 2 / eps
    # negative control: a 3 % miscalibrated scale is rejected by the same test
    assert abs(mean - 2 / (0.97 * eps)) > 0.01 * 2 / eps
    # isotropy (T-PLANAR): E cos 4θ within 6 SE of 0 (per-axis Laplace would give ≈ +0.07..0.1)
    th = np.arctan2(*(r.values - X0).T[::-1])
    assert abs(np.cos(4 * th).mean()) < 6 / math.sqrt(2 * n)


@pytest.mark.parametrize("seed", [31, 32])
def test_cgp_per_coordinate_std_matches_sigma(seed):
    """CGP noise std per coordinate equals the sampled σ (ρ = 5e-5: σ ≈ 100.138 m).

    400 000 coordinates: SE(std) ≈ σ/√(2N) = 0.11 %; tolerance 6 SE, false failure < 2e-9.
    """
    n = 200_000
    r = gaussian_cgp(_points(n), rho=5e-5, rng=seeded_rng(seed))
    z = (r.values - X0).ravel()
    sigma = math.sqrt(float(r.noise["sigma2"])) * float(r.g)
    tol = 6 * sigma / math.sqrt(2 * z.size)
    assert abs(z.std() - sigma) < tol
    assert abs(z.mean()) < 6 * sigma / math.sqrt(z.size)
    # negative control: a σ 2 % too large (or the nominal σ·1.02) is rejected
    assert abs(z.std() - 1.02 * sigma) > tol


def _exceedance_ok(err, bound, beta):
    """T-UTIL: exceedance ≤ β + 4 SE (one-sided normal, false failure ≈ 3e-5 at the boundary)."""
    n = err.size
    p = (err > bound).mean()
    return p <= beta + 4 * math.sqrt(beta * (1 - beta) / n), p


@pytest.mark.parametrize("beta", [0.1, 0.01])
def test_util_planar_bound_holds(beta):
    """T-UTIL, planar Laplace: the proven (1−β) radius bound is exceeded at most β + 4 SE.

    The bound is conservative, so the true exceedance is ≤ β; false failure < 4e-5.
    """
    r = planar_laplace(_points(100_000), eps=0.01, rng=seeded_rng(41))
    err = np.linalg.norm(r.values - X0, axis=1)
    ok, p = _exceedance_ok(err, error_bound(r, beta, n=1), beta)
    assert ok, p
    # negative control: the bound is not vacuous — 0.9× of it is exceeded more often than β
    assert (err > 0.9 * error_bound(r, beta, n=1)).mean() > beta


@pytest.mark.parametrize("beta", [0.1, 0.01])
def test_util_cgp_radius_bound_holds(beta):
    """T-UTIL, 2-D lattice Gaussian radius with the sampled σ; false failure < 4e-5."""
    r = gaussian_cgp(_points(100_000), rho=5e-5, rng=seeded_rng(42))
    err = np.linalg.norm(r.values - X0, axis=1)
    ok, p = _exceedance_ok(err, error_bound(r, beta, n=1), beta)
    assert ok, p
    assert (err > 0.9 * error_bound(r, beta, n=1)).mean() > beta


@pytest.mark.parametrize("beta", [0.1, 0.01])
def test_util_1d_bounds_hold(beta):
    """T-UTIL, 1-D Laplace and Gaussian bounds; false failure < 8e-5."""
    x = np.full(100_000, 1234.56789)
    r = laplace_gp(x, eps=0.02, rng=seeded_rng(43))
    ok, p = _exceedance_ok(np.abs(r.values - x), error_bound(r, beta, n=1), beta)
    assert ok, p
    r = gaussian_cgp(x, rho=1e-4, rng=seeded_rng(44))
    ok, p = _exceedance_ok(np.abs(r.values - x), error_bound(r, beta, n=1), beta)
    assert ok, p


def test_util_union_bound_over_n_points():
    """The simultaneous bound for n = 1000 points holds in ≥ 1−β of 200 repetitions (β = 0.1).

    Binomial(200, ≤ 0.1): P(more than 40 failures) < 1e-7.
    """
    fails = 0
    src = seeded_rng(45)
    for _ in range(200):
        r = planar_laplace(_points(1000), eps=0.01, rng=src)
        fails += np.linalg.norm(r.values - X0, axis=1).max() > error_bound(r, 0.1)
    assert fails <= 40


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.1, 0.01])
def test_util_planar_bound_holds_1e6(beta):
    """T-UTIL at the spec's 10⁶ draws (slow); false failure < 4e-5."""
    r = planar_laplace(_points(1_000_000), eps=0.001, rng=seeded_rng(46))
    err = np.linalg.norm(r.values - X0, axis=1)
    ok, p = _exceedance_ok(err, error_bound(r, beta, n=1), beta)
    assert ok, p


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.1, 0.01])
def test_util_cgp_bound_holds_1e6(beta):
    """T-UTIL for the CGP radius at 10⁶ draws (slow); false failure < 4e-5."""
    r = gaussian_cgp(_points(1_000_000), rho=1e-6, rng=seeded_rng(47))
    err = np.linalg.norm(r.values - X0, axis=1)
    ok, p = _exceedance_ok(err, error_bound(r, beta, n=1), beta)
    assert ok, p
