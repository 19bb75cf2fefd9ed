"""The preview's expected error: the bound the real call then reports, from public inputs only.

Where the Result's bound follows from the noise parameters alone (the kde baselines, knn,
nearest users, the raster's σ) the preview states exactly it; where it reads released values
(elimination outcomes, the hull's released radius, range_count's uncertain users) the preview's
a-priori figure bounds it, deterministically or, for range_count, in a seeded test at the stated
confidence.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.testing import seeded_rng

P = (505_000.0, 4_505_000.0)
BUDGETS = {"cgp": (gp.CGP(rho=10.0), {"rho": 1e-4}), "gp": (gp.GP(eps=10.0), {"eps": 1e-2})}


def _frame(n: int = 30, per_user: int = 1, seed: int = 0) -> pd.DataFrame:
    rs = np.random.default_rng(seed)  # test data only
    m = n * per_user
    return pd.DataFrame({"u": np.repeat(np.arange(n), per_user),
                         "x": 500_000 + rs.uniform(0, 20_000, m),
                         "y": 4_500_000 + rs.uniform(0, 20_000, m)})  # fmt: skip


def _bound(kind: str, df: pd.DataFrame) -> tuple[Any, Any, dict[str, float]]:
    budget, kw = BUDGETS[kind]
    s = gp.Session(budget=budget)
    return s, df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618"), kw


def _result(out: Any) -> Any:
    return out.attrs["geopriv"] if isinstance(out, pd.DataFrame) else out


@pytest.mark.parametrize("kind", ["cgp", "gp"])
@pytest.mark.parametrize("method", ["pt", "dist", "pt-elim", "dist-elim"])
def test_kde_preview_error_is_the_results_bound(kind: str, method: str) -> None:
    s, b, kw = _bound(kind, _frame())
    probes = [(505_000.0, 4_505_000.0), (530_000.0, 4_530_000.0)]
    import geopandas as gpd

    at = gpd.GeoSeries([shapely.Point(*q) for q in probes], crs="EPSG:32618")
    snap = s.ledger.snapshot()
    pv = b.kde(at, bandwidth_m=2000, method=method, dry_run=True, **kw)
    assert s.ledger.snapshot() == snap
    res = b.kde(at, bandwidth_m=2000, method=method, rng=seeded_rng(1), **kw)
    real = float(res.points["error"].max())
    assert pv.confidence == pytest.approx(0.95) and "KDE error" in pv.error_kind
    if method.endswith("-elim"):  # who is eliminated is decided by the run: an upper bound
        assert real <= pv.error + 1e-12
    else:
        assert pv.error == pytest.approx(real, rel=1e-12)


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_kde_raster_preview_states_the_noise_sigma(kind: str) -> None:
    _s, b, kw = _bound(kind, _frame())
    pv = b.kde_raster(bandwidth_m=2000, cell_m=1000, dry_run=True, **kw)
    r = b.kde_raster(bandwidth_m=2000, cell_m=1000, rng=seeded_rng(1), **kw)
    assert pv.error == pytest.approx(max(r.params["sigma_m"]), rel=1e-12)
    assert pv.confidence is None and "sigma_m" in pv.error_kind
    assert "expected error" in pv.summary()


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_knn_and_hull_preview_errors(kind: str) -> None:
    _s, b, kw = _bound(kind, _frame(per_user=4))
    pv = b.knn(P, 2, dry_run=True, **kw)
    real = _result(b.knn(P, 2, rng=seeded_rng(1), **kw))
    assert pv.error == pytest.approx(real.error, rel=1e-12)
    for k in (None, 3):
        pv = b.convex_hull(k=k, dry_run=True, **kw)
        out = b.convex_hull(k=k, rng=seeded_rng(2), **kw)
        known = out["error_m"] - 2 * math.pi * out["radius_m"] / out["k"]
        assert float(known.max()) <= pv.error * (1 + 1e-12)
        assert float(out["error_m"].max()) >= pv.error * (1 - 1e-12)
        assert "2πR̃/k" in pv.error_kind


@pytest.mark.parametrize("kind", ["cgp", "gp"])
@pytest.mark.parametrize("method", ["pt", "dist", "pt-elim", "dist-elim"])
def test_nearest_users_preview_error(kind: str, method: str) -> None:
    _s, b, kw = _bound(kind, _frame())
    pv = b.nearest_users(P, 3, method=method, dry_run=True, **kw)
    real = b.nearest_users(P, 3, method=method, rng=seeded_rng(1), **kw)
    assert real.error <= pv.error * (1 + 1e-12)
    if not method.endswith("-elim"):  # everybody runs the one round: the same bound
        assert pv.error == pytest.approx(real.error, rel=1e-12)


def test_the_preview_error_reads_no_location() -> None:
    """Moved points, same users and counts: the same expected error for every operation."""
    a, b = (_bound("cgp", _frame(per_user=2, seed=s))[1] for s in (0, 1))
    box = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
    for op in (
        lambda f: f.range_count(box, rho=1e-4, reduce="first", dry_run=True),
        lambda f: f.kde(P, bandwidth_m=2000, rho=1e-4, reduce="first", dry_run=True),
        lambda f: f.kde_raster(
            bandwidth_m=2000, cell_m=1000, rho=1e-4, reduce="first", dry_run=True
        ),
        lambda f: f.knn(P, 2, rho=1e-4, dry_run=True),
        lambda f: f.convex_hull(rho=1e-4, dry_run=True),
        lambda f: f.nearest_users(P, 2, rho=1e-4, reduce="first", dry_run=True),
    ):
        ea, eb = op(a).error, op(b).error
        assert ea is not None and ea == eb


@pytest.mark.parametrize("method", ["dist-elim", "pt"])
def test_range_count_band_at_the_stated_confidence(method: str) -> None:
    """Users farther than 2× the band from the edge: counted right, none uncertain, ≥ 1 − β.

    (|estimate − distance| ≤ width on the bound's event, so a user beyond twice the width is
    never within it of the edge.) 20 seeded runs; β = 0.05 allows at most 1 failure in
    expectation, the bound is loose, so every run passes.
    """
    _s, b, kw = _bound("cgp", _frame(2))
    box = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
    band = b.range_count(box, method=method, dry_run=True, **kw).error
    assert 50 < band < 1000
    x0, y0 = 510_000.0, 4_510_000.0
    far = 5_000 + 2.5 * band  # beyond 2 bands outside the box's edge (half side 5 km)
    df = pd.DataFrame({"u": [0, 1], "x": [x0, x0 + far], "y": [y0, y0]})
    s2 = gp.Session(budget=gp.CGP(rho=10.0))
    b2 = df.geopriv(s2, user="u", x="x", y="y", crs="EPSG:32618")
    # inside user: at 5 km from the edge, more than 2 bands
    assert b2.range_count(box, method=method, dry_run=True, **kw).error == pytest.approx(band)
    ok = 0
    for seed in range(20):
        r = b2.range_count(box, method=method, rng=seeded_rng(seed), **kw)
        ok += int(r.value == 1 and r.error == 0)
    assert ok >= 19


@pytest.mark.parametrize("max_steps", [None, 3])
def test_above_threshold_preview_margin_is_the_results(max_steps: Any) -> None:
    s = gp.Session(central=gp.DP(epsilon=10.0))
    q = [3, 8, 40, 90, 5]
    kw: dict[str, Any] = dict(users=["a", "b"], sensitivity=1, epsilon=0.5, integer=True,
                              max_steps=max_steps)  # fmt: skip
    pv = gp.monitor.above_threshold(s, q, 50, dry_run=True, **kw)
    real = gp.monitor.above_threshold(s, q, 50, rng=seeded_rng(2), **kw)
    assert pv.error == pytest.approx(real.error, rel=1e-12) and "margin" in pv.error_kind
    # an unsized stream without max_steps: the margin grows with the queries the run asks
    # (data): the preview states it after the first query, at most the Result's
    unsized = gp.monitor.above_threshold(s, iter(q), 50, dry_run=True, **kw)
    if max_steps is not None:
        assert unsized.error == pv.error
        return
    assert "after the first query" in unsized.error_kind
    real_u = gp.monitor.above_threshold(s, iter(q), 50, rng=seeded_rng(2), **kw)
    assert unsized.error < real_u.error and real_u.value.size > 1
    one = gp.monitor.above_threshold(s, iter([3]), 50, rng=seeded_rng(2), **kw)
    assert unsized.error == pytest.approx(one.error, rel=1e-12)  # K = 1: equal


@pytest.mark.parametrize("mode", ["R", "S"])
@pytest.mark.parametrize("max_steps", [None, 4])
def test_gaussian_above_threshold_preview_margin_is_the_results(mode: str, max_steps: Any) -> None:
    """Gaussian AboveThreshold: the margin α per run reads σ_X, σ_Z and the run's cap only;
    the preview states it and the Result the same."""
    s = gp.Session(central=gp.DP(epsilon=100.0))
    q = [0.1, 0.2, 0.9, 0.1, 0.95, 0.3]
    kw: dict[str, Any] = dict(users=["a", "b"], sensitivity=0.01, noise="gaussian", sigma=0.02,
                              bounds=(0.0, 1.0), max_steps=max_steps, mode=mode, c=2,
                              beta=0.1)  # fmt: skip
    snap = s.ledger.snapshot()
    pv = gp.monitor.above_threshold(s, q, 0.5, dry_run=True, **kw)
    assert s.ledger.snapshot() == snap
    real = gp.monitor.above_threshold(s, q, 0.5, rng=seeded_rng(3), **kw)
    assert pv.error is not None and pv.error == pytest.approx(real.error, rel=1e-12)
    assert (pv.error_kind, pv.confidence) == (real.error_kind, real.confidence)
    assert pv.confidence == pytest.approx(0.9) and "per run" in pv.error_kind
    steps = len(q) if max_steps is None else max_steps
    want = 0.02 * math.sqrt(2 * math.log(4 / 0.1)) + math.sqrt(3) * 0.02 * math.sqrt(
        2 * math.log(4 * steps / 0.1)
    )
    assert pv.error == pytest.approx(want, rel=1e-12)
    # the answers are right up to α (queries farther than α from the threshold)
    far = [
        (v, a) for v, a in zip(q, real.value.tolist(), strict=False) if abs(v - 0.5) > real.error
    ]
    assert len(far) >= 3 and all(a == (v > 0.5) for v, a in far)


def test_gaussian_margin_holds_at_the_stated_confidence() -> None:
    """Seeded runs: answers of queries farther than α from ρ are right in ≥ 1 − β of them."""
    s = gp.Session(central=gp.DP(epsilon=1e6))
    q = [0.1, 0.2, 0.3, 0.25, 0.15, 0.9]
    kw: dict[str, Any] = dict(users=["a"], sensitivity=0.01, noise="gaussian", sigma=0.02,
                              bounds=(0.0, 1.0), c=1, beta=0.2)  # fmt: skip
    alpha = gp.monitor.above_threshold(s, q, 0.5, dry_run=True, **kw).error
    assert 0.05 < alpha < 0.2  # every query is farther than α from ρ
    wrong = 0
    for seed in range(20):
        res = gp.monitor.above_threshold(s, q, 0.5, rng=seeded_rng(seed), **kw)
        wrong += res.value.tolist() != [v > 0.5 for v in q]
    assert wrong <= 4


def test_no_preview_draws_any_randomness() -> None:
    """A preview draws nothing: the seeded source's counter does not move (any operation)."""
    from gpframe.queries.monitor import above_threshold, report_noisy_max

    df = _frame(per_user=2).assign(v=np.linspace(0, 10, 60))
    s = gp.Session(budget=gp.CGP(rho=1.0), central=gp.DP(epsilon=10.0))
    b = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    box = shapely.box(505_000, 4_505_000, 515_000, 4_515_000)
    users = list(range(30))
    ops = [
        lambda r: b.privatize(rho=1e-4, rng=r, dry_run=True),
        lambda r: b.range_count(box, rho=1e-4, reduce="last", rng=r, dry_run=True),
        lambda r: b.kde(P, bandwidth_m=1000, rho=1e-4, reduce="last", rng=r, dry_run=True),
        lambda r: b.kde_raster(bandwidth_m=1000, cell_m=500, rho=1e-4, reduce="last", rng=r,
                               dry_run=True),
        lambda r: b.knn(P, 2, rho=1e-4, rng=r, dry_run=True),
        lambda r: b.convex_hull(rho=1e-4, rng=r, dry_run=True),
        lambda r: b.nearest_users(P, 2, rho=1e-4, reduce="last", rng=r, dry_run=True),
        lambda r: b.grid_stats(value="v", bounds=(0, 10), epsilon=1.0, cells=7,
                               occupancy="public", rng=r, dry_run=True),
        lambda r: b.grid_stats(value="v", bounds=(0, 10), epsilon_per_user=2.0, cells=7,
                               occupancy="public", rng=r, dry_run=True),
        lambda r: b.grid_stats(value="v", bounds=(0, 10), epsilon_per_user=2.0, cells=7,
                               occupancy="private", max_cells=2, max_per_cell=3, rng=r,
                               public_cells=shapely.box(499_000, 4_499_000, 521_000,
                                                        4_521_000), dry_run=True),
        lambda r: above_threshold(s, np.arange(10.0), 5, users=users, sensitivity=1,
                                  epsilon=1.0, rng=r, dry_run=True),
        lambda r: above_threshold(s, np.arange(10.0), 5, users=users, sensitivity=1,
                                  noise="gaussian", sigma=2.0, bounds=(0, 20), rng=r,
                                  dry_run=True),
        lambda r: report_noisy_max(s, np.arange(10.0), users=users, sensitivity=1, sigma=2.0,
                                   bounds=(0, 20), rng=r, dry_run=True),
    ]  # fmt: skip
    for op in ops:
        r = seeded_rng(1)
        op(r)
        assert r._counter == 0


@pytest.mark.parametrize("beta", [0.05, 0.2])
def test_grid_stats_clip_user_preview_error_is_the_results_bound(beta: float) -> None:
    """Public occupancy, per-statistic form: the plan reads only the public occupancy, so each
    released cell's mean_error is a-priori; the preview states the worst one (median in text)."""
    rs = np.random.default_rng(1)  # test data only
    df = _frame(per_user=4).assign(v=rs.uniform(0, 10, 120))
    df["x"] = 500_000 + rs.uniform(0, 3_000, len(df))  # a few cells of several users
    s = gp.Session(central=gp.DP(epsilon=100.0))
    b = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon=1.0, cells=7,
                              occupancy="public", beta=beta)  # fmt: skip
    pv = b.grid_stats(**kw, dry_run=True)
    out = b.grid_stats(**kw, rng=seeded_rng(2))
    err = out["mean_error"].to_numpy()
    err = err[np.isfinite(err)]
    assert err.size >= 3 and pv.confidence == pytest.approx(1 - beta)
    assert pv.error == pytest.approx(float(err.max()), rel=1e-12)
    assert pv.error == pytest.approx(_result(out).error, rel=1e-12)
    assert f"median {float(np.median(err)):.4g}" in pv.error_kind
    assert "expected error" in pv.summary()


@pytest.mark.parametrize("central", ["dp", "zcdp"])
def test_threshold_query_preview_margin_and_least_charge(central: str) -> None:
    """The margin of the round the run stops at is at most the preview's (the largest over
    the rounds), equal when it stops at round 1; it charges at least round 1's part."""
    kw: dict[str, Any] = {"epsilon": 1.0} if central == "dp" else {"rho": 0.5}
    for count, first in ((10**6, True), (52, False)):
        s = gp.Session(central=gp.DP(epsilon=10.0) if central == "dp" else gp.zCDP(rho=10.0))
        pv = gp.monitor.threshold_query(s, count, tau=50, users=["a", "b"], dry_run=True, **kw)
        real = gp.monitor.threshold_query(s, count, tau=50, users=["a", "b"],
                                          rng=seeded_rng(3), **kw)  # fmt: skip
        assert real.error <= pv.error * (1 + 1e-12) and pv.error_kind == real.error_kind
        spent = s.spent()
        assert (spent >= pv.table["charge_min"].loc[spent.index] - 1e-15).all()
        if first:  # far from τ: decided at round 1, the worst margin and the least charge
            assert real.error == pytest.approx(pv.error, rel=1e-12)
            assert np.allclose(spent.to_numpy(), pv.table["charge_min"].loc[spent.index])


def _assert_charges_are_the_previews(s: Any, query_id: str, pv: Any) -> None:
    rep = s.report(query_id=query_id)
    charged = rep[rep["status"] == "charged"].set_index("user")["charge"].sort_index()
    planned = pv.allocations[pv.table["status"] == "reserved"].sort_index()
    assert charged.index.tolist() == planned.index.tolist()
    assert np.array_equal(charged.to_numpy(), planned.to_numpy())


def _grid_frame() -> pd.DataFrame:
    rs = np.random.default_rng(1)  # test data only
    df = _frame(per_user=4).assign(v=rs.uniform(0, 10, 120))
    df["x"] = 500_000 + rs.uniform(0, 3_000, len(df))  # a few cells of several users
    return df


@pytest.mark.parametrize("shrink", [False, True])
@pytest.mark.parametrize("beta", [0.05, 0.2])
def test_grid_stats_per_user_preview_error(shrink: bool, beta: float) -> None:
    """Per-user total, public occupancy: the budget plan reads only the public occupancy and
    the budgets, so each released cell's noise bound is a-priori. ``shrink=False``: the
    Result's error exactly; ``shrink=True``: the Result states at least it (at most W)."""
    s = gp.Session(central=gp.DP(epsilon=100.0))
    s.set_budget([3], gp.DP(epsilon=1e-6))  # left out before reserving
    b = _grid_frame().geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon_per_user=2.0, cells=7,
                              occupancy="public", beta=beta, shrink=shrink)  # fmt: skip
    snap = s.ledger.snapshot()
    pv = b.grid_stats(**kw, dry_run=True)
    assert s.ledger.snapshot() == snap and pv.confidence == pytest.approx(1 - beta)
    assert list(pv.excluded.index) == [3]
    out = b.grid_stats(**kw, rng=seeded_rng(2))
    res = _result(out)
    _assert_charges_are_the_previews(s, res.query_id, pv)
    err = out["mean_error"].to_numpy()
    assert np.isfinite(err).sum() >= 3
    if shrink:
        assert pv.error <= res.error * (1 + 1e-12) and res.error <= 10.0
        assert "before the shrinkage" in pv.error_kind
    else:
        assert pv.error == pytest.approx(res.error, rel=1e-12)
        assert f"median {float(np.nanmedian(err)):.4g}" in pv.error_kind


@pytest.mark.parametrize("form", [{"epsilon_per_user": 3.0}, {"epsilon_per_statistic": 0.5}])
def test_grid_stats_private_preview_states_the_count_noise(
    form: dict[str, float], monkeypatch: Any
) -> None:
    """Private occupancy: the preview's error is the count's noise bound t_n at 1 − β/2, the
    very bound the release computes (its mean_error divides by the released count)."""
    import gpframe.queries.contribution_bounding as cb
    from gpframe.mechanisms.tails import laplace_bound

    seen: list[Any] = []
    real_release = cb.release_private_cells

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(real_release(*a, **k))
        return seen[-1]

    monkeypatch.setattr(cb, "release_private_cells", spy)
    s = gp.Session(central=gp.DP(epsilon=100.0))
    s.set_budget([3], gp.DP(epsilon=1e-6))  # cannot pay: left out before reserving
    b = _grid_frame().geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    kw: dict[str, Any] = dict(
        value="v",
        bounds=(0, 10),
        cells=7,
        occupancy="private",
        max_cells=2,
        max_per_cell=3,
        beta=0.1,
        **form,
        public_cells=shapely.box(499_000, 4_499_000, 504_000, 4_521_000),
    )
    pv = b.grid_stats(**kw, dry_run=True)
    assert not seen and pv.confidence == pytest.approx(0.95)
    out = b.grid_stats(**kw, rng=seeded_rng(4))
    rel = seen[-1]
    assert pv.error == pytest.approx(laplace_bound(0.05, rel.scales[0], 1), rel=1e-12)
    assert "t1 = " in pv.error_kind and list(pv.excluded.index) == [3]
    res = _result(out)
    _assert_charges_are_the_previews(s, res.query_id, pv)


def test_the_grid_preview_errors_read_no_value_and_private_no_location() -> None:
    """grid_stats protects the values (and, private, the locations): other values, and for
    private occupancy other points, give the same preview error for every form."""
    df = _grid_frame()
    other = df.assign(v=np.random.default_rng(9).uniform(0, 10, len(df)))  # test data only
    moved = other.assign(x=df["x"] + 1_500.0, y=df["y"][::-1].to_numpy())
    area = shapely.box(499_000, 4_499_000, 506_000, 4_521_000)
    common: dict[str, Any] = dict(value="v", bounds=(0, 10), cells=7, dry_run=True)
    forms = [({"epsilon": 1.0, "occupancy": "public"}, other),
             ({"epsilon_per_user": 2.0, "occupancy": "public"}, other),
             ({"epsilon_per_user": 2.0, "occupancy": "private", "max_cells": 2,
               "max_per_cell": 3, "public_cells": area}, moved),
             ({"epsilon_per_statistic": 0.5, "occupancy": "private", "max_cells": 2,
               "max_per_cell": 3, "public_cells": area}, moved)]  # fmt: skip
    for form, changed in forms:
        errs = []
        for frame in (df, changed):
            s = gp.Session(central=gp.DP(epsilon=100.0))
            b = frame.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
            errs.append(b.grid_stats(**common, **form).error)
        assert errs[0] is not None and errs[0] == errs[1], form
