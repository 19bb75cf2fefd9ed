"""locate_points validates without projecting; Located.lonlat gives the WGS 84 lon/lat as given,
and Located.project is the resolve_points policy (too-wide extents still refused there)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyproj
import pytest

from gpframe import geo
from gpframe.errors import CRSError, GpframeWarning, InvalidInputError

# lon -173.6 .. -64.4, lat 18 .. 60: Alaska to Puerto Rico, many UTM zones
WIDE = pd.DataFrame({"u": [1, 2, 3, 4], "lon": [-173.6, -150.0, -100.0, -64.4],
                     "lat": [52.0, 60.0, 35.0, 18.0]})  # fmt: skip


def test_multi_zone_lonlat_is_located_without_projection(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("projected")

    monkeypatch.setattr(geo, "_project", refuse)
    monkeypatch.setattr(pyproj, "Transformer", None)  # any transform would fail
    loc = geo.locate_points(WIDE, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    lon, lat = loc.lonlat()
    assert lon.tolist() == WIDE.lon.tolist() and lat.tolist() == WIDE.lat.tolist()
    assert len(loc) == 4 and loc.users.tolist() == [1, 2, 3, 4] and loc.coords == ("lon", "lat")


def test_project_chooses_the_wide_projection_and_says_so():
    loc = geo.locate_points(WIDE, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    with pytest.warns(GpframeWarning) as rec:
        p = loc.project()
    msgs = [str(w.message) for w in rec]
    assert any("whole degrees" in m for m in msgs)
    (wide,) = [m for m in msgs if "least distortion" in m]
    assert p.crs_m.name in wide and f"{p.noise_inflation:.3f} times" in wide
    assert "domain=" in wide
    assert p.crs_m.name.startswith("gpframe ") and 1.05 < p.noise_inflation < 1.1
    # the centre comes from the public whole-degree box, never from the exact points
    moved = WIDE.assign(lon=WIDE.lon + np.array([0.3, 0, 0, -0.3]))
    q = geo.locate_points(moved, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    with pytest.warns(GpframeWarning):
        q = q.project()
    assert q.crs_m.to_wkt() == p.crs_m.to_wkt() and q.scale_max == p.scale_max


def test_project_refuses_an_extent_too_wide_for_any_projection():
    world = pd.DataFrame(
        {"u": [1, 2, 3, 4], "lon": [-170.0, -60.0, 50.0, 160.0], "lat": [-50.0, 0.0, 60.0, 10.0]}
    )
    loc = geo.locate_points(world, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    with pytest.raises(CRSError, match="too wide for one transverse Mercator"):
        loc.project()


def test_public_arguments_and_columns_are_still_checked_eagerly():
    with pytest.raises(CRSError, match="not a projected CRS"):
        geo.locate_points(WIDE, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:4326")
    with pytest.raises(InvalidInputError, match="domain="):
        geo.locate_points(WIDE, user="u", lon="lon", lat="lat", crs=4326, domain=(1, 2, 3))
    bad = WIDE.assign(lat=[52.0, 95.0, 35.0, 18.0])
    with pytest.raises(InvalidInputError, match="latitude"):
        geo.locate_points(bad, user="u", lon="lon", lat="lat", crs=4326)


def test_lonlat_of_other_crss_is_wgs84():
    p = geo.resolve_points(WIDE.iloc[2:3], user="u", lon="lon", lat="lat", crs=4326,
                           to_crs="EPSG:32614")  # fmt: skip
    m = pd.DataFrame({"u": [3], "x": p.xy[:, 0], "y": p.xy[:, 1]})
    lon, lat = geo.locate_points(m, user="u", x="x", y="y", crs="EPSG:32614").lonlat()
    assert np.allclose([lon[0], lat[0]], [-100.0, 35.0], atol=1e-9)
    nad = geo.locate_points(WIDE, user="u", lon="lon", lat="lat", crs="EPSG:4269")
    lon, lat = nad.lonlat()
    assert np.allclose(lon, WIDE.lon, atol=1e-4) and np.allclose(lat, WIDE.lat, atol=1e-4)


def test_project_equals_resolve_points():
    df = WIDE.iloc[2:3]
    a = geo.locate_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs=32614).project()
    b = geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs=32614)
    assert np.array_equal(a.xy, b.xy) and a.crs_m == b.crs_m and a.scale_max == b.scale_max
    assert a.crs_choice == b.crs_choice and a.extent == b.extent


def test_projected_xy_is_a_view_of_the_frame_columns_when_no_copy_is_needed():
    # a frame's float columns live in one block: the metres as given are viewed, not copied
    # (16 bytes per point at the peak of every operation), with the same values, read-only
    df = pd.DataFrame({"u": [1, 2, 3], "x": [500_000.0, 500_100.0, 500_200.0],
                       "y": [4_500_000.0, 4_500_300.0, 4_500_600.0]})  # fmt: skip
    p = geo.locate_points(df, user="u", x="x", y="y", crs="EPSG:32618").project()
    assert np.array_equal(p.xy, df[["x", "y"]].to_numpy()) and p.xy.shape == (3, 2)
    assert np.shares_memory(p.xy, df["x"].to_numpy()) and not p.xy.flags.writeable
    # y before x in the block, and columns in separate arrays: the same values either way
    rev = pd.DataFrame({"y": df["y"], "x": df["x"], "u": df["u"]})
    q = geo.locate_points(rev, user="u", x="x", y="y", crs="EPSG:32618").project()
    assert np.array_equal(q.xy, p.xy)
    apart = df.copy()
    apart["y"] = np.array(df["y"])  # a column set alone: its own block
    r = geo.locate_points(apart, user="u", x="x", y="y", crs="EPSG:32618").project()
    assert np.array_equal(r.xy, p.xy)
