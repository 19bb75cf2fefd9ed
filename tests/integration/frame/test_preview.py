"""dry_run=True on every accessor operation and monitor: the preview is the real call's plan.

For each operation: the ledger (snapshot and audit log) is untouched by the preview, the
preview's per-user allocations equal exactly (in ledger units) what the real call then
reserves, and for operations with deterministic charges what it commits; users who cannot pay
are listed with the reason.
"""

from __future__ import annotations

from typing import Any

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.results import Preview
from gpframe.testing import seeded_rng

N = 30
LOW = [3, 5]  # users whose budget cannot pay
BOX = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
REGIONS = gpd.GeoSeries([BOX, shapely.box(500_000, 4_500_000, 504_000, 4_504_000)],
                        crs="EPSG:32618")  # fmt: skip
PROBES = gpd.GeoSeries([shapely.Point(505_000, 4_505_000), shapely.Point(510_000, 4_510_000)],
                       crs="EPSG:32618")  # fmt: skip
P = (505_000.0, 4_505_000.0)

#: name -> (call, adaptive charge)
METRIC: dict[str, tuple[Any, bool]] = {
    "privatize": (lambda b, **k: b.privatize(rho=1e-4, **k), False),
    "privatize/per-point": (lambda b, **k: b.privatize(rho=1e-5, per="point", **k), False),
    "range_count": (lambda b, **k: b.range_count(BOX, rho=1e-4, **k), True),
    "range_count/regions": (lambda b, **k: b.range_count(REGIONS, rho=1e-4, **k), True),
    "range_count/pt": (lambda b, **k: b.range_count(BOX, rho=1e-4, method="pt", **k), False),
    "kde/points": (lambda b, **k: b.kde(PROBES, bandwidth_m=2000, rho=1e-4, **k), True),
    "kde_raster": (
        lambda b, **k: b.kde_raster(bandwidth_m=2000, cell_m=1000, rho=1e-4, **k),
        False,
    ),
    "nearest_users": (lambda b, **k: b.nearest_users(P, 3, rho=1e-4, **k), True),
    "knn": (lambda b, **k: b.knn(P, 1, rho=1e-4, **k), False),
    "convex_hull": (lambda b, **k: b.convex_hull(rho=1e-4, **k), False),
}


def _frame(points_per_user: int = 1) -> pd.DataFrame:
    rs = np.random.default_rng(0)  # test data only
    n = N * points_per_user
    return pd.DataFrame({"u": np.repeat(np.arange(N), points_per_user),
                         "x": 500_000 + rs.uniform(0, 20_000, n),
                         "y": 4_500_000 + rs.uniform(0, 20_000, n)})  # fmt: skip


def _bound(df: pd.DataFrame, **budget: Any) -> tuple[Any, Any]:
    if budget:
        s = gp.Session(central=gp.DP(epsilon=100.0))
        s.set_budget(LOW, gp.DP(epsilon=1e-3))
    else:
        s = gp.Session(budget=gp.CGP(rho=1e-3))
        s.set_budget(LOW, gp.CGP(rho=1e-7))
    return s, df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")


def _committed(s: Any, what: str) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), getattr(c, what).tolist(), strict=True):
            u = s.ledger._index[i]
            out[u] = out.get(u, 0) + int(a)
    return out


def _planned(pv: Preview) -> dict[Any, int]:
    return {u: int(v) for u, v in pv.table["allocation_units"].items() if v}


def _check(s: Any, preview: Any, real: Any, adaptive: bool) -> Preview:
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = preview()
    assert isinstance(pv, Preview)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    real()
    assert _planned(pv) == _committed(s, "alloc")  # exactly the reserved allocations
    if not adaptive:
        assert _planned(pv) == _committed(s, "amount")
    assert pv.adaptive == adaptive
    assert set(LOW) <= set(pv.excluded.index)
    return pv


@pytest.mark.parametrize("name", sorted(METRIC))
def test_accessor_preview_is_the_real_reservation(name: str) -> None:
    op, adaptive = METRIC[name]
    s, b = _bound(_frame(4 if name in ("knn", "convex_hull") or "privatize" in name else 1))
    pv = _check(s, lambda: op(b, dry_run=True), lambda: op(b, rng=seeded_rng(1)), adaptive)
    assert pv.notion == "metric" and pv.kind == "cgp"
    assert all("budget exhausted" in r for r in pv.excluded.loc[LOW])
    assert pv.reservations == (2 if name in ("range_count/regions", "kde/points") else 1)
    rem = pv.remaining_after()
    assert rem["min"] <= rem["median"] <= rem["max"]


def test_grid_stats_preview_is_the_real_reservation() -> None:
    rs = np.random.default_rng(1)  # test data only
    df = _frame(4).assign(v=rs.uniform(0, 10, N * 4))
    df["x"] = 500_000 + rs.uniform(0, 50, len(df))
    s, b = _bound(df, central=True)
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon=1.0, cells=7,
                              occupancy="public")  # fmt: skip
    pv = _check(s, lambda: b.grid_stats(**kw, dry_run=True),
                lambda: b.grid_stats(**kw, rng=seeded_rng(2)), False)  # fmt: skip
    assert pv.notion == "central"
    # grid_stats leaves out who cannot pay before reserving: the reason says so
    assert all("left out" in r for r in pv.excluded.loc[LOW])


def test_privatize_preview_states_per_and_its_error_scale() -> None:
    _s, b = _bound(_frame(4))
    by_user = b.privatize(rho=1e-4, dry_run=True)
    by_point = b.privatize(rho=1e-4, per="point", dry_run=True)
    assert by_user.per == "user" and by_point.per == "point"
    assert "covers all n points" in by_user.per_note and "n × amount" in by_point.per_note
    # per="point" charges n x the amount and keeps one point's noise: 4x the charge, less error
    assert by_point.allocations.max() == pytest.approx(4 * by_user.allocations.max())
    assert by_point.error < by_user.error
    assert "per='user'" in by_user.summary() and "expected error" in by_user.summary()
    # the real result states the same error bound: the preview computes it the same way
    out = b.privatize(rho=1e-4, rng=seeded_rng(3))
    res = out.attrs["geopriv"]
    assert res.params["per"] == "user"
    assert by_user.error == res.error


@pytest.mark.parametrize("on_exhausted", ["raise", "exclude"])
def test_monitor_preview_names_who_blocks_or_is_left_out(on_exhausted: str) -> None:
    s = gp.Session(central=gp.DP(epsilon=1.0))
    s.set_budget(["c"], gp.DP(epsilon=0.1))
    q: Any = [3, 8, 40, 90] if on_exhausted == "raise" else (lambda users: [3, 8, 40, 90])

    def call(**k: Any) -> Any:
        return gp.monitor.above_threshold(s, q, 50, users=["a", "b", "c"], sensitivity=1,
                                          epsilon=0.5, integer=True, on_exhausted=on_exhausted,
                                          **k)  # fmt: skip

    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = call(dry_run=True)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert list(pv.excluded.index) == ["c"]
    if on_exhausted == "raise":
        assert "'c'" in pv.refusal and "cannot afford" in pv.refusal
        assert pv.table["remaining_after"].tolist() == pv.table["remaining_before"].tolist()
        with pytest.raises(gp.BudgetExceededError, match="'c'"):
            call(rng=seeded_rng(1))
    else:
        assert pv.refusal is None
        call(rng=seeded_rng(1))
        assert _planned(pv) == _committed(s, "alloc") == _committed(s, "amount")


def test_preview_repr_says_curator_side_and_holds_no_released_value() -> None:
    _s, b = _bound(_frame())
    pv = b.range_count(BOX, rho=1e-4, dry_run=True)
    assert "curator-side" in repr(pv) and "do not publish" in pv.summary()
    assert not hasattr(pv, "value") and not hasattr(pv, "to_attr")
    assert list(pv.to_frame().columns) == ["allocation", "allocation_units", "charge_min",
                                           "status", "reason", "remaining_before",
                                           "remaining_after"]  # fmt: skip


def test_bad_input_is_refused_by_the_preview_too() -> None:
    s, b = _bound(_frame())
    snap = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="beta"):
        b.range_count(BOX, rho=1e-4, beta=2.0, dry_run=True)
    assert s.ledger.snapshot() == snap


def test_preview_with_a_plan_is_refused() -> None:
    s, b = _bound(_frame())
    plan = s.plan(1e-4, 2)
    with pytest.raises(InvalidInputError, match="plan"):
        b.range_count(BOX, allocations=plan, dry_run=True)


def test_the_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/ledger.md, "Previewing a query": the first Python block of the section runs as shown
    import re
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "ledger.md").read_text(encoding="utf-8")
    section = text.split("## Previewing a query", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    exec(compile(block, "ledger.md[preview]", "exec"), {"__name__": "docs_ledger_preview"})
    out = capsys.readouterr().out
    assert "CURATOR-SIDE" in out and "cannot pay this query: 4" in out


@pytest.mark.parametrize("occupancy", ["public", "private"])
def test_grid_stats_per_user_total_preview_is_the_real_reservation(occupancy: str) -> None:
    # the per-user form plans its own cells and ε per cell; the preview must match it exactly
    rs = np.random.default_rng(3)  # test data only
    df = _frame(4).assign(v=rs.uniform(0, 10, N * 4))
    df["x"] = 500_000 + rs.uniform(0, 50, len(df))
    s, b = _bound(df, central=True)
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon_per_user=4.0, cells=7,
                              occupancy=occupancy)  # fmt: skip
    if occupancy == "private":
        kw.update(max_cells=3, max_per_cell=5, public_cells=sorted(set(_cells(df))))
    pv = _check(s, lambda: b.grid_stats(**kw, dry_run=True),
                lambda: b.grid_stats(**kw, rng=seeded_rng(2)), False)  # fmt: skip
    assert pv.notion == "central"
    assert 0 < pv.allocations.max() <= 4.0 + 1e-12


def _cells(df: pd.DataFrame) -> list[str]:
    import h3
    from pyproj import Transformer

    lon, lat = Transformer.from_crs(32618, 4326, always_xy=True).transform(df["x"], df["y"])
    return [h3.latlng_to_cell(b, a, 7) for a, b in zip(lon, lat, strict=True)]
