"""T-GOF (planar) and T-PLANAR for the lattice Laplace sampler (secure-noise.md §7, §12).

Seeded; chi-square and KS checks use alpha = 1e-6, moment checks 5 SE (false failure 5.7e-7 each).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from gpframe.mechanisms import noise
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, chi2_edges

pytestmark = pytest.mark.statistical


def _enumerated(a: float, d: int = 2):
    R = int(45 / a) + 2
    ax = np.arange(-R, R + 1)
    kx, ky = np.meshgrid(ax, ax, indexing="ij")
    N = (kx * kx + ky * ky).ravel()
    w = np.exp(-a * np.sqrt(N.astype(np.float64)))
    return kx.ravel(), ky.ravel(), N, w / w.sum()


def _sector(kx, ky, nsec=64):
    ang = np.arctan2(ky.astype(np.float64), kx.astype(np.float64))
    return np.minimum((ang + np.pi) / (2 * np.pi) * nsec, nsec - 1).astype(np.int64)


def _radial_p(k: np.ndarray, a_true: float, nbins: int = 400) -> float:
    _, _, N, p = _enumerated(a_true)
    order = np.argsort(N, kind="stable")
    Ns, ps = N[order], p[order]
    uN, first = np.unique(Ns, return_index=True)
    mass = np.add.reduceat(ps, first)
    cdf = np.cumsum(mass)
    cuts = np.unique(np.searchsorted(cdf, np.arange(1, nbins) / nbins))
    edges = uN[cuts]
    cdf_at = dict(zip(uN.tolist(), cdf.tolist(), strict=True))
    ks = k[:, 0] ** 2 + k[:, 1] ** 2
    return chi2_edges(ks, edges, lambda e: np.array([cdf_at[int(v)] for v in e]))


def _angle_p(k: np.ndarray, a_true: float) -> float:
    kx, ky, _, p = _enumerated(a_true)
    exp = np.bincount(_sector(kx, ky), weights=p, minlength=64) * k.shape[0]
    obs = np.bincount(_sector(k[:, 0], k[:, 1]), minlength=64)
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("a", [Fraction(1, 2), Fraction(1, 8)])
def test_planar_coarse_matches_enumerated_pmf(a):
    """Coarse a: radial ||k||² bins and 64 angle sectors vs the exact pmf; 0.7x/1.3x rejected."""
    k = noise.lattice_laplace(a, 2, 100_000, seeded_rng(301))
    af = float(a)
    assert _radial_p(k, af) > ALPHA
    assert _angle_p(k, af) > ALPHA
    assert _radial_p(k, af * 0.7) < ALPHA and _radial_p(k, af * 1.3) < ALPHA


def _ks_gamma(k: np.ndarray, a: float, d: int) -> float:
    r = a * np.sqrt((k.astype(np.float64) ** 2).sum(axis=1))
    return float(stats.kstest(r, stats.gamma(d).cdf).pvalue)


@pytest.mark.parametrize("d", [2, 3])
def test_fine_lattice_radius_is_gamma_d(d):
    """Fine a = 2^-16: a||k|| ~ Gamma(d) (KS); 0.7x and 1.3x rejected on the same sample."""
    a = 2.0**-16
    k = noise.lattice_laplace(Fraction(1, 2**16), d, 100_000, seeded_rng(302 + d))
    assert _ks_gamma(k, a, d) > ALPHA
    assert _ks_gamma(k, a * 0.7, d) < ALPHA and _ks_gamma(k, a * 1.3, d) < ALPHA


def _moments(k: np.ndarray, eps_g: float):
    kf = k.astype(np.float64)
    r = np.hypot(kf[:, 0], kf[:, 1])
    th = np.arctan2(kf[:, 1], kf[:, 0])
    out = {"radius": (r.mean() * eps_g, r.std() * eps_g / math.sqrt(r.size))}
    for name, f in (("cos2", np.cos(2 * th)), ("sin2", np.sin(2 * th)), ("cos4", np.cos(4 * th))):
        out[name] = (f.mean(), f.std() / math.sqrt(f.size))
    return out


@pytest.mark.parametrize(("eps", "seed"), [(1.0, 311), (0.01, 312)])
def test_planar_isotropy_and_mean_radius(eps, seed):
    """T-PLANAR, g = 2^-10 m: mean radius 2/eps within 1% and 4 SE; angle moments within 5 SE."""
    g = 2.0**-10
    k = noise.lattice_laplace(Fraction(eps) * Fraction(1, 1024), 2, 200_000, seeded_rng(seed))
    a_used = float(eps * g)
    m = _moments(k, a_used)
    mean, se = m["radius"]
    assert abs(mean - 2.0) < min(0.02, 4 * se + 2 * a_used)
    for name in ("cos2", "sin2", "cos4"):
        mu, se = m[name]
        assert abs(mu) < 5 * se, (name, mu, se)


def test_per_axis_laplace_mutant_fails_cos4():
    """The per-axis Laplace mutant (ℓ1 level sets, §7.1) must fail the cos4θ check by > 10 SE."""
    a = Fraction(1, 2**16)
    src = seeded_rng(313)
    k = np.stack([noise.discrete_laplace(a, 100_000, src) for _ in range(2)], axis=1)
    mu, se = _moments(k, float(a))["cos4"]
    assert abs(mu) > 10 * se
    assert _ks_gamma(k, float(a), 2) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize(
    "a", [Fraction(1, 2), Fraction(1, 8), Fraction(1, 2**16), Fraction(1, 2**24)]
)
def test_planar_gof_grid(a):
    """Nightly: N = 1e6 over the grid a in {1/2, 1/8, 2^-16, 2^-24}."""
    k = noise.lattice_laplace(a, 2, 1_000_000, seeded_rng(320))
    af = float(a)
    if af >= 1 / 8:
        assert _radial_p(k, af) > ALPHA and _angle_p(k, af) > ALPHA
        assert _radial_p(k, af * 0.7) < ALPHA and _radial_p(k, af * 1.3) < ALPHA
    else:
        assert _ks_gamma(k, af, 2) > ALPHA
        assert _ks_gamma(k, af * 0.7, 2) < ALPHA and _ks_gamma(k, af * 1.3, 2) < ALPHA
    m = _moments(k, af)
    # Coarse lattices are only 4-fold symmetric: compare with the lattice pmf's own moments.
    ref = {"cos2": 0.0, "sin2": 0.0, "cos4": 0.0}
    if af >= 1 / 8:
        kx, ky, _, p = _enumerated(af)
        th = np.arctan2(ky.astype(np.float64), kx.astype(np.float64))
        ref = {
            "cos2": float(p @ np.cos(2 * th)),
            "sin2": float(p @ np.sin(2 * th)),
            "cos4": float(p @ np.cos(4 * th)),
        }
    for name in ("cos2", "sin2", "cos4"):
        assert abs(m[name][0] - ref[name]) < 5 * m[name][1]
