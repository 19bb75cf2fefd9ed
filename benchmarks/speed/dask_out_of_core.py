"""Out of core: privatize and grid_stats on partitioned Parquet, workers under a memory limit.

Writes ``--points`` synthetic points (``--users`` users, files of ``--rows-per-file`` rows) as
partitioned Parquet, generated chunk by chunk (the client never holds them). Each user moves
within 4 km of a home point (as vehicles do), so a user touches a few H3 cells, and every file
holds rows of almost every user (the worst case for per-user work: nothing is partitioned by
user). Then runs, on a LocalCluster of 2 workers x 1 thread with ``--memory-limit`` per worker
(dask spills to disk above it), each of ``--ops``:

- ``privatize``: ``ddf.geopriv(...).privatize(rho=..., to=...)`` (counted where the rows lie,
  each user's total summed on the workers and shipped once to every worker, written by the
  workers, published after the charge);
- ``grid_stats``: ``grid_stats("speed", epsilon_per_user=..., occupancy="public", cells=6)``
  (per-partition exact sums, combined in a tree on the workers; the client holds one row per
  (user, cell) pair).

first on a ``--baseline-points`` run of the same shape, then on the full size. Prints, for each:
seconds, points/s per worker, the peak RSS of each worker (sampled every 0.2 s) against the
limit, the client's peak RSS, how many workers the nanny restarted (a worker above 95 % of its
limit is restarted and Dask recomputes its tasks: the sampler can miss the spike, never the new
worker), and the throughput ratio baseline / full (goal: within 1.5x, i.e.
cost linear in the points). On a machine shared with other work the wall-clock rate follows the
load, so it also prints the rate per CPU second of the workers (their processes' user + system
time over the run) and that ratio, which the load does not move.

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
    home = r.uniform(-5e4, 5e4, (users, 2))
    for i, start in enumerate(range(0, n, per_file)):
        m = min(per_file, n - start)
        u = r.integers(0, users, m)
        table = pa.table({
            "user_id": u,
            "x": 500_000 + home[u, 0] + r.uniform(-4e3, 4e3, m),
            "y": 8_800_000 + home[u, 1] + r.uniform(-4e3, 4e3, m),
            "speed": r.uniform(0, 15, m),
        })  # fmt: skip
        pq.write_table(table, root / f"part-{i:05d}.parquet")


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _client_peak() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _cpu() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return t.user + t.system


def _workers_cpu(client) -> float:
    """CPU seconds the worker processes have used (a restarted worker starts again at 0)."""
    return sum(client.run(_cpu).values())


def run(
    client, src: Path, out: Path, op: str, rho: float
) -> tuple[float, dict[str, int], float, float]:
    """Run ``op`` on ``src`` (privatize into ``out``).

    Returns (seconds, peak RSS per worker, the workers' CPU seconds, the client's).
    """
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
    session = gp.Session(budget=gp.CGP(rho=1.0), central=gp.DP(epsilon=8.0))
    cpu0, own0 = _workers_cpu(client), _cpu()
    start = time.perf_counter()
    ddf = dd.read_parquet(src)
    if op == "privatize":
        face = ddf[["user_id", "x", "y"]].geopriv(session, user="user_id", x="x", y="y", crs=CRS)
        face.privatize(rho=rho, to=out)
        import pyarrow.dataset as pds

        rows = pds.dataset(out, format="parquet").count_rows()  # what was published
        print(f"    privatize published {rows:,} rows", flush=True)
    else:
        face = ddf.geopriv(session, user="user_id", x="x", y="y", crs=CRS)
        r = face.grid_stats(
            "speed", bounds=(0, 15), epsilon_per_user=4.0, cells=6, occupancy="public"
        )
        print(f"    grid_stats released {int(r['released'].sum()):,} of {len(r):,} "
              "cells", flush=True)  # fmt: skip
    seconds = time.perf_counter() - start
    own = _cpu() - own0  # before the sampler stops: its own calls are part of the client's
    done.set()
    t.join()
    return seconds, peak, _workers_cpu(client) - cpu0, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=float, default=1e8)
    ap.add_argument("--baseline-points", type=float, default=1e6)
    ap.add_argument("--users", type=int, default=0, help="default: points / 100")
    ap.add_argument("--rows-per-file", type=int, default=1_000_000)
    ap.add_argument("--memory-limit", default="2GiB", help="per worker")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--rho", type=float, default=1e-4)
    ap.add_argument(
        "--ops", nargs="+", default=["privatize", "grid_stats"], choices=["privatize", "grid_stats"]
    )
    args = ap.parse_args()

    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    root = Path(args.dir or tempfile.mkdtemp())
    limit = parse_bytes(args.memory_limit)
    sizes = [int(args.baseline_points), int(args.points)]
    rates: dict[str, list[float]] = {op: [] for op in args.ops}
    cpu_rates: dict[str, list[float]] = {op: [] for op in args.ops}
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
                print(f"{n:>13,} points {users:>11,} users  written in {gen:6.1f} s", flush=True)
                for op in args.ops:
                    sec, peak, cpu, own = run(client, src, root / f"out-{k}", op, args.rho)
                    rate = n / sec / 2
                    rates[op].append(rate)
                    cpu_rates[op].append(n / cpu)
                    worst = max(peak.values()) if peak else 0
                    print(f"    {op:<10} {sec:8.1f} s  {rate:>10,.0f} points/s per worker  "
                          f"peak RSS {worst / 2**30:5.2f} GiB of {limit / 2**30:.2f} GiB per "
                          f"worker ({'under' if worst <= limit else 'OVER'} the limit); client "
                          f"peak RSS {_client_peak() / 2**30:5.2f} GiB; workers restarted "
                          f"{max(len(peak) - 2, 0)}; CPU: workers {cpu:.1f} s, client {own:.1f} s "
                          f"({n / cpu:,.0f} points per worker CPU second)", flush=True)  # fmt: skip
                    shutil.rmtree(root / f"out-{k}", ignore_errors=True)
                shutil.rmtree(src, ignore_errors=True)
        for op, (base, full) in rates.items():
            ratio = base / full
            cpu_ratio = cpu_rates[op][0] / cpu_rates[op][1]
            print(
                f"{op}: throughput baseline / full: {ratio:.2f}x  "
                f"{'OK' if ratio <= 1.5 else 'SLOW'} (goal <= 1.5x: linear cost); per "
                f"worker CPU second: {cpu_ratio:.2f}x"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
