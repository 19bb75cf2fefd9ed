"""Hypothesis state machine: the ledger against an exact Fraction model (STYLE.md §7).

Rules: reserve, charge (≤ allocation), cancel, leave the block (full charge), crash (drop the
Session without closing: its open reservations are settled in full on reopen), reopen.
Invariants: spent == model and spent ≤ budget for every user, always.
"""

from __future__ import annotations

import shutil
import tempfile
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import gpframe as gp
from gpframe.accounting.amounts import LedgerUnits
from gpframe.ledger import Session

USERS = [0, 1, 2, "a"]
BUDGET = Fraction(3, 10)
LU = LedgerUnits.for_budget(BUDGET)


def q(x):
    """The model's exact amount, rounded up to ledger units like every charge (§2.6 rule 5)."""
    return LU.to_fraction(LU.up(Fraction(repr(float(x)))))


AMOUNTS = [0.0, 0.01, 0.05, 0.1, 0.10000000000000002, 0.2, 0.3]


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = f"{self.dir}/ledger.sqlite"
        self.s = Session(self.path, budget=gp.GP(eps=0.3))
        self.spent = dict.fromkeys(USERS, Fraction(0))
        self.open = []  # (reservation, {user: allocation})

    def held(self, u):
        return sum((a.get(u, 0) for _, a in self.open), Fraction(0))

    @rule(
        users=st.lists(st.sampled_from(USERS), min_size=1, max_size=4, unique=True),
        amounts=st.lists(st.sampled_from(AMOUNTS), min_size=4, max_size=4),
    )
    def reserve(self, users, amounts):
        amounts = amounts[: len(users)]
        r = self.s.reserve(users, amounts)
        alloc = {}
        for u, a, ok in zip(users, amounts, r.admitted, strict=True):
            exact = q(a)
            fits = self.spent[u] + self.held(u) + exact <= BUDGET
            assert ok == fits, (u, a, self.spent[u], self.held(u))
            if ok:
                alloc[u] = exact
        self.open.append((r, alloc))

    @precondition(lambda self: self.open)
    @rule(data=st.data(), frac=st.sampled_from([0, Fraction(1, 2), 1]))
    def charge(self, data, frac):
        r, alloc = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        actual = [float(alloc.get(u, 0) * frac) for u in r.users.tolist()]
        r.charge(actual)
        for u in alloc:
            self.spent[u] += q(alloc[u] * frac)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def cancel(self, data):
        r, _ = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        r.cancel()

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def leave_block(self, data):
        r, alloc = self.open.pop(data.draw(st.integers(0, len(self.open) - 1)))
        r.__exit__(None, None, None)
        for u, a in alloc.items():
            self.spent[u] += a

    @rule()
    def crash_and_reopen(self):
        self.s._simulate_crash()
        for _, alloc in self.open:  # abandoned reservations are settled in full
            for u, a in alloc.items():
                self.spent[u] += a
        self.open = []
        self.s = Session(self.path, budget=gp.GP(eps=0.3))

    @rule()
    def close_and_reopen(self):
        self.s.close()
        for _, alloc in self.open:
            for u, a in alloc.items():
                self.spent[u] += a
        self.open = []
        self.s = Session(self.path)

    @invariant()
    def spent_matches_model_and_budget(self):
        got = self.s.spent_exact(USERS)
        for u in USERS:
            assert got[u] == self.spent[u]
            assert got[u] + self.held(u) <= BUDGET

    def teardown(self):
        self.s.ledger.verify()
        self.s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _run(examples, steps):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        LedgerMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_ledger_state_machine():
    _run(10, 10)


@pytest.mark.slow
def test_ledger_state_machine_long():
    _run(200, 30)
