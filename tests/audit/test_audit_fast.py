"""Fast tier of the privacy audit: a subset of the registry at N = 1e5 per input.

Each case: event chosen on a selection sample, exact Clopper–Pearson bounds on a fresh sample,
fail when the lower bound of the loss exceeds the claim, or, for a plain Gaussian case, when it
exceeds the exact (epsilon, delta) curve of the nominal sigma (``engine.failed``, threshold
``engine.REF_RATIO_MAX``). False-failure probability per case ≤ 1e-6 (alpha split between the
two bounds and over the deltas of a zCDP/CGP claim); with the fixed seeds the outcome is
deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from .engine import REF_RATIO_MAX, audit, failed
from .mutants import SVT_PAIRS, numpy_reachable, svt_case
from .registry import by_tier

pytestmark = pytest.mark.statistical


@pytest.mark.parametrize("case", by_tier("fast"), ids=lambda c: c.name)
def test_audit_fast(case):
    res = audit(case, case.n_fast)
    print(res.summary())
    # plain Gaussian cases: also ref_ratio <= REF_RATIO_MAX (the exact curve of the nominal sigma)
    assert not failed(case, res), f"{res.summary()} (ref_ratio limit {REF_RATIO_MAX})"


@pytest.mark.parametrize("pair", sorted(SVT_PAIRS))
def test_reference_svt_passes(pair):
    """The correct AboveThreshold (selection.md §2.1) passes on every standard pair: the SVT
    mutants are killed by their defect, not by the harness. False failure ≤ 1e-6."""
    case = svt_case("reference", pair, n_fast=300_000)
    res = audit(case, case.n_fast)
    print(res.summary())
    assert not res.violated, res.summary()


@pytest.mark.parametrize("x1", [2.0**-20, 1e-6], ids=["one-step", "off-lattice"])
def test_support_gpframe_laplace(x1):
    """T-FP-1 (secure-noise.md §12): the event "reachable by numpy's float Laplace(0, 1)" has
    nearly the same probability under x = 0 and x' one lattice step (or 1e-6, snapped) away:
    |P0 − P1| ≤ 0.01 at N = 1e5. P0 − P1 has SD ≈ 0.0014 here, so a false failure needs > 7 SD
    (probability < 1e-11)."""
    from gpframe.mechanisms import laplace_dp
    from gpframe.testing import seeded_rng

    n = 100_000
    y0 = np.asarray(laplace_dp(np.zeros(n), sensitivity=1, epsilon=1, rng=seeded_rng(11)))
    y1 = np.asarray(laplace_dp(np.full(n, x1), sensitivity=1, epsilon=1, rng=seeded_rng(12)))
    p0, p1 = numpy_reachable(y0).mean(), numpy_reachable(y1).mean()
    print(f"gpframe support test x'={x1:g}: P0={p0:.4f} P1={p1:.4f}")
    assert abs(p0 - p1) <= 0.01


def test_support_event_at_distance_b_within_claim():
    """T-FP-1 third row: at x' = b = 1 the loss lower bound of the support event stays ≤ ε·d."""
    from gpframe.mechanisms import laplace_dp
    from gpframe.testing import seeded_rng

    from .stats import loss_lower_bound

    n = 100_000
    y0 = np.asarray(laplace_dp(np.zeros(n), sensitivity=1, epsilon=1, rng=seeded_rng(13)))
    y1 = np.asarray(laplace_dp(np.ones(n), sensitivity=1, epsilon=1, rng=seeded_rng(14)))
    k0, k1 = int(numpy_reachable(y0).sum()), int(numpy_reachable(y1).sum())
    for a, b in ((k0, k1), (k1, k0)):
        assert float(loss_lower_bound(a, n, b, n, 1e-6)) <= 1.0
