"""The SVT scan of one PNN call for many users, compiled: one pass per block, stopping at the ⊤.

See ``docs/operations/knn.md`` (Method; Speed and the cap) and ``docs/noise.md`` (multi-draw);
Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 1, Alg. 2.

The same algorithm as :func:`gpframe.mechanisms.svt.scan` on k-PNN's values, with the same block
schedule and the same calls to the randomness in the same order: each step takes the block's
query draws V from the pool (one ``pool.take`` of runs × block draws, as before), then extends the
random scan order to the positions the block covers (the same ``need`` per run as before), then
tests the block. Only the test changed: numpy built a (runs × block) array of visited positions,
snapped distances and comparisons for every block, and the last block was tested in full; here
one compiled loop per run walks its block in visiting order, snaps the distance of each visited
candidate (``rint(√d² / g)``, the same float operations, so the same integers) and stops at the
first ``value + V_t <= T + W``. Same draws, same decisions, same answers; the unused draws of the
last block are dropped unread, as before.

Public constants and counts only decide the block sizes (``gpframe.mechanisms.svt``: the first
block, its growth and its cap), never the data. Noise: the query draws of the pool (scale 6K'/ε,
``docs/noise.md``); the call's charge is made by its caller, once per call, whatever the number
of visits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpframe.mechanisms.compiled import njit
from gpframe.mechanisms.svt import BLOCK_GROWTH, BLOCK_MAX, STEP_DRAWS

__all__ = ["pnn_scan", "positions", "record", "squared_distances"]

_NO_TABLE = np.empty(0, dtype=np.int64)


@njit()
def _count_removed(removed: np.ndarray, r: int, loc: int) -> int:
    """#{i : removed[r, i] − i <= loc}: rank ``loc`` among the remaining is position loc + this."""
    j = removed.shape[1]
    cnt = 0
    while cnt < j and removed[r, cnt] - cnt <= loc:
        cnt += 1
    return cnt


@njit()
def block_need(
    active: np.ndarray,
    done: np.ndarray,
    b: int,
    m: np.ndarray,
    removed: np.ndarray,
    filled: np.ndarray,
) -> tuple[np.ndarray, bool]:
    """Per active run, 1 + the largest position the next block covers; and if any is undrawn.

    A run's order is drawn to ``filled[r]`` positions. The visits of run r are ranks t mod m[r]
    for t = done[r] .. done[r] + b − 1 (past the cap included, as the numpy scan computed them);
    the scan order must be drawn that far.
    """
    need = np.empty(active.size, dtype=np.int64)
    short = False
    for a in range(active.size):
        r = active[a]
        mm = m[r]
        top = done[r] % mm + b - 1
        if top >= mm:
            top = mm - 1
        need[a] = top + _count_removed(removed, r, top) + 1
        if need[a] > filled[r]:
            short = True
    return need, short


@njit()
def block_step(
    active: np.ndarray,
    v: np.ndarray,
    b: int,
    done: np.ndarray,
    cap: np.ndarray,
    m: np.ndarray,
    start: np.ndarray,
    table: np.ndarray,
    identity: bool,
    removed: np.ndarray,
    d2: np.ndarray,
    inv_g: float,
    thr: np.ndarray,
    rank: np.ndarray,
    capped: np.ndarray,
) -> np.ndarray:
    """Test one block of ``b`` visits of every active run; return the runs still active.

    Run ``active[a]`` reads its draws ``v[a*b : (a+1)*b]`` in order. A ⊤ sets ``rank`` (the rank
    among the remaining candidates); a run that reaches its cap without one is ``capped``.
    """
    j = removed.shape[1]
    keep = np.empty(active.size, dtype=np.int64)
    nk = 0
    for a in range(active.size):
        r = active[a]
        mm = m[r]
        d0 = done[r]
        s0 = start[r]
        th = thr[r]
        lim = min(b, cap[r] - d0)  # visits at or past the cap are never tested
        loc = d0 % mm
        cnt = _count_removed(removed, r, loc)
        hit = -1
        base = a * b
        for s in range(lim):
            p = loc + cnt
            q = p if identity else table[s0 + p]
            val = np.int64(np.rint(math.sqrt(d2[s0 + q]) * inv_g))
            if val + v[base + s] <= th:
                hit = loc
                break
            loc += 1
            if loc == mm:  # a new pass
                loc = 0
                cnt = 0
            while cnt < j and removed[r, cnt] - cnt <= loc:
                cnt += 1
        done[r] = d0 + b
        if hit >= 0:
            rank[r] = hit
        elif d0 + b >= cap[r]:
            capped[r] = True
        else:
            keep[nk] = r
            nk += 1
    return keep[:nk]


@njit()
def squared_distances(
    x: np.ndarray, y: np.ndarray, target: np.ndarray, owner: np.ndarray, out: np.ndarray
) -> np.ndarray:
    """``out[i] = (x[i] − target[o, 0])² + (y[i] − target[o, 1])²``, o = owner[i] (0 if empty).

    One pass with the float operations of the numpy expression (two subtractions, two products,
    one sum, each rounded; no fused multiply-add), so the same values.
    """
    one = owner.size == 0
    for i in range(x.size):
        o = 0 if one else owner[i]
        dx = x[i] - target[o, 0]
        dy = y[i] - target[o, 1]
        out[i] = dx * dx + dy * dy
    return out


@njit()
def positions(removed: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Position in the scan order of each run's answer: rank t among the remaining candidates."""
    pos = np.empty(rank.size, dtype=np.int64)
    j = removed.shape[1]
    for r in range(rank.size):
        t = rank[r]
        cnt = 0
        while cnt < j and removed[r, cnt] - cnt <= t:
            cnt += 1
        pos[r] = t + cnt
    return pos


@njit()
def record(
    pos: np.ndarray,
    removed: np.ndarray,
    start: np.ndarray,
    table: np.ndarray,
    identity: bool,
    rows: np.ndarray,
    j: int,
    out: np.ndarray,
    taken: np.ndarray,
) -> np.ndarray:
    """Store call j's answers and return ``removed`` with each run's new position inserted.

    ``out[:, j]`` gets the row ids, ``taken[:, j]`` their index among the candidates.
    """
    U = pos.size
    new = np.empty((U, j + 1), dtype=np.int64)
    for r in range(U):
        p = pos[r]
        idx = start[r] + (p if identity else table[start[r] + p])
        out[r, j] = rows[idx]
        taken[r, j] = idx
        i = 0
        while i < j and removed[r, i] < p:
            new[r, i] = removed[r, i]
            i += 1
        new[r, i] = p
        while i < j:
            new[r, i + 1] = removed[r, i]
            i += 1
    return new


def pnn_scan(
    d2: NDArray[np.float64],
    start: NDArray[np.int64],
    m: NDArray[np.int64],
    removed: NDArray[np.int64],
    threshold: NDArray[np.int64],
    cap: NDArray[np.int64],
    pool: Any,
    *,
    table: NDArray[np.int64] | None,
    ensure: Callable[[NDArray[np.int64], NDArray[np.int64]], None] | None,
    filled: NDArray[np.int64] | None = None,
    inv_g: float,
    block: int,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Run the U scans of one PNN call; return (rank among the remaining, capped) per run.

    ``d2`` holds the squared distances (metres²) of all candidates, run r's at ``start[r]`` +
    its local index; ``m[r]`` candidates remain, ``removed[r]`` (sorted) lists the positions in
    the scan order already taken. Rank t of run r is the remaining position visited t-th in a
    pass; ``table[start[r] + position]`` gives its local index (``table=None``: the identity).
    ``threshold`` holds T + W (lattice units), ``cap`` the visits allowed (0: capped at once).
    ``ensure(runs, need)`` draws the scan order of each run up to ``need`` positions (called
    after the block's draws, as the numpy scan did, whenever some run's order, drawn to
    ``filled[r]`` positions, falls short: it draws nothing otherwise). Rank −1: capped.
    """
    U = int(start.size)
    rank = np.full(U, -1, dtype=np.int64)
    capped = np.zeros(U, dtype=bool)
    done = np.zeros(U, dtype=np.int64)  # visits made so far
    active = np.flatnonzero(cap > 0).astype(np.int64)
    capped[cap <= 0] = True
    identity = table is None
    tab = _NO_TABLE if table is None else table
    rem = np.ascontiguousarray(removed, dtype=np.int64)
    B = max(1, int(block))
    drawn = np.zeros(U, dtype=np.int64) if filled is None else filled  # None: always ask
    while active.size:
        b = max(1, min(B, STEP_DRAWS // active.size))
        v = pool.take(active.size * b)
        if ensure is not None and not identity:
            need, short = block_need(active, done, b, m, rem, drawn)
            if short:
                ensure(active, need)
        active = block_step(active, v, b, done, cap, m, start, tab, identity, rem, d2, inv_g,
                            threshold, rank, capped)  # fmt: skip
        B = min(BLOCK_GROWTH * B, BLOCK_MAX)
    return rank, capped
