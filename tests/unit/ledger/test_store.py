"""First-seen users: stored in batches, every id read back exactly as it was given.

Each test runs on SQLite and on PostgreSQL (``ledger_where`` / ``ledger_path`` in
tests/conftest.py); the checks of how ids are laid out in the tables are per store.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpframe as gp
from gpframe.ledger import Session

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
    table = "users" if ledger_where is None else "gpframe_users"
    # one batch row: an int64 array as one blob, other ids each tagged with its type
    kinds = store.con.execute(f"SELECT kind, n FROM {table}").fetchall()
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


def _as_version_1(path: str) -> None:
    """Rewrite a ledger file's users table in the version-1 layout (one row per user)."""
    import sqlite3

    from gpframe.ledger.keys import decode_users, to_sql

    con = sqlite3.connect(path, isolation_level=None)
    rows = con.execute("SELECT start, n, kind, ids FROM users ORDER BY start").fetchall()
    uids = [u for _, n, kind, ids in rows for u in decode_users(kind, n, ids)]
    con.execute("DROP TABLE users")
    con.execute("CREATE TABLE users(idx INTEGER PRIMARY KEY, uid ANY NOT NULL UNIQUE) STRICT")
    con.executemany("INSERT INTO users VALUES (?, ?)", enumerate(map(to_sql, uids)))
    con.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    con.close()


def test_a_version_1_file_is_read_as_it_is_and_migrated_on_write(tmp_path):
    path = str(tmp_path / "v1.sqlite")
    every = [0, 1, 2, "a", 7, 2**64 - 1, "1"]
    with Session(path, budget=gp.GP(eps=1.0)) as s:
        for i, b in enumerate([np.arange(3, dtype=np.int64), ["a", 7], [2**64 - 1, "1"]]):
            with s.reserve(b, 0.1 * (i + 1), query=f"q{i}") as r:
                r.charge(0.1 * (i + 1))
    _as_version_1(path)
    spent = [0.1, 0.1, 0.1, 0.2, 0.2, 0.3, 0.3]
    with Session(path, readonly=True) as ro:  # read as it is: the file keeps version 1
        assert ro.ledger.store.users_from(0) == every
        assert ro.spent(every).round(12).tolist() == spent
    with Session(path) as s:  # opened for writing: one batch, version 2, the same users
        store = s.ledger.store
        assert store.meta()["version"] == "2"
        assert store.con.execute("SELECT start, n, kind FROM users").fetchall() == [
            (0, 7, "tagged")
        ]
        s.ledger.verify()
        assert s.spent(every).round(12).tolist() == spent
        with s.reserve([2, "b"], 0.1, query="after") as r:
            r.charge(0.1)
        assert store.users_from(6) == ["1", "b"]
    with Session(path) as s:
        s.ledger.verify()
        assert s.spent([2, "b"]).round(12).tolist() == [0.2, 0.1]
