"""The release boundary (DESIGN.md §8): outputs hold released values, the index, public columns.

Regression tests for two leaks: ``privatize`` copied the input frame (the exact ``lon``/``lat``
beside the noisy geometry, location-derived columns such as ``step_m``), and ``knn`` returned
the selected rows with their true coordinates (accessor, the ``gp_knn_rows`` macro and
``gp.duckdb.knn``). Plus ``public=[...]``, the one warning naming the dropped columns, and
``gp.duckdb.privatize`` (runs once; reading it again charges nothing).
"""

from __future__ import annotations

import warnings

import duckdb
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

UTM = "EPSG:32724"  # Aracaju: a public metric CRS, so nothing is derived from the data extent


def _pings(n_users: int = 3, n_pts: int = 12) -> pd.DataFrame:
    """Lon/lat rows with canary values: every coordinate and step_m value is unique."""
    rs = np.random.default_rng(7)  # test data only, never noise
    n = n_users * n_pts
    lon = -37.05 + rs.uniform(-0.02, 0.02, n)
    lat = -10.92 + rs.uniform(-0.02, 0.02, n)
    return pd.DataFrame(
        {
            "taxi": np.repeat(np.arange(1, n_users + 1), n_pts),
            "lon": lon,
            "lat": lat,
            # computed from the coordinates, so it reveals them: never public
            "step_m": np.hypot(np.diff(lon, prepend=lon[0]), np.diff(lat, prepend=lat[0])) * 1e5
            + 1000.25,  # away from the small integers (ranks, ids) an output carries
            "time": pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC"),
        },
        index=pd.Index([f"r{i}" for i in range(n)], name="ping"),
    )


def _geo(df: pd.DataFrame) -> gpd.GeoDataFrame:
    return gpd.GeoDataFrame(df, geometry=gpd.points_from_xy(df.lon, df.lat), crs="EPSG:4326")


def _numbers(frame: pd.DataFrame) -> np.ndarray:
    """Every number an output carries: its numeric columns and its geometries' coordinates."""
    import shapely

    parts = [np.zeros(0)]
    for c in frame.columns:
        col = frame[c]
        if isinstance(col.dtype, gpd.array.GeometryDtype):
            parts.append(shapely.get_coordinates(col.array).ravel())
        elif pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            parts.append(col.to_numpy(dtype=np.float64, na_value=np.nan))
    v = np.concatenate(parts)
    return v[np.isfinite(v)]


def _assert_no_value_near(values: np.ndarray, secrets: np.ndarray, tol: float = 1e-6) -> None:
    s = np.sort(np.asarray(secrets, dtype=np.float64))
    j = np.clip(np.searchsorted(s, values), 1, s.size - 1)
    near = np.minimum(np.abs(s[j] - values), np.abs(s[j - 1] - values))
    assert (near > tol).all(), f"{int((near <= tol).sum())} output value(s) equal a secret"


def _dropped(record: list) -> list[str]:
    msgs = [str(w.message) for w in record if issubclass(w.category, gp.GpframeWarning)]
    assert len(msgs) == 1, msgs  # one warning per call
    return msgs


# ------------------------------------------------------------------------------------ privatize


def test_privatize_geodataframe_drops_true_lonlat_and_derived_columns(tmp_path):
    df = _pings()
    g = _geo(df)
    s = Session(budget=gp.CGP(rho=1e-3))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = g.geopriv(s, user="taxi", to_crs=UTM).privatize(rho=1e-4, rng=seeded_rng(1))
    (msg,) = _dropped(rec)
    assert msg.startswith("dropped columns ['lon', 'lat', 'step_m', 'time']")
    assert "public=[" in msg
    # names only, never values
    assert repr(float(df["lon"].iloc[0]))[:8] not in msg
    assert list(out.columns) == ["taxi", "geometry"]
    assert out.index.equals(df.index) and out.crs.equals(g.crs)
    # no number anywhere in the output is within 1e-6 of a true coordinate or a step length
    # (the noise is hundreds of metres; the old output held the exact lon/lat and step_m)
    _assert_no_value_near(_numbers(out), np.concatenate([df["lon"], df["lat"]]))
    _assert_no_value_near(_numbers(out), df["step_m"].to_numpy())
    # the GeoParquet written from it holds no true coordinate either (columns nor bytes)
    path = tmp_path / "private.parquet"
    out.to_parquet(path)
    back = gpd.read_parquet(path)
    assert list(back.columns) == ["taxi", "geometry"]
    _assert_no_value_near(_numbers(back), np.concatenate([df["lon"], df["lat"]]))
    raw = path.read_bytes()
    for v in np.concatenate([df["lon"], df["lat"], df["step_m"]]).tolist():
        assert np.float64(v).tobytes() not in raw


def test_privatize_dataframe_keeps_public_columns_index_and_noisy_coordinates():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    bound = df.geopriv(s, user="taxi", lon="lon", lat="lat", crs="EPSG:4326", to_crs=UTM,
                       public=["time"])  # fmt: skip
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = bound.privatize(rho=1e-4, rng=seeded_rng(2))
    (msg,) = _dropped(rec)
    assert msg.startswith("dropped columns ['step_m']:")
    assert list(out.columns) == ["taxi", "time", "lon", "lat", "geometry"]
    assert out.index.equals(df.index) and out.crs.to_epsg() == 4326
    pd.testing.assert_series_equal(out["time"], df["time"])  # values and tz-aware dtype kept
    assert np.allclose(out["lon"], out.geometry.x) and np.allclose(out["lat"], out.geometry.y)
    _assert_no_value_near(_numbers(out), np.concatenate([df["lon"], df["lat"]]))
    _assert_no_value_near(_numbers(out), df["step_m"].to_numpy())


def test_privatize_without_extra_columns_does_not_warn():
    df = _pings()[["taxi", "lon", "lat"]]
    s = Session(budget=gp.CGP(rho=1e-3))
    out = df.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM).privatize(
        rho=1e-4, rng=seeded_rng(3)
    )  # warnings are errors in the test run: none may be raised here
    assert list(out.columns) == ["taxi", "lon", "lat", "geometry"]


@pytest.mark.parametrize(
    ("geo", "public", "match"),
    [
        (False, ["nope"], "column 'nope' is not in the frame"),
        (False, ["lon"], "'lon' cannot be public: they are the protected coordinates"),
        (False, "lat", "'lat' cannot be public"),
        (True, ["geometry"], "'geometry' cannot be public"),
    ],
)
def test_bad_public_is_refused_before_anything_is_charged(geo, public, match):
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    snap = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=match) as e:
        if geo:
            bound = _geo(df).geopriv(s, user="taxi", to_crs=UTM, public=public)
        else:
            bound = df.geopriv(s, user="taxi", lon="lon", lat="lat", crs=4326, to_crs=UTM,
                               public=public)  # fmt: skip
        bound.privatize(rho=1e-4)
    assert "Nothing was charged" in str(e.value)
    assert s.ledger.snapshot() == snap


def test_public_copy_of_the_coordinates_is_refused_uncharged():
    """A GeoDataFrame from points_from_xy(df.lon, df.lat) still holds lon/lat: not public."""
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    snap = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="column 'lat' holds the point coordinates"):
        _geo(df).geopriv(s, user="taxi", to_crs=UTM, public=["time", "lat"])
    # a projected copy (x_m, as the demo hands DuckDB) is caught too
    g = _geo(df)
    g["x_m"] = g.to_crs(UTM).geometry.x
    with pytest.raises(gp.InvalidInputError, match="column 'x_m' holds the point coordinates"):
        g.geopriv(s, user="taxi", to_crs=UTM, public=["x_m"])
    assert s.ledger.snapshot() == snap


# ------------------------------------------------------------------------------------------ knn


def test_knn_returns_labels_user_rank_and_public_columns_only():
    df = _pings()
    g = _geo(df)
    s = Session(budget=gp.CGP(rho=1e-3))
    bound = g.geopriv(s, user="taxi", to_crs=UTM, public=["time"])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = bound.knn((-37.05, -10.92), 3, rho=1e-4, rng=seeded_rng(4))
    (msg,) = _dropped(rec)
    assert msg.startswith("dropped columns ['lon', 'lat', 'step_m']:")
    assert list(out.columns) == ["taxi", "time", "knn_rank"]
    assert not isinstance(out, gpd.GeoDataFrame)
    assert set(out.index) <= set(df.index) and out.index.name == "ping"
    pd.testing.assert_series_equal(out["time"], df.loc[out.index, "time"])
    secrets = np.concatenate([df["lon"], df["lat"], df["step_m"]])
    _assert_no_value_near(_numbers(out), secrets)
    assert s.spent().tolist() == [1e-4] * 3


def test_knn_on_projected_xy_columns_drops_them():
    df = _pings()
    xy = _geo(df).to_crs(UTM).get_coordinates()
    frame = pd.DataFrame({"taxi": df["taxi"].to_numpy(), "x": xy["x"].to_numpy(),
                          "y": xy["y"].to_numpy()})  # fmt: skip
    s = Session(budget=gp.CGP(rho=1e-3))
    point = (float(xy["x"].mean()), float(xy["y"].mean()))
    out = frame.geopriv(s, user="taxi", x="x", y="y", crs=UTM).knn(point, 2, rho=1e-4,
                                                                   rng=seeded_rng(5))  # fmt: skip
    assert list(out.columns) == ["taxi", "knn_rank"]
    _assert_no_value_near(_numbers(out), np.concatenate([frame["x"], frame["y"]]))


def test_knn_public_column_named_like_the_rank_is_refused_uncharged():
    df = _pings().assign(knn_rank=1)
    s = Session(budget=gp.CGP(rho=1e-3))
    snap = s.ledger.snapshot()
    bound = _geo(df).geopriv(s, user="taxi", to_crs=UTM, public=["knn_rank"])
    with pytest.raises(gp.InvalidInputError, match=r"'knn_rank'.*Nothing was charged"):
        bound.knn((-37.05, -10.92), 2, rho=1e-4)
    assert s.ledger.snapshot() == snap


def test_convex_hull_carries_no_input_column():
    df = _pings(n_pts=40)
    s = Session(budget=gp.CGP(rho=1e-2))
    hulls = _geo(df).geopriv(s, user="taxi", to_crs=UTM).convex_hull(rho=1e-3, rng=seeded_rng(6))
    assert list(hulls.columns) == ["taxi", "k", "radius_m", "error_m", "fallback", "geometry"]
    assert hulls.crs.to_epsg() == 4326


# ----------------------------------------------------------------------------------- DuckDB


def _con(session, df):
    con = duckdb.connect()
    gp.duckdb.register(con, session, rng=seeded_rng(8))
    xy = _geo(df).to_crs(UTM).get_coordinates()
    table = pd.DataFrame({"user_id": df["taxi"].to_numpy(), "ts": np.arange(len(df)),
                          "x": xy["x"].to_numpy(), "y": xy["y"].to_numpy(),
                          "step_m": df["step_m"].to_numpy()})  # fmt: skip
    con.register("pings_df", table)
    con.execute("CREATE TABLE pings AS SELECT * FROM pings_df")
    return con, table


def test_gp_knn_rows_macro_returns_no_coordinate():
    s = Session(budget=gp.CGP(rho=1e-3))
    con, t = _con(s, _pings())
    point = (float(t["x"].mean()), float(t["y"].mean()))
    rows = con.execute(
        "SELECT * FROM gp_knn_rows('SELECT user_id, ts, x, y FROM pings', $px, $py, 2, 1e-4)",
        {"px": point[0], "py": point[1]},
    ).df()
    assert sorted(rows.columns) == ["knn_rank", "ts", "user_id"]
    _assert_no_value_near(_numbers(rows), np.concatenate([t["x"], t["y"]]))
    assert len(rows) == 6


def test_duckdb_knn_relation_returns_user_public_and_rank_only():
    s = Session(budget=gp.CGP(rho=1e-3))
    con, t = _con(s, _pings())
    point = (float(t["x"].mean()), float(t["y"].mean()))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rel = gp.duckdb.knn(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
                            point=point, k=2, rho=1e-4, public=["ts"])  # fmt: skip
    (msg,) = _dropped(rec)
    assert msg.startswith("dropped columns ['step_m']:")
    got = rel.df()
    assert list(got.columns) == ["user_id", "ts", "knn_rank"]
    _assert_no_value_near(_numbers(got), np.concatenate([t["x"], t["y"], t["step_m"]]))


def test_duckdb_knn_refuses_coordinates_as_public_uncharged():
    s = Session(budget=gp.CGP(rho=1e-3))
    con, _ = _con(s, _pings())
    snap = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=r"'x' cannot be public.*Nothing was charged"):
        gp.duckdb.knn(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
                      point=(0.0, 0.0), k=2, rho=1e-4, public=["x"])  # fmt: skip
    assert s.ledger.snapshot() == snap


def test_duckdb_public_copy_of_the_coordinates_is_refused_uncharged():
    s = Session(budget=gp.CGP(rho=1e-3))
    con, _ = _con(s, _pings())
    snap = s.ledger.snapshot()
    q = "SELECT *, y AS northing FROM pings"
    with pytest.raises(gp.InvalidInputError, match="'northing' holds the point coordinates"):
        gp.duckdb.knn(con, q, user="user_id", x="x", y="y", point=(0.0, 0.0), k=2, rho=1e-4,
                      public=["ts", "northing"])  # fmt: skip
    with pytest.raises(gp.InvalidInputError, match="'northing' holds the point coordinates"):
        gp.duckdb.privatize(con, q, user="user_id", x="x", y="y", rho=1e-4, public=["northing"])
    assert s.ledger.snapshot() == snap


def test_duckdb_privatize_runs_once_and_releases_noisy_points_only():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-2))
    con, t = _con(s, df)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rel = gp.duckdb.privatize(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
                                  rho=1e-4, public=["ts"])  # fmt: skip
    (msg,) = _dropped(rec)
    assert msg.startswith("dropped columns ['step_m']:")
    spent = s.spent().sort_index()
    assert spent.tolist() == pytest.approx([12e-4] * 3)  # 12 rows per user, each at rho
    first = rel.df()
    assert list(first.columns) == ["user_id", "ts", "x", "y"]
    assert first["ts"].tolist() == t["ts"].tolist()
    _assert_no_value_near(_numbers(first[["x", "y"]]), np.concatenate([t["x"], t["y"]]))
    # reading the relation again draws nothing and charges nothing
    snap = s.ledger.snapshot()
    assert rel.df().equals(first) and rel.fetchall() == rel.fetchall()
    assert s.ledger.snapshot() == snap
    # the same rows through the accessor, per="point", are charged the same
    s_py = Session(budget=gp.CGP(rho=1e-2))
    bound = t.drop(columns="step_m").geopriv(s_py, user="user_id", x="x", y="y", crs=UTM,
                                              public=["ts"])  # fmt: skip
    bound.privatize(rho=1e-4, per="point", rng=seeded_rng(9))
    pd.testing.assert_series_equal(s_py.spent().sort_index(), spent)


def test_duckdb_privatize_needs_a_registered_connection():
    with pytest.raises(gp.InvalidInputError, match=r"gp\.duckdb\.register"):
        gp.duckdb.privatize(duckdb.connect(), "SELECT 1 AS u, 0.0 AS x, 0.0 AS y", user="u",
                            x="x", y="y", rho=1e-4)  # fmt: skip
