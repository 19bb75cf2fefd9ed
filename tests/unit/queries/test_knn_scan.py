"""The compiled PNN scan (queries.knn_scan) against the numpy block scan it replaces.

Same inputs, same seeded randomness: the compiled scan must give the same ranks and capped flags,
draw the scan order to the same positions and leave the bit source in the same state, so every
later draw of the query (and so every released value) is unchanged.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.mechanisms.svt import LaplacePool, scan
from gpframe.queries.knn import ScanOrder
from gpframe.queries.knn_scan import pnn_scan
from gpframe.testing import seeded_rng


def _numpy_scan(d2, start, m, removed, thr, cap, pool, so, inv_g, block):
    """The former k-PNN scan: svt.scan over a callable that snaps the visited distances."""
    U, j = removed.shape
    big = int((m + j).max()) + 1
    adj = (removed - np.arange(j)[None, :] + np.arange(U)[:, None] * big).reshape(-1)

    def local(runs, t):
        if j == 0:
            return t
        cnt = np.searchsorted(adj, t + (runs * big)[:, None], side="right") - (runs * j)[:, None]
        return t + cnt

    def u(runs, t):
        idx = start[runs, None] + so(runs, local(runs, t))
        return np.rint(np.sqrt(d2[idx]) * inv_g).astype(np.int64)

    return scan(u, start, m, thr, cap, pool, block=block)


def _case(seed: int, order: str):
    rs = np.random.default_rng(seed)
    U = int(rs.choice([1, 2, 5, 17]))
    length = rs.integers(1, 400, U) if seed % 3 else rs.integers(1, 6, U)
    j = int(rs.integers(0, min(4, int(length.min())) + 0))
    start = np.zeros(U, dtype=np.int64)
    np.cumsum(length[:-1], out=start[1:])
    d2 = rs.uniform(0, 1e6, int(length.sum())) ** 2 / 1e6
    removed = np.sort(
        np.stack([rs.choice(int(n), j, replace=False) for n in length]).reshape(U, j), axis=1
    ).astype(np.int64)
    m = (length - j).astype(np.int64)
    inv_g = 1024.0
    # thresholds from far below to above the values: hits early, late, or never (capped)
    thr = (rs.uniform(-2e6, 1.2e6, U) * inv_g).astype(np.int64)
    cycles = int(rs.choice([1, 2, 3, 1000]))
    cap = m * cycles
    if seed % 7 == 0:
        cap[0] = 0
    block = int(rs.choice([1, 3, 64, 512]))
    return length, start, d2, removed, m, thr, cap, inv_g, block


@pytest.mark.parametrize("order", ["random", "input"])
@pytest.mark.parametrize("seed", range(40))
def test_compiled_scan_matches_the_numpy_block_scan(seed, order):
    length, start, d2, removed, m, thr, cap, inv_g, block = _case(seed, order)
    lam = Fraction(1, 2**20)  # V of scale 2**20 lattice steps = 1 km: hits at varied positions
    out = []
    for compiled in (False, True):
        bits = seeded_rng(1000 + seed)
        so = ScanOrder(length, order, bits)
        x = d2.copy()
        if removed.shape[1]:  # taken candidates: drawn in the order, and +inf as k_pnn leaves them
            runs = np.arange(length.size)
            x[start[:, None] + so(runs, removed)] = np.inf
        pool = LaplacePool(lam, bits, chunk=256, grow=True)
        if compiled:
            table = None if so.identity else so.table
            filled = None if so.identity else so.filled  # as k_pnn passes it
            got = pnn_scan(x, start, m, removed, thr, cap, pool, table=table, ensure=so.ensure,
                           filled=filled, inv_g=inv_g, block=block)  # fmt: skip
        else:
            got = _numpy_scan(x, start, m, removed, thr, cap, pool, so, inv_g, block)
        state = (pool.calls, pool.drawn, bits.arr(4, np.uint64).tolist())
        fill = None
        if not so.identity:  # the drawn prefix of each run's order
            fill = [so.table[s : s + f].tolist() for s, f in zip(start, so.filled, strict=True)]
        out.append((got[0].tolist(), got[1].tolist(), state, fill))
    assert out[1] == out[0]


class _ZeroPool:
    """Draws of zero: the halt is then the first visited value <= T, ties included."""

    def take(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64)


def test_halts_at_the_first_value_at_or_below_the_threshold_skipping_taken_positions():
    d2 = np.array([9.0, 4.0, np.inf, 1.0, 16.0]) * 1024.0**-2  # 3, 2, taken, 1, 4 lattice steps
    start, removed = np.array([0]), np.array([[2]])
    for thr, rank in ((2, 1), (1, 2), (3, 0), (0, -1)):
        got = pnn_scan(d2, start, np.array([4]), removed, np.array([thr]), np.array([8]),
                       _ZeroPool(), table=None, ensure=None, inv_g=1024.0, block=3)  # fmt: skip
        assert got[0].tolist() == [rank] and got[1].tolist() == [rank == -1]


@pytest.mark.parametrize("users", [1, 6])
def test_squared_distances_equal_the_numpy_expression_bit_for_bit(users):
    from gpframe.queries.knn_scan import squared_distances

    rs = np.random.default_rng(users)
    for scale in (1e-3, 1.0, 1e4, 1e9):
        x, y = rs.normal(0, scale, 50_000), rs.normal(0, scale, 50_000)
        owner = np.sort(rs.integers(0, users, x.size))
        target = rs.normal(0, scale, (users, 2))
        want = (x - target[owner, 0]) ** 2 + (y - target[owner, 1]) ** 2
        who = owner if users > 1 else np.empty(0, dtype=np.int64)
        got = squared_distances(x, y, target, who, np.empty_like(x))
        assert got.view(np.int64).tolist() == want.view(np.int64).tolist()
