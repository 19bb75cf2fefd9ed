"""The SQL face's shared plumbing (gpframe.duckdb.udf): every batch through the one driver,
one registration per connection and operation, the batch checks that charge nothing."""

import duckdb
import pytest
import shapely

import gpframe as gp
import gpframe.ledger.run
from gpframe.duckdb import udf
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

WKB = shapely.to_wkb(shapely.box(0, 0, 10_000, 10_000))
QUERIES = {
    "gp_privatize": "SELECT gp_privatize(7, 500.0, 800.0, 1e-4)",
    "gp_in_region": "SELECT gp_in_region(7, 5000.0, 5000.0, $w, 1e-4, 10)",
    "gp_kde_contribution": "SELECT gp_kde_contribution(7, 900.0, 0.0, 0.0, 0.0, 500.0, 1e-4, 10)",
    "gp_knn": "SELECT gp_knn(7, [0.0, 50.0, 900.0], [0.0, 0.0, 0.0], 0.0, 0.0, 2, 1e-4)",
    "gp_convex_hull": "SELECT gp_convex_hull(7, [0.0, 90.0, 0.0, 90.0], [0.0, 0.0, 70.0, 70.0], "
    "1e-3)",
}


def _con(session, seed=1):
    con = duckdb.connect()
    gp.duckdb.register(con, session, rng=seeded_rng(seed))
    return con


def _run(con, name):
    q = QUERIES[name]
    return con.execute(q, {"w": WKB} if "$w" in q else {}).fetchall()


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_every_sql_batch_is_charged_through_the_driver_without_a_process_wide_lock(
    name, monkeypatch
):
    # the Ledger serialises reserve and charge itself: a process-wide lock held from the
    # reservation to the charge would run DuckDB's threads one batch at a time
    seen = []
    real = gpframe.ledger.run.run

    def spy(session, users, alloc, **kw):
        seen.append((kw["query"], kw.get("lock") is None))
        return real(session, users, alloc, **kw)

    monkeypatch.setattr(udf, "run", spy)
    s = Session(budget=gp.CGP(rho=1e-2))
    _run(_con(s), name)
    assert seen == [(name, True)]  # one batch: one reserve and one charge, through run()
    assert 0 < float(s.spent().loc[7]) <= 1e-3


def test_nearest_users_runs_through_the_driver(monkeypatch):
    seen = []
    real = gpframe.ledger.run.run

    def spy(session, users, alloc, **kw):
        seen.append(kw["query"])
        return real(session, users, alloc, **kw)

    monkeypatch.setattr(gpframe.ledger.run, "run", spy)
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s)
    q = "SELECT * FROM (VALUES (1, 0.0, 0.0), (2, 10.0, 0.0), (3, 9e4, 0.0)) t(boat, x, y)"
    rel = gp.duckdb.nearest_users(con, q, user="boat", x="x", y="y", point=(0.0, 0.0), k=1,
                                  rho=1e-3)  # fmt: skip
    assert len(rel.fetchall()) == 1
    assert seen == ["nearest_users"]
    assert set(s.spent().index) == {1, 2, 3}


def test_register_again_points_every_operation_at_the_new_session():
    s1, s2 = Session(budget=gp.CGP(rho=1e-2)), Session(budget=gp.CGP(rho=1e-2))
    con = _con(s1)
    reg = gp.duckdb.register(con, s2, rng=seeded_rng(2))
    for name in sorted(QUERIES):
        _run(con, name)
    assert reg.session is s2
    assert s1.spent().empty  # nothing went to the session registered first
    assert float(s2.spent().loc[7]) > 0


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("SELECT gp_privatize(7, 1.0, 2.0, -1.0)", r"gp_privatize: rho=-1.0 in 1 row\(s\) must be"),
        ("SELECT gp_privatize_gp(7, 'nan'::DOUBLE, 2.0, 0.1)", "x/y has 1 NaN or infinite"),
        ("SELECT gp_in_region(7, 1.0, 2.0, $w, 1e-4, 0)", "gp_in_region: rounds=0 must be in"),
        ("SELECT gp_in_region(7, 1e13, 2.0, $w, 1e-4, 5)", r"beyond ±2\*\*40 m"),
        (
            "SELECT gp_kde_contribution(7, 1.0, 2.0, 'inf'::DOUBLE, 0.0, 500.0, 1e-4, 10)",
            "gp_kde_contribution: qx/qy has 1 NaN or infinite",
        ),
        ("SELECT gp_kde_contribution(7, 1.0, 2.0, 0.0, 0.0, 500.0, 1e-4, 65)", "rounds=65"),
        (
            "SELECT gp_knn(7, [1.0, 'inf'::DOUBLE], [1.0, 2.0], 0.0, 0.0, 1, 1e-4)",
            "gp_knn: xs/ys has 1 NaN or infinite",
        ),
        ("SELECT gp_convex_hull(7, [1.0], [1.0], 0.0)", r"rho=0.0 in 1 row\(s\) must be finite"),
    ],
)
def test_batch_refusals_name_the_function_and_charge_nothing(query, match):
    s = Session(budget=gp.CGP(rho=1e-2))
    con = _con(s)
    with pytest.raises(duckdb.Error, match=match) as info:
        con.execute(query, {"w": WKB} if "$w" in query else {}).fetchall()
    assert "Nothing was charged for this batch." in str(info.value)
    assert s.spent().empty


def test_the_batch_extent_check_finds_exactly_the_points_outside_the_declared_crs():
    # udf.outside skips the polygon test for points inside a box within the footprint: the
    # mask must be the footprint test's, for points inside, near the edge, outside and NaN
    import numpy as np

    from gpframe.geo import metric_frame

    units = metric_frame("EPSG:32618", (-75.3, 40.4, -74.7, 40.9), name="crs")
    box = udf._inner_box(units.footprint)
    assert box is not None and shapely.contains_properly(units.footprint, shapely.box(*box))
    r = np.random.default_rng(0)
    x0, y0, x1, y1 = units.footprint.bounds
    xy = np.column_stack([r.uniform(x0 - 5e3, x1 + 5e3, 50_000), r.uniform(y0 - 5e3, y1 + 5e3,
                                                                          50_000)])  # fmt: skip
    xy[:10] = np.nan
    want = units.outside(xy)
    assert 0 < want.sum() < len(xy)
    assert udf.outside(units, xy).tolist() == want.tolist()
    inside = xy[~want][:2048]
    assert not udf.outside(units, inside).any() and udf.outside(units, xy[:0]).size == 0
