"""Ledger costs: bulk throughput, the per-write durability policy, and the check on open.

1. Bulk: reserve + charge of N users (default 10**6) vs a bare bulk upsert of N rows, both on a
   file-backed SQLite store (WAL, synchronous=FULL); the users already exist (a second query),
   which is the steady state of a session.
2. Policy: many small queries (reserve + charge of 10 users: two write transactions each) under
   the old policy (SQLite's automatic checkpoints only, no anchor) as the baseline, and the
   current one (``wal_checkpoint(FULL)`` after every write, plus the anchor file); also
   ``TRUNCATE`` and a rollback journal (``journal_mode=DELETE``) for comparison. The ratio to
   the baseline is printed.
3. Open: the time to open a Session (which runs the integrity check) against an open without
   the check, and of the check alone, on a ledger with U users (default 10**5) and C charges
   (default 10**5), next to ``verify()``, the full replay.

Usage, from the repository root: ``PYTHONPATH=. python benchmarks/speed/ledger.py [N] [U] [C]``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time

import numpy as np

import gpframe as gp
from gpframe.ledger import Ledger, Session
from gpframe.ledger.integrity import uid_bytes

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10**6
U = int(sys.argv[2]) if len(sys.argv) > 2 else 10**5
C = int(sys.argv[3]) if len(sys.argv) > 3 else 10**5
Q = 300  # small queries per policy


def _policy(s: Session, name: str) -> None:
    """Switch an open file Session to a durability policy."""
    store = s.ledger.store
    if name == "old":  # before: automatic (PASSIVE, every 1000 pages) checkpoints, no anchor
        store.checkpoint, s.ledger.anchor = None, None
    elif name == "FULL, no anchor":
        store.checkpoint, s.ledger.anchor = "FULL", None
    elif name == "TRUNCATE + anchor":
        store.checkpoint = "TRUNCATE"
    elif name == "journal DELETE + anchor":
        store.checkpoint = None
        store.con.execute("PRAGMA journal_mode=DELETE")


def bulk(d: str) -> None:
    users = np.arange(N, dtype=np.int64)
    alloc = np.full(N, 1e-6)
    times = {}
    for policy in ("old", "FULL + anchor"):
        with Session(os.path.join(d, f"bulk-{len(times)}.sqlite"), budget=gp.CGP(rho=1e-4)) as s:
            _policy(s, policy)
            # warm-up: creates the users (first sight) and one charge
            with s.reserve(users, alloc, query="warmup") as r:
                r.charge(alloc / 2)
            t0 = time.perf_counter()
            with s.reserve(users, alloc, query="bench") as r:
                assert r.n_admitted == N
                r.charge(alloc / 2)
            times[policy] = time.perf_counter() - t0

    # baseline: bare bulk upsert of the same N (user, amount) rows into a SQLite file with the
    # same settings
    con = sqlite3.connect(os.path.join(d, "bare.sqlite"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE users(uid ANY PRIMARY KEY, spent INTEGER NOT NULL) STRICT, WITHOUT ROWID"
    )
    sql = (
        "INSERT INTO users(uid, spent) VALUES (?, ?) ON CONFLICT(uid) DO UPDATE SET"
        " spent = spent + excluded.spent"
    )
    amounts = np.full(N, 500_000_000_000, dtype=np.int64)
    for _ in ("warmup", "timed"):
        t0 = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        con.executemany(sql, zip(users.tolist(), amounts.tolist(), strict=True))
        con.execute("COMMIT")
        t_bare = time.perf_counter() - t0
    con.close()
    t_new, t_old = times["FULL + anchor"], times["old"]
    print(
        f"bulk: ledger reserve+charge vs bare bulk upsert: {N / 1e6:.1f}M users, "
        f"{t_new:.2f} s vs {t_bare:.2f} s, ratio {t_new / t_bare:.2f}x; "
        f"old policy {t_old:.2f} s, new/old {t_new / t_old:.2f}x"
    )


def small(d: str) -> None:
    policies = (
        "old", "FULL, no anchor", "FULL + anchor", "TRUNCATE + anchor", "journal DELETE + anchor"
    )  # fmt: skip
    sessions = [
        Session(os.path.join(d, f"small-{k}.sqlite"), budget=gp.GP(eps=1e3))
        for k in range(len(policies))
    ]
    users = list(range(10))
    spent = dict.fromkeys(policies, 0.0)
    for s, policy in zip(sessions, policies, strict=True):
        _policy(s, policy)
        with s.reserve(users, 0.1, query="warmup") as r:
            r.charge(0.1)
    # interleaved blocks, so that a busy moment of the machine hits every policy alike
    for _ in range(Q // 20):
        for s, policy in zip(sessions, policies, strict=True):
            t0 = time.perf_counter()
            for _ in range(20):
                with s.reserve(users, 0.1, query="q") as r:
                    r.charge(0.05)
            spent[policy] += time.perf_counter() - t0
    for s in sessions:
        s.close()
    base = spent["old"]
    for policy in policies:
        t = spent[policy] / (Q // 20 * 20)
        print(
            f"policy {policy!r:27}: {t * 1e3:6.2f} ms per query (reserve+charge of 10 users, "
            f"2 write transactions), {spent[policy] / base:.2f}x the old policy"
        )


def opening(d: str) -> None:
    path = os.path.join(d, "open.sqlite")
    rng = np.random.default_rng(0)  # which users each charge touches (benchmark data only)
    with Session(path, budget=gp.GP(eps=1e6)) as s:
        s.ledger.store.checkpoint, s.ledger.anchor = None, None  # build fast
        s.ledger.store.con.execute("PRAGMA synchronous=OFF")
        ids = np.array([f"user-{i:07d}" for i in range(U)], dtype=object)  # str ids: the slower
        with s.reserve(ids, 1.0, query="users") as r:  # case of the id hash
            r.charge(1.0)
        for i in range(C - 1):
            users = ids[rng.choice(U, size=3, replace=False)]
            with s.reserve(users, 0.01, query="c", units=False) as r:
                r.charge(0.01)
            if i and i % 20_000 == 0:
                print(f"  built {i} charges", flush=True)
    t0 = time.perf_counter()
    uid_bytes(ids.tolist())
    print(
        f"  encoding the {U} ids for their hash (part of loading them): "
        f"{(time.perf_counter() - t0) * 1e3:.0f} ms"
    )
    check = Ledger.check
    for label in ("first", "second"):
        Ledger.check = lambda self: None  # type: ignore[method-assign]  # the old open
        t0 = time.perf_counter()
        Session(path).close()
        t_old = time.perf_counter() - t0
        Ledger.check = check  # type: ignore[method-assign]
        t0 = time.perf_counter()
        s = Session(path)
        t_open = time.perf_counter() - t0
        t0 = time.perf_counter()
        s.ledger.check()
        t_check = time.perf_counter() - t0
        t0 = time.perf_counter()
        info = s.ledger.verify()
        t_verify = time.perf_counter() - t0
        s.close()
        print(
            f"open ({label}) of a ledger with {info['users']} users, {info['charges']} charges, "
            f"{info['audit_rows']} audit rows: Session() {t_open * 1e3:.0f} ms vs "
            f"{t_old * 1e3:.0f} ms without the check (ratio {t_open / t_old:.2f}x); the check "
            f"alone (users loaded) {t_check * 1e3:.1f} ms; verify() {t_verify * 1e3:.0f} ms"
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        small(d)
        bulk(d)
        opening(d)


if __name__ == "__main__":
    main()
