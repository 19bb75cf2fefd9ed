"""Per-cell mean and variance from per-user averages, under one per-user total ε (public occupancy).

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it") and
``docs/noise.md`` (central Laplace, exact statistics). This is ``grid_stats(...,
epsilon_per_user=E, occupancy="public")``.

Neighbouring relation: as for Clip-User, the occupancy is public and one user's **values** change.

1. **Plan** (:func:`gpframe.queries.grid_budget.plan_budget`, public, free): the kept (user, cell)
   pairs and each released cell's ε_μ,j and ε_V,j, with Σ_{kept j} (ε_μ,j + ε_V,j) ≤ E for every
   user. Users whose remaining central budget cannot pay their planned charge are left out and
   the plan is recomputed (budgets are public ledger state).
2. **Per-user averages.** Values are snapped to the fixed-point grid q above L
   (:func:`~gpframe.queries.grid_stats.value_step`, integers k in [0, T]); centre c = L + H with
   H = T·q/2. In cell j each kept user ℓ contributes one bounded pair: the average a_ℓ of their
   snapped values and the average s_ℓ of their (x̂ − c)², in [L, L + 2H] and [0, H²]. The cell
   releases M_j = mean over kept users of a_ℓ (sensitivity 2H/k_j ≤ W/k_j, k_j kept users) and
   Q_j = mean of s_ℓ (sensitivity H²/k_j), both exact rationals, with central Laplace at ε_μ,j
   and ε_V,j (``laplace_dp``'s lattice and rate, every cell in one call of ``laplace_dp_rows``;
   Dwork & Roth, 'The Algorithmic Foundations of Differential Privacy', 2014, Thm. 3.6).
3. **Post-processing**: Q̃ is clamped to [0, H²] and the variance Q̃ − (M̃ − c)² (M̃ clamped
   to [L, U]) to [0, W²/4]. The released means are shrunk toward their common centre by their
   noise (:func:`shrink_means`, empirical Bayes on released values and public scales only),
   then clamped to [L, U]; cells the plan left unreleased get the shrinkage centre (bound W)
   and cells without a variance the pooled variance (bound W²/4), ``shrink=False``: NaN.
4. **Charge**: user ℓ pays Σ over their kept cells of ε_μ,j + ε_V,j (≤ E), before the release.

The estimand is the average over a cell's kept users of each user's own mean (and the variance
of the pooled, user-weighted samples): every user counts once, however many samples they have,
as in OpenDP's per-user averages. Users not kept in a cell do not enter it; a cell with no kept
user, or whose expected error would not beat the data-free midpoint, is not released (NaN,
``released`` False).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from typing import Any

import numpy as np

from gpframe.errors import GpframeInternalError, InvalidInputError, LedgerError
from gpframe.ledger.run import Charge, run
from gpframe.ledger.session import EXCLUDED_KEY
from gpframe.queries.clip_user import Occupancy
from gpframe.queries.grid_budget import DEFAULT_SPLIT, BudgetPlan, plan_budget

__all__ = [
    "PairSums",
    "UserStatsRelease",
    "UserStatsRun",
    "pair_sums",
    "private_epsilons",
    "release_user_stats",
    "run_user_grid_stats",
    "shrink_means",
    "snap",
]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class UserStatsRelease:
    """Released statistics per cell (aligned with the plan's cells; NaN where not released).

    ``mean_error`` / ``variance_error`` hold with probability ≥ 1 − β per cell against the
    kept users' per-user-average estimand (noise and snapping only).
    """

    mean: np.ndarray
    var: np.ndarray
    mean_error: np.ndarray
    var_error: np.ndarray
    scale_mu: np.ndarray
    scale_v: np.ndarray
    released: np.ndarray
    #: whether the means were shrunk (:func:`shrink_means`); a public choice of the caller
    shrunk: bool = False


def snap(values: np.ndarray, lower: Fraction, upper: Fraction) -> tuple[np.ndarray, int, Fraction]:
    """Values in [L, U] as integers k on the fixed-point grid q above L: (k, T, q), k in [0, T].

    Every face computes its sums from these integers, so partial sums add up exactly.
    """
    from gpframe.queries.grid_stats import value_step

    q = value_step(lower, upper)
    T = int((upper - lower) // q)
    k = np.clip(np.rint((values - float(lower)) / float(q)), 0, T).astype(np.int64)
    return k, T, q


@dataclass(frozen=True)
class PairSums:
    """Exact per-(user, cell) sums, aligned with an occupancy's rows (sorted by cell, user).

    ``s0`` the count, ``s1`` Σ k and ``s2`` Σ (2k − T)² over the pair's values (:func:`snap`):
    int64, so sums over partitions of the data add up exactly.
    """

    s0: np.ndarray
    s1: np.ndarray
    s2: np.ndarray


def pair_sums(
    occ: Occupancy, rows_u: np.ndarray, rows_j: np.ndarray, values: np.ndarray,
    lower: Fraction, upper: Fraction, coo: np.ndarray | None = None,
) -> PairSums:  # fmt: skip
    """Sum each data row into its occupancy pair (``rows_u``/``rows_j`` index ``occ``).

    ``coo``: each row's pair (COO row of ``occ``) when the caller has it
    (:func:`~gpframe.queries.clip_user.occupancy_rows`); otherwise looked up.
    """
    k, T, _q = snap(values, lower, upper)
    if coo is None:
        coo = occ.pair_rows(rows_u, rows_j)
    npair = occ.u.size
    s0 = np.bincount(coo, minlength=npair).astype(np.int64)
    s1 = np.zeros(npair, np.int64)
    s2 = np.zeros(npair, np.int64)
    # 2k − T is (x̂ − c)/(q/2): integers, so every sum is exact
    d = 2 * k - T
    np.add.at(s1, coo, k)
    np.add.at(s2, coo, d * d)
    return PairSums(s0, s1, s2)


def _user_moments(
    plan: BudgetPlan, sums: PairSums
) -> tuple[list[Fraction | None], list[Fraction | None], Fraction, Fraction]:
    """Exact per-cell means of the kept users' averages of x̂ and of (x̂ − c)²."""
    from gpframe.queries.grid_stats import value_step

    occ = plan.occupancy
    lo, hi = plan.lower, plan.upper
    q = value_step(lo, hi)
    T = int((hi - lo) // q)
    s0, s1, s2 = sums.s0, sums.s1, sums.s2
    if (s0[plan.keep] != occ.m[plan.keep]).any():
        raise GpframeInternalError("kept rows do not match the occupancy.")
    means: list[Fraction | None] = [None] * occ.n_cells
    seconds: list[Fraction | None] = [None] * occ.n_cells
    # weight min(m, c_j) times the user's own mean s/m: per cell, one common denominator (the
    # lcm of the counts) and Python integers, so the sums are exact and cheap
    wsum, _wmax = cell_weights(plan)
    rows = np.flatnonzero(plan.keep)
    rows = rows[np.argsort(occ.j[rows], kind="stable")]
    cuts = [0, *(np.flatnonzero(np.diff(occ.j[rows])) + 1).tolist(), rows.size]
    # Python ints once, then one exact Fraction per statistic: lo + q·n1/D and (q/2)²·n2/D
    js, ms_all = occ.j[rows].tolist(), occ.m[rows].tolist()
    ws_all = np.minimum(occ.m[rows], plan.weight_cap[occ.j[rows]]).tolist()
    a1_all, a2_all = s1[rows].tolist(), s2[rows].tolist()
    ws_cell = wsum.tolist()
    ln, ld, qn, qd = lo.numerator, lo.denominator, q.numerator, q.denominator
    for a, b in pairwise(cuts) if rows.size else []:
        j = js[a]
        ms = ms_all[a:b]
        den = math.lcm(*ms)
        ws = ws_all[a:b]
        n1 = sum(w * x * (den // m) for w, x, m in zip(ws, a1_all[a:b], ms, strict=True))
        n2 = sum(w * x * (den // m) for w, x, m in zip(ws, a2_all[a:b], ms, strict=True))
        D = den * ws_cell[j]
        means[j] = Fraction(ln * qd * D + ld * qn * n1, ld * qd * D)
        seconds[j] = Fraction(qn * qn * n2, 4 * qd * qd * D)
    return means, seconds, q, T * q / 2


def cell_weights(plan: BudgetPlan) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, Σ and max of the kept users' weights min(m_ℓj, c_j) (public: occupancy only)."""
    occ = plan.occupancy
    w = np.minimum(occ.m, plan.weight_cap[occ.j]) * plan.keep
    wsum = np.bincount(occ.j, weights=w, minlength=occ.n_cells).astype(np.int64)
    wmax = np.zeros(occ.n_cells, dtype=np.int64)
    np.maximum.at(wmax, occ.j, w.astype(np.int64))
    return wsum, wmax


def release_user_stats(
    plan: BudgetPlan,
    rows_u: np.ndarray | None,
    rows_j: np.ndarray | None,
    values: np.ndarray | None,
    *,
    beta: float = 0.05,
    rng: Any = None,
    sums: PairSums | None = None,
    shrink: bool | None = None,
) -> UserStatsRelease:
    """Release each planned cell's mean and second moment of per-user averages (steps 2–3).

    See the module docstring and ``docs/operations/grid_stats.md``. Noise: per released cell,
    central Laplace with sensitivity 2H/k_j at ε_μ,j (mean) and H²/k_j at ε_V,j (second moment),
    lattice g = 2^(⌊log₂Δ⌋−20) (``docs/noise.md``), each cell at its own rate and every cell in
    one sampler call (:func:`gpframe.mechanisms.laplace_rows.laplace_dp_rows`: the same lattice,
    rate and guarantee as ``laplace_dp`` per cell). Charge: none here; the caller charges each
    kept user Σ (ε_μ,j + ε_V,j) over their kept cells first.

    ``rows_u``/``rows_j`` index the occupancy's users and cells per data row; ``values`` are in
    [L, U]. Or ``sums``: the per-pair sums already reduced (:func:`pair_sums`, e.g. over the
    partitions of a Dask frame), and then the rows are not read. ``shrink``: apply
    :func:`shrink_means` (None: the module default ``SHRINK``); post-processing either way.
    """
    from gpframe.mechanisms.laplace_rows import laplace_dp_rows

    occ = plan.occupancy
    n_c = occ.n_cells
    if sums is None:
        sums = pair_sums(occ, rows_u, rows_j, values, plan.lower, plan.upper)  # type: ignore[arg-type]
    means, seconds, q, H = _user_moments(plan, sums)
    L, U = plan.lower, plan.upper
    W = U - L
    out = {k: np.full(n_c, np.nan) for k in ("m", "v", "em", "ev", "sm", "sv", "raw")}
    todo = np.flatnonzero(plan.released).tolist()
    for j in todo:
        if means[j] is None or seconds[j] is None:
            raise GpframeInternalError(f"cell {j} is planned but has no kept user.")
    wsum, wmax = cell_weights(plan)
    # one user moves the weighted mean by ≤ (its weight share)·2H and the second moment by
    # ≤ share·H²: every released cell's statistics with their own (Δ, ε) in one sampler call
    hn, hd = H.numerator, H.denominator
    wm, ws = wmax.tolist(), wsum.tolist()
    var_at = [i for i, j in enumerate(todo) if plan.eps_v[j] > 0]
    vj = [todo[i] for i in var_at]
    rel = laplace_dp_rows(
        [means[j] for j in todo] + [seconds[j] for j in vj],
        sensitivity=[Fraction(2 * hn * wm[j], hd * ws[j]) for j in todo]
        + [Fraction(hn * hn * wm[j], hd * hd * ws[j]) for j in vj],
        epsilon=[plan.eps_mu[j] for j in todo] + [plan.eps_v[j] for j in vj],
        rng=rng,
    )  # fmt: skip
    want = tuple(plan.eps_mu[j] for j in todo) + tuple(plan.eps_v[j] for j in vj)
    if rel.epsilon != want:
        raise GpframeInternalError("a release guarantee differs from the planned budget.")
    n_m = len(todo)
    bound = rel.error_bound(beta / 2)
    cj = np.array(todo, dtype=np.int64)
    raw = rel.values[:n_m]
    out["raw"][cj] = raw
    mu = np.clip(raw, float(L), float(U))
    tm = bound[:n_m] + float(q)
    out["m"][cj], out["em"][cj] = mu, np.minimum(tm, float(W))
    out["sm"][cj] = rel.scale[:n_m]
    if vj:
        at = np.array(var_at, dtype=np.int64)
        s2 = np.clip(rel.values[n_m:], 0.0, float(H * H))
        c = float(L + H)
        var = np.clip(s2 - (mu[at] - c) ** 2, 0.0, float(W * W) / 4)
        # |ΔV| ≤ |ΔQ| + |ΔM|·|M̃ + M − 2c| ≤ t_Q + t_M·2H, plus snapping (≤ q(W + q))
        ev = bound[n_m:] + tm[at] * 2 * float(H) + float(q * (W + q))
        vc = cj[at]
        out["v"][vc], out["sv"][vc] = var, rel.scale[n_m:]
        out["ev"][vc] = np.minimum(ev, float(W * W) / 4)
    shrunk = bool(SHRINK if shrink is None else shrink)
    if shrunk:  # post-processing of the released (unclamped) means and their public scales
        out["mc"] = out["m"]  # the clamped means, before the shrinkage
        out["m"], out["em"] = shrink_means(
            out["raw"],
            out["sm"],
            out["em"],
            float(L),
            float(U),
            fill=~plan.released if FILL else None,
        )
        if FILL:  # cells with no released second moment: the precision-weighted centre
            out["v"], out["ev"] = _fill_variance(out, float(L + H), float(W * W) / 4)
    return UserStatsRelease(
        mean=out["m"],
        var=out["v"],
        mean_error=out["em"],
        var_error=out["ev"],
        scale_mu=out["sm"],
        scale_v=out["sv"],
        released=plan.released.copy(),
        shrunk=shrunk,
    )


def _fill_variance(out: dict[str, np.ndarray], c: float, top: float) -> tuple[Any, Any]:
    """Give the cells without a variance the released variances' precision-weighted average.

    Post-processing: the weights 1/(2s²) use each variance's noise scale,
    s = hypot(b_Q, 2|M̃ − c|·b_M) (the second moment's and the squared mean's, M̃ clamped,
    not shrunk), public scales and
    released values; the bound of a filled cell is the trivial W²/4. Fewer than
    ``SHRINK_MIN_CELLS`` variances: nothing is filled.
    """
    v, ev = out["v"], out["ev"]
    s = np.hypot(out["sv"], 2 * np.abs(out["mc"] - c) * out["sm"])
    got = np.isfinite(v) & np.isfinite(s) & (s > 0)
    if int(got.sum()) < SHRINK_MIN_CELLS:
        return v, ev
    w = 1.0 / (2 * s[got] ** 2)
    centre = float(np.sum(w * v[got]) / np.sum(w))
    return np.where(np.isfinite(v), v, centre), np.where(np.isfinite(v), ev, top)


#: apply :func:`shrink_means` to the released means (post-processing of released values)
SHRINK = True
#: give the cells left unreleased the shrinkage centre (their λ is 0: no noisy mean)
FILL = True
#: fewest released cells for which the shrinkage centre and spread are estimated (Stein's
#: estimator dominates the raw estimates only from three cells on)
SHRINK_MIN_CELLS = 3
#: the smallest spread of the true cell means the shrinkage assumes, in units of W
SHRINK_MIN_SPREAD = 1 / 32


def shrink_means(
    mean: np.ndarray,
    scale: np.ndarray,
    error: np.ndarray,
    lower: float,
    upper: float,
    fill: np.ndarray | None = None,
    centre: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Shrink each released mean toward the cells' common centre, by its noise (post-processing).

    Empirical Bayes (Efron & Morris, 'Stein's Estimation Rule and Its Competitors — An Empirical
    Bayes Approach', 1973): the released means M̃_j (Laplace scale b_j, noise variance
    v_j = 2b_j²) are read as the true means, spread τ² around a centre m₀, plus noise. m₀ (the
    precision-weighted average of the released means) and τ² (their weighted spread less the noise,
    at least ``SHRINK_MIN_SPREAD``·W squared) are estimated from the **released** values and the
    public scales only, so this is post-processing and costs nothing. Each mean becomes
    m₀ + λ_j (M̃_j − m₀) with λ_j = τ²/(τ² + v_j): a precise cell barely moves, a noisy one goes
    most of the way to m₀. NaN (unreleased) cells stay NaN; fewer than ``SHRINK_MIN_CELLS``
    released cells are left as they are.

    ``mean`` holds the unclamped released means (their noise is exactly Laplace, so the moment
    estimates are consistent); m₀ is clamped to [L, U] and so is every shrunk mean. The error
    bound follows: with probability ≥ 1 − β, |M̃_j − μ_j| ≤ t_j (the raw bound ``error``) and
    |m₀ − μ_j| ≤ W, so |m₀ + λ_j (M̃_j − m₀) − μ_j| ≤ λ_j t_j + (1 − λ_j) W (clamping to
    [L, U] ∋ μ_j only shortens it); on the same event it is also ≤ t_j + the distance the
    clamped mean moved, and the smaller of the two is reported. ``fill`` (cells with no noisy
    mean, e.g. left unreleased by the plan) get m₀, their λ being 0, with the trivial bound W,
    when m₀ differs from the midpoint (L + U)/2 by more than its standard error (Σ_j 1/(v_j +
    τ²))^−½ (otherwise they stay NaN: a few noisy cells would set it).
    ``centre``: m₀ given by the caller (a function of released values), only τ² is estimated.

    >>> m, e = shrink_means(np.array([2.0, 3.0, 4.0, 9.0, np.nan]),
    ...                     np.array([0.01, 0.01, 0.01, 50.0, np.nan]),
    ...                     np.array([0.1, 0.1, 0.1, 10.0, np.nan]), 0.0, 10.0)
    >>> [round(float(x), 2) for x in m[:4]], bool(np.isnan(m[4]))  # the noisy cell moves to ~3
    ([2.0, 3.0, 4.0, 3.0], True)
    """
    ok = np.isfinite(mean) & np.isfinite(scale)
    if int(ok.sum()) < SHRINK_MIN_CELLS:
        return np.clip(mean, lower, upper), error
    W = upper - lower
    m, v = mean[ok], 2.0 * scale[ok] ** 2
    floor = (SHRINK_MIN_SPREAD * W) ** 2
    tau2 = W * W / 12  # the spread of a uniform on [L, U] to start
    fixed = centre
    if fixed is not None:
        centre = min(max(float(fixed), lower), upper)
    for _ in range(20):  # fixed point of the weighted moment equations (a few rounds suffice)
        w = 1.0 / (v + tau2)
        if fixed is None:
            centre = min(max(float(np.sum(w * m) / np.sum(w)), lower), upper)
        new = max(float(np.sum(w * ((m - centre) ** 2 - v)) / np.sum(w)), floor)
        if abs(new - tau2) <= 1e-9 * W * W:
            tau2 = new
            break
        tau2 = new
    lam = tau2 / (tau2 + v)
    out_m, out_e = mean.copy(), error.copy()
    out_m[ok] = np.clip(centre + lam * (m - centre), lower, upper)
    # two bounds that hold on the same event |M̃_j − μ_j| ≤ t_j: the pooled one, and t_j plus
    # the distance the clamped mean was moved (so a cell's bound grows by at most that shift)
    moved = np.abs(out_m[ok] - np.clip(m, lower, upper))
    out_e[ok] = np.minimum(np.minimum(lam * error[ok] + (1.0 - lam) * W, error[ok] + moved), W)
    # no noisy mean at all (λ = 0): the centre, with the trivial bound W, but only when the
    # centre is told apart from the data-free midpoint by more than its own standard error
    # (1/Σ w)^½, else a few noisy cells would set it
    se = float(np.sum(1.0 / (v + tau2))) ** -0.5
    if fill is not None and abs(centre - (lower + upper) / 2) > se:
        at = np.asarray(fill, dtype=bool) & ~ok
        out_m[at], out_e[at] = centre, W
    return out_m, out_e


@dataclass(frozen=True, eq=False)
class UserStatsRun:
    """What :func:`run_user_grid_stats` did: the plan, the release, the charges, the exclusions."""

    plan: BudgetPlan
    release: UserStatsRelease
    users: list[Any]
    charges: np.ndarray  # float, filter units, aligned with ``users``
    excluded: list[Any]
    query_id: str
    spent_at_most: float


def _units(ledger: Any, plan: BudgetPlan) -> tuple[np.ndarray, np.ndarray]:
    """Ledger units per user: each kept pair's two draws, each rounded up as the ledger does."""
    occ = plan.occupancy
    units = np.zeros(occ.n_users, np.int64)
    big = np.zeros(occ.n_users, bool)
    kept_u, kept_j = occ.u[plan.keep], occ.j[plan.keep]
    if ledger.kind["central"] == "dp":
        fast = _units_dp(ledger, plan, kept_u, kept_j)
        if fast is not None:
            return fast, big
    for eps in (plan.eps_mu, plan.eps_v):
        # one ledger conversion per distinct amount: index the cells' amounts, then count per user
        distinct = sorted(set(eps.tolist()))
        index = {a: i for i, a in enumerate(distinct)}
        code = np.array([index[a] for a in eps.tolist()], dtype=np.int64)[kept_j]
        for i, a in enumerate(distinct):
            if a == 0:
                continue
            cnt = np.bincount(kept_u[code == i], minlength=occ.n_users)
            u, b = ledger.units_for("central", a, cnt, kind="dp")
            units += u
            big |= b
    return units, big


def _units_dp(
    ledger: Any, plan: BudgetPlan, kept_u: np.ndarray, kept_j: np.ndarray
) -> np.ndarray | None:
    """:func:`_units` on a DP filter whose unit divides every amount (the plan's grid), or None.

    A DP filter is charged ε itself; when ε·10^exponent is an integer n_a, the ledger's
    ⌈count·n_a⌉ is count·n_a, so a user's units are the exact integer sum of their kept cells'
    n_a: one pass over the cells instead of one ledger conversion per distinct amount.
    """
    occ = plan.occupancy
    scale = ledger.units["central"].scale
    if scale.denominator != 1:
        return None
    sc = scale.numerator
    per_cell = []
    for a, b in zip(plan.eps_mu.tolist(), plan.eps_v.tolist(), strict=True):
        n = 0
        for x in (a, b):
            p, q = x.numerator * sc, x.denominator
            if p % q:
                return None
            n += p // q
        per_cell.append(n)
    top = max(per_cell, default=0) * max(int(plan.cells_kept.max(initial=0)), 1)
    if top >= 2**62:
        return None
    units = np.zeros(occ.n_users, np.int64)
    np.add.at(units, kept_u, np.array(per_cell, dtype=np.int64)[kept_j])
    return units


def _grid(ledger: Any) -> Fraction:
    # amounts on a grid of the ledger unit (at most 1e-9): a DP filter then charges them exactly
    return Fraction(1, 10 ** min(int(ledger.units["central"].exponent), 9))


def run_user_grid_stats(
    session: Any,
    occ: Occupancy,
    rows_u: np.ndarray | None,
    rows_j: np.ndarray | None,
    values: np.ndarray | None,
    *,
    lower: Fraction,
    upper: Fraction,
    total: Fraction,
    split: tuple[Fraction, Fraction] = DEFAULT_SPLIT,
    beta: float = 0.05,
    rng: Any = None,
    params: dict[str, Any] | None = None,
    max_retries: int = 3,
    on_stage: Callable[[str], None] | None = None,
    sums: PairSums | None = None,
    shrink: bool | None = None,
    coo: np.ndarray | None = None,
) -> UserStatsRun:
    """Plan, admit, charge and release under a per-user total ``total`` (module docstring).

    Noise: :func:`release_user_stats`. Charge: user ℓ pays Σ over their kept cells of
    ε_μ,j + ε_V,j ≤ ``total`` on the central ledger (ε-DP draws; a zCDP filter records ε²/2 per
    draw); users whose remaining budget cannot pay are left out of every cell and charged nothing.
    ``values`` must be in [L, U]; the data's counts must equal ``occ`` (checked, fail closed).
    Or ``sums`` (:func:`pair_sums` reduced elsewhere, e.g. per partition of a Dask frame and
    added exactly): their counts must equal ``occ``; the rows are then not read. ``coo``: each
    row's COO row in ``occ`` (:func:`~gpframe.queries.clip_user.occupancy_rows`), if known.
    """
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.grid_stats import central_kind, check_data_matches, value_step

    central_kind(session)
    if sums is None:
        check_data_matches(occ, rows_u, rows_j, coo)  # type: ignore[arg-type]
        sums = pair_sums(occ, rows_u, rows_j, values, lower, upper, coo)  # type: ignore[arg-type]
    elif not np.array_equal(sums.s0, occ.m):
        raise GpframeInternalError("the reduced sums do not match the occupancy's counts.")
    rng = resolve_rng(rng)
    ledger = session.ledger
    grid = _grid(ledger)
    if total < grid * 2:
        raise InvalidInputError(f"epsilon_per_user={float(total)} is too small. {_NOTHING}")
    lu = ledger.units["central"]
    excluded = np.zeros(occ.n_users, dtype=bool)
    for _attempt in range(max_retries):
        rem = session.remaining_exact(occ.users.tolist(), notion="central").to_numpy()
        rem_units = np.array([int(x * lu.scale) for x in rem.tolist()], dtype=object)
        for _round in range(occ.n_users + 1):
            plan = plan_budget(
                occ, total, lower=lower, upper=upper, grid=grid, split=split, excluded=excluded
            )
            units, big = _units(ledger, plan)
            if big.any():
                raise InvalidInputError(
                    f"epsilon_per_user={float(total)} is too large for the ledger. {_NOTHING}"
                )
            over = (units.astype(object) > rem_units) & (units > 0)
            if not over.any():
                break
            excluded |= over
        if on_stage is not None and _attempt == 0:
            on_stage("budget plan")
        payers = np.flatnonzero(units > 0)
        users = occ.users[payers].tolist()
        pay_units = units[payers]
        from gpframe.queries.grid_preview import note_error, user_plan_error

        # a dry run's preview bound: the plan alone gives each cell's noise bound
        note_error(
            user_plan_error(
                plan,
                beta,
                bool(SHRINK if shrink is None else shrink),
                value_step(lower, upper),
                cell_weights(plan),
            )
        )

        def compute(r: Any, plan: BudgetPlan = plan, pay_units: Any = pay_units) -> Charge[Any]:
            rel = release_user_stats(plan, None, None, None, beta=beta, rng=rng, sums=sums,
                                     shrink=shrink)  # fmt: skip
            return Charge(rel, pay_units, units=True)

        ran = run(
            session, users, pay_units, notion="central", kind="dp", query="grid_stats",
            params={
                **(params or {}),
                "epsilon_per_user": float(total),
                "estimator": "per-user averages",
                "shrink": bool(SHRINK if shrink is None else shrink),
                "cap": plan.cap,
                "split": [float(x) for x in plan.split],
                EXCLUDED_KEY: sorted(occ.users[excluded].tolist()),
            },
            units=True, check=lambda r: bool(r.admitted.all()), compute=compute,
        )  # fmt: skip
        if ran.status == "refused":  # another process spent in between: re-plan without them
            excluded[payers[~ran.admitted]] = True
            continue
        scale = 10.0**lu.exponent
        return UserStatsRun(
            plan=plan,
            release=ran.value,
            users=users,
            charges=pay_units / scale,
            excluded=sorted(occ.users[excluded].tolist()),
            query_id=ran.query_id,
            # the largest planned charge (a public function of the public occupancy): never
            # above the total on a DP filter, whose units the grid divides exactly
            spent_at_most=int(units.max(initial=0)) / scale,
        )
    raise LedgerError(
        f"grid_stats could not reserve budgets after {max_retries} attempts (other processes kept "
        f"spending); retry later. {_NOTHING}"
    )


#: share of a cell's mean budget for the count (the rest goes to the centred sum): with
#: |mean − centre| ≈ H/2 the mean's error ∝ 1/ε_1 + (1/2)/ε_n is least at ε_1/ε_n = √2
COUNT_SHARE = Fraction(29, 70)  # ≈ 1/(1 + √2)


def private_epsilons(
    session: Any, total: Any, max_cells: Any, split: tuple[Any, Any]
) -> tuple[Fraction, Fraction, Fraction]:
    """(ε_n, ε_1, ε_2) per cell when ``total`` is spread over ``max_cells`` cells (private).

    The cell's share total/``max_cells`` goes ``split[1]`` to the centred sum of squares and the
    rest to the count and the centred sum in the ratio 1 : √2 (the split that minimises the
    mean's error, see ``COUNT_SHARE``); each is capped at 100 (one draw's range) and rounded down
    to the ledger's grid, so a user kept in at most ``max_cells`` cells pays at most ``total``.

    >>> import gpframe as gp
    >>> e = private_epsilons(gp.Session(central=gp.DP(epsilon=10.0)), 7, 1, (0.75, 0.25))
    >>> [round(float(x), 4) for x in e], float(sum(e)) <= 7
    ([2.175, 3.075, 1.75], True)
    """
    from gpframe.accounting.amounts import exact

    if isinstance(max_cells, bool) or not isinstance(max_cells, (int, np.integer)) or max_cells < 1:
        raise InvalidInputError(
            f"max_cells={max_cells!r} must be a positive integer (a public cap chosen without "
            f"looking at the data), e.g. max_cells=5. {_NOTHING}"
        )
    s_mu, s_v = exact(split[0], "split[0]"), exact(split[1], "split[1]")
    if not (s_mu > 0 and s_v > 0 and s_mu + s_v == 1):
        raise InvalidInputError(
            f"split={tuple(map(float, (s_mu, s_v)))} must be two positive shares (mean, "
            f"variance) summing to 1, e.g. split=(0.75, 0.25). {_NOTHING}"
        )
    grid = _grid(session.ledger)
    cell = Fraction(total) / int(max_cells)
    shares = (s_mu * COUNT_SHARE, s_mu * (1 - COUNT_SHARE), s_v)
    # one draw's ε stays in the samplers' range (≤ 100): a user then pays less than the total
    out = tuple((min(cell * x, Fraction(100)) // grid) * grid for x in shares)
    if min(out) < Fraction(2) ** -40:
        raise InvalidInputError(f"epsilon_per_user={float(total)} is too small. {_NOTHING}")
    return out  # type: ignore[return-value]
