"""The Dask face's privatize on a LocalCluster, against the pandas face (beyond-one-machine.md).

Same charges, same Result fields, same output columns, and the same noise law (seeded KS tests on
the noise radii); the output is staged and published only after the charge; bad input is refused
before the ledger is touched.
"""

from __future__ import annotations

import json
import os
import pickle

import dask.dataframe as dd
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
from scipy import stats

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

from .fields import SUMMARY, assert_same

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}


def _frame(n_users=300, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    counts = r.integers(1, 6, n_users)
    u = np.repeat(np.arange(n_users), counts)
    n = u.size
    return pd.DataFrame({
        "u": u, "x": 500_000 + r.uniform(-3_000, 3_000, n),
        "y": 4_500_000 + r.uniform(-3_000, 3_000, n), "t": np.arange(n), "speed": r.random(n),
    })  # fmt: skip


def _both(df, *, budget=None, npartitions=4, **call):
    budget = budget or gp.CGP(rho=1e-3)
    s_pd, s_dk = gp.Session(budget=budget), gp.Session(budget=budget)
    with pytest.warns(gp.GpframeWarning, match="dropped columns"):
        a = df.geopriv(s_pd, **KW).privatize(rng=seeded_rng(1), **call)
    with pytest.warns(gp.GpframeWarning, match="dropped columns"):
        b = (
            dd.from_pandas(df, npartitions=npartitions)
            .geopriv(s_dk, **KW)
            .privatize(rng=seeded_rng(2), **call)
        )
    return (s_pd, a), (s_dk, b)


@pytest.mark.parametrize("call", [{"rho": 1e-5}, {"rho": 1e-5, "per": "point"}])
def test_in_memory_output_charges_and_result_match_the_pandas_face(cluster, call):
    df = _frame()
    (s_pd, a), (s_dk, b) = _both(df, **call)
    assert isinstance(b, gpd.GeoDataFrame) and b.crs == a.crs
    assert list(b.columns) == list(a.columns) == ["u", "t", "x", "y", "geometry"]
    assert sorted(b.index) == sorted(a.index)  # every row once
    b = b.loc[a.index]
    assert (b["u"].to_numpy() == a["u"].to_numpy()).all()
    assert (b["t"].to_numpy() == a["t"].to_numpy()).all()
    # the same charges, user by user, and the same ledger state apart from ids and times
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    ra, rb = a.attrs["geopriv"], b.attrs["geopriv"]
    da, db = ra.to_dict(value=False), rb.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, (*SUMMARY, "error"))
    pa, pb = dict(da["params"]), dict(db["params"])
    pa.pop("sampler_calls"), pb.pop("sampler_calls")  # one call per distinct amount per task
    assert pa == pb
    rep = [s.report().drop(columns=["query_id"], errors="ignore") for s in (s_pd, s_dk)]
    assert rep[0].columns.tolist() == rep[1].columns.tolist()
    assert s_dk.ledger.verify()["charges"] == 1


def _radii(out, df):
    out = out.loc[df.index]
    dx = out["x"].to_numpy() - df["x"].to_numpy()
    return np.hypot(dx, out["y"].to_numpy() - df["y"].to_numpy())


@pytest.mark.statistical
@pytest.mark.parametrize("call", [{"rho": 1e-5}, {"eps": 3e-3}])
def test_noise_radii_follow_the_pandas_law(cluster, call):
    # Two-sample KS on the per-point noise radius, seeded streams: false-failure probability
    # 1e-4 per case under the null (same law); a wrong scale (e.g. noise drawn at rho instead
    # of rho/n) moves the radii by a factor >= sqrt(2) and fails it with p < 1e-30.
    df = _frame(n_users=1500, seed=3)
    budget = gp.CGP(rho=1e-3) if "rho" in call else gp.GP(eps=1.0)
    (_, a), (_, b) = _both(df, budget=budget, **call)
    p = stats.ks_2samp(_radii(a, df), _radii(b, df)).pvalue
    assert p > 1e-4, p


def test_to_publishes_parquet_after_the_charge(cluster, tmp_path):
    df = _frame()
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    target = tmp_path / "out"
    bound = dd.from_pandas(df, npartitions=3).geopriv(s, **KW)
    with pytest.warns(gp.GpframeWarning, match="dropped columns"):
        res = bound.privatize(rho=1e-5, to=target, rng=seeded_rng(5))
    assert res.params["output"] == str(target) and res.value is None
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the staging directory was renamed
    files = sorted(os.listdir(target))
    assert files == ["_gpframe_result.json"] + [f"part.{i:05d}.parquet" for i in range(3)]
    saved = json.loads((target / "_gpframe_result.json").read_text())
    assert saved["query_id"] == res.query_id and saved["n_charged"] == df["u"].nunique()
    back = gpd.read_parquet(target)  # the JSON is not taken for data
    assert len(back) == len(df) and back.crs == CRS
    assert sorted(back.columns) == ["geometry", "t", "u", "x", "y"]
    assert s.history(0)["query_id"].tolist() == [res.query_id]  # charged once


def test_an_existing_target_is_refused_before_the_ledger_is_touched(cluster, tmp_path):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    (tmp_path / "out").mkdir()
    bound = dd.from_pandas(_frame(), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.InvalidInputError, match=r"exists already.*Nothing was charged"):
        bound.privatize(rho=1e-5, to=tmp_path / "out")
    assert s.ledger.snapshot() == before


def _bad_frames():
    df = _frame(n_users=20)
    nan = df.copy()
    nan.loc[5, "x"] = np.nan
    lonlat = pd.DataFrame({"u": [1, 2], "lon": [-74.0, -74.1], "lat": [40.7, 40.8]})
    return [
        ("user column", df, {"user": "nope", "x": "x", "y": "y", "crs": CRS}, {"rho": 1e-5},
         "user='nope' is not a column"),
        ("no crs", df, {"user": "u", "x": "x", "y": "y"}, {"rho": 1e-5}, "have no CRS"),
        ("x is public", df, {**KW, "public": ["x"]}, {"rho": 1e-5}, "cannot be public"),
        ("NaN", nan, KW, {"rho": 1e-5}, "column 'x'"),
        ("data-extent CRS", lonlat, {"user": "u", "lon": "lon", "lat": "lat", "crs": "EPSG:4326"},
         {"rho": 1e-5}, "needs a metric CRS chosen from public information"),
        ("rho", df, KW, {"rho": -1.0}, "rho"),
        ("both", df, KW, {"rho": 1e-5, "eps": 1e-3}, "rho"),
        ("rng", df, KW, {"rho": 1e-5, "rng": np.random.default_rng(0)}, "rng"),
        ("per", df, KW, {"rho": 1e-5, "per": "row"}, "per='row'"),
    ]  # fmt: skip


def _id(v):
    return v if isinstance(v, str) and " " not in v[:1] else ""


@pytest.mark.parametrize("name,df,kw,call,match", _bad_frames(), ids=_id)
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, name, df, kw, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    with pytest.raises(gp.GpframeError, match=match) as err:
        dd.from_pandas(df, npartitions=2).geopriv(s, **kw).privatize(**call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_a_frame_indexed_by_user_is_not_shuffled(cluster):
    df = _frame()
    s_pd, s_dk = gp.Session(budget=gp.CGP(rho=1e-3)), gp.Session(budget=gp.CGP(rho=1e-3))
    ddf = dd.from_pandas(df, npartitions=4).set_index("u")
    assert ddf.known_divisions
    bound = ddf.geopriv(s_dk, **{**KW, "public": ["t", "speed"]})
    assert "shuffle=no" in repr(bound)
    out = bound.privatize(rho=1e-5, per="point", rng=seeded_rng(6))
    df.geopriv(s_pd, **{**KW, "public": ["t", "speed"]}).privatize(rho=1e-5, per="point")
    assert len(out) == len(df) and out["u"].tolist() == sorted(df["u"])
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())


def test_an_index_without_divisions_is_refused(cluster):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    unsorted = _frame().sample(frac=1.0, random_state=0).set_index("u")
    ddf = dd.from_pandas(unsorted, npartitions=2, sort=False)
    with pytest.raises(gp.InvalidInputError, match="divisions are unknown"):
        ddf.geopriv(s, **KW)


def test_dask_geopandas_frames_and_users_who_cannot_pay(cluster):
    import dask_geopandas

    df = _frame(n_users=50)
    gdf = gpd.GeoDataFrame(df[["u", "t"]], geometry=gpd.points_from_xy(df.x, df.y), crs=CRS)
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    s.set_budget([0, 1, 2], gp.CGP(rho=1e-6))  # below the amount: excluded, never noised
    dg = dask_geopandas.from_geopandas(gdf, npartitions=3)
    out = dg.geopriv(s, user="u", public=["t"]).privatize(rho=1e-5, rng=seeded_rng(7))
    res = out.attrs["geopriv"]
    assert res.n_excluded == 3 and sorted(res.excluded) == [0, 1, 2]
    assert out.loc[out["u"].isin([0, 1, 2]), "geometry"].isna().all()
    assert out.loc[~out["u"].isin([0, 1, 2]), "geometry"].notna().all()
    assert s.spent()[[0, 1, 2]].tolist() == [0.0, 0.0, 0.0]


def test_the_session_cannot_be_shipped_so_it_never_is(cluster):
    # the ledger's SQLite connection does not pickle: every call above ran its tasks on worker
    # processes without sending the session (a task holding it would fail to serialise)
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    with pytest.raises(TypeError):
        pickle.dumps(s)
    assert len(cluster.scheduler_info()["workers"]) == 2


def test_a_noise_scale_in_the_wrong_unit_warns_once_on_the_client(cluster):
    # the pandas face warns once per call when a noise scale is outside [1 m, 100 km]; the
    # workers' warning would stay in their logs, so the client states it
    df = _frame(n_users=40)
    s = gp.Session(budget=gp.GP(eps=1.0))
    bound = dd.from_pandas(df, npartitions=3).geopriv(s, **{**KW, "public": ["t", "speed"]})
    with pytest.warns(gp.GpframeWarning, match="above 100 km for 40 of 40 users") as record:
        bound.privatize(eps=5e-6, rng=seeded_rng(9))
    assert len([r for r in record if "noise scale" in str(r.message)]) == 1
    assert record[0].filename == __file__


def test_split_privatize_on_the_cluster_charges_what_the_pandas_face_does(cluster, tmp_path):
    # partition= (one metric CRS per public part): the slow tier runs the other forms in
    # test_partition.py; this one shares this module's cluster
    from .test_partition import test_split_privatize_charges_and_states_what_the_pandas_face_does

    test_split_privatize_charges_and_states_what_the_pandas_face_does(
        cluster, tmp_path, "user", False
    )


def _graph_bytes(record):
    """Sizes of the graphs the client sent, in order (distributed's large-graph warning)."""
    from dask.utils import parse_bytes

    sent = [str(r.message) for r in record if "Sending large graph of size" in str(r.message)]
    return [parse_bytes(m.split("size ")[1].split(".\n")[0]) for m in sent]


def _every_user(i, n_users=5_000):
    """Partition ``i``: one row of each of ``n_users`` users (true points only, never noise)."""
    r = np.random.default_rng(100 + i)
    return pd.DataFrame({"u": r.permutation(n_users), "x": 500_000 + r.uniform(-3e3, 3e3, n_users),
                         "y": 4_500_000 + r.uniform(-3e3, 3e3, n_users)})  # fmt: skip


def test_the_release_graph_does_not_grow_with_partitions_times_users(cluster, tmp_path):
    # 5,000 users with rows in each of 20 partitions: a release pass that copied each
    # partition's per-user arrays (admission, total points: >= 9 bytes a user) into its task
    # sent ~0.9 MB; every user's totals are in the graph once instead (~13 bytes a user), so
    # the release graph stays under 3 bytes per (partition, user) pair. The first pass sums
    # the same totals: each user is charged n x the amount for their points in all partitions.
    import dask

    n_users, n_parts = 5_000, 20
    # made on the workers (from_map): the rows are not in the graph
    ddf = dd.from_map(_every_user, list(range(n_parts)), meta=_every_user(0).iloc[:0])
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    kw = {k: v for k, v in KW.items() if k != "public"}
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1B"}):
        with pytest.warns(UserWarning, match="Sending large graph") as record:
            out = ddf.geopriv(s, **kw).privatize(rho=1e-5, per="point", to=tmp_path / "out")
    *first, release = _graph_bytes(record)
    assert release < 3 * n_parts * n_users, (first, release)
    assert out.n_charged == n_users and out.params["n_points"] == n_parts * n_users
    assert np.allclose(s.spent().to_numpy(), n_parts * 1e-5)  # each user's total over all parts


def test_the_tree_sums_and_merges_do_not_depend_on_the_grouping():
    # the first pass's counts and the release outputs are reduced in a tree on the workers:
    # any grouping gives the same users, order and totals, and a user released at two
    # different amounts in two partitions is still refused
    from fractions import Fraction

    from gpframe.dask.partitions import add_counts
    from gpframe.dask.privatize import PartOut, merge_users

    r = np.random.default_rng(2)
    parts = []
    for _ in range(5):
        u, c = np.unique(r.integers(0, 50, 40), return_counts=True)
        parts.append((u.astype(object), c.astype(np.int64)))
    users, counts = add_counts(*parts)
    nested = add_counts(add_counts(*parts[:2]), add_counts(*parts[2:]))
    assert users.tolist() == nested[0].tolist() and counts.tolist() == nested[1].tolist()
    assert all(type(x) is int for x in users)  # the ledger's keys, as before the tree
    a = PartOut(
        n_users=2,
        where=np.array([0, 2]),
        groups=[(np.array([0, 1]), Fraction(1, 4))],
        max_error_m=np.array([1.0, 2.0]),
        noise_scale_m=np.array([3.0, 4.0]),
    )
    b = PartOut(
        n_users=1,
        where=np.array([2]),
        groups=[(np.array([0]), Fraction(1, 4))],
        max_error_m=np.array([5.0]),
        noise_scale_m=np.array([1.0]),
    )
    one, two = merge_users(3, a, b), merge_users(3, merge_users(3, b), merge_users(3, a))
    for m in (one, two):
        np.testing.assert_array_equal(m.err, [1.0, np.nan, 5.0])
        np.testing.assert_array_equal(m.scale, [3.0, np.nan, 4.0])
        assert [(g.tolist(), c) for g, c in m.groups()] == [([0, 2], Fraction(1, 4))]
    b.groups = [(np.array([0]), Fraction(1, 8))]
    with pytest.raises(gp.GpframeInternalError, match="different amounts"):
        merge_users(3, merge_users(3, a), b)


def test_unsigned_ids_beyond_int64_are_summed_and_digested_as_themselves():
    # hashed user ids are often uint64: above 2**63 an int64 view would wrap them to negative
    # ids, which the client would then reserve instead of the users' own
    from gpframe.dask.partitions import add_counts, digest

    big = np.array([2**63 + 5, 3, 2**64 - 1], dtype=np.uint64)
    users, counts = add_counts((big, np.array([1, 2, 3], np.int64)),
                               (big[:1], np.array([4], np.int64)))  # fmt: skip
    assert users.tolist() == [3, 2**63 + 5, 2**64 - 1] and counts.tolist() == [2, 5, 3]
    wrapped = big.astype(np.int64)  # the same 64 bits read as signed: other users
    assert digest(big, np.array([1, 2, 3])) != digest(wrapped, np.array([1, 2, 3]))


@pytest.mark.parametrize("geo", [False, True])
def test_points_shipped_as_floats_rebuild_the_pandas_face_output(geo):
    # the workers send x/y instead of shapely points, the client creates the points once over
    # all partitions: the same frame as the one builder's, rows unreleased included
    import warnings

    from gpframe.dask.partitions import from_xy_all, shipped_privatized
    from gpframe.geo import locate_points
    from gpframe.release import privatized_frame

    df = _frame(n_users=20).set_axis(np.arange(0, 3 * len(_frame(n_users=20)), 3))
    frame = df
    kw = {"x": "x", "y": "y", "crs": CRS}
    if geo:
        frame = gpd.GeoDataFrame(df[["u", "t"]], geometry=gpd.points_from_xy(df.x, df.y),
                                 crs=CRS).rename_geometry("pts")  # fmt: skip
        kw = {}
    p = locate_points(frame, user="u", **kw).project()
    xy = p.xy + 25.0  # any released metres
    released = np.arange(len(frame)) % 4 != 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gp.GpframeWarning)
        want = privatized_frame(frame, p, xy, released, ["u", "t"])
        s = shipped_privatized(frame, p, xy, released, ["u", "t"])
    k = len(frame) // 2
    halves = [(s[0].iloc[:k], s[1], s[2], s[3][:k], s[4][:k]),
              (s[0].iloc[k:], s[1], s[2], s[3][k:], s[4][k:])]  # fmt: skip
    pd.testing.assert_frame_equal(from_xy_all(halves), want)
    assert from_xy_all(halves).geometry.isna().sum() == (~released).sum()
