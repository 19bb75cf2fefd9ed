"""gp.duckdb.clip_user + sql/grid_stats.sql: same suppressions and charges as the Python path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.duckdb.grid import clip_user, register_grid
from gpframe.errors import InvalidInputError
from gpframe.frame.grid_stats import grid_stats
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

duckdb = pytest.importorskip("duckdb")
SQL = (gp.duckdb.SQL_DIR / "grid_stats.sql").read_text()


@pytest.fixture(scope="module")
def pings():
    import h3.api.numpy_int as h3n

    rs = np.random.default_rng(6)  # test data only
    n = 900
    vessel = rs.integers(0, 25, n)
    # heavy users in a few cells: Clip-User has something to suppress
    lon = -74 + rs.uniform(0, 0.04, n) * np.where(vessel < 3, 0.2, 1.0)
    lat = 40.7 + rs.uniform(0, 0.04, n)
    cell = np.array([h3n.latlng_to_cell(a, b, 8) for a, b in zip(lat, lon, strict=True)])
    return pd.DataFrame(
        {
            "vessel": vessel,
            "lon": lon,
            "lat": lat,
            "cell": cell.astype(np.uint64),
            "speed": np.round(rs.uniform(0, 30, n), 3),
            "t": rs.permutation(n),
        }
    )


def _python(df, clip, **kw):
    s = Session(central=gp.DP(epsilon=1000.0))
    b = df.geopriv(s, user="vessel", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618")
    out = grid_stats(
        b, value="speed", bounds=(0, 30), epsilon=0.5, cells="cell", clip=clip,
        occupancy="public", rng=seeded_rng(3), **kw,
    )  # fmt: skip
    return s, out.attrs["geopriv"].result


def _sql(df, clip, **kw):
    s = Session(central=gp.DP(epsilon=1000.0))
    con = duckdb.connect()
    con.execute("SET threads=4")
    con.register("df_in", df)
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.unregister("df_in")
    register_grid(con, s, rng=seeded_rng(4))
    plan = clip_user(
        con, "pings", user="vessel", cell="cell", value="speed", bounds=(0, 30), epsilon=0.5,
        occupancy="public", clip=clip, **kw,
    )  # fmt: skip
    return s, con, plan


@pytest.mark.parametrize(("clip", "order"), [("clip-user", None), ("pseudo-user", "t")])
def test_sql_and_python_give_identical_suppressions_and_charges(pings, clip, order):
    import h3

    s_py, res = _python(pings, clip, **({"order_by": order} if order else {}))
    s_sql, con, plan = _sql(pings, clip, **({"order_by": order} if order else {}))
    # the Python result publishes no per-user plan: compare its per-cell columns and Γ′ (the
    # per-(user, cell) suppressions show in the per-user charges compared below)
    frame = res.value.loc[[h3.int_to_str(int(c)) for c in plan.occupancy.cells.tolist()]]
    assert np.array_equal(frame["n_kept"].to_numpy(), plan.r_cell)
    assert np.array_equal(frame["m_ub"].to_numpy(), plan.m_ub)
    assert (res.Gamma, res.Gamma_prime) == (plan.Gamma, plan.Gamma_prime)
    assert res.n_suppressed_pairs == len(plan.suppressed)
    assert s_sql.spent().sum() == 0  # planning is free
    out = con.sql(SQL).df()
    assert len(out) == int((plan.r_cell > 0).sum())
    assert np.array_equal(out["n_kept"].to_numpy(), plan.r_cell[plan.r_cell > 0])
    assert out["mean"].between(0, 30).all()
    a = s_py.spent_exact().sort_index()
    b = s_sql.spent_exact().sort_index()
    assert a.index.tolist() == b.index.tolist() and a.tolist() == b.tolist()
    # charges: epsilon x 2 statistics x cells kept
    kept = pd.Series(plan.cells_kept, index=plan.occupancy.users)
    assert b.tolist() == [gp.accounting.amounts.exact(0.5, "e") * 2 * int(k) for k in kept[b.index]]


def test_exact_sums_do_not_depend_on_threads(pings):
    # the integer sums are the same with 1 and 4 threads (a DOUBLE sum need not be)
    outs = []
    for threads in (1, 4):
        con = duckdb.connect()
        con.execute(f"SET threads={threads}")
        con.register("df_in", pings)
        q = (
            "SELECT cell, sum(CAST(round_even((speed - 0.0) / ?, 0) AS BIGINT)) AS s "
            "FROM df_in GROUP BY cell ORDER BY cell"
        )
        outs.append(con.execute(q, [2.0**-12]).df())
    pd.testing.assert_frame_equal(outs[0], outs[1])


def test_sql_rerun_is_charged_again(pings):
    s, con, _plan = _sql(pings, "clip-user")
    con.sql(SQL).df()
    first = s.spent().sum()
    con.sql(SQL).df()
    assert s.spent().sum() == pytest.approx(2 * first)


@pytest.mark.parametrize(
    ("mutate", "kw", "match"),
    [
        (lambda d: d, {"occupancy": None}, "public"),
        (lambda d: d, {"occupancy": "private"}, "public"),
        (lambda d: d.assign(speed=d.speed.where(d.index != 5, np.nan)), {}, "NaN"),
        (lambda d: d.assign(speed=d.speed + 100), {}, "outside bounds"),
        (lambda d: d, {"value": "nope"}, "not a column"),
        (lambda d: d, {"bounds": (3, 3)}, "L < U"),
        (lambda d: d, {"clip": "cap"}, "clip="),
    ],
)
def test_bad_inputs_raise_and_charge_nothing(pings, mutate, kw, match):
    s = Session(central=gp.DP(epsilon=1000.0))
    con = duckdb.connect()
    con.register("df_in", mutate(pings.copy()))
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    register_grid(con, s)
    before = s.ledger.snapshot()
    args = dict(user="vessel", cell="cell", value="speed", bounds=(0, 30), epsilon=0.5,
                occupancy="public")  # fmt: skip
    args.update(kw)
    with pytest.raises(InvalidInputError, match=match):
        clip_user(con, "pings", **args)
    assert s.ledger.snapshot() == before


def test_changed_table_fails_closed(pings):
    s, con, _plan = _sql(pings, "clip-user")
    con.execute("DELETE FROM pings WHERE rowid IN (SELECT min(rowid) FROM pings)")
    before = s.ledger.snapshot()
    with pytest.raises(Exception, match="differ"):
        con.sql(SQL).df()
    assert s.ledger.snapshot() == before


def _low(pings, **reg):
    s = Session(central=gp.DP(epsilon=1000.0))
    s.set_budget([4], gp.DP(epsilon=1e-6))  # cannot pay its cells
    con = duckdb.connect()
    con.register("df_in", pings)
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.unregister("df_in")
    gp.duckdb.register(con, s, rng=seeded_rng(4), **reg)
    return s, con


ARGS = dict(user="vessel", cell="cell", value="speed", bounds=(0, 30), epsilon=0.5,
            occupancy="public")  # fmt: skip


def _temp_tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() "
                                      "WHERE temporary").fetchall()}  # fmt: skip


def test_clip_user_on_exhausted_raise_names_the_user_before_writing(pings):
    for reg, kw in (({}, {"on_exhausted": "raise"}), ({"on_exhausted": "raise"}, {})):
        s, con = _low(pings, **reg)
        before = s.ledger.snapshot()
        with pytest.raises(gp.BudgetExceededError, match=r"gp.duckdb.clip_user: 1 of 25 .*4"):
            clip_user(con, "pings", **ARGS, **kw)
        assert s.ledger.snapshot() == before and "gp_retention" not in _temp_tables(con)
    # "exclude" (the argument wins over the registration's): user 4 left out, the release runs
    plan = clip_user(con, "pings", **ARGS, on_exhausted="exclude")
    assert plan.occupancy.users[plan.excluded].tolist() == [4]
    con.sql(SQL).df()
    spent = s.spent(notion="central")
    assert spent.loc[4] == 0 and (spent.drop(4) > 0).all()
    with pytest.raises(InvalidInputError, match="on_exhausted='later'"):
        clip_user(con, "pings", **ARGS, on_exhausted="later")


def test_release_under_raise_refuses_a_user_who_spent_since_the_plan(pings):
    """The plan admitted everybody; user 4's budget is cut before the release: with "raise"
    the batch is refused naming them, before anything is reserved or drawn."""
    s, con = _low(pings)
    s.set_budget([4], gp.DP(epsilon=1000.0))
    clip_user(con, "pings", **ARGS, on_exhausted="raise")
    s.set_budget([4], gp.DP(epsilon=1e-6))
    before = s.ledger.snapshot()
    with pytest.raises(Exception, match=r"cannot pay.*4"):
        con.sql(SQL).df()
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("clip", ["clip-user", "pseudo-user"])
def test_raw_sql_preview_states_the_release_error_and_charges(pings, clip):
    """gp.duckdb.preview of grid_stats.sql: nothing written, the worst released cell's
    mean_error (a function of the public plan) and exactly the charges the query then makes."""
    s, con = _low(pings)
    clip_user(con, "pings", **ARGS, clip=clip)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = gp.duckdb.preview(con, SQL)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert pv.confidence == pytest.approx(0.95) and "worst released cell" in pv.error_kind
    assert list(pv.excluded.index) == [4]
    out = con.sql(SQL).df()
    err = out["mean_error"].to_numpy(dtype=float)
    assert pv.error == pytest.approx(float(np.nanmax(err)), rel=1e-12)
    assert f"median {float(np.nanmedian(err)):.4g}" in pv.error_kind
    spent = s.spent(notion="central")
    spent = spent[spent > 0].sort_index()
    planned = pv.allocations[pv.table["status"] == "reserved"].sort_index()
    assert spent.index.tolist() == planned.index.tolist()
    assert np.allclose(spent.to_numpy(), planned.to_numpy(), rtol=1e-12, atol=0)
