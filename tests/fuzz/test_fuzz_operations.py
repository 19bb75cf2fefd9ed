"""Bad-input fuzzing of the accessor's query methods against a file-backed ledger.

``range_count``, ``kde``, ``kde_raster``, ``knn``, ``convex_hull``, ``nearest_users`` and
``grid_stats`` (issue 10, "Bad-input fuzzing"). Every generated call must succeed or raise a
``GpframeError`` naming an argument; a rejected call must leave the ledger file byte-identical;
an accepted call must release only finite values and never charge a user past their budget.

The frames are valid (binding bad frames is ``test_fuzz_entry_points.py``'s job); the arguments
of the methods are generated: good values, bad scalars (NaN, inf, 0, negative, huge, wrong
types), bad geometries (bow-ties, empty polygons, lon/lat given as metres, foreign CRSs) and
bad option names. Two sessions share one ledger directory: a CGP one (with a central DP budget,
for ``grid_stats``) and a GP one, so that both notions' paths and their refusals are exercised.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp
from gpframe.queries.range_count import First, Last

from ._harness import assert_budgets, assert_finite, attempt, bad_scalars, good_amounts, scalars

_nan, _inf = float("nan"), float("inf")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))

#: user 5 gets a tiny budget so that exclusion paths run too
POOR, POOR_BUDGET = 5, 1e-6


@pytest.fixture(scope="module")
def ledger_dir():
    d = Path(tempfile.mkdtemp(prefix="gpfuzz-ops-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _session(path: Path, budget, central):
    s = gp.Session(str(path), budget=budget, central=central)
    s.set_budget([POOR], type(budget)(**{budget_kw(budget): POOR_BUDGET}))
    return s


def budget_kw(b) -> str:
    return "eps" if b.kind == "gp" else "rho"


@pytest.fixture(scope="module")
def sessions(ledger_dir):
    s = {
        "cgp": _session(ledger_dir / "cgp.sqlite", gp.CGP(rho=1e3), gp.DP(epsilon=1e3)),
        "gp": _session(ledger_dir / "gp.sqlite", gp.GP(eps=1e3), None),
    }
    yield s
    for v in s.values():
        v.close()


def _frame_utm() -> pd.DataFrame:
    """6 users x 4 points in UTM 18N metres, with public time, hour and value columns."""
    n = 24
    i = np.arange(n)
    return pd.DataFrame(
        {
            "u": np.repeat(np.arange(6), 4),
            "x": 500_000.0 + (i * 137) % 3000,
            "y": 4_500_000.0 + (i * 251) % 3000,
            "t": pd.date_range("2020-01-01", periods=n, freq="min"),
            "hour": i % 3,
            "v": (i * 7) % 11 * 1.0,
            "s": ["a"] * n,
        }
    )


def _frame_lonlat() -> pd.DataFrame:
    """The same users in degrees (projected by gpframe)."""
    f = _frame_utm()
    f["lon"] = -75.0 + (f["x"] - 500_000.0) / 85_000.0
    f["lat"] = 40.0 + (f["y"] - 4_500_000.0) / 111_000.0
    return f.drop(columns=["x", "y"])


def _frame_one() -> pd.DataFrame:
    """One row per user (kde, nearest_users without component)."""
    return _frame_utm().groupby("u", as_index=False).last()


FRAMES = {"utm": _frame_utm, "lonlat": _frame_lonlat, "one": _frame_one}


@pytest.fixture(scope="module")
def bounds_cache(sessions):
    cache = {}
    for skind, s in sessions.items():
        for fkind, make in FRAMES.items():
            df = make()
            pub = ["t", "hour", "v", "s"]  # public by construction (the docstrings above)
            if fkind == "lonlat":
                cache[skind, fkind] = df.geopriv(s, user="u", lon="lon", lat="lat", crs=4326,
                                                 to_crs="EPSG:32618",
                                                 public=pub)  # fmt: skip
            else:
                cache[skind, fkind] = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618",
                                                 public=pub)  # fmt: skip
    return cache


def _bound(bounds_cache, skind, fkind):
    return bounds_cache[skind, fkind]


def _check(entry: str, bound, ok: bool, out, finite) -> None:
    """After a call: released values finite (``finite(out)`` gives them), budgets respected."""
    s = bound.session
    if ok:
        vals = finite(out)
        if vals is not None:
            assert_finite(entry, vals)
    assert_budgets(entry, s)


# --------------------------------------------------------------------------------------------
# shared strategies
# --------------------------------------------------------------------------------------------

#: an amount keyword pair: usually one good amount, sometimes bad or both / none
amount_kw = st.one_of(
    good_amounts.map(lambda v: {"rho": v}),
    good_amounts.map(lambda v: {"eps": v}),
    st.fixed_dictionaries({}, optional={"rho": scalars, "eps": scalars}),
)
methods = st.sampled_from(["pt", "dist", "pt-elim", "dist-elim", "PT", "", None, 1, "elim"])
rounds_st = st.one_of(
    st.integers(1, 12),
    st.sampled_from([0, -1, 64, 65, 10**6, 2**70, 1.5, 2.0, True, None, "3", _nan, np.int64(4)]),
)
splits = st.sampled_from(["doubling", "even", "DOUBLING", "", None, 3, (0.5, 0.5)])
betas = st.one_of(bad_scalars, st.floats(1e-6, 0.99))
components = st.sampled_from(
    [
        None,
        "last",
        "first",
        "middle",
        ("hour", 0),
        ("hour", 99),
        ("nope", 1),
        ("hour",),
        Last("t"),
        Last("t", before="2020-01-01 00:10"),
        Last("t", before="not a time"),
        Last("nope"),
        First("t", after="2020-01-01 00:05"),
        First("t", after=pd.Timestamp("2020-01-01", tz="UTC")),
        lambda f: f["hour"] == 1,
        lambda f: np.ones(3, dtype=bool),
        lambda f: f["hour"],
        5,
    ]
)
reduces = st.sampled_from([None, None, "last", "first", "mean", 1, ""])
frame_kinds = st.sampled_from(["utm", "utm", "lonlat", "one"])
session_kinds = st.sampled_from(["cgp", "cgp", "gp"])


def _utm_to(fkind, x, y):
    """A metre coordinate near the data as the frame's CRS sees it (degrees for lonlat)."""
    if fkind == "lonlat":
        return -75.0 + (x - 500_000.0) / 85_000.0, 40.0 + (y - 4_500_000.0) / 111_000.0
    return x, y


def _names(kw, *extra):
    return (
        *kw.keys(),
        *extra,
        "component",
        "column",
        "session",
        "budget",
        "amount",
        "before",
        "after",
        "time",
    )


# --------------------------------------------------------------------------------------------
# range_count
# --------------------------------------------------------------------------------------------


@functools.cache
def _regions(fkind):
    with warnings.catch_warnings():  # shapely warns on building the NaN polygons
        warnings.simplefilter("ignore", RuntimeWarning)
        return _make_regions(fkind)


def _make_regions(fkind):
    import geopandas as gpd

    x0, y0 = _utm_to(fkind, 500_000.0, 4_500_000.0)
    x1, y1 = _utm_to(fkind, 501_500.0, 4_501_500.0)
    box = shapely.box(x0, y0, x1, y1)
    utm_box = shapely.box(500_000.0, 4_500_000.0, 501_500.0, 4_501_500.0)
    ll_box = shapely.box(-75.0, 40.0, -74.98, 40.013)
    return {
        "box": box,
        "hole": shapely.Polygon(
            box.exterior.coords,
            [shapely.box(*box.centroid.buffer((x1 - x0) / 10).bounds).exterior.coords],
        ),
        "multi": shapely.MultiPolygon([box, shapely.affinity.translate(box, 3 * (x1 - x0))]),
        "bowtie": shapely.Polygon([(x0, y0), (x1, y1), (x1, y0), (x0, y1)]),
        "empty": shapely.Polygon(),
        "flat": shapely.Polygon([(x0, y0), (x1, y0), (x0 + (x1 - x0) / 2, y0)]),
        "nan": shapely.Polygon([(x0, y0), (_nan, y1), (x1, y0)]),
        "inf": shapely.Polygon([(x0, y0), (_inf, y1), (x1, y0)]),
        "huge": shapely.box(0, 0, 1e300, 1e300),
        "tiny": shapely.box(x0, y0, x0 + 1e-12, y0 + 1e-12),
        "series_ll": gpd.GeoSeries([ll_box, ll_box], crs=4326),
        "series_utm": gpd.GeoSeries([utm_box], crs=32618, index=["a"]),
        "series_nocrs": gpd.GeoSeries([box]),
        "metres_as_ll": gpd.GeoSeries([utm_box], crs=4326),  # lon/lat given as metres
        "ll_as_metres": gpd.GeoSeries([ll_box], crs=32618),  # metres given as lon/lat
        "other_crs": gpd.GeoSeries([utm_box], crs=32633),  # the wrong UTM zone
        "series_empty": gpd.GeoSeries([], crs=4326),
        "series_none": gpd.GeoSeries([utm_box, None], crs=32618),
        "series_point": gpd.GeoSeries([shapely.Point(500_000, 4_500_000)], crs=32618),
        "series_emptypoly": gpd.GeoSeries([shapely.Polygon()], crs=32618),
        "gdf": gpd.GeoDataFrame({"n": [1]}, geometry=[utm_box], crs=32618),
        "gdf_nogeom": gpd.GeoDataFrame({"n": [1]}),
        "df": pd.DataFrame({"geometry": [utm_box]}),
        "series_plain": pd.Series([utm_box]),
        "point": shapely.Point(x0, y0),
        "line": shapely.LineString([(x0, y0), (x1, y1)]),
        "wkt": box.wkt,
        "none": None,
        "list": [box],
    }


REGION_KEYS = list(_regions("utm").keys())

allocations_st = st.sampled_from(
    [
        None,
        None,
        None,
        None,
        1e-3,
        0.0,
        -1.0,
        _nan,
        "x",
        np.full(6, 1e-3),
        np.ones(2),
        pd.Series({0: 1e-3, 1: 2e-3}),
        pd.Series({0: _nan, 1: 1e-3}),
        pd.Series({0: -1.0}),
    ]
)

range_kw = st.fixed_dictionaries(
    {},
    optional={
        "method": methods,
        "rounds": rounds_st,
        "split": splits,
        "beta": betas,
        "component": components,
        "reduce": reduces,
        "allocations": allocations_st,
    },
)


def _range_values(out):
    t = out.to_frame()
    return t[["count", "error", "saving"]].to_numpy(dtype=np.float64)


def _range_count(bounds_cache, skind, fkind, region_key, amt, kw):
    bound = _bound(bounds_cache, skind, fkind)
    region = _regions(fkind)[region_key]
    kw = {**amt, **kw}
    if "allocations" in kw and kw["allocations"] is not None:
        kw.pop("rho", None), kw.pop("eps", None)
    ok, out = attempt(
        "accessor.range_count",
        _names(kw, "region", "rho", "eps", "CRS", "crs", "allocations"),
        bound.range_count,
        region,
        ledger=bound.session.path,
        progress=False,
        **kw,
    )
    _check("accessor.range_count", bound, ok, out, _range_values)
    if ok:
        assert (out.charges <= out.allocations.reindex(out.charges.index) + 1e-12).all()


_RANGE_COUNT_ARGS = dict(
    skind=session_kinds,
    fkind=frame_kinds,
    region=st.sampled_from(REGION_KEYS),
    amt=amount_kw,
    kw=range_kw,
)


@settings(max_examples=100, **SETTINGS)
@given(**_RANGE_COUNT_ARGS)
def test_range_count(bounds_cache, skind, fkind, region, amt, kw):
    _range_count(bounds_cache, skind, fkind, region, amt, kw)


@pytest.mark.slow
@settings(max_examples=1500, **SETTINGS)
@given(**_RANGE_COUNT_ARGS)
def test_range_count_slow(bounds_cache, skind, fkind, region, amt, kw):
    _range_count(bounds_cache, skind, fkind, region, amt, kw)


# --------------------------------------------------------------------------------------------
# kde and kde_raster
# --------------------------------------------------------------------------------------------


@functools.cache
def _query_points(fkind):
    import geopandas as gpd

    x, y = _utm_to(fkind, 500_700.0, 4_500_700.0)
    return {
        "point": shapely.Point(x, y),
        "tuple": (x, y),
        "array": np.array([[x, y], [x + 0.001, y]]),
        "array3": np.array([[x, y, 0.0]]),
        "nan": np.array([[x, _nan]]),
        "inf": (x, _inf),
        "empty": np.zeros((0, 2)),
        "ragged": [[x, y], [x]],
        "str": "POINT (0 0)",
        "none": None,
        "huge": (1e300, 1e300),
        "series_ll": gpd.GeoSeries([shapely.Point(-74.99, 40.006)], crs=4326),
        "series_utm": gpd.GeoSeries([shapely.Point(500_700.0, 4_500_700.0)], crs=32618),
        "metres_as_ll": gpd.GeoSeries([shapely.Point(500_700.0, 4_500_700.0)], crs=4326),
        "series_empty": gpd.GeoSeries([], crs=4326),
        "series_emptypt": gpd.GeoSeries([shapely.Point()], crs=32618),
        "series_none": gpd.GeoSeries([None], crs=32618),
        "series_poly": gpd.GeoSeries([shapely.box(0, 0, 1, 1)], crs=32618),
        "gdf": gpd.GeoDataFrame(geometry=[shapely.Point(500_700.0, 4_500_700.0)], crs=32618),
        "df": pd.DataFrame({"x": [x], "y": [y]}),
        "emptypt": shapely.Point(),
    }


QUERY_KEYS = list(_query_points("utm").keys())
metres = st.one_of(bad_scalars, st.floats(1.0, 1e5), st.sampled_from([500, 2000.0, 1e7]))

kde_kw = st.fixed_dictionaries(
    {"bandwidth_m": metres},
    optional={
        "method": methods,
        "rounds": rounds_st,
        "split": splits,
        "beta": betas,
        "nu_m": metres,
        "component": components,
        "reduce": reduces,
    },
)


def _kde_values(out):
    if isinstance(out.value, pd.DataFrame):
        return out.value[["kde", "error", "saving"]].to_numpy(dtype=np.float64)
    return [out.value, out.error]


def _kde(bounds_cache, skind, fkind, qkey, amt, kw):
    bound = _bound(bounds_cache, skind, fkind)
    if fkind != "one" and "component" not in kw and "reduce" not in kw:
        kw = {**kw, "reduce": "last"}  # mostly reach the mechanism, not the one-row check
    kw = {**amt, **kw}
    ok, out = attempt(
        "accessor.kde",
        _names(kw, "at", "rho", "eps", "query point", "CRS"),
        bound.kde,
        _query_points(fkind)[qkey],
        ledger=bound.session.path,
        progress=False,
        **kw,
    )
    _check("accessor.kde", bound, ok, out, _kde_values)
    if ok:
        v = out.value["kde"] if isinstance(out.value, pd.DataFrame) else [out.value]
        assert all(0.0 <= float(a) <= 1.0 for a in v), out


_KDE_ARGS = dict(
    skind=session_kinds,
    fkind=frame_kinds,
    qkey=st.sampled_from(QUERY_KEYS),
    amt=amount_kw,
    kw=kde_kw,
)


@settings(max_examples=80, **SETTINGS)
@given(**_KDE_ARGS)
def test_kde(bounds_cache, skind, fkind, qkey, amt, kw):
    _kde(bounds_cache, skind, fkind, qkey, amt, kw)


@pytest.mark.slow
@settings(max_examples=1200, **SETTINGS)
@given(**_KDE_ARGS)
def test_kde_slow(bounds_cache, skind, fkind, qkey, amt, kw):
    _kde(bounds_cache, skind, fkind, qkey, amt, kw)


def _raster_bounds(fkind):
    x0, y0 = _utm_to(fkind, 499_000.0, 4_499_000.0)
    x1, y1 = _utm_to(fkind, 504_000.0, 4_504_000.0)
    return st.sampled_from(
        [
            None,
            (x0, y0, x1, y1),
            (x1, y1, x0, y0),  # inverted
            (x0, y0, x0, y1),  # zero width
            (x0, _nan, x1, y1),
            (x0, y0, _inf, y1),
            (x0, y0, x1),
            (x0, y0, x1, y1, 0.0),
            ("a", "b", "c", "d"),
            "bounds",
            5,
            (-1e300, -1e300, 1e300, 1e300),
            (499_000.0, 4_499_000.0, 504_000.0, 4_504_000.0),  # metres (lon/lat frame: wrong)
            (-75.0, 40.0, -74.9, 40.1),  # degrees (metre frame: a 0.1 x 0.1 m box)
            np.array([x0, y0, x1, y1]),
        ]
    )


raster_kw = st.fixed_dictionaries(
    {"bandwidth_m": st.one_of(bad_scalars, st.floats(50.0, 5e4), st.sampled_from([1e3, 5e3]))},
    optional={
        "cell_m": st.one_of(bad_scalars, st.floats(10.0, 1e4), st.sampled_from([0.01, 1.0, 1e9])),
        "correct": st.sampled_from([True, False, None, 0, "yes", _nan]),
        "component": components,
        "reduce": reduces,
    },
)


def _raster_values(out):
    return [np.asarray(out.value, dtype=np.float64).ravel(), list(out.transform)]


def _kde_raster(bounds_cache, skind, fkind, amt, kw, bounds):
    bound = _bound(bounds_cache, skind, fkind)
    if fkind != "one" and "component" not in kw and "reduce" not in kw:
        kw = {**kw, "reduce": "last"}
    kw = {**amt, **kw}
    if bounds is not None:
        kw["bounds"] = bounds
    ok, out = attempt(
        "accessor.kde_raster",
        _names(kw, "bounds", "rho", "eps", "bandwidth", "cell_m", "raster"),
        bound.kde_raster,
        ledger=bound.session.path,
        **kw,
    )
    _check(
        "accessor.kde_raster",
        bound,
        ok,
        out,
        lambda o: np.concatenate(
            [np.asarray(o.value, dtype=np.float64).ravel(), np.asarray(o.transform, float)]
        ),
    )
    if ok:
        assert (np.asarray(out.value) >= 0).all()


@settings(max_examples=50, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, amt=amount_kw, kw=raster_kw, data=st.data())
def test_kde_raster(bounds_cache, skind, fkind, amt, kw, data):
    _kde_raster(bounds_cache, skind, fkind, amt, kw, data.draw(_raster_bounds(fkind)))


@pytest.mark.slow
@settings(max_examples=600, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, amt=amount_kw, kw=raster_kw, data=st.data())
def test_kde_raster_slow(bounds_cache, skind, fkind, amt, kw, data):
    _kde_raster(bounds_cache, skind, fkind, amt, kw, data.draw(_raster_bounds(fkind)))


# --------------------------------------------------------------------------------------------
# knn, convex_hull, nearest_users
# --------------------------------------------------------------------------------------------

ks = st.one_of(
    st.integers(1, 6),
    st.sampled_from([0, -1, 10**6, 2**70, 1.5, 2.0, True, None, "2", _nan, np.int64(2), [2]]),
)

knn_kw = st.fixed_dictionaries(
    {},
    optional={
        "compat": st.sampled_from([None, "reference", "ref", 1]),
        "gamma0": st.one_of(bad_scalars, st.floats(-20, 20)),
        "scan_order": st.sampled_from([None, "random", "input", "sorted", 0]),
        "max_cycles": st.sampled_from([1, 10, 1000, 0, -1, 1.5, True, None, 10**6, "5"]),
        "beta": betas,
    },
)


def _knn(bounds_cache, skind, fkind, qkey, k, amt, kw):
    bound = _bound(bounds_cache, skind, fkind)
    kw = {**amt, **kw}
    ok, out = attempt(
        "accessor.knn",
        _names(kw, "point", "k", "rho", "eps", "gamma0", "coordinates", "CRS"),
        bound.knn,
        _query_points(fkind)[qkey],
        k,
        ledger=bound.session.path,
        **kw,
    )
    _check(
        "accessor.knn",
        bound,
        ok,
        out,
        # k-PNN releases row labels and ranks, never a coordinate
        lambda o: o["knn_rank"].to_numpy(dtype=np.float64),
    )
    if ok:
        assert not {"x", "y", "lon", "lat", "geometry"} & set(out.columns)
        res = out.attrs["geopriv"]
        kk = int(k)
        assert (out.groupby(bound.user)["knn_rank"].max() <= kk).all()
        assert res is not None


_KNN_ARGS = dict(
    skind=session_kinds,
    fkind=frame_kinds,
    qkey=st.sampled_from(QUERY_KEYS),
    k=ks,
    amt=amount_kw,
    kw=knn_kw,
)


@settings(max_examples=80, **SETTINGS)
@given(**_KNN_ARGS)
def test_knn(bounds_cache, skind, fkind, qkey, k, amt, kw):
    _knn(bounds_cache, skind, fkind, qkey, k, amt, kw)


@pytest.mark.slow
@settings(max_examples=1200, **SETTINGS)
@given(**_KNN_ARGS)
def test_knn_slow(bounds_cache, skind, fkind, qkey, k, amt, kw):
    _knn(bounds_cache, skind, fkind, qkey, k, amt, kw)


hull_kw = st.fixed_dictionaries(
    {},
    optional={
        "beta": betas,
        "k": st.one_of(
            st.sampled_from([None, 16, 3, 128, 0, -1, 10**6, 1.5, True, "16", _nan]),
            st.integers(1, 200),
        ),
        "alpha": st.one_of(bad_scalars, st.floats(0.01, 0.99)),
        "k_rule": st.sampled_from(["reference", "consistent", "other", None]),
        "radius_floor_m": st.one_of(bad_scalars, st.floats(0.0, 1e4)),
    },
)


def _hull_values(o):
    xy = shapely.get_coordinates(np.asarray(o.geometry.array, dtype=object))
    return np.concatenate([xy.ravel(), o[["radius_m", "error_m"]].to_numpy(float).ravel()])


def _convex_hull(bounds_cache, skind, fkind, amt, kw):
    bound = _bound(bounds_cache, skind, fkind)
    kw = {**amt, **kw}
    ok, out = attempt(
        "accessor.convex_hull",
        _names(kw, "rho", "eps", "beta", "k", "alpha"),
        bound.convex_hull,
        ledger=bound.session.path,
        **kw,
    )
    _check("accessor.convex_hull", bound, ok, out, _hull_values)


@settings(max_examples=60, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, amt=amount_kw, kw=hull_kw)
def test_convex_hull(bounds_cache, skind, fkind, amt, kw):
    _convex_hull(bounds_cache, skind, fkind, amt, kw)


@pytest.mark.slow
@settings(max_examples=1000, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, amt=amount_kw, kw=hull_kw)
def test_convex_hull_slow(bounds_cache, skind, fkind, amt, kw):
    _convex_hull(bounds_cache, skind, fkind, amt, kw)


nearest_kw = st.fixed_dictionaries(
    {},
    optional={
        "method": methods,
        "rounds": rounds_st,
        "split": splits,
        "beta": betas,
        "component": components,
        "reduce": reduces,
    },
)


def _nearest(bounds_cache, skind, fkind, qkey, k, amt, kw):
    bound = _bound(bounds_cache, skind, fkind)
    if fkind != "one" and "component" not in kw and "reduce" not in kw:
        kw = {**kw, "reduce": "last"}
    kw = {**amt, **kw}
    ok, out = attempt(
        "accessor.nearest_users",
        _names(kw, "point", "k", "rho", "eps", "users", "CRS"),
        bound.nearest_users,
        _query_points(fkind)[qkey],
        k,
        ledger=bound.session.path,
        **kw,
    )
    _check(
        "accessor.nearest_users",
        bound,
        ok,
        out,
        lambda o: [o.error if o.error is not None else 0.0],
    )
    if ok:
        assert len(out.value) == int(k) and len(set(out.value)) == len(out.value)


_NEAREST_USERS_ARGS = dict(
    skind=session_kinds,
    fkind=frame_kinds,
    qkey=st.sampled_from(QUERY_KEYS),
    k=ks,
    amt=amount_kw,
    kw=nearest_kw,
)


@settings(max_examples=80, **SETTINGS)
@given(**_NEAREST_USERS_ARGS)
def test_nearest_users(bounds_cache, skind, fkind, qkey, k, amt, kw):
    _nearest(bounds_cache, skind, fkind, qkey, k, amt, kw)


@pytest.mark.slow
@settings(max_examples=1200, **SETTINGS)
@given(**_NEAREST_USERS_ARGS)
def test_nearest_users_slow(bounds_cache, skind, fkind, qkey, k, amt, kw):
    _nearest(bounds_cache, skind, fkind, qkey, k, amt, kw)


# --------------------------------------------------------------------------------------------
# grid_stats
# --------------------------------------------------------------------------------------------

value_cols = st.sampled_from(["v", "v", "hour", "s", "t", "nope", None, 3, "vnan", "vinf", "u"])
value_bounds = st.one_of(
    st.sampled_from(
        [
            (0, 10),
            (0.0, 11.0),
            (10, 0),
            (5, 5),
            (0, _nan),
            (-_inf, 10),
            (0,),
            (0, 1, 2),
            "0,10",
            None,
            (0, 1e300),
            (0, 10**400),
            ("0", "10"),
            (0, 1),
        ]
    ),
    st.tuples(bad_scalars, bad_scalars),
)
cells_st = st.sampled_from([8, 8, 7, 0, 15, 16, -1, 8.0, True, None, "h3", "nope", "8", "s"])
occupancies = st.sampled_from(
    ["public", "public", "private", "PUBLIC", None, 1, "occ_ok", "occ_bad", "occ_cols"]
)

grid_kw = st.fixed_dictionaries(
    {
        "value": value_cols,
        "bounds": value_bounds,
        "epsilon": st.one_of(bad_scalars, st.floats(1e-3, 10.0)),
        "cells": cells_st,
        "occupancy": occupancies,
    },
    optional={
        "clip": st.sampled_from(["clip-user", "pseudo-user", "none", "clip", None]),
        "clamp": st.sampled_from([True, False]),
        "beta": betas,
        "order_by": st.sampled_from([None, "t", "nope", "vnan"]),
        "max_cells": st.sampled_from([None, 1, 3, 0, -1, 1.5, 10**9, "2"]),
        "max_per_cell": st.sampled_from([None, 1, 4, 0, -1, 1.5, 10**9, "2"]),
        "public_cells": st.sampled_from(["area", "list", "badlist", "emptylist", "far", None, 5]),
        "kappa": st.sampled_from([0.5, 1.0, 2.0, 0, -1.0, _nan, "x"]),
    },
)


def _grid_frame_bound(bounds_cache, skind, fkind):
    bound = _bound(bounds_cache, skind, fkind)
    f = bound.frame
    if "vnan" not in f.columns:  # extra value columns, added once (the frame is ours)
        f["vnan"] = np.where(np.arange(len(f)) == 1, np.nan, 1.0)
        f["vinf"] = np.where(np.arange(len(f)) == 1, np.inf, 1.0)
        import h3

        lon, lat = -75.0, 40.0
        f["h3"] = [h3.latlng_to_cell(lat, lon, 8)] * len(f)
    return bound


def _grid_kw(bound, fkind, kw):
    import h3

    kw = dict(kw)
    occ = kw["occupancy"]
    p = bound.located
    if isinstance(occ, str) and occ.startswith("occ_"):
        from gpframe.frame.grid_stats import h3_cells

        res = kw["cells"] if isinstance(kw["cells"], int) and 0 <= kw["cells"] <= 15 else 8
        cells = [h3.int_to_str(int(c)) for c in h3_cells(p, res)]
        t = pd.DataFrame({"user": p.users, "cell": cells}).value_counts().reset_index()
        if occ == "occ_bad":
            t.loc[0, "count"] += 1
        if occ == "occ_cols":
            t = t.rename(columns={"count": "n"})
        kw["occupancy"] = t
    pc = kw.get("public_cells")
    if pc == "area":
        x0, y0 = _utm_to(fkind, 499_000.0, 4_499_000.0)
        x1, y1 = _utm_to(fkind, 504_000.0, 4_504_000.0)
        kw["public_cells"] = shapely.box(x0, y0, x1, y1)
    elif pc == "far":
        kw["public_cells"] = shapely.box(*_utm_to(fkind, 0.0, 0.0), *_utm_to(fkind, 10.0, 10.0))
    elif pc == "list":
        from gpframe.frame.grid_stats import h3_cells

        kw["public_cells"] = sorted({h3.int_to_str(int(c)) for c in h3_cells(p, 8)})
    elif pc == "badlist":
        kw["public_cells"] = ["not a cell", 0]
    elif pc == "emptylist":
        kw["public_cells"] = []
    return kw


def _grid_values(o):
    rel = o["released"].to_numpy(dtype=bool)
    cols = [c for c in ("mean", "variance", "mean_error", "count") if c in o.columns]
    return o.loc[rel, cols].to_numpy(dtype=np.float64)


def _grid(bounds_cache, skind, fkind, kw):
    bound = _grid_frame_bound(bounds_cache, skind, fkind)
    kw = _grid_kw(bound, fkind, kw)
    ok, out = attempt(
        "accessor.grid_stats",
        _names(
            kw,
            "value",
            "bounds",
            "epsilon",
            "cells",
            "occupancy",
            "central",
            "max_cells",
            "max_per_cell",
            "public_cells",
            "order_by",
            "beta",
            "clip",
            "split",
            "kappa",
        ),
        bound.grid_stats,
        ledger=bound.session.path,
        **kw,
    )
    _check("accessor.grid_stats", bound, ok, out, _grid_values)


@settings(max_examples=80, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, kw=grid_kw)
def test_grid_stats(bounds_cache, skind, fkind, kw):
    _grid(bounds_cache, skind, fkind, kw)


@pytest.mark.slow
@settings(max_examples=1200, **SETTINGS)
@given(skind=session_kinds, fkind=frame_kinds, kw=grid_kw)
def test_grid_stats_slow(bounds_cache, skind, fkind, kw):
    _grid(bounds_cache, skind, fkind, kw)


# --------------------------------------------------------------------------------------------
# regressions: bugs the fuzzer found (each was a non-gpframe exception or a ledger write)
# --------------------------------------------------------------------------------------------


def _refused(entry, bound, fn, *args, **kw):
    ok, msg = attempt(
        entry, _names(kw, "point", "at", "k", "bounds"), fn, *args, ledger=bound.session.path, **kw
    )
    assert not ok, f"{entry} accepted {kw}"
    return msg


@pytest.mark.parametrize("bw", [1e300, 1e-300, 10**400])
def test_kde_extreme_bandwidth_refused_before_reserving(bounds_cache, bw):
    # was: ZeroDivisionError / OverflowError after the reservation (the users were charged)
    b = _bound(bounds_cache, "cgp", "one")
    _refused("accessor.kde", b, b.kde, shapely.Point(500_700, 4_500_700), bandwidth_m=bw, rho=1.0)


def test_huge_int_beta_refused(bounds_cache):
    # was: OverflowError from math.isfinite(10**400)
    b = _bound(bounds_cache, "cgp", "one")
    _refused(
        "accessor.range_count", b, b.range_count, _regions("utm")["box"], rho=1.0, beta=10**400
    )


def test_kde_raster_huge_bounds_refused(bounds_cache):
    # was: GEOSException from shapely.segmentize
    b = _bound(bounds_cache, "cgp", "one")
    _refused(
        "accessor.kde_raster",
        b,
        b.kde_raster,
        bandwidth_m=1000,
        rho=1.0,
        bounds=(-1e300, -1e300, 1e300, 1e300),
    )


def test_knn_point_series_of_none_refused(bounds_cache):
    # was: AttributeError ('NoneType' object has no attribute 'is_empty')
    b = _bound(bounds_cache, "cgp", "utm")
    _refused("accessor.knn", b, b.knn, _query_points("utm")["series_none"], 1, rho=1.0)


def test_knn_point_outside_crs_names_point(bounds_cache):
    # was: a CRSError that did not name the argument
    b = _bound(bounds_cache, "cgp", "utm")
    msg = _refused("accessor.knn", b, b.knn, _query_points("utm")["metres_as_ll"], 1, rho=1.0)
    assert "point" in msg


@pytest.mark.parametrize("g0", ["", object(), 10**400])
def test_knn_bad_gamma0_refused(bounds_cache, g0):
    # was: ValueError / TypeError / OverflowError from float(gamma0)
    b = _bound(bounds_cache, "cgp", "utm")
    _refused("accessor.knn", b, b.knn, (500_700.0, 4_500_700.0), 1, rho=1.0, gamma0=g0)


@pytest.mark.parametrize(
    "kw",
    [
        {"rho": 3e-301},
        {"rho": 1.0, "radius_floor_m": 1e300},
        {"rho": 1.0, "beta": 5e-324},
    ],
)
def test_convex_hull_late_refusals_now_early(bounds_cache, kw):
    # were refused (or warned) after the reservation, inside private_hulls: everybody charged
    b = _bound(bounds_cache, "cgp", "utm")
    _refused("accessor.convex_hull", b, b.convex_hull, **kw)


def test_convex_hull_tiny_alpha_refused_only_where_the_pnn_phase_runs(sessions):
    """alpha=1e-300 leaves the anchor calls (spend ∝ alpha) below the supported amounts: refused
    before reserving when users have more points than the smallest k (16), so the calls would
    run; users with at most 16 points take the fallback (all points at the whole ρ₁), which
    never runs a call, so the same query is answered."""
    session = sessions["cgp"]
    big = pd.DataFrame({"u": np.repeat([0, 1], 40), "x": 500_000.0 + np.arange(80) * 37.0,
                        "y": 4_500_000.0 + (np.arange(80) * 53) % 900})  # fmt: skip
    b = big.geopriv(session, user="u", x="x", y="y", crs=32618)
    _refused("accessor.convex_hull", b, b.convex_hull, rho=1.0, alpha=1e-300)
    small = big.groupby("u").head(4)
    s = small.geopriv(session, user="u", x="x", y="y", crs=32618)
    out = s.convex_hull(rho=1.0, alpha=1e-300)
    assert out["fallback"].all() and len(out) == 2


def test_nearest_users_unaffordable_k_leaves_file_untouched(bounds_cache):
    # was: refused after reserve() + cancel(), which wrote to the ledger file
    b = _bound(bounds_cache, "cgp", "one")
    _refused(
        "accessor.nearest_users",
        b,
        b.nearest_users,
        (500_700.0, 4_500_700.0),
        6,
        rho=1.0,
        method="pt",
    )


def test_kde_at_none_refused(bounds_cache):
    # was: IndexError (np.asarray(None, float) is a 0-d array)
    b = _bound(bounds_cache, "cgp", "one")
    _refused("accessor.kde", b, b.kde, None, bandwidth_m=500, rho=1.0)


def test_convex_hull_lonlat_tiny_eps_keeps_answers(bounds_cache):
    # was: CRSError after the charge (noisy hull outside EPSG:4326's area): charged, no answer
    b = _bound(bounds_cache, "gp", "lonlat")
    ok, out = attempt("accessor.convex_hull", ("eps",), b.convex_hull, eps=1e-6)
    assert ok, out
    _check("accessor.convex_hull", b, ok, out, _hull_values)


def test_nearest_users_huge_point_refused_before_reserving(bounds_cache):
    # was: refused by the lattice snap inside the reservation (everybody charged)
    b = _bound(bounds_cache, "cgp", "one")
    _refused("accessor.nearest_users", b, b.nearest_users, (1e300, 1e300), 1, rho=1.0)


def test_knn_huge_k(bounds_cache):
    # was: OverflowError (2**70 into an int64 numpy minimum)
    b = _bound(bounds_cache, "cgp", "utm")
    ok, out = attempt("accessor.knn", ("k",), b.knn, (500_700.0, 4_500_700.0), 2**70, rho=1.0)
    assert ok, out


def test_kde_raster_huge_bandwidth_on_fine_cells_refused(bounds_cache):
    # was: MemoryError (a 30 GiB padded grid) after the reservation
    b = _bound(bounds_cache, "gp", "one")
    _refused(
        "accessor.kde_raster",
        b,
        b.kde_raster,
        bandwidth_m=630_593,
        eps=3.95,
        bounds=(499000.0, 4499000.0, 504000.0, 4504000.0),
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"bounds": (0, 10**400)},
        {"bounds": (0, 1e300)},
        {"bounds": (0, 1e-300)},
        {"epsilon": np.True_},
    ],
)
def test_grid_stats_extreme_bounds_refused(bounds_cache, kw):
    # were: OverflowError; IndexError in the plan; a refusal after the reservation; np.True_ as 1
    b = _grid_frame_bound(bounds_cache, "cgp", "utm")
    args = {
        "value": "v",
        "bounds": (0, 11),
        "epsilon": 1.0,
        "cells": 8,
        "occupancy": "public",
        **kw,
    }
    _refused("accessor.grid_stats", b, b.grid_stats, **args)


def test_convex_hull_alpha_as_a_0d_array_is_accepted(bounds_cache):
    # was: TypeError from Fraction(array(0.1)) in the accessor's preflight (private_hulls
    # itself reads alpha with exact(), which takes a 0-d array)
    b = _bound(bounds_cache, "cgp", "utm")
    out = b.convex_hull(rho=1.0, alpha=np.array(0.1))
    assert 1 <= len(out) <= 6  # users with too small a budget are excluded, not failed
