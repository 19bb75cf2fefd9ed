"""The ledger notices tampering, rollbacks and a lost -wal (SECURITY.md, "Ledger integrity").

Each scenario edits the file the way someone with write access to it could (plain sqlite3,
outside gpframe) and checks what a Session opening it does: a consistent-looking edit is
refused with :class:`~gpframe.errors.LedgerCorruptError`, or, for the cases only an anchor or a
key can catch, the test says so.

Every scenario runs on an SQLite file and on a PostgreSQL database (plain SQL through psycopg on
its ``gpframe_*`` tables). A server ledger has an anchor only when ``anchor=`` names a file, so
here its Sessions get one (``_anchor``), as a host that keeps one would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError, LedgerCorruptError, LedgerError
from gpframe.ledger import Session as _Session
from gpframe.ledger.keys import decode_users as _decode_users
from gpframe.ledger.keys import encode_users as _encode_users
from gpframe.ledger.pg_layout import is_postgres_url

KEY = bytes(range(32))
#: the anchor file of each PostgreSQL ledger of this module's tests (URL -> file)
_ANCHORS: dict[str, str] = {}


@pytest.fixture
def path(ledger_path: str, tmp_path: Path) -> str:
    if is_postgres_url(ledger_path):
        _ANCHORS[ledger_path] = str(tmp_path / "pg-ledger.anchor")
    return ledger_path


def _anchor(path: str) -> str:
    """The anchor file a Session of ``path`` keeps by default (here)."""
    return _ANCHORS[path] if is_postgres_url(path) else f"{path}.anchor"


def Session(path, *args, **kw):  # stands in for gpframe's Session
    """``Session``, with this module's anchor file for a PostgreSQL ledger."""
    if is_postgres_url(str(path)) and "anchor" not in kw:
        kw["anchor"] = _ANCHORS[str(path)]
    return _Session(path, *args, **kw)


class _Raw:
    """Plain SQL on the ledger's tables, in SQLite's dialect (``?``, ``rowid``, bare names);
    translated for PostgreSQL (``%s``, ``pos``, ``gpframe_`` names)."""

    def __init__(self, path: str) -> None:
        self.pg = is_postgres_url(path)
        if self.pg:
            import psycopg

            self.con = psycopg.connect(path, autocommit=True)
        else:
            self.con = sqlite3.connect(path, isolation_level=None)

    def execute(self, sql: str, params: tuple = ()):
        if self.pg:
            sql = re.sub(
                r"\b(FROM|UPDATE|INTO|TABLE)\s+(meta|users|chunks|queries|reservations|charges|audit)\b",
                r"\1 gpframe_\2", sql,
            )  # fmt: skip
            sql = sql.replace("rowid", "pos").replace("?", "%s")
            return self.con.execute(sql, params or None)  # no parameters: a literal % is fine
        return self.con.execute(sql, params)

    def one(self, sql: str, params: tuple = ()):
        row = self.execute(sql, params).fetchone()
        return None if row is None else tuple(bytes(v) if isinstance(v, memoryview) else v
                                              for v in row)  # fmt: skip

    def close(self) -> None:
        self.con.close()


def _charge(s: Session, users: list, amount: float, **kw) -> None:
    with s.reserve(users, amount, **kw) as r:
        r.charge(amount)


def _ledger(path: str, **kw) -> None:
    """A closed ledger: ann and bob charged twice, carl once, then ann again (4 charges)."""
    with Session(path, budget=gp.GP(eps=1), **kw) as s:
        _charge(s, ["ann", "bob"], 0.125)
        _charge(s, ["ann", "bob"], 0.125)
        _charge(s, ["carl"], 0.25)
        _charge(s, ["ann"], 0.25)


def _sql(path: str, *statements: tuple) -> None:
    con = _Raw(path)
    for st in statements:
        con.execute(*st)
    con.close()


def _drop_anchor(path: str) -> None:
    Path(_anchor(path)).unlink(missing_ok=True)


def _rebuild_chain(path: str, edit) -> None:
    """Rewrite every audit row with ``edit(content dict)`` and recompute the unkeyed chain."""
    con = _Raw(path)
    prev = "0" * 64
    for seq, content in con.execute("SELECT seq, content FROM audit ORDER BY seq").fetchall():
        c = json.loads(content)
        edit(c)
        text = json.dumps(c, sort_keys=True)
        prev = hashlib.sha256(bytes.fromhex(prev) + text.encode()).hexdigest()
        con.execute("UPDATE audit SET content = ?, hash = ? WHERE seq = ?", (text, prev, seq))
    con.close()


def _rename_user(path: str, old: str, new: str) -> None:
    """Give user ``old`` the id ``new`` in the users table (its spent stays with the index)."""
    con = _Raw(path)
    for start, n, kind, ids in con.execute("SELECT start, n, kind, ids FROM users").fetchall():
        uids = _decode_users(kind, n, bytes(ids))
        if old in uids:
            uids[uids.index(old)] = new
            con.execute("UPDATE users SET ids = ? WHERE start = ?", (_encode_users(uids)[1], start))
    con.close()


def _delete_user(path: str, uid: str) -> None:
    """Delete the last-added user ``uid`` from the users table (a batch of its own here)."""
    con = _Raw(path)
    start, n, kind, ids = con.one("SELECT start, n, kind, ids FROM users ORDER BY start DESC")
    assert _decode_users(kind, n, ids) == [uid]
    con.execute("DELETE FROM users WHERE start = ?", (start,))
    con.close()


def _raise_default(path: str) -> None:
    """The attack on the stored default budget: ten times eps = 1."""
    con = _Raw(path)
    d = int(con.one("SELECT value FROM meta WHERE key = 'metric.default'")[0])
    con.close()
    _sql(path, ("UPDATE meta SET value = ? WHERE key = 'metric.default'", (str(10 * d),)))
    return d


# ---- the state check on open (no key, no anchor needed) ----------------------------------------
def test_raised_default_budget_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)  # the check on open finds it alone
    _raise_default(path)
    with pytest.raises(LedgerCorruptError, match=r"stored metric budget .* audit log records"):
        Session(path)


def test_tampered_ledger_is_refused_before_an_open_writes_to_it(path):
    """Adding a notion on open writes a budget row: the check must come first."""
    _ledger(path)
    _drop_anchor(path)
    _raise_default(path)
    with pytest.raises(LedgerCorruptError, match="stored metric budget"):
        Session(path, central=gp.DP(epsilon=1))
    with pytest.raises(LedgerCorruptError, match="stored metric budget"):
        Session(path)


def test_raised_budget_override_is_refused_on_open(path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        s.set_budget(["ann"], gp.GP(eps=0.5))
        _charge(s, ["ann", "bob"], 0.25)
    _drop_anchor(path)
    con = _Raw(path)
    b = np.frombuffer(con.one("SELECT budget FROM chunks")[0], "<i8").copy()
    con.close()
    assert b[0] > 0 and b[1] == -1  # ann (index 0) has an override, bob none
    b[0] *= 10
    _sql(path, ("UPDATE chunks SET budget = ?", (b.tobytes(),)))
    with pytest.raises(LedgerCorruptError, match="budget overrides differ"):
        Session(path)


def test_override_changed_under_an_open_session_is_not_recorded_as_its_own(path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        s.set_budget(["ann"], gp.GP(eps=0.5))
        con = _Raw(path)
        b = np.frombuffer(con.one("SELECT budget FROM chunks")[0], "<i8").copy()
        b[0] *= 10
        con.execute("UPDATE chunks SET budget = ?", (b.tobytes(),))
        con.close()
        before = s.ledger.snapshot()
        with pytest.raises(LedgerCorruptError, match="budget overrides differ"):
            s.set_budget(["bob"], gp.GP(eps=0.5))
        assert s.ledger.snapshot() == before


def test_renamed_user_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    # ann has spent 0.25; under a new name she would start afresh
    _rename_user(path, "ann", "ann2")
    with pytest.raises(LedgerCorruptError, match="user id was changed"):
        Session(path)


def test_deleted_user_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    _delete_user(path, "carl")
    with pytest.raises(LedgerCorruptError, match="holds 2 users but the audit log records 3"):
        Session(path)


def test_deleted_last_charge_and_its_audit_rows_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    con = _Raw(path)
    last = con.one("SELECT max(seq) FROM audit WHERE op = 'reserve'")[0]
    con.close()
    # ann's last charge is gone from the charges and the log; her spent is left in the chunks
    _sql(
        path,
        ("DELETE FROM charges WHERE rowid = (SELECT max(rowid) FROM charges)",),
        ("DELETE FROM audit WHERE seq >= ?", (last,)),
    )
    with pytest.raises(LedgerCorruptError, match=r"spent adds up to .* charges add up to"):
        Session(path)


def _truncate_consistently(path: str) -> None:
    """Delete the last charge, its audit rows and its spent: a consistent older ledger."""
    con = _Raw(path)
    last = con.one("SELECT max(seq) FROM audit WHERE op = 'reserve'")[0]
    idx, amt = con.one(
        "SELECT idx, amount FROM charges WHERE rowid = (SELECT max(rowid) FROM charges)"
    )
    spent = np.frombuffer(con.one("SELECT spent FROM chunks")[0], "<i8").copy()
    con.close()
    spent[np.frombuffer(idx, "<i8")] -= np.frombuffer(amt, "<i8")
    _sql(
        path,
        ("DELETE FROM charges WHERE rowid = (SELECT max(rowid) FROM charges)",),
        ("DELETE FROM audit WHERE seq >= ?", (last,)),
        ("UPDATE chunks SET spent = ?", (spent.tobytes(),)),
    )


def test_deleted_last_charge_with_its_spent_is_caught_by_the_anchor(path):
    _ledger(path)
    _truncate_consistently(path)
    with pytest.raises(LedgerCorruptError, match=r"older than its anchor.*move"):
        Session(path)


def test_deleted_last_charge_with_its_spent_is_not_caught_without_anchor(path):
    """A consistent truncation looks like an older ledger: only an anchor can tell."""
    _ledger(path)
    _truncate_consistently(path)
    with Session(path, anchor=False) as s:
        assert s.ledger.verify()["charges"] == 3
        assert s.spent_exact(["ann"]).iloc[0] == Fraction(1, 4)


# ---- a rebuilt chain: the key, or the anchor -----------------------------------------------------
def _raise_default_and_rebuild(path: str) -> None:
    d = _raise_default(path)

    def edit(c):
        b = c["state"]["budgets"]["metric"].split(":")
        b[2] = str(10 * d)
        c["state"]["budgets"]["metric"] = ":".join(b)
        if c["op"] == "budget" and c.get("default") is not None:
            c["default"] = 10 * d

    _rebuild_chain(path, edit)


def test_rebuilt_unkeyed_chain_is_caught_by_the_anchor(path):
    _ledger(path)
    _raise_default_and_rebuild(path)
    with pytest.raises(LedgerCorruptError, match="differs from the one its anchor"):
        Session(path)


def test_rebuilt_unkeyed_chain_without_key_or_anchor_is_not_detected(path):
    """The documented limit: without a key, whoever can write the file can rebuild the log."""
    _ledger(path)
    _raise_default_and_rebuild(path)
    with Session(path, anchor=False) as s:
        s.ledger.verify()
        assert s.remaining_exact(["ann"]).iloc[0] == Fraction(19, 2)  # 10 - 0.5


def test_rebuilt_keyed_chain_is_refused_with_the_key(path):
    _ledger(path, ledger_key=KEY)
    _drop_anchor(path)  # the key alone catches it
    _raise_default_and_rebuild(path)  # the attacker does not have the key: SHA-256 links
    with pytest.raises(LedgerCorruptError, match=r"does not follow .* under this ledger_key"):
        Session(path, ledger_key=KEY)
    # declaring the log unkeyed does not help either
    _sql(path, ("UPDATE meta SET value = 'sha256' WHERE key = 'audit.chain'",))
    with pytest.raises(LedgerCorruptError, match="not keyed"):
        Session(path, ledger_key=KEY)


def test_keyed_verify_catches_an_edited_row_inside_the_log(path):
    _ledger(path, ledger_key=KEY)
    with Session(path, ledger_key=KEY) as s:
        con = _Raw(path)
        # the first reservation claims 3 users instead of 2
        cur = con.execute(
            "UPDATE audit SET content = replace(content, '\"n\": 2', '\"n\": 3') WHERE seq = 2"
            " AND content LIKE '%\"n\": 2%'"
        )
        assert cur.rowcount == 1
        con.close()
        with pytest.raises(LedgerCorruptError, match=r"chain breaks at row 2 .*keyed"):
            s.ledger.verify()


def test_key_from_a_file_and_key_mismatches(path, tmp_path):
    key_file = tmp_path / "keys" / "ledger.key"
    key_file.parent.mkdir()
    key_file.write_bytes(KEY)
    _ledger(path, ledger_key=key_file)
    with Session(path, ledger_key=KEY) as s:  # the same bytes, given directly
        assert s.ledger.verify()["charges"] == 4
    before = _files(path)
    with pytest.raises(InvalidInputError, match="not the key this ledger was created with"):
        Session(path, ledger_key=bytes(32))
    with pytest.raises(LedgerError, match="keyed"):
        Session(path)
    with pytest.raises(InvalidInputError, match="at least 16"):
        Session(path, ledger_key=b"short")
    with pytest.raises(InvalidInputError, match="cannot be read"):
        Session(path, ledger_key=tmp_path / "missing.key")
    assert _files(path) == before  # refused opens leave the ledger and its anchor as they were
    other = str(tmp_path / "plain.sqlite")
    _ledger(other)
    before = _files(other)
    with pytest.raises(LedgerCorruptError, match="created without a key"):
        Session(other, ledger_key=KEY)
    assert _files(other) == before


def _files(path: str) -> dict[str, str]:
    """sha256 of the ledger (the file, or every table of the database) and of its anchor."""
    out = {_anchor(path): hashlib.sha256(Path(_anchor(path)).read_bytes()).hexdigest()}
    if not is_postgres_url(path):
        return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest(), **out}
    con, h = _Raw(path), hashlib.sha256()
    for t in ("meta", "users", "chunks", "queries", "reservations", "charges", "audit"):
        h.update(repr(con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()).encode())
    con.close()
    return {path: h.hexdigest(), **out}


_TABLES = ("meta", "users", "chunks", "queries", "reservations", "charges", "audit")


def _backup(path: str, to: Path) -> None:
    """Copy the ledger: its file, or its tables into tables named ``to.name`` + ``_<table>``."""
    if not is_postgres_url(path):
        shutil.copyfile(path, to)
        return
    con = _Raw(path)
    for t in _TABLES:
        con.execute(f"CREATE TABLE {to.stem}_{t} AS TABLE gpframe_{t}")
    con.close()


def _put_back(backup: Path, path: str) -> None:
    """Put a copy made by :func:`_backup` back in place of the ledger."""
    if not is_postgres_url(path):
        shutil.copyfile(backup, path)
        return
    con = _Raw(path)
    for t in _TABLES:
        con.execute(f"DELETE FROM gpframe_{t}")
        con.execute(
            f"INSERT INTO gpframe_{t} OVERRIDING SYSTEM VALUE SELECT * FROM {backup.stem}_{t}"
        )
    con.close()


# ---- rollbacks: an older copy put back ---------------------------------------------------------
def test_older_copy_put_back_is_refused(path, tmp_path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        _charge(s, ["ann"], 0.5)
    backup = tmp_path / "backup.sqlite"
    _backup(path, backup)
    with Session(path) as s:
        _charge(s, ["ann"], 0.5)  # ann's budget is used up
    _put_back(backup, path)  # the older copy, in which ann has 0.5 left
    before = _files(path)
    with pytest.raises(LedgerCorruptError, match="older copy of the file was put back"):
        Session(path)
    with pytest.raises(LedgerCorruptError, match="older copy"):
        Session(path, readonly=True)
    assert _files(path) == before  # nothing was settled, charged or anchored
    # the way out the message names: accept the restored state by moving the anchor away
    os.replace(_anchor(path), tmp_path / "old.anchor")
    with Session(path) as s:
        assert s.remaining_exact(["ann"]).iloc[0] == Fraction(1, 2)


def test_anchor_at_a_path_the_user_names(path, tmp_path):
    elsewhere = tmp_path / "safe" / "ledger.anchor"
    elsewhere.parent.mkdir()
    _ledger(path, anchor=elsewhere)
    assert not Path(f"{path}.anchor").exists()
    assert json.loads(elsewhere.read_text())["seq"] > 0
    _truncate_consistently(path)
    Session(path, anchor=False).close()  # without the anchor: looks fine
    with pytest.raises(LedgerCorruptError, match="older than its anchor"):
        Session(path, anchor=elsewhere)


def test_deleted_ledger_is_not_silently_restarted(path):
    _ledger(path)
    if is_postgres_url(path):
        _sql(path, *[(f"DROP TABLE gpframe_{t}",) for t in (*_TABLES, "lock")])
        with pytest.raises(LedgerCorruptError, match=r"holds no gpframe ledger.*fresh budget"):
            Session(path, budget=gp.GP(eps=1))
        with pytest.raises(LedgerCorruptError, match="no gpframe_"):  # not created meanwhile
            Session(path, anchor=False, create=False)
        return
    os.remove(path)
    with pytest.raises(LedgerCorruptError, match=r"missing or empty.*fresh budget"):
        Session(path, budget=gp.GP(eps=1))
    assert not os.path.exists(path)


def test_anchor_behind_the_head_is_fine(path, tmp_path):
    """A writer that died between its commit and its anchor update leaves the anchor behind."""
    with Session(path, budget=gp.GP(eps=1)) as s:
        _charge(s, ["ann"], 0.25)
    stale = Path(_anchor(path)).read_text()
    with Session(path) as s:
        _charge(s, ["ann"], 0.25)
    Path(_anchor(path)).write_text(stale)
    with Session(path) as s:
        _charge(s, ["ann"], 0.25)
        head = s.ledger.store.audit_head()
    assert json.loads(Path(_anchor(path)).read_text())["seq"] == head[0]


WORKER = r"""
import sys
from gpframe.ledger import Session
path, n, anchor = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Session(path, anchor=anchor) as s:
    for i in range(n):
        with s.reserve([1, 2, 3], 0.001, query="anchor") as r:
            r.charge(0.001)
"""


def test_processes_sharing_a_ledger_leave_the_anchor_at_the_head(path):
    Session(path, budget=gp.GP(eps=1)).close()
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, path, "20", _anchor(path)], stderr=subprocess.PIPE
        )
        for _ in range(3)
    ]
    for p in ps:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    with Session(path) as s:
        seq, digest = s.ledger.store.audit_head()
        assert s.ledger.verify()["charges"] == 60
    anchored = json.loads(Path(_anchor(path)).read_text())
    assert (anchored["seq"], anchored["hash"]) == (seq, digest)


# ---- the lost -wal: every acknowledged charge is in the main file -----------------------------
def test_copy_of_the_main_file_alone_holds_every_acknowledged_charge(tmp_path):
    path = str(tmp_path / "ledger.sqlite")  # SQLite's -wal: a file-only question
    Session(path, budget=gp.GP(eps=1)).close()
    s = Session(path)
    for _ in range(5):
        _charge(s, ["ann", "bob"], 0.125)
    # the crash: only ledger.sqlite survives (no -wal, no -shm), the session never closed
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)
    try:
        with Session(copy, create=False) as c:
            assert c.spent_exact(["ann", "bob"]).tolist() == [Fraction(5, 8)] * 2
            assert c.ledger.verify()["charges"] == 5
    finally:
        s._simulate_crash()


# ---- files written before the audit rows recorded the state -------------------------------------
def test_ledger_from_before_the_state_is_checked_from_its_next_write(path):
    _ledger(path)
    # what an older gpframe wrote: no state in the audit rows, no chain kind, no anchor
    _rebuild_chain(path, lambda c: c.pop("state"))
    _sql(path, ("DELETE FROM meta WHERE key LIKE 'audit.%'",))
    _drop_anchor(path)
    with Session(path) as s:
        assert s.ledger.verify()["charges"] == 4
        _charge(s, ["bob"], 0.25)  # the first write records the state (and anchors it)
    assert Path(_anchor(path)).exists()
    _drop_anchor(path)
    _raise_default(path)
    with pytest.raises(LedgerCorruptError, match="stored metric budget"):
        Session(path)


def test_a_notion_added_by_another_session_is_kept_in_the_state(path):
    """A Session opened before another one added the central budget keeps it in the log."""
    s1 = Session(path, budget=gp.GP(eps=1))
    s2 = Session(path, central=gp.DP(epsilon=1))
    _charge(s2, ["ann"], 0.5, notion="central")
    _charge(s1, ["ann"], 0.25)  # s1 does not know the central notion
    s1.close()
    s2.close()
    with Session(path) as s:
        assert s.ledger.verify()["charges"] == 2
        assert s.spent_exact(["ann"], notion="central").iloc[0] == Fraction(1, 2)


def test_verify_rereads_the_users_of_an_open_session(path):
    _ledger(path)
    with Session(path) as s:
        _rename_user(path, "ann", "ann2")
        with pytest.raises(LedgerCorruptError, match="user id was changed"):
            s.ledger.verify()


def test_malformed_state_in_a_rebuilt_log_is_refused(path):
    _ledger(path)
    _drop_anchor(path)
    _rebuild_chain(path, lambda c: c.update(state={"users": "many"}))
    with pytest.raises(LedgerCorruptError, match="malformed"):
        Session(path)
