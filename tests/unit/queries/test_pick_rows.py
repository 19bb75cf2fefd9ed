"""The compiled pick of each user's last / first row gives the rows of the sort it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.queries.pick_rows import pick
from gpframe.queries.range_count import select_component


def _sorted(users: np.ndarray, t: np.ndarray, mask: np.ndarray | None, last: bool) -> np.ndarray:
    """The former rule: sort by (time, row), keep each user's last / first."""
    pos = np.flatnonzero(mask) if mask is not None else np.arange(len(users))
    srt = pos[np.lexsort((pos, t[pos]))]
    keep = ~pd.Series(users[srt]).duplicated(keep="last" if last else "first")
    return np.sort(srt[keep.to_numpy()])


@pytest.mark.parametrize("seed", range(40))
def test_pick_gives_the_rows_of_the_sort(seed):
    r = np.random.default_rng(seed)
    n = int(r.integers(0, 4000))
    # few and many users, ids that share their low bits, negative and 64-bit ids, narrow dtypes
    users = r.integers(0, int(r.integers(1, 6000)), n) * [1, 1024, -3, 2**40][seed % 4]
    users = users.astype([np.int64, np.int32, np.int64, np.uint64][seed % 4])
    t = [
        r.integers(0, 5, n),  # many ties: the row breaks them
        r.normal(size=n).round(1),
        (r.integers(0, 4, n) * 10**9).astype("datetime64[ns]"),
        np.where(r.random(n) < 0.5, -0.0, 0.0),  # equal times of two signs
    ][seed // 4 % 4]
    mask = r.random(n) < 0.7 if seed % 3 == 0 else None
    for last in (True, False):
        got = pick(users, t, mask, last)
        assert got is not None and got.dtype == np.int64
        np.testing.assert_array_equal(got, _sorted(users, t, mask, last))


def test_pick_declines_what_it_cannot_order_as_the_sort():
    t = np.arange(3)
    assert pick(np.array(["a", "b", "a"], dtype=object), t, None, True) is None
    assert pick(np.arange(3), np.array(["x", "y", "z"], dtype=object), None, True) is None
    assert pick(np.arange(3), np.array([0, 2**63, 1], dtype=np.uint64), None, True) is None


@pytest.mark.parametrize("users", [[1, 1, 2, 2, 3], ["a", "a", "b", "b", "c"]])
def test_select_component_is_the_same_with_or_without_the_kernel(users):
    df = pd.DataFrame({"u": users, "t": pd.to_datetime(["2020-01-01 07:10", "2020-01-01 08:05",
                                                        "2020-01-01 07:30", "2020-01-01 07:30",
                                                        "2020-01-01 06:00"])})  # fmt: skip
    u = df["u"].to_numpy()
    assert select_component(df, u, "last").tolist() == [1, 3, 4]
    assert select_component(df, u, "first").tolist() == [0, 2, 4]
    assert select_component(df, u, gp.Last("t", before="2020-01-01 08:00")).tolist() == [0, 3, 4]
    assert select_component(df, u, gp.First("t", after="2020-01-01 07:20")).tolist() == [1, 2]
