"""The ledger's read-only mode: ``Session(path, readonly=True)``, used by ``gpframe ledger report``.

A read-only open must never change the file (its bytes, its mtime, and no ``-wal``/``-shm`` left
behind), must report exactly what a writable session reports, must refuse every write path with a
clear :class:`~gpframe.errors.GpframeError`, must work on a WAL file that another process holds
open (even mid-write), and must refuse missing, empty, foreign, corrupt and truncated files
without touching them.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import GpframeError, LedgerCorruptError, LedgerError
from gpframe.ledger import Session


def _fingerprint(path: Path | str, shm: bool = True) -> dict[str, tuple[str, int, int]]:
    """sha256, size and mtime of every file of the ledger (the main file and any -wal/-shm).

    For a PostgreSQL ledger (a URL): a hash of every row of its tables, and the database's
    count of committed transactions that changed rows (inserts, updates, deletes).

    ``shm=False`` leaves out an existing ``-shm``: it is SQLite's shared-memory index of a WAL
    that some writer left or holds, in which every WAL reader, even ``mode=ro``, takes its read
    marks; it holds no ledger data and is rebuilt from the ``-wal`` when needed.
    """
    if isinstance(path, str):
        import psycopg

        with psycopg.connect(path, autocommit=True) as con:
            h = hashlib.sha256()
            for t in ("meta", "users", "chunks", "queries", "reservations", "charges", "audit"):
                h.update(repr(con.execute(f"SELECT * FROM gpframe_{t} ORDER BY 1, 2")
                              .fetchall()).encode())  # fmt: skip
            con.execute("SELECT pg_stat_force_next_flush()")
            rows = con.execute(
                "SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables"
            ).fetchone()[0]
        return {"tables": (h.hexdigest(), int(rows or 0), 0)}
    out = {}
    for p in sorted(path.parent.iterdir()):
        if p.name.startswith(path.name) and (shm or not p.name.endswith("-shm")):
            st = p.stat()
            out[p.name] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """A closed ledger file with both notions, overrides, charges, a cancel and a settlement."""
    path = tmp_path / "ledger.sqlite"
    _fill(path)
    return path


@pytest.fixture
def any_ledger(ledger_path: str) -> Path | str:
    """The same ledger in an SQLite file (a Path) or a PostgreSQL database (a URL)."""
    path = Path(ledger_path) if ledger_path.endswith(".sqlite") else ledger_path
    _fill(path)
    return path


def _fill(path: Path | str) -> None:
    with Session(path, budget=gp.CGP(rho=1e-3), central=gp.DP(epsilon=2.0)) as s:
        s.set_budget(["ann"], gp.CGP(rho=5e-4))
        for i in range(3):
            with s.reserve(["ann", "bob", 7], 1e-4, query="q", charge_id=f"c{i}") as r:
                r.charge([1e-4, 5e-5, 0])
        with s.reserve([7, "8"], 0.5, notion="central", kind="dp", query="central") as r:
            r.charge(0.25)
        s.reserve(["bob"], 1e-4).cancel()
        with s.reserve(["bob"], 2e-4, query="settled"):
            pass  # left without charge(): charged the full allocation


def _views(s: Session) -> dict[str, object]:
    """Everything a reader can see, in comparable form."""
    return {
        "spent": s.spent_exact().to_dict(),
        "remaining": s.remaining_exact().to_dict(),
        "spent_c": s.spent_exact(notion="central").to_dict(),
        "remaining_c": s.remaining_exact(notion="central").to_dict(),
        "floats": s.remaining([7, "ann", "nobody"]).to_dict(),
        "report": s.report(),
        "history": {u: s.history(u) for u in ("ann", "bob", 7, "8", "nobody")},
        "snapshot": s.ledger.snapshot(),
        "verify": s.ledger.verify(),
    }


def _assert_same(a: dict, b: dict) -> None:
    for k in a:
        if k == "report":
            pd.testing.assert_frame_equal(a[k], b[k])
        elif k == "history":
            for u in a[k]:
                pd.testing.assert_frame_equal(a[k][u], b[k][u])
        else:
            assert a[k] == b[k], k


def test_readonly_reports_the_same_and_never_touches_the_file(any_ledger):
    ledger = any_ledger
    before = _fingerprint(ledger)
    # a clean close left no -wal/-shm; the anchor file records the audit log's head
    assert list(before) == (["tables"] if isinstance(ledger, str) else
                            ["ledger.sqlite", "ledger.sqlite.anchor"])  # fmt: skip
    time.sleep(0.01)  # an mtime change would be visible
    with Session(ledger, readonly=True) as ro:
        seen = _views(ro)
        assert seen["spent"] == {
            "ann": Fraction(3, 10**4), "bob": Fraction(35, 10**5), 7: 0, "8": 0
        }  # fmt: skip
        assert seen["remaining"]["ann"] == Fraction(2, 10**4)  # the override
        assert seen["spent_c"] == {"ann": 0, "bob": 0, 7: Fraction(1, 4), "8": Fraction(1, 4)}
        assert seen["verify"]["charges"] == 5 and seen["verify"]["reservations"] == 0
    assert _fingerprint(ledger) == before
    with Session(ledger) as rw:
        _assert_same(seen, _views(rw))


def test_readonly_refuses_every_write_path(any_ledger):
    ledger = any_ledger
    before = _fingerprint(ledger)
    with Session(ledger, readonly=True) as ro:
        snap = ro.ledger.snapshot()
        writes = {
            "reserve": lambda: ro.reserve(["ann"], 1e-5),
            "reserve a new user": lambda: ro.reserve(["zed"], 1e-5, query="q"),
            "reserve central": lambda: ro.reserve([7], 0.1, notion="central", kind="dp"),
            "reserve units": lambda: ro.reserve(["ann"], [1], units=True),
            "replay": lambda: ro.reserve(["ann", "bob", 7], 1e-4, query="q", charge_id="c0"),
            "set_budget": lambda: ro.set_budget(["ann"], gp.CGP(rho=1.0)),
            "set_budget central": lambda: ro.set_budget([7], gp.DP(epsilon=9.0)),
            "settle_stale": lambda: ro.ledger.settle_stale(),
            "settle own": lambda: ro.ledger._settle_own(),
            "store.write": lambda: ro.ledger.store.write().__enter__(),
        }
        for what, call in writes.items():
            with pytest.raises(LedgerError, match="read-only") as info:
                call()
            assert isinstance(info.value, GpframeError), what
            assert "Session(path)" in str(info.value), what  # says how to write instead
        assert ro.ledger.snapshot() == snap
        ro.ledger.verify()
    assert _fingerprint(ledger) == before


def test_readonly_cannot_add_a_notion_and_checks_the_stored_one(tmp_path):
    path = tmp_path / "metric_only.sqlite"
    Session(path, budget=gp.GP(eps=1.0)).close()
    before = _fingerprint(path)
    with pytest.raises(LedgerError, match="read-only"):
        Session(path, central=gp.DP(epsilon=1.0), readonly=True)
    with pytest.raises(gp.InvalidInputError, match="budget is gp"):
        Session(path, budget=gp.GP(eps=2.0), readonly=True)
    with Session(path, budget=gp.GP(eps=1.0), readonly=True) as ro:  # the stored one: fine
        assert ro.remaining().empty
    assert _fingerprint(path) == before


def test_readonly_close_settles_nothing_and_charge_paths_stay_closed(any_ledger):
    ledger = any_ledger
    with Session(ledger, readonly=True) as ro:
        pass
    with pytest.raises(LedgerError, match="closed"):
        ro.reserve(["ann"], 1e-5)
    ro.close()  # idempotent


_HOLDER = r"""
import sys
path, mode = sys.argv[1], sys.argv[2]
if mode == "reserve":
    from gpframe.ledger import Session
    s = Session(path)
    r = s.reserve(["ann", "new"], 1e-4, query="held")  # an open reservation, then wait
    print("READY", flush=True)
    sys.stdin.readline()
    r.charge(5e-5)
    s.close()
elif mode == "txn":  # plain sqlite3 (fast to start): hold the write lock mid-transaction
    import sqlite3
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute("DELETE FROM queries")  # uncommitted: never visible to a reader
    print("READY", flush=True)
    sys.stdin.readline()
    con.execute("ROLLBACK")
    con.close()
"""


def _holder(path: Path, mode: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    if line.strip() != "READY":
        _, err = p.communicate()
        raise AssertionError(err[-2000:])
    return p


def _finish(p: subprocess.Popen) -> None:
    _, err = p.communicate("go\n", timeout=60)
    assert p.returncode == 0, err[-2000:]


def test_readonly_on_a_wal_file_held_open_by_a_writer_with_an_open_reservation(ledger):
    p = _holder(ledger, "reserve")
    try:
        assert Path(f"{ledger}-wal").exists()  # a writer is active: the WAL path of the reader
        before = _fingerprint(ledger, shm=False)
        with Session(ledger, readonly=True, timeout=5) as ro:
            assert ro.remaining_exact(["ann"]).iloc[0] == Fraction(1, 10**4)  # 5e-4 - 3e-4 - held
            assert ro.ledger.verify()["reservations"] == 1  # not settled: its owner is alive
            rep = ro.report().query("notion == 'metric'").set_index("user")
            assert rep.loc["new", "held"] == pytest.approx(1e-4)
        assert _fingerprint(ledger, shm=False) == before
    finally:
        _finish(p)
    with Session(ledger, readonly=True) as ro:  # the writer's commit is visible afterwards
        assert ro.spent_exact(["ann", "new"]).tolist() == [Fraction(35, 10**5), Fraction(5, 10**5)]


def test_readonly_reads_while_another_process_holds_the_write_lock(ledger):
    with Session(ledger, readonly=True) as ro:
        want = _views(ro)
    p = _holder(ledger, "txn")
    try:
        t0 = time.perf_counter()
        with Session(ledger, readonly=True, timeout=2) as ro:  # readers never wait for a writer
            _assert_same(want, _views(ro))  # the uncommitted DELETE is invisible
        assert time.perf_counter() - t0 < 2
    finally:
        _finish(p)
    with Session(ledger, readonly=True) as ro:
        _assert_same(want, _views(ro))  # rolled back


def test_readonly_leaves_an_abandoned_reservation_for_the_next_writer(ledger):
    crashed = Session(ledger)
    crashed.reserve(["bob"], 2e-4, query="abandoned")  # noise may have been drawn: then crash
    crashed._simulate_crash()  # gone without settling (a dead Session, as after kill -9)
    before = _fingerprint(ledger, shm=False)
    with Session(ledger, readonly=True) as ro:
        assert ro.ledger.verify()["reservations"] == 1  # seen, but not settled
        assert ro.spent_exact(["bob"]).iloc[0] == Fraction(35, 10**5)
        assert ro.remaining_exact(["bob"]).iloc[0] == Fraction(1, 10**3) - Fraction(55, 10**5)
    assert _fingerprint(ledger, shm=False) == before
    with Session(ledger) as rw:  # a writable open settles it in full
        assert rw.ledger.verify()["reservations"] == 0
        assert rw.spent_exact(["bob"]).iloc[0] == Fraction(55, 10**5)


def test_readonly_wal_file_left_by_a_crashed_writer_is_read_not_checkpointed(ledger):
    """A crash can leave commits only in the -wal: a reader must see them and change nothing."""
    # the crash state: the main file as it was plus a -wal holding a commit (no checkpoint)
    src = Session(ledger)
    src.ledger.store.con.execute("PRAGMA wal_autocheckpoint=0")
    src.ledger.store.checkpoint = None  # a crash between the commit and its checkpoint
    with src.reserve(["bob"], 1e-4, query="wal-only") as r:
        r.charge(1e-4)
    crashed = ledger.parent / "crashed.sqlite"
    crashed.write_bytes(ledger.read_bytes())
    Path(f"{crashed}-wal").write_bytes(Path(f"{ledger}-wal").read_bytes())
    src.close()
    before = _fingerprint(crashed, shm=False)
    assert f"{crashed.name}-wal" in before and os.path.getsize(f"{crashed}-wal") > 0
    with Session(crashed, readonly=True) as ro:
        assert ro.spent_exact(["ann", "bob"]).tolist() == [Fraction(3, 10**4), Fraction(45, 10**5)]
        ro.ledger.verify()
    # the main file and the -wal are untouched (SQLite may add an -shm index for a WAL reader)
    assert _fingerprint(crashed, shm=False) == before


@pytest.mark.parametrize("kind", ["missing", "empty", "garbage", "foreign", "not-a-ledger-meta"])
def test_readonly_refuses_missing_and_foreign_files_untouched(tmp_path, kind):
    path = tmp_path / "x.sqlite"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(os.urandom(4096))
    elif kind == "foreign":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t(a)")
        con.commit()
        con.close()
    elif kind == "not-a-ledger-meta":
        with Session(path, budget=gp.GP(eps=1.0)) as s:
            s.ledger.store.con.execute("UPDATE meta SET value = 'other' WHERE key = 'schema'")
    before = _fingerprint(path) if path.exists() else {}
    with pytest.raises(LedgerCorruptError) as info:
        Session(path, readonly=True)
    assert "Nothing was charged" in str(info.value)
    assert _fingerprint(path) == before if before else not path.exists()
    assert not any(p.name.endswith(("-wal", "-shm", "-journal")) for p in tmp_path.iterdir())


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_readonly_refuses_or_flags_a_truncated_file(ledger, cut):
    data = ledger.read_bytes()
    bad = ledger.parent / "cut.sqlite"
    bad.write_bytes(data[: int(len(data) * cut) // 512 * 512])
    before = _fingerprint(bad)
    with pytest.raises(LedgerCorruptError):  # at open, or at the latest by verify()
        with Session(bad, readonly=True) as ro:
            ro.report()
            ro.ledger.verify()
    assert _fingerprint(bad) == before


def test_readonly_flags_a_tampered_charge(ledger):
    con = sqlite3.connect(ledger)
    con.execute("UPDATE chunks SET spent = zeroblob(length(spent)) WHERE notion = 'metric'")
    con.commit()
    con.close()
    before = _fingerprint(ledger)
    with pytest.raises(LedgerCorruptError, match="spent"):  # the open's check flags it
        Session(ledger, readonly=True)
    assert _fingerprint(ledger) == before


def test_readonly_needs_a_path():
    # an in-memory ledger has nothing to read: readonly=True on path=None is refused or empty
    try:
        s = Session(None, readonly=True)
    except GpframeError as exc:
        assert "budget" in str(exc) or "read-only" in str(exc)
    else:  # pragma: no cover - documents the behaviour if it ever opens
        s.close()
        pytest.fail("Session(None, readonly=True) opened an empty ledger")


def test_cli_ledger_report_leaves_the_file_unchanged(ledger, capsys):
    from gpframe.cli import main

    before = _fingerprint(ledger)
    assert main(["ledger", "report", str(ledger)]) == 0
    out = capsys.readouterr().out
    assert "ann" in out and "bob" in out
    assert _fingerprint(ledger) == before
    assert main(["ledger", "report", str(ledger.parent / "missing.sqlite")]) == 1
    assert not (ledger.parent / "missing.sqlite").exists()
