"""dry_run= and on_exhausted= on the Dask face: the pandas face's plan, on a LocalCluster.

For each operation: the Dask preview's per-user allocations equal the pandas preview's and what
the real Dask call then reserves, exactly (ledger units); the preview leaves the ledger's
snapshot and audit log untouched and submits no release task to the cluster (only the first
pass runs); ``on_exhausted="raise"`` refuses before anything is reserved, naming the users.
"""

from __future__ import annotations

from typing import Any

import dask.dataframe as dd
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.dask  # registers ddf.geopriv
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.results import Preview
from gpframe.testing import seeded_rng

N = 30
LOW = [3, 5]  # users whose budget cannot pay
BOX = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
#: three zones with a public column: one reservation each, on both faces
ZONES = gpd.GeoDataFrame({"name": ["a", "b", "c"]}, crs="EPSG:32618", geometry=[
    shapely.box(500_000 + 5_000 * k, 4_505_000, 505_000 + 5_000 * k, 4_515_000)
    for k in range(3)])  # fmt: skip
P = (505_000.0, 4_505_000.0)
BOUNDS = (500_000, 4_500_000, 520_000, 4_520_000)
KW = {"user": "u", "x": "x", "y": "y", "crs": "EPSG:32618"}
#: the release tasks of the operations (what a dry run must never submit)
RELEASE = (
    "release_partition",
    "count_partition",
    "release_points",
    "knn_partition",
    "hull_partition",
    "kde_partition",
    "release_round",
)

#: name -> call on a bound frame (either face)
OPS: dict[str, Any] = {
    "privatize": lambda b, **k: b.privatize(rho=1e-4, **k),
    "privatize/per-point": lambda b, **k: b.privatize(rho=1e-5, per="point", **k),
    "range_count": lambda b, **k: b.range_count(BOX, rho=1e-4, reduce="first", **k),
    "range_count/pt": lambda b, **k: b.range_count(BOX, rho=1e-4, method="pt", reduce="first", **k),
    "range_count/zones": lambda b, **k: b.range_count(ZONES, rho=1e-4, reduce="first", **k),
    "kde_raster": lambda b, **k: b.kde_raster(
        bandwidth_m=2000, cell_m=1000, rho=1e-4, reduce="first", bounds=BOUNDS, **k
    ),
    "knn": lambda b, **k: b.knn(P, 2, rho=1e-4, **k),
    "nearest_users": lambda b, **k: b.nearest_users(P, 2, rho=1e-4, reduce="first", **k),
    "convex_hull": lambda b, **k: b.convex_hull(rho=1e-4, **k),
    "kde": lambda b, **k: b.kde(
        [P, (510_000.0, 4_510_000.0)], bandwidth_m=2000, rho=1e-4, reduce="first", **k
    ),
    "kde/pt": lambda b, **k: b.kde(
        [P, (510_000.0, 4_510_000.0)], bandwidth_m=2000, rho=1e-4, method="pt", reduce="first", **k
    ),
}


def _frame() -> pd.DataFrame:
    rs = np.random.default_rng(0)  # test data only
    n = N * 3
    return pd.DataFrame({"u": np.repeat(np.arange(N), 3),
                         "x": 500_000 + rs.uniform(0, 20_000, n),
                         "y": 4_500_000 + rs.uniform(0, 20_000, n)})  # fmt: skip


def _session() -> Any:
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    s.set_budget(LOW, gp.CGP(rho=1e-7))
    return s


def _bound(df: pd.DataFrame) -> tuple[Any, Any]:
    s = _session()
    return s, dd.from_pandas(df, npartitions=3).geopriv(s, **KW)


def _reserved(s: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), c.alloc.tolist(), strict=True):
            u = s.ledger._index[i]
            out[u] = out.get(u, 0) + int(a)
    return out


def _planned(pv: Preview) -> dict[Any, int]:
    return {u: int(v) for u, v in pv.table["allocation_units"].items() if v}


def _submitted(client: Any, call: Any) -> tuple[Any, list[str]]:
    """Run ``call`` and return its value and the names of the tasks the cluster ran."""
    from distributed import get_task_stream

    with get_task_stream(client) as ts:
        out = call()
    return out, [str(t["key"]) for t in ts.data]


@pytest.mark.parametrize("name", sorted(OPS))
def test_preview_is_the_pandas_preview_and_the_real_reservation(
    cluster, name: str, monkeypatch
) -> None:
    # the release as tasks on the workers (which the client otherwise runs itself for the
    # few points of the one-point operations), so that the task stream shows a release
    from gpframe.dask import one_point

    monkeypatch.setattr(one_point, "CLIENT_RELEASE", False)
    op = OPS[name]
    df = _frame()
    s_pd = _session()
    pv_pd = op(df.geopriv(s_pd, **KW), dry_run=True)
    s, b = _bound(df)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv, tasks = _submitted(cluster, lambda: op(b, dry_run=True))
    assert isinstance(pv, Preview)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert tasks and not [t for t in tasks if t.startswith(RELEASE)]  # the first pass only
    # the same table as the pandas face's (users in another order: partitions)
    pd.testing.assert_frame_equal(pv.table.sort_index(), pv_pd.table.sort_index())
    for field in ("operation", "notion", "kind", "reservations", "refusal", "adaptive", "per",
                  "per_note", "error", "error_kind", "confidence"):  # fmt: skip
        assert getattr(pv, field) == getattr(pv_pd, field), field
    assert set(pv.excluded.index) == set(LOW)
    _, tasks = _submitted(cluster, lambda: op(b, rng=seeded_rng(1)))
    assert [t for t in tasks if t.startswith(RELEASE)]  # the real call does release
    assert _planned(pv) == _reserved(s)  # exactly the reserved allocations


@pytest.mark.parametrize(
    "name", ["privatize", "range_count", "kde_raster", "knn", "convex_hull", "kde", "nearest_users"]
)
def test_raise_names_the_users_and_writes_nothing(cluster, name: str) -> None:
    op = OPS[name]
    s, b = _bound(_frame())
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    with pytest.raises(BudgetExceededError, match=r"2 of 30 users cannot pay.*: 3, 5\.") as e:
        op(b, on_exhausted="raise", rng=seeded_rng(1))
    assert "on_exhausted='exclude'" in str(e.value) and "Nothing was charged." in str(e.value)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    pv = op(b, on_exhausted="raise", dry_run=True)
    assert "cannot pay" in pv.refusal and set(pv.excluded.index) == set(LOW)
    assert s.ledger.snapshot() == snap


def test_raise_runs_when_everyone_can_pay_and_a_bad_value_is_refused(cluster) -> None:
    s, b = _bound(_frame())
    snap = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="on_exhausted='skip' must be"):
        b.range_count(BOX, rho=1e-4, on_exhausted="skip")
    assert s.ledger.snapshot() == snap
    s.set_budget(LOW, gp.CGP(rho=1e-3))
    out = b.privatize(rho=1e-4, on_exhausted="raise", rng=seeded_rng(2))
    assert out.attrs["geopriv"]["n_charged"] == N
    assert (s.spent(list(range(N))) > 0).all()
