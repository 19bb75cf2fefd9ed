"""Audit cases for the selection mechanisms (selection.md §2, §4, §5; issue 9).

Outputs are discrete (answer patterns or an index), so every case uses a discrete featurizer.
Claims: Laplace AboveThreshold and Laplace RNM ε; Gaussian RNM its certified pure ε (§4.2);
Gaussian AboveThreshold the run's worst case R over the cap (§6.3 step 2), a sound pure claim
because the realized ex-post loss of every output is at most R. The exact-normal mechanisms run
in pure Python (≈0.1 ms per normal), so their fast-tier samples are small: the lower bounds are
weak there and the slow tier carries the power.
"""

from __future__ import annotations

import numpy as np

from .engine import Case, Claim, discrete_featurizer
from .mutants import SVT_PAIRS
from .registry import AUDITED_MODULES, FAST, NOT_MECHANISMS, SLOW, register

AUDITED_MODULES.append("gpframe.mechanisms.selection")
NOT_MECHANISMS["gpframe.mechanisms.selection.poisson_subsample"] = (
    "draws a secret sample and releases nothing; its amplification is an accounting formula "
    "(selection.md §3.1) tested against the oracle table"
)


def _pattern_code(out: np.ndarray) -> np.ndarray:
    return np.asarray(out, dtype=np.int64)


def _at_code(answers: np.ndarray, m: int) -> int:
    # 0 = not asked, 1 = ⊥, 2 = ⊤, base 3 over the m positions
    code = 0
    for i in range(m):
        d = 0 if i >= answers.size else (2 if answers[i] else 1)
        code = code * 3 + d
    return code


def laplace_at_case(pair: str, *, c: int = 1, eps: float = 1.0, tiers=SLOW, n_fast=20_000):
    from gpframe.mechanisms.selection import laplace_above_threshold

    qa, qb = SVT_PAIRS[pair]
    m = len(qa)

    def run(q, n, rng):
        return np.array(
            [
                _at_code(
                    laplace_above_threshold(
                        q, threshold=0.0, epsilon=eps, sensitivity=1, c=c, integer=True, rng=rng
                    ).answers,
                    m,
                )
                for _ in range(n)
            ]
        )

    return register(
        Case(
            name=f"laplace_above_threshold/c{c}/{pair}/eps{eps:g}",
            covers=("gpframe.mechanisms.selection.laplace_above_threshold",),
            run=run,
            inputs=(qa, qb),
            claim=Claim.dp(eps),
            featurizers=(discrete_featurizer(_pattern_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=200_000,
        )
    )


def gaussian_at_case(*, sigma=0.1, delta=0.2, m=3, tiers=SLOW, n_fast=3_000):
    """Lemma 18's worst-case pair: q = b − Δ (D) vs q' = b (D') for the ⊥ steps."""
    from gpframe.mechanisms.selection import ATParams, at_run_reservation, gaussian_above_threshold

    a, b, rho = 0.0, 1.0, 0.5
    qa = np.full(m, b - delta)
    qb = np.full(m, b)
    claim = at_run_reservation(
        ATParams.make(sigma_x=sigma, threshold=rho, bounds=(a, b), sensitivity=delta), m
    )

    def run(q, n, rng):
        return np.array(
            [
                _at_code(
                    gaussian_above_threshold(
                        q, sigma=sigma, threshold=rho, bounds=(a, b), sensitivity=delta, rng=rng
                    ).answers,
                    m,
                )
                for _ in range(n)
            ]
        )

    return register(
        Case(
            name=f"gaussian_above_threshold/sigma{sigma:g}/delta{delta:g}/m{m}",
            covers=("gpframe.mechanisms.selection.gaussian_above_threshold",),
            run=run,
            inputs=(qa, qb),
            claim=Claim.dp(claim),
            featurizers=(discrete_featurizer(_pattern_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=60_000,
        )
    )


def gaussian_rnm_case(*, sigma=0.3, delta=0.2, d=3, tiers=SLOW, n_fast=3_000):
    """§4.2's tight pair: others at b − Δ vs b, the last candidate at a + Δ vs a."""
    from gpframe.mechanisms.selection import eps_rnm, gaussian_report_noisy_max

    a, b = 0.0, 1.0
    qa = np.array([b - delta] * (d - 1) + [a + delta])
    qb = np.array([b] * (d - 1) + [a])
    claim = eps_rnm(sigma, sensitivity=delta, bounds=(a, b), d=d)

    def run(q, n, rng):
        return np.array(
            [
                gaussian_report_noisy_max(
                    q, sigma=sigma, bounds=(a, b), sensitivity=delta, rng=rng
                ).index
                for _ in range(n)
            ]
        )

    return register(
        Case(
            name=f"gaussian_report_noisy_max/sigma{sigma:g}/delta{delta:g}/d{d}",
            covers=("gpframe.mechanisms.selection.gaussian_report_noisy_max",),
            run=run,
            inputs=(qa, qb),
            claim=Claim.dp(claim),
            featurizers=(discrete_featurizer(_pattern_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=60_000,
        )
    )


def laplace_rnm_case(*, eps=1.0, tiers=SLOW, n_fast=20_000):
    from gpframe.mechanisms.selection import laplace_report_noisy_max

    qa = np.array([1.0, 0.0, 0.0])
    qb = np.array([0.0, 1.0, 1.0])

    def run(q, n, rng):
        return np.array(
            [
                laplace_report_noisy_max(q, epsilon=eps, sensitivity=1, integer=True, rng=rng).index
                for _ in range(n)
            ]
        )

    return register(
        Case(
            name=f"laplace_report_noisy_max/eps{eps:g}",
            covers=("gpframe.mechanisms.selection.laplace_report_noisy_max",),
            run=run,
            inputs=(qa, qb),
            claim=Claim.dp(eps),
            featurizers=(discrete_featurizer(_pattern_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=200_000,
        )
    )


laplace_at_case("halves", tiers=FAST, n_fast=2_000)
laplace_at_case("shift")
laplace_at_case("prefix")
laplace_at_case("halves", c=2)
gaussian_at_case(tiers=FAST, n_fast=1_000)
gaussian_at_case(sigma=0.3, delta=0.1, m=5)
gaussian_rnm_case(tiers=FAST, n_fast=1_000)
gaussian_rnm_case(sigma=0.2, delta=0.1, d=4)
laplace_rnm_case(tiers=FAST, n_fast=3_000)
