"""Exact discrete Laplace and lattice Laplace samplers, in lattice units.

See ``docs/noise.md``: discrete Laplace, lattice Laplace.

>>> from fractions import Fraction
>>> k = discrete_laplace(Fraction(1, 3), 5, None)
>>> k.dtype, k.shape
(dtype('int64'), (5,))
>>> lattice_laplace(Fraction(1, 1024), 2, 4, None).shape
(4, 2)
>>> discrete_laplace(0, 5, None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
gpframe.errors.InvalidInputError: lam=0 is outside the supported range [9.09495e-13, 1024] ...
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise import ieee
from gpframe.mechanisms.noise.bernoulli import bern_exp_neg, lazy_rational_less
from gpframe.mechanisms.noise.bits import BitSource, broken_source, resolve_rng
from gpframe.mechanisms.noise.exact import (
    MAX_EXTENSIONS,
    ExactProb,
    LazyUniform,
    as_fraction,
    refine_msg,
)
from gpframe.mechanisms.noise.geometric import block_geometric, digit_geometric, v_table

__all__ = [
    "discrete_laplace",
    "discrete_laplace_design_a",
    "lattice_laplace",
]

LAM_MIN, LAM_MAX = Fraction(1, 2**40), Fraction(2**10)
A_MIN, A_MAX = Fraction(1, 2**24), Fraction(2**4)
D_MAX = 4

#: Internal chunk of proposals (docs/noise.md): arrays that stay in cache run faster.
CHUNK = 1 << 18
#: Fixed acceptance constants: batch sizes depend on (n, parameters) only.
ACC_LAPLACE = 0.96
ACC_LATTICE = {1: 0.9, 2: 0.72, 3: 0.55, 4: 0.42}
_REL = 2.0**-50  # margin for lam * e: 8u against a proven 2.01u
_PLANAR_MARGIN = 2.0**-44
#: Rows with some |k_i| at or above this take the exact path (float N would not be exact).
BIG_K = 1 << 52


def check_n(n: Any, name: str = "n") -> int:
    """Validate a sample count (a non-negative integer)."""
    if type(n) is int and n >= 0:  # the common case, without operator.index
        return n
    try:
        n_int = operator.index(n)
    except TypeError:
        raise InvalidInputError(
            f"{name}={n!r} must be a non-negative integer. Nothing was charged."
        ) from None
    if n_int < 0:
        raise InvalidInputError(f"{name}={n_int} must be >= 0. Nothing was charged.")
    return n_int


def _batch(need: int, acc: float, chunk: int) -> int:
    return min(chunk, math.ceil(need / acc) + 16)


#: Proposals in a row without one accepted before the source is declared broken. Every sampler
#: here accepts a proposal with probability above 1/10 (the ACC_* rates are at least 0.42; the
#: Gaussian's worst case over its sigma range is about 0.5, design A's is 1/2), so a working
#: source has a run this long with probability below 0.9**8192 < 2**-1200.
MAX_DRY_PROPOSALS = 8192


def _collect(n: int, acc: float, draw: Any, width: int = 0, chunk: int = CHUNK) -> np.ndarray:
    """Run ``draw(m) -> accepted rows`` in fixed-size batches until ``n`` rows are collected."""
    m = _batch(n, acc, chunk)
    got = draw(m)
    if got.shape[0] >= n:  # one batch sufficed (almost always for n below the chunk): no copy
        return got[:n]
    out = np.empty((n, width) if width else n, dtype=np.int64)
    filled = got.shape[0]
    out[:filled] = got
    dry = 0 if filled else m  # proposals since the last accepted one (a lower bound)
    while filled < n:
        need = n - filled
        m = _batch(need, acc, chunk)
        got = draw(m)
        take = min(need, got.shape[0])
        out[filled : filled + take] = got[:take]
        filled += take
        dry = 0 if take else dry + m
        if dry >= MAX_DRY_PROPOSALS:
            raise broken_source(f"{dry} proposals in a row were all rejected", "2**-1200")
    return out


def _collect_masked(n: int, acc: float, draw: Any, chunk: int = CHUNK) -> np.ndarray:
    """:func:`_collect` for ``draw(m) -> (proposals, accepted mask)`` (one value per row).

    The same batches and the same rows, in the same order: each batch's accepted proposals
    are written straight into the output by one compiled pass
    (:func:`~gpframe.mechanisms.noise.kernels.compress_into`) instead of a boolean index and
    a copy.
    """
    from gpframe.mechanisms.noise import kernels

    out = np.empty(n, dtype=np.int64)
    m = _batch(n, acc, chunk)
    k, ok = draw(m)
    filled = int(kernels.compress_into(k, ok, out, 0))
    dry = 0 if filled else m  # proposals since the last accepted one (a lower bound)
    while filled < n:
        m = _batch(n - filled, acc, chunk)
        k, ok = draw(m)
        end = int(kernels.compress_into(k, ok, out, filled))
        dry = 0 if end > filled else dry + m
        filled = end
        if dry >= MAX_DRY_PROPOSALS:
            raise broken_source(f"{dry} proposals in a row were all rejected", "2**-1200")
    return out


# --------------------------------------------------------------------------------------------
# 1-D discrete Laplace, design B and the coarse path


def param_key(x: Any) -> tuple[int, int] | None:
    """``(numerator, denominator)`` of an exact int or Fraction parameter, else None.

    Plans are cached on this key: hashing two ints is much cheaper than hashing a Fraction.
    """
    t = type(x)
    if t is Fraction:
        return x.numerator, x.denominator
    if t is int:
        return x, 1
    return None


class _LaplacePlan:
    """Everything :func:`discrete_laplace` derives from ``lam`` (read-only, cached)."""

    __slots__ = ("coarse", "den", "geo", "lam", "lam_f", "num", "p0", "vt")

    def __init__(self, lam: Fraction) -> None:
        self.lam = lam
        self.geo = block_geometric(lam)
        self.coarse = self.geo.L == 0
        self.lam_f = float(lam)
        self.num, self.den = lam.numerator, lam.denominator
        # The coarse path needs p0 and the V table at q = exp(-lam).
        self.p0 = _p0(lam) if self.coarse else None
        self.vt = v_table(lam) if self.coarse else None


@lru_cache(maxsize=1024)
def _laplace_plan_nd(num: int, den: int) -> _LaplacePlan:
    # Validation happens here; an out-of-range value raises and is not cached.
    return _LaplacePlan(as_fraction(Fraction(num, den), "lam", LAM_MIN, LAM_MAX))


def _laplace_plan(lam: Any) -> _LaplacePlan:
    key = param_key(lam)
    if key is None:
        fr = as_fraction(lam, "lam", LAM_MIN, LAM_MAX)
        key = (fr.numerator, fr.denominator)
    return _laplace_plan_nd(*key)


def _laplace_b_batch(lam: Any, m: int, bits: BitSource) -> np.ndarray:
    plan = lam if isinstance(lam, _LaplacePlan) else _laplace_plan(lam)
    from gpframe.mechanisms.noise import kernels, laplace_fused

    geo = plan.geo
    views = geo.words(m, bits, n_u16=m)  # the one request of geo.propose
    RS, L, mask = views["RS"], geo.L, geo._mask
    num, den = plan.num, plan.den

    def exact_less(i: int, W: int, mm: int, M: int, j: int) -> bool:
        rs = int(RS[i])
        e = (rs & mask) + ((rs >> L) & 1)  # the proposal's deficit R + s, as place() computes it
        return lazy_rational_less(W, mm, M, num * e - j * den, den, bits)

    if laplace_fused.usable():  # the same decisions in one pass (None: it needs the stages)
        got = laplace_fused.accept(plan, views, exact_less, bits, _REL)
        if got is not None:
            return got
    k, e, _, w1 = geo.place(views, bits)
    # g = e * lam, glo/ghi = g (1 -/+ 2**-50), in one compiled pass (the same float operations)
    glo = np.empty(m, dtype=np.float64)
    ghi = np.empty(m, dtype=np.float64)
    kernels.scaled_bounds(e, plan.lam_f, 1.0 - _REL, 1.0 + _REL, glo, ghi)
    acc = bern_exp_neg(glo, ghi, exact_less, bits, w1, overwrite=True)
    return k[acc]


@lru_cache(maxsize=256)
def _p0(lam: Fraction) -> tuple[ExactProb, int]:
    p0 = ExactProb.p_zero(lam)
    return p0, p0.floor(32)


def _laplace_coarse_batch(lam: Any, m: int, bits: BitSource) -> np.ndarray:
    """Coarse scales: 0 with probability (1-q)/(1+q), else a fair sign times 1 + Geometric(q)."""
    plan = lam if isinstance(lam, _LaplacePlan) else _laplace_plan(lam)
    p0, T0 = plan.p0
    vt = plan.vt
    buf = bits.bytes(8 * m + (m + 7) // 8)
    W0 = np.frombuffer(buf, dtype=np.uint32, count=m)
    W = np.frombuffer(buf, dtype=np.uint32, count=m, offset=4 * m)
    s = np.unpackbits(np.frombuffer(buf, dtype=np.uint8, offset=8 * m), count=m)
    zero = W0 < T0
    for i in np.flatnonzero(W0 == T0).tolist():
        zero[i] = LazyUniform(int(W0[i]), 32, bits).less_than(p0)
    V = vt.from_words(W, bits)
    mag = np.where(zero, 0, V + 1)
    return np.where(s.astype(bool), -mag, mag)


def discrete_laplace(lam: Any, n: int, bits: BitSource | None) -> np.ndarray:
    """Exact discrete Laplace ``P(k) ∝ exp(-lam |k|)`` on the integers.

    See ``docs/noise.md``: block-geometric proposal, coarse scales.

    Design B: a block-geometric proposal with a shifted sign and one exact Bernoulli(exp(-lam e))
    per proposal; for ``lam > 1/32`` (scale ``t < 32``) the rejection-free three-way split of
    ``docs/noise.md``. Callers calibrate ``lam = epsilon / Delta`` in lattice units
    (``docs/noise.md``) and charge epsilon.

    Parameters
    ----------
    lam : Fraction, int or float
        The rate ``1/t`` in lattice units, converted exactly; range ``[2**-40, 2**10]``
        (``docs/noise.md``).
    n : int
        Number of samples.
    bits : BitSource or None
        Randomness; None is the OS CSPRNG.

    Returns
    -------
    numpy.ndarray
        ``int64[n]``.

    Raises
    ------
    InvalidInputError
        ``lam`` not finite or out of range, or a bad ``n``, before any bit is drawn.
    NoiseOverflowError
        A draw with ``|k| >= 2**62`` (probability below ``exp(-2**22)``).
    """
    plan = _laplace_plan(lam)
    n = check_n(n)
    src = resolve_rng(bits)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if ieee.EXACT_ONLY:
        return discrete_laplace_design_a(plan.lam, n, src)
    if plan.coarse:
        return _collect(n, 1.0, lambda m: _laplace_coarse_batch(plan, m, src))
    return _collect(n, ACC_LAPLACE, lambda m: _laplace_b_batch(plan, m, src))


# --------------------------------------------------------------------------------------------
# Design A: no float at all


def discrete_laplace_design_a(lam: Any, n: int, bits: BitSource | None) -> np.ndarray:
    """Exact discrete Laplace by independent binary digits, with no float operation.

    See ``docs/noise.md``.

    The cross-check of design B (T-XCHK) and the automatic fallback when T-IEEE fails. Same law,
    parameters and errors as :func:`discrete_laplace`; about half its speed.
    """
    lam = as_fraction(lam, "lam", LAM_MIN, LAM_MAX)
    n = check_n(n)
    src = resolve_rng(bits)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    dg = digit_geometric(lam)
    L = dg.L

    def draw(m: int) -> np.ndarray:
        buf = src.bytes(4 * m + L * m + (m + 7) // 8)
        W = np.frombuffer(buf, dtype=np.uint32, count=m)
        D8 = np.frombuffer(buf, dtype=np.uint8, count=L * m, offset=4 * m).reshape(m, L)
        s = np.unpackbits(np.frombuffer(buf, dtype=np.uint8, offset=(4 + L) * m), count=m)
        G = dg.magnitude(W, D8, src)
        neg = s.astype(bool)
        keep = ~(neg & (G == 0))  # (-, 0) rejection: zero must not be produced twice
        return np.where(neg, -G, G)[keep]

    return _collect(n, 0.5 if L == 0 else 0.75, draw)


# --------------------------------------------------------------------------------------------
# Lattice Laplace on Z^d


def _round_down_float(a: Fraction) -> Fraction:
    f = float(a)
    if Fraction(f) > a:
        f = math.nextafter(f, 0.0)
    return Fraction(f)


@lru_cache(maxsize=256)
def _lattice_params(a: Fraction, d: int) -> tuple[Fraction, Fraction]:
    """Exact float ``a`` (rounded down) and the dyadic rate ``lam <= a / sqrt(d)`` (~40 bits)."""
    a = _round_down_float(a)
    # Choose k so lam has about 40 significant bits: a/sqrt(d) ~ 2**(e-1).
    _, ex = math.frexp(float(a))
    k = max(0, 40 - ex)
    x = a * a * (1 << (2 * k)) / d
    lam = Fraction(math.isqrt(x.numerator // x.denominator), 1 << k)
    assert lam * lam * d <= a * a and lam > 0
    return a, lam


def _bad_d(d: Any) -> None:
    raise InvalidInputError(
        f"d={d!r} must be an integer from 1 to {D_MAX} (docs/noise.md). Nothing was charged."
    )


@lru_cache(maxsize=1024)
def _lattice_plan(num: int, den: int, d: int) -> tuple:
    """Everything :func:`lattice_laplace` derives from ``(a, d)`` (read-only, cached)."""
    a = as_fraction(Fraction(num, den), "a", A_MIN, A_MAX)  # raises (uncached) when out of range
    a, lam = _lattice_params(a, d)
    geo = block_geometric(lam)
    lamB = geo.lamB
    # lamB_f: exact (a ~40-bit dyadic); a_f: exact by construction.
    return a, geo, lamB, float(lamB), float(a), a * a


def lattice_laplace(a: Any, d: int, n: int, bits: BitSource | None) -> np.ndarray:
    """Exact lattice Laplace ``P(k) ∝ exp(-a ||k||_2)`` on ``Z^d``, ``d <= 4`` (``docs/noise.md``).

    Per-axis design-B proposals at the dyadic rate ``lam <= a / sqrt(d)`` (no per-axis acceptance)
    and one joint exact Bernoulli(exp(-(a ||k||_2 - lam B sum V))). ``a = eps g`` in lattice units;
    it is rounded **down** to a float (more noise) if it is not one. The release wrappers calibrate
    ``a`` per ``docs/noise.md`` and charge eps-GP w.r.t. the metric ``d_r``.

    Parameters
    ----------
    a : Fraction, int or float
        Rate in lattice units, range ``[2**-24, 2**4]`` (``docs/noise.md``).
    d : int
        Dimension, 1 to 4.
    n : int
        Number of points.
    bits : BitSource or None
        Randomness; None is the OS CSPRNG.

    Returns
    -------
    numpy.ndarray
        ``int64[n, d]``.
    """
    key = param_key(a)
    if key is None:
        fr = as_fraction(a, "a", A_MIN, A_MAX)
        key = (fr.numerator, fr.denominator)
    if not (type(d) is int and 1 <= d <= D_MAX):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= int(d) <= D_MAX:
            as_fraction(a, "a", A_MIN, A_MAX)  # a bad ``a`` is reported first, as before
            _bad_d(d)
        d = int(d)
    plan = _lattice_plan(key[0], key[1], d)
    n = check_n(n)
    src = resolve_rng(bits)
    if n == 0:
        return np.empty((0, d), dtype=np.int64)
    a, geo, lamB, lamB_f, a_f, a2 = plan
    from gpframe.mechanisms.noise import kernels

    big_v = BIG_K // geo.B - 1  # V below this keeps every |k_i| <= B (V + 1) < BIG_K

    def draw(m: int) -> np.ndarray:
        k, _, V, w1 = geo.propose(m * d, src, n_u16=m)
        # One compiled pass per row (kernels.planar_bounds): N = sum k_i^2, vs = sum V_i,
        # gamma = a sqrt(N) - lamB vs within 7u r; the 2^-44 r margin (and its own rounding)
        # dominates.
        vs = np.empty(m, dtype=np.int64)
        glo = np.empty(m, dtype=np.float64)
        ghi = np.empty(m, dtype=np.float64)
        vmax = kernels.planar_bounds(
            k, V, d, a_f, lamB_f, 1.0 - _PLANAR_MARGIN, 1.0 + _PLANAR_MARGIN, vs, glo, ghi
        )
        k = k.reshape(m, d)
        if ieee.EXACT_ONLY:  # no float decides: integer upper bounds a ||k||_1 >= gamma
            rows = np.arange(m)
        elif vmax >= big_v:  # float N might not be exact: decide those rows exactly
            rows = np.flatnonzero(np.abs(k).max(axis=1) >= BIG_K)
        else:
            rows = np.empty(0, dtype=np.int64)
        for i in rows.tolist():
            l1 = sum(abs(int(v)) for v in k[i])
            glo[i] = 0.0
            ghi[i] = math.nextafter(float(math.ceil(a * l1)), math.inf)

        def exact_less(i: int, W: int, mm: int, M: int, j: int) -> bool:
            # U M + j < a sqrt(N) - c  <=>  (U M + j + c)^2 < a^2 N  (both sides >= 0)
            Nn = sum(int(v) * int(v) for v in k[i])
            c = lamB * int(vs[i]) + j
            target = a2 * Nn
            m_max = mm + 64 * MAX_EXTENSIONS
            while True:
                hi = Fraction((W + 1) * M, 1 << mm) + c
                if hi * hi <= target:
                    return True
                lo = Fraction(W * M, 1 << mm) + c
                if lo * lo >= target:
                    return False
                if mm >= m_max:  # as in lazy_rational_less: below 2**-400 with working bits
                    raise broken_source(refine_msg(MAX_EXTENSIONS), "2**-400")
                W = (W << 64) | src.int_bits(64)
                mm += 64

        acc = bern_exp_neg(glo, ghi, exact_less, src, w1, overwrite=True)
        return np.compress(acc, k, axis=0)  # k[acc], without numpy's slow 2-D boolean index

    return _collect(n, ACC_LATTICE[d], draw, width=d, chunk=CHUNK // d)
