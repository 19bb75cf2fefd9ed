"""The driver's dry run and on_exhausted="raise": planned exactly as reserved, nothing written."""

from __future__ import annotations

import numpy as np
import pytest

import gpframe as gp
from gpframe.errors import BudgetExceededError, GpframeInternalError, InvalidInputError, LedgerError
from gpframe.ledger.run import (
    Charge,
    PreviewPlan,
    PreviewStop,
    previewing,
    raising_on_exhausted,
    run,
)


def _session() -> gp.Session:
    s = gp.Session(budget=gp.GP(eps=1.0))
    s.set_budget(["poor"], gp.GP(eps=0.1))
    return s


def _never(r):  # pragma: no cover - a dry run must not call it
    raise AssertionError("compute ran in a dry run")


def test_admission_equals_reserve_and_writes_nothing() -> None:
    s = _session()
    users, alloc = ["ann", "poor", "bob", "new"], [0.5, 0.2, 0.25, 1.0]
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    planned = s.ledger.admission(users, alloc, notion="metric", kind=None, query="q")
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert planned.state == "preview"
    with s.reserve(users, alloc) as real:
        assert planned.admitted.tolist() == real.admitted.tolist() == [True, False, True, True]
        assert planned.allocation_units.tolist() == real.allocation_units.tolist()
        real.cancel()
    assert planned.requested_units[1] > planned.remaining_units[1]
    planned.cancel()  # does nothing
    with pytest.raises(GpframeInternalError):
        planned.charge(0)


def test_dry_run_stops_after_check_and_records_the_plan() -> None:
    s = _session()
    checked = []
    snap = s.ledger.snapshot()
    with previewing() as plan, pytest.raises(PreviewStop):
        run(s, ["ann", "poor"], 0.5, query="q", params={"k": 1}, compute=_never,
            check=lambda r: checked.append(r.admitted.tolist()))  # fmt: skip
    assert checked == [[True, False]] and s.ledger.snapshot() == snap
    (p,) = plan.calls
    assert (p.query, p.notion, p.params, p.refusal) == ("q", "metric", {"k": 1}, None)
    assert p.admitted.tolist() == [True, False]


def test_a_dry_run_that_continues_holds_earlier_plans() -> None:
    # the second reservation sees the first as held: ann can pay 0.6 once, not twice
    s = _session()
    snap = s.ledger.snapshot()
    plan = PreviewPlan(stop=False)
    for _ in range(2):
        ran = run(s, ["ann"], 0.6, query="q", compute=_never, dry_run=plan)
        assert ran.status == "preview" and ran.value is None
    assert [c.admitted.tolist() for c in plan.calls] == [[True], [False]]
    assert s.ledger.snapshot() == snap


def test_a_check_that_refuses_is_recorded_not_raised() -> None:
    s = _session()

    def needs_all(r):
        if not r.admitted.all():
            raise BudgetExceededError("poor cannot pay. Nothing was charged.")

    with previewing() as plan, pytest.raises(PreviewStop):
        run(s, ["ann", "poor"], 0.5, query="q", compute=_never, check=needs_all)
    assert plan.calls[0].refusal == "poor cannot pay. Nothing was charged."
    # bad input found by a check is still raised
    with previewing(), pytest.raises(InvalidInputError):
        run(s, ["ann"], 0.5, query="q", compute=_never,
            check=lambda r: (_ for _ in ()).throw(InvalidInputError("bad")))  # fmt: skip


def test_bad_input_and_closed_sessions_are_refused_in_a_dry_run_too() -> None:
    s = _session()
    with previewing(), pytest.raises(InvalidInputError):
        run(s, ["ann", "ann"], 0.5, query="q", compute=_never)
    s.close()
    with previewing(), pytest.raises(LedgerError, match="closed"):
        run(s, ["ann"], 0.5, query="q", compute=_never)


def test_the_context_ends_with_its_block() -> None:
    s = _session()
    with previewing(), pytest.raises(PreviewStop):
        run(s, ["ann"], 0.5, query="q", compute=_never)
    ran = run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, 0.5))
    assert ran.status == "charged" and s.spent(["ann"]).tolist() == [0.5]


def test_raise_refuses_before_reserving_and_names_users() -> None:
    s = _session()
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    with raising_on_exhausted(), pytest.raises(BudgetExceededError, match=r"1 of 2 .*'poor'"):
        run(s, ["ann", "poor"], 0.5, query="q", compute=_never)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    # users the operation left out before reserving count as refused too
    with raising_on_exhausted(), pytest.raises(BudgetExceededError, match="'gone'"):
        run(s, ["ann"], 0.5, query="q", params={"excluded_users": ["gone"]}, compute=_never)
    with raising_on_exhausted():
        ran = run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, np.array([0.5])))
    assert ran.status == "charged"
