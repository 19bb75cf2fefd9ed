"""Exact discrete Gaussian on Z and Z^d, in lattice units.

See ``docs/noise.md``: discrete Gaussian, Gaussian noise on points.

>>> from fractions import Fraction
>>> discrete_gaussian(Fraction(100), 3, None).shape
(3,)
>>> discrete_gaussian_nd(Fraction(100), 2, 3, None).shape
(3, 2)
>>> round_sigma2(Fraction(1, 3)) * 2**16        # rounded up to a multiple of 2**-16
Fraction(21846, 1)
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise import ieee
from gpframe.mechanisms.noise.bernoulli import bern_exp_neg, lazy_rational_less
from gpframe.mechanisms.noise.bits import BitSource, resolve_rng
from gpframe.mechanisms.noise.exact import as_fraction
from gpframe.mechanisms.noise.geometric import block_geometric
from gpframe.mechanisms.noise.laplace import _collect_masked, check_n, param_key

__all__ = ["discrete_gaussian", "discrete_gaussian_nd", "round_sigma2"]

SIGMA2_MIN, SIGMA2_MAX = Fraction(1, 2**8), Fraction(2**48)  # sigma_g in [2^-4, 2^24]
ACC_GAUSSIAN = 0.70
_REL = 2.0**-49  # 16u margin against a proven 6.1u
K_FAST = 1 << 37  # |k| dt < 2^62 in int64 (dt <= 2^24 + 2^16)


def round_sigma2(sigma2: Fraction) -> Fraction:
    """Round ``sigma2`` **up** to the representation (more noise is always safe).

    An integer when ``sigma2 >= 2**16``, otherwise a multiple of ``2**-16``.
    """
    s = Fraction(sigma2)
    if s >= 2**16:
        return Fraction(math.ceil(s))
    return Fraction(math.ceil(s * 2**16), 2**16)


@lru_cache(maxsize=256)
def _params(s2: Fraction) -> tuple[int, int, int, int, int, int]:
    N, Dd = int(s2.numerator), int(s2.denominator)
    t = math.isqrt(N // Dd) + 1  # floor(sigma) + 1
    return N, Dd, t, Dd * t, 2 * N * Dd * t, 2 * N * Dd * t * t


class _GaussPlan:
    """Everything :func:`discrete_gaussian` derives from ``sigma2`` (read-only, cached)."""

    __slots__ = ("D", "N", "dt", "geo", "inv_D", "inv_t", "s2", "t", "twoNdt")

    def __init__(self, s2: Fraction) -> None:
        self.s2 = s2
        self.N, _, self.t, self.dt, self.twoNdt, self.D = _params(s2)
        self.geo = block_geometric(Fraction(1, self.t))
        self.inv_t = 1.0 / self.t
        self.inv_D = 1.0 / float(self.D)


@lru_cache(maxsize=1024)
def _gauss_plan_nd(num: int, den: int) -> _GaussPlan:
    # Validation happens here; an out-of-range value raises and is not cached.
    return _GaussPlan(
        round_sigma2(as_fraction(Fraction(num, den), "sigma2", SIGMA2_MIN, SIGMA2_MAX))
    )


def _gauss_plan(sigma2: Any) -> _GaussPlan:
    key = param_key(sigma2)
    if key is None:
        fr = as_fraction(sigma2, "sigma2", SIGMA2_MIN, SIGMA2_MAX)
        key = (fr.numerator, fr.denominator)
    return _gauss_plan_nd(*key)


def discrete_gaussian(sigma2: Any, n: int, bits: BitSource | None) -> np.ndarray:
    """Exact discrete Gaussian ``P(k) ∝ exp(-k**2 / (2 sigma2))`` on the integers.

    See ``docs/noise.md``.

    Canonne, Kamath & Steinke (2020) Alg. 3 in batch form: the design-B Laplace proposal at ``t =
    floor(sigma) + 1`` and one exact Bernoulli(exp(-gamma)) with ``gamma = e/t + (|k| - sigma2/t)**2
    / (2 sigma2)``, deciding the proposal's deficit and the Gaussian correction together. The
    wrappers calibrate ``sigma2 >= Delta**2 / (2 rho)`` (``docs/noise.md``) and charge rho-zCDP (or
    rho-CGP).

    ``sigma2`` may be any positive rational in range; it is rounded **up** internally to the
    representation (:func:`round_sigma2`), so the law sampled is that of the rounded value.

    Parameters
    ----------
    sigma2 : Fraction, int or float
        Variance in lattice units², range ``[2**-8, 2**48]`` (``sigma`` in ``[2**-4, 2**24]``).
    n : int
        Number of samples.
    bits : BitSource or None
        Randomness; None is the OS CSPRNG.

    Returns
    -------
    numpy.ndarray
        ``int64[n]``.
    """
    plan = _gauss_plan(sigma2)
    n = check_n(n)
    src = resolve_rng(bits)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    N, dt, twoNdt, D = plan.N, plan.dt, plan.twoNdt, plan.D
    geo = plan.geo
    inv_t = plan.inv_t
    inv_D = plan.inv_D

    from gpframe.mechanisms.noise import kernels

    def draw(m: int) -> np.ndarray:
        k, e, _, w1 = geo.propose(m, src, n_u16=m)
        # gamma's enclosure in one compiled pass: a = |k| dt - N (exact in int64 for
        # |k| < K_FAST), g = e / t + a**2 / D, glo/ghi = g (1 -/+ 2**-49): the float operations
        # of the array form, in its order (kernels.gauss_bounds)
        glo = np.empty(m, dtype=np.float64)
        ghi = np.empty(m, dtype=np.float64)
        big = kernels.gauss_bounds(
            k, e, dt, N, inv_D, inv_t, 1.0 - _REL, 1.0 + _REL, K_FAST, glo, ghi
        )
        if ieee.EXACT_ONLY:
            rows = np.arange(m)
        elif big:  # the index list only when needed
            rows = (np.abs(k) >= K_FAST).nonzero()[0]
        else:
            rows = None
        if rows is not None:
            for i in rows.tolist():
                ai = abs(int(k[i])) * dt - N
                num = int(e[i]) * twoNdt + ai * ai
                glo[i] = 0.0
                ghi[i] = math.nextafter(float(-(-num // D)), math.inf)

        def exact_less(i: int, W: int, mm: int, M: int, j: int) -> bool:
            ai = abs(int(k[i])) * dt - N
            return lazy_rational_less(W, mm, M, int(e[i]) * twoNdt + ai * ai - j * D, D, src)

        # the proposals and which were accepted: _collect_masked keeps k[acc]
        return k, bern_exp_neg(glo, ghi, exact_less, src, w1, overwrite=True)

    return _collect_masked(n, ACC_GAUSSIAN, draw)


def discrete_gaussian_nd(sigma2: Any, d: int, n: int, bits: BitSource | None) -> np.ndarray:
    """``n`` points of independent discrete Gaussians per axis on ``Z^d`` (``docs/noise.md``).

    The joint pmf is ``∝ exp(-||k||² / (2 sigma2))``: the isotropic Gaussian restricted to the
    lattice, so no joint acceptance is needed. Returns ``int64[n, d]``.
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= int(d) <= 4:
        raise InvalidInputError(
            f"d={d!r} must be an integer from 1 to 4 (docs/noise.md). Nothing was charged."
        )
    d = int(d)
    n = check_n(n)
    return discrete_gaussian(sigma2, n * d, bits).reshape(n, d)
