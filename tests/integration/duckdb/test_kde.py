"""gp.duckdb.kde_raster: the SQL heatmap, run once, charged as the accessor's kde_raster."""

from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.ledger import Session
from gpframe.queries.kde import kde_raster_arrays
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
BOUNDS = (490_000.0, 4_490_000.0, 510_000.0, 4_510_000.0)


def _points(n=300, seed=1):
    rng = np.random.default_rng(seed)  # true points only, never noise
    return pd.DataFrame({"boat": np.arange(1, n + 1),
                         "x": 500_000 + rng.normal(0, 3000, n),
                         "y": 4_500_000 + rng.normal(0, 3000, n)})  # fmt: skip


def _con(session, seed, df):
    con = duckdb.connect()
    gp.duckdb.register(con, session, rng=seeded_rng(seed))
    con.register("pts_df", df)
    con.execute("CREATE TABLE pts AS SELECT * FROM pts_df ORDER BY boat")
    con.unregister("pts_df")
    return con


@pytest.mark.parametrize(("budget", "amount"), [(gp.CGP(rho=1e-3), {"rho": 1e-4}),
                                                (gp.GP(eps=1.0), {"eps": 0.05})])  # fmt: skip
def test_kde_raster_relation_charges_equal_the_accessor(budget, amount):
    df = _points()
    s_sql, s_py = Session(budget=budget), Session(budget=budget)
    con = _con(s_sql, 3, df)
    cells = gp.duckdb.kde_raster(con, "SELECT boat, x, y FROM pts", user="boat", x="x", y="y",
                                 bandwidth_m=1500, cell_m=250, bounds=BOUNDS, **amount)  # fmt: skip
    assert cells.columns == ["x", "y", "density"]
    r = df.geopriv(s_py, user="boat", x="x", y="y", crs=CRS).kde_raster(
        bandwidth_m=1500, cell_m=250, bounds=BOUNDS, rng=seeded_rng(3), **amount
    )
    pd.testing.assert_series_equal(s_sql.spent().sort_index(), s_py.spent().sort_index())
    assert len(s_sql.spent()) == len(df) and (s_sql.spent() > 0).all()
    out = cells.df()
    assert len(out) == r.shape[0] * r.shape[1] == 80 * 80
    # the cells: centres of the 250 m grid over the bounds, north row first, mass ~ 1
    assert out["x"].iloc[:2].tolist() == [490_125.0, 490_375.0]
    assert out["y"].iloc[0] == 4_509_875.0 and out["y"].iloc[-1] == 4_490_125.0
    assert float(out["density"].sum()) * 250**2 == pytest.approx(1.0, abs=0.02)
    before = s_sql.spent().copy()
    assert cells.fetchall() == cells.fetchall()  # materialised: reading again draws nothing
    pd.testing.assert_series_equal(s_sql.spent(), before)


def test_kde_raster_relation_is_the_array_algorithm():
    """The same draws as kde_raster_arrays on the same points (scale 1: metres as given)."""
    df = _points(n=200, seed=2)
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 11, df)
    cells = gp.duckdb.kde_raster(con, "SELECT * FROM pts", user="boat", x="x", y="y",
                                 bandwidth_m=1000, cell_m=500, bounds=BOUNDS, rho=1e-4)  # fmt: skip
    lu = s.ledger.units["metric"]
    want = kde_raster_arrays(df[["x", "y"]].to_numpy(), bandwidth_m=1000, cell_m=500,
                             bounds_m=BOUNDS, amount=lu.to_fraction(lu.up(Fraction(1, 10**4))),
                             unit=Fraction(1) / lu.scale, rng=seeded_rng(11))  # fmt: skip
    got = cells.df()["density"].to_numpy().reshape(want.density.shape)
    np.testing.assert_array_equal(got, want.density)


def test_kde_raster_relation_without_bounds_and_relation_input():
    df = _points(n=100, seed=4)
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 5, df)
    rel = con.sql("SELECT boat, x, y FROM pts")
    cells = gp.duckdb.kde_raster(con, rel, user="boat", x="x", y="y", bandwidth_m=2000, rho=1e-4)
    out = cells.df()
    assert len(out) > 0 and np.isfinite(out["density"]).all()
    assert float(s.spent().max()) == pytest.approx(1e-4)


@pytest.mark.parametrize(
    ("query", "kw", "match"),
    [
        ("SELECT boat, x, y FROM pts UNION ALL SELECT 1, 500000.0, 4500000.0", {},
         "several rows per user"),
        ("SELECT boat, x, y FROM pts", {"bounds": (1.0, 2.0, 0.0, 3.0)}, "xmax > xmin"),
        ("SELECT boat, x, y FROM pts", {"bounds": "box"}, "bounds"),
        ("SELECT boat, x, y FROM pts", {"bandwidth_m": -1}, "bandwidth_m"),
        ("SELECT boat, x, y FROM pts", {"cell_m": 0}, "cell_m"),
        ("SELECT boat, x, y FROM pts", {"rho": None, "eps": 0.1}, "rho"),
        ("SELECT boat, x, y FROM pts", {"bandwidth_m": 10.0}, "not larger than the noise"),
        ("SELECT boat, x, NULL::DOUBLE AS y FROM pts", {}, "NULL"),
        ("SELECT boat, x, y FROM nope", {}, "not a valid query"),
    ],
)  # fmt: skip
def test_kde_raster_relation_bad_input_charges_nothing(query, kw, match):
    s = Session(budget=gp.CGP(rho=1e-3))
    con = _con(s, 1, _points(n=20))
    snap = s.ledger.snapshot()
    args = {"bandwidth_m": 1500, "cell_m": 250, "bounds": BOUNDS, "rho": 1e-4, **kw}
    with pytest.raises(InvalidInputError, match=match) as err:
        gp.duckdb.kde_raster(con, query, user="boat", x="x", y="y", **args)
    assert "Nothing was charged" in str(err.value)
    assert s.ledger.snapshot() == snap


def test_kde_raster_relation_needs_register():
    with pytest.raises(InvalidInputError, match="register"):
        gp.duckdb.kde_raster(duckdb.connect(), "SELECT 1 AS boat, 0.0 AS x, 0.0 AS y",
                             user="boat", x="x", y="y", bandwidth_m=500, rho=1e-4)  # fmt: skip
