"""DuckDB on several threads: SQL ÷ Python and the cores busy, before and after a change.

Every Arrow batch (up to 2,048 rows) of a SQL function reserves and charges on its own; on a
file ledger each write transaction ends with a synchronous commit (an fsync of the ``-wal``)
and, for a charge, an anchor update (one more fsync). The Ledger runs the reserves and charges
that queue up while another batch writes in one shared transaction (group commit,
``docs/sql.md``), and the store leaves the batches' checkpoints into the main file for later
(at most about one a second, ``docs/ledger.md``, "Durability and backups"). This script times,
in the same run and on the same data, ``after`` (as it is) against ``before``, which is
``--before checkpoint`` (default): every commit also checkpointed into the main file, as the
store did before (two more fsyncs, and one more for the ``-wal`` restart after it); or
``--before ungrouped``: every reserve and every charge its own transaction (as before group
commit, and a ``gp_privatize`` batch a reserve and then a charge).

* ``gp_privatize`` on ``--rows`` points (default 10⁶, ``--users`` users), file-backed ledgers
  (SQLite WAL, synchronous=FULL), ``threads=1, 2, 4``, against the accessor's
  ``privatize(per="point")`` on the same points and a file ledger;
* the same ``gp_privatize`` on in-memory ledgers at ``threads=1, 2`` (no fsync: the cores
  the batches' own work keeps busy);
* the relation helper ``gp.duckdb.privatize`` on the same points at ``threads=1, 2, 4`` (file
  ledgers): one batch, one reservation and one charge per query, its noise drawn in row ranges
  on the connection's threads;
* ``gp_in_region`` (``dist-elim``, 10 rounds) on ``--region-rows`` users with one point each
  (default 10⁵), ``threads=1, 2``, against the accessor's ``range_count``, and the relation
  helper ``gp.duckdb.range_count`` on the same users (one batch per region).

Each line is the best of ``--repeat`` interleaved runs (before, after, before, ...). It prints
the wall time, the cores busy (process CPU time ÷ wall time over the query: 1.0 is one core
all the time), SQL ÷ Python, the ledger's write transactions and checkpoints per batch, before
and after, and the load average.
DuckDB runs a table scan in parallel by row groups of 122,880 rows, so below that there is one
thread whatever ``threads=`` says. On a machine shared with other work the cores busy
are a lower bound, and the file-ledger lines are bound by the disk's fsync latency. Goals:
SQL ÷ Python ≤ 1.2× at threads=4 (gp_privatize) and for gp_in_region; ≥ 1.7 cores busy at
threads=2.

What bounds them: DuckDB calls a Python UDF once per vector of 2,048 rows (10⁶ rows are 489
calls; the size is fixed when DuckDB is compiled) and holds the GIL for the whole call except
where the Python code releases it. Every call must make its charge durable before it returns
its values, so one thread makes one durable commit per call (the Python path makes one per
query), and group commit can share a commit only among the calls in flight at once (at most
``threads``). On a file ledger a commit is now an fsync of the ``-wal`` plus, for a charge, the
anchor's fsync and rename (strace, 10⁶ rows, threads=1: 2.15 syncs per batch instead of 5.03
with a checkpoint per commit; the anchor is 1 of the 2.15, and its rename one more metadata
write); the anchor update runs after the Ledger's lock is released (before the batch
returns), so at threads >= 2 the next transaction's commit overlaps it. Per call
(``duckdb_stages.py``, 10⁶ rows, threads=1, file ledger, load ~1, before the cuts of issue
#19, which took 3-6% off a call's CPU): 2.31 ms wall, 1.94 ms CPU: the
``-wal`` commit 0.45 ms wall (0.26 CPU, kernel time of the write and fsync of ~17 pages, about
280 KB: three 32 KiB spent chunks for 10⁴ users, the charge's three 15 KB blobs, two audit
rows), the anchor update 0.49 ms wall (0.30 CPU), the transaction's Python (admission, chunks,
audit rows) 0.47 ms, the sampler 0.30 ms, the rest of ``privatize_points`` 0.15 ms, the
batch's checks, factorizing and Arrow conversion about 0.35 ms; on an in-memory ledger 1.31 ms
CPU a call. The Python path's whole query is 0.33 s, 0.68 ms per 2,048 points, so even with no
fsync at all a call costs twice that, and most of it holds the GIL (all but the sampler's
numba kernels, SQLite's own steps and the fsyncs): about 1 ms a call, 0.5 s per query
serialised whatever ``threads=`` says, which bounds SQL ÷ Python near 1.5x on any number of
cores. Reaching 1.2x needs fewer durable writes and fewer Python calls per row than one per
2,048-row vector: the relation helpers (``gp.duckdb.privatize``, ``gp.duckdb.range_count``)
release the fetched relation as one batch of the same code (one reservation and charge per
query), which the helper lines time. ``gp_in_region``
runs its 10 elimination rounds per batch, so 10 sampler calls per 2,048 rows where the Python
path makes 10 per query: about 2.2 times the Python path's CPU time at 10⁵ rows.

Smallest run: ``--rows 100000 --region-rows 5000 --repeat 1``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import duckdb
import numpy as np
import pandas as pd
import shapely

import gpframe as gp
import gpframe.duckdb.udf as udf
import gpframe.frame.accessor
from gpframe.duckdb import register
from gpframe.ledger import Session

RHO = 1e-4
CRS = "EPSG:32618"
DOMAIN = (-75.3, 40.4, -74.7, 40.9)  # UTM scale below 1 here: both paths run at scale 1
BOX = shapely.box(495_000, 4_495_000, 505_000, 4_505_000)


def points(n: int, users: int, seed: int = 0) -> pd.DataFrame:
    r = np.random.default_rng(seed)  # the true points only
    return pd.DataFrame(
        {
            "user_id": np.arange(n) % users,
            "x": 500_000 + r.uniform(-12e3, 12e3, n),
            "y": 4_500_000 + r.uniform(-12e3, 12e3, n),
        }
    )


def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall s, process CPU s) of ``fn()``: CPU time counts every thread of the process."""
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def ungrouped(session: Session) -> None:
    """Give every reserve and charge of ``session`` its own write transaction (no group commit)."""
    led = session.ledger
    udf.charge_batch = _unpaid  # gp_privatize reserves, then charges: two writes per batch

    def alone(fn):  # type: ignore[no-untyped-def]
        led._group.writes += 1
        led._group.transactions += 1
        with led._lock, led._write():
            return fn()

    led._group.run = alone  # type: ignore[method-assign]


_charge_batch = udf.charge_batch


def _unpaid(*args, **kwargs):  # type: ignore[no-untyped-def]
    return _charge_batch(*args, **{**kwargs, "prepaid": False})


def connected(df: pd.DataFrame, path: str | None, threads: int) -> tuple[Session, object]:
    """A fresh session and a registered connection at ``threads`` holding ``df`` as ``pts``."""
    s = Session(path, budget=gp.CGP(rho=1e3))
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    register(con, s, crs=CRS, domain=DOMAIN)
    con.register("pts_in", df)
    con.execute("CREATE TABLE pts AS SELECT * FROM pts_in")
    return s, con


def sql(df: pd.DataFrame, path: str | None, threads: int, q: str,
        old: str | None) -> tuple[float, float, float, int, float]:  # fmt: skip
    """(wall s, CPU s, write transactions per batch, batches, checkpoints per batch) of the query
    on a fresh session; ``old``: None (as it is), "ungrouped" or "checkpoint" (see main)."""
    s, con = connected(df, path, threads)
    if old == "ungrouped":
        ungrouped(s)
    elif old == "checkpoint":
        s.ledger.store.checkpoint_interval = 0.0  # every commit checkpointed, deferring or not
    g, st = s.ledger._group, s.ledger.store
    t0, c0 = g.transactions, st.checkpoints
    try:
        wall, cpu = timed(lambda: con.execute(q, {"w": shapely.to_wkb(BOX)} if "$w" in q else {})
                          .fetchall())  # fmt: skip
        ck = st.checkpoints - c0
        batches = [row[2] for row in s.ledger.store.audit()].count("reserve")
    finally:
        udf.charge_batch = _charge_batch
        s.close()
    b = max(batches, 1)
    return wall, cpu, (g.transactions - t0) / b, batches, ck / b


def python_privatize(df: pd.DataFrame, path: str | None) -> float:
    s = Session(path, budget=gp.CGP(rho=1e3))
    b = df.geopriv(s, user="user_id", x="x", y="y", crs=CRS, domain=DOMAIN)
    wall, _ = timed(lambda: b.privatize(rho=RHO, per="point", progress=False))
    s.close()
    return wall


def python_region(df: pd.DataFrame, path: str | None) -> float:
    s = Session(path, budget=gp.CGP(rho=1e3))
    b = df.geopriv(s, user="user_id", x="x", y="y", crs=CRS, domain=DOMAIN)
    wall, _ = timed(lambda: b.range_count(BOX, rho=RHO, rounds=10, progress=False))
    s.close()
    return wall


def helper(df: pd.DataFrame, path: str | None, threads: int, op: str) -> tuple[float, float]:
    """(wall s, CPU s) of a relation helper on a fresh session: ``gp.duckdb.privatize`` on
    every row, or ``gp.duckdb.range_count`` (one point per user); one batch per query."""
    s, con = connected(df, path, threads)
    cols = {"user": "user_id", "x": "x", "y": "y", "rho": RHO}
    if op == "privatize":
        call = lambda: gp.duckdb.privatize(con, "SELECT * FROM pts", **cols)  # noqa: E731
    else:
        call = lambda: gp.duckdb.range_count(con, "SELECT * FROM pts", BOX, rounds=10, **cols)  # noqa: E731
    try:
        return timed(call)
    finally:
        s.close()


def helper_line(name: str, threads: int, py: float, got: tuple[float, float]) -> str:
    wall, cpu = got
    return (
        f"{name} threads={threads}: {wall:.2f} s, {cpu / wall:.2f} cores busy, SQL/Python "
        f"{wall / py:.2f}x (Python {py:.2f} s, load {os.getloadavg()[0]:.1f})"
    )


def line(name: str, threads: int, py: float, before: tuple, after: tuple) -> str:
    (wb, cb, tb, _, kb), (wa, ca, ta, na, ka) = before, after
    return (
        f"{name} threads={threads}: after {wa:.2f} s, {ca / wa:.2f} cores busy, SQL/Python "
        f"{wa / py:.2f}x, {ta:.2f} txn/batch, {ka:.2f} ckpt/batch ({na} batches) | before "
        f"{wb:.2f} s, {cb / wb:.2f} cores busy, SQL/Python {wb / py:.2f}x, {tb:.2f} txn/batch, "
        f"{kb:.2f} ckpt/batch | before/after {wb / wa:.2f}x (Python {py:.2f} s, load "
        f"{os.getloadavg()[0]:.1f})"
    )


def pair(df: pd.DataFrame, path, threads: int, q: str, repeat: int,  # type: ignore[no-untyped-def]
         old: str):  # fmt: skip
    """Best (least wall time) of ``repeat`` interleaved runs, before and after."""
    before, after = [], []
    for _ in range(repeat):
        before.append(sql(df, path(), threads, q, old))
        after.append(sql(df, path(), threads, q, None))
    return min(before), min(after)


BEFORE = {
    "checkpoint": "group commit, every commit checkpointed into the main file (2 more fsyncs)",
    "ungrouped": "a transaction per reserve and per charge (no group commit)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="gp_privatize rows")
    ap.add_argument("--users", type=int, default=10_000, help="gp_privatize users")
    ap.add_argument("--region-rows", type=int, default=100_000, help="gp_in_region users")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per line")
    ap.add_argument("--before", choices=("checkpoint", "ungrouped"), default="checkpoint",
                    help="what 'before' times: a checkpoint after every commit (the store before "
                         "deferred checkpoints), or a transaction per write (before group "
                         "commit)")  # fmt: skip
    a = ap.parse_args()
    print(f"before = {BEFORE[a.before]}; load average {os.getloadavg()}")
    warm = points(20_000, 200)
    python_privatize(warm, None)
    sql(warm, None, 2, f"SELECT count(gp_privatize(user_id, x, y, {RHO})) FROM pts", None)
    df = points(a.rows, a.users)
    q = f"SELECT count(gp_privatize(user_id, x, y, {RHO})) FROM pts"
    with tempfile.TemporaryDirectory() as d:
        n = iter(range(10**6))

        def path() -> str:
            return os.path.join(d, f"l{next(n)}.sqlite")

        py = min(python_privatize(df, path()) for _ in range(a.repeat))
        print(f"gp_privatize, {a.rows:,} rows, {a.users:,} users, file ledgers:")
        for t in (1, 2, 4):
            print("  " + line("gp_privatize", t, py, *pair(df, path, t, q, a.repeat, a.before)))
        py = min(python_privatize(df, None) for _ in range(a.repeat))
        print("gp_privatize, in-memory ledgers (no fsync: the cores the noise itself keeps busy):")
        for t in (1, 2):
            got = pair(df, lambda: None, t, q, a.repeat, a.before)
            print("  " + line("gp_privatize", t, py, *got))
        py = min(python_privatize(df, path()) for _ in range(a.repeat))
        print("gp.duckdb.privatize (the relation helper: one batch, one charge per query), "
              "file ledgers:")  # fmt: skip
        for t in (1, 2, 4):
            got = min(helper(df, path(), t, "privatize") for _ in range(a.repeat))
            print("  " + helper_line("gp.duckdb.privatize", t, py, got))
        reg = points(a.region_rows, a.region_rows, seed=1)  # one point per user
        qr = f"SELECT sum(gp_in_region(user_id, x, y, $w, {RHO}, 10)::INT) FROM pts"
        py = min(python_region(reg, path()) for _ in range(a.repeat))
        print(f"gp_in_region, {a.region_rows:,} users (dist-elim, 10 rounds), file ledgers:")
        for t in (1, 2):
            print("  " + line("gp_in_region", t, py, *pair(reg, path, t, qr, a.repeat, a.before)))
        print("gp.duckdb.range_count (the relation helper: one batch per region), file ledgers:")
        for t in (1, 2):
            got = min(helper(reg, path(), t, "range_count") for _ in range(a.repeat))
            print("  " + helper_line("gp.duckdb.range_count", t, py, got))


if __name__ == "__main__":
    main()
