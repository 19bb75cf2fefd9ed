"""Spending one per-user total ε across the cells of a grid release (public occupancy).

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it").
Everything here is **public and free**: it reads the public occupancy (which user has how many
samples in which cell), the interval [L, U], the total and the split, never a sample value; it
draws nothing and charges nothing. :func:`plan_budget` returns a :class:`BudgetPlan`;
:mod:`gpframe.queries.grid_user_stats` releases it.

The problem. Each released cell j gets ε_j (split between the mean and the second moment) and
keeps a set K_j of its users; user ℓ is charged Σ ε_j over the cells where ℓ is kept (basic
composition over the cells ℓ can change, Dwork & Roth, 'The Algorithmic Foundations of
Differential Privacy', 2014, Thm. 3.16). The constraint is Σ_{j ∋ ℓ} ε_j ≤ E for every user.
With per-user averages the mean of cell j has sensitivity W/|K_j| (one user replaces one of
|K_j| bounded averages), so a cell's noise scale is W/(|K_j| ε_μ,j): crowded cells need less ε.

The heuristic, in three nested steps (each a deterministic function of public inputs):

1. **Water-filling** (:func:`water_fill`): every active cell's ε rises at rate |K_j|^−γ
   (γ = 0: equal ε; γ = 1/2: the split that minimises one user's summed noise W/(|K_j| ε_j)),
   until a user's kept cells exhaust E; that user's cells freeze, and the others go on. A light
   user whose one cell is shared with a heavy user thus still spends the rest of E on their other
   cells, which an equal split E/|G_ℓ| would waste.
2. **Useless cells**: a cell whose expected error (Laplace noise, clamped to [L, U], averaged over
   a uniform true mean: :func:`expected_error`) is not below that of the data-free midpoint (W/4)
   is not released: its budget goes back to its users and step 1 is repeated.
3. **Contribution cap**: each user keeps at most k cells, those with the fewest users first (a
   user matters most where few others are), ties by cell index. k (from a fixed ladder) and γ are
   chosen to minimise the summed expected error of the mean over **all** occupied cells (an
   unreleased cell counts W/4; a released cell that keeps k_j of its n_j users adds a small
   sampling term, ``BIAS_SPREAD``·W·√(1/k_j − 1/n_j), in quadrature).

Amounts are rounded **down** to a grid (``grid``, a multiple of the ledger unit), and the
per-user sums are checked exactly, so no user's charge exceeds E.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.queries.clip_user import Occupancy

__all__ = [
    "EPS_CELL_MAX",
    "BudgetPlan",
    "expected_error",
    "plan_budget",
    "water_fill",
    "weight_caps",
]

_NOTHING = "Nothing was charged."
#: the largest ε of one statistic of one cell (the samplers' parameter range)
EPS_CELL_MAX = 100.0
#: the caps tried by step 3 (then the largest degree: no cap)
_CAPS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)
#: rate exponents γ tried by step 1 (cell rates |K_j|^−γ: 0 equal ε, 1/2 the one-user optimum
#: of Σ noise, 1 equal noise scales)
_GAMMAS = (0.0, 0.5)
#: assumed spread of the users' own means in a cell, in units of W (tie-breaker, see _score)
BIAS_SPREAD = 0.02
#: assumed spread of the users' own means in a cell, in units of W, when weighing the
#: reweighting bias of per-user averages against their lower noise (:func:`weight_caps`)
REWEIGHT_SPREAD = 0.25
#: default split of a cell's ε between the mean and the centred second moment
DEFAULT_SPLIT = (Fraction(3, 4), Fraction(1, 4))


def expected_error(b: np.ndarray) -> np.ndarray:
    """Mean |clamp(μ + Z) − μ| / W for Z ~ Laplace(b·W), μ uniform on [L, U] (b in units of W).

    Per μ the clamped error is E min(|Z|, distance to the bound on Z's side); averaging
    b(1 − e^{−a/b}) over a uniform gives b − b²(1 − e^{−1/b}). It tends to b for small b and to
    1/2 for large b; the data-free midpoint scores 1/4.

    >>> [round(float(x), 4) for x in expected_error(np.array([0.01, 0.5, 1e6]))]
    [0.0099, 0.2838, 0.5]
    """
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out = b - b * b * (-np.expm1(-1.0 / b))
    # the closed form cancels for large b: its limit is 1/2 − 1/(6b)
    out = np.where(b > 1e4, 0.5 - 1.0 / (6.0 * b), out)
    return np.where(b <= 0, 0.0, out)


def water_fill(
    pu: np.ndarray,
    pj: np.ndarray,
    n_users: int,
    n_cells: int,
    w: np.ndarray,
    total: float,
    cap: float = math.inf,
) -> np.ndarray:
    """Progressive filling of per-cell ε under per-user sums ≤ ``total`` (float, public).

    Compiled (:mod:`gpframe.queries.grid_budget_fill`), bit-identical to
    :func:`water_fill_numpy`.

    >>> water_fill(np.array([0, 0, 1]), np.array([0, 1, 1]), 2, 2, np.ones(2), 4.0).tolist()
    [2.0, 2.0]
    """
    from gpframe.queries.grid_budget_fill import fill

    eps, finished = fill(np.ascontiguousarray(pu, dtype=np.int64),
                         np.ascontiguousarray(pj, dtype=np.int64), int(n_users), int(n_cells),
                         np.ascontiguousarray(w, dtype=np.float64), float(total),
                         float(cap))  # fmt: skip
    if not finished:
        raise GpframeInternalError("water filling did not terminate.")  # pragma: no cover
    return eps


def water_fill_numpy(
    pu: np.ndarray,
    pj: np.ndarray,
    n_users: int,
    n_cells: int,
    w: np.ndarray,
    total: float,
    cap: float = math.inf,
) -> np.ndarray:
    """Progressive filling of per-cell ε under per-user sums ≤ ``total`` (float, public).

    ``pu``/``pj`` are the kept (user, cell) pairs, ``w`` the per-cell rates; a cell stops at
    ``cap``. Returns ε per cell (0 where no pair is kept). At most one round per user or cell.

    The reference form (numpy), kept as the compiled one's oracle in the tests.

    >>> water_fill_numpy(np.array([0, 0, 1]), np.array([0, 1, 1]), 2, 2, np.ones(2), 4.0).tolist()
    [2.0, 2.0]
    >>> water_fill_numpy(np.array([0, 1, 1]), np.array([0, 0, 1]), 2, 2, np.ones(2), 4.0).tolist()
    [2.0, 2.0]
    """
    eps = np.zeros(n_cells)
    active = np.zeros(n_cells, dtype=bool)
    active[pj] = True
    rem = np.full(n_users, float(total))
    for _ in range(n_users + n_cells + 1):
        if not active.any():
            return eps
        wa = np.where(active, w, 0.0)
        rate = np.bincount(pu, weights=wa[pj], minlength=n_users)
        has = rate > 0
        t_user = np.full(n_users, np.inf)
        t_user[has] = rem[has] / rate[has]
        t_cell = np.where(active, (cap - eps) / np.where(active, w, 1.0), np.inf)
        ts = max(min(float(t_user.min()), float(t_cell.min())), 0.0)
        eps[active] += ts * w[active]
        rem -= ts * rate
        sat = has & (t_user <= ts * (1 + 1e-12) + 1e-300)
        frozen = np.zeros(n_cells, dtype=bool)
        frozen[pj[sat[pu]]] = True
        frozen |= active & (t_cell <= ts * (1 + 1e-12) + 1e-300)
        active &= ~frozen
    raise GpframeInternalError("water filling did not terminate.")  # pragma: no cover


@dataclass(frozen=True, eq=False)
class BudgetPlan:
    """A public plan: which (user, cell) pairs are kept and each cell's ε per statistic.

    ``keep`` is aligned with the occupancy's COO rows; ``eps_mu``/``eps_v`` (exact Fractions,
    object arrays) and ``released`` with its cells; ``charge`` (Fractions) with its users: the sum
    of ε_μ + ε_V over the user's kept cells, at most ``total``.
    """

    occupancy: Occupancy
    total: Fraction
    split: tuple[Fraction, Fraction]
    lower: Fraction
    upper: Fraction
    keep: np.ndarray
    eps_mu: np.ndarray
    eps_v: np.ndarray
    released: np.ndarray
    users_kept: np.ndarray
    cells_kept: np.ndarray
    charge: np.ndarray
    cap: int
    expected: float
    weight_cap: np.ndarray


def _rank_cells(occ: Occupancy, n_per: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Rank of each COO row within its user: fewest users first, then cell index.

    A user matters most where few others are: keeping their rarest cells first covers the most
    cells, and a crowded cell keeps enough users anyway.
    """
    rows = np.flatnonzero(allowed)
    order = np.lexsort((occ.j[rows], n_per[occ.j[rows]], occ.u[rows]))
    srt = rows[order]
    su = occ.u[srt]
    start = np.searchsorted(su, su, side="left")
    rank = np.full(occ.u.size, np.iinfo(np.int64).max, dtype=np.int64)
    rank[srt] = np.arange(srt.size) - start
    return rank


def _fill_and_prune(
    occ: Occupancy, keep: np.ndarray, total: float, s_mu: float, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Run steps 1–2 for one kept set: ε per cell, and the kept set without useless cells."""
    keep = keep.copy()
    n_u, n_c = occ.n_users, occ.n_cells
    for _ in range(n_c + 1):
        k_j = np.bincount(occ.j[keep], minlength=n_c)
        w = np.maximum(k_j, 1).astype(np.float64) ** -gamma
        eps = water_fill(occ.u[keep], occ.j[keep], n_u, n_c, w, total, cap=EPS_CELL_MAX)
        with np.errstate(divide="ignore"):
            b = np.where(eps > 0, 1.0 / np.maximum(k_j, 1) / (s_mu * eps), np.inf)
        useless = (k_j > 0) & (expected_error(b) >= 0.25)
        if not useless.any():
            return eps, keep
        keep &= ~useless[occ.j]
    raise GpframeInternalError("pruning did not terminate.")  # pragma: no cover


def _score(occ: Occupancy, keep: np.ndarray, eps: np.ndarray, s_mu: float) -> float:
    """Return the summed expected error of the mean over all occupied cells (units of W)."""
    n_c = occ.n_cells
    n_j = np.bincount(occ.j, minlength=n_c)
    k_j = np.maximum(np.bincount(occ.j[keep], minlength=n_c), 0)
    kk = np.maximum(k_j, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where((k_j > 0) & (eps > 0), 1.0 / kk / (s_mu * eps), np.inf)
    e = np.where(np.isfinite(b), expected_error(b), 0.25)
    # sampling k of n users: a small between-user spread (BIAS_SPREAD × W) breaks ties towards
    # keeping more users; the spread itself is unknowable without the data
    bias = BIAS_SPREAD * np.sqrt(np.maximum(1.0 / kk - 1.0 / np.maximum(n_j, 1), 0.0))
    e = np.where(k_j > 0, np.minimum(np.hypot(e, bias), 0.5), e)
    return float(e.sum())


def plan_budget(
    occ: Occupancy,
    total: Fraction,
    *,
    lower: Fraction,
    upper: Fraction,
    grid: Fraction,
    split: tuple[Fraction, Fraction] = DEFAULT_SPLIT,
    excluded: Any = None,
) -> BudgetPlan:
    """Choose the kept (user, cell) pairs and each cell's ε so that every user pays ≤ ``total``.

    See the module docstring and ``docs/operations/grid_stats.md``. Public and free: reads the
    occupancy only (never a value), draws nothing, charges nothing.

    Parameters
    ----------
    occ : Occupancy
        The public occupancy.
    total : Fraction
        ε per user for the whole release (mean and second moment of every cell).
    lower, upper : Fraction
        The public value interval.
    grid : Fraction
        Amounts are multiples of it (rounded down): a multiple of the ledger's unit.
    split : (Fraction, Fraction)
        Shares of a cell's ε for the mean and the second moment (sum 1).
    excluded : array of bool, optional
        Per user: keep none of their pairs (budgets that cannot pay).

    Returns
    -------
    BudgetPlan

    >>> from gpframe.queries.clip_user import occupancy_from_records
    >>> occ = occupancy_from_records([1, 2, 2, 3], [10, 10, 11, 11])
    >>> p = plan_budget(occ, Fraction(8), lower=Fraction(0), upper=Fraction(1),
    ...                 grid=Fraction(1, 10**9))
    >>> [float(x) for x in p.charge], p.released.tolist(), p.cap  # user 2 keeps one cell
    ([8.0, 8.0, 8.0], [True, True], 1)
    """
    s_mu, s_v = split
    if not (s_mu > 0 and s_v >= 0 and s_mu + s_v == 1):
        raise InvalidInputError(
            f"split={tuple(map(float, split))} must be two shares (mean, variance) with mean > 0 "
            f"summing to 1, e.g. split=(0.75, 0.25). {_NOTHING}"
        )
    n_u, n_c = occ.n_users, occ.n_cells
    base = np.ones(occ.u.size, dtype=bool)
    if excluded is not None:
        base &= ~np.asarray(excluded, dtype=bool)[occ.u]
    n_per = np.bincount(occ.j, minlength=n_c)
    rank = _rank_cells(occ, n_per, base)
    deg = np.bincount(occ.u[base], minlength=n_u)
    top = int(deg.max()) if deg.size else 0
    tot_f = float(total)
    best: tuple[float, int, np.ndarray, np.ndarray] | None = None
    for gamma in _GAMMAS:
        for cap in sorted({c for c in _CAPS if c < top} | {max(top, 1)}):
            keep = base & (rank < cap)
            eps, keep = _fill_and_prune(occ, keep, tot_f, float(s_mu), gamma)
            score = _score(occ, keep, eps, float(s_mu))
            if best is None or score < best[0] - 1e-12:
                best = (score, cap, keep, eps)
    assert best is not None
    score, cap, keep, eps = best
    a_mu, a_v = _on_grid(occ, keep, eps, s_mu, s_v, total, grid)
    released = (a_mu > 0) & (np.bincount(occ.j[keep], minlength=n_c) > 0)
    keep = keep & released[occ.j]
    a_mu = np.where(released, a_mu, 0)
    a_v = np.where(released, a_v, 0)
    eps_mu = np.array([grid * int(x) for x in a_mu.tolist()] + [None], dtype=object)[:-1]
    eps_v = np.array([grid * int(x) for x in a_v.tolist()] + [None], dtype=object)[:-1]
    charge = np.array([grid * int(x) for x in _user_sums(occ, keep, a_mu + a_v).tolist()]
                      + [None], dtype=object)[:-1]  # fmt: skip
    if any(c > total for c in charge.tolist()):
        raise GpframeInternalError("a planned per-user charge exceeds the total.")
    return BudgetPlan(
        occupancy=occ,
        total=total,
        split=(s_mu, s_v),
        lower=lower,
        upper=upper,
        keep=keep,
        eps_mu=eps_mu,
        eps_v=eps_v,
        released=released,
        users_kept=np.bincount(occ.j[keep], minlength=n_c),
        cells_kept=np.bincount(occ.u[keep], minlength=n_u),
        charge=charge,
        cap=cap,
        expected=score,
        weight_cap=weight_caps(occ, keep, eps_mu),
    )


def weight_caps(occ: Occupancy, keep: np.ndarray, eps_mu: np.ndarray) -> np.ndarray:
    """Per released cell, the cap c_j of the per-user weights min(m_ℓj, c_j) (public, free).

    The cell's mean is Σ w_ℓ a_ℓ / Σ w_ℓ over its kept users (a_ℓ the user's own mean), with
    w_ℓ = min(m_ℓj, c_j): c_j = 1 gives per-user averages (the least noise, sensitivity W/k_j),
    a large c_j the sample mean (no reweighting, sensitivity W·m*/m). c_j (a power of two) is
    the one with the least expected error, the noise term :func:`expected_error` of
    max w / (Σ w · ε_μ) combined in quadrature with ``REWEIGHT_SPREAD`` × the total-variation
    distance between the weights and the samples' own shares (how far reweighting can move
    the mean when users' means differ by about ``REWEIGHT_SPREAD``·W).

    >>> from gpframe.queries.clip_user import occupancy_from_records
    >>> occ = occupancy_from_records([1, 2, 3], [0, 0, 0], [50, 1, 1])
    >>> keep = np.ones(3, dtype=bool)
    >>> [weight_caps(occ, keep, np.array([Fraction(e)], dtype=object)).tolist()[0]
    ...  for e in (1, 4, 100)]  # little ε: per-user averages; much ε: the sample mean
    [1, 4, 64]
    """
    out = np.zeros(occ.n_cells, dtype=np.int64)
    e_cell = np.array([float(x) for x in eps_mu.tolist()], dtype=np.float64)
    rows = np.flatnonzero(keep & (e_cell[occ.j] > 0))
    if not rows.size:
        return out
    # every cell at once, one pass per candidate c = 1, 2, 4, ...: the kept rows sorted by cell,
    # per-cell sums and maxima by segment reductions (the scan of each cell is unchanged: c
    # doubles until it reaches the cell's largest count, a later c wins only by more than 1e-12)
    rows = rows[np.argsort(occ.j[rows], kind="stable")]
    cj = occ.j[rows]
    starts = np.flatnonzero(np.r_[True, cj[1:] != cj[:-1]])
    seg = np.cumsum(np.r_[False, cj[1:] != cj[:-1]])
    m = occ.m[rows].astype(np.float64)
    e = e_cell[cj[starts]]
    share = m / np.add.reduceat(m, starts)[seg]
    m_max = np.maximum.reduceat(m, starts)
    best_err = np.full(starts.size, np.inf)
    best_c = np.ones(starts.size, dtype=np.int64)
    scanning = np.ones(starts.size, dtype=bool)
    c = 1
    while scanning.any():
        w = np.minimum(m, float(c))
        w_sum = np.add.reduceat(w, starts)
        b = np.maximum.reduceat(w, starts) / w_sum / e
        tv = 0.5 * np.add.reduceat(np.abs(w / w_sum[seg] - share), starts)
        err = np.hypot(expected_error(b), REWEIGHT_SPREAD * tv)
        better = scanning & (err < best_err - 1e-12)
        best_err = np.where(better, err, best_err)
        best_c = np.where(better, c, best_c)
        scanning &= m_max > c
        c *= 2
    out[cj[starts]] = best_c
    return out


def _user_sums(occ: Occupancy, keep: np.ndarray, per_cell: np.ndarray) -> np.ndarray:
    """Exact integer sum over each user's kept cells of ``per_cell`` (int64 grid units)."""
    out = np.zeros(occ.n_users, dtype=np.int64)
    np.add.at(out, occ.u[keep], per_cell[occ.j[keep]])
    return out


def _on_grid(
    occ: Occupancy,
    keep: np.ndarray,
    eps: np.ndarray,
    s_mu: Fraction,
    s_v: Fraction,
    total: Fraction,
    grid: Fraction,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell amounts (mean, second moment) in integer grid units, every user's sum ≤ total.

    The float filling is rounded to the nearest grid point (capped to the samplers' range);
    where that puts a user above the total by a few units (float rounding), each of the user's
    cells gives back its share of the excess, which only lowers the other users' sums.
    """
    e_max = int(Fraction(EPS_CELL_MAX) / grid)
    top = int(total / grid)
    if top >= 2**62 // max(occ.n_cells, 1):
        raise InvalidInputError(f"epsilon_per_user={float(total)} is too large. {_NOTHING}")
    # float rounding is enough here: the integer sums below are what is checked, exactly
    a_mu = np.minimum(np.rint(eps * float(s_mu) / float(grid)), e_max).astype(np.int64)
    a_v = np.minimum(np.rint(eps * float(s_v) / float(grid)), e_max).astype(np.int64)
    # a second moment whose noise would be no better than the data-free answer gets no ε: its
    # share goes to the mean of the same cell (same total, so no user's sum changes)
    k_j = np.maximum(np.bincount(occ.j[keep], minlength=occ.n_cells), 1)
    with np.errstate(divide="ignore"):
        b_v = np.where(a_v > 0, 1.0 / (k_j * a_v.astype(np.float64) * float(grid)), np.inf)
    useless_v = expected_error(b_v) >= 0.25
    a_mu = np.where(useless_v, np.minimum(a_mu + a_v, e_max), a_mu)
    a_v = np.where(useless_v, 0, a_v)
    tiny = int(np.ceil(float(Fraction(2) ** -40 / grid)))  # below the samplers' range: not released
    a_mu = np.where(a_mu >= tiny, a_mu, 0)
    a_v = np.where(a_v >= tiny, a_v, 0)
    for _ in range(occ.n_users + 2):
        over = _user_sums(occ, keep, a_mu + a_v) - top
        if not (over > 0).any():
            return a_mu, a_v
        cnt = np.maximum(np.bincount(occ.u[keep], minlength=occ.n_users), 1)
        need = -(-np.maximum(over, 0) // cnt)  # ceil: per cell of each user over the total
        red = np.zeros(occ.n_cells, dtype=np.int64)
        np.maximum.at(red, occ.j[keep], need[occ.u[keep]])
        take_v = np.minimum(red, a_v)
        a_v = a_v - take_v
        a_mu = np.maximum(a_mu - (red - take_v), 0)
        a_mu = np.where(a_mu >= tiny, a_mu, 0)
    raise GpframeInternalError("the amounts could not be fitted to the total.")  # pragma: no cover
