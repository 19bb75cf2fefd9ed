"""``partition=`` on the Dask face (LocalCluster, 2 workers x 1 thread) vs the pandas face.

Lon/lat points in two public parts far apart (Alaska and Puerto Rico, each with its own public
``domain=`` box, so each part is noised in its own metric CRS: ``docs/wide-extents.md``); the
part is a public column fixed per user id (a fleet), so a user's rows are in one part. For
``privatize`` (in memory) and ``range_count`` (one zone per part), one warm-up, then the best of
``--repeat`` runs of

* the pandas face with ``partition=`` (the baseline);
* the Dask face with ``partition=`` on the same points, already on the workers (shuffled on the
  user column every query);
* the Dask face on the same points without ``partition=``, in one metric CRS for one public box
  over both parts (what the split adds on Dask: one projection per (partition, part), the
  per-part bookkeeping; the one-CRS run has a much larger noise inflation).

Every run charges a fresh in-memory Session. Prints seconds and the ratios.

    PYTHONPATH=. python benchmarks/speed/dask_partition.py --points 1000000
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

import gpframe as gp
import gpframe.dask  # registers ddf.geopriv

AK = (-170.0, 51.0, -130.0, 72.0)
PR = (-68.0, 17.5, -65.0, 18.7)


def data(n: int, users: int) -> pd.DataFrame:
    r = np.random.default_rng(0)  # the true points only
    u = r.integers(0, users, n)
    ak = u % 2 == 0  # the fleet: public, fixed per user id
    lon = np.where(ak, r.uniform(-160, -140, n), r.uniform(-67.2, -65.3, n))
    lat = np.where(ak, r.uniform(58, 66, n), r.uniform(17.9, 18.5, n))
    return pd.DataFrame({"user_id": u, "lon": lon, "lat": lat,
                         "fleet": np.where(ak, "AK", "PR")})  # fmt: skip


def best(fn, repeat: int) -> float:
    fn()  # warm-up (imports, the cluster's first tasks)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def session() -> gp.Session:
    return gp.Session(budget=gp.CGP(rho=1.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    df = data(args.points, args.users)
    kw = {"user": "user_id", "lon": "lon", "lat": "lat", "crs": "EPSG:4326",
          "partition": "fleet", "domain": {"AK": AK, "PR": PR}}  # fmt: skip
    one = {"user": "user_id", "lon": "lon", "lat": "lat", "crs": "EPSG:4326",
           "domain": (AK[0], PR[1], PR[2], AK[3]), "public": ["fleet"]}  # fmt: skip
    zones = gpd.GeoDataFrame(geometry=[shapely.box(-155, 60, -145, 64),
                                       shapely.box(-66.8, 18.0, -65.8, 18.4)],
                             crs="EPSG:4326")  # fmt: skip
    warnings.simplefilter("ignore", gp.GpframeWarning)  # the one-CRS run's inflation warning
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as lc, Client(lc):  # fmt: skip
        ddf = dd.from_pandas(df, npartitions=args.partitions).persist()
        print(
            f"{args.points:,} points, {args.users:,} users, 2 parts, {args.partitions} "
            "partitions, LocalCluster 2 workers x 1 thread, shuffled per query"
        )
        rows = [
            ("privatize (in memory)",
             lambda: df.geopriv(session(), **kw).privatize(rho=1e-4),
             lambda: ddf.geopriv(session(), **kw).privatize(rho=1e-4),
             lambda: ddf.geopriv(session(), **one).privatize(rho=1e-4)),
            ("range_count (2 zones)",
             lambda: df.geopriv(session(), **kw).range_count(zones, rho=1e-4, reduce="last"),
             lambda: ddf.geopriv(session(), **kw).range_count(zones, rho=1e-4, reduce="last"),
             lambda: ddf.geopriv(session(), **one).range_count(zones, rho=1e-4,
                                                                reduce="last")),
        ]  # fmt: skip
        for name, base, split, unsplit in rows:
            tb, ts, tu = (best(f, args.repeat) for f in (base, split, unsplit))
            print(
                f"{name:24s} pandas split {tb:6.2f} s   dask split {ts:6.2f} s "
                f"(ratio {ts / tb:4.2f}x)   dask one CRS {tu:6.2f} s "
                f"(split / one CRS {ts / tu:4.2f}x)"
            )


if __name__ == "__main__":
    main()
