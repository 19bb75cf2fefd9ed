"""Positive controls: every planted mutant must be caught. A surviving mutant fails the suite.

Noise-level and SVT mutants are killed by the privacy-loss audit (a lower confidence bound above
the correct mechanism's claim); the float-Laplace mutant by the support test; the ledger mutants
by the accounting audit (released draws × per-draw cost ≤ the ledger's recorded spend).
These tests must *detect* a violation, so a false pass (a mutant surviving) is the failure mode:
each mutant's expected loss exceeds the claim by ≥ 4 standard errors of the estimate at the N used.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from .engine import audit, failed
from .mutants import MUTANTS, naive_float_laplace, numpy_reachable

pytestmark = pytest.mark.statistical


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_killed(mutant):
    results = [(c, audit(c, c.n_fast)) for c in mutant.cases]
    for _, r in results:
        print(r.summary())
    assert any(failed(c, r) for c, r in results), (
        f"mutant {mutant.name} survived: {mutant.description}"
    )


@pytest.mark.parametrize("x1", [2.0**-20, 1e-6], ids=["one-step", "off-lattice"])
def test_float_numpy_laplace_is_killed_by_the_support_test(x1):
    """Mironov: x + numpy Laplace(0, 1) is reachable from x = 0 with probability 1 and from
    x' = x1 far less often; the advantage must be ≥ 0.5 (measured ≈ 0.82)."""
    n = 100_000
    y0 = naive_float_laplace(0.0, n, np.random.default_rng(1))
    y1 = naive_float_laplace(x1, n, np.random.default_rng(2))
    p0, p1 = numpy_reachable(y0).mean(), numpy_reachable(y1).mean()
    print(f"float numpy Laplace x'={x1:g}: P0={p0:.4f} P1={p1:.4f}")
    assert p0 - p1 >= 0.5


# --------------------------------------------------------------------------------------------
# ledger-level mutants
# --------------------------------------------------------------------------------------------


class CountingMechanism:
    """Wraps laplace_gp and counts, per user, how many noisy values were released."""

    def __init__(self) -> None:
        self.draws: dict[str, int] = {}

    def __call__(self, users, values, *, eps, rng):
        from gpframe.mechanisms import laplace_gp

        out = laplace_gp(values, eps=eps, rng=rng)
        for u in users:
            self.draws[u] = self.draws.get(u, 0) + 1
        return out


def multi_round_release(session, users, values, *, eps, rounds, mech, rng, mode="correct"):
    """A reference multi-round query: each round releases one noisy value per active user at
    eps/rounds each; a user leaves after the round in which its released value passes 0 (a
    data-dependent elimination). Correct charge: (rounds taken part in) × eps/rounds per user.

    ``mode="skip_charge"``: draws and releases, then cancels the reservation (nothing charged).
    ``mode="eliminated_zero"``: users eliminated before the last round are charged 0.
    """
    users = list(users)
    per = Fraction(eps) / rounds
    with session.reserve(users, Fraction(eps), query="audit-multi-round") as r:
        active = np.ones(len(users), dtype=bool)
        taken = np.zeros(len(users), dtype=np.int64)
        x = np.asarray(values, dtype=np.float64)
        for _ in range(rounds):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            y = np.asarray(mech([users[i] for i in idx], x[idx], eps=per, rng=rng))
            taken[idx] += 1
            active[idx[y > 0]] = False
            x = x + 1.0
        if mode == "skip_charge":
            r.cancel()
            return
        charge = [per * int(t) for t in taken]
        if mode == "eliminated_zero":
            charge = [c if t == rounds else Fraction(0) for c, t in zip(charge, taken, strict=True)]
        r.charge(charge)


def ledger_violations(session, mech, per) -> list[str]:
    """Users whose released draws × per-draw cost exceed what the ledger recorded."""
    spent = session.spent_exact()
    bad = []
    for u, k in mech.draws.items():
        if Fraction(k) * per > Fraction(spent.get(u, 0)):
            bad.append(u)
    return bad


@pytest.mark.parametrize("mode", ["correct", "skip_charge", "eliminated_zero"])
def test_ledger_accounting_audit(mode):
    import gpframe as gp
    from gpframe.ledger import Session  # gp.Session once the package exports it
    from gpframe.testing import seeded_rng

    users = [f"u{i}" for i in range(40)]
    values = np.linspace(-30.0, 5.0, len(users))
    eps, rounds = Fraction(1, 10), 5
    mech = CountingMechanism()
    with Session(budget=gp.GP(eps=1.0)) as s:
        for rep in range(3):
            multi_round_release(
                s, users, values, eps=eps, rounds=rounds, mech=mech, rng=seeded_rng(rep), mode=mode
            )
        bad = ledger_violations(s, mech, eps / rounds)
    if mode == "correct":
        assert not bad, f"correct query flagged: {bad}"
    else:
        assert bad, f"ledger mutant {mode} survived"
