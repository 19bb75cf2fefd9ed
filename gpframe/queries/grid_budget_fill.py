"""The per-cell ε water filling of the public grid plan, compiled.

See ``docs/operations/grid_stats.md`` ("A per-user total: how gpframe spends it"). The plan
(:mod:`gpframe.queries.grid_budget`) fills the cells' ε dozens of times while it prunes and
caps users, and each filling is a sequential loop of small steps (one per user or cell that
saturates): on grids of a few hundred cells numpy's per-call overhead was most of the whole
query's time. The loop runs under numba with the float operations of
:func:`gpframe.queries.grid_budget.water_fill_numpy` in the same order (sums in pair order as
``numpy.bincount`` does them, ``+ - * /`` only, no fast math), so the plan is bit-identical.
Public and free: counts and rates only, no sample value, no randomness, no charge.
"""

from __future__ import annotations

import numpy as np

from gpframe.mechanisms.compiled import njit


@njit()
def fill(
    pu: np.ndarray, pj: np.ndarray, n_users: int, n_cells: int, w: np.ndarray, total: float,
    cap: float,
) -> tuple[np.ndarray, bool]:  # fmt: skip
    """Return (ε per cell, finished) of the progressive filling (see ``water_fill_numpy``)."""
    eps = np.zeros(n_cells)
    active = np.zeros(n_cells, dtype=np.bool_)
    for i in range(pj.size):
        active[pj[i]] = True
    rem = np.full(n_users, total)
    rate = np.zeros(n_users)
    t_user = np.empty(n_users)
    t_cell = np.empty(n_cells)
    frozen = np.zeros(n_cells, dtype=np.bool_)
    # the pairs of active cells, in pair order: a frozen cell's pairs only ever added 0.0 to
    # the rates (and freezing it again changes nothing), so skipping them is bit-identical
    live = np.arange(pj.size)
    n_live = pj.size
    for _ in range(n_users + n_cells + 1):
        n_active = 0
        for j in range(n_cells):
            if active[j]:
                n_active += 1
        if n_active == 0:
            return eps, True
        rate[:] = 0.0
        for t in range(n_live):  # numpy.bincount(pu, weights=where(active, w, 0)[pj])
            i = live[t]
            rate[pu[i]] += w[pj[i]]
        tu = np.inf
        for u in range(n_users):
            t_user[u] = rem[u] / rate[u] if rate[u] > 0 else np.inf
            tu = min(tu, t_user[u])
        tc = np.inf
        for j in range(n_cells):
            t_cell[j] = (cap - eps[j]) / w[j] if active[j] else np.inf
            tc = min(tc, t_cell[j])
        ts = max(min(tu, tc), 0.0)
        for j in range(n_cells):
            if active[j]:
                eps[j] += ts * w[j]
        for u in range(n_users):
            rem[u] -= ts * rate[u]
        lim = ts * (1 + 1e-12) + 1e-300
        frozen[:] = False
        for t in range(n_live):
            i = live[t]
            u = pu[i]
            if rate[u] > 0 and t_user[u] <= lim:
                frozen[pj[i]] = True
        for j in range(n_cells):
            if (active[j] and t_cell[j] <= lim) or frozen[j]:
                active[j] = False
        kept = 0
        for t in range(n_live):
            i = live[t]
            if active[pj[i]]:
                live[kept] = i
                kept += 1
        n_live = kept
    return eps, False
