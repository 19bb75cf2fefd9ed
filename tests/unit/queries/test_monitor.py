"""gp.monitor: ledger traces of selection.md §6.5 (modes R, S), charge ≤ reservation, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpframe as gp
from gpframe import monitor
from gpframe.mechanisms.selection import ATParams, eps_at_bottom, eps_at_top
from gpframe.testing import seeded_rng

SQ3 = math.sqrt(3.0)
KW = dict(noise="gaussian", sigma=0.3, bounds=(0, 1), sensitivity=1e-3)


def _script(monkeypatch, outputs):
    """Replace the exact comparison by scripted answer bits (the ledger logic is under test)."""
    it = iter(outputs)

    def step(self, value):
        top = next(it)
        self.answers.append(top)
        return top

    monkeypatch.setattr(monitor.GaussianATRun, "step", step)


def test_mode_r_trace_6_5(monkeypatch):
    s = gp.Session(central=gp.DP(epsilon=0.05))
    outs = [False, False, True] + [False] * 9 + [True] + [False] * 12 + [True]
    _script(monkeypatch, outs)
    res = monitor.above_threshold(s, [0.5] * 100, 0.75, users=["u"], max_steps=12, c=10,
                                  rng=seeded_rng(1), **KW)  # fmt: skip
    p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    want = [eps_at_top(p, 3), eps_at_top(p, 10), eps_at_bottom(p, 12), eps_at_top(p, 1)]
    assert [r["charged"] for r in res.runs] == pytest.approx(want, abs=0)
    assert res.stopped == "budget" and len(res.runs) == 4  # run 5 refused (§6.5)
    spent = float(s.spent(["u"], notion="central").iloc[0])
    assert spent == pytest.approx(0.0340321588552, abs=1e-8)
    assert spent <= 0.05
    assert all(r["charged"] <= r["reserved"] for r in res.runs)
    assert res.tops == (2, 12, 25)
    assert res.epsilon_realized < res.epsilon_worst
    s.ledger.verify()


def test_mode_s_trace_6_5(monkeypatch):
    s = gp.Session(central=gp.DP(epsilon=0.012))
    _script(monkeypatch, [False] * 20)
    res = monitor.above_threshold(s, [0.5] * 100, 0.75, users=["u"], max_steps=50, mode="S",
                                  c=2, rng=seeded_rng(2), **KW)  # fmt: skip
    assert [r["steps"] for r in res.runs][:2] == [5, 2]
    p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    assert res.runs[0]["charged"] == pytest.approx(eps_at_bottom(p, 5), abs=1e-12)
    assert float(s.spent(["u"], notion="central").iloc[0]) <= 0.012


def test_gaussian_no_crossing_is_charged_eps_bottom_p4():
    s = gp.Session(central=gp.DP(epsilon=50.0))
    res = monitor.above_threshold(
        s,
        [0.0] * 4,
        0.999,
        users=[1, 2],
        rng=seeded_rng(3),
        noise="gaussian",
        sigma=0.01,
        bounds=(0, 1),
        sensitivity=1e-3,
    )
    p = ATParams.make(sigma_x=0.01, threshold=0.999, bounds=(0, 1), sensitivity=1e-3)
    assert res.value.tolist() == [False] * 4
    assert res.runs[0]["charged"] == eps_at_bottom(p, 4) > 0
    # published: what each user paid; the per-user charges are the curator's, in the ledger
    assert res.spent_at_most >= res.runs[0]["charged"]
    rep = s.report(query_id=res.query_id)
    assert sorted(rep["user"]) == [1, 2] and (rep["charge"] >= res.runs[0]["charged"]).all()
    assert (rep["charge"] == res.spent_at_most).all()


def test_zcdp_session_pays_r_squared_over_two_p13():
    s = gp.Session(central=gp.zCDP(rho=1.0))
    res = monitor.above_threshold(s, [0.1, 0.2], 0.75, users=["a"], rng=seeded_rng(4), **KW)
    R = res.runs[0]["reserved"]
    assert float(s.spent(["a"], notion="central").iloc[0]) == pytest.approx(R * R / 2, rel=1e-9)


def test_laplace_monitor_charges_epsilon_and_halts_after_c():
    s = gp.Session(central=gp.DP(epsilon=1.0))
    res = monitor.above_threshold(
        s,
        [1000] * 10,
        0,
        users=["a", "b"],
        sensitivity=1,
        epsilon=0.5,
        c=2,
        integer=True,
        rng=seeded_rng(5),
    )
    assert res.value.tolist() == [True, True] and res.stopped == "c_tops"
    assert s.spent(["a", "b"], notion="central").tolist() == [0.5, 0.5]


def test_report_noisy_max_charges_certified_eps():
    s = gp.Session(central=gp.DP(epsilon=50.0))
    res = monitor.report_noisy_max(
        s,
        [0.0, 1.0, 0.0],
        users=[1],
        sigma=0.01,
        bounds=(0, 1),
        sensitivity=0.001,
        rng=seeded_rng(6),
    )
    assert res.value == 1
    assert float(s.spent([1], notion="central").iloc[0]) >= res.epsilon_realized
    res2 = monitor.report_noisy_max(
        s, [0.3, 0.2], users=[1], epsilon=0.1, bounds=(0, 1), sensitivity=0.001, rng=seeded_rng(7)
    )
    assert res2.epsilon_realized <= 0.1


def test_threshold_query_far_count_stops_in_round_one():
    s = gp.Session(central=gp.zCDP(rho=1.0))
    res = monitor.threshold_query(s, 900, tau=500, users=range(1000), rho=0.5, rng=seeded_rng(8))
    assert res.value is True
    assert res.epsilon_realized == pytest.approx(0.5 / 1023)


BAD = [
    (dict(noise="uniform"), "noise="),
    (dict(mode="X"), "mode="),
    (dict(sigma=None), "sigma"),
    (dict(bounds=(1, 0)), "bounds"),
    (dict(max_steps=0), "max_steps"),
    (dict(users=[]), "users"),
    (dict(c=0), "c="),
    (dict(sigma=float("nan")), "sigma"),
]


@pytest.mark.parametrize("kw,msg", BAD, ids=[m for _, m in BAD])
def test_bad_inputs_leave_the_ledger_untouched(kw, msg):
    s = gp.Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    args = dict(users=["a"], max_steps=3, rng=seeded_rng(9), **KW)
    args.update(kw)
    with pytest.raises(gp.InvalidInputError, match=msg):
        monitor.above_threshold(s, [0.1, 0.2], 0.75, **args)
    assert s.ledger.snapshot() == before


def test_unaffordable_first_run_raises_and_charges_nothing():
    s = gp.Session(central=gp.DP(epsilon=1e-4))
    before = s.ledger.snapshot()
    with pytest.raises(gp.BudgetExceededError, match="Nothing was charged"):
        monitor.above_threshold(s, [0.1] * 3, 0.75, users=["a"], rng=seeded_rng(10), **KW)
    spent = s.spent(["a"], notion="central")
    assert (spent == 0).all()
    del before


def test_report_noisy_max_bad_values_leave_ledger_untouched():
    s = gp.Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="values"):
        monitor.report_noisy_max(
            s, [np.nan, 1.0], users=[1], sigma=0.3, bounds=(0, 1), sensitivity=0.01
        )
    assert s.ledger.snapshot() == before
