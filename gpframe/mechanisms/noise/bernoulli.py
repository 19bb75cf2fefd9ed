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

# Lemma 1 needs 2^16 M < 2^53; beyond M = 2**36 (kernels.M_GUARD) a draw goes straight to
# the exact routine.

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

    Notes
    -----
    The loops run compiled (:mod:`~gpframe.mechanisms.noise.kernels`); the bits are requested
    here, between kernel calls: the integer part's uint32 words (one per element with ``glo >=
    1``), its ties, ``w1`` if not given, then one uint16 word per survivor and round, each
    round's ambiguous draws decided by ``exact_less`` in element order before the next request.
    One piece per element when every ``ghi < 1`` after the integer part is the general loop
    with ``n_i = 1``: the same draws and decisions.
    """
    from gpframe.mechanisms.noise import kernels

    glo, ghi = enclose(glo, ghi)
    n = glo.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    if not overwrite:
        glo, ghi = glo.copy(), ghi.copy()
    glo = np.ascontiguousarray(glo, dtype=np.float64)
    ghi = np.ascontiguousarray(ghi, dtype=np.float64)
    # Integer part: Bernoulli(exp(-j)) with j = floor(glo) <= gamma, for the elements with
    # j >= 1 (glo >= 1, only when some ghi >= 1); subtracting j = 0 from the others would change
    # nothing. jv holds each element's j (0 for the others) for the exact decisions.
    jv = np.zeros(n, dtype=np.float64)
    ji = np.empty(n, dtype=np.int64)
    nji = kernels.int_rows(glo, ghi, ji)
    ji = ji[:nji]
    W = bits.arr(nji, np.uint32) if nji else np.empty(0, dtype=np.uint32)
    intok = np.ones(n, dtype=bool)  # False: the integer part failed
    ties = np.empty(nji, dtype=np.int64)
    dec = np.empty(n, dtype=np.int8)  # decisions left to the exact path
    out = np.zeros(n, dtype=bool)
    nt, pmax = kernels.bern_prep(W, ji, _int_thresholds(), glo, ghi, jv, intok, ties)
    for t in ties[:nt].tolist():  # integer-part words tied with floor(exp(-j) 2**32)
        i = int(ji[t])
        intok[i] = LazyUniform(int(W[t]), 32, bits).less_than(_exp_int(int(jv[i])))
    if w1 is None:
        w1 = bits.arr(n, np.uint16)
    # The rounds' state, compacted in place as elements finish: element numbers and the bounds
    # times 2**16 (in glo, ghi); with several pieces somewhere, also n_i, K and pieces left.
    idx = np.arange(n, dtype=np.int64)
    if pmax > 1.0:
        p = np.empty(n, dtype=np.float64)
        K = np.empty(n, dtype=np.float64)
        left = np.empty(n, dtype=np.float64)
        kernels.bern_pieces(glo, ghi, p, K, left)
        guard = pmax >= kernels.M_GUARD  # round 1 keeps M >= 2**36 from the floats
        _rounds(w1, n, idx, p, K, left, glo, ghi, guard, dec, out, jv, exact_less, bits)
    else:
        kernels.scale16(glo, ghi)
        _rounds1(w1, n, idx, glo, ghi, dec, out, jv, exact_less, bits)
    out &= intok
    return out


def _exact(w, t0, size, dec, idx, M, jv, exact_less):  # type: ignore[no-untyped-def]
    # A round's ambiguous draws (dec == 2 from t0 on), decided exactly in element order.
    for t in np.flatnonzero(dec[t0:size] == 2).tolist():
        t += t0
        i = int(idx[t])
        Mt = M if isinstance(M, int) else int(M[t])
        dec[t] = exact_less(i, int(w[t]), 16, Mt, int(jv[i]))


def _rounds1(w, size, idx, lo, hi, dec, out, jv, exact_less, bits, kk=1.0):  # type: ignore[no-untyped-def]
    """Run the rounds when every element is one piece: ``M = K``, the same for all survivors.

    ``kk`` is the first round's K: 1, or 2 when round 1 ran elsewhere (``laplace_fused``).
    """
    from gpframe.mechanisms.noise import kernels

    # round 1 (kk = 1): a failure ends piece 1 with K odd, i.e. the element is accepted
    while True:
        got, t0 = kernels.bern_round1(w, size, idx, lo, hi, kk, dec, out, False, 0, 0)
        if t0 < size:
            _exact(w, t0, size, dec, idx, int(kk), jv, exact_less)
            got, _ = kernels.bern_round1(w, size, idx, lo, hi, kk, dec, out, True, t0, got)
        size = got
        if not size:
            return
        kk += 1.0
        _check_rounds(kk)
        w = bits.arr(size, np.uint16)


def _rounds(  # type: ignore[no-untyped-def]
    w, size, idx, p, K, left, lo, hi, guard, dec, out, jv, exact_less, bits
):
    """Run the general rounds: ``M = n_i K`` per survivor (:func:`kernels.bern_round`)."""
    from gpframe.mechanisms.noise import kernels

    while True:  # round 1: K = 1, M = n_i
        got, t0, mmax, kmax = kernels.bern_round(
            w, size, idx, p, K, left, lo, hi, guard, dec, out, False, 0, 0, 0.0, 0.0
        )
        if t0 < size:
            _exact(w, t0, size, dec, idx, p[:size] * K[:size], jv, exact_less)
            got, _, mmax, kmax = kernels.bern_round(
                w, size, idx, p, K, left, lo, hi, guard, dec, out, True, t0, got, mmax, kmax
            )
        size = got
        if not size:
            return
        _check_rounds(kmax)
        guard = mmax >= kernels.M_GUARD
        w = bits.arr(size, np.uint16)
