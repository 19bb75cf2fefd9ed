"""gp_knn and gp_convex_hull: per-user SQL UDFs over aggregated point lists (issue 8, STYLE §9)."""

from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.frame.accessor
from gpframe.duckdb.knn import register_knn
from gpframe.ledger import Session
from gpframe.queries.hull import private_hulls
from gpframe.queries.knn import knn_indices
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
POINT = (500_000.0, 4_500_000.0)
SQL = gp.duckdb.SQL_DIR


def _pings(n_users=6, n_pts=40, seed=0):
    rng = np.random.default_rng(seed)  # true points only
    u = np.repeat(np.arange(1, n_users + 1), n_pts)
    return pd.DataFrame(
        {
            "user_id": u,
            "ts": np.tile(np.arange(n_pts), n_users),
            "x": 500_000 + rng.uniform(-3_000, 3_000, u.size),
            "y": 4_500_000 + rng.uniform(-3_000, 3_000, u.size),
        }
    )


def _con(session, seed, df=None):
    con = duckdb.connect()
    con.execute("SET threads = 1")  # one batch, table order: the same draw order as Python
    register_knn(con, session, rng=seeded_rng(seed))
    if df is not None:
        con.register("pings_df", df)
        con.execute("CREATE TABLE pings AS SELECT * FROM pings_df ORDER BY user_id, ts")
        con.execute(
            "CREATE TABLE tuples AS SELECT user_id, list(x ORDER BY ts) AS xs, "
            "list(y ORDER BY ts) AS ys FROM pings GROUP BY user_id ORDER BY user_id"
        )
    return con


def test_register_is_idempotent_and_macros_exist():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = duckdb.connect()
    reg = register_knn(con, s)
    assert register_knn(con, s) is reg
    names = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
    assert {"gp_knn", "gp_convex_hull"} <= names


def test_knn_sql_matches_arrays_and_python_charges():
    df = _pings()
    s_sql, s_py = Session(budget=gp.CGP(rho=1e-3)), Session(budget=gp.CGP(rho=1e-3))
    con = _con(s_sql, 11, df)
    rows = con.execute(
        "SELECT user_id, gp_knn(user_id, xs, ys, $px, $py, 3, 1e-4) FROM tuples",
        {"px": POINT[0], "py": POINT[1]},
    ).fetchall()
    # the same layout and seed through the array API: identical positions
    codes = df["user_id"].to_numpy() - 1
    ref = knn_indices(df[["x", "y"]].to_numpy(), codes, POINT, 3, kind="cgp",
                      amount=Fraction(1, 10_000), rng=seeded_rng(11))  # fmt: skip
    for (u, pos), want in zip(rows, ref.rows, strict=True):
        assert pos == (want - (u - 1) * 40 + 1).tolist()
        assert len(set(pos)) == 3
    # Python accessor on the same rows: identical charges per user
    df.geopriv(s_py, user="user_id", x="x", y="y", crs=CRS, public=["ts"]).knn(
        POINT, 3, rho=1e-4, rng=seeded_rng(11))  # fmt: skip
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())
    assert s_sql.spent().tolist() == [1e-4] * 6


def test_hull_sql_matches_arrays_and_python_charges():
    df = _pings(n_users=4, n_pts=60, seed=1)
    s_sql, s_py = Session(budget=gp.CGP(rho=1e-2)), Session(budget=gp.CGP(rho=1e-2))
    con = _con(s_sql, 12, df)
    rows = con.execute(
        "SELECT user_id, gp_convex_hull(user_id, xs, ys, 1e-3) FROM tuples"
    ).fetchall()
    ref = private_hulls(df[["x", "y"]].to_numpy(), df["user_id"].to_numpy() - 1, kind="cgp",
                        amount=Fraction(1, 1000), rng=seeded_rng(12))  # fmt: skip
    for (_, wkb), want in zip(rows, ref.hulls, strict=True):
        assert shapely.from_wkb(wkb).equals_exact(want, 0.0)
        assert shapely.from_wkb(wkb).geom_type == "Polygon"
    bound = df.geopriv(s_py, user="user_id", x="x", y="y", crs=CRS)
    bound.convex_hull(rho=1e-3, rng=seeded_rng(12))
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())


def test_null_in_gives_null_out_and_no_charge():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 1)
    rows = con.execute(
        "SELECT gp_knn(u, xs, [0.0, 1.0], 0.0, 0.0, 1, r), gp_convex_hull(u, xs, [0.0, 1.0], r) "
        "FROM (VALUES (1, [0.0, 5.0], NULL), (NULL, [0.0, 5.0], 1e-4), (2, NULL, 1e-4), "
        "(3, [0.0, 5.0], 1e-4)) t(u, xs, r)"
    ).fetchall()
    assert [r[0] is None for r in rows] == [True, True, True, False]
    assert [r[1] is None for r in rows] == [True, True, True, False]
    assert list(s.spent().index) == [3] and s.spent().loc[3] == pytest.approx(2e-4)


def test_exhausted_user_gets_null_and_no_charge():
    s = Session(budget=gp.CGP(rho=1e-3))
    s.set_budget(["b"], gp.CGP(rho=1e-6))
    con = _con(s, 2)
    rows = con.execute(
        "SELECT u, gp_knn(u, [0.0, 9.0], [0.0, 0.0], 0.0, 0.0, 1, 1e-4) "
        "FROM (VALUES ('a'), ('b'), ('c')) t(u) ORDER BY u"
    ).fetchall()
    assert rows[1] == ("b", None) and rows[0][1] is not None and rows[2][1] is not None
    assert s.spent(["b"]).iloc[0] == 0 and s.spent(["a"]).iloc[0] == pytest.approx(1e-4)


def test_one_point_user_and_k_above_n():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 3)
    one = con.execute("SELECT gp_knn(1, [5.0], [5.0], 0.0, 0.0, 4, 1e-4)").fetchone()[0]
    assert one == [1]
    two = con.execute("SELECT gp_knn(2, [5.0, 6.0], [5.0, 6.0], 0.0, 0.0, 4, 1e-4)").fetchone()[0]
    assert sorted(two) == [1, 2]
    hull = con.execute("SELECT gp_convex_hull(3, [5.0], [5.0], 1e-4)").fetchone()[0]
    assert shapely.from_wkb(hull).geom_type == "Point"  # Remark 1: the one noisy point
    assert s.spent().tolist() == pytest.approx([1e-4] * 3)


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("SELECT gp_knn(1, []::DOUBLE[], []::DOUBLE[], 0.0, 0.0, 1, 1e-4)", "empty"),
        ("SELECT gp_knn(1, [1.0, 2.0], [1.0], 0.0, 0.0, 1, 1e-4)", "different lengths"),
        ("SELECT gp_knn(1, [1.0, NULL], [1.0, 2.0], 0.0, 0.0, 1, 1e-4)", "NULL coordinates"),
        ("SELECT gp_knn(1, [1.0], [1.0], 0.0, 0.0, 0, 1e-4)", "k="),
        ("SELECT gp_knn(1, [1.0], [1.0], 0.0, 0.0, 1, -1e-4)", "rho="),
        ("SELECT gp_convex_hull(1, [1e13], [1.0], 1e-4)", "2\\*\\*40"),
        ("SELECT gp_convex_hull(1, []::DOUBLE[], []::DOUBLE[], 1e-4)", "empty"),
    ],
)
def test_bad_input_raises_and_charges_nothing(sql, match):
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 4)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=match):
        con.execute(sql).fetchall()
    assert s.ledger.snapshot() == before


def test_gp_session_is_refused_without_charge():
    s = Session(budget=gp.GP(eps=1.0))
    con = _con(s, 5)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="must be CGP"):
        con.execute("SELECT gp_convex_hull(1, [1.0, 2.0], [1.0, 3.0], 1e-4)").fetchall()
    assert s.ledger.snapshot() == before


def test_two_rows_of_a_user_are_each_charged():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 6)
    con.execute(
        "SELECT gp_knn(7, xs, xs, 0.0, 0.0, 1, 1e-4) FROM (VALUES ([1.0, 2.0]), ([3.0])) t(xs)"
    ).fetchall()
    assert s.spent().loc[7] == pytest.approx(2e-4)


@pytest.mark.parametrize("name", ["knn.sql", "convex_hull.sql"])
def test_sql_example_files_run(name):
    """sql/knn.sql and sql/convex_hull.sql run against a registered connection."""
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 7, _pings(n_users=5, n_pts=30))
    code = "\n".join(
        ln for ln in (SQL / name).read_text().splitlines() if not ln.lstrip().startswith("--")
    )
    results = [con.execute(q).fetchall() for q in code.split(";") if q.strip()]
    assert results[-1]
    assert sorted(s.spent().index) == [1, 2, 3, 4, 5]


def test_hulls_read_directly_by_shapely_and_geopandas(tmp_path):
    """A new user's reads of the hull column: .df() and .fetchall() into shapely / GeoPandas,
    and COPY to Parquet as GeoParquet. A BLOB reached pandas as a bytearray, which
    shapely.from_wkb and GeoSeries.from_wkb refused."""
    import geopandas as gpd

    df = _pings(n_users=3, n_pts=40, seed=5)
    s = Session(budget=gp.CGP(rho=1e-1))
    con = _con(s, 21, df)
    con.execute("CREATE TABLE hulls AS SELECT * FROM gp_convex_hulls("
                "'SELECT user_id, x, y FROM pings', 1e-3)")  # fmt: skip
    frame = con.sql("SELECT * FROM hulls ORDER BY user_id").df()
    geo = gpd.GeoSeries.from_wkb(frame["hull"], crs=CRS)
    assert geo.geom_type.tolist() == ["Polygon"] * 3
    rows = con.sql("SELECT hull FROM hulls ORDER BY user_id").fetchall()
    assert shapely.from_wkb([h for (h,) in rows]).tolist() == geo.tolist()
    assert gpd.GeoSeries.from_wkb([h for (h,) in rows]).equals(gpd.GeoSeries(geo.array))
    # the UDF itself, too
    udf = con.sql("SELECT gp_convex_hull(user_id, xs, ys, 1e-3) AS h FROM tuples").df()
    assert gpd.GeoSeries.from_wkb(udf["h"]).geom_type.tolist() == ["Polygon"] * 3
    # SQL: a GEOMETRY without any extension; COPY writes GeoParquet
    path = tmp_path / "hulls.parquet"
    con.execute(f"COPY (SELECT user_id, ST_GeomFromWKB(from_hex(hull)) AS hull FROM hulls "
                f"ORDER BY user_id) TO '{path}' (FORMAT parquet)")  # fmt: skip
    back = gpd.read_parquet(path)
    assert isinstance(back, gpd.GeoDataFrame) and back.geometry.name == "hull"
    assert back.geometry.tolist() == geo.tolist()
    before = s.spent().copy()
    # the relation helper's geometry="geometry": a GEOMETRY column, GeoParquet on COPY
    rel = gp.duckdb.convex_hulls(con, "SELECT user_id, x, y FROM pings", user="user_id", x="x",
                                 y="y", rho=1e-3, geometry="geometry")  # fmt: skip
    assert [str(t) for t in rel.types] == ["BIGINT", "GEOMETRY"]
    con.execute(f"COPY (SELECT * FROM rel) TO '{tmp_path / 'rel.parquet'}' (FORMAT parquet)")
    assert gpd.read_parquet(tmp_path / "rel.parquet").geom_type.tolist() == ["Polygon"] * 3
    table = gpd.GeoDataFrame.from_arrow(rel.to_arrow_table())
    assert table.geom_type.tolist() == ["Polygon"] * 3
    assert (s.spent() - before).round(12).tolist() == [1e-3] * 3  # the helper ran once
