"""Release of per-cell means and variances after a Clip-User plan, with user-level charges.

See ``docs/operations/grid_stats.md`` and ``docs/noise.md`` (which samples are kept, clipped
estimators, Laplace release, error bounds, per-user charge ε·|G′_ℓ|, release and admission by the
budget filter, pitfalls, lattice choice, central Laplace, real statistic, the statistic is computed
exactly); Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy for
Fixed Estimation Error' (2024), eq. (6), (7), Thm. II.1, Prop. II.1, Thm. II.2, Prop. V.1.

Pipeline of :func:`run_grid_stats` (the only function here that touches the ledger):

1. (caller) validate the data; build the public :class:`~gpframe.queries.clip_user.Occupancy`.
2. Plan with :func:`~gpframe.queries.clip_user.clip_user_plan` (free), then the admission loop of
   ``docs/operations/grid_stats.md``: users whose central budget cannot cover ``epsilon × statistics
   × cells kept`` are forced to r = 0 everywhere and the plan is recomputed until nothing changes
   (budgets are public ledger state, so this is public computation).
3. Reserve each remaining user's charge (one transaction); charge first, then release.
4. Exact statistics: every kept value is snapped to the fixed-point grid q = 2^(⌊log₂W⌋−16)
   above L (an integer in [0, ⌊W/q⌋], so the snapped value stays in [L, U]); per-cell sums of k
   and k² are int64 (order-independent, unlike a float sum), and the mean
   L + q·S₁/r and the 1/r variance q²(r·S₂ − S₁²)/r² are exact rationals.
5. Each statistic of each released cell is snapped exactly to the noise lattice and released with
   :func:`gpframe.mechanisms.laplace_dp` at its own budget and the plan's exact sensitivity
   (W·r*/r, W²·h(r*, r)); the ledger is charged the guarantees' amounts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import exact
from gpframe.errors import GpframeInternalError, InvalidInputError, LedgerError
from gpframe.ledger.run import Charge, run
from gpframe.ledger.session import EXCLUDED_KEY
from gpframe.queries.clip_user import ClipUserPlan, Occupancy, clip_user_plan, h_exact

__all__ = [
    "CLIPS",
    "CellRelease",
    "GridStatsRun",
    "check_data_matches",
    "exact_cell_stats",
    "release_cells",
    "retained_rows",
    "run_grid_stats",
    "value_bounds",
    "value_step",
]

_NOTHING = "Nothing was charged."
#: statistics released per cell (mean and 1/r variance): the charge multiplier of
#: docs/operations/grid_stats.md
STATISTICS = 2
#: the contribution bounding choices of ``grid_stats`` / ``clip_user`` (``clip=``)
CLIPS = ("clip-user", "pseudo-user", "none")
#: fractional bits of the value grid below W (docs/noise.md: exact fixed-point sums)
VALUE_BITS = 16


def value_step(lower: Fraction, upper: Fraction) -> Fraction:
    """Fixed-point step q = 2^(⌊log₂ W⌋ − 16) of the exact sums (W/q < 2¹⁷, so k² < 2³⁴).

    >>> value_step(Fraction(0), Fraction(65))
    Fraction(1, 1024)
    """
    from gpframe.mechanisms.calibration import floor_log2

    return Fraction(2) ** (floor_log2(upper - lower) - VALUE_BITS)


def check_data_matches(
    plan_occ: Occupancy, rows_u: np.ndarray, rows_j: np.ndarray, coo: np.ndarray | None = None
) -> None:
    """Fail closed unless the data's per-(user, cell) counts equal the plan's occupancy.

    ``rows_u`` / ``rows_j`` index ``plan_occ.users`` / ``plan_occ.cells`` (-1: not in the plan).
    With ``coo`` (each row's claimed COO row) the check is one pass over the rows
    (:func:`~gpframe.queries.clip_user.pairs.rows_match`) instead of a sort of their pair codes;
    a wrong claim fails it just the same.
    """
    if coo is not None:
        from gpframe.queries.clip_user.pairs import rows_match

        o = plan_occ
        if not rows_match(coo, rows_u, rows_j, o.u, o.j, o.m):
            _mismatch()
        return
    if rows_u.size and (rows_u.min() < 0 or rows_j.min() < 0):
        raise InvalidInputError(
            "the data has (user, cell) pairs that the public occupancy does not list; the "
            "occupancy must equal the counts of the cleaned data (docs/operations/grid_stats.md). "
            f"Rebuild the occupancy table from the data you release. {_NOTHING}"
        )
    n_u = max(plan_occ.n_users, 1)
    code = rows_j.astype(np.int64) * n_u + rows_u
    uniq, cnt = np.unique(code, return_counts=True)
    want = plan_occ.j * n_u + plan_occ.u
    if (
        uniq.shape != want.shape
        or not np.array_equal(uniq, want)
        or not np.array_equal(cnt, plan_occ.m)
    ):
        _mismatch()


def _mismatch() -> None:
    raise InvalidInputError(
        "the data's per-(user, cell) sample counts differ from the public occupancy; the "
        "sensitivities of docs/operations/grid_stats.md are valid only for the occupancy they "
        "were planned "
        f"on. Pass an occupancy table equal to the data's counts. {_NOTHING}"
    )


def retained_rows(
    plan: ClipUserPlan,
    rows_u: np.ndarray,
    rows_j: np.ndarray,
    order: np.ndarray | None = None,
    coo: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean mask of the data rows that the plan keeps.

    See ``docs/operations/grid_stats.md``: which samples are kept, release and admission;
    Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy for Fixed
    Estimation Error' (2024), Prop. V.1.

    In each (user, cell) group the first r_ℓj rows in the canonical order are kept: ``order``
    (e.g. timestamps, then row position), or row position alone. The choice reads only the user's
    own rows and public information. ``coo`` is each row's COO row in the plan's occupancy when
    the caller has it (:func:`~gpframe.queries.clip_user.occupancy_rows`); otherwise it is looked
    up from ``rows_u`` / ``rows_j``.
    """
    from gpframe.queries.clip_user.pairs import keep_first

    if coo is None:
        coo = plan.occupancy.pair_rows(rows_u, rows_j)
    # rows in the canonical order (order, then position) within every group at once: the rank
    # of a row among its group's rows is the same as in a sort by (group, order, position)
    perm = None if order is None else np.lexsort((np.arange(coo.size), np.asarray(order)))
    return keep_first(coo, plan.r, perm)


def exact_cell_stats(
    values: np.ndarray, cells: np.ndarray, n_cells: int, lower: Fraction, upper: Fraction
) -> tuple[list[Fraction | None], list[Fraction | None], np.ndarray]:
    """Exact per-cell clipped mean and 1/r variance of snapped values (``docs/noise.md``).

    Parameters
    ----------
    values : ndarray of float
        The kept values, already in [L, U].
    cells : ndarray of int
        Cell index of each kept value.

    Returns
    -------
    (means, variances, r) : exact Fractions per cell (None for cells with no kept value), counts.

    >>> m, v, r = exact_cell_stats(np.array([10.0, 40.0, 40.0]), np.array([0, 0, 0]), 1,
    ...                            Fraction(10), Fraction(40))
    >>> m[0], v[0], r.tolist()
    (Fraction(30, 1), Fraction(200, 1), [3])
    """
    q = value_step(lower, upper)
    top = (upper - lower) // q
    # (x - L)/q is float arithmetic on one sample (per-sample pre-processing: fine); the sums of
    # the resulting integers are exact whatever the order.
    k = np.rint((values - float(lower)) / float(q))
    k = np.clip(k, 0, int(top)).astype(np.int64)
    if values.size >= 2**28:
        raise InvalidInputError(
            f"more than 2**28 kept values: the exact sums would overflow. {_NOTHING}"
        )
    s0 = np.zeros(n_cells, np.int64)
    s1 = np.zeros(n_cells, np.int64)
    s2 = np.zeros(n_cells, np.int64)
    np.add.at(s0, cells, 1)
    np.add.at(s1, cells, k)
    np.add.at(s2, cells, k * k)
    return cell_stats_from_sums(s0, s1, s2, lower, upper)


def cell_stats_from_sums(
    s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, lower: Fraction, upper: Fraction
) -> tuple[list[Fraction | None], list[Fraction | None], np.ndarray]:
    """:func:`exact_cell_stats` from per-cell sums: the count, Σ k and Σ k² of the kept values.

    k = rint((x − L)/q) clipped to [0, T] (int64; sums over partitions add up exactly).

    >>> m, v, r = cell_stats_from_sums(np.array([2]), np.array([3]), np.array([5]),
    ...                                Fraction(0), Fraction(4))     # q = 2**-14
    >>> m[0], v[0], r.tolist()
    (Fraction(3, 32768), Fraction(1, 1073741824), [2])
    """
    q = value_step(lower, upper)
    if int(np.asarray(s0).sum()) >= 2**28:
        raise InvalidInputError(
            f"more than 2**28 kept values: the exact sums would overflow. {_NOTHING}"
        )
    means: list[Fraction | None] = []
    variances: list[Fraction | None] = []
    for r, a, b in zip(s0.tolist(), s1.tolist(), s2.tolist(), strict=True):
        if r == 0:
            means.append(None)
            variances.append(None)
            continue
        means.append(lower + q * Fraction(a, r))
        variances.append(q * q * Fraction(r * b - a * a, r * r))
    return means, variances, s0


@dataclass(frozen=True)
class CellRelease:
    """Released per-cell statistics and their error bounds (all post-processing of the noise).

    Arrays are aligned with the plan's cells; unreleased (emptied) cells are NaN.
    ``mean_error`` / ``var_error`` hold together with probability >= 1 − β per cell
    (``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Prop. II.1: worst-case bias +
    lattice Laplace tail at β/2 each + fixed-point snapping).
    """

    mean: np.ndarray
    var: np.ndarray
    var_unbiased: np.ndarray
    mean_error: np.ndarray
    var_error: np.ndarray
    released: np.ndarray
    scale_mu: np.ndarray
    scale_v: np.ndarray
    guarantees: tuple[Fraction, ...]


def _pre_snap(x: Fraction, g: Fraction) -> float:
    # rint of the exact statistic on the noise lattice (half to even, like np.rint), so the
    # wrapper's own snap is the identity and |u(D) − u(D')| <= ⌊Δ/g⌋ + 1 holds exactly
    u = round(x / g)
    if abs(u) >= 2**52:
        raise InvalidInputError(f"a statistic is too large for the noise lattice. {_NOTHING}")
    return float(u * g)


def release_cells(
    plan: ClipUserPlan,
    means: list[Fraction | None],
    variances: list[Fraction | None],
    *,
    beta: float,
    rng: Any = None,
    only: np.ndarray | None = None,
) -> CellRelease:
    """Release every cell with r_j >= 1: mean and variance, fresh Laplace draws.

    See ``docs/operations/grid_stats.md``.

    Noise: per cell, ``laplace_dp`` with sensitivity W·r*/r at ε_mu and W²·h(r*, r) at ε_V
    (exact Fractions from the plan's final counts); lattice g = 2^(⌊log₂Δ⌋−20),
    λ = ε/(⌊Δ/g⌋ + 1) (``docs/noise.md``). A cell with r = 1 has V̄ = 0 for every dataset:
    0 is released exactly (``docs/operations/grid_stats.md``). Cells sharing (r, r*) share their
    noise parameters and are drawn in one sampler call (independent draws, ascending cell order;
    never per row). Charge: the caller charges ε_mu + ε_V per kept cell per user (the guarantees
    returned).

    ``only`` (cell indices) restricts the release to those cells (the DuckDB UDF releases one
    Arrow batch of cells at a time); the other cells stay NaN.
    """
    from gpframe.mechanisms import laplace_dp
    from gpframe.mechanisms.calibration import central_laplace
    from gpframe.mechanisms.tails import laplace_bound

    n_c = plan.occupancy.n_cells
    L, U = plan.lower, plan.upper
    W = U - L
    eps_mu = plan.eps_cell * plan.split[0]
    eps_v = plan.eps_cell * plan.split[1]
    q = value_step(L, U)
    out = {k: np.full(n_c, np.nan) for k in ("mean", "var", "vu", "em", "ev", "sm", "sv")}
    released = plan.r_cell >= 1
    todo = np.flatnonzero(released)
    if only is not None:
        sel = np.zeros(n_c, dtype=bool)
        sel[np.asarray(only, dtype=np.int64)] = True
        todo = np.flatnonzero(released & sel)
        released = released & sel
    amounts: set[Fraction] = set()
    for j in todo.tolist():
        if means[j] is None or variances[j] is None:
            r = int(plan.r_cell[j])
            raise GpframeInternalError(f"cell {j} is planned with r={r} but has no kept value.")
    keys = np.stack([plan.r_cell[todo], plan.r_star[todo]]) if todo.size else np.zeros((2, 0))
    groups = np.unique(keys, axis=1) if todo.size else np.zeros((2, 0), np.int64)
    for r, rs in groups.T.tolist():
        cj = todo[(plan.r_cell[todo] == r) & (plan.r_star[todo] == rs)]
        d_mu = W * rs / r
        cal = central_laplace(eps_mu, d_mu, integer=False)
        pre = [_pre_snap(means[j], cal.g) for j in cj.tolist()]
        rel = laplace_dp(pre, sensitivity=d_mu, epsilon=eps_mu, rng=rng)
        amounts.add(rel.guarantee.amount)
        mu = np.asarray(rel.values, dtype=np.float64)
        sm = rel.noise["scale"]
        em = plan.E_mu[cj] + laplace_bound(beta / 2, sm, rel.g) + float(q)
        d_v = W * W * h_exact(rs, r)
        if d_v > 0:
            cal = central_laplace(eps_v, d_v, integer=False)
            pre = [_pre_snap(variances[j], cal.g) for j in cj.tolist()]
            relv = laplace_dp(pre, sensitivity=d_v, epsilon=eps_v, rng=rng)
            amounts.add(relv.guarantee.amount)
            v = np.asarray(relv.values, dtype=np.float64)
            sv = relv.noise["scale"]
            ev = plan.E_V[cj] + laplace_bound(beta / 2, sv, relv.g)
        else:
            v, sv, ev = np.zeros(cj.size), Fraction(0), plan.E_V[cj].astype(np.float64)
        # fixed-point snapping moves each value by at most q: the mean by <= q, the standard
        # deviation by <= q (centring is a projection), so the variance by <= q(W + q)
        ev = ev + float(q * (W + q))
        # post-processing: clamp to the ranges that contain the true statistics
        mu = np.clip(mu, float(L), float(U))
        v = np.clip(v, 0.0, float(W * W) / 4)
        out["mean"][cj], out["var"][cj] = mu, v
        out["vu"][cj] = v * r / (r - 1) if r > 1 else math.nan
        out["em"][cj], out["ev"][cj] = em, ev
        out["sm"][cj], out["sv"][cj] = float(sm), float(sv)
    if amounts - {eps_mu, eps_v}:
        raise GpframeInternalError("a release guarantee differs from the planned budget.")
    return CellRelease(
        out["mean"],
        out["var"],
        out["vu"],
        out["em"],
        out["ev"],
        released,
        out["sm"],
        out["sv"],
        tuple(sorted(amounts)),
    )


@dataclass(frozen=True, eq=False)
class GridStatsRun:
    """What :func:`run_grid_stats` did: the final plan, the release, the charges and exclusions."""

    plan: ClipUserPlan
    release: CellRelease
    users: list[Any]
    charges: np.ndarray  # float, filter units, aligned with ``users`` (admitted users)
    allocations: np.ndarray
    excluded: list[Any]
    query_id: str
    fkind: str
    admission_rounds: int


def central_kind(session: Any) -> str:
    """Return the kind (``"dp"``/``"zcdp"``) of the central budget, or raise InvalidInputError."""
    kinds = getattr(getattr(session, "ledger", None), "kind", None) or {}
    kind = kinds.get("central") if isinstance(kinds, dict) else None
    if kind not in ("dp", "zcdp"):
        raise InvalidInputError(
            "the session has no central budget, so it cannot pay for grid_stats (user-level DP). "
            "Open it with gp.Session(central=gp.DP(epsilon=...)). Nothing was charged."
        )
    return str(kind)


def _admission(
    session: Any,
    occ: Occupancy,
    plan_kw: dict[str, Any],
    stat_eps: tuple[Fraction, Fraction],
    excluded: set[Any],
) -> tuple[ClipUserPlan, int]:
    """Run the admission loop on public ledger state (reads only; charges nothing).

    Compares in the ledger's integer units, exactly as the reservation will.
    """
    ledger = session.ledger
    users = occ.users.tolist()
    lu = ledger.units["central"]
    rem = session.remaining_exact(users, notion="central").to_numpy()
    rem_units = np.array([int(x * lu.scale) for x in rem.tolist()], dtype=object)
    rounds = 0
    while True:
        rounds += 1
        plan = clip_user_plan(occ, excluded=sorted(excluded), **plan_kw)
        need = np.zeros(len(users), dtype=object)
        for amt in stat_eps:
            a, big = ledger.units_for("central", amt, plan.cells_kept, kind="dp")
            a_obj = a.astype(object)
            a_obj[big] = 2**64  # cannot fit the ledger: never admitted
            need = need + a_obj
        over = (need > rem_units) & ~plan.excluded & (plan.cells_kept > 0)
        if not over.any():
            return plan, rounds
        excluded.update(occ.users[over].tolist())


def _sort_key(x: Any) -> Any:
    return x


def run_grid_stats(
    session: Any,
    occ: Occupancy,
    rows_u: np.ndarray,
    rows_j: np.ndarray,
    values: np.ndarray,
    *,
    lower: Fraction,
    upper: Fraction,
    epsilon: Fraction,
    clip: str = "clip-user",
    beta: float = 0.05,
    order: np.ndarray | None = None,
    rng: Any = None,
    plan_options: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    max_retries: int = 3,
    on_stage: Callable[[str], None] | None = None,
    cell_stats: Callable[[ClipUserPlan], Any] | None = None,
    coo: np.ndarray | None = None,
) -> GridStatsRun:
    """Plan, admit, charge and release.

    See ``docs/operations/grid_stats.md``: Clip-User, release and admission, pseudo-user step,
    charges; Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy
    for Fixed Estimation Error' (2024), Alg. 1, Prop. V.1, eq. (15), Thm. II.2.

    ``epsilon`` is the budget per statistic (``docs/operations/grid_stats.md``): each user is
    charged ``epsilon × 2 × cells kept`` on the central ledger (in the filter's units: ε-DP draws
    compose on a zCDP filter as ε²/2 each). ``values`` must already be in [L, U] and validated; the
    data's counts must equal ``occ`` (checked, fail closed). ``on_stage`` (a progress bar's step)
    is called once the first Clip-User plan is admitted.

    ``cell_stats(plan)`` replaces the rows (``rows_u``, ``rows_j``, ``values`` then None): it
    returns :func:`exact_cell_stats`'s (means, variances, r) of the rows the plan keeps,
    computed where the rows are held (the Dask face, from exact per-cell sums,
    :func:`cell_stats_from_sums`; ``docs/beyond-one-machine.md``); ``occ`` must then be the
    data's own counts. It is called after the reservation, before any noise is drawn.

    ``coo`` (optional) is each row's COO row in ``occ``, from the pass that built ``occ`` and
    ``rows_u`` / ``rows_j`` (:func:`~gpframe.queries.clip_user.occupancy_rows`): it spares
    :func:`retained_rows` the search of every row among the pairs.
    """
    fkind = central_kind(session)
    if cell_stats is None:
        check_data_matches(occ, rows_u, rows_j, coo)
    eps = exact(epsilon, "epsilon")
    plan_kw = {
        "lower": lower,
        "upper": upper,
        "eps_cell": eps * STATISTICS,
        "clip": clip,
        **(plan_options or {}),
    }
    # preflight the noise calibration of the baseline before touching the ledger
    from gpframe.mechanisms.calibration import check_eps

    check_eps(eps, "epsilon")
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.grid_preview import note_plan

    rng = resolve_rng(rng)  # refuse a seeded source before anything is reserved
    ledger = session.ledger
    excluded: set[Any] = set()
    split = (plan_options or {}).get("split", (0.5, 0.5))
    stat_eps = tuple(eps * STATISTICS * exact(x, "split") for x in split)
    for _attempt in range(max_retries):
        plan, rounds = _admission(session, occ, plan_kw, stat_eps, excluded)
        note_plan(plan, beta, value_step(lower, upper))  # a dry run's preview bound
        if on_stage is not None and _attempt == 0:
            on_stage("Clip-User plan")
        payers = np.flatnonzero(plan.cells_kept > 0)
        users = occ.users[payers].tolist()
        # one ε-DP draw per statistic per kept cell: ε_mu·|G′| + ε_V·|G′|
        units = np.zeros(len(users), np.int64)
        too_big = np.zeros(len(users), bool)
        for amt in stat_eps:
            a, big = ledger.units_for("central", amt, plan.cells_kept[payers], kind="dp")
            units += a
            too_big |= big
        if too_big.any():
            raise InvalidInputError(f"epsilon={float(eps)} is too large for the ledger. {_NOTHING}")

        def compute(
            r: Any, plan: ClipUserPlan = plan, users: list[Any] = users, payers: Any = payers
        ) -> Charge[Any]:
            if cell_stats is None:
                keep = retained_rows(plan, rows_u, rows_j, order, coo)
                means, variances, r_chk = exact_cell_stats(
                    values[keep], rows_j[keep], occ.n_cells, lower, upper
                )
            else:
                means, variances, r_chk = cell_stats(plan)
            if not np.array_equal(r_chk, plan.r_cell):
                raise GpframeInternalError("kept rows do not match the plan's retained counts.")
            release = release_cells(plan, means, variances, beta=beta, rng=rng)
            # the actual charge: the guarantees' amounts, one per statistic per kept cell
            if not set(release.guarantees) <= set(stat_eps):
                raise GpframeInternalError("a release guarantee differs from the planned budget.")
            actual = np.zeros(len(users), np.int64)
            for amt in stat_eps:  # per statistic, even when ε_mu == ε_V (never deduplicated)
                a, _ = ledger.units_for("central", amt, plan.cells_kept[payers], kind="dp")
                actual += a
            return Charge((release, actual), actual, units=True)

        ran = run(
            session,
            users,
            units,
            notion="central",
            kind="dp",
            query="grid_stats",
            params={
                **(params or {}),
                "epsilon": float(eps),
                "clip": clip,
                "Gamma": plan.Gamma,
                "Gamma_prime": plan.Gamma_prime,
                # the curator's record of who was left out (session.report(query_id=...))
                EXCLUDED_KEY: sorted(excluded, key=_sort_key),
            },
            units=True,
            check=lambda r: bool(r.admitted.all()),
            compute=compute,
        )
        if ran.status == "refused":  # another process spent in between: re-plan without them
            excluded.update(np.asarray(users, dtype=object)[~ran.admitted].tolist())
            continue
        release, actual = ran.value
        query_id = ran.query_id
        scale = 10.0 ** ledger.units["central"].exponent
        return GridStatsRun(
            plan=plan,
            release=release,
            users=users,
            charges=actual / scale,
            allocations=units / scale,
            excluded=sorted(excluded, key=_sort_key),
            query_id=query_id,
            fkind=fkind,
            admission_rounds=rounds,
        )
    raise LedgerError(
        f"grid_stats could not reserve budgets after {max_retries} attempts (other processes kept "
        f"spending); retry later. {_NOTHING}"
    )


#: largest |L|, |U| accepted: W² and the Laplace scales stay far inside float range
_BOUND_MAX = Fraction(10**18)
#: smallest U − L accepted: W² (the variance's sensitivity) stays above the samplers' 2**-256
_WIDTH_MIN = Fraction(1, 2**64)


def check_value_column(frame: Any, value: Any) -> None:
    """Refuse a ``value=`` that is not a numeric column of ``frame`` (or of a Dask ``meta``)."""
    import pandas as pd

    if not isinstance(value, str) or value not in frame.columns:
        raise InvalidInputError(
            f"value={value!r} is not a column of the frame (columns: "
            f"{', '.join(map(str, frame.columns[:12]))}). Name the value column, e.g. "
            f"value='speed'. {_NOTHING}"
        )
    col = frame[value]
    if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        raise InvalidInputError(f"column {value!r} is not numeric ({col.dtype}). {_NOTHING}")


def check_cells_argument(frame: Any, cells: Any) -> None:
    """Refuse a ``cells=`` that is neither an H3 resolution nor a column of ``frame``."""
    if isinstance(cells, bool) or not isinstance(cells, (int, np.integer, str)):
        raise InvalidInputError(
            f"cells={cells!r} must be an H3 resolution (0..15) or the name of a column of H3 "
            f"cells. {_NOTHING}"
        )
    if isinstance(cells, (int, np.integer)) and not 0 <= int(cells) <= 15:
        raise InvalidInputError(f"cells={cells!r}: H3 resolutions are 0..15. {_NOTHING}")
    if isinstance(cells, str) and cells not in frame.columns:
        raise InvalidInputError(
            f"cells={cells!r} is not a column of the frame; pass an H3 resolution (e.g. "
            f"cells=8) or a column of H3 cells. {_NOTHING}"
        )


def checked_values(
    frame: Any, value: str, lo: Fraction, hi: Fraction, *, clamp: bool, name: str = "df"
) -> np.ndarray:
    """Return the ``value`` column as floats in [lo, hi], checked once for every face.

    NaN/inf values are refused; values outside the public bounds are refused, or clamped with
    ``clamp=True`` (the sensitivity needs every value in [L, U]). ``name`` is the frame's name in
    the fix the message suggests (``df`` or ``ddf``).
    """
    x = frame[value].to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(x)
    if bad.any():
        rows = ", ".join(map(str, frame.index[bad][:3].tolist()))
        raise InvalidInputError(
            f"column {value!r} has {int(bad.sum())} NaN/inf values (rows {rows}). Drop or fill "
            f"them first: {name} = {name}.dropna(subset=[{value!r}]). {_NOTHING}"
        )
    out_of = (x < float(lo)) | (x > float(hi))
    if out_of.any():
        if not clamp:
            rows = ", ".join(map(str, frame.index[out_of][:3].tolist()))
            raise InvalidInputError(
                f"column {value!r} has {int(out_of.sum())} values outside bounds=({float(lo):g}, "
                f"{float(hi):g}) (rows {rows}); the sensitivity needs every value in [L, U] "
                f"(docs/operations/grid_stats.md). Widen bounds or pass clamp=True. {_NOTHING}"
            )
        x = np.clip(x, float(lo), float(hi))
    return x


def value_bounds(bounds: Any) -> tuple[Fraction, Fraction]:
    """Return the public value interval ``bounds=(L, U)`` as exact numbers, checked."""
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"bounds={bounds!r} must be a pair (L, U), e.g. bounds=(0, 65). {_NOTHING}"
        ) from None
    lo_f, hi_f = exact(lo, "bounds[0]"), exact(hi, "bounds[1]")
    if max(abs(lo_f), abs(hi_f)) > _BOUND_MAX:
        # 10**400 overflowed float(); 1e300 overflowed the plan's error arithmetic (IndexError)
        raise InvalidInputError(
            f"bounds=({lo!r}, {hi!r}) must lie within ±1e18 (value units); rescale the value "
            f"column. {_NOTHING}"
        )
    if not hi_f > lo_f:
        raise InvalidInputError(
            f"bounds=({lo!r}, {hi!r}) needs L < U; pass e.g. bounds=(0, 65). {_NOTHING}"
        )
    if hi_f - lo_f < _WIDTH_MIN:
        # (0, 1e-300): the sensitivities fell below the samplers' 2**-256 inside the reservation
        raise InvalidInputError(
            f"bounds=({lo!r}, {hi!r}) are narrower than 2**-64; rescale the value column. "
            f"{_NOTHING}"
        )
    return lo_f, hi_f
