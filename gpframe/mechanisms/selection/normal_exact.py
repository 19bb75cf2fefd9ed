"""Exact, lazily refined continuous normal deviates (Karney 2016, algorithm N).

See ``docs/operations/monitoring.md`` and ``docs/noise.md`` (exact normals, the exception for
Gaussian selection: only comparison outcomes or an index are released, never a value).

A deviate is kept as ``s·(k + x)`` with a sign s, an integer k ≥ 0 and a *partially sampled*
uniform x ∈ [X/2^m, (X + 1)/2^m) whose further bits are uniform and drawn on demand. Every
decision (Karney's acceptance tests and the mechanisms' comparisons) is made with Python
integers and ``Fraction``: no float and no transcendental function decides anything
(``docs/noise.md``). Decisions refine the deviates 64 bits at a time until
the sign of the compared quantity is certain, so the released outcome has exactly the law it
would have under exact N(0, 1) draws.

Why the unsampled bits stay uniform: the acceptance of algorithm N depends on x only through
comparisons that read a prefix of x; conditioned on that prefix and on acceptance, the unread
bits are independent of everything examined, hence uniform (Karney 2016, Section 2). The mixture of
these uniform cells has density ∝ exp(−(k + x)²/2) on [k, k + 1).

Examples
--------
>>> from gpframe.testing import seeded_enabled, seeded_rng
>>> with seeded_enabled():
...     z = ExactNormal.draw(seeded_rng(1))
>>> lo, hi = z.interval()
>>> hi - lo == Fraction(1, 2**64)
True
>>> decide_ge([(Fraction(1), z)], Fraction(0)) == (lo >= 0)       # is z >= 0 ?
True
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from gpframe.mechanisms.noise.bits import broken_source, resolve_rng
from gpframe.mechanisms.noise.exact import ExactProb, LazyUniform

__all__ = ["ExactNormal", "argmax_exact", "decide_ge", "normals"]

_CHUNK = 64
_EXP_HALF = ExactProb.exp_neg(Fraction(1, 2))

# Bounds on every loop that draws until the bits decide, so a stuck source (constant bytes)
# raises instead of hanging. Each is reached by a working source with negligible probability:
#: ties of two fresh 64-bit chunks in a row (each 2**-64): 8 in a row, below 2**-512
_MAX_TIES = 8
#: algorithm G's k: P(k >= 512) = exp(-256) < 2**-369
_MAX_K = 512
#: algorithm N's attempts: each accepts with probability (1 - e**-0.5) sqrt(pi/2) > 0.49,
#: so 1024 rejections in a row happen with probability below 0.51**1024 < 2**-990
_MAX_ATTEMPTS = 1024
#: algorithm B's chain: n steps need n decreasing uniforms, probability <= 1/n!, 1/128! < 2**-700
_MAX_CHAIN = 128
#: refinement rounds of a comparison of exact normals: after r rounds every deviate involved has
#: at least 64 (r + 1) bits and the sum's density is at most 1/(|c| sqrt(2 pi)), so it is still
#: undecided with probability below (terms + 1)**2 2**(1 - 64 (r + 1)); r = 16: below 2**-1000
_MAX_ROUNDS = 16


class _U:
    """A lazily refined uniform in [0, 1): the integer prefix ``W`` of ``m`` bits."""

    __slots__ = ("W", "bits", "m")

    def __init__(self, bits: Any) -> None:
        self.bits = bits
        self.W = bits.int_bits(_CHUNK)
        self.m = _CHUNK

    def extend(self) -> None:
        self.W = (self.W << _CHUNK) | self.bits.int_bits(_CHUNK)
        self.m += _CHUNK


def _less(u: _U, v: _U) -> bool:
    """Exactly ``u < v`` (ties of prefixes draw more bits of both)."""
    for _ in range(_MAX_TIES + 1):
        while u.m < v.m:
            u.extend()
        while v.m < u.m:
            v.extend()
        if u.W != v.W:
            return u.W < v.W
        u.extend()
        v.extend()
    raise broken_source(f"two uniforms tied on {_MAX_TIES + 1} chunks of 64 bits", "2**-512")


def _bern_exp_half(bits: Any) -> bool:
    """Exactly Bernoulli(e^(−1/2)) (a lazy uniform against exact bounds, ``docs/noise.md``)."""
    return LazyUniform(bits.int_bits(_CHUNK), _CHUNK, bits).less_than(_EXP_HALF)


def _r_test(r: _U, k: int, x: _U) -> bool:
    """Exactly ``(2k + 2)·r < 2k + x``."""
    c = 2 * k + 2
    for _ in range(_MAX_TIES + 1):
        M = max(r.m, x.m)
        R, X = r.W << (M - r.m), x.W << (M - x.m)
        ur, ux = 1 << (M - r.m), 1 << (M - x.m)  # one unit of each prefix, at scale 2^M
        base = (2 * k) << M
        if c * (R + ur) <= base + X:
            return True
        if c * R >= base + X + ux:
            return False
        r.extend()
        x.extend()
    # Undecided after a refinement needs the other side within one unit: <= 2c 2**-64 per round.
    raise broken_source(f"a test stayed undecided over {_MAX_TIES + 1} refinements", "2**-400")


def _alg_b(k: int, x: _U, bits: Any) -> bool:
    """Karney's algorithm B: true with probability exp(−x(2k + x)/(2k + 2)) (von Neumann)."""
    y = x
    n = 0
    while True:
        if n >= _MAX_CHAIN:
            raise broken_source(f"algorithm B's chain reached {n} steps", "2**-700")
        z = _U(bits)
        if not _less(z, y):
            break
        if not _r_test(_U(bits), k, x):
            break
        y = z
        n += 1
    return n % 2 == 0


class ExactNormal:
    """One exact N(0, 1) deviate ``s·(k + x)``, refined on demand; never converted to a float."""

    __slots__ = ("k", "s", "x")

    def __init__(self, s: int, k: int, x: _U) -> None:
        self.s, self.k, self.x = s, k, x

    @classmethod
    def draw(cls, rng: Any = None) -> ExactNormal:
        """Karney 2016 algorithm N with all tests exact."""
        bits = resolve_rng(rng)
        for _ in range(_MAX_ATTEMPTS):
            k = 0  # N1 (algorithm G): P(k) = e^(−k/2)(1 − e^(−1/2))
            while _bern_exp_half(bits):
                k += 1
                if k >= _MAX_K:
                    raise broken_source(f"algorithm G reached k={k}", "2**-369")
            # N2: accept with probability e^(−k(k−1)/2) = (e^(−1/2))^(k(k−1))
            if not all(_bern_exp_half(bits) for _ in range(k * (k - 1))):
                continue
            x = _U(bits)  # N3, N4: accept x with probability e^(−x(2k+x)/2), as k + 1 B-trials
            if all(_alg_b(k, x, bits) for _ in range(k + 1)):
                s = 1 if bits.int_bits(8) & 1 else -1
                return cls(s, k, x)
        raise broken_source(f"{_MAX_ATTEMPTS} normal draws in a row were rejected", "2**-990")

    def interval(self) -> tuple[Fraction, Fraction]:
        """Return closed rational bounds ``lo <= value <= hi`` at the current precision."""
        lo = Fraction(self.k) + Fraction(self.x.W, 1 << self.x.m)
        hi = lo + Fraction(1, 1 << self.x.m)
        return (lo, hi) if self.s > 0 else (-hi, -lo)

    def refine(self) -> None:
        """Draw 64 more bits of the fraction."""
        self.x.extend()


def normals(n: int, rng: Any = None) -> list[ExactNormal]:
    """``n`` independent exact N(0, 1) deviates."""
    bits = resolve_rng(rng)
    return [ExactNormal.draw(bits) for _ in range(int(n))]


def _linear_bounds(
    terms: Sequence[tuple[Fraction, ExactNormal]], const: Fraction
) -> tuple[Fraction, Fraction]:
    lo = hi = const
    for c, z in terms:
        a, b = z.interval()
        if c >= 0:
            lo, hi = lo + c * a, hi + c * b
        else:
            lo, hi = lo + c * b, hi + c * a
    return lo, hi


def decide_ge(terms: Sequence[tuple[Fraction, ExactNormal]], const: Fraction) -> bool:
    """Exactly ``Σ c_i Z_i + const >= 0`` (refining the deviates until the sign is certain).

    Equality has probability zero; the loop ends with probability one (bounded: ``_MAX_ROUNDS``).
    """
    for _ in range(_MAX_ROUNDS + 1):
        lo, hi = _linear_bounds(terms, const)
        if lo >= 0:
            return True
        if hi < 0:
            return False
        for _, z in terms:
            z.refine()
    raise broken_source(f"a sign stayed undecided over {_MAX_ROUNDS} refinements", "2**-1000")


def argmax_exact(values: Sequence[Fraction], sigma: Fraction, zs: Sequence[ExactNormal]) -> int:
    """Exactly ``argmax_i (values[i] + sigma·zs[i])`` (ties, probability zero, go low)."""
    n = len(values)
    for _ in range(_MAX_ROUNDS + 1):
        iv = [z.interval() for z in zs]
        lo = [values[i] + sigma * iv[i][0] for i in range(n)]
        hi = [values[i] + sigma * iv[i][1] for i in range(n)]
        best = max(range(n), key=lambda i: (lo[i], -i))
        if all(hi[j] < lo[best] for j in range(n) if j != best):
            return best
        for j in range(n):  # refine the candidates still in contention (and the leader)
            if j == best or hi[j] >= lo[best]:
                zs[j].refine()
    raise broken_source(f"an argmax stayed undecided over {_MAX_ROUNDS} refinements", "2**-900")
