"""Vectorised exact Bernoulli(exp(-gamma)): the batch form of CKS20 Alg. 1.

See ``docs/noise.md``; Canonne, Kamath & Steinke, 'The Discrete Gaussian for Differential Privacy'
(2020), Alg. 1.

Inputs are float arrays ``glo <= gamma <= ghi`` (certified enclosures, ``docs/noise.md``) and an
exact callback ``exact_less(i, W, m, M)`` that decides ``U * M < gamma_i`` for a uniform ``U`` whose
first ``m`` bits are ``W``, drawing more bits of the same ``U`` when needed.

First the integer part: ``j = floor(glo)`` is an integer with ``j <= gamma`` (a float's floor
is exact), so ``exp(-gamma) = exp(-j) * exp(-(gamma - j))``. Bernoulli(exp(-j)) is a
constant-probability draw (one 32-bit word against ``floor(exp(-j) 2**32)``, ties by
:class:`LazyUniform`), and the remainder's enclosure ``[glo - j, ghi - j]`` is exact by
Sterbenz's lemma. As in Canonne, Kamath & Steinke (2020), who multiply ``floor(gamma)``
Bernoulli(exp(-1)) draws, this leaves a remainder below 1 (up to the margin), so one vectorised step
replaces the ``ceil(gamma)`` sequential pieces of ``docs/noise.md`` for large gamma.

The remainder ``r`` is split into ``n_i = max(1, ceil(rhi_i))`` pieces ``r / n_i <= 1`` (almost
always ``n_i = 1``), and Canonne, Kamath & Steinke (2020) Alg. 1 runs on each piece: ``K = 1``;
while Bernoulli(r / (n_i K)) succeeds, ``K += 1``; the piece succeeds iff ``K`` is odd. Every
Bernoulli draw is one certified 16-bit draw (Lemma 1, ``docs/noise.md``):

* ``(W + 1) * M / 2**16 <= glo`` proves ``U * M < gamma`` (success);
* ``W * M / 2**16 >= ghi`` proves ``U * M >= gamma`` (failure);
* otherwise ``exact_less(i, W, m, M, j)`` decides ``U * M + j < gamma_i`` in Python integers.

Both products on the left are exact in float64 (integers below 2**53 scaled by a power of two), so
no rounding decides anything.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from gpframe.mechanisms.noise.bits import BitSource, broken_source
from gpframe.mechanisms.noise.exact import MAX_EXTENSIONS, ExactProb, LazyUniform, refine_msg

__all__ = ["bern_exp_neg", "enclose", "lazy_rational_less"]

# Lemma 1 needs 2^16 M < 2^53; beyond this M the draw goes straight to the exact routine.
_M_GUARD = float(2**36)
_TWO16 = 65536.0

ExactLess = Callable[[int, int, int, int, int], bool]

#: Rounds of one piece's Bernoulli loop before the source is declared broken (see _check_rounds).
K_MAX = 128.0

# floor(exp(-j) 2**32) for j = 0..23 (exact); zero from j = 23 on (exp(-23) 2**32 < 1).
_J_MAX = 24
_EXP_INT: dict[int, ExactProb] = {}
_T_INT: np.ndarray | None = None


def _exp_int(j: int) -> ExactProb:
    p = _EXP_INT.get(j)
    if p is None:
        p = _EXP_INT[j] = ExactProb.exp_neg(Fraction(j))
    return p


def _int_thresholds() -> np.ndarray:
    global _T_INT
    if _T_INT is None:
        t = np.array([_exp_int(j).floor(32) for j in range(_J_MAX)] + [0], dtype=np.int64)
        t.setflags(write=False)
        _T_INT = t
    return _T_INT


def enclose(glo: np.ndarray, ghi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the enclosure actually used. Identity; tests patch it to force the exact paths."""
    return glo, ghi


def lazy_rational_less(W: int, m: int, M: int, num: int, den: int, bits: BitSource) -> bool:
    """Decide ``U * M < num / den`` exactly, ``U`` uniform with ``m``-bit prefix ``W``.

    See ``docs/noise.md``.
    """
    m_max = m + 64 * MAX_EXTENSIONS
    while True:
        rhs = num << m
        if (W + 1) * M * den <= rhs:
            return True
        if W * M * den >= rhs:
            return False
        if m >= m_max:
            raise broken_source(refine_msg(MAX_EXTENSIONS), "2**-400")
        W = (W << 64) | bits.int_bits(64)
        m += 64


def _check_rounds(K: float) -> None:
    """Raise when a Bernoulli(exp(-gamma)) draw reaches round ``K_MAX`` (a stuck source).

    Round K of Canonne, Kamath & Steinke (2020) Alg. 1 (on one piece, gamma/n_i <= 1) continues with
    probability at most 1/K, so a draw reaches round K_MAX with probability at most 1/(K_MAX - 1)! <
    2**-700.
    """
    if K >= K_MAX:
        raise broken_source(f"a Bernoulli(exp(-gamma)) draw reached round {int(K)}", "2**-700")


def _decide(
    w: np.ndarray,
    M: np.ndarray | float | None,
    guard: bool,
    glo16: np.ndarray,
    ghi16: np.ndarray,
    idx: np.ndarray | None,
    exact_less: Callable[[int, int, int, int], bool],
) -> np.ndarray:
    """One certified draw per element: returns ``U * M < gamma`` as a bool array.

    ``M`` is None (every M is 1), one float shared by all elements, or an array. ``idx`` maps
    positions to the caller's element numbers (None: the identity).
    """
    wf = w.astype(np.float64)
    if M is None:  # every M is 1
        fail = wf >= ghi16
        wf += 1.0
        succ = wf <= glo16
    else:
        wf *= M
        fail = wf >= ghi16
        wf += M
        succ = wf <= glo16
    # Decided elements: succ | fail (reusing fail's buffer); the rest are ambiguous.
    decided = np.logical_or(succ, fail, out=fail)
    if M is not None and guard:
        decided &= M < _M_GUARD
    if not decided.all():
        for j in (~decided).nonzero()[0].tolist():
            i = j if idx is None else int(idx[j])
            Mj = 1 if M is None else int(M) if isinstance(M, float) else int(M[j])
            succ[j] = exact_less(i, int(w[j]), 16, Mj)
    return succ


def bern_exp_neg(
    glo: np.ndarray,
    ghi: np.ndarray,
    exact_less: ExactLess,
    bits: BitSource,
    w1: np.ndarray | None = None,
    overwrite: bool = False,
) -> np.ndarray:
    """Return a bool array: element ``i`` is True with probability exactly ``exp(-gamma_i)``.

    Parameters
    ----------
    glo, ghi : float64 arrays
        Certified bounds ``0 <= glo <= gamma <= ghi``.
    exact_less : callable
        ``exact_less(i, W, m, M, j)`` decides ``U * M + j < gamma_i`` from the ``m``-bit prefix
        ``W`` (``j`` is the integer part already taken out).
    bits : BitSource
        The source of the 16-bit draws.
    w1 : uint16 array, optional
        Pre-drawn words for the first round (saves one request to the source).
    overwrite : bool
        The caller's ``glo`` and ``ghi`` are scratch: reuse their buffers (fewer temporaries).
    """
    glo, ghi = enclose(glo, ghi)
    n = glo.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    # ghi < 1 everywhere (always for the Laplace deficit, gamma <= 1/16): no integer part and one
    # piece each, decided by a single reduction instead of the full-size floor and piece arrays.
    pmax = float(ghi.max())
    int_fail = None
    if overwrite:
        glo16, ghi16 = glo, ghi
    else:
        glo16, ghi16 = glo.copy(), ghi.copy()
    if pmax < 1.0:
        pieces = None
        outer0 = exact_less

        def exact_less(i: int, W: int, m: int, M: int) -> bool:
            return outer0(i, W, m, M, 0)

    else:
        # Integer part: Bernoulli(exp(-j)) with j = floor(glo) <= gamma, for the elements with
        # j >= 1 (glo >= 1); subtracting j = 0 from the others would change nothing.
        ji = (glo >= 1.0).nonzero()[0]
        jfi = np.floor(glo[ji])
        if ji.size:
            jj = np.minimum(jfi, float(_J_MAX)).astype(np.int64)  # only indexes the table
            W = bits.arr(ji.size, np.uint32).astype(np.int64)
            T = _int_thresholds()[jj]
            ok = W < T
            for t in (W == T).nonzero()[0].tolist():
                ok[t] = LazyUniform(int(W[t]), 32, bits).less_than(_exp_int(int(jfi[t])))
            int_fail = ji[~ok]
            # Remainder bounds: glo - j is exact (Sterbenz: j <= glo < j + 1 <= 2j); ghi - j is
            # exact when ghi <= 2j, otherwise rounded up by one ulp to stay an upper bound.
            hj = ghi[ji]
            wide = hj > 2.0 * jfi
            hj -= jfi
            if wide.any():
                hj[wide] = np.nextafter(hj[wide], np.inf)
            ghi16[ji] = hj
            glo16[ji] = glo16[ji] - jfi
        outer = exact_less

        def exact_less(i: int, W: int, m: int, M: int) -> bool:
            pos = int(np.searchsorted(ji, i))
            j = int(jfi[pos]) if pos < ji.size and ji[pos] == i else 0  # integer-valued: exact
            return outer(i, W, m, M, j)

        # The remainder's piece count from its upper bound (None: one piece each).
        pmax = float(ghi16.max())
        pieces = np.maximum(np.ceil(ghi16), 1.0) if pmax > 1.0 else None
    glo16 *= _TWO16  # exact: a power of two
    ghi16 *= _TWO16
    if w1 is None:
        w1 = bits.arr(n, np.uint16)
    # Round 1 (K = 1, M = n_i): a failure ends piece 1 with K odd, i.e. the piece succeeds.
    s = _decide(w1, pieces, pmax >= _M_GUARD, glo16, ghi16, None, exact_less)
    if pieces is None:  # one piece each: failures are accepted, successes continue with K = 2
        out = ~s
        idx = s.nonzero()[0]
        if idx.size:
            # The general loop below with n_i = 1 for every survivor: M = K, a piece that ends
            # ends the element, and the survivors are exactly the successes. All survivors
            # share the same K (2 in the first round, +1 per round), so K is one float. Same
            # draws, same decisions, fewer temporaries.
            kk = 2.0
            lo, hi = glo16[idx], ghi16[idx]
            while idx.size:
                _check_rounds(kk)
                w = bits.arr(idx.size, np.uint16)
                s = _decide(w, kk, kk >= _M_GUARD, lo, hi, idx, exact_less)
                if kk % 2.0 == 1.0:  # failure with K odd: accepted
                    out[idx[~s]] = True
                kk += 1.0
                idx, lo, hi = idx[s], lo[s], hi[s]
        if int_fail is not None:
            out[int_fail] = False
        return out
    one_piece = pieces == 1.0
    out = ~s & one_piece
    idx = (s | ~one_piece).nonzero()[0]
    si = s[idx]
    p = pieces[idx]
    K = np.where(si, 2.0, 1.0)
    left = p - ~si
    lo, hi = glo16[idx], ghi16[idx]
    # General loop on the survivors, whose state is kept compacted: (idx, n_i, K, pieces left).
    while idx.size:
        _check_rounds(float(K.max()))
        M = p * K
        w = bits.arr(idx.size, np.uint16)
        s = _decide(w, M, bool(M.max() >= _M_GUARD), lo, hi, idx, exact_less)
        piece_ok = ~s & ((K % 2.0) == 1.0)  # failure with K odd: this piece succeeded
        left -= piece_ok
        done_ok = piece_ok & (left == 0.0)
        out[idx[done_ok]] = True
        # Survivors: successes (K += 1) and finished pieces with more to go (K = 1).
        keep = s | (piece_ok & ~done_ok)
        K = np.where(s, K + 1.0, 1.0)[keep]
        idx, p, left, lo, hi = idx[keep], p[keep], left[keep], lo[keep], hi[keep]
    if int_fail is not None:
        out[int_fail] = False
    return out
