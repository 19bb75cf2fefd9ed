"""The Clip-User planner before its stage loop was compiled: the oracle of the equivalence test.

A verbatim copy of ``clip_user_plan`` with its per-user numpy stage loop (``_CellState``,
``_run``), kept here only so that the compiled loop of ``gpframe.queries.clip_user.stages`` can be
checked against it, field by field, on many random occupancies. Not used by gpframe.
"""

from __future__ import annotations

import copy
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import exact
from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.queries.clip_user.error import KAPPA, ErrorModel, _width, err
from gpframe.queries.clip_user.planner import (
    ClipUserPlan,
    Occupancy,
    _as_occupancy,
    _check_split,
)
from gpframe.queries.clip_user.pseudo_user import pseudo_user

_NOTHING = "Nothing was charged."


class _CellState:
    """Per-cell retained totals and multiset tops: r_j, top1, its multiplicity, top2.

    See ``docs/operations/grid_stats.md``.
    """

    def __init__(self, occ: Occupancy, r: np.ndarray) -> None:
        n = occ.n_cells
        self.r_tot = np.zeros(n, np.int64)
        np.add.at(self.r_tot, occ.j, r)
        self.hist: list[dict[int, int]] = [dict() for _ in range(n)]
        # rows are sorted by cell: one pass builds each cell's count -> multiplicity map
        keep = r > 0
        jj, vv = occ.j[keep], r[keep]
        pair, mult = np.unique(np.stack([jj, vv]), axis=1, return_counts=True)
        for cj, v, k in zip(pair[0].tolist(), pair[1].tolist(), mult.tolist(), strict=True):
            self.hist[cj][v] = k
        self.top1 = np.zeros(n, np.int64)
        self.cnt1 = np.zeros(n, np.int64)
        self.top2 = np.zeros(n, np.int64)
        for cj in range(n):
            self._refresh(cj)

    def _refresh(self, cj: int) -> None:
        keys = sorted(self.hist[cj], reverse=True)
        self.top1[cj] = keys[0] if keys else 0
        self.cnt1[cj] = self.hist[cj][keys[0]] if keys else 0
        self.top2[cj] = keys[1] if len(keys) > 1 else 0

    def rs_without(self, cells: np.ndarray, vals: np.ndarray) -> np.ndarray:
        """Largest retained count of each cell after removing one occurrence of ``vals``."""
        alone = (vals == self.top1[cells]) & (self.cnt1[cells] == 1)
        return np.where(alone, self.top2[cells], self.top1[cells])

    def remove(self, cj: int, v: int) -> None:
        hj = self.hist[cj]
        hj[v] -= 1
        if hj[v] == 0:
            del hj[v]
        self.r_tot[cj] -= v
        if v >= self.top2[cj]:
            self._refresh(cj)


def reference_plan(
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
    """The planner as it was before its stage loop was compiled (the oracle)."""
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
    state = _CellState(occ, r)
    E0 = err(m_cell, state.r_tot, state.top1, model)
    alive = state.r_tot >= 1
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
        status = _run(
            occ,
            r,
            state,
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
    m_ub = np.where(state.r_tot >= 1, state.top1, 0)
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


def _run(
    occ: Occupancy,
    r: np.ndarray,
    state: _CellState,
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
) -> str:
    """Run the stage loop on the incremental state.

    See ``docs/operations/grid_stats.md``; ``docs/operations/grid_stats.md``: mutates r, state, E.
    """
    n_u = occ.n_users
    # per-user rows (positions into the COO arrays), in ascending cell key order: COO rows are
    # sorted by (cell, user), so a stable sort by user keeps the cell order within each user
    by_user = np.argsort(occ.u, kind="stable")
    starts = np.searchsorted(occ.u[by_user], np.arange(n_u + 1))
    rows: list[np.ndarray] = [by_user[starts[i] : starts[i + 1]] for i in range(n_u)]
    rows = [rw[r[rw] > 0] for rw in rows]
    G = np.array([rw.size for rw in rows], dtype=np.int64)
    # canonical order: (-|G| at the start, user key); keys are already sorted, so a stable sort
    # on -|G| gives it. Excluded users have |G| = 0 and are never candidates.
    order = np.argsort(-G, kind="stable") if user_order == "spec" else np.arange(n_u)
    ukey, ckey = occ.users.tolist(), occ.cells.tolist()  # plain Python keys for the trace
    stage = 0
    while True:
        g = int(G.max()) if n_u else 0
        if g <= 1:
            return "floor"
        stage += 1
        S = order[(G[order] == g) & ~excl[order]]
        snap = None
        if rollback:
            snap = (r.copy(), list(rows), G.copy(), E.copy(), copy.deepcopy(state))
        for u in S.tolist():
            rw = rows[u]
            cells = occ.j[rw]
            vals = r[rw]
            r_new = state.r_tot[cells] - vals
            rs_new = state.rs_without(cells, vals)
            e = err(m_cell[cells], r_new, rs_new, model)
            if protect:
                e = np.where(cells == jw, np.inf, e)
            if candidates is not None:
                cand = list(zip([ckey[c] for c in cells.tolist()], e.tolist(), strict=True))
                candidates.append((ukey[u], cand))
            k = int(np.argmin(e))  # first minimum = smallest cell key (strict <)
            best = float(e[k])
            if not best <= cap:  # +inf (no candidate, or all would empty a cell) or above cap
                where = None if math.isinf(best) else ckey[int(cells[k])]
                trace.append((stage, g, ukey[u], where, best, False))
                if snap is not None:
                    r[:], rows[:], G[:], E[:] = snap[0], snap[1], snap[2], snap[3]
                    state.__dict__.update(snap[4].__dict__)
                    del suppressed[len(suppressed) - _stage_commits(trace, stage) :]
                return "halted"
            cj = int(cells[k])
            row = int(rw[k])
            state.remove(cj, int(vals[k]))
            r[row] = 0
            rows[u] = np.delete(rw, k)
            G[u] -= 1
            E[cj] = best
            trace.append((stage, g, ukey[u], ckey[cj], best, True))
            suppressed.append((ukey[u], ckey[cj]))
        if G.max() >= g:  # pragma: no cover - every user of the stage lost one cell
            raise GpframeInternalError("Clip-User stage did not lower the degradation factor.")


def _stage_commits(trace: list[Any], stage: int) -> int:
    return sum(1 for t in trace if t[0] == stage and t[5])
