"""Where a ``gp_privatize`` / ``gp_in_region`` Arrow batch spends its time, stage by stage.

Wraps the functions one SQL batch goes through with timers (wall and the calling thread's CPU
time, inclusive of what they call) and runs the query of ``duckdb_threads.py`` on a fresh
session: prints, per batch, each stage's wall and CPU milliseconds and calls per batch, plus
the query's wall time and cores busy. The timers cost about a microsecond a call; the stages
nest (``udf`` holds everything), so a stage's own time is its line minus its children's.
A group-commit transaction's anchor update runs after the Ledger's lock (``Anchor.advance``),
outside ``txn COMMIT``; other writes update the anchor inside it.

    PYTHONPATH=. python benchmarks/speed/duckdb_stages.py --threads 1 --ledger file

Smallest run: ``--rows 100000``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import duckdb_threads as dt

_TOTALS: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
_LOCK = threading.Lock()


def probe(owner: Any, name: str, label: str | None = None) -> None:
    """Replace ``owner.name`` by a wrapper that times each call under ``label``."""
    fn = getattr(owner, name)
    label = label or name

    @functools.wraps(fn)
    def timed(*a: Any, **k: Any) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            dw, dc = time.perf_counter() - w, time.thread_time() - c
            with _LOCK:
                t = _TOTALS[label]
                t[0] += 1
                t[1] += dw
                t[2] += dc

    setattr(owner, name, timed)


def install() -> None:
    """Put the timers on the stages of a batch (the order is the report's)."""
    # import_module: the attribute gpframe.duckdb.privatize is the function, not the module
    pv = importlib.import_module("gpframe.duckdb.privatize")
    u = importlib.import_module("gpframe.duckdb.udf")
    lr = importlib.import_module("gpframe.ledger.run")
    qp = importlib.import_module("gpframe.queries.privatize")
    mech = importlib.import_module("gpframe.mechanisms")
    from gpframe.ledger import integrity, session, store
    from gpframe.ledger.group import GroupCommit

    make = pv._make_udf

    def made(reg: Any, mode: str) -> Any:
        f = make(reg, mode)
        holder = type("H", (), {"f": staticmethod(f)})
        probe(holder, "f", "udf (whole call)")
        return holder.f

    pv._make_udf = made
    for name in ("nulls", "to_numpy", "factorize_ids"):
        probe(u, name, f"udf.{name}")
    for name in ("_privatize_batch", "_validate_batch", "_units_of_sum"):
        probe(pv, name, f"privatize.{name}")
    probe(u, "charge_batch", "udf.charge_batch")
    probe(u, "run", "run.run")
    probe(lr, "_prepaid", "run._prepaid")
    probe(qp, "privatize_points", "queries.privatize_points")
    probe(mech, "gaussian_cgp", "mechanisms.gaussian_cgp")
    probe(session.Ledger, "reserve", "Ledger.reserve (incl. txn)")
    probe(session.Ledger, "_commit", "Ledger._commit (incl. txn)")
    probe(GroupCommit, "run", "GroupCommit.run")
    probe(session.Ledger, "_ensure", "  Ledger._ensure")
    probe(session.Ledger, "_gather", "  Ledger._gather")
    probe(session.Ledger, "_held", "  Ledger._held")
    probe(session.Ledger, "_update", "  Ledger._update")
    probe(session.Ledger, "_audit", "  Ledger._audit")
    probe(store.SqliteStore, "add_query", "  store.add_query")
    probe(store.SqliteStore, "add_reservation", "  store.add_reservation")
    probe(store.SqliteStore, "delete_reservation", "  store.delete_reservation")
    probe(store.SqliteStore, "add_charge", "  store.add_charge")
    probe(store.SqliteStore, "read_chunks", "  store.read_chunks")
    probe(store.SqliteStore, "write_chunks", "  store.write_chunks")
    probe(session._Txn, "__enter__", "  txn BEGIN")
    probe(session._Txn, "__exit__", "  txn COMMIT (+ anchor, ungrouped)")
    probe(integrity.Anchor, "advance", "  Anchor.advance")
    probe(store.SqliteStore, "_checkpoint", "    store._checkpoint")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ledger", choices=("file", "memory"), default="file")
    ap.add_argument("--query", choices=("privatize", "region"), default="privatize")
    a = ap.parse_args()
    warm = dt.points(20_000, 200)
    dt.sql(warm, None, 2, f"SELECT count(gp_privatize(user_id, x, y, {dt.RHO})) FROM pts", None)
    install()
    if a.query == "privatize":
        df = dt.points(a.rows, a.users)
        q = f"SELECT count(gp_privatize(user_id, x, y, {dt.RHO})) FROM pts"
    else:
        df = dt.points(a.rows, a.rows, seed=1)
        q = f"SELECT sum(gp_in_region(user_id, x, y, $w, {dt.RHO}, 10)::INT) FROM pts"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "l.sqlite") if a.ledger == "file" else None
        _TOTALS.clear()
        wall, cpu, txn, batches, ck = dt.sql(df, path, a.threads, q, None)
    print(f"{a.query}, {a.rows:,} rows, {a.ledger} ledger, threads={a.threads}: {wall:.3f} s, "
          f"{cpu / wall:.2f} cores busy, {batches} batches, {txn:.2f} txn/batch, {ck:.2f} "
          f"ckpt/batch, {1e3 * wall / batches:.3f} ms wall/batch, "
          f"{1e3 * cpu / batches:.3f} ms CPU/batch; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"  {'stage':34s} {'calls/b':>8s} {'wall ms/b':>10s} {'CPU ms/b':>10s}")
    for label, (n, w, c) in _TOTALS.items():
        print(f"  {label:34s} {n / batches:8.2f} {1e3 * w / batches:10.3f} "
              f"{1e3 * c / batches:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
