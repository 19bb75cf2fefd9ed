"""grid_stats(epsilon_per_user=, occupancy="public") on the Dask face, against the pandas face.

The partitions' exact integer sums add up to the pandas face's, the noise is drawn on the client
by the same array code: with the same seeded source both faces release the same values, charge
the same amounts and state the same Result. Previews and on_exhausted as on the pandas face;
refusals before the ledger is touched.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.dask  # registers ddf.geopriv
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.testing import seeded_rng

N = 60
LOW = [3, 5]  # users whose budget cannot pay
KW = {"user": "u", "lon": "lon", "lat": "lat", "crs": "EPSG:4326", "to_crs": "EPSG:32618"}
CALL: dict[str, Any] = {"value": "v", "bounds": (0, 10), "epsilon_per_user": 2.0, "cells": 8,
                        "occupancy": "public"}  # fmt: skip


def _frame() -> pd.DataFrame:
    rs = np.random.default_rng(3)  # test data only
    counts = rs.integers(1, 6, N)
    u = np.repeat(np.arange(N), counts)
    df = pd.DataFrame({"u": u, "lon": -74.0 + rs.uniform(0, 0.03, u.size),
                       "lat": 40.70 + rs.uniform(0, 0.03, u.size),
                       "v": rs.uniform(0, 10, u.size)})  # fmt: skip
    return df.sample(frac=1.0, random_state=1)  # a user's rows in several partitions


def _session() -> Any:
    s = gp.Session(central=gp.DP(epsilon=10.0))
    s.set_budget(LOW, gp.DP(epsilon=1e-3))
    return s


def _committed(s: Any, what: str) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), getattr(c, what).tolist(), strict=True):
            u = s.ledger._index[i]
            out[u] = out.get(u, 0) + int(a)
    return out


def test_same_values_charges_and_result_as_the_pandas_face(cluster) -> None:
    df = _frame()
    s_pd, s_dk = _session(), _session()
    a = df.geopriv(s_pd, **KW).grid_stats(**CALL, rng=seeded_rng(7))
    b = dd.from_pandas(df, npartitions=3).geopriv(s_dk, **KW).grid_stats(**CALL,
                                                                          rng=seeded_rng(7))
    assert a["released"].sum() >= 2  # several cells released: the test compares noise
    # the same released values, to the bit (noise drawn on the client from the same source)
    pd.testing.assert_frame_equal(pd.DataFrame(b.drop(columns="geometry")),
                                  pd.DataFrame(a.drop(columns="geometry")),
                                  check_exact=True)  # fmt: skip
    assert b.geometry.geom_equals_exact(a.geometry, 1e-9).all() and b.crs == a.crs
    assert _committed(s_dk, "amount") == _committed(s_pd, "amount")
    assert _committed(s_dk, "alloc") == _committed(s_pd, "alloc")
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    da = {k: v for k, v in ra.items() if k != "query_id"}
    db = {k: v for k, v in rb.items() if k != "query_id"}
    assert da.keys() == db.keys()
    for k in da:
        if k != "value":
            assert da[k] == db[k], k


def test_preview_is_the_pandas_preview_and_the_real_reservation(cluster) -> None:
    df = _frame()
    pv_pd = df.geopriv(_session(), **KW).grid_stats(**CALL, dry_run=True)
    s = _session()
    b = dd.from_pandas(df, npartitions=3).geopriv(s, **KW)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = b.grid_stats(**CALL, dry_run=True)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    pd.testing.assert_frame_equal(pv.table.sort_index(), pv_pd.table.sort_index())
    assert set(pv.excluded.index) == set(LOW)
    b.grid_stats(**CALL, rng=seeded_rng(8))
    planned = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    assert planned == _committed(s, "alloc")


def test_raise_names_who_cannot_pay_and_writes_nothing(cluster) -> None:
    s = _session()
    b = dd.from_pandas(_frame(), npartitions=3).geopriv(s, **KW)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    with pytest.raises(BudgetExceededError, match=r"cannot pay.*3, 5") as e:
        b.grid_stats(**CALL, on_exhausted="raise", rng=seeded_rng(1))
    assert "Nothing was charged." in str(e.value)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit


@pytest.mark.parametrize(("change", "match"), [
    ({"occupancy": "private"}, "occupancy='public' only"),
    ({"occupancy": None}, "occupancy='public' only"),
    ({"epsilon_per_user": None}, "needs epsilon_per_user="),
    ({"epsilon_per_user": -1}, "must be a number in"),
    ({"value": "nope"}, "value='nope' is not a column"),
    ({"cells": 16}, "H3 resolutions are 0..15"),
    ({"bounds": (0, 5)}, "values outside bounds"),  # found by the workers' first pass
    ({"split": (0.5, 0.6)}, "summing to 1"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger(cluster, change: dict, match: str) -> None:
    s = _session()
    b = dd.from_pandas(_frame(), npartitions=3).geopriv(s, **KW)
    snap = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=match) as e:
        b.grid_stats(**{**CALL, **change}, rng=seeded_rng(1))
    assert str(e.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == snap


def test_partition_sums_are_added_in_a_tree_with_the_exact_totals(monkeypatch) -> None:
    import dask

    import gpframe.dask.grid_stats as dgs

    sizes: list[int] = []
    real = dgs.add_sums
    monkeypatch.setattr(dgs, "add_sums", lambda *t: sizes.append(len(t)) or real(*t))
    rs = np.random.default_rng(5)  # test data only
    tables = [pd.DataFrame({"user": rs.integers(0, 7, 40), "cell": rs.integers(0, 3, 40)
                            .astype(np.uint64), "m": np.ones(40, np.int64),
                            "s1": rs.integers(0, 2**40, 40)}) for _ in range(dgs.FAN_IN**2 + 1)]
    got = dask.compute(dgs.tree_sum([dask.delayed(t) for t in tables]), scheduler="sync")[0]
    want = pd.concat(tables).groupby(["user", "cell"], sort=True, as_index=False).sum()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    # 17 tables: 5 tasks, then 2, then 1; none adds more than FAN_IN tables, so no task (and
    # not the client) ever holds every partition's table
    assert sorted(sizes) == [1, 1, 2, 4, 4, 4, 4, 4]


def test_pair_sums_of_many_partitions_equal_those_of_one() -> None:
    """Buckets by user and trees of sums give the one-partition table exactly."""
    import dask

    from gpframe.dask.grid_stats import FAN_IN, pair_sums

    df = _frame()
    one = dd.from_pandas(df, npartitions=1).geopriv(_session(), **KW)
    many = dd.from_pandas(df, npartitions=3 * FAN_IN + 1, sort=False).geopriv(_session(), **KW)
    assert many.ddf.npartitions > FAN_IN  # several buckets, trees of several levels
    args = ("v", 8, Fraction(0), Fraction(10), False)
    a = dask.compute(*pair_sums(one.ddf.to_delayed(), one.cols, *args), scheduler="sync")[0]
    b = dask.compute(*pair_sums(many.ddf.to_delayed(), many.cols, *args), scheduler="sync")[0]
    assert len(a) > N
    pd.testing.assert_frame_equal(a, b)
