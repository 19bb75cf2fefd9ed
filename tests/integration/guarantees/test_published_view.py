"""Central-DP results publish nothing that depends on who is in the data except through noise.

Neighbouring-dataset checks for every central-DP output form: grid_stats through the accessor
(occupancy "private": add one user; occupancy "public": change one user's values, the
neighbour relation of that model) and through the DuckDB face, and the monitors (above_threshold
Laplace and Gaussian, report_noisy_max, threshold_query, zone_above_threshold). Each runs on D
and on its neighbour with the same seeded source, so the noise is identical; every published
form (attrs, to_dict(), repr, _repr_html_, summary(), GeoParquet metadata) must be identical
apart from the noisy values and the query ids, and must name no user. The per-user view
(charges, exclusions) is the curator's, read from the ledger with session.report(query_id=...).
"""

from __future__ import annotations

import json
import pathlib
import pickle
import re

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor
from gpframe import monitor
from gpframe.ledger import Session
from gpframe.results import CuratorViewError, Result
from gpframe.testing import seeded_rng

TO_CRS = "EPSG:32618"  # a public projected CRS: no data-derived projection
AREA = (-74.0, 40.7, -73.97, 40.73)
#: user ids that cannot occur by chance in any published text
IDS = [f"zq{i:02d}canary" for i in range(12)]
EXTRA = "zq99canary"
_QID = re.compile(r"[0-9a-f]{32}")


def _texts(res: Result) -> dict[str, str]:
    """Every text form of a published result, query ids masked."""
    attr = res.to_attr()
    forms = {
        "repr": repr(res),
        "html": res._repr_html_(),
        "summary": res.summary(),
        "statement": res.privacy_statement(),
        "to_dict": json.dumps(res.to_dict(), sort_keys=True, default=str),
        "to_dict_per_user": json.dumps(res.to_dict(per_user=True), sort_keys=True, default=str),
        "attrs": json.dumps(dict(attr), sort_keys=True),
        "attr_repr": repr(attr),
    }
    return {k: _QID.sub("<qid>", v) for k, v in forms.items()}


def _no_user_named(res: Result, users: list) -> None:
    blob = "\n".join(_texts(res).values()) + repr(pickle.dumps(res))
    for u in users:
        assert str(u) not in blob, f"user id {u!r} appears in the published result"


def _published(res: Result, noisy: tuple[str, ...]) -> dict:
    d = res.to_dict()
    for k in ("query_id", *noisy):
        d.pop(k, None)
    return d


def _per_user_attributes_are_curator_only(res: Result) -> None:
    assert res.charges is None and res.excluded is None and res.allocations is None
    for name in ("n_users", "n_charged", "n_excluded", "spent_total", "saved"):
        with pytest.raises(CuratorViewError, match=r"session\.report"):
            getattr(res, name)
    with pytest.raises(CuratorViewError, match=re.escape(res.query_id)):
        res.to_frame()


# ------------------------------------------------------------------------------------------
# grid_stats through the accessor


def _pings(seed: int = 0, n: int = 480) -> pd.DataFrame:
    rs = np.random.default_rng(seed)  # test data only
    return pd.DataFrame(
        {
            "vessel": [IDS[i] for i in rs.integers(0, len(IDS), n)],
            "lon": -74 + rs.uniform(0.001, 0.029, n),
            "lat": 40.7 + rs.uniform(0.001, 0.029, n),
            "speed": rs.uniform(0, 30, n),
        }
    )


def _session_with_one_user_short_of_budget() -> Session:
    s = Session(central=gp.DP(epsilon=1000.0))
    s.set_budget([IDS[0]], gp.DP(epsilon=0.1))  # cannot pay one cell: excluded
    return s


def _grid_private(df: pd.DataFrame, tmp: pathlib.Path):
    import shapely

    s = _session_with_one_user_short_of_budget()
    out = df.geopriv(s, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                     to_crs=TO_CRS).grid_stats(
        value="speed", bounds=(0, 30), epsilon=0.5, cells=8, occupancy="private",
        public_cells=shapely.box(*AREA), max_cells=3, max_per_cell=5, rng=seeded_rng(21),
    )  # fmt: skip
    path = tmp / "grid.parquet"
    out.to_parquet(path)
    return s, out, path


def _parquet_attrs(path: pathlib.Path) -> dict:
    import pyarrow.parquet as pq

    md = pq.read_schema(path).metadata
    return json.loads(md[b"PANDAS_ATTRS"])


def test_grid_stats_private_occupancy_adding_one_user_changes_only_noisy_values(tmp_path):
    df = _pings()
    extra = pd.DataFrame(
        {"vessel": EXTRA, "lon": [-73.985] * 3, "lat": [40.715] * 3, "speed": [5.0, 6.0, 7.0]}
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    s1, out1, p1 = _grid_private(df, tmp_path / "a")
    s2, out2, p2 = _grid_private(pd.concat([df, extra], ignore_index=True), tmp_path / "b")
    r1, r2 = out1.attrs["geopriv"].result, out2.attrs["geopriv"].result
    # the released frame: the same public cells and columns; only noisy values may differ
    assert out1.index.equals(out2.index) and list(out1.columns) == list(out2.columns)
    noisy = ("value", "error")  # the noisy cells; the largest mean error (from noisy counts)
    assert _published(r1, noisy) == _published(r2, noisy)
    t1, t2 = _texts(r1), _texts(r2)
    for k in ("summary", "statement", "html", "attrs"):
        assert _mask_error(t1[k], r1) == _mask_error(t2[k], r2), k
    a1, a2 = _parquet_attrs(p1)["geopriv"], _parquet_attrs(p2)["geopriv"]
    for a in (a1, a2):
        a.pop("query_id"), a.pop("error")
    assert a1 == a2
    # no user id in any published form, nor in the GeoParquet metadata or the pickled result
    _no_user_named(r2, [*IDS, EXTRA])
    meta = pathlib.Path(p2).read_bytes()
    assert not any(u.encode() in meta for u in [*IDS, EXTRA])
    _per_user_attributes_are_curator_only(r2)
    # what is published instead: the public bound 3 x epsilon x max_cells
    assert r2.spent_at_most == pytest.approx(3 * 0.5 * 3) == r1.spent_at_most
    # the curator's view lists the charges and the exclusion, from the ledger
    rep = s2.report(query_id=r2.query_id)
    assert EXTRA in set(rep.loc[rep["status"] == "charged", "user"])
    assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [IDS[0]]
    assert rep["charge"].max() <= r2.spent_at_most + 1e-12
    assert set(rep["user"]) <= {*IDS, EXTRA}
    assert s1.report(query_id=r1.query_id)["user"].nunique() < rep["user"].nunique()


def _mask_error(text: str, res: Result) -> str:
    from gpframe.results.base import _fmt

    return text.replace(_fmt(res.error), "<error>") if res.error is not None else text


def _grid_public(df: pd.DataFrame):
    s = _session_with_one_user_short_of_budget()
    out = df.geopriv(s, user="vessel", lon="lon", lat="lat", crs="EPSG:4326",
                     to_crs=TO_CRS).grid_stats(
        value="speed", bounds=(0, 30), epsilon=0.5, cells=8, occupancy="public",
        rng=seeded_rng(22),
    )  # fmt: skip
    return s, out


def test_grid_stats_public_occupancy_changing_one_users_values_changes_only_noisy_values():
    df = _pings(seed=1)
    df2 = df.copy()
    mine = df2["vessel"] == IDS[3]
    df2.loc[mine, "speed"] = 30.0 - df2.loc[mine, "speed"]  # same occupancy, other values
    s1, out1 = _grid_public(df)
    _s2, out2 = _grid_public(df2)
    r1, r2 = out1.attrs["geopriv"].result, out2.attrs["geopriv"].result
    assert _published(r1, ("value",)) == _published(r2, ("value",))  # error bounds are public
    t1, t2 = _texts(r1), _texts(r2)
    for k in ("summary", "statement", "html", "attrs"):
        assert t1[k] == t2[k], k
    public_cols = [c for c in out1.columns if c not in ("mean", "variance", "variance_unbiased")]
    pd.testing.assert_frame_equal(pd.DataFrame(out1[public_cols]), pd.DataFrame(out2[public_cols]))
    _no_user_named(r1, IDS)  # the excluded user IDS[0] is not listed
    _per_user_attributes_are_curator_only(r1)
    assert r1.spent_at_most == pytest.approx(r1.Gamma_prime * 0.5 * 2)
    rep = s1.report(query_id=r1.query_id)
    assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [IDS[0]]
    assert rep["charge"].max() == pytest.approx(r1.spent_at_most)


# ------------------------------------------------------------------------------------------
# grid_stats through the DuckDB face


def _sql_grid(df: pd.DataFrame) -> pd.DataFrame:
    duckdb = pytest.importorskip("duckdb")
    from gpframe.duckdb.grid import clip_user, register_grid

    sql = (gp.duckdb.SQL_DIR / "grid_stats.sql").read_text()
    s = _session_with_one_user_short_of_budget()
    con = duckdb.connect()
    con.register("df_in", df)
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.unregister("df_in")
    register_grid(con, s, rng=seeded_rng(23))
    clip_user(con, "pings", user="vessel", cell="cell", value="speed", bounds=(0, 30),
              epsilon=0.5, occupancy="public")  # fmt: skip
    return s, con.sql(sql).df()


def test_duckdb_grid_changing_one_users_values_changes_only_noisy_values():
    import h3.api.numpy_int as h3n

    df = _pings(seed=2)
    df["cell"] = np.array(
        [h3n.latlng_to_cell(a, b, 8) for a, b in zip(df.lat, df.lon, strict=True)],
        dtype=np.uint64,
    )
    df2 = df.copy()
    mine = df2["vessel"] == IDS[5]
    df2.loc[mine, "speed"] = 30.0 - df2.loc[mine, "speed"]
    (s1, o1), (_s2, o2) = _sql_grid(df), _sql_grid(df2)
    public_cols = ["cell", "n_kept", "mean_error", "variance_error"]
    pd.testing.assert_frame_equal(o1[public_cols], o2[public_cols])
    text = o1.to_csv() + o2.to_csv()
    assert not any(u in text for u in IDS)
    # the curator's view of each charged batch lists the user left out for lack of budget
    assert s1.history(IDS[0]).empty
    qids = s1.history(IDS[1])["query_id"].tolist()
    assert qids
    for q in qids:
        rep = s1.report(query_id=q)
        assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [IDS[0]]


# ------------------------------------------------------------------------------------------
# monitors: the users list is the data; one more user must change nothing published


def _monitor_cases():
    return {
        "laplace_at": lambda s, users: monitor.above_threshold(
            s,
            [3, 8, 40, 90],
            50,
            users=users,
            sensitivity=1,
            epsilon=0.5,
            integer=True,
            rng=seeded_rng(31),
        ),
        "gaussian_at_R": lambda s, users: monitor.above_threshold(
            s,
            [0.1, 0.2, 0.9, 0.1, 0.95],
            0.5,
            users=users,
            sensitivity=0.01,
            noise="gaussian",
            sigma=0.05,
            bounds=(0, 1),
            c=2,
            rng=seeded_rng(32),
        ),
        "gaussian_at_S": lambda s, users: monitor.above_threshold(
            s,
            [0.1, 0.2, 0.9, 0.1],
            0.5,
            users=users,
            sensitivity=0.01,
            noise="gaussian",
            sigma=0.05,
            bounds=(0, 1),
            mode="S",
            rng=seeded_rng(33),
        ),
        "report_noisy_max": lambda s, users: monitor.report_noisy_max(
            s,
            [0.2, 0.7, 0.4],
            users=users,
            sigma=0.3,
            bounds=(0, 1),
            sensitivity=0.01,
            rng=seeded_rng(34),
        ),
        "report_noisy_max_laplace": lambda s, users: monitor.report_noisy_max(
            s,
            [2, 7, 4],
            users=users,
            noise="laplace",
            epsilon=0.5,
            sensitivity=1,
            integer=True,
            rng=seeded_rng(35),
        ),
        "threshold_query": lambda s, users: monitor.threshold_query(
            s, 9, tau=5, users=users, epsilon=0.6, rng=seeded_rng(36)
        ),
    }


@pytest.mark.parametrize("case", sorted(_monitor_cases()))
@pytest.mark.parametrize("central", [gp.DP(epsilon=20.0), gp.zCDP(rho=20.0)], ids=["dp", "zcdp"])
def test_monitor_adding_one_user_changes_nothing_published(case, central):
    run = _monitor_cases()[case]
    if central.kind == "zcdp" and case == "gaussian_at_S":
        pytest.skip("mode S needs a pure-DP budget")
    s1, s2 = Session(central=central), Session(central=central)
    r1 = run(s1, IDS)
    r2 = run(s2, [*IDS, EXTRA])
    # same released values (same noise, same queries): the whole published view is identical
    assert _published(r1, ()) == _published(r2, ())
    t1, t2 = _texts(r1), _texts(r2)
    assert t1 == t2
    assert r1.runs == r2.runs and r1.spent_at_most == r2.spent_at_most
    _no_user_named(r2, [*IDS, EXTRA])
    _per_user_attributes_are_curator_only(r2)
    # the curator's view: every user paid exactly the published amount
    rep = pd.concat([s2.report(query_id=q) for q in r2.query_ids])
    per_user = rep.groupby("user")["charge"].sum()
    assert set(per_user.index) == {*IDS, EXTRA}
    assert per_user.to_numpy() == pytest.approx(r2.spent_at_most, rel=1e-12)
    assert s2.spent(notion="central").to_numpy() == pytest.approx(r2.spent_at_most, rel=1e-12)


def test_zone_monitor_adding_one_user_outside_the_zone_changes_nothing_published():
    import shapely

    t = pd.to_datetime(["2020-01-01 00:10", "2020-01-01 01:20", "2020-01-01 02:30"] * 4)
    df = pd.DataFrame({"id": IDS, "lon": [0.5] * 6 + [5.0] * 6, "lat": [0.5] * 12, "t": t})
    extra = pd.DataFrame({"id": [EXTRA], "lon": [5.0], "lat": [5.0], "t": t[:1]})
    out = []
    for data in (df, pd.concat([df, extra], ignore_index=True)):
        s = Session(central=gp.DP(epsilon=5.0))
        out.append(monitor.zone_above_threshold(
            s, data, shapely.box(0, 0, 1, 1), 4, user="id", time="t", start="2020-01-01",
            end="2020-01-01 03:00", epsilon=0.5, rng=seeded_rng(37),
        ))  # fmt: skip
    assert _texts(out[0]) == _texts(out[1])
    _no_user_named(out[1], [*IDS, EXTRA])


def test_zone_monitor_excluding_an_exhausted_user_publishes_what_running_without_them_does():
    # on_exhausted="exclude": the exhausted user's rows are left out of the counts and the
    # exclusion is the curator's to read; the published result equals that of a run on data
    # without that user, so it says nothing about them (not even that someone was excluded)
    import shapely

    t = pd.to_datetime(["2020-01-01 00:10", "2020-01-01 01:20", "2020-01-01 02:30"] * 4)
    df = pd.DataFrame({"id": IDS, "lon": [0.5] * 12, "lat": [0.5] * 12, "t": t})
    runs = []
    for data, short in ((df, True), (df[df["id"] != IDS[0]], False)):
        s = Session(central=gp.DP(epsilon=5.0))
        if short:
            s.set_budget([IDS[0]], gp.DP(epsilon=0.1))  # cannot pay the run: excluded
        res = monitor.zone_above_threshold(
            s, data, shapely.box(0, 0, 1, 1), 3, user="id", time="t", start="2020-01-01",
            end="2020-01-01 03:00", epsilon=0.5, on_exhausted="exclude", rng=seeded_rng(38),
        )  # fmt: skip
        runs.append((s, res))
    (s1, r1), (_, r2) = runs
    assert _texts(r1) == _texts(r2)
    _no_user_named(r1, IDS)
    _per_user_attributes_are_curator_only(r1)
    rep = s1.report(query_id=r1.query_id)
    assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [IDS[0]]
    assert s1.spent([IDS[0]], notion="central").tolist() == [0.0]


def test_report_query_id_must_be_known():
    s = Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="not a query of this ledger"):
        s.report(query_id="nope")
    with pytest.raises(gp.InvalidInputError, match="query_id"):
        s.report(query_id=3)  # type: ignore[arg-type]
    assert s.ledger.snapshot() == before


# ------------------------------------------------------------------------------------------
# previews and exclusions: the curator's view names users, the published view never does


def test_preview_and_exclusions_stay_on_the_curators_side():
    # the preview (dry_run=True) names the excluded user like session.report() does; the
    # central result published afterwards names nobody, and a Preview cannot be published as
    # a result (it is not a Result: no attrs entry, no to_dict, no parquet metadata)
    df = _pings(seed=1)
    s = _session_with_one_user_short_of_budget()
    bound = df.geopriv(s, user="vessel", lon="lon", lat="lat", crs="EPSG:4326", to_crs=TO_CRS)
    kw = dict(value="speed", bounds=(0, 30), epsilon=0.5, cells=8, occupancy="public")
    snap = s.ledger.snapshot()
    pv = bound.grid_stats(**kw, dry_run=True)
    assert s.ledger.snapshot() == snap
    assert list(pv.excluded.index) == [IDS[0]] and IDS[0] in pv.summary()
    assert "curator-side" in repr(pv) and not isinstance(pv, Result)
    assert not hasattr(pv, "to_attr") and not hasattr(pv, "to_dict")
    # on_exhausted="raise": refused, naming the user, nothing written
    with pytest.raises(gp.BudgetExceededError, match=IDS[0]):
        bound.grid_stats(**kw, rng=seeded_rng(22), on_exhausted="raise")
    assert s.ledger.snapshot() == snap
    out = bound.grid_stats(**kw, rng=seeded_rng(22))
    res = out.attrs["geopriv"].result
    _no_user_named(res, IDS)
    _per_user_attributes_are_curator_only(res)
    rep = s.report(query_id=res.query_id)
    assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [IDS[0]]
    # the preview planned exactly what was reserved
    charged = rep[rep["status"] == "charged"].set_index("user")["allocation"]
    planned = pv.allocations[pv.allocations > 0]
    pd.testing.assert_series_equal(planned.sort_index(), charged.sort_index(), check_names=False,
                                   check_index_type=False)  # fmt: skip
