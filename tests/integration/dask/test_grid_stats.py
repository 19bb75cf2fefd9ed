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


def _frame(most: int = 6, side: float = 0.03) -> pd.DataFrame:
    rs = np.random.default_rng(3)  # test data only
    counts = rs.integers(1, most, N)
    u = np.repeat(np.arange(N), counts)
    df = pd.DataFrame({"u": u, "lon": -74.0 + rs.uniform(0, side, u.size),
                       "lat": 40.70 + rs.uniform(0, side, u.size),
                       "v": rs.uniform(0, 10, u.size), "t": rs.permutation(u.size)})  # fmt: skip
    return df.sample(frac=1.0, random_state=1)  # a user's rows in several partitions


def _public_cells() -> list[str]:
    """The public list: most occupied cells and one empty cell (released too)."""
    import h3

    df = _frame(most=20, side=0.008)
    seen = sorted({h3.latlng_to_cell(la, lo, 8) for lo, la in zip(df.lon, df.lat, strict=True)})
    return [*seen[:-1], "882a100d25fffff"]


#: occupancy="private": caps that bind (users have up to 19 rows in a few cells)
PRIVATE: dict[str, Any] = {"occupancy": "private", "public_cells": _public_cells(),
                           "max_cells": 2, "max_per_cell": 3}  # fmt: skip


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
    b = dd.from_pandas(df, npartitions=3).geopriv(s_dk, **KW).grid_stats(**CALL, rng=seeded_rng(7))
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


@pytest.mark.parametrize("form", [
    {"epsilon_per_user": 2.0},  # each user's rows spread by the keyed hash of their rank
    {"epsilon_per_user": None, "epsilon_per_statistic": 0.5},  # the first rows in input order
    {"epsilon_per_user": None, "epsilon": 0.5, "order_by": "t", "salt": "s"},
])  # fmt: skip
def test_private_occupancy_releases_what_the_pandas_face_releases(cluster, form) -> None:
    # the bounding keeps at most 3 of a user's up to 19 rows in a cell: which rows (input
    # order across the shuffle, order_by, the spread) changes the sums, so the exact equality
    # below checks them (test_bounding_reads_rows_in_input_order checks the order alone)
    df = _frame(most=20, side=0.008)
    call = {**CALL, **PRIVATE, **form}
    s_pd, s_dk = _session(), _session()
    a = df.geopriv(s_pd, **KW).grid_stats(**call, rng=seeded_rng(9))
    # sort=False: the dask frame's rows in the pandas frame's order (from_pandas sorts by
    # the index otherwise), so "input order" is the same on both faces
    ddf = dd.from_pandas(df, npartitions=3, sort=False)
    b = ddf.geopriv(s_dk, **KW).grid_stats(**call, rng=seeded_rng(9))
    assert len(a) == len(PRIVATE["public_cells"]) and a["released"].sum() >= 2
    pd.testing.assert_frame_equal(pd.DataFrame(b.drop(columns="geometry")),
                                  pd.DataFrame(a.drop(columns="geometry")),
                                  check_exact=True)  # fmt: skip
    assert b.geometry.geom_equals_exact(a.geometry, 1e-9).all() and b.crs == a.crs
    assert _committed(s_dk, "amount") == _committed(s_pd, "amount")
    assert _committed(s_dk, "alloc") == _committed(s_pd, "alloc")
    assert not set(_committed(s_dk, "amount")) & set(LOW)  # excluded: charged nothing
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    assert {k for k in ra if k != "query_id" and k != "value" and ra[k] != rb[k]} == set()
    ta, tb = (s.report(query_id=r["query_id"]) for s, r in ((s_pd, ra), (s_dk, rb)))
    pd.testing.assert_frame_equal(tb.drop(columns="query_id", errors="ignore"),
                                  ta.drop(columns="query_id", errors="ignore"))  # fmt: skip
    assert set(ta.loc[ta["status"] == "excluded", "user"]) == set(LOW)


@pytest.mark.parametrize("form", [
    {"epsilon_per_statistic": 0.5},  # Clip-User keeps the first rows in input order
    {"epsilon": 0.5, "order_by": "t", "clip": "pseudo-user"},
    {"epsilon_per_statistic": 0.5, "kappa": 2.0, "error_cap": 3.0},
])  # fmt: skip
def test_clip_user_releases_what_the_pandas_face_releases(cluster, form) -> None:
    # users with up to 19 rows in a few cells: Clip-User suppresses hundreds of rows, and
    # which ones (input order across the shuffle, order_by) changes the released values
    df = _frame(most=20, side=0.008)
    call = {**CALL, "epsilon_per_user": None, **form}
    s_pd, s_dk = _session(), _session()
    a = df.geopriv(s_pd, **KW).grid_stats(**call, rng=seeded_rng(9))
    ddf = dd.from_pandas(df, npartitions=3, sort=False)  # the pandas frame's row order
    b = ddf.geopriv(s_dk, **KW).grid_stats(**call, rng=seeded_rng(9))
    assert a["released"].sum() >= 2
    assert a["n_suppressed"].sum() > 100 or "kappa" in form  # (a looser plan keeps them)
    pd.testing.assert_frame_equal(pd.DataFrame(b.drop(columns="geometry")),
                                  pd.DataFrame(a.drop(columns="geometry")),
                                  check_exact=True)  # fmt: skip
    assert b.geometry.geom_equals_exact(a.geometry, 1e-9).all() and b.crs == a.crs
    assert _committed(s_dk, "amount") == _committed(s_pd, "amount")
    assert _committed(s_dk, "alloc") == _committed(s_pd, "alloc")
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    assert {k for k in ra if k != "query_id" and k != "value" and ra[k] != rb[k]} == set()


def test_clip_user_preview_is_the_real_reservation(cluster) -> None:
    df = _frame(most=20, side=0.008)
    call = {**CALL, "epsilon_per_user": None, "epsilon_per_statistic": 0.5}
    pv_pd = df.geopriv(_session(), **KW).grid_stats(**call, dry_run=True)
    s = _session()
    b = dd.from_pandas(df, npartitions=3).geopriv(s, **KW)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = b.grid_stats(**call, dry_run=True)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    pd.testing.assert_frame_equal(pv.table.sort_index(), pv_pd.table.sort_index())
    # the a-priori mean error: the pandas preview's, and the real call's worst released cell
    assert (pv.error, pv.error_kind, pv.confidence) == (pv_pd.error, pv_pd.error_kind,
                                                        pv_pd.confidence)  # fmt: skip
    out = b.grid_stats(**call, rng=seeded_rng(8))
    assert pv.error == pytest.approx(float(out["mean_error"].max()), rel=1e-12)
    planned = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    assert planned == _committed(s, "alloc")


@pytest.mark.parametrize("order_by", [None, "t"])
def test_clip_user_keeps_rows_in_input_order(order_by) -> None:
    # a partition whose rows arrive out of input order keeps the rows retained_rows keeps
    from fractions import Fraction

    from gpframe.dask.grid_clip import RowsTask, kept_sums, prepare_rows
    from gpframe.dask.grid_private import with_positions
    from gpframe.dask.partitions import Columns
    from gpframe.queries.clip_user import occupancy_from_records

    df = _frame(most=20, side=0.008)
    task = RowsTask(cols=Columns(user="u", lon="lon", lat="lat", crs="EPSG:4326",
                                 to_crs="EPSG:32618"), value="v", cells=8, lo=Fraction(0),
                    hi=Fraction(10), clamp=False, order_by=order_by)  # fmt: skip
    prepared = prepare_rows(with_positions(df).sample(frac=1.0, random_state=5), task)
    (table, _), _rows = prepared
    r = np.minimum(table["m"].to_numpy(), 2)  # keep the first two rows of every pair
    cells, sums = kept_sums(prepared, r)
    # the same rule on the input order (retained_rows' ranking, with a plan keeping 2)
    inp = prepare_rows(with_positions(df), task)[1]
    occ = occupancy_from_records(inp[0], inp[1])
    n_u = max(occ.n_users, 1)
    rows_u, rows_j = np.searchsorted(occ.users, inp[0]), np.searchsorted(occ.cells, inp[1])
    code = rows_j * n_u + rows_u
    pos = np.arange(code.size)
    srt = np.lexsort((pos, code) if order_by is None else (pos, df["t"].to_numpy(), code))
    rank = np.empty(code.size, np.int64)
    rank[srt] = np.arange(code.size) - np.searchsorted(code[srt], code[srt], side="left")
    want = np.zeros(occ.n_cells, np.int64)
    np.add.at(want, rows_j[rank < 2], inp[2][rank < 2])
    assert sums[1].tolist() == want[np.searchsorted(occ.cells, cells)].tolist()
    assert int(sums[0].sum()) == int((rank < 2).sum()) < len(df)


@pytest.mark.parametrize("form", [{"user_averages": True}, {"order_by": "t"}, {}])
def test_bounding_reads_rows_in_input_order(form) -> None:
    # a partition whose rows arrive out of input order (as a shuffle may deliver them) keeps
    # the rows the pandas face keeps from the input order
    from fractions import Fraction

    import h3

    from gpframe.dask.grid_private import BoundTask, bound_partition, with_positions
    from gpframe.dask.partitions import Columns
    from gpframe.queries.contribution_bounding import bound_contributions, pair_averages

    df = _frame(most=20, side=0.008)
    task = BoundTask(cols=Columns(user="u", lon="lon", lat="lat", crs="EPSG:4326",
                                  to_crs="EPSG:32618"), value="v", cells=8, lo=Fraction(0),
                     hi=Fraction(10), clamp=False, public_cells=PRIVATE["public_cells"],
                     max_cells=2, max_per_cell=3, order_by=form.get("order_by"), salt="s",
                     user_averages=form.get("user_averages", False))  # fmt: skip
    scrambled = with_positions(df).sample(frac=1.0, random_state=5)
    out = bound_partition(scrambled, task)
    keys = np.array([h3.str_to_int(h3.latlng_to_cell(la, lo, 8))
                     for lo, la in zip(df.lon, df.lat, strict=True)], dtype=np.uint64)  # fmt: skip
    users = df["u"].to_numpy()
    order = df["t"].to_numpy() if "order_by" in form else None
    b = bound_contributions(users, keys, out.public, max_cells=2, max_per_cell=3, order=order,
                            salt="s")  # fmt: skip
    if "user_averages" in form:  # each kept row carries its user's average in the cell
        k = pair_averages(b, df["v"].to_numpy(), 0, 10)[0][b.keep]
    else:
        k = np.rint(df["v"].to_numpy()[b.keep] * 8192).astype(np.int64)  # q = 2**-13, W = 10
    want = np.zeros(out.public.size, np.int64)
    np.add.at(want, b.row_j[b.keep], k)
    got = np.zeros(out.public.size, np.int64)
    np.add.at(got, out.pair_j, out.sums[1])
    assert got.tolist() == want.tolist() and out.cells_kept.tolist() == b.cells_kept.tolist()
    assert int(out.sums[0].sum()) < len(df)  # the caps bind


def test_private_occupancy_preview_is_the_real_reservation(cluster) -> None:
    df = _frame(most=20, side=0.008)
    call = {**CALL, **PRIVATE}
    pv_pd = df.geopriv(_session(), **KW).grid_stats(**call, dry_run=True)
    s = _session()
    b = dd.from_pandas(df, npartitions=3).geopriv(s, **KW)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = b.grid_stats(**call, dry_run=True)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    pd.testing.assert_frame_equal(pv.table.sort_index(), pv_pd.table.sort_index())
    # the count's noise bound, from ε, max_per_cell and the bounds: the pandas preview's
    assert pv.error is not None and (pv.error, pv.error_kind, pv.confidence) == (
        pv_pd.error,
        pv_pd.error_kind,
        pv_pd.confidence,
    )
    b.grid_stats(**call, rng=seeded_rng(8))
    planned = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    assert planned == _committed(s, "alloc")


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
    # the noise bound of the worst released cell before the shrinkage: the pandas preview's,
    # at most the real call's (shrink=True widens the stated bounds)
    assert pv.error is not None and (pv.error, pv.error_kind, pv.confidence) == (
        pv_pd.error,
        pv_pd.error_kind,
        pv_pd.confidence,
    )
    out = b.grid_stats(**CALL, rng=seeded_rng(8))
    assert pv.error <= out.attrs["geopriv"].error * (1 + 1e-12)
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


def _table(df: pd.DataFrame, res: int = 8) -> pd.DataFrame:
    """The public occupancy table (user, cell, count) of ``df``, as a caller would declare it."""
    import h3

    cell = [h3.latlng_to_cell(la, lo, res) for lo, la in zip(df.lon, df.lat, strict=True)]
    t = pd.DataFrame({"user": df["u"].to_numpy(), "cell": cell})
    return t.groupby(["user", "cell"]).size().rename("count").reset_index()


@pytest.mark.parametrize("form", [
    {},  # epsilon_per_user: the per-user total
    pytest.param({"epsilon_per_user": None, "epsilon_per_statistic": 0.5},  # Clip-User
                 marks=pytest.mark.slow),
])  # fmt: skip
def test_a_checked_occupancy_table_releases_what_the_pandas_face_releases(cluster, form) -> None:
    # the caller declares the public table; it is checked against the partitions' exact
    # counts, then the release is the one occupancy="public" gives, on both faces
    df = _frame(most=20, side=0.008)
    table = _table(df)
    call = {**CALL, **form, "occupancy": table}
    s_pd, s_dk = _session(), _session()
    a = df.geopriv(s_pd, **KW).grid_stats(**call, rng=seeded_rng(9))
    ddf = dd.from_pandas(df, npartitions=3, sort=False)  # the pandas frame's row order
    b = ddf.geopriv(s_dk, **KW).grid_stats(**call, rng=seeded_rng(9))
    assert a["released"].sum() >= 2
    pd.testing.assert_frame_equal(pd.DataFrame(b.drop(columns="geometry")),
                                  pd.DataFrame(a.drop(columns="geometry")),
                                  check_exact=True)  # fmt: skip
    assert _committed(s_dk, "amount") == _committed(s_pd, "amount")
    assert _committed(s_dk, "alloc") == _committed(s_pd, "alloc")
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    assert {k for k in ra if k != "query_id" and k != "value" and ra[k] != rb[k]} == set()
    # the same call with the declaration "public" releases the same (the table only checks)
    s_pub = _session()
    c = ddf.geopriv(s_pub, **KW).grid_stats(**{**call, "occupancy": "public"}, rng=seeded_rng(9))
    pd.testing.assert_frame_equal(pd.DataFrame(c.drop(columns="geometry")),
                                  pd.DataFrame(b.drop(columns="geometry")),
                                  check_exact=True)  # fmt: skip


@pytest.mark.parametrize("form", [{}, {"epsilon_per_user": None, "epsilon_per_statistic": 0.5}])
def test_an_occupancy_table_that_differs_from_the_data_fails_closed(cluster, form) -> None:
    df = _frame()
    table = _table(df)
    table.loc[0, "count"] += 1  # one user, one cell, one sample off
    s = _session()
    snap = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="does not match the data") as e:
        dd.from_pandas(df, npartitions=3).geopriv(s, **KW).grid_stats(
            **{**CALL, **form, "occupancy": table}, rng=seeded_rng(1)
        )
    assert str(e.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == snap


@pytest.mark.parametrize(("change", "match"), [
    ({"occupancy": "private"}, "needs max_cells= and max_per_cell="),
    ({"occupancy": None}, "pass occupancy='public'"),
    ({"occupancy": pd.DataFrame()}, "lacks column"),
    ({"occupancy": pd.DataFrame({"user": [1], "cell": ["zz"], "count": [1]})}, "'cell' column"),
    ({"epsilon_per_user": None}, "exactly one of"),
    ({"epsilon_per_statistic": 1.0}, "exactly one of"),
    ({"clip": "pseudo-user"}, "applies to the per-statistic form only"),
    ({"epsilon_per_user": None, "epsilon_per_statistic": 1.0, "clip": "nope"}, "clip='nope'"),
    ({"epsilon_per_user": None, "epsilon": 1.0, "order_by": "nope"}, "order_by='nope'"),
    ({"max_cells": 2}, "apply to occupancy='private' only"),
    ({**PRIVATE, "public_cells": None}, "needs public_cells="),
    ({**PRIVATE, "max_cells": 0}, "max_cells=0 must be a positive integer"),
    ({**PRIVATE, "salt": ""}, "salt must be a non-empty string"),
    ({**PRIVATE, "order_by": "nope"}, "order_by='nope' must be a column"),
    ({**PRIVATE, "epsilon_per_user": None, "epsilon": 200.0}, "epsilon"),
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
    tables = [
        pd.DataFrame(
            {
                "user": rs.integers(0, 7, 40),
                "cell": rs.integers(0, 3, 40).astype(np.uint64),
                "m": np.ones(40, np.int64),
                "s1": rs.integers(0, 2**40, 40),
            }
        )
        for _ in range(dgs.FAN_IN**2 + 1)
    ]
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
