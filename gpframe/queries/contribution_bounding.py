"""Per-cell mean and variance when the occupancy is private: user-level contribution bounding.

This is ``grid_stats(occupancy="private")``. It is **not** the paper's mechanism
(``docs/operations/grid_stats.md``): Clip-User's guarantee needs a public occupancy
(``docs/operations/grid_stats.md``), because its sensitivities, its suppressions and the set of
released cells are all functions of the counts. When the counts come from private location data (GPS
pings), they must be protected too, and this module uses the standard recipe instead.

Neighbouring relation: add or remove **one user with all of their records** (any cells, any
values, any number of rows). Everything that depends on the data is protected: values, which
cells a user visits and how often. What is public: the cell list, [L, U], ε, ``max_cells``,
``max_per_cell``, the salt and the per-user sample order.

1. **Public cell list.** The caller names the cells to release (e.g. every H3 cell covering a
   polygon). Rows outside the list are dropped; **every listed cell is released, empty or not**,
   so the released set leaks nothing.
2. **Contribution bounding (data-independent rule).** Each user keeps at most ``max_cells`` of
   their listed cells: those with the smallest keyed hash h(salt, user, cell) (ties: smaller
   cell). In each kept cell the user keeps their first ``max_per_cell`` rows in the per-user order
   (``order``, then row position). The rule reads only the user's own rows and public constants,
   so adding or removing one user changes no other user's kept rows. A hash, rather than "the
   smallest cell keys", spreads the dropped cells uniformly instead of always dropping the same
   region. The salt must be fixed before looking at the data (the default is a constant).
3. **Exact sums** (``docs/noise.md``). Kept values are snapped to the fixed-point grid q of
   :func:`~gpframe.queries.grid_stats.value_step` (integers k in [0, T], T = ⌊W/q⌋) and summed in
   int64, so the sums do not depend on the summation order. With H = T·q/2 and centre c = L + H,
   three statistics per cell are released:
   ``n`` (count, sensitivity p = ``max_per_cell``), ``s1 = Σ(x̂ − c)`` (sensitivity p·H) and
   ``s2 = Σ((x̂ − c)² − H²/2)`` (sensitivity p·H²/2): adding or removing one user adds or
   removes at most p terms of a cell, each in [−1, 1], [−H, H] and [−H²/2, H²/2] respectively.
4. **Noise.** ``laplace_dp`` per statistic per cell at ``epsilon`` (``docs/noise.md``: the count
   on g = 1 with λ = ε/p; the sums on g = 2^(⌊log₂Δ⌋−20) with λ = ε/(⌊Δ/g⌋+1)). Released values:
   ``count = ñ``, ``mean = c + s̃1/ñ``, ``variance = s̃2/ñ + H²/2 − (s̃1/ñ)²`` (post-processing,
   clamped to [L, U] and [0, W²/4]; NaN when ñ < 1).
5. **Accounting.** A user with kept rows in |G′_ℓ| ≤ ``max_cells`` cells is charged
   ``epsilon × 3 × |G′_ℓ|`` on the central ledger (a user changes at most |G′_ℓ| cells, each
   statistic of each cell being ε-DP; ``docs/operations/grid_stats.md``'s per-user composition
   argument). The worst case over users is ``epsilon × 3 × max_cells``; equivalently, each
   statistic's vector over all cells has ℓ1 sensitivity ``max_cells`` × (that statistic's per-cell
   sensitivity) and costs ε × ``max_cells``. Users whose budget cannot pay are dropped (their own
   ledger state alone decides it) and charged nothing.

The per-user total form (``epsilon_per_user=E``; ``docs/operations/grid_stats.md``) releases
the same three statistics with one ε each (``epsilons``), every kept row carrying its user's
average in the cell (:func:`pair_averages`: per-user averages, weighted by min(m, p), with the
sensitivities above), and shrinks the means toward their pooled centre (post-processing).

Differences from ``occupancy="public"`` (Clip-User): the public mode protects values only and
adapts its noise to the (public) counts: a cell with many users gets sensitivity W·r*/r, which
shrinks with the crowd. Here the sum's noise is fixed (p·H/ε) and the mean's error is roughly
that over the cell's count, so popular cells do about as well, while sparse cells are noisier and
are released anyway (often as NaN). Bounding also biases the statistics: rows beyond the caps are
dropped, and that bias depends on private data, so the reported ``mean_error`` bounds only the
noise (against the bounded statistic), not the bounding bias.

The ledger and the Result's ``charges`` are curator-side: they record who was charged how much,
which reveals presence and |G′_ℓ|, as for every gpframe query. Only the released cell values are
the private output.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import exact
from gpframe.errors import GpframeInternalError, InvalidInputError, LedgerError
from gpframe.ledger.run import Charge, run
from gpframe.ledger.session import EXCLUDED_KEY

__all__ = [
    "DEFAULT_SALT",
    "STATISTICS_PRIVATE",
    "BoundedContributions",
    "PrivateCellRelease",
    "PrivateRun",
    "bound_contributions",
    "pair_averages",
    "private_sums",
    "release_private_cells",
    "run_private_grid_stats",
    "spread_order",
]

#: the public default salt of the keyed cell hash (fixed in the code: never data-dependent)
DEFAULT_SALT = "gpframe/contribution-bounding/v1"
#: statistics released per cell in private mode: count, centred sum, centred sum of squares
STATISTICS_PRIVATE = 3
_NOTHING = "Nothing was charged."
#: expected error (units of W) at which a private-mode mean is withheld (``epsilons`` form with
#: ``shrink=False``; the shrunk form withholds nothing):
#: a margin above the midpoint's W/4 under a uniform true mean, set on the AIS benchmark
#: (benchmarks/accuracy/grid_vs_peers.py; 0.25 withheld useful crowded cells at res 6)
USELESS = 0.3
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised on uint64 (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _key_bytes(k: Any) -> bytes:
    # typed encoding: user 7 and user "7" are different ledger users, so they hash differently
    if isinstance(k, (bool, np.bool_)):
        return b"r:" + repr(bool(k)).encode()
    if isinstance(k, (int, np.integer)):
        return b"i:" + str(int(k)).encode()
    if isinstance(k, str):
        return b"s:" + k.encode("utf-8")
    return b"r:" + repr(k).encode("utf-8")


def _user_hashes(keys: np.ndarray, salt: str) -> np.ndarray:
    s = salt.encode("utf-8")
    out = np.empty(len(keys), dtype=np.uint64)
    for i, k in enumerate(keys.tolist()):  # one hash per distinct user, not per row
        d = hashlib.blake2b(_key_bytes(k), digest_size=8, key=s[:64]).digest()
        out[i] = int.from_bytes(d, "little")
    return out


def cell_hash(user_keys: np.ndarray, cells: np.ndarray, salt: str = DEFAULT_SALT) -> np.ndarray:
    """Keyed hash h(salt, user, cell) of each (user, cell) row, uint64 (public rule of step 2).

    It depends only on the user's key, the cell and the salt, never on other rows.

    >>> a = cell_hash(np.array([7, 7]), np.array([5, 6], dtype=np.uint64))
    >>> b = cell_hash(np.array([7]), np.array([6], dtype=np.uint64))
    >>> bool(a[1] == b[0]), bool(a[0] != a[1])
    (True, True)
    """
    ukeys, inv = np.unique(np.asarray(user_keys), return_inverse=True)
    uh = _user_hashes(ukeys, salt)[inv.reshape(-1)]
    c = np.asarray(cells).astype(np.uint64)
    return _mix64(uh ^ _mix64(c ^ np.uint64(0x9E3779B97F4A7C15)))


def spread_order(users: Any, salt: str = DEFAULT_SALT) -> np.ndarray:
    """Return a per-row order that spreads each user's kept rows over all their rows (uint64).

    The keyed hash h(salt, user, k) of each row's rank k among the user's rows (row position):
    it reads only the user's own rows and public constants, like the cell rule of step 2, and
    keeping the ``max_per_cell`` smallest hashes keeps a pseudo-random subset of the user's
    rows in a cell instead of the first ones (consecutive fixes of one trajectory are alike, so
    a spread subset represents the user's samples better).

    >>> o = spread_order(np.array([3, 3, 3, 5]))
    >>> o.dtype.name, len(set(o.tolist()))
    ('uint64', 4)
    """
    u = np.asarray(users)
    if u.size == 0:
        return np.zeros(0, dtype=np.uint64)
    _, inv = np.unique(u, return_inverse=True)
    inv = inv.reshape(-1)
    srt = np.argsort(inv, kind="stable")
    start = np.searchsorted(inv[srt], inv[srt], side="left")
    rank = np.empty(u.size, dtype=np.int64)
    rank[srt] = np.arange(u.size) - start
    return cell_hash(u, rank.astype(np.uint64), salt)


@dataclass(frozen=True, eq=False)
class BoundedContributions:
    """The outcome of step 2 (public rule applied to private rows; the object itself is private).

    ``cells`` is the sorted public cell list; per data row, ``row_j`` (index into ``cells``, -1 off
    the list), ``row_u`` (index into ``users``) and ``keep``; per user, ``cells_kept`` = |G′_ℓ|.
    """

    cells: np.ndarray
    users: np.ndarray
    row_u: np.ndarray
    row_j: np.ndarray
    keep: np.ndarray
    cells_kept: np.ndarray
    max_cells: int
    max_per_cell: int
    n_off_list: int


def _positive_int(x: Any, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) < 1:
        raise InvalidInputError(
            f"{name}={x!r} must be a positive integer (a public cap chosen without looking at "
            f"the data), e.g. {name}=5. {_NOTHING}"
        )
    return int(x)


def public_cell_list(public_cells: Any) -> np.ndarray:
    """Sorted unique uint64 cells of the public list; an empty list is an error."""
    if public_cells is None:
        raise InvalidInputError(
            "occupancy='private' needs public_cells=: the cells to release, chosen without the "
            "data (e.g. every H3 cell covering a polygon). Every listed cell is released, empty "
            f"or not, so the released set leaks nothing. {_NOTHING}"
        )
    arr = np.asarray(public_cells)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidInputError(f"public_cells must be a non-empty list of cells. {_NOTHING}")
    return np.unique(arr.astype(np.uint64))


def bound_contributions(
    users: Any,
    cells: Any,
    public_cells: Any,
    *,
    max_cells: int,
    max_per_cell: int,
    order: Any = None,
    salt: str = DEFAULT_SALT,
    excluded: Any = None,
) -> BoundedContributions:
    """Apply the data-independent bounding rule of step 2 (module docstring).

    Parameters
    ----------
    users, cells : array_like
        Per data row: the user key and the cell (uint64 H3 index or any integer key).
    public_cells : array_like
        The public cell list (rows in other cells are dropped).
    max_cells, max_per_cell : int
        The caps: cells per user, rows per user per cell.
    order : array_like, optional
        Per-row order of a user's samples (e.g. timestamps); ties and ``None``: row position.
    salt : str
        Key of the cell hash; public, fixed before seeing the data.
    excluded : array_like of bool, optional
        Per distinct user (sorted keys): drop every row (users the budget cannot pay).

    Returns
    -------
    BoundedContributions

    >>> b = bound_contributions([1, 1, 1, 1, 2], [10, 11, 11, 12, 10], [10, 11],
    ...                         max_cells=1, max_per_cell=1)
    >>> b.cells_kept.tolist(), int(b.keep.sum()), b.n_off_list
    ([1, 1], 2, 1)
    """
    k_cells = _positive_int(max_cells, "max_cells")
    k_rows = _positive_int(max_per_cell, "max_per_cell")
    if not isinstance(salt, str) or not salt:
        raise InvalidInputError(f"salt must be a non-empty string. {_NOTHING}")
    pub = public_cell_list(public_cells)
    u_in = np.asarray(users)
    c_in = np.asarray(cells).astype(np.uint64)
    if u_in.shape != c_in.shape or u_in.ndim != 1:
        raise InvalidInputError(f"users and cells must be 1-D and aligned. {_NOTHING}")
    n = u_in.size
    ukeys, row_u = np.unique(u_in, return_inverse=True)
    row_u = row_u.reshape(-1).astype(np.int64)
    pos = np.clip(np.searchsorted(pub, c_in), 0, pub.size - 1)
    on = pub[pos] == c_in
    row_j = np.where(on, pos, -1).astype(np.int64)
    sel = on.copy()
    if excluded is not None:
        sel &= ~np.asarray(excluded, dtype=bool)[row_u]
    keep = np.zeros(n, dtype=bool)
    cells_kept = np.zeros(ukeys.size, np.int64)
    idx = np.flatnonzero(sel)
    if idx.size:
        n_pub = np.int64(pub.size)
        code = row_u[idx] * n_pub + row_j[idx]
        pairs, first, inv = np.unique(code, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        p_user = pairs // n_pub
        p_cell = pairs % n_pub
        p_hash = cell_hash(ukeys[p_user], pub[p_cell], salt)
        # rank each user's cells by (hash, cell); keep the first max_cells
        srt = np.lexsort((p_cell, p_hash, p_user))
        su = p_user[srt]
        start = np.searchsorted(su, su, side="left")
        rank = np.empty(pairs.size, np.int64)
        rank[srt] = np.arange(pairs.size) - start
        keep_pair = rank < k_cells
        # rank each kept pair's rows by (order, row position); keep the first max_per_cell
        rows = idx[keep_pair[inv]]
        rcode = code[keep_pair[inv]]
        keys: tuple[Any, ...] = (
            (rows, rcode) if order is None else (rows, np.asarray(order)[rows], rcode)
        )
        rs = np.lexsort(keys)
        rc = rcode[rs]
        rstart = np.searchsorted(rc, rc, side="left")
        rrank = np.empty(rows.size, np.int64)
        rrank[rs] = np.arange(rows.size) - rstart
        keep[rows[rrank < k_rows]] = True
        cells_kept = np.bincount(p_user[keep_pair], minlength=ukeys.size).astype(np.int64)
        _ = first
    return BoundedContributions(
        cells=pub,
        users=ukeys,
        row_u=row_u,
        row_j=row_j,
        keep=keep,
        cells_kept=cells_kept,
        max_cells=k_cells,
        max_per_cell=k_rows,
        n_off_list=int((~on).sum()),
    )


def _snap_int(num: np.ndarray, shift: int) -> np.ndarray:
    """rint(num · 2^shift) for int64 ``num``, exactly (half to even, like np.rint and round)."""
    if shift >= 0:
        if num.size and int(np.abs(num).max()) >= 2 ** max(52 - shift, 0):
            raise InvalidInputError(
                f"a cell statistic is too large for the noise lattice. {_NOTHING}"
            )
        return num * (1 << shift)
    if num.size and int(np.abs(num).max()) >= 2**53:
        raise InvalidInputError(f"a cell statistic is too large to round exactly. {_NOTHING}")
    # num is exact in float64 and scaling by a power of two is exact: one correctly rounded rint
    return np.rint(num.astype(np.float64) * 2.0**shift).astype(np.int64)


def _log2_pow2(x: Fraction) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e != x:  # pragma: no cover - q and g are powers of two by construction
        raise GpframeInternalError("expected a power of two")
    return e


@dataclass(frozen=True)
class PrivateCellRelease:
    """Released statistics per public cell (arrays aligned with the cell list).

    ``count``, ``s1``, ``s2`` are the released (noisy) statistics; ``mean`` and ``var`` are
    post-processing (NaN when the noisy count is below 1). ``mean_error`` holds with probability
    >= 1 − β per cell against the **bounded** clipped mean (noise and snapping only; NaN when the
    bound is not finite). ``scales`` are the noise scales (count, s1, s2).
    """

    count: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    mean_error: np.ndarray
    scales: tuple[float, float, float]
    guarantees: tuple[Fraction, ...]
    #: with ``epsilons``: cells whose mean is expected to beat the data-free midpoint (the rest
    #: are NaN); None otherwise (every cell with ñ ≥ 1 has a mean)
    released: np.ndarray | None = None


def private_sums(
    values: Any,
    cells: Any,
    n_cells: int,
    lower: Fraction,
    upper: Fraction,
    moments: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cell: the count, Σ k and Σ (2k − T)² of the values on the fixed-point grid (int64).

    k = rint((x − L)/q) clipped to [0, T], q the grid step of
    :func:`gpframe.queries.grid_stats.value_step`; sums of partial sums are exact.
    ``moments=(k, d²)`` (per value, integers in [0, T] and [0, T²]; :func:`pair_averages`)
    replaces each value's k and (2k − T)² by its user's averages in that cell.

    >>> [a.tolist() for a in private_sums(np.array([0.0, 4.0]), np.array([1, 1]), 2,
    ...                                    Fraction(0), Fraction(4))]
    [[0, 2], [0, 65536], [0, 8589934592]]
    """
    from gpframe.queries.grid_stats import value_step

    q = value_step(lower, upper)
    T = int((upper - lower) // q)
    values = np.asarray(values, dtype=np.float64)
    cells = np.asarray(cells, dtype=np.int64)
    if values.size >= 2**26:
        raise InvalidInputError(
            f"more than 2**26 kept values: the exact sums could overflow. {_NOTHING}"
        )
    if moments is None:
        k = np.clip(np.rint((values - float(lower)) / float(q)), 0, T).astype(np.int64)
        d2 = (2 * k - T) ** 2
    else:
        k, d2 = (np.asarray(a, dtype=np.int64) for a in moments)
        if k.shape != values.shape or d2.shape != values.shape:
            raise GpframeInternalError("moments are not aligned with the kept values.")
        if k.size and (k.min() < 0 or k.max() > T or d2.min() < 0 or d2.max() > T * T):
            raise GpframeInternalError("a per-user average is outside its range.")
    S0 = np.zeros(n_cells, np.int64)
    S1 = np.zeros(n_cells, np.int64)
    D2 = np.zeros(n_cells, np.int64)
    np.add.at(S0, cells, 1)
    np.add.at(S1, cells, k)
    np.add.at(D2, cells, d2)
    return S0, S1, D2


def release_private_cells(
    values: np.ndarray,
    cells: np.ndarray,
    n_cells: int,
    *,
    lower: Any,
    upper: Any,
    epsilon: Any,
    max_per_cell: int,
    beta: float = 0.05,
    rng: Any = None,
    epsilons: tuple[Any, Any, Any] | None = None,
    sums: tuple[Any, Any, Any] | None = None,
    moments: tuple[np.ndarray, np.ndarray] | None = None,
    shrink: bool = False,
) -> PrivateCellRelease:
    """Release count, centred sum and centred sum of squares of every listed cell (steps 3–4).

    See module docstring; ``docs/noise.md`` (central Laplace, integer and real rows, exact
    statistics). Noise: count λ = ε/p on g = 1; s1 and s2 on g = 2^(⌊log₂Δ⌋−20) with Δ = p·H and
    p·H²/2. Charge: the caller charges ``epsilon`` per statistic per cell a user is kept in.

    ``epsilons=(ε_n, ε_1, ε_2)`` (the per-user-total form, ``docs/operations/grid_stats.md``)
    gives each statistic its own ε (charged ε_n + ε_1 + ε_2 per kept cell) and turns on the
    post-processing of that form: the count is clamped to ≥ 0, the mean divides by max(ñ, 1)
    and is clamped to [L, U], and it is published only where its expected error (from the
    released values and the public scales, :func:`gpframe.queries.grid_budget.expected_error`)
    beats the data-free midpoint's W/4 (``released``; NaN elsewhere); ``epsilon`` is then
    ignored.

    ``moments=(k, d²)`` (per kept value, integers in [0, T] and [0, T²]; :func:`pair_averages`)
    replaces each value's snapped k and (2k − T)² by its user's averages in that cell, so a user
    contributes min(m, p) copies of one bounded average (per-user averages); the ranges, hence
    the sensitivities, are those of a single value. ``shrink`` (with ``epsilons``) pools the
    means toward their common centre instead of withholding the noisy ones
    (:func:`gpframe.queries.grid_user_stats.shrink_means`, post-processing): every cell then has
    a mean and ``released`` is True everywhere.

    Parameters
    ----------
    values : ndarray
        The kept values (already bounded, in [L, U]).
    cells : ndarray of int
        Index of each kept value's cell in the public list (0..n_cells−1).
    sums : (S0, S1, D2), optional
        Instead of ``values`` and ``cells`` (then None): per cell, the count, Σ k and
        Σ (2k − T)² of the kept values (or of their users' averages) on the fixed-point grid
        (:func:`private_sums`; int64, exact), e.g. added up over the partitions of a Dask frame
        (``docs/beyond-one-machine.md``).

    >>> rel = release_private_cells(np.array([1.0, 3.0]), np.array([0, 0]), 2, lower=0, upper=4,
    ...                             epsilon=1.0, max_per_cell=1)
    >>> rel.count.shape, rel.scales[0]
    ((2,), 1.0)
    """
    from gpframe.mechanisms import laplace_dp
    from gpframe.mechanisms.calibration import central_laplace
    from gpframe.mechanisms.tails import laplace_bound
    from gpframe.queries.grid_stats import value_step

    L, U = exact(lower, "bounds[0]"), exact(upper, "bounds[1]")
    eps = exact(epsilon, "epsilon")
    e_n, e_1, e_2 = (eps, eps, eps) if epsilons is None else (exact(e, "epsilon") for e in epsilons)
    p = _positive_int(max_per_cell, "max_per_cell")
    q = value_step(L, U)
    T = int((U - L) // q)
    H = T * q / 2
    if sums is None:
        S0, S1, D2 = private_sums(values, cells, n_cells, L, U, moments=moments)
    else:
        S0, S1, D2 = (np.asarray(a, dtype=np.int64).reshape(n_cells) for a in sums)
        if int(S0.sum()) >= 2**26:
            raise InvalidInputError(
                f"more than 2**26 kept values: the exact sums could overflow. {_NOTHING}"
            )
    # s1 = q(S1 − n T/2) = (q/2)(2 S1 − n T);  s2 = Σ((x̂ − c)² − H²/2) = (q²/8)(2 D2 − n T²)
    # with D2 = Σ (2k − T)² (equal to 8 S2 − 8 T S1 + n T², S2 = Σ k²), both exact
    num1 = 2 * S1 - S0 * T
    num2 = 2 * D2 - S0 * (T * T)
    d1, d2 = p * H, p * H * H / 2
    g1 = central_laplace(e_1, d1, integer=False).g
    g2 = central_laplace(e_2, d2, integer=False).g
    lq = _log2_pow2(q)
    u1 = _snap_int(num1, lq - 1 - _log2_pow2(g1))
    u2 = _snap_int(num2, 2 * lq - 3 - _log2_pow2(g2))
    rn = laplace_dp(S0.astype(np.float64), sensitivity=p, epsilon=e_n, integer=True, rng=rng)
    r1 = laplace_dp(u1.astype(np.float64) * float(g1), sensitivity=d1, epsilon=e_1, rng=rng)
    r2 = laplace_dp(u2.astype(np.float64) * float(g2), sensitivity=d2, epsilon=e_2, rng=rng)
    amounts = tuple(sorted({rn.guarantee.amount, r1.guarantee.amount, r2.guarantee.amount}))
    if (rn.guarantee.amount, r1.guarantee.amount, r2.guarantee.amount) != (e_n, e_1, e_2):
        raise GpframeInternalError("a release guarantee differs from the planned budget.")
    cnt, s1, s2 = (np.asarray(r.values, dtype=np.float64) for r in (rn, r1, r2))
    c, Hf = float(L + H), float(H)
    if epsilons is not None:  # post-processing: a count is never negative
        cnt = np.maximum(cnt, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = cnt >= 1
        if epsilons is not None:
            # a mean for every listed cell: divide by max(ñ, 1), then clamp to [L, U]
            m1 = s1 / np.maximum(cnt, 1.0)
            ok = np.ones(cnt.size, dtype=bool)
        else:
            m1 = np.where(ok, s1 / cnt, np.nan)
        mean = np.clip(c + m1, float(L), float(U))
        den_v = np.maximum(cnt, 1.0) if epsilons is not None else cnt
        var = np.clip(
            np.where(ok, s2 / den_v + Hf * Hf / 2 - m1 * m1, np.nan), 0, float((U - L) ** 2) / 4
        )
        # |s1/n − s̃1/ñ| <= (t1 + |s̃1| t_n/ñ)/(ñ − t_n) when ñ > t_n (union bound, β/2 each);
        # computed from released values and public scales only
        tn = laplace_bound(beta / 2, rn.noise["scale"], rn.g)
        t1 = laplace_bound(beta / 2, r1.noise["scale"], r1.g)
        den = cnt - tn
        err = np.where(den > 0, (t1 + np.abs(s1) * tn / np.where(ok, cnt, 1)) / den, np.nan)
        err = np.where((cnt >= 1) & (den > 0), np.minimum(err + float(q), float(U - L)), np.nan)
    released = None
    if epsilons is not None:
        # post-processing of released values and public scales only: a mean whose noise (the
        # sum's and the count's, about hypot(b₁, |m̃ − c|·b_n)/max(ñ, 1)) makes a clamped
        # estimate hardly better on average than the data-free midpoint is not released (NaN),
        # rather than published as a near-random value in [L, U]
        from gpframe.queries.grid_budget import expected_error

        b_n, b_1 = float(rn.noise["scale"]), float(r1.noise["scale"])
        noise_err = np.hypot(b_1, np.abs(mean - c) * b_n) / np.maximum(cnt, 1.0)
        if shrink:
            # the centre from the pooled sums, Σ s̃1 / Σ ñ (unclamped counts: both sums are
            # unbiased), not from the per-cell ratios, whose noisy denominators pull the
            # cells that look precise toward c
            n_raw = float(np.sum(np.asarray(rn.values, dtype=np.float64)))
            m0 = c + float(np.sum(s1)) / n_raw if n_raw >= 1 else c
            mean, err = _shrunk(c + m1, noise_err, err, float(L), float(U), m0)
            released = np.ones(cnt.size, dtype=bool)
        else:
            released = expected_error(noise_err / float(U - L)) < USELESS
            mean = np.where(released, mean, np.nan)
    return PrivateCellRelease(
        count=cnt,
        s1=s1,
        s2=s2,
        mean=np.where(ok, mean, np.nan),
        var=var,
        mean_error=err,
        scales=(float(rn.noise["scale"]), float(r1.noise["scale"]), float(r2.noise["scale"])),
        guarantees=amounts,
        released=released,
    )


def _shrunk(
    raw: np.ndarray,
    scale: np.ndarray,
    err: np.ndarray,
    lower: float,
    upper: float,
    centre: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Shrink the private means by their noise (released values and public scales only).

    ``raw`` is c + s̃1/max(ñ, 1) unclamped, ``scale`` its Laplace-equivalent noise scale
    hypot(b₁, |m̃ − c|·b_n)/max(ñ, 1) (the ratio's delta-method spread). The bound: where the
    raw bound t is not finite, W (the mean and the truth are both in [L, U]); otherwise
    :func:`~gpframe.queries.grid_user_stats.shrink_means`' (at most t + the distance the mean
    was moved).
    """
    from gpframe.queries.grid_user_stats import shrink_means

    t = np.where(np.isfinite(err), err, upper - lower)
    return shrink_means(raw, scale, t, lower, upper, centre=centre)


def pair_averages(
    b: BoundedContributions, values: np.ndarray, lower: Any, upper: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Per data row, its user's averages in its cell: (k̄, d̄²) on the value grid (integers).

    k is a value snapped to the fixed-point grid q above L (:func:`release_private_cells`),
    d = 2k − T. Over **all** of a user's rows in a listed cell (not only the ``max_per_cell``
    kept ones), k̄ = round(Σk/m) ∈ [0, T] and d̄² = round(Σd²/m) ∈ [0, T²] (exact integer
    arithmetic, halves up). Each reads only that user's own rows, so bounding and sensitivities
    are unchanged when every kept row carries them (``moments=`` of
    :func:`release_private_cells`). Rows off the list get 0.

    >>> b = bound_contributions([1, 1, 2], [10, 10, 10], [10], max_cells=1, max_per_cell=1)
    >>> kbar, d2 = pair_averages(b, np.array([0.0, 4.0, 1.0]), 0, 4)
    >>> [float(x) * 2.0 ** -14 for x in kbar]  # user 1's rows average 2, user 2's is 1
    [2.0, 2.0, 1.0]
    """
    from gpframe.queries.grid_stats import value_step

    L, U = exact(lower, "bounds[0]"), exact(upper, "bounds[1]")
    q = value_step(L, U)
    T = int((U - L) // q)
    values = np.asarray(values, dtype=np.float64)
    on = np.flatnonzero(b.row_j >= 0)
    if on.size >= 2**26:
        raise InvalidInputError(
            f"more than 2**26 rows in listed cells: the exact sums could overflow. {_NOTHING}"
        )
    k = np.clip(np.rint((values[on] - float(L)) / float(q)), 0, T).astype(np.int64)
    d2 = (2 * k - T) ** 2
    code = b.row_u[on] * np.int64(b.cells.size) + b.row_j[on]
    _, inv = np.unique(code, return_inverse=True)
    inv = inv.reshape(-1)
    n = np.bincount(inv).astype(np.int64)
    s1 = np.zeros(n.size, np.int64)
    s2 = np.zeros(n.size, np.int64)
    np.add.at(s1, inv, k)
    np.add.at(s2, inv, d2)
    kbar = np.zeros(values.size, np.int64)
    d2bar = np.zeros(values.size, np.int64)
    kbar[on] = ((2 * s1 + n) // (2 * n))[inv]
    d2bar[on] = ((2 * s2 + n) // (2 * n))[inv]
    return kbar, d2bar


@dataclass(frozen=True, eq=False)
class PrivateRun:
    """What :func:`run_private_grid_stats` did (curator-side: charges reveal |G′_ℓ|)."""

    bounded: BoundedContributions
    release: PrivateCellRelease
    users: list[Any]
    charges: np.ndarray
    allocations: np.ndarray
    excluded: list[Any]
    query_id: str
    fkind: str


def run_private_grid_stats(
    session: Any,
    users: Any,
    cells: Any,
    values: np.ndarray,
    public_cells: Any,
    *,
    lower: Any,
    upper: Any,
    epsilon: Any,
    max_cells: int,
    max_per_cell: int,
    order: Any = None,
    salt: str = DEFAULT_SALT,
    beta: float = 0.05,
    rng: Any = None,
    params: dict[str, Any] | None = None,
    epsilons: tuple[Any, Any, Any] | None = None,
    bounded: tuple[BoundedContributions, Any] | None = None,
    user_averages: bool = False,
    shrink: bool = False,
) -> PrivateRun:
    """Bound, admit, charge and release (module docstring, steps 1–5; charge first, release second).

    ``epsilons=(ε_n, ε_1, ε_2)``: one ε per statistic (see :func:`release_private_cells`); a
    user then pays (ε_n + ε_1 + ε_2) × |G′_ℓ|. ``user_averages``: each kept row carries its
    user's averages in the cell (:func:`pair_averages`; same sensitivities and charges);
    ``shrink``: the means are pooled (:func:`release_private_cells`).

    ``bounded=(b, cell_sums)`` gives step 2 already done elsewhere (the Dask face, each
    partition bounding the users it holds, ``docs/beyond-one-machine.md``): ``b`` carries the
    public cells, the users (sorted) and their ``cells_kept`` (no rows), and
    ``cell_sums(kept)`` returns the per-cell sums (:func:`private_sums`, with the users'
    averages when ``user_averages``) of the kept rows of the users where ``kept`` (per user)
    is True. ``users``, ``cells``, ``values`` and
    ``public_cells`` are then None.

    Noise: :func:`release_private_cells`. Charge: ``epsilon × 3 × |G′_ℓ|`` per user on the central
    ledger (ε-DP draws compose as ε²/2 each on a zCDP filter); users whose remaining budget cannot
    pay are dropped with all their rows and charged nothing. ``values`` must be in [L, U].
    """
    from gpframe.mechanisms.calibration import check_eps
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.grid_stats import central_kind

    fkind = central_kind(session)
    eps = exact(check_eps(epsilon, "epsilon"), "epsilon")
    rng = resolve_rng(rng)
    lo, hi = exact(lower, "bounds[0]"), exact(upper, "bounds[1]")
    if bounded is None:
        values = np.asarray(values, dtype=np.float64)
        if not np.isfinite(values).all():
            raise InvalidInputError(f"values has NaN/inf entries. {_NOTHING}")
        if ((values < float(lo)) | (values > float(hi))).any():
            raise InvalidInputError(
                f"values outside bounds=({float(lo):g}, {float(hi):g}). {_NOTHING}"
            )
    kw = {"max_cells": max_cells, "max_per_cell": max_per_cell, "order": order, "salt": salt}
    b = bound_contributions(users, cells, public_cells, **kw) if bounded is None else bounded[0]
    ledger = session.ledger
    ukeys = b.users.tolist()
    lu = ledger.units["central"]
    rem = session.remaining_exact(ukeys, notion="central").to_numpy()
    rem_units = np.array([int(x * lu.scale) for x in rem.tolist()], dtype=object)
    stat_eps = (
        (eps,) * STATISTICS_PRIVATE
        if epsilons is None
        else tuple(exact(check_eps(e, "epsilon"), "epsilon") for e in epsilons)
    )
    need = np.zeros(b.cells_kept.size, dtype=np.int64)
    for e in stat_eps:  # one ε-DP draw per statistic per kept cell, each rounded up
        per_stat, big = ledger.units_for("central", e, b.cells_kept, kind="dp")
        if big.any():
            raise InvalidInputError(f"epsilon={float(e)} is too large for the ledger. {_NOTHING}")
        need = need + per_stat.astype(np.int64)
    over = (need.astype(object) > rem_units) & (b.cells_kept > 0)
    if over.any():  # a user's own ledger state decides: the others' kept rows do not change
        if bounded is None:
            b = bound_contributions(users, cells, public_cells, excluded=over, **kw)
        else:
            b = replace(b, cells_kept=np.where(over, 0, b.cells_kept))
    payers = np.flatnonzero(b.cells_kept > 0)
    pay_users = b.users[payers].tolist()
    units = need[payers]

    def check(r: Any) -> None:
        if not r.admitted.all():
            raise LedgerError(
                "grid_stats: another process spent budget between admission and reservation; "
                f"retry. {_NOTHING}"
            )

    from gpframe.queries.grid_preview import note_error, planned_private_error

    # a dry run's preview bound: the count's noise, from ε, max_per_cell and the bounds only
    from gpframe.queries.grid_stats import value_step

    note_error(planned_private_error(stat_eps, b.max_per_cell, lo, hi, beta, value_step(lo, hi)))
    averages = (pair_averages(b, values, lo, hi) if user_averages and bounded is None
                else None)  # fmt: skip

    def compute(r: Any) -> Charge[Any]:
        if bounded is None:
            keep = b.keep
            rows: dict[str, Any] = {"values": values[keep], "cells": b.row_j[keep]}
            if averages is not None:
                rows["moments"] = (averages[0][keep], averages[1][keep])
        else:
            rows = {"values": None, "cells": None, "sums": bounded[1](b.cells_kept > 0)}
        release = release_private_cells(
            n_cells=int(b.cells.size), lower=lo, upper=hi, epsilon=eps,
            max_per_cell=b.max_per_cell, beta=beta, rng=rng,
            epsilons=None if epsilons is None else stat_eps, shrink=shrink, **rows,
        )  # fmt: skip
        return Charge(release, units, units=True)  # three ε-DP draws per kept cell

    ran = run(
        session,
        pay_users,
        units,
        notion="central",
        kind="dp",
        query="grid_stats",
        params={
            **(params or {}),
            "epsilon": float(eps),
            **({"epsilons": [float(e) for e in stat_eps]} if epsilons is not None else {}),
            "occupancy": "private",
            "max_cells": b.max_cells,
            "max_per_cell": b.max_per_cell,
            "cells": int(b.cells.size),
            **({"estimator": "per-user averages"} if user_averages else {}),
            **({"shrink": True} if shrink else {}),
            # the curator's record of who was left out (session.report(query_id=...))
            EXCLUDED_KEY: sorted(b.users[over].tolist()) if over.any() else [],
        },
        units=True,
        check=check,
        compute=compute,
    )
    release, query_id = ran.value, ran.query_id
    scale = 10.0**lu.exponent
    return PrivateRun(
        bounded=b,
        release=release,
        users=pay_users,
        charges=units / scale,
        allocations=units / scale,
        excluded=sorted(b.users[over].tolist()) if over.any() else [],
        query_id=query_id,
        fkind=fkind,
    )


_ = math
