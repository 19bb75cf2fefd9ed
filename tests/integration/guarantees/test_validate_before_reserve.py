"""Bad input is refused before the reservation: "Nothing was charged." must hold.

Review findings F2 (an ``rng`` the samplers refuse was only checked inside the reservation, so the
refusal settled every admitted user at the full allocation) and F3 (the per-round parts of the
elimination queries were validated after reserving). Each test asserts the error *and* that the
ledger is unchanged (``session.ledger.snapshot()``), or, for the in-reservation backstop, that
nothing was spent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe import monitor
from gpframe.errors import InsecureRandomnessError, InvalidInputError
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

BOX = shapely.box(490_000, 4_490_000, 510_000, 4_510_000)
AT = shapely.Point(500_000, 4_500_000)
XY = (500_000.0, 4_500_000.0)


def _bound(budget: Any) -> tuple[Session, Any]:
    s = Session(budget=budget)
    df = pd.DataFrame({"u": [1, 2], "x": [500_100.0, 500_200.0], "y": [4_500_100.0, 4_500_300.0]})
    return s, df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")


FRAME_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "privatize": lambda b, rng: b.privatize(rho=1e-4, rng=rng),
    "range_count": lambda b, rng: b.range_count(BOX, rho=1e-4, rng=rng),
    "kde": lambda b, rng: b.kde(AT, bandwidth_m=1000, rho=1e-4, rng=rng),
    "kde_pt": lambda b, rng: b.kde(AT, bandwidth_m=1000, rho=1e-4, method="pt", rng=rng),
    "kde_raster": lambda b, rng: b.kde_raster(
        bandwidth_m=1000, cell_m=200, rho=1e-4, rng=rng, bounds=BOX.bounds
    ),
    "knn": lambda b, rng: b.knn(XY, 1, rho=1e-4, rng=rng),
    "nearest_users": lambda b, rng: b.nearest_users(XY, 1, rho=1e-4, rng=rng),
    "convex_hull": lambda b, rng: b.convex_hull(rho=1e-4, rng=rng),
}
BAD_RNGS = {
    "seeded": (lambda: seeded_rng(1), InsecureRandomnessError),
    "numpy": (lambda: np.random.default_rng(1), InvalidInputError),
}


@pytest.mark.usefixtures("no_seeded")
@pytest.mark.parametrize("label", sorted(BAD_RNGS))
@pytest.mark.parametrize("name", sorted(FRAME_CALLS))
def test_frame_queries_refuse_rng_before_reserving(name: str, label: str) -> None:
    make, err = BAD_RNGS[label]
    s, b = _bound(gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    with pytest.raises(err, match="Nothing was charged"):
        FRAME_CALLS[name](b, make())
    assert s.ledger.snapshot() == before
    assert s.spent().sum() == 0


MONITOR_CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "above_threshold_laplace": lambda s, rng: monitor.above_threshold(
        s, [1, 2, 90], 50, users=["a", "b"], sensitivity=1, epsilon=0.5, integer=True, rng=rng
    ),
    "above_threshold_gaussian": lambda s, rng: monitor.above_threshold(
        s,
        [1.0, 2.0, 90.0],
        50,
        users=["a", "b"],
        sensitivity=1,
        noise="gaussian",
        sigma=5.0,
        bounds=(0, 100),
        rng=rng,
    ),
    "report_noisy_max": lambda s, rng: monitor.report_noisy_max(
        s, [0.2, 0.7], users=[1, 2], sigma=0.3, bounds=(0, 1), sensitivity=0.01, rng=rng
    ),
    "threshold_query": lambda s, rng: monitor.threshold_query(
        s, 900, tau=500, users=range(10), epsilon=0.5, rng=rng
    ),
}


@pytest.mark.usefixtures("no_seeded")
@pytest.mark.parametrize("label", sorted(BAD_RNGS))
@pytest.mark.parametrize("name", sorted(MONITOR_CALLS))
def test_monitor_refuses_rng_before_reserving(name: str, label: str) -> None:
    make, err = BAD_RNGS[label]
    s = Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(err, match="Nothing was charged"):
        MONITOR_CALLS[name](s, make())
    assert s.ledger.snapshot() == before


def test_seeded_rng_still_runs_in_tests() -> None:
    """Positive control: the same calls run (and charge) when seeded sources are enabled."""
    s, b = _bound(gp.CGP(rho=1e-3))
    b.range_count(BOX, rho=1e-4, rng=seeded_rng(1))
    assert s.spent().sum() > 0


# --------------------------------------------------------------------------------------------
# F3: per-round parts checked before the reservation


PARTS_CASES: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    # 1e-20 rounds up to one ledger unit (1e-15), too small to split into 2 rounds
    "range_count_too_small": (gp.CGP(rho=1.0), lambda b: b.range_count(BOX, rho=1e-20, rounds=2)),
    # user 2's allocation must not make user 1 pay
    "range_count_alloc_series": (
        gp.CGP(rho=1.0),
        lambda b: b.range_count(BOX, allocations=pd.Series({1: 1e-2, 2: 1e-15}), rounds=10),
    ),
    # one round's eps above the wrappers' range [2**-40, 100]
    "range_count_eps_range": (
        gp.GP(eps=1000.0),
        lambda b: b.range_count(BOX, eps=500.0, method="dist"),
    ),
    "kde_too_small": (
        gp.CGP(rho=1.0),
        lambda b: b.kde(AT, bandwidth_m=1000, rho=1e-20, rounds=2, method="dist-elim"),
    ),
    "kde_eps_range": (
        gp.GP(eps=1000.0),
        lambda b: b.kde(AT, bandwidth_m=1000, eps=500.0, method="dist"),
    ),
    "nearest_too_small": (
        gp.CGP(rho=1.0),
        lambda b: b.nearest_users(XY, 1, rho=1e-20, rounds=2),
    ),
    "nearest_eps_range": (
        gp.GP(eps=1000.0),
        lambda b: b.nearest_users(XY, 1, eps=500.0, method="dist"),
    ),
}


@pytest.mark.parametrize("name", sorted(PARTS_CASES))
def test_bad_parts_refused_before_reserving(name: str) -> None:
    budget, call = PARTS_CASES[name]
    s, b = _bound(budget)
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="Nothing was charged"):
        call(b)
    assert s.ledger.snapshot() == before
    assert s.spent().sum() == 0


def test_threshold_query_parts_refused_before_reserving() -> None:
    s = Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    # round 1 gets eps/1023 ≈ 1e-14, below the discrete Laplace range
    with pytest.raises(InvalidInputError, match="Nothing was charged"):
        monitor.threshold_query(s, 900, tau=500, users=range(10), epsilon=1e-11)
    assert s.ledger.snapshot() == before


# --------------------------------------------------------------------------------------------
# the in-reservation backstop: cancel only while no noise was drawn


def _fail_on_second_call(monkeypatch: pytest.MonkeyPatch, module: Any, attr: str) -> None:
    real = getattr(module, attr)
    calls = {"n": 0}

    def fake(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] >= 2:  # the check inside the reservation
            raise InvalidInputError("injected refusal. Nothing was charged.")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, attr, fake)


def test_range_count_backstop_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpframe.queries import range_count as rc

    _fail_on_second_call(monkeypatch, rc, "_check_parts_for")
    s, b = _bound(gp.CGP(rho=1e-3))
    with pytest.raises(InvalidInputError, match="injected"):
        b.range_count(BOX, rho=1e-4)
    assert s.spent().sum() == 0
    assert s.ledger.verify()["reservations"] == 0  # cancelled, not left open


@pytest.mark.parametrize("method", ["pt", "dist-elim"])
def test_kde_backstop_cancels(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    from gpframe.frame import kde as kde_frame

    _fail_on_second_call(monkeypatch, kde_frame, "check_method_parts")
    s, b = _bound(gp.CGP(rho=1e-3))
    with pytest.raises(InvalidInputError, match="injected"):
        b.kde(AT, bandwidth_m=1000, rho=1e-4, method=method)
    assert s.spent().sum() == 0


def test_kde_raster_backstop_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    # the raster's preflight and its backstop (gpframe.queries.kde) both read the check from
    # gpframe.queries.elimination at call time
    from gpframe.queries import elimination

    _fail_on_second_call(monkeypatch, elimination, "check_method_parts")
    s, b = _bound(gp.CGP(rho=1e-3))
    with pytest.raises(InvalidInputError, match="injected"):
        b.kde_raster(bandwidth_m=1000, cell_m=200, rho=1e-4, bounds=BOX.bounds)
    assert s.spent().sum() == 0


def test_nearest_backstop_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpframe.queries import elimination

    _fail_on_second_call(monkeypatch, elimination, "check_method_parts")
    s, b = _bound(gp.CGP(rho=1e-3))
    with pytest.raises(InvalidInputError, match="injected"):
        b.nearest_users(XY, 1, rho=1e-4)
    assert s.spent().sum() == 0


def test_error_after_the_checks_keeps_the_full_charge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: an error once the algorithm runs (noise may be drawn) is not cancelled."""
    from gpframe.queries import range_count as rc

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise InvalidInputError("injected after the checks.")

    monkeypatch.setattr(rc, "range_count_arrays", boom)
    s, b = _bound(gp.CGP(rho=1e-3))
    with pytest.raises(InvalidInputError, match="injected"):
        b.range_count(BOX, rho=1e-4)
    assert s.spent().tolist() == [1e-4, 1e-4]
