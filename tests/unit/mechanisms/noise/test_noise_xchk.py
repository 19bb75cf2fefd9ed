"""T-XCHK (i): our samplers against OpenDP 0.16's exact samplers (secure-noise.md §12).

Two-sample chi-square over pooled-quantile bins, alpha = 1e-6. OpenDP draws its own OS randomness,
so its side is not seeded; the false-failure probability is still alpha per test.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.mechanisms import noise
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, two_sample_chi2

dp = pytest.importorskip("opendp.prelude")
pytestmark = pytest.mark.statistical


def _opendp(kind: str, scale: float, n: int) -> np.ndarray:
    dp.enable_features("contrib")
    metric = dp.l1_distance(T=int) if kind == "laplace" else dp.l2_distance(T=int)
    space = dp.vector_domain(dp.atom_domain(T=int), size=n), metric
    make = dp.m.then_laplace if kind == "laplace" else dp.m.then_gaussian
    return np.asarray((space >> make(scale=scale))([0] * n), dtype=np.int64)


def _ours(kind: str, scale: int, n: int, seed: int) -> np.ndarray:
    if kind == "laplace":
        return noise.discrete_laplace(Fraction(1, scale), n, seeded_rng(seed))
    return noise.discrete_gaussian(Fraction(scale * scale), n, seeded_rng(seed))


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_against_opendp_fast(kind):
    n = 20_000
    assert two_sample_chi2(_ours(kind, 3, n, 601), _opendp(kind, 3.0, n), nbins=50) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
@pytest.mark.parametrize("scale", [3, 1000])
def test_against_opendp_full(kind, scale):
    n = 200_000
    assert two_sample_chi2(_ours(kind, scale, n, 602), _opendp(kind, float(scale), n)) > ALPHA


def test_scripted_seed_gives_bit_identical_outputs():
    """T-XCHK (iii) at the sampler layer: the same seeded stream gives bit-identical noise."""
    a = noise.discrete_gaussian_nd(Fraction(10**6), 2, 4096, seeded_rng(9))
    b = noise.discrete_gaussian_nd(Fraction(10**6), 2, 4096, seeded_rng(9))
    assert np.array_equal(a, b)
