"""Exact discrete Laplace draws at many different rates in one vectorised call.

See ``docs/noise.md`` (discrete Laplace, "Many rates in one call").

:func:`discrete_laplace_rates` returns one draw per entry of ``lams``, entry ``i`` with law
``P(k) ∝ exp(-lam_i |k|)`` exactly. A release of many cells that each have their own budget
(``grid_stats`` with a per-user total) would otherwise call the sampler once per cell.

The proposal is design B's block geometric (``docs/noise.md``) at the rate ``lam0_i = 2**-t_i``,
the largest power of two ``<= lam_i``, with the block ``B_i = 2**(t_i - 4)``: then
``lam0_i B_i = 1/16`` for **every** row, so one V table (``Q = exp(-1/16)``) serves all rows and
only the number of raw block bits differs. A proposal ``k`` (``|k| = B V + e``) has probability
proportional to ``exp(-lam0 B V)``; it is accepted with one exact Bernoulli(exp(-x)) of

    x = lam |k| - V/16 = lam0 e + (lam - lam0) |k|  >=  0,

which leaves ``P(k) ∝ exp(-lam |k|)`` (the joint acceptance of the lattice Laplace sampler, with
the rate gap of design B's deficit and of the power-of-two rounding in one exponent). Since
``lam0 <= lam < 2 lam0`` a proposal is accepted with probability above 0.48. Each pending row
gets two proposals in the first round (then 4, 8, ... up to 64 per round) and keeps its first
accepted one (rejection sampling: the first accepted proposal of an independent sequence has the
target law, however the sequence is cut into rounds).

The float enclosure of ``x``: ``lam0 e`` is exact (an integer times a power of two), ``|k| <
2**48`` is exact, ``lam - lam0`` is rounded once (Python's correctly rounded integer division);
one product and one sum of non-negative terms give ``x`` within ``3u`` relative, inside the
``2**-50`` (``8u``) margin of design B. Undecided Bernoulli draws go to exact integer arithmetic
(:func:`gpframe.mechanisms.noise.bernoulli.lazy_rational_less`).

Rows at coarse rates (``lam >= 1/8``), rows whose rate gap would be a subnormal float, and every
row when the IEEE self-test failed are drawn by :func:`gpframe.mechanisms.noise.discrete_laplace`,
one call per distinct rate, after the vectorised rows.

>>> from fractions import Fraction
>>> k = discrete_laplace_rates([Fraction(1, 300), Fraction(1, 7000), Fraction(1, 3)], None)
>>> k.dtype, k.shape
(dtype('int64'), (3,))
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.mechanisms.noise import ieee
from gpframe.mechanisms.noise.bernoulli import bern_exp_neg, lazy_rational_less
from gpframe.mechanisms.noise.bits import BitSource, broken_source, resolve_rng
from gpframe.mechanisms.noise.exact import as_fraction
from gpframe.mechanisms.noise.geometric import v_table
from gpframe.mechanisms.noise.laplace import (
    _REL,
    LAM_MAX,
    LAM_MIN,
    MAX_DRY_PROPOSALS,
    discrete_laplace,
    param_key,
)

__all__ = ["discrete_laplace_rates"]

#: lam0 B of every vectorised row: the one V table's rate
_LAM_B = Fraction(1, 16)
#: proposals per pending row in the first round; doubled each round up to the maximum
_PER_ROW = 2
_PER_ROW_MAX = 64
#: rate gaps below this float are subnormal-prone: such rows take the per-rate sampler
_TINY = 2.0**-1000
#: |k| stays below this (B <= 2**36, V below the V table's cap of 2048): floats of |k| are exact
_K_EXACT = 1 << 52


def _rate(lam: Any) -> tuple[int, int]:
    """``(num, den)`` of a checked rate in [2**-40, 2**10] (``InvalidInputError`` otherwise)."""
    key = param_key(lam)
    if key is not None:
        num, den = key
        if num > 0 and num << 40 >= den and num <= den << 10:
            return num, den
    fr = as_fraction(lam, "lam", LAM_MIN, LAM_MAX)
    return fr.numerator, fr.denominator


def discrete_laplace_rates(
    lams: Any, bits: BitSource | None, *, index: np.ndarray | None = None
) -> np.ndarray:
    """One exact discrete Laplace draw per rate: entry ``i`` has ``P(k) ∝ exp(-lams[i] |k|)``.

    See the module docstring and ``docs/noise.md``. Callers calibrate each ``lam_i = eps_i /
    Delta_i`` in lattice units and charge each row its own ``eps_i``, exactly as for
    :func:`gpframe.mechanisms.noise.discrete_laplace` (whose law every row has).

    Parameters
    ----------
    lams : sequence of Fraction, int or float
        One rate per draw, converted exactly; each in ``[2**-40, 2**10]``. Rates may repeat.
    bits : BitSource or None
        Randomness; None is the OS CSPRNG.
    index : int array, optional
        Draw one value per entry of ``index``, entry ``i`` at the rate ``lams[index[i]]``
        (``lams`` then lists distinct rates, each checked once).

    Returns
    -------
    numpy.ndarray
        ``int64[len(lams)]`` (``int64[len(index)]`` with ``index``).

    Raises
    ------
    InvalidInputError
        A rate not finite or out of range, before any bit is drawn.
    """
    # one check and one plan per distinct rate (a release may repeat a rate many times)
    plans: dict[tuple[type, Any], int] = {}
    rates: list[tuple[int, int]] = []
    t_l: list[int] = []
    gap_l: list[float] = []
    code = np.empty(len(lams), dtype=np.int64)
    dedupe = index is None  # with an index, ``lams`` lists each rate once already
    for i, x in enumerate(lams):
        key = (type(x), x) if dedupe else None
        try:
            c = plans.get(key) if key is not None else None
        except TypeError:  # unhashable: not a number, refused by the check
            c, key = None, None
        if c is None:
            num, den = _rate(x)
            c = len(rates)
            if key is not None:
                plans[key] = c
            rates.append((num, den))
            ti, d = _plan(num, den)
            t_l.append(ti)
            gap_l.append(d)
        code[i] = c
    if index is not None:
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= code.size):
            raise InvalidInputError(
                f"index must hold positions of lams (0..{code.size - 1}). Nothing was charged."
            )
        code = code[idx]
    src = resolve_rng(bits)
    n = code.size
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    t = np.array(t_l, dtype=np.int64)[code]
    gap = np.array(gap_l, dtype=np.float64)[code]
    fast = t > 0
    rows = np.flatnonzero(fast)
    if rows.size:
        out[rows] = _vectorised(t[rows], gap[rows], [rates[c] for c in code[rows].tolist()], src)
    slow: dict[int, list[int]] = {}
    for i in np.flatnonzero(~fast).tolist():
        slow.setdefault(int(code[i]), []).append(i)
    for c, idx in slow.items():  # in order of first appearance
        out[idx] = discrete_laplace(Fraction(*rates[c]), len(idx), src)
    return out


def _plan(num: int, den: int) -> tuple[int, float]:
    """``(t, lam - 2**-t)`` of a vectorised rate, or ``(0, 0.0)``: the per-rate sampler."""
    if ieee.EXACT_ONLY:
        return 0, 0.0
    # t: the smallest integer with num 2**t >= den, so 2**-t <= lam < 2**-(t-1)
    t = den.bit_length() - num.bit_length()
    if t >= 0 and (num << t) < den:
        t += 1
    if t < 4:  # lam >= 1/8: coarse rates
        return 0, 0.0
    d = ((num << t) - den) / (den << t)  # lam - 2**-t, correctly rounded
    if 0.0 < d < _TINY:
        return 0, 0.0
    return t, d


def _vectorised(
    t: np.ndarray, gap: np.ndarray, rates: list[tuple[int, int]], src: Any
) -> np.ndarray:
    """Draw one value per row (rate ``rates[i]``, ``2**-t[i]`` below it by ``gap[i]``)."""
    vt = v_table(_LAM_B)
    L_all = t - 4  # block bits: B = 2**L, lam0 B = 2**-t 2**(t - 4) = 1/16
    res = np.zeros(t.size, dtype=np.int64)
    pending = np.arange(t.size)
    per, tried = _PER_ROW, 0
    while tried < MAX_DRY_PROPOSALS:
        p = np.repeat(pending, per)
        m = p.size
        buf = src.bytes(14 * m)  # per proposal: 8 bytes R and sign, 4 the V word, 2 round one
        RS = np.frombuffer(buf, dtype=np.uint64, count=m)
        W = np.frombuffer(buf, dtype=np.uint32, count=m, offset=8 * m)
        w1 = np.frombuffer(buf, dtype=np.uint16, count=m, offset=12 * m)
        V = vt.from_words(W, src)
        L = L_all[p]
        rs = (RS >> np.uint64(27)).astype(np.int64)  # 37 raw bits: L <= 36 block bits and a sign
        R = rs & ((np.int64(1) << L) - 1)
        s = (rs >> L) & 1
        G = (V << L) | R
        e = R + s
        absk = G + s  # s = 1 gives k = -G - 1
        if int(absk.max()) >= _K_EXACT:  # pragma: no cover - B (V + 1) < 2**48 by the V cap
            raise GpframeInternalError("a proposal of discrete_laplace_rates is too large.")
        x = np.ldexp(e.astype(np.float64), -(L + 4))  # lam0 e, exact
        x += gap[p] * absk.astype(np.float64)
        glo = x * (1.0 - _REL)
        ghi = np.multiply(x, 1.0 + _REL, out=x)

        def exact_less(
            i: int, Wp: int, mm: int, M: int, j: int, p: np.ndarray = p, V: np.ndarray = V,
            absk: np.ndarray = absk,
        ) -> bool:  # fmt: skip
            # x = lam |k| - V/16 = (16 num |k| - V den) / (16 den); decide U M + j < x
            num, den = rates[int(p[i])]
            top = 16 * num * int(absk[i]) - int(V[i]) * den - 16 * j * den
            return lazy_rational_less(Wp, mm, M, top, 16 * den, src)

        acc = bern_exp_neg(glo, ghi, exact_less, src, w1, overwrite=True).reshape(-1, per)
        k = (G ^ -s).reshape(-1, per)
        got = acc.any(axis=1)
        first = acc.argmax(axis=1)
        done = np.flatnonzero(got)
        res[pending[done]] = k[done, first[done]]
        pending = pending[~got]
        if not pending.size:
            return res
        # the few rows left get more proposals each: fewer rounds of fixed numpy overhead
        tried += per
        per = min(2 * per, _PER_ROW_MAX)
    raise broken_source(f"{MAX_DRY_PROPOSALS} proposals in a row were all rejected", "2**-1200")
