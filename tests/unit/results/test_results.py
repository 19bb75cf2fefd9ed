"""Result objects: repr, HTML, to_dict, to_frame, summary (STYLE.md §4, §10; DESIGN §3 step 6)."""

from __future__ import annotations

import json
from fractions import Fraction

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely

from gpframe.results import PrivatizeResult, Result


@pytest.fixture
def res() -> PrivatizeResult:
    charges = pd.Series([2e-6] * 27 + [1e-6], index=[f"u{i}" for i in range(28)])
    alloc = pd.Series(2e-6, index=charges.index)
    return PrivatizeResult(
        value=np.zeros((1000, 2)),
        error=412.3,
        confidence=0.95,
        params={"rho": Fraction(1, 500000), "beta": 0.05, "g": Fraction(1, 1024)},
        charges=charges,
        allocations=alloc,
        excluded=["u98", "u99"],
        query_id="q-0001",
    )


def test_counts_and_spend(res):
    assert (res.n_users, res.n_charged, res.n_excluded) == (30, 28, 2)
    assert res.spent_total == pytest.approx(27 * 2e-6 + 1e-6, rel=1e-15)
    assert res.spent_max == 2e-6
    assert res.spent_mean == pytest.approx(res.spent_total / 28)
    assert res.saved == pytest.approx(1e-6)
    assert res.beta == pytest.approx(0.05)
    assert res.notion == "metric" and res.n_points == 1000
    assert res.charges.dtype == np.float64 and res.charges.name == "charge"


def test_repr_is_one_line(res):
    r = repr(res)
    assert "\n" not in r
    assert r.startswith("PrivatizeResult(value=<1000 points>, error_95=412.3 m, charged=28 users")
    assert "excluded=2" in r and "spent_max=rho=2e-06 m⁻²" in r and r.endswith("query_id=q-0001)")


def test_repr_without_error_or_allocations():
    r = Result(value=None, kind="gp", charges={"a": Fraction(1, 2)})
    assert repr(r) == (
        "Result(value=None, charged=1 users, excluded=0, spent_max=eps=0.5 m⁻¹, query_id=-)"
    )
    assert r.saved == 0.0
    # a central result states the public bound only (the per-user view is in the ledger)
    c = Result(value=None, kind="dp", charges={"a": Fraction(1, 2)}, spent_at_most=0.5)
    assert repr(c) == "Result(value=None, spent_at_most=epsilon=0.5, query_id=-)"
    assert c.r_min is None  # central notions have no metric floor


def test_error_label_follows_confidence():
    r = Result(value=1.0, error=3.0, error_kind="abs error (users)", confidence=0.99)
    assert "error_99=3 users" in repr(r)
    r = Result(value=1.0, error=3.0, error_kind="abs error", confidence=0.975)
    assert "error_97.5=3," in repr(r)


def test_repr_html_is_a_small_escaped_table(res):
    h = res._repr_html_()
    assert h.startswith("<table") and h.endswith("</table>")
    assert "max point error (m)" in h and "412.3 m" in h and "q-0001" in h
    assert "28 / 2" in h and "r_min = 1 m" in h
    r = Result(value="<script>", mechanism="<b>x</b>")
    assert "<b>x</b>" not in r._repr_html_() and "&lt;b&gt;x&lt;/b&gt;" in r._repr_html_()


def test_to_dict_is_json_serialisable(res):
    d = res.to_dict()
    s = json.dumps(d)
    back = json.loads(s)
    assert back["type"] == "PrivatizeResult"
    assert back["n_charged"] == 28 and back["n_excluded"] == 2 and back["n_users"] == 30
    assert back["excluded"] == ["u98", "u99"]
    assert back["charges"]["u27"] == 1e-6
    assert back["params"]["rho"] == 2e-6 and back["params"]["g"] == 2**-10
    assert back["guarantee"]["kind"] == "cgp" and back["guarantee"]["r_min"] == 1.0
    assert "protection below r_min = 1 m equals that at 1 m" in back["guarantee"]["statement"]
    assert len(back["value"]) == 1000 and back["value"][0] == [0.0, 0.0]
    assert back["error"] == 412.3 and back["confidence"] == 0.95
    assert back["spec"] == (
        "docs/operations/privatize.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023)"
    )


def test_to_dict_handles_frames_geometries_and_numpy_scalars():
    gdf = gpd.GeoDataFrame(
        {"user": ["a", "b"]}, geometry=[shapely.Point(0, 0), shapely.Point(1, 2)], crs=32650
    )
    r = PrivatizeResult(
        value=gdf,
        error=np.float64(10.0),
        confidence=0.95,
        params={"n": np.int64(3), "metric": ("floor", 1), "nan": float("nan")},
        metric=("floor", 1.0),
        charges=pd.Series({"a": 1e-4, "b": 1e-4}),
    )
    back = json.loads(json.dumps(r.to_dict()))
    assert back["value"]["type"] == "FeatureCollection" and len(back["value"]["features"]) == 2
    assert back["params"] == {"n": 3, "metric": ["floor", 1], "nan": None}
    assert back["guarantee"]["metric"] == ["floor", 1.0]
    assert repr(r).startswith("PrivatizeResult(value=<2 points>")
    df = Result(value=pd.DataFrame({"x": [1, 2]}))
    assert json.loads(json.dumps(df.to_dict()))["value"] == [{"x": 1}, {"x": 2}]
    assert repr(df).startswith("Result(value=<DataFrame: 2 rows>")


def test_to_frame_per_user_table(res):
    f = res.to_frame()
    assert list(f.columns) == ["status", "allocation", "charge", "saved"]
    assert f.index.name == "user" and len(f) == 30
    assert (f.loc[["u98", "u99"], "status"] == "excluded").all()
    assert (f.loc[["u98", "u99"], "charge"] == 0).all()
    assert f.loc["u27", "saved"] == pytest.approx(1e-6)
    assert f["charge"].sum() == pytest.approx(res.spent_total)
    assert f["saved"].sum() == pytest.approx(res.saved)


def test_to_frame_empty():
    f = Result(value=None).to_frame()
    assert len(f) == 0 and list(f.columns) == ["status", "allocation", "charge", "saved"]


def test_summary_has_privacy_statement(res):
    s = res.summary()
    assert s.splitlines()[0] == "PrivatizeResult"
    assert "concentrated geo-privacy (CGP)" in s
    assert "protection below r_min = 1 m equals that at 1 m" in s
    assert "2 user(s) were excluded" in s
    assert "confidence 0.95" in s


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("gp", "exp(eps·r)"),
        ("cgp", "α·rho·r²"),
        ("dp", "exp(epsilon)"),
        ("zcdp", "at most α·rho"),
        ("dp_expost", "ex-post"),
    ],
)
def test_privacy_statement_per_notion(kind, words):
    r = Result(value=0, kind=kind, charges={"a": 0.1})
    st = r.privacy_statement()
    assert words in st
    assert ("r_min" in st) == (kind in ("gp", "cgp"))


def test_cgp_statement_with_approx_gp_reading():
    r = Result(value=0, kind="cgp", charges={"a": 1e-4}, approx=(1e-6, 100.0))
    assert "(0.08434 m⁻¹, 1e-06, 100 m)-GP via Lem. 3.7" in r.privacy_statement()


def test_bad_kind_is_rejected():
    with pytest.raises(ValueError, match="kind="):
        Result(value=0, kind="ldp")


def test_result_is_frozen(res):
    with pytest.raises(AttributeError):
        res.value = None  # type: ignore[misc]


def test_result_attr_is_json_and_survives_pandas_operations_without_copying():
    """attrs['geopriv'] must survive pandas ops (deep-copied attrs) and GeoParquet's json.dumps."""
    import copy
    import json
    import pickle

    r = Result(
        value=np.zeros((3, 2)),
        error=1.5,
        mechanism="laplace_gp",
        kind="gp",
        charges=pd.Series({"a": 0.01, "b": 0.02}),
        query_id="q-9",
    )
    attr = r.to_attr()
    df = pd.DataFrame({"x": [1, 2, 3]})
    df.attrs["geopriv"] = attr
    sub = df[df.x > 1].copy()
    assert sub.attrs["geopriv"] is attr  # shared, not deep-copied
    assert copy.deepcopy(attr) is attr
    assert sub.attrs["geopriv"].spent_max == pytest.approx(0.02)
    assert repr(sub.attrs["geopriv"]) == repr(r)
    loaded = json.loads(json.dumps(df.attrs))
    assert loaded["geopriv"]["query_id"] == "q-9"
    assert loaded["geopriv"]["charges"] is None  # per-user detail stays out of file metadata
    assert pickle.loads(pickle.dumps(attr)).query_id == "q-9"


@pytest.mark.parametrize("kind", ["dp", "zcdp", "dp_expost"])
def test_central_result_holds_and_shows_only_the_published_view(kind):
    """Central DP: no user id, per-user charge, exclusion or user count in any output form."""
    import json
    import pickle

    from gpframe.results import CuratorViewError

    users = {"alice-zq": 0.5, "bob-zq": 0.25}
    r = Result(value=3.0, error=1.0, confidence=0.95, kind=kind, charges=users,
               allocations={"alice-zq": 0.5, "bob-zq": 0.5}, excluded=["carol-zq"],
               query_id="q-c", spent_at_most=0.5)  # fmt: skip
    forms = [repr(r), r._repr_html_(), r.summary(), r.privacy_statement(),
             json.dumps(r.to_dict()), json.dumps(r.to_dict(per_user=True)),
             json.dumps(dict(r.to_attr())), repr(r.to_attr()), repr(pickle.dumps(r))]  # fmt: skip
    for text in forms:
        assert "-zq" not in text and "excluded for lack of budget;" not in text
    d = r.to_dict()
    assert d["view"] == "published" and d["spent_at_most"] == 0.5
    assert d["guarantee"]["amount"] == 0.5 and d["query_id"] == "q-c"
    for key in ("n_users", "n_charged", "n_excluded", "excluded", "charges", "spent_total",
                "spent_mean", "saved"):  # fmt: skip
        assert key not in d
    assert r.charges is None and r.allocations is None and r.excluded is None
    assert r.spent_max == 0.5  # the public bound, not the realised maximum
    for name in ("n_users", "n_charged", "n_excluded", "spent_total", "spent_mean", "saved"):
        with pytest.raises(CuratorViewError, match=r"session\.report\(query_id='q-c'\)"):
            getattr(r, name)
        with pytest.raises(AttributeError):  # through the attrs entry too
            getattr(r.to_attr(), name)
    with pytest.raises(CuratorViewError):
        r.to_frame()
    assert "spent per user, at most" in r.summary() and "session.report" in r.summary()


def test_central_result_without_a_stated_bound_says_so():
    r = Result(value=1.0, kind="dp", charges={"a": 0.3})
    assert "spent_at_most=n/a" in repr(r)
    assert r.to_dict()["spent_at_most"] is None and r.guarantee["amount"] is None
    assert "not stated" in r.privacy_statement()


def _hulls(n: int) -> gpd.GeoDataFrame:
    rng = np.random.default_rng(0)
    polys = [shapely.MultiPoint(rng.uniform(0, 100, (8, 2)) + 50 * i).convex_hull for i in range(n)]
    return gpd.GeoDataFrame({"boat": np.arange(n) % (n - 1)}, geometry=polys, crs="EPSG:32618")


def test_hull_plot_is_one_collection_with_a_path_per_hull():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpframe.results import HullResult

    hulls = _hulls(41)  # the last hull is user 0 again
    ax = HullResult(value=hulls, error=1.0, confidence=0.95).plot()
    try:
        # one layer for every hull (a categorical plot draws one per user and redraws each time)
        assert len(ax.collections) == 1
        coll = ax.collections[0]
        assert len(coll.get_paths()) == 41
        faces = coll.get_facecolors()
        assert len(faces) == 41 and (faces[0] == faces[-1]).all()  # the same user, one colour
        assert not (faces[0] == faces[1]).all()
        empty = HullResult(value=hulls.iloc[:0], error=1.0, confidence=0.95).plot()
        assert len(empty.collections) == 0
    finally:
        plt.close("all")
