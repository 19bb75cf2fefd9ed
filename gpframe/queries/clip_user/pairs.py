"""The (user, cell) pairs of per-sample records, in linear time, compiled.

See ``docs/operations/grid_stats.md`` (public occupancy, sparse occupancy, which samples are kept).
Public and free: integer bookkeeping on the records' user and cell indexes, no sample value, no
randomness, no charge.

:func:`group_pairs` turns each record's dense user and cell index into the occupancy's COO rows
(sorted by (cell, user)) and each record's COO row; :func:`keep_first` keeps the first r rows of
each pair; :func:`rows_match` checks records against an occupancy through their COO rows. All are
O(n) passes over flat int64 arrays (counting sorts on the dense indexes): the hashing or sorting of
the n pair codes they replace, and the binary search of each record's COO row among ~10⁶ pairs,
cost several seconds at 10⁷ records. Every array, scratch included, is allocated by numpy and
passed in, so memory accounting (``tracemalloc``) sees them.
"""

from __future__ import annotations

import numpy as np

from gpframe.errors import GpframeInternalError
from gpframe.mechanisms.compiled import njit

__all__ = ["group_pairs", "keep_first", "rows_match"]


@njit(nogil=True)
def _pair_ids(
    ui: np.ndarray,
    ci: np.ndarray,
    by_user: np.ndarray,
    pid: np.ndarray,
    start: np.ndarray,
    mark: np.ndarray,
    slot: np.ndarray,
) -> int:
    # rows grouped by user (a stable counting sort into by_user), then each user's distinct cells
    # numbered in the order the user's rows first meet them: pid[i] is row i's pair, numbered
    # user by user (ascending), so pairs are in ascending user order. Returns the number of pairs.
    # Scratch: start (n_u + 1, zeros), mark (n_c, -1: the last user seen in each cell), slot (n_c:
    # that user's pair in the cell).
    n, n_u = ui.size, start.size - 1
    for i in range(n):
        start[ui[i] + 1] += 1
    for u in range(n_u):
        start[u + 1] += start[u]
    for i in range(n):  # start[u] runs through user u's places, ending at the next user's start
        u = ui[i]
        by_user[start[u]] = i
        start[u] += 1
    p = 0
    lo = 0
    for u in range(n_u):
        for k in range(lo, start[u]):
            i = by_user[k]
            c = ci[i]
            if mark[c] != u:
                mark[c] = u
                slot[c] = p
                p += 1
            pid[i] = slot[c]
        lo = start[u]
    return p


@njit(nogil=True)
def _coo(
    ui: np.ndarray,
    ci: np.ndarray,
    pid: np.ndarray,
    coo_u: np.ndarray,
    coo_j: np.ndarray,
    coo_m: np.ndarray,
    pc: np.ndarray,
    start: np.ndarray,
) -> None:
    # each pair placed at its COO row by a stable counting sort on its cell (pairs are numbered
    # in ascending user order, so users ascend within a cell); then each record's pid becomes its
    # COO row and the row's user, cell and count are filled. Scratch: pc (one per pair), start
    # (n_c + 1, zeros); coo_m starts at zero.
    n_c = start.size - 1
    for i in range(pid.size):
        pc[pid[i]] = ci[i]
    for q in range(pc.size):
        start[pc[q] + 1] += 1
    for c in range(n_c):
        start[c + 1] += start[c]
    for q in range(pc.size):  # pc[q] becomes the pair's COO row
        c = pc[q]
        pc[q] = start[c]
        start[c] += 1
    for i in range(pid.size):
        k = pc[pid[i]]
        pid[i] = k
        coo_u[k] = ui[i]
        coo_j[k] = ci[i]
        coo_m[k] += 1


def group_pairs(
    ui: np.ndarray, ci: np.ndarray, n_u: int, n_c: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return the COO rows of the distinct (user, cell) pairs, and each record's COO row.

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
    n_u, n_c = int(n_u), int(n_c)
    _in_range(ui, n_u, "user")
    _in_range(ci, n_c, "cell")
    row = np.empty(ui.size, np.int64)
    by_user = np.empty(ui.size, np.int64)
    p = int(
        _pair_ids(
            ui, ci, by_user, row, np.zeros(n_u + 1, np.int64), np.full(n_c, -1, np.int64),
            np.zeros(n_c, np.int64),
        )
    )  # fmt: skip
    del by_user
    u, j = np.empty(p, np.int64), np.empty(p, np.int64)
    m = np.zeros(p, np.int64)
    _coo(ui, ci, row, u, j, m, np.empty(p, np.int64), np.zeros(n_c + 1, np.int64))
    return u, j, m, row


def _in_range(idx: np.ndarray, size: int, what: str) -> None:
    # the compiled loops index without bounds checks: an index out of range is refused here
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise GpframeInternalError(f"a {what} index is outside [0, {size}).")


@njit(nogil=True)
def _keep_first(
    coo: np.ndarray, r: np.ndarray, perm: np.ndarray, keep: np.ndarray, seen: np.ndarray
) -> None:
    # visit rows in the order perm (or row order when perm is empty): a row is kept while its
    # pair has kept fewer than r rows (seen: zeros, one per pair)
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
    _keep_first(coo, r, p, keep, np.zeros(r.size, np.int64))
    return keep


@njit(nogil=True)
def _rows_match(
    coo: np.ndarray,
    ru: np.ndarray,
    rj: np.ndarray,
    u: np.ndarray,
    j: np.ndarray,
    m: np.ndarray,
    seen: np.ndarray,
) -> bool:
    # seen: zeros, one per pair
    for i in range(coo.size):
        c = coo[i]
        if u[c] != ru[i] or j[c] != rj[i]:
            return False
        seen[c] += 1
    for c in range(m.size):
        if seen[c] != m[c]:
            return False
    return True


def rows_match(
    coo: np.ndarray, rows_u: np.ndarray, rows_j: np.ndarray,
    u: np.ndarray, j: np.ndarray, m: np.ndarray,
) -> bool:  # fmt: skip
    """Return whether the records, placed at COO rows ``coo``, have exactly the occupancy.

    Each record's (user, cell) must be its COO row's, and each COO row must get exactly ``m``
    records: then the records' per-(user, cell) counts are the occupancy's (its pairs are
    distinct), whatever ``coo`` claims. An index outside the COO rows is False. The occupancy
    is given as its COO arrays ``u``, ``j``, ``m``.

    >>> rows_match(np.array([1, 0, 1]), np.array([0, 1, 0]), np.array([0, 0, 0]),
    ...            np.array([1, 0]), np.array([0, 0]), np.array([1, 2]))
    True
    >>> rows_match(np.array([1, 0, 1]), np.array([0, 1, 0]), np.array([0, 0, 0]),
    ...            np.array([1, 0]), np.array([0, 0]), np.array([2, 1]))
    False
    """
    arrs = [np.ascontiguousarray(a, dtype=np.int64) for a in (coo, rows_u, rows_j, u, j, m)]
    coo = arrs[0]
    if coo.size != arrs[1].size or coo.size != arrs[2].size or not u.size == j.size == m.size:
        return False
    if coo.size and (int(coo.min()) < 0 or int(coo.max()) >= m.size):
        return False
    return bool(_rows_match(*arrs, np.zeros(m.size, np.int64)))
