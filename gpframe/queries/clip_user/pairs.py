"""The (user, cell) pairs of per-sample records, in linear time, compiled.

See ``docs/operations/grid_stats.md`` (public occupancy, sparse occupancy, which samples are kept).
Public and free: integer bookkeeping on the records' user and cell indexes, no sample value, no
randomness, no charge.

:func:`group_pairs` turns each record's dense user and cell index into the occupancy's COO rows
(sorted by (cell, user)) and each record's COO row; :func:`keep_first` keeps the first r rows of
each pair. Both are O(n) passes over flat int64 arrays (counting sorts on the dense indexes): the
hashing or sorting of the n pair codes they replace, and the binary search of each record's COO row
among ~10⁶ pairs, cost several seconds at 10⁷ records. The n-sized arrays are allocated by numpy
and passed in, so memory accounting (``tracemalloc``) sees them.
"""

from __future__ import annotations

import numpy as np

from gpframe.errors import GpframeInternalError
from gpframe.mechanisms.compiled import njit

__all__ = ["group_pairs", "keep_first"]


@njit(nogil=True)
def _pair_ids(
    ui: np.ndarray, ci: np.ndarray, n_u: int, n_c: int, by_user: np.ndarray, pid: np.ndarray
) -> int:
    # rows grouped by user (a stable counting sort into by_user), then each user's distinct cells
    # numbered in the order the user's rows first meet them: pid[i] is row i's pair, numbered
    # user by user (ascending), so pairs are in ascending user order. Returns the number of pairs.
    n = ui.size
    start = np.zeros(n_u + 1, np.int64)
    for i in range(n):
        start[ui[i] + 1] += 1
    for u in range(n_u):
        start[u + 1] += start[u]
    fill = start[:n_u].copy()
    for i in range(n):
        u = ui[i]
        by_user[fill[u]] = i
        fill[u] += 1
    mark = np.full(n_c, -1, np.int64)  # the last user seen in each cell
    slot = np.zeros(n_c, np.int64)  # that user's pair in the cell
    p = 0
    for u in range(n_u):
        for k in range(start[u], start[u + 1]):
            i = by_user[k]
            c = ci[i]
            if mark[c] != u:
                mark[c] = u
                slot[c] = p
                p += 1
            pid[i] = slot[c]
    return p


@njit(nogil=True)
def _coo(
    ui: np.ndarray,
    ci: np.ndarray,
    pid: np.ndarray,
    n_c: int,
    coo_u: np.ndarray,
    coo_j: np.ndarray,
    coo_m: np.ndarray,
) -> None:
    # each pair's user, cell and count, placed at its COO row by a stable counting sort on the
    # cell (pairs are numbered in ascending user order, so users ascend within a cell); then pid
    # becomes each record's COO row
    p = coo_u.size
    pu = np.empty(p, np.int64)
    pc = np.empty(p, np.int64)
    pm = np.zeros(p, np.int64)
    for i in range(pid.size):
        q = pid[i]
        pu[q] = ui[i]
        pc[q] = ci[i]
        pm[q] += 1
    start = np.zeros(n_c + 1, np.int64)
    for q in range(p):
        start[pc[q] + 1] += 1
    for c in range(n_c):
        start[c + 1] += start[c]
    pos = np.empty(p, np.int64)
    for q in range(p):
        c = pc[q]
        k = start[c]
        start[c] = k + 1
        pos[q] = k
        coo_u[k] = pu[q]
        coo_j[k] = c
        coo_m[k] = pm[q]
    for i in range(pid.size):
        pid[i] = pos[pid[i]]


def group_pairs(
    ui: np.ndarray, ci: np.ndarray, n_u: int, n_c: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """COO rows of the distinct (user, cell) pairs, and each record's COO row.

    Parameters
    ----------
    ui, ci : ndarray of int64
        Each record's user index in [0, n_u) and cell index in [0, n_c).

    Returns
    -------
    (u, j, m, row) : int64 arrays: the pairs' user index, cell index and record count, sorted by
    (cell, user) (what ``np.unique(ci * n_u + ui, return_counts=True)`` gives), and each record's
    position among them.

    >>> u, j, m, row = group_pairs(np.array([1, 0, 1, 1]), np.array([0, 1, 0, 1]), 2, 2)
    >>> u.tolist(), j.tolist(), m.tolist(), row.tolist()
    ([1, 0, 1], [0, 1, 1], [2, 1, 1], [0, 1, 0, 2])
    """
    ui = np.ascontiguousarray(ui, dtype=np.int64)
    ci = np.ascontiguousarray(ci, dtype=np.int64)
    _in_range(ui, n_u, "user")
    _in_range(ci, n_c, "cell")
    by_user = np.empty(ui.size, np.int64)
    row = np.empty(ui.size, np.int64)
    p = int(_pair_ids(ui, ci, int(n_u), int(n_c), by_user, row))
    del by_user
    u, j, m = (np.empty(p, np.int64) for _ in range(3))
    _coo(ui, ci, row, int(n_c), u, j, m)
    return u, j, m, row


def _in_range(idx: np.ndarray, size: int, what: str) -> None:
    # the compiled loops index without bounds checks: an index out of range is refused here
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise GpframeInternalError(f"a {what} index is outside [0, {size}).")


@njit(nogil=True)
def _keep_first(coo: np.ndarray, r: np.ndarray, perm: np.ndarray, keep: np.ndarray) -> None:
    # visit rows in the order perm (or row order when perm is empty): a row is kept while its
    # pair has kept fewer than r rows
    seen = np.zeros(r.size, np.int64)
    n = coo.size
    ordered = perm.size == n and n > 0
    for k in range(n):
        i = perm[k] if ordered else k
        c = coo[i]
        keep[i] = seen[c] < r[c]
        seen[c] += 1


def keep_first(coo: np.ndarray, r: np.ndarray, perm: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask keeping the first ``r[c]`` records of each COO row c.

    "First" in row order, or in the order ``perm`` (a permutation of the records) visits them.
    ``coo`` is each record's COO row (:func:`group_pairs`), ``r`` each COO row's retained count.

    >>> keep_first(np.array([0, 1, 0, 0]), np.array([2, 0])).tolist()
    [True, False, True, False]
    >>> keep_first(np.array([0, 1, 0, 0]), np.array([2, 0]), np.array([3, 2, 1, 0])).tolist()
    [False, False, True, True]
    """
    coo = np.ascontiguousarray(coo, dtype=np.int64)
    r = np.ascontiguousarray(r, dtype=np.int64)
    p = np.zeros(0, np.int64) if perm is None else np.ascontiguousarray(perm, dtype=np.int64)
    _in_range(coo, r.size, "COO row")
    if p.size not in (0, coo.size):
        raise GpframeInternalError("keep_first: perm must be a permutation of the records.")
    _in_range(p, coo.size, "record")
    keep = np.empty(coo.size, np.bool_)
    _keep_first(coo, r, p, keep)
    return keep
