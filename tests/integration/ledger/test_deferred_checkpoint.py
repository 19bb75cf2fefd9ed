"""Deferred checkpoints: the DuckDB functions' commits wait in the ``-wal`` for the main file.

While writes are deferring (``SqliteStore.deferring``: the batches of the SQL functions), the
SQLite store copies their commits into the main file at most every ``checkpoint_interval``
seconds (``gpframe/ledger/store.py``, ``docs/ledger.md``). What must hold:

* every acknowledged charge survives a ``kill -9`` of the writing process (the ``-wal`` is
  fsync'd at each commit and recovered on the next open);
* a copy of the main file alone, taken while commits wait in the ``-wal``, is refused on open
  by the anchor (``LedgerCorruptError``), never accepted short of charges;
* a write that is not deferring, and closing the Session, checkpoint: the main file alone then
  holds every charge.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import LedgerCorruptError
from gpframe.ledger import Session

#: a writer deferring every checkpoint after the first (the interval is an hour), charging users
#: 1, 2 and 3 1/1024 each per write and printing the count of acknowledged writes
WRITER = r"""
import sys
from gpframe.ledger import Session
s = Session(sys.argv[1])
s.ledger.store.checkpoint_interval = 3600.0
i = 0
with s.ledger.store.deferring():
    while True:
        with s.reserve([1, 2, 3], 2**-10, query="burst") as r:
            r.charge(2**-10)
        i += 1
        print(i, flush=True)  # acknowledged: the charge committed, the anchor moved
"""


def _charge(s: Session, users: list, amount: float) -> None:
    with s.reserve(users, amount) as r:
        r.charge(amount)


def _ledger(tmp_path: Path) -> str:
    path = str(tmp_path / "ledger.sqlite")
    Session(path, budget=gp.GP(eps=1)).close()
    return path


def _open_copy(path: str, copy: Path) -> Session:
    """Open a copy of the main file alone, checked against the ledger's own anchor."""
    shutil.copyfile(path, copy)
    return Session(copy, create=False, anchor=f"{path}.anchor")


def test_kill_9_mid_burst_loses_no_acknowledged_charge_and_a_wal_less_copy_is_refused(tmp_path):
    path = _ledger(tmp_path)
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as child:  # fmt: skip
        try:
            acked = 0
            assert child.stdout is not None
            while acked < 12:
                line = child.stdout.readline()
                assert line, child.stderr.read() if child.stderr else ""
                acked = int(line)
            # mid-stream: the main file alone (no -wal), then the anchor, as a careless
            # backup would
            copy = tmp_path / "copy"
            copy.mkdir()
            shutil.copyfile(path, copy / "ledger.sqlite")
            shutil.copyfile(f"{path}.anchor", copy / "ledger.sqlite.anchor")
        finally:
            child.kill()  # SIGKILL: no close, no checkpoint, no settlement
            child.wait(timeout=60)
    assert Path(f"{path}-wal").stat().st_size > 0  # the burst's commits were in the -wal
    with pytest.raises(LedgerCorruptError, match="older than its anchor"):
        Session(str(copy / "ledger.sqlite"))
    with Session(path) as s:  # the file with its -wal: every acknowledged charge is there
        spent = s.spent_exact([1, 2, 3]).tolist()
        assert all(v >= Fraction(acked, 1024) for v in spent), (spent, acked)
        assert s.ledger.verify()["charges"] >= acked


def test_close_checkpoints_a_deferred_burst_into_the_main_file(tmp_path):
    path = _ledger(tmp_path)
    s = Session(path)
    s.ledger.store.checkpoint_interval = 3600.0
    with s.ledger.store.deferring():
        for _ in range(5):
            _charge(s, ["ann", "bob"], 0.125)
    with pytest.raises(LedgerCorruptError, match="older than its anchor"):
        _open_copy(path, tmp_path / "behind.sqlite")
    s.close()
    assert not Path(f"{path}-wal").exists()
    with _open_copy(path, tmp_path / "closed.sqlite") as c:
        assert c.spent_exact(["ann", "bob"]).tolist() == [Fraction(5, 8)] * 2
        assert c.ledger.verify()["charges"] == 5


def test_a_write_not_deferring_checkpoints_before_it_returns(tmp_path):
    path = _ledger(tmp_path)
    with Session(path) as s:
        s.ledger.store.checkpoint_interval = 3600.0
        with s.ledger.store.deferring():
            _charge(s, ["ann"], 0.125)
            _charge(s, ["ann"], 0.125)
        _charge(s, ["bob"], 0.125)  # the Python path: in the main file when it returns
        with _open_copy(path, tmp_path / "copy.sqlite") as c:
            assert c.spent_exact(["ann", "bob"]).tolist() == [Fraction(1, 4), Fraction(1, 8)]


def test_sql_batches_defer_their_checkpoints(tmp_path):
    """gp_privatize_gp's batches leave the main file behind until the close (then it is whole)."""
    path = _ledger(tmp_path)
    s = Session(path)
    s.ledger.store.checkpoint_interval = 3600.0
    con = duckdb.connect()
    gp.duckdb.register(con, s)
    n = 3 * 2048
    df = pd.DataFrame({"u": np.arange(n) % 50, "x": np.arange(n) * 100.0, "y": 1e5})
    con.register("pts", df)
    assert con.execute("SELECT count(gp_privatize_gp(u, x, y, 1e-3)) FROM pts").fetchone()[0] == n
    with pytest.raises(LedgerCorruptError, match="older than its anchor"):
        _open_copy(path, tmp_path / "behind.sqlite")
    s.close()
    with _open_copy(path, tmp_path / "closed.sqlite") as c:
        assert c.ledger.verify()["charges"] == 3


def test_store_close_checkpoints_deferred_commits_once_and_may_be_repeated(tmp_path):
    from gpframe.ledger.store import SqliteStore

    st = SqliteStore(tmp_path / "store.sqlite")
    with st.deferring(), st.write():
        st.set_meta({"k": "v"})
    n = st.checkpoints  # the schema's write checkpointed; this one waits in the -wal
    st.close()
    st.close()
    assert st.checkpoints == n + 1
    assert not (tmp_path / "store.sqlite-wal").exists()
    ro = SqliteStore(tmp_path / "store.sqlite", readonly=True)  # the main file alone holds it
    try:
        assert ro.meta()["k"] == "v"
    finally:
        ro.close()
