"""discrete_laplace_rates: one exact draw per rate, many rates in one call (docs/noise.md).

Seeded; each chi-square check has false-failure probability <= 1e-6 (alpha) at the true rate,
and the 0.7x / 1.3x checks on the same sample show the test can fail.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise import bernoulli, discrete_laplace, geometric, laplace_rates
from gpframe.mechanisms.noise.laplace_rates import discrete_laplace_rates
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, gof_laplace, two_sample_chi2

pytestmark = pytest.mark.statistical

#: rates of every kind: design-B-like (t = 9, 12, 24), a power of two (no rate gap), just below
#: 1/8 (block of one), a rate gap near 2 lam0 (acceptance near 1/2) and a coarse one (per-rate)
RATES = [
    Fraction(1, 300),
    Fraction(10, 33333),
    Fraction(3, 2**24 * 5),
    Fraction(1, 1024),
    Fraction(1, 8) - Fraction(1, 1000),
    Fraction(2**20 - 1, 2**40),
    Fraction(1, 3),
]


def _interleaved(n_each: int, seed: int) -> tuple[list[Fraction], np.ndarray]:
    lams = RATES * n_each  # rate i at positions i, i + 7, i + 14, ...: rows of one call differ
    return lams, discrete_laplace_rates(lams, seeded_rng(seed))


def test_each_row_has_its_own_rate():
    lams, k = _interleaved(20_000, 601)
    assert k.dtype == np.int64 and k.shape == (len(lams),)
    for i, lam in enumerate(RATES):
        x = k[i :: len(RATES)]
        assert gof_laplace(x, float(lam)) > ALPHA, lam
        assert gof_laplace(x, float(lam), 0.7) < ALPHA, lam
        assert gof_laplace(x, float(lam), 1.3) < ALPHA, lam


def test_agrees_with_the_one_rate_sampler():
    """Two-sample chi-square against discrete_laplace at t = 3333.3 (false failure 1e-6)."""
    lam = Fraction(3, 10000)
    a = discrete_laplace_rates([lam] * 50_000, seeded_rng(602))
    b = discrete_laplace(lam, 50_000, seeded_rng(603))
    assert two_sample_chi2(a, b) > ALPHA


def test_seeded_calls_repeat_and_rates_are_validated_first():
    lams = [Fraction(1, 5000), Fraction(7, 3), 0.001, 2]
    a = discrete_laplace_rates(lams, seeded_rng(604))
    assert np.array_equal(a, discrete_laplace_rates(lams, seeded_rng(604)))
    assert discrete_laplace_rates([], None).shape == (0,)

    class Counting:
        def __init__(self):
            self.inner, self.calls = seeded_rng(605), 0

        def __getattr__(self, name):
            self.calls += 1
            return getattr(self.inner, name)

    src = Counting()
    for bad in (0, Fraction(1, 2**41), 2000, float("nan"), "1"):
        with pytest.raises(InvalidInputError):
            discrete_laplace_rates([Fraction(1, 100), bad], src)
    assert src.calls == 0  # refused before any bit was drawn


def test_forced_exact_paths(monkeypatch):
    """Enclosure (0, ceil(ghi)) and exact V words: the integer routines decide, same laws."""
    calls = {"n": 0}
    orig = bernoulli.lazy_rational_less

    def counting(*a):
        calls["n"] += 1
        return orig(*a)

    monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (np.zeros_like(lo), np.ceil(hi)))
    monkeypatch.setattr(laplace_rates, "lazy_rational_less", counting)
    monkeypatch.setattr(geometric, "FORCE_EXACT", True)
    rates = [Fraction(1, 300), Fraction(2**20 - 1, 2**40)]
    k = discrete_laplace_rates(rates * 15_000, seeded_rng(606))
    assert calls["n"] > 20_000  # the exact path really decided
    for i, lam in enumerate(rates):
        x = k[i::2]
        assert gof_laplace(x, float(lam), nbins=300) > ALPHA
        assert gof_laplace(x, float(lam), 0.7, nbins=300) < ALPHA
