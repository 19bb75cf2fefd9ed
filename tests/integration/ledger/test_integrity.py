"""The ledger notices tampering, rollbacks and a lost -wal (SECURITY.md, "Ledger integrity").

Each scenario edits the file the way someone with write access to it could (plain sqlite3,
outside gpframe) and checks what a Session opening it does: a consistent-looking edit is
refused with :class:`~gpframe.errors.LedgerCorruptError`, or, for the cases only an anchor or a
key can catch, the test says so.
"""

from __future__ import annotations

import hashlib
import json
import os
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
from gpframe.ledger import Session

KEY = bytes(range(32))


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.sqlite")


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
    con = sqlite3.connect(path)
    for st in statements:
        con.execute(*st)
    con.commit()
    con.close()


def _drop_anchor(path: str) -> None:
    Path(f"{path}.anchor").unlink(missing_ok=True)


def _rebuild_chain(path: str, edit) -> None:
    """Rewrite every audit row with ``edit(content dict)`` and recompute the unkeyed chain."""
    con = sqlite3.connect(path)
    prev = "0" * 64
    for seq, content in con.execute("SELECT seq, content FROM audit ORDER BY seq").fetchall():
        c = json.loads(content)
        edit(c)
        text = json.dumps(c, sort_keys=True)
        prev = hashlib.sha256(bytes.fromhex(prev) + text.encode()).hexdigest()
        con.execute("UPDATE audit SET content = ?, hash = ? WHERE seq = ?", (text, prev, seq))
    con.commit()
    con.close()


def _raise_default(path: str) -> None:
    """The attack on the stored default budget: ten times eps = 1."""
    con = sqlite3.connect(path)
    d = int(con.execute("SELECT value FROM meta WHERE key = 'metric.default'").fetchone()[0])
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
    con = sqlite3.connect(path)
    b = np.frombuffer(con.execute("SELECT budget FROM chunks").fetchone()[0], "<i8").copy()
    con.close()
    assert b[0] > 0 and b[1] == -1  # ann (index 0) has an override, bob none
    b[0] *= 10
    _sql(path, ("UPDATE chunks SET budget = ?", (b.tobytes(),)))
    with pytest.raises(LedgerCorruptError, match="budget overrides differ"):
        Session(path)


def test_override_changed_under_an_open_session_is_not_recorded_as_its_own(path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        s.set_budget(["ann"], gp.GP(eps=0.5))
        con = sqlite3.connect(path)
        b = np.frombuffer(con.execute("SELECT budget FROM chunks").fetchone()[0], "<i8").copy()
        b[0] *= 10
        con.execute("UPDATE chunks SET budget = ?", (b.tobytes(),))
        con.commit()
        con.close()
        before = s.ledger.snapshot()
        with pytest.raises(LedgerCorruptError, match="budget overrides differ"):
            s.set_budget(["bob"], gp.GP(eps=0.5))
        assert s.ledger.snapshot() == before


def test_renamed_user_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    # ann has spent 0.25; under a new name she would start afresh
    _sql(path, ("UPDATE users SET uid = 'ann2' WHERE uid = 'ann'",))
    with pytest.raises(LedgerCorruptError, match="user id was changed"):
        Session(path)


def test_deleted_user_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    _sql(path, ("DELETE FROM users WHERE uid = 'carl'",))
    with pytest.raises(LedgerCorruptError, match="holds 2 users but the audit log records 3"):
        Session(path)


def test_deleted_last_charge_and_its_audit_rows_is_refused_on_open(path):
    _ledger(path)
    _drop_anchor(path)
    con = sqlite3.connect(path)
    last = con.execute("SELECT max(seq) FROM audit WHERE op = 'reserve'").fetchone()[0]
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
    con = sqlite3.connect(path)
    last = con.execute("SELECT max(seq) FROM audit WHERE op = 'reserve'").fetchone()[0]
    idx, amt = con.execute(
        "SELECT idx, amount FROM charges WHERE rowid = (SELECT max(rowid) FROM charges)"
    ).fetchone()
    spent = np.frombuffer(con.execute("SELECT spent FROM chunks").fetchone()[0], "<i8").copy()
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
        con = sqlite3.connect(path)
        # the first reservation claims 3 users instead of 2
        cur = con.execute(
            "UPDATE audit SET content = replace(content, '\"n\": 2', '\"n\": 3') WHERE seq = 2"
            " AND content LIKE '%\"n\": 2%'"
        )
        assert cur.rowcount == 1
        con.commit()
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
    """sha256 of the ledger file and its anchor."""
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in (path, f"{path}.anchor")}


# ---- rollbacks: an older copy put back ---------------------------------------------------------
def test_older_copy_put_back_is_refused(path, tmp_path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        _charge(s, ["ann"], 0.5)
    backup = tmp_path / "backup.sqlite"
    shutil.copyfile(path, backup)
    with Session(path) as s:
        _charge(s, ["ann"], 0.5)  # ann's budget is used up
    shutil.copyfile(backup, path)  # the older copy, in which ann has 0.5 left
    before = _files(path)
    with pytest.raises(LedgerCorruptError, match="older copy of the file was put back"):
        Session(path)
    with pytest.raises(LedgerCorruptError, match="older copy"):
        Session(path, readonly=True)
    assert _files(path) == before  # nothing was settled, charged or anchored
    # the way out the message names: accept the restored state by moving the anchor away
    os.replace(f"{path}.anchor", tmp_path / "old.anchor")
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
    os.remove(path)
    with pytest.raises(LedgerCorruptError, match=r"missing or empty.*fresh budget"):
        Session(path, budget=gp.GP(eps=1))
    assert not os.path.exists(path)


def test_anchor_behind_the_head_is_fine(path, tmp_path):
    """A writer that died between its commit and its anchor update leaves the anchor behind."""
    with Session(path, budget=gp.GP(eps=1)) as s:
        _charge(s, ["ann"], 0.25)
    stale = Path(f"{path}.anchor").read_text()
    with Session(path) as s:
        _charge(s, ["ann"], 0.25)
    Path(f"{path}.anchor").write_text(stale)
    with Session(path) as s:
        _charge(s, ["ann"], 0.25)
        head = s.ledger.store.audit_head()
    assert json.loads(Path(f"{path}.anchor").read_text())["seq"] == head[0]


WORKER = r"""
import sys
from gpframe.ledger import Session
path, n = sys.argv[1], int(sys.argv[2])
with Session(path) as s:
    for i in range(n):
        with s.reserve([1, 2, 3], 0.001, query="anchor") as r:
            r.charge(0.001)
"""


def test_processes_sharing_a_ledger_leave_the_anchor_at_the_head(path):
    Session(path, budget=gp.GP(eps=1)).close()
    ps = [
        subprocess.Popen([sys.executable, "-c", WORKER, path, "20"], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for p in ps:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    with Session(path) as s:
        seq, digest = s.ledger.store.audit_head()
        assert s.ledger.verify()["charges"] == 60
    anchored = json.loads(Path(f"{path}.anchor").read_text())
    assert (anchored["seq"], anchored["hash"]) == (seq, digest)


# ---- the lost -wal: every acknowledged charge is in the main file -----------------------------
def test_copy_of_the_main_file_alone_holds_every_acknowledged_charge(path, tmp_path):
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
    assert Path(f"{path}.anchor").exists()
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
        _sql(path, ("UPDATE users SET uid = 'ann2' WHERE uid = 'ann'",))
        with pytest.raises(LedgerCorruptError, match="user id was changed"):
            s.ledger.verify()


def test_malformed_state_in_a_rebuilt_log_is_refused(path):
    _ledger(path)
    _drop_anchor(path)
    _rebuild_chain(path, lambda c: c.update(state={"users": "many"}))
    with pytest.raises(LedgerCorruptError, match="malformed"):
        Session(path)
