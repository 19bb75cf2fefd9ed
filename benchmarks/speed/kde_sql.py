"""Benchmark: a KDE heatmap over a probe grid in DuckDB, per-row SQL vs ``gp.duckdb.kde_raster``.

Same users (one point each, projected metres), same bandwidth, same grid of m probes (m = 64,
144, 400: 8², 12², 20² cell centres):

* old: ``AVG(gp_kde_contribution(uid, x, y, qx, qy, h, rho, 10, n))`` over ``pings CROSS JOIN
  probes GROUP BY probe``: one ``pt-elim`` elimination (and one charge) per user and probe, in
  DuckDB's Arrow batches;
* new: ``gp.duckdb.kde_raster(con, 'SELECT ...', user=, x=, y=, bandwidth_m=h, cell_m=...,
  bounds=..., rho=...)``: one release per user, every cell at once, run once.

The old path runs in a child process killed after ``--cap`` seconds (default 60); once a size
is killed, the larger sizes are not tried. Each timing is one run (the old path charges a fresh
ledger each time; the machine is shared, so read the ratios as orders of magnitude).

Run from the repository root: ``PYTHONPATH=. python benchmarks/speed/kde_sql.py [--users 1000]
[--cap 60]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Any

import numpy as np

H, RHO, ROUNDS, SIDE_M = 1500.0, 1e-5, 10, 20_000.0
SIZES = (8, 12, 20)  # probes per side: 64, 144, 400


def _setup(n_users: int) -> tuple[Any, Any]:
    import duckdb

    import gpframe as gp

    session = gp.Session(budget=gp.CGP(rho=10.0))
    con = duckdb.connect()
    gp.duckdb.register(con, session)
    # deterministic public-looking layout (benchmark data, not a release): a clustered cloud
    t = np.arange(n_users)
    x = SIDE_M / 2 + (SIDE_M / 3) * np.sin(t * 0.7) * np.cos(t * 0.13)
    y = SIDE_M / 2 + (SIDE_M / 3) * np.cos(t * 1.1) * np.sin(t * 0.29)
    con.execute("CREATE TABLE pings AS SELECT * FROM (SELECT unnest(?) AS uid, unnest(?) AS x, "
                "unnest(?) AS y)", [t.tolist(), x.tolist(), y.tolist()])  # fmt: skip
    return con, session


def _probes(con: Any, side: int) -> None:
    cell = SIDE_M / side
    c = (np.arange(side) + 0.5) * cell
    qx, qy = np.meshgrid(c, c)
    con.execute("CREATE OR REPLACE TABLE probes AS SELECT * FROM (SELECT unnest(?) AS id, "
                "unnest(?) AS qx, unnest(?) AS qy)",
                [list(range(side * side)), qx.ravel().tolist(), qy.ravel().tolist()])  # fmt: skip


def _old(n_users: int, side: int, out: Any) -> None:
    con, _ = _setup(n_users)
    _probes(con, side)
    t0 = time.perf_counter()
    rows = con.execute(
        f"SELECT q.id, AVG(gp_kde_contribution(p.uid, p.x, p.y, q.qx, q.qy, {H}, {RHO}, "
        f"{ROUNDS}, {n_users})) FROM pings AS p CROSS JOIN probes AS q GROUP BY q.id"
    ).fetchall()
    out.put((time.perf_counter() - t0, len(rows)))


def _new(n_users: int, side: int) -> tuple[float, int]:
    import gpframe as gp

    con, _ = _setup(n_users)
    t0 = time.perf_counter()
    rel = gp.duckdb.kde_raster(con, "SELECT uid, x, y FROM pings", user="uid", x="x", y="y",
                               bandwidth_m=H, cell_m=SIDE_M / side,
                               bounds=(0.0, 0.0, SIDE_M, SIDE_M), rho=RHO)  # fmt: skip
    n = len(rel.fetchall())
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--cap", type=float, default=60.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    killed = False
    _new(a.users, 4)  # warm-up: imports (scipy, the sampler) are not the path's cost
    print(f"users={a.users} bandwidth={H:g} m rho={RHO:g} rounds={ROUNDS}; old path capped at "
          f"{a.cap:g} s")  # fmt: skip
    print(f"{'probes':>7} {'old per-row SQL (s)':>20} {'kde_raster (s)':>15} {'old/new':>9}")
    for side in SIZES:
        m = side * side
        new_s, n_cells = _new(a.users, side)
        assert n_cells == m
        if killed:
            old_txt, ratio = "not run", "-"
        else:
            q = ctx.Queue()
            proc = ctx.Process(target=_old, args=(a.users, side, q))
            proc.start()
            proc.join(a.cap)
            if proc.is_alive():
                proc.terminate()  # our own child, by its handle
                proc.join()
                killed = True
                old_txt, ratio = f"> {a.cap:g} (killed)", f"> {a.cap / new_s:.0f}x"
            else:
                old_s, n_rows = q.get()
                assert n_rows == m
                old_txt, ratio = f"{old_s:.2f}", f"{old_s / new_s:.0f}x"
        print(f"{m:>7} {old_txt:>20} {new_s:>15.3f} {ratio:>9}")


if __name__ == "__main__":
    main()
