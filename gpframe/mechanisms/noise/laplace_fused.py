"""Design-B discrete Laplace: proposals, enclosures and the first acceptance round in one pass.

See ``docs/noise.md`` (block-geometric proposal, certified float comparisons, the batch form of
Canonne, Kamath & Steinke (2020) Alg. 1); the sampler is
:func:`gpframe.mechanisms.noise.laplace.discrete_laplace`.

The same algorithm, bits and decisions as the staged path (``BlockGeometric.place``, then
``kernels.scaled_bounds``, then ``bernoulli.bern_exp_neg``), which wrote a dozen arrays of the
batch's length and read them back, stage after stage: at the 10⁴–10⁵ draws of a long k-PNN scan
that memory traffic cost more than the arithmetic. Here one compiled loop reads each proposal's
words once, places V by the table, forms ``k``, the deficit ``e``, the enclosure of γ = e·λ and
decides the first Bernoulli round from the pre-drawn 16-bit word, with the same IEEE operations
in the same order (so the same floats and the same decisions). It keeps ``k``, an accepted flag,
and the few survivors of round 1 (probability ≤ λB ≤ 1/16 each).

It draws no bit itself. When the staged path would have drawn bits before round 2 (a word tied
with a V threshold, or an enclosure reaching 1, which would take the integer part), the loop
gives up before anything is decided and the caller runs the staged path on the same words.
Round 1's ambiguous draws (about one in 2¹⁶) are decided exactly by the caller in element order,
as ``bern_exp_neg`` does, and the later rounds run in ``bernoulli._rounds1``. Nothing here
releases or charges: noise scale 1/λ lattice units, charge by the caller (``docs/noise.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpframe.mechanisms.compiled import njit
from gpframe.mechanisms.noise import bernoulli, geometric

__all__ = ["accept", "first_round", "usable"]

#: ``bernoulli.enclose`` as shipped (tests replace it to force the exact paths)
_ENCLOSE = bernoulli.enclose


class _NoIntegerPart:
    """``jv`` of ``bern_exp_neg`` when every γ < 1: the integer part is 0 for every element."""

    def __getitem__(self, i: int) -> float:
        return 0.0


_JV = _NoIntegerPart()


def usable() -> bool:
    """Whether the one-pass path applies: no test hook forces the staged exact paths."""
    return bernoulli.enclose is _ENCLOSE and not geometric.FORCE_EXACT


@njit(nogil=True)
def first_round(  # type: ignore[no-untyped-def]
    table, asc, vmax, W, RS, w1, L, mask, lam_f, lo_f, hi_f, k, out, sidx, slo, shi, samb
):  # fmt: skip
    """One pass over the proposals; returns the survivors of round 1, or −1 (staged path).

    Per proposal i, as the staged kernels: ``V`` by the bucket table (a binary search of the
    ascending thresholds in flagged buckets; a word equal to a threshold, or 0, returns −1),
    ``k = ((V << L) | R) ^ −s`` and ``e = R + s`` (``kernels.proposal_ke``), ``g = e·lam_f``,
    ``glo = g·lo_f``, ``ghi = g·hi_f`` (``kernels.scaled_bounds``; −1 when ``ghi >= 1``: the
    integer part), the bounds times 2¹⁶ (``kernels.scale16``) and round 1 at K = 1
    (``kernels.bern_round1``): ``w + 1 <= lo`` succeeds (a survivor), ``w < hi`` otherwise is
    ambiguous (a survivor flagged in ``samb``), else the proposal is accepted (``out[i]``).
    Survivors are listed in element order: ``sidx``, ``slo``, ``shi``; more than they hold
    (each survives with probability ≤ 1/16) also returns −1.
    """
    ns = 0
    cap = sidx.size
    for i in range(W.size):
        w = np.int64(W[i])
        v = np.int64(table[w >> 16])
        if v < 0:
            lo, hi = 0, asc.size  # first position with asc[pos] > w (searchsorted side="right")
            while lo < hi:
                mid = (lo + hi) >> 1
                if asc[mid] <= w:
                    lo = mid + 1
                else:
                    hi = mid
            if w == 0 or (lo > 0 and asc[lo - 1] == w):
                return -1
            v = vmax - lo
        rs = np.int64(RS[i])
        r = rs & mask
        s = (rs >> L) & 1
        k[i] = ((v << L) | r) ^ -s
        g = np.float64(r + s) * lam_f
        glo = g * lo_f
        ghi = g * hi_f
        if not ghi < 1.0:
            return -1
        glo = glo * 65536.0  # exact: a power of two
        ghi = ghi * 65536.0
        wf = np.float64(w1[i]) * 1.0
        if wf + 1.0 <= glo:
            amb = False
        elif wf < ghi:
            amb = True
        else:
            out[i] = True
            continue
        out[i] = False
        if ns == cap:
            return -1
        samb[ns] = amb
        sidx[ns] = i
        slo[ns] = glo
        shi[ns] = ghi
        ns += 1
    return ns


def accept(
    plan: Any,
    views: dict[str, np.ndarray],
    exact_less: Callable[[int, int, int, int, int], bool],
    bits: Any,
    rel: float,
) -> np.ndarray | None:
    """Return the accepted proposals (``k[acc]``) of one design-B batch, or None (staged path).

    ``views`` are the words of ``BlockGeometric.words`` (``n_u16`` = batch size: ``w`` is round
    1's words); ``plan`` the sampler's ``_LaplacePlan``; ``exact_less`` decides an ambiguous draw
    as in ``bern_exp_neg``; ``rel`` the enclosure's relative margin (γ·(1 ∓ rel)). None is
    returned before any bit is drawn.
    """
    geo, vt = plan.geo, plan.geo.vt
    W, RS, w1 = views["W"], views["RS"], views["w"]
    m = W.size
    k = np.empty(m, dtype=np.int64)
    out = np.empty(m, dtype=bool)  # every entry is written by first_round
    cap = m // 8 + 64  # survivors ~ Binomial(m, <= 1/16); more take the staged path
    sidx = np.empty(cap, dtype=np.int64)
    slo = np.empty(cap, dtype=np.float64)
    shi = np.empty(cap, dtype=np.float64)
    samb = np.empty(cap, dtype=np.bool_)
    ns = first_round(vt.table, vt.asc, vt.vmax, W, RS, w1, geo.L, geo._mask, plan.lam_f,
                     1.0 - rel, 1.0 + rel, k, out, sidx, slo, shi, samb)  # fmt: skip
    if ns < 0:
        return None
    if ns:
        amb = np.flatnonzero(samb[:ns])
        if amb.size:  # decided exactly in element order, as bern_exp_neg's _exact does
            keep = np.ones(ns, dtype=bool)
            for t in amb.tolist():
                i = int(sidx[t])
                if not exact_less(i, int(w1[i]), 16, 1, 0):
                    keep[t] = False
                    out[i] = True  # a failure at K = 1 (odd): accepted
            sidx, slo, shi = sidx[:ns][keep], slo[:ns][keep], shi[:ns][keep]
            ns = sidx.size
    if ns:  # rounds 2, 3, ...: as bern_exp_neg continues after round 1 (jv = 0: no integer part)
        bernoulli._check_rounds(2.0)
        w = bits.arr(ns, np.uint16)
        dec = np.empty(ns, dtype=np.int8)
        bernoulli._rounds1(w, ns, sidx, slo, shi, dec, out, _JV, exact_less, bits, kk=2.0)
    return k[out]
