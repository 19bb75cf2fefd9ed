"""Geometric building blocks: the V table, the design-B block proposal and design-A digits.

* :class:`VTable` (``docs/noise.md``): ``V ~ Geometric(Q)`` with ``Q = exp(-x)``, from one
  32-bit word per draw via a 2**16-entry bucket table; words that tie with a threshold ``T_v =
  floor(Q**v 2**32)`` (or equal 0) are decided exactly by :class:`LazyUniform`.
* :class:`BlockGeometric` (``docs/noise.md``): the proposal ``k = (B V + R)`` or ``-(B V + R) - 1``
  at rate ``lam`` with block ``B = 2**L``, ``lam B in (1/32, 1/16]`` (``B = 1`` for coarse rates).
* :class:`DigitGeometric` (``docs/noise.md``, design A): the same geometric through independent
  binary digits, with integer comparisons only.

All tables are built with exact integer arithmetic, cached by the exact ``Fraction`` and read-only.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from gpframe.errors import GpframeInternalError, NoiseOverflowError
from gpframe.mechanisms.noise.bits import BitSource, broken_source
from gpframe.mechanisms.noise.exact import ExactProb, LazyUniform, exp_neg_bounds

__all__ = [
    "BETA",
    "BlockGeometric",
    "DigitGeometric",
    "VTable",
    "block_geometric",
    "digit_geometric",
    "v_table",
]

BETA = Fraction(1, 16)
_P_TABLE = 256
_LIMIT = 1 << 62

#: ``-ln P(V >= vcap)``: the tail mass at which the exact V path declares the source broken.
_V_TAIL = 128

# Test hook (T-FORCED): when True every V is decided by the exact LazyUniform path.
FORCE_EXACT = False


def _overflow(what: str) -> NoiseOverflowError:
    return NoiseOverflowError(
        f"a lattice noise draw ({what}) does not fit in int64 (|k| >= 2**62; probability below "
        "exp(-2**22) for supported parameters). Retry the query or use a coarser lattice step g. "
        "Nothing was released."
    )


class VTable:
    """Exact Geometric(Q) sampler from 32-bit words, ``Q = exp(-x)``, ``P(V >= v) = Q**v``."""

    def __init__(self, x: Fraction) -> None:
        self.x = Fraction(x)
        self._qpow: dict[int, ExactProb] = {}
        P = _P_TABLE
        qlo, qhi = exp_neg_bounds(self.x, P)
        one = 1 << P
        lo, hi = one, one
        thr: list[int] = []
        v = 0
        while True:
            v += 1
            lo = (lo * qlo) >> P
            hi = -((-hi * qhi) // one)
            tlo, thi = lo >> (P - 32), hi >> (P - 32)
            if tlo != thi:  # directed bounds disagree on the floor: decide exactly
                tlo = self.qpow(v).floor(32)
            if tlo == 0:
                break
            thr.append(tlo)
        self.vmax = len(thr)
        # The exact path stops at V = vcap: P(V >= vcap) = Q**vcap <= exp(-128) < 2**-184 with a
        # working source, while a stuck one (all-zero words) would climb towards 2**62 forever.
        # x > 1/32 for every table built here, so vcap <= 4097 (well above vmax <= 711).
        self.vcap = math.ceil(_V_TAIL / self.x)
        # Descending thresholds T_1 > ... (non-increasing), and their ascending copy.
        self.T = np.array(thr, dtype=np.int64)
        self.asc = self.T[::-1].copy()
        hb = self.asc >> 16
        b = np.arange(65536, dtype=np.int64)
        cnt = self.vmax - np.searchsorted(hb, b, side="right")
        flag = np.zeros(65536, dtype=bool)
        flag[hb] = True
        flag[0] = True  # W = 0 ties with every T_v = 0, v > vmax
        if self.vmax > 32000:  # pragma: no cover - x >= 1/32 keeps vmax <= 711
            raise GpframeInternalError(f"V table too long ({self.vmax}).")
        self.table = np.where(flag, -1, cnt).astype(np.int16)
        self.table.setflags(write=False)
        self.T.setflags(write=False)
        self.asc.setflags(write=False)

    def qpow(self, v: int) -> ExactProb:
        """``Q**v`` as an :class:`ExactProb` (cached)."""
        p = self._qpow.get(v)
        if p is None:
            p = self._qpow[v] = ExactProb.exp_neg(v * self.x)
        return p

    def v_exact(self, W: int, bits: BitSource, limit: int = _LIMIT) -> int:
        """Exact ``V`` from a 32-bit prefix ``W``, extending the same uniform on ties."""
        W = int(W)
        v = int(self.vmax - np.searchsorted(self.asc, W, side="right"))
        lu = LazyUniform(W, 32, bits)
        while True:
            if v >= limit:
                raise _overflow(f"geometric V={v}")
            if v >= self.vcap:
                raise broken_source(f"a geometric draw reached V={v}", "2**-184")
            if not lu.less_than(self.qpow(v + 1)):
                return v
            v += 1

    def from_words(self, W: np.ndarray, bits: BitSource, limit: int = _LIMIT) -> np.ndarray:
        """Vectorised ``V`` for an array of uint32 words (int64 result).

        The table places most words; the rest by a binary search of the thresholds; words that
        tie with a threshold (or equal 0) are decided exactly, in ascending order
        (:mod:`~gpframe.mechanisms.noise.kernels`).
        """
        from gpframe.mechanisms.noise import kernels

        V = np.empty(W.size, dtype=np.int64)
        ties = np.empty(W.size, dtype=np.int64)
        nt = kernels.v_words(self.table, self.asc, self.vmax, FORCE_EXACT, W, V, ties)
        for i in ties[:nt].tolist():
            V[i] = self.v_exact(int(W[i]), bits, limit)
        return V


@lru_cache(maxsize=256)
def v_table(x: Fraction) -> VTable:
    """Return the cached :class:`VTable` for ``Q = exp(-x)``."""
    return VTable(Fraction(x))


def _word_dtype(nbits: int) -> np.dtype:
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if nbits <= 8 * np.dtype(dt).itemsize:
            return np.dtype(dt)
    raise GpframeInternalError(f"{nbits} raw bits per draw is too many.")


class BlockGeometric:
    """Design-B proposal at rate ``lam`` (``docs/noise.md``).

    ``L = max{l >= 0 : lam 2**l <= 1/16}`` (0 when ``lam > 1/32``), ``B = 2**L`` and
    ``Q = exp(-lam B)``.
    A proposal is ``G = B V + R`` with ``V ~ Geometric(Q)``, ``R`` uniform on ``0..B-1`` (``L`` raw
    bits) and a raw sign bit ``s``: ``k = G`` (``s = 0``) or ``k = -G - 1`` (``s = 1``), so every
    integer has exactly one proposal and its probability is proportional to ``Q**V``. The deficit
    ``e = |k| - B V = R + s`` lies in ``0..B``.
    """

    def __init__(self, lam: Fraction) -> None:
        self.lam = Fraction(lam)
        L = 0
        while self.lam * (1 << (L + 1)) <= BETA:
            L += 1
        self.L, self.B = L, 1 << L
        self.lamB = self.lam * self.B
        self.vt = v_table(self.lamB)
        self.rs_dtype = _word_dtype(L + 1)
        self.vlimit = (_LIMIT >> L) - 1
        # Byte layout of one request: largest word type first, so every view is aligned (the
        # order is fixed by the parameters).
        rs = self.rs_dtype.itemsize
        segs = sorted(
            [
                (4, "W", np.dtype(np.uint32)),
                (rs, "RS", self.rs_dtype),
                (2, "w", np.dtype(np.uint16)),
            ],
            key=lambda t: -t[0],
        )
        self._layout = tuple((name, dt) for _, name, dt in segs)
        self._bytes_per = 4 + rs  # W and RS per proposal; w adds 2 per extra word
        self._mask = self.B - 1

    def propose(
        self, n: int, bits: BitSource, n_u16: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Draw ``n`` proposals: ``(k, e, V, w)`` with ``w`` ``n_u16`` extra uint16 words.

        All bytes come from one request, laid out largest word type first (aligned views):
        :meth:`words`, then :meth:`place`.
        """
        return self.place(self.words(n, bits, n_u16), bits)

    def words(self, n: int, bits: BitSource, n_u16: int = 0) -> dict[str, np.ndarray]:
        """Make the one byte request of :meth:`propose`; return its views ``W``, ``RS``, ``w``."""
        counts = {"W": n, "RS": n, "w": n_u16}
        buf = bits.bytes(self._bytes_per * n + 2 * n_u16)
        views = {}
        off = 0
        for name, dt in self._layout:
            cnt = counts[name]
            views[name] = np.frombuffer(buf, dtype=dt, count=cnt, offset=off)
            off += dt.itemsize * cnt
        return views

    def place(
        self, views: dict[str, np.ndarray], bits: BitSource
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Return ``(k, e, V, w)`` of the proposals whose words :meth:`words` drew.

        Ties of a word with a V threshold draw more bits of the same uniform from ``bits``.
        """
        from gpframe.mechanisms.noise import kernels

        # V as from_words does, then s = (RS >> L) & 1, R = RS & (B - 1), G = (V << L) | R,
        # e = R + s, k = G ^ -s (a shifted sign: s = 1 gives ~G = -G - 1), in one compiled pass
        W, RS = views["W"], views["RS"]
        n = W.size
        vt = self.vt
        V = np.empty(n, dtype=np.int64)
        k = np.empty(n, dtype=np.int64)
        e = np.empty(n, dtype=np.int64)
        ties = np.empty(n, dtype=np.int64)
        nt = kernels.propose_words(
            vt.table, vt.asc, vt.vmax, FORCE_EXACT, W, RS, self.L, self._mask, V, k, e, ties
        )
        if nt:  # words tied with a threshold: V exactly, in ascending order, then k and e again
            for i in ties[:nt].tolist():
                V[i] = vt.v_exact(int(W[i]), bits, self.vlimit)
            kernels.proposal_ke(V, RS, self.L, self._mask, k, e)
        return k, e, V, views["w"]


@lru_cache(maxsize=256)
def block_geometric(lam: Fraction) -> BlockGeometric:
    """Return the cached :class:`BlockGeometric` for the exact rate ``lam``."""
    return BlockGeometric(Fraction(lam))


# Test hook (T-FORCED): when True every design-A digit takes the 64-bit and LazyUniform stages.
FORCE_EXACT_DIGITS = False


class DigitGeometric:
    """Design-A geometric magnitude (``docs/noise.md``): no float operation at all.

    ``G = B V + R`` with ``lam B in (1/2, 1]`` (``B = 1`` when ``lam > 1/2``), ``V`` from the 32-bit
    table at ``Q = exp(-lam B)``, and ``R``'s ``L`` binary digits independent with
    ``P(digit j = 1) = q**(2**j) / (1 + q**(2**j))``, ``q = exp(-lam)``.
    """

    def __init__(self, lam: Fraction) -> None:
        self.lam = Fraction(lam)
        L = 0
        while self.lam * (1 << (L + 1)) <= 1:
            L += 1
        self.L, self.B = L, 1 << L
        self.vt = v_table(self.lam * self.B)
        self.p = [ExactProb.logistic_exp_neg(self.lam * (1 << j)) for j in range(L)]
        self.T8 = np.array([p.floor(8) for p in self.p], dtype=np.int16)
        self.T64 = np.array([p.floor(64) for p in self.p], dtype=np.uint64)
        self.vlimit = (_LIMIT >> L) - 1

    def magnitude(self, W: np.ndarray, D8: np.ndarray, bits: BitSource) -> np.ndarray:
        """``G`` from uint32 words ``W`` and an ``(n, L)`` uint8 digit array ``D8``."""
        V = self.vt.from_words(W, bits, self.vlimit)
        if self.L == 0:
            return V
        d8 = D8.astype(np.int16)
        dig = d8 < self.T8
        tie = d8 == self.T8
        if FORCE_EXACT_DIGITS:
            tie[:] = True
        ti, tj = np.nonzero(tie)
        if ti.size:
            # Second stage: 56 more bits of the same uniform, compared with floor(p_j 2**64).
            w = bits.arr(ti.size, np.uint64) >> np.uint64(8)
            W64 = (D8[ti, tj].astype(np.uint64) << np.uint64(56)) | w
            T = self.T64[tj]
            dig[ti, tj] = W64 < T
            for r in np.flatnonzero(W64 == T).tolist():
                lu = LazyUniform(int(W64[r]), 64, bits)
                dig[ti[r], tj[r]] = lu.less_than(self.p[int(tj[r])])
        weights = np.left_shift(np.int64(1), np.arange(self.L, dtype=np.int64))
        R = dig.astype(np.int64) @ weights
        return (V << self.L) + R


@lru_cache(maxsize=256)
def digit_geometric(lam: Fraction) -> DigitGeometric:
    """Return the cached :class:`DigitGeometric` for the exact rate ``lam``."""
    return DigitGeometric(Fraction(lam))
