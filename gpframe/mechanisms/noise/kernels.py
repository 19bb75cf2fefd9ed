"""Compiled inner loops of the exact samplers: the same decisions, fewer passes.

See ``docs/noise.md`` (block-geometric proposal, certified float comparisons, the batch form of
Canonne, Kamath & Steinke (2020) Alg. 1). Each kernel runs, element by element, the integer and
float operations that the array code of :mod:`~gpframe.mechanisms.noise.geometric`,
:mod:`~gpframe.mechanisms.noise.bernoulli` and :mod:`~gpframe.mechanisms.noise.gaussian` ran
before, in the same order and with the same rounding (numba without fast math: IEEE binary64,
round-to-nearest, no fused multiply-add), so every float enclosure is bit-identical and every
decision the same. None of them draws a bit: the callers request the bytes from the
:class:`~gpframe.mechanisms.noise.bits.BitSource` between kernel calls, in the order and sizes
they always did, and decide in Python everything the floats leave open (the tie lists the
kernels return). Per-call cost at DuckDB's 2,048-row batches was many small numpy passes;
here it is one pass per stage.

numba is imported by the first sampler call, not by ``import gpframe``.
"""

from __future__ import annotations

import numpy as np

from gpframe.mechanisms.compiled import njit

__all__ = [
    "bern_pieces",
    "bern_prep",
    "bern_round",
    "bern_round1",
    "compress_into",
    "gauss_bounds",
    "int_rows",
    "planar_bounds",
    "proposal_ke",
    "propose_words",
    "scale16",
    "scaled_bounds",
    "v_words",
]

#: Lemma 1 needs 2**16 M < 2**53 (the value of ``bernoulli._M_GUARD``)
M_GUARD = float(2**36)
#: the integer part's table index is capped here (``bernoulli._J_MAX``)
J_MAX = 24.0


@njit(nogil=True)
def v_words(table, asc, vmax, force, W, V, ties):  # type: ignore[no-untyped-def]
    """``V`` from uint32 words by the bucket table; returns how many ties it wrote to ``ties``.

    A word whose bucket holds a threshold is placed by a binary search of the ascending
    thresholds; a word equal to one of them, or to 0, is a tie that the exact path decides
    (``VTable.v_exact``). ``force`` makes every word a tie (the T-FORCED test hook).
    """
    nt = 0
    for i in range(W.size):
        w = np.int64(W[i])
        v = table[w >> 16]
        if v >= 0 and not force:
            V[i] = v
            continue
        lo, hi = 0, asc.size  # first position with asc[pos] > w (searchsorted side="right")
        while lo < hi:
            mid = (lo + hi) >> 1
            if asc[mid] <= w:
                lo = mid + 1
            else:
                hi = mid
        V[i] = vmax - lo
        if force or w == 0 or (lo > 0 and asc[lo - 1] == w):
            ties[nt] = i
            nt += 1
    return nt


@njit(nogil=True)
def proposal_ke(V, RS, L, mask, k, e):  # type: ignore[no-untyped-def]
    """``k`` and ``e`` of the design-B proposal: ``k = ((V << L) | R) ^ -s``, ``e = R + s``.

    ``R = RS & (B - 1)`` and ``s = (RS >> L) & 1`` (``L = 0``: ``R = 0``, ``s = RS & 1``); a
    shifted sign: ``s = 1`` gives ``~G = -G - 1``.
    """
    for i in range(V.size):
        rs = np.int64(RS[i])
        r = rs & mask
        s = (rs >> L) & 1
        k[i] = ((V[i] << L) | r) ^ -s
        e[i] = r + s


@njit(nogil=True)
def propose_words(table, asc, vmax, force, W, RS, L, mask, V, k, e, ties):  # type: ignore[no-untyped-def]
    """:func:`v_words` and :func:`proposal_ke` in one pass; returns the number of ties.

    A tie's ``k`` and ``e`` are computed from the table's ``V``: the caller decides its ``V``
    exactly and recomputes ``k`` and ``e`` (:func:`proposal_ke`) when there is any.
    """
    nt = v_words(table, asc, vmax, force, W, V, ties)
    proposal_ke(V, RS, L, mask, k, e)
    return nt


@njit(nogil=True)
def gauss_bounds(k, e, dt, N, inv_D, inv_t, lo_f, hi_f, kfast, glo, ghi):  # type: ignore[no-untyped-def]
    """Enclosure of the discrete Gaussian's gamma; returns how many ``|k| >= kfast``.

    ``a = |k| dt - N`` in int64, then ``g = e * inv_t + (a * a) * inv_D`` in float64 and
    ``glo = g lo_f``, ``ghi = g hi_f``: the operations of the array code, in its order. Rows
    with ``|k| >= kfast`` get garbage here (int64 may wrap) and are redone exactly by the caller.
    """
    big = 0
    for i in range(k.size):
        ak = abs(k[i])
        if ak >= kfast:
            big += 1
        a = np.float64(ak * dt - N)
        af = a * a
        af = af * inv_D
        g = np.float64(e[i]) * inv_t
        g = g + af
        glo[i] = g * lo_f
        ghi[i] = g * hi_f
    return big


@njit(nogil=True)
def planar_bounds(k, V, d, a_f, lamB_f, lo_f, hi_f, vs, glo, ghi):  # type: ignore[no-untyped-def]
    """Enclosure of the lattice Laplace's gamma = a ||k||_2 - lamB sum V, row by row.

    ``N = k_0**2 + k_1**2 + ...`` in float64 (in axis order), ``vs = sum V`` in int64, ``r =
    sqrt(N) a``, ``c = vs lamB``, ``glo = max(r lo_f - c, 0)``, ``ghi = r hi_f - c``: the
    operations of the array form, in its order. Returns the largest ``V`` (the caller redoes
    exactly the rows whose float ``N`` might not be exact).
    """
    vmax = 0
    for i in range(vs.size):
        x = np.float64(k[i * d])
        n = x * x
        v = V[i * d]
        vmax = max(vmax, v)
        for j in range(1, d):
            x = np.float64(k[i * d + j])
            n = n + x * x
            v += V[i * d + j]
            vmax = max(vmax, V[i * d + j])
        vs[i] = v
        r = np.sqrt(n)
        r = r * a_f
        c = np.float64(v) * lamB_f
        lo = r * lo_f - c
        glo[i] = lo if lo > 0.0 else 0.0
        ghi[i] = r * hi_f - c
    return vmax


@njit(nogil=True)
def scaled_bounds(e, c, lo_f, hi_f, glo, ghi):  # type: ignore[no-untyped-def]
    """``g = e * c``, ``glo = g lo_f``, ``ghi = g hi_f`` (the Laplace deficit's enclosure)."""
    for i in range(e.size):
        g = np.float64(e[i]) * c
        glo[i] = g * lo_f
        ghi[i] = g * hi_f


@njit(nogil=True)
def int_rows(glo, ghi, ji):  # type: ignore[no-untyped-def]
    """Write the positions with ``glo >= 1`` (ascending) to ``ji``; none when ``max(ghi) < 1``.

    Returns how many.
    """
    pmax = -np.inf
    for i in range(ghi.size):
        if ghi[i] > pmax:
            pmax = ghi[i]
    if pmax < 1.0:
        return 0
    cnt = 0
    for i in range(glo.size):
        if glo[i] >= 1.0:
            ji[cnt] = i
            cnt += 1
    return cnt


@njit(nogil=True)
def bern_prep(W, ji, T, glo, ghi, jv, intok, ties):  # type: ignore[no-untyped-def]
    """Integer part; returns ``(number of ties, max(ghi))`` after it.

    Integer part ``j = floor(glo)`` of the elements ``ji``: ``intok[i]`` is ``W < T[min(j,
    24)]`` (Bernoulli(exp(-j)) by one word), ties ``W == T`` are listed in ``ties`` for the
    exact path (and left True here); the remainder's bounds are ``glo - j`` (exact, Sterbenz)
    and ``ghi - j``, one ulp up when ``ghi > 2j``; ``jv[i] = j``.
    """
    nt = 0
    for t in range(ji.size):
        i = ji[t]
        j = np.floor(glo[i])
        jv[i] = j
        jj = np.int64(min(j, J_MAX))
        w = np.int64(W[t])
        thr = T[jj]
        if w == thr:
            ties[nt] = t
            nt += 1
        elif w > thr:
            intok[i] = False
        hj = ghi[i]
        wide = hj > 2.0 * j
        hj = hj - j
        if wide:
            hj = np.nextafter(hj, np.inf)
        ghi[i] = hj
        glo[i] = glo[i] - j
    pmax = -np.inf
    for i in range(ghi.size):
        pmax = max(pmax, ghi[i])
    return nt, pmax


@njit(nogil=True)
def bern_pieces(glo, ghi, p, K, left):  # type: ignore[no-untyped-def]
    """Pieces ``n_i = max(1, ceil(ghi))`` in ``p`` and ``left``, ``K = 1``, bounds times 2**16.

    For the general rounds (:func:`bern_round`), when some ``ghi > 1``.
    """
    for i in range(glo.size):
        pi = max(np.ceil(ghi[i]), 1.0)
        p[i] = pi
        left[i] = pi
        K[i] = 1.0
        glo[i] = glo[i] * 65536.0  # exact: a power of two
        ghi[i] = ghi[i] * 65536.0


@njit(nogil=True)
def scale16(glo, ghi):  # type: ignore[no-untyped-def]
    """Bounds times 2**16 (exact), for the one-piece rounds (:func:`bern_round1`)."""
    for i in range(glo.size):
        glo[i] = glo[i] * 65536.0
        ghi[i] = ghi[i] * 65536.0


@njit(nogil=True)
def bern_round1(w, size, idx, lo, hi, kk, dec, out, finish, t0, wpos):  # type: ignore[no-untyped-def]
    """:func:`bern_round` when every element is one piece (``n_i = 1``): ``M = K = kk``.

    All survivors share ``K`` (1 in round 1, +1 per round), so ``K``, ``n_i`` and the pieces
    left are not stored: a success goes on, a failure is accepted when ``K`` is odd and
    rejected when it is even. ``M = K < 2**36`` always (``K`` stays below ``K_MAX``), so no
    guard. Same protocol for ambiguous draws: returns ``(wpos, t0)``.
    """
    odd = (np.int64(kk) & 1) == 1
    first_amb = size
    for t in range(t0, size):
        if finish:
            succ = dec[t] == 1
        else:
            wf = np.float64(w[t]) * kk
            succ = wf + kk <= lo[t]
            amb = not succ and wf < hi[t]
            if amb or first_amb < size:
                if amb:
                    dec[t] = 2
                    if first_amb == size:
                        first_amb = t
                else:
                    dec[t] = np.int8(succ)
                continue
        if succ:
            idx[wpos] = idx[t]
            lo[wpos] = lo[t]
            hi[wpos] = hi[t]
            wpos += 1
        elif odd:
            out[idx[t]] = True
    return wpos, first_amb


@njit(nogil=True)
def bern_round(
    w, size, idx, p, K, left, lo, hi, guard, dec, out, finish, t0, wpos, mmax, kmax
):  # type: ignore[no-untyped-def]  # fmt: skip
    """One certified 16-bit draw per survivor (Lemma 1, ``docs/noise.md``), ``M = n_i K``.

    ``(W + 1) M <= lo`` proves ``U M < gamma``, ``W M >= hi`` the opposite (both products exact
    in float64); a draw that neither proves, or any ``M >= 2**36`` when ``guard``, is ambiguous.
    Each decided survivor is applied at once: a success goes on with ``K + 1``; a failure with
    ``K`` odd ends a piece successfully, the last piece the element (accepted in ``out``), and a
    finished piece with more to go restarts at ``K = 1``; a failure with ``K`` even rejects the
    element. Survivors are compacted in place (to ``wpos``).

    Called with ``finish=False`` (and ``t0 = wpos = 0``) it decides and applies up to the first
    ambiguous draw; from there on it only stores the decisions in ``dec`` (2: ambiguous) and
    returns that position as ``t0`` (``size``: the round is done). The caller decides the
    ambiguous draws exactly, in order, and calls again with ``finish=True`` and the returned
    ``(t0, wpos, mmax, kmax)`` to apply ``dec[t0:]``.
    Returns ``(wpos, t0, mmax, kmax)``: survivors so far and the largest ``M`` and ``K`` among
    them. No helper function: keeping the body in one loop keeps numba from reference counting
    the arrays per element.
    """
    first_amb = size
    for t in range(t0, size):
        pt = p[t]
        kt = K[t]
        if finish:
            succ = dec[t] == 1
        else:
            m = pt * kt
            wf = np.float64(w[t]) * m
            succ = wf + m <= lo[t]
            amb = (not succ and wf < hi[t]) or (guard and m >= M_GUARD)
            if amb or first_amb < size:
                if amb:
                    dec[t] = 2
                    if first_amb == size:
                        first_amb = t
                else:
                    dec[t] = np.int8(succ)
                continue
        if succ:
            kn = kt + 1.0
            lt = left[t]
        elif int(kt) & 1:
            lt = left[t] - 1.0
            if lt == 0.0:
                out[idx[t]] = True
                continue
            kn = 1.0
        else:
            continue
        idx[wpos] = idx[t]
        p[wpos] = pt
        K[wpos] = kn
        left[wpos] = lt
        lo[wpos] = lo[t]
        hi[wpos] = hi[t]
        wpos += 1
        kmax = max(kmax, kn)
        mmax = max(mmax, kn * pt)
    return wpos, first_amb, mmax, kmax


@njit(nogil=True)
def compress_into(k, acc, out, pos):  # type: ignore[no-untyped-def]
    """Append ``k[acc]`` to ``out`` from position ``pos`` until ``out`` is full; return the end.

    The accepted proposals in their order, as ``out[pos:pos + t] = k[acc][:t]`` with ``t`` as
    many as fit, in one pass: each value is written at the current end, which then moves by
    one when it was accepted (no branch on the random mask, whose mispredictions made the
    boolean index several times slower). ``out[pos]`` is always in range: the loop stops
    once ``out`` is full.
    """
    n = out.size
    if pos >= n:
        return pos
    for i in range(k.size):
        out[pos] = k[i]
        pos += np.int64(acc[i])
        if pos >= n:
            break
    return pos
