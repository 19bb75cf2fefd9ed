"""Unit tests for gpframe.geo: column resolution, CRS policy, units, scale factor, validation."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
import pytest
import shapely

from gpframe import geo
from gpframe.errors import CRSError, GpframeWarning, InvalidInputError

DATA = Path("/work/shared/data")
GOTRACK = DATA / "gotrack_aracaju" / "gotrack_points.parquet"
AIS_1H = DATA / "ais_nyharbor" / "ais_nyharbor_1h.parquet"
NTA = DATA / "nyc_polygons" / "nyc_nta_2010.parquet"
WGS84 = pyproj.Geod(ellps="WGS84")
NOTHING = "Nothing was charged."


def lonlat_frame(lon, lat, users=None, index=None) -> pd.DataFrame:
    lon = np.asarray(lon, dtype=float)
    lat = np.asarray(lat, dtype=float)
    users = np.arange(lon.size) % 3 if users is None else users
    return pd.DataFrame({"uid": users, "lon": lon, "lat": lat}, index=index)


def resolve_auto(df, **kw) -> geo.Projected:
    """resolve_points on the convenience path (no to_crs=/domain=): it must warn exactly once."""
    with pytest.warns(GpframeWarning, match="coarse extent becomes public") as rec:
        p = geo.resolve_points(df, **kw)
    assert len(rec) == 1
    return p


def grid(lon0, lat0, dlon, dlat, n=5):
    """A deterministic n x n lon/lat grid over [lon0, lon0+dlon] x [lat0, lat0+dlat]."""
    lo, la = np.meshgrid(np.linspace(lon0, lon0 + dlon, n), np.linspace(lat0, lat0 + dlat, n))
    return lo.ravel(), la.ravel()


def pair_ratios(p: geo.Projected, lon, lat):
    """Projected distance / geodesic distance for every pair of the given points."""
    i, j = np.triu_indices(len(lon), k=1)
    _, _, d_geod = WGS84.inv(lon[i], lat[i], lon[j], lat[j])
    d_proj = np.hypot(*(p.xy[i] - p.xy[j]).T)
    return d_proj / d_geod


# --------------------------------------------------------------------------------------------------
# round trips and pass-through


@pytest.mark.parametrize(
    ("lon0", "lat0", "epsg"),
    [(-74.0, 40.7, 32618), (-37.06, -10.92, 32724), (18.9, 69.6, 32634), (151.2, -33.9, 32756)],
)
def test_resolve_lonlat_round_trip_utm_within_1e9_degrees(lon0, lat0, epsg):
    lon, lat = grid(lon0 - 0.2, lat0 - 0.2, 0.4, 0.4, n=7)
    p = resolve_auto(lonlat_frame(lon, lat), user="uid", lon="lon", lat="lat", crs=4326)
    assert p.crs_m.to_epsg() == epsg
    assert p.reprojected and p.xy.dtype == np.float64 and p.xy.shape == (49, 2)
    back_lon, back_lat = p.to_input_crs(p.xy)
    assert np.max(np.abs(back_lon - lon)) < 1e-9
    assert np.max(np.abs(back_lat - lat)) < 1e-9


def test_resolve_projected_metre_crs_passes_through_unchanged():
    x = np.array([583_000.0, 584_500.25, 585_123.5])
    y = np.array([4_507_000.0, 4_508_000.5, 4_506_400.75])
    df = pd.DataFrame({"u": ["a", "b", "a"], "e": x, "n": y}, index=[7, 3, 9])
    p = geo.resolve_points(df, user="u", x="e", y="n", crs="EPSG:32618")
    assert p.crs_m.to_epsg() == 32618 and p.crs_in.to_epsg() == 32618
    assert not p.reprojected
    np.testing.assert_array_equal(p.xy, np.column_stack([x, y]))
    assert list(p.index) == [7, 3, 9] and list(p.users) == ["a", "b", "a"]
    assert 1.0 <= p.scale_max < 1.001
    bx, by = p.to_input_crs(p.xy)
    np.testing.assert_array_equal(bx, x)
    np.testing.assert_array_equal(by, y)


def test_resolve_geodataframe_point_geometry_and_to_frame_keeps_index_and_crs():
    lon, lat = grid(-74.05, 40.7, 0.05, 0.05, n=3)
    gdf = gpd.GeoDataFrame(
        {"uid": np.arange(9), "speed": np.arange(9.0)},
        geometry=gpd.points_from_xy(lon, lat),
        crs="EPSG:4326",
        index=pd.Index(list("abcdefghi"), name="row"),
    ).rename_geometry("geom")
    p = geo.resolve_points(gdf, user="uid", to_crs="EPSG:32618")
    assert p.coords == ("geom",) and p.crs_m.to_epsg() == 32618
    out = p.to_frame(p.xy, like=gdf)
    assert isinstance(out, gpd.GeoDataFrame)
    assert out.index.equals(gdf.index) and out.crs.equals(gdf.crs)
    assert out.geometry.name == "geom" and list(out["speed"]) == list(gdf["speed"])
    np.testing.assert_allclose(out.geometry.x, lon, atol=1e-9, rtol=0)


def test_points_frame_plain_dataframe_in_dataframe_out():
    df = lonlat_frame([-74.0, -73.9], [40.7, 40.8], index=[10, 20])
    p = geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=4326, to_crs=32618)
    out = p.to_frame(p.xy + 100.0, like=df)
    assert type(out) is pd.DataFrame and list(out.columns) == ["uid", "lon", "lat"]
    assert list(out.index) == [10, 20] and not np.allclose(out["lon"], df["lon"])
    bare = geo.points_frame(np.column_stack(p.to_input_crs(p.xy)), df.index, "EPSG:4326")
    assert isinstance(bare, gpd.GeoDataFrame) and bare.crs.to_epsg() == 4326
    with pytest.raises(InvalidInputError, match="must match"):
        geo.points_frame(np.zeros((3, 2)), df.index, "EPSG:4326")


# --------------------------------------------------------------------------------------------------
# units: metres along the ground


@pytest.mark.parametrize("lat0", [0.0, 45.0, 70.0, -45.0, -70.0, -0.5])
@pytest.mark.parametrize("azimuth", [90.0, 0.0, 45.0])
def test_resolve_1000m_on_ground_is_1000m_projected_within_0_1_percent(lat0, azimuth):
    # lon 11.4 is 2.4 degrees from zone 32's central meridian: near the zone edge, the worst case.
    lon_a, lat_a = 11.4, lat0
    lon_b, lat_b, _ = WGS84.fwd(lon_a, lat_a, azimuth, 1000.0)
    p = resolve_auto(
        lonlat_frame([lon_a, lon_b], [lat_a, lat_b]), user="uid", lon="lon", lat="lat", crs=4326
    )
    assert p.crs_m.is_projected and p.crs_m.axis_info[0].unit_name == "metre"
    d = float(np.hypot(*(p.xy[1] - p.xy[0])))
    assert abs(d - 1000.0) <= 1.0, d  # 0.1 %
    assert d <= 1000.0 * p.scale_max * (1 + 1e-12)


def test_resolve_web_mercator_input_is_reprojected_to_ground_metres():
    lat0 = 40.7
    lon_b, lat_b, _ = WGS84.fwd(-74.0, lat0, 90.0, 1000.0)
    to_wm = pyproj.Transformer.from_crs(4326, 3857, always_xy=True)
    x, y = to_wm.transform([-74.0, lon_b], [lat0, lat_b])
    df = pd.DataFrame({"uid": [1, 2], "x": x, "y": y})
    p = resolve_auto(df, user="uid", x="x", y="y", crs="EPSG:3857")
    assert p.crs_in.to_epsg() == 3857 and p.crs_m.to_epsg() == 32618
    d = float(np.hypot(*(p.xy[1] - p.xy[0])))
    assert abs(d - 1000.0) <= 1.0
    # Negative control: Web Mercator "metres" are about 1/cos(lat) = 1.32 times too long here.
    d_wm = float(np.hypot(x[1] - x[0], y[1] - y[0]))
    assert abs(d_wm / 1000.0 - 1 / np.cos(np.radians(lat0))) < 5e-3
    bx, by = p.to_input_crs(p.xy)
    np.testing.assert_allclose(bx, x, atol=1e-6, rtol=0)
    np.testing.assert_allclose(by, y, atol=1e-6, rtol=0)


def test_resolve_web_mercator_at_equator_still_reprojected():
    x, y = pyproj.Transformer.from_crs(4326, 3857, always_xy=True).transform(
        [9.0, 9.01], [0.0, 0.0]
    )
    p = resolve_auto(pd.DataFrame({"u": [1, 1], "x": x, "y": y}), user="u", x="x", y="y", crs=3857)
    assert p.crs_m.to_epsg() == 32632


def test_resolve_us_survey_feet_state_plane_is_converted_to_metres():
    lon_b, lat_b, _ = WGS84.fwd(-73.97, 40.78, 30.0, 1000.0)
    x, y = pyproj.Transformer.from_crs(4326, 2263, always_xy=True).transform(
        [-73.97, lon_b], [40.78, lat_b]
    )
    assert np.hypot(x[1] - x[0], y[1] - y[0]) > 3000  # the input really is in feet
    df = pd.DataFrame({"u": [1, 2], "x_ft": x, "y_ft": y})
    p = resolve_auto(df, user="u", x="x_ft", y="y_ft", crs="EPSG:2263")
    assert p.crs_m.name == "NAD83 / UTM zone 18N" and p.crs_m.axis_info[0].unit_name == "metre"
    assert abs(float(np.hypot(*(p.xy[1] - p.xy[0]))) - 1000.0) <= 1.0
    bx, _ = p.to_input_crs(p.xy)
    np.testing.assert_allclose(bx, x, atol=1e-6, rtol=0)


def test_resolve_projected_crs_outside_its_area_of_use_is_refused_then_reprojected_with_domain():
    # EPSG:32618 coordinates of points at lon -63 (zone 20): k is about 1.0065 there. Whether the
    # input CRS is used as is may not depend on the data, so such points are refused (they lie
    # outside zone 18's area of use); with a public domain= they move to zone 20.
    lon, lat = grid(-63.1, 10.0, 0.2, 0.2, n=3)
    x, y = pyproj.Transformer.from_crs(4326, 32618, always_xy=True).transform(lon, lat)
    df = pd.DataFrame({"u": 1, "x": x, "y": y})
    with pytest.raises(CRSError, match=r"9 points lie outside the area of use.*domain=") as exc:
        geo.resolve_points(df, user="u", x="x", y="y", crs="EPSG:32618")
    assert "(rows 0, 1, 2, 3, 4, ...)" in str(exc.value) and NOTHING in str(exc.value)
    p = geo.resolve_points(df, user="u", x="x", y="y", crs="EPSG:32618", domain=(-64, 9, -62, 11))
    assert p.crs_m.to_epsg() == 32620 and p.reprojected and p.crs_choice == "domain"
    assert np.all(np.abs(pair_ratios(p, lon, lat) - 1) < 1e-3)


# --------------------------------------------------------------------------------------------------
# data spanning several zones, the scale factor, explicit to_crs


def test_resolve_data_straddling_zone_boundary_uses_local_tm_with_bounded_scale():
    # Zones 17 and 18 (boundary at -78): lon -79.4 is 4.4 degrees from zone 18's central meridian,
    # so UTM 18N would stretch by 1.0017 there; a TM on -78 keeps it to 1.0002.
    lon, lat = grid(-79.4, 39.5, 2.8, 1.0, n=6)
    p = resolve_auto(lonlat_frame(lon, lat), user="uid", lon="lon", lat="lat", crs=4326)
    assert p.crs_m.name.startswith("gpframe local transverse Mercator")
    assert p.crs_m.to_epsg() is None
    assert 1.0 <= p.scale_max <= 1.001 and p.scale_min >= 0.999
    ratios = pair_ratios(p, lon, lat)
    assert np.all(np.abs(ratios - 1) < 1e-3)
    assert np.all(ratios <= p.scale_max)


def test_resolve_zone_edge_at_equator_falls_back_from_utm_to_local_tm():
    # The centre (6.0) is in zone 32 (CM 9): lon 5.5 is 3.5 degrees off, k = 1.0015 > 1.001.
    lon, lat = grid(5.5, -0.5, 1.0, 1.0, n=5)
    p = resolve_auto(lonlat_frame(lon, lat), user="uid", lon="lon", lat="lat", crs=4326)
    assert p.crs_m.to_epsg() is None and "lon_0=6.0" in p.crs_m.name
    assert np.all(np.abs(pair_ratios(p, lon, lat) - 1) < 1e-3)


def test_resolve_wide_extent_gets_the_azimuthal_equidistant_then_to_crs_with_scale_max():
    lon, lat = grid(-100.0, 30.0, 30.0, 15.0, n=5)
    df = lonlat_frame(lon, lat)
    # too wide for one transverse Mercator: the least distorting projection of the public
    # (whole-degree) box (here a Lambert conformal conic), calibrated by its k_max
    p = resolve_auto(df, user="uid", lon="lon", lat="lat", crs=4326)
    assert p.crs_m.name.startswith("gpframe Lambert") and 1.005 < p.noise_inflation < 1.03
    assert p.noise_inflation == pytest.approx(max(1, p.scale_max) / p.scale_min, rel=1e-12)
    ratios = pair_ratios(p, lon, lat)
    assert np.all(ratios <= p.scale_max) and np.all(ratios >= p.scale_min)
    # An explicit metre CRS (Albers equal area, not conformal) is honoured; scale_max is the
    # Tissot semi-major maximum, which bounds every pair's stretch (secure-noise.md §7.4(f)).
    p = geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=4326, to_crs="EPSG:5070")
    assert p.crs_m.to_epsg() == 5070 and p.scale_max > 1.005
    ratios = pair_ratios(p, lon, lat)
    assert np.all(ratios <= p.scale_max) and ratios.max() > 1.001


def test_resolve_antimeridian_data_is_centred_on_180():
    lon = np.array([179.6, 179.9, -179.9, -179.6, 179.8])
    lat = np.array([-17.0, -17.2, -17.1, -16.9, -17.05])
    p = resolve_auto(lonlat_frame(lon, lat), user="uid", lon="lon", lat="lat", crs=4326)
    # The whole-degree cover is lon 179..181: its centre is 180, and UTM zone 1 is 4 degrees off
    # at its west end, so a TM on 180 is used; k_max over the cover is 1 + (1° cos 16°)² / 2.
    assert p.extent == (179.0, -18.0, 181.0, -16.0)
    assert "lon_0=-180.0" in p.crs_m.name and p.scale_max < 1.00015
    assert np.all(np.abs(pair_ratios(p, lon, lat) - 1) < 1e-3)
    back_lon, _ = p.to_input_crs(p.xy)
    np.testing.assert_allclose(geo._wrap(back_lon), lon, atol=1e-9, rtol=0)


def test_resolve_max_scale_error_is_a_knob():
    # it bounds |k - 1| for UTM / a local transverse Mercator; past it the least distorting
    # candidate is taken (inflation far below the warning)
    lon, lat = grid(-78.9, 39.5, 1.8, 1.0, n=3)
    kw = {"user": "uid", "lon": "lon", "lat": "lat", "crs": 4326}
    p = resolve_auto(lonlat_frame(lon, lat), **kw, max_scale_error=1e-5)
    assert "transverse" not in p.crs_m.name and p.crs_m.name.startswith("gpframe ")
    assert p.noise_inflation < 1.0001
    p = resolve_auto(lonlat_frame(lon, lat), **kw)
    assert "transverse Mercator" in p.crs_m.name


def test_resolve_extent_too_wide_for_any_one_projection_is_refused():
    lon = np.array([-170.0, -60.0, 50.0, 160.0])
    lat = np.array([-50.0, 0.0, 60.0, 10.0])
    with pytest.raises(CRSError, match=r"too wide.*to_crs=") as exc:
        geo.resolve_points(lonlat_frame(lon, lat), user="uid", lon="lon", lat="lat", crs=4326)
    assert NOTHING in str(exc.value)


@pytest.mark.parametrize(
    ("to_crs", "match"),
    [
        ("EPSG:4326", "not a projected CRS"),
        ("EPSG:2263", "US survey foot"),
        ("EPSG:3857", "Web Mercator"),
        ("EPSG:99999999", "not a CRS pyproj understands"),
    ],
)
def test_resolve_bad_to_crs_raises_crs_error(to_crs, match):
    df = lonlat_frame([-74.0, -73.9], [40.7, 40.8])
    with pytest.raises(CRSError, match=match) as exc:
        geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=4326, to_crs=to_crs)
    assert "to_crs=" in str(exc.value) and NOTHING in str(exc.value)


def test_utm_crs_for_zones_hemispheres_and_datum():
    assert geo.utm_crs_for(-74.0, 40.7).to_epsg() == 32618
    assert geo.utm_crs_for(-74.0, -40.7).to_epsg() == 32718
    assert geo.utm_crs_for(179.99, 0.0).to_epsg() == 32660
    assert geo.utm_crs_for(-180.0, 0.0).to_epsg() == 32601
    assert geo.utm_crs_for(180.0, 0.0).to_epsg() == 32601
    nad = geo.utm_crs_for(-74.0, 40.7, geodetic="EPSG:4269")
    assert nad.geodetic_crs.equals(pyproj.CRS("EPSG:4269"))
    with pytest.raises(InvalidInputError):
        geo.utm_crs_for(np.nan, 0.0)


# --------------------------------------------------------------------------------------------------
# CRS problems


def test_resolve_columns_without_crs_raise_crs_error():
    df = lonlat_frame([-74.0], [40.7])
    with pytest.raises(CRSError, match=r"columns 'lon'/'lat' have no CRS.*EPSG:4326"):
        geo.resolve_points(df, user="uid", lon="lon", lat="lat")
    with pytest.raises(CRSError, match="no CRS"):
        geo.resolve_points(df, user="uid", x="lon", y="lat")


def test_resolve_geodataframe_without_crs_raises_and_crs_argument_fills_it():
    gdf = gpd.GeoDataFrame({"uid": [1]}, geometry=[shapely.Point(-74.0, 40.7)])
    with pytest.raises(CRSError, match="GeoDataFrame has no CRS"):
        geo.resolve_points(gdf, user="uid")
    p = geo.resolve_points(gdf, user="uid", crs="EPSG:4326", to_crs=32618)
    assert p.crs_m.to_epsg() == 32618


def test_resolve_contradicting_crs_raises():
    gdf = gpd.GeoDataFrame({"uid": [1]}, geometry=[shapely.Point(-74.0, 40.7)], crs=4326)
    with pytest.raises(CRSError, match="contradicts"):
        geo.resolve_points(gdf, user="uid", crs="EPSG:32618")
    # the same CRS up to axis order: accepted
    geo.resolve_points(gdf, user="uid", crs="OGC:CRS84", to_crs=32618)


def test_resolve_lon_lat_with_projected_crs_raises():
    df = lonlat_frame([500_000.0], [4_500_000.0])
    with pytest.raises(CRSError, match="geographic crs"):
        geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=32618)


# --------------------------------------------------------------------------------------------------
# bad input: every message names the column, the count and the first row labels


def _bad(df, match, **kw):
    args = {"user": "uid", "lon": "lon", "lat": "lat", "crs": 4326} | kw
    with pytest.raises(InvalidInputError, match=match) as exc:
        geo.resolve_points(df, **args)
    assert NOTHING in str(exc.value)
    return str(exc.value)


def test_resolve_nan_and_inf_coordinates_named_with_count_and_rows():
    df = lonlat_frame(np.full(8, -74.0), np.full(8, 40.7), index=[f"r{i}" for i in range(8)])
    df.loc[["r1", "r5"], "lat"] = np.nan
    msg = _bad(df, r"column 'lat' has 2 NaN/inf values")
    assert "(rows 'r1', 'r5')" in msg
    df = lonlat_frame(np.full(8, -74.0), np.full(8, 40.7))
    df.loc[[0, 1, 2, 3, 4, 6, 7], "lon"] = np.inf
    msg = _bad(df, r"column 'lon' has 7 NaN/inf values")
    assert "(rows 0, 1, 2, 3, 4, ...)" in msg


def test_resolve_nullable_float_na_counts_as_missing():
    df = lonlat_frame([-74.0, -73.9, -73.8], [40.7, 40.8, 40.75])
    df["lat"] = df["lat"].astype("Float64")
    df.loc[1, "lat"] = pd.NA
    _bad(df, r"column 'lat' has 1 NaN/inf value \(rows 1\)")


def test_resolve_missing_user_ids():
    df = lonlat_frame([-74.0, -73.9, -73.8], [40.7, 40.8, 40.75], users=["a", None, np.nan])
    _bad(df, r"column 'uid' has 2 missing user ids \(rows 1, 2\)")


@pytest.mark.parametrize("bad", [200.0, -180.5])
def test_resolve_longitude_out_of_range(bad):
    df = lonlat_frame([-74.0, bad, -73.8], [40.7, 40.8, 40.75])
    _bad(df, r"column 'lon' has 1 longitude value outside \[-180, 180\] \(rows 1\)")


def test_resolve_latitude_out_of_range_suggests_swapped_columns():
    df = lonlat_frame([-74.0, -73.9], [40.7, -95.0])
    _bad(df, r"column 'lat' has 1 latitude value outside \[-90, 90\] \(rows 1\).*swapped")


def test_resolve_non_numeric_and_boolean_columns():
    df = lonlat_frame([-74.0, -73.9, -73.8], [40.7, 40.8, 40.75])
    df["lat"] = ["40.7", "north", "x"]
    _bad(df, r"column 'lat' has dtype .*2 of 3 values are not numbers \(rows 1, 2\).*to_numeric")
    df = lonlat_frame([-74.0, -73.9], [40.7, 40.8])
    df["lon"] = [True, False]
    _bad(df, r"column 'lon' has dtype bool.*2 of 2")


def test_resolve_empty_frame_unknown_columns_and_argument_mixups():
    _bad(lonlat_frame([], []), r"empty \(0 rows\)")
    df = lonlat_frame([-74.0], [40.7])
    _bad(df, r"user='taxi' is not a column.*'uid', 'lon', 'lat'", user="taxi")
    _bad(df, r"lat='latitude' is not a column", lat="latitude")
    _bad(df, "either x=/y= or lon=/lat=", x="lon", y="lat")
    _bad(df, "pass both lon= and lat=", lat=None)
    _bad(pd.DataFrame({"uid": [1]}), "no coordinates", lon=None, lat=None)
    with pytest.raises(InvalidInputError, match="expected a pandas DataFrame"):
        geo.resolve_points(np.zeros((2, 2)), user="uid")


def test_resolve_missing_empty_and_non_point_geometries():
    geoms = [shapely.Point(-74, 40.7), None, shapely.Point(), shapely.Point(-74, 40.8)]
    gdf = gpd.GeoDataFrame({"uid": [1, 2, 3, 4]}, geometry=geoms, crs=4326, index=[5, 6, 7, 8])
    with pytest.raises(
        InvalidInputError,
        match=r"geometry column 'geometry' has 2 missing or empty "
        r"geometries \(rows 6, 7\)",
    ):
        geo.resolve_points(gdf, user="uid")
    geoms = [
        shapely.Point(-74, 40.7),
        shapely.LineString([(-74, 40), (-73, 41)]),
        shapely.box(0, 0, 1, 1),
    ]
    gdf = gpd.GeoDataFrame({"uid": [1, 2, 3]}, geometry=geoms, crs=4326)
    with pytest.raises(
        InvalidInputError,
        match=r"2 non-point geometries \(Linestring, Polygon\) "
        r"\(rows 1, 2\).*representative_point",
    ) as exc:
        geo.resolve_points(gdf, user="uid")
    assert NOTHING in str(exc.value)
    gdf = gpd.GeoDataFrame({"uid": [1]}, geometry=[shapely.Point(-74, np.inf)], crs=4326)
    with pytest.raises(InvalidInputError, match=r"column 'geometry' has 1 NaN/inf value"):
        geo.resolve_points(gdf, user="uid")


# --------------------------------------------------------------------------------------------------
# polygons


def bowtie():
    return shapely.Polygon([(-74.0, 40.7), (-73.9, 40.8), (-73.9, 40.7), (-74.0, 40.8)])


def test_validate_polygons_bowtie_reason_and_make_valid_hint():
    with pytest.raises(
        InvalidInputError,
        match=r"downtown has 1 invalid polygon \(rows 0: "
        r"Self-intersection\[.*make_valid",
    ) as exc:
        geo.validate_polygons(bowtie(), name="downtown")
    assert NOTHING in str(exc.value)
    geo.validate_polygons(shapely.make_valid(bowtie()))  # the suggested repair passes


def test_validate_polygons_on_nyc_ntas_and_one_corrupted_row():
    ntas = gpd.read_parquet(NTA).set_index("ntacode")
    geo.validate_polygons(ntas)
    geo.validate_polygons(ntas.geometry.values)
    bad = ntas.copy()
    bad.loc["MN17", "geometry"] = bowtie()
    with pytest.raises(InvalidInputError, match=r"region has 1 invalid polygon \(rows MN17: Self"):
        geo.validate_polygons(bad)


@pytest.mark.parametrize(
    ("geoms", "match"),
    [
        ([shapely.box(0, 0, 1, 1), None], r"1 missing or empty geometry \(rows 1\)"),
        ([shapely.Polygon()], r"1 missing or empty geometry \(rows 0\)"),
        ([shapely.Point(0, 0), shapely.box(0, 0, 1, 1)], r"1 non-polygon geometry \(Point\)"),
        (
            [shapely.Polygon([(0, 0), (1, 0), (1, np.inf), (0, 0)])],
            r"1 polygon with NaN/inf coordinates",
        ),
        ([], "is empty"),
        (["POLYGON"], "must hold shapely geometries"),
    ],
)
def test_validate_polygons_bad_inputs(geoms, match):
    with pytest.raises(InvalidInputError, match=match):
        geo.validate_polygons(geoms)


def test_project_geometry_ntas_area_matches_utm_area_column():
    ntas = gpd.read_parquet(NTA)
    proj = geo.project_geometry(ntas, "EPSG:4326", "EPSG:32618")
    assert isinstance(proj, gpd.GeoSeries) and proj.crs.to_epsg() == 32618
    np.testing.assert_allclose(proj.area, ntas["area_m2"], rtol=1e-6)
    # A bare geometry is taken to be in crs_in; a GeoSeries's own CRS wins over crs_in.
    one = geo.project_geometry(ntas.geometry.iloc[0], "EPSG:4326", "EPSG:32618")
    assert shapely.equals_exact(one, proj.iloc[0], tolerance=1e-6)
    again = geo.project_geometry(proj, "EPSG:4326", "EPSG:32618")
    np.testing.assert_array_equal(again.area, proj.area)
    arr = geo.project_geometry(np.array(ntas.geometry.values[:3]), 4326, 32618)
    assert isinstance(arr, np.ndarray) and arr.shape == (3,)


def test_project_geometry_regions_share_the_data_metric_crs():
    df = lonlat_frame([-74.0, -73.95], [40.7, 40.75])
    p = geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=4326, to_crs=32618)
    region = geo.project_geometry(shapely.box(-74.01, 40.69, -73.99, 40.71), p.crs_in, p.crs_m)
    inside = shapely.contains_xy(region, p.xy[:, 0], p.xy[:, 1])
    assert inside.tolist() == [True, False]


# --------------------------------------------------------------------------------------------------
# real data smoke tests


def test_real_gotrack_wide_whole_then_to_crs_and_local_box():
    gps = pd.read_parquet(GOTRACK)
    assert {"user_id", "lon", "lat"} <= set(gps.columns)
    # 92 % of the fixes are in Aracaju, but user 1 has tracks 1,800 km away: one TM cannot keep
    # the scale error below 0.1 %, so the whole set gets the least distorting projection of its
    # whole-degree box, at a stated noise inflation.
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        p = geo.resolve_points(gps, user="user_id", lon="lon", lat="lat", crs="EPSG:4326")
    assert p.crs_m.name.startswith("gpframe ") and 1.0 < p.noise_inflation < 1.1
    assert any("whole degrees" in str(w.message) for w in rec)
    # Zone 24S's area of use (lon -42..-36) does not hold user 1's far tracks: refused, naming rows.
    with pytest.raises(CRSError, match="outside the area of use of to_crs=EPSG:32724"):
        geo.resolve_points(
            gps, user="user_id", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32724"
        )
    # A public box (eastern Brazil) covers them; scale_max is zone 24S's worst case over that box.
    p = geo.resolve_points(
        gps,
        user="user_id",
        lon="lon",
        lat="lat",
        crs="EPSG:4326",
        to_crs="EPSG:32724",
        domain=(-50.0, -30.0, -34.0, -5.0),
    )
    assert len(p) == len(gps) and 1.005 < p.scale_max < 1.03 and p.crs_choice == "to_crs"
    box = gps[gps.lat.between(-11.2, -10.7) & gps.lon.between(-37.3, -36.9)]
    p = resolve_auto(box, user="user_id", lon="lon", lat="lat", crs="EPSG:4326")
    assert p.crs_m.to_epsg() == 32724 and 1.0 <= p.scale_max < 1.001
    assert p.index.equals(box.index) and set(p.users) <= set(range(28))
    lon, _ = p.to_input_crs(p.xy)
    assert np.max(np.abs(lon - box.lon.to_numpy())) < 1e-9


def test_real_ais_1h_resolves_to_utm_18n_and_step_lengths_match_geodesic():
    ais = pd.read_parquet(AIS_1H)
    p = resolve_auto(ais, user="mmsi", lon="lon", lat="lat", crs="EPSG:4326")
    assert p.crs_m.to_epsg() == 32618 and len(p) == len(ais) == 8689
    assert p.scale_max == 1.0 and p.scale_min > 0.9995
    lon, lat = ais["lon"].to_numpy(), ais["lat"].to_numpy()
    _, _, d_geod = WGS84.inv(lon[:-1], lat[:-1], lon[1:], lat[1:])
    d_proj = np.hypot(*np.diff(p.xy, axis=0).T)
    far = d_geod > 10.0
    assert np.all(np.abs(d_proj[far] / d_geod[far] - 1) < 1e-3)


# --------------------------------------------------------------------------------------------------
# performance


@pytest.mark.slow
def test_resolve_one_million_points_under_two_seconds():
    n = 1_000_000
    k = np.arange(n)
    # Deterministic spread over ~30 km x 40 km of New York, without numpy.random.
    df = pd.DataFrame(
        {
            "uid": k % 5000,
            "lon": -74.2 + 0.4 * ((k * 0.618034) % 1),
            "lat": 40.5 + 0.4 * ((k * 0.414214) % 1),
        }
    )
    dom = (-75.0, 40.0, -73.0, 41.0)
    geo.resolve_points(df.iloc[:1000], user="uid", lon="lon", lat="lat", crs=4326, domain=dom)
    t0 = time.perf_counter()
    p = geo.resolve_points(df, user="uid", lon="lon", lat="lat", crs=4326, domain=dom)
    elapsed = time.perf_counter() - t0
    assert len(p) == n
    assert elapsed < 2.0, elapsed
