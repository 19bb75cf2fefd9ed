"""One point per user without shuffling every row (gpframe.dask.one_point), on a LocalCluster.

Each partition keeps its users' candidate rows; only those are shuffled on the user column. The
selected points, users, partitions and released values must be those of the full shuffle of every
row (``FULL_SHUFFLE``, the former way) and the points those of the pandas face on the whole frame,
with users spread over many partitions, ties in the order column, components and reductions; bad
rows are refused with the pandas face's messages before the ledger is touched.
"""

from __future__ import annotations

import re

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.dask
import gpframe.dask.partitions as parts_mod
from gpframe.dask.one_point import one_point_pass
from gpframe.dask.partitions import Columns, Component
from gpframe.queries.range_count import select_component
from gpframe.testing import seeded_rng

from .fields import CHARGED, assert_same

CRS = "EPSG:32618"  # metric: the projected points are the input x, y
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t", "h", "when"]}
COLS = Columns(user="u", x="x", y="y", crs=CRS, public=("u", "t", "h", "when"))
ZONE = shapely.box(498_000, 4_498_000, 502_000, 4_502_000)
NPART = 7


def _tracks(n_users=300, seed=0):
    """Users of 1 to 6 rows in random row order: most users span several partitions."""
    r = np.random.default_rng(seed)  # true points only, never noise
    u = np.repeat(np.arange(n_users), r.integers(1, 7, n_users))
    u = u[r.permutation(u.size)]
    t = r.integers(0, 4, u.size)  # few values: many ties within and across partitions
    return pd.DataFrame({
        "u": u, "t": t, "h": r.integers(0, 3, u.size),
        "when": pd.Timestamp("2024-03-01", tz="Europe/Paris") + pd.to_timedelta(t, "h"),
        "x": 500_000 + r.uniform(-3_000, 3_000, u.size),
        "y": 4_500_000 + r.uniform(-3_000, 3_000, u.size),
    })  # fmt: skip


def _points(fp):
    """Each user's selected point, partition by partition, from the persisted first pass."""
    got = dask.compute(*fp.parts)
    return [(c.users.tolist(), c.counts.tolist(), xy) for c, xy in got]


SLOW = pytest.mark.slow
SELECTIONS = [
    (gp.Last("when"), None),  # ties in a time column with a zone
    (None, "first"),
    pytest.param(("h", 1), "last", marks=SLOW),
    pytest.param(gp.Last("t"), None, marks=SLOW),
    pytest.param(gp.First("t"), None, marks=SLOW),
    pytest.param(gp.First("when", after="2024-03-01 01:00"), None, marks=SLOW),
    pytest.param(gp.Last("when", before="2024-03-01 02:00"), None, marks=SLOW),
    pytest.param("first", None, marks=SLOW),  # the frame's one datetime column ("when")
    pytest.param(("h", 1), "first", marks=SLOW),
    pytest.param(None, "last", marks=SLOW),
    pytest.param(lambda f: f["h"] != 2, "last", marks=SLOW),
]


@pytest.mark.parametrize(("component", "reduce"), SELECTIONS)
def test_candidates_select_what_the_full_shuffle_and_the_pandas_face_select(
    cluster, component, reduce
):
    df = _tracks()
    ddf = dd.from_pandas(df, npartitions=NPART)
    spread = ddf.map_partitions(lambda p: p[["u"]].drop_duplicates()).compute()["u"]
    assert spread.duplicated().sum() > 100  # many users lie in several partitions
    sel = Component(component, reduce)
    new = one_point_pass(ddf, COLS, sel, "empty")
    old = one_point_pass(ddf, COLS, sel, "empty", shuffle=True)
    assert new.users.tolist() == old.users.tolist()
    assert new.offsets.tolist() == old.offsets.tolist()
    assert new.wants() == old.wants()  # the release tasks' check of their users
    assert new.ref.crs_m == old.ref.crs_m and new.ref.scale_max == old.ref.scale_max
    for (u_new, n_new, xy_new), (u_old, n_old, xy_old) in zip(
        _points(new), _points(old), strict=True
    ):
        assert u_new == u_old and n_new == n_old
        np.testing.assert_array_equal(xy_new, xy_old)
    # the pandas face's choice on the whole frame (row order: partitions, then rows)
    pos = select_component(df, df["u"].to_numpy(), component, reduce)
    want = df.iloc[pos].set_index("u")[["x", "y"]].sort_index()
    got = pd.DataFrame(
        np.concatenate([xy for _, _, xy in _points(new)]),
        columns=["x", "y"],
        index=pd.Index(new.users.astype(np.int64), name="u"),
    ).sort_index()
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.slow
def test_a_component_empty_on_some_partitions(cluster):
    df = _tracks()
    df.loc[df.index[: len(df) // 2], "h"] = 0  # the first partitions hold no h == 2
    ddf = dd.from_pandas(df, npartitions=NPART)
    sel = Component(("h", 2), "last")
    new = one_point_pass(ddf, COLS, sel, "e")
    old = one_point_pass(ddf, COLS, sel, "e", shuffle=True)
    assert new.users.tolist() == old.users.tolist() and new.wants() == old.wants()


def _message(call):
    with pytest.raises(gp.GpframeError) as err:
        call()
    return str(err.value)


def _spread(df):
    """Users whose rows lie in several partitions, by their first row."""
    seen = dd.from_pandas(df, npartitions=NPART).map_partitions(
        lambda p: p[["u"]].drop_duplicates()).compute()["u"]  # fmt: skip
    return pd.unique(df["u"][df["u"].isin(seen[seen.duplicated()])])


@pytest.mark.parametrize(
    ("edit", "call", "match"),
    [
        # one user whose rows, in several partitions, are all in the component
        pytest.param(
            lambda d, us: d.assign(h=np.where(d["u"] == us[0], 1, 0)),
            {"component": ("h", 1)},
            "1 user.s. have several rows in the selected component",
            marks=SLOW,
        ),
        # six such users: the message names the first five in row order
        (
            lambda d, us: d.assign(h=np.where(d["u"].isin(us[:6]), 1, 0)),
            {"component": ("h", 1)},
            "6 user.s. have several rows .* ...\\);",
        ),
        # the same user twice in one partition only: refused the same way
        pytest.param(
            lambda d, us: d.assign(
                h=np.where(d.index.isin([0, 1]), 1, 0), u=np.where(d.index.isin([0, 1]), -1, d["u"])
            ),
            {"component": ("h", 1)},
            "1 user.s. have several rows .*users -1\\)",
            marks=SLOW,
        ),
        (
            lambda d, us: d.assign(x=np.where(d.index == 400, np.nan, d["x"])),
            {"component": gp.Last("t")},
            "x",
        ),
        pytest.param(
            lambda d, us: d,
            {"component": ("nope", 1)},
            "component column 'nope' is not in the frame",
            marks=SLOW,
        ),
        pytest.param(
            lambda d, us: d,
            {"component": gp.Last("nope")},
            "column 'nope' is not in the frame",
            marks=SLOW,
        ),
        pytest.param(
            lambda d, us: d, {"component": "last", "reduce": "mean"}, "reduce='mean'", marks=SLOW
        ),
    ],
)
def test_bad_rows_are_refused_with_the_pandas_message_before_the_ledger(cluster, edit, call,
                                                                        match):  # fmt: skip
    df = _tracks()
    df = edit(df, _spread(df))
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    before = s_dk.ledger.snapshot()
    want = _message(lambda: df.geopriv(s_pd, **KW).range_count(ZONE, rho=1e-5, **call))
    ddf = dd.from_pandas(df, npartitions=NPART)
    got = _message(lambda: ddf.geopriv(s_dk, **KW).range_count(ZONE, rho=1e-5, **call))
    assert got == want
    assert re.search(match, got), got
    assert got.endswith("Nothing was charged.")
    assert s_dk.ledger.snapshot() == before


@pytest.mark.parametrize("per", ["user", pytest.param("point", marks=SLOW)])
def test_privatize_sums_users_over_partitions_without_a_shuffle(cluster, per, monkeypatch):
    # each user's points lie in several partitions: the amount per point (rho / n, n the
    # user's points in all partitions), the charges and the Result are those of the pandas face
    # and of the full shuffle; the rows come back in the input's order
    df = _tracks(n_users=200, seed=2)[["u", "t", "x", "y"]]
    kw = {**KW, "public": ["t"]}
    ddf = dd.from_pandas(df, npartitions=NPART)

    def call(frame, full=False):
        monkeypatch.setattr(parts_mod, "FULL_SHUFFLE", full)
        s = gp.Session(budget=gp.CGP(rho=1e-3))
        out = frame.geopriv(s, **kw).privatize(rho=1e-5, per=per, rng=seeded_rng(4))
        return s, out

    runs = [call(df), call(ddf), call(ddf, full=True)]
    (s_pd, a), (s_new, b), (s_old, c) = runs
    assert b.index.tolist() == df.index.tolist()  # no shuffle: the input's row order
    assert sorted(c.index) == sorted(df.index)
    for s in (s_new, s_old):
        pd.testing.assert_series_equal(s.spent().sort_index(), s_pd.spent().sort_index())
    dicts = [o.attrs["geopriv"].to_dict(value=False) for o in (a, b, c)]
    for d in dicts:
        d["params"] = {k: v for k, v in d["params"].items() if k != "sampler_calls"}
    for other in (dicts[0], dicts[2]):  # the new path against the pandas face and the old path
        assert_same(dicts[1], other, (*CHARGED[1:], "error", "params"))


def test_privatize_points_with_the_users_totals_splits_a_call_exactly():
    # no cluster: what each partition runs. A user's rows in two calls, each told the user's
    # total (n_of=), get the amount per point and the charge of one call over all the rows
    from fractions import Fraction

    from gpframe.errors import GpframeInternalError
    from gpframe.queries.privatize import privatize_points

    xy = np.array([[0.0, 0.0], [10.0, 0.0], [20.0, 5.0], [500.0, 500.0], [30.0, 1.0]])
    codes = np.array([0, 0, 1, 1, 0])
    amt = Fraction(1, 10_000)
    whole = privatize_points(xy, codes, 2, kind="cgp", amount=amt, rng=seeded_rng(1))
    halves = [privatize_points(xy[r], codes[r], 2, kind="cgp", amount=amt, n_of=np.array([3, 2]),
                               rng=seeded_rng(2)) for r in (slice(0, 2), slice(2, 5))]  # fmt: skip
    # each user's bound and charge (ρ: the total's, not the rows here) where it has rows
    err = np.fmax(halves[0].max_error_m, halves[1].max_error_m)
    np.testing.assert_array_equal(err, whole.max_error_m)
    assert [max(a, b) for a, b in zip(halves[0].charges, halves[1].charges, strict=True)] == (
        whole.charges) == [amt, amt]  # fmt: skip
    per_point = {c for h in halves for _, c in h.charge_groups}
    assert per_point == {c for _, c in whole.charge_groups}  # ρ/3 and ρ/2 per point
    with pytest.raises(GpframeInternalError, match="n_of"):
        privatize_points(xy, codes, 2, kind="cgp", amount=amt, n_of=np.array([1, 1]))
