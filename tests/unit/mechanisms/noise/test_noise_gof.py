"""T-GOF and T-XCHK (ii) for the 1-D samplers (secure-noise.md §5, §6, §12).

Every test is seeded; each chi-square check has false-failure probability <= 1e-6 (alpha) at the
true scale, and the 0.7x / 1.3x checks on the same sample show the test can fail.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.mechanisms import noise
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, gof_gaussian, gof_laplace, two_sample_chi2

pytestmark = pytest.mark.statistical


def _check_laplace(x, lam):
    assert gof_laplace(x, float(lam)) > ALPHA
    assert gof_laplace(x, float(lam), 0.7) < ALPHA
    assert gof_laplace(x, float(lam), 1.3) < ALPHA


def _check_gaussian(x, s2):
    assert gof_gaussian(x, float(s2)) > ALPHA
    assert gof_gaussian(x, float(s2), 0.7) < ALPHA
    assert gof_gaussian(x, float(s2), 1.3) < ALPHA


@pytest.mark.parametrize("lam", [Fraction(1, 3), Fraction(10, 3333)])
def test_discrete_laplace_gof_fast(lam):
    """t = 3 (coarse path §5.5) and t = 333.3 (design B §5.3), N = 1e5, alpha = 1e-6."""
    _check_laplace(noise.discrete_laplace(lam, 100_000, seeded_rng(101)), lam)


def test_design_a_gof_fast():
    """Design A (§5.4) at t = 92682, N = 1e5, alpha = 1e-6."""
    lam = Fraction(1, 92682)
    _check_laplace(noise.discrete_laplace_design_a(lam, 100_000, seeded_rng(102)), lam)


def test_discrete_gaussian_gof_fast():
    """sigma = 10, N = 1e5, alpha = 1e-6."""
    _check_gaussian(noise.discrete_gaussian(Fraction(100), 100_000, seeded_rng(103)), 100)


def test_design_a_agrees_with_design_b():
    """T-XCHK (ii): two-sample chi-square, 1e5 each at t = 333.3; false failure 1e-6."""
    lam = Fraction(10, 3333)
    a = noise.discrete_laplace_design_a(lam, 100_000, seeded_rng(104))
    b = noise.discrete_laplace(lam, 100_000, seeded_rng(105))
    assert two_sample_chi2(a, b) > ALPHA


LAM_GRID = [
    Fraction(10),
    Fraction(1, 3),
    Fraction(10, 3333),
    Fraction(100, 2**16 * 141),
    Fraction(1, 2**30),
]
SIGMA_GRID = [
    Fraction(1, 2),
    Fraction(3, 2),
    Fraction(10),
    Fraction(2**16 * 141, 100),
    Fraction(2**24),
]


@pytest.mark.slow
@pytest.mark.parametrize("lam", LAM_GRID)
def test_discrete_laplace_gof_grid(lam):
    """Nightly grid t in {0.1, 3, 333.3, 2^16 1.41, 2^30}, N = 1e6, both designs."""
    for sampler, seed in ((noise.discrete_laplace, 201), (noise.discrete_laplace_design_a, 202)):
        x = sampler(lam, 1_000_000, seeded_rng(seed))
        _check_laplace(x, lam)


@pytest.mark.slow
@pytest.mark.parametrize("sigma", SIGMA_GRID)
def test_discrete_gaussian_gof_grid(sigma):
    """Nightly grid sigma in {0.5, 1.5, 10, 2^16 1.41, 2^24}, N = 1e6."""
    s2 = sigma * sigma
    x = noise.discrete_gaussian(s2, 1_000_000, seeded_rng(203))
    _check_gaussian(x, s2)


@pytest.mark.slow
def test_fine_power_at_1e6_reported():
    """Nightly: 0.98x / 1.02x are rejected at N = 1e6 (spec §12, T-GOF)."""
    lam = Fraction(1, 92682)
    x = noise.discrete_laplace(lam, 1_000_000, seeded_rng(204))
    assert gof_laplace(x, float(lam), 0.98) < ALPHA and gof_laplace(x, float(lam), 1.02) < ALPHA
    g = noise.discrete_gaussian(Fraction(100), 1_000_000, seeded_rng(205))
    assert gof_gaussian(g, 100.0, 0.98) < ALPHA and gof_gaussian(g, 100.0, 1.02) < ALPHA


def test_gaussian_nd_is_isotropic_independent_axes():
    z = noise.discrete_gaussian_nd(Fraction(400), 2, 50_000, seeded_rng(106))
    assert z.shape == (50_000, 2)
    assert gof_gaussian(z[:, 0], 400.0) > ALPHA and gof_gaussian(z[:, 1], 400.0) > ALPHA
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 5 / np.sqrt(50_000)
