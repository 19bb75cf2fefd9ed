"""Projected or lon/lat input on a spherical datum (EPSG:2163, ``+R=``): the automatic metric CRS.

PROJ refuses UTM on a sphere ("eccentricity should not be zero"), so gpframe builds its automatic
projections on WGS 84 for such inputs and measures scale factors against the ellipsoid.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyproj
import pytest

from gpframe import geo

WGS84 = pyproj.Geod(ellps="WGS84")
SPHERE_LONLAT = "+proj=longlat +R=6371000 +no_defs +type=crs"


def _frame_2163(lon, lat) -> pd.DataFrame:
    to = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:2163", always_xy=True)
    x, y = to.transform(np.asarray(lon, float), np.asarray(lat, float))
    return pd.DataFrame({"uid": np.arange(len(x)) % 3, "x": x, "y": y})


def _resolve(df, **kw) -> geo.Projected:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # coarse-extent / inflation warnings are tested elsewhere
        return geo.resolve_points(df, user="uid", **kw)


@pytest.mark.parametrize(
    "domain, kind",
    [
        ((-90.5, 39.0, -89.5, 41.0), "UTM zone 16N"),  # inside one zone: UTM on a sphere fails
        ((-91.0, 39.0, -89.0, 41.0), "transverse Mercator"),
        ((-125.0, 24.0, -66.0, 50.0), "Lambert conformal conic"),  # the contiguous US
        (None, ""),  # the convenience path: whole-degree cover of the data
    ],
)
def test_epsg_2163_input_projects_on_wgs84_and_round_trips(domain, kind):
    lon, lat = np.array([-90.2, -89.8, -90.0]), np.array([39.5, 40.5, 40.0])
    df = _frame_2163(lon, lat)
    p = _resolve(df, x="x", y="y", crs="EPSG:2163", domain=domain)
    assert kind in p.crs_m.name
    assert p.crs_m.geodetic_crs.equals(pyproj.CRS("EPSG:4326"), ignore_axis_order=True)
    bx, by = p.to_input_crs(p.xy)
    np.testing.assert_allclose(bx, df["x"], atol=1e-6)
    np.testing.assert_allclose(by, df["y"], atol=1e-6)


def test_spherical_input_scale_max_bounds_ground_metres_on_the_ellipsoid():
    # 1 km steps on the WGS 84 ellipsoid, read as lon/lat on the sphere (the transformation keeps
    # them): projected length / ground length lies within [scale_min, scale_max].
    rng = np.random.default_rng(3)
    lon0, lat0 = rng.uniform(-120, -70, 200), rng.uniform(26, 48, 200)
    az = rng.uniform(0, 360, 200)
    lon1, lat1, _ = WGS84.fwd(lon0, lat0, az, np.full(200, 1000.0))
    df = pd.DataFrame(
        {"uid": np.r_[np.arange(200), np.arange(200)], "lon": np.r_[lon0, lon1],
         "lat": np.r_[lat0, lat1]}
    )  # fmt: skip
    p = _resolve(df, lon="lon", lat="lat", crs=SPHERE_LONLAT, domain=(-125, 24, -66, 50))
    d = np.hypot(*(p.xy[200:] - p.xy[:200]).T) / 1000.0
    assert d.max() <= p.scale_max * (1 + 1e-6)
    # scale_min (the stated noise inflation, not the guarantee) is sampled on a 17 x 17 grid.
    assert d.min() >= p.scale_min * (1 - 1e-4)


def test_projection_datum_keeps_ellipsoidal_datums():
    assert geo._projection_datum(pyproj.CRS("EPSG:26918")).name == "NAD83"
    assert geo._projection_datum(pyproj.CRS("EPSG:4326")).to_epsg() == 4326
    assert geo._projection_datum(pyproj.CRS(SPHERE_LONLAT)).to_epsg() == 4326
