"""Slow tier of the privacy audit (``pytest -m slow tests/audit``): the whole registry at N = 1e6.

* 0 violations at alpha = 1e-6 per case (false-failure probability ≤ 1e-6 per case, ≤ 1e-4 for
  the ~100 cases together).
* Tightness: for cases marked ``tight`` (pure claims at large eps·d) the lower bound reaches
  ≥ 0.9 × the claim, so the audit is not vacuous and over-noising would show. The measured ratio
  of a correct mechanism is ≈ 0.93–0.97 with a standard error ≈ 0.01, so < 0.9 by chance needs
  > 3 SE; the seeds are fixed, so the outcome is deterministic.
* The SVT reference passes on every standard pair and every SVT mutant is killed, at N = 4e6.
"""

from __future__ import annotations

import pytest

from .engine import audit, failed
from .mutants import MUTANTS, SVT_PAIRS, svt_case
from .registry import by_tier

pytestmark = [pytest.mark.slow, pytest.mark.statistical]

TIGHTNESS = 0.9


@pytest.mark.parametrize("case", by_tier("slow"), ids=lambda c: c.name)
def test_audit_slow(case):
    res = audit(case, case.n_slow, salt=1)
    print(res.summary())
    assert not res.violated, res.summary()
    if case.tight:
        assert res.tightness >= TIGHTNESS, f"vacuous or over-noised: {res.summary()}"


@pytest.mark.parametrize("pair", sorted(SVT_PAIRS))
def test_reference_svt_slow(pair):
    case = svt_case("reference", pair)
    res = audit(case, case.n_slow, salt=1)
    print(res.summary())
    assert not res.violated, res.summary()


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_killed_slow(mutant):
    results = [(c, audit(c, c.n_slow, salt=1)) for c in mutant.cases]
    for _, r in results:
        print(r.summary())
    assert any(failed(c, r) for c, r in results), f"mutant {mutant.name} survived"
