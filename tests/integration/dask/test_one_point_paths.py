"""Where the one-point-per-user first pass keeps each user's winner, on a LocalCluster.

``range_count``, ``kde_raster`` and ``kde`` fetch few candidates to the client
(``gpframe.dask.one_point.CLIENT_ROWS``), which keeps the winners itself: no task exchanges
candidates between workers and the release tasks get their points in their graph. More
candidates stay on the workers and are exchanged there: directly (one piece per output
partition, up to ``DIRECT_EXCHANGE`` partitions) or by dask's task shuffle. Every way must put
each user in the output partition that the shuffle of every row gives it (``FULL_SHUFFLE``),
with the same point, so a seeded source releases the same values and charges the same.
"""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.dask
import gpframe.dask.one_point as op_mod
import gpframe.dask.partitions as parts_mod
from gpframe.dask.one_point import output_partition
from gpframe.dask.partitions import Columns, Component
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
COLS = Columns(user="u", x="x", y="y", crs=CRS, public=("u", "t"))
ZONE = shapely.box(498_000, 4_498_000, 502_000, 4_502_000)
NPART = 5


def _tracks(n_users=200, seed=5, users=None):
    """Users of 1 to 6 rows in random row order: most users span several partitions."""
    r = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(n_users), r.integers(1, 7, n_users))
    u = u[r.permutation(u.size)]
    return pd.DataFrame({
        "u": u if users is None else users(u), "t": r.integers(0, 4, u.size),
        "x": 500_000 + r.uniform(-3_000, 3_000, u.size),
        "y": 4_500_000 + r.uniform(-3_000, 3_000, u.size),
    })  # fmt: skip


#: (CLIENT_ROWS, DIRECT_EXCHANGE): the client keeps the winners; the workers exchange the
#: candidates directly; the workers run dask's task shuffle; the client splits one piece each
WAYS = {
    "client": (op_mod.CLIENT_ROWS, op_mod.DIRECT_EXCHANGE),
    "direct": (0, op_mod.DIRECT_EXCHANGE),
    "task-shuffle": (0, 2),
    "client-split": (op_mod.CLIENT_ROWS, 2),
}
SLOW_WAYS = {"direct", "client-split"}


@pytest.mark.parametrize(
    "way", [pytest.param(w, marks=pytest.mark.slow) if w in SLOW_WAYS else w for w in WAYS]
)
def test_every_way_selects_the_full_shuffles_users_and_points(cluster, way, monkeypatch):
    ddf = dd.from_pandas(_tracks(), npartitions=NPART)
    sel = Component(gp.Last("t"), None)
    old = op_mod.one_point_pass(ddf, COLS, sel, "empty", shuffle=True)
    monkeypatch.setattr(op_mod, "CLIENT_ROWS", WAYS[way][0])
    monkeypatch.setattr(op_mod, "DIRECT_EXCHANGE", WAYS[way][1])
    new = op_mod.one_point_pass(ddf, COLS, sel, "empty", fetch=True)
    assert new.users.tolist() == old.users.tolist()
    assert new.offsets.tolist() == old.offsets.tolist()
    on_client = way.startswith("client")
    # points the client holds carry no digest (nothing to recompute); the others, the first's
    assert new.wants() == ([None] * NPART if on_client else old.wants())
    assert all(isinstance(p, tuple) for p in new.parts) == on_client
    for (c_new, xy_new), (c_old, xy_old) in zip(dask.compute(*new.parts),
                                                dask.compute(*old.parts), strict=True):  # fmt: skip
        assert c_new.users.tolist() == c_old.users.tolist()
        np.testing.assert_array_equal(xy_new, xy_old)


@pytest.mark.parametrize(
    "users",
    [
        lambda u: u,  # int64: hashed as float64, as dask's shuffle casts numeric keys
        pytest.param(
            lambda u: np.array([f"user-{v}" for v in u], dtype=object), marks=pytest.mark.slow
        ),
        pytest.param(
            lambda u: pd.array([f"u{v}" for v in u], dtype="string[pyarrow]"),
            marks=pytest.mark.slow,
        ),
        pytest.param(lambda u: u * 0.5, marks=pytest.mark.slow),
    ],
)
def test_output_partition_is_the_hash_of_dasks_shuffle(cluster, users):
    df = _tracks(users=users)
    ddf = dd.from_pandas(df, npartitions=3)
    moved = ddf.shuffle(on="u", npartitions=NPART, shuffle_method="tasks")
    got = dask.compute(*[p["u"] for p in moved.to_delayed()])
    to = output_partition(df, "u", ddf._meta["u"].dtype, NPART)
    for j, part in enumerate(got):
        assert sorted(part.tolist()) == sorted(df["u"][to == j].tolist())


#: CLIENT_ROWS: the release tasks get the points the client holds in their graph; the points
#: stay on the workers
RELEASES = {"client": op_mod.CLIENT_ROWS, "workers": 0}


@pytest.mark.parametrize(
    "op", ["range_count", pytest.param("kde_raster", marks=pytest.mark.slow),
           pytest.param("kde", marks=pytest.mark.slow)],
)  # fmt: skip
@pytest.mark.parametrize("way", list(RELEASES))
def test_same_released_values_and_charges_every_way(cluster, op, way, monkeypatch):
    ddf = dd.from_pandas(_tracks(seed=6), npartitions=NPART)

    def call(full):
        monkeypatch.setattr(parts_mod, "FULL_SHUFFLE", full)
        s = gp.Session(budget=gp.CGP(rho=1e-3))
        acc = ddf.geopriv(s, **KW)
        if op == "range_count":
            res = acc.range_count(ZONE, rho=1e-5, component=gp.Last("t"), rng=seeded_rng(8))
        elif op == "kde":
            res = acc.kde([(500_000, 4_500_000), (501_000, 4_499_000)], bandwidth_m=800,
                          rho=1e-5, component=gp.Last("t"), rng=seeded_rng(8))  # fmt: skip
        else:
            res = acc.kde_raster(bandwidth_m=800, cell_m=400, rho=1e-5, component=gp.Last("t"),
                                 bounds=(496_000, 4_496_000, 504_000, 4_504_000),
                                 rng=seeded_rng(8))  # fmt: skip
        return s, res

    s_old, b = call(True)
    monkeypatch.setattr(op_mod, "CLIENT_ROWS", RELEASES[way])
    s_new, a = call(False)
    pd.testing.assert_series_equal(s_new.spent().sort_index(), s_old.spent().sort_index())
    if op == "range_count":
        assert (a.value, a.error, a.n_charged) == (b.value, b.error, b.n_charged)
        assert a.params["rounds_histogram"] == b.params["rounds_histogram"]
    elif op == "kde":
        pd.testing.assert_frame_equal(
            pd.DataFrame(a.value).drop(columns="query_id"),
            pd.DataFrame(b.value).drop(columns="query_id"),
        )
    else:
        np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value))


def test_a_count_of_few_candidates_runs_no_exchange_task(cluster):
    # the fixed cost of a query: its tasks are one first-stage task per partition, which sends
    # the client its few candidates; no shuffle, no exchange, no task that only sends a check,
    # and no release task: the client holds the few points and runs the release itself (one
    # round trip)
    from distributed import get_task_stream

    ddf = dd.from_pandas(_tracks(), npartitions=NPART).persist()
    bound = ddf.geopriv(gp.Session(budget=gp.CGP(rho=1e-3)), **KW)
    with get_task_stream() as ts:
        res = bound.range_count(ZONE, rho=1e-5, component=gp.Last("t"))
    assert res.n_charged == 200
    names = {str(t["key"]).split("-")[0].strip("('\"") for t in ts.data}
    assert names <= {"candidates_for_client", "frompandas"}, names
    assert "candidates_for_client" in names


def _fetch(ddf, sel):
    return op_mod.one_point_pass(ddf, COLS, sel, "empty", fetch=True)


def _same(a, b):
    assert a.users.tolist() == b.users.tolist()
    assert a.offsets.tolist() == b.offsets.tolist()
    for (ca, xa), (cb, xb) in zip(dask.compute(*a.parts), dask.compute(*b.parts), strict=True):
        assert ca.users.tolist() == cb.users.tolist()
        np.testing.assert_array_equal(xa, xb)


def test_candidates_the_client_holds_are_confirmed_not_sent_again(cluster, monkeypatch):
    # a second query on a persisted frame: each worker confirms the token of the candidates
    # the client fetched before (its remembered first pass of the same partition object), so
    # no rows travel and the client's winners are used again; the same users and points
    import gpframe.dask.memo as memo

    ddf = dd.from_pandas(_tracks(seed=9), npartitions=NPART).persist()
    sel = Component(gp.Last("t"), None)
    old = op_mod.one_point_pass(ddf, COLS, sel, "empty", shuffle=True)
    sent = []
    real = op_mod.winners_of_rows
    monkeypatch.setattr(op_mod, "winners_of_rows", lambda *a: sent.append(1) or real(*a))
    first = _fetch(ddf, sel)
    again = _fetch(ddf, sel)
    assert len(sent) == 1  # the winners were kept once, from rows sent once
    _same(first, old)
    _same(again, old)
    assert not any(xy.flags.writeable for _, xy in again.parts)  # shared: the release only reads
    # workers that forgot their passes give new tokens: the rows are sent again, the same
    cluster.run(memo.clear)
    _same(_fetch(ddf, sel), old)
    assert len(sent) == 2
    # another frame with the same parameters: its own partitions, its own candidates
    other = dd.from_pandas(_tracks(seed=10), npartitions=NPART).persist()
    _same(_fetch(other, sel), op_mod.one_point_pass(other, COLS, sel, "empty", shuffle=True))
    # the client forgot them (or holds none): the rows are sent again, the same
    op_mod.clear_held()
    _same(_fetch(ddf, sel), old)


def test_the_client_holds_nothing_within_a_zero_limit(cluster, monkeypatch):
    monkeypatch.setattr(op_mod, "HELD_LIMIT", 0)
    op_mod._held.clear()
    ddf = dd.from_pandas(_tracks(seed=9), npartitions=NPART).persist()
    sel = Component(gp.Last("t"), None)
    a, b = _fetch(ddf, sel), _fetch(ddf, sel)
    _same(a, b)
    assert not op_mod._held._items and op_mod._held._size == 0
