"""Group commit: concurrent reserves and charges share a transaction, never a wrong outcome."""

import contextlib
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.ledger import Session
from gpframe.ledger.group import GroupCommit


def _group(log, wait_for=0):
    """A GroupCommit over a fake transaction that logs; the first one waits for a queue."""
    g = None

    @contextlib.contextmanager
    def txn():
        if wait_for and not log:  # hold the lock until the other writers have queued up
            deadline = time.monotonic() + 10
            while len(g._queue) < wait_for and time.monotonic() < deadline:
                time.sleep(0.001)
        log.append("begin")
        try:
            yield
        except BaseException:
            log.append("rollback")
            raise
        log.append("commit")

    g = GroupCommit(threading.RLock(), txn)
    return g


def _threads(g, fns):
    out = [None] * len(fns)

    def go(i):
        try:
            out[i] = ("ok", g.run(fns[i]))
        except Exception as exc:  # the test compares each caller's outcome
            out[i] = ("error", exc)

    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    ts[0].start()
    time.sleep(0.05)  # the first writer holds the lock and waits for the others to queue
    for t in ts[1:]:
        t.start()
    for t in ts:
        t.join(30)
    return out


def test_alone_a_write_runs_in_its_own_transaction():
    log = []
    g = _group(log)
    assert [g.run(lambda i=i: i) for i in range(3)] == [0, 1, 2]
    assert log == ["begin", "commit"] * 3
    assert (g.transactions, g.writes) == (3, 3)


def test_writes_queued_behind_a_writer_share_one_transaction():
    log = []
    g = _group(log, wait_for=5)
    out = _threads(g, [lambda i=i: i * 10 for i in range(6)])
    assert out == [("ok", i * 10) for i in range(6)]  # each caller its own value
    # the first ran alone (it held the lock while the others queued); the five others together
    assert (g.transactions, g.writes) == (2, 6)
    assert log == ["begin", "commit", "begin", "commit"]


def test_a_failing_write_is_rolled_back_alone_and_the_others_commit():
    log = []
    g = _group(log, wait_for=3)

    def bad():
        raise InvalidInputError("refused. Nothing was charged.")

    out = _threads(g, [lambda: "first", lambda: "a", bad, lambda: "b"])
    assert out[0] == ("ok", "first") and out[1] == ("ok", "a") and out[3] == ("ok", "b")
    assert out[2][0] == "error" and isinstance(out[2][1], InvalidInputError)
    # the shared attempt rolled back whole, then each of the three ran alone
    assert log[:4] == ["begin", "commit", "begin", "rollback"]
    assert sorted(log[4:]) == sorted(["begin", "commit"] * 2 + ["begin", "rollback"])
    assert (g.transactions, g.writes) == (5, 7)


def test_an_interrupted_writer_leaves_no_write_behind():
    log = []
    g = _group(log)

    def boom():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        g.run(boom)
    assert g._queue == [] and g.run(lambda: 1) == 1


def test_concurrent_reserves_and_charges_on_a_file_ledger_never_overspend(tmp_path):
    # 8 threads reserve and charge the same users at once on a file ledger whose writes are
    # slowed down, so they queue up and share transactions; each user can pay 10 of the 24
    rho = Fraction(1, 10**4)
    s = Session(tmp_path / "l.sqlite", budget=gp.CGP(rho=float(rho * 10)))
    store, real = s.ledger.store, s.ledger.store.write

    @contextlib.contextmanager
    def slow():
        with real():
            time.sleep(0.005)
            yield

    store.write = slow
    users = np.arange(50)
    admitted = []
    guard = threading.Lock()

    def worker(k):
        for _ in range(3):
            with s.reserve(users, float(rho), query=f"t{k}") as r:
                # half of the admitted users are charged their allocation, half nothing
                charge = np.where(r.admitted & (users % 2 == 0), float(rho), 0.0)
                r.charge(charge)
                with guard:
                    admitted.append(np.where(users % 2 == 0, r.admitted, False))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    g = s.ledger._group
    assert g.writes == 48 and g.transactions < g.writes  # some writes shared a transaction
    spent = s.spent_exact(users)
    # every committed charge counted once, never above the budget
    paid = np.sum(admitted, axis=0)
    assert spent.tolist() == [rho * int(c) for c in paid]
    assert (spent <= rho * 10).all()
    assert int(paid[0]) == 10  # even users: 24 asks, exactly the budget's 10 admitted
    report = s.ledger.verify()
    assert report["reservations"] == 0
    s.close()
    again = Session(tmp_path / "l.sqlite", create=False)  # the audit chain and anchor hold
    assert again.spent_exact(users).tolist() == spent.tolist()
    again.close()


def _rounds(linger_max):
    """Two writer threads, two rounds; in round two the second writes 1 ms after the first."""
    log = []

    @contextlib.contextmanager
    def txn():
        log.append("begin")
        time.sleep(0.08)  # a slow durable commit
        yield

    g = GroupCommit(threading.RLock(), txn)
    g.linger_max = linger_max
    start = threading.Barrier(2)

    def writer(delay):
        for _ in range(2):
            start.wait(10)
            time.sleep(delay)
            g.run(lambda: None)

    ts = [threading.Thread(target=writer, args=(d,)) for d in (0.0, 0.001)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    return g, log


def test_the_writer_that_opens_a_transaction_waits_for_the_threads_writing_lately():
    # round one: both threads wrote, so the first writer of round two waits for the other's
    # write (up to half a commit, at most linger_max) and the two share one transaction
    g, _ = _rounds(0.05)
    assert g.writes == 4 and g.transactions <= 3
    # round two without the wait: the first writer finds the lock free and commits alone
    g, _ = _rounds(0.0)
    assert g.writes == 4 and g.transactions == 4


def test_a_lone_writer_never_waits():
    log = []
    g = _group(log)
    g.linger_max = 10.0
    t = time.perf_counter()
    for _ in range(5):
        g.run(lambda: None)
    assert time.perf_counter() - t < 1.0 and g.transactions == 5
