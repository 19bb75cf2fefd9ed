"""The wrappers' calibration cache: a hit skips only checks that already passed (issue 8)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import GpframeWarning, InvalidInputError
from gpframe.mechanisms import gaussian_cgp, laplace_dp, laplace_gp, planar_laplace
from gpframe.testing import seeded_rng

X2 = np.array([[500_000.0, 4_649_776.2], [500_010.0, 4_649_790.0]])


def test_cached_parameters_still_check_values():
    laplace_gp([1.0, 2.0], eps=0.01, rng=seeded_rng(1))
    with pytest.raises(InvalidInputError, match="NaN"):
        laplace_gp([1.0, np.nan], eps=0.01, rng=seeded_rng(1))
    planar_laplace(X2, eps=0.01, rng=seeded_rng(1))
    with pytest.raises(InvalidInputError, match="columns"):
        planar_laplace(np.zeros((2, 5)), eps=0.01, rng=seeded_rng(1))


def test_cache_keys_keep_types_apart():
    laplace_dp([1.0], sensitivity=1, epsilon=1, rng=seeded_rng(2))
    with pytest.raises(InvalidInputError, match="bool"):
        laplace_dp([1.0], sensitivity=True, epsilon=1, rng=seeded_rng(2))
    with pytest.raises(InvalidInputError):
        laplace_dp([1.0], sensitivity=1, epsilon=1000, rng=seeded_rng(2))


def test_cached_and_fresh_calibrations_agree():
    a = gaussian_cgp(X2, rho=5e-5, rng=seeded_rng(3))
    b = gaussian_cgp(X2, rho=5e-5, rng=seeded_rng(3))  # second call: cache hit
    c = gaussian_cgp(X2, rho=Fraction(1, 20000), rng=seeded_rng(3))  # other key, same value
    assert np.array_equal(a.values, b.values) and np.array_equal(b.values, c.values)
    assert a.noise == b.noise == c.noise and a.guarantee == b.guarantee == c.guarantee
    # Shape-dependent parts are keyed on the shape: m for laplace_dp, d for planar_laplace.
    r1 = laplace_dp(np.zeros((3, 1)), sensitivity=1.0, epsilon=1.0, rng=seeded_rng(4))
    r3 = laplace_dp(np.zeros((3, 3)), sensitivity=1.0, epsilon=1.0, rng=seeded_rng(4))
    assert r1.noise["width"] == 2**20 + 1 and r3.noise["width"] == 2**20 + 3


def test_scale_warning_fires_on_every_call():
    for _ in range(2):
        with pytest.warns(GpframeWarning, match="below 1 m"):
            laplace_gp([1.0], eps=50, rng=seeded_rng(5))
