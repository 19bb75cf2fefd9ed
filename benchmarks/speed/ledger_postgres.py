"""PostgreSQL ledger vs SQLite ledger, in one run: bulk reserve + charge, 8 concurrent clients.

1. Reserve + charge of N users (default 10**6) in one query: on a fresh ledger (every user new)
   and again on the same ledger (every user known), best of ``--repeat``; an SQLite file
   (WAL, synchronous=FULL, checkpoint after each write) against a PostgreSQL database on a
   private local server started by this script (``fsync=on``, Unix socket). Goal: PostgreSQL
   <= 3x SQLite and <= 5 s.
2. Throughput of ``--procs`` client processes (default 8), each running ``--queries`` small
   queries (reserve + charge of 5 shared users), all on one ledger, timed from a common start:
   reservations per second on each store, and the ratio.

Run from the repository root (needs the server programs: Debian's ``postgresql`` package):

    PYTHONPATH=. python benchmarks/speed/ledger_postgres.py
    PYTHONPATH=. python benchmarks/speed/ledger_postgres.py --users 20000 --queries 50 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import gpframe as gp
from gpframe.testing_postgres import TempPostgres

WORKER = r"""
import sys, time
from gpframe.ledger import Session
path, n = sys.argv[1], int(sys.argv[2])
users = [1, 2, 3, 4, 5]
with Session(path) as s:
    print("READY", flush=True)
    sys.stdin.readline()
    t0 = time.time()
    for i in range(n):
        with s.reserve(users, 1e-6, query="bench") as r:
            r.charge(1e-6)
    print("DONE", t0, time.time(), flush=True)
"""


def bulk(path: str, n: int) -> tuple[float, float]:
    """Seconds of reserve + charge of n users: on a fresh ledger, then again on it."""
    users = np.arange(n, dtype=np.int64)
    out = []
    with gp.Session(path, budget=gp.CGP(rho=1.0)) as s:
        for _ in range(2):
            t = time.perf_counter()
            with s.reserve(users, 1e-4, query="bulk") as r:
                r.charge(1e-4)
            out.append(time.perf_counter() - t)
    return out[0], out[1]


def concurrent(path: str, procs: int, queries: int) -> float:
    """Reservations per second of ``procs`` processes on one ledger (common start)."""
    gp.Session(path, budget=gp.CGP(rho=1e6)).close()
    here = [os.getcwd(), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in here if p))
    ps = [
        subprocess.Popen([sys.executable, "-c", WORKER, path, str(queries)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(procs)
    ]  # fmt: skip
    for p in ps:
        assert p.stdout.readline().strip() == "READY"
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    spans = []
    for p in ps:
        out, _ = p.communicate(timeout=3600)
        assert p.returncode == 0
        _, t0, t1 = out.split()[-3:]
        spans.append((float(t0), float(t1)))
    wall = max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)
    return procs * queries / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=10**6, help="users of the bulk query")
    ap.add_argument("--repeat", type=int, default=3, help="bulk runs per store (best is kept)")
    ap.add_argument("--procs", type=int, default=8, help="concurrent client processes")
    ap.add_argument("--queries", type=int, default=200, help="queries per client process")
    a = ap.parse_args()
    with TempPostgres(fsync=True) as pg, tempfile.TemporaryDirectory() as tmp:
        print(f"PostgreSQL server {pg.bin}; SQLite files in {tmp}; {os.cpu_count()} CPUs")
        res: dict[str, list[tuple[float, float]]] = {"sqlite": [], "postgres": []}
        for i in range(a.repeat):  # interleaved: a load spike hits both stores alike
            res["sqlite"].append(bulk(os.path.join(tmp, f"bulk{i}.sqlite"), a.users))
            res["postgres"].append(bulk(pg.new_database(), a.users))
        best = {k: (min(x for x, _ in v), min(y for _, y in v)) for k, v in res.items()}
        for j, what in enumerate(("new users", "known users")):
            sq, pq = best["sqlite"][j], best["postgres"][j]
            ok = "OK" if pq <= 3 * sq and pq <= 5 else "SLOW"
            print(
                f"reserve+charge {a.users:,} users ({what}): SQLite {sq:.2f} s, PostgreSQL "
                f"{pq:.2f} s, ratio PostgreSQL/SQLite {pq / sq:.2f} (goal <= 3 and <= 5 s) {ok}"
            )
        sq = concurrent(os.path.join(tmp, "conc.sqlite"), a.procs, a.queries)
        pq = concurrent(pg.new_database(), a.procs, a.queries)
        print(
            f"{a.procs} client processes x {a.queries} queries: SQLite {sq:.0f} reservations/s, "
            f"PostgreSQL {pq:.0f} reservations/s, ratio PostgreSQL/SQLite {pq / sq:.2f}"
        )


if __name__ == "__main__":
    main()
