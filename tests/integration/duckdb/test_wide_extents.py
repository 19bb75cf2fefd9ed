"""The SQL face states the declared CRS's noise inflation: Registration and every query's params."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.geo import metric_frame
from gpframe.testing import seeded_rng

CRS = "EPSG:2163"  # US National Atlas equal area: not conformal, k varies over the domain
DOMAIN = (-106.0, 40.0, -94.0, 50.0)  # public, fixed in advance; centre near (-100, 45)


def _points() -> pd.DataFrame:
    rs = np.random.default_rng(3)
    n = 30
    return pd.DataFrame({"user_id": np.arange(n) % 10, "x": rs.uniform(-2e4, 2e4, n),
                         "y": rs.uniform(-2e4, 2e4, n)})  # fmt: skip


def _con(session: gp.Session, **kw: object) -> tuple[duckdb.DuckDBPyConnection, object]:
    con = duckdb.connect()
    con.execute("SET threads=1")
    reg = gp.duckdb.register(con, session, rng=seeded_rng(5), **kw)
    con.register("pts_df", _points())
    con.execute("CREATE TABLE pts AS SELECT * FROM pts_df")
    return con, reg


def _params(session: gp.Session) -> dict[str, dict]:
    """Each query's recorded params, by query name (the last one of each name)."""
    out = {}
    for u in session.spent().index:
        for _, row in session.history(u).iterrows():
            out[row["query"]] = session.report(query_id=row["query_id"]).attrs["params"]
    return out


def test_registration_states_crs_scale_and_inflation() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    _, reg = _con(s, crs=CRS, domain=DOMAIN)
    want = metric_frame(CRS, DOMAIN)
    assert reg.crs_m == "EPSG:2163"
    assert reg.scale_max == pytest.approx(want.scale_max)
    assert reg.noise_inflation == pytest.approx(want.noise_inflation)
    assert 1.0 < reg.noise_inflation < 1.05 and reg.noise_inflation >= reg.scale_max
    _, bare = _con(gp.Session(budget=gp.CGP(rho=1.0)))
    assert (bare.crs_m, bare.scale_max, bare.noise_inflation) == (None, 1.0, 1.0)


def test_the_accessor_and_sql_state_the_same_inflation_for_the_same_crs() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    _, reg = _con(s, crs=CRS, domain=DOMAIN)
    df = _points()
    res = (
        df.geopriv(s, user="user_id", x="x", y="y", crs=CRS, to_crs=CRS, domain=DOMAIN)
        .privatize(rho=1e-4, rng=seeded_rng(1))
        .attrs["geopriv"]
    )
    assert res.params["noise_inflation"] == pytest.approx(reg.noise_inflation)
    assert res.params["scale_max"] == pytest.approx(reg.scale_max)


def test_every_metric_sql_query_records_the_crs_and_its_inflation() -> None:
    s = gp.Session(budget=gp.CGP(rho=10.0))
    con, reg = _con(s, crs=CRS, domain=DOMAIN)
    con.execute("SELECT gp_privatize(user_id, x, y, 1e-4) FROM pts").fetchall()
    wkb = shapely.to_wkb(shapely.box(-1e4, -1e4, 1e4, 1e4))
    con.execute("SELECT gp_in_region(user_id, x, y, $w, 1e-4, 5) FROM "
                "(SELECT DISTINCT ON (user_id) * FROM pts)", {"w": wkb}).fetchall()  # fmt: skip
    con.execute("SELECT gp_kde_contribution(user_id, x, y, 0.0, 0.0, 5000.0, 1e-4, 5) FROM "
                "(SELECT DISTINCT ON (user_id) * FROM pts)").fetchall()  # fmt: skip
    con.execute("SELECT gp_knn(user_id, list(x), list(y), 0.0, 0.0, 2, 1e-4) FROM pts "
                "GROUP BY user_id").fetchall()  # fmt: skip
    gp.duckdb.nearest_users(con, "SELECT DISTINCT ON (user_id) * FROM pts", user="user_id",
                            x="x", y="y", point=(0.0, 0.0), k=1, rho=1e-3).fetchall()  # fmt: skip
    gp.duckdb.kde_raster(con, "SELECT DISTINCT ON (user_id) * FROM pts", user="user_id", x="x",
                         y="y", bandwidth_m=5000, cell_m=2000, rho=1e-4).fetchall()  # fmt: skip
    got = _params(s)
    names = ("gp_privatize", "gp_in_region", "gp_kde_contribution", "gp_knn", "nearest_users",
             "kde_raster")  # fmt: skip
    assert set(names) <= set(got), set(got)
    for name in names:
        p = got[name]
        assert p["noise_inflation"] == pytest.approx(reg.noise_inflation), name
        assert p["scale_max"] == pytest.approx(reg.scale_max), name
        assert p["crs_m"] == "EPSG:2163", name
