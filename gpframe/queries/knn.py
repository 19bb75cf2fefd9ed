"""Private nearest neighbours of a public point in each user's own tuple: PNN and k-PNN.

See ``docs/operations/knn.md`` and ``docs/noise.md`` (PNN, Algorithm 2, utility, k-PNN, Algorithm 3,
its contract and error bound, ``compat="reference"``, pitfalls, reference implementation,
multi-draw); Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 2, Thm. 4.10, 4.11, Alg. 3.

For each user the output is the ordered list of the row indices of k of the user's own points:
rank j is the j-th PNN call's answer over the candidates left after the first j − 1 (no
duplicates). Each call noises the exact minimum distance over its remaining candidates (Z), draws
its own SVT threshold noise (W) and a fresh V per visit, and scans the remaining candidates in a
data-independent order, cyclically, up to a public cap. Nothing is shared between calls, and no
distance or noise is returned.

All users are processed together: each call of every user is one vectorised step, and the scans
of all users share the sampler calls; each block is tested by one compiled loop
(:func:`gpframe.queries.knn_scan.pnn_scan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from gpframe.accounting.amounts import exact, probability
from gpframe.errors import InvalidInputError
from gpframe.mechanisms.calibration import check_eps, eps_from_rho
from gpframe.mechanisms.svt import (
    BLOCK_FIRST,
    FIRST_STEP_DRAWS,
    MAX_CYCLES,
    LaplacePool,
    SVTCalibration,
    calibrate_draws,
)
from gpframe.queries.knn_scan import pnn_scan, positions, record

__all__ = [
    "COMPAT",
    "SCAN_ORDERS",
    "KnnArrays",
    "ScanOrder",
    "expected_visits",
    "knn_error_bound",
    "knn_indices",
    "thm412_gamma",
]

#: ``compat`` values: None (gpframe defaults) or "reference"
COMPAT = (None, "reference")
SCAN_ORDERS = ("random", "input")
#: the reference's kNN threshold shift, in units of each call's b = 3/ε
REFERENCE_GAMMA0 = -2.0
_NO_TABLE = np.empty(0, dtype=np.int64)
_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# error bounds (public quantities only)


def thm412_gamma(n: int, k: int, beta: float, eps_call: float, *, all_ranks: bool = True) -> float:
    """Thm. 4.12 k-PNN error (γ₀ = 0): (15L + 3√(2L))/ε_call, L = ln((4n+2)k/β).

    See ``docs/operations/knn.md``.

    ``all_ranks=False`` gives the per-rank L = ln((4n+2)/β). ε_call = √(2ρ/k) (CGP), ε/k (GP).

    >>> round(thm412_gamma(5000, 1, 0.1, math.sqrt(2 * 5e-4), all_ranks=False), 4)
    6258.6296
    >>> round(thm412_gamma(20000, 16, 0.1, math.sqrt(2 * 5e-4 / 16)), 3)
    33221.339
    """
    L = math.log((4 * n + 2) * (k if all_ranks else 1) / beta)
    return (15 * L + 3 * math.sqrt(2 * L)) / eps_call


@lru_cache(maxsize=64)
def expected_visits(gamma0_b: float) -> float:
    """E[R]: expected visits to the true nearest point before the halt (``docs/operations/knn.md``).

    E[1/P(V ≤ Y + γ₀ | Y)] with Y = Z + W (Z, W ~ Lap(b)), V ~ Lap(2b), γ₀ in units of b.

    >>> round(expected_visits(0.0), 6), round(expected_visits(-2.0), 6)
    (3.715256, 9.70095)
    """
    from scipy import integrate

    g0 = float(gamma0_b)

    def f(y: float) -> float:
        dens = (1 + abs(y)) * math.exp(-abs(y)) / 4
        z = y + g0
        cdf = 0.5 * math.exp(z / 2) if z < 0 else 1 - 0.5 * math.exp(-z / 2)
        return dens / cdf

    pts = sorted({0.0, -g0})
    return float(integrate.quad(f, -200, 200, points=pts, limit=400, epsabs=1e-12)[0])


def knn_error_bound(n: Any, k: int, beta: float, b: float, gamma0_b: float = 0.0) -> Any:
    """Distance error of every rank at once, metres, with probability ≥ 1 − β.

    See ``docs/operations/knn.md``.

    ``n`` may be an array (one bound per user). ``b`` is the threshold noise scale of one call
    (3/ε_call nominally; gpframe passes the scale actually sampled). γ₀ = 0: Thm. 4.12 for all
    ranks, b(5L + √(2L)) with L = ln((4n+2)k/β).
    Other γ₀: the derived form of ``docs/operations/knn.md`` per rank at β/k (β/(3k) to each term):
    γ₁ + γ₂ + γ₀ with γ₁ = b(√(2 ln 1/β₁) + ln 1/β₁), γ₂ = 2b ln(E[R] n/(β₂β₃)).

    >>> round(knn_error_bound(20000, 1, 0.1, 3 / math.sqrt(1e-3), -2.0), 3)   # oracle row
    3981.202
    >>> knn_error_bound(np.array([20000, 20000]), 1, 0.1, 3 / math.sqrt(1e-3), -2.0).round(3)
    array([3981.202, 3981.202])
    """
    nn = np.asarray(n, dtype=np.float64)  # an array gives one bound per user
    # Logs of quotients are taken as differences of logs: beta may be as small as the smallest
    # double, where k/beta or beta² over- or underflow and the bound would come out inf.
    log_beta = math.log(beta)
    if gamma0_b == 0.0:
        L = np.log((4 * nn + 2) * k) - log_beta
        out = b * (5 * L + np.sqrt(2 * L))
    else:
        l1 = math.log(3 * k) - log_beta  # ln(1/β₁), β₁ = β/(3k)
        g1 = b * (math.sqrt(2 * l1) + l1)
        g2 = 2 * b * (np.log(expected_visits(gamma0_b) * nn) + 2 * l1)
        out = g1 + g2 + gamma0_b * b
    return out if np.ndim(n) else float(out)


# ---------------------------------------------------------------------------------------------
# the engine: one PNN call for many users at once, and k-PNN on top of it


class ScanOrder:
    """A uniform random scan order per run, drawn lazily: only the visited prefix is ever made.

    ``ScanOrder(length, "input")`` is the identity (the reference's input order).
    ``ScanOrder(length, "random", bits)`` is a uniform random permutation of 0..n_r−1 per run r,
    built front to back as the scan asks for positions: the distinct values of i.i.d. uniform
    draws on 0..n_r−1, in order of first appearance, form a uniformly random ordered sample
    without replacement (each new value is uniform over those not yet seen), so extending the
    prefix block by block gives the first positions of a uniform permutation. Once a run needs
    more than half of its positions the rest are appended at once, in the order of fresh random
    keys (the conditional law of a uniform permutation given its prefix), which avoids the
    coupon-collector tail. (Draws of 32 bits are reduced mod n_r: a bias below n_r/2³², on the
    order only; 64-bit draws beyond 2³¹ points.)

    Every bit comes from the query's randomness ``bits`` and nothing else: the order never
    depends on the data and is independent of the SVT's noise, so the SVT's output law
    given the order is unchanged. A scan that stops after a few hundred visits pays for a few
    hundred positions, never for a sort of all n_r keys; the k calls of k-PNN and PCH extend
    one shared prefix. :meth:`materialize` completes every run up front.

    Why by hand: numpy's permutations use its own (non-CSPRNG) generators, and a full argsort
    of n random keys costs more than a short scan.

    >>> from gpframe.testing import seeded_rng
    >>> o = ScanOrder(np.array([5, 1000]), "random", seeded_rng(0))
    >>> sorted(o(np.array([0]), np.arange(5)[None, :])[0].tolist())
    [0, 1, 2, 3, 4]
    >>> int(np.unique(o(np.array([1]), np.arange(1000)[None, :])).size)
    1000
    """

    def __init__(self, length: NDArray[np.int64], order: str, bits: Any = None) -> None:
        self.n = np.asarray(length, dtype=np.int64)
        self.identity = order == "input"
        if self.identity:
            return
        self.bits = bits
        self.start = _starts(self.n)
        total = int(self.n.sum())
        # table[start[r] + p] is the local index visited at position p of run r (p < filled[r])
        self.table = np.empty(total, dtype=np.int64)
        self.seen = np.zeros(total, dtype=bool)
        self.filled = np.zeros(self.n.size, dtype=np.int64)
        self.slot: NDArray[np.int64] | None = None  # scratch for _once
        # 32-bit draws when every run fits (half the random bytes; bias < n_r/2³², order only)
        self.word = np.uint32 if total == 0 or int(self.n.max()) < 2**31 else np.uint64

    def materialize(self, bits: Any = None) -> None:
        """Complete every run's order now (worth it when many calls scan the same order)."""
        if self.identity:
            return
        if bits is not None:
            self.bits = bits
        todo = np.flatnonzero(self.filled < self.n)
        if todo.size:
            self._complete(todo)

    def __call__(self, runs: NDArray[np.int64], t: NDArray[np.int64]) -> NDArray[np.int64]:
        """Local index (0..n_r−1) of the row visited at scan position ``t`` (shape (R, b))."""
        if self.identity:
            return t
        runs = np.asarray(runs, dtype=np.int64)
        if runs.size == 1:
            self.ensure(runs, t.max(axis=1) + 1)
        else:  # runs may repeat here: the largest need of each
            need = np.zeros(self.n.size, dtype=np.int64)
            np.maximum.at(need, runs, t.max(axis=1) + 1)
            short = np.flatnonzero(need > self.filled)
            if short.size:
                self._grow(short, need[short])
        return self.table[self.start[runs][:, None] + t]

    def ensure(self, runs: NDArray[np.int64], need: NDArray[np.int64]) -> None:
        """Draw the order of each run in ``runs`` (distinct, increasing) to ``need`` positions."""
        if self.identity:
            return
        if runs.size == 1:
            if need[0] > self.filled[runs[0]]:
                self._grow(runs, np.asarray(need, dtype=np.int64))
            return
        short = need > self.filled[runs]
        if short.any():
            self._grow(runs[short], need[short])

    def _grow(self, runs: NDArray[np.int64], need: NDArray[np.int64]) -> None:
        """Extend the prefix of each run in ``runs`` (distinct) to at least ``need`` positions."""
        while runs.size:
            n_r = self.n[runs]
            half = need * 2 > n_r
            if half.any():
                self._complete(runs[half])
                runs, need = runs[~half], need[~half]
                if not runs.size:
                    return
                n_r = self.n[runs]
            filled = self.filled[runs]
            # expected draws for d new values with u unseen: n·ln(u/(u−d)) (≤ 1.39·n·d/u, as
            # u − d ≥ n/2); 10 % more and a few spare, and loop in the rare case of a shortfall
            u = (n_r - filled).astype(np.float64)
            c = (1.1 * n_r * np.log(u / (u - (need - filled))) + 8).astype(np.int64)
            if runs.size == 1:
                self._grow_one(int(runs[0]), int(c[0]))
            else:
                self._grow_many(runs, n_r, filled, c)
            more = self.filled[runs] < need
            runs, need = runs[more], need[more]

    def _grow_one(self, r: int, c: int) -> None:
        # one run: the same steps as _grow_many without the per-run bookkeeping
        s, f = int(self.start[r]), int(self.filled[r])
        local = (self.bits.arr(c, self.word) % self.word(self.n[r])).astype(np.int64)
        local = local[~self.seen[s + local]]
        new = local[self._once(s + local)]
        self.table[s + f : s + f + new.size] = new
        self.seen[s + new] = True
        self.filled[r] = f + new.size

    def _grow_many(
        self,
        runs: NDArray[np.int64],
        n_r: NDArray[np.int64],
        filled: NDArray[np.int64],
        c: NDArray[np.int64],
    ) -> None:
        own = np.repeat(np.arange(runs.size, dtype=np.int64), c)
        words = self.bits.arr(int(c.sum()), self.word)
        local = (words % n_r[own].astype(self.word)).astype(np.int64)
        key = self.start[runs][own] + local
        fresh = ~self.seen[key]
        key, own, local = key[fresh], own[fresh], local[fresh]
        once = self._once(key)  # runs stay grouped, in draw order
        key, own, local = key[once], own[once], local[once]
        cnt = np.bincount(own, minlength=runs.size)
        rank = np.arange(own.size, dtype=np.int64) - _starts(cnt)[own]
        self.table[self.start[runs][own] + filled[own] + rank] = local
        self.seen[key] = True
        self.filled[runs] += cnt

    def _once(self, key: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Mask keeping one occurrence of each repeated key (no sort: one scatter, one gather).

        numpy writes repeated indices in order, so the last occurrence is kept. The distinct
        values ordered by last appearance in an i.i.d. block are, by time reversal, as uniform
        an ordered sample as by first appearance; whichever occurrence won, the choice depends
        on the draws only, never on the data.
        """
        if self.slot is None:
            self.slot = np.empty(self.table.size, dtype=np.int64)
        idx = np.arange(key.size, dtype=np.int64)
        self.slot[key] = idx
        return self.slot[key] == idx

    def _complete(self, runs: NDArray[np.int64]) -> None:
        """Append each run's unseen values in the order of fresh random keys (ties by value)."""
        n_r = self.n[runs]
        own = np.repeat(np.arange(runs.size, dtype=np.int64), n_r)
        local = np.arange(own.size, dtype=np.int64) - _starts(n_r)[own]
        key = self.start[runs][own] + local
        unseen = ~self.seen[key]
        own, local = own[unseen], local[unseen]
        rk = self.bits.arr(own.size, np.uint64)
        perm = np.lexsort((rk, own)) if runs.size > 1 else _stable_argsort(rk)
        own, local = own[perm], local[perm]
        cnt = np.bincount(own, minlength=runs.size)
        rank = np.arange(own.size, dtype=np.int64) - _starts(cnt)[own]
        filled = self.filled[runs]
        self.table[self.start[runs][own] + filled[own] + rank] = local
        self.seen[self.start[runs][own] + local] = True
        self.filled[runs] = n_r


def _stable_argsort(keys: NDArray[np.uint64]) -> NDArray[np.intp]:
    """``np.argsort(keys, kind="stable")``, by the faster unstable sort when no two keys tie.

    Distinct keys have one sorted order, so any sort returns the same permutation; ties (for
    random 64-bit keys, probability below n²/2⁶⁵) take the stable sort.
    """
    perm = np.argsort(keys)
    srt = keys[perm]
    if bool((srt[1:] == srt[:-1]).any()):
        return np.argsort(keys, kind="stable")
    return perm


def group_rows(codes: NDArray[np.int64]) -> NDArray[np.int64]:
    """Row positions grouped by user code, input order within a user (no sort when sorted)."""
    if codes.size < 2 or bool((codes[1:] >= codes[:-1]).all()):
        return np.arange(codes.size, dtype=np.int64)
    return np.argsort(codes, kind="stable").astype(np.int64)


@lru_cache(maxsize=256)
def pnn_calibration(eps_call: Fraction) -> SVTCalibration:
    """Draw rates of one PNN call: Z and W at scale 3K'/ε, each V at 6K'/ε.

    See ``docs/operations/knn.md``.

    Cached per ε (the calibration is a pure function of it; the result is frozen).
    """
    return calibrate_draws(eps_call, {"threshold": 3, "query": 6})


def _starts(length: NDArray[np.int64]) -> NDArray[np.int64]:
    s = np.zeros(length.size, dtype=np.int64)
    np.cumsum(length[:-1], out=s[1:])
    return s


def k_pnn(
    rows: NDArray[np.int64],
    length: NDArray[np.int64],
    k: int,
    values: Callable[[int, NDArray[np.int64], NDArray[np.int64]], NDArray[np.float64]],
    cal: SVTCalibration,
    *,
    order: ScanOrder | None = None,
    static: bool = False,
    gamma0_b: float = 0.0,
    max_cycles: int = MAX_CYCLES,
    bits: Any,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """K PNN calls for U users at once (Algorithm 3; ``docs/operations/knn.md``). Internal engine.

    ``rows`` holds the candidate row ids of all users, grouped by user (contiguous blocks, any
    fixed order), ``length`` the number per user (all ≥ k); ``order`` maps a user's scan position
    to an index in its block (None: the block order itself). ``values(j, rows, owner)`` returns
    the *squared* distances (float64, metres²; an array k_pnn may overwrite, written in full by
    every call) of all candidates for call j (k-PNN: to the query point, the same for every j:
    pass ``static=True`` and it is called once; PCH: to anchor point P_j). Candidates chosen by
    earlier calls are set to +∞ (so the exact minimum h is over the remaining ones) and skipped by
    the scan: the scan's rank t among the remaining maps to the position t + #{removed positions ≤
    it}. h and the visited distances are √ of the squared
    ones snapped to the lattice ``cal.g`` (rint(d/g): exact and monotone, so min-then-snap =
    snap-then-min); only visited candidates are snapped. The caller guarantees |d/g| < 2⁵²
    (coordinates within ±2⁴⁰ m). Returns (selected row ids, shape (U, k); capped flags (U, k)).
    """
    U = length.size
    out = np.empty((U, k), dtype=np.int64)
    capped_out = np.zeros((U, k), dtype=bool)
    length = length.astype(np.int64)
    start = _starts(length)
    owner = np.repeat(np.arange(U, dtype=np.int64), length)
    so = order if order is not None else ScanOrder(length, "input")
    # first block per run: one call (k <= 2) tends to scan ~10³ positions before its ⊤, each of k
    # calls over a shrinking list far fewer (public: k and U only, never the data)
    block = max(BLOCK_FIRST, (FIRST_STEP_DRAWS if k <= 2 else FIRST_STEP_DRAWS // 4) // U)
    all_runs = np.arange(U, dtype=np.int64)
    # γ₀ is public: a multiple of the call's nominal b = 3/ε, in whole lattice steps
    gamma_int = round(Fraction(gamma0_b) * 3 / (cal.eps * cal.g))
    # (Z, W) of all k calls in one sampler call: each pair is used by one call only
    zw = LaplacePool(cal.lam["threshold"], bits, chunk=2 * U * k)
    vpool = LaplacePool(cal.lam["query"], bits, chunk=max(1024, min(64 * U, 1 << 20)), grow=True)
    inv_g = float(1 / cal.g)  # a power of two: the products are exact
    removed = np.empty((U, 0), dtype=np.int64)  # scan positions taken, sorted per user
    taken = np.empty((U, k), dtype=np.int64)  # candidate index (start + local) of each answer
    table = None if so.identity else so.table
    d2 = values(0, rows, owner) if static else None
    for j in range(k):
        if not static:
            d2 = values(j, rows, owner)
            d2[taken[:, :j]] = np.inf
        # exact min over each user's remaining candidates (1-Lipschitz, Lem. 4.9), snapped
        h = np.rint(np.sqrt(np.minimum.reduceat(d2, start)) * inv_g).astype(np.int64)
        m_rem = length - j
        noise = zw.take(2 * U).reshape(U, 2)  # (Z, W): fresh for every call
        thr = h + noise[:, 0] + gamma_int + noise[:, 1]
        rank, capped = pnn_scan(d2, start, m_rem, removed, thr, m_rem * max_cycles, vpool,
                                table=table, ensure=so.ensure,
                                filled=None if table is None else so.filled, inv_g=inv_g,
                                block=block)  # fmt: skip
        pos = None
        if capped.any():
            # all-⊥ transcript: a uniform remaining index from the query's randomness
            r = bits.arr(int(capped.sum()), np.uint64)
            rank[capped] = (r % m_rem[capped].astype(np.uint64)).astype(np.int64)
            pos = positions(removed, rank)
            so.ensure(all_runs, pos + 1)  # a random answer may lie past the order drawn so far
            capped_out[:, j] = capped
        if pos is None:  # every answer was visited, so the order is drawn that far
            pos = positions(removed, rank)
        removed = record(pos, removed, start, _NO_TABLE if table is None else table,
                         table is None, rows, j, out, taken)  # fmt: skip
        if static and j + 1 < k:
            d2[taken[:, j]] = np.inf  # our own array: later calls see only the remaining
    return out, capped_out


# ---------------------------------------------------------------------------------------------
# the public array-level entry point


@dataclass
class KnnArrays:
    """What :func:`knn_indices` returns (arrays aligned with the users 0..U−1).

    Attributes
    ----------
    rows : list of ndarray
        Per user, the selected row positions (into the input arrays) in rank order.
    k : ndarray of int64
        Ranks returned per user: min(k, n_u) (n_u is public, ``docs/concepts.md``).
    capped : list of ndarray of bool
        Per user and rank, whether that call reached the public cap (its answer is then a uniform
        random remaining row, the k-PNN contract of ``docs/operations/knn.md``).
    eps_call : ndarray of float64
        The GP amount of each PNN call of the user (m⁻¹ of the metric CRS).
    charges : ndarray of object (Fraction)
        Per-user charge in the mechanism's units (ρ or ε; 0 if not admitted).
    error : ndarray of float64
        Per-user distance error bound (metres) holding for all ranks at once with probability
        ≥ 1 − β (public quantities only).
    r_min : float
        The metric floor of the guarantee (metres).
    sampler_calls : int
    """

    rows: list[NDArray[np.int64]]
    k: NDArray[np.int64]
    capped: list[NDArray[np.bool_]]
    eps_call: NDArray[np.float64]
    charges: NDArray[Any]
    error: NDArray[np.float64]
    r_min: float
    sampler_calls: int


def resolve_compat(
    compat: str | None, gamma0: float | None, scan_order: str | None
) -> tuple[float, str]:
    """(γ₀ in units of b, scan order) for a ``compat`` mode, with overrides.

    See ``docs/operations/knn.md``.
    """
    if compat not in COMPAT:
        raise InvalidInputError(
            f"compat={compat!r} is not one of None, 'reference' (docs/operations/knn.md). "
            f"{_NOTHING}"
        )
    g0 = REFERENCE_GAMMA0 if compat == "reference" else 0.0
    order = "input" if compat == "reference" else "random"
    if gamma0 is not None:
        g = float(gamma0)
        if not math.isfinite(g) or not -20.0 <= g <= 20.0:
            raise InvalidInputError(
                f"gamma0={gamma0!r} must be a finite public shift in [-20, 20] (units of each "
                f"call's b = 3/eps; the reference uses -2). {_NOTHING}"
            )
        g0 = g
    if scan_order is not None:
        if scan_order not in SCAN_ORDERS:
            raise InvalidInputError(
                f"scan_order={scan_order!r} is not one of 'random', 'input'. {_NOTHING}"
            )
        order = scan_order
    return g0, order


def _check_common(
    xy: Any, codes: Any, n_users: int | None
) -> tuple[NDArray[np.float64], NDArray[np.int64], int, NDArray[np.int64]]:
    p = np.asarray(xy, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2:
        raise InvalidInputError(f"xy must have shape (n, 2) metres, got {p.shape}. {_NOTHING}")
    if not np.isfinite(p).all():
        raise InvalidInputError(f"xy has NaN/inf coordinates; drop them first. {_NOTHING}")
    c = np.asarray(codes)
    if c.shape != (p.shape[0],) or (c.size and c.dtype.kind not in "iu"):
        raise InvalidInputError(
            f"codes must be one integer user code per point, shape ({p.shape[0]},). {_NOTHING}"
        )
    c = c.astype(np.int64)
    U = int(c.max()) + 1 if n_users is None and c.size else int(n_users or 0)
    if c.size and (c.min() < 0 or c.max() >= U):
        raise InvalidInputError(f"codes must lie in 0..{U - 1}. {_NOTHING}")
    counts = np.bincount(c, minlength=U).astype(np.int64)
    if (counts == 0).any():
        i = int(np.flatnonzero(counts == 0)[0])
        raise InvalidInputError(
            f"user code {i} has no points: a user needs at least one point. {_NOTHING}"
        )
    return p, c, U, counts


#: coordinates (and query points) must lie within ±2⁴⁰ m, so that every distance d has
#: |d/g| < 2⁵² on the finest lattice (exact snapping, docs/noise.md)
COORD_MAX_M = float(2**40)


def _check_extent(p: NDArray[np.float64], *more: NDArray[np.float64]) -> None:
    for a in (p, *more):
        if a.size and not np.abs(a).max() < COORD_MAX_M:
            raise InvalidInputError(
                f"coordinates beyond ±2**40 m: check the CRS (project to a local metric CRS "
                f"first). {_NOTHING}"
            )


def _check_point(point: Any) -> NDArray[np.float64]:
    q = np.asarray(point, dtype=np.float64).reshape(-1)
    if q.shape != (2,) or not np.isfinite(q).all():
        raise InvalidInputError(
            f"point must be one finite (x, y) in the data's metric CRS, got {point!r}. {_NOTHING}"
        )
    return q


def check_k(k: Any) -> int:
    """``k`` as an int >= 1, else ``InvalidInputError``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidInputError(f"k={k!r} must be an integer >= 1. {_NOTHING}")
    return int(k)


@lru_cache(maxsize=256)  # exact square roots of Fractions are slow; the result is immutable
def call_eps(kind: str, amount: Fraction, k: int, scale_max: Fraction) -> Fraction:
    """GP amount of one of k PNN calls, per metric-CRS metre.

    See ``docs/operations/knn.md``; ``docs/noise.md``.

    CGP: √(2ρ/k)/scale rounded down (each call costs ρ/k); GP: ε/(k·scale).

    >>> float(call_eps("cgp", Fraction(1, 2000), 4, Fraction(1)))   # oracle: 0.0158113883
    0.015811388300841896
    """
    if kind == "gp":
        return check_eps(amount / (k * scale_max), "eps/k (one PNN call)")
    return check_eps(eps_from_rho(amount / (k * scale_max * scale_max)), "sqrt(2*rho/k)")


def knn_indices(
    xy_m: Any,
    codes: Any,
    point_m: Any,
    k: int,
    *,
    kind: Literal["cgp", "gp"],
    amount: Any,
    n_users: int | None = None,
    admitted: Any = None,
    compat: str | None = None,
    gamma0: float | None = None,
    scan_order: str | None = None,
    max_cycles: int = MAX_CYCLES,
    beta: float = 0.05,
    scale_max: float | Fraction = 1,
    rng: Any = None,
) -> KnnArrays:
    """K private nearest neighbours of ``point_m`` in every user's own points.

    See ``docs/operations/knn.md`` and ``docs/noise.md`` (PNN, k-PNN and its contract, parity mode,
    pitfalls, multi-draw, projection scale); Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 2,
    Alg. 3.

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        All users' points, projected metres.
    codes : array_like of int, shape (n,)
        User code 0..U−1 of each point.
    point_m : (x, y)
        The public query point, same metric CRS.
    k : int
        Neighbours per user; a user with n_u < k gets all n_u ranks (n_u is public) at ρ/n_u per
        call, so every user's charge is the same amount.
    kind : {"cgp", "gp"}
        ``amount`` is ρ (m⁻², calls at ε = √(2ρ/k)) or ε (m⁻¹, calls at ε/k).
    amount : float or Fraction
        Each user's budget for the query.
    admitted : array_like of bool, shape (U,), optional
        Users to answer (default all); others draw nothing and are charged 0.
    compat : {None, "reference"}
        None: random scan order and γ₀ = 0 (the paper's defaults). "reference": input-order scan and
        γ₀ = −2·3/ε_call, as the authors' code (``docs/operations/knn.md``).
    gamma0 : float, optional
        Threshold shift in units of the call's b = 3/ε_call (public); overrides ``compat``.
    scan_order : {"random", "input"}, optional
        Overrides ``compat``'s order. Never an order computed from the data.
    max_cycles : int
        Public cap: passes over the remaining candidates per call (``docs/operations/knn.md``).
    beta : float
        Failure probability of the reported error bound.
    scale_max : float
        Projection scale factor k_s ≥ 1: calls run at ε/k_s per metric-CRS metre.
    rng : BitSource or None

    Returns
    -------
    KnnArrays

    Notes
    -----
    Noise per call: Z, W discrete Laplace of scale 3K'/ε_call, each V of scale 6K'/ε_call,
    K' = 1 + g/r_min (``docs/noise.md``, draw scales 3 and 6).
    Charge per admitted user: ρ (or ε) once, w.r.t. d_r, whatever the number of visits.
    Error: with probability ≥ 1 − β, every rank j has ||x_{t_j} − p|| ≤ ||x_{t*_j} − p|| + error
    (Thm. 4.12 all ranks for γ₀ = 0, the derived form of ``docs/operations/knn.md`` otherwise;
    lattice scales, plus 5 g).

    Examples
    --------
    >>> xy = np.array([[0.0, 0.0], [50.0, 0.0], [900.0, 0.0], [10.0, 10.0]])
    >>> out = knn_indices(xy, [0, 0, 0, 1], (0.0, 0.0), 2, kind="cgp", amount=1e-2)
    >>> out.k.tolist(), [len(r) for r in out.rows], sorted(set(out.rows[0].tolist())) <= [0, 1, 2]
    ([2, 1], [2, 1], True)
    >>> [float(c) for c in out.charges]
    [0.01, 0.01]
    """
    from gpframe.mechanisms.noise import resolve_rng

    p, c, U, counts = _check_common(xy_m, codes, n_users)
    q = _check_point(point_m)
    k = check_k(k)
    if kind not in ("cgp", "gp"):
        raise InvalidInputError(f"kind={kind!r} is not one of 'cgp', 'gp'. {_NOTHING}")
    amt = exact(amount, "rho" if kind == "cgp" else "eps")
    if amt <= 0:
        raise InvalidInputError(f"the amount {amount!r} must be > 0. {_NOTHING}")
    ks = exact(scale_max, "scale_max")
    if ks < 1:
        raise InvalidInputError(f"scale_max={scale_max!r} must be >= 1. {_NOTHING}")
    b = probability(beta)
    if isinstance(max_cycles, bool) or not isinstance(max_cycles, (int, np.integer)):
        raise InvalidInputError(f"max_cycles={max_cycles!r} must be an integer >= 1. {_NOTHING}")
    if max_cycles < 1:
        raise InvalidInputError(f"max_cycles={max_cycles!r} must be an integer >= 1. {_NOTHING}")
    g0, order = resolve_compat(compat, gamma0, scan_order)
    adm = np.ones(U, dtype=bool) if admitted is None else np.asarray(admitted, dtype=bool)
    if adm.shape != (U,):
        raise InvalidInputError(f"admitted must have shape ({U},). {_NOTHING}")
    ku = np.minimum(counts, k)
    # calibrate every group before any bit is drawn: bad amounts raise with nothing charged
    cals = {int(kk): pnn_calibration(call_eps(kind, amt, int(kk), ks)) for kk in np.unique(ku)}
    bits = resolve_rng(rng)
    _check_extent(p, q)
    # (x − qx)² + (y − qy)² with the expression's float operations, in two buffers, not five
    d2 = np.subtract(p[:, 0], q[0])
    dy = np.subtract(p[:, 1], q[1])
    np.square(d2, out=d2)
    np.square(dy, out=dy)
    d2 += dy
    grouped = group_rows(c)
    rows: list[NDArray[np.int64]] = [np.empty(0, np.int64)] * U
    capped: list[NDArray[np.bool_]] = [np.empty(0, bool)] * U
    eps_call = np.zeros(U)
    err = np.full(U, np.nan)
    calls = 0
    r_min = 1.0
    for kk, cal in cals.items():
        grp = np.flatnonzero((ku == kk) & adm)
        if grp.size == 0:
            continue
        if grp.size == U:
            rem = grouped
        else:
            in_grp = np.zeros(U, dtype=bool)
            in_grp[grp] = True
            rem = grouped[in_grp[c[grouped]]]
        so = ScanOrder(counts[grp], order, bits)
        sel, cap = k_pnn(rem, counts[grp], kk, lambda j, r, o: d2[r], cal, order=so, static=True,
                         gamma0_b=g0, max_cycles=int(max_cycles), bits=bits)  # fmt: skip
        for i, user in enumerate(grp.tolist()):
            rows[user] = sel[i]
            capped[user] = cap[i]
        eps_call[grp] = float(cal.eps)
        bsc = float(cal.scale["threshold"])
        n_u = counts[grp]
        err[grp] = knn_error_bound(n_u, kk, b, bsc, g0) + 5 * float(cal.g)
        r_min = max(r_min, float(cal.r_min))
        calls += 2
    charges = np.empty(U, dtype=object)
    charges[:] = [amt if a else Fraction(0) for a in adm.tolist()]
    return KnnArrays(
        rows=rows,
        k=np.where(adm, ku, 0).astype(np.int64),
        capped=capped,
        eps_call=eps_call,
        charges=charges,
        error=err,
        r_min=r_min,
        sampler_calls=calls,
    )
