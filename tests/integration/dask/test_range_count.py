"""The Dask face's range_count on a LocalCluster, against the pandas face (beyond-one-machine.md).

Same Result fields and charges (exactly for the one-round methods, whose charge is the
allocation; by a seeded chi-squared test on the rounds histogram for the elimination), the count
exact where every user is far from the boundary, refusals before the ledger is touched.
"""

from __future__ import annotations

import dask.dataframe as dd
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely
from scipy import stats

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

from .fields import RANGE_PARAMS, SUMMARY, assert_same

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
ZONE = shapely.box(498_000, 4_498_000, 502_000, 4_502_000)
#: three zones with a public column of their own (kept in the table of regions)
ZONES = gpd.GeoDataFrame(
    {"name": ["west", "centre", "east"], "pop": [10, 20, 30]},
    geometry=[shapely.box(494_000 + 4_000 * k, 4_498_000, 498_000 + 4_000 * k, 4_502_000)
              for k in range(3)], crs=CRS,
)  # fmt: skip


def _tracks(n_users=400, seed=0, spread=6_000):
    r = np.random.default_rng(seed)  # true points only, never noise
    counts = r.integers(1, 4, n_users)
    u = np.repeat(np.arange(n_users), counts)
    return pd.DataFrame({
        "u": u, "t": r.permutation(u.size),
        "x": 500_000 + r.uniform(-spread, spread, u.size),
        "y": 4_500_000 + r.uniform(-spread, spread, u.size),
    })  # fmt: skip


def _both(df, **call):
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    a = df.geopriv(s_pd, **KW).range_count(ZONE, rng=seeded_rng(1), **call)
    b = (
        dd.from_pandas(df, npartitions=4)
        .geopriv(s_dk, **KW)
        .range_count(ZONE, rng=seeded_rng(2), **call)
    )
    return (s_pd, a), (s_dk, b)


def test_one_round_counts_charge_and_report_as_the_pandas_face(cluster):
    df = _tracks()
    (s_pd, a), (s_dk, b) = _both(df, rho=1e-5, method="dist", component=gp.Last("t"))
    assert type(a) is type(b)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, (*SUMMARY, "saved"))
    pa, pb = dict(da["params"]), dict(db["params"])
    assert pa.keys() == pb.keys()
    assert_same(pa, pb, RANGE_PARAMS)
    assert list(a.regions.columns) == list(b.regions.columns)
    assert s_dk.ledger.verify()["charges"] == 1


def test_far_from_the_boundary_the_count_is_exact(cluster):
    r = np.random.default_rng(5)
    inside = r.uniform(-500, 500, (60, 2)) + np.array([500_000, 4_500_000])
    outside = r.uniform(-500, 500, (40, 2)) + np.array([530_000, 4_530_000])
    xy = np.vstack([inside, outside])
    df = pd.DataFrame({"u": np.arange(100), "t": 0, "x": xy[:, 0], "y": xy[:, 1]})
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    res = dd.from_pandas(df, npartitions=3).geopriv(s, **KW).range_count(ZONE, rho=1e-4)
    assert res.value == 60 and res.error == 0 and res.n_charged == 100
    assert res.saved > 0  # decided early: most of the allocation stays in the budget


@pytest.mark.statistical
def test_elimination_rounds_follow_the_pandas_law(cluster):
    # chi-squared test of homogeneity on the rounds histograms: each user's stopping round is
    # an independent draw with the same law on both faces; seeded, false-failure probability
    # 1e-4 under the null. Noise at twice or half the scale moves the histogram by whole rounds
    # and fails it (p < 1e-10 with these 3,000 users). The union bound's n (the query's, not
    # the partition's) changes the thresholds by a log factor only, below what this detects.
    df = _tracks(n_users=3000, seed=2)
    (_, a), (_, b) = _both(df, rho=2e-5, method="dist-elim", component=gp.Last("t"))
    ha, hb = np.asarray(a.rounds_histogram), np.asarray(b.rounds_histogram)
    keep = (ha + hb) > 0
    p = stats.chi2_contingency(np.vstack([ha[keep], hb[keep]]))[1]
    assert p > 1e-4, (ha, hb, p)
    assert abs(a.value - b.value) <= a.error + b.error + 60  # the same count, up to noise


@pytest.mark.parametrize("region,call,match", [
    (shapely.Point(0, 0), {"rho": 1e-5, "component": gp.Last("t")}, "shapely Polygon"),
    (ZONE, {"rho": 1e-5}, "several rows"),
    (ZONE, {"rho": 1e-5, "method": "nope", "component": gp.Last("t")}, "method='nope'"),
    (ZONE, {"eps": 1e-3, "component": gp.Last("t")}, "filters are CGP"),
    (ZONE, {"rho": 1e-5, "component": ("t", -1)}, "no rows"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, region, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    with pytest.raises(gp.GpframeError, match=match) as err:
        dd.from_pandas(_tracks(50), npartitions=2).geopriv(s, **KW).range_count(region, **call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def _charged_units(s):
    """Each user's charges, per zone in order, in exact ledger units."""
    out: dict = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), c.amount.tolist(), strict=True):
            out.setdefault(s.ledger._index[i], []).append(int(a))
    return out


def test_zones_frame_counts_charge_and_report_as_the_pandas_face(cluster):
    # one reservation per zone on both faces: the same per-user charges in exact ledger units,
    # the same Result fields and the same table of regions (the zones' public columns first)
    df = _tracks()
    call = {"rho": 1e-5, "method": "dist", "component": gp.Last("t")}
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    a = df.geopriv(s_pd, **KW).range_count(ZONES, rng=seeded_rng(1), **call)
    b = (
        dd.from_pandas(df, npartitions=4)
        .geopriv(s_dk, **KW)
        .range_count(ZONES, rng=seeded_rng(2), **call)
    )
    assert type(a) is type(b)
    assert s_dk.ledger.verify()["charges"] == s_pd.ledger.verify()["charges"] == 3
    assert _charged_units(s_dk) == _charged_units(s_pd)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, (*SUMMARY, "error", "saved"))
    pa, pb = dict(da["params"]), dict(db["params"])
    assert pa.keys() == pb.keys()
    assert_same(pa, pb, RANGE_PARAMS)
    ta, tb = a.regions, b.regions
    assert list(ta.columns) == list(tb.columns) and list(ta.columns[:2]) == ["name", "pop"]
    assert ta.index.equals(tb.index) and ta.crs == tb.crs
    assert ta.geometry.geom_equals(tb.geometry).all()
    for col in ("name", "pop", "n_charged", "n_excluded", "saving"):
        assert ta[col].tolist() == tb[col].tolist(), col
    assert len(set(tb["query_id"])) == 3  # one ledger query per zone


def test_zones_far_from_their_edges_count_exactly_in_any_crs(cluster):
    # 30 + 20 + 10 users at the zones' centres, 15 far outside: both faces count them exactly;
    # the zones come in degrees and are projected to the data's metric CRS first
    r = np.random.default_rng(7)  # true points only, never noise
    centres = (
        [(496_000, 4_500_000)] * 30
        + [(500_000, 4_500_000)] * 20
        + [(504_000, 4_500_000)] * 10
        + [(530_000, 4_530_000)] * 15
    )
    xy = np.asarray(centres, float) + r.uniform(-300, 300, (len(centres), 2))
    df = pd.DataFrame({"u": np.arange(len(xy)), "t": 0, "x": xy[:, 0], "y": xy[:, 1]})
    zones = ZONES.to_crs("EPSG:4326")
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    a = df.geopriv(s_pd, **KW).range_count(zones, rho=1e-4, rng=seeded_rng(3))
    b = (
        dd.from_pandas(df, npartitions=3)
        .geopriv(s_dk, **KW)
        .range_count(zones, rho=1e-4, rng=seeded_rng(4))
    )
    assert b.regions["count"].tolist() == a.regions["count"].tolist() == [30, 20, 10]
    assert b.regions["error"].tolist() == [0.0, 0.0, 0.0]
    assert b.regions.crs == zones.crs and b.n_charged == len(xy)


def _bowtie():
    return shapely.Polygon([(494_000, 4_498_000), (498_000, 4_502_000),
                            (498_000, 4_498_000), (494_000, 4_502_000)])  # fmt: skip


@pytest.mark.parametrize("zones,match", [
    (ZONES.set_geometry([*ZONES.geometry[:2], _bowtie()]), "invalid|not valid"),
    (ZONES.set_crs("EPSG:4326", allow_override=True), "outside degree ranges"),
    (gpd.GeoSeries(list(ZONES.geometry), crs="EPSG:4326"), "outside degree ranges"),
    (ZONES.rename(columns={"pop": "count"}), "rename them first"),
    (ZONES.iloc[:0], "empty"),
])  # fmt: skip
def test_a_bad_zone_is_refused_before_the_ledger_is_touched(cluster, zones, match):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    with pytest.raises(gp.GpframeError, match=match) as err:
        dd.from_pandas(_tracks(50), npartitions=2).geopriv(s, **KW).range_count(
            zones, rho=1e-5, component=gp.Last("t")
        )
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_each_zone_draws_its_own_noise(cluster):
    # the same zone twice: two queries, two charges, two independent draws (a child stream per
    # zone and partition); reused bits would release the same count twice
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    twice = gpd.GeoSeries([ZONE, ZONE], crs=CRS)
    res = (
        dd.from_pandas(_tracks(), npartitions=4)
        .geopriv(s, **KW)
        .range_count(twice, rho=1e-6, method="dist", component=gp.Last("t"), rng=seeded_rng(5))
    )
    first, second = res.regions["count"].tolist()
    assert first != second
    assert s.ledger.verify()["charges"] == 2


# ---------------------------------------------------------------------------------------------
# allocations=, plans and progress= (the pandas face's)


def _pair(df, npartitions=3):
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    return (s_pd, df.geopriv(s_pd, **KW)), (
        s_dk,
        dd.from_pandas(df, npartitions=npartitions).geopriv(s_dk, **KW),
    )


def test_per_user_allocations_charge_and_report_as_the_pandas_face(cluster):
    # a Series by user: the users it misses are not asked (not reserved, reported excluded);
    # the one-round method charges each asked user its allocation, exactly
    df = _tracks(200)
    (s_pd, a_b), (s_dk, b_b) = _pair(df)
    users = np.arange(0, 200, 2)  # the odd users are not asked
    alloc = pd.Series(np.where(users % 4 == 0, 1e-5, 2e-5), index=users)
    call = {"method": "dist", "component": gp.Last("t"), "allocations": alloc}
    a = a_b.range_count(ZONES, rng=seeded_rng(1), progress=True, **call)
    b = b_b.range_count(ZONES, rng=seeded_rng(2), progress=True, **call)
    assert _charged_units(s_dk) == _charged_units(s_pd)
    assert set(s_dk.spent().index) == set(users.tolist())
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    for key in ("n_users", "n_charged", "n_excluded", "charges", "spent_total", "spent_max"):
        assert da[key] == db[key], key
    pd.testing.assert_series_equal(b.allocations.sort_index(), a.allocations.sort_index())
    for col in ("n_charged", "n_excluded"):
        assert a.regions[col].tolist() == b.regions[col].tolist(), col


def test_a_plan_gives_each_region_its_allocations_and_records_them_as_on_pandas(cluster):
    # Algorithm 3 through session.plan: three counts on each face; with the one-round method
    # the charges are the allocations, so both plans take the same steps, unit for unit
    from gpframe.ledger.plan import plan

    df = _tracks(150)
    (s_pd, a_b), (s_dk, b_b) = _pair(df)
    p_pd = plan(s_pd, total=3e-5, queries=3, schedule="linear")
    p_dk = plan(s_dk, total=3e-5, queries=3, schedule="linear")
    call = {"method": "dist", "component": gp.Last("t")}
    for t in range(3):
        a = a_b.range_count(ZONE, allocations=p_pd, rng=seeded_rng(10 + t), **call)
        b = b_b.range_count(ZONE, allocations=p_dk, rng=seeded_rng(20 + t), **call)
        pd.testing.assert_series_equal(b.allocations.sort_index(), a.allocations.sort_index())
    assert p_dk.t == p_pd.t == 3
    assert _charged_units(s_dk) == _charged_units(s_pd)
    assert (s_dk.spent() <= 3e-5 + 1e-15).all()


@pytest.mark.parametrize("call,match", [
    ({"rho": 1e-5, "allocations": 1e-5}, "not both"),
    ({"allocations": np.ones(3) * 1e-5}, "allocations has shape"),
    ({"allocations": "plan", "dry_run": True}, "dry_run=True with allocations=plan"),
])  # fmt: skip
def test_bad_allocations_are_refused_before_the_ledger_is_touched(cluster, call, match):
    from gpframe.ledger.plan import plan

    s = gp.Session(budget=gp.CGP(rho=1e-3))
    if isinstance(call.get("allocations"), str):
        call = {**call, "allocations": plan(s, total=3e-5, queries=3)}
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_tracks(50), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.range_count(ZONE, component=gp.Last("t"), **call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before
