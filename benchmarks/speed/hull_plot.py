"""Benchmark: ``HullResult.plot()`` for 141 hulls (one per vessel of the AIS harbour sample).

Measures, in the same run and on the same polygons, each followed by one render of the figure
(Agg backend): a plain ``GeoSeries.plot`` (the baseline: one polygon collection, one colour);
``HullResult.plot()``; and the categorical ``GeoDataFrame.plot(column=user, categorical=True)``
that ``HullResult.plot`` used to call (one layer and one redraw per user). Prints the times and
the ratios to the baseline. The hulls are synthetic (random convex hulls, 3 to 40 vertices,
spread over 30 km): plotting does not depend on where they came from.

Run: ``PYTHONPATH=. python benchmarks/speed/hull_plot.py [n_hulls]``.
"""

from __future__ import annotations

import sys
import time

import geopandas as gpd
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import shapely

from gpframe.results import HullResult


def hulls(n: int) -> gpd.GeoDataFrame:
    rng = np.random.default_rng(0)  # synthetic geometry, not a release
    polys = []
    for _ in range(n):
        c = rng.uniform(500_000, 530_000, 2), rng.uniform(0, 2000)
        pts = c[0] + rng.normal(0, 200 + c[1], (rng.integers(3, 40), 2))
        polys.append(shapely.MultiPoint(pts).convex_hull)
    return gpd.GeoDataFrame({"mmsi": np.arange(n)}, geometry=polys, crs="EPSG:32618")


def timed(draw) -> float:
    t = time.perf_counter()
    ax = draw()
    ax.figure.canvas.draw()
    dt = time.perf_counter() - t
    plt.close(ax.figure)
    return dt


def main(n: int = 141) -> None:
    g = hulls(n)
    res = HullResult(value=g, error=1.0, confidence=0.95)
    timed(lambda: g.geometry.plot())  # warm-up: imports, font cache
    t_base = timed(lambda: g.geometry.plot())
    t_new = timed(res.plot)
    t_old = timed(lambda: g.plot(column="mmsi", categorical=True, alpha=0.35, edgecolor="0.2"))
    print(f"{n} hulls")
    print(f"GeoSeries.plot (baseline)        {t_base:6.2f} s")
    print(f"HullResult.plot                  {t_new:6.2f} s   ratio {t_new / t_base:5.1f}")
    print(f"categorical plot (the old path)  {t_old:6.2f} s   ratio {t_old / t_base:5.1f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
