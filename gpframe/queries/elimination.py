"""Iterative elimination: the machinery behind range counts, KDE and nearest users.

See ``docs/operations/range_count.md`` (importance functions and valid triples, the Gaussian
toolkit, split schedules, Algorithm 4, Algorithm 5, the exact charge, the GP (Laplace)
instantiation); Liang & Yi, 'Adaptive Privacy Budgeting' (2026) and the pitfalls of
``docs/operations/range_count.md``.

Each user holds one value of a 1-Lipschitz importance function h (``triple="dist"``: h(x) is
released with 1-D noise) or one point x (``triple="pt"``: x is released, h is applied to the
noisy average). Their allocation is split into ``c`` parts fixed before round 1; in round j only
the users still undecided get a fresh release at their part j, so a user who stops at round r is
charged the parts of rounds 1..r and keeps the rest (the saving).

Noise comes only from the public release wrappers of :mod:`gpframe.mechanisms`
(``gaussian_cgp`` for CGP, ``laplace_gp`` / ``planar_laplace`` for GP), one call per round and per
distinct part value for all still-active users at once, never one call per user. The charge of a
round is its ``Released.guarantee.amount`` (times the projection factor), never a nominal
amount recomputed from a noise scale.

Widths are computed from the noise actually sampled (``Released.noise``), with tail bounds valid
for the lattice laws plus the snapping error (``docs/operations/range_count.md``); the ``*_nominal``
helpers are the continuous formulas of the oracle tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from gpframe.accounting.amounts import exact, probability
from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = [
    "KINDS",
    "SPLITS",
    "TRIPLES",
    "Draw",
    "Elimination",
    "GroupedAmounts",
    "charge_if_stopped",
    "check_method_parts",
    "check_parts",
    "decide_noninteractive",
    "eliminate_interactive",
    "eliminate_noninteractive",
    "gamma_d",
    "gamma_laurent_massart",
    "interactive_step",
    "laplace_sum_tail",
    "laplace_width_t",
    "planar_radius_nominal",
    "prepare_parts",
    "release_part",
    "round_parts",
    "split_fractions",
    "weighted_average",
    "width_dist_nominal",
    "width_pt_nominal",
]

#: privacy notions: "cgp" (Gaussian noise, charges in rho) and "gp" (Laplace noise, charges in eps)
KINDS = ("cgp", "gp")
#: split schedules of docs/operations/range_count.md
SPLITS = ("even", "doubling")
#: valid triples: distance privatization (Cor. 6.2) and point privatization (Cor. 6.1)
TRIPLES = ("dist", "pt")

_NOTHING = "Nothing was charged."

#: ``draw(positions, part) -> [(positions, Released, charge), ...]``: releases users' values
#: where they are held (see :func:`eliminate_interactive`)
Draw = Callable[[NDArray[np.int64], Fraction], list[tuple[NDArray[np.int64], Any, Fraction]]]


# ---------------------------------------------------------------------------------------------
# Gaussian toolkit (continuous formulas; the oracle tables of docs/operations/range_count.md)


def gamma_laurent_massart(d: int, beta: float) -> float:
    """Laurent–Massart radius factor √(d + 2√(d ln(1/β)) + 2 ln(1/β)).

    See ``docs/operations/range_count.md``.

    With probability ≥ 1 − β, ||Z|| ≤ σ·γ for Z ~ N(0, σ² I_d). Looser than :func:`gamma_d` for
    d = 1, 2.

    >>> round(gamma_laurent_massart(784, 1e-3), 8)
    30.74082172
    """
    L = math.log(1.0 / probability(beta))
    return math.sqrt(d + 2.0 * math.sqrt(d * L) + 2.0 * L)


def gamma_d(d: int, beta: float) -> float:
    """γ_d(β): ||Z|| ≤ σ·γ_d(β) with probability ≥ 1 − β for Z ~ N(0, σ² I_d).

    See ``docs/operations/range_count.md``.

    d = 1: √(2 ln(2/β)); d = 2: √(2 ln(1/β)) (exact, χ²₂); d ≥ 3: Laurent–Massart.

    >>> round(gamma_d(1, 0.05), 9), round(gamma_d(2, 0.05), 9)
    (2.716203031, 2.447746831)
    """
    b = probability(beta)
    if int(d) < 1:
        raise InvalidInputError(f"d={d!r} must be >= 1.")
    if d == 1:
        return math.sqrt(2.0 * math.log(2.0 / b))
    if d == 2:
        return math.sqrt(2.0 * math.log(1.0 / b))
    return gamma_laurent_massart(int(d), b)


def width_pt_nominal(rho_cum: Any, beta: float, d: int = 2) -> Any:
    """Width of the point-privatization triple, γ_d(β)/√(2ρ^(≤j)) metres (Cor. 6.1).

    >>> round(float(width_pt_nominal(2.5e-5, 1.25e-6)), 7)
    737.3565489
    """
    return gamma_d(d, beta) / np.sqrt(2.0 * np.asarray(rho_cum, dtype=np.float64))


def width_dist_nominal(rho_cum: Any, beta: float) -> Any:
    """Width of the distance-privatization triple, √(ln(2/β)/ρ^(≤j)) metres (Cor. 6.2).

    >>> round(float(width_dist_nominal(2.5e-5, 1.25e-6)), 7)
    755.9236519
    """
    b = probability(beta)
    return np.sqrt(math.log(2.0 / b) / np.asarray(rho_cum, dtype=np.float64))


def weighted_average(outputs: Any, parts: Any) -> Any:
    """Precision-weighted average Σ_j (ρ_j/ρ^(≤j)) y_j of independent releases.

    See ``docs/operations/range_count.md``.

    ``outputs`` and ``parts`` have the rounds along the last axis (points: ``outputs`` of shape
    (..., j, d) with ``parts`` (..., j)).

    >>> float(weighted_average([100.0, 20.0], [1e-5, 3e-5]))
    40.0
    """
    y = np.asarray(outputs, dtype=np.float64)
    w = np.asarray(parts, dtype=np.float64)
    if y.ndim == w.ndim + 1:
        return np.einsum("...j,...jd->...d", w, y) / w.sum(axis=-1)[..., None]
    return (w * y).sum(axis=-1) / w.sum(axis=-1)


# ---------------------------------------------------------------------------------------------
# Laplace tails


def laplace_sum_tail(t: float, m: int) -> float:
    """P(|L_1 +... + L_m| > t) for i.i.d. Lap(1).

    See ``docs/operations/range_count.md`` (the exact Gamma-difference tail).

    Computed in log space, so it is accurate for large m and t.

    >>> round(laplace_sum_tail(5.0, 4), 11)
    0.07903050334
    >>> round(laplace_sum_tail(1.0, 1), 12) == round(math.exp(-1.0), 12)
    True
    """
    m = int(m)
    if m < 1:
        raise InvalidInputError(f"m={m!r} must be >= 1.")
    if t <= 0:
        return 1.0
    lt = math.log(t)
    logs = []
    for i in range(m):
        for k in range(i + 1):
            logs.append(
                (i - k) * lt
                - math.lgamma(i - k + 1)
                - math.lgamma(k + 1)
                + math.lgamma(m + k)
                - math.lgamma(m)
                - (m + k) * math.log(2.0)
            )
    top = max(logs)
    s = top + math.log(math.fsum(math.exp(v - top) for v in logs))
    return min(1.0, 2.0 * math.exp(s - t))


def laplace_width_t(m: int, beta: float) -> float:
    """t_m(β): the t with P(|Σ_{j≤m} L_j| > t) = β, L_j i.i.d. Lap(1), by bisection.

    See ``docs/operations/range_count.md``.

    The returned value is the upper end of the final bracket, so the tail there is ≤ β.

    >>> round(laplace_width_t(1, 0.05), 9), round(laplace_width_t(4, 1e-6), 8)
    (2.995732274, 19.26575785)
    """
    b = probability(beta)
    lo, hi = 0.0, 1.0
    while laplace_sum_tail(hi, m) > b:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if laplace_sum_tail(mid, m) > b:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return hi


def planar_radius_nominal(eps: float, beta: float) -> float:
    """Continuous planar Laplace radius (−W₋₁(−β/e) − 1)/ε at failure probability β.

    See ``docs/operations/range_count.md`` and ``docs/concepts.md``.

    >>> round(planar_radius_nominal(0.01, 0.05), 7)
    474.3864518
    """
    from scipy.special import lambertw

    b = probability(beta)
    return float((-lambertw(-b / math.e, -1).real - 1.0) / float(eps))


# ---------------------------------------------------------------------------------------------
# split schedules and docs/operations/range_count.md exact parts


def split_fractions(split: str, rounds: int) -> tuple[Fraction, ...]:
    """Return the exact fractions π_1..π_c of the allocation used in each round.

    See ``docs/operations/range_count.md``.

    ``even``: 1/c each; ``doubling``: 2^(j−1)/(2^c − 1). They sum to exactly 1.

    >>> split_fractions("even", 4)
    (Fraction(1, 4), Fraction(1, 4), Fraction(1, 4), Fraction(1, 4))
    >>> split_fractions("doubling", 3)
    (Fraction(1, 7), Fraction(2, 7), Fraction(4, 7))
    """
    if (
        isinstance(rounds, bool)
        or not isinstance(rounds, (int, np.integer))
        or not 1 <= rounds <= 64
    ):
        raise InvalidInputError(
            f"rounds={rounds!r} must be an integer in 1..64 (the paper uses 4, 10, 64). {_NOTHING}"
        )
    c = int(rounds)
    if split == "even":
        return tuple(Fraction(1, c) for _ in range(c))
    if split == "doubling":
        den = 2**c - 1
        return tuple(Fraction(2 ** (j - 1), den) for j in range(1, c + 1))
    raise InvalidInputError(
        f"split={split!r} is not one of 'even', 'doubling' (docs/operations/range_count.md). "
        f"{_NOTHING}"
    )


def _floor_to(x: Fraction, unit: Fraction | None) -> Fraction:
    if unit is None:
        return x
    return Fraction((x / unit).__floor__()) * unit


def _floor_mantissa(x: Fraction, bits: int) -> Fraction:
    """``x`` rounded down to ``bits`` significant binary digits (x > 0)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    step = Fraction(2) ** (e - bits + 1)
    return (x / step).__floor__() * step


def round_parts(
    allocation: Fraction, pi: Sequence[Fraction], unit: Fraction | None = None
) -> tuple[Fraction, ...]:
    """Return the parts ρ^(j) = π_j·a, each rounded down to a multiple of ``unit``.

    See ``docs/operations/range_count.md``.

    Rounding down makes Σ_j ρ^(j) ≤ a hold exactly, whatever the split.

    >>> round_parts(Fraction(1, 10**4), split_fractions("even", 4))[0]
    Fraction(1, 40000)
    >>> sum(round_parts(Fraction(1, 3), split_fractions("doubling", 10), Fraction(1, 10**6)))
    Fraction(333327, 1000000)
    """
    return tuple(_floor_to(allocation * p, unit) for p in pi)


def charge_if_stopped(
    allocation: Fraction, pi: Sequence[Fraction], r: int, unit: Fraction | None = None
) -> Fraction:
    """Return the charge of a user who took part in rounds 1..r: Σ_{j≤r} ρ^(j).

    See ``docs/operations/range_count.md``.

    >>> float(charge_if_stopped(Fraction(1, 10**4), split_fractions("doubling", 10), 3))
    6.842619745845552e-07
    """
    return sum(round_parts(allocation, pi, unit)[: int(r)], Fraction(0))


# ---------------------------------------------------------------------------------------------
# the decision rules (pure; the oracles of docs/operations/range_count.md)


def decide_noninteractive(
    est: Any, width: Any, nu_low: float, nu_high: float
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Algorithm 4's test: (to I_low: est + w < ν_low, to I_high: est − w > ν_high).

    See ``docs/operations/range_count.md``.

    >>> lo, hi = decide_noninteractive([-900.0, 400.0], [755.9236519, 755.9236519], 0.0, 0.0)
    >>> lo.tolist(), hi.tolist()
    ([True, False], [False, False])
    """
    e = np.asarray(est, dtype=np.float64)
    w = np.asarray(width, dtype=np.float64)
    low = e + w < nu_low
    high = (e - w > nu_high) & ~low
    return low, high


def interactive_step(est: Any, width: Any, k: int) -> NDArray[np.bool_]:
    """Algorithm 5's test: keep the users whose left end ≤ the k-th smallest right end.

    See ``docs/operations/range_count.md``.

    >>> interactive_step([10, 12, 30, 16, 40], [5, 5, 5, 5, 5], 2).tolist()
    [True, True, False, True, False]
    """
    e = np.asarray(est, dtype=np.float64)
    w = np.asarray(width, dtype=np.float64)
    right, left = e + w, e - w
    if not 1 <= k <= e.size:
        raise InvalidInputError(f"k={k!r} must be in 1..{e.size}. {_NOTHING}")
    r_star = np.partition(right, k - 1)[k - 1]
    return left <= r_star


# ---------------------------------------------------------------------------------------------
# parts for a whole population of users


@dataclass(frozen=True)
class Parts:
    """Per-allocation-group parts (exact) and the user → group map.

    Attributes
    ----------
    codes : ndarray of signed int, shape (n,)
        Group of each user (−1: allocation 0, the user does not take part), in the smallest
        dtype that holds the groups (:func:`small_codes`).
    table : list of tuple of Fraction
        ``table[g][j]`` is part j of group g, in the filter's (ground) units.
    allocations : list of Fraction
        The allocation of each group, as given (before the mantissa rounding).
    quantized : bool
        Whether allocations were rounded down to ``mantissa_bits`` significant bits to bound the
        number of sampler calls per round.
    """

    codes: NDArray[np.signedinteger[Any]]
    table: list[tuple[Fraction, ...]]
    allocations: list[Fraction]
    quantized: bool


@dataclass(frozen=True)
class GroupedAmounts:
    """Per-user amounts given by value: user i's amount is ``values[codes[i]]``.

    The ledger keeps amounts as int64 units; a caller that holds them so groups its users by
    value with ``numpy.unique`` (:meth:`from_units`) and hands over the groups, so that no
    step hashes or converts one ``Fraction`` per user. Accepted wherever the elimination takes
    ``allocations`` (one value per user).

    >>> g = GroupedAmounts.from_units(np.array([3, 0, 3]), Fraction(1, 10))
    >>> g.codes.tolist(), g.values, len(g)
    ([1, 0, 1], (Fraction(0, 1), Fraction(3, 10)), 3)
    """

    codes: NDArray[np.signedinteger[Any]]  # the smallest dtype for the groups (small_codes)
    values: tuple[Fraction, ...]

    @classmethod
    def from_units(cls, units: Any, unit: Fraction) -> GroupedAmounts:
        """Group int64 ledger units by value; each value is ``units × unit`` exactly."""
        uniq, inv = np.unique(np.asarray(units, dtype=np.int64).reshape(-1), return_inverse=True)
        # the codes in the smallest dtype that holds them: 1 byte per user for a few groups
        codes = inv.reshape(-1).astype(small_codes(uniq.size))
        return cls(codes, tuple(unit * u for u in uniq.tolist()))

    def __len__(self) -> int:
        return int(self.codes.size)

    def to_array(self) -> NDArray[Any]:
        """One ``Fraction`` per user (object array; equal values share one object)."""
        vals = np.empty(len(self.values) + 1, dtype=object)
        vals[:-1] = list(self.values)
        return vals[self.codes]


def small_codes(n_values: int) -> type[np.signedinteger[Any]]:
    """Return the smallest signed dtype for codes in [−1, n_values − 1] (and ``code + 1``).

    Per-user group codes index a few groups: int8 (1 byte per user) instead of int64 (8).

    >>> small_codes(1).__name__, small_codes(200).__name__, small_codes(10**6).__name__
    ('int8', 'int16', 'int32')
    """
    for t in (np.int8, np.int16, np.int32):
        if n_values < np.iinfo(t).max:
            return t
    return np.int64


def _remapped(remap: NDArray[np.int64], codes: NDArray[Any]) -> NDArray[Any]:
    """``remap[codes]``; ``codes`` itself (no per-user copy) when that is the same array.

    >>> c = np.array([0, 1, 1])
    >>> _remapped(np.arange(2), c) is c, _remapped(np.array([1, 0]), c).tolist()
    (True, [1, 0, 0])
    """
    if (codes.dtype.kind == "i" and np.array_equal(remap, np.arange(remap.size))
            and int(codes.min()) >= 0):  # fmt: skip
        return codes  # read only from here on: nothing writes a Parts' or a group's codes
    if codes.dtype.kind == "i" and remap.size < np.iinfo(codes.dtype).max:
        remap = remap.astype(codes.dtype)  # values in [-1, remap.size): codes' own dtype fits
    return remap[codes]


def _unique_allocations(
    allocations: Any, n: int
) -> tuple[NDArray[np.signedinteger[Any]], list[Fraction]]:
    if isinstance(allocations, GroupedAmounts):
        if allocations.codes.size != n:
            raise InvalidInputError(
                f"allocations has {allocations.codes.size} users but there are {n}. {_NOTHING}"
            )
        # merge equal values (a caller may pass duplicates): a dict over the few groups
        first: dict[Fraction, int] = {}
        remap = np.array(
            [first.setdefault(exact(v, "allocations"), len(first)) for v in allocations.values],
            dtype=np.int64,
        )
        codes = _remapped(remap, allocations.codes) if remap.size else allocations.codes
        # signed codes as they are (a small dtype: a byte per user for a few groups)
        return codes if codes.dtype.kind == "i" else codes.astype(np.int64), list(first)
    if np.ndim(allocations) == 0:
        a = exact(allocations, "allocations")
        return np.zeros(n, dtype=np.int8), [a]
    arr = np.asarray(allocations)
    if arr.ndim != 1 or arr.size != n:
        raise InvalidInputError(
            f"allocations has shape {arr.shape} but there are {n} users; pass one per user or a "
            f"scalar. {_NOTHING}"
        )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidInputError(f"allocations has NaN/inf entries. {_NOTHING}")
    codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    vals = [exact(v, "allocations") for v in np.asarray(uniq, dtype=object)]
    return codes.astype(small_codes(len(vals))), vals


def prepare_parts(
    allocations: Any,
    n: int,
    pi: Sequence[Fraction],
    *,
    unit: Fraction | None = None,
    max_groups: int = 64,
    mantissa_bits: int = 7,
) -> Parts:
    """Fix every user's parts before round 1 (``docs/operations/range_count.md``).

    Users with equal allocations share parts (and sampler calls). When there are more than
    ``max_groups`` distinct allocations, each is first rounded down to ``mantissa_bits``
    significant binary digits (less than 2^(1−bits) = 1.6 % less for 7 bits, never more; what
    is not used stays in the user's budget), which bounds the sampler calls per round by 2^(bits−1)
    = 64 per octave of allocations. Allocations are public, so this rule reads no data.

    >>> p = prepare_parts([1e-4, 1e-4, 0.0], 3, split_fractions("even", 2))
    >>> p.codes.tolist(), p.table
    ([0, 0, -1], [(Fraction(1, 20000), Fraction(1, 20000))])
    """
    codes, uniq = _unique_allocations(allocations, n)
    if any(a < 0 for a in uniq):
        raise InvalidInputError(f"allocations must be >= 0. {_NOTHING}")
    quantized = sum(1 for a in uniq if a > 0) > max_groups
    eff = [(_floor_mantissa(a, mantissa_bits) if quantized and a > 0 else a) for a in uniq]
    # groups after quantization: merge equal effective allocations
    key: dict[Fraction, int] = {}
    remap = np.empty(len(uniq), dtype=np.int64)
    table: list[tuple[Fraction, ...]] = []
    alloc_out: list[Fraction] = []
    for i, (a, e) in enumerate(zip(uniq, eff, strict=True)):
        if a == 0:
            remap[i] = -1
            continue
        if e not in key:
            key[e] = len(table)
            parts = round_parts(e, pi, unit)
            if min(parts) <= 0:
                raise InvalidInputError(
                    f"allocation {float(a):.6g} is too small to split into {len(pi)} rounds at the "
                    f"ledger's unit; use fewer rounds or a larger allocation. {_NOTHING}"
                )
            table.append(parts)
            alloc_out.append(e)
        remap[i] = key[e]
    return Parts(_remapped(remap, codes) if codes.size else codes, table, alloc_out, quantized)


# ---------------------------------------------------------------------------------------------
# the accumulators of the four valid triples


def _subgaussian_radius_factor(beta: float, d: int) -> float:
    """√(2u) with P(||X|| ≥ σ√(2u)) ≤ β for X with independent σ²-sub-Gaussian coordinates.

    Chernoff on E exp(λ||X||²) ≤ (1 − 2λσ²)^(−d/2): d = 1 gives √(2 ln(2/β)); d = 2 gives
    u = −W₋₁(−β/e); larger d solve (2u/d)^(d/2) e^(−(u − d/2)) = β.
    """
    if d == 1:
        return math.sqrt(2.0 * math.log(2.0 / beta))
    from gpframe.mechanisms.tails import _subgaussian_u

    return math.sqrt(2.0 * _subgaussian_u(beta, d))


class _Acc:
    """Running estimate and width for each user (arrays of length n)."""

    def __init__(self, n: int, d: int, c: int | None = None) -> None:
        self.n, self.d = n, d
        # rounds taken part in, at most c: the smallest signed dtype that counts to c (1 byte
        # per user instead of 8 for the usual c <= 126)
        self.rounds = np.zeros(n, dtype=np.int64 if c is None else small_codes(c))
        self.gmax = np.zeros(n)

    def add(self, idx: NDArray[np.int64], rel: Any, amount: Fraction) -> None:  # pragma: no cover
        raise NotImplementedError

    def estimate(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:  # pragma: no cover
        raise NotImplementedError

    def width(self, idx: NDArray[np.int64], beta: float) -> NDArray[np.float64]:  # pragma: no cover
        raise NotImplementedError

    def std(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        """Return the noise std (or sub-Gaussian scale) of the estimate, for the shift."""
        raise NotImplementedError  # pragma: no cover


class _GaussAcc(_Acc):
    """Gaussian releases, precision-weighted (weights 1/σ_j², σ_j the sampled scale).

    The weighted average of independent σ_j²-sub-Gaussian noises is sub-Gaussian with proxy
    1/Σ_j σ_j^(−2) (= 1/(2ρ^(≤j)) nominally, ``docs/operations/range_count.md``); the snapping error
    of every round is at most √d·g/2, so the average's is at most √d·max g/2.
    """

    def __init__(
        self, n: int, d: int, h: Callable[[np.ndarray], np.ndarray] | None, c: int | None = None
    ) -> None:
        super().__init__(n, d, c)
        self.h = h
        self.prec = np.zeros(n)
        self.sum = np.zeros((n, d)) if d > 1 else np.zeros(n)

    def add(self, idx: NDArray[np.int64], rel: Any, amount: Fraction) -> None:
        s = float(rel.noise["scale"])
        p = 1.0 / (s * s)
        self.prec[idx] += p
        self.sum[idx] += p * np.asarray(rel, dtype=np.float64)
        self.gmax[idx] = np.maximum(self.gmax[idx], float(rel.g))

    def mean(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        if self.d > 1:
            return self.sum[idx] / self.prec[idx, None]
        return self.sum[idx] / self.prec[idx]

    def estimate(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        m = self.mean(idx)
        return np.asarray(self.h(m), dtype=np.float64) if self.h is not None else m

    def width(self, idx: NDArray[np.int64], beta: float) -> NDArray[np.float64]:
        f = _subgaussian_radius_factor(beta, self.d)
        # f / √prec + √d·gmax / 2, in place (the same operations in the same order); ``idx``
        # may be a slice, so gmax is multiplied into a new array (never scaled in place)
        w = np.sqrt(self.prec[idx])
        np.divide(f, w, out=w)
        g = np.multiply(self.gmax[idx], math.sqrt(self.d))
        g /= 2.0
        w += g
        return w

    def std(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        return 1.0 / np.sqrt(self.prec[idx])


class _LaplaceDistAcc(_Acc):
    """1-D Laplace releases z_j = h(x) + noise at ε_j (``docs/operations/range_count.md``).

    Estimate Σ ε_j z_j / E_m. A discrete Laplace k of rate λ couples with a continuous Lap(1/λ)
    within 1 lattice step (k = ⌊E₁/λ⌋ − ⌊E₂/λ⌋), so the noise of the estimate is
    (1/E_m) Σ K'_j L_j (L_j i.i.d. Lap(1), K'_j = ε_j·scale_j) plus at most max g (coupling) and
    g/2 (snapping); Σ K'_j L_j is more peaked than K'_max Σ L_j (symmetric unimodal, Birnbaum), so
    width = t_m(β)·K'_max/E_m + 1.5·max g.
    """

    def __init__(self, n: int, c: int | None = None) -> None:
        super().__init__(n, 1, c)
        self.E = np.zeros(n)
        self.sum = np.zeros(n)
        self.kmax = np.zeros(n)
        self.var = np.zeros(n)  # Σ (ε_j scale_j)² · 2, for the std
        self._t: dict[tuple[int, float], float] = {}

    def add(self, idx: NDArray[np.int64], rel: Any, amount: Fraction) -> None:
        e = float(amount)
        s = float(rel.noise["scale"])
        self.E[idx] += e
        self.sum[idx] += e * np.asarray(rel, dtype=np.float64)
        self.kmax[idx] = np.maximum(self.kmax[idx], e * s)
        self.var[idx] += 2.0 * (e * s) ** 2
        self.gmax[idx] = np.maximum(self.gmax[idx], float(rel.g))

    def estimate(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        return self.sum[idx] / self.E[idx]

    def _tm(self, m: int, beta: float) -> float:
        key = (m, beta)
        if key not in self._t:
            self._t[key] = laplace_width_t(m, beta)
        return self._t[key]

    def width(self, idx: NDArray[np.int64], beta: float) -> NDArray[np.float64]:
        m = self.rounds[idx]
        t = np.array([self._tm(int(v), beta) for v in np.unique(m)])
        tv = t[np.searchsorted(np.unique(m), m)]
        return tv * self.kmax[idx] / self.E[idx] + 1.5 * self.gmax[idx]

    def std(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        return np.sqrt(self.var[idx]) / self.E[idx]


class _PlanarAcc(_Acc):
    """Planar Laplace releases: the intersection of per-round intervals h(x̃_j) ± r_j.

    See ``docs/operations/range_count.md``.

    r_j is the proven planar-lattice radius at the run's per-estimate failure probability; the
    estimate is the midpoint and the width the half-length (negative if the intervals do not
    meet, which only happens off the good event).
    """

    def __init__(
        self, n: int, h: Callable[[np.ndarray], np.ndarray], beta_round: float,
        c: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__(n, 2, c)
        self.h = h
        self.beta_round = beta_round
        self.lo = np.full(n, -np.inf)
        self.hi = np.full(n, np.inf)
        self.scale = np.zeros(n)

    def add(self, idx: NDArray[np.int64], rel: Any, amount: Fraction) -> None:
        from gpframe.mechanisms import planar_bound

        r = planar_bound(self.beta_round, rel.noise["scale"], rel.g, d=2)
        v = np.asarray(self.h(np.asarray(rel, dtype=np.float64)), dtype=np.float64)
        self.lo[idx] = np.maximum(self.lo[idx], v - r)
        self.hi[idx] = np.minimum(self.hi[idx], v + r)
        self.scale[idx] = float(rel.noise["scale"])
        self.gmax[idx] = np.maximum(self.gmax[idx], float(rel.g))

    def estimate(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        return 0.5 * (self.lo[idx] + self.hi[idx])

    def width(self, idx: NDArray[np.int64], beta: float) -> NDArray[np.float64]:
        # the intervals were built at the run's per-round probability; ``beta`` is ignored
        return 0.5 * (self.hi[idx] - self.lo[idx])

    def std(self, idx: NDArray[np.int64]) -> NDArray[np.float64]:
        return np.sqrt(2.0) * self.scale[idx]


# ---------------------------------------------------------------------------------------------
# the result of an elimination run


@dataclass
class Elimination:
    """What an elimination run returns (all arrays aligned with the input users).

    Attributes
    ----------
    state : ndarray of int8
        1: eliminated into I_low (confidently h < ν_low), 2: into I_high, 0: undecided (S) or,
        for Algorithm 5, kept; −1: not queried (allocation 0).
    rounds_run : ndarray of signed int
        How many rounds each user took part in (0 if not queried); the smallest dtype that
        counts to the number of rounds (int8 up to 126 rounds).
    charges : ndarray of object (Fraction)
        Σ of the ``Released.guarantee`` amounts of the rounds each user took part in, in the
        filter's ground units (× the projection factor); 0 for users not queried.
    allocations : ndarray of object (Fraction)
        Each user's allocation after the optional mantissa rounding (0 if not queried).
    estimate : ndarray of float64
        The final estimate of h (NaN if not queried).
    std : ndarray of float64
        Standard deviation of the final estimate's noise (for the threshold shift).
    rounds_histogram : ndarray of int64, shape (c + 1,)
        ``[r]`` = number of queried users who stopped after exactly r rounds (index 0 unused).
    n_calls : int
        Sampler (release wrapper) calls made.
    guarantees : list
        The ``Guarantee`` of each call (kind, amount, metric).
    saving : Fraction
        Σ over queried users of allocation − charge (exact).
    width_fn : callable
        ``width_fn(beta)`` → per-user width of the final estimate at failure probability β
        (computed from the noise actually sampled; NaN for users not queried).
    """

    state: NDArray[np.int8]
    rounds_run: NDArray[np.signedinteger[Any]]
    charges: NDArray[Any]
    allocations: NDArray[Any]
    estimate: NDArray[np.float64]
    std: NDArray[np.float64]
    rounds_histogram: NDArray[np.int64]
    n_calls: int
    guarantees: list[Any] = field(default_factory=list)
    width_fn: Callable[[float], NDArray[np.float64]] | None = field(default=None, repr=False)
    quantized: bool = False
    saving: Fraction = Fraction(0)
    #: ``charges`` by value: user i pays ``charge_table[charge_codes[i]]`` (few distinct
    #: values, one per group and rounds run), so a caller converts each value once
    charge_codes: NDArray[np.int64] | None = field(default=None, repr=False)
    charge_table: NDArray[Any] | None = field(default=None, repr=False)

    @property
    def charges_float(self) -> NDArray[np.float64]:
        """The charges as floats (for display; the ledger takes :attr:`charges`)."""
        return np.array([float(c) for c in self.charges], dtype=np.float64)


def _release(
    kind: str, triple: str, data: np.ndarray, part: Fraction, k: Fraction, rng: Any
) -> tuple[Any, Fraction]:
    """One release for a group of users at ``part`` (ground units); returns (released, charge)."""
    from gpframe import mechanisms as mech
    from gpframe.mechanisms.laplace_mech import scale_warnings_left_out

    # a single round's scale is meant to be large (it is a slice of the allocation): the
    # wrappers' "scale above 100 km" advice does not apply to one round (left out per thread:
    # DuckDB's threads run rounds at once, and catch_warnings swaps process-wide filters)
    with scale_warnings_left_out():
        if kind == "cgp":
            rel = mech.gaussian_cgp(data, rho=part / (k * k), rng=rng)
            charge = Fraction(rel.guarantee.amount) * k * k
        elif triple == "dist":
            rel = mech.laplace_gp(data, eps=part / k, rng=rng)
            charge = Fraction(rel.guarantee.amount) * k
        else:
            rel = mech.planar_laplace(data, eps=part / k, rng=rng)
            charge = Fraction(rel.guarantee.amount) * k
    if rel.guarantee.kind != kind:
        raise GpframeInternalError(
            f"elimination asked for a {kind} release and got {rel.guarantee.kind}."
        )
    if charge > part:
        raise GpframeInternalError(
            f"a round's guarantee {float(charge)!r} exceeds its part {float(part)!r}."
        )
    return rel, charge


def release_part(
    kind: str, triple: str, data: np.ndarray, part: Fraction, k: Fraction, rng: Any
) -> tuple[Any, Fraction]:
    """Release one group of users' values at ``part``: (the ``Released``, its charge).

    The release of one round of the elimination (``docs/operations/range_count.md``), for a
    ``draw`` callback that runs it where the values are held. Noise: ``gaussian_cgp`` at
    ρ = part/k² (``kind="cgp"``), ``laplace_gp`` (``triple="dist"``) or ``planar_laplace``
    (``triple="pt"``) at ε = part/k (``docs/noise.md``). Charge: the guarantee × k² (× k),
    at most ``part``, in the filter's ground units.

    >>> rel, charge = release_part("cgp", "dist", np.array([10.0]), Fraction(1, 10**4),
    ...                            Fraction(1), None)
    >>> charge, rel.guarantee.kind
    (Fraction(1, 10000), 'cgp')
    """
    return _release(kind, triple, data, part, k, rng)


def _validate_parts(kind: str, triple: str, parts: Parts, k: Fraction) -> None:
    """Check every part against the wrappers' ranges before any noise is drawn."""
    from gpframe.mechanisms import calibration as cal

    d = 1 if triple == "dist" else 2
    for row in parts.table:
        for p in set(row):
            if kind == "cgp":
                cal.cgp_gaussian(p / (k * k), d=d)
            else:
                cal.check_eps(p / k, "eps (one round's part)")
                cal.gp_laplace(p / k, d=d)


def check_parts(
    allocations: Any,
    n: int,
    *,
    kind: str,
    triple: str,
    rounds: int,
    split: str,
    beta: float,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
) -> None:
    """Run the parameter checks of an elimination without data and without drawing noise.

    The same checks as the start of :func:`eliminate_noninteractive` / :func:`eliminate_interactive`
    (β, the split schedule, the projection factor, every user's parts at the ledger's ``unit``
    and each part against the release wrappers' ranges), so a driver can refuse bad parameters
    *before* it reserves, and can prove that an ``InvalidInputError`` raised here
    came before any noise. Raises ``InvalidInputError``; returns None.

    >>> check_parts(1e-4, 3, kind="cgp", triple="dist", rounds=4, split="even", beta=0.05)
    >>> check_parts(Fraction(3, 10**15), 1, kind="cgp", triple="dist", rounds=10,
    ...             split="doubling", beta=0.05, unit=Fraction(1, 10**15))
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: allocation 3e-15 is too small to split into 10 rounds ...
    """
    if kind not in KINDS:
        raise InvalidInputError(f"kind={kind!r} is not one of 'cgp', 'gp'. {_NOTHING}")
    if triple not in TRIPLES:
        raise InvalidInputError(f"triple={triple!r} is not one of 'dist', 'pt'. {_NOTHING}")
    probability(beta)
    pi = split_fractions(split, rounds)
    k = exact(scale_max, "scale_max")
    if k < 1:
        raise InvalidInputError(f"scale_max={scale_max!r} must be >= 1. {_NOTHING}")
    _validate_parts(kind, triple, prepare_parts(allocations, int(n), pi, unit=unit), k)


def check_method_parts(
    allocations: Any,
    *,
    kind: str,
    method: str,
    rounds: int,
    split: str,
    beta: Any,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
) -> None:
    """:func:`check_parts` as the range-count and KDE methods run the elimination.

    ``pt`` / ``dist`` (the baselines) run one round at β; ``pt-elim`` / ``dist-elim`` run
    ``rounds`` rounds of ``split`` at β/2; the ``dist*`` methods release 1-D values, the ``pt*``
    methods points. ``allocations`` is a scalar or one value per user (0: not queried).

    >>> check_method_parts(1e-4, kind="gp", method="dist-elim", rounds=4, split="even", beta=0.05)
    """
    b = probability(beta)
    elim = str(method).endswith("-elim")
    grouped = isinstance(allocations, GroupedAmounts)
    n = len(allocations) if grouped or np.ndim(allocations) else 1
    check_parts(
        allocations, n, kind=kind, triple="dist" if str(method).startswith("dist") else "pt",
        rounds=rounds if elim else 1, split=split if elim else "even",
        beta=b / 2 if elim else b, unit=unit, scale_max=scale_max,
    )  # fmt: skip


def _setup(
    data: Any,
    allocations: Any,
    kind: str,
    triple: str,
    rounds: int,
    split: str,
    beta: float,
    unit: Fraction | None,
    scale_max: float | Fraction,
    h: Callable[[np.ndarray], np.ndarray] | None,
) -> tuple[np.ndarray, Parts, tuple[Fraction, ...], Fraction, float]:
    if kind not in KINDS:
        raise InvalidInputError(f"kind={kind!r} is not one of 'cgp', 'gp'. {_NOTHING}")
    if triple not in TRIPLES:
        raise InvalidInputError(f"triple={triple!r} is not one of 'dist', 'pt'. {_NOTHING}")
    x = np.asarray(data, dtype=np.float64)
    if triple == "dist" and x.ndim != 1:
        raise InvalidInputError(f"values must have shape (n,), got {x.shape}. {_NOTHING}")
    if triple == "pt":
        if x.ndim != 2 or x.shape[1] != 2:
            raise InvalidInputError(f"points must have shape (n, 2), got {x.shape}. {_NOTHING}")
        if h is None:
            raise InvalidInputError(f"triple='pt' needs the importance function h. {_NOTHING}")
    if not np.isfinite(x).all():
        raise InvalidInputError(f"the values/points have NaN/inf entries. {_NOTHING}")
    b = probability(beta)
    pi = split_fractions(split, rounds)
    k = exact(scale_max, "scale_max")
    if k < 1:
        raise InvalidInputError(f"scale_max={scale_max!r} must be >= 1. {_NOTHING}")
    parts = prepare_parts(allocations, x.shape[0], pi, unit=unit)
    _validate_parts(kind, triple, parts, k)
    return x, parts, pi, k, b


def _accumulator(
    kind: str, triple: str, n: int, h: Any, beta_round: float, c: int | None = None
) -> _Acc:
    if kind == "cgp":
        return _GaussAcc(n, 1 if triple == "dist" else 2, h if triple == "pt" else None, c)
    if triple == "dist":
        return _LaplaceDistAcc(n, c)
    return _PlanarAcc(n, h, beta_round, c)


def _run_round(
    j: int,
    active: NDArray[np.int64],
    x: np.ndarray,
    parts: Parts,
    acc: _Acc,
    kind: str,
    triple: str,
    k: Fraction,
    rng: Any,
    charge_tab: list[list[Fraction]],
    guarantees: list[Any],
    draw: Draw | None = None,
) -> int:
    """Round j for the active users: one wrapper call per distinct part value (never per user).

    With ``draw``, the users' values are released where they are held (see
    :func:`eliminate_interactive`), possibly as several calls; each call's guarantee must be
    the same at the same part (it depends on the part only).
    """
    # part ids per allocation group first (few), then per user by indexing: no per-user hashing
    pvals = np.empty(len(parts.table), dtype=object)
    pvals[:] = [row[j] for row in parts.table]
    gid, puniq = pd.factorize(pvals, use_na_sentinel=False)
    calls = 0
    if len(puniq) == 1:  # one part for every active user (the usual case): no per-user arrays
        groups: Any = [active]
    else:
        pid = gid[parts.codes[active]]
        order = np.argsort(pid, kind="stable")
        bounds = np.searchsorted(pid[order], np.arange(len(puniq) + 1))
        del pid
        groups = (active[order[bounds[q] : bounds[q + 1]]] for q in range(len(puniq)))
    for q, idx in enumerate(groups):
        if idx.size == 0:
            continue
        part = puniq[q]
        if draw is None:
            # every row active (sorted distinct rows, so all of them in order): no copy of x
            data = x if idx.size == x.shape[0] else x[idx]
            pieces = [(idx, *_release(kind, triple, data, part, k, rng))]
            del data
        else:
            pieces = draw(idx, part)
        for sub, rel, charge in pieces:
            calls += 1
            guarantees.append(rel.guarantee)
            acc.rounds[sub] += 1
            acc.add(sub, rel, charge / (k if kind == "gp" else k * k))
            for g in np.unique(parts.codes[sub]):
                if charge_tab[g][j] not in (0, charge):  # one part, one guarantee
                    raise GpframeInternalError("two releases at one part stated two guarantees.")
                charge_tab[g][j] = charge
    return calls


def _finish(
    parts: Parts,
    acc: _Acc,
    state: NDArray[np.int8],
    charge_tab: list[list[Fraction]],
    c: int,
    n_calls: int,
    guarantees: list[Any],
    pi: Sequence[Fraction],
    est_all: NDArray[np.float64] | None,
) -> Elimination:
    n = parts.codes.size
    queried = parts.codes >= 0
    r = acc.rounds
    # charges per (group, rounds run) from the guarantees actually released
    ng = len(parts.table)
    cum = np.full((max(ng, 1), c + 1), Fraction(0), dtype=object)
    for g in range(ng):
        tot = Fraction(0)
        cum[g, 0] = tot
        for j in range(c):
            tot += charge_tab[g][j]
            cum[g, j + 1] = tot
            if tot > parts.allocations[g]:
                raise GpframeInternalError("a user's charges exceed the allocation.")
    # index tables instead of per-user Fraction arithmetic: one entry per (group, rounds run)
    ng1 = max(ng, 1)
    flat = cum.reshape(-1)
    ga = np.empty(ng1 + 1, dtype=object)
    ga[:] = [*parts.allocations, *([Fraction(0)] * (ng1 - ng)), Fraction(0)]
    # int64 first: the codes and rounds are small dtypes, their product may not fit them
    key = np.where(queried, parts.codes.astype(np.int64) * (c + 1) + r, -1)
    charge_flat = np.empty(flat.size + 1, dtype=object)
    charge_flat[:-1] = flat
    charge_flat[-1] = Fraction(0)
    # codes into the few (group, rounds) charges: a small dtype (1 to 2 bytes per user)
    charge_codes = np.where(key >= 0, key, flat.size).astype(small_codes(flat.size + 1))
    charges = charge_flat[charge_codes]
    allocs = ga[np.where(queried, parts.codes, ng1)]
    counts = np.bincount(key[key >= 0], minlength=flat.size)
    del key  # per-user int64s: free before the per-user std below
    saving = Fraction(0)
    for kk in np.flatnonzero(counts):
        saving += int(counts[kk]) * (parts.allocations[kk // (c + 1)] - flat[kk])
    idx: Any = np.flatnonzero(queried & (r > 0))  # never measured: no std or width (NaN)
    every = 0 < idx.size == n  # every user measured: no NaN-filled copies
    if every:  # idx is 0..n-1: a slice reads the same rows without an index per user
        idx = slice(None)
    if est_all is not None:
        est = est_all  # the callers' own array, theirs no longer: no copy
    elif every:  # (see _held_estimates)
        est = acc.estimate(idx)
    else:
        est = np.full(n, np.nan)
        if idx.size:
            est[idx] = acc.estimate(idx)
    std = acc.std(idx) if every else np.full(n, np.nan)
    if not every and idx.size:
        std[idx] = acc.std(idx)

    def width_fn(beta: float) -> NDArray[np.float64]:
        if every:
            return acc.width(idx, beta)
        out = np.full(n, np.nan)
        if idx.size:
            out[idx] = acc.width(idx, beta)
        return out

    hist = np.bincount(r[queried], minlength=c + 1).astype(np.int64)
    return Elimination(
        state=state,
        rounds_run=r,  # the accumulator's counts, final here: no copy
        charges=charges,
        allocations=allocs,
        estimate=est,
        std=std,
        rounds_histogram=hist,
        n_calls=n_calls,
        guarantees=guarantees,
        width_fn=width_fn,
        quantized=parts.quantized,
        saving=saving,
        charge_codes=charge_codes,
        charge_table=charge_flat,
    )


def _held_estimates(acc: _Acc, n: int) -> NDArray[np.float64] | None:
    """Return the per-user estimates array kept through the rounds (None: made at the end).

    An accumulator without an importance function estimates each user from their own sums
    alone, elementwise, and a user's sums no longer change once they stop: the estimate made
    at the end is the one made at their last round, bit for bit, so no (n,) array of them is
    held through the rounds. With ``h`` (point releases) the estimates are kept as they are
    made (``h`` is not evaluated twice).
    """
    return np.full(n, np.nan) if getattr(acc, "h", None) is not None else None


def eliminate_noninteractive(
    data: Any,
    allocations: Any,
    *,
    kind: Literal["cgp", "gp"] = "cgp",
    triple: Literal["dist", "pt"] = "dist",
    h: Callable[[np.ndarray], np.ndarray] | None = None,
    nu_low: float = 0.0,
    nu_high: float = 0.0,
    rounds: int = 10,
    split: Literal["even", "doubling"] = "doubling",
    beta: float = 0.05,
    n_union: int | None = None,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
) -> Elimination:
    """Algorithm 4, non-interactive iterative elimination, vectorised over users.

    See ``docs/operations/range_count.md``.

    Parameters
    ----------
    data : ndarray
        ``triple="dist"``: h(x_i) per user, shape (n,) (1-Lipschitz, metres); ``triple="pt"``:
        the points x_i, shape (n, 2), projected metres.
    allocations : scalar or array of shape (n,)
        Each user's allocation a_i in the filter's ground units (ρ in m⁻² for ``kind="cgp"``, ε
        in m⁻¹ for ``kind="gp"``); 0 means the user is not queried.
    kind : {"cgp", "gp"}
        Gaussian noise (``gaussian_cgp``) or Laplace (``laplace_gp``; ``planar_laplace`` for
        ``triple="pt"``).
    triple : {"dist", "pt"}
        Distance privatization (Cor. 6.2 / ``docs/operations/range_count.md``) or point
        privatization (Cor. 6.1 / ``docs/operations/range_count.md``).
    h : callable
        For ``triple="pt"``: the 1-Lipschitz importance function on an (m, 2) array of points.
    nu_low, nu_high : float
        Thresholds: a user goes to I_low once est + w < ν_low, to I_high once est − w > ν_high.
    rounds, split : int, {"even", "doubling"}
        c and the split schedule π, fixed before round 1 (``docs/operations/range_count.md``).
    beta : float
        Failure probability of the eliminations: each of the n·c tests uses β/(n·c).
    n_union : int, optional
        The n of the union bound (default: the number of queried users; public).
    unit : Fraction, optional
        Ledger unit the parts are rounded down to (``docs/operations/range_count.md``).
    scale_max : float
        Projection scale factor k ≥ 1: the mechanisms run at ρ/k² (ε/k) per projected metre and
        the charge is the guarantee × k² (× k), as ``privatize`` does (``docs/noise.md``).
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gpframe.testing.seeded_rng``).

    Returns
    -------
    Elimination

    Notes
    -----
    Noise: round j releases h(x_i) (or x_i) for the still-undecided users only, at part
    ρ_i^(j) = π_j a_i rounded down (σ = (1 + √d·g/r_min)/√(2ρ_i^(j)) for CGP, Laplace scale
    (1 + g/r_min)/ε_i^(j) for GP, ``docs/noise.md``).
    Charge: Σ_{j ≤ r_i} of the rounds' ``Released.guarantee`` amounts, r_i the rounds user i took
    part in (the eliminating round included; ``docs/operations/range_count.md``).
    Lemma 5.2: with probability ≥ 1 − β every user in I_low has h < ν_low and every user in
    I_high has h > ν_high.

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> with seeded_enabled():
    ...     out = eliminate_noninteractive([-5000.0, 20.0, 5000.0], 1e-4, rounds=4, split="even",
    ...                                    rng=seeded_rng(1))
    >>> out.state.tolist()[0], out.state.tolist()[2]       # far inside / far outside
    (1, 2)
    >>> [float(c) for c in out.charges][0]                  # eliminated in round 1: a/4
    2.5e-05
    """
    x, parts, pi, k, b = _setup(data, allocations, kind, triple, rounds, split, beta, unit,
                                scale_max, h)  # fmt: skip
    n, c = x.shape[0], len(pi)
    queried = parts.codes >= 0
    nu = int(n_union) if n_union is not None else max(int(queried.sum()), 1)
    beta1 = b / (nu * c)
    acc = _accumulator(kind, triple, n, h, beta1, c)
    state = np.where(queried, 0, -1).astype(np.int8)
    charge_tab = [[Fraction(0)] * c for _ in parts.table]
    guarantees: list[Any] = []
    active = np.flatnonzero(queried)
    est_all = _held_estimates(acc, n)
    n_calls = 0
    for j in range(c):
        if active.size == 0:
            break
        n_calls += _run_round(j, active, x, parts, acc, kind, triple, k, rng, charge_tab,
                              guarantees)  # fmt: skip
        est = acc.estimate(active)
        if est_all is not None:
            est_all[active] = est
        if math.isinf(nu_low) and math.isinf(nu_high) and nu_low < 0 < nu_high:
            continue  # a baseline (nothing can be eliminated): skip the widths
        low, high = decide_noninteractive(est, acc.width(active, beta1), nu_low, nu_high)
        state[active[low]] = 1
        state[active[high]] = 2
        active = active[~(low | high)]
        del est, low, high  # per-user arrays: not held through the next round's draws
    return _finish(parts, acc, state, charge_tab, c, n_calls, guarantees, pi, est_all)


def eliminate_interactive(
    data: Any,
    allocations: Any,
    *,
    k: int,
    kind: Literal["cgp", "gp"] = "cgp",
    triple: Literal["dist", "pt"] = "dist",
    h: Callable[[np.ndarray], np.ndarray] | None = None,
    rounds: int = 10,
    split: Literal["even", "doubling"] = "doubling",
    beta: float = 0.05,
    n_union: int | None = None,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
    draw: Draw | None = None,
) -> Elimination:
    """Algorithm 5, interactive iterative elimination: keep the k users with the smallest h.

    See ``docs/operations/range_count.md``.

    Parameters are those of :func:`eliminate_noninteractive`, with ``k`` (1 ≤ k ≤ number of
    queried users) instead of the thresholds, and:

    draw : callable, optional
        ``draw(idx, part)`` releases the values of the users ``idx`` at ``part`` (ground units)
        where they are held, and returns a list of ``(positions, Released, charge)``, one per
        release call, covering ``idx`` (the Dask face: one call per partition, on its worker,
        ``docs/beyond-one-machine.md``). The rounds' decisions stay here and read only the
        released values. ``data`` is then read for its shape only, and ``rng`` is not used.

    Returns
    -------
    Elimination
        ``state`` 0 for the kept set S (|S| ≥ k), 2 for the users dropped; ``rounds_run`` and
        ``charges`` as in ``docs/operations/range_count.md``: dropped users pay the rounds up to and
        including the one that dropped them, survivors pay the rounds run before the loop stopped.

    Notes
    -----
    Noise and charge as in :func:`eliminate_noninteractive`. Lemma 5.3: with probability
    ≥ 1 − β the k users with the smallest true h are in S after every round. The loop stops as
    soon as |S| ≤ k, or after c rounds.

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> with seeded_enabled():
    ...     out = eliminate_interactive([0.0, 10.0, 90000.0, 95000.0], 1e-4, k=2, rounds=4,
    ...                                 split="even", rng=seeded_rng(2))
    >>> out.state.tolist()
    [0, 0, 2, 2]
    """
    x, parts, pi, kk, b = _setup(data, allocations, kind, triple, rounds, split, beta, unit,
                                 scale_max, h)  # fmt: skip
    n, c = x.shape[0], len(pi)
    queried = parts.codes >= 0
    nq = int(queried.sum())
    if nq == 0:
        raise InvalidInputError(f"there are no queried users to choose from. {_NOTHING}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= nq:
        raise InvalidInputError(
            f"k={k!r} must be an integer in 1..{nq} (the queried users). {_NOTHING}"
        )
    nu = int(n_union) if n_union is not None else max(nq, 1)
    beta1 = b / (nu * c)
    acc = _accumulator(kind, triple, n, h, beta1, c)
    state = np.where(queried, 0, -1).astype(np.int8)
    charge_tab = [[Fraction(0)] * c for _ in parts.table]
    guarantees: list[Any] = []
    active = np.flatnonzero(queried)
    est_all = _held_estimates(acc, n)
    n_calls = 0
    for j in range(c):
        if active.size <= k:
            break
        n_calls += _run_round(j, active, x, parts, acc, kind, triple, kk, rng, charge_tab,
                              guarantees, draw)  # fmt: skip
        est = acc.estimate(active)
        if est_all is not None:
            est_all[active] = est
        keep = interactive_step(est, acc.width(active, beta1), int(k))
        state[active[~keep]] = 2
        active = active[keep]
        del est, keep  # per-user arrays: not held through the next round's draws
    if est_all is not None and n_calls and active.size and np.isnan(est_all[active]).any():
        est_all[active] = acc.estimate(active)
    # no round ran (k >= the queried users): nothing was measured, the estimates stay NaN
    return _finish(parts, acc, state, charge_tab, c, n_calls, guarantees, pi, est_all)
