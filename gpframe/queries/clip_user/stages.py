"""Clip-User's stage loop, compiled: every trial of every stage in one pass over flat arrays.

See ``docs/operations/grid_stats.md`` (Clip-User, canonical orders and ties, efficient form);
Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy for Fixed
Estimation Error' (2024), Alg. 1.

The loop is sequential by nature: a user's choice depends on the cells that the users before it
in the stage already clipped, so it cannot be vectorised without changing decisions. It runs
under numba instead, on the same integers and with the same float operations, in the same order,
as :func:`gpframe.queries.clip_user.error.err` (``+ - * /`` only, IEEE round-to-nearest, no fast
math): every candidate error is bit-identical to the numpy one, so E*, ties (the smallest cell
key) and the cap comparisons decide exactly as before. Public and free: counts only, no sample
value, no randomness, no charge.

Layout (all int64 unless said): users' active rows as CSR segments in ascending cell order
(``ustart``, ``ulen``, ``ucell``, ``uval``, ``urow``), each cell's multiset of retained counts as
ascending distinct values with multiplicities (``cstart``, ``cvals``, ``ccnt``) and the positions
of its largest (``p1``) and second-largest (``p2``) distinct value still present (-1: none).
"""

from __future__ import annotations

import math

import numpy as np

from gpframe.mechanisms.compiled import njit

#: status codes of :func:`run_stages`
FLOOR, HALTED, NO_PROGRESS = 0, 1, 2


@njit(inline="always")
def _err1(m: int, r: int, rs: int, W: float, eps_mu: float, eps_v: float, kappa: float) -> float:
    # the operation order of error.err and error.h, term by term
    if r == 0:
        return math.inf
    c = m - r
    t = min(c, m // 2)
    hc = float(t * (m - t)) / float(m * m)
    t2 = min(rs, r // 2)
    hr = float(t2 * (r - t2)) / float(r * r)
    return W * c / m + W * W * hc + kappa * (W * rs / (r * eps_mu) + W * W * hr / eps_v)


@njit()
def _below(ccnt: np.ndarray, lo: int, start: int) -> int:
    # highest position in [lo, start] whose count is still positive, -1 if none
    i = start
    while i >= lo:
        if ccnt[i] > 0:
            return i
        i -= 1
    return -1


@njit()
def _snap(a: np.ndarray, on: bool) -> np.ndarray:
    return a.copy() if on else a[:0].copy()


@njit()
def run_stages(
    order, excl, G, ustart, ulen, ucell, uval, urow, r, r_tot, m_cell, cstart, cvals, ccnt,
    p1, p2, E, W, eps_mu, eps_v, kappa, cap, jw, protect, rollback, want_cand,
    t_stage, t_g, t_u, t_c, t_e, t_ok, cand_off, cand_c, cand_e,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """Run every stage; mutate the state arrays in place, fill the trace arrays.

    Returns (status, trials, candidates recorded, commits undone by the rollback). A halting
    trial's cell is -1 when its best error is infinite (no admissible candidate).
    """
    n_u = G.size
    nt = 0
    nc = 0
    stage = 0
    cand_off[0] = 0
    while True:
        g = 0
        for i in range(n_u):
            if G[i] > g:
                g = G[i]
        if g <= 1:
            return FLOOR, nt, nc, 0
        stage += 1
        stage_start = nt
        # the stage's starting state, for a rollback (empty copies otherwise)
        snap = (_snap(G, rollback), _snap(ulen, rollback), _snap(ucell, rollback),
                _snap(uval, rollback), _snap(urow, rollback), _snap(r, rollback),
                _snap(r_tot, rollback), _snap(ccnt, rollback), _snap(p1, rollback),
                _snap(p2, rollback), _snap(E, rollback))  # fmt: skip
        for oi in range(order.size):
            u = order[oi]
            if G[u] != g or excl[u]:
                continue  # not in this stage (users of the stage still have G == g)
            s = ustart[u]
            n = ulen[u]
            best = math.inf
            k = 0  # numpy's argmin: the first minimum, position 0 when all are +inf
            for i in range(n):
                c = ucell[s + i]
                if protect and c == jw:
                    e = math.inf
                else:
                    v = uval[s + i]
                    top1 = cvals[p1[c]]
                    rs = top1
                    if v == top1 and ccnt[p1[c]] == 1:
                        rs = cvals[p2[c]] if p2[c] >= 0 else 0
                    e = _err1(m_cell[c], r_tot[c] - v, rs, W, eps_mu, eps_v, kappa)
                if want_cand:
                    cand_c[nc] = c
                    cand_e[nc] = e
                    nc += 1
                if e < best:
                    best = e
                    k = i
            if want_cand:
                cand_off[nt + 1] = nc
            cj = ucell[s + k]
            t_stage[nt] = stage
            t_g[nt] = g
            t_u[nt] = u
            t_e[nt] = best
            if not best <= cap:  # +inf (nothing admissible) or above the cap: halt
                t_c[nt] = -1 if math.isinf(best) else cj
                t_ok[nt] = False
                nt += 1
                undone = 0
                if rollback:
                    for j in range(stage_start, nt):
                        if t_ok[j]:
                            undone += 1
                    G[:] = snap[0]
                    ulen[:] = snap[1]
                    ucell[:] = snap[2]
                    uval[:] = snap[3]
                    urow[:] = snap[4]
                    r[:] = snap[5]
                    r_tot[:] = snap[6]
                    ccnt[:] = snap[7]
                    p1[:] = snap[8]
                    p2[:] = snap[9]
                    E[:] = snap[10]
                return HALTED, nt, nc, undone
            # commit: clip user u's samples in cell cj
            v = uval[s + k]
            lo, hi = cstart[cj], cstart[cj + 1] - 1
            while lo < hi:  # the position of v among the cell's distinct counts
                mid = (lo + hi) // 2
                if cvals[mid] < v:
                    lo = mid + 1
                else:
                    hi = mid
            ccnt[lo] -= 1
            if ccnt[lo] == 0:
                if lo == p1[cj]:
                    p1[cj] = p2[cj]
                    p2[cj] = -1 if p1[cj] < 0 else _below(ccnt, cstart[cj], p1[cj] - 1)
                elif lo == p2[cj]:
                    p2[cj] = _below(ccnt, cstart[cj], lo - 1)
            r_tot[cj] -= v
            r[urow[s + k]] = 0
            for i in range(k, n - 1):  # keep the segment in ascending cell order
                ucell[s + i] = ucell[s + i + 1]
                uval[s + i] = uval[s + i + 1]
                urow[s + i] = urow[s + i + 1]
            ulen[u] = n - 1
            G[u] -= 1
            E[cj] = best
            t_c[nt] = cj
            t_ok[nt] = True
            nt += 1
        for i in range(n_u):
            if G[i] >= g:
                return NO_PROGRESS, nt, nc, 0
