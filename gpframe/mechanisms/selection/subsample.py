"""Poisson subsampling and its amplification.

See ``docs/operations/monitoring.md``; Roth & Smith, 'Additional tools and applications for
DP-stability' (lecture notes).

``poisson_subsample`` keeps each row independently with probability p using exact Bernoulli(p)
draws from the BitSource (a rational p, compared with a lazily refined uniform). The sample must
stay secret. The accounting helper :func:`~.certified.amplified_eps` gives the charge
ε′ = ln(1 + p(e^ε₀ − 1)) of running an ε₀-DP mechanism on the sample (add/remove neighbours,
pure ex-ante ε only: never combine with ex-post charges, ``docs/operations/monitoring.md``
conditions).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.mechanisms.noise.bits import broken_source, resolve_rng
from gpframe.mechanisms.noise.exact import MAX_EXTENSIONS, as_fraction, refine_msg
from gpframe.mechanisms.selection.certified import amplified_eps

__all__ = ["amplified_eps", "poisson_subsample"]


def poisson_subsample(n: int, *, p: float, rng: Any = None) -> np.ndarray:
    """Return a mask of ``n`` independent exact Bernoulli(``p``) draws.

    See ``docs/operations/monitoring.md`` (the secret sample).

    Each draw compares a 64-bit word W with ⌊p·2⁶⁴⌋; a tie (probability 2⁻⁶⁴) is decided with
    more bits of the same uniform, so P(keep) = p exactly.

    Examples
    --------
    >>> m = poisson_subsample(1000, p=0.25)
    >>> m.dtype, m.shape
    (dtype('bool'), (1000,))
    """
    pf = as_fraction(p, "p", Fraction(0), Fraction(1))
    bits = resolve_rng(rng)
    n = int(n)
    if n == 0:
        return np.zeros(0, dtype=bool)
    scaled = pf * (1 << 64)
    T = scaled.numerator // scaled.denominator
    w = bits.arr(n, "<u8")
    if T >= 1 << 64:
        return np.ones(n, dtype=bool)
    keep = w < np.uint64(T)
    for i in np.flatnonzero(w == np.uint64(T)).tolist():  # tie: refine the same uniform
        W, m = T, 64
        for _ in range(MAX_EXTENSIONS + 1):
            W = (W << 64) | bits.int_bits(64)
            m += 64
            Tm = math.floor(pf * (1 << m))
            if W != Tm:
                keep[i] = W < Tm
                break
        else:  # each refinement ties again with probability 2**-64
            raise broken_source(refine_msg(MAX_EXTENSIONS + 1), "2**-576")
    return keep
