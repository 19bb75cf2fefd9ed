"""The client's winners under a time rule: the same with the compiled pass as with the sort."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import gpframe.dask.one_point as op
from gpframe.dask import time_winners

COLS = SimpleNamespace(user="u")


def _candidates(seed: int) -> tuple[pd.DataFrame, np.ndarray, int]:
    r = np.random.default_rng(seed)
    n_out = int(r.integers(1, 6))
    frames = []
    for i in range(int(r.integers(1, 5))):  # one frame of candidates per input partition
        users = np.unique(r.integers(0, 300, int(r.integers(0, 400)))) * [1, -7, 2**40][seed % 3]
        k = len(users)
        key = [r.integers(0, 4, k), r.normal(size=k).round(1),
               (r.integers(0, 4, k) * 10**9).astype("datetime64[ns]")][seed // 3 % 3]  # fmt: skip
        frames.append(pd.DataFrame({
            "u": users, op._KEY: key, op._PART: np.full(k, i, np.int64),
            op._POS: np.sort(r.choice(10**5, k, replace=False)), op._N: np.ones(k, np.int64),
            op._X: r.normal(size=k), op._Y: r.normal(size=k),
        }))  # fmt: skip
    whole = pd.concat(frames, ignore_index=True)
    if seed % 4 == 0:  # rows in any order
        whole = whole.sample(frac=1, random_state=seed).reset_index(drop=True)
    j_of = (pd.util.hash_array(whole["u"].to_numpy()) % n_out).astype(np.int64)
    return whole, j_of, n_out


def _fast(whole, j_of, n, rule):
    names = (op._KEY, op._PART, op._POS, op._X, op._Y)
    return time_winners.winners_by_time(whole, j_of, n, "u", rule, names,
                                        lambda: op.winners(None, COLS, rule))  # fmt: skip


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("last", [True, False])
def test_winners_by_time_are_the_sorts(seed, last, monkeypatch):
    whole, j_of, n = _candidates(seed)
    fast = _fast(whole, j_of, n, ("time", last))
    assert fast is not None
    monkeypatch.setattr(time_winners, "winners_by_time", lambda *a: None)
    slow = op.winners_of_rows(whole, j_of, n, COLS, ("time", last))
    assert len(fast) == len(slow) == n
    for (cf, xf), (cs, xs) in zip(fast, slow, strict=True):
        assert [(type(u), u) for u in cf.users] == [(type(u), u) for u in cs.users]
        np.testing.assert_array_equal(cf.counts, cs.counts)
        assert cf.several == cs.several == ()
        np.testing.assert_array_equal(xf, xs)


def test_winners_by_time_leave_other_rules_and_ids_to_the_sort():
    whole, j_of, n = _candidates(1)
    assert _fast(whole, j_of, n, ("rows", "last")) is None
    named = whole.assign(u=whole["u"].astype(str))
    assert _fast(named, j_of, n, ("time", True)) is None
