"""The relation helpers that fetch their input (gp.duckdb.privatize, gp.duckdb.range_count) run
its query once and check the rows they fetched, with the refusals of the SQL pre-check the
other helpers run (relations.check_input), before anything is charged."""

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.duckdb import register
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

BOX = shapely.box(495_000, 8_795_000, 505_000, 8_805_000)


def _points(n, users, seed):
    rng = np.random.default_rng(seed)  # true points only
    return pd.DataFrame(
        {
            "user_id": (np.arange(n) * 7919) % users,
            "x": 500_000 + rng.uniform(-5000, 5000, n),
            "y": 8_800_000 + rng.uniform(-5000, 5000, n),
        }
    )


def _call(helper, con, query):
    cols = {"user": "user_id", "x": "x", "y": "y", "rho": 1e-4}
    if helper == "privatize":
        return gp.duckdb.privatize(con, query, **cols)
    return gp.duckdb.range_count(con, f"SELECT DISTINCT ON (user_id) * FROM ({query})", BOX, **cols)


def _con(session, df, seed):
    con = duckdb.connect()
    register(con, session, crs=32724, rng=seeded_rng(seed))
    con.register("pts", df)
    return con


_BAD_ROWS = [
    ("SELECT * FROM pts WHERE x < 0", "the input has no rows"),
    ("SELECT CASE WHEN user_id = 3 THEN NULL ELSE user_id END AS user_id, x, y FROM pts",
     r"column 'user_id' has (250|1) NULL value\(s\); filter them first \(WHERE \"user_id\" IS"),
    ("SELECT user_id, CASE WHEN user_id = 3 THEN 'nan'::DOUBLE ELSE x END AS x, y FROM pts",
     r"column 'x' has (250|1) NULL, NaN or infinite value\(s\)"),
    ("SELECT user_id, x, CASE WHEN user_id < 2 THEN NULL ELSE y END AS y FROM pts",
     r"column 'y' has (500|2) NULL, NaN or infinite value\(s\)"),
    ("SELECT user_id, x, CASE WHEN user_id = 2 THEN -'inf'::DOUBLE ELSE y END AS y FROM pts",
     r"column 'y' has (250|1) NULL, NaN or infinite"),
    ("SELECT user_id, CASE WHEN user_id = 3 THEN NULL ELSE x::BIGINT END AS x, y FROM pts",
     r"column 'x' has (250|1) NULL, NaN or infinite"),  # a nullable integer column
    ("SELECT user_id, CASE WHEN user_id = 3 THEN 1e13 ELSE x END AS x, y FROM pts",
     r"beyond ±2\*\*40 m"),
]  # fmt: skip


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
@pytest.mark.parametrize(("query", "match"), _BAD_ROWS)
def test_bad_rows_are_refused_as_fetched_and_charge_nothing(helper, query, match):
    df = _points(5000, 20, seed=8)  # user 3 has 250 rows
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 15)
    before = s.ledger.snapshot()
    with pytest.raises(gp.errors.InvalidInputError, match=match) as info:
        _call(helper, con, query)
    assert str(info.value).startswith(f"gp.duckdb.{helper}: ")
    assert "Nothing was charged" in str(info.value)
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
def test_good_decimal_and_integer_coordinates_are_accepted(helper):
    df = _points(2000, 20, seed=10)
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 17)
    q = "SELECT user_id, x::DECIMAL(12, 2) AS x, y::BIGINT AS y FROM pts"
    assert len(_call(helper, con, q).fetchall()) == (2000 if helper == "privatize" else 1)
    assert (s.spent() > 0).all()


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
def test_the_query_runs_once(helper):
    """The checks and the release read one run of the query: a volatile query cannot show the
    checks other rows than those released (and an expensive one is not paid twice)."""
    from duckdb.sqltypes import DOUBLE

    seen = []

    def tap(x):  # counts the rows each run of the query reads
        seen.append(len(x))
        return x

    df = _points(5000, 20, seed=9)
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 16)
    con.create_function("tap", tap, [DOUBLE], DOUBLE, type="arrow", side_effects=True)
    rel = _call(helper, con, "SELECT user_id, tap(x) AS x, y FROM pts")
    assert sum(seen) == 5000
    rel.fetchall()
    assert sum(seen) == 5000  # reading the result runs nothing again
