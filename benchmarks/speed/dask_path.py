"""The Dask face on a LocalCluster (2 workers, 1 thread each) vs the pandas face, same points.

For each operation of the Dask face (privatize, range_count, kde_raster: one point per user, the
last by time; grid_stats: ``epsilon_per_user=2, occupancy="public"``, H3 resolution 7, on a
value column), one warm-up, then the best of ``--repeat`` timed runs of

* the pandas path: ``df.geopriv(...).<op>(...)`` on one in-memory frame (the baseline);
* the Dask path: ``ddf.geopriv(...).<op>(...)`` on the same points, already on the workers
  (``ddf.persist()``: what reading partitioned Parquet gives), output in memory on the client;
* the Dask path writing Parquet (``to=``: staged, charged, published), against the pandas path
  followed by ``to_parquet`` of its output.

A frame not partitioned by user is not shuffled row by row (``docs/beyond-one-machine.md``):
privatize counts each user's points per partition and sums them on the client; the
one-point-per-user operations (range_count, kde_raster) move only each partition's candidate
rows (one per user and partition): to the client, which keeps each user's winner, when they are
few (here), else between the workers. ``--indexed`` gives the Dask path a frame already indexed by
user (what ``set_index`` once, or data written partitioned by user, gives). ``--compare``
measures in the same run, interleaved: the pandas path, the Dask path on the frame as it is, the
same with every row shuffled on the user column first (the former way,
``gpframe.dask.partitions.FULL_SHUFFLE``), the Dask path on the frame indexed by user, and for
range_count and kde_raster the Dask path with the release sent to tasks on the workers (the former
way, ``gpframe.dask.one_point.CLIENT_RELEASE = False``) instead of run by the client, which
holds the few selected points after the first pass. Each line ends with the load average.

Every run charges a fresh in-memory Session, so ledger work is included on both sides. Prints
seconds per path (to the millisecond: the one-point operations take tens of them), the ratio
Dask / pandas (goal: <= 1.5x at 10**6 points) and the load average after the line, and the cluster's
floor, best of 5: an empty ``client.submit(lambda: 0).result()`` (one round trip) and
``ddf.map_partitions(len).compute()`` on the same points (one task per partition, the least a
pass over the data costs). ``--worker-env no-trim`` starts the workers without the
``MALLOC_TRIM_THRESHOLD_=65536`` that Dask's nanny sets by default (which makes numpy's
temporary arrays cost fresh pages on every allocation): what part of the first pass is that.
A worker remembers the first pass over a partition it holds (``gpframe.dask.memo``), and the
client the few candidate rows it fetched (``gpframe.dask.one_point``: a worker confirms them
instead of sending them again), so after the warm-up the Dask path's timed calls find them;
``--cold`` makes the workers and the client forget before every timed call (untimed): what the
first query on a persisted frame costs.

    PYTHONPATH=. python benchmarks/speed/dask_path.py --points 1000000
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import shapely

import gpframe as gp
import gpframe.dask
import gpframe.dask.memo
import gpframe.dask.one_point
import gpframe.frame.accessor

CRS = "EPSG:32724"
GOAL = 1.5


def data(n: int, users: int) -> pd.DataFrame:
    r = np.random.default_rng(0)  # the true points only
    return pd.DataFrame({
        "user_id": r.integers(0, users, n),
        "x": 500_000 + r.uniform(-5e3, 5e3, n),
        "y": 8_800_000 + r.uniform(-5e3, 5e3, n),
        "t": np.arange(n),
    })  # fmt: skip


def with_values(df: pd.DataFrame) -> pd.DataFrame:
    """The same points with a value column in [0, 10] (grid_stats)."""
    return df.assign(v=np.random.default_rng(1).uniform(0, 10, len(df)))  # true values only


def session() -> gp.Session:
    return gp.Session(budget=gp.CGP(rho=1.0))


KW = {"user": "user_id", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
GRID = {"value": "v", "bounds": (0, 10), "epsilon_per_user": 2.0, "cells": 7,
        "occupancy": "public"}  # fmt: skip


def grid_stats(frame) -> None:
    frame.geopriv(gp.Session(central=gp.DP(epsilon=10.0)), **KW).grid_stats(**GRID)


def best(fn, repeat: int, before=None) -> float:
    fn()  # warm-up (imports, the cluster's first tasks)
    times = []
    for _ in range(repeat):
        if before is not None:  # untimed: e.g. the workers forget their first passes (--cold)
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--indexed",
        action="store_true",
        help="give the Dask path a frame indexed by user (no shuffle per query)",
    )
    ap.add_argument(
        "--compare",
        action="store_true",
        help="as it is vs full shuffle vs indexed by user, interleaved in one run",
    )
    ap.add_argument(
        "--ops",
        nargs="+",
        default=["privatize", "range_count", "kde_raster", "grid_stats"],
        choices=["privatize", "range_count", "kde_raster", "grid_stats"],
    )
    ap.add_argument(
        "--worker-env",
        choices=["default", "no-trim"],
        default="default",
        help="no-trim: workers without Dask's MALLOC_TRIM_THRESHOLD_=65536",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="the workers forget their remembered first passes (gpframe.dask.memo) "
        "and the client its candidate rows (gpframe.dask.one_point) before "
        "every timed Dask call: what the first query on a frame costs",
    )
    args = ap.parse_args()

    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    if args.worker_env == "no-trim":
        dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})
    df = data(args.points, args.users)
    tmp = Path(tempfile.mkdtemp())
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as lc, Client(lc) as client:  # fmt: skip
        ddf = dd.from_pandas(df, npartitions=args.partitions).persist()
        if args.indexed:  # partitioned by user already (sorted, known divisions): no shuffle
            ddf = ddf.set_index("user_id").persist()
        print(
            f"{args.points:,} points, {args.users:,} users, {args.partitions} partitions, "
            f"LocalCluster 2 workers x 1 thread (worker env: {args.worker_env}), "
            f"{'indexed by user' if args.indexed else 'not partitioned by user'}, "
            f"{'cold: every first pass run anew' if args.cold else 'first passes remembered'}"
        )
        forget = None
        if args.cold:  # the workers forget their passes (so their tokens), the client its rows

            def forget():
                client.run(gpframe.dask.memo.clear)
                gpframe.dask.one_point.clear_held()

        floors(client, ddf)
        gdf = with_values(df) if "grid_stats" in args.ops else None
        gddf = None
        if gdf is not None:
            gddf = dd.from_pandas(gdf, npartitions=args.partitions).persist()
            if args.indexed:
                gddf = gddf.set_index("user_id").persist()

        def pandas_mem():
            df.geopriv(session(), **KW).privatize(rho=1e-4)

        def dask_mem():
            ddf.geopriv(session(), **KW).privatize(rho=1e-4)

        k = [0]

        def pandas_file():
            k[0] += 1
            out = df.geopriv(session(), **KW).privatize(rho=1e-4)
            out.to_parquet(tmp / f"pd{k[0]}.parquet")

        def dask_file():
            k[0] += 1
            ddf.geopriv(session(), **KW).privatize(rho=1e-4, to=tmp / f"dk{k[0]}")

        zone = shapely.box(497_000, 8_797_000, 503_000, 8_803_000)
        last = gp.Last("t")
        kde = {"bandwidth_m": 1_000, "cell_m": 100, "rho": 1e-4, "component": last,
               "bounds": (494_000, 8_794_000, 506_000, 8_806_000)}  # fmt: skip
        rows = {
            "privatize": [
                ("privatize (in memory)", pandas_mem, dask_mem),
                ("privatize (to Parquet)", pandas_file, dask_file),
            ],
            "range_count": [
                (
                    "range_count (dist-elim)",
                    lambda: df.geopriv(session(), **KW).range_count(zone, rho=1e-4, component=last),
                    lambda: ddf.geopriv(session(), **KW).range_count(
                        zone, rho=1e-4, component=last
                    ),
                )
            ],
            "kde_raster": [
                (
                    "kde_raster (120 x 120)",
                    lambda: df.geopriv(session(), **KW).kde_raster(**kde),
                    lambda: ddf.geopriv(session(), **KW).kde_raster(**kde),
                )
            ],
            "grid_stats": [
                ("grid_stats (public occ.)", lambda: grid_stats(gdf), lambda: grid_stats(gddf))
            ],
        }
        for name, base, fn in [] if args.compare else [r for op in args.ops for r in rows[op]]:
            tb, tf = best(base, args.repeat), best(fn, args.repeat, forget)
            ratio = tf / tb
            print(f"{name:28s} pandas {tb:8.3f} s   dask {tf:8.3f} s   ratio {ratio:5.2f}x  "
                  f"{'OK' if ratio <= GOAL else 'SLOW'} (goal <= {GOAL}x); "
                  f"dask {args.points / tf / 2:,.0f} points/s per worker; "
                  f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
        if args.compare:
            compare(df, ddf, args, zone, last, kde, tmp, gdf, gddf)
    shutil.rmtree(tmp, ignore_errors=True)


def floors(client, ddf) -> None:
    """Print the cluster's floor: one round trip, one task per partition over the points."""

    def submit():
        client.submit(lambda: 0, pure=False).result()

    def count():
        ddf.map_partitions(len).compute()

    trip, scan = best(submit, 5), best(count, 5)
    print(f"floor: empty submit {trip * 1e3:.0f} ms, map_partitions(len) {scan * 1e3:.0f} ms")


def compare(df, ddf, args, zone, last, kde, tmp, gdf=None, gddf=None) -> None:
    """Interleave pandas, as it is, full shuffle and indexed; print the best of each, ratios."""
    import gpframe.dask.one_point as one_point
    import gpframe.dask.partitions as parts

    indexed = ddf.set_index("user_id").persist()

    def full(fn):
        def run():
            parts.FULL_SHUFFLE = True
            try:
                fn()
            finally:
                parts.FULL_SHUFFLE = False

        return run

    def on_workers(fn):  # the few selected points released by tasks on the workers (former way)
        def run():
            one_point.CLIENT_RELEASE = False
            try:
                fn()
            finally:
                one_point.CLIENT_RELEASE = True

        return run

    files = [0]

    def to_file(d, s):
        files[0] += 1
        if isinstance(d, pd.DataFrame):
            d.geopriv(s, **KW).privatize(rho=1e-4).to_parquet(tmp / f"c{files[0]}.parquet")
        else:
            d.geopriv(s, **KW).privatize(rho=1e-4, to=tmp / f"c{files[0]}")

    ops = {
        "privatize (in memory)": lambda d, s: d.geopriv(s, **KW).privatize(rho=1e-4),
        "privatize (to Parquet)": to_file,
        "range_count (dist-elim)": lambda d, s: d.geopriv(s, **KW).range_count(
            zone, rho=1e-4, component=last
        ),
        "kde_raster (120 x 120)": lambda d, s: d.geopriv(s, **KW).kde_raster(**kde),
        "grid_stats (public occ.)": None,
    }
    for name, op in ops.items():
        if name.split()[0] not in args.ops:
            continue
        paths = {
            "pandas": lambda op=op: op(df, session()),
            "as it is": lambda op=op: op(ddf, session()),
            "full shuffle": full(lambda op=op: op(ddf, session())),
            "indexed": lambda op=op: op(indexed, session()),
        }
        if name.split()[0] in ("range_count", "kde_raster"):
            paths["release on workers"] = on_workers(lambda op=op: op(ddf, session()))
        if op is None:  # grid_stats shuffles nothing: no full-shuffle path
            g_indexed = gddf.set_index("user_id").persist()
            paths = {"pandas": lambda: grid_stats(gdf), "as it is": lambda: grid_stats(gddf),
                     "indexed": lambda g=g_indexed: grid_stats(g)}  # fmt: skip
        for fn in paths.values():
            fn()  # warm-up
        times = {k: [] for k in paths}
        for _ in range(args.repeat):
            for k, fn in paths.items():
                t = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t)
        tb = min(times["pandas"])
        line = ", ".join(f"{k} {min(v):.2f} s ({min(v) / tb:.2f}x)" for k, v in times.items())
        print(f"{name:26s} {line}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
