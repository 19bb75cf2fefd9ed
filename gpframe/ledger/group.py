"""Group commit: concurrent reserves and charges of one Ledger share one durable transaction.

DuckDB calls the SQL functions on several threads, and every Arrow batch reserves and charges
on its own (``docs/sql.md``). On a file ledger each write transaction ends with a synchronous
commit, a checkpoint and an anchor update, so one transaction per reserve and per charge keeps
the disk, not the cores, busy. :class:`GroupCommit` makes the writes that queue up while
another thread holds the Ledger's lock run together, in the order they arrived, in one write
transaction: each write still reads what the earlier ones wrote (admission counts their held
amounts, a charge sees its reservation), and each caller returns only after the shared
transaction has committed, so a charge is as durable as before when its caller goes on to
release values. Nothing waits for company: a write that finds the lock free runs alone.

If the shared transaction fails (one write refused, say), it is rolled back whole and every
write of the group runs again alone, in its own transaction, each with its own outcome: one
caller's error never reaches another.

A transaction may leave work for after the lock (its context manager's ``after``, a callable:
the Ledger's anchor update, an fsync of its own): every caller of the transaction calls it
once the lock is released, before returning (it runs once; the others wait for it). The next
transaction meanwhile takes the lock and commits, so two fsyncs overlap instead of queueing.

A writer that finds the lock free runs at once when it is the only thread writing lately. When
several threads have been writing (DuckDB's threads, each with a batch), the one that takes the
lock waits a little for the others' next writes before it opens the transaction: at most half
the time a transaction has been taking (capped at :data:`LINGER_MAX` seconds), and only while
fewer writes are queued than threads were writing. Without it, the batches that finish while a
transaction commits share the next one, and the writer that comes back a moment later commits
alone; with it they come back into one transaction per round (a file ledger's commit is the
fsyncs, which no thread can overlap). The wait changes when a write runs, never what it does.

Examples
--------
>>> import threading
>>> from contextlib import nullcontext
>>> g = GroupCommit(threading.RLock(), nullcontext)
>>> g.run(lambda: 6 * 7), g.transactions
(42, 1)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["LINGER_MAX", "GroupCommit"]

T = TypeVar("T")

#: longest wait (seconds) for the other writing threads' writes before a transaction opens
LINGER_MAX = 0.01
#: the last writes looked at to count the threads writing lately, and how recent they must be
_RECENT_WRITES, _RECENT_S = 16, 0.25


class _Slot:
    """One queued write: its body, and its outcome once a transaction ran it."""

    __slots__ = ("after", "done", "error", "fn", "thread", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.thread = threading.get_ident()
        self.done = False
        self.value: Any = None
        self.error: Exception | None = None
        #: what the committed transaction left to run after the lock (its ``after``), or None
        self.after: Callable[[], None] | None = None


class GroupCommit:
    """Run write bodies in shared transactions, holding ``lock`` (the Ledger's ``RLock``).

    ``transaction()`` opens one write transaction (``Ledger._write``): it commits durably when
    its block ends, and rolls back if the block raises. ``transactions`` and ``writes`` count
    the transactions committed or tried and the bodies run (for tests and benchmarks).
    ``linger_max`` bounds the wait for company (seconds; 0 never waits).
    """

    def __init__(
        self, lock: Any, transaction: Callable[[], contextlib.AbstractContextManager[Any]]
    ) -> None:
        self._lock = lock
        self._transaction = transaction
        self._queue: list[_Slot] = []
        self._qlock = threading.Lock()
        self._arrived = threading.Condition(self._qlock)
        #: (thread, time) of the last writes taken into a transaction
        self._recent: deque[tuple[int, float]] = deque(maxlen=_RECENT_WRITES)
        #: a moving average of a transaction's duration (seconds)
        self._txn_s = 0.0
        self.linger_max = LINGER_MAX
        self.transactions = 0
        self.writes = 0

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` inside a write transaction, possibly shared; return its value.

        Returns once the transaction that ran ``fn`` has committed (or raises ``fn``'s error,
        nothing of it written).
        """
        slot = _Slot(fn)
        with self._qlock:
            self._queue.append(slot)
            self._arrived.notify_all()
        try:
            with self._lock:  # held by a writer: this slot queues up behind it
                while not slot.done:
                    self._drain()
        except BaseException:
            with self._qlock:  # interrupted before a transaction took it: never run it
                if any(s is slot for s in self._queue):
                    self._queue = [s for s in self._queue if s is not slot]
            raise
        if slot.after is not None:  # the transaction's own follow-up (the ledger's anchor)
            slot.after()
        if slot.error is not None:
            raise slot.error
        return slot.value  # type: ignore[no-any-return]

    def _drain(self) -> None:
        """Run every queued write (the caller holds the lock): together, else one by one."""
        with self._qlock:
            self._linger()
            group, self._queue = self._queue, []
            now = time.monotonic()
            self._recent.extend((s.thread, now) for s in group)
        t0 = time.perf_counter()
        try:
            if len(group) > 1:
                try:
                    values, after = self._together(group)
                except Exception:  # rolled back whole: each runs alone below
                    pass
                else:
                    for s, v in zip(group, values, strict=True):
                        s.value, s.after, s.done = v, after, True
                    return
            for s in group:
                try:
                    self.transactions += 1
                    self.writes += 1
                    txn = self._transaction()
                    with txn:
                        s.value = s.fn()
                    s.after = getattr(txn, "after", None)
                except Exception as exc:  # handed to the slot's own caller
                    s.error = exc
                s.done = True
        finally:  # an interrupt (BaseException): whatever did not run goes back in the queue
            self._txn_s += (time.perf_counter() - t0 - self._txn_s) / 4
            left = [s for s in group if not s.done]
            if left:
                with self._qlock:
                    self._queue[:0] = left

    def _linger(self) -> None:
        """Wait (``_qlock`` held) for the writes of the threads that have been writing lately.

        Until as many writes are queued as threads wrote in the last :data:`_RECENT_S`
        seconds, for at most half a transaction's usual duration and ``linger_max``.
        """
        if self.linger_max <= 0 or not self._queue or not self._recent:
            return
        now = time.monotonic()
        writers = len({t for t, at in self._recent if now - at < _RECENT_S})
        if writers < 2 or len(self._queue) >= writers:
            return
        deadline = now + min(self.linger_max, self._txn_s / 2)
        while len(self._queue) < writers:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._arrived.wait(left)

    def _together(self, group: list[_Slot]) -> tuple[list[Any], Callable[[], None] | None]:
        self.transactions += 1
        self.writes += len(group)
        txn = self._transaction()
        with txn:
            values = [s.fn() for s in group]
        return values, getattr(txn, "after", None)
