"""Ledger bulk throughput: reserve + charge of 10**6 users vs a bare bulk upsert of 10**6 rows.

Both run on a file-backed SQLite store (WAL, synchronous=FULL) in the same run; the users
already exist (a second query), which is the steady state of a session.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time

import numpy as np

import gpframe as gp
from gpframe.ledger import Session

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10**6


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        users = np.arange(N, dtype=np.int64)
        alloc = np.full(N, 1e-6)
        with Session(os.path.join(d, "ledger.sqlite"), budget=gp.CGP(rho=1e-4)) as s:
            # warm-up: creates the users (first sight) and one charge
            with s.reserve(users, alloc, query="warmup") as r:
                r.charge(alloc / 2)
            t0 = time.perf_counter()
            with s.reserve(users, alloc, query="bench") as r:
                assert r.n_admitted == N
                r.charge(alloc / 2)
            t_ledger = time.perf_counter() - t0

        # baseline: bare bulk upsert of the same 10**6 (user, amount) rows into a SQLite file
        # with the same settings
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
        for label in ("warmup", "timed"):
            t0 = time.perf_counter()
            con.execute("BEGIN IMMEDIATE")
            con.executemany(sql, zip(users.tolist(), amounts.tolist(), strict=True))
            con.execute("COMMIT")
            t_bare = time.perf_counter() - t0
            del label
        con.close()
    print(
        f"ledger reserve+charge vs bare bulk upsert: {N / 1e6:.1f}M users, "
        f"{t_ledger:.2f} s vs {t_bare:.2f} s, ratio {t_ledger / t_bare:.2f}x"
    )


if __name__ == "__main__":
    main()
