"""Benchmark: range_count, kde_raster, grid_stats, privatize as users call them vs non-private code.

For each size n (points; 10^5 and 10^6 by default, 10^7 with ``--big``) and each operation, in the
same run, on the same points, interleaved over ``--repeat`` rounds (best of). ``range_count`` and
``kde_raster`` have one point per user; ``grid_stats`` has n/100 users (100 samples each, around a
home in a 40 x 40 km area, H3 resolution 7); ``privatize`` one lon/lat point per user of the same
kind:

* ``baseline``: the non-private geometric work a user would otherwise run. ``range_count``: the
  exact signed distances to a 50-vertex star polygon plus ``shapely.contains_xy`` (what the
  private count privatizes); ``kde_raster``: ``numpy.histogram2d`` + ``scipy.signal.fftconvolve``
  with the same bandwidth on the same 512 × 512 grid; ``grid_stats``: the H3 cell of every
  lon/lat point (h3's per-point call, as gpframe does) + a pandas groupby mean and variance;
  ``privatize``: the same output with unsafe float noise (the floor): project to UTM 18N, numpy
  Gaussian noise of the same standard deviation, project back, ``points_from_xy`` (cyclic GC
  paused, as gpframe does), GeoDataFrame.
* ``arrays``: the array algorithm (``range_count_arrays`` with ``dist-elim``, 10 rounds doubling;
  ``kde_raster_arrays``; for ``grid_stats`` the public occupancy and the Clip-User plan with the
  pseudo-user step, ``clip_user_plan``; ``privatize_points`` on the projected points): the
  privacy math, no ledger.
* ``accessor``: ``df.geopriv(session, user=..., x=..., y=..., crs=...).range_count(...)`` /
  ``.kde_raster(...)`` on projected input (UTM 18N), ``.grid_stats(..., occupancy="public")`` on
  lon/lat input (central budget ε = 10^6), ``.privatize(rho=1e-4, per="point")`` on lon/lat
  input with ``to_crs="EPSG:32618"``, fresh in-memory Session each time, so the
  first sight of every user is included (``first``); then the same call again on that session
  (``again``: users already known).

Every line ends with the ratio to the baseline of the same n (goal of the user's path: ≤ 3×;
``privatize``: ≤ 1.3× the float-noise floor).
Peak memory (``tracemalloc``, which sees numpy's buffers) is measured in a separate, untimed
pass and printed in bytes per point, with its ratio to the baseline's (goal of the user's path:
≤ 1.5× at 10^7 points).

Cores: the baseline runs numpy, pyproj and shapely on one core, as a user's own code would. The
accessor's ``privatize`` draws its noise, projects and builds its output points in row ranges on
every core (``gpframe.mechanisms.row_ranges``); ``--threads 1`` keeps it on one core
(``row_ranges.THREADS = 1``), the like-for-like comparison.

Run: ``PYTHONPATH=. python benchmarks/speed/user_path.py [--sizes 100000 1000000] [--big]
[--ops grid_stats] [--cpu] [--threads 1]``. ``--cpu`` times process CPU instead of wall clock:
on a shared, loaded machine the wall clock also counts the time other processes hold the cores
(CPU time adds up every thread's, so it charges the accessor's several cores in full).
Smallest run: ``--sizes 10000 --repeat 1``.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import pandas as pd
import shapely
from scipy.signal import fftconvolve

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session
from gpframe.queries.clip_user import clip_user_plan, occupancy_from_records
from gpframe.queries.kde import kde_raster_arrays
from gpframe.queries.range_count import range_count_arrays, signed_distance

X0, Y0 = 400_000.0, 4_500_000.0  # UTM 18N false origin of the synthetic data, metres
CRS = "EPSG:32618"
RC_RHO = 1e-4  # range count: allocation per user (m^-2)
CELL, SIDE, H, KDE_RHO = 100.0, 512, 1000.0, 1e-5  # KDE grid and allocation
BUDGET = gp.CGP(rho=1e-2)
GS_PER_USER, GS_RES, GS_EPS = 100, 7, 0.5  # grid_stats: samples per user, H3 resolution, ε
GS_CENTRAL = gp.DP(epsilon=1e6)
PV_RHO = 1e-4  # privatize: CGP amount per m² per point (noise sd 71 m per axis)
PV_CRS = "EPSG:32618"  # privatize: the metric CRS named (UTM 18N), as a release should
GOALS = {"privatize": 1.3}  # accessor ÷ baseline; 3 for the others
MEM_GOAL = 1.5  # accessor peak memory ÷ the baseline's


def star(n_vertices: int = 50, x0: float = 0.0, y0: float = 0.0) -> shapely.Polygon:
    """A concave 50-vertex star of radius 2-4 km centred in the data's 10 km square."""
    ang = np.linspace(0, 2 * np.pi, n_vertices, endpoint=False)
    rad = 3000 + 1000 * np.sin(5 * ang)
    return shapely.Polygon(
        np.column_stack([x0 + 5000 + rad * np.cos(ang), y0 + 5000 + rad * np.sin(ang)])
    )


def points(n: int, op: str) -> np.ndarray:
    """Synthetic true points (not a release), metres from the origin (lon, lat for grid_stats)."""
    gen = np.random.default_rng(0)
    if op == "range_count":
        return gen.uniform(0, 10_000, (n, 2))
    if op in ("grid_stats", "privatize"):  # homes in a 40 x 40 km area, points sd 2 km around
        home = gen.uniform((-74.25, 40.55), (-73.77, 40.91), (max(n // GS_PER_USER, 1), 2))
        sd = np.array([2000 / 84_400, 2000 / 111_000])  # 2 km in degrees at 40.7 N
        return home[np.arange(n) % len(home)] + gen.normal(0, 1, (n, 2)) * sd
    centres = gen.uniform(5_000, 46_000, (20, 2))
    return centres[gen.integers(0, 20, n)] + gen.normal(0, 2_000, (n, 2))


# --- range_count -------------------------------------------------------------------------


def rc_baseline(xy: np.ndarray) -> object:
    region = star()
    inside = shapely.contains_xy(region, xy[:, 0], xy[:, 1])
    return int(inside.sum()), signed_distance(xy, region)


def rc_arrays(xy: np.ndarray) -> object:
    return range_count_arrays(
        xy, np.arange(len(xy)), star(), kind="cgp", amount=RC_RHO, method="dist-elim",
        rounds=10, split="doubling", beta=0.05,
    )  # fmt: skip


def rc_accessor(df: pd.DataFrame, session: Session) -> object:
    bound = df.geopriv(session, user="u", x="x", y="y", crs=CRS)
    return bound.range_count(star(x0=X0, y0=Y0), rho=RC_RHO)


# --- kde_raster --------------------------------------------------------------------------


def kde_baseline(xy: np.ndarray) -> np.ndarray:
    s = H / CELL
    r = math.ceil(5 * s)
    k1 = np.exp(-0.5 * (np.arange(-r, r + 1) / s) ** 2)
    kern = np.outer(k1, k1)
    kern /= kern.sum()
    lo, hi = -r * CELL, (SIDE + r) * CELL
    counts, _, _ = np.histogram2d(xy[:, 1], xy[:, 0], bins=SIDE + 2 * r, range=[[lo, hi], [lo, hi]])
    return fftconvolve(counts, kern, mode="valid")[::-1] / (CELL * CELL * len(xy))


def kde_arrays(xy: np.ndarray) -> object:
    return kde_raster_arrays(
        xy, bandwidth_m=H, cell_m=CELL, bounds_m=(0.0, 0.0, SIDE * CELL, SIDE * CELL),
        amount=KDE_RHO,
    )  # fmt: skip


def kde_accessor(df: pd.DataFrame, session: Session) -> object:
    bound = df.geopriv(session, user="u", x="x", y="y", crs=CRS)
    bm = (X0, Y0, X0 + SIDE * CELL, Y0 + SIDE * CELL)
    return bound.kde_raster(bandwidth_m=H, cell_m=CELL, bounds=bm, rho=KDE_RHO)


# --- grid_stats ----------------------------------------------------------------------------


def h3_of(df: pd.DataFrame) -> np.ndarray:
    """H3 cell of every point: h3 4 has no array call; the numpy_int API per point, as gpframe."""
    import h3.api.numpy_int as h3n

    lat, lon = df["lat"].tolist(), df["lon"].tolist()
    cells = [h3n.latlng_to_cell(a, b, GS_RES) for a, b in zip(lat, lon, strict=True)]
    return np.array(cells, np.uint64)


def gs_baseline(df: pd.DataFrame) -> object:
    return df["v"].groupby(h3_of(df)).agg(["mean", "var", "count"])


def gs_arrays(df: pd.DataFrame) -> object:
    occ = occupancy_from_records(df["u"].to_numpy(), h3_of(df))
    return clip_user_plan(occ, 0, 65, 2 * GS_EPS, clip="pseudo-user")


def gs_accessor(df: pd.DataFrame, session: Session) -> object:
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    return bound.grid_stats(
        value="v", bounds=(0, 65), epsilon=GS_EPS, cells=GS_RES, clip="pseudo-user",
        occupancy="public", progress=False,
    )  # fmt: skip


# --- privatize --------------------------------------------------------------------------


def pv_baseline(df: pd.DataFrame) -> object:
    """The same output with unsafe float noise: project, add noise, project back, points."""
    import geopandas as gpd
    import pyproj

    lon, lat = df["lon"].to_numpy(), df["lat"].to_numpy()
    crs = PV_CRS
    fwd = pyproj.Transformer.from_crs("EPSG:4326", crs, always_xy=True)
    x, y = fwd.transform(lon, lat)
    sigma = 1 / math.sqrt(2 * PV_RHO)
    gen = np.random.default_rng()
    x, y = x + gen.normal(0, sigma, len(x)), y + gen.normal(0, sigma, len(y))
    bx, by = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(x, y)
    gc.disable()  # the strict floor: no cyclic GC passes while 10^6 points are created
    try:
        geom = gpd.points_from_xy(bx, by, crs="EPSG:4326")
    finally:
        gc.enable()
    return gpd.GeoDataFrame({"lon": bx, "lat": by}, geometry=geom, index=df.index)


def pv_arrays(df: pd.DataFrame) -> object:
    from fractions import Fraction

    import pyproj

    from gpframe.queries.privatize import privatize_points

    lon, lat = df["lon"].to_numpy(), df["lat"].to_numpy()
    fwd = pyproj.Transformer.from_crs("EPSG:4326", PV_CRS, always_xy=True)
    xy = np.column_stack(fwd.transform(lon, lat))
    codes, uniq = pd.factorize(df["u"])
    return privatize_points(xy, codes, len(uniq), kind="cgp", amount=Fraction(PV_RHO), per="point")


def pv_accessor(df: pd.DataFrame, session: Session) -> object:
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=PV_CRS)
    return bound.privatize(rho=PV_RHO, per="point", progress=False)


OPS = {
    "range_count": (rc_baseline, rc_arrays, rc_accessor),
    "kde_raster": (kde_baseline, kde_arrays, kde_accessor),
    "grid_stats": (gs_baseline, gs_arrays, gs_accessor),
    "privatize": (pv_baseline, pv_arrays, pv_accessor),
}
PATHS = ("baseline", "arrays", "accessor first", "accessor again")


def runners(op: str, xy: np.ndarray) -> dict[str, Callable[[], object]]:
    """One zero-argument callable per path; the accessor pair shares one fresh session."""
    base, arrays, accessor = OPS[op]
    box: dict[str, Session] = {}
    if op == "privatize":  # one point per user, lon/lat
        df = pd.DataFrame({"u": np.arange(len(xy)), "lon": xy[:, 0], "lat": xy[:, 1]})
        new = lambda: Session(budget=BUDGET)  # noqa: E731
        data = df
    elif op == "grid_stats":
        n = len(xy)
        users = np.arange(n) % max(n // GS_PER_USER, 1)
        vals = np.random.default_rng(1).uniform(0, 65, n)
        df = pd.DataFrame({"u": users, "lon": xy[:, 0], "lat": xy[:, 1], "v": vals})
        new = lambda: Session(central=GS_CENTRAL)  # noqa: E731
        data = df
    else:
        df = pd.DataFrame({"u": np.arange(len(xy)), "x": xy[:, 0] + X0, "y": xy[:, 1] + Y0})
        new = lambda: Session(budget=BUDGET)  # noqa: E731
        data = xy

    def first() -> object:
        box["s"] = new()
        return accessor(df, box["s"])

    # the previous round's session (10^7 users' arrays) is freed before the clock starts: its
    # teardown is not part of the first call (0.13-0.2 s at 10^7 when it was counted)
    first.before = lambda: box.pop("s", None)  # type: ignore[attr-defined]

    return {
        "baseline": lambda: base(data),
        "arrays": lambda: arrays(data),
        "accessor first": first,
        "accessor again": lambda: accessor(df, box["s"]),
    }


CLOCK = time.perf_counter  # --cpu: time.process_time


def timed(fn: Callable[[], object]) -> float:
    getattr(fn, "before", lambda: None)()
    gc.collect()
    t = CLOCK()
    fn()
    return CLOCK() - t


def peak(fn: Callable[[], object]) -> int:
    getattr(fn, "before", lambda: None)()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6])
    ap.add_argument("--big", action="store_true", help="add n = 10^7")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds (best of)")
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="time process CPU instead of wall clock (a loaded, shared machine)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="cores the accessor may use (gpframe.mechanisms.row_ranges.THREADS; default: all)",
    )
    a = ap.parse_args()
    global CLOCK
    if a.cpu:  # other processes holding the cores do not count; every thread's CPU does
        CLOCK = time.process_time
    if a.threads is not None:
        import gpframe.mechanisms.row_ranges as row_ranges

        row_ranges.THREADS = a.threads
    print(f"accessor cores: {a.threads or 'all'} (the baseline: one)", flush=True)
    sizes = a.sizes + ([10**7] if a.big else [])
    for op in a.ops:  # warm-up: imports, pyproj transformers, FFT plans
        for fn in runners(op, points(1000, op)).values():
            fn()
    for n in sizes:
        best = {(op, p): math.inf for op in a.ops for p in PATHS}
        run = {op: runners(op, points(n, op)) for op in a.ops}
        for _ in range(a.repeat):  # interleaved: a load change hits every path alike
            for op in a.ops:
                for p in PATHS:
                    best[op, p] = min(best[op, p], timed(run[op][p]))
        mem = {}
        if not a.no_memory:
            for op in a.ops:
                for p in PATHS:
                    mem[op, p] = peak(run[op][p])
        for op in a.ops:
            t0 = best[op, "baseline"]
            for p in PATHS:
                t = best[op, p]
                line = f"n={n:<9d} {op:<12} {p:<15} {t:8.3f} s  {t / t0:6.2f}x baseline"
                if mem:
                    m, m0 = mem[op, p], mem[op, "baseline"]
                    line += f"  peak {m / n:7.1f} B/point ({m / m0:5.2f}x baseline)"
                if p.startswith("accessor"):
                    goal = GOALS.get(op, 3.0)
                    line += f"  goal <= {goal:g}x: {'OK' if t / t0 <= goal else 'SLOW'}"
                    if mem:
                        big = mem[op, p] > MEM_GOAL * mem[op, "baseline"]
                        line += f", memory <= {MEM_GOAL:g}x: {'HIGH' if big else 'OK'}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
