"""Clip-User: public planning of per-cell mean/variance releases under user-level ε-DP.

See ``docs/operations/grid_stats.md`` (helper h, sensitivities, worst-case biases, error metric,
composition and per-user charges, Clip-User, canonical orders and ties, efficient form, admission by
the budget filter: forced zeros, the plan/release split, the pseudo-user step, delegated to
:mod:`gpframe.queries.clip_user.pseudo_user`); Rameshwar & Tandon, 'On Improving the Composition
Privacy Loss in Differential Privacy for Fixed Estimation Error' (2024), Thm. IV.1, IV.2,
eq. (10)-(13), Thm. II.2, Alg. 1, Prop. V.1, eq. (15).

Everything in this module is **public and free** (``docs/operations/grid_stats.md``): it reads the
occupancy array (how many samples each user has in each cell), the interval [L, U] and the privacy
parameters, never a sample value, draws no randomness and charges nothing. :func:`clip_user_plan`
returns a :class:`ClipUserPlan`; :mod:`gpframe.queries.grid_stats` releases it.

Notation (``docs/operations/grid_stats.md``): ``m`` total samples of a cell, ``r`` retained samples,
``rs`` = r* the largest retained per-user count, ``c = m - r`` the clipped samples, ``W = U - L``.

Determinism (``docs/operations/grid_stats.md``): the error of a cell is one float64 function of
the integer triple (m, r, r*) with a fixed operation order (:func:`err`), used for E*, for every
candidate and for the pseudo-user step; identical triples give bit-identical floats, so exact ties
are detected and broken by the smallest cell key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import compress
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import exact
from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.queries.clip_user.error import (
    KAPPA,
    ErrorModel,
    _width,
    err,
)
from gpframe.queries.clip_user.pseudo_user import pseudo_user

__all__ = [
    "ClipUserPlan",
    "Occupancy",
    "RecordRows",
    "clip_user_plan",
    "occupancy_from_records",
    "occupancy_rows",
]

_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# the occupancy (public COO table)


@dataclass(frozen=True)
class Occupancy:
    """The public occupancy array as sorted COO rows.

    See ``docs/operations/grid_stats.md``: public occupancy, sparse occupancy.

    ``users`` and ``cells`` are the sorted unique keys; ``u``/``j`` index them; ``m`` is the count
    (>= 1). Rows are sorted by (cell, user).
    """

    users: np.ndarray
    cells: np.ndarray
    u: np.ndarray
    j: np.ndarray
    m: np.ndarray

    @property
    def n_users(self) -> int:
        """Number of users."""
        return int(self.users.size)

    @property
    def n_cells(self) -> int:
        """Number of cells."""
        return int(self.cells.size)

    def pair_rows(self, rows_u: np.ndarray, rows_j: np.ndarray) -> np.ndarray:
        """COO row of each (``users`` index, ``cells`` index) pair, which must be listed.

        A search among the rows' (cell, user) codes, by which the rows are sorted;
        :func:`occupancy_rows` gives the records' COO rows without it.

        >>> occ = occupancy_from_records(["a", "a", "b"], [1, 2, 2])
        >>> occ.pair_rows(np.array([1, 0]), np.array([1, 0])).tolist()
        [2, 0]
        """
        n_u = max(self.n_users, 1)
        code = np.asarray(rows_j).astype(np.int64) * n_u + rows_u
        return np.searchsorted(self.j * n_u + self.u, code)

    def to_frame(self) -> pd.DataFrame:
        """(user, cell, count) rows."""
        return pd.DataFrame(
            {"user": self.users[self.u], "cell": self.cells[self.j], "count": self.m}
        )


def _unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, by hashing for integers and str.

    Same sorted keys (same dtype) and inverse; numpy sorts all n values, pandas hashes them and
    sorts only the distinct ones (10⁷ ids of 10⁵ users, under load: 1.95 s against 0.25 s).
    """
    if values.dtype.kind in "iuU":
        inv, keys = pd.factorize(values, sort=True)
        return np.asarray(keys).astype(values.dtype, copy=False), inv.astype(np.int64, copy=False)
    keys, inv = np.unique(values, return_inverse=True)
    return keys, inv


def _sorted_keys(values: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        keys, inv = _unique_inverse(values)
    except TypeError:
        raise InvalidInputError(
            f"{name} keys are not mutually comparable (mixed types?); the canonical orders of "
            f"docs/operations/grid_stats.md need sortable keys. Use one type. {_NOTHING}"
        ) from None
    return keys, inv.reshape(-1).astype(np.int64)


@dataclass(frozen=True)
class RecordRows:
    """Where each per-sample record sits in an :class:`Occupancy` (all int64, one per record).

    ``u`` indexes ``Occupancy.users``, ``j`` ``Occupancy.cells`` and ``coo`` the COO rows (the
    record's (user, cell) pair).
    """

    u: np.ndarray
    j: np.ndarray
    coo: np.ndarray


def occupancy_rows(users: Any, cells: Any) -> tuple[Occupancy, RecordRows]:
    """Return the :class:`Occupancy` of per-sample records and where each record sits in it.

    The same occupancy as ``occupancy_from_records(users, cells)``; the records' indexes come
    from the same pass (no search of each record among the keys afterwards).

    >>> occ, rows = occupancy_rows(["b", "a", "a"], [2, 2, 1])
    >>> rows.u.tolist(), rows.j.tolist(), rows.coo.tolist()
    ([1, 0, 0], [1, 1, 0], [2, 1, 0])
    """
    from gpframe.queries.clip_user.pairs import group_pairs

    users, cells = _aligned(users, cells)
    ukeys, ui = _sorted_keys(users, "user")
    ckeys, ci = _sorted_keys(cells, "cell")
    u, j, m, coo = group_pairs(ui, ci, max(ukeys.size, 1), max(ckeys.size, 1))
    return Occupancy(ukeys, ckeys, u, j, m), RecordRows(ui, ci, coo)


def _aligned(users: Any, cells: Any) -> tuple[np.ndarray, np.ndarray]:
    users = np.asarray(users)
    cells = np.asarray(cells)
    if users.shape != cells.shape or users.ndim != 1:
        raise InvalidInputError(f"users and cells must be 1-D and aligned. {_NOTHING}")
    return users, cells


def occupancy_from_records(users: Any, cells: Any, counts: Any = None) -> Occupancy:
    """Build an :class:`Occupancy` from per-sample (``counts=None``) or per-(user, cell) rows.

    With ``counts``, each (user, cell) pair must appear once and every count must be >= 1.

    >>> occ = occupancy_from_records(["b", "a", "a"], [2, 2, 1])
    >>> occ.to_frame().values.tolist()
    [['a', 1, 1], ['a', 2, 1], ['b', 2, 1]]
    """
    if counts is None:
        return occupancy_rows(users, cells)[0]
    users, cells = _aligned(users, cells)
    ukeys, ui = _sorted_keys(users, "user")
    ckeys, ci = _sorted_keys(cells, "cell")
    pair = ci * max(ukeys.size, 1) + ui
    cnt_in = np.asarray(counts)
    if cnt_in.shape != users.shape or cnt_in.dtype.kind not in "iu":
        raise InvalidInputError(f"counts must be integers aligned with users. {_NOTHING}")
    if cnt_in.size and int(cnt_in.min()) < 1:
        raise InvalidInputError(
            f"occupancy counts must be >= 1 (a user absent from a cell has no row). {_NOTHING}"
        )
    order = np.argsort(pair, kind="stable")
    code = pair[order]
    if code.size > 1 and (np.diff(code) == 0).any():
        raise InvalidInputError(
            f"the occupancy table lists a (user, cell) pair twice; give one row per pair. "
            f"{_NOTHING}"
        )
    cnt = cnt_in[order].astype(np.int64)
    n_u = max(ukeys.size, 1)
    return Occupancy(
        ukeys, ckeys, (code % n_u).astype(np.int64), (code // n_u).astype(np.int64), cnt
    )


# ---------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True, eq=False)
class ClipUserPlan:
    """Everything Clip-User (and the pseudo-user step) decided; all public.

    See ``docs/operations/grid_stats.md``.

    Per COO row (aligned with ``occupancy``): ``r`` the retained count (after the pseudo-user step
    when it ran) and ``r_clip`` the count after Clip-User alone. Per cell (aligned with
    ``occupancy.cells``): ``m``, ``r_cell``, ``r_star``, ``m_star``, ``m_ub`` (0 for an emptied
    cell), ``E0`` the baseline error, ``E_clip`` the error after Clip-User, and the final ``E_mu``,
    ``E_V``, ``b_mu``, ``b_V``, ``E``. Per user (aligned with ``occupancy.users``): ``cells_kept`` =
    |G′_ℓ|, ``excluded``. ``charges`` maps user -> ε_cell·|G′_ℓ| (exact). ``trace`` has one entry
    per trial: (stage, g, user, cell or None, error, accepted).
    """

    occupancy: Occupancy
    lower: Fraction
    upper: Fraction
    eps_cell: Fraction
    split: tuple[Fraction, Fraction]
    model: ErrorModel
    r: np.ndarray
    r_clip: np.ndarray
    m: np.ndarray
    m_star: np.ndarray
    r_cell: np.ndarray
    r_star: np.ndarray
    m_ub: np.ndarray
    E0: np.ndarray
    E_clip: np.ndarray
    E_mu: np.ndarray
    E_V: np.ndarray
    b_mu: np.ndarray
    b_V: np.ndarray
    E: np.ndarray
    cells_kept: np.ndarray
    excluded: np.ndarray
    Gamma: int
    Gamma_prime: int
    E_star: float
    E_new: float
    j_worst: Any
    status: str
    suppressed: list[tuple[Any, Any]]
    trace: list[tuple[int, int, Any, Any, float, bool]]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def charges(self) -> pd.Series:
        """Per-user central charge ε_cell·|G′_ℓ|, exact Fractions, index = user key.

        See ``docs/operations/grid_stats.md``.
        """
        vals = [self.eps_cell * int(k) for k in self.cells_kept.tolist()]
        return pd.Series(
            vals, index=pd.Index(self.occupancy.users, name="user"), dtype=object, name="charge"
        )

    @property
    def worst_case_loss(self) -> Fraction:
        """Γ′·ε_cell: the user-level ε of the whole release (``docs/operations/grid_stats.md``)."""
        return self.eps_cell * self.Gamma_prime

    @property
    def released_cells(self) -> np.ndarray:
        """Boolean per cell: r_j >= 1.

        See ``docs/operations/grid_stats.md`` (emptied cells are not released: ⊥).
        """
        return self.r_cell >= 1

    def retained_frame(self) -> pd.DataFrame:
        """(user, cell, m, r) rows with r >= 1."""
        o = self.occupancy
        keep = self.r >= 1
        return pd.DataFrame(
            {
                "user": o.users[o.u[keep]],
                "cell": o.cells[o.j[keep]],
                "m": o.m[keep],
                "r": self.r[keep],
            }
        )

    def cell_frame(self) -> pd.DataFrame:
        """One row per cell: m, r, r*, m_UB, E0, E_mu, E_V, b_mu, b_V, E."""
        return pd.DataFrame(
            {
                "m": self.m,
                "m_star": self.m_star,
                "r": self.r_cell,
                "r_star": self.r_star,
                "m_ub": self.m_ub,
                "E0": self.E0,
                "E_clip": self.E_clip,
                "E_mu": self.E_mu,
                "E_V": self.E_V,
                "b_mu": self.b_mu,
                "b_V": self.b_V,
                "E": self.E,
            },
            index=pd.Index(self.occupancy.cells, name="cell"),
        )

    def __repr__(self) -> str:
        return (
            f"ClipUserPlan(users={self.occupancy.n_users}, cells={self.occupancy.n_cells}, "
            f"Gamma={self.Gamma} -> {self.Gamma_prime}, suppressions={len(self.suppressed)}, "
            f"E*={self.E_star:.10g}, E_new={self.E_new:.10g}, status={self.status!r})"
        )


def _check_split(split: Any) -> tuple[Fraction, Fraction]:
    try:
        a, b = (exact(s, "split") for s in split)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"split={split!r} must be a pair of fractions. {_NOTHING}"
        ) from None
    if a <= 0 or b <= 0 or a + b != 1:
        raise InvalidInputError(
            f"split={split!r} must be two positive fractions summing to 1, e.g. (0.5, 0.5). "
            f"{_NOTHING}"
        )
    return a, b


def clip_user_plan(
    occupancy: Occupancy | pd.DataFrame,
    lower: float,
    upper: float,
    eps_cell: float | Fraction,
    *,
    kappa: float = KAPPA,
    split: tuple[float, float] = (0.5, 0.5),
    error_cap: float | None = None,
    protect_worst_grid: bool = True,
    rollback_incomplete_stage: bool = False,
    clip: str = "pseudo-user",
    excluded: Any = (),
    user_order: str = "spec",
    trace_candidates: bool = False,
) -> ClipUserPlan:
    """Run Clip-User and optionally the pseudo-user step on public counts.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Alg. 1;
    ``docs/operations/grid_stats.md``.

    Pure, public and free (``docs/operations/grid_stats.md``): reads no sample value, draws no
    randomness, charges nothing.

    Parameters
    ----------
    occupancy : Occupancy or DataFrame
        The public occupancy: an :class:`Occupancy`, or a frame with columns ``user``, ``cell``,
        ``count`` (one row per pair, count >= 1).
    lower, upper : float
        The interval [L, U] known to contain every value; U > L.
    eps_cell : float
        Per-cell ε (mean and variance together): ``grid_stats(epsilon=e)`` passes 2e
        (``docs/operations/grid_stats.md``).
    kappa : float
        Noise weight of the error metric (default √2, ``docs/operations/grid_stats.md``). Never
        affects privacy.
    split : (float, float)
        (ε_mu, ε_V) as fractions of ``eps_cell``; default (½, ½).
    error_cap : float, optional
        The acceptance cap (default E*, ``docs/operations/grid_stats.md``).
    protect_worst_grid, rollback_incomplete_stage : bool
        Flags of ``docs/operations/grid_stats.md`` (defaults True, False).
    clip : {"clip-user", "pseudo-user", "none"}
        ``"none"``: no suppression (Baseline); ``"clip-user"``: Clip-User only;
        ``"pseudo-user"``: Clip-User then the pseudo-user step.
    excluded : sequence of user keys
        Users left out by the budget filter (``docs/operations/grid_stats.md``): forced to r = 0
        everywhere, never candidates; bias is still measured against the original counts; E* and
        j_worst are taken over the cells still non-empty.
    user_order : {"spec", "key"}
        ``"spec"``: (−|G_ℓ|, key) as ``docs/operations/grid_stats.md`` says. ``"key"`` exists only
        for the negative test of ``docs/operations/grid_stats.md``.
    trace_candidates : bool
        Record every candidate error of every trial in ``params["candidates"]`` (tests, small data).

    Returns
    -------
    ClipUserPlan

    Examples
    --------
    The end-to-end instance of ``docs/operations/grid_stats.md``:

    >>> occ = pd.DataFrame({"user": ["u0", "u0", "u1", "u1", "u1", "u2", "u2", "u2", "u3", "u3",
    ...                              "u3", "u3"],
    ...                     "cell": [0, 1, 0, 2, 3, 0, 2, 4, 0, 1, 3, 4],
    ...                     "count": [5, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 2]})
    >>> plan = clip_user_plan(occ, 0, 65, 1.0, clip="clip-user")
    >>> plan.Gamma, plan.Gamma_prime, plan.status, plan.suppressed
    (4, 3, 'halted', [('u3', 4), ('u3', 1), ('u1', 3)])
    >>> round(plan.E_star, 6), plan.cells_kept.tolist()
    (3125.411973, [2, 2, 3, 2])
    """
    if clip not in ("clip-user", "pseudo-user", "none"):
        raise InvalidInputError(
            f"clip={clip!r} is not one of 'clip-user', 'pseudo-user', 'none'. {_NOTHING}"
        )
    if user_order not in ("spec", "key"):
        raise InvalidInputError(f"user_order={user_order!r} is not one of 'spec', 'key'.")
    occ = _as_occupancy(occupancy)
    W_f = _width(lower, upper)
    eps = exact(eps_cell, "eps_cell")
    if eps <= 0:
        raise InvalidInputError(f"eps_cell={eps_cell!r} must be > 0. {_NOTHING}")
    sp = _check_split(split)
    if not (isinstance(kappa, (int, float)) and math.isfinite(kappa) and kappa > 0):
        raise InvalidInputError(f"kappa={kappa!r} must be finite and > 0. {_NOTHING}")
    model = ErrorModel(float(W_f), float(eps * sp[0]), float(eps * sp[1]), float(kappa))

    n_u, n_c = occ.n_users, occ.n_cells
    excl = np.zeros(n_u, dtype=bool)
    ex_keys = list(excluded) if excluded is not None else []
    if ex_keys:
        pos = np.searchsorted(occ.users, np.asarray(ex_keys, dtype=occ.users.dtype))
        pos = np.clip(pos, 0, max(n_u - 1, 0))
        ok = occ.users[pos] == np.asarray(ex_keys, dtype=occ.users.dtype)
        excl[pos[ok]] = True
    m_cell = np.zeros(n_c, np.int64)
    np.add.at(m_cell, occ.j, occ.m)
    m_star = np.zeros(n_c, np.int64)
    np.maximum.at(m_star, occ.j, occ.m)
    G0 = np.bincount(occ.u, minlength=n_u).astype(np.int64)
    Gamma = int(G0.max()) if n_u else 0

    r = np.where(excl[occ.u], 0, occ.m).astype(np.int64)
    r_tot = np.zeros(n_c, np.int64)
    np.add.at(r_tot, occ.j, r)
    top1 = np.zeros(n_c, np.int64)
    np.maximum.at(top1, occ.j, r)
    E0 = err(m_cell, r_tot, top1, model)
    alive = r_tot >= 1
    trace: list[tuple[int, int, Any, Any, float, bool]] = []
    candidates: list[tuple[Any, list[tuple[Any, float]]]] = []
    suppressed: list[tuple[Any, Any]] = []
    E = E0.copy()
    status = "none"
    if alive.any():
        E_star = float(E0[alive].max())
        jw = int(np.flatnonzero(alive & (E0 == E_star))[0])
    else:
        E_star, jw = math.inf, -1
    cap = E_star if error_cap is None else float(error_cap)

    if clip != "none" and alive.any():
        status, top1 = _run(
            occ,
            r,
            r_tot,
            E,
            m_cell,
            model,
            excl,
            cap,
            jw,
            protect_worst_grid,
            rollback_incomplete_stage,
            user_order,
            trace,
            suppressed,
            candidates if trace_candidates else None,
        )
    r_clip = r.copy()
    E_clip = E.copy()
    m_ub = np.where(r_tot >= 1, top1, 0)
    if clip == "pseudo-user":
        r, m_ub = pseudo_user(occ.j, r_clip, m_cell, model)
    r_cell = np.zeros(n_c, np.int64)
    np.add.at(r_cell, occ.j, r)
    r_star = np.zeros(n_c, np.int64)
    np.maximum.at(r_star, occ.j, r)
    parts = ErrorModel.parts(model, m_cell, r_cell, r_star)
    final_E = err(m_cell, r_cell, r_star, model)
    kept = np.bincount(occ.u[r >= 1], minlength=n_u).astype(np.int64)
    live = r_cell >= 1
    E_new = float(final_E[live].max()) if live.any() else math.inf
    params: dict[str, Any] = {
        "kappa": float(kappa),
        "split": (float(sp[0]), float(sp[1])),
        "clip": clip,
        "error_cap": error_cap,
        "protect_worst_grid": bool(protect_worst_grid),
        "rollback_incomplete_stage": bool(rollback_incomplete_stage),
        "user_order": user_order,
    }
    if trace_candidates:
        params["candidates"] = candidates
    return ClipUserPlan(
        occupancy=occ,
        lower=exact(lower, "bounds[0]"),
        upper=exact(upper, "bounds[1]"),
        eps_cell=eps,
        split=sp,
        model=model,
        r=r,
        r_clip=r_clip,
        m=m_cell,
        m_star=m_star,
        r_cell=r_cell,
        r_star=r_star,
        m_ub=m_ub,
        E0=E0,
        E_clip=E_clip,
        E_mu=parts["E_mu"],
        E_V=parts["E_V"],
        b_mu=parts["b_mu"],
        b_V=parts["b_V"],
        E=final_E,
        cells_kept=kept,
        excluded=excl,
        Gamma=Gamma,
        Gamma_prime=int(kept.max()) if n_u else 0,
        E_star=E_star,
        E_new=E_new,
        j_worst=occ.cells.tolist()[jw] if jw >= 0 else None,
        status=status,
        suppressed=suppressed,
        trace=trace,
        params=params,
    )


def _as_occupancy(occupancy: Any) -> Occupancy:
    if isinstance(occupancy, Occupancy):
        return occupancy
    if isinstance(occupancy, pd.DataFrame):
        missing = [c for c in ("user", "cell", "count") if c not in occupancy.columns]
        if missing:
            raise InvalidInputError(
                f"the occupancy table lacks column(s) {missing}; it needs 'user', 'cell' and "
                f"'count' (one row per (user, cell) pair). {_NOTHING}"
            )
        if occupancy[["user", "cell", "count"]].isna().any().any():
            raise InvalidInputError(f"the occupancy table has missing values. {_NOTHING}")
        return occupancy_from_records(
            occupancy["user"].to_numpy(),
            occupancy["cell"].to_numpy(),
            occupancy["count"].to_numpy(),
        )
    raise InvalidInputError(
        f"occupancy must be an Occupancy or a DataFrame (user, cell, count); got "
        f"{type(occupancy).__name__}. {_NOTHING}"
    )


def _run(
    occ: Occupancy,
    r: np.ndarray,
    r_tot: np.ndarray,
    E: np.ndarray,
    m_cell: np.ndarray,
    model: ErrorModel,
    excl: np.ndarray,
    cap: float,
    jw: int,
    protect: bool,
    rollback: bool,
    user_order: str,
    trace: list[Any],
    suppressed: list[Any],
    candidates: list[Any] | None,
) -> tuple[str, np.ndarray]:
    """Run the stage loop (:func:`gpframe.queries.clip_user.stages.run_stages`).

    See ``docs/operations/grid_stats.md``: mutates r, r_tot and E, fills trace, suppressed and
    candidates; returns the status and each cell's largest retained count afterwards.
    """
    # numba loads here, on the first plan that needs the loop, not on ``import gpframe``
    from gpframe.queries.clip_user.stages import FLOOR, NO_PROGRESS, run_stages

    n_u, n_c = occ.n_users, occ.n_cells
    # per-user active rows in ascending cell order: COO rows are sorted by (cell, user), so a
    # stable sort by user keeps the cell order within each user
    act = np.flatnonzero(r > 0)
    by_user = act[np.argsort(occ.u[act], kind="stable")]
    G = np.bincount(occ.u[act], minlength=n_u).astype(np.int64)
    ustart = np.zeros(n_u + 1, np.int64)
    np.cumsum(G, out=ustart[1:])
    ucell = occ.j[by_user].astype(np.int64)
    uval = r[by_user].astype(np.int64)
    # each cell's retained counts as ascending distinct values with multiplicities
    vmax = int(r.max()) + 1
    key, cc = np.unique(occ.j[act] * vmax + r[act], return_counts=True)
    cj, cv = key // vmax, key % vmax
    cstart = np.zeros(n_c + 1, np.int64)
    np.cumsum(np.bincount(cj, minlength=n_c), out=cstart[1:])
    size = np.diff(cstart)
    p1 = np.where(size >= 1, cstart[1:] - 1, -1).astype(np.int64)
    p2 = np.where(size >= 2, cstart[1:] - 2, -1).astype(np.int64)
    # canonical order: (-|G| at the start, user key); keys are already sorted, so a stable sort
    # on -|G| gives it. Excluded users have |G| = 0 and are never candidates.
    order = np.argsort(-G, kind="stable") if user_order == "spec" else np.arange(n_u)
    cap_trials = act.size + 1  # every trial but the halting one clips one active row
    cap_cand = int((G * (G + 1) // 2).sum()) + 1 if candidates is not None else 1
    t_int = [np.zeros(cap_trials, np.int64) for _ in range(4)]
    t_e = np.zeros(cap_trials, np.float64)
    t_ok = np.zeros(cap_trials, np.bool_)
    cand_off = np.zeros(cap_trials + 1, np.int64)
    cand_c = np.zeros(cap_cand, np.int64)
    cand_e = np.zeros(cap_cand, np.float64)
    code, nt, _nc, undone = run_stages(
        order.astype(np.int64), excl, G, ustart, G.copy(), ucell, uval, by_user.astype(np.int64),
        r, r_tot, m_cell, cstart, cv.astype(np.int64), cc.astype(np.int64), p1, p2, E,
        float(model.W), float(model.eps_mu), float(model.eps_v), float(model.kappa), float(cap),
        int(jw), bool(protect), bool(rollback), candidates is not None,
        *t_int, t_e, t_ok, cand_off, cand_c, cand_e,
    )  # fmt: skip
    if code == NO_PROGRESS:  # pragma: no cover - every user of the stage lost one cell
        raise GpframeInternalError("Clip-User stage did not lower the degradation factor.")
    ukey, ckey = occ.users.tolist(), occ.cells.tolist()  # plain Python keys for the trace
    stage, gs, us, cs = (a[:nt].tolist() for a in t_int)
    es, oks = t_e[:nt].tolist(), t_ok[:nt].tolist()
    cells_of = list(map([*ckey, None].__getitem__, cs))  # cell -1 (none) is the last: None
    users_of = list(map(ukey.__getitem__, us))
    trace.extend(zip(stage, gs, users_of, cells_of, es, oks, strict=True))
    # the accepted trials' (user, cell), in trial order
    suppressed.extend(zip(compress(users_of, oks), compress(cells_of, oks), strict=True))
    if undone:
        del suppressed[len(suppressed) - undone :]
    if candidates is not None:
        off = cand_off[: nt + 1].tolist()
        cc_l, ce_l = cand_c.tolist(), cand_e.tolist()
        for t in range(nt):
            lo, hi = off[t], off[t + 1]
            candidates.append(
                (users_of[t], [(ckey[c], e) for c, e in zip(cc_l[lo:hi], ce_l[lo:hi], strict=True)])
            )
    top = np.where(p1 >= 0, cv[np.maximum(p1, 0)] if cv.size else 0, 0)
    return ("floor" if code == FLOOR else "halted"), top.astype(np.int64)
