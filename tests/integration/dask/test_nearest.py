"""The Dask face's nearest_users on a LocalCluster, against the pandas face (beyond-one-machine.md).

The rounds run from the client; each partition releases its remaining users' values. Same
Result fields and charges (exactly, in ledger units, where every user's stopping round is
certain), the same law of the stopping rounds (seeded chi-squared test, with its power against
4× and ¼ of the amount checked in the same run), refusals before the ledger is touched.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import gpframe as gp
import gpframe.dask  # registers ddf.geopriv
from gpframe.testing import seeded_rng

from .fields import SUMMARY, assert_same

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
Q = (500_000.0, 4_500_000.0)


def _users(dist: np.ndarray, seed: int = 0, per: int = 1) -> pd.DataFrame:
    """One user per distance (``per`` rows each, the last one at that distance from Q)."""
    r = np.random.default_rng(seed)  # true points only, never noise
    n = dist.size
    u = np.repeat(np.arange(n), per)
    a = r.uniform(0, 2 * np.pi, u.size)
    d = np.repeat(dist, per) + np.tile(np.r_[np.full(per - 1, 50_000.0), 0.0], n)
    return pd.DataFrame({"u": u, "t": np.arange(u.size), "x": Q[0] + d * np.cos(a),
                         "y": Q[1] + d * np.sin(a)})  # fmt: skip


def _separated() -> pd.DataFrame:
    # two users within 30 m of Q, 118 others 20-40 km away: with these amounts round 1 drops
    # every far user and keeps the two (|S| = k), with probability 1 - 1e-12 on either face
    far = np.random.default_rng(1).uniform(20_000, 40_000, 118)
    return _users(np.r_[10.0, 30.0, far], per=2)


def _session(kind: str):
    return gp.Session(budget=gp.CGP(rho=1e-2) if kind == "cgp" else gp.GP(eps=1.0))


def _both(df, kind: str, **call):
    s_pd, s_dk = _session(kind), _session(kind)
    a = df.geopriv(s_pd, **KW).nearest_users(Q, rng=seeded_rng(1), **call)
    b = dd.from_pandas(df, npartitions=4).geopriv(s_dk, **KW).nearest_users(
        Q, rng=seeded_rng(2), **call)  # fmt: skip
    return (s_pd, a), (s_dk, b)


def _units(s) -> pd.Series:
    """Each user's spent amount in exact ledger units."""
    out: dict = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), c.amount.tolist(), strict=True):
            out[s.ledger._index[i]] = out.get(s.ledger._index[i], 0) + int(a)
    return pd.Series(out).sort_index()


@pytest.mark.parametrize("kind,call", [
    ("cgp", {"rho": 1e-3, "method": "dist-elim"}),
    ("cgp", {"rho": 1e-3, "method": "pt"}),
    ("gp", {"eps": 0.05, "method": "pt-elim", "rounds": 4, "split": "even"}),
])  # fmt: skip
def test_charges_and_result_match_the_pandas_face(cluster, kind, call):
    (s_pd, a), (s_dk, b) = _both(_separated(), kind, k=2, reduce="last", **call)
    assert type(a) is type(b)
    assert sorted(a.value) == sorted(b.value) == [0, 1]
    pd.testing.assert_series_equal(_units(s_dk), _units(s_pd))
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, (*SUMMARY, "saved"))
    assert dict(da["params"]) == dict(db["params"])  # exact, rounds_histogram included
    pd.testing.assert_series_equal(a.charges.sort_index(), b.charges.sort_index())
    pd.testing.assert_series_equal(a.allocations.sort_index(), b.allocations.sort_index())
    assert s_dk.ledger.verify()["charges"] == 1


@pytest.mark.statistical
def test_stopping_rounds_follow_the_pandas_law(cluster):
    # chi-squared test of homogeneity on the rounds histograms (how many users stopped after
    # r rounds): each user's stopping round has the same law on both faces; seeded,
    # false-failure probability 1e-4 under the null (the users' rounds share the k-th right
    # end, which 2,000 users pin down). The same test against the pandas face at 4x and 1/4 of
    # the amount must reject (checked here, so the test can fail on a wrong noise scale; with
    # these seeds p < 1e-50 there).
    dist = np.random.default_rng(3).uniform(0, 30_000, 2_000)
    df = _users(dist, seed=3)
    call = dict(k=20, rho=1e-6, method="dist-elim", rounds=6, split="even", reduce="last")
    (_, a), (_, b) = _both(df, "cgp", **call)
    hb = np.asarray(b.params["rounds_histogram"])[1:]

    def p_against(rho):
        s = gp.Session(budget=gp.CGP(rho=1e-2))
        res = df.geopriv(s, **KW).nearest_users(Q, rng=seeded_rng(7), **{**call, "rho": rho})
        ha = np.asarray(res.params["rounds_histogram"])[1:]
        keep = (ha + hb) > 0
        return stats.chi2_contingency(np.vstack([ha[keep], hb[keep]]))[1]

    p = p_against(1e-6)
    assert p > 1e-4, (a.params["rounds_histogram"], hb, p)
    assert p_against(4e-6) < 1e-4 and p_against(2.5e-7) < 1e-4
    assert dist[b.value].max() < 5_000 and dist[a.value].max() < 5_000  # near, up to noise


def test_a_user_dropped_early_pays_less_and_the_preview_is_what_is_reserved(cluster):
    s = _session("cgp")
    b = dd.from_pandas(_separated(), npartitions=3).geopriv(s, **KW)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = b.nearest_users(Q, 2, rho=1e-3, reduce="last", dry_run=True)
    assert pv.adaptive and s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    res = b.nearest_users(Q, 2, rho=1e-3, reduce="last", rng=seeded_rng(4))
    assert res.saved > 0 and res.params["exact"] and res.error == 0
    reserved = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    alloc = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), c.alloc.tolist(), strict=True):
            alloc[s.ledger._index[i]] = int(a)
    assert reserved == alloc


@pytest.mark.parametrize("call,match", [
    ({"k": 0, "rho": 1e-3, "reduce": "last"}, "k=0"),
    ({"k": 500, "rho": 1e-3, "reduce": "last"}, "exceeds the 120 users"),
    ({"k": 2, "rho": 1e-3}, "several rows"),
    ({"k": 2, "rho": 1e-3, "method": "nope", "reduce": "last"}, "method='nope'"),
    ({"k": 2, "eps": 1e-3, "reduce": "last"}, "filters are CGP"),
    ({"k": 2, "rho": 1e-3, "component": ("t", -1)}, "no rows"),
    ({"k": 2, "rho": 1e-3, "reduce": "last", "split": "halves"}, "split"),
    ({"k": 2, "rho": 1e-3, "reduce": "last", "point": "here"}, "point must be"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, call, match):
    s = _session("cgp")
    before = s.ledger.snapshot()
    point = call.pop("point", Q)
    with pytest.raises(gp.GpframeError, match=match) as err:
        dd.from_pandas(_separated(), npartitions=2).geopriv(s, **KW).nearest_users(point, **call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_fewer_than_k_users_who_can_pay_is_refused_before_reserving(cluster):
    s = _session("cgp")
    s.set_budget(list(range(119)), gp.CGP(rho=1e-7))
    before = s.ledger.snapshot()
    b = dd.from_pandas(_separated(), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.BudgetExceededError, match="only 1 users can afford"):
        b.nearest_users(Q, 2, rho=1e-3, reduce="last")
    assert s.ledger.snapshot() == before
