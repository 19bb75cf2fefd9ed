"""gp_in_region: the per-user SQL range-count UDF (issue 5, STYLE.md §9)."""

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.frame.accessor
from gpframe.duckdb.range_count import register_range_count
from gpframe.frame.range_count import range_count
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
BOX = shapely.box(495_000, 4_495_000, 505_000, 4_505_000)
WKB = shapely.to_wkb(BOX)


def _pings(n_users=300, seed=0):
    rng = np.random.default_rng(seed)  # true points only
    return pd.DataFrame(
        {
            "boat": np.arange(n_users),
            "x": 500_000 + rng.uniform(-12_000, 12_000, n_users),
            "y": 4_500_000 + rng.uniform(-12_000, 12_000, n_users),
        }
    )


# a public extent near the zone's central meridian, where the UTM scale is below 1: the Python path
# then runs at scale 1, exactly like the SQL functions (which take ground metres as given)
DOMAIN = (-75.3, 40.4, -74.7, 40.9)


def _con(session, seed):
    con = duckdb.connect()
    con.execute("SET threads = 1")  # one batch, table order: the same draw order as Python
    register_range_count(con, session, rng=seeded_rng(seed))
    return con


def test_register_is_idempotent_and_macro_exists():
    con = duckdb.connect()
    s = Session(budget=gp.CGP(rho=1.0))
    assert register_range_count(con, s) is register_range_count(con, s)
    names = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
    assert "gp_in_region" in names


def test_python_and_sql_give_identical_counts_and_charges():
    df = _pings()
    s_py, s_sql = Session(budget=gp.CGP(rho=1e-3)), Session(budget=gp.CGP(rho=1e-3))
    bound = df.geopriv(s_py, user="boat", x="x", y="y", crs=CRS, domain=DOMAIN)
    assert bound.projected.scale_max == 1.0
    res = range_count(bound, BOX, rho=1e-4, rounds=10, rng=seeded_rng(5))
    con = _con(s_sql, 5)
    con.register("pts", df)
    (count,) = con.execute(
        "SELECT SUM(gp_in_region(boat, x, y, $w, 1e-4, 10)::INT) FROM pts", {"w": WKB}
    ).fetchone()
    assert count == res.value
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())
    assert (s_sql.spent() < 1e-4).sum() > 200  # the savings stay in the budgets
    assert sorted(s_sql.spent().index.tolist()) == list(range(300))  # int ids on both paths


def test_explicit_n_users_matches_python_default():
    df = _pings(n_users=100)
    s_py, s_sql = Session(budget=gp.CGP(rho=1e-3)), Session(budget=gp.CGP(rho=1e-3))
    range_count(df.geopriv(s_py, user="boat", x="x", y="y", crs=CRS, domain=DOMAIN), BOX, rho=1e-4,
                rng=seeded_rng(6))  # fmt: skip
    con = _con(s_sql, 6)
    con.register("pts", df)
    con.execute(
        "SELECT gp_in_region(boat, x, y, $w, 1e-4, 10, (SELECT count(*) FROM pts)) FROM pts",
        {"w": WKB},
    ).fetchall()
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())


def test_null_in_gives_null_out_and_no_charge():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 1)
    rows = con.execute(
        "SELECT gp_in_region(u, x, y, $w, r, 10) FROM (VALUES (1, 5e5, 4.5e6, NULL), "
        "(NULL, 5e5, 4.5e6, 1e-4), (2, NULL, 4.5e6, 1e-4), (3, 5e5, 4.5e6, 1e-4)) t(u, x, y, r)",
        {"w": WKB},
    ).fetchall()
    assert [r[0] is None for r in rows] == [True, True, True, False]
    assert rows[3][0] is True
    assert list(s.spent().index) == [3]


def test_exhausted_user_gets_null_and_no_charge():
    s = Session(budget=gp.CGP(rho=1e-3))
    s.set_budget([2], gp.CGP(rho=1e-6))
    con = _con(s, 2)
    rows = con.execute(
        "SELECT u, gp_in_region(u, 5e5, 4.5e6, $w, 1e-4, 10) FROM range(1, 4) t(u) ORDER BY u",
        {"w": WKB},
    ).fetchall()
    assert rows[1] == (2, None) and rows[0][1] is True
    assert s.spent([2]).iloc[0] == 0


@pytest.mark.parametrize(
    "wkb, match",
    [
        (b"not wkb", "not valid WKB"),
        (shapely.to_wkb(shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)])), "invalid polygon"),
        (shapely.to_wkb(shapely.Point(0, 0)), "Polygon"),
    ],
)
def test_bad_region_raises_and_charges_nothing(wkb, match):
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 3)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match=match):
        con.execute("SELECT gp_in_region(1, 5e5, 4.5e6, $w, 1e-4, 10)", {"w": wkb}).fetchall()
    assert s.ledger.snapshot() == before


def test_gp_session_is_refused_without_charge():
    s = Session(budget=gp.GP(eps=1.0))
    con = _con(s, 4)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="must be CGP"):
        con.execute("SELECT gp_in_region(1, 5e5, 4.5e6, $w, 1e-4, 10)", {"w": WKB}).fetchall()
    assert s.ledger.snapshot() == before


def test_several_rows_of_a_user_are_each_charged():
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 5)
    con.execute(
        "SELECT gp_in_region(7, x, 4.5e6, $w, 1e-4, 1) FROM (VALUES (5e5), (5.01e5)) t(x)",
        {"w": WKB},
    ).fetchall()
    assert s.spent().loc[7] == pytest.approx(2e-4)  # one round = the full allocation per row


def test_sql_example_file_runs():
    """sql/range_count.sql runs against a registered connection (after its setup lines)."""

    path = gp.duckdb.SQL_DIR / "range_count.sql"
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 6)
    fixes = _pings(50).rename(columns={"boat": "user_id"})
    fixes = pd.concat([fixes.assign(ts=1, x=0.0), fixes.assign(ts=2)])  # the last fix counts
    con.register("fixes", fixes)
    con.execute("CREATE TABLE zones AS SELECT 'box' AS name, $w::BLOB AS wkb", {"w": WKB})
    code = "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("--"))
    for stmt in [q for q in code.split(";") if q.strip()]:
        con.execute(stmt).fetchall()
    assert len(s.spent()) == 50


# ------------------------------------------------------------- one component per user (users)


def _fixes(n_users=40, per_user=5):
    """``per_user`` fixes per user, all inside BOX but the earliest; ts orders them."""
    df = _pings(n_users)
    rows = [df.assign(ts=t, x=df["x"].clip(496_000, 504_000), y=df["y"].clip(4_496_000, 4_504_000))
            for t in range(1, per_user + 1)]  # fmt: skip
    rows[0] = rows[0].assign(x=509_000.0)  # the first fix of everyone is outside BOX
    return pd.concat(rows, ignore_index=True)


def _registered(session, seed, **kw):
    con = duckdb.connect()
    con.execute("SET threads = 1")
    gp.duckdb.register(con, session, crs=CRS, domain=DOMAIN, rng=seeded_rng(seed), **kw)
    return con


def test_sum_over_all_fixes_counts_rows_but_range_count_counts_users():
    from gpframe.queries.range_count import Last

    fixes = _fixes()
    s_rows, s_users = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    con = _registered(s_rows, 1)
    con.register("fixes", fixes)
    (rows,) = con.execute(
        "SELECT SUM(gp_in_region(boat, x, y, $w, 0.1, 10)::INT) FROM fixes", {"w": WKB}
    ).fetchone()
    assert rows > 40  # the scalar function is per row: 160 fixes inside, counted one by one
    con = _registered(s_users, 1)
    con.register("fixes", fixes)
    rel = gp.duckdb.range_count(
        con, "SELECT * FROM fixes", BOX, user="boat", x="x", y="y", rho=0.1, component=Last("ts")
    )
    assert rel.columns == ["region", "count", "users", "excluded"]
    ((_, count, users, excluded),) = rel.fetchall()
    assert users == 40 and excluded == 0 and 35 <= count <= 40  # users, not rows
    assert (s_users.spent() <= 0.1 + 1e-12).all() and len(s_users.spent()) == 40  # once each
    assert rel.fetchall() == [(None, count, 40, 0)]  # reading again: no new charge
    assert len(s_users.spent()) == 40 and s_users.spent().sum() <= 4.0


def test_range_count_matches_the_accessor_component_choice_and_charges():
    from gpframe.queries.range_count import Last

    fixes = _fixes(60, 3)
    s_py, s_sql = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    bound = fixes.geopriv(s_py, user="boat", x="x", y="y", crs=CRS, domain=DOMAIN)
    res = range_count(bound, BOX, rho=1e-4, rounds=10, component=Last("ts"), rng=seeded_rng(8))
    con = _registered(s_sql, 8)
    con.register("fixes", fixes)
    ((_, count, users, _),) = gp.duckdb.range_count(
        con, "SELECT * FROM fixes", BOX, user="boat", x="x", y="y", rho=1e-4, rounds=10,
        component=Last("ts"),
    ).fetchall()  # fmt: skip
    assert (count, users) == (res.value, 60)
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({}, "several rows in the selected component"),
        ({"component": "median"}, "is not 'first', 'last'"),
        ({"component": "last"}, "needs one time column"),
        ({"reduce": "mean"}, "reduce='mean'"),
        ({"component": ("nope", 1)}, "'nope' is not in the frame"),
        ({"rounds": 0}, "rounds=0"),
        ({"rho": -1.0}, "rho=-1.0"),
    ],
)
def test_range_count_refuses_bad_components_before_charging(kw, msg):
    s = Session(budget=gp.CGP(rho=1.0))
    con = _registered(s, 2)
    con.register("fixes", _fixes(5, 2))
    before = s.ledger.snapshot()
    args = {"user": "boat", "x": "x", "y": "y", "rho": 1e-4, **kw}
    with pytest.raises(gp.errors.InvalidInputError, match=msg) as e:
        gp.duckdb.range_count(con, "SELECT * FROM fixes", BOX, **args)
    assert "Nothing was charged" in str(e.value)
    assert s.ledger.snapshot() == before


def test_range_count_with_a_public_component_column_and_several_regions():
    fixes = _fixes(30, 2).assign(hour=lambda d: np.where(d["ts"] == 2, 7, 8))
    s = Session(budget=gp.CGP(rho=1.0))
    con = _registered(s, 3)
    con.register("fixes", fixes)
    far = shapely.box(506_000, 4_490_000, 512_000, 4_510_000)
    out = gp.duckdb.range_count(
        con, "SELECT * FROM fixes", {"box": BOX, "far": shapely.to_wkb(far)},
        user="boat", x="x", y="y", rho=0.1, component=("hour", 7),
    ).fetchall()  # fmt: skip
    assert [r[0] for r in out] == ["box", "far"] and all(r[2] == 30 for r in out)
    assert out[0][1] >= 25 and out[1][1] <= 5  # hour 7 is the fix inside BOX
    assert (s.spent() <= 0.2 + 1e-12).all()  # once per region


def test_range_count_needs_a_registered_connection():
    with pytest.raises(gp.errors.InvalidInputError, match="register"):
        gp.duckdb.range_count(duckdb.connect(), "SELECT 1", BOX, user="u", x="x", y="y", rho=1.0)


def test_range_count_runs_all_users_as_one_batch_like_the_accessor():
    """5,000 users are three gp_in_region vectors; the helper runs them as one charge and
    one elimination, so with the same seeded source it draws exactly what the accessor draws."""
    df = _pings(n_users=5000, seed=3)
    s_py, s_sql = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    bound = df.geopriv(s_py, user="boat", x="x", y="y", crs=CRS, domain=DOMAIN)
    res = range_count(bound, BOX, rho=1e-4, rounds=10, rng=seeded_rng(21))
    con = _registered(s_sql, 21)
    con.execute("SET threads = 4")
    con.register("pings", df)
    ((_, count, users, excluded),) = gp.duckdb.range_count(
        con, "SELECT * FROM pings", BOX, user="boat", x="x", y="y", rho=1e-4, rounds=10
    ).fetchall()
    assert (count, users, excluded) == (res.value, 5000, 0)
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())
    queries = {q for u in (0, 2500, 4999) for q in s_sql.history(u)["query_id"]}
    assert len(queries) == 1  # one reservation and charge for the whole query
