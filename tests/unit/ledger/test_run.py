"""The driver: reserve -> check -> compute -> charge, and what each failure leaves behind."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import gpframe as gp
from gpframe.errors import GpframeInternalError, InvalidInputError, LedgerError
from gpframe.ledger.run import Charge, run


def _session() -> gp.Session:
    s = gp.Session(budget=gp.GP(eps=1.0))
    s.set_budget(["poor"], gp.GP(eps=0.1))
    return s


def _audit_ops(s: gp.Session) -> list[str]:
    return [row[2] for row in s.ledger.store.audit()]


def test_charges_actual_amounts_and_reports_the_reservation() -> None:
    s = _session()
    seen = []

    def compute(r):
        seen.append(r.admitted.tolist())
        return Charge(value="v", charges=np.where(r.admitted, 0.25, 0))

    ran = run(s, ["ann", "poor", "bob"], 0.5, query="q", compute=compute)
    assert seen == [[True, False, True]]
    assert (ran.status, ran.value, ran.charged) == ("charged", "v", True)
    assert ran.admitted.tolist() == [True, False, True]
    assert s.spent_exact(["ann", "poor", "bob"]).tolist() == [Fraction(1, 4), 0, Fraction(1, 4)]
    assert s.report(ran.query_id)["charge"].tolist() == [0.25, 0.25]


def test_refusal_by_check_cancels_and_charges_nothing() -> None:
    s = _session()
    called = []
    ran = run(s, ["ann", "poor"], 0.5, query="q", check=lambda r: bool(r.admitted.all()),
              compute=lambda r: called.append(1))  # fmt: skip
    assert ran.status == "refused" and ran.value is None and not called
    assert s.spent_exact(["ann", "poor"]).tolist() == [0, 0]
    assert s.ledger.store.reservations() == []
    assert _audit_ops(s)[-1] == "cancel"


def test_check_raising_cancels_and_reraises() -> None:
    s = _session()

    def check(r):
        raise InvalidInputError("parts too small. Nothing was charged.")

    with pytest.raises(InvalidInputError, match="parts too small"):
        run(s, ["ann"], 0.5, query="q", check=check, compute=lambda r: Charge(1, 0))
    assert s.spent_exact(["ann"]).tolist() == [0]
    assert s.ledger.store.reservations() == []


def test_refused_reservation_leaves_the_ledger_untouched() -> None:
    """A reserve() that raises (bad amount) writes nothing: no query, no audit row."""
    s = _session()
    before = _audit_ops(s)
    with pytest.raises(InvalidInputError):
        run(s, ["ann"], -1.0, query="q", compute=lambda r: Charge(1, 0))
    assert _audit_ops(s) == before
    assert s.spent_exact(["ann"]).tolist() == [0]


def test_exception_in_compute_charges_the_full_allocation() -> None:
    """Noise may have been drawn: cancelling would let a failed query release for free."""
    s = _session()

    def compute(r):
        raise RuntimeError("sampler failed after drawing")

    with pytest.raises(RuntimeError, match="sampler failed"):
        run(s, ["ann", "poor"], 0.5, query="q", compute=compute)
    assert s.spent_exact(["ann", "poor"]).tolist() == [Fraction(1, 2), 0]
    assert s.ledger.store.reservations() == []


def test_over_charge_in_units_is_refused_and_settled_in_full() -> None:
    s = _session()
    units, _ = s.ledger.units_for("metric", Fraction(1, 2), np.ones(1, np.int64))

    def compute(r):
        return Charge(value=1, charges=r.allocation_units + 1, units=True)

    with pytest.raises(GpframeInternalError, match=r"q would charge .* above the allocation"):
        run(s, ["ann"], units, query="q", units=True, compute=compute)
    assert s.spent_exact(["ann"]).tolist() == [Fraction(1, 2)]


def test_over_charge_in_kind_units_is_refused_and_settled_in_full() -> None:
    s = _session()
    with pytest.raises(InvalidInputError, match="exceeds its allocation"):
        run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, 0.75))
    assert s.spent_exact(["ann"]).tolist() == [Fraction(1, 2)]


def test_charge_is_durable_before_return(tmp_path) -> None:
    path = tmp_path / "l.sqlite"
    with gp.Session(path, budget=gp.GP(eps=1.0)) as s:
        ran = run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, 0.125))
        # a second, independent connection sees the charge as soon as run() returned
        with gp.Session(path, readonly=True) as other:
            assert other.spent_exact(["ann"]).tolist() == [Fraction(1, 8)]
            assert other.report(ran.query_id)["charge"].tolist() == [0.125]


def test_a_committed_charge_id_is_a_replay_that_draws_nothing() -> None:
    s = _session()
    calls = []

    def compute(r):
        calls.append(1)
        return Charge(value="v", charges=0.25)

    first = run(s, ["ann"], 0.5, query="q", charge_id="job-1", compute=compute)
    again = run(s, ["ann"], 0.5, query="q", charge_id="job-1", compute=compute)
    assert (first.status, again.status, again.value) == ("charged", "replay", None)
    assert calls == [1] and again.query_id == first.query_id
    assert again.admitted.tolist() == [False]
    assert s.spent_exact(["ann"]).tolist() == [Fraction(1, 4)]


def test_lock_is_held_from_reservation_to_charge() -> None:
    import threading

    s = _session()
    lock = threading.RLock()
    held = []

    def compute(r):
        held.append(lock._is_owned())  # type: ignore[attr-defined]
        return Charge(1, 0)

    run(s, ["ann"], 0.5, query="q", compute=compute, lock=lock)
    assert held == [True] and not lock._is_owned()  # type: ignore[attr-defined]


def test_closed_session_refuses_before_anything() -> None:
    s = _session()
    s.close()
    with pytest.raises(LedgerError, match="closed"):
        run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, 0))


def test_read_only_session_refuses_before_compute(tmp_path) -> None:
    path = tmp_path / "l.sqlite"
    with gp.Session(path, budget=gp.GP(eps=1.0)) as s:
        run(s, ["ann"], 0.5, query="q", compute=lambda r: Charge(1, 0.25))
    calls = []
    with gp.Session(path, readonly=True) as ro:
        with pytest.raises(LedgerError):
            run(ro, ["ann"], 0.5, query="q", compute=lambda r: calls.append(1))
        assert ro.spent_exact(["ann"]).tolist() == [Fraction(1, 4)]
    assert not calls


# ------------------------------------------------------------------------------- prepaid runs


def _units(s: gp.Session, eps: float, n: int) -> np.ndarray:
    return s.ledger.units_for("metric", eps, np.ones(n, dtype=np.int64))[0]


def test_prepaid_commits_the_charge_in_the_reservations_transaction_before_compute() -> None:
    s = _session()
    users = ["ann", "poor", "bob"]
    alloc = _units(s, 0.5, 3)
    seen = []

    def compute(r):
        # the charge is durable before any noise: compute sees it spent already
        seen.append(s.spent_exact(users).tolist())
        return Charge(value="v", charges=np.where(r.admitted, r.allocation_units, 0), units=True)

    g = s.ledger._group
    t0 = g.transactions
    ran = run(s, users, alloc, query="q", compute=compute, units=True, prepaid=True)
    assert g.transactions - t0 == 1  # one write: reserve and charge together
    assert seen == [[Fraction(1, 2), 0, Fraction(1, 2)]]  # "poor" (budget 0.1) left out
    assert (ran.status, ran.value, ran.charged) == ("charged", "v", True)
    assert s.spent_exact(users).tolist() == [Fraction(1, 2), 0, Fraction(1, 2)]
    assert _audit_ops(s)[-2:] == ["reserve", "charge"]
    assert s.ledger.verify()["reservations"] == 0


def test_prepaid_users_stay_charged_when_compute_fails_or_reports_other_charges() -> None:
    s = _session()
    alloc = _units(s, 0.5, 2)

    def boom(r):
        raise RuntimeError("sampler failed")

    with pytest.raises(RuntimeError):
        run(s, ["ann", "bob"], alloc, query="q", compute=boom, units=True, prepaid=True)
    assert s.spent_exact(["ann", "bob"]).tolist() == [Fraction(1, 2)] * 2

    def less(r):
        return Charge(value="v", charges=np.zeros(2, dtype=np.int64), units=True)

    with pytest.raises(GpframeInternalError, match="prepaid"):
        run(s, ["ann", "bob"], alloc, query="q", compute=less, units=True, prepaid=True)
    assert s.spent_exact(["ann", "bob"]).tolist() == [Fraction(1)] * 2


def test_prepaid_check_refusal_writes_nothing() -> None:
    s = _session()
    before = s.ledger.snapshot()

    def check(r):
        raise LedgerError("needs every user. Nothing was charged.")

    def compute(r):  # pragma: no cover - never reached
        raise AssertionError

    with pytest.raises(LedgerError, match="every user"):
        run(s, ["ann", "poor"], _units(s, 0.5, 2), query="q", compute=compute, units=True,
            check=check, prepaid=True)  # fmt: skip
    assert s.ledger.snapshot() == before
