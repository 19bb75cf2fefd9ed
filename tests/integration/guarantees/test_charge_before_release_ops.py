"""Charging torture for every operation's charging path, Python (df.geopriv) and SQL (DuckDB).

``test_charge_before_release.py`` does this for ``privatize``; this module extends it to
range_count, kde, kde_raster, knn, convex_hull, nearest_users and grid_stats (Python, through the
accessor)
and to gp_in_region, gp_kde_contribution, gp_knn, gp_convex_hull and gp.duckdb.clip_user +
sql/grid_stats.sql (DuckDB with ``SET threads = 4``; tables large enough for several batches).

Pattern (DESIGN.md §4; adaptive-budgeting.md §2.6): worker processes run queries on one shared
ledger file and append a result line to their own log (flushed and fsync'ed) only **after** a
call returned, i.e. once the values were in their hands. The parent runs them concurrently or
kills them with SIGKILL at random times, then opens the file afresh (which settles the killed
workers' open reservations) and checks:

* every logged Python result has its committed charge (its query id is a charge id of the
  ledger) covering each charged user's logged amount: no release without a committed charge, no
  lost acknowledged charge;
* per user and notion, ``spent >= Σ`` charges of the logged results (SQL: rows released × the
  least a released row can be charged), and ``spent <= budget`` (budgets are small enough that
  the workers ask for more and refusals happen);
* ``ledger.verify()`` passes (SQLite integrity, audit chain, spent == Σ charges) and no
  reservation is left open.

No operation takes a ``charge_id`` (only ``Session.reserve`` does; checked below), so idempotent
replays are exercised at the ledger level in ``tests/integration/ledger/test_store.py`` and for
the reservation that every operation makes, here, by replaying a committed operation charge (its
query id).

The default tier runs 2 processes and 2 kill rounds on three operations per path (one worker
runs both paths: the interpreter start is most of the cost), chosen so that each charging code
path runs once; ``slow`` runs every operation, 8 processes × ≥ 1,000 reservations each, 10 kill
rounds, 3 seeds. Refused calls are logged too (``refused``), and each op must have some.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import gpframe as gp
from gpframe.ledger import Session

PY_OPS = ("range_count", "kde", "kde_raster", "knn", "convex_hull", "nearest_users", "grid_stats")
SQL_OPS = ("gp_in_region", "gp_kde_contribution", "gp_knn", "gp_convex_hull", "grid_sql")
#: one per charging code path (range/kde frames: amounts with savings; knn_frame: kind-converted
#: amounts; grid: central notion, all-or-none UDF): the default tier runs these
FAST_PY = ("range_count", "knn", "grid_stats")
FAST_SQL = ("gp_in_region", "gp_knn", "grid_sql")

RHO = 1e-4  # metric amount of one query per user (CGP)
EPS = 0.5  # grid: central ε per statistic; a kept user pays 2·EPS per kept cell
ROUNDS_SQL = 2  # elimination rounds of the SQL UDFs: a released row pays at least RHO/3
N_PY = 8  # users of the Python frames
N_SQL = 2500  # rows of the SQL range/kde table: two Arrow batches, so several threads charge
N_SQL_LISTS = 300  # users of the SQL knn/hull table
N_GRID = 40  # users of the SQL grid table


WORKER = r"""
import json, os, sys, time, warnings
from pathlib import Path
import duckdb, numpy as np, pandas as pd, shapely
import gpframe as gp, gpframe.frame.accessor
from gpframe.ledger import Session

path, log, ops, n = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
# each worker starts at another op, so that every op gets early turns before budgets run out
_k = int("".join(ch for ch in sys.argv[5] if ch.isdigit()) or 0) % len(ops)
ops = ops[_k:] + ops[:_k]
RHO, EPS, ROUNDS_SQL = float(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
N_PY, N_SQL, N_LISTS, N_GRID = map(int, sys.argv[9:13])
warnings.simplefilter("ignore", gp.GpframeWarning)
CRS = "EPSG:32618"
u = np.arange(N_PY)
one = pd.DataFrame({"uid": u, "x": 500_000 + 150.0 * u, "y": 4_500_000 + 90.0 * u})
many = pd.DataFrame({
    "uid": np.repeat(u, 3),
    "x": 500_000 + 150.0 * np.repeat(u, 3) + np.tile([0.0, 40.0, -30.0], N_PY),
    "y": 4_500_000 + np.tile([0.0, 35.0, 60.0], N_PY),
    "speed": np.tile([3.0, 12.5, 27.0], N_PY),
})
BOX = shapely.box(499_900, 4_499_900, 500_700, 4_500_500)
P = (500_300.0, 4_500_200.0)
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def ack(rec):
    # only after the call returned: the values are in our hands; durable before going on
    os.write(fd, (json.dumps(rec) + "\n").encode())
    os.fsync(fd)


def result_of(out):
    res = out if hasattr(out, "query_id") else out.attrs["geopriv"]
    return res if hasattr(res, "query_id") else res.result


def per_user(s, res):
    # a central result publishes no per-user charges: the curator reads them from the ledger
    if res.charges is not None:
        return res.charges
    rep = s.report(query_id=res.query_id)
    return pd.Series(rep["charge"].to_numpy(), index=rep["user"].to_numpy())


with Session(path) as s:
    b1 = one.geopriv(s, user="uid", x="x", y="y", crs=CRS)
    bm = many.geopriv(s, user="uid", x="x", y="y", crs=CRS)
    py = {
        "range_count": lambda: b1.range_count(BOX, rho=RHO, rounds=3),
        "kde": lambda: b1.kde(shapely.Point(*P), bandwidth_m=300, rho=RHO, rounds=3),
        "kde_raster": lambda: b1.kde_raster(
            bandwidth_m=300, cell_m=400, bounds=(499_500, 4_499_500, 501_700, 4_501_100), rho=RHO),
        "knn": lambda: bm.knn(P, 2, rho=RHO),
        "convex_hull": lambda: bm.convex_hull(rho=RHO),
        "nearest_users": lambda: b1.nearest_users(P, 3, rho=RHO),
        "grid_stats": lambda: bm.grid_stats(value="speed", bounds=(0, 30), epsilon=EPS, cells=4,
                                            occupancy="public"),
    }
    con = None
    if any(op not in py for op in ops):
        con = duckdb.connect()
        con.execute("SET threads = 4")
        gp.duckdb.register(con, s)
        i = np.arange(N_SQL)
        con.register("one_df", pd.DataFrame({
            "uid": i, "x": 500_000 + (i % 50) * 40.0, "y": 4_500_000 + (i // 50) * 40.0}))
        con.execute("CREATE TABLE one AS SELECT * FROM one_df")
        j = np.arange(N_LISTS)
        con.register("pts_df", pd.DataFrame({
            "uid": np.repeat(j, 3), "ts": np.tile(np.arange(3), N_LISTS),
            "x": 500_000 + np.repeat(j, 3) * 10.0 + np.tile([0.0, 40.0, -30.0], N_LISTS),
            "y": 4_500_000 + np.tile([0.0, 35.0, 60.0], N_LISTS)}))
        con.execute("CREATE TABLE tuples AS SELECT uid, list(x ORDER BY ts) AS xs, "
                    "list(y ORDER BY ts) AS ys FROM pts_df GROUP BY uid")
        g = np.arange(N_GRID)
        con.register("grid_df", pd.DataFrame({
            "vessel": np.repeat(g, 4),
            "cell": np.tile([1, 2, 2, 3], N_GRID) + (np.repeat(g, 4) % 2),
            "speed": np.tile([3.0, 12.5, 27.0, 8.0], N_GRID)}))
        con.execute("CREATE TABLE gpings AS SELECT * FROM grid_df")
        grid_sql = (gp.duckdb.SQL_DIR / "grid_stats.sql").read_text()
    W = shapely.to_wkb(BOX)
    sqls = {
        "gp_in_region": (
            f"SELECT uid, gp_in_region(uid, x, y, $w, {RHO}, {ROUNDS_SQL}, {N_SQL}) FROM one",
            {"w": W}),
        "gp_kde_contribution": (
            f"SELECT uid, gp_kde_contribution(uid, x, y, {P[0]}, {P[1]}, 300.0, {RHO}, "
            f"{ROUNDS_SQL}, {N_SQL}) FROM one", None),
        "gp_knn": (f"SELECT uid, gp_knn(uid, xs, ys, {P[0]}, {P[1]}, 2, {RHO}) FROM tuples", None),
        "gp_convex_hull": (f"SELECT uid, gp_convex_hull(uid, xs, ys, {RHO}) FROM tuples", None),
    }
    for it in range(n):
        for op in ops:
            if op in py:
                try:
                    res = result_of(py[op]())
                except gp.GpframeError as exc:
                    # too few users admitted: refused before anything was drawn or charged
                    if not isinstance(exc, gp.BudgetExceededError):
                        raise
                    ack({"op": op, "refused": type(exc).__name__})
                    continue
                ch = {str(k): float(v) for k, v in per_user(s, res).items() if float(v) > 0}
                ack({"op": op, "qid": res.query_id, "notion": res.notion, "charges": ch})
            elif op == "grid_sql":
                try:
                    plan = gp.duckdb.clip_user(con, "gpings", user="vessel", cell="cell",
                                               value="speed", bounds=(0, 30), epsilon=EPS,
                                               occupancy="public")
                    rows = con.sql(grid_sql).fetchall()
                except (duckdb.Error, gp.GpframeError) as exc:
                    # a budget spent since planning refuses the whole batch (nothing charged)
                    if "budget" not in str(exc) and "admit" not in str(exc):
                        raise
                    ack({"op": op, "refused": type(exc).__name__})
                    continue
                occ = plan.occupancy
                done = {c for c, _n, mean, *_ in rows if mean is not None}
                paid = {}
                for uu, jj, r in zip(occ.u.tolist(), occ.j.tolist(), plan.r.tolist()):
                    if r > 0 and occ.cells[jj] in done:
                        key = str(occ.users[uu])
                        paid[key] = paid.get(key, 0) + 1
                ack({"op": op, "sql": True, "notion": "central", "per_row": 2 * EPS,
                     "rows": paid})
            else:
                q, prm = sqls[op]
                rows = con.execute(q, prm).fetchall() if prm else con.sql(q).fetchall()
                rel = {}
                for uu, v in rows:
                    if v is not None:
                        rel[str(uu)] = rel.get(str(uu), 0) + 1
                least = RHO if op in ("gp_knn", "gp_convex_hull") else RHO / (2**ROUNDS_SQL - 1)
                ack({"op": op, "sql": True, "notion": "metric", "per_row": least, "rows": rel})
os.close(fd)
"""


def _spawn(path: str, log: Path, ops, n: int, tag: str) -> subprocess.Popen:
    args = [path, str(log), ",".join(ops), str(n), tag, repr(RHO), repr(EPS), str(ROUNDS_SQL),
            str(N_PY), str(N_SQL), str(N_SQL_LISTS), str(N_GRID)]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_log(log: Path) -> list[dict]:
    """The complete result lines of a worker's log (a kill may cut the last one: not acked)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().split("\n")[:-1]:  # the part after the last newline is cut
        out.append(json.loads(line))
    return out


def _new_ledger(path: str, metric: float, central: float, tight: dict | None = None) -> None:
    with Session(path, budget=gp.CGP(rho=metric), central=gp.DP(epsilon=central)) as s:
        for users, budget in (tight or {}).items():
            s.set_budget(list(users), budget)


def _key(u: object) -> str:
    return str(u)


def _check(path: str, acks: list[dict]) -> dict:
    """The invariants (module doc), from a fresh Session on the file; returns a figure dict."""
    with Session(path) as s:  # opening settles the reservations of killed workers, in full
        check = s.ledger.verify()  # SQLite integrity, audit chain, spent == Σ charges
        assert check["reservations"] == 0
        led = s.ledger
        uid = {n: led._index for n in ("metric", "central")}
        committed: dict[str, tuple[str, dict[str, float]]] = {}
        with led._lock, led._read():
            for c in led.store.charges():
                lu = led.units[c.notion]
                users = uid[c.notion][c.idx]
                committed[c.charge_id] = (
                    c.notion,
                    {
                        _key(k): float(lu.to_fraction(int(a)))
                        for k, a in zip(users, c.amount, strict=True)
                    },
                )
        report = s.report()
        state = {
            n: {
                _key(u): (sp, b)
                for u, sp, b in zip(g["user"], g["spent"], g["budget"], strict=True)
            }
            for n, g in report.groupby("notion")
        }
        # (1) every logged Python result has its committed charge
        need: dict[str, dict[str, float]] = {"metric": {}, "central": {}}
        n_py = n_sql = n_ref = 0
        for a in acks:
            if a.get("refused"):  # refused as a whole before any noise: nothing released
                n_ref += 1
                continue
            if a.get("sql"):
                n_sql += 1
                for k, rows in a["rows"].items():
                    need[a["notion"]][k] = need[a["notion"]].get(k, 0.0) + rows * a["per_row"]
                continue
            n_py += 1
            qid = a["qid"]
            assert qid in committed, f"{a['op']} result {qid} was released without a charge"
            notion, amounts = committed[qid]
            assert notion == a["notion"], (a["op"], notion)
            for k, v in a["charges"].items():
                assert amounts.get(k, 0.0) >= v * (1 - 1e-9), (a["op"], qid, k, amounts.get(k), v)
                need[notion][k] = need[notion].get(k, 0.0) + v
        # (2) per user: spent covers every logged release and never exceeds the budget
        n_users = 0
        for notion, st in state.items():
            for k, (sp, b) in st.items():
                n_users += 1
                assert sp <= b, f"{notion} user {k} overspent: {sp} > {b}"
                # SQL bounds are nominal: elimination parts are rounded *down* to the ledger unit
                # (spec §4.6 [G]), so a row may pay a unit less; a missing row is ~1e-3 off
                assert sp >= need[notion].get(k, 0.0) * (1 - 1e-6), (notion, k, sp, need[notion][k])
            missing = set(need[notion]) - set(st)
            assert not missing, f"{notion} users released but unknown to the ledger: {missing}"
        return {"charges": check["charges"], "py_results": n_py, "sql_results": n_sql,
                "refused_calls": n_ref, "users": n_users}  # fmt: skip


def _run(tmp_path: Path, ops, procs: int, n: int, *, metric: float, central: float, tight=None):
    """Run ``procs`` workers to completion; return (acks, figures)."""
    path = str(tmp_path / "ledger.sqlite")
    _new_ledger(path, metric, central, tight)
    logs = [tmp_path / f"w{k}.log" for k in range(procs)]
    t0 = time.perf_counter()
    ps = [_spawn(path, logs[k], ops, n, f"p{k}") for k in range(procs)]
    errs = [p.communicate(timeout=1800)[1] for p in ps]  # reap all before asserting
    for p, err in zip(ps, errs, strict=True):
        assert p.returncode == 0, err[-3000:]
    acks = [a for log in logs for a in _read_log(log)]
    fig = _check(path, acks)
    fig["seconds"] = round(time.perf_counter() - t0, 1)
    return acks, fig


def _refusals(acks, ops) -> dict[str, int]:
    """Per op: calls in which some queried user was left out (refused for budget), counting
    calls refused as a whole (e.g. nearest_users when fewer than k users can pay)."""
    full = {"range_count": N_PY, "kde": N_PY, "kde_raster": N_PY, "knn": N_PY,
            "convex_hull": N_PY, "nearest_users": N_PY, "grid_stats": N_PY,
            "gp_in_region": N_SQL, "gp_kde_contribution": N_SQL, "gp_knn": N_SQL_LISTS,
            "gp_convex_hull": N_SQL_LISTS, "grid_sql": N_GRID}  # fmt: skip
    out = dict.fromkeys(ops, 0)
    for a in acks:
        if a.get("refused"):
            out[a["op"]] += 1
            continue
        got = len(a["rows"] if a.get("sql") else a["charges"])
        out[a["op"]] += got < full[a["op"]]
    return out


# ---------------------------------------------------------------------------------------------
# concurrency: the workers together ask for more than the budgets


def _concurrent(tmp_path, ops, procs, n):
    # metric: 8 full queries per user; central: 4 grid queries (3 kept cells each): far less
    # than procs × n asks for
    acks, fig = _run(tmp_path, ops, procs, n, metric=8 * RHO, central=12 * EPS)
    refused = _refusals(acks, ops)
    print(f"concurrent {procs} procs x {n} x {ops}: {fig}; results with refusals: {refused}")
    for op in ops:  # every operation did release something, and was refused at the end
        assert any(a["op"] == op and not a.get("refused") for a in acks), op
        assert refused[op] > 0, (op, refused)
    return fig


def test_concurrent_ops_never_overspend_fast(tmp_path):
    # one worker runs both paths: the interpreter start (imports) is most of the cost here
    _concurrent(tmp_path, FAST_PY + FAST_SQL, 2, 5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ops", [PY_OPS, SQL_OPS], ids=["py", "sql"])
def test_concurrent_ops_never_overspend_heavy(tmp_path, ops, seed):
    # 8 processes x >= 1,000 reservations each (most of them refused: the budgets cover ~8
    # queries); the seed varies how far each worker goes (n) and so the interleaving
    per_iter = len(ops) + 2 * (ops is SQL_OPS)  # gp_in_region / gp_kde_...: 2 batches each
    _concurrent(tmp_path, ops, 8, -(-1000 // per_iter) + 7 * seed)


# ---------------------------------------------------------------------------------------------
# kill -9 at random times: no release without a committed charge, integrity intact


def _wait_acks(p: subprocess.Popen, log: Path, lines: int, timeout: float = 300.0) -> None:
    """Wait until the worker logged ``lines`` results (one per op: every path has run)."""
    t0 = time.monotonic()
    while not (log.exists() and log.read_bytes().count(b"\n") >= lines):
        if p.poll() is not None:
            raise AssertionError("worker exited before its first results")
        if time.monotonic() - t0 > timeout:
            raise AssertionError("worker acknowledged nothing in time")
        time.sleep(0.02)


def _kill_loop(tmp_path, ops, kills, seed):
    path = str(tmp_path / "ledger.sqlite")
    # users 0-2 (and their SQL namesakes) have tiny budgets: they are refused after a few
    # queries while the others keep charging until the kill
    tight = {(0, 1, 2): gp.CGP(rho=5 * RHO), (0, 1): gp.DP(epsilon=4 * EPS)}
    _new_ledger(path, 10**3, 10**6, tight)
    rnd = random.Random(seed)  # schedule of kill times only; no privacy randomness
    acks = []
    t0 = time.perf_counter()
    for k in range(kills):
        log = tmp_path / f"k{k}.log"
        p = _spawn(path, log, ops, 10**6, f"k{k}")
        try:
            _wait_acks(p, log, len(ops))  # the worker is in its query loop, past every op
            time.sleep(rnd.random() * 0.8)
        finally:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            _, err = p.communicate()  # reaps the worker: its pid is dead for settle_stale()
        assert p.returncode == -signal.SIGKILL, err[-3000:]
        acks += _read_log(log)
    fig = _check(path, acks)
    fig["seconds"] = round(time.perf_counter() - t0, 1)
    with Session(path, readonly=True) as s:
        for u in (0, 1, 2):  # the tight users were refused, never overspent
            assert s.spent_exact([u]).iloc[0] <= Fraction(5 * RHO).limit_denominator(10**9)
    print(f"kill -9 x {kills} on {ops} (seed {seed}): {len(acks)} acknowledged results; {fig}")
    return fig


def test_kill_9_mid_ops_never_releases_uncharged_fast(tmp_path):
    _kill_loop(tmp_path, FAST_PY + FAST_SQL, 2, 99)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("ops", [PY_OPS, SQL_OPS], ids=["py", "sql"])
def test_kill_9_mid_ops_never_releases_uncharged_loop(tmp_path, ops, seed):
    _kill_loop(tmp_path, ops, 10, seed)


# ---------------------------------------------------------------------------------------------
# idempotent replays


def test_no_operation_takes_a_charge_id():
    """Replays are a ledger-level API: if an operation grows ``charge_id``, test it here."""
    from gpframe.frame.accessor import GeoPriv

    for name in (*PY_OPS, "privatize"):
        assert "charge_id" not in inspect.signature(getattr(GeoPriv, name)).parameters, name


@pytest.mark.parametrize("op", FAST_PY)
def test_replaying_an_operations_committed_charge_admits_nobody(tmp_path, op):
    """The reservation an operation committed, replayed under its id: no debit, nobody admitted.

    A caller who lost the acknowledgement of an operation's charge can look it up (the query
    id is the charge id) and a replay of it neither draws nor pays again.
    """
    import pandas as pd
    import shapely

    import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)

    path = str(tmp_path / "ledger.sqlite")
    with Session(path, budget=gp.CGP(rho=1e-2), central=gp.DP(epsilon=50)) as s:
        u = np.arange(4)
        df = pd.DataFrame({"uid": np.repeat(u, 3),
                           "x": 500_000 + 150.0 * np.repeat(u, 3) + np.tile([0.0, 40, -30], 4),
                           "y": 4_500_000 + np.tile([0.0, 35, 60], 4),
                           "speed": np.tile([3.0, 12.5, 27.0], 4)})  # fmt: skip
        b = df.groupby("uid").head(1).geopriv(s, user="uid", x="x", y="y", crs="EPSG:32618")
        bm = df.geopriv(s, user="uid", x="x", y="y", crs="EPSG:32618")
        if op == "range_count":
            res = b.range_count(shapely.box(499_900, 4_499_900, 500_700, 4_500_500), rho=RHO)
        elif op == "knn":
            # speed is grid_stats' private value: knn leaves it out (and says so)
            with pytest.warns(gp.GpframeWarning, match=r"^dropped columns \['speed'\]"):
                out = bm.knn((500_300.0, 4_500_200.0), 2, rho=RHO)
            res = out.attrs["geopriv"]
        else:
            res = bm.grid_stats(value="speed", bounds=(0, 30), epsilon=EPS, cells=4,
                                occupancy="public").attrs["geopriv"].result  # fmt: skip
        row = s.ledger.store.charge(res.query_id)
        assert row is not None and row.alloc is not None
        keys = s.ledger._index[row.idx].tolist()
        lu = s.ledger.units[row.notion]
        before = s.ledger.snapshot()
        with s.reserve(keys, row.alloc, notion=row.notion, query=op, charge_id=res.query_id,
                       units=True) as r:  # fmt: skip
            assert r.replay and not r.admitted.any()
            assert r.prior_query_id == res.query_id
            assert r.charge(row.amount, units=True) is False
        assert s.ledger.snapshot() == before  # nothing written, nothing debited
        with pytest.raises(gp.ChargeConflictError):  # a different request is not a replay
            s.reserve(keys, row.alloc + 1, notion=row.notion, charge_id=res.query_id, units=True)
        assert s.ledger.snapshot() == before
        got = {k: float(lu.to_fraction(int(a))) for k, a in zip(keys, row.amount, strict=True)}
        charges = res.charges
        if charges is None:  # central: the per-user view is the ledger's
            rep = s.report(query_id=res.query_id)
            charges = pd.Series(rep["charge"].to_numpy(), index=rep["user"].to_numpy())
        assert all(got[k] >= v * (1 - 1e-9) for k, v in charges.items() if v > 0)
        s.ledger.verify()


def test_nearest_users_refuses_an_unaffordable_k_with_budget_exceeded():
    import pandas as pd

    import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)

    s = Session(budget=gp.CGP(rho=RHO / 2))  # nobody can pay RHO
    df = pd.DataFrame({"uid": [0, 1, 2], "x": [500_000.0, 500_100, 500_200], "y": 4.5e6})
    b = df.geopriv(s, user="uid", x="x", y="y", crs="EPSG:32618")
    before = s.ledger.snapshot()
    try:
        with pytest.raises(gp.BudgetExceededError):
            b.nearest_users((500_000.0, 4.5e6), 2, rho=RHO)
    finally:
        assert s.ledger.snapshot() == before  # nothing charged, whatever the class
