"""``df.geopriv(..., partition=...)``: a metric CRS per public part, one query, charges per part."""

from __future__ import annotations

import warnings

import h3
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.testing import seeded_rng

AK = (-170.0, 51.0, -130.0, 72.0)
PR = (-68.0, 17.5, -65.0, 18.7)


def _data() -> pd.DataFrame:
    rs = np.random.default_rng(7)
    ak = pd.DataFrame({"uid": rs.integers(0, 5, 40), "lon": rs.uniform(-160, -140, 40),
                       "lat": rs.uniform(58, 66, 40), "region": "AK"})  # fmt: skip
    pr = pd.DataFrame({"uid": rs.integers(3, 8, 30), "lon": rs.uniform(-67.2, -65.3, 30),
                       "lat": rs.uniform(17.9, 18.5, 30), "region": "PR"})  # fmt: skip
    return pd.concat([ak, pr], ignore_index=True)


def _bound(session: gp.Session, df: pd.DataFrame | None = None, **kw: object) -> gp.GeoPriv:
    df = _data() if df is None else df
    kw.setdefault("domain", {"AK": AK, "PR": PR})
    return df.geopriv(session, user="uid", lon="lon", lat="lat", crs="EPSG:4326",
                      partition="region", **kw)  # fmt: skip


def _parts_of(df: pd.DataFrame) -> pd.Series:
    return df.groupby("uid")["region"].nunique()


@pytest.mark.parametrize("per", ["user", "point"])
def test_each_user_is_charged_once_per_part_under_one_query_id(per: str) -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    out = _bound(s, df).privatize(rho=1e-4, per=per, rng=seeded_rng(1))
    res = out.attrs["geopriv"]
    if per == "user":
        want = _parts_of(df) * 1e-4
    else:
        want = df.groupby("uid").size() * 1e-4
    got = s.spent()
    assert got.sort_index().to_numpy() == pytest.approx(want.sort_index().to_numpy())
    assert (_parts_of(df) == 2).sum() >= 1  # some users are in both parts (and pay twice)
    qids = {q for u in got.index for q in s.history(u)["query_id"]}
    assert qids == {res.query_id}
    rep = s.report(query_id=res.query_id)
    assert len(rep) == df["uid"].nunique()


def test_each_part_states_its_own_crs_scale_and_inflation() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    res = _bound(s).privatize(rho=1e-4, rng=seeded_rng(2)).attrs["geopriv"]
    parts = {p["value"]: p for p in res.params["partitions"]}
    assert set(parts) == {"AK", "PR"} and res.params["partition"] == "region"
    assert parts["AK"]["crs_m"] != parts["PR"]["crs_m"]
    for p in parts.values():
        assert p["scale_max"] >= 1.0 and 1.0 <= p["noise_inflation"] < 1.05
    # the whole extent in one CRS would cost more inflation than either part
    one = _data().geopriv(s, user="uid", lon="lon", lat="lat", crs="EPSG:4326",
                          domain=(-170.0, 17.5, -65.0, 72.0))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gp.GpframeWarning)
        whole = one.projected.noise_inflation
    assert whole > max(p["noise_inflation"] for p in parts.values())
    assert res.params["noise_inflation"] == max(p["noise_inflation"] for p in parts.values())


def test_output_keeps_the_partition_column_and_each_part_near_its_points() -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=10.0))
    out = _bound(s, df).privatize(rho=1.0, rng=seeded_rng(3))
    assert list(out.columns) == ["uid", "region", "lon", "lat", "geometry"]
    assert out["region"].tolist() == df["region"].tolist()
    # rho = 1 per m^2: a few metres of noise, in each part's own CRS, mapped back to lon/lat
    assert np.abs(out["lon"] - df["lon"]).max() < 1e-3
    assert np.abs(out["lat"] - df["lat"]).max() < 1e-3


def test_released_points_lie_on_their_own_parts_lattice() -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    b = _bound(s, df)
    out = b.privatize(rho=1e-4, rng=seeded_rng(4))
    from gpframe.frame.partition import split

    for part in split(b, lambda *a: None):
        p = part.projected
        back = pyproj_to(p, out["lon"].to_numpy()[part.rows], out["lat"].to_numpy()[part.rows])
        steps = back / 2.0**-10
        assert np.abs(steps - np.rint(steps)).max() < 1e-3  # on the 2^-10 m lattice


def pyproj_to(p: object, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    import pyproj

    tr = pyproj.Transformer.from_crs(p.crs_in, p.crs_m, always_xy=True)  # type: ignore[attr-defined]
    x, y = tr.transform(lon, lat)
    return np.c_[x, y]


def _h3(df: pd.DataFrame, res: int) -> list[str]:
    return [h3.latlng_to_cell(b, a, res) for a, b in zip(df["lon"], df["lat"], strict=True)]


def _zone(df: pd.DataFrame) -> np.ndarray:
    return (np.floor((df["lon"] + 180) / 6).astype(int) % 60 + 1).to_numpy()


@pytest.mark.parametrize(
    "column, values",
    [
        ("lon", None),
        ("zone", _zone),
        (
            "zone_name",
            lambda d: [
                f"{z}{'N' if la >= 0 else 'S'}" for z, la in zip(_zone(d), d["lat"], strict=True)
            ],
        ),
        ("epsg", lambda d: 32600 + _zone(d)),
        ("cell", lambda d: _h3(d, 3)),
        ("cell_int", lambda d: [h3.str_to_int(c) for c in _h3(d, 5)]),
    ],
)
def test_partitions_computed_from_the_coordinates_are_refused(column: str, values: object) -> None:
    df = _data()
    if values is not None:
        df[column] = values(df)  # type: ignore[operator]
    s = gp.Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="reveals each row's part") as ei:
        df.geopriv(s, user="uid", lon="lon", lat="lat", crs="EPSG:4326", partition=column)
    assert str(ei.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_the_geometry_column_is_refused_as_a_partition() -> None:
    import geopandas as gpd

    df = _data()
    gdf = gpd.GeoDataFrame(df[["uid", "region"]], geometry=gpd.points_from_xy(df.lon, df.lat),
                           crs="EPSG:4326")  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="holds the coordinates"):
        gdf.geopriv(s, user="uid", partition="geometry")
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"partition": "nope"}, "not a column"),
        ({"to_crs": "EPSG:3338"}, "to_crs= names one for all"),
        ({"domain": {"AK": AK}}, "no public extent for the part"),
        ({"domain": {"AK": AK, "PR": (0, 0, 0, 0)}}, "domain="),
    ],
)
def test_bad_partition_arguments_are_refused_before_the_ledger(kw: dict, match: str) -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    kw = dict(kw)
    part = kw.pop("partition", "region")
    with pytest.raises(InvalidInputError, match=match):
        _data().geopriv(s, user="uid", lon="lon", lat="lat", crs="EPSG:4326", partition=part,
                        **kw)  # fmt: skip
    assert s.ledger.snapshot() == before


def test_missing_partition_values_are_refused() -> None:
    df = _data()
    df.loc[3, "region"] = None
    s = gp.Session(budget=gp.CGP(rho=1.0))
    with pytest.raises(InvalidInputError, match="missing values"):
        _bound(s, df)


@pytest.mark.parametrize("op", ["kde", "nearest_users", "grid_stats"])
def test_other_operations_refuse_a_partition_uncharged(op: str) -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0), central=gp.DP(epsilon=1.0))
    b = _bound(s)
    before = s.ledger.snapshot()
    calls = {
        "kde": lambda: b.kde((-150.0, 60.0), bandwidth_m=1000.0, rho=1e-4),
        "nearest_users": lambda: b.nearest_users((-150.0, 60.0), 1, rho=1e-4),
        "grid_stats": lambda: b.grid_stats(value="uid", bounds=(0, 10), epsilon=1.0, cells=3),
    }
    with pytest.raises(InvalidInputError, match="does not support partition='region'"):
        calls[op]()
    assert s.ledger.snapshot() == before


def test_a_gp_session_and_eps_work_per_part() -> None:
    df = _data()
    s = gp.Session(budget=gp.GP(eps=1.0))
    _bound(s, df).privatize(eps=1e-2, rng=seeded_rng(5))
    want = _parts_of(df) * 1e-2
    assert s.spent().sort_index().to_numpy() == pytest.approx(want.sort_index().to_numpy())


def _one_point_each() -> pd.DataFrame:
    df = _data()
    return df.groupby("uid", sort=False).tail(1).reset_index(drop=True)


def test_range_count_counts_every_part_in_one_query_and_charges_once() -> None:
    df = _one_point_each()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    # a region covering both parts entirely: every user inside
    region = shapely.MultiPolygon([shapely.box(-170, 50, -130, 72), shapely.box(-68, 17, -65, 19)])
    res = _bound(s, df).range_count(region, rho=1e-2, method="dist", rng=seeded_rng(6))
    assert res.value == len(df) and res.error == 0
    assert s.spent().sort_index().to_numpy() == pytest.approx(np.full(len(df), 1e-2))
    qids = {q for u in s.spent().index for q in s.history(u)["query_id"]}
    assert qids == {res.query_id}
    parts = {p["value"]: p for p in res.params["partitions"]}
    assert set(parts) == {"AK", "PR"} and parts["AK"]["crs_m"] != parts["PR"]["crs_m"]
    assert res.params["noise_inflation"] == max(p["noise_inflation"] for p in parts.values())


def test_range_count_with_a_trajectory_reads_one_component_per_user() -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    res = _bound(s, df).range_count(shapely.box(-68, 17, -65, 19), rho=1e-2, reduce="last",
                                    component=("region", "PR"), rng=seeded_rng(7))  # fmt: skip
    users_pr = df.loc[df["region"] == "PR", "uid"].nunique()
    assert res.n_charged == users_pr and res.value == users_pr
    spent = s.spent()  # elimination: users decided early pay only for the rounds they ran
    assert len(spent) == users_pr and ((spent > 0) & (spent <= 1e-2)).all()


def test_range_count_refuses_allocations_with_a_partition_uncharged() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    b = _bound(s, _one_point_each())
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="allocations= is not supported"):
        b.range_count(shapely.box(-68, 17, -65, 19), allocations=1e-2)
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rho": -1e-2}, "rho=-0.01"),
        ({"rho": 0.0}, "rho=0.0"),
        ({}, "exactly one of eps="),
        ({"eps": 1e-2}, "filters are CGP"),
    ],
)
def test_range_count_with_a_partition_checks_the_amount_before_the_ledger(kw, match) -> None:
    # the split path names a bad amount like every other entry point, before anything is touched
    s = gp.Session(budget=gp.CGP(rho=1.0))
    b = _bound(s, _one_point_each())
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=match):
        b.range_count(shapely.box(-68, 17, -65, 19), **kw)
    assert s.ledger.snapshot() == before


def test_a_column_copying_the_coordinates_is_refused_as_a_partition() -> None:
    df = _data().assign(lon_copy=lambda d: d["lon"])
    s = gp.Session(budget=gp.CGP(rho=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="holds the point coordinates"):
        df.geopriv(s, user="uid", lon="lon", lat="lat", crs="EPSG:4326", partition="lon_copy")
    assert s.ledger.snapshot() == before


def test_the_split_output_keeps_only_released_and_public_columns() -> None:
    df = _data().assign(speed=lambda d: d["lon"] * 0.37 + 12.0)  # location-derived, private
    s = gp.Session(budget=gp.CGP(rho=1.0))
    with pytest.warns(gp.GpframeWarning, match="speed"):
        out = _bound(s, df).privatize(rho=1e-4, rng=seeded_rng(8))
    assert "speed" not in out.columns
    assert set(out.columns) == {"uid", "region", "lon", "lat", "geometry"}
    assert not np.isin(out["lon"].to_numpy(), df["lon"].to_numpy()).any()


def test_knn_runs_each_part_in_one_query_and_charges_once_per_part() -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    out = _bound(s, df).knn((-100.0, 40.0), 2, rho=1e-4, rng=seeded_rng(4))
    res = out.attrs["geopriv"]
    got = s.spent().sort_index()
    assert got.to_numpy() == pytest.approx((_parts_of(df) * 1e-4).sort_index().to_numpy())
    assert res.charges.sort_index().to_numpy() == pytest.approx(got.to_numpy())
    qids = {q for u in got.index for q in s.history(u)["query_id"]}
    assert qids == {res.query_id}
    assert list(out.columns) == ["uid", "region", "knn_rank"]
    # each selected row is one of its user's rows in its own part, ranked within (user, part)
    assert (df.loc[out.index, "region"].to_numpy() == out["region"].to_numpy()).all()
    assert (df.loc[out.index, "uid"].to_numpy() == out["uid"].to_numpy()).all()
    n = out.groupby(["uid", "region"])["knn_rank"].agg(["max", "size"])
    assert (n["max"] == n["size"]).all() and (n["size"] <= 2).all()
    assert len(n) == df.groupby(["uid", "region"]).ngroups
    parts = {d["value"]: d for d in res.params["partitions"]}
    assert set(parts) == {"AK", "PR"} and res.params["partition"] == "region"
    assert parts["AK"]["crs_m"] != parts["PR"]["crs_m"]
    assert res.params["noise_inflation"] == max(d["noise_inflation"] for d in parts.values())


@pytest.mark.parametrize("kw", [{"k": 0}, {"k": 2, "gamma0": 99}, {"k": 2, "max_cycles": 0}])
def test_knn_bad_arguments_with_a_partition_are_refused_uncharged(kw: dict) -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    b = _bound(s)
    before = s.ledger.snapshot()
    k = kw.pop("k")
    with pytest.raises(InvalidInputError):
        b.knn((-100.0, 40.0), k, rho=1e-4, **kw)
    assert s.ledger.snapshot() == before


def test_convex_hull_gives_one_hull_per_user_and_part_in_one_query() -> None:
    df = _data()
    s = gp.Session(budget=gp.CGP(rho=1.0))
    out = _bound(s, df).convex_hull(rho=1e-2, rng=seeded_rng(8))
    res = out.attrs["geopriv"]
    got = s.spent().sort_index()
    assert got.to_numpy() == pytest.approx((_parts_of(df) * 1e-2).sort_index().to_numpy())
    assert res.charges.sort_index().to_numpy() == pytest.approx(got.to_numpy())
    qids = {q for u in got.index for q in s.history(u)["query_id"]}
    assert qids == {res.query_id}
    assert list(out.columns) == ["uid", "region", "k", "radius_m", "error_m", "fallback",
                                 "geometry"]  # fmt: skip
    pairs = set(zip(out["uid"], out["region"], strict=True))
    assert pairs == set(zip(df["uid"], df["region"], strict=True))
    assert out.crs.to_epsg() == 4326
    # each hull lies near its own part's points (lon/lat degrees)
    for region, box in (("AK", AK), ("PR", PR)):
        hulls = out[out["region"] == region].geometry
        assert hulls.notna().all()
        assert hulls.intersects(shapely.box(*box).buffer(1.0)).all()
    parts = {d["value"]: d for d in res.params["partitions"]}
    assert parts["AK"]["crs_m"] != parts["PR"]["crs_m"] and res.params["partition"] == "region"


def test_convex_hull_bad_arguments_with_a_partition_are_refused_uncharged() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    b = _bound(s)
    before = s.ledger.snapshot()
    for kw in ({"alpha": 1.5}, {"beta": 2.0}, {"radius_floor_m": -1.0}):
        with pytest.raises(InvalidInputError):
            b.convex_hull(rho=1e-2, **kw)
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("op", ["knn", "convex_hull"])
def test_a_user_who_cannot_pay_every_part_is_left_out_of_all(op: str) -> None:
    # a budget for one part only: users in both parts are excluded (and pay nothing), the others
    # pay once; on a GP session with eps=
    df = _data()
    s = gp.Session(budget=gp.GP(eps=1.5e-2))
    b = _bound(s, df)
    if op == "knn":
        out = b.knn((-100.0, 40.0), 1, eps=1e-2, rng=seeded_rng(9))
    else:
        out = b.convex_hull(eps=1e-2, rng=seeded_rng(9))
    res = out.attrs["geopriv"]
    two = _parts_of(df)
    assert sorted(res.excluded) == sorted(two.index[two == 2].tolist())
    assert set(out["uid"]) == set(two.index[two == 1])
    spent = s.spent().reindex(two.index, fill_value=0.0)
    assert spent.to_numpy() == pytest.approx(np.where(two == 1, 1e-2, 0.0))
