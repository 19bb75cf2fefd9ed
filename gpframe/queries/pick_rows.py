"""Each user's last / first row by a time column, in one pass with a table per user.

:func:`gpframe.queries.range_count.select_component` keeps, of each user's rows, the one with the
greatest (time, row) (``Last``) or the least (``First``). Sorting every row by (time, row) and
dropping the users' duplicates gives that, but allocates several arrays of the frame's length
(the positions, the sort order, the sorted users, a hash table sized by the rows), and a Dask
worker pays a page fault for every page of each of them on every call: its nanny sets
``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes glibc's mmap threshold at 128 KiB, so every
larger array is mapped fresh and unmapped when freed (4 850 faults a 250 000-row partition,
none in the client's process). Here one compiled pass keeps, per user, the best row so far in an
open-addressing table sized by the users (grown as they come), or, for small non-negative ids
(below 4n + 4096), in a table indexed by the id with each user's best time beside it
(:func:`_pick_dense`), so the only arrays of the frame's length are the inputs: the same rows,
several times faster on a worker.

Integer user ids and numeric or datetime times only (:func:`pick`); the caller keeps the sort for
anything else.
"""

from __future__ import annotations

import numpy as np

from gpframe.mechanisms.compiled import njit

__all__ = ["pick"]


@njit(nogil=True)
def _slot(u, bits):  # type: ignore[no-untyped-def]
    """Return the table slot of id ``u``: the top ``bits`` bits of its Fibonacci hash."""
    return np.int64((np.uint64(u) * np.uint64(11400714819323198485)) >> np.uint64(64 - bits))


@njit(nogil=True)
def _pick(users, t, mask, last):  # type: ignore[no-untyped-def]
    """Return each user's row of greatest / least ``(t, row)`` where ``mask`` (ascending).

    ``users`` int64, ``t`` int64 or float64 without NaN, ``mask`` bool of the same length or
    empty (every row).
    """
    n = users.shape[0]
    use_mask = mask.shape[0] == n
    bits = 10
    cap = 1 << bits
    keys = np.empty(cap, np.int64)
    best = np.full(cap, -1, np.int64)  # -1: an empty slot
    count = 0
    for i in range(n):
        if use_mask and not mask[i]:
            continue
        u = users[i]
        h = _slot(u, bits)
        while best[h] >= 0 and keys[h] != u:
            h = (h + 1) & (cap - 1)
        b = best[h]
        if b < 0:
            keys[h] = u
            best[h] = i
            count += 1
            if 2 * count > cap:  # keep the table at most half full: double it
                cap2 = 2 * cap
                keys2 = np.empty(cap2, np.int64)
                best2 = np.full(cap2, -1, np.int64)
                for s in range(cap):
                    if best[s] >= 0:
                        g = _slot(keys[s], bits + 1)
                        while best2[g] >= 0:
                            g = (g + 1) & (cap2 - 1)
                        keys2[g] = keys[s]
                        best2[g] = best[s]
                keys, best, cap, bits = keys2, best2, cap2, bits + 1
        elif last:
            if t[i] >= t[b]:  # rows come in order: a tie goes to the later row
                best[h] = i
        elif t[i] < t[b]:  # a tie keeps the earlier row
            best[h] = i
    out = np.empty(count, np.int64)
    k = 0
    for s in range(cap):
        if best[s] >= 0:
            out[k] = best[s]
            k += 1
    out.sort()
    return out


@njit(nogil=True)
def _pick_dense(users, t, mask, last, best, best_t):  # type: ignore[no-untyped-def]
    """:func:`_pick` for ids in ``0 .. len(best) - 1``: a table indexed by the id, no hashing.

    ``best`` is filled with -1; ``best_t`` (same dtype as ``t``) holds each user's best time,
    so a row is compared without reading ``t`` at the best row's (random) position.
    """
    n = users.shape[0]
    use_mask = mask.shape[0] == n
    count = 0
    for i in range(n):
        if use_mask and not mask[i]:
            continue
        u = users[i]
        if best[u] < 0:
            best[u] = i
            best_t[u] = t[i]
            count += 1
        elif last:
            if t[i] >= best_t[u]:  # rows come in order: a tie goes to the later row
                best[u] = i
                best_t[u] = t[i]
        elif t[i] < best_t[u]:  # a tie keeps the earlier row
            best[u] = i
            best_t[u] = t[i]
    out = np.empty(count, np.int64)
    k = 0
    for s in range(best.shape[0]):
        if best[s] >= 0:
            out[k] = best[s]
            k += 1
    out.sort()
    return out


def pick(
    users: np.ndarray, t: np.ndarray, mask: np.ndarray | None, last: bool
) -> np.ndarray | None:
    """Return each user's row of greatest (``last``) or least ``(t, row)``, positions ascending.

    Returns None when the kernel does not apply (user ids that are not integers, times that are
    not integers, floats or datetimes): the caller sorts instead. ``t`` holds no missing value.
    """
    if users.dtype.kind not in "iu" or t.dtype.kind not in "iufmM":
        return None
    if users.dtype.itemsize == 8:  # uint64 as int64: the same ids, compared for equality only
        u = users.view(np.int64)
    else:
        u = users.astype(np.int64)
    if t.dtype.kind in "mM":  # datetimes / timedeltas (NaT refused before): their int64 ticks
        tv = t.view(np.int64)
    elif t.dtype.kind == "f":
        tv = t.astype(np.float64, copy=False)
    elif t.dtype.kind == "u" and t.dtype.itemsize == 8:
        if len(t) and int(t.max()) >= 2**63:  # not an int64: the caller sorts
            return None
        tv = t.view(np.int64)
    else:
        tv = t.astype(np.int64, copy=False)
    m = np.zeros(0, np.bool_) if mask is None else np.ascontiguousarray(mask, dtype=np.bool_)
    u, tv = np.ascontiguousarray(u), np.ascontiguousarray(tv)
    if u.size and 0 <= int(u.min()) and int(u.max()) < 4 * u.size + 4096:
        # small non-negative ids (vehicle numbers, codes): a table indexed by the id
        size = int(u.max()) + 1
        best = np.full(size, -1, np.int64)
        return _pick_dense(u, tv, m, bool(last), best, np.empty(size, tv.dtype))
    return _pick(u, tv, m, bool(last))
