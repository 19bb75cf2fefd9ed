"""Charging torture for the privatize paths, Python (df.geopriv) and SQL (DuckDB, 4 threads).

Several processes privatize overlapping users against one ledger file: no user overspends,
``spent == Σ charges`` (``ledger.verify()``), and every released result has its committed charge.
A ``kill -9`` in the middle of a privatize loop never leaves a released result without a
committed charge, and the file passes the integrity check. Each child prints a result line only
after privatize returned (the values were in its hands); the parent checks those lines against
the ledger.
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

USERS = list(range(6))
#: one query charges each admitted user RHO (per="user" in Python; one point per user in SQL)
RHO = Fraction(1, 1000)
BUDGET = Fraction(1, 20)  # 50 queries per user: the processes together ask for more

WORKER = r"""
import sys, warnings
import numpy as np, pandas as pd
import gpframe as gp
from gpframe.ledger import Session
path, mode, n, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
warnings.simplefilter("ignore", gp.GpframeWarning)
users = list(range(6))
# each process starts at a different user, so the query user sets overlap but differ
start = sum(map(ord, tag)) % 6
mine = users[start:] + users[:start]
df = pd.DataFrame({"uid": mine[:4], "lon": [-37.05, -37.06, -37.07, -37.08],
                   "lat": [-10.91, -10.92, -10.93, -10.94]})
with Session(path) as s:
    if mode == "sql":
        import duckdb
        con = duckdb.connect()
        con.execute("SET threads = 4")
        # a query slower than 2 s (a loaded machine) would print DuckDB's progress bar on
        # stdout, where the parent reads the ACK lines
        con.execute("SET enable_progress_bar = false")
        reg = gp.duckdb.register(con, s)
        con.execute("CREATE TABLE t AS SELECT * FROM (VALUES " + ", ".join(
            f"({u}, {500000.0 + 10 * u}, {8.8e6 + u})" for u in mine[:4]) + ") v(uid, x, y)")
    for i in range(n):
        if mode == "py":
            out = df.geopriv(s, user="uid", lon="lon", lat="lat", crs="EPSG:4326").privatize(
                rho=0.001, progress=False)
            res = out.attrs["geopriv"]
            ok = out.geometry.notna() & ~out.geometry.is_empty  # refused rows: missing geometry
            rel = [int(u) for u, r in zip(df["uid"], ok) if r]
            print("ACK", res.query_id, *rel, flush=True)
        else:
            rows = con.sql("SELECT uid, gp_privatize(uid, x, y, 0.001) AS p FROM t").fetchall()
            rel = [int(u) for u, p in rows if p is not None]
            print("ACK", f"{tag}-{i}", *rel, flush=True)
"""


def _spawn(path, mode, n, tag):
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, path, mode, str(n), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _acks(text):
    """{query id: [users whose result was released]} from the children's result lines."""
    out = {}
    for line in text.splitlines():
        if line.startswith("ACK "):
            parts = line.split()
            out[parts[1]] = [int(u) for u in parts[2:]]
    return out


def _check(path, acks, mode):
    """The invariants, from a fresh Session on the file; returns a small figure dict."""
    with Session(path) as s:
        check = s.ledger.verify()  # spent == Σ charges, audit chain, SQLite integrity
        assert check["reservations"] == 0
        spent = s.spent_exact(USERS)
        released = {u: 0 for u in USERS}
        for rel in acks.values():
            for u in rel:
                released[u] += 1
        for u in USERS:
            assert spent[u] <= BUDGET, f"user {u} overspent: {spent[u]} > {BUDGET}"
            # every released result is paid for: at least RHO per released query
            assert spent[u] >= released[u] * RHO, (u, spent[u], released[u])
        if mode == "py":  # each acknowledged query id has its charge in the user's history
            for u in USERS:
                hist = set(s.history(u)["query_id"])
                for qid, rel in acks.items():
                    if u in rel:
                        assert qid in hist, f"query {qid} released user {u} without a charge"
        return {"charges": check["charges"], "released": sum(released.values()),
                "spent": {u: float(spent[u]) for u in USERS}}  # fmt: skip


def _concurrent(tmp_path, mode, procs, n):
    path = str(tmp_path / "ledger.sqlite")
    Session(path, budget=gp.CGP(rho=BUDGET)).close()
    t0 = time.perf_counter()
    ps = [_spawn(path, mode, n, f"p{k}") for k in range(procs)]
    acks = {}
    for p in ps:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-2000:]
        acks |= _acks(out)
    assert len(acks) == procs * n
    fig = _check(path, acks, mode)
    # the processes together ask for more than the budget: every user ends exactly at it
    # (each charge is exactly RHO and BUDGET is a multiple of it)
    asked = {u: sum(u in q for q in _asked(procs, n)) for u in USERS}
    for u in USERS:
        if asked[u] * RHO >= BUDGET:  # asked for more than the budget: it was used up exactly
            assert fig["spent"][u] == float(BUDGET), (u, fig["spent"][u])
    print(
        f"{mode}: {procs} procs x {n} queries in {time.perf_counter() - t0:.1f}s; {fig}; {asked=}"
    )
    return fig


def _asked(procs, n):
    """The user set of every query the children run (mirrors WORKER's rotation)."""
    out = []
    for k in range(procs):
        start = sum(map(ord, f"p{k}")) % 6
        mine = USERS[start:] + USERS[:start]
        out += [set(mine[:4])] * n
    return out


@pytest.mark.parametrize("mode", ["py", "sql"])
def test_concurrent_privatize_never_overspends_fast(tmp_path, mode):
    fig = _concurrent(tmp_path, mode, 3, 35)
    assert fig["released"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["py", "sql"])
def test_concurrent_privatize_never_overspends_heavy(tmp_path, mode):
    _concurrent(tmp_path, mode, 8, 200)


def _kill_loop(tmp_path, mode, kills):
    global BUDGET
    path = str(tmp_path / "ledger.sqlite")
    Session(path, budget=gp.CGP(rho=10**6)).close()  # never exhausted: keep them charging
    rnd = random.Random(4321)  # schedule of kill times only; no privacy randomness
    acks = {}
    for k in range(kills):
        p = _spawn(path, mode, 10**6, f"k{k}")
        first = p.stdout.readline()  # the child is in its privatize loop
        assert first.startswith("ACK"), p.stderr.read()[-2000:]
        time.sleep(rnd.random() * 0.6)
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate()  # reaps the child: its pid is dead for settle_stale()
        acks |= _acks(first + out)
    old, BUDGET = BUDGET, Fraction(10**6)
    try:
        fig = _check(path, acks, mode)
    finally:
        BUDGET = old
    print(f"{mode}: {kills} kill -9, {len(acks)} acknowledged queries; {fig}")
    return fig


@pytest.mark.parametrize("mode", ["py", "sql"])
def test_kill_9_mid_privatize_never_releases_uncharged_fast(tmp_path, mode):
    _kill_loop(tmp_path, mode, 2)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["py", "sql"])
def test_kill_9_mid_privatize_never_releases_uncharged_loop(tmp_path, mode):
    _kill_loop(tmp_path, mode, 20)
