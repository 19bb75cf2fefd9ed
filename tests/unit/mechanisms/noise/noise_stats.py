"""Shared statistics for the noise-sampler tests: exact pmfs and chi-square goodness of fit.

The pmfs are evaluated in float64 (mpmath is not needed: the chi-square resolution at N <= 1e6 is
far coarser than double rounding).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

ALPHA = 1e-6


def chi2_edges(samples: np.ndarray, edges: np.ndarray, cdf) -> float:
    """Chi-square p-value of integer samples for bins ``(edges[j-1], edges[j]]`` (tails merged).

    ``cdf(k)`` is the exact CDF ``P(K <= k)`` evaluated at the integer edges; bins with expected
    count below 5 are merged into their right neighbour.
    """
    n = samples.size
    edges = np.unique(np.asarray(edges, dtype=np.int64))
    c = np.asarray(cdf(edges), dtype=np.float64)
    mass = np.diff(np.concatenate([[0.0], c, [1.0]]))
    counts = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=mass.size)
    c2, e2 = [], []
    acc_c = acc_e = 0.0
    for cnt, e in zip(counts.tolist(), (mass * n).tolist(), strict=True):
        acc_c += cnt
        acc_e += e
        if acc_e >= 5:
            c2.append(acc_c)
            e2.append(acc_e)
            acc_c = acc_e = 0.0
    if acc_e > 0 or acc_c > 0:
        c2[-1] += acc_c
        e2[-1] += acc_e
    c2a, e2a = np.array(c2), np.array(e2)
    stat = float(((c2a - e2a) ** 2 / e2a).sum())
    return float(stats.chi2.sf(stat, c2a.size - 1))


def _levels(n: int, nbins: int) -> np.ndarray:
    nb = max(2, min(nbins, n // 20))
    return np.arange(1, nb) / nb


def laplace_cdf(lam: float):
    q1 = 1.0 / (1.0 + math.exp(-lam))  # 1 / (1 + q)

    def cdf(k: np.ndarray) -> np.ndarray:
        kf = k.astype(np.float64)
        return np.where(kf >= 0, 1.0 - np.exp(-lam * (kf + 1)) * q1, np.exp(lam * kf) * q1)

    return cdf


def gaussian_cdf(sigma2: float):
    sigma = math.sqrt(sigma2)
    if sigma >= 4:  # Poisson summation: error ~ exp(-2 pi^2 sigma^2), far below double precision
        return lambda k: stats.norm.cdf((k.astype(np.float64) + 0.5) / sigma)
    r = int(40 * sigma) + 40
    grid = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-grid * grid / (2 * sigma2))
    c = np.cumsum(w / w.sum())
    return lambda k: c[np.clip(k + r, 0, 2 * r)]


def gof_laplace(samples: np.ndarray, lam: float, scale: float = 1.0, nbins: int = 1000) -> float:
    """Chi-square p-value of discrete-Laplace samples against rate ``lam / scale``."""
    lam_s = lam / scale
    edges = np.floor(stats.laplace.ppf(_levels(samples.size, nbins), scale=1 / lam))
    edges = np.concatenate([edges, np.arange(-4, 4)])  # coarse scales: resolve k = 0, ±1, ...
    p = chi2_edges(samples, edges, laplace_cdf(lam_s))
    if math.isnan(p):  # everything merged into one bin: exact binomial test of P(k != 0)
        q = math.exp(-lam_s)
        p_nonzero = 2 * q / (1 + q)
        p = float(stats.binomtest(int((samples != 0).sum()), samples.size, p_nonzero).pvalue)
    return p


def gof_gaussian(
    samples: np.ndarray, sigma2: float, scale: float = 1.0, nbins: int = 1000
) -> float:
    """Chi-square p-value of discrete-Gaussian samples against ``sigma = scale * sqrt(sigma2)``."""
    edges = np.floor(stats.norm.ppf(_levels(samples.size, nbins)) * math.sqrt(sigma2))
    return chi2_edges(samples, edges, gaussian_cdf(sigma2 * scale * scale))


def two_sample_chi2(x: np.ndarray, y: np.ndarray, nbins: int = 200) -> float:
    """Two-sample chi-square p-value over pooled-quantile bins of integer data."""
    pooled = np.concatenate([x, y])
    qs = np.unique(np.quantile(pooled, np.linspace(0, 1, nbins + 1)[1:-1], method="lower"))
    bx = np.bincount(np.searchsorted(qs, x, side="left"), minlength=qs.size + 1)
    by = np.bincount(np.searchsorted(qs, y, side="left"), minlength=qs.size + 1)
    table = np.vstack([bx, by]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    _, p, _, _ = stats.chi2_contingency(table, correction=False)
    return float(p)
