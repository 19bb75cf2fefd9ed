"""Ledger torture: concurrent processes, kill -9 during charging, idempotent replays.

DESIGN.md §4: the filter never overspends, including across processes, and an acknowledged
charge (charge() returned) is never lost. Every test runs on an SQLite file and on a PostgreSQL
database (``ledger_path`` in tests/conftest.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from fractions import Fraction

import pytest

import gpframe as gp
from gpframe.ledger import Session

WORKER = r"""
import sys, secrets
from fractions import Fraction
from gpframe.ledger import Session
path, n, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
users = list(range(5))
with Session(path) as s:
    for i in range(n):
        # amounts 1..4 hundredths; actual charge 0..alloc (drawn from secrets: any value works)
        alloc = [(1 + secrets.randbelow(4)) / 100 for _ in users]
        cid = f"{seed}-{i}"
        with s.reserve(users, alloc, query="torture", charge_id=cid) as r:
            actual = [a * secrets.randbelow(3) / 2 for a in alloc]
            r.charge(actual)
        paid = [repr(x if ok else 0.0) for x, ok in zip(actual, r.admitted)]
        print("ACK", cid, *paid, flush=True)
"""


def _spawn(path, n, seed):
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, path, str(n), seed],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _acks(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("ACK "):
            parts = line.split()
            out[parts[1]] = [gp.GP(eps=float(x)).amount if float(x) else 0 for x in parts[2:]]
    return out


def _concurrent(path, procs, n):
    Session(path, budget=gp.GP(eps=2)).close()
    ps = [_spawn(path, n, f"p{k}") for k in range(procs)]
    acks = {}
    for p in ps:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err
        acks |= _acks(out)
    assert len(acks) == procs * n
    with Session(path) as s:
        spent = s.spent_exact(list(range(5)))
        for u in range(5):
            want = sum((a[u] for a in acks.values()), Fraction(0))
            assert spent[u] == want  # spent == sum of acknowledged charges
            assert spent[u] <= 2  # 0 overspends
        assert s.ledger.verify()["charges"] == procs * n


def test_concurrent_processes_never_overspend_fast(ledger_path):
    _concurrent(ledger_path, 4, 100)


@pytest.mark.slow
def test_concurrent_processes_never_overspend_8x1000(ledger_path):
    _concurrent(ledger_path, 8, 1000)


def _kill_loop(path, kills):
    Session(path, budget=gp.GP(eps=10**6)).close()
    rnd = random.Random(1234)  # schedule of kill times only; no privacy randomness
    acks = {}
    for k in range(kills):
        p = _spawn(path, 10**6, f"k{k}")
        first = p.stdout.readline()  # wait until the child is charging
        time.sleep(rnd.random() * 0.5)
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate()  # reaps the child: its pid is dead for settle_stale()
        acks |= _acks(first + out)
    assert acks, "no charge was acknowledged; the children did not start"
    with Session(path) as s:  # opening settles the killed children's reservations in full
        check = s.ledger.verify()
        assert check["reservations"] == 0
        store = s.ledger.store
        for cid, amounts in acks.items():
            row = store.charge(cid)
            assert row is not None, f"acknowledged charge {cid} was lost"
            assert sum(row.amount.tolist()) == sum(s.ledger.units["metric"].up(a) for a in amounts)


def test_kill_9_never_loses_acknowledged_charges_fast(ledger_path):
    _kill_loop(ledger_path, 3)


@pytest.mark.slow
def test_kill_9_never_loses_acknowledged_charges_loop(ledger_path):
    _kill_loop(ledger_path, 30)


@pytest.mark.slow
def test_10k_idempotent_replays_never_double_debit(ledger_path):
    path = ledger_path
    with Session(path, budget=gp.GP(eps=1)) as s:
        for i in range(10_000):
            with s.reserve([1, 2, 3], 0.5, charge_id=f"job-{i % 10}") as r:
                r.charge([0.01, 0.02, 0.0])
        assert s.spent_exact([1, 2, 3]).tolist() == [Fraction(1, 10), Fraction(1, 5), 0]
        assert s.ledger.verify()["charges"] == 10


def test_idempotent_replays_never_double_debit_fast(ledger_path):
    with Session(ledger_path, budget=gp.GP(eps=1)) as s:
        for i in range(200):
            with s.reserve([1, 2, 3], 0.5, charge_id=f"job-{i % 10}") as r:
                r.charge([0.01, 0.02, 0.0])
        assert s.spent_exact([1, 2, 3]).tolist() == [Fraction(1, 10), Fraction(1, 5), 0]
        assert s.ledger.verify()["charges"] == 10
