"""Hypothesis state machine: gp.monitor's ex-post filter on a file-backed central DP ledger.

selection.md §6.3 (modes R and S), pitfalls P-4, P-5, P-10; adaptive-budgeting.md §2.6.

The comparison bits are scripted (the ledger logic is under test, not the noise). Rules run
monitoring calls in mode R or S, with c ⊤ and a cap, and may crash between a reservation and
its settlement: a *soft* crash (an exception escapes the run: the reservation block settles
at the full allocation) or a *hard* crash (the process "dies": the store is dropped unsettled
and the next Session on the file settles it in full, ``settle_stale``).

Invariants, on every path: a user's settled total never exceeds their budget; a crashed run is
charged at least its reserved worst case (mode R: R; mode S: need_t of the step it died in),
never less; a completed run is charged its realized ex-post ε (rounded up to ledger units).
"""

from __future__ import annotations

import shutil
import tempfile
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import gpframe as gp
from gpframe import monitor
from gpframe.ledger import Session
from gpframe.mechanisms.selection import ATParams, at_run_reservation, at_step_needs

USERS = ["a", "b"]
BUDGETS = {"a": Fraction(1, 20), "b": Fraction(3, 100)}
P = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
KW = dict(noise="gaussian", sigma=0.3, bounds=(0, 1), sensitivity=1e-3)
UNIT = Fraction(1, 10**12)  # generous bound on one ledger unit of rounding per charge


class _Crash(Exception):
    """An exception escaping a run after its reservation (soft crash)."""


class _Died(BaseException):
    """The process dies inside a run (hard crash): nothing may settle in this process."""


class MonitorLedgerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = f"{self.dir}/ledger.sqlite"
        self.s = Session(self.path, central=gp.DP(epsilon=float(BUDGETS["a"])))
        self.s.set_budget(["b"], gp.DP(epsilon=float(BUDGETS["b"])))
        self._orig_step = monitor.GaussianATRun.step

    def _spent(self) -> dict:
        got = self.s.spent_exact(USERS, notion="central")
        return {u: got[u] for u in USERS}

    def _script(self, outputs, crash_at, crash_kind):
        calls = {"n": 0}
        machine = self

        def step(run, value):
            calls["n"] += 1
            if crash_at is not None and calls["n"] == crash_at:
                if crash_kind == "hard":
                    machine.s._simulate_crash()
                    raise _Died()
                raise _Crash()
            top = outputs[(calls["n"] - 1) % len(outputs)]
            run.answers.append(top)
            return top

        monitor.GaussianATRun.step = step
        return calls

    @rule(
        mode=st.sampled_from(["R", "S"]),
        outputs=st.lists(st.booleans(), min_size=1, max_size=8),
        t_max=st.integers(1, 5),
        c=st.integers(1, 3),
        n_values=st.integers(1, 12),
    )
    def monitor_completes(self, mode, outputs, t_max, c, n_values):
        before = self._spent()
        self._script(outputs, None, None)
        try:
            res = monitor.above_threshold(self.s, [0.5] * n_values, 0.75, users=USERS,
                                          max_steps=t_max, c=c, mode=mode, **KW)  # fmt: skip
        except gp.BudgetExceededError:
            assert self._spent() == before  # refused before any noise: nothing charged
            return
        finally:
            monitor.GaussianATRun.step = self._orig_step
        after = self._spent()
        realized = sum(Fraction(r["charged"]) for r in res.runs)
        reserved = sum(Fraction(r["reserved"]) for r in res.runs)
        for u in USERS:
            inc = after[u] - before[u]
            assert realized <= inc <= realized + UNIT * (1 + 2 * sum(r["steps"] for r in res.runs))
            assert inc <= reserved + UNIT * (1 + 2 * sum(r["steps"] for r in res.runs))
        for r in res.runs:  # each run's charge is its realized ex-post ε, never above the worst
            assert r["charged"] <= r["reserved"]
            assert r["charged"] > 0  # P-4: a run without ⊤ is not free

    @rule(
        mode=st.sampled_from(["R", "S"]),
        outputs=st.lists(st.just(False), min_size=1, max_size=1),
        t_max=st.integers(1, 5),
        crash_at=st.integers(1, 5),
        kind=st.sampled_from(["soft", "hard"]),
    )
    def monitor_crashes_in_first_run(self, mode, outputs, t_max, crash_at, kind):
        before = self._spent()
        if min(BUDGETS[u] - before[u] for u in USERS) < Fraction(at_run_reservation(P, t_max)):
            # with less than the run's worst case left, mode S may stop the run on the budget and
            # start another, so "the crash happens in the first run" would not hold; budget stops
            # are covered by monitor_completes
            return
        crash_at = min(crash_at, t_max)
        calls = self._script(outputs, crash_at, kind)
        crashed = False
        try:
            monitor.above_threshold(self.s, [0.5] * 20, 0.75, users=USERS, max_steps=t_max,
                                    c=1, mode=mode, **KW)  # fmt: skip
        except gp.BudgetExceededError:
            pass
        except _Crash:
            crashed = True
        except _Died:
            crashed = True
        except Exception:  # the dead process's own cleanup fails on its closed store
            crashed = kind == "hard"
            if not crashed:
                raise
        finally:
            monitor.GaussianATRun.step = self._orig_step
        if kind == "hard" and (crashed or self.s._closed):
            self.s = Session(self.path)  # a new process opens the file: settle_stale()
        after = self._spent()
        if not crashed:
            assert calls["n"] == 0 and after == before  # refused at admission
            return
        if mode == "R":
            worst = Fraction(at_run_reservation(P, t_max))
        else:  # mode S: cumulative charge after a crash at step t is need_t
            worst = Fraction(max(at_step_needs(P, t_max)[crash_at - 1]))
        for u in USERS:
            inc = after[u] - before[u]
            assert inc >= worst, (mode, kind, inc, worst)  # never less than the reservation
            assert inc <= worst + UNIT * (2 * crash_at + 1)

    @invariant()
    def never_over_budget(self):
        spent = self._spent()
        for u in USERS:
            assert 0 <= spent[u] <= BUDGETS[u]

    def teardown(self):
        monitor.GaussianATRun.step = self._orig_step
        self.s.ledger.verify()
        self.s.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _run(examples: int, steps: int) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        MonitorLedgerMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_monitor_ledger_state_machine():
    _run(12, 8)


@pytest.mark.slow
def test_monitor_ledger_state_machine_long():
    _run(150, 20)


@pytest.mark.parametrize("mode", ["R", "S"])
@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_each_crash_path_settles_at_the_reserved_worst_case(mode, kind):
    """The four crash paths, deterministically (the machine above draws them at random)."""
    m = MonitorLedgerMachine()
    try:
        before = m._spent()
        m.monitor_crashes_in_first_run(mode=mode, outputs=[False], t_max=4, crash_at=3, kind=kind)
        after = m._spent()
        assert all(after[u] > before[u] for u in USERS)
        m.never_over_budget()
    finally:
        m.teardown()
