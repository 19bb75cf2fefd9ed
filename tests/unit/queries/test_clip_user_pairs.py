"""The linear-time (user, cell) pairing of records equals the sort-and-search it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from gpframe.errors import GpframeInternalError
from gpframe.queries.clip_user import occupancy_from_records, occupancy_rows
from gpframe.queries.clip_user.pairs import group_pairs, keep_first


def _reference_occupancy(users: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, ...]:
    # the former construction: sorted keys, then np.unique of the pair codes
    ukeys, ui = np.unique(users, return_inverse=True)
    ckeys, ci = np.unique(cells, return_inverse=True)
    n_u = max(ukeys.size, 1)
    code, m = np.unique(ci * n_u + ui, return_counts=True)
    return ukeys, ckeys, code % n_u, code // n_u, m


def _records(seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    n = int(g.integers(0, 400))
    n_u, n_c = int(g.integers(1, 30)), int(g.integers(1, 12))
    users = g.integers(-5, n_u, n)
    if seed % 2:
        users = np.array([f"user{u}" for u in users.tolist()], dtype=str)
    cells = g.integers(0, n_c, n).astype(np.uint64) * np.uint64(2**40) + np.uint64(7)
    return users, cells


@pytest.mark.parametrize("seed", range(40))
def test_occupancy_rows_equals_sort_and_search(seed):
    users, cells = _records(seed)
    occ, rows = occupancy_rows(users, cells)
    for got, want in zip(
        (occ.users, occ.cells, occ.u, occ.j, occ.m), _reference_occupancy(users, cells), strict=True
    ):
        assert np.array_equal(got, want)
    assert occ.u.dtype == occ.j.dtype == occ.m.dtype == np.int64
    assert np.array_equal(rows.u, np.searchsorted(occ.users, users))
    assert np.array_equal(rows.j, np.searchsorted(occ.cells, cells))
    n_u = max(occ.n_users, 1)
    want_coo = np.searchsorted(occ.j * n_u + occ.u, rows.j * n_u + rows.u)
    assert np.array_equal(rows.coo, want_coo)
    same = occupancy_from_records(users, cells)
    assert all(
        np.array_equal(getattr(same, a), getattr(occ, a)) for a in ("users", "cells", "u", "j", "m")
    )


def _reference_keep(coo: np.ndarray, r: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    # the former retained_rows: rank of each row in its group by (order, position)
    pos = np.arange(coo.size)
    keys = (pos, coo) if order is None else (pos, order, coo)
    srt = np.lexsort(keys)
    c_sorted = coo[srt]
    first = np.searchsorted(c_sorted, c_sorted, side="left")
    rank = np.empty(coo.size, np.int64)
    rank[srt] = np.arange(coo.size) - first
    return rank < r[coo]


@pytest.mark.parametrize("seed", range(30))
def test_keep_first_equals_the_lexsort_rank(seed):
    g = np.random.default_rng(100 + seed)
    n, p = int(g.integers(0, 300)), int(g.integers(1, 20))
    coo = g.integers(0, p, n)
    r = g.integers(0, 6, p)
    assert np.array_equal(keep_first(coo, r), _reference_keep(coo, r, None))
    order = g.integers(0, 5, n)  # ties: broken by row position
    perm = np.lexsort((np.arange(n), order))
    assert np.array_equal(keep_first(coo, r, perm), _reference_keep(coo, r, order))


def test_indexes_out_of_range_are_refused():
    with pytest.raises(GpframeInternalError):
        keep_first(np.array([0, 2]), np.array([1, 1]))
    with pytest.raises(GpframeInternalError):
        group_pairs(np.array([0, 3]), np.array([0, 0]), 2, 1)
    with pytest.raises(GpframeInternalError):
        keep_first(np.array([0, 1]), np.array([1, 1]), np.array([0]))


@pytest.mark.parametrize("seed", range(20))
def test_check_data_matches_with_coo_refuses_what_the_sort_refuses(seed):
    from gpframe.errors import InvalidInputError
    from gpframe.queries.grid_stats import check_data_matches

    users, cells = _records(seed)
    occ, rows = occupancy_rows(users, cells)
    check_data_matches(occ, rows.u, rows.j, rows.coo)  # the data's own occupancy
    if users.size < 2:
        return
    g = np.random.default_rng(seed)
    # one record moved to another user's cell, or one record dropped: both checks refuse
    moved_j = rows.j.copy()
    i = int(g.integers(0, users.size))
    moved_j[i] = (moved_j[i] + 1) % max(occ.n_cells, 1)
    for ru, rj, coo in (
        (rows.u, moved_j, rows.coo),
        (rows.u[1:], rows.j[1:], rows.coo[1:]),
        (rows.u, rows.j, (rows.coo + 1) % max(occ.u.size, 1)),
    ):
        if np.array_equal(rj, rows.j) and ru.size == rows.u.size and np.array_equal(coo, rows.coo):
            continue  # a single cell: nothing moved
        refused = []
        for c in (None, coo):
            try:
                check_data_matches(occ, ru, rj, c)
                refused.append(False)
            except InvalidInputError:
                refused.append(True)
        assert refused[1]  # the COO check never accepts a wrong claim
        assert refused[0] == (not _same_counts(occ, ru, rj))


def _same_counts(occ, ru, rj) -> bool:
    n_u = max(occ.n_users, 1)
    code, m = np.unique(rj * n_u + ru, return_counts=True)
    want = occ.j * n_u + occ.u
    return code.shape == want.shape and np.array_equal(code, want) and np.array_equal(m, occ.m)
