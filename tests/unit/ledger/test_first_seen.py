"""First-seen users in bulk: large blobs written in place, charges of consecutive indices.

The fast paths of a large first call (:func:`gpframe.ledger.store._insert`,
``Ledger._add_range``, the ascending-ids check of ``_user_keys``) keep the same bytes in the
store, the same spent per user and the same refusals as the general paths.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import gpframe as gp
import gpframe.ledger.store as store_mod
from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.ledger import Session
from gpframe.ledger.keys import encode_users
from gpframe.ledger.session import MAX, Ledger


def _blobs(con: sqlite3.Connection) -> dict[str, list[tuple[bytes, ...]]]:
    return {
        "users": con.execute("SELECT kind, n, ids FROM users ORDER BY start").fetchall(),
        "charges": con.execute("SELECT idx, amount, alloc FROM charges ORDER BY rowid").fetchall(),
        "chunks": con.execute("SELECT chunk, spent FROM chunks ORDER BY chunk").fetchall(),
    }


def _fill(path: str) -> tuple[Session, list[str]]:
    """A file ledger with int and str users, a partial charge and one still-open reservation."""
    s = Session(path, budget=gp.GP(eps=1.0))
    sql: list[str] = []
    s.ledger.store.con.set_trace_callback(sql.append)
    ints = np.arange(3000, dtype=np.int64) * 7 - 50
    with s.reserve(ints, 0.25, query="ints") as r:
        r.charge(np.where(ints % 2 == 0, 0.25, 0.125))
    strs = [f"boat {i} ⛵" for i in range(200)]
    with s.reserve(strs, 0.5, query="strs") as r:
        r.charge(0.5)
    return s, sql


def test_large_blobs_are_written_in_place_with_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_BIG_BLOB", 1024)  # small users' blobs take the big path
    s, sql = _fill(str(tmp_path / "in_place.sqlite"))
    open_r = s.reserve(np.arange(10**6, 10**6 + 400, dtype=np.int64), 0.125, query="open")
    if not store_mod._BLOB_IO:
        pytest.skip("sqlite3 without Connection.blobopen (Python < 3.11): blobs are bound")
    assert any("zeroblob(" in q and "INSERT INTO users" in q for q in sql)
    assert any("zeroblob(" in q and "INSERT INTO charges" in q for q in sql)
    assert any("zeroblob(" in q and "INSERT INTO reservations" in q for q in sql)
    con = s.ledger.store.con
    idx, alloc = con.execute("SELECT idx, alloc FROM reservations").fetchone()
    assert np.frombuffer(idx, "<i8").tolist() == list(range(3200, 3600))
    assert set(np.frombuffer(alloc, "<i8").tolist()) == {int(open_r.allocation_units[0])}
    kind, n, ids = _blobs(con)["users"][0]
    assert (kind, n, ids) == ("i64", 3000, encode_users(np.arange(3000) * 7 - 50)[1])
    open_r.charge(0.0625)
    got = _blobs(con)

    # the same requests with every blob bound as a parameter (the path before blob I/O)
    monkeypatch.setattr(store_mod, "_BLOB_IO", False)
    s2, sql2 = _fill(str(tmp_path / "bound.sqlite"))
    with s2.reserve(np.arange(10**6, 10**6 + 400, dtype=np.int64), 0.125, query="open") as r2:
        r2.charge(0.0625)
    assert not any("zeroblob(" in q for q in sql2)
    assert got == _blobs(s2.ledger.store.con)
    for sess in (s, s2):
        assert sess.ledger.verify()["charges"] == 3
        sess.close()
    monkeypatch.setattr(store_mod, "_BLOB_IO", True)
    again = Session(str(tmp_path / "in_place.sqlite"), readonly=True)
    assert again.spent_exact([-50, -43, "boat 3 ⛵", 10**6]).tolist() == [
        gp.GP(eps=0.25).amount, gp.GP(eps=0.125).amount, gp.GP(eps=0.5).amount,
        gp.GP(eps=0.0625).amount,
    ]  # fmt: skip
    again.close()


def test_a_charge_of_consecutive_users_adds_to_existing_chunks(ledger_where, monkeypatch):
    calls: list[int] = []
    add_range = Ledger._add_range

    def spy(self, notion, lo, add):
        calls.append(lo)
        return add_range(self, notion, lo, add)

    monkeypatch.setattr(Ledger, "_add_range", spy)
    s = Session(ledger_where, budget=gp.GP(eps=100.0))
    # scattered first: users 5000, 4998, ... (indices 0..2499, not one range per chunk)
    first = np.arange(5000, 0, -2, dtype=np.int64)
    with s.reserve(first, 1.0, query="a") as r:
        r.charge(np.where(first % 3 == 0, 1.0, 0.5))
    # then 10,000 users 0..9,999: known ones keep their indices, the rest are first-seen
    every = np.arange(10_000, dtype=np.int64)
    with s.reserve(every, 2.0, query="b") as r:
        r.charge(np.where(every % 5 == 0, 2.0, 0.25))
    with s.reserve(np.arange(20_000, 30_000, dtype=np.int64), 3.0, query="c") as r:
        r.charge(3.0)  # all first-seen: one range of indices, new chunks only
    assert calls, "the consecutive-index path was not taken"
    want = np.where(every % 5 == 0, 2.0, 0.25)
    was = np.isin(every, first)
    want = want + np.where(was, np.where(every % 3 == 0, 1.0, 0.5), 0.0)
    assert s.spent(every).to_numpy().tolist() == want.tolist()
    assert s.spent(np.arange(20_000, 30_000)).eq(3.0).all()
    assert s.ledger.verify()["users"] == 10_000 + 10_000
    s.close()


def test_a_consecutive_charge_that_would_overflow_is_refused_whole(ledger_where):
    s = Session(ledger_where, budget=gp.GP(eps=1.0))
    with s.reserve(np.arange(5000, dtype=np.int64), 0.5, query="a") as r:
        r.charge(0.5)
    led = s.ledger
    before = led.snapshot()
    add = np.zeros(5000, dtype=np.int64)
    add[4500] = MAX  # in the second chunk, whose users have spent already
    with pytest.raises(GpframeInternalError, match="overflow"):
        with led._lock, led._write():
            led._update("metric", np.arange(5000, dtype=np.int64), add, None)
    assert led.snapshot() == before
    s.close()


@pytest.mark.parametrize("users", [[1, 2, 2], [3, 1, 3], np.array([5, 7, 7, 9])])
def test_repeated_ids_are_still_refused(users, ledger_where):
    s = Session(ledger_where, budget=gp.GP(eps=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="repeats user ids"):
        s.reserve(users, 0.1, query="t")
    assert s.ledger.snapshot() == before
    with s.reserve(np.array([-3, 0, 2**40]), 0.1, query="ascending") as r:
        assert r.admitted.all()
        r.charge(0.1)
    s.close()


def test_a_new_file_gets_larger_pages_and_an_old_file_keeps_its_own(tmp_path, monkeypatch):
    new = Session(str(tmp_path / "new.sqlite"), budget=gp.GP(eps=1.0))
    assert new.ledger.store.con.execute("PRAGMA page_size").fetchone()[0] == 16384
    new.close()
    monkeypatch.setattr(store_mod, "PAGE_SIZE", 4096)  # a file written before (SQLite's default)
    old_path = str(tmp_path / "old.sqlite")
    s = Session(old_path, budget=gp.GP(eps=1.0))
    with s.reserve(np.arange(3000, dtype=np.int64), 0.25, query="before") as r:
        r.charge(0.25)
    s.close()
    monkeypatch.setattr(store_mod, "PAGE_SIZE", 16384)
    s = Session(old_path)
    assert s.ledger.store.con.execute("PRAGMA page_size").fetchone()[0] == 4096
    with s.reserve(np.arange(2000, 6000, dtype=np.int64), 0.25, query="after") as r:
        r.charge(0.25)
    assert s.spent([0, 2500, 5999]).tolist() == [0.25, 0.5, 0.25]
    assert s.ledger.verify()["charges"] == 2
    s.close()
