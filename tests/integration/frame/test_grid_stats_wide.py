"""grid_stats needs no metric CRS: data spanning many UTM zones runs with no options, its H3 cells
are those of the lon/lat as given, and no projection is attempted; metric operations on the same
binding still choose (and here refuse) a metric CRS as before."""

from __future__ import annotations

import h3
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor
from gpframe import geo
from gpframe.errors import CRSError
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

#: national AIS-like sites: Alaska (Aleutians) to Puerto Rico, about 18 UTM zones
WIDE_SITES = [(-173.6, 52.1), (-150.0, 60.0), (-122.4, 37.8), (-95.0, 29.5), (-80.1, 25.8),
              (-64.4, 18.0), (-70.0, 42.0), (-157.9, 21.3)]  # fmt: skip
#: the same number of sites inside UTM zone 18N (New York), each in its own H3 cell at res 5
NARROW_SITES = [(-74.0 + 0.2 * i, 40.0 + 0.2 * (i % 3)) for i in range(len(WIDE_SITES))]
RES = 5


def _frame(sites: list[tuple[float, float]]) -> pd.DataFrame:
    """30 users, each with points at a few sites (the same structure whatever the sites)."""
    # each site at its H3 cell's centre, so the jitter below never leaves the cell
    sites = [h3.cell_to_latlng(h3.latlng_to_cell(la, lo, RES))[::-1] for lo, la in sites]
    rs = np.random.default_rng(7)
    n = 400
    users = rs.integers(0, 30, n)
    site = (users + rs.integers(0, 3, n)) % len(sites)
    lon = np.array([sites[s][0] for s in site]) + rs.uniform(-0.01, 0.01, n)
    lat = np.array([sites[s][1] for s in site]) + rs.uniform(-0.01, 0.01, n)
    return pd.DataFrame({"vessel": users, "lon": lon, "lat": lat, "speed": rs.uniform(0, 30, n)})


def _no_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a metric projection was attempted")

    monkeypatch.setattr(geo, "_project", refuse)
    monkeypatch.setattr(geo, "metric_crs_for", refuse)
    monkeypatch.setattr(geo.Located, "project", refuse)


def _grid(df: pd.DataFrame, session: Session, **kw: object) -> pd.DataFrame:
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326")
    return bound.grid_stats(value="speed", bounds=(0, 30), epsilon=0.5, cells=RES,
                            occupancy="public", rng=seeded_rng(3), **kw)  # fmt: skip


def test_multi_zone_lonlat_needs_no_options_and_no_projection(monkeypatch):
    df = _frame(WIDE_SITES)
    _no_projection(monkeypatch)
    session = Session(central=gp.DP(epsilon=100.0))
    out = _grid(df, session)  # filterwarnings=error: no coarse-extent warning either
    expected = [h3.latlng_to_cell(la, lo, RES) for lo, la in zip(df.lon, df.lat, strict=True)]
    counts = pd.Series(expected).value_counts()
    assert sorted(out.index) == sorted(counts.index)
    assert (out["n_samples"] == counts.reindex(out.index)).all()
    assert out.crs.to_epsg() == 4326


def test_h3_cells_are_those_of_the_input_row_by_row(monkeypatch):
    from gpframe.frame.grid_stats import h3_cells

    df = _frame(WIDE_SITES)
    _no_projection(monkeypatch)
    bound = df.geopriv(Session(central=gp.DP(epsilon=1.0)), user="vessel", lon="lon", lat="lat",
                       crs="EPSG:4326")  # fmt: skip
    got = [h3.int_to_str(int(c)) for c in h3_cells(bound.located, 9)]
    assert got == [h3.latlng_to_cell(la, lo, 9) for lo, la in zip(df.lon, df.lat, strict=True)]


def test_private_occupancy_on_multi_zone_data(monkeypatch):
    df = _frame(WIDE_SITES)
    _no_projection(monkeypatch)
    cells = sorted({h3.latlng_to_cell(la, lo, RES) for lo, la in zip(df.lon, df.lat, strict=True)})
    session = Session(central=gp.DP(epsilon=100.0))
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326")
    res = bound.grid_stats(value="speed", bounds=(0, 30), epsilon=0.5, cells=RES,
                           occupancy="private", public_cells=cells, max_cells=2, max_per_cell=5,
                           rng=seeded_rng(4))  # fmt: skip
    assert sorted(res.index) == cells


def test_same_charges_as_on_single_zone_data():
    wide, narrow = Session(central=gp.DP(epsilon=100.0)), Session(central=gp.DP(epsilon=100.0))
    a = _grid(_frame(WIDE_SITES), wide)
    b = _grid(_frame(NARROW_SITES), narrow)
    assert len(a) == len(b) == len(WIDE_SITES)
    ra, rb = a.attrs["geopriv"].result, b.attrs["geopriv"].result
    assert ra.spent_at_most == rb.spent_at_most and ra.Gamma_prime == rb.Gamma_prime
    pd.testing.assert_series_equal(wide.spent(), narrow.spent())
    assert wide.spent().gt(0).all()


def test_metric_operations_on_multi_zone_data_get_the_wide_projection_and_say_so():
    df = _frame(WIDE_SITES)
    session = Session(budget=gp.CGP(rho=1e-2), central=gp.DP(epsilon=100.0))
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                       public=["speed"])  # fmt: skip
    assert "not chosen yet" in repr(bound)
    with pytest.warns(gp.GpframeWarning) as rec:
        out = bound.privatize(rho=1e-4, rng=seeded_rng(1))
    msgs = " ".join(str(w.message) for w in rec)
    assert "whole degrees" in msgs and "least distortion" in msgs
    params = out.attrs["geopriv"].params
    assert "gpframe Lambert conformal conic" in params["crs_m"]
    assert 1.0 < params["scale_max"] < params["noise_inflation"] < 1.1
    r = bound.kde((-100.0, 40.0), bandwidth_m=50_000.0, rho=1e-4, reduce="first", rng=seeded_rng(1))
    assert r.params["noise_inflation"] == params["noise_inflation"]


def test_metric_operations_refuse_world_wide_data_before_charging():
    df = pd.DataFrame({"vessel": [1, 2, 3, 4], "lon": [-170.0, -60.0, 50.0, 160.0],
                       "lat": [-50.0, 0.0, 60.0, 10.0], "speed": [1.0, 2.0, 3.0, 4.0]})  # fmt: skip
    session = Session(budget=gp.CGP(rho=1e-2), central=gp.DP(epsilon=100.0))
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326")
    before = session.ledger.snapshot()
    with pytest.raises(CRSError, match="too wide for one transverse Mercator"):
        bound.privatize(rho=1e-4, rng=seeded_rng(1))
    with pytest.raises(CRSError, match="too wide"):
        bound.kde((-100.0, 40.0), bandwidth_m=1000.0, rho=1e-4, rng=seeded_rng(1))
    assert session.ledger.snapshot() == before
    bound.grid_stats(value="speed", bounds=(0, 30), epsilon=0.5, cells=RES,
                     occupancy="public", rng=seeded_rng(3))  # fmt: skip
    assert session.ledger.snapshot() != before


def test_single_zone_warning_comes_with_the_metric_operation_only():
    df = _frame(NARROW_SITES)
    session = Session(budget=gp.CGP(rho=1e-2), central=gp.DP(epsilon=100.0))
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                       public=["speed"])  # fmt: skip
    _grid(df, session)  # no warning: no CRS is chosen, none is revealed
    with pytest.warns(gp.GpframeWarning, match="rounded outward to whole degrees"):
        bound.privatize(rho=1e-4, rng=seeded_rng(1))
    assert bound.projected.crs_m.to_epsg() == 32618


def test_public_copy_of_projected_coordinates_refused_at_the_metric_operation():
    df = _frame(NARROW_SITES)
    session = Session(budget=gp.CGP(rho=1e-2))
    p = geo.resolve_points(df, user="vessel", lon="lon", lat="lat", crs=4326, to_crs="EPSG:32618")
    df["east"] = p.xy[:, 0]
    before = session.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="'east' holds the point coordinates"):
        df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                   to_crs="EPSG:32618", public=["east"])  # named CRS: caught at once  # fmt: skip
    # automatic choice (zone 18N here): caught when the first metric operation chooses it
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                       public=["east"])  # fmt: skip
    with (
        pytest.warns(gp.GpframeWarning, match="whole degrees"),
        pytest.raises(gp.InvalidInputError, match="'east' holds the point coordinates"),
    ):
        bound.privatize(rho=1e-4, rng=seeded_rng(1))
    assert session.ledger.snapshot() == before


def test_every_metric_result_states_crs_factor_and_inflation():
    import shapely

    df = _frame(WIDE_SITES).groupby("vessel", as_index=False).first()  # one point per user
    session = Session(budget=gp.CGP(rho=10.0))
    bound = df.geopriv(session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                       domain=(-174, 18, -64, 61), public=["speed"])  # fmt: skip
    with pytest.warns(gp.GpframeWarning, match="least distortion"):
        bound.projected  # noqa: B018 - choose the CRS once, here
    p = bound.projected
    want = (p.crs_m.to_string(), float(p.scale_max), float(p.noise_inflation))
    assert 1.05 < want[2] < 1.1
    results = [
        bound.range_count(shapely.box(-130, 30, -60, 50), rho=1e-4, rng=seeded_rng(1)),
        bound.kde((-100.0, 40.0), bandwidth_m=50_000.0, rho=1e-4, rng=seeded_rng(2)),
        bound.kde_raster(
            bandwidth_m=50_000.0,
            cell_m=20_000.0,
            bounds=(-101, 39, -99, 41),
            rho=1e-4,
            rng=seeded_rng(3),
        ),
        bound.nearest_users((-100.0, 40.0), 2, rho=1e-4, rng=seeded_rng(4)),
    ]
    for r in results:
        r = getattr(r, "attrs", {}).get("geopriv", r)
        got = (r.params["crs_m"], r.params["scale_max"], r.params["noise_inflation"])
        assert got == want, type(r).__name__
