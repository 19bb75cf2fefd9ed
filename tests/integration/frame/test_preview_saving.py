"""The preview's best-case saving of adaptive operations: a bound the run reaches at best.

Elimination charges each user the parts of the rounds they ran; the least is round 1's part.
The preview's ``charge_min`` is that least per user and ``saving_best`` the sum of allocation
minus it: every real charge is at least ``charge_min``, the real saving at most
``saving_best``, and equal to it when every user is decided at round 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.testing import seeded_rng

BUDGETS = {"cgp": (gp.CGP(rho=10.0), {"rho": 1e-4}), "gp": (gp.GP(eps=10.0), {"eps": 1e-2})}
BOX = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
P = (510_000.0, 4_510_000.0)

OPS: dict[str, Any] = {
    "range_count": lambda b, **k: b.range_count(BOX, **k),
    "kde": lambda b, **k: b.kde(P, bandwidth_m=1000, **k),
    "nearest_users": lambda b, **k: b.nearest_users(P, 3, **k),
}


def _bound(kind: str, xy: np.ndarray) -> tuple[Any, Any, dict[str, float]]:
    budget, kw = BUDGETS[kind]
    s = gp.Session(budget=budget)
    df = pd.DataFrame({"u": np.arange(len(xy)), "x": xy[:, 0], "y": xy[:, 1]})
    return s, df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618"), kw


def _spread(n: int = 30) -> np.ndarray:
    rs = np.random.default_rng(0)  # test data only
    return np.column_stack(
        [500_000 + rs.uniform(0, 20_000, n), 4_500_000 + rs.uniform(0, 20_000, n)]
    )


@pytest.mark.parametrize("kind", ["cgp", "gp"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_real_charges_are_at_least_the_preview_minimum(kind: str, name: str) -> None:
    s, b, kw = _bound(kind, _spread())
    pv = OPS[name](b, dry_run=True, **kw)
    assert pv.adaptive and pv.saving_best is not None and pv.saving_best > 0
    res = OPS[name](b, rng=seeded_rng(1), **kw)
    charged = s.report(query_id=res.query_id)["charge"].dropna()
    low = pv.table["charge_min"]
    assert (charged >= low.loc[charged.index] - 1e-15).all()
    assert (low <= pv.table["allocation"]).all()
    assert res.saved <= pv.saving_best + 1e-12
    assert "best-case saving" in pv.summary()


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_everybody_decided_at_round_one_saves_exactly_the_best_case(kind: str) -> None:
    # every user 30 km or more from the box's edge: eliminated in round 1 (far beyond any width)
    rs = np.random.default_rng(2)  # test data only
    inside = np.column_stack([np.full(5, 510_000.0), np.full(5, 4_510_000.0)])
    out = np.column_stack([560_000 + rs.uniform(0, 5000, 10), 4_560_000 + rs.uniform(0, 5000, 10)])
    box = shapely.box(480_000, 4_480_000, 540_000, 4_540_000)
    s, b, kw = _bound(kind, np.vstack([inside, out]))
    kw = {"eps": 1.0, "rounds": 4, "split": "even"} if kind == "gp" else kw
    pv = b.range_count(box, dry_run=True, **kw)
    res = b.range_count(box, rng=seeded_rng(3), **kw)
    assert res.params["rounds_histogram"][1] == 15
    assert res.saved == pytest.approx(pv.saving_best, rel=1e-12)
    charged = s.report(query_id=res.query_id)["charge"]
    assert np.allclose(charged.to_numpy(dtype=float), pv.table["charge_min"].to_numpy())


def test_operations_charging_their_allocation_have_no_saving() -> None:
    _s, b, kw = _bound("cgp", _spread())
    for pv in (
        b.range_count(BOX, method="dist", dry_run=True, **kw),
        b.kde(P, bandwidth_m=1000, method="pt", dry_run=True, **kw),
        b.knn(P, 1, dry_run=True, **kw),
    ):
        assert not pv.adaptive and pv.saving_best == 0.0
        assert (pv.table["charge_min"] == pv.table["allocation"]).all()
