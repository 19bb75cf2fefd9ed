"""First-seen users: the set-based insert stores every id exactly as the row-at-a-time one.

Each test runs on SQLite and on PostgreSQL (``ledger_where`` / ``ledger_path`` in
tests/conftest.py); the checks of how ids are laid out in the tables are per store.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpframe as gp
from gpframe.ledger import Session
from gpframe.ledger.store import _json_ids

ODD = ["boat 1", "", "naïve ⛵", 'quote " and \\ backslash', "line\nbreak\ttab", "\u2028", "7"]


@pytest.mark.parametrize(
    "ids",
    [
        np.array([-(2**63), -1, 0, 7, 2**63 - 1], dtype=np.int64),
        ODD,
        ["nul\x00inside", "plain"],  # NUL: row at a time
        [2**64 - 1, 3],  # above int64: row at a time (stored as a blob)
    ],
    ids=["int64", "str", "str-nul", "uint64"],
)
def test_new_users_are_stored_as_given(ids, ledger_where):
    s = Session(ledger_where, budget=gp.GP(eps=1.0))
    with s.reserve(list(ids) if isinstance(ids, list) else ids, 0.1, query="t") as r:
        r.charge(0.1)
    store = s.ledger.store
    keys = [i.item() if isinstance(i, np.generic) else i for i in ids]
    assert store.users_from(0) == keys
    if ledger_where is None:
        types = [t for (t,) in store.con.execute("SELECT typeof(uid) FROM users ORDER BY idx")]
        assert types == [
            "blob" if isinstance(k, int) and k > 2**63 - 1 else
            ("integer" if isinstance(k, int) else "text") for k in keys
        ]  # fmt: skip
    else:  # one batch row: an int64 array as one blob, other ids each tagged with its type
        kinds = store.con.execute("SELECT kind, n FROM gpframe_users").fetchall()
        assert kinds == [("i64" if isinstance(ids, np.ndarray) else "tagged", len(keys))]
    assert s.remaining(keys).round(12).tolist() == [0.9] * len(keys)
    s.close()


def test_a_file_ledger_reopens_with_the_same_users(ledger_path):
    path = ledger_path
    with Session(path, budget=gp.GP(eps=1.0)) as s:
        with s.reserve(np.arange(1000, dtype=np.int64) * 3, 0.1, query="a") as r:
            r.charge(0.1)
        with s.reserve(ODD, 0.2, query="b") as r:
            r.charge(0.2)
    with Session(path, budget=gp.GP(eps=1.0)) as s:  # the opening check hashes every id
        s.ledger.verify()
        assert s.remaining(ODD).round(12).tolist() == [0.8] * len(ODD)
        assert s.remaining([0, 2997]).round(12).tolist() == [0.9, 0.9]


def test_which_ids_take_the_set_based_insert():
    assert _json_ids(np.array([1, 2], dtype=np.int64)) == "[1, 2]"
    assert _json_ids(np.array(["a", "b"], dtype=object)) == '["a", "b"]'
    assert _json_ids(["a", "b\x00"]) is None
    assert _json_ids(np.array([1, "a"], dtype=object)) is None
    assert _json_ids([2**64 - 1]) is None


def test_users_added_in_several_batches_read_back_from_any_index(ledger_path):
    with Session(ledger_path, budget=gp.GP(eps=1.0)) as s:
        batches = [np.arange(5, dtype=np.int64), ["a", 4, "b"], np.array([9, 10]), [2**64 - 1]]
        for i, b in enumerate(batches):
            with s.reserve(b, 0.1, query=f"q{i}") as r:
                r.charge(0.1)
        store = s.ledger.store
        every = [0, 1, 2, 3, 4, "a", "b", 9, 10, 2**64 - 1]  # 4 was seen in the first batch
        with store.read():
            for start in range(len(every) + 1):
                assert store.users_from(start) == every[start:]
