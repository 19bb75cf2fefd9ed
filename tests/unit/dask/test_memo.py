"""The workers' remembered first passes (gpframe.dask.memo) and the client's winners in one sort."""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dask")

from gpframe.dask import memo
from gpframe.dask.one_point import (
    _KEY,
    _N,
    _PART,
    _POS,
    _X,
    _Y,
    output_partition,
    winners,
    winners_all,
)
from gpframe.dask.partitions import Columns, Component
from gpframe.errors import InvalidInputError


@pytest.fixture(autouse=True)
def _fresh():
    memo.clear()
    yield
    memo.clear()


def test_a_pass_is_remembered_for_the_same_object_and_parameters_only():
    part, other = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [1, 2]})
    calls = []

    def run(tag):
        calls.append(tag)
        return np.array([len(calls)])

    first = memo.first_pass(part, ("op", 1), lambda: run("a"))
    assert memo.first_pass(part, ("op", 1), lambda: run("b")) is first
    # equal rows in another object: passed over again
    assert memo.first_pass(other, ("op", 1), lambda: run("c")) is not first
    assert memo.first_pass(part, ("op", 2), lambda: run("d")) is not first  # other parameters
    assert calls == ["a", "c", "d"]


def test_an_entry_keeps_its_token_and_a_new_entry_gets_a_new_one(monkeypatch):
    # the client's held candidates are confirmed by this token: it must name one entry only
    part, other = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [1, 2]})
    out, token = memo.first_pass_token(part, ("op", 1), lambda: np.zeros(2))
    assert token is not None
    assert memo.first_pass_token(part, ("op", 1), lambda: np.ones(2)) == (out, token)
    assert memo.first_pass_token(other, ("op", 1), lambda: np.zeros(2))[1] not in (None, token)
    assert memo.first_pass_token(part, ("op", 2), lambda: np.zeros(2))[1] not in (None, token)
    memo.clear()  # forgotten: the same object and parameters, a new entry and a new token
    again = memo.first_pass_token(part, ("op", 1), lambda: np.zeros(2))[1]
    assert again not in (None, token)
    # nothing kept, no token: a callable component, or no memory at all
    assert memo.first_pass_token(part, (Component(lambda f: f, None),), lambda: 0)[1] is None
    monkeypatch.setattr(memo, "LIMIT", 0)
    assert memo.first_pass_token(other, ("op", 3), lambda: 0) == (0, None)


def test_an_entry_dies_with_its_partition():
    part = pd.DataFrame({"a": [1, 2]})
    memo.first_pass(part, ("op",), lambda: np.zeros(3))
    assert len(memo._entries) == 1
    del part
    gc.collect()
    assert len(memo._entries) == 0 and memo._size[0] == 0


def test_a_callable_component_and_a_refusal_are_never_remembered():
    part = pd.DataFrame({"a": [1, 2]})
    calls = []
    sel = Component(lambda f: f["a"] > 0, None)
    for _ in range(2):
        memo.first_pass(part, ("op", sel), lambda: calls.append(1))
    assert len(calls) == 2

    def refuse():
        calls.append(2)
        raise InvalidInputError("bad rows")

    for _ in range(2):
        with pytest.raises(InvalidInputError):
            memo.first_pass(part, ("op",), refuse)
    assert calls.count(2) == 2


def test_the_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(memo, "LIMIT", 4 * 8_000 + 1_000)
    parts = [pd.DataFrame({"a": [k]}) for k in range(6)]
    for p in parts:
        memo.first_pass(p, ("op",), lambda: np.zeros(1_000))  # 8 kB each, at most a quarter
    assert 0 < len(memo._entries) < 6 and memo._size[0] <= memo.LIMIT
    monkeypatch.setattr(memo, "LIMIT", 0)
    calls = []
    memo.first_pass(parts[-1], ("new",), lambda: calls.append(1))
    memo.first_pass(parts[-1], ("new",), lambda: calls.append(1))
    assert len(calls) == 2


def _pieces(r, n_out, n_in, strs, times):
    pieces = []
    for i in range(n_in):
        m = int(r.integers(0, 30))
        u = r.integers(0, 15, m)
        f = pd.DataFrame({"u": [f"s{x}" for x in u] if strs else u})
        f[_KEY] = r.integers(0, 4, m) if times else pd.to_datetime(r.integers(0, 4, m), unit="D")
        f[_PART], f[_POS], f[_N] = i, r.permutation(1000)[:m], r.integers(1, 3, m)
        f[_X], f[_Y] = r.uniform(size=m), r.uniform(size=m)
        to = output_partition(f, "u", f["u"].dtype, n_out)
        pieces.append([f[to == j] for j in range(n_out)])
    return [[p[j] for p in pieces] for j in range(n_out)]


@pytest.mark.parametrize("rule", [("time", True), ("time", False), ("rows", "last"),
                                  ("rows", "first"), ("rows", None)])  # fmt: skip
def test_winners_in_one_sort_are_each_partitions_winners(rule):
    r = np.random.default_rng(3)  # candidate rows only, never noise
    cols = Columns(user="u")
    for trial in range(60):
        buckets = _pieces(r, int(r.integers(1, 5)), int(r.integers(1, 4)), trial % 3 == 0,
                          trial % 2 == 0)  # fmt: skip
        new = winners_all(buckets, cols, rule)
        old = [winners(pd.concat(b, ignore_index=True), cols, rule) for b in buckets]
        for (ca, xa), (cb, xb) in zip(new, old, strict=True):
            assert ca.users.dtype == cb.users.dtype
            assert ca.users.tolist() == cb.users.tolist()
            assert [type(u) for u in ca.users.tolist()] == [type(u) for u in cb.users.tolist()]
            assert ca.counts.tolist() == cb.counts.tolist()
            assert sorted(ca.several) == sorted(cb.several)
            np.testing.assert_array_equal(xa, xb)
