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
    # the helper checks every row before its one charge: a GpframeError, as the accessor's
    msg = r"gp\.duckdb\.privatize: 3 of 3 .* not metres of crs"
    with pytest.raises(InvalidInputError, match=msg):
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

    from gpframe.duckdb.knn import register_knn
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


# ------------------------------------------------------------------------------------------
# KDE, convex hull, k-NN relation and nearest users: the same crs= check and scale

UTM18 = "EPSG:32618"
#: a wide public box: k_max = 1.0415, so scale k_max and scale 1 draw visibly different noise
WIDE = (-95, 35, -55, 45)


def _users(n_users=5, n_pts=1, seed=0, spread=3_000.0):
    rng = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(1, n_users + 1), n_pts)
    return pd.DataFrame({"user_id": u, "ts": np.tile(np.arange(n_pts), n_users),
                         "x": 5e5 + rng.uniform(-spread, spread, u.size),
                         "y": 4.5e6 + rng.uniform(-spread, spread, u.size)})  # fmt: skip


def _sql_con(session, seed, df, **units):
    con = duckdb.connect()
    con.execute("SET threads = 1")  # one batch, table order: the accessor's draw order
    register(con, session, rng=seeded_rng(seed), **units)
    con.register("pings_df", df)
    con.execute("CREATE TABLE pings AS SELECT * FROM pings_df ORDER BY user_id, ts")
    con.execute(
        "CREATE TABLE tuples AS SELECT user_id, list(x ORDER BY ts) AS xs, "
        "list(y ORDER BY ts) AS ys FROM pings GROUP BY user_id ORDER BY user_id"
    )
    return con


def _py(df, session):
    return df.geopriv(session, user="user_id", x="x", y="y", crs=UTM18, to_crs=UTM18, domain=WIDE)


def _same_spent(a, b):
    pd.testing.assert_series_equal(a.spent().sort_index(), b.spent().sort_index())


KDE_Q = "SELECT {f} FROM (SELECT gp_kde_contribution(user_id, x, y, 5e5, 4.5e6, 800.0, 1e-3, 6, n_users := 40) AS c FROM pings ORDER BY user_id)"  # noqa: E501


def test_gp_kde_contribution_takes_the_crs_scale_like_the_accessor():
    assert metric_frame(UTM18, domain=WIDE).scale_max > 1.04
    df = _users(40, spread=2_000.0)
    s_sql, s_py, s_one = (Session(budget=gp.CGP(rho=1.0)) for _ in range(3))
    got = _sql_con(s_sql, 5, df, crs=UTM18, domain=WIDE).execute(KDE_Q.format(f="avg(c)"))
    res = _py(df, s_py).kde(shapely.Point(5e5, 4.5e6), bandwidth_m=800, rho=1e-3, rounds=6,
                            rng=seeded_rng(5))  # fmt: skip
    assert got.fetchone()[0] == pytest.approx(res.value, rel=1e-12)
    _same_spent(s_sql, s_py)
    one = _sql_con(s_one, 5, df).execute(KDE_Q.format(f="avg(c)")).fetchone()[0]
    assert one != pytest.approx(res.value, rel=1e-12)  # scale 1 draws other noise


def test_gp_kde_contribution_refuses_points_outside_the_crs():
    s = Session(budget=gp.CGP(rho=1.0))
    con = _sql_con(s, 5, _users(3), crs=UTM18)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"gp_kde_contribution: 1 of 1 x/y point\(s\) .*crs="):
        con.execute("SELECT gp_kde_contribution(1, -75.0, 40.6, 5e5, 4.5e6, 800.0, 1e-3, 6)")
    with pytest.raises(duckdb.Error, match=r"gp_kde_contribution: .* qx/qy point\(s\) .*crs="):
        con.execute("SELECT gp_kde_contribution(user_id, x, y, -75.0, 40.6, 800.0, 1e-3, 6) "
                    "FROM pings").fetchall()  # fmt: skip
    assert s.ledger.snapshot() == before


def test_kde_raster_takes_the_crs_scale_like_the_accessor():
    df = _users(60, spread=2_000.0)
    s_sql, s_py, s_one = (Session(budget=gp.CGP(rho=1.0)) for _ in range(3))
    args = dict(bandwidth_m=1000, cell_m=500, bounds=(495e3, 4495e3, 505e3, 4505e3), rho=1e-4)
    q = "SELECT user_id, x, y FROM pings"
    con = _sql_con(s_sql, 6, df, crs=UTM18, domain=WIDE)
    cells = gp.duckdb.kde_raster(con, q, user="user_id", x="x", y="y", **args).df()
    r = _py(df, s_py).kde_raster(rng=seeded_rng(6), **args)
    np.testing.assert_array_equal(cells["density"].to_numpy(), np.asarray(r.value).ravel())
    _same_spent(s_sql, s_py)
    one = gp.duckdb.kde_raster(_sql_con(s_one, 6, df), q, user="user_id", x="x", y="y", **args)
    assert (one.df()["density"].to_numpy() != cells["density"].to_numpy()).any()
    before = s_sql.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=r"kde_raster: 1 of 61 x/y point\(s\) .*crs="):
        gp.duckdb.kde_raster(con, f"{q} UNION ALL SELECT 99, -75.0, 40.6", user="user_id",
                             x="x", y="y", **args)  # fmt: skip
    assert s_sql.ledger.snapshot() == before


def _hull_rows(con, fn="gp_convex_hull", amount="1e-2"):
    q = f"SELECT {fn}(user_id, xs, ys, {amount}, beta := 0.05, k := 20) FROM tuples"
    return [shapely.from_wkb(h) for (h,) in con.execute(q).fetchall()]


@pytest.mark.parametrize(("fn", "budget", "amount"), [
    ("gp_convex_hull", gp.CGP(rho=1.0), {"rho": 1e-2}),
    ("gp_convex_hull_gp", gp.GP(eps=10.0), {"eps": 0.5})])  # fmt: skip
def test_gp_convex_hull_takes_the_crs_scale_like_the_accessor(fn, budget, amount):
    df = _users(3, 60, seed=1)
    s_sql, s_py, s_one = (Session(budget=budget) for _ in range(3))
    (a,) = amount.values()
    got = _hull_rows(_sql_con(s_sql, 7, df, crs=UTM18, domain=WIDE), fn, repr(a))
    ref = _py(df, s_py).convex_hull(beta=0.05, k=20, rng=seeded_rng(7), **amount)
    assert [g.equals_exact(w, 0.0) for g, w in zip(got, ref.geometry, strict=True)] == [True] * 3
    _same_spent(s_sql, s_py)
    one = _hull_rows(_sql_con(s_one, 7, df), fn, repr(a))
    assert not any(g.equals_exact(w, 0.0) for g, w in zip(got, one, strict=True))


def test_convex_hulls_refuse_points_outside_the_crs():
    s = Session(budget=gp.CGP(rho=1.0))
    con = _sql_con(s, 7, _users(3, 20), crs=UTM18)
    before = s.ledger.snapshot()
    bad = "SELECT * FROM pings UNION ALL SELECT 9, 0, -75.0, 40.6"
    with pytest.raises(duckdb.Error, match=r"gp_convex_hull: 1 of 1 xs/ys point\(s\) .*crs="):
        con.execute("SELECT gp_convex_hull(9, [-75.0], [40.6], 1e-2)").fetchall()
    with pytest.raises(duckdb.Error, match=r"gp_convex_hull_gp: .* xs/ys point\(s\) .*crs="):
        con.execute(f"FROM gp_convex_hulls_gp('{bad}', 1e-1)").fetchall()
    with pytest.raises(InvalidInputError, match=r"convex_hulls: 1 of 61 x/y point\(s\) .*crs="):
        gp.duckdb.convex_hulls(con, bad, user="user_id", x="x", y="y", rho=1e-2)
    assert s.ledger.snapshot() == before


def test_convex_hulls_relation_refuses_a_later_batch_before_charging():
    # 2500 users: the UDF sees them in two batches; the bad user's batch refused after the
    # first batch was charged (the relation helper now checks every row first)
    df = _users(2500, 3, spread=1_000.0)
    s = Session(budget=gp.CGP(rho=1.0))
    con = _sql_con(s, 8, df, crs=UTM18)
    before = s.ledger.snapshot()
    bad = "SELECT * FROM pings UNION ALL SELECT 9999, 0, -75.0, 40.6"
    with pytest.raises(InvalidInputError, match=r"convex_hulls: 1 of 7501 x/y point\(s\)"):
        gp.duckdb.convex_hulls(con, bad, user="user_id", x="x", y="y", rho=1e-2, k=16)
    with pytest.raises(InvalidInputError, match=r"knn: 1 of 7501 x/y point\(s\)"):
        gp.duckdb.knn(con, bad, user="user_id", x="x", y="y", point=(5e5, 4.5e6), k=1,
                      rho=1e-2)  # fmt: skip
    assert s.ledger.snapshot() == before


def test_knn_relation_takes_the_crs_scale_and_refuses_the_point():
    df = _users(4, 30, seed=2)
    s_sql, s_py = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    con = _sql_con(s_sql, 9, df, crs=UTM18, domain=WIDE)
    args = dict(point=(5e5, 4.5e6), k=3, rho=1e-4)
    rel = gp.duckdb.knn(con, "FROM pings", user="user_id", x="x", y="y", public=["ts"], **args)
    got = rel.fetchall()
    ref = df.geopriv(s_py, user="user_id", x="x", y="y", crs=UTM18, to_crs=UTM18, domain=WIDE,
                     public=["ts"]).knn(rng=seeded_rng(9), **args)  # fmt: skip
    assert [(u, t) for u, t, _ in got] == list(zip(ref["user_id"], ref["ts"], strict=True))
    _same_spent(s_sql, s_py)
    before = s_sql.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=r"knn: 1 of 1 query point\(s\) .*crs="):
        gp.duckdb.knn(con, "FROM pings", user="user_id", x="x", y="y", point=(-75.0, 40.6),
                      k=3, rho=1e-4)  # fmt: skip
    assert s_sql.ledger.snapshot() == before


def _far(n=6):
    x = np.array([0.0, 15.0, 40_000.0, 60_000.0, 80_000.0, 100_000.0][:n])
    return pd.DataFrame({"user_id": np.arange(1, n + 1), "x": 5e5 + x,
                         "y": np.full(n, 4.5e6), "ts": 0})  # fmt: skip


def test_nearest_users_takes_the_crs_scale_like_the_accessor():
    df = _far()
    s_sql, s_py, s_one = (Session(budget=gp.CGP(rho=1.0)) for _ in range(3))
    args = dict(point=(5e5, 4.5e6), k=2, rho=1e-3, method="dist")  # error_m > 0
    q = "SELECT user_id, x, y FROM pings"
    con = _sql_con(s_sql, 10, df, crs=UTM18, domain=WIDE)
    got = gp.duckdb.nearest_users(con, q, user="user_id", x="x", y="y", **args).fetchall()
    res = _py(df, s_py).nearest_users(rng=seeded_rng(10), **args)
    assert [u for u, _, _ in got] == list(res.value)
    assert got[0][2] == pytest.approx(float(res.error), rel=1e-12)
    _same_spent(s_sql, s_py)
    one = gp.duckdb.nearest_users(_sql_con(s_one, 10, df), q, user="user_id", x="x", y="y",
                                  **args).fetchall()  # fmt: skip
    assert one[0][2] != pytest.approx(got[0][2], rel=1e-12)  # scale 1: a smaller error bound
    before = s_sql.ledger.snapshot()
    for bad, what in ((f"{q} UNION ALL SELECT 9, -75.0, 40.6", "x/y"), (q, "query")):
        pt = (-75.0, 40.6) if what == "query" else args["point"]
        with pytest.raises(InvalidInputError, match=rf"nearest_users: 1 of \d+ {what} point"):
            gp.duckdb.nearest_users(con, bad, user="user_id", x="x", y="y",
                                    **{**args, "point": pt})  # fmt: skip
    assert s_sql.ledger.snapshot() == before
