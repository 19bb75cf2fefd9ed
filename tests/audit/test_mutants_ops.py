"""Positive controls for the multi-round operations (range count / KDE elimination), issue 10.

Two planted defects of iterative elimination (adaptive-budgeting.md §4.4, §4.6), each of which
the audit of :mod:`.cases_range_count` must catch, next to the correct mechanism under the same
audit (so a mutant is killed by its defect, not by the harness):

* **full allocation each round**: every round releases at the user's whole allocation (part × c
  with the even split) while reporting the part's guarantee. Audited against the allocation, the
  transcript's loss is c times the claim's parameter (GP, c = 4: ε·d = 12 against 3; CGP, c = 8:
  ρd² = 4 against 0.5, i.e. ε = 6.8 against 2.65 at δ = 0.1).
* **charged for the first round only**: the noise is correct but every user is charged round 1's
  part. Audited against the *reported* charge (the largest in a pilot run; a valid claim for a
  correct mechanism, whose charge is the sum of the guarantees of the rounds run), the loss is
  c times the claim's parameter (GP: 3 against 0.75; CGP: ρd² = 2 against 0.25, i.e. ε = 3.8
  against 1.77 at δ = 0.1). The accounting check (each user's charge = Σ of the guarantees of the
  rounds it was released in) catches it too, deterministically.

A mutant survives only if the lower bound stays under the claim although the expected loss is
≥ 1.5 × the claim; at the N used the bound's standard error is < 0.1 of the claim, so a false pass
needs > 5 standard errors. The correct controls fail with probability ≤ 1e-6 each (the audit's α).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest

from .cases_range_count import (
    AMOUNT,
    N_UNION,
    PAIRS,
    ReleaseTap,
    _point,
    _region,
    llr_featurizer,
    rounds_featurizer,
    rounds_from_charges,
    transcript,
)
from .engine import Case, Claim, audit
from .registry import _quiet

pytestmark = pytest.mark.statistical

#: (kind, allocation, d, rounds) of the mutant pairs, straddling the boundary (never eliminated):
#: GP ε·d = 3 with c = 4; CGP ρd² = 0.5 with c = 8 for the full-allocation mutant (its transcript
#: is 4-CGP, μ = 2.83: ε = 6.8 at δ = 0.1 against the claim's 2.65) and ρd² = 2 with c = 8 for the
#: charge mutant (claimed ρd²/8 = 0.25: 1.77 at δ = 0.1, shown ≥ 2.5 at N = 1e4)
SETUPS = {
    ("full_allocation", "gp"): (0.1, 30.0, 4),
    ("full_allocation", "cgp"): (0.005, 10.0, 8),
    ("charge", "gp"): (0.1, 30.0, 4),
    ("charge", "cgp"): (0.02, 10.0, 8),
}
N = 10_000


@contextlib.contextmanager
def full_allocation_rounds(c: int) -> Iterator[None]:
    """Mutant: each round is released at part × c (the whole allocation for the even split) and
    reports the part's charge, so the ledger and the elimination's own checks see nothing."""
    from gpframe.queries import elimination as el

    orig = el._release

    def mutant(kind, triple, data, part, k, rng):
        rel, charge = orig(kind, triple, data, part * c, k, rng)
        return rel, charge / c

    el._release = mutant
    try:
        yield
    finally:
        el._release = orig


def first_round_charges(out):
    """Mutant: every queried user is charged round 1's part only (the noise is untouched)."""
    g1 = Fraction(out.elimination.guarantees[0].amount)
    out.charges = np.array([g1 if r > 0 else Fraction(0) for r in out.rounds_run], dtype=object)
    return out


def _range_count(kind, amount, rounds, x, n, rng, mutant=None):
    """range_count_arrays (dist-elim, even split) on n copies; returns (tap, result)."""
    from gpframe.queries.range_count import range_count_arrays

    pts = np.repeat(np.asarray(x, dtype=np.float64)[None, :], n, axis=0)
    ctx = (
        full_allocation_rounds(rounds) if mutant == "full_allocation" else contextlib.nullcontext()
    )
    with ReleaseTap() as tap, ctx:
        out = _quiet(
            range_count_arrays, pts, np.arange(n), _region(), kind=kind, amount=amount,
            method="dist-elim", rounds=rounds, split="even", n_union=N_UNION, rng=rng,
        )  # fmt: skip
    if mutant == "charge":
        out = first_round_charges(out)
    return tap, out


def mutant_case(which: str, kind: str, mutant: bool) -> Case:
    """The straddling pair ±d/2 across the box's edge, audited through the transcript.

    ``which="full_allocation"``: claimed the allocation. ``which="charge"``: claimed the largest
    charge the operation reports in a pilot run (2 × 2000 users).
    """
    from gpframe.testing import seeded_rng

    a, d, c = SETUPS[(which, kind)]
    h0, h1 = -d / 2, d / 2
    x0, x1 = _point(h0), _point(h1)
    tag = which if mutant else "control"
    bad = which if mutant else None
    if which == "charge":
        claimed = max(
            float(max(_range_count(kind, a, c, x, 2_000, seeded_rng(s), bad)[1].charges))
            for s, x in ((101, x0), (102, x1))
        )
    else:
        claimed = a
    claim = Claim.gp(claimed, d) if kind == "gp" else Claim.cgp(claimed, d)

    def run(x, n, rng):
        tap, out = _range_count(kind, a, c, x, n, rng, bad)
        return transcript(tap.records, out.rounds_run, 1, c)

    return Case(
        name=f"range_count/{kind}/dist-elim/even/c{c}/straddle#{tag}_{which}",
        run=run,
        inputs=(x0, x1),
        centers=(np.array([h0]), np.array([h1])),
        featurizers=(llr_featurizer(kind, 1, h0, h1), rounds_featurizer),
        claim=claim,
        n_fast=N,
    )


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gp", "cgp"])
@pytest.mark.parametrize("which", ["full_allocation", "charge"])
def test_mutant_is_killed(which, kind):
    case = mutant_case(which, kind, mutant=True)
    res = audit(case, N)
    print(res.summary())
    assert res.violated, f"mutant survived: {res.summary()}"


@pytest.mark.parametrize("kind", ["gp", "cgp"])
@pytest.mark.parametrize("which", ["full_allocation", "charge"])
def test_control_passes(which, kind):
    case = mutant_case(which, kind, mutant=False)
    res = audit(case, N)
    print(res.summary())
    assert not res.violated, res.summary()


@pytest.mark.parametrize("mutant", [None, "charge"], ids=["correct", "first_round_charge"])
@pytest.mark.parametrize("where", ["straddle", "deep"])
def test_charges_match_released_rounds(mutant, where):
    """Accounting audit (deterministic): each user's charge is the sum of the guarantees of the
    rounds it was released in, and rounds_run counts those releases."""
    from gpframe.testing import seeded_rng

    x = _point(PAIRS[("gp", where)][0])
    tap, out = _range_count("gp", AMOUNT["gp"], 4, x, 5_000, seeded_rng(7), mutant)
    ch = np.array([float(c) for c in out.charges])
    try:
        r = rounds_from_charges(ch, tap.records, 1.0)
        transcript(tap.records, r, 1, 4)
        ok = bool(np.array_equal(r, out.rounds_run))
    except AssertionError:
        ok = False
    if where == "deep":  # users stop at several rounds: the check is not vacuous
        assert len(np.unique(out.rounds_run)) > 1
    assert ok == (mutant is None)
