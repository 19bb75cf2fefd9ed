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


@pytest.mark.parametrize("as_text", [False, True])
def test_the_helper_charges_the_whole_relation_once_like_the_accessor(as_text):
    """gp.duckdb.privatize: one reservation and charge per query, not one per 2,048-row vector."""
    df = _points(10_000, 37, seed=4)
    if as_text:
        df["user_id"] = "u" + df["user_id"].astype(str)
    s_py, s_sql = Session(budget=gp.CGP(rho=1.0)), Session(budget=gp.CGP(rho=1.0))
    df.geopriv(s_py, user="user_id", x="x", y="y", crs=32724).privatize(
        rho=1e-4, per="point", rng=seeded_rng(11), progress=False
    )
    con = duckdb.connect()
    con.execute("SET threads = 4")
    reg = register(con, s_sql, crs=32724, rng=seeded_rng(12))
    con.register("pts", df)
    rel = gp.duckdb.privatize(con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4)
    out = rel.df()
    assert reg.batches == 1  # 10,000 rows are five UDF vectors; the helper ran one batch
    assert {q for u in df["user_id"].unique() for q in s_sql.history(u)["query_id"]} == {
        s_sql.history(df["user_id"].iloc[0])["query_id"].iloc[0]
    }
    pd.testing.assert_series_equal(s_py.spent().sort_index(), s_sql.spent().sort_index())
    assert out["user_id"].tolist() == df["user_id"].tolist()  # input order, ids as given
    moved = np.hypot(out["x"] - df["x"], out["y"] - df["y"])
    assert out[["x", "y"]].notna().all().all() and (moved > 0).all()
    # σ = (1 + √2·g)/√(2ρ) ≈ 70.7 m per coordinate: the mean radius is σ·√(π/2) ≈ 88.6 m
    assert 80 < moved.mean() < 98


def test_the_helper_refuses_a_bad_row_in_a_late_vector_before_any_charge():
    """The rows are checked as one batch: a bad row after 4,096 good ones charges nobody."""
    df = _points(5000, 20, seed=5)
    df.loc[4990:, "x"] = 12.5  # degrees given as metres, in the third vector
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    register(con, s, crs=32724, rng=seeded_rng(13))
    con.register("pts", df)
    before = s.ledger.snapshot()
    with pytest.raises(gp.errors.InvalidInputError, match=r"gp\.duckdb\.privatize: 10 of 5000"):
        gp.duckdb.privatize(con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4)
    assert s.ledger.snapshot() == before


def test_the_helper_leaves_out_a_user_who_cannot_pay_for_all_rows():
    """Like the accessor's per="point": a user is released whole or left out, charged 0."""
    df = _points(3000, 3, seed=6)
    s = Session(budget=gp.CGP(rho=1.0))
    s.set_budget([1], gp.CGP(rho=0.05))  # 1,000 rows at 1e-4 need 0.1
    con = duckdb.connect()
    register(con, s, crs=32724, rng=seeded_rng(14))
    con.register("pts", df)
    out = gp.duckdb.privatize(con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4).df()
    gone = out["user_id"] == 1
    assert out.loc[gone, "x"].isna().all() and out.loc[~gone, "x"].notna().all()
    assert s.spent([0, 1, 2]).tolist() == pytest.approx([0.1, 0.0, 0.1])


def _spy_draws(monkeypatch):
    """Record (thread name, rows) of every sampler call of gp.duckdb.privatize's CGP noise."""
    import threading

    import gpframe.mechanisms as mech

    calls, real = [], mech.gaussian_cgp

    def spy(pts, *a, **k):
        calls.append((threading.current_thread().name, len(pts)))
        return real(pts, *a, **k)

    monkeypatch.setattr(mech, "gaussian_cgp", spy)
    return calls


def _on_both_threads(calls, rows):
    """The rows were drawn in row ranges on the two noise threads (at least 65,536 each)."""
    sizes = [n for _, n in calls]
    assert sum(sizes) == rows and len(sizes) >= 2 and min(sizes) >= 65_536
    assert {name for name, _ in calls} <= {"gp-noise_0", "gp-noise_1"}


def _two_thread_con(s, df):
    con = duckdb.connect()
    con.execute("SET threads = 2")
    reg = register(con, s, crs=32724)  # no rng=: the OS CSPRNG, so the noise is drawn ahead
    con.register("pts", df)
    return con, reg


def test_the_helper_draws_its_one_batch_on_the_connections_threads(monkeypatch):
    """threads=2, OS CSPRNG: row ranges drawn on two threads, one reservation and charge;
    each point still gets σ = (1 + √2·g)/√(2ρ) per coordinate and is charged ρ."""
    calls = _spy_draws(monkeypatch)
    df = _points(200_000, 500, seed=7)
    s = Session(budget=gp.CGP(rho=100.0))
    con, reg = _two_thread_con(s, df)
    out = gp.duckdb.privatize(con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4).df()
    _on_both_threads(calls, 200_000)
    assert reg.batches == 1 and len(s.history(0)) == 1
    assert s.spent().to_numpy() == pytest.approx(np.full(500, 400 * 1e-4))
    dx = np.concatenate([out["x"] - df["x"], out["y"] - df["y"]])
    sigma = (1 + np.sqrt(2) * 2.0**-10) / np.sqrt(2e-4)  # 70.7 m
    # 4·10⁵ draws: the sample σ's relative standard error is 1/√(2·4·10⁵) ≈ 0.11 %
    assert abs(dx.std() / sigma - 1) < 0.01 and abs(dx.mean()) < 1.0
    assert out["user_id"].tolist() == df["user_id"].tolist()


def test_drawn_ahead_noise_of_a_user_left_out_never_leaves_the_batch(monkeypatch):
    """threads=2: the noise is drawn while the reservation commits, for every row; the rows
    of a user who cannot pay come out NULL, and their Arrow value slots hold NaN, not a
    noisy point (release boundary: a NULL's hidden slot is readable through the buffers)."""
    calls = _spy_draws(monkeypatch)
    df = _points(200_000, 4, seed=10)
    s = Session(budget=gp.CGP(rho=100.0))
    s.set_budget([2], gp.CGP(rho=1.0))  # 50,000 rows at 1e-4 need 5
    con, _reg = _two_thread_con(s, df)
    tbl = gp.duckdb.privatize(
        con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4
    ).to_arrow_table()
    _on_both_threads(calls, 200_000)  # drawn for every row, user 2's too
    left_out = (df["user_id"] == 2).to_numpy()
    for c in ("x", "y"):
        col = tbl.column(c).combine_chunks()
        assert col.is_null().to_numpy(zero_copy_only=False).tolist() == left_out.tolist()
        slots = np.frombuffer(col.buffers()[1], dtype=np.float64)[
            col.offset : col.offset + len(col)
        ]
        assert np.isnan(slots[left_out]).all() and np.isfinite(slots[~left_out]).all()
    assert s.spent([0, 1, 2, 3]).tolist() == pytest.approx([5.0, 5.0, 0.0, 5.0])


def test_a_refused_query_draws_nothing_ahead(monkeypatch):
    """on_exhausted="raise" and previews: nothing is drawn before the ledger answers."""
    calls = _spy_draws(monkeypatch)
    df = _points(200_000, 4, seed=11)
    s = Session(budget=gp.CGP(rho=100.0))
    s.set_budget([2], gp.CGP(rho=1.0))
    con, _reg = _two_thread_con(s, df)
    before = s.ledger.snapshot()
    args = {"user": "user_id", "x": "x", "y": "y", "rho": 1e-4}
    with pytest.raises(gp.errors.BudgetExceededError):
        gp.duckdb.privatize(con, "SELECT * FROM pts", on_exhausted="raise", **args)
    preview = gp.duckdb.privatize(con, "SELECT * FROM pts", dry_run=True, **args)
    assert isinstance(preview, gp.results.Preview)
    assert calls == [] and s.ledger.snapshot() == before
    # with "raise", a query everybody can pay still draws on both threads, after the charge
    out = gp.duckdb.privatize(
        con, "SELECT * FROM pts WHERE user_id <> 2", on_exhausted="raise", **args
    ).df()
    _on_both_threads(calls, 150_000)
    assert out[["x", "y"]].notna().all().all()
    assert s.spent([0, 1, 2, 3]).tolist() == pytest.approx([5.0, 5.0, 0.0, 5.0])


def test_a_ledger_failure_after_drawing_ahead_returns_nothing(monkeypatch):
    """The reservation's write fails while the noise is being drawn: the threads are waited
    for, nothing is returned, and the ledger is unchanged."""
    calls = _spy_draws(monkeypatch)
    df = _points(200_000, 4, seed=12)
    s = Session(budget=gp.CGP(rho=100.0))
    con, _reg = _two_thread_con(s, df)
    before = s.ledger.snapshot()

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(s.ledger, "reserve", broken)
    with pytest.raises(OSError, match="disk full"):
        gp.duckdb.privatize(con, "SELECT * FROM pts", user="user_id", x="x", y="y", rho=1e-4)
    _on_both_threads(calls, 200_000)
    assert s.ledger.snapshot() == before
