"""Pinned outputs of k-PNN and PCH for seeded sources: a speed-up must not change released values.

The hashes were taken with the numpy block scan (before the compiled scan of
``gpframe.queries.knn_scan``); the row ids, capped flags and released anchors of every case must
stay bit-identical. A deliberate change of the released values (a new sampler, a new block
schedule) updates them in the same commit and says so.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gpframe.queries.hull import private_hulls
from gpframe.queries.knn import knn_indices
from gpframe.testing import seeded_rng


def _data(n: int, users: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.default_rng(seed)
    spread = rs.normal(0, 400, (n, 2))
    hub = rs.uniform(-3000, 3000, (users, 1, 2))[rs.integers(0, users, n), 0]
    return spread + hub, np.arange(n) % users


KNN = {  # name: (n, users, k, options), expected hash
    "knn-k1-default": ((5000, 1, 1, {}), "aa7950b84e2c9442"),
    "knn-k1-reference": ((5000, 1, 1, {"compat": "reference"}), "195c9217e8c4575c"),
    "knn-k16-default": ((3000, 1, 16, {}), "d6711641895116e6"),
    "knn-k16-reference": ((3000, 1, 16, {"compat": "reference"}), "1a5c7179444a9340"),
    "knn-k3-users": ((2000, 9, 3, {"gamma0": -1.0}), "d3af6bb234c0b009"),
    # five of its twelve calls reach the cap: the uniform fallback is pinned too
    "knn-k4-capped": ((400, 3, 4, {"gamma0": -6.0, "max_cycles": 1}), "2f5dd62ecf9afeb4"),
    "knn-k2-gp": ((800, 2, 2, {"kind": "gp", "amount": 0.02}), "3394d287df2b9d80"),
}
HULL = {  # name: (k, users), expected hash
    "hull-k16": ((16, 1), "bf49c78fe9242179"),
    "hull-rule": ((None, 1), "7669b8b09110ed20"),
    "hull-users": ((5, 4), "539d238af22b41a3"),
}


@pytest.mark.parametrize("name", list(KNN))
def test_knn_rows_are_pinned(name):
    (n, users, k, opts), expected = KNN[name]
    i = list(KNN).index(name)
    xy, codes = _data(n, users, i)
    kw = {"kind": "cgp", "amount": 5e-4, **opts}
    out = knn_indices(xy, codes, (120.0, -80.0), k, rng=seeded_rng(100 + i), **kw)
    h = hashlib.sha256()
    for rows, capped in zip(out.rows, out.capped, strict=True):
        h.update(np.asarray(rows, np.int64).tobytes())
        h.update(np.asarray(capped, bool).tobytes())
    assert h.hexdigest()[:16] == expected
    if name == "knn-k4-capped":
        assert sum(int(c.sum()) for c in out.capped) == 5


@pytest.mark.parametrize("name", list(HULL))
def test_hull_anchors_are_pinned(name):
    (k, users), expected = HULL[name]
    i = list(HULL).index(name)
    xy, codes = _data(3000, users, 50 + i)
    out = private_hulls(xy, codes, kind="cgp", amount=1e-3, k=k, rng=seeded_rng(200 + i))
    h = hashlib.sha256()
    for a in out.anchors:
        h.update(np.asarray(a, np.float64).tobytes())
    assert h.hexdigest()[:16] == expected
