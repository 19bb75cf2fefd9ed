"""The ledger's storage: a small :class:`Store` protocol and its SQLite implementation.

The ledger logic (:mod:`gpframe.ledger.session`) only talks to a :class:`Store`, so a server
database can back it later. Layout (schema version 2):

``users(start, n, kind, ids)``
    Every user ever seen, with a dense integer index (0, 1, 2, ... in order of first sight;
    never reused), in batches: one row per batch of first-seen users (indices ``start`` to
    ``start + n - 1``), as :func:`gpframe.ledger.keys.encode_users` encodes them (``"i64"``:
    an int64 array as one blob; ``"tagged"``: each id with its type, so user ``1`` and user
    ``"1"`` stay two users). 10**6 new users are one 8 MB value, not 10**6 rows and index
    entries. Uniqueness is the ledger's to keep: it looks every id up under the write lock
    before it adds one, and the audit log's ``state`` hashes every id in order. Version 1
    kept one row per user (``users(idx, uid)``, SQLite's storage class as the type tag, a
    ``uint64`` above ``2**63 - 1`` as the BLOB ``b"u64:<digits>"``); a version-1 file is
    rewritten to batches when it is opened for writing (the same ids in the same order), and
    read as it is when opened read-only.
``chunks(notion, chunk, spent, budget)``
    Per-user ``spent`` (and budget overrides, ``-1`` = the default) as int64 ledger units,
    for the ``CHUNK`` users ``chunk * CHUNK ... chunk * CHUNK + CHUNK - 1``, as one BLOB each.
    A charge of 10**6 users rewrites about 250 blobs instead of upserting 10**6 rows.
``reservations``, ``charges``
    One row per open reservation / per committed charge, the users' indices and amounts as
    int64 BLOBs. ``held`` of a user is the sum over the (few) open reservations. A charge also
    keeps the allocations it was reserved with (``alloc``, aligned with ``idx``), so a replay
    of its ``charge_id`` can be checked against the original request; the column is added in
    place to files written before it existed, whose charges have ``alloc`` NULL.
``queries``, ``audit``, ``meta``
    One row per query; the hash-chained audit log (one row per reserve, charge, cancel,
    settlement and budget change); the schema tag, version and each notion's filter kind,
    ledger-unit exponent and default budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpframe.errors import InvalidInputError, LedgerCorruptError, LedgerError
from gpframe.ledger.keys import decode_users, encode_users, from_sql

__all__ = ["CHECKPOINT_INTERVAL", "CHUNK", "ChargeRow", "ReservationRow", "SqliteStore", "Store"]

#: users per chunk blob (4096 * 8 bytes = 32 KiB per blob)
CHUNK = 4096
#: seconds a deferring write's commit may wait in the ``-wal`` for the checkpoint into the main
#: file (:meth:`SqliteStore.deferring`)
CHECKPOINT_INTERVAL = 1.0
SCHEMA = "gpframe-ledger"
VERSION = "2"
#: the schema version whose users table has one row per user (read, and migrated on write)
LEGACY_VERSION = "1"
GENESIS = "0" * 64
#: page size of a new SQLite ledger. A bulk write of 10**7 first-seen users puts about 480 MB
#: of blobs in overflow pages, each a page write to the WAL and again at the checkpoint:
#: pages four times SQLite's default take about a fifth less CPU there, and no more for a
#: small query. A file keeps the page size it was created with.
PAGE_SIZE = 16384

_TABLES = {
    "meta": "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
    "users": (
        "CREATE TABLE users(start INTEGER PRIMARY KEY, n INTEGER NOT NULL CHECK (n > 0),"
        " kind TEXT NOT NULL, ids BLOB NOT NULL) STRICT"
    ),
    "chunks": (
        "CREATE TABLE chunks(notion TEXT NOT NULL, chunk INTEGER NOT NULL, spent BLOB NOT NULL,"
        " budget BLOB, PRIMARY KEY(notion, chunk)) STRICT"
    ),
    "queries": (
        "CREATE TABLE queries(id TEXT PRIMARY KEY, name TEXT NOT NULL, notion TEXT NOT NULL,"
        " kind TEXT NOT NULL, params TEXT NOT NULL, created TEXT NOT NULL) STRICT"
    ),
    "reservations": (
        "CREATE TABLE reservations(id TEXT PRIMARY KEY, notion TEXT NOT NULL, query_id TEXT NOT"
        " NULL, charge_id TEXT NOT NULL, kind TEXT NOT NULL, created TEXT NOT NULL, pid INTEGER"
        " NOT NULL, host TEXT NOT NULL, token TEXT NOT NULL, idx BLOB NOT NULL,"
        " alloc BLOB NOT NULL) STRICT"
    ),
    "charges": (
        "CREATE TABLE charges(charge_id TEXT PRIMARY KEY, reservation_id TEXT NOT NULL,"
        " query_id TEXT NOT NULL, notion TEXT NOT NULL, kind TEXT NOT NULL, created TEXT NOT"
        " NULL, idx BLOB NOT NULL, amount BLOB NOT NULL, digest TEXT NOT NULL, alloc BLOB)"
        " STRICT"
    ),
    "audit": (
        "CREATE TABLE audit(seq INTEGER PRIMARY KEY, created TEXT NOT NULL, op TEXT NOT NULL,"
        " content TEXT NOT NULL, hash TEXT NOT NULL) STRICT"
    ),
}


@dataclass(frozen=True)
class ReservationRow:
    """An open reservation as stored: admitted users' indices and their allocations (units)."""

    id: str
    notion: str
    query_id: str
    charge_id: str
    kind: str
    created: str
    pid: int
    host: str
    token: str
    idx: np.ndarray
    alloc: np.ndarray


@dataclass(frozen=True)
class ChargeRow:
    """A committed charge: the charged users' indices and amounts (units), and their digest.

    ``alloc`` holds the reserved allocations aligned with ``idx`` (None for charges written
    before the ledger recorded them).
    """

    charge_id: str
    reservation_id: str
    query_id: str
    notion: str
    kind: str
    created: str
    idx: np.ndarray
    amount: np.ndarray
    digest: str
    alloc: np.ndarray | None = None


class Store(Protocol):
    """What the ledger needs from a database (methods as documented on SqliteStore).

    Every method but ``close`` runs inside ``write()`` or ``read()``; ``write()`` must exclude
    every other writer, in every process.
    """

    def write(self) -> contextlib.AbstractContextManager[None]: ...  # noqa: D102
    def read(self) -> contextlib.AbstractContextManager[None]: ...  # noqa: D102
    def meta(self) -> dict[str, str]: ...  # noqa: D102
    def set_meta(self, items: dict[str, str]) -> None: ...  # noqa: D102
    def users_from(self, start: int) -> list[Any]: ...  # noqa: D102
    def add_users(self, start: int, uids: Sequence[Any]) -> None: ...  # noqa: D102
    def read_chunks(  # noqa: D102
        self, notion: str, chunks: Sequence[int]
    ) -> dict[int, tuple[np.ndarray, np.ndarray | None]]: ...
    def write_chunks(  # noqa: D102
        self, notion: str, chunks: dict[int, tuple[np.ndarray, np.ndarray | None]]
    ) -> None: ...
    def reservations(self, notion: str | None = None) -> list[ReservationRow]: ...  # noqa: D102
    def reservation(self, rid: str) -> ReservationRow | None: ...  # noqa: D102
    def has_reservation(self, rid: str) -> bool: ...  # noqa: D102
    def add_reservation(self, row: ReservationRow) -> None: ...  # noqa: D102
    def delete_reservation(self, rid: str) -> None: ...  # noqa: D102
    def add_query(  # noqa: D102
        self, qid: str, name: str, notion: str, kind: str, params: str, created: str
    ) -> None: ...
    def queries(self) -> dict[str, str]: ...  # noqa: D102
    def query_params(self, qid: str) -> str | None: ...  # noqa: D102
    def charge(self, charge_id: str) -> ChargeRow | None: ...  # noqa: D102
    def add_charge(self, row: ChargeRow) -> None: ...  # noqa: D102
    def charges(self, notion: str | None = None) -> Iterator[ChargeRow]: ...  # noqa: D102
    def audit_head(self) -> tuple[int, str]: ...  # noqa: D102
    def add_audit(self, created: str, op: str, content: str, digest: str) -> int: ...  # noqa: D102
    def audit(self) -> Iterator[tuple[int, str, str, str, str]]: ...  # noqa: D102
    def audit_tail(self) -> list[tuple[int, str, str]]: ...  # noqa: D102
    def audit_hash(self, seq: int) -> str | None: ...  # noqa: D102
    def n_charges(self) -> int: ...  # noqa: D102
    def all_chunks(  # noqa: D102
        self, notion: str
    ) -> dict[int, tuple[np.ndarray, np.ndarray | None]]: ...
    def digest(self) -> str: ...  # noqa: D102
    def integrity(self) -> str: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


def _check_path(path: object) -> str | None:
    """Return the ledger path as a str (None: in memory); refuse what is not a file path."""
    if path is None:
        return None
    if isinstance(path, str) or (isinstance(path, os.PathLike) and not isinstance(path, bytes)):
        p = os.fspath(path)
        if isinstance(p, str) and p and "\x00" not in p:
            return p
    raise InvalidInputError(
        f"path={path!r} must be a non-empty str or os.PathLike naming the ledger file, or None "
        "for an in-memory ledger. Nothing was charged."
    )


def _check_timeout(timeout: object) -> float:
    """Return the lock timeout in seconds; refuse what is not a finite number > 0."""
    ok = isinstance(timeout, (int, float, np.integer, np.floating)) and not isinstance(
        timeout, (bool, np.bool_)
    )
    if ok:
        try:
            t = float(timeout)  # type: ignore[arg-type]
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(t) and t > 0
    if not ok:
        raise InvalidInputError(
            f"timeout={timeout!r} must be a finite number of seconds > 0 (e.g. 60.0). Nothing "
            "was charged."
        )
    return t


def _arr(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<i8")


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<i8").tobytes()


def _view(a: np.ndarray) -> memoryview:
    """Return the bytes of :func:`_blob` as a view of the array (sqlite3 binds it, no copy)."""
    return memoryview(np.ascontiguousarray(a, dtype="<i8")).cast("B")


#: blobs of at least this many bytes are written with incremental blob I/O (see _insert)
_BIG_BLOB = 1 << 20
#: ``Connection.blobopen`` (Python 3.11+); without it every blob is bound as a parameter
_BLOB_IO = hasattr(sqlite3.Connection, "blobopen")


def _insert(con: sqlite3.Connection, table: str, cols: Sequence[str], values: Sequence[Any]) -> int:
    """``INSERT INTO table(cols) VALUES (values)``; return the new row's rowid.

    A bound blob is copied by SQLite (``SQLITE_TRANSIENT``), then again into the record it
    builds, then into its pages. So each large blob (``_BIG_BLOB`` bytes or more) is inserted
    as ``zeroblob(size)`` and then written in place through incremental blob I/O: one copy
    into the pages, in the same transaction, and the same bytes in the file. 10**7 first-seen
    users write about 480 MB of such blobs (users, reservation, charge).
    """
    size = [memoryview(v).nbytes if isinstance(v, (bytes, memoryview)) else 0 for v in values]
    big = {i for i, n in enumerate(size) if _BLOB_IO and n >= _BIG_BLOB}
    marks = ", ".join("zeroblob(?)" if i in big else "?" for i in range(len(values)))
    args = [size[i] if i in big else v for i, v in enumerate(values)]
    cur = con.execute(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({marks})", args)
    rowid = int(cur.lastrowid)
    for i in sorted(big):
        with con.blobopen(table, cols[i], rowid) as b:
            b.write(values[i])
    return rowid


class SqliteStore:
    """:class:`Store` on an embedded SQLite file, or in memory with ``path=None``.

    The file uses WAL journaling, ``synchronous=FULL`` and ``BEGIN IMMEDIATE`` writes: once a
    write has returned, it is durable in the ``-wal`` (fsync'd at its commit), and a crash loses
    nothing acknowledged as long as the ``-wal`` is kept with the file. A write is then copied
    into the main file (``PRAGMA wal_checkpoint(FULL)``, which fsyncs it) before it returns, so
    the main file alone holds it too, except while writes are :meth:`deferring` (the batches of
    the DuckDB functions, ``docs/sql.md``: hundreds of durable commits per query, where the
    checkpoint's two extra fsyncs, and the ``-wal`` restart's one after it, were most of a
    commit's cost). Their commits are checkpointed by the first write
    :attr:`checkpoint_interval` seconds (1 s) or more after the last checkpoint, by SQLite's
    own automatic checkpoint when the ``-wal`` passes 1,000 pages, by the next write that is
    not deferring, and when the store closes: meanwhile the main file lags the ``-wal``. A copy
    of the main file *without* its ``-wal`` may then lack the last charges; the anchor
    (``docs/ledger.md``) records the audit head after every charge, so such a copy put back in
    place of the ledger (or opened with ``anchor=`` its anchor) is refused on open
    (``LedgerCorruptError``), never accepted short of charges. Back up a ledger in use with
    SQLite's online backup (``sqlite3 ledger.sqlite ".backup copy.sqlite"``), or copy the file
    together with its ``-wal``, or close its Sessions first.

    Parameters
    ----------
    path : str or os.PathLike or None
        The ledger file; ``None`` keeps the ledger in memory (lost on close).
    create : bool
        Create the file (and schema) when it does not exist. With ``create=False`` a missing
        file raises :class:`~gpframe.errors.LedgerCorruptError` instead of starting afresh.
    timeout : float
        Seconds to wait for another process's write lock before raising
        :class:`~gpframe.errors.LedgerError`; finite and > 0.
    readonly : bool
        Open an existing ledger for reading only: nothing is ever written to the file (no
        schema, no WAL switch, no column migration) and :meth:`write` raises
        :class:`~gpframe.errors.LedgerError`. A missing, empty or foreign file raises
        :class:`~gpframe.errors.LedgerCorruptError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        create: bool = True,
        timeout: float = 60.0,
        readonly: bool = False,
    ) -> None:
        self.path = _check_path(path)
        self.timeout = _check_timeout(timeout)
        self.readonly = bool(readonly)
        #: checkpoint mode run after a write transaction (None: leave it to SQLite's
        #: automatic checkpoints, the policy before the ledger checkpointed itself)
        self.checkpoint: str | None = "FULL"
        #: seconds a deferring write's commit may stay in the ``-wal`` alone after the last
        #: checkpoint (0: checkpoint after every write, deferring or not)
        self.checkpoint_interval = CHECKPOINT_INTERVAL
        #: monotonic time of the last checkpoint (None: none yet), whether commits wait in
        #: the ``-wal`` for the next one, and how many callers are :meth:`deferring`
        self._checkpointed: float | None = None
        self._deferred = False
        self._deferring = 0
        self._defer_lock = threading.Lock()
        #: checkpoints run (for tests and benchmarks)
        self.checkpoints = 0
        #: True when this open created the schema (a new, empty ledger)
        self.created = False
        #: the charges columns to select; a read-only view of a file from before ``alloc``
        #: existed cannot add the column, so it reads NULL in its place
        self._ccols = self._CCOLS
        #: a version-1 file's users table (one row per user), until it is migrated
        self._legacy_users = False
        if self.path is not None and not os.path.exists(self.path) and (not create or readonly):
            raise LedgerCorruptError(
                f"ledger file {self.path!r} does not exist and create=False. Check the path, or "
                "pass create=True to start a new ledger with fresh budgets. Nothing was charged."
            )
        try:
            if self.readonly and self.path is not None:
                self.con = self._connect_readonly(self.path, self.timeout)
            else:
                self.con = sqlite3.connect(
                    ":memory:" if self.path is None else self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self.timeout,
                )
        except (sqlite3.Error, OSError) as exc:
            raise LedgerCorruptError(
                f"cannot open ledger file {self.path!r}: {exc}. Nothing was charged."
            ) from exc
        try:
            self.con.execute(f"PRAGMA busy_timeout={int(min(self.timeout, 2**31 / 1000) * 1000)}")
            # look before writing anything: a file without tables is only made a ledger when
            # the caller asked for a new one (create=True, not read-only)
            if self.path is not None and not self._tables() and (not create or self.readonly):
                raise LedgerCorruptError(
                    f"ledger file {self.path!r} is empty or not a gpframe ledger (no tables) "
                    "and create=False (or read-only); it was left untouched. Check the path. "
                    "Nothing was charged."
                )
            if not self.readonly and (self.path is None or not self._tables()):
                self.con.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before any page is written
            if self.path is not None and not self.readonly:
                mode = self.con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise LedgerError(
                        f"ledger file {self.path!r} cannot use WAL journaling (got {mode!r}); "
                        "put it on a local file system. Nothing was charged."
                    )
            if not self.readonly:
                self.con.execute("PRAGMA synchronous=FULL")
            self._check_or_create()
        except sqlite3.DatabaseError as exc:
            self.con.close()
            raise LedgerCorruptError(
                f"ledger file {self.path!r} is not a readable gpframe ledger ({exc}). Restore it "
                "from a backup; a fresh budget is never created over it. Nothing was charged."
            ) from exc
        except BaseException:
            self.con.close()
            raise

    @staticmethod
    def _connect_readonly(path: str, timeout: float) -> sqlite3.Connection:
        """Open ``path`` for reading without creating or changing any file.

        SQLite's ``mode=ro`` still creates the ``-wal``/``-shm`` files of a WAL database when
        they are missing. So with no ``-wal`` (every commit is in the main file) the file is
        read into memory, and kept only if nothing touched it meanwhile (a checkpoint needs a
        ``-wal``, and changes the file's size or mtime); with a ``-wal`` (a writer may be
        active, or a crash left commits there) ``mode=ro`` reads both without writing them.
        """
        wal = f"{path}-wal"
        for _ in range(5):
            if os.path.exists(wal):
                break
            before = os.stat(path)
            data = bytearray(Path(path).read_bytes())
            after = os.stat(path)
            if os.path.exists(wal) or (before.st_mtime_ns, before.st_size) != (
                after.st_mtime_ns,
                after.st_size,
            ):
                continue
            con = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            if data:
                if len(data) >= 20 and data[18] == 2 and data[19] == 2:
                    # an in-memory database cannot be in WAL mode: mark the copy legacy
                    # (rollback-journal) so SQLite reads it; the file itself is untouched
                    data[18] = data[19] = 1
                try:
                    con.deserialize(bytes(data))
                except BaseException:
                    con.close()
                    raise
            return con
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        return sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout
        )

    # -- schema ---------------------------------------------------------------------------
    def _tables(self) -> set[str]:
        rows = self.con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        return {r[0] for r in rows}

    def _check_or_create(self) -> None:
        with self.read() if self.readonly else self.write():
            tables = self._tables()
            if not tables:
                for ddl in _TABLES.values():
                    self.con.execute(ddl)
                self.set_meta({"schema": SCHEMA, "version": VERSION})
                self.created = True
                return
        if tables != set(_TABLES):
            raise LedgerCorruptError(
                f"{self.path!r} is a SQLite file with a foreign schema (tables "
                f"{sorted(tables)}), not a gpframe ledger. Point Session(path=...) at the "
                "ledger file. Nothing was charged."
            )
        meta = self.meta()
        version = meta.get("version")
        self._legacy_users = meta.get("schema") == SCHEMA and version == LEGACY_VERSION
        if meta.get("schema") != SCHEMA or (version != VERSION and not self._legacy_users):
            raise LedgerCorruptError(
                f"{self.path!r} has schema {meta.get('schema')!r} version "
                f"{meta.get('version')!r}; this gpframe reads {SCHEMA!r} versions "
                f"{LEGACY_VERSION!r} and {VERSION!r}. "
                "Open it with the gpframe version that wrote it. Nothing was charged."
            )
        cols = {r[1] for r in self.con.execute("PRAGMA table_info(charges)").fetchall()}
        if "alloc" not in cols and self.readonly:
            self._ccols = self._CCOLS.replace("alloc", "NULL AS alloc")
        elif "alloc" not in cols:
            # files from before charges recorded their allocations: add the (nullable) column;
            # readers without it name their columns explicitly, so they keep working
            with self.write():
                self.con.execute("ALTER TABLE charges ADD COLUMN alloc BLOB")
        if self._legacy_users and not self.readonly:
            self._migrate_users()

    # -- transactions ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _txn(self, begin: str, write: bool = False) -> Iterator[None]:
        try:
            self.con.execute(begin)
        except sqlite3.ProgrammingError as exc:
            raise LedgerError(
                "this Session was closed (its open reservations were settled at their full "
                "allocation); open a new Session. Nothing more was charged."
            ) from exc
        except sqlite3.OperationalError as exc:
            raise LedgerError(
                f"the ledger {self.path or ':memory:'!r} is locked by another process ({exc}); "
                "retry, or raise Session(timeout=...). Nothing was charged."
            ) from exc
        try:
            yield
        except BaseException as exc:
            if self.con.in_transaction:
                self.con.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise LedgerError(
                    f"the ledger store failed ({exc}); retry. Nothing was charged."
                ) from exc
            if isinstance(exc, sqlite3.DatabaseError):
                raise LedgerCorruptError(
                    f"the ledger file is damaged ({exc}); restore it from a backup and run "
                    "session.ledger.verify(). Nothing was charged."
                ) from exc
            raise
        try:
            self.con.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.con.in_transaction:
                self.con.execute("ROLLBACK")
            raise LedgerError(f"the ledger could not commit ({exc}). Nothing was charged.") from exc
        if write and self.checkpoint and self.path is not None:
            self._deferred = True
            if self._checkpoint_due():
                self._checkpoint()

    def _checkpoint_due(self) -> bool:
        """Tell whether this write's commit is copied into the main file now (see the class)."""
        last = self._checkpointed
        return (
            not self._deferring
            or last is None
            or time.monotonic() - last >= self.checkpoint_interval
        )

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """Let the writes made meanwhile (by any thread) leave their checkpoint for later.

        Each write is still durable when it returns (its commit fsyncs the ``-wal``); only the
        copy into the main file waits, as the class docstring says. Nests and counts callers:
        writes defer while any caller is inside.
        """
        with self._defer_lock:
            self._deferring += 1
        try:
            yield
        finally:
            with self._defer_lock:
                self._deferring -= 1

    def _checkpoint(self) -> None:
        """Copy the committed WAL frames into the main file and fsync it.

        FULL waits (up to the busy timeout) for readers of older snapshots. Should one outlast
        it, the commit stays durable in the ``-wal`` and the next write's checkpoint copies it.
        """
        self._checkpointed = time.monotonic()
        self.checkpoints += 1
        try:
            busy = self.con.execute(f"PRAGMA wal_checkpoint({self.checkpoint})").fetchone()[0]
        except sqlite3.OperationalError:
            return  # busy: see above; the commit itself succeeded
        self._deferred = bool(busy)

    def write(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive write transaction across threads and processes (``BEGIN IMMEDIATE``)."""
        if self.readonly:
            raise LedgerError(
                f"the ledger {self.path or ':memory:'!r} was opened read-only; open it with "
                "Session(path) to reserve, charge or change budgets. Nothing was charged."
            )
        return self._txn("BEGIN IMMEDIATE", write=True)

    def read(self) -> contextlib.AbstractContextManager[None]:
        """Open a consistent read snapshot (deferred transaction)."""
        return self._txn("BEGIN")

    # -- meta and users -------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        """All meta entries."""
        return dict(self.con.execute("SELECT key, value FROM meta").fetchall())

    def set_meta(self, items: dict[str, str]) -> None:
        """Insert or replace meta entries."""
        self.con.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET"
            " value = excluded.value",
            list(items.items()),
        )

    def users_from(self, start: int) -> list[Any]:
        """User ids with index >= ``start``, in index order (indices are dense)."""
        if self._legacy_users:
            return self._legacy_users_from(start)
        rows = self.con.execute(
            "SELECT start, n, kind, ids FROM users WHERE start + n > ? ORDER BY start", (start,)
        ).fetchall()
        out: list[Any] = []
        at = rows[0][0] if rows else start
        if at > start:
            at = -1  # a gap before the first batch
        for first, n, kind, ids in rows:
            if first != at:
                raise LedgerCorruptError(
                    "the ledger's user index has gaps; run session.ledger.verify() and restore "
                    "the file from a backup. Nothing was charged."
                )
            out.extend(decode_users(kind, n, ids))
            at = first + n
        return out[start - rows[0][0] :] if rows else out

    def _legacy_users_from(self, start: int) -> list[Any]:
        """:meth:`users_from` on a version-1 users table (one row per user)."""
        rows = self.con.execute(
            "SELECT idx, uid FROM users WHERE idx >= ? ORDER BY idx", (start,)
        ).fetchall()
        if rows and (rows[0][0] != start or rows[-1][0] != start + len(rows) - 1):
            raise LedgerCorruptError(
                "the ledger's user index has gaps; run session.ledger.verify() and restore "
                "the file from a backup. Nothing was charged."
            )
        return [from_sql(r[1]) for r in rows]

    def add_users(self, start: int, uids: Sequence[Any]) -> None:
        """Append users with indices ``start, start + 1, ...`` as one batch (one row)."""
        if len(uids) == 0:
            return
        if isinstance(uids, np.ndarray) and uids.dtype.kind == "i":
            kind, ids = "i64", _view(uids)  # encode_users' int64 blob, without its copy
        else:
            kind, ids = encode_users(uids)
        _insert(self.con, "users", ("start", "n", "kind", "ids"), (start, len(uids), kind, ids))

    def _migrate_users(self) -> None:
        """Rewrite a version-1 users table (one row per user) as one batch; set version 2.

        The same ids in the same index order, so the audit log's users hash still holds.
        """
        with self.write():
            if self.meta().get("version") != LEGACY_VERSION:  # another process migrated it
                self._legacy_users = False
                return
            uids = self._legacy_users_from(0)
            self.con.execute("DROP TABLE users")
            self.con.execute(_TABLES["users"])
            ints = all(type(u) is int and -(2**63) <= u < 2**63 for u in uids)
            self.add_users(0, np.array(uids, dtype=np.int64) if uids and ints else uids)
            self.set_meta({"version": VERSION})
        self._legacy_users = False

    # -- chunks ---------------------------------------------------------------------------
    def read_chunks(
        self, notion: str, chunks: Sequence[int]
    ) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
        """Spent and budget-override arrays of the given chunks that exist."""
        out: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        chunks = [int(c) for c in chunks]
        for i in range(0, len(chunks), 10_000):
            part = chunks[i : i + 10_000]
            rows = self.con.execute(
                "SELECT chunk, spent, budget FROM chunks WHERE notion = ? AND chunk IN "
                f"({','.join('?' * len(part))})",
                [notion, *part],
            ).fetchall()
            for c, s, b in rows:
                out[c] = (_arr(s), None if b is None else _arr(b))
        return out

    def write_chunks(
        self, notion: str, chunks: dict[int, tuple[np.ndarray, np.ndarray | None]]
    ) -> None:
        """Insert or replace whole chunks."""
        self.con.executemany(
            "INSERT INTO chunks(notion, chunk, spent, budget) VALUES (?, ?, ?, ?) ON CONFLICT"
            "(notion, chunk) DO UPDATE SET spent = excluded.spent, budget = excluded.budget",
            [
                (notion, int(c), _view(s), None if b is None else _view(b))
                for c, (s, b) in chunks.items()
            ],
        )

    def all_chunks(self, notion: str) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
        """Every chunk of a notion."""
        rows = self.con.execute(
            "SELECT chunk, spent, budget FROM chunks WHERE notion = ?", (notion,)
        ).fetchall()
        return {c: (_arr(s), None if b is None else _arr(b)) for c, s, b in rows}

    # -- reservations, queries, charges ---------------------------------------------------
    _RCOLS = "id, notion, query_id, charge_id, kind, created, pid, host, token, idx, alloc"

    @staticmethod
    def _rrow(r: tuple) -> ReservationRow:
        return ReservationRow(*r[:9], _arr(r[9]), _arr(r[10]))

    def reservations(self, notion: str | None = None) -> list[ReservationRow]:
        """Open reservations (of one notion, or all)."""
        if notion is None:
            rows = self.con.execute(f"SELECT {self._RCOLS} FROM reservations").fetchall()
        else:
            rows = self.con.execute(
                f"SELECT {self._RCOLS} FROM reservations WHERE notion = ?", (notion,)
            ).fetchall()
        return [self._rrow(r) for r in rows]

    def reservation(self, rid: str) -> ReservationRow | None:
        """One open reservation, or None when it was settled or cancelled."""
        r = self.con.execute(
            f"SELECT {self._RCOLS} FROM reservations WHERE id = ?", (rid,)
        ).fetchone()
        return None if r is None else self._rrow(r)

    def has_reservation(self, rid: str) -> bool:
        """Tell whether reservation ``rid`` is open (without reading its blobs)."""
        q = "SELECT 1 FROM reservations WHERE id = ?"
        return self.con.execute(q, (rid,)).fetchone() is not None

    def add_reservation(self, row: ReservationRow) -> None:
        """Store an open reservation."""
        _insert(
            self.con, "reservations", self._RCOLS.split(", "),
            (
                row.id, row.notion, row.query_id, row.charge_id, row.kind, row.created,
                row.pid, row.host, row.token, _view(row.idx), _view(row.alloc),
            ),
        )  # fmt: skip

    def delete_reservation(self, rid: str) -> None:
        """Remove a settled or cancelled reservation."""
        self.con.execute("DELETE FROM reservations WHERE id = ?", (rid,))

    def add_query(
        self, qid: str, name: str, notion: str, kind: str, params: str, created: str
    ) -> None:
        """Record a query (its name, notion, mechanism kind and parameters)."""
        self.con.execute(
            "INSERT OR IGNORE INTO queries(id, name, notion, kind, params, created)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (qid, name, notion, kind, params, created),
        )

    def queries(self) -> dict[str, str]:
        """Query id -> query name."""
        return dict(self.con.execute("SELECT id, name FROM queries").fetchall())

    def query_params(self, qid: str) -> str | None:
        """Return the recorded parameters (JSON text) of query ``qid``, or None if unknown."""
        r = self.con.execute("SELECT params FROM queries WHERE id = ?", (qid,)).fetchone()
        return None if r is None else str(r[0])

    _CCOLS = (
        "charge_id, reservation_id, query_id, notion, kind, created, idx, amount, digest, alloc"
    )

    @staticmethod
    def _crow(r: tuple) -> ChargeRow:
        return ChargeRow(*r[:6], _arr(r[6]), _arr(r[7]), r[8], None if r[9] is None else _arr(r[9]))

    def charge(self, charge_id: str) -> ChargeRow | None:
        """Return a committed charge by id, or None."""
        r = self.con.execute(
            f"SELECT {self._ccols} FROM charges WHERE charge_id = ?", (charge_id,)
        ).fetchone()
        return None if r is None else self._crow(r)

    def add_charge(self, row: ChargeRow) -> None:
        """Store a committed charge."""
        _insert(
            self.con, "charges", self._CCOLS.split(", "),
            (
                row.charge_id, row.reservation_id, row.query_id, row.notion, row.kind,
                row.created, _view(row.idx), _view(row.amount), row.digest,
                None if row.alloc is None else _view(row.alloc),
            ),
        )  # fmt: skip

    def charges(self, notion: str | None = None) -> Iterator[ChargeRow]:
        """All committed charges (of one notion, or all), oldest first."""
        if notion is None:
            cur = self.con.execute(f"SELECT {self._ccols} FROM charges ORDER BY rowid")
        else:
            cur = self.con.execute(
                f"SELECT {self._ccols} FROM charges WHERE notion = ? ORDER BY rowid", (notion,)
            )
        for r in cur.fetchall():
            yield self._crow(r)

    # -- audit ----------------------------------------------------------------------------
    def audit_head(self) -> tuple[int, str]:
        """(sequence number, hash) of the last audit row; (0, GENESIS) when empty."""
        r = self.con.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, GENESIS) if r is None else (r[0], r[1])

    def add_audit(self, created: str, op: str, content: str, digest: str) -> int:
        """Append an audit row (the caller computed its chained hash); return its seq."""
        cur = self.con.execute(
            "INSERT INTO audit(created, op, content, hash) VALUES (?, ?, ?, ?)",
            (created, op, content, digest),
        )
        return int(cur.lastrowid)

    def audit_tail(self) -> list[tuple[int, str, str]]:
        """Return the last two audit rows, newest first: (seq, content, hash)."""
        return self.con.execute(
            "SELECT seq, content, hash FROM audit ORDER BY seq DESC LIMIT 2"
        ).fetchall()

    def audit_hash(self, seq: int) -> str | None:
        """Return the hash of audit row ``seq``, or None when there is no such row."""
        r = self.con.execute("SELECT hash FROM audit WHERE seq = ?", (seq,)).fetchone()
        return None if r is None else str(r[0])

    def n_charges(self) -> int:
        """How many charges are committed (counts the primary-key index, not the blobs)."""
        return int(self.con.execute("SELECT count(*) FROM charges").fetchone()[0])

    def audit(self) -> Iterator[tuple[int, str, str, str, str]]:
        """Audit rows in order: (seq, created, op, content, hash)."""
        yield from self.con.execute(
            "SELECT seq, created, op, content, hash FROM audit ORDER BY seq"
        ).fetchall()

    # -- whole-store ----------------------------------------------------------------------
    def digest(self) -> str:
        """sha256 over every table's content in a fixed order (reads the whole ledger)."""
        h = hashlib.sha256()
        for name in sorted(_TABLES):
            for row in self.con.execute(f"SELECT * FROM {name} ORDER BY 1, 2"):
                h.update(repr(row).encode())
            h.update(b"\x00" + name.encode())
        return h.hexdigest()

    def integrity(self) -> str:
        """SQLite's own page-level check ('ok' when fine)."""
        return str(self.con.execute("PRAGMA quick_check").fetchone()[0])

    def close(self) -> None:
        """Close the connection; open transactions are rolled back by SQLite.

        Commits still waiting in the ``-wal`` are checkpointed into the main file first
        (SQLite does so itself only when the last connection to the file closes).
        """
        if self._deferred and self.checkpoint:
            # best effort: a failed checkpoint leaves the commits in the -wal, where they are
            # durable, and the next open's first checkpoint copies them
            with contextlib.suppress(sqlite3.Error):
                if not self.con.in_transaction:
                    self._checkpoint()
        self.con.close()
