"""Per-user privacy filters over a :class:`~gpframe.ledger.store.Store`: ``Session``.

See ``docs/ledger.md`` (one component per user, the filter contract and its rules, admission
oracles); Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Thm. 5.1. One filter per user and notion
(``"metric"``: GP or CGP; ``"central"``: DP or zCDP); every query of a user charges it. A query
*reserves* each user's allocation (refused users cost nothing and output ⊥), the mechanism runs, and
the query *charges* the actual amounts (≤ allocation), durably, before it returns anything.

Amounts are integer ledger units of ``10**-exponent`` (:class:`~gpframe.accounting.amounts.
LedgerUnits`, the exponent chosen from the notion's default budget): charges and reservations
round up, budgets down, and the admission test ``spent + held + allocation <= budget`` is exact
integer arithmetic, so 0.1 + 0.1 + 0.1 fits a budget of 0.3 and the next float above 0.1 does not.

User ids are ``int`` (within int64) or ``str``; ``1`` and ``"1"`` are different users (the store
keeps each id with its type). Floats and bools are refused as ids.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
import uuid
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import LedgerUnits, nonnegative
from gpframe.accounting.budgets import Budget
from gpframe.accounting.filters import charge_for
from gpframe.errors import (
    ChargeConflictError,
    GpframeInternalError,
    GpframeWarning,
    InvalidInputError,
    LedgerCorruptError,
    LedgerError,
)
from gpframe.ledger.group import GroupCommit
from gpframe.ledger.integrity import (
    HMAC,
    SHA256,
    Anchor,
    Chain,
    anchor_path,
    compare_state,
    load_key,
    overrides_digest,
    uid_bytes,
    uid_records,
)
from gpframe.ledger.keys import KEY_MAX, KEY_MIN, _numpy_what, canonical, refusal
from gpframe.ledger.pg_store import PostgresStore, is_postgres_url, redact
from gpframe.ledger.store import (
    CHUNK,
    GENESIS,
    ChargeRow,
    ReservationRow,
    SqliteStore,
    Store,
    _check_path,
)

__all__ = ["Ledger", "Reservation", "Session"]

NOTIONS = ("metric", "central")
#: key of a reservation's ``params`` under which a query records the ids of the users it left
#: out for lack of budget (not in the reservation, charged nothing); read by report(query_id=)
EXCLUDED_KEY = "excluded_users"
MAX = LedgerUnits.MAX
_SHIFT = CHUNK.bit_length() - 1
#: user ids per block of the users hash (9 bytes each: about 590 KB, within L2)
_HASH_BLOCK = 1 << 16
_HOST = socket.gethostname()
# tokens of Sessions alive in this process: a reservation whose process is alive but whose
# Session is gone was abandoned (a crash inside the process) and may be settled.
_LIVE: set[str] = set()


_RESTORE = (
    "Restore the newest copy of the ledger (the file with its -wal, if any, or the database) "
    "from a backup, then run session.ledger.verify(). Nothing was charged."
)
_ROLLBACK = (
    "Restore the newest copy of the ledger (with its -wal, if any). If you put this copy back on "
    "purpose and accept that the budget spent after it is forgotten, move {where!r} away; the "
    "next write anchors this ledger. Nothing was charged."
)


# audit ops whose transaction does not move the anchor (one anchor update per query, not two):
# losing such a row to a rollback costs no privacy. A reservation lost with it was never
# charged, so its query can no longer commit, and it releases nothing unless it commits; a
# cancel lost with it leaves the budget held, which only refuses more.
_UNANCHORED = frozenset({"reserve", "cancel"})


#: the overrides digest of a notion without any override (every audit row's state names it)
_NO_OVERRIDES = overrides_digest(np.empty(0, dtype=np.int64))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _digest(notion: str, idx: np.ndarray, amount: np.ndarray) -> str:
    h = hashlib.sha256(notion.encode() + b"\x00")
    # the arrays' own buffers (the same bytes as .tobytes(), without copying 8 bytes a user)
    h.update(np.ascontiguousarray(idx, dtype="<i8"))
    h.update(b"\x00")
    h.update(np.ascontiguousarray(amount, dtype="<i8"))
    return h.hexdigest()


def _brepr(b: object) -> str:
    """``repr`` of a budget for messages; one too large for a float is shown by magnitude."""
    try:
        return repr(b)
    except OverflowError:
        amount = getattr(b, "amount", None)
        digits = len(str(int(amount))) if amount is not None else "?"
        return f"{type(b).__name__}({getattr(b, 'param', 'amount')}=<{digits}-digit number>)"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------
# input normalisation (all before any write)
# ---------------------------------------------------------------------------------------------
def _user_keys(users: object, name: str = "users") -> np.ndarray:
    """User ids as an int64 array or an object array of ``int``/``str``; unique."""
    try:
        ndim = None if users is None or isinstance(users, (str, bytes)) else np.ndim(users)
    except ValueError as exc:  # ragged nesting, e.g. [0, (1,)]: numpy cannot shape it
        raise InvalidInputError(
            f"{name} must be a flat list or array of int or str user ids; it holds nested "
            "sequences. Nothing was charged."
        ) from exc
    if ndim is None or ndim == 0:
        raise InvalidInputError(
            f"{name} must be a list or array of user ids, got {type(users).__name__}; wrap a "
            f"single id as [{users!r}]. Nothing was charged."
        )
    if isinstance(users, np.ndarray):
        arr = users
    elif isinstance(users, (pd.Series, pd.Index)):
        arr = users.to_numpy()
    else:
        arr = np.fromiter(users, dtype=object)  # keeps 1 and "1" apart (asarray would not)
    if arr.ndim != 1:
        raise InvalidInputError(
            f"{name} must be one-dimensional, got shape {arr.shape}. Nothing was charged."
        )
    kind = arr.dtype.kind
    if kind == "i":
        keys = arr.astype(np.int64, copy=False)
    elif kind == "u":
        # uint64 ids above 2**63 - 1 stay exact Python ints (gpframe.ledger.keys)
        keys = arr.astype(np.int64) if not arr.size or int(arr.max()) <= MAX else _big(arr)
    elif kind == "U":
        keys = arr.astype(object)
    elif kind == "O":
        inferred = pd.api.types.infer_dtype(arr, skipna=False)
        if inferred == "integer":
            try:
                keys = arr.astype(np.int64)
            except OverflowError:
                keys = _big(arr, name)
        elif inferred in ("string", "empty"):
            keys = arr
        elif inferred == "mixed-integer":
            out = np.empty(arr.size, dtype=object)
            for i, u in enumerate(arr.tolist()):
                if isinstance(u, bool) or not isinstance(u, (int, str)):
                    raise InvalidInputError(
                        f"{name}[{i}]={u!r} is a {type(u).__name__}; user ids must be int or "
                        "str. Nothing was charged."
                    )
                if isinstance(u, int) and not KEY_MIN <= u <= KEY_MAX:
                    raise InvalidInputError(
                        f"{name}[{i}]={u!r} is outside -2**63 .. 2**64 - 1; use a str id. "
                        "Nothing was charged."
                    )
                out[i] = int(u) if isinstance(u, int) else u  # np.int64 -> int
            keys = out
        else:  # UUIDs become their canonical text; floats, bools... the one refusal
            keys = np.array(canonical(arr, name), dtype=object)
    else:
        raise refusal(name, _numpy_what(arr.dtype) or str(arr.dtype))
    if keys.dtype.kind == "i" and (keys.size < 2 or bool(np.all(keys[1:] > keys[:-1]))):
        return keys  # ascending int ids (a factorized column, a range) are distinct: no hash table
    index = pd.Index(keys, dtype=keys.dtype if keys.dtype != object else object, copy=False)
    if not index.is_unique:
        dup = index[index.duplicated()].unique()[:5].tolist()
        raise InvalidInputError(
            f"{name} repeats user ids {dup}; pass each user once per reservation (one filter "
            "per user: aggregate the user's rows first). Nothing was charged."
        )
    return keys


def _big(arr: np.ndarray, name: str = "users") -> np.ndarray:
    """Integer ids some of which do not fit int64: an object array of exact Python ints."""
    out = np.empty(arr.size, dtype=object)
    out[:] = [int(u) for u in arr.tolist()]
    if out.size and not (KEY_MIN <= min(out) and max(out) <= KEY_MAX):
        raise InvalidInputError(
            f"{name} holds ints outside -2**63 .. 2**64 - 1; use str ids. Nothing was charged."
        )
    return out


def _exact_sum(a: np.ndarray) -> int:
    """Exact sum of an int64 array as a Python int, in numpy (no Python int per element).

    One plain sum when no partial sum can overflow (largest magnitude times the length below
    2**63), else two 32-bit halves (arithmetic shift, so negative values split exactly too):
    neither half's sum can overflow int64 below 2**31 elements.
    """
    a = np.asarray(a, dtype=np.int64)
    if a.size == 0:
        return 0
    top = max(-int(a.min()), int(a.max()))
    if top * a.size < 2**63:  # no partial sum can overflow: one plain pass
        return int(a.sum())
    step = (2**63 - 1) // top  # elements whose sum cannot overflow
    if step >= 4096:  # one pass of partial sums, each exact in int64 (no full-size temporaries)
        parts = np.add.reduceat(a, np.arange(0, a.size, step))
        return sum(int(v) for v in parts.tolist())
    return (int((a >> 32).sum()) << 32) + int((a & 0xFFFFFFFF).sum())


def _order_unique(idx: np.ndarray) -> np.ndarray | None:
    """``np.argsort(idx, kind="stable")`` of distinct indices >= 0 (None: already ascending).

    A reservation's users are distinct, so their ledger indices are too, and first-seen users
    get ascending ones: already sorted is the common case (one O(n) check). Otherwise, when the
    indices are dense enough, one scatter into a table as long as the largest index replaces
    the O(n log n) sort. Distinct values have one ascending order: the result is the same.
    """
    n = idx.size
    if n < 2 or bool(np.all(idx[1:] > idx[:-1])):
        return None
    top = int(idx.max()) + 1
    if top > 4 * n + CHUNK:
        return np.argsort(idx, kind="stable")
    slot = np.full(top, -1, dtype=np.intp)
    slot[idx] = np.arange(n, dtype=np.intp)
    order = slot[slot >= 0]
    # a repeated index would lose entries here: keep the sort's answer for it
    return order if order.size == n else np.argsort(idx, kind="stable")


def _chunks_of(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct chunk numbers of ``idx`` >= 0, chunk number -> its rank among them).

    A presence table over the chunks (one entry per CHUNK users) instead of ``np.unique``'s
    sort of every index.
    """
    c = idx >> _SHIFT
    top = int(c.max()) + 1 if c.size else 0
    seen = np.zeros(top, dtype=bool)
    seen[c] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen).astype(np.int64), rank


def _factorize_objects(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct objects of an object array, in order of first appearance.

    Grouped by identity (the addresses of the live objects, int64 work in numpy), not by
    hashing each element: hashing a ``Fraction`` costs a modular inverse, one per user. Equal
    values held by distinct objects land in distinct groups; each group is converted on its
    own, so the units per user are the same as converting every element.
    """
    ids = np.fromiter(map(id, arr.tolist()), dtype=np.uint64, count=arr.size)
    codes, uniq = pd.factorize(ids)  # codes in order of first appearance
    # the running maximum of the codes steps to j where code j first appears
    first = np.searchsorted(np.maximum.accumulate(codes), np.arange(uniq.size))
    return codes.astype(np.int64, copy=False), arr[first]


def _make_index(uids: list[Any] | np.ndarray) -> pd.Index:
    if isinstance(uids, np.ndarray):
        if uids.dtype.kind == "i":  # int64 keys (gpframe.ledger.keys): no Python int per user
            return pd.Index(uids.astype(np.int64, copy=False))
        uids = uids.tolist()
    if uids and pd.api.types.infer_dtype(uids, skipna=False) == "integer":
        try:
            return pd.Index(np.asarray(uids, dtype=np.int64))
        except OverflowError:  # uint64 ids above 2**63 - 1
            pass
    return pd.Index(np.fromiter(uids, dtype=object, count=len(uids)), dtype=object)


def _append(index: pd.Index, new: pd.Index) -> pd.Index:
    """``index`` then ``new``, never through a float or unsigned dtype that could merge ids."""
    if index.dtype == new.dtype or len(index) == 0:
        return index.append(new) if len(index) else new
    return pd.Index(np.concatenate([index.to_numpy(object), new.to_numpy(object)]), dtype=object)


@dataclass(eq=False)
class _Dense:
    """The spent of whole chunks as :meth:`Ledger._gather_kept` read them, for one run of users.

    ``spent`` covers chunks ``c0, c0 + 1, ...`` (CHUNK entries each, 0 where a chunk does not
    exist yet) and is owned by this object; ``budgets`` holds the override array (or None) of
    every chunk that exists. ``gen`` is the ledger's count of chunk writes when they were read:
    the data is current while no chunk was written since (all inside one write transaction).
    """

    notion: str
    gen: int
    c0: int
    lo: int  # first index of the run
    n: int  # length of the run
    spent: np.ndarray
    budgets: dict[int, np.ndarray | None]


class Ledger:
    """The filters of one store: admission, reservations, charges, audit, inspection.

    Reached as ``session.ledger``; its public methods are :meth:`snapshot`, :meth:`verify`
    and :meth:`settle_stale`. ``key`` keys the audit chain (HMAC-SHA-256); ``anchor`` is the
    path of the anchor file (see :mod:`gpframe.ledger.integrity`). Opening checks the file
    against the audit log's head (:meth:`check`).
    """

    def __init__(
        self,
        store: Store,
        budgets: dict[str, Budget | None],
        *,
        key: bytes | None = None,
        anchor: str | None = None,
    ) -> None:
        self.store = store
        self._lock = threading.RLock()
        #: concurrent reserves and charges share one write transaction (group commit)
        self._group = GroupCommit(self._lock, self._group_write)
        self._index = pd.Index(np.empty(0, dtype=np.int64))
        #: SHA-256 over every user id in index order (uid_bytes): the users' part of ``state``
        self._uhash = hashlib.sha256()
        self.kind: dict[str, str] = {}
        self.units: dict[str, LedgerUnits] = {}
        self.default: dict[str, int] = {}
        self.token = uuid.uuid4().hex
        #: units_for's (numerator, denominator) of an amount in ledger units, per distinct
        #: (notion, filter, exponent, kind, amount): pure functions of public parameters
        self._per_unit: dict[tuple[Any, ...], tuple[int, int]] = {}
        #: chunk writes made by this Ledger (a :class:`_Dense` read before the last one is stale)
        self._chunk_gen = 0
        self.chain = Chain(key)
        self.anchor = None if anchor is None else Anchor(anchor)
        self._begin()
        self._configure(budgets)

    def _begin(self) -> None:
        """Reset what one write transaction accumulates for its audit rows' ``state``."""
        self._d_spent: dict[str, int] = {}
        self._d_charges = 0
        self._d_overrides: set[str] = set()
        self._head: tuple[int, str] | None = None
        #: (hash, state) of the audit row this transaction wrote last: the next row of the
        #: same transaction links to it without reading it back (nobody else can write between)
        self._last_audit: tuple[str, dict[str, Any]] | None = None

    # -- configuration ------------------------------------------------------------------
    def _configure(self, budgets: dict[str, Budget | None]) -> None:
        readonly = bool(getattr(self.store, "readonly", False))
        with self._lock, self._read() if readonly else self._write():
            meta = self.store.meta()
            new: dict[str, str] = self._check_chain(meta)
            # the check on open, before this open writes anything (a budget row written over a
            # tampered file would record the tampered state as its own)
            self._check_head()
            fresh: list[str] = []
            for notion in NOTIONS:
                b = budgets.get(notion)
                if f"{notion}.kind" in meta:
                    kind = meta[f"{notion}.kind"]
                    units = LedgerUnits(int(meta[f"{notion}.exponent"]))
                    default = int(meta[f"{notion}.default"])
                    if b is not None and (b.kind != kind or units.down(b.amount) != default):
                        raise InvalidInputError(
                            f"this ledger's {notion} budget is {kind} "
                            f"{float(units.to_fraction(default)):.6g}, not {_brepr(b)}. Open it "
                            f"with the stored budget (pass None for it), or use "
                            "session.set_budget(users, ...) for overrides. Nothing was charged."
                        )
                elif b is not None and readonly:
                    raise LedgerError(
                        f"this ledger has no {notion} budget and was opened read-only, so "
                        f"{_brepr(b)} cannot be stored; open it with Session(path, ...) to add "
                        "one. Nothing was changed."
                    )
                elif b is not None:
                    kind, units = b.kind, LedgerUnits.for_budget(b.amount)
                    default = units.down(b.amount)
                    new |= {
                        f"{notion}.kind": kind,
                        f"{notion}.exponent": str(units.exponent),
                        f"{notion}.default": str(default),
                    }
                    fresh.append(notion)
                else:
                    continue
                self.kind[notion], self.units[notion] = kind, units
                self.default[notion] = default
            if new:
                self.store.set_meta(new)
            for notion in fresh:  # after the configuration: their ``state`` records it
                self._audit(
                    "budget",
                    {
                        "notion": notion, "kind": self.kind[notion], "users": None,
                        "default": self.default[notion],
                        "exponent": self.units[notion].exponent,
                    },
                )  # fmt: skip

    def _check_chain(self, meta: dict[str, str]) -> dict[str, str]:
        """Match the audit chain's kind with the key; return meta to store for a new ledger."""
        chain = meta.get("audit.chain")
        if chain is None and self.store.audit_head()[0] == 0:
            if getattr(self.store, "readonly", False):
                return {}
            new = {"audit.chain": self.chain.kind}
            if self.chain.key is not None:
                new["audit.key_id"] = self.chain.key_id()
            return new
        chain = chain or SHA256  # files written before keyed chains existed
        if chain == HMAC and self.chain.key is None:
            raise LedgerError(
                "this ledger's audit log is keyed (created with ledger_key=...); open it with "
                "the same key: Session(path, ledger_key=key bytes or key file). Nothing was "
                "charged."
            )
        if chain == SHA256 and self.chain.key is not None:
            raise LedgerCorruptError(
                "ledger_key was given but this ledger's audit log is not keyed. Either the "
                "ledger was created without a key (open it without ledger_key; a key can only "
                "be set when a ledger is created), or its log was rebuilt without the key "
                "(restore the file from a backup). Nothing was charged."
            )
        if chain not in (SHA256, HMAC):
            raise LedgerCorruptError(
                f"this ledger's audit chain kind {chain!r} is unknown; restore the file from "
                "a backup. Nothing was charged."
            )
        if chain == HMAC and meta.get("audit.key_id") != self.chain.key_id():
            raise InvalidInputError(
                "ledger_key is not the key this ledger was created with; pass that key. "
                "Nothing was charged."
            )
        return {}

    def _notion(self, notion: object) -> str:
        if notion not in NOTIONS:
            raise InvalidInputError(
                f"notion={notion!r} is unknown; use 'metric' (GP/CGP) or 'central' (DP/zCDP). "
                "Nothing was charged."
            )
        if notion not in self.kind:
            arg = "budget=gp.CGP(rho=...)" if notion == "metric" else "central=gp.DP(epsilon=...)"
            raise InvalidInputError(
                f"this session has no {notion} budget; open it with Session(..., {arg}). "
                "Nothing was charged."
            )
        return str(notion)

    # -- transactions and users -----------------------------------------------------------
    def _write(self) -> Any:
        return _Txn(self, self.store.write())

    def _group_write(self) -> Any:
        """Open a write transaction of the group commit, its anchor update left for after the lock.

        The transaction's :attr:`_Txn.after` updates the anchor; :class:`GroupCommit` runs it
        once the Ledger's lock is released, and every caller of the transaction returns only
        after it has run. So the next transaction's commit (an fsync of the ``-wal``) no
        longer waits behind this one's anchor fsync, while no caller goes on to release values
        before the anchor records its charge.
        """
        return _Txn(self, self.store.write(), anchor_after=True)

    def _read(self) -> Any:
        return _Txn(self, self.store.read())

    def _append_users(self, uids: list[Any] | np.ndarray) -> None:
        if isinstance(uids, np.ndarray) and uids.dtype.kind != "i":
            uids = uids.tolist()  # object keys (str, ids above int64) as Python objects
        ix = _make_index(uids)
        self._index = _append(self._index, ix)
        if ix.dtype.kind == "i":  # hash the records' buffer: uid_bytes without its copy
            ids = ix.to_numpy()
            for i in range(0, ids.size, _HASH_BLOCK):  # blocks that stay in cache, no 9n temp
                self._uhash.update(uid_records(ids[i : i + _HASH_BLOCK]))
        else:
            self._uhash.update(uid_bytes(uids))

    def _refresh(self) -> None:
        new = self.store.users_from(len(self._index))
        if new:
            self._append_users(new)

    def _lookup(self, keys: np.ndarray) -> np.ndarray:
        """Dense indices of ``keys``; -1 for users the ledger has never seen."""
        self._refresh()
        if len(self._index) == 0 or keys.size == 0:
            return np.full(keys.size, -1, dtype=np.int64)
        if keys.dtype.kind == "i" and self._index.dtype.kind == "i":
            # the same users in the order the ledger first saw them (a cohort asked again):
            # their indices are one run, found by two vectorised passes instead of hashing
            # every key (the ledger's ids are distinct, so the run is the only answer)
            ids = self._index.to_numpy()
            # the ledger's first user first (a cohort asked again from the start): no scan
            at = np.zeros(1, np.intp) if ids[0] == keys[0] else np.flatnonzero(ids == keys[0])
            if at.size == 1:
                p = int(at[0])
                if p + keys.size <= ids.size and np.array_equal(ids[p : p + keys.size], keys):
                    return np.arange(p, p + keys.size, dtype=np.int64)
        return self._index.get_indexer(keys).astype(np.int64)

    def _ensure(self, keys: np.ndarray) -> tuple[np.ndarray, int]:
        """Dense indices of ``keys``, adding unseen users (they get the default budget).

        Also returns the first index this call added (the ledger's size before it): indices at
        or above it belong to users created here, who have spent nothing and have no override.
        """
        self._refresh()
        start = len(self._index)
        if start:  # else a fresh ledger: every user is new, nothing to look up
            idx = self._lookup(keys)
            new = idx < 0
            if not new.all():
                if new.any():
                    fresh = keys[new]
                    self.store.add_users(start, fresh)
                    idx[new] = start + np.arange(fresh.size, dtype=np.int64)
                    self._append_users(fresh)
                return idx, start
        # all first seen (a fresh ledger, a new cohort): no masked copies
        self.store.add_users(start, keys)  # an array: one set-based insert
        idx = np.arange(start, start + keys.size, dtype=np.int64)
        self._append_users(keys)
        return idx, start

    def _add_charge(self, row: ChargeRow) -> None:
        """Store a charge and count it into the next audit row's ``state``."""
        self.store.add_charge(row)
        total = _exact_sum(row.amount)
        self._d_spent[row.notion] = self._d_spent.get(row.notion, 0) + total
        self._d_charges += 1

    def _audit(self, op: str, content: dict[str, Any]) -> None:
        created = _now()
        if self._last_audit is not None:  # a second row of this transaction (a prepaid batch)
            prev, before = self._last_audit
        else:
            tail = self.store.audit_tail()
            prev = tail[0][2] if tail else GENESIS
            before = json.loads(tail[0][1]).get("state") if tail else None
        state = self._next_state(before)
        text = json.dumps({"op": op, "time": created, **content, "state": state}, sort_keys=True)
        h = self.chain.link(prev, text)
        seq = self.store.add_audit(created, op, text, h)
        self._last_audit = (h, state)  # the state as its JSON text reads back (str/int values)
        if op not in _UNANCHORED:
            self._head = (seq, h)

    # -- the ledger's state summary (see gpframe.ledger.integrity) ------------------------------
    def _scan(self, notion: str) -> tuple[int, str]:
        """(total spent in units, overrides digest) of a notion, from its chunks."""
        chunks = self.store.all_chunks(notion)
        total = 0
        for s, _ in chunks.values():
            # two 32-bit halves: a sum of int64 spent values may not fit int64
            total += (int((s >> 32).sum()) << 32) + int((s & 0xFFFFFFFF).sum())
        top = max(chunks, default=-1) + 1
        dense = np.full(top * CHUNK, -1, dtype=np.int64)
        for c, (_, b) in chunks.items():
            if b is not None:
                dense[c * CHUNK : (c + 1) * CHUNK] = b
        return total, overrides_digest(dense)

    def _state_now(self) -> dict[str, Any]:
        """Compute the ledger's state summary from the file (reads every chunk and the meta).

        The budgets are the stored ones (what a later open would use), for every notion the
        file configures, including those another process added after this one opened.
        """
        self._refresh()
        meta = self.store.meta()
        budgets = {
            n: f"{meta[f'{n}.kind']}:{meta.get(f'{n}.exponent')}:{meta.get(f'{n}.default')}"
            for n in NOTIONS
            if f"{n}.kind" in meta
        }
        spent, over = {}, {}
        for notion in budgets:
            total, digest = self._scan(notion)
            spent[notion], over[notion] = str(total), digest
        return self._with_users(
            {"charges": self.store.n_charges(), "spent": spent, "overrides": over,
             "budgets": budgets}
        )  # fmt: skip

    def _check_overrides(self, notion: str) -> None:
        """Before a write records the overrides afresh, check them against the last record.

        Without it, overrides changed in the file while this Session is open would be written
        into the log as if gpframe had set them.
        """
        tail = self.store.audit_tail()
        state = json.loads(tail[0][1]).get("state") if tail else None
        if state is None or notion not in state.get("overrides", {}):
            return
        if state["overrides"][notion] != self._scan(notion)[1]:
            raise LedgerCorruptError(
                f"the ledger file does not match its audit log: the per-user {notion} budget "
                f"overrides differ from the audit log's. It was changed outside gpframe. "
                f"{_RESTORE}"
            )

    def _with_users(self, state: dict[str, Any]) -> dict[str, Any]:
        state["users"] = len(self._index)
        state["users_sha"] = self._uhash.hexdigest()
        return state

    def _next_state(self, before: dict[str, Any] | None) -> dict[str, Any]:
        """Return the state after this audit row: the last row's plus this transaction's.

        The budgets are this Session's (as read when it opened, so that a budget changed in
        the file meanwhile is not written into the log as if gpframe had set it), and the
        last row's for notions another process added since.
        """
        if before is None:  # the first row, or a file from before rows carried a state
            state = self._state_now()
        else:
            self._refresh()
            budgets = dict(before["budgets"])
            spent = {n: int(v) for n, v in before["spent"].items()}
            over = dict(before["overrides"])
            for n, d in self._d_spent.items():
                spent[n] = spent.get(n, 0) + d
            for n in self._d_overrides:
                over[n] = self._scan(n)[1]
            state = self._with_users(
                {"charges": before["charges"] + self._d_charges, "budgets": budgets,
                 "spent": {n: str(v) for n, v in spent.items()}, "overrides": over}
            )  # fmt: skip
        none = _NO_OVERRIDES
        for n in self.kind:
            state["budgets"][n] = f"{self.kind[n]}:{self.units[n].exponent}:{self.default[n]}"
            state["spent"].setdefault(n, "0")
            state["overrides"].setdefault(n, none)
        self._d_spent, self._d_charges, self._d_overrides = {}, 0, set()
        return state

    # -- per-user state ---------------------------------------------------------------------
    def _gather(self, notion: str, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(spent, budget) in ledger units for each index (unseen users: 0 and default)."""
        spent, budget, _ = self._gather_kept(notion, idx)
        if budget is None:
            budget = np.full(idx.size, self.default[notion], np.int64)
        return spent, budget

    def _gather_kept(
        self, notion: str, idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None, _Dense | None]:
        """:meth:`_gather`, plus what a charge of the same users in this write can reuse.

        ``budget`` is None when every user has the default budget (no array of it). The third
        value is the dense spent of the chunks read (:class:`_Dense`) when the indices are one
        ascending run of known users (a cohort asked again): the prepaid charge of the same
        users adds to it in place (:meth:`_add_kept`) instead of reading the chunks again.
        """
        default = self.default[notion]
        known = idx >= 0
        every = bool(known.all())  # the usual case: no masked copies or scatters
        if idx.size == 0 or (not every and not known.any()):
            return np.zeros(idx.size, dtype=np.int64), None, None
        k = idx if every else idx[known]
        lo, hi = int(k[0]), int(k[-1])
        # the indices are one ascending run (users asked again in the order first seen): the
        # chunks are a range (no per-index pass to find them) and the entries one slice
        run = hi - lo == k.size - 1 and (k.size < 2 or bool((k[1:] > k[:-1]).all()))
        if run:
            chunk_ids, rank = np.arange(lo >> _SHIFT, (hi >> _SHIFT) + 1, dtype=np.int64), None
        else:
            chunk_ids, rank = _chunks_of(k)
        data = self.store.read_chunks(notion, chunk_ids.tolist())
        if not data:  # users seen, never charged nor given a budget: 0 and the default
            return np.zeros(idx.size, dtype=np.int64), None, None
        dense_s = np.zeros(chunk_ids.size * CHUNK, dtype=np.int64)
        dense_b: np.ndarray | None = None  # only when some chunk holds overrides
        for j, c in enumerate(chunk_ids.tolist()):
            if c in data:
                s, b = data[c]
                dense_s[j * CHUNK : (j + 1) * CHUNK] = s
                if b is not None:
                    if dense_b is None:
                        dense_b = np.full(chunk_ids.size * CHUNK, -1, dtype=np.int64)
                    dense_b[j * CHUNK : (j + 1) * CHUNK] = b
        c0 = int(chunk_ids[0])
        pos: Any
        if run:  # one slice of the dense chunks, no gather
            pos = slice(lo - c0 * CHUNK, lo - c0 * CHUNK + k.size)
        elif int(chunk_ids[-1]) - c0 + 1 == chunk_ids.size:  # consecutive chunks: c - c0
            pos = k - c0 * CHUNK if c0 else k
        else:
            pos = rank[k >> _SHIFT] * CHUNK + (k & (CHUNK - 1))
        s_k = dense_s[pos]
        if dense_b is None:
            b_k = None
        else:
            b_k = dense_b[pos]
            b_k = np.where(b_k < 0, default, b_k)
        if every:
            kept = None
            if run:  # s_k is a view of dense_s: read before a charge adds to it in place
                budgets = {c: b for c, (_, b) in data.items()}
                kept = _Dense(notion, self._chunk_gen, c0, lo, k.size, dense_s, budgets)
            return s_k, b_k, kept
        spent = np.zeros(idx.size, dtype=np.int64)
        spent[known] = s_k
        budget = None
        if b_k is not None:
            budget = np.full(idx.size, default, dtype=np.int64)
            budget[known] = b_k
        return spent, budget, None

    def _update(
        self,
        notion: str,
        idx: np.ndarray,
        add: np.ndarray | None,
        budget: int | None,
        ordered: bool = False,
    ) -> None:
        """Add ``add`` units to the users' spent, or set their budget override.

        ``ordered=True``: the caller has put ``idx`` in ascending order already.
        """
        # indices of one charge or override are distinct
        order = None if ordered else _order_unique(idx)
        if order is not None:
            idx = idx[order]
            if add is not None:
                add = add[order]
        if add is not None and budget is None and int(idx[-1]) - int(idx[0]) == idx.size - 1:
            self._add_range(notion, int(idx[0]), add)  # consecutive indices (first-seen users)
            return
        chunk_ids = _chunks_of(idx)[0]
        data = self.store.read_chunks(notion, chunk_ids.tolist())
        out: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        bounds = np.searchsorted(idx >> _SHIFT, np.append(chunk_ids, chunk_ids[-1] + 1))
        for j, c in enumerate(chunk_ids.tolist()):
            s, b = data.get(c, (np.zeros(CHUNK, dtype=np.int64), None))
            s, b = s.copy(), None if b is None else b.copy()
            mask = slice(int(bounds[j]), int(bounds[j + 1]))
            off = idx[mask] & (CHUNK - 1)
            if add is not None:
                a = add[mask]
                if np.any(s[off] > MAX - a):
                    raise GpframeInternalError("a user's spent would overflow int64.")
                s[off] += a  # users are unique within one charge: no repeated offsets
            if budget is not None:
                if b is None:
                    b = np.full(CHUNK, -1, dtype=np.int64)
                b[off] = budget
            out[c] = (s, b)
        self._chunk_gen += 1
        self.store.write_chunks(notion, out)

    def _add_range(self, notion: str, lo: int, add: np.ndarray) -> None:
        """:meth:`_update` of ``add`` units for the consecutive indices ``lo .. lo + add.size - 1``.

        What a batch of first-seen users is (and any charge of every user of a ledger): the
        amounts are laid into one zeroed run of whole chunks by a slice, and only the chunks
        that exist already are read and added, instead of scattering user by user.
        """
        c0, c1 = lo >> _SHIFT, (lo + add.size - 1) >> _SHIFT
        dense = np.zeros((c1 - c0 + 1) * CHUNK, dtype=np.int64)
        at = lo - c0 * CHUNK
        dense[at : at + add.size] = add
        chunk_ids = list(range(c0, c1 + 1))
        data = self.store.read_chunks(notion, chunk_ids)
        out: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for c in chunk_ids:
            s = dense[(c - c0) * CHUNK : (c - c0 + 1) * CHUNK]
            b = None
            if c in data:
                old, b = data[c]
                if np.any(old > MAX - s):  # s >= 0: only a chunk with spent can overflow
                    raise GpframeInternalError("a user's spent would overflow int64.")
                s += old
            out[c] = (s, b)
        self._chunk_gen += 1
        self.store.write_chunks(notion, out)

    def _add_kept(self, kept: _Dense, add: np.ndarray) -> None:
        """:meth:`_add_range` of ``add`` over ``kept``'s run, on the spent it read (no re-read).

        The same chunks, with the same values, as :meth:`_add_range`: every chunk of the run
        is written, an existing one with its override array. ``kept.spent`` is updated in
        place (it is owned, and stale after this write).
        """
        at = kept.lo - kept.c0 * CHUNK
        run = kept.spent[at : at + kept.n]
        step = 1 << 16  # blocks that stay in cache: no full-size temporaries for the check
        for i in range(0, kept.n, step):
            # add >= 0: only a user with spent can overflow
            if np.any(run[i : i + step] > MAX - add[i : i + step]):
                raise GpframeInternalError("a user's spent would overflow int64.")
        run += add
        out: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        c1 = (kept.lo + kept.n - 1) >> _SHIFT
        for j, c in enumerate(range(kept.c0, c1 + 1)):
            out[c] = (kept.spent[j * CHUNK : (j + 1) * CHUNK], kept.budgets.get(c))
        self._chunk_gen += 1
        self.store.write_chunks(kept.notion, out)

    def _held(self, notion: str, idx: np.ndarray) -> np.ndarray:
        """Units held by open reservations for each index."""
        held = self._held_or_none(notion, idx)
        return np.zeros(idx.size, dtype=np.int64) if held is None else held

    def _held_or_none(self, notion: str, idx: np.ndarray) -> np.ndarray | None:
        """:meth:`_held`, None when no open reservation holds anything (no array of zeros)."""
        rows = self.store.reservations(notion)
        if not rows or idx.size == 0:
            return None
        held = np.zeros(idx.size, dtype=np.int64)
        order = np.argsort(idx, kind="stable")
        sidx = idx[order]
        for r in rows:
            p = np.minimum(np.searchsorted(sidx, r.idx), sidx.size - 1)
            hit = sidx[p] == r.idx
            held[order[p[hit]]] += r.alloc[hit]
        return held

    # -- amounts ----------------------------------------------------------------------------
    def _to_units(
        self, notion: str, values: object, n: int, kind: str | None, name: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Convert amounts to ledger units, rounded up, and flag those too large to store.

        Amounts are in the mechanism's (``kind``) or the filter's units; a flagged amount can
        never be admitted.
        """
        lu, fkind = self.units[notion], self.kind[notion]

        def conv(v: object) -> int:
            f = nonnegative(v, name)
            if kind is not None:
                f = charge_for(fkind, kind, f)
            return lu.up(f)

        if kind is not None:
            conv(0)  # a mechanism the filter can never admit fails here, before any write
        if isinstance(values, (pd.Series, pd.Index)):
            values = values.to_numpy()
        try:
            scalar = np.ndim(values) == 0
            arr = None if scalar else np.asarray(values)
        except ValueError as exc:  # ragged nesting, e.g. [nan, [0.1]]: numpy cannot shape it
            raise InvalidInputError(
                f"{name} must be a scalar or a flat list of amounts, one per user; it holds "
                "nested sequences. Nothing was charged."
            ) from exc
        if scalar:
            u = conv(values)
            return (np.full(n, min(u, MAX), dtype=np.int64), np.full(n, u > MAX))
        if arr.ndim != 1 or arr.size != n:
            raise InvalidInputError(
                f"{name} has shape {arr.shape} but there are {n} users; pass one amount per "
                "user or a scalar. Nothing was charged."
            )
        if arr.dtype.kind in "fc":
            bad = ~np.isfinite(arr)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidInputError(
                    f"{name}[{i}]={arr[i]!r} is not finite ({int(bad.sum())} such values); "
                    "pass finite amounts >= 0. Nothing was charged."
                )
        if arr.dtype.kind in "fiu":
            neg = arr < 0
            if neg.any():
                i = int(np.flatnonzero(neg)[0])
                raise InvalidInputError(
                    f"{name}[{i}]={arr[i]!r} is negative ({int(neg.sum())} such values); "
                    "amounts must be >= 0. Nothing was charged."
                )
        elif arr.dtype.kind == "b":
            raise InvalidInputError(f"{name} is boolean; pass amounts. Nothing was charged.")
        if arr.dtype.kind == "O":
            codes, uniques = _factorize_objects(arr)
        else:
            codes, uniques = pd.factorize(arr, use_na_sentinel=False)
        conv_u = [conv(v) for v in np.asarray(uniques, dtype=object).tolist()]
        big_u = np.array([u > MAX for u in conv_u], dtype=bool)
        units_u = np.array([min(u, MAX) for u in conv_u], dtype=np.int64)
        return units_u[codes], big_u[codes]

    def _units_array(self, values: object, n: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Validate amounts given directly as ledger units (the ``units=True`` fast path)."""
        try:
            arr = np.full(n, values) if np.ndim(values) == 0 else np.asarray(values)
        except ValueError as exc:  # ragged nesting: numpy cannot shape it
            raise InvalidInputError(
                f"{name} must be a scalar or a flat array of int64 ledger units, one per "
                "user. Nothing was charged."
            ) from exc
        if arr.ndim != 1 or arr.size != n:
            raise InvalidInputError(
                f"{name} has shape {arr.shape} but there are {n} users; pass one amount per "
                "user or a scalar. Nothing was charged."
            )
        if arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and arr.dtype.itemsize == 8):
            raise InvalidInputError(
                f"{name} has dtype {arr.dtype}; with units=True pass int64 ledger units (see "
                "Ledger.units_for). Nothing was charged."
            )
        arr = arr.astype(np.int64, copy=False)
        if arr.size and int(arr.min()) < 0:
            raise InvalidInputError(
                f"{name} holds negative ledger units; amounts must be >= 0. Nothing was charged."
            )
        return arr, np.zeros(n, dtype=bool)

    def units_for(
        self,
        notion: str,
        amount: object,
        counts: object = None,
        kind: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ledger units of ``counts[i] × amount``, rounded up, computed exactly and vectorised.

        For callers whose users all pay one distinct amount per point: the amount is converted
        to the filter's units once (``charge_for`` when ``kind`` is the mechanism's notion),
        then ``ceil(n · amount · 10**exponent)`` is evaluated in int64 (Python ints when it
        could overflow). This is exactly ``LedgerUnits.up(charge_for(...) * n)``, the units
        that :meth:`reserve` would compute from the ``Fraction`` ``n × amount``.

        Parameters
        ----------
        notion : {"metric", "central"}
        amount : number
            The per-point amount, finite and >= 0, in the ``kind`` units (None: filter units).
        counts : array of int, optional
            Multiplicities (>= 0); default a single 1.
        kind : str, optional
            The mechanism's guarantee kind, as for :meth:`Session.reserve`.

        Returns
        -------
        units : ndarray of int64
            Capped at ``2**63 - 1``.
        too_big : ndarray of bool
            Where the exact value does not fit int64 (never admitted).

        Examples
        --------
        >>> import gpframe as gp
        >>> s = gp.Session(budget=gp.CGP(rho=1.0))
        >>> s.ledger.units_for("metric", 0.1, np.array([0, 1, 3]), kind="gp")[0].tolist()
        [0, 5000000000000, 15000000000000]
        >>> units, _ = s.ledger.units_for("metric", 1e-4, np.array([2, 5]))
        >>> with s.reserve([1, 2], units, query="doc", units=True) as r:
        ...     _ = r.charge(units, units=True)
        >>> s.spent_exact().tolist()
        [Fraction(1, 5000), Fraction(1, 2000)]
        """
        notion = self._notion(notion)
        lu, fkind = self.units[notion], self.kind[notion]
        # a SQL query converts its one amount in every Arrow batch: once per distinct amount
        key = (notion, fkind, lu.exponent, kind, type(amount), amount)
        pq = self._per_unit.get(key) if type(amount) in (Fraction, float, int) else None
        if pq is None:
            f = nonnegative(amount, "amount")
            if kind is not None:
                f = charge_for(fkind, kind, f)
            v = f * lu.scale
            pq = v.numerator, v.denominator
            if type(amount) in (Fraction, float, int) and len(self._per_unit) < 1024:
                self._per_unit[key] = pq
        p, q = pq
        # read only: the caller's int64 counts as they are, not a copy
        n = np.asarray([1] if counts is None else counts, dtype=np.int64).reshape(-1)
        if n.size and int(n.min()) < 0:
            raise InvalidInputError("counts must be >= 0. Nothing was charged.")
        top = int(n.max()) if n.size else 0
        if top * p + q < 2**62:  # int64 cannot overflow: ceil(n p / q) for n, p >= 0
            if n.size > 1 and int(n.min()) == top:  # one count (one point a user): one value
                return np.full(n.size, (top * p + (q - 1)) // q, np.int64), np.zeros(n.size, bool)
            return (n * p + (q - 1)) // q, np.zeros(n.size, dtype=bool)
        # rare: huge amounts; one exact Python-int conversion per distinct count
        uniq, inv = np.unique(n, return_inverse=True)
        exact_u = [-((-int(k) * p) // q) for k in uniq.tolist()]
        big = np.array([u > MAX for u in exact_u], dtype=bool)
        units = np.array([min(u, MAX) for u in exact_u], dtype=np.int64)
        return units[inv], big[inv]

    # -- reserve / charge / cancel ------------------------------------------------------------
    def reserve(
        self,
        users: object,
        allocations: object,
        *,
        notion: str,
        kind: str | None,
        query: str,
        params: dict[str, Any] | None,
        charge_id: str | None,
        units: bool = False,
        paid: bool = False,
        check: Callable[[Reservation], Any] | None = None,
    ) -> Reservation:
        """Check-and-reserve for all users in one transaction; see :meth:`Session.reserve`.

        The transaction may be shared with concurrent reserves and charges (group commit,
        :mod:`gpframe.ledger.group`). ``paid=True`` (the driver's prepaid runs,
        :func:`gpframe.ledger.run.run`): the same transaction also commits the charge of every
        admitted user's full allocation, after ``check(reservation)`` (which draws no noise;
        raising rolls the whole transaction back, nothing written). One durable write instead
        of two; the reservation comes back charged.
        """
        if paid and charge_id is not None:
            raise GpframeInternalError("a prepaid reservation takes no charge_id.")
        notion = self._notion(notion)
        keys = _user_keys(users)
        if units:
            if kind is not None:
                charge_for(self.kind[notion], kind, 0)  # refuse what the filter never admits
            alloc, too_big = self._units_array(allocations, keys.size, "allocations")
        else:
            alloc, too_big = self._to_units(notion, allocations, keys.size, kind, "allocations")
        if not isinstance(query, str) or not query:
            raise InvalidInputError(
                f"query={query!r} must be a non-empty name. Nothing was charged."
            )
        if charge_id is not None and (not isinstance(charge_id, str) or not charge_id):
            raise InvalidInputError(
                f"charge_id={charge_id!r} must be a non-empty str. Nothing was charged."
            )
        try:
            ptext = json.dumps(params or {}, sort_keys=True, default=str)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"params cannot be recorded: {exc}. Nothing was charged."
            ) from exc
        rid = uuid.uuid4().hex
        cid = charge_id or rid
        kind_s = kind or self.kind[notion]

        def write() -> Reservation:  # inside one (possibly shared) write transaction
            prior = self.store.charge(cid)
            if prior is not None:
                return self._replay(prior, keys, alloc, too_big, notion, kind_s, rid)
            if charge_id is not None and any(r.charge_id == cid for r in self.store.reservations()):
                # two open reservations under one id could both draw noise and only one of
                # them would be charged (the other's commit would look like a replay)
                raise ChargeConflictError(
                    f"charge_id={cid!r} belongs to a reservation that is still open; it is "
                    "charged when that block ends (or in full when its process is gone). Retry "
                    "after it is committed, or use a fresh charge_id. Nothing was charged."
                )
            idx, start = self._ensure(keys)
            kept: _Dense | None = None  # the chunks read, when the prepaid charge can reuse them
            if keys.size and int(idx.min()) >= start:
                # every user was created just now: nothing spent, no override, nothing held
                # (their chunk entries cannot exist yet), so no chunk or reservation is read
                # and each has the default budget left
                admitted = alloc <= self.default[notion]
            else:
                spent, budget, kept = self._gather_kept(notion, idx)
                held = self._held_or_none(notion, idx)
                # budget and spent both in [0, MAX]: no overflow (None: the default budget)
                rem = (self.default[notion] if budget is None else budget) - spent
                if held is None:  # nothing held: alloc >= 0, so a rem < 0 refuses as -1 would
                    admitted = alloc <= rem
                else:
                    rem = np.where(rem < 0, -1, rem) - held  # held <= MAX (filter invariant)
                    admitted = alloc <= rem
                del spent, rem  # spent may be a view of kept's: the charge adds to it in place
            if too_big.any():
                admitted &= ~too_big
            granted = np.where(admitted, alloc, 0)  # (alloc is the closure's: not rebound)
            if admitted.all():  # the common case: the arrays as they are, no masked copies
                a_idx, a_alloc = idx, granted
            else:
                a_idx, a_alloc = idx[admitted], alloc[admitted]
            created = _now()
            self.store.add_query(rid, query, notion, kind_s, ptext, created)
            if not paid:  # a prepaid one is charged below, in this write: never stored open
                self.store.add_reservation(
                    ReservationRow(
                        rid, notion, rid, cid, kind_s, created, os.getpid(), _HOST, self.token,
                        a_idx, a_alloc,
                    )
                )  # fmt: skip
            held_digest = _digest(notion, a_idx, a_alloc)
            self._audit(
                "reserve",
                {
                    "reservation": rid, "query": query, "notion": notion, "kind": kind_s,
                    "charge_id": cid, "n": int(keys.size), "admitted": int(a_idx.size),
                    "held": str(_exact_sum(a_alloc)), "digest": held_digest,
                },
            )  # fmt: skip
            r = Reservation(self, rid, notion, kind_s, rid, cid, keys, idx, admitted, granted)
            r._held_digest = held_digest
            if paid:
                if check is not None:
                    check(r)  # no noise yet: raising rolls the whole transaction back
                self._commit_write(r, r.allocation_units, "charge", fresh=True, kept=kept)()
                r.state = "charged"
            return r

        return self._group.run(write)

    def admission(
        self,
        users: object,
        allocations: object,
        *,
        notion: str,
        kind: str | None,
        query: str,
        units: bool = False,
        held: dict[Any, int] | None = None,
    ) -> Reservation:
        """Compute what :meth:`reserve` would admit now, without writing anything.

        The same validation and the same exact admission test (``spent + held + allocation
        <= budget``) as :meth:`reserve`, in a read transaction: no user, query, reservation or
        audit row is added. ``held`` adds units per user key (what earlier planned
        reservations of the same preview would hold). Returns a *planned* reservation
        (``state == "preview"``): it cannot be charged, cancelling or leaving it does nothing.
        Used by the driver's dry run (:func:`gpframe.ledger.run.run`, ``docs/ledger.md``).
        """
        notion = self._notion(notion)
        keys = _user_keys(users)
        if units:
            if kind is not None:
                charge_for(self.kind[notion], kind, 0)  # refuse what the filter never admits
            alloc, too_big = self._units_array(allocations, keys.size, "allocations")
        else:
            alloc, too_big = self._to_units(notion, allocations, keys.size, kind, "allocations")
        if not isinstance(query, str) or not query:
            raise InvalidInputError(
                f"query={query!r} must be a non-empty name. Nothing was charged."
            )
        kind_s = kind or self.kind[notion]
        with self._lock, self._read():
            idx = self._lookup(keys)  # unseen users stay -1: default budget, nothing spent
            spent, budget = self._gather(notion, idx)
            hold = self._held(notion, idx)
        if held:
            hold = hold + np.fromiter((held.get(k, 0) for k in keys.tolist()), dtype=np.int64,
                                      count=keys.size)  # fmt: skip
        rem = budget - spent
        rem = np.where(rem < 0, -1, rem) - hold
        admitted = (alloc <= rem) & ~too_big
        res = Reservation(self, "", notion, kind_s, "", "", keys, idx, admitted,
                          np.where(admitted, alloc, 0))  # fmt: skip
        res.state = "preview"
        res.remaining_units = np.maximum(rem, 0)
        res.requested_units = np.where(too_big, MAX, alloc)
        return res

    def _replay(
        self,
        prior: ChargeRow,
        keys: np.ndarray,
        alloc: np.ndarray,
        too_big: np.ndarray,
        notion: str,
        kind_s: str,
        rid: str,
    ) -> Reservation:
        """Build the reservation of a committed ``charge_id``: one that admits nobody.

        The request must repeat the committed one (its charged users, with the allocations
        they were reserved with), else :class:`ChargeConflictError`; nothing is written either
        way, so a replay can neither draw noise nor debit anything.
        """
        cid = prior.charge_id
        if prior.notion != notion:
            raise ChargeConflictError(
                f"charge_id={cid!r} was committed on the {prior.notion} filter, not {notion}. "
                "Use a fresh charge_id. Nothing more was charged."
            )
        idx = self._lookup(keys)
        mine = np.isin(idx, prior.idx) & (idx >= 0)
        order = np.argsort(idx[mine], kind="stable")
        if int(mine.sum()) != prior.idx.size:
            raise ChargeConflictError(
                f"charge_id={cid!r} was committed for {prior.idx.size} users, and "
                f"{prior.idx.size - int(mine.sum())} of them are missing from this request; a "
                "replay must repeat the committed request (the same users and allocations). "
                "Use a fresh charge_id for a new query. Nothing more was charged."
            )
        new = np.flatnonzero(idx < 0)
        if new.size:
            u = keys[new[0] : new[0] + 1].tolist()[0]
            raise ChargeConflictError(
                f"charge_id={cid!r} was committed before user {u!r} was ever seen "
                f"({new.size} such users); a replay must repeat the committed request. Use a "
                "fresh charge_id for a new query. Nothing more was charged."
            )
        mine_alloc = alloc[mine][order]
        if prior.alloc is not None:
            differ = (mine_alloc != prior.alloc) | too_big[mine][order]
        else:  # charged before allocations were recorded: the allocation must cover the charge
            differ = (mine_alloc < prior.amount) | too_big[mine][order]
        if differ.any():
            i = int(np.flatnonzero(mine)[order][int(np.flatnonzero(differ)[0])])
            u = keys[i : i + 1].tolist()[0]
            raise ChargeConflictError(
                f"charge_id={cid!r} was committed with other allocations (user {u!r} and "
                f"{int(differ.sum()) - 1} more differ); a replay must repeat the committed "
                "request. Use a fresh charge_id for a new query. Nothing more was charged."
            )
        charged = np.zeros(keys.size, dtype=np.int64)
        charged[np.flatnonzero(mine)[order]] = prior.amount
        return Reservation(
            self, rid, notion, kind_s, prior.query_id, cid, keys, idx,
            np.zeros(keys.size, dtype=bool), np.zeros(keys.size, dtype=np.int64),
            replay=True, prior=(mine, charged, prior.digest),
        )  # fmt: skip

    def _commit(self, res: Reservation, used: np.ndarray, op: str) -> bool:
        """Commit the admitted users' ``used`` units; False if this reservation already did."""
        return self._group.run(self._commit_write(res, used, op))

    def _commit_write(
        self,
        res: Reservation,
        used: np.ndarray,
        op: str,
        fresh: bool = False,
        kept: _Dense | None = None,
    ) -> Callable[[], bool]:
        """Return the write of :meth:`_commit`, to run inside a (possibly shared) transaction.

        ``fresh``: the prepaid charge of a reservation made earlier in the same write, under a
        fresh id (no charge can exist under it) and never stored as open (nothing to delete):
        the same rows and audit entries as reserving then charging, without writing and
        deleting the reservation's row (its users' indices and allocations) in between.
        ``kept``: the chunks that reservation read (:meth:`_gather_kept`); while no chunk was
        written since, the charge adds to them instead of reading them again.
        """
        every = bool(res.admitted.all())  # then the arrays as they are, not masked copies
        a_idx = res._idx if every else res._idx[res.admitted]
        order = _order_unique(a_idx)  # a reservation's users are distinct
        c_idx, c_amt = a_idx, used if every else used[res.admitted]
        c_alloc = res.allocation_units if every else res.allocation_units[res.admitted]
        if order is not None:  # None: already in index order (the common case), no copies
            c_idx, c_amt, c_alloc = c_idx[order], c_amt[order], c_alloc[order]
        if (
            order is None
            and res._held_digest
            and (c_amt is c_alloc or np.array_equal(c_amt, c_alloc))
        ):
            # charged exactly what was reserved, in the order reserve() hashed (the admitted
            # users in key order, already ascending; allocation_units is read-only): the same
            # bytes, so reserve()'s digest is this one, without hashing 16 bytes a user again
            digest = res._held_digest
        else:
            digest = _digest(res.notion, c_idx, c_amt)

        def write() -> bool:
            prior = None if fresh else self.store.charge(res.charge_id)
            if prior is not None:
                # only this reservation's own earlier commit may stand in for this one: any
                # other reservation held budget and may have drawn noise, so it must pay
                if (
                    prior.digest != digest
                    or prior.notion != res.notion
                    or prior.reservation_id != res.id
                ):
                    raise ChargeConflictError(
                        f"charge id {res.charge_id!r} was already committed with other users or "
                        "amounts; a replay must repeat the same charge. Nothing more was charged "
                        "by this call."
                    )
                if self.store.has_reservation(res.id):
                    self.store.delete_reservation(res.id)
                    self._audit("release", {"reservation": res.id, "charge_id": res.charge_id})
                return False
            if not fresh and not self.store.has_reservation(res.id):
                raise LedgerError(
                    f"reservation {res.id} was already settled or cancelled (by close(), "
                    "settle_stale() or settle_host()); its amounts are accounted for. Nothing "
                    "more was charged."
                )
            nz = c_amt > 0
            if (
                kept is not None
                and nz.size
                and nz.all()
                and kept.gen == self._chunk_gen
                and kept.notion == res.notion
                and c_idx.size == kept.n
                and c_idx.size
                and int(c_idx[0]) == kept.lo
                and int(c_idx[-1]) == kept.lo + kept.n - 1
            ):
                # the run of users the reservation read, still current (c_idx is ascending and
                # distinct, so its ends fix it): the chunks _update would write, without
                # reading them again
                self._add_kept(kept, c_amt)
            elif nz.size and nz.all():  # c_idx is in index order (see above)
                self._update(res.notion, c_idx, c_amt, None, ordered=True)
            elif nz.any():
                self._update(res.notion, c_idx[nz], c_amt[nz], None, ordered=True)
            created = _now()
            # the reservation goes first, in the same transaction: its freed pages take the
            # charge row's blobs (no fresh pages for 16 bytes a user, a file that grows less)
            if not fresh:
                self.store.delete_reservation(res.id)
            self._add_charge(
                ChargeRow(
                    res.charge_id, res.id, res.query_id, res.notion, res.kind, created,
                    c_idx, c_amt, digest, c_alloc,
                )
            )  # fmt: skip
            self._audit(
                op,
                {
                    "reservation": res.id, "charge_id": res.charge_id, "notion": res.notion,
                    "n": int(c_idx.size), "total": str(_exact_sum(c_amt)), "digest": digest,
                },
            )  # fmt: skip
            return True

        return write

    def _cancel(self, res: Reservation) -> None:
        with self._lock, self._write():
            if not self.store.has_reservation(res.id):
                raise LedgerError(
                    f"reservation {res.id} was already settled; it cannot be cancelled."
                )
            self.store.delete_reservation(res.id)
            self._audit("cancel", {"reservation": res.id, "charge_id": res.charge_id})

    def _settle_rows(self, rows: list[ReservationRow], op: str) -> int:
        """Settle stored reservations at their full allocation (inside a write transaction)."""
        for r in rows:
            order = np.argsort(r.idx, kind="stable")
            c_idx, c_amt = r.idx[order], r.alloc[order]
            digest = _digest(r.notion, c_idx, c_amt)
            cid = r.charge_id
            prior = self.store.charge(cid)
            if prior is not None and prior.reservation_id == r.id and prior.digest == digest:
                self.store.delete_reservation(r.id)
                self._audit("release", {"reservation": r.id, "charge_id": cid})
                continue
            if prior is not None:
                cid = f"{cid}/{r.id}"
            nz = c_amt > 0
            if nz.any():
                self._update(r.notion, c_idx[nz], c_amt[nz], None)
            self._add_charge(
                ChargeRow(
                    cid, r.id, r.query_id, r.notion, r.kind, _now(), c_idx, c_amt, digest, c_amt
                )
            )
            self.store.delete_reservation(r.id)
            self._audit(
                op,
                {
                    "reservation": r.id, "charge_id": cid, "notion": r.notion,
                    "n": int(c_idx.size), "total": str(_exact_sum(c_amt)), "digest": digest,
                },
            )  # fmt: skip
        return len(rows)

    def settle_stale(self) -> int:
        """Settle abandoned reservations at their full allocation; return how many.

        Abandoned: left open by a dead process on this host, or by a Session of this process
        that was dropped without ``close()``.

        A crash after noise was drawn must not lose the charge (``docs/ledger.md``):
        abandoned reservations are charged in full, never released. Reservations of other
        hosts, or of live processes, are left alone (they keep holding their amounts).
        """
        me = os.getpid()
        with self._lock, self._write():
            self._refresh()
            stale = [
                r
                for r in self.store.reservations()
                if r.host == _HOST
                and (
                    (r.pid == me and r.token not in _LIVE)
                    or (r.pid != me and not _pid_alive(r.pid))
                )
            ]
            return self._settle_rows(stale, "settle")

    def settle_host(self, host: str, *, older_than: timedelta | None = None) -> int:
        """Settle, at their full allocation, the open reservations of a host that is gone.

        A Session settles the abandoned reservations of its own host only (it cannot tell
        whether a process on another machine is alive), so those of a host that never comes
        back keep holding their amounts. Once you know the host is gone, this charges them in
        full, exactly as :meth:`settle_stale` would have: noise may have been drawn before the
        crash, so the amounts are charged, never released (``docs/ledger.md``, "Several
        hosts, one budget"). It can never overspend: the amounts were admitted when reserved.

        If a process of that host is in fact alive, it finds its reservation charged in full:
        its ``charge()`` of any smaller amounts raises
        :class:`~gpframe.errors.ChargeConflictError`, so it releases nothing it has not paid
        for. ``older_than`` limits the settlement to reservations at least that old, to leave
        running queries alone. Returns how many reservations were settled.

        Raises
        ------
        InvalidInputError
            ``host`` is not a non-empty str, or ``older_than`` is not a non-negative
            ``datetime.timedelta``. Nothing is settled.
        LedgerError
            The session is read-only.

        Examples
        --------
        >>> import gpframe as gp
        >>> s = gp.Session(budget=gp.GP(eps=1.0))
        >>> s.ledger.settle_host("worker-7.example.org")  # nothing open there
        0
        """
        if not isinstance(host, str) or not host:
            raise InvalidInputError(
                f"host={host!r} must be a host name, as in the 'host' column of "
                "session.ledger.open_reservations(). Nothing was settled."
            )
        if older_than is not None and (
            not isinstance(older_than, timedelta) or older_than < timedelta(0)
        ):
            raise InvalidInputError(
                f"older_than={older_than!r} must be a non-negative datetime.timedelta, e.g. "
                "timedelta(hours=1). Nothing was settled."
            )
        cutoff = None if older_than is None else datetime.now(timezone.utc) - older_than
        with self._lock, self._write():
            self._refresh()
            rows = [
                r
                for r in self.store.reservations()
                if r.host == host
                and (cutoff is None or datetime.fromisoformat(r.created) <= cutoff)
            ]
            return self._settle_rows(rows, "settle")

    def open_reservations(self) -> pd.DataFrame:
        """Return the reservations not yet charged or cancelled, one row each (oldest first).

        Columns: reservation, query_id, notion, kind, created (UTC), host, pid, users (how
        many are admitted) and held (their summed allocation, in the filter's units, a float).
        """
        with self._lock, self._read():
            self._refresh()
            rows = sorted(self.store.reservations(), key=lambda r: r.created)
        scale = {n: 10.0**u.exponent for n, u in self.units.items()}
        return pd.DataFrame(
            {
                "reservation": [r.id for r in rows],
                "query_id": [r.query_id for r in rows],
                "notion": [r.notion for r in rows],
                "kind": [r.kind for r in rows],
                "created": pd.to_datetime([r.created for r in rows], utc=True),
                "host": [r.host for r in rows],
                "pid": np.array([r.pid for r in rows], dtype=np.int64),
                "users": np.array([r.idx.size for r in rows], dtype=np.int64),
                "held": np.array(
                    [_exact_sum(r.alloc) / scale[r.notion] for r in rows], dtype=float
                ),
            }
        )

    def _settle_own(self) -> None:
        with self._lock, self._write():
            rows = [r for r in self.store.reservations() if r.token == self.token]
            self._settle_rows(rows, "settle")

    # -- inspection ---------------------------------------------------------------------------
    def _state(self, notion: str, users: object) -> tuple[pd.Index, dict[str, np.ndarray]]:
        with self._lock, self._read():
            self._refresh()
            if users is None:
                keys = self._index.to_numpy()
                idx = np.arange(keys.size, dtype=np.int64)
            else:
                keys = _user_keys(users)
                idx = self._lookup(keys)
            spent, budget = self._gather(notion, idx)
            held = self._held(notion, idx)
        return pd.Index(keys, name="user"), {"spent": spent, "budget": budget, "held": held}

    def snapshot(self) -> str:
        """Return a digest of the whole ledger: equal snapshots mean nothing changed.

        Reads every table (use it in tests and audits, not on a hot path).
        """
        with self._lock, self._read():
            return self.store.digest()

    def verify(self) -> dict[str, int]:
        """Check the ledger's integrity.

        Checks the store's own integrity (SQLite's pages; a PostgreSQL ledger's tables), the
        audit hash chain, every charge's digest and audit row, and
        every user's spent recomputed from the charges.

        Returns counts (users, charges, audit rows, open reservations) when all is well.

        Raises
        ------
        LedgerCorruptError
            On the first mismatch, saying what differs.
        """
        with self._lock, self._read():
            self._refresh()
            ok = self.store.integrity()
            if ok != "ok":
                raise LedgerCorruptError(f"the store's integrity check failed: {ok}.")
            prev, n_audit, audited = GENESIS, 0, {}
            for seq, _created, op, content, h in self.store.audit():
                if seq != n_audit + 1 or self.chain.link(prev, content) != h:
                    keyed = " (keyed: the key holder did not write it)" if self.chain.key else ""
                    raise LedgerCorruptError(
                        f"the audit hash chain breaks at row {seq} ({op}): the log was "
                        f"altered{keyed}."
                    )
                c = json.loads(content)
                if op in ("charge", "settle"):
                    audited[c["charge_id"]] = c["digest"]
                prev, n_audit = h, n_audit + 1
            n = len(self._index)
            n_charges = 0
            for notion in self.kind:
                dense = np.zeros(n, dtype=object)  # Python ints: the recomputation cannot wrap
                for c in self.store.charges(notion):
                    n_charges += 1
                    if _digest(notion, c.idx, c.amount) != c.digest:
                        raise LedgerCorruptError(
                            f"charge {c.charge_id!r} does not match its digest."
                        )
                    if audited.get(c.charge_id) != c.digest:
                        raise LedgerCorruptError(
                            f"charge {c.charge_id!r} has no matching audit row."
                        )
                    dense[c.idx] += c.amount.astype(object)
                spent, _ = self._gather(notion, np.arange(n, dtype=np.int64))
                bad = np.flatnonzero(spent.astype(object) != dense)
                if bad.size:
                    i = int(bad[0])
                    raise LedgerCorruptError(
                        f"user {self._index[i]!r}: stored {notion} spent {spent[i]} units but "
                        f"the charges add up to {dense[i]} ({bad.size} users differ)."
                    )
            if n_charges != len(audited):
                raise LedgerCorruptError(
                    f"the audit log names {len(audited)} charges but the ledger holds {n_charges}."
                )
            open_res = len(self.store.reservations())
            self._check_head(reread_users=True)
        return {"users": n, "charges": n_charges, "audit_rows": n_audit, "reservations": open_res}

    def check(self) -> None:
        """Run the cheap integrity check of a Session's open (full checks: :meth:`verify`).

        Checks the audit log's last link (with the key, if the chain is keyed), compares the
        file with the ``state`` the last audit row recorded (number of users and a hash of
        their ids, number of charges, each notion's total spent over all users, the stored
        budgets and a hash of the per-user overrides), and checks that the ledger still holds
        the anchored audit row. Reads the users and the spent/budget chunks, not the charges.

        Raises
        ------
        LedgerCorruptError
            Saying what differs and what to do.
        """
        with self._lock, self._read():
            self._check_head()

    def _check_head(self, reread_users: bool = False) -> None:
        """Check the last audit link, the recorded state and the anchor.

        ``reread_users`` hashes the user table afresh instead of the ids this Session loaded
        (a rename after they were loaded is then found too).
        """
        tail = self.store.audit_tail()
        if tail:
            seq, content, h = tail[0]
            prev = tail[1][2] if len(tail) > 1 else GENESIS
            if (tail[1][0] if len(tail) > 1 else 0) != seq - 1 or self.chain.link(
                prev, content
            ) != h:
                raise LedgerCorruptError(
                    f"the ledger's last audit row ({seq}) does not follow from the one before "
                    f"it{' under this ledger_key' if self.chain.key else ''}: the audit log was "
                    f"altered. {_RESTORE}"
                )
            try:
                state = json.loads(content).get("state")
                if state is not None:
                    now = self._state_now()
                    if reread_users:
                        now["users_sha"] = hashlib.sha256(
                            uid_bytes(self.store.users_from(0))
                        ).hexdigest()
                    compare_state(state, now, _RESTORE)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise LedgerCorruptError(
                    f"the ledger's last audit row ({seq}) is malformed ({exc!r}): the audit log "
                    f"was altered. {_RESTORE}"
                ) from exc
        self._check_anchor(tail[0][0] if tail else 0)

    def _check_anchor(self, head: int) -> None:
        if self.anchor is None:
            return
        a = self.anchor.read()
        if a is None:
            return
        seq, where = a["seq"], self.anchor.path
        if seq > head:
            raise LedgerCorruptError(
                f"this ledger is older than its anchor: its audit log ends at row {head}, but "
                f"the anchor {where!r} records row {seq}. An older copy of the file was put back "
                "(or its last rows were deleted), so charges made since are missing and users "
                f"could spend their budget twice. {_ROLLBACK.format(where=where)}"
            )
        if self.store.audit_hash(seq) != a["hash"]:
            raise LedgerCorruptError(
                f"this ledger's audit row {seq} differs from the one its anchor {where!r} "
                "records: the audit log was rewritten (its hash chain recomputed), or the file "
                f"was replaced by another ledger. {_ROLLBACK.format(where=where)}"
            )


class _Txn:
    """A store transaction that restores the user-index cache if it rolls back.

    Once it has committed, it advances the anchor to the audit row it wrote.
    """

    def __init__(self, ledger: Ledger, inner: Any, anchor_after: bool = False) -> None:
        self.ledger, self.inner = ledger, inner
        #: whether the anchor update waits for :attr:`after` (run by the caller, see
        #: :meth:`Ledger._group_write`) instead of running when the transaction commits
        self.anchor_after = anchor_after
        #: the committed transaction's anchor update, when ``anchor_after`` (else None)
        self.after: _AnchorUpdate | None = None

    def __enter__(self) -> None:
        led = self.ledger
        self.n0, self.h0 = len(led._index), led._uhash.copy()
        led._begin()
        self.inner.__enter__()

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        led = self.ledger
        try:
            out = bool(self.inner.__exit__(et, ev, tb))
        except BaseException:
            led._index, led._uhash = led._index[: self.n0], self.h0
            led._begin()
            raise
        if et is not None:
            led._index, led._uhash = led._index[: self.n0], self.h0
            led._begin()
            return out
        head, led._head = led._head, None
        if head is not None and led.anchor is not None:
            update = _AnchorUpdate(led.anchor, head, led.chain.kind)
            if self.anchor_after:
                self.after = update
            else:
                update()
        return out


class _AnchorUpdate:
    """Advance an anchor to a committed transaction's head, once, whichever thread asks first.

    The callers of one group transaction each call it after the Ledger's lock is released;
    the first runs the update, the others wait for it (its lock) and find it done.
    :meth:`gpframe.ledger.integrity.Anchor.advance` keeps the anchor moving forwards only,
    so two transactions' updates may finish in either order.
    """

    __slots__ = ("anchor", "chain", "done", "head", "lock")

    def __init__(self, anchor: Anchor, head: tuple[int, str], chain: str) -> None:
        self.anchor, self.head, self.chain = anchor, head, chain
        self.lock = threading.Lock()
        self.done = False

    def __call__(self) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            try:
                self.anchor.advance(self.head[0], self.head[1], self.chain)
            except OSError as exc:
                # the commit stands; an anchor left behind is still a valid (weaker) anchor
                warnings.warn(
                    f"the ledger committed, but its anchor {self.anchor.path!r} could not be "
                    f"updated ({exc}); rollbacks past its last update go unnoticed until a "
                    "write succeeds. Check the anchor's directory.",
                    GpframeWarning,
                    stacklevel=4,
                )


class Reservation:
    """Allocations held for one query; a context manager (see :meth:`Session.reserve`).

    Attributes
    ----------
    admitted : numpy.ndarray of bool
        Aligned with the users passed to ``reserve``; refused users output ⊥ and cost nothing.
        All False for a replay.
    allocation_units : numpy.ndarray of int64
        Reserved ledger units per user (0 for refused users, and for every user of a replay).
    query_id, charge_id, notion, kind : str
        For a replay, ``query_id`` is the committed charge's query id.
    replay : bool
        True when ``charge_id`` had already been committed: the reservation holds nothing and
        admits nobody, so no noise may be drawn under it (see :meth:`Session.reserve`).
    prior_admitted : numpy.ndarray of bool or None
        For a replay, the users who were admitted by the committed charge (None otherwise).
    prior_charge_units : numpy.ndarray of int64 or None
        For a replay, the committed charge per user in ledger units (None otherwise).
    """

    def __init__(
        self,
        ledger: Ledger,
        rid: str,
        notion: str,
        kind: str,
        query_id: str,
        charge_id: str,
        keys: np.ndarray,
        idx: np.ndarray,
        admitted: np.ndarray,
        alloc: np.ndarray,
        *,
        replay: bool = False,
        prior: tuple[np.ndarray, np.ndarray, str] | None = None,
    ) -> None:
        self._ledger, self.id, self.notion, self.kind = ledger, rid, notion, kind
        self.query_id, self.charge_id = query_id, charge_id
        self.users = keys
        self._idx = idx
        self.admitted = admitted
        self.admitted.setflags(write=False)
        self.allocation_units = alloc
        self.allocation_units.setflags(write=False)
        #: reserve()'s digest of the admitted users' indices and allocations ("" if none)
        self._held_digest = ""
        self.replay = replay
        self.prior_admitted: np.ndarray | None = None
        self.prior_charge_units: np.ndarray | None = None
        self._prior_digest = ""
        if prior is not None:
            self.prior_admitted, self.prior_charge_units, self._prior_digest = prior
            self.prior_admitted.setflags(write=False)
            self.prior_charge_units.setflags(write=False)
        #: for a planned (dry-run) reservation: each user's budget left before it, in units
        self.remaining_units: np.ndarray | None = None
        #: for a planned reservation: each user's allocation as asked (refused users too)
        self.requested_units: np.ndarray | None = None
        self.state = "open"

    @property
    def n_admitted(self) -> int:
        """Number of admitted users."""
        return int(self.admitted.sum())

    @property
    def n_refused(self) -> int:
        """Number of users left out (⊥) because their budget could not cover the allocation."""
        return int(self.admitted.size - self.admitted.sum())

    @property
    def prior_query_id(self) -> str | None:
        """For a replay, the query id of the committed charge (None otherwise)."""
        return self.query_id if self.replay else None

    @property
    def prior_charges(self) -> np.ndarray | None:
        """For a replay, the committed charge per user in the filter's units, as ``Fraction``."""
        if self.prior_charge_units is None:
            return None
        lu = self._ledger.units[self.notion]
        return np.array(
            [lu.to_fraction(u) for u in self.prior_charge_units.tolist()], dtype=object
        ).reshape(-1)

    @property
    def allocations(self) -> np.ndarray:
        """Reserved amounts in the filter's units, as exact ``Fraction`` objects (0 if refused)."""
        lu = self._ledger.units[self.notion]
        return np.array(
            [lu.to_fraction(u) for u in self.allocation_units.tolist()], dtype=object
        ).reshape(-1)

    def charge(self, actual: object, *, units: bool = False) -> bool:
        """Charge the actual amounts (in the reservation's ``kind`` units, like the allocations).

        ``actual`` is a scalar or one amount per user, ``0 <= actual <= allocation``; entries of
        refused users are ignored. The charge is committed durably before this returns and
        then returns True; charging the same reservation again with the same amounts returns
        False, with other amounts it raises :class:`~gpframe.errors.ChargeConflictError`.

        On a replay (see :meth:`Session.reserve`) ``actual`` is compared with the committed
        charge (entries of users it did not admit are ignored): the same amounts debit nothing
        and return False; other amounts raise :class:`~gpframe.errors.ChargeConflictError`.
        With ``units=True``, ``actual`` is int64 ledger units of the filter (no conversion).
        """
        if self.state == "cancelled":
            raise LedgerError(
                f"reservation {self.id} was cancelled; reserve again. Nothing was charged."
            )
        if self.state == "preview":
            raise GpframeInternalError("a planned (dry-run) reservation cannot be charged.")
        led = self._ledger
        if units:
            amounts, big = led._units_array(actual, self.admitted.size, "actual")
        else:
            kind = None if self.kind == led.kind[self.notion] else self.kind
            amounts, big = led._to_units(self.notion, actual, self.admitted.size, kind, "actual")
        if self.replay:
            # charges are never rewritten, so the digest kept from reserve() is still current
            mine = self.prior_admitted
            order = np.argsort(self._idx[mine], kind="stable")
            digest = _digest(self.notion, self._idx[mine][order], amounts[mine][order])
            if big[mine].any() or digest != self._prior_digest:
                raise ChargeConflictError(
                    f"charge_id={self.charge_id!r} was committed with other amounts; a replay "
                    "may only repeat the committed charge (see prior_charges). Nothing more was "
                    "charged."
                )
            self.state = "charged"
            return False
        over = self.admitted & (big | (amounts > self.allocation_units))
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise InvalidInputError(
                f"actual amount for user {self.users[i]!r} exceeds its allocation "
                f"({int(over.sum())} users); a query may charge at most what it reserved. The "
                "reservation is still open: charge valid amounts, or leave the block to be "
                "charged the full allocation. Nothing was charged."
            )
        if not self.admitted.all():  # refused users' entries are ignored: make them 0
            amounts = np.where(self.admitted, amounts, 0)
        done = led._commit(self, amounts, "charge")
        self.state = "charged"
        return done

    def cancel(self) -> None:
        """Release the reservation: only before any noise was drawn (nothing is charged)."""
        if self.state == "charged":
            raise LedgerError(f"reservation {self.id} was already charged; it cannot be cancelled.")
        if self.state == "preview":  # planned only: nothing was written
            return
        if self.state == "open" and not self.replay:
            self._ledger._cancel(self)
        self.state = "cancelled"

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> bool:
        if self.state == "open" and not self.replay:
            # left without a charge, or by an exception: noise may have been drawn, so the
            # admitted users pay their full allocation (docs/ledger.md)
            try:
                self._ledger._commit(self, self.allocation_units, "settle")
            except ChargeConflictError:
                with self._ledger._lock, self._ledger._write():
                    row = self._ledger.store.reservation(self.id)
                    self._ledger._settle_rows([row] if row else [], "settle")
            self.state = "charged"
        return False

    def __repr__(self) -> str:
        return (
            f"Reservation(query_id={self.query_id!r}, notion={self.notion!r}, "
            f"admitted={self.n_admitted}, refused={self.n_refused}, state={self.state!r})"
        )


def _refuse_missing_anchored(path: str, where: str) -> None:
    """Refuse to start a fresh ledger where an anchor records one that existed."""
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    a = Anchor(where).read()
    if a is not None:
        raise LedgerCorruptError(
            f"the ledger file {path!r} is missing or empty, but its anchor {where!r} records a "
            f"ledger with {a['seq']} audit rows: it was deleted or moved, and a fresh ledger "
            "would give every user a fresh budget. Restore the file (with its -wal, if any). To "
            "really start over, move the anchor away too. Nothing was charged."
        )


def _open_postgres(
    url: str, anchor: object, create: bool, timeout: float, readonly: bool
) -> tuple[Store, str | None]:
    """Open a PostgreSQL ledger and resolve its anchor (a file only when ``anchor=`` names one).

    A server ledger has no file to put ``<path>.anchor`` next to, so ``anchor=None`` means no
    anchor; each host may keep its own (``docs/ledger.md``, "PostgreSQL ledger"). When the
    anchor records a ledger, the tables are never created afresh: a dropped ledger is refused.
    """
    where = (
        None if anchor is None or anchor is False or anchor is True else anchor_path("-", anchor)
    )
    recorded = where is not None and Anchor(where).read() is not None
    try:
        store = PostgresStore(url, create=create and not recorded, timeout=timeout,
                              readonly=readonly)  # fmt: skip
    except LedgerCorruptError as exc:
        if recorded and "holds no gpframe ledger" in str(exc):
            raise LedgerCorruptError(
                f"the database {redact(url)!r} holds no gpframe ledger, but its anchor {where!r} "
                "records one: it was dropped or the URL points elsewhere, and a fresh ledger "
                "would give every user a fresh budget. Restore the database. To really start "
                "over, move the anchor away too. Nothing was charged."
            ) from exc
        raise
    return store, where


class Session:
    """Per-user privacy budgets and their ledger (``docs/ledger.md``).

    Parameters
    ----------
    path : str or os.PathLike or None
        ``None`` keeps the ledger in memory; a path is an SQLite file (WAL, FULL sync) shared
        safely by threads and processes; a ``postgresql://`` URL is a ledger on a PostgreSQL
        server, shared by processes on several hosts (``docs/ledger.md``, "PostgreSQL ledger";
        needs ``pip install 'gpframe[postgres]'``).
    budget : gp.GP or gp.CGP or None
        Default per-user *metric* budget (ε per metre, or ρ per m²).
    central : gp.DP or gp.zCDP or None
        Default per-user *central* budget.
    create : bool
        With ``False``, a missing file raises :class:`~gpframe.errors.LedgerCorruptError`.
    timeout : float
        Seconds to wait for another process's write lock; finite and > 0.
    readonly : bool
        Open an existing ledger file for inspection only (``remaining``, ``spent``,
        ``report``, ``history``, ``ledger.verify``): the file is never written, abandoned
        reservations are not settled, and reserving or changing budgets raises
        :class:`~gpframe.errors.LedgerError`. Implies ``create=False``.
    ledger_key : bytes or str or os.PathLike, optional
        Key the audit chain with HMAC-SHA-256: the key's bytes (at least 16), or the path of a
        file holding them. Keep the key outside the ledger's directory (and away from whoever
        can write the ledger): without it nobody can rewrite the audit log undetected. Chosen
        when the ledger is created; a keyed ledger must be opened with the same key, and an
        unkeyed one without a key.
    anchor : None or False or str or os.PathLike
        The anchor file, which records the audit log's head after every write so that an
        older copy of the ledger, or a rebuilt audit log, is refused on open. ``None`` (the
        default): ``<path>.anchor`` next to the ledger file; a path: that file (put it where
        whoever can replace the ledger cannot, to detect a rollback of both); ``False``: no
        anchor. A ledger behind its anchor raises :class:`~gpframe.errors.LedgerCorruptError`
        (see SECURITY.md, "Ledger integrity: what is detected"). A PostgreSQL ledger has no
        anchor unless ``anchor=`` names a file (each host may keep its own).

    Notes
    -----
    Opening checks the file against its audit log cheaply (:meth:`Ledger.check`): a ledger
    altered outside gpframe raises :class:`~gpframe.errors.LedgerCorruptError`.

    Examples
    --------
    >>> import gpframe as gp
    >>> with Session(budget=gp.GP(eps=0.3)) as s:
    ...     for _ in range(3):
    ...         with s.reserve(["ann", "bob"], 0.1, query="count") as r:
    ...             _ = r.charge(0.1)
    ...     with s.reserve(["ann", 7], 0.1) as r:
    ...         print(r.admitted.tolist())
    ...         _ = r.charge([0.05, 0.1])
    ...     s.spent_exact().to_dict()
    [False, True]
    {'ann': Fraction(3, 10), 'bob': Fraction(3, 10), 7: Fraction(1, 10)}
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        budget: Budget | None = None,
        central: Budget | None = None,
        *,
        create: bool = True,
        timeout: float = 60.0,
        readonly: bool = False,
        ledger_key: bytes | str | os.PathLike[str] | None = None,
        anchor: bool | str | os.PathLike[str] | None = None,
    ) -> None:
        for arg, b, want in (("budget", budget, "metric"), ("central", central, "central")):
            if b is not None and (not isinstance(b, Budget) or b.notion != want):
                hint = (
                    "gp.GP(eps=...) or gp.CGP(rho=...)"
                    if want == "metric"
                    else ("gp.DP(epsilon=...) or gp.zCDP(rho=...)")
                )
                raise InvalidInputError(f"{arg}={_brepr(b)} must be {hint}. Nothing was charged.")
        self.path = path
        self.readonly = bool(readonly)
        key = load_key(ledger_key)
        store: Store
        if is_postgres_url(path):
            store, where = _open_postgres(str(path), anchor, create, timeout, self.readonly)
        else:
            file = _check_path(path)
            where = anchor_path(file, anchor)
            if where is not None and file is not None and not self.readonly:
                _refuse_missing_anchored(file, where)
            store = SqliteStore(path, create=create, timeout=timeout, readonly=self.readonly)
        try:
            self.ledger = Ledger(
                store, {"metric": budget, "central": central}, key=key, anchor=where
            )
            if not self.ledger.kind:
                raise InvalidInputError(
                    "a new ledger needs a budget: Session(budget=gp.CGP(rho=...)) and/or "
                    "central=gp.DP(epsilon=...). Nothing was charged."
                )
        except BaseException:
            store.close()
            raise
        _LIVE.add(self.ledger.token)
        weakref.finalize(self, _LIVE.discard, self.ledger.token)
        self._closed = False
        if path is not None and not self.readonly:
            self.ledger.settle_stale()

    # -- the low-level API ------------------------------------------------------------------
    def reserve(
        self,
        users: object,
        allocations: object,
        notion: str = "metric",
        kind: str | None = None,
        query: str = "query",
        params: dict[str, Any] | None = None,
        charge_id: str | None = None,
        *,
        units: bool = False,
    ) -> Reservation:
        """Reserve each user's allocation, atomically for all users (one transaction).

        Parameters
        ----------
        users : sequence of int or str
            Unique user ids (unseen users get the default budget).
        allocations : float or array-like
            One amount per user, or a scalar; finite, >= 0.
        notion : {"metric", "central"}
        kind : str, optional
            The mechanism's guarantee kind ("gp", "cgp", "dp", "zcdp") when ``allocations``
            (and later the actual charges) are in its units; converted with
            :func:`gpframe.accounting.filters.charge_for` (e.g. ε → ε²/2 on a CGP filter; a
            Gaussian on a GP filter raises :class:`~gpframe.errors.BudgetExceededError`).
            ``None``: the filter's own units.
        query : str
            The query's name, recorded with the query id.
        params : dict, optional
            Query parameters recorded in the ledger (JSON).
        charge_id : str, optional
            A stable id for this query's charge, for retrying a commit whose acknowledgement
            was lost (the process died, or the caller lost track, after ``charge()`` may have
            returned). If a charge with this id was already committed, the reservation is a
            *replay*: it holds nothing and admits **nobody** (``admitted`` all False,
            ``replay=True``), so nothing may be released under it; ``prior_charges`` (filter
            units), ``prior_admitted`` and ``query_id`` describe the committed charge, and
            ``charge()`` with the same amounts debits nothing and returns False. A replay is
            never a way to re-run a release: new noise needs a fresh ``charge_id`` and pays
            again. A request that differs from the committed one (its charged users must all
            be there, with the same allocations), a replay on the other notion, or an id whose
            reservation is still open raises :class:`~gpframe.errors.ChargeConflictError`
            before anything is written.
        units : bool
            Fast path: ``allocations`` are already int64 ledger units of the notion's filter
            (rounded up, e.g. from :meth:`Ledger.units_for`), so no per-user ``Fraction`` is
            built; call ``charge(actual, units=True)`` with units as well. ``kind`` is then only
            recorded (and checked against the filter).

        Returns
        -------
        Reservation
            Use it as a context manager: leaving it without ``charge()`` (or by an exception)
            charges every admitted user the full allocation; ``cancel()`` before any noise is
            drawn releases it. A user who cannot cover the allocation
            (``spent + held + allocation > budget``, exactly) is left out.

        Raises
        ------
        InvalidInputError
            Bad users or amounts, unknown or unconfigured notion; nothing is written.
        ChargeConflictError
            ``charge_id`` conflicts with a committed charge or an open reservation (see
            above); nothing is written.

        Examples
        --------
        >>> import gpframe as gp
        >>> s = gp.Session(budget=gp.GP(eps=1.0))
        >>> with s.reserve([1, 2], 0.5, charge_id="job-1") as r:
        ...     _ = r.charge([0.25, 0.5])
        >>> with s.reserve([1, 2], 0.5, charge_id="job-1") as r:  # retry after a lost ack
        ...     print(r.replay, r.admitted.tolist(), r.prior_charges.tolist())
        ...     print(r.charge([0.25, 0.5]))
        True [False, False] [Fraction(1, 4), Fraction(1, 2)]
        False
        >>> s.spent_exact().tolist()
        [Fraction(1, 4), Fraction(1, 2)]
        """
        if self._closed:
            raise LedgerError("this Session is closed; open a new one. Nothing was charged.")
        return self.ledger.reserve(
            users, allocations, notion=notion, kind=kind, query=query, params=params,
            charge_id=charge_id, units=units,
        )  # fmt: skip

    def set_budget(self, users: object, budget: Budget) -> None:
        """Override the budget of ``users`` for ``budget``'s notion.

        The kind must match the notion's filter. An override may be lower than what a user has
        spent already: nothing more is admitted then.
        """
        if not isinstance(budget, Budget):
            raise InvalidInputError(
                f"budget={_brepr(budget)} must be gp.GP/CGP/DP/zCDP. Nothing was changed."
            )
        led = self.ledger
        notion = led._notion(budget.notion)
        if budget.kind != led.kind[notion]:
            raise InvalidInputError(
                f"budget={_brepr(budget)} is {budget.kind} but this ledger's {notion} filters are "
                f"{led.kind[notion]}; one filter kind per notion. Nothing was changed."
            )
        units = led.units[notion].down(budget.amount)
        if units > MAX:
            limit = float(led.units[notion].to_fraction(MAX))
            raise InvalidInputError(
                f"budget={_brepr(budget)} does not fit the ledger's {notion} units (at most "
                f"{limit:.6g} with this ledger's default); use a smaller budget. Nothing was "
                "changed."
            )
        keys = _user_keys(users)
        with led._lock, led._write():
            idx, _ = led._ensure(keys)
            if idx.size:
                led._check_overrides(notion)
                led._update(notion, idx, None, units)
                led._d_overrides.add(notion)
            led._audit(
                "budget",
                {
                    "notion": notion, "kind": budget.kind, "default": None, "budget": units,
                    "users": int(idx.size),
                    "digest": _digest(notion, np.sort(idx), np.zeros(0, dtype=np.int64)),
                },
            )  # fmt: skip

    # -- inspection -------------------------------------------------------------------------
    def _default_notion(self, notion: str | None) -> str:
        if notion is None:
            return "metric" if "metric" in self.ledger.kind else "central"
        return self.ledger._notion(notion)

    def _exact(self, which: str, users: object, notion: str | None) -> pd.Series:
        notion = self._default_notion(notion)
        index, st = self.ledger._state(notion, users)
        lu = self.ledger.units[notion]
        if which == "spent":
            vals = st["spent"]
        else:
            vals = np.maximum(st["budget"] - st["spent"] - st["held"], 0)
        return pd.Series([lu.to_fraction(v) for v in vals.tolist()], index=index, dtype=object,
                         name=which)  # fmt: skip

    def _float(self, which: str, users: object, notion: str | None) -> pd.Series:
        notion = self._default_notion(notion)
        index, st = self.ledger._state(notion, users)
        if which == "spent":
            vals = st["spent"]
        else:
            vals = np.maximum(st["budget"] - st["spent"] - st["held"], 0)
        scale = 10.0 ** self.ledger.units[notion].exponent
        return pd.Series(vals.astype(np.float64) / scale, index=index, name=which)

    def plan(
        self,
        total: Any,
        queries: int,
        schedule: str = "linear",
        users: object = None,
        *,
        lam: Any = 0.5,
    ) -> Any:
        """Plan per-user allocations for a sequence of queries (Algorithm 3).

        Savings of earlier queries are re-allocated to later ones and no user's total ever
        exceeds ``total`` (``docs/ledger.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026),
        Alg. 3). See :func:`gpframe.ledger.plan.plan`.
        """
        from gpframe.ledger.plan import plan

        return plan(self, total, queries, schedule, users, lam=lam)

    def remaining(self, users: object = None, notion: str | None = None) -> pd.Series:
        """Budget left per user (``budget - spent - held``, at least 0), as floats.

        ``users=None``: every user the ledger knows; ``notion`` defaults to metric if set.
        """
        return self._float("remaining", users, notion)

    def spent(self, users: object = None, notion: str | None = None) -> pd.Series:
        """Return committed charges per user, as floats (see :meth:`spent_exact`)."""
        return self._float("spent", users, notion)

    def remaining_exact(self, users: object = None, notion: str | None = None) -> pd.Series:
        """Like :meth:`remaining`, as exact ``Fraction`` values."""
        return self._exact("remaining", users, notion)

    def spent_exact(self, users: object = None, notion: str | None = None) -> pd.Series:
        """Like :meth:`spent`, as exact ``Fraction`` values."""
        return self._exact("spent", users, notion)

    def report(self, query_id: str | None = None) -> pd.DataFrame:
        """Return one row per user and configured notion, or the per-user view of one query.

        Columns: user, notion, kind, budget, spent, held, remaining (floats) and n_queries
        (charges that admitted the user).

        With ``query_id`` (a result's ``query_id``): the curator's view of that query, one row
        per user it concerned, with columns user, status (``"charged"`` or ``"excluded"``: left
        out for lack of budget, charged nothing), allocation, charge and saved (floats, in the
        filter's units; an excluded user's allocation is NaN), notion and kind. This is where
        the per-user charges and exclusions of a central-DP query are read: its published
        result holds none of them (SECURITY.md, "What a published result contains"). It names
        users: it is for the curator, not for publication. ``attrs["params"]`` holds the
        parameters the query recorded (for a metric query: its ``crs_m``, ``scale_max`` and
        ``noise_inflation``, see ``docs/wide-extents.md``).

        Raises
        ------
        InvalidInputError
            ``query_id`` is not a query of this ledger.

        Examples
        --------
        >>> import gpframe as gp
        >>> s = gp.Session(central=gp.DP(epsilon=1.0))
        >>> with s.reserve(["ann", "bob"], 0.5, notion="central", query="count") as r:
        ...     _ = r.charge([0.5, 0.25])
        >>> s.report(query_id=r.query_id)[["user", "status", "allocation", "charge", "saved"]]
          user   status  allocation  charge  saved
        0  ann  charged         0.5    0.50   0.00
        1  bob  charged         0.5    0.25   0.25
        """
        if query_id is not None:
            return self._query_report(query_id)
        frames = []
        for notion in NOTIONS:
            if notion not in self.ledger.kind:
                continue
            index, st = self.ledger._state(notion, None)
            n = len(index)
            counts = np.zeros(n, dtype=np.int64)
            with self.ledger._lock, self.ledger._read():
                for c in self.ledger.store.charges(notion):
                    counts += np.bincount(c.idx[c.idx < n], minlength=n)[:n]
            scale = 10.0 ** self.ledger.units[notion].exponent
            rem = np.maximum(st["budget"] - st["spent"] - st["held"], 0)
            frames.append(pd.DataFrame({
                "user": index.to_numpy(), "notion": notion, "kind": self.ledger.kind[notion],
                "budget": st["budget"] / scale, "spent": st["spent"] / scale,
                "held": st["held"] / scale, "remaining": rem / scale, "n_queries": counts,
            }))  # fmt: skip
        return pd.concat(frames, ignore_index=True)

    def _query_report(self, query_id: object) -> pd.DataFrame:
        led = self.ledger
        if not isinstance(query_id, str) or not query_id:
            raise InvalidInputError(
                f"query_id={query_id!r} must be a result's query_id (a non-empty str)."
            )
        with led._lock, led._read():
            led._refresh()
            ptext = led.store.query_params(query_id)
            rows = [c for c in led.store.charges() if c.query_id == query_id]
            index = led._index
        if ptext is None and not rows:
            raise InvalidInputError(
                f"query_id={query_id!r} is not a query of this ledger; pass the query_id of a "
                "result charged on this Session's ledger."
            )
        cols: dict[str, list[Any]] = {k: [] for k in ("user", "status", "allocation", "charge",
                                                      "notion", "kind")}  # fmt: skip
        for c in rows:
            scale = 10.0 ** led.units[c.notion].exponent
            alloc = c.alloc if c.alloc is not None else c.amount
            cols["user"] += index[c.idx].tolist()
            cols["status"] += ["charged"] * c.idx.size
            cols["allocation"] += (alloc / scale).tolist()
            cols["charge"] += (c.amount / scale).tolist()
            cols["notion"] += [c.notion] * c.idx.size
            cols["kind"] += [c.kind] * c.idx.size
        params = json.loads(ptext) if ptext else {}
        excluded = params.get(EXCLUDED_KEY, []) if isinstance(params, dict) else []
        notion = rows[0].notion if rows else ""
        kind = rows[0].kind if rows else ""
        cols["user"] += list(excluded)
        cols["status"] += ["excluded"] * len(excluded)
        cols["allocation"] += [math.nan] * len(excluded)
        cols["charge"] += [0.0] * len(excluded)
        cols["notion"] += [notion] * len(excluded)
        cols["kind"] += [kind] * len(excluded)
        out = pd.DataFrame(cols)
        out["allocation"] = out["allocation"].astype(np.float64)
        out["charge"] = out["charge"].astype(np.float64)
        out.insert(4, "saved", (out["allocation"] - out["charge"]).fillna(0.0))
        if isinstance(params, dict):  # what the query recorded (the CRS and its factors...)
            out.attrs["params"] = {k: v for k, v in params.items() if k != EXCLUDED_KEY}
        return out

    def history(self, user: object) -> pd.DataFrame:
        """Return the user's charges, oldest first.

        Columns: query_id, query, charge_id, notion, kind, amount (float), amount_exact
        (Fraction, filter units) and time.
        """
        led = self.ledger
        keys = _user_keys([user], "user")
        rows = []
        with led._lock, led._read():
            i = int(led._lookup(keys)[0])
            names = led.store.queries()
            if i >= 0:
                for c in led.store.charges():
                    p = np.searchsorted(c.idx, i)
                    if p < c.idx.size and c.idx[p] == i:
                        amt = led.units[c.notion].to_fraction(int(c.amount[p]))
                        rows.append((c.query_id, names.get(c.query_id, ""), c.charge_id, c.notion,
                                     c.kind, float(amt), amt, c.created))  # fmt: skip
        return pd.DataFrame(rows, columns=["query_id", "query", "charge_id", "notion", "kind",
                                           "amount", "amount_exact", "time"])  # fmt: skip

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Settle this Session's open reservations at full allocation and close the store."""
        if self._closed:
            return
        try:
            if not self.readonly:
                self.ledger._settle_own()
        finally:
            self._closed = True
            _LIVE.discard(self.ledger.token)
            self.ledger.store.close()

    def _simulate_crash(self) -> None:
        """Test hook: drop the connection like a dead process would (no settlement)."""
        self._closed = True
        _LIVE.discard(self.ledger.token)
        self.ledger.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        b = ", ".join(f"{n}={k}" for n, k in self.ledger.kind.items())
        path = redact(self.path) if is_postgres_url(self.path) else self.path
        return f"Session(path={path!r}, {b})"
