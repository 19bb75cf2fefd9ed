"""report_noisy_max states its score gap α at 1 − β: in the Result and, equal, in the preview.

The bound (docs/operations/monitoring.md, Report-Noisy-Max): with probability ≥ 1 − β the best
(clamped) score minus the selected one's is at most α. Seeded runs on adversarial near-ties (every
rival just above α/2 behind the winner, where the union bound is least loose) and clear winners.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import gpframe as gp
from gpframe import monitor
from gpframe.mechanisms.calibration import central_laplace
from gpframe.testing import seeded_rng

RUNS = 200
GAUSS: dict[str, Any] = dict(noise="gaussian", sigma=0.01, bounds=(0, 1), sensitivity=1e-3)
LAP_REAL: dict[str, Any] = dict(noise="laplace", epsilon=1.0, sensitivity=0.01)
LAP_INT: dict[str, Any] = dict(noise="laplace", epsilon=0.5, sensitivity=1, integer=True)


def _gaps(values: np.ndarray, beta: float, kw: dict[str, Any], seed0: int) -> tuple[float, list]:
    """Run ``RUNS`` seeded calls; return the stated α and each run's true score gap."""
    s = gp.Session(central=gp.DP(epsilon=1e9))
    best = float(values.max())
    alpha = None
    gaps = []
    for seed in range(seed0, seed0 + RUNS):
        res = monitor.report_noisy_max(s, values, users=["a"], beta=beta, rng=seeded_rng(seed),
                                       **kw)  # fmt: skip
        assert alpha is None or res.error == alpha  # public parameters only: the same each run
        alpha = res.error
        assert res.confidence == pytest.approx(1 - beta) and "score gap" in res.error_kind
        gaps.append(best - float(values[res.value]))
    assert alpha is not None
    return alpha, gaps


def _alpha(k: int, beta: float, kw: dict[str, Any]) -> float:
    pv = monitor.report_noisy_max(gp.Session(central=gp.DP(epsilon=1e9)), np.zeros(k),
                                  users=["a"], beta=beta, dry_run=True, **kw)  # fmt: skip
    assert pv.error is not None
    return pv.error


def _formula(k: int, beta: float, kw: dict[str, Any]) -> float:
    """The docs' α, computed here (the rivals are placed from it, not from the stated α)."""
    if kw["noise"] == "gaussian":
        return 2 * kw["sigma"] * math.sqrt(2 * math.log(2 * k / beta))
    cal = central_laplace(Fraction(kw["epsilon"]), Fraction(kw["sensitivity"]),
                          integer=bool(kw.get("integer")), s=Fraction(2))  # fmt: skip
    b, g, lam = float(cal.g / cal.param), float(cal.g), float(cal.param)
    return 2 * (b * math.log(2 * k / (beta * (1 + math.exp(-lam)))) + g / 2)


@pytest.mark.parametrize(
    "kw,k",
    [(GAUSS, 200), (LAP_REAL, 200), (LAP_INT, 20)],
    ids=["gaussian", "laplace-real", "laplace-integer"],
)
def test_gap_holds_on_a_near_tie(kw: dict[str, Any], k: int) -> None:
    """Every rival 0.505·α behind the winner: many runs select a rival, the gap stays ≤ α.

    Halving α fails the Gaussian case (about 1.7β of the runs then exceed α/2; verified by hand);
    the Laplace bound is ~2× loose even here (a rival wins past α/2 in ~1.2β of runs), so its
    formula is pinned below instead.
    """
    beta = 0.05
    alpha = _formula(k, beta, kw)
    top = 0.9 if kw["noise"] == "gaussian" else 100.0
    values = np.full(k, top - 0.505 * alpha)
    if kw.get("integer"):
        values = np.floor(values)
    values[k // 3] = top
    got, gaps = _gaps(values, beta, kw, seed0=1000)
    assert got == _alpha(k, beta, kw)  # the Result states the preview's α
    g = np.asarray(gaps)
    assert (g > 0).sum() >= 5  # rivals do win: the test exercises the bound
    assert (g > got).sum() <= beta * RUNS


@pytest.mark.parametrize("kw", [GAUSS, LAP_REAL, LAP_INT], ids=["gaussian", "lap-real", "lap-int"])
def test_gap_holds_with_a_clear_winner_and_spread_rivals(kw: dict[str, Any]) -> None:
    """Rivals spread over (0, 2α] behind a clear winner: the gap is ≤ α in ≥ 1 − β of runs."""
    beta, k = 0.05, 12
    alpha = _formula(k, beta, kw)
    top = 0.9 if kw["noise"] == "gaussian" else 100.0
    values = top - np.linspace(0.2, 2.0, k) * alpha
    if kw.get("integer"):
        values = np.floor(values)
    values[0] = top
    got, gaps = _gaps(values, beta, kw, seed0=5000)
    assert (np.asarray(gaps) > got).sum() <= beta * RUNS


def test_alpha_is_the_union_bound_of_the_drawn_noise() -> None:
    """α = 2·(b·ln(2k/(β(1 + e^{−λ}))) + g/2) with b, g of laplace_dp's calibration (scale 2Δ/ε);
    Gaussian 2σ√(2 ln(2k/β)). Pinned: halving the Laplace α escapes the coverage tests."""
    for kw, k, beta in [(LAP_INT, 7, 0.05), (LAP_REAL, 50, 0.1), ({**GAUSS, "sigma": 0.3}, 9, 0.2)]:
        want = _formula(k, beta, kw)
        assert _alpha(k, beta, kw) == pytest.approx(want, rel=1e-12)
        s = gp.Session(central=gp.DP(epsilon=100.0))
        values = np.arange(k, dtype=float) / (1 if kw.get("integer") else k)
        res = monitor.report_noisy_max(s, values, users=["a"], beta=beta, rng=seeded_rng(3), **kw)
        assert res.error == pytest.approx(want, rel=1e-12)
    cal = central_laplace(Fraction(1), Fraction(1), integer=True, s=Fraction(2))
    assert cal.g / cal.param == 2  # b = 2Δ/ε on the integer lattice
    assert _formula(7, 0.05, LAP_INT) == pytest.approx(
        2 * (4 * math.log(14 / (0.05 * (1 + math.exp(-0.25)))) + 0.5), rel=1e-12
    )


@pytest.mark.parametrize("kw", [GAUSS, LAP_REAL, LAP_INT], ids=["gaussian", "lap-real", "lap-int"])
def test_preview_states_the_results_gap_and_draws_and_writes_nothing(kw: dict[str, Any]) -> None:
    s = gp.Session(central=gp.DP(epsilon=100.0))
    values = np.array([3.0, 0.0, 7.0, 5.0]) / (10 if kw["noise"] == "gaussian" else 1)
    before = s.ledger.snapshot()
    r = seeded_rng(4)
    pv = monitor.report_noisy_max(s, values, users=["a", "b"], beta=0.1, rng=r, dry_run=True,
                                  **kw)  # fmt: skip
    assert r._counter == 0 and s.ledger.snapshot() == before and pv.refusal is None
    res = monitor.report_noisy_max(s, values, users=["a", "b"], beta=0.1, rng=seeded_rng(4), **kw)
    assert pv.error == res.error and pv.error > 0
    assert pv.error_kind == res.error_kind and pv.confidence == res.confidence == 0.9
    assert "expected error" in pv.summary()


def test_one_candidate_has_no_gap() -> None:
    s = gp.Session(central=gp.DP(epsilon=100.0))
    for kw in (GAUSS, LAP_INT):
        res = monitor.report_noisy_max(s, [0.5 if kw is GAUSS else 3], users=["a"],
                                       rng=seeded_rng(5), **kw)  # fmt: skip
        assert res.value == 0 and res.error == 0.0


@pytest.mark.parametrize("beta", [0, 1, -0.1, float("nan"), True, "0.05"])
def test_bad_beta_is_refused_before_the_ledger(beta: Any) -> None:
    s = gp.Session(central=gp.DP(epsilon=10.0))
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=r"beta=.*Nothing was charged"):
        monitor.report_noisy_max(s, [0.1, 0.2], users=["a"], beta=beta, rng=seeded_rng(6),
                                 **GAUSS)  # fmt: skip
    assert s.ledger.snapshot() == before
