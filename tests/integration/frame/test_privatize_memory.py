"""privatize's peak memory against the float-noise floor that builds the same output.

``tracemalloc`` sees numpy's buffers and every Python object, and its peak is the same on every
run of the same code, so the ratio is a stable check (no timing). The floor is the one of
``benchmarks/speed/user_path.py``: project, add numpy Gaussian noise, project back, shapely
points, a GeoDataFrame. privatize needs more than that (the ledger's arrays, the sampler's
buffers, the result), but nothing per user may be left alive while the 10^5 output points are
made: before that was freed, the peak was 2.3 times the floor's (1.3 times after).

At 10^5 points the sampler's fixed-size batch buffers (about 20 MB) still weigh on a ratio of
peaks, so the default run checks what is alive when the output points are made, and the ratio
itself is checked at 10^6 points in the slow tier.
"""

from __future__ import annotations

import gc
import math
import tracemalloc
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyproj
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.geo import points_array
from gpframe.ledger import Session

UTM = "EPSG:32618"
RHO = 1e-4


def _frame(n: int) -> pd.DataFrame:
    g = np.random.default_rng(3)
    lon = -74.0 + g.normal(0.0, 0.05, n)
    lat = 40.7 + g.normal(0.0, 0.05, n)
    return pd.DataFrame({"u": np.arange(n), "lon": lon, "lat": lat})


def _floor(df: pd.DataFrame) -> object:
    import geopandas as gpd

    fwd = pyproj.Transformer.from_crs("EPSG:4326", UTM, always_xy=True)
    x, y = fwd.transform(df["lon"].to_numpy(), df["lat"].to_numpy())
    gen = np.random.default_rng(0)
    sigma = 1 / math.sqrt(2 * RHO)
    x, y = x + gen.normal(0, sigma, len(x)), y + gen.normal(0, sigma, len(y))
    back = pyproj.Transformer.from_crs(UTM, "EPSG:4326", always_xy=True)
    bx, by = back.transform(x, y)
    geom = points_array(bx, by, "EPSG:4326")
    return gpd.GeoDataFrame({"lon": bx, "lat": by}, geometry=geom, index=df.index)


def _private(df: pd.DataFrame) -> object:
    session = Session(budget=gp.CGP(rho=1e-2))
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=UTM)
    return bound.privatize(rho=RHO, per="point", progress=False)


def _peak(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _warm() -> None:
    small = _frame(500)
    _floor(small)  # imports, transformers, compiled kernels: not part of the peak
    _private(small)


def test_only_the_result_is_alive_when_the_output_points_are_made(monkeypatch):
    """At that moment privatize holds its result (the released points in metres, the per-user
    charges, allocations and error bounds: 40 B/point), the projected input the bound caches
    (16) and the noisy lon/lat (16): 82 B/point in all at 10^5 points; 164 before."""
    import gpframe.geo

    _warm()
    seen = []
    make = gpframe.geo.points_array

    def spy(xs: np.ndarray, ys: np.ndarray, crs: object, threads: int | None = 1) -> object:
        seen.append(tracemalloc.get_traced_memory()[0])
        return make(xs, ys, crs, threads=threads)

    monkeypatch.setattr(gpframe.geo, "points_array", spy)
    df = _frame(100_000)
    _peak(lambda: _private(df))
    assert len(seen) == 1
    assert seen[0] / len(df) <= 100, seen[0] / len(df)


@pytest.mark.slow
def test_privatize_peak_is_within_1_5_times_the_float_noise_floor():
    _warm()
    df = _frame(1_000_000)
    floor, private = _peak(lambda: _floor(df)), _peak(lambda: _private(df))
    assert private <= 1.5 * floor, (private / len(df), floor / len(df))
