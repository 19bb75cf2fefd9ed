"""The compiled Clip-User stage loop decides exactly as the per-user numpy loop it replaced.

The oracle (``clip_user_oracle.reference_plan``) is the planner as it was; every field of the plan
(retained counts, per-cell errors as floats, trace, suppressed pairs, candidates, status) must be
equal, on random occupancies drawn to make ties, halts, floors, emptied cells and rollbacks common.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpframe.queries.clip_user import clip_user_plan
from gpframe.queries.clip_user.planner import _unique_inverse

from .clip_user_oracle import reference_plan


def _same(a, b) -> list[str]:
    """Names of the plan fields that differ (floats compared bit for bit, NaN equal to NaN)."""
    bad = []
    for name in a.__dataclass_fields__:
        if name == "occupancy":
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            ok = x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        else:
            ok = repr(x) == repr(y) and x == y if name != "params" else _params_equal(x, y)
        if not ok:
            bad.append(name)
    return bad


def _params_equal(x: dict, y: dict) -> bool:
    return repr(x) == repr(y)


def _random_occupancy(gen: np.random.Generator) -> pd.DataFrame:
    n_u = int(gen.integers(1, 40))
    n_c = int(gen.integers(1, 12))
    dense = gen.random((n_u, n_c)) < gen.uniform(0.2, 0.9)
    # small counts make equal candidate errors (exact ties) frequent; a few heavy hitters
    counts = gen.integers(1, int(gen.choice([2, 4, 12])) + 1, size=(n_u, n_c))
    counts[gen.random((n_u, n_c)) < 0.05] *= 9
    u, c = np.nonzero(dense)
    if u.size == 0:
        u, c = np.array([0]), np.array([0])
    users = np.array([f"u{k:02d}" for k in range(n_u)])[u] if gen.random() < 0.3 else u * 7
    return pd.DataFrame({"user": users, "cell": c * 3 + 1, "count": counts[u, c]})


def _options(gen: np.random.Generator, occ: pd.DataFrame) -> dict:
    kw = {
        "eps_cell": float(gen.choice([0.05, 0.2, 0.5, 1.0, 2.0, 10.0])),
        "upper": float(gen.choice([1.0, 30.0, 65.0])),
        "clip": str(gen.choice(["clip-user", "pseudo-user", "pseudo-user", "none"])),
        "protect_worst_grid": bool(gen.random() < 0.6),
        "rollback_incomplete_stage": bool(gen.random() < 0.3),
        "user_order": "spec" if gen.random() < 0.85 else "key",
        "trace_candidates": bool(gen.random() < 0.5),
        "kappa": float(gen.choice([math.sqrt(2.0), 1.0, 3.0])),
    }
    if gen.random() < 0.2:
        kw["error_cap"] = float(gen.choice([0.0, 500.0, 5000.0, math.inf]))
    if gen.random() < 0.2:
        keys = occ["user"].unique()
        kw["excluded"] = list(gen.choice(keys, size=int(gen.integers(1, keys.size + 1))))
    return kw


@pytest.mark.parametrize("seed", range(6))
def test_compiled_stage_loop_equals_the_numpy_loop(seed):
    gen = np.random.default_rng([19, seed])  # test data only
    statuses = set()
    for _ in range(100):
        occ = _random_occupancy(gen)
        kw = _options(gen, occ)
        new = clip_user_plan(occ, 0, **kw)
        old = reference_plan(occ, 0, **kw)
        assert _same(new, old) == [], (occ.to_dict("list"), kw)
        statuses.add(new.status)
    assert statuses >= {"halted", "floor"}  # both ends of the loop were exercised


def test_compiled_stage_loop_equals_the_numpy_loop_on_many_users():
    # 300 users around home cells of a ring of 30: long stages in which most choices see cells
    # that earlier users of the same stage already clipped
    gen = np.random.default_rng(1919)  # test data only
    n = 6000
    u = gen.integers(0, 300, n)
    home = gen.integers(0, 30, 300)
    c = (home[u] + np.rint(gen.normal(0, 3, n)).astype(np.int64)) % 30
    occ = pd.DataFrame({"user": u, "cell": c, "count": 1})
    occ = occ.groupby(["user", "cell"], as_index=False)["count"].sum()
    for eps in (0.3, 1.0):
        for protect in (True, False):
            kw = {"eps_cell": eps, "upper": 65, "protect_worst_grid": protect}
            new = clip_user_plan(occ, 0, **kw)
            old = reference_plan(occ, 0, **kw)
            assert len(new.suppressed) > 100
            assert _same(new, old) == []


@pytest.mark.parametrize(
    "values",
    [
        np.array([5, -3, 5, 0, -3, 2**40], dtype=np.int64),
        np.array([2**63 + 5, 7, 2**63 + 5, 0], dtype=np.uint64),
        np.array([3, 1, 3], dtype=np.int32),
        np.array(["b", "a", "ab", "b", "B", ""]),
        np.array([1.5, -2.0, 1.5]),
        np.array(["x", "a", "x"], dtype=object),
    ],
)
def test_unique_inverse_is_numpys(values):
    keys, inv = _unique_inverse(values)
    ref_keys, ref_inv = np.unique(values, return_inverse=True)
    assert keys.dtype == ref_keys.dtype and np.array_equal(keys, ref_keys)
    assert inv.dtype == np.int64 and np.array_equal(inv, ref_inv.reshape(-1))
