"""gp.duckdb.grid_stats (a per-user total): the accessor's charges, refusals before the ledger."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.testing import seeded_rng


def _data() -> pd.DataFrame:
    import h3

    rs = np.random.default_rng(4)  # test data only
    base = h3.latlng_to_cell(40.7, -74.0, 6)
    kids = np.array([h3.str_to_int(c) for c in sorted(h3.cell_to_children(base, 8))[:12]],
                    dtype=np.uint64)  # fmt: skip
    n = 400
    u = rs.integers(0, 25, n)
    u[:60] = 0
    return pd.DataFrame({"u": u, "cell": kids[rs.integers(0, 12, n)], "v": rs.uniform(0, 20, n),
                         "lon": -74.0, "lat": 40.7})  # fmt: skip


def test_charges_equal_the_accessors_and_stay_within_the_total():
    df = _data()
    s_py = gp.Session(central=gp.DP(epsilon=50.0))
    b = df.geopriv(s_py, user="u", lon="lon", lat="lat", crs="EPSG:4326")
    out = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=3.0, cells="cell",
                       occupancy="public", rng=seeded_rng(1))  # fmt: skip
    s_sql = gp.Session(central=gp.DP(epsilon=50.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s_sql, rng=seeded_rng(2))
    con.register("pings", df[["u", "cell", "v"]])
    rel = gp.duckdb.grid_stats(con, "SELECT * FROM pings", user="u", cell="cell", value="v",
                               bounds=(0, 20), epsilon_per_user=3.0)  # fmt: skip
    got = rel.df()
    users = sorted(df.u.unique().tolist())
    a = s_py.spent(users, notion="central").to_numpy(dtype=float)
    c = s_sql.spent(users, notion="central").to_numpy(dtype=float)
    assert np.array_equal(a, c) and c.max() <= 3.0
    assert len(got) == len(out)
    assert got["epsilon_cell"].to_numpy().tolist() == out["epsilon_cell"].to_numpy().tolist()
    assert got["released"].tolist() == out["released"].tolist()
    # reading the relation again draws and charges nothing
    rel.fetchall()
    assert np.array_equal(s_sql.spent(users, notion="central").to_numpy(dtype=float), c)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"epsilon_per_user": 0}, "epsilon_per_user=0"),
        ({"epsilon_per_user": 1.0, "occupancy": "private"}, "occupancy='private'"),
        ({"epsilon_per_user": 1.0, "value": "nope"}, "value='nope' is not a column"),
        ({"epsilon_per_user": 1.0, "bounds": (0, 5)}, "outside bounds"),
        ({"epsilon_per_user": 1.0, "split": (1.0, 0.0)}, "split="),
    ],
)
def test_refusals_charge_nothing(kw, match):
    df = _data()
    s = gp.Session(central=gp.DP(epsilon=50.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s, rng=seeded_rng(2))
    con.register("pings", df[["u", "cell", "v"]])
    args = {"user": "u", "cell": "cell", "value": "v", "bounds": (0, 20), **kw}
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=match) as ei:
        gp.duckdb.grid_stats(con, "SELECT * FROM pings", **args)
    assert str(ei.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def _con(s, **reg):
    con = duckdb.connect()
    gp.duckdb.register(con, s, rng=seeded_rng(2), **reg)
    con.register("pings", _data()[["u", "cell", "v"]])
    return con


ARGS = {"user": "u", "cell": "cell", "value": "v", "bounds": (0, 20), "epsilon_per_user": 3.0}


def _low_session():
    s = gp.Session(central=gp.DP(epsilon=50.0))
    s.set_budget([7], gp.DP(epsilon=1e-6))  # cannot pay
    return s


@pytest.mark.parametrize("shrink", [False, True])
def test_dry_run_is_the_real_call_and_the_accessors_preview(shrink):
    s = _low_session()
    con = _con(s)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, shrink=shrink, dry_run=True)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert list(pv.excluded.index) == [7] and pv.operation == "grid_stats"
    # the accessor's preview of the same data: the same table and error
    df = _data()
    b = df.geopriv(_low_session(), user="u", lon="lon", lat="lat", crs="EPSG:4326")
    pv_pd = b.grid_stats(value="v", bounds=(0, 20), epsilon_per_user=3.0, cells="cell",
                         occupancy="public", shrink=shrink, dry_run=True)  # fmt: skip
    pd.testing.assert_frame_equal(pv.table.sort_index(), pv_pd.table.sort_index())
    assert (pv.error, pv.error_kind, pv.confidence) == (pv_pd.error, pv_pd.error_kind,
                                                        pv_pd.confidence)  # fmt: skip
    got = gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, shrink=shrink).df()
    worst = float(got["mean_error"].max())
    if shrink:  # the shrinkage widens the stated bounds (at most W): a lower bound
        assert pv.error <= worst * (1 + 1e-12)
    else:
        assert pv.error == pytest.approx(worst, rel=1e-12)
    spent = s.spent(notion="central")
    spent = spent[spent > 0]
    planned = pv.allocations[pv.table["status"] == "reserved"]
    assert spent.sort_index().index.tolist() == planned.sort_index().index.tolist()
    assert np.array_equal(spent.sort_index().to_numpy(), planned.sort_index().to_numpy())


def test_on_exhausted_raise_names_the_user_and_charges_nothing():
    for reg, kw in (({}, {"on_exhausted": "raise"}), ({"on_exhausted": "raise"}, {})):
        s = _low_session()
        con = _con(s, **reg)
        before = s.ledger.snapshot()
        with pytest.raises(gp.BudgetExceededError, match=r"gp.duckdb.grid_stats: 1 of .*7"):
            gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, **kw)
        assert s.ledger.snapshot() == before
        pv = gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, **kw, dry_run=True)
        assert pv.refusal is not None and "7" in pv.refusal
    # "exclude" (the argument wins over the registration's "raise"): user 7 left out
    gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, on_exhausted="exclude")
    spent = s.spent(notion="central")
    assert spent.loc[7] == 0 and (spent.drop(7) > 0).all()
    with pytest.raises(InvalidInputError, match="on_exhausted='later'"):
        gp.duckdb.grid_stats(con, "SELECT * FROM pings", **ARGS, on_exhausted="later")
