"""T-FORCED: the exact fallback paths alone give the right laws (secure-noise.md §12).

The float enclosures are replaced by (0, ceil(ghi)), so ~every Bernoulli draw is decided by the
exact Python routines; the V table, design-A digit ties and the large-|k| paths are forced as well.
Seeded, alpha = 1e-6 per chi-square.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from gpframe.mechanisms import noise
from gpframe.mechanisms.noise import bernoulli, gaussian, geometric, laplace
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, gof_gaussian, gof_laplace

pytestmark = pytest.mark.statistical


@pytest.fixture
def forced(monkeypatch):
    calls = {"n": 0}
    orig = bernoulli.lazy_rational_less

    def enclose(glo, ghi):
        return np.zeros_like(glo), np.ceil(ghi)

    def counting(*a):
        calls["n"] += 1
        return orig(*a)

    monkeypatch.setattr(bernoulli, "enclose", enclose)
    monkeypatch.setattr(laplace, "lazy_rational_less", counting)
    monkeypatch.setattr(gaussian, "lazy_rational_less", counting)
    monkeypatch.setattr(geometric, "FORCE_EXACT", True)
    monkeypatch.setattr(geometric, "FORCE_EXACT_DIGITS", True)
    monkeypatch.setattr(gaussian, "K_FAST", 1 << 4)
    monkeypatch.setattr(laplace, "BIG_K", 1 << 10)
    return calls


def test_forced_laplace(forced):
    lam = Fraction(1, 300)
    x = noise.discrete_laplace(lam, 30_000, seeded_rng(501))
    assert forced["n"] > 20_000  # the exact path really decided
    assert gof_laplace(x, float(lam), nbins=300) > ALPHA
    assert gof_laplace(x, float(lam), 0.7, nbins=300) < ALPHA


def test_forced_coarse_and_design_a(forced):
    lam = Fraction(1, 3)
    assert gof_laplace(noise.discrete_laplace(lam, 20_000, seeded_rng(502)), 1 / 3) > ALPHA
    lam = Fraction(1, 300)
    xa = noise.discrete_laplace_design_a(lam, 20_000, seeded_rng(503))
    assert gof_laplace(xa, float(lam), nbins=300) > ALPHA


def test_forced_gaussian(forced):
    x = noise.discrete_gaussian(Fraction(400), 30_000, seeded_rng(504))
    assert forced["n"] > 20_000
    assert gof_gaussian(x, 400.0, nbins=300) > ALPHA
    assert gof_gaussian(x, 400.0, 0.7, nbins=300) < ALPHA


def test_forced_integer_part_gaussian(monkeypatch):
    """Enclosure (floor(glo), ceil(ghi)): the integer-part Bernoulli and exact remainder decide."""
    monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (np.floor(lo), np.ceil(hi)))
    x = noise.discrete_gaussian(Fraction(9, 4), 30_000, seeded_rng(506))
    assert gof_gaussian(x, 2.25, nbins=300) > ALPHA
    assert gof_gaussian(x, 2.25, 0.7, nbins=300) < ALPHA


def test_forced_planar(forced):
    a = Fraction(1, 4)
    k = noise.lattice_laplace(a, 2, 20_000, seeded_rng(505))
    r = float(a) * np.sqrt((k.astype(np.float64) ** 2).sum(axis=1))
    # a = 1/4 is coarse: compare the radius law with the enumerated pmf's radius law.
    R = 200
    ax = np.arange(-R, R + 1)
    kx, ky = np.meshgrid(ax, ax)
    rr = float(a) * np.sqrt((kx * kx + ky * ky).ravel().astype(np.float64))
    w = np.exp(-rr)
    order = np.argsort(rr)
    cdf = np.cumsum(w[order]) / w.sum()
    edges = np.quantile(r, np.linspace(0, 1, 41)[1:-1])
    exp = np.diff(np.concatenate([[0], np.interp(edges, rr[order], cdf, left=0), [1]]))
    # use exact cdf at lattice radii: the edges are sample radii, which are lattice radii
    idx = np.searchsorted(rr[order], edges, side="right") - 1
    exp = np.diff(np.concatenate([[0.0], cdf[idx], [1.0]])) * r.size
    obs = np.bincount(np.searchsorted(edges, r, side="left"), minlength=exp.size)
    keep = exp > 0
    assert stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue > ALPHA
