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
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["GroupCommit"]

T = TypeVar("T")


class _Slot:
    """One queued write: its body, and its outcome once a transaction ran it."""

    __slots__ = ("done", "error", "fn", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = False
        self.value: Any = None
        self.error: Exception | None = None


class GroupCommit:
    """Run write bodies in shared transactions, holding ``lock`` (the Ledger's ``RLock``).

    ``transaction()`` opens one write transaction (``Ledger._write``): it commits durably when
    its block ends, and rolls back if the block raises. ``transactions`` and ``writes`` count
    the transactions committed or tried and the bodies run (for tests and benchmarks).
    """

    def __init__(
        self, lock: Any, transaction: Callable[[], contextlib.AbstractContextManager[Any]]
    ) -> None:
        self._lock = lock
        self._transaction = transaction
        self._queue: list[_Slot] = []
        self._qlock = threading.Lock()
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
        try:
            with self._lock:  # held by a writer: this slot queues up behind it
                while not slot.done:
                    self._drain()
        except BaseException:
            with self._qlock:  # interrupted before a transaction took it: never run it
                if any(s is slot for s in self._queue):
                    self._queue = [s for s in self._queue if s is not slot]
            raise
        if slot.error is not None:
            raise slot.error
        return slot.value  # type: ignore[no-any-return]

    def _drain(self) -> None:
        """Run every queued write (the caller holds the lock): together, else one by one."""
        with self._qlock:
            group, self._queue = self._queue, []
        try:
            if len(group) > 1:
                try:
                    values = self._together(group)
                except Exception:  # rolled back whole: each runs alone below
                    pass
                else:
                    for s, v in zip(group, values, strict=True):
                        s.value, s.done = v, True
                    return
            for s in group:
                try:
                    self.transactions += 1
                    self.writes += 1
                    with self._transaction():
                        s.value = s.fn()
                except Exception as exc:  # handed to the slot's own caller
                    s.error = exc
                s.done = True
        finally:  # an interrupt (BaseException): whatever did not run goes back in the queue
            left = [s for s in group if not s.done]
            if left:
                with self._qlock:
                    self._queue[:0] = left

    def _together(self, group: list[_Slot]) -> list[Any]:
        self.transactions += 1
        self.writes += len(group)
        with self._transaction():
            return [s.fn() for s in group]
