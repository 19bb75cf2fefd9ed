import hashlib
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
import pytest

import gpframe as gp
import gpframe.frame.accessor
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

G = 2.0**-10
LATTICE = 1 + np.sqrt(2) * G  # secure-noise.md §9.3 calibration factor (r_min = 1 m)
UTM24S = "EPSG:32724"  # the pings are in Aracaju: a named metric CRS keeps the projection public


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    for p in (path, Path(str(path) + "-wal")):
        h.update(p.read_bytes() if p.exists() else b"<none>")
    return h.hexdigest()


@pytest.fixture
def pings():
    rng = np.random.default_rng(0)  # test data only, not noise
    n = 60
    return pd.DataFrame(
        {
            "taxi": np.repeat([1, 2, 3], n // 3),
            "lon": -37.05 + rng.uniform(-0.02, 0.02, n),
            "lat": -10.92 + rng.uniform(-0.02, 0.02, n),
        },
        index=pd.Index(np.arange(100, 100 + n), name="row"),
    )


@pytest.fixture
def file_session(tmp_path):
    s = Session(path=str(tmp_path / "ledger.sqlite"), budget=gp.CGP(rho=1e-3))
    return s, tmp_path / "ledger.sqlite"


def test_round_trip_lonlat_dataframe_keeps_index_crs_and_columns(pings):
    s = Session(budget=gp.CGP(rho=1e-3))
    # ping: a public id; speed: computed from the locations, so it must not pass through
    df = pings.assign(ping=np.arange(len(pings)), speed=np.arange(len(pings), dtype=float))
    bound = df.geopriv(
        s, user="taxi", lon="lon", lat="lat", crs="EPSG:4326", to_crs=UTM24S, public=["ping"]
    )
    with pytest.warns(gp.GpframeWarning, match=r"^dropped columns \['speed'\]"):
        out = bound.privatize(rho=1e-4, rng=seeded_rng(1))
    assert isinstance(out, gpd.GeoDataFrame)
    assert out.crs.to_epsg() == 4326
    assert out.index.equals(pings.index)
    assert list(out.columns) == ["taxi", "ping", "lon", "lat", "geometry"]
    assert out["ping"].tolist() == df["ping"].tolist()
    assert out["taxi"].tolist() == pings["taxi"].tolist()
    assert np.allclose(out["lon"], out.geometry.x) and np.allclose(out["lat"], out.geometry.y)
    assert not np.allclose(out["lon"], pings["lon"])
    res = out.attrs["geopriv"]
    assert res.n_charged == 3 and res.n_excluded == 0
    assert s.spent().tolist() == pytest.approx([1e-4] * 3)


def test_round_trip_projected_geodataframe(pings):
    g = gpd.GeoDataFrame(pings, geometry=gpd.points_from_xy(pings.lon, pings.lat), crs=4326)
    g = g.to_crs(32724)
    s = Session(budget=gp.GP(eps=1.0))
    # the exact lon/lat columns beside the geometry are the true points: dropped, named
    with pytest.warns(gp.GpframeWarning, match=r"^dropped columns \['lon', 'lat'\]"):
        out = g.geopriv(s, user="taxi").privatize(eps=0.05, per="point", rng=seeded_rng(2))
    assert out.crs.to_epsg() == 32724
    assert out.index.equals(g.index)
    assert list(out.columns) == ["taxi", "geometry"]
    d = out.geometry.distance(g.geometry)
    assert d.median() < 200  # noise around 2/eps = 40 m
    assert s.spent().tolist() == pytest.approx([0.05 * 20] * 3)


def test_output_writes_to_geoparquet_with_its_result_summary(pings, tmp_path):
    """geopandas json-dumps attrs into GeoParquet; the result must not break to_parquet."""
    s = Session(budget=gp.CGP(rho=1e-3))
    bound = pings.geopriv(s, user="taxi", lon="lon", lat="lat", crs="EPSG:4326", to_crs=UTM24S)
    out = bound.privatize(rho=1e-4, rng=seeded_rng(3))
    res = out.attrs["geopriv"]
    assert list(res.max_error_m.index) == [1, 2, 3]  # each user's own bound, metres
    assert (res.max_error_m > 0).all() and (res.max_error_m <= res.error).all()
    out.to_parquet(tmp_path / "private.parquet")
    back = gpd.read_parquet(tmp_path / "private.parquet")
    assert back.attrs["geopriv"]["query_id"] == res.query_id
    assert back.attrs["geopriv"]["n_charged"] == 3
    assert back.geometry.equals(out.geometry)


def test_gp_on_cgp_ledger_charges_eps_squared_over_two(pings):
    s = Session(budget=gp.CGP(rho=1e-2))
    b = pings.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM24S)
    b.privatize(eps=0.01, rng=seeded_rng(3))
    assert s.spent().tolist() == pytest.approx([0.01**2 / 2] * 3)
    b.privatize(eps=0.01, per="point", rng=seeded_rng(4))  # n eps²/2 by CGP composition
    assert s.spent().tolist() == pytest.approx([0.01**2 / 2 * 21] * 3)


def test_exhausted_user_is_excluded_and_reported(pings):
    s = Session(budget=gp.CGP(rho=1e-3))
    s.set_budget([2], gp.CGP(rho=1e-6))
    out = pings.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM24S).privatize(
        rho=1e-4, rng=seeded_rng(5)
    )
    res = out.attrs["geopriv"]
    assert list(res.excluded) == [2] and res.n_charged == 2
    rows = pings["taxi"] == 2
    assert out.geometry[rows].isna().all() or out.geometry[rows].is_empty.all()
    assert out.loc[rows, "lon"].isna().all() and out.loc[~rows, "lon"].notna().all()
    assert s.spent([1, 2, 3]).tolist() == pytest.approx([1e-4, 0.0, 1e-4])


BAD_CALLS = [
    ("exactly one of eps", {}, {"rho": 1e-4, "eps": 0.1}),
    ("exactly one of eps", {}, {}),
    ("rho=-0.0001", {}, {"rho": -1e-4}),
    ("not finite", {}, {"rho": float("nan")}),
    ("per='row'", {}, {"rho": 1e-4, "per": "row"}),
    ("beta=2", {}, {"rho": 1e-4, "beta": 2}),
    ("eps=1000", {}, {"eps": 1000.0}),
    ("column 'lat' has 1 NaN", {"nan": True}, {"rho": 1e-4}),
    ("nope", {"user": "nope"}, {"rho": 1e-4}),
]


@pytest.mark.parametrize(("match", "bind", "call"), BAD_CALLS)
def test_bad_input_raises_and_leaves_ledger_file_identical(pings, file_session, match, bind, call):
    s, path = file_session
    pings.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM24S).privatize(
        rho=1e-5, rng=seeded_rng(9)
    )
    before, snap = _file_hash(path), s.ledger.snapshot()
    df = pings.copy()
    if bind.get("nan"):
        df.loc[df.index[0], "lat"] = np.nan
    with pytest.raises(gp.InvalidInputError, match=match):
        df.geopriv(
            s, user=bind.get("user", "taxi"), lon="lon", lat="lat", crs=4326, to_crs=UTM24S
        ).privatize(**call)
    assert _file_hash(path) == before
    assert s.ledger.snapshot() == snap


def test_gaussian_on_gp_ledger_is_refused_before_anything_is_written(pings, tmp_path):
    path = tmp_path / "gp.sqlite"
    s = Session(path=str(path), budget=gp.GP(eps=1.0))
    before = _file_hash(path)
    with pytest.raises(gp.BudgetExceededError, match="Nothing was charged"):
        bound = pings.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM24S)
        bound.privatize(rho=1e-4)
    assert _file_hash(path) == before


def _ground_mean_radius(lat0, *, eps=None, rho=None, n=150_000, seed=0):
    users = 500
    rng = np.random.default_rng(seed)  # the true points only
    df = pd.DataFrame(
        {
            "u": np.arange(n) % users,
            "lon": 10.0 + rng.uniform(-0.05, 0.05, n),
            "lat": lat0 + rng.uniform(-0.05, 0.05, n),
        }
    )
    s = Session(budget=gp.GP(eps=100.0) if eps else gp.CGP(rho=100.0))
    # a public box around the points: the projection (and scale_max) depend on no data
    dom = (9.0, lat0 - 1.0, 11.0, lat0 + 1.0)
    out = df.geopriv(s, user="u", lon="lon", lat="lat", crs=4326, domain=dom).privatize(
        eps=eps, rho=rho, per="point", rng=seeded_rng(seed + 17), progress=False
    )
    _, _, dist = pyproj.Geod(ellps="WGS84").inv(
        df.lon.to_numpy(), df.lat.to_numpy(), out.lon.to_numpy(), out.lat.to_numpy()
    )
    return float(np.mean(dist))


@pytest.mark.statistical
@pytest.mark.parametrize("lat0", [0.0, 45.0, 70.0])
def test_gp_mean_ground_radius_is_two_over_eps(lat0):
    """Planar Laplace radius ~ Gamma(2, 1/eps): mean 2/eps (secure-noise.md §7.5).

    n = 150k: relative SE 0.707/sqrt(n) = 0.18 %, lattice bias +0.14 %, so 1 % is > 4.7 SE
    (false failure < 2e-6 per case).
    """
    eps = 0.02
    mean = _ground_mean_radius(lat0, eps=eps, seed=int(lat0))
    assert abs(mean / (2 / eps) - 1) < 0.01


@pytest.mark.statistical
@pytest.mark.parametrize("lat0", [0.0, 45.0, 70.0])
def test_cgp_mean_ground_radius_is_sigma_sqrt_pi_over_2(lat0):
    """Gaussian radius ~ Rayleigh(sigma): mean sigma sqrt(pi/2), sigma = 1/sqrt(2 rho).

    n = 150k: relative SE 0.523/sqrt(n) = 0.14 %; 1 % is > 6 SE (false failure < 1e-9).
    """
    rho = 1e-4
    mean = _ground_mean_radius(lat0, rho=rho, seed=100 + int(lat0))
    sigma = 1 / np.sqrt(2 * rho)
    assert abs(mean / (sigma * np.sqrt(np.pi / 2)) - 1) < 0.01


@pytest.mark.statistical
def test_units_check_catches_a_degree_or_split_mutant():
    """Negative control: per='user' with 300 points per user has mean radius 600/eps, not 2/eps."""
    df = pd.DataFrame(
        {"u": np.zeros(300, int), "lon": np.full(300, 10.0), "lat": np.full(300, 45.0)}
    )
    s = Session(budget=gp.GP(eps=100.0))
    out = df.geopriv(s, user="u", lon="lon", lat="lat", crs=4326, to_crs=32632).privatize(
        eps=0.02, rng=seeded_rng(1)
    )
    _, _, dist = pyproj.Geod(ellps="WGS84").inv(df.lon, df.lat, out.lon, out.lat)
    assert abs(np.mean(dist) / (2 / 0.02) - 1) > 0.5


def test_projected_input_on_a_spherical_datum_needs_no_to_crs():
    # EPSG:2163 lies on a sphere, where PROJ refuses UTM: gpframe projects on WGS 84 instead of
    # failing with a raw ProjError ("eccentricity should not be zero").
    to = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:2163", always_xy=True)
    x, y = to.transform([-90.2, -89.8, -90.0, -90.1], [39.5, 40.5, 40.0, 39.8])
    df = pd.DataFrame({"uid": [1, 2, 3, 1], "x": x, "y": y})
    s = Session(budget=gp.GP(eps=1.0))
    b = df.geopriv(s, user="uid", x="x", y="y", crs="EPSG:2163", domain=(-90.5, 39, -89.5, 41))
    out = b.privatize(eps=0.01, per="point", rng=seeded_rng(5))
    assert out.crs.equals(pyproj.CRS("EPSG:2163"))
    assert len(out) == 4 and np.isfinite(out.geometry.x).all()
    assert out.attrs["geopriv"].params["crs_m"] == "EPSG:32616"  # UTM on WGS 84
