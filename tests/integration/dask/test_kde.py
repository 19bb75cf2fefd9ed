"""The Dask face's kde_raster and kde on a LocalCluster, against the pandas face.

See beyond-one-machine.md. kde_raster: same charges and Result fields; the same raster law (a
seeded comparison with the spread of two pandas runs); refusals before the ledger is touched.
kde at query points: below.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

from .fields import CHARGED, assert_same

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
BOUNDS = (490_000, 4_490_000, 510_000, 4_510_000)
CALL = {"bandwidth_m": 1_000, "cell_m": 250, "rho": 1e-4, "component": gp.Last("t")}


def _tracks(n_users=2000, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    counts = r.integers(1, 3, n_users)
    u = np.repeat(np.arange(n_users), counts)
    return pd.DataFrame({
        "u": u, "t": r.permutation(u.size),
        "x": 500_000 + r.normal(0, 2_000, u.size), "y": 4_500_000 + r.normal(0, 2_000, u.size),
    })  # fmt: skip


def _pandas(df, seed, **kw):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    return s, df.geopriv(s, **KW).kde_raster(rng=seeded_rng(seed), **{**CALL, **kw})


def _dask(df, seed, **kw):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    ddf = dd.from_pandas(df, npartitions=4)
    return s, ddf.geopriv(s, **KW).kde_raster(rng=seeded_rng(seed), **{**CALL, **kw})


def test_charges_fields_and_grid_match_the_pandas_face(cluster):
    df = _tracks()
    (s_pd, a), (s_dk, b) = _pandas(df, 1, bounds=BOUNDS), _dask(df, 2, bounds=BOUNDS)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert a.shape == b.shape and a.transform == b.transform and a.crs == b.crs
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    assert_same(da, db, CHARGED)
    assert da["params"] == db["params"]
    assert s_dk.ledger.verify()["charges"] == 1


@pytest.mark.statistical
def test_the_raster_has_the_pandas_law(cluster):
    # Seeded: the L1 distance between the Dask raster and a pandas one is of the size of the
    # distance between two pandas rasters (independent noise). A partition dropped or released
    # twice, or points of the wrong users, moves it (and the mass) by several times that; the
    # noise's own scale is corrected away by design (docs/operations/kde.md), so the noise law
    # itself is tested on privatize (test_privatize.py) and in tests/unit/queries.
    df = _tracks(seed=3)
    _, a1 = _pandas(df, 11, bounds=BOUNDS)
    _, a2 = _pandas(df, 12, bounds=BOUNDS)
    _, b = _dask(df, 13, bounds=BOUNDS)
    ref = np.abs(a1.value - a2.value).sum()
    assert np.abs(a1.value - b.value).sum() < 2.0 * ref
    assert abs(a1.mass - b.mass) < 0.02 and b.n_charged == df["u"].nunique()


def test_bounds_from_the_released_points(cluster):
    _, r = _dask(_tracks(300), 4)
    assert r.n_charged == 300 and r.value.ndim == 2 and np.isfinite(r.value).all()


@pytest.mark.parametrize("kw,match", [
    ({"bandwidth_m": -1.0}, "bandwidth_m"),
    ({"bounds": (1, 2, 3)}, "bounds="),
    ({"component": ("t", -1)}, "no rows"),
    ({"rho": None, "eps": 1e-3}, "filters are CGP"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, kw, match):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_tracks(50), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.kde_raster(**{**CALL, **kw})
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


# ---------------------------------------------------------------------------------------------
# kde at query points. ``dist`` (one round, no elimination): the same charges and Result fields
# as the pandas face on the whole frame, and the same released value as the pandas face run on
# each partition's users with that (point, partition)'s child of the seeded source (the same
# draws; the client adds them). ``pt-elim``: users beyond nu stop early and pay less, as on the
# pandas face. Refusals before the ledger is touched.

PKW = {"user": "u", "x": "x", "y": "y", "crs": CRS}
QS = [(500_000.0, 4_500_000.0), (501_000.0, 4_500_500.0)]
PFIELDS = ("type", "mechanism", "guarantee", "n_users", "n_charged", "charges", "spent_total",
          "spent_max", "confidence", "params")  # fmt: skip


def _point_rows(n_users=60, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    # a third of the users 60 km away (beyond nu = 3b: they stop early with *-elim)
    far = np.arange(n_users) % 3 == 0
    return pd.DataFrame({"u": np.arange(n_users),
                         "x": 500_000 + r.uniform(0, 3_000, n_users) + 60_000 * far,
                         "y": 4_500_000 + r.uniform(0, 3_000, n_users)})  # fmt: skip


@pytest.mark.parametrize("budget,amount", [(gp.CGP(rho=1e-2), {"rho": 1e-4}),
                                           (gp.GP(eps=1.0), {"eps": 1e-2})])  # fmt: skip
def test_points_dist_values_charges_and_result_match_the_pandas_face(cluster, budget, amount):
    df = _point_rows()
    ddf = dd.from_pandas(df.set_index("u"), npartitions=3, sort=True)
    call = dict(bandwidth_m=2_000, method="dist", **amount)
    s_dk = gp.Session(budget=budget)
    b = ddf.geopriv(s_dk, **PKW).kde(QS, rng=seeded_rng(3), **call)
    s_pd = gp.Session(budget=budget)
    a = df.geopriv(s_pd, **PKW).kde(QS, rng=seeded_rng(4), **call)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    for key in PFIELDS:
        assert da[key] == db[key], key
    assert list(b.points.columns) == list(a.points.columns)
    assert (b.points["n_near"] == 60).all() and (b.points["error"] <= 1).all()
    # each partition's released contributions at each point, from the pandas face with that
    # (point, partition)'s child stream: the same draws, so the same value (up to the order of
    # the additions)
    totals = np.zeros(len(QS))
    n = ddf.npartitions
    for i in range(n):
        part = ddf.get_partition(i).compute().reset_index()
        for j, q in enumerate(QS):
            r = part.geopriv(gp.Session(budget=budget), **PKW).kde(
                shapely.Point(q), rng=seeded_rng(3).spawn(j * n + i), **call
            )
            totals[j] += r.value * len(part)
    np.testing.assert_allclose(b.points["kde"].to_numpy(), totals / len(df), rtol=1e-12)
    # and the value is noisy: another seed releases another
    c = ddf.geopriv(gp.Session(budget=budget), **PKW).kde(QS, rng=seeded_rng(5), **call)
    assert (c.points["kde"] != b.points["kde"]).all()


@pytest.mark.parametrize("budget,amount", [(gp.CGP(rho=1e-2), {"rho": 1e-4}),
                                           (gp.GP(eps=1.0), {"eps": 1e-2})])  # fmt: skip
def test_points_pt_releases_once_and_matches_the_pandas_face(cluster, budget, amount):
    # the baseline: one reservation, each user's point released once on its worker, every
    # query point evaluated on the client from the released points
    df = _point_rows()
    ddf = dd.from_pandas(df.set_index("u"), npartitions=3, sort=True)
    call = dict(bandwidth_m=2_000, method="pt", **amount)
    s_dk = gp.Session(budget=budget)
    b = ddf.geopriv(s_dk, **PKW).kde(QS, rng=seeded_rng(3), **call)
    s_pd = gp.Session(budget=budget)
    a = df.geopriv(s_pd, **PKW).kde(QS, rng=seeded_rng(4), **call)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert s_dk.ledger.verify()["charges"] == 1  # charged once for both points
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    for key in PFIELDS:
        assert da[key] == db[key], key
    assert list(b.points.columns) == list(a.points.columns)
    assert (b.points["n_near"] == 60).all() and (b.points["error"] <= 1).all()
    # each partition's released points are the pandas face's with that partition's child
    # stream (the same draws), so the value is the pandas face's per-partition sums, added
    totals = np.zeros(len(QS))
    for i in range(ddf.npartitions):
        part = ddf.get_partition(i).compute().reset_index()
        r = part.geopriv(gp.Session(budget=budget), **PKW).kde(
            QS, rng=seeded_rng(3).spawn(i), **call
        )
        totals += r.points["kde"].to_numpy() * len(part)
    np.testing.assert_allclose(b.points["kde"].to_numpy(), totals / len(df), rtol=1e-12)
    c = ddf.geopriv(gp.Session(budget=budget), **PKW).kde(QS, rng=seeded_rng(5), **call)
    assert (c.points["kde"] != b.points["kde"]).all()  # noisy: another seed, another value


def test_points_pt_elim_stops_the_far_users_early_as_the_pandas_face(cluster):
    df = _point_rows()
    call = dict(bandwidth_m=2_000, rho=1e-4)
    s_dk, s_pd = gp.Session(budget=gp.CGP(rho=1e-2)), gp.Session(budget=gp.CGP(rho=1e-2))
    b = (
        dd.from_pandas(df, npartitions=3)
        .geopriv(s_dk, **PKW)
        .kde(shapely.Point(QS[0]), rng=seeded_rng(6), **call)
    )
    a = df.geopriv(s_pd, **PKW).kde(shapely.Point(QS[0]), rng=seeded_rng(7), **call)
    assert isinstance(b.value, float) and 0 <= b.value <= 1 and b.error <= 1
    far = df["u"][df["u"] % 3 == 0]
    assert int(b.points["n_far"].iloc[0]) == int(a.points["n_far"].iloc[0]) == len(far)
    # the far users keep most of their allocation, the near ones pay all of it, on both faces
    for s in (s_dk, s_pd):
        spent = s.spent()
        assert (spent.loc[far] < 1e-4).all()
        assert np.allclose(spent.drop(far), 1e-4)
    assert b.n_charged == a.n_charged == 60


@pytest.mark.parametrize("call,match", [
    ({"bandwidth_m": 0, "rho": 1e-4}, "bandwidth_m"),
    ({"bandwidth_m": 500, "rho": 1e-4, "method": "nope"}, "method"),
    ({"bandwidth_m": 500, "rho": 1e-4, "beta": 2}, "beta"),
    ({"bandwidth_m": 500, "eps": 1e-4}, "pass rho="),
])  # fmt: skip
def test_points_bad_input_is_refused_before_the_ledger_is_touched(cluster, call, match):
    s = gp.Session(budget=gp.CGP(rho=1e-2))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_point_rows(12), npartitions=2).geopriv(s, **PKW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.kde(QS[0], **call)
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_points_bad_query_points_are_refused_before_the_ledger_is_touched(cluster):
    s = gp.Session(budget=gp.CGP(rho=1e-2))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_point_rows(12), npartitions=2).geopriv(s, **PKW)
    for at in (None, [(np.nan, 1.0)], []):
        with pytest.raises(gp.GpframeError, match="at") as err:
            bound.kde(at, bandwidth_m=500, rho=1e-4)
        assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before
