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
