"""privatize: Python path vs SQL path vs numpy float noise (the unsafe floor), 10**6 points.

One warm-up, then one timed run of each, all charging in-memory sessions (CGP, per="point",
rho = 1e-4 per point). DuckDB runs with threads=4. Prints one ratio line each, then:

* the SQL path against a no-op Arrow UDF of the same signature and STRUCT result (DuckDB's own
  per-batch UDF overhead, the floor of any Python UDF), and against the bare UDF without the
  int/str dispatch macro;
* both paths with a file-backed session (SQLite WAL, synchronous=FULL: one durable commit per
  reservation and per charge, i.e. two per DuckDB batch);
* a breakdown of the Python path (projection, ledger, sampler, output geometry).
"""

from __future__ import annotations

import os
import tempfile
import time

import duckdb
import numpy as np
import pandas as pd

import gpframe as gp
import gpframe.frame.accessor
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


def run_python(df: pd.DataFrame, path: str | None = None) -> float:
    s = Session(path, budget=gp.CGP(rho=1.0))
    t = time.perf_counter()
    df.geopriv(s, user="user_id", x="x", y="y", crs=32724).privatize(
        rho=RHO, per="point", progress=False
    )
    return time.perf_counter() - t


def run_sql(df: pd.DataFrame, path: str | None = None, fn: str = "gp_privatize") -> float:
    s = Session(path, budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    con.execute("SET threads = 4")
    register(con, s)
    con.register("pts", df)
    t = time.perf_counter()
    con.execute(f"CREATE TABLE out AS SELECT {fn}(user_id, x, y, 1e-4) AS p FROM pts")
    return time.perf_counter() - t


def _noop(user_id, x, y, amount):  # type: ignore[no-untyped-def]
    """Same inputs and STRUCT output as the real UDF, no noise and no ledger."""
    import pyarrow as pa

    null = np.asarray(x.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    fx = pa.array(np.asarray(x.to_numpy(zero_copy_only=False), dtype=np.float64), mask=null)
    fy = pa.array(np.asarray(y.to_numpy(zero_copy_only=False), dtype=np.float64), mask=null)
    return pa.StructArray.from_arrays([fx, fy], names=["x", "y"], mask=pa.array(null))


def run_sql_noop(df: pd.DataFrame) -> float:
    from duckdb.sqltypes import BIGINT, DOUBLE

    con = duckdb.connect()
    con.execute("SET threads = 4")
    con.create_function(
        "noop_udf", _noop, [BIGINT, DOUBLE, DOUBLE, DOUBLE],
        duckdb.struct_type({"x": DOUBLE, "y": DOUBLE}), type="arrow",
        null_handling="special", side_effects=True,
    )  # fmt: skip
    con.register("pts", df)
    t = time.perf_counter()
    con.execute("CREATE TABLE out AS SELECT noop_udf(user_id, x, y, 1e-4) AS p FROM pts")
    return time.perf_counter() - t


def breakdown(df: pd.DataFrame) -> dict[str, float]:
    """Seconds per stage of the Python path (same steps as GeoPriv.privatize, timed apart)."""
    from gpframe.frame.accessor import _build_output
    from gpframe.queries import privatize as pv

    out: dict[str, float] = {}
    s = Session(budget=gp.CGP(rho=1.0))
    amount = gp.accounting.amounts.positive(RHO, "rho")
    t = time.perf_counter()
    b = df.geopriv(s, user="user_id", x="x", y="y", crs=32724)
    p = b.projected
    out["resolve+project"] = (t1 := time.perf_counter()) - t
    codes, uniques = pd.factorize(pd.Series(p.users), sort=False)
    counts = np.bincount(codes).astype(np.int64)
    out["factorize users"] = (t2 := time.perf_counter()) - t1
    units, _ = s.ledger.units_for("metric", amount, counts, kind="cgp")
    r = s.reserve(uniques, units, query="bench", units=True)
    out["ledger reserve"] = (t3 := time.perf_counter()) - t2
    res = pv.privatize_points(
        p.xy, codes, len(uniques), kind="cgp", amount=amount, per="point",
        admitted=r.admitted, scale_max=float(p.scale_max),
    )  # fmt: skip
    out["privatize_points (sampler+grouping+bounds)"] = (t4 := time.perf_counter()) - t3
    r.charge(units, units=True)
    out["ledger charge"] = (t5 := time.perf_counter()) - t4
    _build_output(b.frame, p, res.xy, res.released, b.public)
    out["output GeoDataFrame (shapely points)"] = time.perf_counter() - t5
    return out


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
    t0, tu = run_sql_noop(df), run_sql(df, fn="gp_privatize_udf_int")
    print(
        f"privatize SQL vs no-op Arrow UDF: {N / 1e6:.1f}M rows, {ts:.2f} s vs {t0:.2f} s, "
        f"{ts / t0:.1f}x (bare UDF without the dispatch macro: {tu:.2f} s)"
    )
    with tempfile.TemporaryDirectory() as d:
        tpf = run_python(df, os.path.join(d, "py.sqlite"))
        tsf = run_sql(df, os.path.join(d, "sql.sqlite"))
    print(
        f"privatize file-backed session, SQL vs Python: {N / 1e6:.1f}M rows, {tsf:.2f} s vs "
        f"{tpf:.2f} s, {tsf / tpf:.2f}x"
    )
    parts = breakdown(df)
    print("privatize Python breakdown: " + ", ".join(f"{k} {v:.3f} s" for k, v in parts.items()))


if __name__ == "__main__":
    main()
