import duckdb
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor
from gpframe.duckdb import register
from gpframe.ledger import Session
from gpframe.testing import seeded_rng


def _points(n, users, seed=0):
    rng = np.random.default_rng(seed)  # true points only
    return pd.DataFrame(
        {
            "user_id": (np.arange(n) * 7919) % users,
            "x": 500_000 + rng.uniform(-5000, 5000, n),
            "y": 8_800_000 + rng.uniform(-5000, 5000, n),
        }
    )


def test_register_is_idempotent_and_macros_exist():
    con = duckdb.connect()
    s = Session(budget=gp.CGP(rho=1.0))
    a = register(con, s)
    assert register(con, s) is a
    names = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
    assert {"gp_privatize", "gp_privatize_gp"} <= names


def test_null_in_gives_null_out_and_no_charge():
    con = duckdb.connect()
    s = Session(budget=gp.CGP(rho=1.0))
    register(con, s, rng=seeded_rng(1))
    rows = con.execute(
        "SELECT gp_privatize(u, x, y, r) FROM (VALUES (1, 1.0, 2.0, NULL), (NULL, 1.0, 2.0, 1e-3),"
        " (2, NULL, 2.0, 1e-3), (3, 1.0, 2.0, 1e-3)) t(u, x, y, r)"
    ).fetchall()
    assert [r[0] is None for r in rows] == [True, True, True, False]
    assert s.spent().to_dict() == {3: pytest.approx(1e-3)}


def test_python_and_sql_charge_identically_per_point():
    df = _points(3000, 40)
    s_py, s_sql = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    df.geopriv(s_py, user="user_id", x="x", y="y", crs=32724).privatize(
        rho=1e-4, per="point", rng=seeded_rng(2)
    )
    con = duckdb.connect()
    register(con, s_sql, rng=seeded_rng(3))
    con.register("pts", df)
    con.execute("CREATE TABLE out AS SELECT gp_privatize(user_id, x, y, 1e-4) AS p FROM pts")
    assert s_sql.ledger.kind == s_py.ledger.kind
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())
    assert sorted(s_sql.spent().index.tolist()) == list(range(40))  # int ids on both paths


def test_python_and_sql_charge_identically_with_four_threads_gp_on_cgp():
    df = _points(60_000, 300, seed=1)
    s_py, s_sql = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    df.geopriv(s_py, user="user_id", x="x", y="y", crs=32724).privatize(
        eps=1e-3, per="point", rng=seeded_rng(4), progress=False
    )
    con = duckdb.connect()
    con.execute("SET threads = 4")
    reg = register(con, s_sql, rng=seeded_rng(5))
    con.register("pts", df)
    n = con.execute(
        "SELECT count(p) FROM (SELECT gp_privatize_gp(user_id, x, y, 1e-3) AS p FROM pts)"
        " WHERE p.x IS NOT NULL"
    ).fetchone()[0]
    assert n == 60_000 and reg.batches > 1
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())


def test_every_draw_is_charged_when_the_output_is_filtered():
    """A subquery whose output column is filtered on: charges == draws, never fewer."""
    df = _points(5000, 10, seed=2)
    s = Session(budget=gp.CGP(rho=10.0))
    con = duckdb.connect()
    con.execute("SET threads = 4")
    reg = register(con, s, rng=seeded_rng(6))
    con.register("pts", df)
    kept = con.execute(
        "SELECT count(*) FROM (SELECT gp_privatize(user_id, x, y, 1e-4) AS p FROM pts) "
        "WHERE p.x > 500000 AND p.y > 0"
    ).fetchone()[0]
    assert 0 < kept < 5000
    assert reg.rows_drawn >= 5000
    assert s.spent().sum() == pytest.approx(reg.rows_drawn * 1e-4)


def test_limit_may_overcharge_but_never_undercharges():
    df = _points(20_000, 10, seed=3)
    s = Session(budget=gp.CGP(rho=10.0))
    con = duckdb.connect()
    reg = register(con, s, rng=seeded_rng(7))
    con.register("pts", df)
    got = con.execute("SELECT gp_privatize(user_id, x, y, 1e-4) FROM pts LIMIT 5").fetchall()
    assert len(got) == 5
    assert s.spent().sum() == pytest.approx(reg.rows_drawn * 1e-4)
    assert reg.rows_drawn >= 5


def test_exhausted_user_gets_null_and_no_charge():
    s = Session(budget=gp.CGP(rho=1.0))
    s.set_budget(["b"], gp.CGP(rho=1e-6))
    con = duckdb.connect()
    register(con, s, rng=seeded_rng(8))
    rows = con.execute(
        "SELECT u, gp_privatize(u, 10.0, 20.0, 1e-4) AS p "
        "FROM (VALUES ('a'), ('b')) t(u) ORDER BY u"
    ).fetchall()
    assert rows[0][1] is not None and rows[1][1] is None
    assert s.spent(["a", "b"]).tolist() == pytest.approx([1e-4, 0.0])


def test_bad_amount_raises_with_a_standalone_message_and_no_charge():
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s)
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="must be finite and > 0"):
        con.execute("SELECT gp_privatize(1, 1.0, 2.0, -1.0)").fetchall()
    assert s.ledger.snapshot() == before


def test_gaussian_udf_on_gp_ledger_is_refused():
    s = Session(budget=gp.GP(eps=1.0))
    con = duckdb.connect()
    register(con, s)
    with pytest.raises(duckdb.Error, match="pure-GP budget cannot pay"):
        con.execute("SELECT gp_privatize(1, 1.0, 2.0, 1e-4)").fetchall()
    assert s.spent().sum() == 0
