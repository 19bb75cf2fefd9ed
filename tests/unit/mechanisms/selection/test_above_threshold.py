"""Seeded check of the Laplace AboveThreshold accuracy bound (selection.md §2.3).

Claim (what ``gp.monitor.above_threshold`` reports as ``error`` at ``confidence`` 1 − β): with at
most k queries, with probability ≥ 1 − β, ⊥ at step i ⇒ f_i < t + α and ⊤ at step i ⇒ f_i ≥ t − α,
α = (8Δ/ε)·ln((k + 1)/β) plus one lattice step. Each scenario places every query where a wrong
answer is a violation (just below t − α for ⊤, at t + α for ⊥), counts violating runs over
seeded exact runs, and fails if the one-sided Clopper–Pearson lower bound of the violation rate
at confidence 1 − 10⁻⁶ exceeds β. If the claim holds, that happens with probability ≤ 10⁻⁶ per
scenario (the validity of the Clopper–Pearson bound), so the test cannot flake beyond 2·10⁻⁶.
Negative controls: the same check with α shrunk (÷3 on the ⊤ side, ÷8 on the ⊥ side, where a
violation needs one comparison only) must detect a violation.
"""

from __future__ import annotations

import math

import pytest
from scipy import stats

import gpframe as gp
from gpframe import monitor
from gpframe.mechanisms.selection import laplace_above_threshold, laplace_at_accuracy
from gpframe.testing import seeded_rng

pytestmark = pytest.mark.statistical

EPS, DELTA, K, BETA, T = 1.0, 1, 9, 0.05, 0
CONF = 1e-6


def _reported_alpha() -> float:
    """The margin the monitor reports for a capped Laplace run of K queries (ε = 1, Δ = 1)."""
    s = gp.Session(central=gp.DP(epsilon=1.0))
    res = monitor.above_threshold(s, [0] * K, 10**6, users=["u"], sensitivity=DELTA,
                                  epsilon=EPS, integer=True, beta=BETA,
                                  rng=seeded_rng(0))  # fmt: skip
    assert res.confidence == pytest.approx(1 - BETA)
    return float(res.error)


def _violation_rate_lower(alpha: float, side: str, n: int, seed: int) -> tuple[float, int]:
    """CP lower bound (confidence 1 − 10⁻⁶) of P(a reported answer contradicts α)."""
    if side == "top":  # f < t − α: any ⊤ contradicts the bound
        f = T - math.floor(alpha) - 1
    else:  # f ≥ t + α: any ⊥ contradicts it (the run halts at its ⊤)
        f = T + math.ceil(alpha)
    rng = seeded_rng(seed)
    bad = 0
    for _ in range(n):
        ans = laplace_above_threshold([f] * K, threshold=T, epsilon=EPS, sensitivity=DELTA,
                                      integer=True, rng=rng).answers  # fmt: skip
        bad += bool(ans.any()) if side == "top" else bool((~ans).any())
    lower = 0.0 if bad == 0 else float(stats.beta.ppf(CONF, bad, n - bad + 1))
    return lower, bad


def test_reported_alpha_is_the_spec_constant():
    """α = 8·ln(200) (§2.3, k = 9, β = 0.05) plus one lattice step g = 1."""
    want = laplace_at_accuracy(EPS, sensitivity=DELTA, k=K, beta=BETA) + 1
    assert _reported_alpha() == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(8 * math.log(200) + 1, rel=1e-12)


@pytest.mark.parametrize("side,n,shrink,seed", [("top", 1200, 3.0, 11), ("bottom", 2000, 8.0, 12)])
def test_accuracy_bound_holds_and_a_shrunk_bound_is_caught(side, n, shrink, seed):
    """Violation rate ≤ β at the reported α; at α/shrink the check must reject.

    Expected rates (continuous-Laplace closed form of §2.4): at α, ≈ 10⁻⁴ (⊤ side) and ≈ 10⁻⁵
    (⊥ side), far below β; at α/3 (⊤ side) and α/8 (⊥ side) ≈ 0.13 (measured 161/1200 and
    239/2000), so the controls' Clopper–Pearson lower bounds (≈ 0.09) exceed β = 0.05.
    """
    alpha = _reported_alpha()
    lower, bad = _violation_rate_lower(alpha, side, n, seed)
    print(f"{side}: α={alpha:.3f}, violations {bad}/{n}, CP lower {lower:.4f}")
    assert lower <= BETA
    lower_c, bad_c = _violation_rate_lower(alpha / shrink, side, n, seed + 100)
    print(f"{side} control α/{shrink:g}: violations {bad_c}/{n}, CP lower {lower_c:.4f}")
    assert lower_c > BETA, "the negative control was not detected: the check has no power"
