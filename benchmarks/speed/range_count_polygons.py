"""Benchmark: range_count's default method on big MultiPolygons (the five NYC boroughs).

Measures, in the same run and on the same points, ``range_count_arrays`` with ``method="pt"``
(the baseline: no signed distances, no threshold shift) and with the default ``"dist-elim"``
on each borough (MultiPolygons of 6k to 29k vertices, ~76k in all), one point per vessel of the
AIS New York Harbor tracks (141 users), interleaved and repeated (``--repeat``). The default
method's extra cost is mostly the Appendix B threshold shift on a non-rectangular region: a
Newton search over buffered band areas of the region simplified to a fifth of the noise scale
(``docs/operations/range_count.md``). Prints both times and their ratio (goal ≤ 3×), and the
default method's time on the same zones once more (the shift is remembered per region and noise
scale, as for a monitor or a plan querying the same zones). Then the same through the public call,
``df.geopriv(session, ...).range_count(boroughs, rho=1e-4, method=...)`` on a fresh in-memory
session (validation, ledger, result table included), default ÷ pt interleaved the same way.

Then the shift itself, per borough at the run's noise scale: the previous computation (Brent's
root search on buffers of the full-resolution region, :func:`threshold_shift_polygon`) against
the current one (:func:`shift_for_region`, caches cleared), their times and the difference of
the two shifts as a fraction of w (documented tolerance: 1 %). Last, for 20 000 points, the
signed distances to the largest region against one ``shapely.distance`` scan of its boundary
per point (the plain computation; the results must be equal bit for bit).

Data: ``$GPFRAME_DATA`` (default ``/work/shared/data``); without it, five noisy star polygons
of 15k vertices each and 141 uniform points stand in. Seeded noise, so runs compare.

Run: ``PYTHONPATH=. python benchmarks/speed/range_count_polygons.py [--repeat 5] [--no-exact]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import shapely

from gpframe.queries import range_count as rc
from gpframe.queries.range_count import (
    range_count_arrays,
    shift_for_region,
    signed_distance,
    threshold_shift_polygon,
)
from gpframe.testing import seeded_enabled, seeded_rng


def _synthetic() -> tuple[list, np.ndarray]:
    rng = np.random.default_rng(0)  # synthetic data, not a release
    polys = []
    for k in range(5):
        ang = np.linspace(0, 2 * np.pi, 15000, endpoint=False)
        rad = 4000 + 800 * np.sin(7 * ang) + rng.uniform(-30, 30, ang.size)
        cx = 12000.0 * k
        polys.append(shapely.MultiPolygon([shapely.Polygon(
            np.column_stack([cx + rad * np.cos(ang), rad * np.sin(ang)])
        )]))  # fmt: skip
    xy = rng.uniform([-5000, -5000], [55000, 5000], (141, 2))
    return polys, xy


def _nyc(root: Path) -> tuple[list, np.ndarray]:
    import geopandas as gpd
    import pandas as pd
    from pyproj import Transformer

    boroughs = gpd.read_parquet(root / "nyc_polygons/nyc_boroughs.parquet").to_crs(32618)
    ais = pd.read_parquet(root / "ais_nyharbor/ais_nyharbor_tracks.parquet")
    last = ais.groupby("mmsi")[["lon", "lat"]].last()
    x, y = Transformer.from_crs(4326, 32618, always_xy=True).transform(last.lon, last.lat)
    return list(boroughs.geometry.values), np.column_stack([x, y])


def timed(regions: list, xy: np.ndarray, method: str) -> float:
    users = np.arange(len(xy))
    t = time.perf_counter()
    with seeded_enabled():
        for i, region in enumerate(regions):
            range_count_arrays(
                xy, users, region, kind="cgp", amount=1e-4, method=method, rng=seeded_rng(i)
            )
    return time.perf_counter() - t


def timed_public(regions: list, xy: np.ndarray, method: str, seed: int) -> float:
    import geopandas as gpd
    import pandas as pd

    import gpframe as gp

    frame = pd.DataFrame({"user": np.arange(len(xy)), "x": xy[:, 0], "y": xy[:, 1]})
    zones = gpd.GeoSeries(regions, crs=32618)
    session = gp.Session(budget=gp.CGP(rho=1.0))
    t = time.perf_counter()
    with seeded_enabled():
        frame.geopriv(session, user="user", x="x", y="y", crs=32618).range_count(
            zones, rho=1e-4, method=method, rng=seeded_rng(seed), progress=False
        )
    return time.perf_counter() - t


def _forget_shifts() -> None:
    rc._SHIFTS.clear()  # a first call: nothing remembered from an earlier one
    rc._SIMPLE.clear()


def compare_shifts(regions: list, w: float) -> tuple[float, float]:
    """Time the previous (exact) and the current shift computation at noise scale ``w``."""
    t_exact = t_fast = 0.0
    worst = 0.0
    for region in regions:
        t = time.perf_counter()
        exact = threshold_shift_polygon(w, region)
        t_exact += time.perf_counter() - t
        _forget_shifts()
        t = time.perf_counter()
        fast = float(shift_for_region([w], region)[0])
        t_fast += time.perf_counter() - t
        worst = max(worst, abs(fast - exact) / w)
        print(f"  w = {w:6.2f} m: exact shift {exact:8.4f} m, simplified {fast:8.4f} m")
    print(
        f"shift, {len(regions)} regions: exact root search {t_exact:6.2f} s, simplified Newton "
        f"{t_fast:5.2f} s, ratio {t_exact / t_fast:5.1f}; max |difference| {100 * worst:.2f} % "
        "of w (tolerance 1 %)"
    )
    return t_exact, t_fast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved repetitions (default 5)")
    ap.add_argument("--no-exact", action="store_true", help="skip the exact shift (slow)")
    args = ap.parse_args()
    root = Path(os.environ.get("GPFRAME_DATA", "/work/shared/data"))
    if (root / "nyc_polygons/nyc_boroughs.parquet").exists():
        regions, xy, what = *_nyc(root), "NYC boroughs"
    else:
        regions, xy, what = *_synthetic(), "synthetic stars"
    nv = int(sum(shapely.get_num_coordinates(r) for r in regions))
    print(f"{what}: {len(regions)} regions, {nv} vertices, {len(xy)} users")
    first, again, t_pts, t_defs = [], [], [], []
    for k in range(args.repeat):
        _forget_shifts()
        t_pt = timed(regions, xy, "pt")
        t_def = timed(regions, xy, "dist-elim")
        t_again = timed(regions, xy, "dist-elim")  # the shifts are remembered per (region, w)
        first.append(t_def / t_pt)
        t_pts.append(t_pt)
        t_defs.append(t_def)
        again.append(t_again / t_pt)
        print(
            f"[{k + 1}] pt (baseline) {t_pt:6.2f} s | dist-elim (default) {t_def:6.2f} s, "
            f"ratio {t_def / t_pt:5.2f} | again (same zones) {t_again:6.2f} s, "
            f"ratio {t_again / t_pt:5.2f}"
        )
    print(
        f"default ÷ pt, median of {args.repeat}: first call {statistics.median(first):.2f} "
        f"(goal ≤ 3×), again {statistics.median(again):.2f}"
    )
    asked = sorted({w for _, w in rc._SHIFTS})  # the noise scales the runs above asked for
    public = []
    for method in ("pt", "dist-elim", "pt"):  # imports and first-use setup, not measured
        timed_public(regions, xy, method, 0)
    for k in range(args.repeat):
        _forget_shifts()
        t_pt = timed_public(regions, xy, "pt", k)
        t_def = timed_public(regions, xy, "dist-elim", k)
        public.append(t_def / t_pt)
        print(
            f"[{k + 1}] public call: pt {t_pt:6.2f} s | dist-elim (default) {t_def:6.2f} s, "
            f"ratio {t_def / t_pt:5.2f}"
        )
    print(f"public call, default ÷ pt, median of {args.repeat}: {statistics.median(public):.2f}")
    if not args.no_exact:
        t_exact = t_fast = 0.0
        for w in asked:
            e, f = compare_shifts(regions, w)
            t_exact, t_fast = t_exact + e, t_fast + f
        before = statistics.median(t_defs) - t_fast + t_exact
        print(
            f"the previous default (exact shift): about {before:.2f} s, "
            f"{before / statistics.median(t_pts):.1f}× pt (medians, shift swapped in)"
        )
    big = max(regions, key=shapely.get_num_coordinates)
    x0, y0, x1, y1 = big.bounds
    pts = np.random.default_rng(1).uniform([x0, y0], [x1, y1], (20_000, 2))
    t = time.perf_counter()
    plain = shapely.distance(big.boundary, shapely.points(pts))
    plain = np.where(shapely.contains_xy(big, pts[:, 0], pts[:, 1]), -plain, plain)
    t_plain = time.perf_counter() - t
    t = time.perf_counter()
    tree = signed_distance(pts, big)
    t_tree = time.perf_counter() - t
    assert np.array_equal(plain, tree)
    print(
        f"20000 signed distances, {shapely.get_num_coordinates(big)} vertices: plain scan "
        f"{t_plain:5.2f} s, signed_distance {t_tree:5.2f} s, ratio {t_tree / t_plain:4.2f}"
    )


if __name__ == "__main__":
    main()
