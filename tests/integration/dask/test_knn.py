"""The Dask face's knn and convex_hull on a LocalCluster, against the pandas face.

See beyond-one-machine.md. knn: same charges and Result fields, the same rows (labels, public
columns, ranks) for users whose nearest rows are far apart, the same rank law (seeded
chi-squared on which row wins rank 1), refusals before the ledger is touched. convex_hull: below.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import shapely
from scipy import stats

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

from .fields import CHARGED, assert_same

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
Q = (500_000.0, 4_500_000.0)


def _rows(n_users=200, per=4, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(n_users), per)
    # each user's rows at 100 m, 2 km, 5 km and 9 km from the query point
    d = np.tile([100.0, 2_000.0, 5_000.0, 9_000.0][:per], n_users)
    a = r.uniform(0, 2 * np.pi, u.size)
    return pd.DataFrame({"u": u, "t": np.arange(u.size), "x": Q[0] + d * np.cos(a),
                         "y": Q[1] + d * np.sin(a)})  # fmt: skip


def _both(df, **call):
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-2)), gp.Session(budget=gp.CGP(rho=1e-2))
    a = df.geopriv(s_pd, **KW).knn(Q, rng=seeded_rng(1), **call)
    b = dd.from_pandas(df, npartitions=4).geopriv(s_dk, **KW).knn(Q, rng=seeded_rng(2), **call)
    return (s_pd, a), (s_dk, b)


def test_rows_charges_and_result_match_the_pandas_face(cluster):
    df = _rows()
    (s_pd, a), (s_dk, b) = _both(df, k=2, rho=1e-3)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert list(a.columns) == list(b.columns) == ["u", "t", "knn_rank"]
    assert len(a) == len(b) == 400
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    da, db = ra.to_dict(value=False), rb.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, (*CHARGED, "confidence"))
    pa, pb = dict(da["params"]), dict(db["params"])
    pa.pop("capped"), pb.pop("capped")
    assert pa == pb
    # the value maps each user to row labels of its own
    assert all(set(df.loc[labels, "u"]) == {u} for u, labels in rb.value.items())
    assert s_dk.ledger.verify()["charges"] == 1


@pytest.mark.statistical
def test_which_row_wins_rank_one_follows_the_pandas_law(cluster):
    # seeded chi-squared test of homogeneity on the distance class of each user's rank-1 row
    # (100 m, 2 km, 5 km, 9 km): one independent draw per user on both faces; false-failure
    # probability 1e-4 under the null. Noise at 4x or 1/4 of the amount moves the classes
    # (p < 1e-18 with these 1,500 users).
    df = _rows(n_users=1500, seed=4)
    (_, a), (_, b) = _both(df, k=1, rho=2e-6)
    cls = pd.Series(np.tile([0, 1, 2, 3], 1500), index=df.index)
    ha = np.bincount(cls[a.index], minlength=4)
    hb = np.bincount(cls[b.index], minlength=4)
    keep = (ha + hb) > 0
    p = stats.chi2_contingency(np.vstack([ha[keep], hb[keep]]))[1]
    assert p > 1e-4, (ha, hb, p)


@pytest.mark.parametrize("call,match", [
    ({"k": 0, "rho": 1e-3}, "k=0"),
    ({"k": 2, "rho": 1e-3, "gamma0": 99}, "gamma0"),
    ({"k": 2, "rho": 1e-3, "max_cycles": 0}, "max_cycles"),
    ({"k": 2, "rho": 1e-3, "compat": "nope"}, "compat"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-2))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_rows(20), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.knn(Q, **call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


# ---------------------------------------------------------------------------------------------
# convex_hull (per user, like knn): the same charges and Result fields as the pandas face on the
# whole frame; the same released hulls, bit for bit, as the pandas face run on each partition's
# rows with that partition's child of the seeded source (a partition of a frame indexed by the
# user runs the same array code on the same points in the same order); refusals before the
# ledger is touched.

HKW = {"user": "u", "x": "x", "y": "y", "crs": CRS}
HFIELDS = ("type", "mechanism", "guarantee", "n_users", "n_charged", "charges", "spent_total",
          "spent_max", "confidence", "params")  # fmt: skip


def _hull_rows(n_users=24, per=40, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(n_users), per)
    cx = 500_000 + 3_000 * u
    return pd.DataFrame({"u": u, "x": cx + r.uniform(0, 2_000, u.size),
                         "y": 4_500_000 + r.uniform(0, 2_000, u.size)})  # fmt: skip


@pytest.mark.parametrize("budget,call", [
    (gp.CGP(rho=1e-1), {"rho": 1e-2}),
    (gp.GP(eps=1.0), {"eps": 0.2, "k": 20}),
])  # fmt: skip
def test_convex_hull_charges_and_result_match_the_pandas_face(cluster, budget, call):
    df = _hull_rows()
    ddf = dd.from_pandas(df.set_index("u"), npartitions=3, sort=True)
    s_dk = gp.Session(budget=budget)
    b = ddf.geopriv(s_dk, **HKW).convex_hull(rng=seeded_rng(7), **call)
    # the pandas face on the whole frame: the same charges and Result fields
    s_pd = gp.Session(budget=budget)
    a = df.geopriv(s_pd, **HKW).convex_hull(rng=seeded_rng(8), **call)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert list(a.columns) == list(b.columns)
    assert sorted(b.index) == sorted(a.index) == list(range(24))
    da, db = a.attrs["geopriv"].to_dict(value=False), b.attrs["geopriv"].to_dict(value=False)
    assert da.keys() == db.keys()
    for key in HFIELDS:
        assert da[key] == db[key], key
    assert s_dk.ledger.verify()["charges"] == 1
    # the pandas face on each partition's rows, with that partition's child stream: the same
    # released hulls and numbers, exactly
    parts = []
    for i in range(ddf.npartitions):
        part = ddf.get_partition(i).compute().reset_index()
        s_i = gp.Session(budget=budget)
        parts.append(part.geopriv(s_i, **HKW).convex_hull(rng=seeded_rng(7).spawn(i), **call))
    want = pd.concat(parts)
    assert list(want.index) == list(b.index)
    for col in ("u", "k", "radius_m", "error_m", "fallback"):
        np.testing.assert_array_equal(b[col].to_numpy(), want[col].to_numpy(), err_msg=col)
    assert shapely.equals_exact(b.geometry.array, want.geometry.array, tolerance=0).all()
    # and the hulls are noisy: another seed releases others
    c = ddf.geopriv(gp.Session(budget=budget), **HKW).convex_hull(rng=seeded_rng(9), **call)
    assert not shapely.equals_exact(c.geometry.array, b.geometry.array, tolerance=0).any()


@pytest.mark.parametrize("call,match", [
    ({"rho": 1e-2, "alpha": 1.5}, "alpha"),
    ({"rho": 1e-2, "k": 0}, "k"),
    ({"rho": 1e-2, "k_rule": "nope"}, "k_rule"),
    ({"rho": 1e-2, "radius_floor_m": -1}, "radius_floor_m"),
    ({"rho": 1e-2, "beta": 2}, "beta"),
])  # fmt: skip
def test_hull_bad_input_is_refused_before_the_ledger_is_touched(cluster, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-1))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_hull_rows(6, 20), npartitions=2).geopriv(s, **HKW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.convex_hull(**call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before
