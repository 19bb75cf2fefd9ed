"""kde / kde_raster on frames, the Raster result and the DuckDB UDF (issue 7).

Spec: adaptive-budgeting.md §5.2, §5.5, §7. The accessor wiring (``df.geopriv(...).kde``) is
tested at the end, skipped until it is added.
"""

import json
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.frame.accessor
from gpframe.duckdb.kde import register_kde
from gpframe.frame.accessor import GeoPriv
from gpframe.frame.kde import kde, kde_raster
from gpframe.ledger import Session
from gpframe.results import KdeResult, Raster
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
Q = shapely.Point(500_000, 4_500_000)
wired = pytest.mark.skipif(not hasattr(GeoPriv, "kde"), reason="accessor wiring pending")


def _pings(n=200, seed=0):
    gen = np.random.default_rng(seed)  # true points only, never noise
    near = gen.normal(0, 300, (n // 2, 2))
    far = gen.uniform(20_000, 30_000, (n - n // 2, 2))
    xy = np.vstack([near, far]) + np.array([500_000, 4_500_000])
    return pd.DataFrame({"boat": np.arange(n), "x": xy[:, 0], "y": xy[:, 1]})


def _bound(df, session):
    return df.geopriv(session, user="boat", x="x", y="y", crs=CRS)


def test_kde_pt_elim_charges_and_savings():
    session = Session(budget=gp.CGP(rho=1e-3))
    res = kde(
        _bound(_pings(), session),
        Q,
        bandwidth_m=500,
        rho=1e-4,
        rounds=4,
        split="even",
        rng=seeded_rng(1),
    )
    assert isinstance(res, KdeResult) and 0 < res.value <= 1
    assert res.n_charged == 200 and res.saved > 0
    spent = session.spent()
    assert (spent.loc[:99] == 1e-4).all()  # near users pay the allocation
    assert (spent.loc[100:] < 1e-4).all()  # far users stop early
    assert (res.charges <= res.allocations).all()
    assert res.points["n_far"].iloc[0] == 100


def test_kde_pt_many_points_charged_once():
    session = Session(budget=gp.CGP(rho=1e-3))
    at = np.array([[500_000, 4_500_000], [525_000, 4_525_000], [600_000, 4_600_000]])
    res = kde(
        _bound(_pings(), session), at, bandwidth_m=1000, rho=1e-4, method="pt", rng=seeded_rng(2)
    )
    assert len(res.value) == 3 and (session.spent() == 1e-4).all()
    assert res.value["kde"].iloc[2] == pytest.approx(0.0, abs=1e-6)


def test_kde_dist_many_points_charges_add_up():
    session = Session(budget=gp.CGP(rho=1e-3))
    at = np.array([[500_000, 4_500_000], [525_000, 4_525_000]])
    kde(
        _bound(_pings(20), session),
        at,
        bandwidth_m=1000,
        rho=1e-4,
        method="dist",
        rng=seeded_rng(3),
    )
    assert session.spent().to_numpy() == pytest.approx(np.full(20, 2e-4))


def test_units_lonlat_bandwidth_is_ground_metres():
    """Points 1 km apart on the ground (lon/lat), bandwidth 1 km: K = e^{-1/2} for the far one."""
    from pyproj import Geod

    lon2, lat2, _ = Geod(ellps="WGS84").fwd(-74.0, 40.7, 90, 1000.0)
    df = pd.DataFrame({"u": [1, 2], "lon": [-74.0, lon2], "lat": [40.7, lat2]})
    session = Session(budget=gp.CGP(rho=100.0))
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=CRS)
    res = kde(
        bound,
        shapely.Point(-74.0, 40.7),
        bandwidth_m=1000,
        rho=10.0,
        method="pt",
        rng=seeded_rng(4),
    )
    assert res.value == pytest.approx((1 + math.exp(-0.5)) / 2, abs=2e-3)


def test_kde_raster_frame_mass_charges_and_exports(tmp_path):
    session = Session(budget=gp.CGP(rho=1e-3))
    r = kde_raster(
        _bound(_pings(400), session),
        bandwidth_m=1000,
        cell_m=250,
        rho=1e-4,
        bounds=(490_000, 4_490_000, 540_000, 4_540_000),
        rng=seeded_rng(5),
    )
    assert isinstance(r, Raster) and r.shape == (200, 200)
    assert r.mass == pytest.approx(1.0, abs=0.01)
    assert (session.spent() == 1e-4).all() and r.n_charged == 400
    assert r.params["bias_correction"] == "exact" and r.crs == CRS
    d = r.to_dict(value=False)
    json.dumps(d)
    assert d["transform"][0] == 250.0 and "Raster" in repr(r)
    import matplotlib

    matplotlib.use("Agg")
    ax = r.plot()
    assert "rho" in ax.get_title()
    try:
        import xarray  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="install xarray"):
            r.to_xarray()
    else:
        assert r.to_xarray().shape == r.shape
    try:
        import rasterio  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="install rasterio"):
            r.to_geotiff(tmp_path / "k.tif")


def test_kde_raster_lonlat_bounds_in_degrees():
    df = pd.DataFrame(
        {
            "u": range(50),
            "lon": -74.0 + np.linspace(0, 0.01, 50),
            "lat": 40.7 + np.linspace(0, 0.01, 50),
        }
    )
    session = Session(budget=gp.CGP(rho=1e-3))
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=CRS)
    r = kde_raster(
        bound,
        bandwidth_m=1000,
        cell_m=200,
        rho=1e-4,
        bounds=(-74.1, 40.6, -73.9, 40.8),
        rng=seeded_rng(6),
    )
    assert r.crs != "EPSG:4326" and r.mass == pytest.approx(1.0, abs=0.02)
    # the grid stays in metres; the input CRS is recorded and the cells come back in it
    assert r.crs_in == "EPSG:4326" and r.to_dict()["crs_in"] == "EPSG:4326"
    cells = r.cells()
    assert cells.crs.to_epsg() == 4326 and len(cells) == r.array.size
    np.testing.assert_array_equal(cells["density"].to_numpy(), r.array.ravel())
    lon, lat = cells.geometry.iloc[0].centroid.coords[0]
    assert -74.11 < lon < -74.09 and 40.79 < lat < 40.81  # the north-west cell
    assert shapely.area(np.asarray(cells.geometry.array)).min() > 0


def test_raster_plot_reprojects_an_outline_with_a_crs():
    import geopandas as gpd
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = Raster(value=np.ones((2, 2)), transform=(1000.0, 0.0, 580_000.0, 0.0, -1000.0,
               4_510_000.0), crs=CRS, charges=pd.Series([1e-4]))  # fmt: skip
    box = gpd.GeoSeries([shapely.box(580_500, 4_508_500, 581_500, 4_509_500)], crs=CRS)
    ax = r.plot(outline=box.to_crs(4326))
    xs = np.concatenate([p.vertices[:, 0] for p in ax.collections[-1].get_paths()])
    assert xs.min() > 579_000 and xs.max() < 582_000  # drawn in the grid's metres
    plt.close(ax.figure)


# ---------------------------------------------------------------------------------------------
# bad inputs leave the ledger untouched


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(method="elim"), "method='elim' is not one of"),
        (dict(bandwidth_m=-5), "bandwidth_m"),
        (dict(rho=None), "pass exactly one of"),
        (dict(rho=1e-4, eps=0.1), "pass exactly one of"),
        (dict(beta=0), "beta"),
        (dict(at=shapely.box(0, 0, 1, 1)), "is not a shapely Point"),
        (dict(at="here"), "at="),
        (dict(rounds=0), "rounds"),
    ],
)
def test_kde_bad_input_leaves_ledger_untouched(kw, match):
    session = Session(budget=gp.CGP(rho=1e-3))
    bound = _bound(_pings(10), session)
    before = session.ledger.snapshot()
    args = dict(at=Q, bandwidth_m=500, rho=1e-4)
    args.update(kw)
    at = args.pop("at")
    with pytest.raises(gp.InvalidInputError, match=match):
        kde(bound, at, **args)
    assert session.ledger.snapshot() == before


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(bandwidth_m=50), "not larger than the noise"),  # σ ≈ 70.8 m at rho = 1e-4
        (dict(cell_m=0), "cell_m"),
        (dict(bounds=(1, 2, 0, 3)), "bounds"),
        (dict(bounds=(0, 0, 1e8, 1e8), cell_m=10), "cells per side"),
        (dict(eps=0.1, rho=None), "CGP: pass rho"),
    ],
)
def test_kde_raster_bad_input_leaves_ledger_untouched(kw, match):
    session = Session(budget=gp.CGP(rho=1e-3))
    bound = _bound(_pings(10), session)
    before = session.ledger.snapshot()
    args = dict(bandwidth_m=1000, rho=1e-4)
    args.update(kw)
    with pytest.raises(gp.InvalidInputError, match=match):
        kde_raster(bound, **args)
    assert session.ledger.snapshot() == before


# ---------------------------------------------------------------------------------------------
# DuckDB: the same charges as Python


def test_duckdb_charges_equal_python():
    df = _pings(60)
    s1 = Session(budget=gp.CGP(rho=1e-3))
    kde(_bound(df, s1), Q, bandwidth_m=500, rho=1e-4, rounds=10, rng=seeded_rng(7))
    s2 = Session(budget=gp.CGP(rho=1e-3))
    con = duckdb.connect()
    register_kde(con, s2, rng=seeded_rng(7))
    con.register("pings", df)
    val = con.execute(
        "SELECT AVG(gp_kde_contribution(boat, x, y, 500000.0, 4500000.0, 500.0, 1e-4, 10, 60)) "
        "FROM (SELECT * FROM pings ORDER BY boat)"
    ).fetchone()[0]
    assert 0 <= val <= 1
    pd.testing.assert_series_equal(s1.spent().sort_index(), s2.spent().sort_index())


def test_duckdb_null_and_bad_rho():
    session = Session(budget=gp.CGP(rho=1e-3))
    con = duckdb.connect()
    register_kde(con, session)
    assert con.execute(
        "SELECT gp_kde_contribution(1, NULL, 0.0, 0.0, 0.0, 500.0, 1e-4, 10)"
    ).fetchone() == (None,)
    before = session.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="rho"):
        con.execute("SELECT gp_kde_contribution(1, 0.0, 0.0, 0.0, 0.0, 500.0, -1.0, 10)").fetchall()
    assert session.ledger.snapshot() == before


# ---------------------------------------------------------------------------------------------
# accessor wiring


@wired
def test_accessor_kde_and_raster():
    session = Session(budget=gp.CGP(rho=1e-3))
    b = _bound(_pings(), session)
    res = b.kde(Q, bandwidth_m=500, rho=1e-5, rng=seeded_rng(8))
    assert isinstance(res, KdeResult)
    r = b.kde_raster(
        bandwidth_m=1000,
        rho=1e-5,
        bounds=(490_000, 4_490_000, 540_000, 4_540_000),
        rng=seeded_rng(9),
    )
    assert isinstance(r, Raster)
