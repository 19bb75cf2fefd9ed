"""Exact binomial confidence bounds and privacy-loss bounds for the audit.

Everything here is exact in the sense of Clopper–Pearson: the bounds come from the beta quantiles
of the binomial tail (``scipy.stats.beta``), not from a normal approximation, so they hold at the
stated level for every sample size and every count, including 0 and N.

The audit estimates two probabilities, ``P = P(S | x)`` and ``P' = P(S | x')``, from independent
samples and bounds the privacy loss of the event S from below:

    loss(S) >= ln((lo(P) - delta) / hi(P'))

where ``lo`` and ``hi`` are one-sided Clopper–Pearson bounds at level ``alpha / 2`` each, so the
lower bound holds with probability at least ``1 - alpha`` (union bound over the two sides).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta

__all__ = [
    "cp_lower",
    "cp_upper",
    "gaussian_profile_eps",
    "loss_lower_bound",
    "zcdp_eps",
]


def cp_lower(k: np.ndarray | int, n: int, a: float) -> np.ndarray:
    """One-sided exact lower bound on p at level ``a``: P(p < bound) <= a.

    >>> float(cp_lower(0, 100, 0.05))
    0.0
    >>> round(float(cp_lower(50, 100, 0.025)), 4)
    0.3983
    """
    k = np.asarray(k, dtype=np.float64)
    out = np.zeros_like(k)
    pos = k > 0
    out[pos] = beta.ppf(a, k[pos], n - k[pos] + 1)
    return out


def cp_upper(k: np.ndarray | int, n: int, a: float) -> np.ndarray:
    """One-sided exact upper bound on p at level ``a``: P(p > bound) <= a.

    >>> round(float(cp_upper(0, 10**6, 2.5e-7)), 9)  # ln(1/a) / n for k = 0
    1.5202e-05
    """
    k = np.asarray(k, dtype=np.float64)
    out = np.ones_like(k)
    lt = k < n
    out[lt] = beta.ppf(1.0 - a, k[lt] + 1, n - k[lt])
    return out


def loss_lower_bound(
    k1: np.ndarray | int,
    n1: int,
    k2: np.ndarray | int,
    n2: int,
    alpha: float,
    delta: float = 0.0,
) -> np.ndarray:
    """Lower confidence bound on ``ln((P(S|x) - delta) / P(S|x'))``.

    ``k1`` of ``n1`` outputs under x fell in S, ``k2`` of ``n2`` under x'. The bound holds with
    probability at least ``1 - alpha``; ``alpha`` is split evenly between the two one-sided bounds.
    Returns ``-inf`` where ``lo(P) <= delta``.

    >>> float(loss_lower_bound(500, 1000, 0, 1000, 1e-6)) > 3
    True
    >>> float(loss_lower_bound(0, 1000, 0, 1000, 1e-6))
    -inf
    """
    lo = cp_lower(k1, n1, alpha / 2) - delta
    hi = cp_upper(k2, n2, alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
    return out


def zcdp_eps(rho: float, delta: float) -> float:
    """The epsilon that rho-zCDP implies at delta: ``rho + 2 sqrt(rho ln(1/delta))``.

    concentrated-geo-privacy.md §1.6 (P Lem. 2.2). For a rho-CGP mechanism and a pair at distance
    d pass ``rho * d**2``.

    >>> round(zcdp_eps(0.5, 1e-3), 6)
    4.216922
    """
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def gaussian_profile_eps(mu: float, delta: float) -> float:
    """Exact epsilon of the continuous Gaussian mechanism with ``mu = shift / sigma`` at ``delta``.

    Solves ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Balle & Wang 2018). This
    is not the claim (the claim is :func:`zcdp_eps`); it is the reference the Gaussian audits use
    to report how close the empirical bound gets to what the noise can show at all.

    >>> round(gaussian_profile_eps(1.0, 0.5), 6) < 0.1
    True
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    def f(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return brentq(f, 0.0, hi, xtol=1e-12)
