"""Issue 8, SQL side: GP variants of gp_knn / gp_convex_hull, the table macros and the relation
helpers gp.duckdb.knn / convex_hulls / nearest_users (STYLE.md §9). Charges equal the accessor's.
"""

from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.duckdb.knn import register_knn
from gpframe.ledger import Session
from gpframe.queries.hull import private_hulls
from gpframe.queries.knn import knn_indices
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
POINT = (500_000.0, 4_500_000.0)
SQL = gp.duckdb.SQL_DIR
BUDGETS = {"cgp": lambda: gp.CGP(rho=1e-2), "gp": lambda: gp.GP(eps=1.0)}


def _pings(n_users=5, n_pts=40, seed=0):
    rng = np.random.default_rng(seed)  # true points only, never noise
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
    register_knn(con, session, rng=seeded_rng(seed))  # what gp.duckdb.register runs for these
    if df is not None:
        con.register("pings_df", df)
        con.execute("CREATE TABLE pings AS SELECT * FROM pings_df ORDER BY user_id, ts")
        con.execute(
            "CREATE TABLE tuples AS SELECT user_id, list(x ORDER BY ts) AS xs, "
            "list(y ORDER BY ts) AS ys FROM pings GROUP BY user_id ORDER BY user_id"
        )
    return con


def _bound(df, session):
    return df.geopriv(session, user="user_id", x="x", y="y", crs=CRS, public=["ts"])


def _same_spent(a, b):
    pd.testing.assert_series_equal(a.spent().sort_index(), b.spent().sort_index())


# ------------------------------------------------------------------------- GP UDF variants


@pytest.mark.parametrize("budget", ["cgp", "gp"])
def test_knn_gp_udf_matches_arrays_and_python_eps_charges(budget):
    df = _pings()
    s_sql, s_py = Session(budget=BUDGETS[budget]()), Session(budget=BUDGETS[budget]())
    con = _con(s_sql, 21, df)
    rows = con.execute(
        "SELECT user_id, gp_knn_gp(user_id, xs, ys, $px, $py, 3, 0.02) FROM tuples",
        {"px": POINT[0], "py": POINT[1]},
    ).fetchall()
    ref = knn_indices(df[["x", "y"]].to_numpy(), df["user_id"].to_numpy() - 1, POINT, 3,
                      kind="gp", amount=Fraction(1, 50), rng=seeded_rng(21))  # fmt: skip
    for (u, pos), want in zip(rows, ref.rows, strict=True):
        assert pos == (want - (u - 1) * 40 + 1).tolist()
    _bound(df, s_py).knn(POINT, 3, eps=0.02, rng=seeded_rng(21))
    _same_spent(s_py, s_sql)
    # eps on a GP filter, eps²/2 on a CGP filter (Lem. 3.6)
    want = 0.02 if budget == "gp" else 0.02**2 / 2
    assert s_sql.spent().tolist() == pytest.approx([want] * 5, rel=1e-12)


@pytest.mark.parametrize("budget", ["cgp", "gp"])
def test_hull_gp_udf_matches_arrays_and_python_eps_charges(budget):
    df = _pings(n_users=3, n_pts=60, seed=1)
    s_sql, s_py = Session(budget=BUDGETS[budget]()), Session(budget=BUDGETS[budget]())
    con = _con(s_sql, 22, df)
    rows = con.execute(
        "SELECT user_id, gp_convex_hull_gp(user_id, xs, ys, 0.05, beta := 0.05, k := 20) "
        "FROM tuples"
    ).fetchall()
    ref = private_hulls(df[["x", "y"]].to_numpy(), df["user_id"].to_numpy() - 1, kind="gp",
                        amount=Fraction(1, 20), beta=0.05, k=20, rng=seeded_rng(22))  # fmt: skip
    for (_, wkb), want in zip(rows, ref.hulls, strict=True):
        assert shapely.from_wkb(wkb).equals_exact(want, 0.0)
    _bound(df, s_py).convex_hull(eps=0.05, beta=0.05, k=20, rng=seeded_rng(22))
    _same_spent(s_py, s_sql)


def test_hull_udf_defaults_are_beta_0_1_and_k_from_the_radius():
    df = _pings(n_users=2, n_pts=50, seed=2)
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 23, df)
    a = con.execute("SELECT gp_convex_hull(user_id, xs, ys, 1e-3) FROM tuples").fetchall()
    con2 = _con(Session(budget=gp.CGP(rho=1e-2)), 23, df)
    b = con2.execute(
        "SELECT gp_convex_hull(user_id, xs, ys, 1e-3, beta := 0.1, k := 0) FROM tuples"
    ).fetchall()
    assert a == b


def test_gp_udfs_null_in_gives_null_out_and_no_charge():
    s = Session(budget=gp.GP(eps=1.0))
    con = _con(s, 24)
    rows = con.execute(
        "SELECT gp_knn_gp(u, xs, [0.0, 1.0], 0.0, 0.0, 1, e), "
        "gp_convex_hull_gp(u, xs, [0.0, 1.0], e, beta := b, k := kk) "
        "FROM (VALUES (1, [0.0, 5.0], NULL, 0.1, 0), (NULL, [0.0, 5.0], 0.01, 0.1, 0), "
        "(2, NULL, 0.01, 0.1, 0), (4, [0.0, 5.0], 0.01, NULL, 0), "
        "(5, [0.0, 5.0], 0.01, 0.1, NULL), "
        "(3, [0.0, 5.0], 0.01, 0.1, 0)) t(u, xs, e, b, kk)"
    ).fetchall()
    assert [r[0] is None for r in rows] == [True, True, True, False, False, False]
    assert [r[1] is None for r in rows] == [True, True, True, True, True, False]
    spent = s.spent()
    assert sorted(spent.index) == [3, 4, 5]
    assert spent.loc[3] == pytest.approx(0.02) and spent.loc[4] == pytest.approx(0.01)


_BAD_SQL = [
    ("SELECT gp_knn_gp(1, [1.0], [1.0], 0.0, 0.0, 1, -0.01)", "eps="),
    ("SELECT gp_knn_gp(1, [1.0], [1.0], 0.0, 0.0, 1, 0.0)", "eps="),
    ("SELECT gp_knn_gp(1, [1.0], [1.0], 0.0, 0.0, 1, 'nan'::DOUBLE)", "eps="),
    ("SELECT gp_knn_gp(1, [1.0], [1.0], 0.0, 0.0, 1, 'inf'::DOUBLE)", "eps="),
    ("SELECT gp_knn_gp(1, [1.0], [1.0], 0.0, 0.0, 1, 1e-300)", "eps"),
    ("SELECT gp_convex_hull_gp(1, [1.0], [1.0], -1.0)", "eps="),
    ("SELECT gp_convex_hull_gp(1, [1.0], [1.0], 1e-300)", "eps"),
    ("SELECT gp_convex_hull_gp(1, [1.0], [1.0], 0.1, beta := 1.5)", "beta="),
    ("SELECT gp_convex_hull_gp(1, [1.0], [1.0], 0.1, k := -3)", "k="),
    ("SELECT gp_convex_hull(1, [1.0], [1.0], 1e-4, beta := 0.0)", "beta="),
    ("SELECT gp_knn_gp(1, [1.0, 2.0], [1.0], 0.0, 0.0, 1, 0.1)", "different lengths"),
]


@pytest.mark.parametrize("budget", ["cgp", "gp"])
def test_gp_udfs_refuse_bad_amounts_with_nothing_charged(budget):
    s = Session(budget=BUDGETS[budget]())
    con = _con(s, 25)
    before = s.ledger.snapshot()
    for sql, match in _BAD_SQL:
        with pytest.raises(duckdb.Error, match=match):
            con.execute(sql).fetchall()
        assert s.ledger.snapshot() == before, sql


def test_rho_udfs_refuse_a_gp_session_and_point_to_the_gp_variant():
    s = Session(budget=gp.GP(eps=1.0))
    con = _con(s, 26)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="gp_knn_gp"):
        con.execute("SELECT gp_knn(1, [1.0], [1.0], 0.0, 0.0, 1, 1e-4)").fetchall()
    assert s.ledger.snapshot() == before


def test_two_gp_rows_of_a_user_on_a_cgp_filter_add_their_rho():
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 27)
    con.execute(
        "SELECT gp_knn_gp(7, xs, xs, 0.0, 0.0, 1, 0.1) FROM (VALUES ([1.0, 2.0]), ([3.0])) t(xs)"
    ).fetchall()
    assert s.spent().loc[7] == pytest.approx(2 * 0.1**2 / 2)  # CGP composition adds rho


# ----------------------------------------------------------------------------- table macros


def test_table_macros_charge_like_the_accessor():
    df = _pings()
    s_sql, s_py = Session(budget=gp.CGP(rho=1e-2)), Session(budget=gp.CGP(rho=1e-2))
    con = _con(s_sql, 28, df)
    rows = con.execute(
        "SELECT * FROM gp_knn_rows('SELECT user_id AS user_id, ts, x, y FROM pings', "
        "500000.0, 4500000.0, 2, 1e-4) ORDER BY user_id, knn_rank"
    ).df()
    # the macro releases which rows were picked, never their x/y
    assert list(rows.columns) == ["user_id", "ts", "knn_rank"]
    assert rows.groupby("user_id")["knn_rank"].apply(list).tolist() == [[1, 2]] * 5
    hulls = con.execute(
        "SELECT user_id, hull FROM gp_convex_hulls_gp('FROM pings', 0.05, k := 20) ORDER BY user_id"
    ).fetchall()
    assert [u for u, _ in hulls] == [1, 2, 3, 4, 5]
    assert all(shapely.from_wkb(h).geom_type == "Polygon" for _, h in hulls)
    b = _bound(df, s_py)
    b.knn(POINT, 2, rho=1e-4, rng=seeded_rng(1))
    b.convex_hull(eps=0.05, k=20, rng=seeded_rng(1))
    _same_spent(s_py, s_sql)


# -------------------------------------------------------------------------- relation helpers


@pytest.mark.parametrize(("budget", "amount"), [("cgp", {"rho": 1e-4}), ("gp", {"eps": 0.02}),
                                                ("cgp", {"eps": 0.02})])  # fmt: skip
def test_knn_relation_charges_equal_the_accessor(budget, amount):
    df = _pings()
    s_sql, s_py = Session(budget=BUDGETS[budget]()), Session(budget=BUDGETS[budget]())
    con = _con(s_sql, 31, df)
    rel = gp.duckdb.knn(con, "SELECT * FROM pings", user="user_id", x="x", y="y", point=POINT,
                        k=3, order_by="ts", public=["ts"], **amount)  # fmt: skip
    assert isinstance(rel, duckdb.DuckDBPyRelation)
    got = rel.df()
    assert list(got.columns) == ["user_id", "ts", "knn_rank"]
    assert got["knn_rank"].tolist() == [1, 2, 3] * 5
    assert got["user_id"].tolist() == np.repeat([1, 2, 3, 4, 5], 3).tolist()
    _bound(df, s_py).knn(POINT, 3, rng=seeded_rng(31), **amount)
    _same_spent(s_py, s_sql)
    # the relation holds the fetched result: reading it again draws and charges nothing
    before = s_sql.ledger.snapshot()
    assert rel.df().equals(got)
    assert s_sql.ledger.snapshot() == before


def test_knn_relation_selects_the_rows_of_the_array_path():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 32, df)
    got = gp.duckdb.knn(con, con.table("pings"), user="user_id", x="x", y="y", point=POINT,
                        k=3, rho=1e-4, order_by="ts", public=["ts"]).df()  # fmt: skip
    ref = knn_indices(df[["x", "y"]].to_numpy(), df["user_id"].to_numpy() - 1, POINT, 3,
                      kind="cgp", amount=Fraction(1, 10_000), rng=seeded_rng(32))  # fmt: skip
    want = np.concatenate(ref.rows)
    assert got["ts"].tolist() == df["ts"].to_numpy()[want].tolist()
    assert got["user_id"].tolist() == df["user_id"].to_numpy()[want].tolist()
    assert "x" not in got.columns and "y" not in got.columns  # k-PNN releases rows, not points


@pytest.mark.parametrize(("budget", "amount"), [("cgp", {"rho": 1e-3}), ("gp", {"eps": 0.05}),
                                                ("cgp", {"eps": 0.05})])  # fmt: skip
def test_convex_hulls_relation_charges_equal_the_accessor(budget, amount):
    df = _pings(n_users=3, n_pts=60, seed=3)
    s_sql, s_py = Session(budget=BUDGETS[budget]()), Session(budget=BUDGETS[budget]())
    con = _con(s_sql, 33, df)
    rel = gp.duckdb.convex_hulls(con, "SELECT user_id, x, y FROM pings", user="user_id", x="x",
                                 y="y", beta=0.05, k=20, **amount)  # fmt: skip
    assert rel.columns == ["user_id", "hull"] and str(rel.types[1]) == "VARCHAR"
    rows = rel.fetchall()
    ref = private_hulls(df[["x", "y"]].to_numpy(), df["user_id"].to_numpy() - 1,
                        kind=budget if "rho" in amount else "gp",
                        amount=next(iter(amount.values())), beta=0.05, k=20,
                        rng=seeded_rng(33))  # fmt: skip
    for (u, wkb), want in zip(rows, ref.hulls, strict=True):
        assert shapely.from_wkb(wkb).equals_exact(want, 0.0), u
    _bound(df, s_py).convex_hull(beta=0.05, k=20, rng=seeded_rng(33), **amount)
    _same_spent(s_py, s_sql)


def test_convex_hulls_relation_wkt_and_refused_user_is_null():
    df = _pings(n_users=3, n_pts=30, seed=4)
    s = Session(budget=gp.CGP(rho=1e-2))
    s.set_budget([2], gp.CGP(rho=1e-6))
    con = _con(s, 34, df)
    rel = gp.duckdb.convex_hulls(con, con.sql("SELECT * FROM pings"), user="user_id", x="x",
                                 y="y", rho=1e-3, geometry="wkt")  # fmt: skip
    rows = rel.fetchall()
    assert [u for u, _ in rows] == [1, 2, 3] and rows[1][1] is None
    assert shapely.from_wkt(rows[0][1]).geom_type == "Polygon"
    assert s.spent([1, 2, 3]).tolist() == pytest.approx([1e-3, 0.0, 1e-3])


def _separated(n=6):
    # two users near the point, the others far: elimination isolates them in the first round
    x = np.array([0.0, 15.0, 40_000.0, 60_000.0, 80_000.0, 100_000.0][:n])
    return pd.DataFrame({"user_id": np.arange(1, n + 1), "x": 500_000 + x,
                         "y": np.full(n, 4_500_000.0), "ts": 0})  # fmt: skip


@pytest.mark.parametrize("method", ["dist", "pt", "dist-elim", "pt-elim"])
def test_nearest_users_relation_charges_equal_the_accessor(method):
    df = _separated()
    s_sql, s_py = Session(budget=gp.CGP(rho=1e-2)), Session(budget=gp.CGP(rho=1e-2))
    con = _con(s_sql, 35, df)
    rel = gp.duckdb.nearest_users(con, "SELECT user_id, x, y FROM pings", user="user_id",
                                  x="x", y="y", point=POINT, k=2, rho=1e-3, rounds=10,
                                  split="doubling", method=method)  # fmt: skip
    assert rel.columns == ["user_id", "nearest_rank", "error_m"]
    got = rel.fetchall()
    assert sorted(u for u, _, _ in got) == [1, 2] and [r for _, r, _ in got] == [1, 2]
    res = _bound(df, s_py).nearest_users(POINT, 2, rho=1e-3, rounds=10, split="doubling",
                                         method=method, rng=seeded_rng(35))  # fmt: skip
    assert sorted(res.value) == [1, 2]
    _same_spent(s_py, s_sql)
    if method.endswith("elim"):
        assert s_sql.spent().loc[6] < 1e-3  # dropped early, pays less


def test_nearest_users_relation_on_a_gp_session_and_text_ids():
    df = _separated().assign(user_id=lambda d: "boat-" + d["user_id"].astype(str))
    s_sql, s_py = Session(budget=gp.GP(eps=1.0)), Session(budget=gp.GP(eps=1.0))
    con = _con(s_sql, 36, df)
    rel = gp.duckdb.nearest_users(con, "FROM pings", user="user_id", x="x", y="y",
                                  point=POINT, k=2, eps=0.05)  # fmt: skip
    assert str(rel.types[0]) == "VARCHAR"
    assert sorted(u for u, _, _ in rel.fetchall()) == ["boat-1", "boat-2"]
    _bound(df, s_py).nearest_users(POINT, 2, eps=0.05, rng=seeded_rng(36))
    _same_spent(s_py, s_sql)


_BAD = [
    ({"user": "boat"}, "user='boat' is not a column"),
    ({"x": "lon"}, "x='lon' is not a column"),
    ({"y": "ts", "x": "name"}, "has type VARCHAR"),
    ({"query": "SELECT * FROM pings WHERE ts < 0"}, "no rows"),
    ({"query": "SELECT * FROM nowhere"}, "not a valid query"),
    ({"query": "SELECT NULL::INT AS user_id, x, y, ts, name FROM pings"}, "NULL value"),
    ({"query": "SELECT user_id, 'nan'::DOUBLE AS x, y, ts, name FROM pings"}, "NaN or infinite"),
    ({"query": "SELECT user_id, 1e13 AS x, y, ts, name FROM pings"}, "2\\*\\*40"),
    ({"rho": None}, "exactly one of eps= .* or rho="),
    # the accessor's one rho= / eps= check (gpframe.accounting.amounts.metric_amount)
    ({"rho": -1.0}, "rho=-1.0 must be > 0"),
    ({"rho": float("nan")}, "not finite"),
    ({"rho": None, "eps": 0.0}, "eps=0.0 must be > 0"),
]


@pytest.mark.parametrize("op", ["knn", "convex_hulls", "nearest_users"])
def test_relation_helpers_refuse_bad_input_and_charge_nothing(op):
    df = _separated().assign(name="a", ts=0)
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 37, df)
    before = s.ledger.snapshot()
    for change, match in _BAD:
        args = {"user": "user_id", "x": "x", "y": "y", "rho": 1e-3}
        args.update({k: v for k, v in change.items() if k != "query"})
        if op != "convex_hulls":
            args.update(point=POINT, k=2)
        with pytest.raises(gp.InvalidInputError, match=match) as info:
            getattr(gp.duckdb, op)(con, change.get("query", "SELECT * FROM pings"), **args)
        assert "Nothing was charged" in str(info.value), match
        assert s.ledger.snapshot() == before, match


def test_relation_helpers_refuse_unregistered_and_foreign_connections():
    s = Session(budget=gp.CGP(rho=1e-2))
    other = duckdb.connect()
    with pytest.raises(gp.InvalidInputError, match=r"gp\.duckdb\.register"):
        gp.duckdb.convex_hulls(other, "SELECT 1 AS u, 0.0 AS x, 0.0 AS y", user="u", x="x",
                               y="y", rho=1e-3)  # fmt: skip
    con = _con(s, 38)
    foreign = other.sql("SELECT 1 AS u, 0.0 AS x, 0.0 AS y")
    with pytest.raises(gp.InvalidInputError, match="another connection"):
        gp.duckdb.knn(con, foreign, user="u", x="x", y="y", point=(0, 0), k=1, rho=1e-3)
    with pytest.raises(gp.InvalidInputError, match="SQL string or a DuckDBPyRelation"):
        gp.duckdb.knn(con, pd.DataFrame(), user="u", x="x", y="y", point=(0, 0), k=1, rho=1e-3)
    assert s.spent().empty


def test_relation_helpers_refuse_rho_on_gp_session_and_bad_options():
    df = _separated()
    s = Session(budget=gp.GP(eps=1.0))
    con = _con(s, 39, df)
    before = s.ledger.snapshot()
    kw = {"user": "user_id", "x": "x", "y": "y"}
    cases = [
        (lambda: gp.duckdb.knn(con, "FROM pings", point=POINT, k=1, rho=1e-3, **kw), "pure GP"),
        (lambda: gp.duckdb.knn(con, "FROM pings", point=POINT, k=0, eps=0.1, **kw), "k=0"),
        (lambda: gp.duckdb.knn(con, "FROM pings", point=(np.nan, 0), k=1, eps=0.1, **kw),
         "finite"),
        (lambda: gp.duckdb.convex_hulls(con, "FROM pings", eps=0.1, beta=1.0, **kw), "beta="),
        (lambda: gp.duckdb.convex_hulls(con, "FROM pings", eps=0.1, geometry="svg", **kw),
         "geometry="),
        (lambda: gp.duckdb.nearest_users(con, "FROM pings", point=POINT, k=9, eps=0.1, **kw),
         "exceeds the 6 users"),
        (lambda: gp.duckdb.nearest_users(con, "SELECT * FROM pings UNION ALL FROM pings",
                                         point=POINT, k=1, eps=0.1, **kw), "several rows"),
        (lambda: gp.duckdb.nearest_users(con, "FROM pings", point=POINT, k=1, eps=0.1,
                                         method="exact", **kw), "method="),
    ]  # fmt: skip
    for call, match in cases:
        with pytest.raises(gp.InvalidInputError, match=match):
            call()
    assert s.ledger.snapshot() == before


# ------------------------------------------------------------------------------- SQL files


def _statements(name):
    code = "\n".join(
        ln for ln in (SQL / name).read_text().splitlines() if not ln.lstrip().startswith("--")
    )
    return [q for q in code.split(";") if q.strip()]


def test_nearest_users_sql_example_runs():
    """sql/nearest_users.sql: the SQL step, the Python step its comments show, the SQL read-back."""
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 40, _pings(n_users=5, n_pts=30))
    first, *rest = _statements("nearest_users.sql")
    con.execute(first)
    rel = gp.duckdb.nearest_users(con, "SELECT * FROM last_fix", user="user_id", x="x", y="y",
                                  point=(500000.0, 4500000.0), k=2, rho=1e-3, rounds=10,
                                  split="doubling")  # fmt: skip
    con.register("gp_nearest", rel.to_arrow_table())
    out = [con.execute(q).fetchall() for q in rest]
    assert [r[0] for r in out[-1]] == [1, 2]
    assert sorted(s.spent().index) == [1, 2, 3, 4, 5]


# regressions: refusals of PCH's k-dependent phases must come before the ledger reservation


@pytest.mark.parametrize(("budget", "amount"), [("cgp", {"rho": 1e-30}), ("gp", {"eps": 1e-10}),
                                                ("cgp", {"rho": 6e5})])  # fmt: skip
def test_convex_hulls_relation_refuses_k_phase_amounts_and_charges_nothing(budget, amount):
    # the centre and radius phases calibrate at these amounts; the PNN calls or the anchor
    # release at a reachable k (16..128) do not: once refused inside the reservation (charged)
    df = _pings(n_users=3, n_pts=200, seed=5)
    s = Session(budget=gp.CGP(rho=1e6) if budget == "cgp" else gp.GP(eps=1.0))
    con = _con(s, 40, df)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=r"PCH anchor|sqrt\(2\*rho/k\)") as info:
        gp.duckdb.convex_hulls(con, "SELECT * FROM pings", user="user_id", x="x", y="y",
                               **amount)  # fmt: skip
    assert "Nothing was charged" in str(info.value)
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT gp_convex_hull(u, xs, ys, 1e-30) FROM tuples t(u, xs, ys)",
        "SELECT gp_convex_hull(u, xs, ys, 1e6, k := 20) FROM tuples t(u, xs, ys)",
        "SELECT gp_convex_hull_gp(u, xs, ys, 1e-10) FROM tuples t(u, xs, ys)",
        # Remark 1 fallback (n = 1 <= k): all of rho_1 on one point, finer than the lattice
        "SELECT gp_convex_hull(1, [0.0], [1.0], 1e9)",
        # ln(2/beta) overflows: R̃ infinite, k NaN
        "SELECT gp_convex_hull(1, [0.0, 5.0], [1.0, 2.0], 1e-3, beta := 5e-324)",
    ],
)
def test_hull_udfs_refuse_k_phase_amounts_and_charge_nothing(sql):
    s = Session(budget=gp.CGP(rho=1e10))
    con = _con(s, 41, _pings(n_users=3, n_pts=200, seed=6))
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"InvalidInputError: gp_convex_hull.*Nothing was"):
        con.execute(sql).fetchall()
    assert s.ledger.snapshot() == before


def test_knn_null_lists_give_null_and_null_elements_are_refused_per_answered_row():
    # regression: xs's offsets indexed ys's values (ArrowIndexError) once a row of the batch
    # was skipped or a list was NULL
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s, 42)
    rows = con.execute(
        "SELECT gp_knn(u, xs, ys, 0.0, 0.0, 1, 1e-3) FROM (VALUES "
        "(NULL, [0.0, 0.0], [0.0]), (1, [0.0], [5.0]), (2, NULL, [1.0]), (3, [1.0, NULL], NULL), "
        "(4, [1.0, 2.0], [3.0, 4.0])) t(u, xs, ys)"
    ).fetchall()
    assert rows == [(None,), ([1],), (None,), (None,), ([1],)]
    assert sorted(s.spent().index) == [1, 4]
    before = s.ledger.snapshot()
    for values in ("(NULL, [0.0, 0.0], [0.0]), (0, [0.0], [NULL])",
                   "(1, [0.0], NULL), (2, [0.0, NULL], [1.0, 2.0])"):  # fmt: skip
        with pytest.raises(duckdb.Error, match=r"InvalidInputError: gp_knn: .*NULL coordinates"):
            con.execute(
                f"SELECT gp_knn(u, xs, ys, 0.0, 0.0, 1, 1e-3) FROM (VALUES {values}) t(u, xs, ys)"
            ).fetchall()
        assert s.ledger.snapshot() == before, values


def test_nearest_users_budget_refusal_is_read_only_and_a_budget_error():
    """Fewer than k users able to pay: BudgetExceededError before reserving, as the accessor."""
    con = duckdb.connect()
    s = gp.Session(budget=gp.CGP(rho=1e-4))
    gp.duckdb.register(con, s)
    con.sql("CREATE TABLE pts AS SELECT * FROM (VALUES (1, 0.0, 0.0), (2, 500.0, 0.0), "
            "(3, 900.0, 40.0)) t(uid, x, y)")  # fmt: skip
    before = s.ledger.snapshot()
    with pytest.raises(gp.BudgetExceededError, match=r"only 0 users can afford .* k=2"):
        gp.duckdb.nearest_users(con, "SELECT * FROM pts", user="uid", x="x", y="y",
                                point=(0.0, 0.0), k=2, rho=2e-4)  # fmt: skip
    assert s.ledger.snapshot() == before


# ------------------------------------------------------- table macros: the columns are named


def _vcon(session, seed):
    """A registered connection whose table names its columns vessel, ts, x_m, y_m."""
    con = _con(session, seed)
    con.register("v_df", _pings().rename(columns={"user_id": "vessel", "x": "x_m", "y": "y_m"}))
    con.execute("CREATE TABLE pings AS SELECT * FROM v_df ORDER BY vessel, ts")
    return con


@pytest.mark.parametrize("sfx, amount", [("", "1e-4"), ("_gp", "0.01")])
def test_knn_rows_takes_the_user_and_coordinate_columns_by_name(sfx, amount):
    s_named, s_alias = Session(budget=gp.CGP(rho=1e-2)), Session(budget=gp.CGP(rho=1e-2))
    named = (
        _vcon(s_named, 40)
        .execute(
            f"SELECT * FROM gp_knn_rows{sfx}('SELECT * FROM pings', 500000.0, 4500000.0, 2, "
            f"{amount}, user := 'vessel', x := 'x_m', y := 'y_m') ORDER BY vessel, knn_rank"
        )
        .df()
    )
    # no true coordinate under its own name either: the named x/y columns stay out
    assert list(named.columns) == ["vessel", "ts", "knn_rank"]
    alias = (
        _con(s_alias, 40, _pings())
        .execute(
            f"SELECT * FROM gp_knn_rows{sfx}('SELECT user_id, ts, x, y FROM pings', 500000.0, "
            f"4500000.0, 2, {amount}) ORDER BY user_id, knn_rank"
        )
        .df()
    )
    assert named.to_numpy().tolist() == alias.to_numpy().tolist()  # same seed, same picks
    _same_spent(s_named, s_alias)


def test_convex_hulls_take_the_user_and_coordinate_columns_by_name():
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _vcon(s, 41)
    rel = con.execute(
        "SELECT * FROM gp_convex_hulls('SELECT vessel, x_m, y_m FROM pings', 1e-3, "
        "user := 'vessel', x := 'x_m', y := 'y_m') ORDER BY vessel"
    )
    assert [d[0] for d in rel.description] == ["vessel", "hull"]
    assert [r[0] for r in rel.fetchall()] == [1, 2, 3, 4, 5]
    assert s.spent().tolist() == pytest.approx([1e-3] * 5)


@pytest.mark.parametrize(
    "call",
    [
        "gp_knn_rows('SELECT * FROM pings', 500000.0, 4500000.0, 2, 1e-4)",  # no user_id column
        "gp_knn_rows('SELECT * FROM pings', 500000.0, 4500000.0, 2, 1e-4, user := 'boat', "
        "x := 'x_m', y := 'y_m')",
        "gp_convex_hulls('SELECT * FROM pings', 1e-3, user := 'vessel', x := 'x', y := 'y_m')",
    ],
)
def test_a_column_name_that_is_not_in_the_query_is_refused_before_charging(call):
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _vcon(s, 42)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.BinderException, match=r"Could not find key \"(user_id|boat|x)\""):
        con.execute(f"SELECT * FROM {call}").fetchall()
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    ("budget", "sql"),
    [
        ("cgp", "SELECT gp_convex_hull(user_id, xs, ys, 1.5e-49) FROM tuples"),
        ("gp", "SELECT gp_convex_hull_gp(user_id, xs, ys, 1e-10) FROM tuples"),
        ("cgp", "FROM gp_convex_hulls('SELECT * FROM pings', 1.5e-49)"),
    ],
)
def test_hull_noise_beyond_the_range_refused_untouched(budget, sql):
    # regression (fuzz): with 4 points per user (fallback) every calibration accepts these
    # amounts; the centre draw then put the anchors beyond ±2**40 m inside the reservation
    s = Session(budget=gp.CGP(rho=1e3) if budget == "cgp" else gp.GP(eps=1e3))
    con = _con(s, 43, _pings(n_users=3, n_pts=4, seed=7))
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=r"InvalidInputError: gp_convex_hull.*too small for "
                       r"convex_hull.*Use a larger (rho|eps) .*Nothing was charged\."):  # fmt: skip
        con.execute(sql).fetchall()
    assert s.ledger.snapshot() == before
