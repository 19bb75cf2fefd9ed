"""The Dask face's convex_hull on a LocalCluster, against the pandas face (beyond-one-machine.md).

Same charges and Result fields as the pandas face on the whole frame; the same released hulls,
bit for bit, as the pandas face run on each partition's rows with that partition's child of the
seeded source (the structure allows it: a partition of a frame indexed by the user runs the same
array code on the same points in the same order); refusals before the ledger is touched.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.dask  # registers ddf.geopriv
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS}
FIELDS = ("type", "mechanism", "guarantee", "n_users", "n_charged", "charges", "spent_total",
          "spent_max", "confidence", "params")  # fmt: skip


def _rows(n_users=24, per=40, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(n_users), per)
    cx = 500_000 + 3_000 * u
    return pd.DataFrame({"u": u, "x": cx + r.uniform(0, 2_000, u.size),
                         "y": 4_500_000 + r.uniform(0, 2_000, u.size)})  # fmt: skip


@pytest.mark.parametrize("budget,call", [
    (gp.CGP(rho=1e-1), {"rho": 1e-2}),
    (gp.GP(eps=1.0), {"eps": 0.2, "k": 20}),
])  # fmt: skip
def test_hulls_charges_and_result_match_the_pandas_face(cluster, budget, call):
    df = _rows()
    ddf = dd.from_pandas(df.set_index("u"), npartitions=3, sort=True)
    s_dk = gp.Session(budget=budget)
    b = ddf.geopriv(s_dk, **KW).convex_hull(rng=seeded_rng(7), **call)
    # the pandas face on the whole frame: the same charges and Result fields
    s_pd = gp.Session(budget=budget)
    a = df.geopriv(s_pd, **KW).convex_hull(rng=seeded_rng(8), **call)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert list(a.columns) == list(b.columns)
    assert sorted(b.index) == sorted(a.index) == list(range(24))
    da, db = a.attrs["geopriv"].to_dict(value=False), b.attrs["geopriv"].to_dict(value=False)
    assert da.keys() == db.keys()
    for key in FIELDS:
        assert da[key] == db[key], key
    assert s_dk.ledger.verify()["charges"] == 1
    # the pandas face on each partition's rows, with that partition's child stream: the same
    # released hulls and numbers, exactly
    parts = []
    for i in range(ddf.npartitions):
        part = ddf.get_partition(i).compute().reset_index()
        s_i = gp.Session(budget=budget)
        parts.append(part.geopriv(s_i, **KW).convex_hull(rng=seeded_rng(7).spawn(i), **call))
    want = pd.concat(parts)
    assert list(want.index) == list(b.index)
    for col in ("u", "k", "radius_m", "error_m", "fallback"):
        np.testing.assert_array_equal(b[col].to_numpy(), want[col].to_numpy(), err_msg=col)
    assert shapely.equals_exact(b.geometry.array, want.geometry.array, tolerance=0).all()
    # and the hulls are noisy: another seed releases others
    c = ddf.geopriv(gp.Session(budget=budget), **KW).convex_hull(rng=seeded_rng(9), **call)
    assert not shapely.equals_exact(c.geometry.array, b.geometry.array, tolerance=0).any()


@pytest.mark.parametrize("call,match", [
    ({"rho": 1e-2, "alpha": 1.5}, "alpha"),
    ({"rho": 1e-2, "k": 0}, "k"),
    ({"rho": 1e-2, "k_rule": "nope"}, "k_rule"),
    ({"rho": 1e-2, "radius_floor_m": -1}, "radius_floor_m"),
    ({"rho": 1e-2, "beta": 2}, "beta"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-1))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_rows(6, 20), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.convex_hull(**call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before
