"""A named to_crs= is no silent trap: a datum-shifting round trip that does not come back within
the lattice spacing is refused, and a CRS that inflates the noise by more than 5 % over its extent
warns with the factor, which every metric Result also states."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe import geo
from gpframe.errors import CRSError, GpframeWarning
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

CONUS = pd.DataFrame({"u": [1, 2], "lon": [-74.0, -100.0], "lat": [40.7, 35.0]})
WITH_ALASKA = pd.DataFrame({"u": [1, 2, 3], "lon": [-74.0, -100.0, -150.0],
                            "lat": [40.7, 35.0, 61.0]})  # fmt: skip


def test_world_mercator_warns_with_its_factor_and_the_result_states_it():
    session = Session(budget=gp.CGP(rho=1.0))
    bound = CONUS.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326",
                          to_crs="EPSG:3395")  # fmt: skip
    with pytest.warns(GpframeWarning, match=r"EPSG:3395.*up to 9\.535 times the nominal noise"):
        out = bound.privatize(rho=1e-4, rng=seeded_rng(2))
    params = out.attrs["geopriv"].params
    assert params["scale_max"] == pytest.approx(9.535, abs=1e-3)
    assert params["noise_inflation"] == pytest.approx(9.535, abs=1e-3)


def test_equidistant_cylindrical_warns_and_names_the_better_choice():
    with pytest.warns(GpframeWarning, match=r"EPSG:4087.*up to 1\.556 times") as rec:
        geo.resolve_points(CONUS, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:4087",
                           domain=(-125, 24, -66, 50))  # fmt: skip
    assert "gpframe's own choice" in str(rec[0].message)
    assert "would give 1.027" in str(rec[0].message)


def test_a_crs_within_a_few_percent_does_not_warn():
    p = geo.resolve_points(CONUS, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:5070",
                           domain=(-101, 34, -73, 41))  # fmt: skip
    assert p.noise_inflation < 1.05


def test_nad27_round_trip_outside_its_grid_is_refused_before_charging():
    session = Session(budget=gp.CGP(rho=1.0))
    bound = WITH_ALASKA.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326",
                                to_crs="EPSG:26718", domain=(-160, 30, -70, 65))  # fmt: skip
    before = session.ledger.snapshot()
    with (
        pytest.warns(GpframeWarning, match="1.964 times"),  # a UTM zone over this domain
        pytest.raises(CRSError, match=r"1 point .* within the lattice spacing .*\(rows 2\)") as e,
    ):
        bound.privatize(rho=1e-4, rng=seeded_rng(2))
    assert "Nothing was charged." in str(e.value)
    assert session.ledger.snapshot() == before


def test_nad27_inside_its_grid_comes_back_within_the_lattice_spacing():
    # 0.2 mm on the round trip in the contiguous US: less than g = 2**-10 m, accepted
    p = geo.resolve_points(CONUS.iloc[:1], user="u", lon="lon", lat="lat", crs=4326,
                           to_crs="EPSG:26718")  # fmt: skip
    assert p.crs_choice == "to_crs"


def test_sql_register_warns_like_to_crs():
    session = Session(budget=gp.CGP(rho=1.0))
    with pytest.warns(GpframeWarning, match=r"crs=EPSG:3395.*9\.535 times"):
        gp.duckdb.register(duckdb.connect(), session, crs="EPSG:3395")


@pytest.mark.parametrize("scale", [1e-12, 1e-9, 1e-8, 1e-7, 1e-6])
def test_the_round_trip_bound_refuses_exactly_what_the_geodesic_refuses(scale):
    """The cheap meridian-then-parallel bound only stands in where it already passes."""
    import numpy as np
    import pyproj

    crs = pyproj.CRS("EPSG:4326")
    gen = np.random.default_rng(0)
    xs, ys = gen.uniform(-180, 180, 20_000), gen.uniform(-89.9, 89.9, 20_000)
    bx = (xs + gen.normal(0, scale, xs.size) + 180) % 360 - 180
    by = ys + gen.normal(0, scale, ys.size)
    _, _, exact = crs.get_geod().inv(xs, ys, bx, by)
    d = geo._round_trip_metres(xs, ys, bx, by, crs)
    g = 2.0**-10
    assert ((d <= g) == (exact <= g)).all()
    assert (d[d > g] == exact[d > g]).all()  # the refused points carry their geodesic


def test_the_outline_shows_points_inside_and_leaves_the_rest_to_the_point_check():
    import numpy as np
    import pyproj

    crs = pyproj.CRS("EPSG:32618")  # area of use: lon -78..-72, lat 0..84
    box = geo._area_box(crs)
    gen = np.random.default_rng(0)
    xs, ys = gen.uniform(4e5, 4.5e5, 1000), gen.uniform(4.5e6, 4.55e6, 1000)
    assert geo._inside_by_outline(xs, ys, crs, crs.geodetic_crs, box)
    east = np.append(xs, 9e5)  # lon -67 at this latitude: outside the zone
    assert not geo._inside_by_outline(east, np.append(ys, 4.5e6), crs, crs.geodetic_crs, box)
    edge = np.append(xs, 2.47e5)  # lon -77.995: inside the zone, within the outline margin
    assert not geo._inside_by_outline(edge, np.append(ys, 4.5e6), crs, crs.geodetic_crs, box)
    assert not geo._inside_by_outline(xs, ys, crs.geodetic_crs, crs.geodetic_crs, box)


def _round_trips(monkeypatch):
    """Record the named-CRS round-trip checks that run (the check itself still runs)."""
    calls = []
    real = geo._refuse_lossy_round_trip

    def spy(*args):
        calls.append(args[4])  # crs_m
        return real(*args)

    monkeypatch.setattr(geo, "_refuse_lossy_round_trip", spy)
    return calls


def test_a_utm_zone_on_the_input_datum_is_trusted_like_the_automatic_choice(monkeypatch):
    """The automatic choice for a zone-sized extent (that very UTM zone) is never round-tripped:
    a named one within its zone is not either; another datum or a wider extent still is."""
    calls = _round_trips(monkeypatch)
    one = CONUS.iloc[:1]
    p = geo.resolve_points(one, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:32618")
    assert p.crs_choice == "to_crs" and calls == []
    auto = geo.resolve_points(one, user="u", lon="lon", lat="lat", crs=4326,
                              domain=geo._area_box(p.crs_m))  # fmt: skip
    assert auto.crs_m.equals(p.crs_m) and calls == []  # the same CRS, chosen automatically
    geo.resolve_points(one, user="u", lon="lon", lat="lat", crs=4326, to_crs="EPSG:26718")
    assert len(calls) == 1  # NAD27: a datum shift, checked
    with pytest.warns(GpframeWarning):  # a UTM zone over the contiguous US: beyond its zone
        geo.resolve_points(CONUS, user="u", lon="lon", lat="lat", crs=4326,
                           to_crs="EPSG:32618", domain=(-125, 24, -66, 50))  # fmt: skip
    assert len(calls) == 2


def test_the_trusted_utm_round_trip_is_nanometres_over_the_whole_zone():
    """What the trust above rests on: PROJ's transverse Mercator round-trips far below g."""
    import numpy as np
    import pyproj

    lon, lat = np.meshgrid(np.linspace(-78, -72, 61), np.linspace(0, 84, 169))
    lon, lat = lon.ravel(), lat.ravel()
    fwd = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
    back = pyproj.Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True)
    bx, by = back.transform(*fwd.transform(lon, lat))
    d = geo._round_trip_metres(lon, lat, np.asarray(bx), np.asarray(by), pyproj.CRS(4326))
    assert float(d.max()) < 1e-6  # 4.8e-9 m measured; g = 2**-10 m ~ 9.8e-4 m
