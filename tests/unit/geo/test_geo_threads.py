"""Projections and output points on several cores give the same floats and points as one call.

The pandas face projects, maps back and builds its output points in row ranges on every core
(``gpframe.mechanisms.row_ranges.cores_for``); Dask workers and the array API use one. What
must hold is that the values never depend on the split.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyproj
import pytest
import shapely

from gpframe.geo import _transformed, locate_points, points_array
from gpframe.mechanisms.row_ranges import MIN_ROWS

N = 3 * MIN_ROWS + 5  # three ranges on two threads, the last ones one row longer


def _lonlat(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(7)
    return gen.uniform(-74.25, -73.77, n), gen.uniform(40.55, 40.91, n)


def test_transform_on_two_threads_gives_one_calls_floats_both_ways():
    lon, lat = _lonlat()
    fwd = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
    back = pyproj.Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)
    x, y = fwd.transform(lon, lat)
    two = _transformed(fwd, lon, lat, threads=2)
    assert np.array_equal(two[0], x) and np.array_equal(two[1], y)
    bx, by = back.transform(x, y)
    two_back = _transformed(back, two[0], two[1], threads=2)
    assert np.array_equal(two_back[0], bx) and np.array_equal(two_back[1], by)


def test_transform_of_points_outside_the_crs_matches_one_call():
    """inf where PROJ cannot map a point, in whichever range it falls."""
    lon, lat = _lonlat()
    lat[[0, MIN_ROWS, N - 1]] = 91.0  # beyond the pole: no UTM coordinates
    fwd = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
    x, y = fwd.transform(lon, lat, errcheck=False)
    two = _transformed(fwd, lon, lat, threads=2)
    np.testing.assert_array_equal(two[0], x)
    np.testing.assert_array_equal(two[1], y)
    assert not np.isfinite(two[0][[0, MIN_ROWS, N - 1]]).any()


def test_points_on_two_threads_are_one_calls_points():
    xs, ys = _lonlat()
    xs[5] = np.nan  # an unreleased row's coordinates
    one = points_array(xs, ys, "EPSG:4326")
    two = points_array(xs, ys, "EPSG:4326", threads=2)
    assert type(two) is type(one) and two.crs == one.crs and len(two) == N
    assert shapely.equals_exact(np.asarray(two)[6:], np.asarray(one)[6:], tolerance=0).all()
    assert np.array_equal(shapely.get_x(np.asarray(two)), xs, equal_nan=True)
    assert np.array_equal(shapely.get_y(np.asarray(two)), ys)


@pytest.mark.parametrize("threads", [2, None])
def test_projected_points_and_the_way_back_do_not_depend_on_the_cores(threads, monkeypatch):
    import gpframe.mechanisms.row_ranges as rr

    monkeypatch.setattr(rr, "THREADS", 2)
    lon, lat = _lonlat()
    df = pd.DataFrame({"u": np.arange(N) % 100, "lon": lon, "lat": lat})
    loc = locate_points(df, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618")
    one, many = loc.project(), loc.project(threads=threads)
    assert one.threads == 1 and many.threads == threads
    assert np.array_equal(one.xy, many.xy)
    xy = one.xy + 71.0  # as if noised
    a, b = one.to_input_crs(xy), many.to_input_crs(xy)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
