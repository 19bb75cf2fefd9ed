"""Peak memory of range_count and kde_raster through the accessor, in bytes per point.

``benchmarks/speed/user_path.py`` measures the peaks at 10^6 and 10^7 points against a
non-private baseline; this keeps the per-user arrays held at the peak from coming back at a
size that runs in a second (10^5 users, one point each): the coordinates viewed, not copied;
one-byte group codes and round counts; no estimates array through the rounds; the release's
array not copied; binning in blocks; one region's charges not regrouped. The bounds sit
halfway between the peaks before (244 and 293 B/point) and after (196 and 245) those changes.
"""

import gc
import tracemalloc

import numpy as np
import pandas as pd
import shapely

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session

N = 100_000


def _peak_per_point(call) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / N
    finally:
        tracemalloc.stop()


def test_range_count_and_kde_raster_peaks_per_point():
    gen = np.random.default_rng(0)
    df = pd.DataFrame({"u": np.arange(N), "x": 400_000 + gen.uniform(0, 10_000, N),
                       "y": 4_500_000 + gen.uniform(0, 10_000, N)})  # fmt: skip
    region = shapely.box(402_000, 4_502_000, 408_000, 4_508_000)

    def bound():
        s = Session(budget=gp.CGP(rho=1e-2))
        return df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")

    def count():
        return bound().range_count(region, rho=1e-4)

    def raster():
        return bound().kde_raster(bandwidth_m=1000, cell_m=100, rho=1e-5,
                                  bounds=(400_000, 4_500_000, 410_000, 4_510_000))  # fmt: skip

    count(), raster()  # first calls: imports and caches are not the operations' memory
    assert _peak_per_point(count) < 220
    assert _peak_per_point(raster) < 269
