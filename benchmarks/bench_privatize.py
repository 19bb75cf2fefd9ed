"""privatize: Python path vs SQL path vs numpy float noise (the unsafe floor), 10**6 points.

One warm-up, then one timed run of each, all charging in-memory sessions (CGP, per="point",
rho = 1e-4 per point). DuckDB runs with threads=4. Prints one ratio line each.
"""

from __future__ import annotations

import time

import duckdb
import numpy as np
import pandas as pd

import gpframe as gp
import gpframe.accessor
from gpframe.duckdb import register
from gpframe.ledger import Session

N, USERS, RHO = 1_000_000, 10_000, 1e-4


def data(n: int) -> pd.DataFrame:
    r = np.random.default_rng(0)  # the true points only
    return pd.DataFrame(
        {
            "user_id": np.arange(n) % USERS,
            "x": 500_000 + r.uniform(-5e3, 5e3, n),
            "y": 8_800_000 + r.uniform(-5e3, 5e3, n),
        }
    )


def run_python(df: pd.DataFrame) -> float:
    s = Session(budget=gp.CGP(rho=1.0))
    t = time.perf_counter()
    df.geopriv(s, user="user_id", x="x", y="y", crs=32724).privatize(
        rho=RHO, per="point", progress=False
    )
    return time.perf_counter() - t


def run_sql(df: pd.DataFrame) -> float:
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    con.execute("SET threads = 4")
    register(con, s)
    con.register("pts", df)
    t = time.perf_counter()
    con.execute("CREATE TABLE out AS SELECT gp_privatize(user_id, x, y, 1e-4) AS p FROM pts")
    return time.perf_counter() - t


def run_numpy(df: pd.DataFrame) -> float:
    t = time.perf_counter()
    sigma = 1 / np.sqrt(2 * RHO)
    xy = df[["x", "y"]].to_numpy()
    _ = xy + np.random.default_rng().normal(0, sigma, xy.shape)  # unsafe float noise, no ledger
    return time.perf_counter() - t


def main() -> None:
    warm = data(20_000)
    run_python(warm), run_sql(warm), run_numpy(warm)
    df = data(N)
    tp, ts, tn = run_python(df), run_sql(df), run_numpy(df)
    print(f"privatize SQL vs Python: {N / 1e6:.1f}M rows, {ts:.2f} s vs {tp:.2f} s, {ts / tp:.2f}x")
    print(
        f"privatize Python vs numpy float noise: {N / 1e6:.1f}M rows, {tp:.2f} s vs {tn:.3f} s, "
        f"{tp / tn:.1f}x"
    )
    print(
        f"privatize SQL vs numpy float noise: {N / 1e6:.1f}M rows, {ts:.2f} s vs {tn:.3f} s, "
        f"{ts / tn:.1f}x"
    )


if __name__ == "__main__":
    main()
