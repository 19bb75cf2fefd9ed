"""The Dask face's knn on a LocalCluster, against the pandas face (beyond-one-machine.md).

Same charges and Result fields, the same rows (labels, public columns, ranks) for users whose
nearest rows are far apart, the same rank law (seeded chi-squared on which row wins rank 1),
refusals before the ledger is touched.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

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
    for key in ("type", "mechanism", "guarantee", "n_users", "n_charged", "charges",
                "spent_total", "spent_max", "confidence"):
        assert da[key] == db[key], key
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
