"""``ddf.geopriv(..., partition=...)`` on a LocalCluster, against the pandas face (wide-extents.md).

A split by a public column gives each part its own metric CRS; the call is one query and a user
is charged once per part they have rows in. The Dask face charges exactly what the pandas face
charges (ledger units, user by user, one charge row, one query id), states the same Result
(each part's CRS, scale and inflation, the same error bound) and refuses the same bad input
before the ledger is touched.
"""

from __future__ import annotations

import json

import dask.dataframe as dd
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

from .fields import SUMMARY, assert_same

AK = (-170.0, 51.0, -130.0, 72.0)
PR = (-68.0, 17.5, -65.0, 18.7)
KW = {"user": "uid", "lon": "lon", "lat": "lat", "crs": "EPSG:4326", "partition": "region"}


def _data(n=160):
    rs = np.random.default_rng(7)  # true points only, never noise
    ak = pd.DataFrame({"uid": rs.integers(0, 30, n), "lon": rs.uniform(-160, -140, n),
                       "lat": rs.uniform(58, 66, n), "region": "AK"})  # fmt: skip
    pr = pd.DataFrame({"uid": rs.integers(20, 50, n), "lon": rs.uniform(-67.2, -65.3, n),
                       "lat": rs.uniform(17.9, 18.5, n), "region": "PR"})  # fmt: skip
    return pd.concat([ak, pr], ignore_index=True)


def _units(s):
    """Each user's charges in exact ledger units, and the number of charge rows."""
    out: dict = {}
    rows = list(s.ledger.store.charges())
    for c in rows:
        for i, a in zip(c.idx.tolist(), c.amount.tolist(), strict=True):
            out.setdefault(s.ledger._index[i], []).append(int(a))
    return out, len(rows)


@pytest.mark.slow  # the default run has one case, in test_privatize.py (its module's cluster)
@pytest.mark.parametrize("per,to", [("user", False), ("point", True)])
def test_split_privatize_charges_and_states_what_the_pandas_face_does(cluster, tmp_path, per, to):
    df = _data()
    dom = {"AK": AK, "PR": PR}
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1.0)), gp.Session(budget=gp.CGP(rho=1.0))
    a = df.geopriv(s_pd, domain=dom, **KW).privatize(rho=1e-4, per=per, rng=seeded_rng(1))
    bound = dd.from_pandas(df, npartitions=3).geopriv(s_dk, domain=dom, **KW)
    target = tmp_path / "out"
    b = bound.privatize(rho=1e-4, per=per, rng=seeded_rng(2), to=target if to else None)
    assert (df.groupby("uid")["region"].nunique() == 2).sum() >= 5  # users who pay twice
    assert _units(s_dk) == _units(s_pd)  # the same units per user, one charge row each
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    ra = a.attrs["geopriv"]
    rb = b if to else b.attrs["geopriv"]
    assert {q for u in s_dk.spent().index for q in s_dk.history(u)["query_id"]} == {rb.query_id}
    da, db = ra.to_dict(value=False), rb.to_dict(value=False)
    assert_same(da, db, (*SUMMARY, "error"))
    pa, pb = dict(da["params"]), dict(db["params"])
    pa.pop("sampler_calls"), pb.pop("sampler_calls"), pb.pop("output", None)
    assert pa == pb  # each part's CRS, scale, inflation and points; the worst part's on top
    assert {p["value"] for p in pb["partitions"]} == {"AK", "PR"}
    out = gpd.read_parquet(target) if to else b
    if to:
        saved = json.loads((target / "_gpframe_result.json").read_text())
        assert saved["query_id"] == rb.query_id
    assert sorted(out.index) == sorted(a.index)  # every row once
    out = out.loc[a.index]
    assert list(out.columns) == list(a.columns)
    assert (out["region"].to_numpy() == df["region"].to_numpy()).all()  # the public column
    # each part's points stay near their own true points (noised in the part's CRS)
    assert np.abs(out["lon"].to_numpy() - df["lon"].to_numpy()).max() < 1.0


@pytest.mark.parametrize("change,match", [
    ({"partition": "nope"}, "not a column"),
    ({"partition": "lon"}, "holds the coordinates"),
    ({"to_crs": "EPSG:32618"}, "to_crs="),
    ({"domain": {"AK": AK}}, "no public extent for the part"),
    ({"domain": None}, "chosen from public information"),
    pytest.param({"partition": "zone", "domain": (-170.0, 17.5, -65.0, 72.0)}, "UTM zone number",
                 marks=pytest.mark.slow),
    ({"partition": "gap"}, "missing values"),
])  # fmt: skip
def test_a_bad_split_is_refused_before_the_ledger_is_touched(change, match):
    # no cluster needed to refuse: the first pass runs on dask's local scheduler here
    df = _data(40)
    lon = df["lon"].to_numpy()
    df["zone"] = (np.floor((lon + 180.0) / 6.0).astype(np.int64) % 60) + 1
    df["gap"] = df["region"].where(df.index != 7)
    s = gp.Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    kw = {**KW, "domain": {"AK": AK, "PR": PR}, "public": ["zone", "gap"], **change}
    with pytest.raises(gp.GpframeError, match=match) as err:
        dd.from_pandas(df, npartitions=2).geopriv(s, **kw).privatize(rho=1e-4)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_operations_without_a_split_refuse_it():
    s = gp.Session(budget=gp.CGP(rho=1.0))
    bound = dd.from_pandas(_data(40), npartitions=2).geopriv(s, domain={"AK": AK, "PR": PR},
                                                             **KW)  # fmt: skip
    before = s.ledger.snapshot()
    with pytest.raises(gp.GpframeError, match="does not support partition='region'"):
        bound.kde_raster(rho=1e-4, bandwidth_m=500.0)
    assert s.ledger.snapshot() == before


def _zones():
    """Two zones in lon/lat, one in each part (a GeoDataFrame with a public column)."""
    import shapely

    return gpd.GeoDataFrame({"name": ["ak", "pr"]},
                            geometry=[shapely.box(-155, 60, -145, 64),
                                      shapely.box(-66.8, 18.0, -65.8, 18.4)],
                            crs="EPSG:4326")  # fmt: skip


@pytest.mark.slow  # the default run covers it through tests/canary (synchronous scheduler)
@pytest.mark.parametrize("method", ["dist", "pt-elim"])
def test_split_range_count_charges_and_states_what_the_pandas_face_does(cluster, method):
    # one reservation per zone on both faces, each user's point in its own part's CRS: the
    # same per-user charges in exact ledger units (the one-round method charges the
    # allocation; the elimination a user's rounds, which depend on noise: compared by total)
    df = _data()
    dom = {"AK": AK, "PR": PR}
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1.0)), gp.Session(budget=gp.CGP(rho=1.0))
    call = {"rho": 1e-4, "method": method, "component": gp.Last("lon")}
    a = df.geopriv(s_pd, domain=dom, **KW).range_count(_zones(), rng=seeded_rng(1), **call)
    b = (
        dd.from_pandas(df, npartitions=3)
        .geopriv(s_dk, domain=dom, **KW)
        .range_count(_zones(), rng=seeded_rng(2), **call)
    )
    ua, ub = _units(s_pd), _units(s_dk)
    assert ua[1] == ub[1] == 2  # one charge row per zone
    if method == "dist":
        assert ub == ua
    assert sorted(ub[0]) == sorted(ua[0])  # the same users charged
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    keys = (
        "type",
        "error_kind",
        "confidence",
        "mechanism",
        "guarantee",
        "n_users",
        "n_charged",
        "n_excluded",
    )
    if method == "dist":
        keys += ("charges", "spent_total", "spent_max", "error")
    for key in keys:
        assert da[key] == db[key], key
    pa, pb = dict(da["params"]), dict(db["params"])
    assert pa.keys() == pb.keys()
    for key in (
        "method",
        "rounds",
        "beta",
        "n_regions",
        "crs_m",
        "scale_max",
        "noise_inflation",
        "partition",
        "partitions",
    ):
        assert pa[key] == pb[key], key
    assert list(a.regions.columns) == list(b.regions.columns)
    assert pb["partitions"][0]["value"] == "AK"
    # the same count up to the two faces' independent noise
    va, vb = a.regions["count"].to_numpy(), b.regions["count"].to_numpy()
    assert (np.abs(va - vb) <= a.regions["error"].to_numpy() + b.regions["error"].to_numpy()
            + 10).all()  # fmt: skip


@pytest.mark.slow  # the default run covers both through tests/canary (synchronous scheduler)
@pytest.mark.parametrize("op", ["knn", "convex_hull"])
def test_split_knn_and_hull_charge_and_state_what_the_pandas_face_does(cluster, op):
    # per-user mechanisms, one release per (user, part): each user pays the amount once per part
    df = _data()
    dom = {"AK": AK, "PR": PR}
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1.0)), gp.Session(budget=gp.CGP(rho=1.0))
    bound_pd = df.geopriv(s_pd, domain=dom, **KW)
    bound_dk = dd.from_pandas(df, npartitions=3).geopriv(s_dk, domain=dom, **KW)
    if op == "knn":
        import shapely

        at = shapely.Point(-150.0, 62.0)
        a = bound_pd.knn(at, 2, rho=1e-3, rng=seeded_rng(1))
        b = bound_dk.knn((-150.0, 62.0), 2, rho=1e-3, rng=seeded_rng(2))
    else:
        a = bound_pd.convex_hull(rho=1e-3, rng=seeded_rng(1))
        b = bound_dk.convex_hull(rho=1e-3, rng=seeded_rng(2))
    assert _units(s_dk) == _units(s_pd)  # the amount × parts, user by user, one charge row
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    da, db = ra.to_dict(value=False), rb.to_dict(value=False)
    assert_same(da, db, SUMMARY)
    pa, pb = dict(da["params"]), dict(db["params"])
    pa.pop("capped", None), pb.pop("capped", None)
    assert pa == pb  # each part's CRS (and knn's query point in its metres)
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    if op == "convex_hull":  # one row per (user, part)
        key = ["uid", "region"]
        assert sorted(map(tuple, a[key].to_numpy().tolist())) == sorted(
            map(tuple, b[key].to_numpy().tolist())
        )
        assert b.crs == a.crs
    else:
        assert sorted(ra.value) == sorted(rb.value)  # the same users answered


@pytest.mark.slow
@pytest.mark.parametrize("op", ["privatize", "range_count", "knn", "convex_hull"])
def test_a_split_dry_run_plans_the_pandas_reservation_and_touches_nothing(cluster, op):
    calls = {
        "privatize": lambda b: b.privatize(rho=1e-4, dry_run=True),
        "range_count": lambda b: b.range_count(_zones(), rho=1e-4, reduce="last", dry_run=True),
        "knn": lambda b: b.knn((-150.0, 62.0), 2, rho=1e-3, dry_run=True),
        "convex_hull": lambda b: b.convex_hull(rho=1e-3, dry_run=True),
    }
    df = _data(40)
    dom = {"AK": AK, "PR": PR}
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1.0)), gp.Session(budget=gp.CGP(rho=1.0))
    before = s_dk.ledger.snapshot()
    a = calls[op](df.geopriv(s_pd, domain=dom, **KW))
    b = calls[op](dd.from_pandas(df, npartitions=2).geopriv(s_dk, domain=dom, **KW))
    assert s_dk.ledger.snapshot() == before
    ta, tb = a.to_frame(), b.to_frame()
    pd.testing.assert_series_equal(tb["allocation"].sort_index(), ta["allocation"].sort_index())
    assert a.error == pytest.approx(b.error)
