"""Out of core: privatize points read from partitioned Parquet, workers under a memory limit.

Writes ``--points`` synthetic points (``--users`` users, files of ``--rows-per-file`` rows) as
partitioned Parquet, generated chunk by chunk (the client never holds them), then runs
``ddf.geopriv(...).privatize(rho=..., to=...)`` on a LocalCluster of 2 workers x 1 thread with
``--memory-limit`` per worker (dask spills to disk above it), first on a ``--baseline-points``
run of the same shape, then on the full size. Prints, for each: seconds, points/s per worker,
the peak RSS of each worker (sampled every 0.2 s) against the limit, and the throughput ratio
full / baseline (goal: within 1.5x, i.e. cost linear in the points).

    PYTHONPATH=. python benchmarks/speed/dask_out_of_core.py --points 10000000
    PYTHONPATH=. python benchmarks/speed/dask_out_of_core.py --points 100000000 --dir /big/tmp
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import gpframe as gp
import gpframe.dask

CRS = "EPSG:32724"


def write_points(root: Path, n: int, users: int, per_file: int, seed: int = 0) -> None:
    """``n`` points as Parquet files of ``per_file`` rows (the true points only, no noise)."""
    root.mkdir(parents=True)
    r = np.random.default_rng(seed)
    for i, start in enumerate(range(0, n, per_file)):
        m = min(per_file, n - start)
        table = pa.table({
            "user_id": r.integers(0, users, m),
            "x": 500_000 + r.uniform(-5e4, 5e4, m),
            "y": 8_800_000 + r.uniform(-5e4, 5e4, m),
        })  # fmt: skip
        pq.write_table(table, root / f"part-{i:05d}.parquet")


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def run(client, src: Path, out: Path, rho: float) -> tuple[float, dict[str, int]]:
    """Privatize ``src`` into ``out``; return (seconds, peak RSS per worker)."""
    import dask.dataframe as dd

    peak: dict[str, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                for w, v in client.run(_rss).items():
                    peak[w] = max(peak.get(w, 0), v)
            except Exception:  # a worker restarting: sample again
                pass
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    session = gp.Session(budget=gp.CGP(rho=1.0))
    start = time.perf_counter()
    ddf = dd.read_parquet(src)
    ddf.geopriv(session, user="user_id", x="x", y="y", crs=CRS).privatize(rho=rho, to=out)
    seconds = time.perf_counter() - start
    done.set()
    t.join()
    return seconds, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=1e8)
    ap.add_argument("--baseline-points", type=float, default=1e6)
    ap.add_argument("--users", type=int, default=0, help="default: points / 100")
    ap.add_argument("--rows-per-file", type=int, default=1_000_000)
    ap.add_argument("--memory-limit", default="2GiB", help="per worker")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--rho", type=float, default=1e-4)
    args = ap.parse_args()

    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    root = Path(args.dir or tempfile.mkdtemp())
    limit = parse_bytes(args.memory_limit)
    sizes = [int(args.baseline_points), int(args.points)]
    results = []
    try:
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            memory_limit=limit, silence_logs=logging.ERROR,
        ) as lc, Client(lc) as client:  # fmt: skip
            for k, n in enumerate(sizes):
                users = args.users or max(n // 100, 1)
                src = root / f"points-{k}"
                t0 = time.perf_counter()
                write_points(src, n, users, min(args.rows_per_file, n))
                gen = time.perf_counter() - t0
                sec, peak = run(client, src, root / f"out-{k}", args.rho)
                rate = n / sec / 2
                results.append(rate)
                worst = max(peak.values()) if peak else 0
                print(f"{n:>13,} points {users:>11,} users  written in {gen:6.1f} s  "
                      f"privatize {sec:8.1f} s  {rate:>10,.0f} points/s per worker  "
                      f"peak RSS {worst / 2**30:5.2f} GiB of {limit / 2**30:.2f} GiB per worker "
                      f"({'under' if worst <= limit else 'OVER'} the limit)")  # fmt: skip
                shutil.rmtree(src, ignore_errors=True)
                shutil.rmtree(root / f"out-{k}", ignore_errors=True)
        ratio = results[0] / results[1]
        print(f"throughput baseline / full: {ratio:.2f}x  "
              f"{'OK' if ratio <= 1.5 else 'SLOW'} (goal <= 1.5x: linear cost)")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
