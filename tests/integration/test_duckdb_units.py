"""SQL has no CRS: ``gp.duckdb.register(con, session, crs=...)`` names the metres x/y are in.

Tried as a new user would: degrees fed to ``gp_privatize`` are refused with a gpframe message and
nothing is charged; the named CRS's scale factor strengthens the noise exactly as the accessor's.
"""

import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.duckdb import register
from gpframe.errors import CRSError, InvalidInputError
from gpframe.geo import metric_frame
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

# Aracaju, Brazil (UTM zone 24S, EPSG:32724)
LON, LAT = -37.05, -10.91


def _degrees(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(0)  # true points only
    return pd.DataFrame(
        {
            "user_id": np.arange(n) % 7,
            "lon": LON + rng.uniform(-0.05, 0.05, n),
            "lat": LAT + rng.uniform(-0.05, 0.05, n),
        }
    )


def _metres(n: int = 300) -> pd.DataFrame:
    return pd.DataFrame(
        {"user_id": [3] * n, "x": 5e5 + np.arange(n) * 10.0, "y": 8.8e6 + np.arange(n) * 7.0}
    )


def test_degrees_with_a_named_crs_are_refused_and_nothing_is_charged():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs="EPSG:32724")
    con.register("pings", _degrees(3))  # even three rows: the CRS's area of use decides
    before = s.ledger.snapshot()
    msg = r"not metres of crs=EPSG:32724.*Nothing was charged"
    with pytest.raises(duckdb.Error, match=msg) as e:
        con.execute("SELECT gp_privatize(user_id, lon, lat, 1e-6) FROM pings").fetchall()
    assert "-37." not in str(e.value) and "-10." not in str(e.value)  # no coordinate in the text
    with pytest.raises(duckdb.Error, match="not metres of crs=EPSG:32724"):
        con.execute("SELECT gp_privatize_gp(user_id, lon, lat, 1e-3) FROM pings").fetchall()
    assert s.ledger.snapshot() == before


def test_degrees_without_a_crs_are_refused_as_degrees():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s)
    con.register("pings", _degrees())
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"look like degrees.*crs=.*Nothing was charged"):
        con.execute("SELECT gp_privatize(user_id, lon, lat, 1e-6) FROM pings").fetchall()
    assert s.ledger.snapshot() == before


def test_the_relation_helper_refuses_degrees_too():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs="EPSG:32724")
    con.register("pings", _degrees(3))
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="not metres of crs=EPSG:32724"):
        gp.duckdb.privatize(con, "SELECT * FROM pings", user="user_id", x="lon", y="lat", rho=1e-6)
    assert s.ledger.snapshot() == before


def test_named_crs_scales_the_noise_like_the_accessor():
    df = _metres()
    s_py = Session(budget=gp.CGP(rho=1.0))
    out = df.geopriv(s_py, user="user_id", x="x", y="y", crs=32724).privatize(
        rho=1e-4, per="point", rng=seeded_rng(9)
    )
    assert metric_frame("EPSG:32724").scale_max > 1.0  # the zone's edge: k_max = 1.000981

    def sql(**kw):
        con, s = duckdb.connect(), Session(budget=gp.CGP(rho=1.0))
        register(con, s, rng=seeded_rng(9), **kw)
        con.register("d", df)
        q = "SELECT p.x, p.y FROM (SELECT gp_privatize(user_id, x, y, 1e-4) AS p FROM d)"
        return np.array(con.execute(q).fetchall()), s

    named, s_sql = sql(crs="EPSG:32724")
    np.testing.assert_array_equal(named, out[["x", "y"]].to_numpy())
    assert s_sql.spent().to_dict() == s_py.spent().to_dict()
    unnamed, _ = sql()  # scale 1: weaker noise than the guarantee per ground metre needs
    assert (unnamed != named).any()


def test_crs_that_is_not_metres_is_refused_at_registration():
    s = Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    for crs, msg in (
        ("EPSG:4326", "not a projected CRS"),
        ("EPSG:3857", "Web Mercator"),
        ("EPSG:2263", "not metres"),
    ):
        with pytest.raises(CRSError, match=msg):
            register(duckdb.connect(), s, crs=crs)
    with pytest.raises(InvalidInputError, match="pass crs="):
        register(duckdb.connect(), s, domain=(-38, -12, -36, -10))
    assert s.ledger.snapshot() == before


def test_domain_narrows_the_extent_and_the_scale():
    s = Session(budget=gp.CGP(rho=1.0))
    reg = register(duckdb.connect(), s, crs="EPSG:32724", domain=(-37.2, -11.1, -36.9, -10.7))
    wide = register(duckdb.connect(), s, crs="EPSG:32724")
    assert 1.0 <= reg.scale_max < wide.scale_max
    assert reg.units.outside(np.array([[500_000.0, 9_500_000.0]])).tolist() == [True]


def test_gp_in_region_refuses_degrees_with_a_named_crs():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs="EPSG:32724")
    con.register("pings", _degrees(3))
    wkb = shapely.to_wkb(shapely.box(-37.1, -11.0, -37.0, -10.8))
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"gp_in_region.*not metres of crs=EPSG:32724"):
        con.execute(
            "SELECT gp_in_region(user_id, lon, lat, $w, 1e-5, 5) FROM pings", {"w": wkb}
        ).fetchall()
    assert s.ledger.snapshot() == before


def test_metres_of_the_named_crs_still_run():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs="EPSG:32724", rng=seeded_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = "SELECT gp_privatize(7, 500000.0, 8800000.0, 1e-4) IS NOT NULL"
        rows = con.execute(q).fetchall()
    assert rows == [(True,)]
    assert s.spent().loc[7] == pytest.approx(1e-4)


def test_gp_knn_takes_the_crs_scale_and_refuses_degrees():
    from fractions import Fraction

    from gpframe.duckdb_knn import register_knn
    from gpframe.queries.knn import knn_indices

    rng = np.random.default_rng(1)  # true points only
    xy = np.column_stack([5e5 + rng.uniform(-3e3, 3e3, 120), 4.5e6 + rng.uniform(-3e3, 3e3, 120)])
    codes = np.repeat(np.arange(3), 40)
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    con.execute("SET threads = 1")
    # a wide public domain: k_max = 1.0415, enough to change the picks (seed 11) against scale 1
    dom = (-95, 35, -55, 45)
    register_knn(con, s, crs="EPSG:32618", domain=dom, rng=seeded_rng(11))
    con.register("p", pd.DataFrame({"u": codes + 1, "i": np.arange(120), "x": xy[:, 0],
                                    "y": xy[:, 1]}))  # fmt: skip
    tuples = "SELECT u, list(x ORDER BY i) AS xs, list(y ORDER BY i) AS ys FROM p GROUP BY u"
    con.execute(f"CREATE TABLE t AS {tuples} ORDER BY u")
    rows = con.execute("SELECT u, gp_knn(u, xs, ys, 5e5, 4.5e6, 3, 1e-4) FROM t ORDER BY u")
    k = Fraction(metric_frame("EPSG:32618", domain=dom).scale_max)

    def ref(scale):
        out = knn_indices(xy, codes, (5e5, 4.5e6), 3, kind="cgp", amount=Fraction(1, 10_000),
                          scale_max=scale, rng=seeded_rng(11))  # fmt: skip
        return [(want - u * 40 + 1).tolist() for u, want in enumerate(out.rows)]

    got = [pos for _, pos in rows.fetchall()]
    assert got == ref(k) and got != ref(1)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"gp_knn: .* px/py point\(s\) .*not metres of crs="):
        con.execute("SELECT gp_knn(u, xs, ys, -75.0, 40.6, 3, 1e-4) FROM t").fetchall()
    with pytest.raises(duckdb.Error, match=r"gp_knn: .* xs/ys point\(s\) .*not metres of crs="):
        con.execute("SELECT gp_knn(1, [-75.0, -75.1], [40.6, 40.7], 5e5, 45e5, 1, 1e-4)").fetchall()
    assert s.ledger.snapshot() == before


def test_a_region_in_degrees_is_refused_with_a_named_crs():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs="EPSG:32724")
    con.register("pings", _metres(20))
    deg = shapely.box(-37.1, -11.0, -37.0, -10.8)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"gp_in_region: the region lies wholly outside"):
        con.execute(
            "SELECT gp_in_region(user_id, x, y, $w, 1e-5, 5) FROM pings",
            {"w": shapely.to_wkb(deg)},
        ).fetchall()
    with pytest.raises(InvalidInputError, match="range_count: the region lies wholly outside"):
        gp.duckdb.range_count(con, "SELECT * FROM pings", deg, user="user_id", x="x", y="y",
                              rho=1e-5, reduce="last")  # fmt: skip
    assert s.ledger.snapshot() == before
