"""Both faces on a PostgreSQL ledger: the same releases and the same charges as on SQLite.

The driver (gpframe.ledger.run) only talks to the Session, so the store behind it must not change
what is released or charged: the pandas accessor and the SQL functions, with the same seeded
randomness, give identical outputs and identical per-user spend on either store.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.duckdb import register
from gpframe.ledger import Session
from gpframe.testing import seeded_rng


def _points(n: int, users: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)  # true points only
    return pd.DataFrame(
        {
            "user_id": (np.arange(n) * 7919) % users,
            "x": 500_000 + rng.uniform(-5000, 5000, n),
            "y": 8_800_000 + rng.uniform(-5000, 5000, n),
        }
    )


def _run(path: str, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, dict]:
    with Session(path, budget=gp.CGP(rho=1.0)) as s:
        py = df.geopriv(s, user="user_id", x="x", y="y", crs=32724).privatize(
            rho=1e-4, per="point", rng=seeded_rng(2)
        )
        con = duckdb.connect()
        con.execute("SET threads = 1")  # one seeded stream, rows in input order
        register(con, s, rng=seeded_rng(3))
        con.register("pts", df)
        sql = con.execute("SELECT user_id, gp_privatize(user_id, x, y, 1e-4) AS p FROM pts").df()
        con.close()
        spent = s.spent_exact().sort_index()
        check = s.ledger.verify()
    return pd.DataFrame(py.drop(columns="geometry")), sql, spent, check


def test_both_faces_release_and_charge_the_same_on_both_stores(tmp_path, pg_url):
    df = _points(2000, 30)
    lite = _run(str(tmp_path / "ledger.sqlite"), df)
    pg = _run(pg_url, df)
    pd.testing.assert_frame_equal(lite[0], pg[0])  # the accessor's released points
    pd.testing.assert_frame_equal(lite[1], pg[1])  # the SQL function's
    pd.testing.assert_series_equal(lite[2], pg[2])  # exact per-user spend
    assert lite[3] == pg[3] and pg[3]["users"] == 30 and pg[3]["reservations"] == 0
