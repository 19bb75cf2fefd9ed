"""Exact constants and lazily refined uniforms (``docs/noise.md``).

Everything here uses Python integers and ``Fraction`` only: no float and no transcendental
function decides anything.

>>> from fractions import Fraction
>>> lo, hi = exp_neg_bounds(Fraction(1), 64)
>>> lo <= hi <= lo + 2
True
>>> ExactProb.exp_neg(Fraction(1)).floor(8)     # floor(e^-1 * 256) = 94
94
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from numbers import Rational
from typing import Any

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise.bits import broken_source

__all__ = [
    "ExactProb",
    "LazyUniform",
    "as_fraction",
    "exp_neg_bounds",
    "float_bounds",
]

# An integer upper bound on log2(e) = 1.4426950408889634..., used only to size guard bits.
_LOG2E_UP = Fraction(14427, 10000)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


@lru_cache(maxsize=4096)
def exp_neg_bounds(x: Fraction, P: int) -> tuple[int, int]:
    """Integers ``(lo, hi)`` with ``lo <= exp(-x) * 2**P <= hi`` for rational ``x >= 0``.

    See ``docs/noise.md``.

    Range reduction ``exp(-x) = exp(-x/m)**m`` with ``x/m <= 1/4``, an alternating series
    bracketed by consecutive exact partial sums, then repeated squaring with floor (lower bound)
    and ceiling (upper bound) rounding in ``G``-bit fixed point.

    >>> exp_neg_bounds(Fraction(0), 10)
    (1024, 1024)
    """
    x = Fraction(x)
    if x < 0:
        raise InvalidInputError(f"exp_neg_bounds: x={x} must be >= 0.")
    if x == 0:
        return 1 << P, 1 << P
    m = max(1, math.ceil(4 * x))
    y = x / m
    G = P + math.ceil(x * _LOG2E_UP) + 2 * m.bit_length() + 40
    tol = Fraction(1, 1 << (G + 4))
    s_prev = Fraction(1)
    term = Fraction(1)
    s = Fraction(1)
    j = 0
    while True:
        j += 1
        term = -term * y / j
        s_prev, s = s, s + term
        if abs(term) < tol:
            break
    lower, upper = min(s, s_prev), max(s, s_prev)
    one = 1 << G
    lo = (lower.numerator << G) // lower.denominator
    hi = _ceil_div(upper.numerator << G, upper.denominator)
    # Powers by square-and-multiply; directed rounding keeps lo <= E^k <= hi at every step.
    rlo, rhi = one, one
    blo, bhi = lo, hi
    k = m
    while k:
        if k & 1:
            rlo = (rlo * blo) >> G
            rhi = _ceil_div(rhi * bhi, one)
        k >>= 1
        if k:
            blo = (blo * blo) >> G
            bhi = _ceil_div(bhi * bhi, one)
    shift = G - P
    return rlo >> shift, _ceil_div(rhi, 1 << shift)


class ExactProb:
    """A probability ``p`` known through integer bounds at any precision (``docs/noise.md``).

    ``bounds(P)`` returns ``(lo, hi)`` with ``lo <= p * 2**P <= hi``; ``floor(k)`` raises ``P``
    by 64 until the floors of the two bounds agree. That terminates because every ``p`` used here is
    irrational (Lindemann-Weierstrass), so ``p * 2**k`` is never an integer.
    """

    __slots__ = ("_bounds", "_floors")

    def __init__(self, bounds: Callable[[int], tuple[int, int]]) -> None:
        self._bounds = bounds
        self._floors: dict[int, int] = {}

    def floor(self, k: int) -> int:
        """Return ``floor(p * 2**k)`` exactly."""
        got = self._floors.get(k)
        if got is not None:
            return got
        P = k + 64
        while True:
            lo, hi = self._bounds(P)
            flo, fhi = lo >> (P - k), hi >> (P - k)
            if flo == fhi:
                self._floors[k] = flo
                return flo
            P += 64

    @classmethod
    def exp_neg(cls, x: Fraction) -> ExactProb:
        """``p = exp(-x)``."""
        x = Fraction(x)
        return cls(lambda P: exp_neg_bounds(x, P))

    @classmethod
    def logistic_exp_neg(cls, x: Fraction) -> ExactProb:
        """``p = E / (1 + E)`` with ``E = exp(-x)``; increasing in E.

        See ``docs/noise.md`` (design A digits).
        """
        x = Fraction(x)

        def b(P: int) -> tuple[int, int]:
            Elo, Ehi = exp_neg_bounds(x, P + 2)
            one = 1 << (P + 2)
            return (Elo << P) // (one + Elo), _ceil_div(Ehi << P, one + Ehi)

        return cls(b)

    @classmethod
    def p_zero(cls, x: Fraction) -> ExactProb:
        """``p0 = (1 - E) / (1 + E)``, ``E = exp(-x)``; decreasing in E.

        See ``docs/noise.md`` (coarse Laplace).
        """
        x = Fraction(x)

        def b(P: int) -> tuple[int, int]:
            Elo, Ehi = exp_neg_bounds(x, P + 2)
            one = 1 << (P + 2)
            return ((one - Ehi) << P) // (one + Ehi), _ceil_div((one - Elo) << P, one + Elo)

        return cls(b)


#: Refinements of one lazy uniform before the source is declared broken. Each refinement needs
#: the prefix to tie with ``floor(p * 2**m)`` for one of the (at most 2**13, the geometric cap)
#: thresholds compared with it, so the 8th happens at ``m >= 32 + 7 * 64`` with probability
#: below ``2**13 * 2**-480 < 2**-400`` for a working source.
MAX_EXTENSIONS = 8


def refine_msg(times: int) -> str:
    """Return the :func:`broken_source` wording for a comparison still undecided."""
    return f"a uniform was refined {times} times without deciding a comparison"


class LazyUniform:
    """A uniform ``U`` in [0, 1) known through its first ``m`` bits ``W`` (``docs/noise.md``).

    ``less_than(p)`` returns exactly ``1[U < p]``, drawing 64 more bits of the same ``U`` whenever
    the prefix ties with ``floor(p * 2**m)``.
    """

    __slots__ = ("W", "bits", "m", "m_max")

    def __init__(self, W: int, m: int, bits: Any) -> None:
        self.W, self.m, self.bits = int(W), int(m), bits
        self.m_max = self.m + 64 * MAX_EXTENSIONS

    def extend(self) -> None:
        """Append 64 fresh bits to the prefix (at most :data:`MAX_EXTENSIONS` times)."""
        if self.m >= self.m_max:
            raise broken_source(
                refine_msg(MAX_EXTENSIONS),
                "2**-400",
            )
        self.W = (self.W << 64) | self.bits.int_bits(64)
        self.m += 64

    def less_than(self, p: ExactProb) -> bool:
        """Return ``U < p`` exactly."""
        while True:
            T = p.floor(self.m)
            if self.W < T:
                return True
            if self.W > T:
                return False
            self.extend()


def float_bounds(x: Fraction) -> tuple[float, float]:
    """Floats ``lo <= x <= hi`` (adjacent or equal), from the correctly rounded ``float(x)``."""
    f = float(x)
    fx = Fraction(f)
    if fx == x:
        return f, f
    if fx < x:
        return f, math.nextafter(f, math.inf)
    return math.nextafter(f, -math.inf), f


def as_fraction(
    value: Any,
    name: str,
    lo: Fraction | None = None,
    hi: Fraction | None = None,
    *,
    lo_open: bool = False,
) -> Fraction:
    """Convert ``value`` (int, Fraction or finite float, converted exactly) to a checked Fraction.

    Raises
    ------
    InvalidInputError
        NaN, infinities, non-numbers, or a value outside ``[lo, hi]`` (``(lo, hi]`` if ``lo_open``),
        naming ``name``; raised before any bit is drawn.
    """
    import numpy as np

    if isinstance(value, np.integer):  # numpy scalars: plain Python numbers first
        value = int(value)
    elif isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (Rational, float, int)):
        raise InvalidInputError(
            f"{name}={value!r} must be a number (int, Fraction or float). Nothing was charged."
        )
    if isinstance(value, Rational) and not isinstance(value, (int, Fraction)):
        value = Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(
            f"{name}={value!r} must be finite. Pass a positive finite number. Nothing was charged."
        )
    fr = Fraction(value)
    fr = Fraction(int(fr.numerator), int(fr.denominator))
    bad = (lo is not None and (fr <= lo if lo_open else fr < lo)) or (hi is not None and fr > hi)
    if bad:
        lo_s = "-inf" if lo is None else f"{float(lo):.6g}"
        hi_s = "inf" if hi is None else f"{float(hi):.6g}"
        br = "(" if lo_open else "["
        raise InvalidInputError(
            f"{name}={float(fr):.6g} is outside the supported range {br}{lo_s}, {hi_s}] "
            "(docs/noise.md). Choose a coarser or finer lattice step g so the lattice-unit "
            "parameter falls in range. Nothing was charged."
        )
    return fr
