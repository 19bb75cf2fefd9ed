"""gpframe.results.base: the exact sums every Result reports."""

from __future__ import annotations

import math

import numpy as np

from gpframe.results.base import _fsum


def test_the_sum_of_charges_is_fsums_to_the_last_bit():
    """Summing over distinct values in exact rationals rounds as math.fsum does."""
    gen = np.random.default_rng(0)
    cases = [
        np.full(10**5, 1e-4), np.full(7, 0.1), gen.choice([1e-4, 3e-5, 0.1, 1 / 3], 10**5),
        gen.random(10**4), np.zeros(5), np.array([-0.0]), np.array([0.1, 0.2, 0.3]),
        np.array([5e-324] * 3), gen.choice(gen.random(50) * 1e-7, 10**5),
        np.array([1.7976931348623157e308, -1e300]), np.array([1e16, 1.0, 1.0]),
        np.zeros(10**5), np.full(4, -0.0), np.array([0.0, -0.0]), np.array([0.25, -0.25]),
        np.array([-0.5, 0.25, 0.25, -0.0]),  # exact zero sums: no fsum pass, fsum's sign
    ]  # fmt: skip
    for a in cases:
        got, want = _fsum(a), math.fsum(a)
        assert got == want and math.copysign(1, got) == math.copysign(1, want)
    assert _fsum(np.array([1e16, 1.0, 1.0])) != float(np.sum(np.array([1e16, 1.0, 1.0])))
