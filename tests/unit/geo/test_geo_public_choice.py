"""The metric CRS and scale_max are public: with to_crs=/domain=/a metre input CRS they depend on
no data (privacy review F1), and data outside the public extent is refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyproj
import pytest

from gpframe import geo
from gpframe.errors import CRSError, GpframeWarning, InvalidInputError

NOTHING = "Nothing was charged."
# The reviewer's scenario: two users near the zone 17/18 boundary (-78), a third one who moves.
DOMAIN = (-79.0, 39.5, -76.5, 40.5)


def reviewer_frame(lon3: float) -> pd.DataFrame:
    return pd.DataFrame({"u": [1, 2, 3], "lon": [-78.2, -77.9, lon3], "lat": [40.0, 40.01, 40.02]})


def fingerprint(p: geo.Projected) -> tuple:
    """Everything the CRS choice puts into an output: the CRS, k_max, the choice and its extent."""
    return (p.crs_m.to_wkt(), p.scale_max, p.scale_min, p.crs_choice, p.extent)


def test_reviewer_scenario_with_domain_one_user_moving_changes_nothing():
    seen = {
        fingerprint(
            geo.resolve_points(
                reviewer_frame(lon3), user="u", lon="lon", lat="lat", crs=4326, domain=DOMAIN
            )
        )
        for lon3 in (-78.1, -77.3, -76.9, -78.99, -76.51)
    }
    assert len(seen) == 1
    ((wkt, k, _, choice, ext),) = seen
    assert choice == "domain" and ext == DOMAIN and k > 1.0
    # The domain straddles zones 17/18, so the automatic choice on it is a TM on its centre.
    assert "lon_0=-77.75" in pyproj.CRS(wkt).name


def resolve_auto(df: pd.DataFrame, **kw) -> geo.Projected:
    """The convenience path (no to_crs=/domain=): exactly one warning that the extent is public."""
    with pytest.warns(GpframeWarning, match="coarse extent becomes public") as rec:
        p = geo.resolve_points(df, **kw)
    assert len(rec) == 1
    return p


def test_negative_control_without_domain_the_same_move_changes_crs_and_scale_max():
    # The convenience path is data-dependent (declared public): the test above can fail. Moving
    # user 3 from -78.1 to -76.9 moves the data's whole-degree cover from -79..-77 to -79..-76.
    ps = [
        resolve_auto(reviewer_frame(lon3), user="u", lon="lon", lat="lat", crs=4326)
        for lon3 in (-78.1, -76.9)
    ]
    assert {p.crs_choice for p in ps} == {"data extent (public)"}
    assert not ps[0].crs_m.equals(ps[1].crs_m)
    assert ps[0].extent != ps[1].extent


@pytest.mark.parametrize("lon3", [-77.9, -75.0, -72.01, -72.0])
def test_to_crs_scale_is_over_its_area_of_use_whatever_one_user_does(lon3):
    df = pd.DataFrame({"u": [1, 2, 3], "lon": [-74.0, -73.9, lon3], "lat": [40.7, 40.8, 80.0]})
    p = geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:32618")
    assert p.crs_choice == "to_crs" and p.crs_m.to_epsg() == 32618
    assert p.extent == (-78.0, 0.0, -72.0, 84.0)
    # UTM's worst case over a whole zone: 0.9996 * (1 + (3 deg)^2 / 2) at the equator.
    assert p.scale_max == pytest.approx(1.000981, abs=1e-6)


def test_projected_metre_input_is_used_as_is_with_its_area_of_use():
    to_m = pyproj.Transformer.from_crs(4326, 32618, always_xy=True)
    fps = set()
    for lon3 in (-74.0, -77.5, -72.5):
        x, y = to_m.transform([-74.0, -73.9, lon3], [40.7, 40.8, 40.75])
        df = pd.DataFrame({"u": [1, 2, 3], "x": x, "y": y})
        p = geo.resolve_points(df, user="u", x="x", y="y", crs="EPSG:32618")
        assert p.crs_choice == "input" and not p.reprojected
        fps.add(fingerprint(p))
    assert len(fps) == 1


def test_data_outside_domain_is_refused_naming_rows():
    df = reviewer_frame(-76.0).set_axis(["a", "b", "c"])
    with pytest.raises(InvalidInputError, match=r"1 point lies outside domain=") as exc:
        geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, domain=DOMAIN)
    msg = str(exc.value)
    assert "(rows 'c')" in msg and "'lon'/'lat'" in msg and NOTHING in msg
    assert not isinstance(exc.value, CRSError)


def test_data_outside_to_crs_area_of_use_is_refused_with_domain_hint():
    df = reviewer_frame(-77.3)  # -78.2 is in zone 17, outside 18N's area of use
    with pytest.raises(CRSError, match=r"outside the area of use of to_crs=EPSG:32618") as exc:
        geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:32618")
    assert "(rows 0)" in str(exc.value) and "domain=" in str(exc.value)
    assert NOTHING in str(exc.value)
    # A public domain= replaces the area of use: then zone 18N is stretched further (at -79).
    p = geo.resolve_points(
        df, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:32618", domain=DOMAIN
    )
    assert p.crs_choice == "to_crs" and p.extent == DOMAIN and p.scale_max > 1.001


def test_crs_without_area_of_use_needs_domain():
    tm = "+proj=tmerc +lon_0=-77.75 +k_0=1 +x_0=500000 +ellps=WGS84 +units=m +no_defs"
    assert pyproj.CRS(tm).area_of_use is None
    df = reviewer_frame(-77.3)
    with pytest.raises(CRSError, match=r"no area of use.*domain=\(lon_min") as exc:
        geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs=tm)
    assert NOTHING in str(exc.value)
    p = geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, to_crs=tm, domain=DOMAIN)
    assert p.crs_choice == "to_crs" and 1.0 < p.scale_max < 1.0003
    # The same CRS as *input* without an area of use: refused too, used as is with domain=.
    x, y = pyproj.Transformer.from_crs(4326, tm, always_xy=True).transform(df.lon, df.lat)
    dfm = pd.DataFrame({"u": df.u, "x": x, "y": y})
    with pytest.raises(CRSError, match=r"input CRS .* no area of use.*domain="):
        geo.resolve_points(dfm, user="u", x="x", y="y", crs=tm)
    p = geo.resolve_points(dfm, user="u", x="x", y="y", crs=tm, domain=DOMAIN)
    assert p.crs_choice == "input" and not p.reprojected


def test_metre_input_too_distorted_over_its_area_of_use():
    # LAEA Europe stretches by ~8 % over its area of use: not used as is without domain= (the
    # convenience path), but used as is over a small public domain near its centre.
    x, y = pyproj.Transformer.from_crs(4326, 3035, always_xy=True).transform(
        [10.0, 10.1], [52.0, 52.1]
    )
    df = pd.DataFrame({"u": [1, 2], "x": x, "y": y})
    p = resolve_auto(df, user="u", x="x", y="y", crs="EPSG:3035")
    assert p.crs_choice == "data extent (public)" and "UTM zone 32N" in p.crs_m.name
    p = geo.resolve_points(df, user="u", x="x", y="y", crs="EPSG:3035", domain=(9, 51, 11, 53))
    assert p.crs_choice == "input" and p.crs_m.to_epsg() == 3035 and p.scale_max < 1.001


def test_domain_across_the_antimeridian():
    dom = (179.0, -18.0, -179.0, -16.0)
    lon = np.array([179.6, 179.9, -179.9, -179.6])
    df = pd.DataFrame({"u": [1, 2, 3, 4], "lon": lon, "lat": [-17.0, -17.2, -17.1, -16.9]})
    p = geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, domain=dom)
    assert p.crs_choice == "domain" and p.extent == (179.0, -18.0, 181.0, -16.0)
    assert "lon_0=-180.0" in p.crs_m.name
    df.loc[3, "lon"] = 170.0
    with pytest.raises(InvalidInputError, match=r"outside domain=.*\(rows 3\)"):
        geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326, domain=dom)


@pytest.mark.parametrize(
    "dom",
    [
        (1, 2, 3),
        (-79, 41, -76, 40),
        (-79, 39, -79, 40),
        (-200, 39, -76, 40),
        "NYC",
        (0, 0, np.nan, 1),
    ],
)
def test_malformed_domain_is_refused(dom):
    with pytest.raises(InvalidInputError, match="domain=") as exc:
        geo.resolve_points(
            reviewer_frame(-77.3), user="u", lon="lon", lat="lat", crs=4326, domain=dom
        )
    assert NOTHING in str(exc.value)


def test_domain_too_wide_for_the_automatic_choice_names_domain():
    with pytest.raises(CRSError, match=r"domain= spans .*too wide.*to_crs="):
        geo.resolve_points(
            reviewer_frame(-77.3), user="u", lon="lon", lat="lat", crs=4326,
            domain=(-179, -70, 179, 80),
        )  # fmt: skip


def test_accessor_outputs_do_not_move_with_one_user_under_to_crs():
    # End to end (the reviewer's r01 reads these params and the ledger history): with a named CRS,
    # the deterministic outputs are the same whichever of two places user 3 is in.
    import gpframe as gp
    import gpframe.frame.accessor  # registers df.geopriv
    from gpframe.ledger import Session

    def run(lon3: float) -> tuple:
        df = pd.DataFrame({"u": [1, 2, 3], "lon": [-74.0, -73.9, lon3], "lat": [40.7, 40.8, 40.9]})
        s = Session(budget=gp.CGP(rho=1.0))
        bound = df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=32618)
        out = bound.privatize(rho=1e-4)
        r = out.attrs["geopriv"]
        return r.params["crs_m"], r.params["scale_max"], bound.projected.crs_choice

    assert run(-77.5) == run(-72.5)
    assert run(-77.5)[2] == "to_crs"


# --------------------------------------------------------------------------------------------------
# The convenience path reveals only the data's whole-degree cover


def nyc_frame(east: float) -> pd.DataFrame:
    # User 3 is the eastmost, about 2.7 degrees east of zone 18N's central meridian (-75), where
    # k > 1: k_max over the data's exact bounding box was a function of user 3's longitude, and
    # inverting it recovered that longitude to millimetres from params["scale_max"].
    return pd.DataFrame({"u": [1, 2, 3], "lon": [-74.0, -73.9, east], "lat": [40.7, 40.8, 40.75]})


def straddle_frame(east: float) -> pd.DataFrame:
    # Too wide for zone 18N at -79.4: the automatic choice is a local transverse Mercator.
    return pd.DataFrame({"u": [1, 2, 3], "lon": [-79.4, -78.0, east], "lat": [40.0, 40.5, 40.2]})


@pytest.mark.parametrize(
    ("frame", "a", "b"),
    [
        # 0.01 degree of longitude at 40.75 N is 843 m: a move of < 1 km inside one 1° cell.
        (nyc_frame, -72.31, -72.30),
        (nyc_frame, -72.9999, -72.0001),
        # Straddling zones 17/18: a transverse Mercator whose lon_0 was the exact box centre.
        (straddle_frame, -76.61, -76.60),
    ],
)
def test_convenience_path_moving_the_extreme_user_inside_its_degree_changes_nothing(frame, a, b):
    pa = resolve_auto(frame(a), user="u", lon="lon", lat="lat", crs=4326)
    pb = resolve_auto(frame(b), user="u", lon="lon", lat="lat", crs=4326)
    # Bit for bit: the CRS (WKT), scale_max, scale_min, the choice and the extent.
    assert fingerprint(pa) == fingerprint(pb)
    assert pa.crs_choice == "data extent (public)"
    assert all(float(v).is_integer() for v in pa.extent)
    if frame is straddle_frame:
        assert "transverse Mercator lon_0=-78.0" in pa.crs_m.name


def test_convenience_path_scale_max_is_that_of_the_whole_degree_cover():
    p = resolve_auto(nyc_frame(-72.31), user="u", lon="lon", lat="lat", crs=4326)
    assert p.extent == (-74.0, 40.0, -72.0, 41.0) and p.crs_m.to_epsg() == 32618
    lo, hi = geo.scale_range(p.crs_m, *p.extent)
    assert p.scale_max == max(1.0, hi) and p.scale_min == lo
    # k > 1 at the cover's east edge (3 degrees from the central meridian at 40 N): the clamp does
    # not hide it, so the test above compares a data-dependent number, not a constant 1.0.
    assert p.scale_max > 1.0002


def test_convenience_path_still_projects_every_point_correctly():
    df = nyc_frame(-72.31)
    p = resolve_auto(df, user="u", lon="lon", lat="lat", crs=4326)
    exact = pyproj.Transformer.from_crs(4326, 32618, always_xy=True).transform(df.lon, df.lat)
    np.testing.assert_array_equal(p.xy, np.column_stack(exact))
    lon, lat = p.to_input_crs(p.xy)
    np.testing.assert_allclose(lon, df.lon, atol=1e-9, rtol=0)
    np.testing.assert_allclose(lat, df.lat, atol=1e-9, rtol=0)
    w, s, e, n = p.extent
    assert np.all((w <= df.lon) & (df.lon <= e) & (s <= df.lat) & (df.lat <= n))


@pytest.mark.parametrize(
    ("box", "cover"),
    [
        ((-74.3, 40.5, -73.7, 40.9), (-75.0, 40.0, -73.0, 41.0)),
        # a point exactly on a whole degree opens its cell: the box is never empty
        ((-74.0, 40.0, -74.0, 40.0), (-74.0, 40.0, -73.0, 41.0)),
        ((179.6, -17.2, 180.4, -16.9), (179.0, -18.0, 181.0, -16.0)),
        ((10.0, 89.5, 10.2, 90.0), (10.0, 89.0, 11.0, 90.0)),
    ],
)
def test_coarse_box_rounds_outward_to_whole_degrees(box, cover):
    assert geo._coarse_box(box) == cover


def test_convenience_path_warns_once_per_binding_and_public_paths_do_not():
    import warnings

    import gpframe as gp
    import gpframe.frame.accessor  # registers df.geopriv
    from gpframe.ledger import Session

    df = nyc_frame(-72.31)
    s = Session(budget=gp.CGP(rho=1.0))
    # the metric CRS is chosen (and the warning given) by the first operation that needs metres
    bound = df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    with pytest.warns(GpframeWarning) as rec:
        bound.privatize(rho=1e-4)
    assert len(rec) == 1
    msg = str(rec[0].message)
    # It names the coarse box that becomes public and the two ways to avoid it; no exact value.
    assert "lon -74..-72, lat 40..41" in msg and "coarse extent becomes public" in msg
    assert "to_crs='EPSG:32618'" in msg and "domain=" in msg
    assert "72.31" not in msg and "40.75" not in msg
    assert rec[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bound.privatize(rho=1e-4)  # the binding's CRS is chosen once
    with pytest.warns(GpframeWarning) as rec:
        geo.resolve_points(df, user="u", lon="lon", lat="lat", crs=4326)
    assert len(rec) == 1 and rec[0].filename == __file__  # from any entry point
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=32618)
        df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326", domain=(-75, 40, -72, 41))


def test_accessor_outputs_on_the_convenience_path_do_not_move_inside_a_degree():
    # End to end: the released params (crs_m, scale_max) are the same for the two positions.
    import gpframe as gp
    import gpframe.frame.accessor  # registers df.geopriv
    from gpframe.ledger import Session

    def run(east: float) -> tuple:
        s = Session(budget=gp.CGP(rho=1.0))
        bound = nyc_frame(east).geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326")
        with pytest.warns(GpframeWarning, match="coarse extent becomes public"):
            r = bound.privatize(rho=1e-4).attrs["geopriv"]
        return r.params["crs_m"], r.params["scale_max"]

    assert run(-72.31) == run(-72.30)
    assert run(-72.31)[1] > 1.0
