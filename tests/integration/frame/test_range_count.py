"""range_count on frames: regions, components, results, savings and plans (issue 5).

Spec: adaptive-budgeting.md §1.6, §3, §5.1, §5.5, §7. The accessor wiring
(``df.geopriv(...).range_count``) is tested at the end, skipped until it is added.
"""

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.frame.accessor
from gpframe.frame.accessor import GeoPriv
from gpframe.frame.range_count import range_count
from gpframe.ledger import Session
from gpframe.ledger.plan import plan
from gpframe.queries.range_count import Last
from gpframe.results import RangeCountResult
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"  # UTM 18N; x near the central meridian, so scale_max = 1
BOX = shapely.box(495_000, 4_495_000, 505_000, 4_505_000)
wired = pytest.mark.skipif(not hasattr(GeoPriv, "range_count"), reason="accessor wiring pending")


def _pings(n_users=200, per_user=1, seed=0):
    rng = np.random.default_rng(seed)  # true points only, never noise
    n = n_users * per_user
    return pd.DataFrame(
        {
            "boat": np.repeat(np.arange(n_users), per_user),
            "x": 500_000 + rng.uniform(-12_000, 12_000, n),
            "y": 4_500_000 + rng.uniform(-12_000, 12_000, n),
            "hour": np.tile(np.arange(per_user), n_users),
            "time": pd.Timestamp("2020-12-01", tz="UTC")
            + pd.to_timedelta(np.tile(np.arange(per_user), n_users), unit="h"),
        }
    )


def _bound(df, session):
    return df.geopriv(session, user="boat", x="x", y="y", crs=CRS)


def _true_count(df, region):
    return int(shapely.contains_xy(region, df["x"].to_numpy(), df["y"].to_numpy()).sum())


# ---------------------------------------------------------------------------------------------
# bad input leaves the ledger untouched


@pytest.mark.parametrize(
    "region, match",
    [
        (shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)]), "invalid polygon"),
        (shapely.Polygon(), "empty"),
        (shapely.Point(500_000, 4_500_000), "Polygon"),
        (gpd.GeoSeries([], crs=CRS), "empty"),
        (gpd.GeoSeries([BOX, shapely.LineString([(0, 0), (1, 1)])], crs=CRS), "non-polygon"),
    ],
)
def test_invalid_or_empty_region_raises_and_leaves_ledger_untouched(region, match):
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _bound(_pings(), s)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=match):
        range_count(b, region, rho=1e-4)
    assert s.ledger.snapshot() == before


def test_region_whose_crs_cannot_be_matched_raises_crs_error_and_leaves_ledger_untouched():
    df = _pings()
    lon, lat = (
        gpd.GeoSeries(gpd.points_from_xy(df.x, df.y), crs=CRS)
        .to_crs(4326)
        .pipe(lambda g: (g.x, g.y))
    )
    deg = pd.DataFrame({"boat": df.boat, "lon": lon, "lat": lat})
    s = Session(budget=gp.CGP(rho=1e-3))
    b = deg.geopriv(s, user="boat", lon="lon", lat="lat", crs="EPSG:4326", to_crs=CRS)
    before = s.ledger.snapshot()
    with pytest.raises(gp.CRSError, match="degree"):
        range_count(b, BOX, rho=1e-4)  # metres passed as the degree data's CRS
    with pytest.raises(gp.InvalidInputError):  # latitude beyond the pole
        range_count(b, gpd.GeoSeries([shapely.box(0, 95, 1, 96)], crs=4326), rho=1e-4)
    assert s.ledger.snapshot() == before
    # the same box with its CRS is reprojected and counts
    res = range_count(b, gpd.GeoSeries([BOX], crs=CRS), rho=1e-3, rng=seeded_rng(1))
    assert abs(int(res.counts.iloc[0]) - _true_count(df, BOX)) <= res.regions["error"].iloc[0] + 5


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"rho": 1e-4, "method": "elim"}, "method='elim' is not one of"),
        ({"rho": 1e-4, "split": "halving"}, "split"),
        ({"rho": 1e-4, "beta": 1.5}, "beta"),
        ({"eps": 1e-2}, "CGP"),
        ({}, "exactly one"),
        ({"rho": 1e-4, "component": ("nope", 1)}, "nope"),
        ({"rho": 1e-4, "reduce": "mean"}, "reduce='mean'"),
    ],
)
def test_bad_parameters_raise_before_the_ledger(kw, match):
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _bound(_pings(), s)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=match):
        range_count(b, BOX, **kw)
    assert s.ledger.snapshot() == before


# ---------------------------------------------------------------------------------------------
# charges, savings, exclusions


def test_savings_are_visible_in_session_remaining():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    res = range_count(_bound(df, s), BOX, rho=1e-4, rounds=10, rng=seeded_rng(2))
    assert isinstance(res, RangeCountResult)
    ch = res.charges
    assert (ch <= 1e-4 + 1e-18).all() and (ch < 1e-4).sum() > 150  # most users decided early
    rem = s.remaining(ch.index.tolist())
    np.testing.assert_allclose(rem.to_numpy(), 1e-3 - ch.to_numpy(), rtol=0, atol=1e-15)
    assert res.saved == pytest.approx(float((res.allocations - ch).sum()))
    assert 0 < res.saving_fraction < 1
    assert int(res.rounds_histogram.sum()) == res.n_charged == 200
    assert res.value == pytest.approx(_true_count(df, BOX), abs=res.error + 3)


def test_charges_equal_the_rounds_run_doubling_split():
    """spec §4.6: a user stopped after r of c rounds pays a·(2^r − 1)/(2^c − 1)."""
    s = Session(budget=gp.CGP(rho=1e-3))
    res = range_count(_bound(_pings(), s), BOX, rho=1e-4, rounds=4, split="doubling",
                      rng=seeded_rng(3))  # fmt: skip
    allowed = {round(1e-4 * (2**r - 1) / 15, 12) for r in range(1, 5)}
    assert {round(v, 12) for v in res.charges} <= allowed


def test_exhausted_users_are_excluded_counted_and_charged_nothing():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    poor = list(range(10))
    s.set_budget(poor, gp.CGP(rho=1e-5))  # cannot pay rho=1e-4
    res = range_count(_bound(df, s), BOX, rho=1e-4, rng=seeded_rng(4))
    assert res.n_excluded == 10 and sorted(res.excluded) == poor
    assert res.n_charged == 190
    assert (s.spent(poor) == 0).all()
    assert int(res.to_frame()["n_excluded"].iloc[0]) == 10


def test_gp_session_uses_laplace_and_charges_eps():
    s = Session(budget=gp.GP(eps=1.0))
    res = range_count(_bound(_pings(), s), BOX, eps=0.05, method="dist", rng=seeded_rng(5))
    assert res.kind == "gp" and res.mechanism == "laplace_gp"
    assert np.allclose(res.charges, 0.05)


# ---------------------------------------------------------------------------------------------
# regions and components


def test_geoseries_of_regions_gives_one_row_per_region_with_their_index():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-2))
    zones = gpd.GeoSeries(
        [BOX, shapely.box(500_000, 4_500_000, 510_000, 4_510_000).difference(
            shapely.box(503_000, 4_503_000, 506_000, 4_506_000))],  # a hole
        index=["west", "holey"], crs=CRS,
    )  # fmt: skip
    res = range_count(_bound(df, s), zones.to_crs(4326), rho=1e-3, rng=seeded_rng(6))
    tab = res.to_frame()
    assert list(tab.index) == ["west", "holey"] and isinstance(res.value, gpd.GeoDataFrame)
    assert {"count", "error", "n_charged", "saving", "geometry"} <= set(tab.columns)
    assert tab.crs.to_epsg() == 4326
    for name, reg in zones.items():
        assert abs(int(tab.loc[name, "count"]) - _true_count(df, reg)) <= tab.loc[name, "error"] + 5
    # two regions = two queries: each user pays up to 2 rho
    assert (res.charges <= 2e-3 + 1e-15).all() and res.charges.max() > 1e-3 / 1023


def test_component_column_value_and_last_before_time():
    df = _pings(n_users=50, per_user=3)
    s = Session(budget=gp.CGP(rho=1e-2))
    b = _bound(df, s)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="several rows in the selected component"):
        range_count(b, BOX, rho=1e-4)
    assert s.ledger.snapshot() == before
    r1 = range_count(b, BOX, rho=1e-3, component=("hour", 1), rng=seeded_rng(7))
    assert r1.n_charged == 50
    one = df[df.hour == 1]
    assert abs(r1.value - _true_count(one, BOX)) <= r1.error + 3
    r2 = range_count(b, BOX, rho=1e-3, component=Last("time", before="2020-12-01 01:30"),
                     rng=seeded_rng(8))  # fmt: skip
    assert r2.n_charged == 50
    r3 = range_count(b, BOX, rho=1e-3, reduce="last", rng=seeded_rng(9))
    assert r3.n_charged == 50
    r4 = range_count(b, BOX, rho=1e-3, component=lambda f: f["hour"] == 2, rng=seeded_rng(10))
    assert r4.n_charged == 50
    # several components of a user charge the same filter (spec §1.6)
    assert (s.spent() <= 4e-3 + 1e-15).all() and s.spent().max() > 0


def test_plot_draws_regions_with_a_colour_bar():
    import matplotlib

    matplotlib.use("Agg")
    s = Session(budget=gp.CGP(rho=1e-2))
    zones = gpd.GeoSeries([BOX, shapely.box(505_000, 4_495_000, 515_000, 4_505_000)], crs=CRS)
    res = range_count(_bound(_pings(), s), zones, rho=1e-3, rng=seeded_rng(11))
    ax = res.plot()
    assert len(ax.figure.axes) == 2  # the map and its colour bar
    import matplotlib.pyplot as plt

    plt.close(ax.figure)


# ---------------------------------------------------------------------------------------------
# Algorithm 3 through the session


def test_plan_reuses_savings_and_never_exceeds_the_total():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _bound(df, s)
    p = plan(s, total=4e-4, queries=4, schedule="even")
    allocs = []
    for t in range(4):
        res = range_count(b, BOX, allocations=p, rng=seeded_rng(20 + t))
        allocs.append(res.allocations)
    assert p.t == 4
    spent = s.spent()
    assert (spent <= 4e-4 + 1e-15).all()
    # the first query gets B/T; later ones get more for users who saved
    assert np.allclose(allocs[0], 1e-4)
    assert (allocs[3] > 1e-4 + 1e-12).mean() > 0.9


def test_plan_series_allocations_and_record():
    s = Session(budget=gp.CGP(rho=1e-3))
    df = _pings()
    b = _bound(df, s)
    p = plan(s, total=2e-4, queries=2, schedule="linear", users=df.boat.unique())
    a = p.next_allocations()
    res = range_count(b, BOX, allocations=a, rng=seeded_rng(30))
    p.record(res)
    a2 = p.next_allocations()
    assert (a2.astype(float) >= 1e-4 - 1e-15).all() and a2.astype(float).max() > 1.5e-4


# ---------------------------------------------------------------------------------------------
# through the accessor (after wiring)


@wired
def test_accessor_range_count_delegates():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    res = df.geopriv(s, user="boat", x="x", y="y", crs=CRS).range_count(
        BOX, rho=1e-4, rng=seeded_rng(40)
    )
    assert isinstance(res, RangeCountResult) and res.n_charged == 200


@wired
def test_accessor_invalid_region_leaves_ledger_untouched():
    s = Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError):
        _pings().geopriv(s, user="boat", x="x", y="y", crs=CRS).range_count(
            shapely.Polygon(), rho=1e-4
        )
    assert s.ledger.snapshot() == before


@wired
def test_accessor_geoseries_and_component():
    df = _pings(n_users=40, per_user=2)
    s = Session(budget=gp.CGP(rho=1e-2))
    zones = gpd.GeoSeries([BOX, BOX.buffer(-2000)], index=["a", "b"], crs=CRS)
    res = df.geopriv(s, user="boat", x="x", y="y", crs=CRS).range_count(
        zones, rho=1e-3, component=("hour", 0), rng=seeded_rng(41)
    )
    assert list(res.to_frame().index) == ["a", "b"] and res.n_charged == 40


def test_ledger_charge_is_the_array_paths_exact_charge_in_units():
    """The driver charges int64 units grouped by value: the same units as converting each
    user's exact ``Fraction`` charge of the array path (same seed, same noise) one by one."""
    from gpframe.accounting.amounts import exact
    from gpframe.queries.range_count import range_count_arrays

    df = _pings(n_users=300)
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _bound(df, s)
    res = range_count(b, BOX, rho=1e-4, rounds=10, rng=seeded_rng(5))
    lu = s.ledger.units["metric"]
    p = b.projected
    alloc = np.full(len(p.users), lu.to_fraction(lu.up(exact(1e-4, "rho"))))
    out = range_count_arrays(
        p.xy, np.asarray(p.users), BOX, kind="cgp", amount=alloc, method="dist-elim",
        rounds=10, split="doubling", beta=0.05, unit=1 / lu.scale, scale_max=p.scale_max,
        rng=seeded_rng(5),
    )  # fmt: skip
    assert out.estimate == res.value
    (row,) = s.ledger.store.charges()
    expected = np.array([lu.up(c) for c in out.charges], dtype=np.int64)
    assert len(set(out.charges.tolist())) > 2  # users stopped at different rounds
    np.testing.assert_array_equal(row.amount, expected[row.idx])  # fresh ledger: idx = position


# ---------------------------------------------------------------------------------------------
# a GeoDataFrame of zones keeps its own (public) columns


def _zones():
    return gpd.GeoDataFrame(
        {"name": ["west", "east"], "population": [1200, 3400],
         "opened": pd.to_datetime(["2001-01-01", "2002-02-02"], utc=True)},
        geometry=[BOX, shapely.box(505_000, 4_495_000, 515_000, 4_505_000)],
        index=pd.Index(["w", "e"], name="zone"), crs=CRS,
    ).rename_geometry("shape")  # fmt: skip


def test_geodataframe_of_zones_keeps_its_columns_beside_the_counts():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-2))
    zones = _zones()
    res = range_count(_bound(df, s), zones, rho=1e-3, rng=seeded_rng(8))
    tab = res.to_frame()
    assert list(tab.columns[:3]) == ["name", "population", "opened"]
    assert tab.index.equals(zones.index) and tab.geometry.name == "shape"
    pd.testing.assert_series_equal(tab["population"], zones["population"])
    pd.testing.assert_series_equal(tab["opened"], zones["opened"])
    assert {"count", "error", "n_charged", "query_id"} <= set(tab.columns)
    assert tab.geometry.geom_equals(zones.geometry).all()


def test_zone_column_named_like_a_released_column_is_refused_before_the_ledger():
    s = Session(budget=gp.CGP(rho=1e-2))
    b = _bound(_pings(), s)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=r"'count'.*rename.*Nothing was charged"):
        range_count(b, _zones().assign(count=[1, 2]), rho=1e-3)
    assert s.ledger.snapshot() == before
