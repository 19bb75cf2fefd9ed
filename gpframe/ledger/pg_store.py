"""The ledger's :class:`~gpframe.ledger.store.Store` on a PostgreSQL server (psycopg 3).

Several processes on several hosts share one budget per user by pointing their Sessions at one
database (``docs/ledger.md``, "PostgreSQL ledger"). The tables, and how user ids are stored in
them, are in :mod:`gpframe.ledger.pg_layout`; every write transaction first locks the one row of
``gpframe_lock`` (see :meth:`PostgresStore.write`).

Examples
--------
>>> with PostgresStore("postgresql:///ledger") as store:  # doctest: +SKIP
...     with store.read():
...         print(store.meta()["schema"])
gpframe-ledger
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, LedgerCorruptError, LedgerError
from gpframe.ledger.keys import decode_users as _decode_users
from gpframe.ledger.keys import encode_users as _encode_users
from gpframe.ledger.pg_layout import (
    _EXTERNAL,
    _P,
    _TABLES,
    is_postgres_url,
    redact,
)
from gpframe.ledger.store import (
    GENESIS,
    SCHEMA,
    ChargeRow,
    ReservationRow,
    _arr,
    _blob,
    _check_timeout,
)

__all__ = ["PostgresStore", "is_postgres_url", "redact"]

#: the PostgreSQL layout's version (users in batches from the start; SQLite's is its own)
VERSION = "1"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the extra is part of the test install
        raise InvalidInputError(
            "a postgresql:// ledger needs psycopg 3: pip install 'gpframe[postgres]'. Nothing "
            "was charged."
        ) from exc
    return psycopg


class PostgresStore:
    """:class:`~gpframe.ledger.store.Store` on a PostgreSQL database named by a URL.

    Every write transaction runs at READ COMMITTED and first locks the one row of
    ``gpframe_lock`` with ``SELECT ... FOR UPDATE``; reads run in REPEATABLE READ READ ONLY
    snapshots. Commits use ``synchronous_commit = on``, so a charge is on the server's disk
    (and on its synchronous standbys, if any) before ``charge()`` returns.

    Parameters
    ----------
    url : str
        ``postgresql://[user[:password]@][host][:port]/dbname[?param=value...]``, any libpq
        URL (``host=/socket/dir`` for a Unix socket, ``options=-csearch_path%3Dname`` for a
        ledger in its own schema). The database must exist; gpframe never creates one.
    create : bool
        Create the ledger's tables when the schema holds none. With ``False`` a database
        without them raises :class:`~gpframe.errors.LedgerCorruptError`.
    timeout : float
        Seconds to wait for the connection and for another writer's lock before raising
        :class:`~gpframe.errors.LedgerError`; finite and > 0.
    readonly : bool
        Open an existing ledger for reading only: the connection's transactions are READ
        ONLY (the server refuses writes) and :meth:`write` raises
        :class:`~gpframe.errors.LedgerError`.
    """

    def __init__(
        self, url: str, *, create: bool = True, timeout: float = 60.0, readonly: bool = False
    ) -> None:
        if not is_postgres_url(url):
            raise InvalidInputError(f"{url!r} is not a postgresql:// URL. Nothing was charged.")
        psycopg = _psycopg()
        self.url, self.path = url, redact(url)
        self.timeout = _check_timeout(timeout)
        self.readonly = bool(readonly)
        self.created = False
        self._psycopg = psycopg
        self._errors = psycopg.errors
        self._Error = psycopg.Error
        #: set by close(): a closed store never reconnects
        self._closed = False
        self.con = self._connect()
        try:
            self._check_or_create(create)
        except BaseException:
            self.con.close()
            raise

    def _connect(self) -> Any:
        """Open the connection: autocommit (transactions are explicit), durable commits."""
        psycopg = self._psycopg
        try:
            con = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(min(self.timeout, 2**31)))
            )
        except psycopg.Error as exc:
            raise LedgerError(
                f"cannot connect to the ledger database {self.path!r}: "
                f"{str(exc).strip() or type(exc).__name__}. Check the URL, that the server runs "
                "and that the database exists (createdb). Nothing was charged."
            ) from exc
        try:
            # durable before charge() returns, whatever the server's default
            con.execute("SET synchronous_commit TO on")
            if self.readonly:
                con.execute("SET default_transaction_read_only TO on")
        except BaseException:
            con.close()
            raise
        return con

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------
    def _tables(self) -> set[str]:
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema ="
            " current_schema() AND table_name LIKE 'gpframe\\_%%'"
        ).fetchall()
        return {r[0][len(_P) :] for r in rows}

    def _check_or_create(self, create: bool) -> None:
        with self._txn("BEGIN ISOLATION LEVEL READ COMMITTED", "open"):
            if self.con.execute("SELECT current_schema()").fetchone()[0] is None:
                raise LedgerCorruptError(
                    f"the ledger database {self.path!r} has no schema to hold the ledger (the "
                    "search_path names none that exists); create it or fix options=. Nothing "
                    "was charged."
                )
            tables = self._tables()
            if not tables and create and not self.readonly:
                # two first opens at once: the second waits here, then finds the tables
                self.con.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('gpframe-ledger:' || current_schema()))"
                )
                tables = self._tables()
                if not tables:
                    for ddl in _TABLES.values():
                        self.con.execute(ddl)
                    for t, cols in _EXTERNAL.items():
                        alter = ", ".join(f"ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in cols)
                        self.con.execute(f"ALTER TABLE {_P}{t} {alter}")
                    self.con.execute(f"INSERT INTO {_P}lock(id) VALUES (1)")
                    self.set_meta({"schema": SCHEMA, "version": VERSION})
                    self.created = True
                    return
            if not tables:
                raise LedgerCorruptError(
                    f"the database {self.path!r} holds no gpframe ledger (no gpframe_* tables "
                    "in its current schema) and create=False (or read-only). Check the URL "
                    "(database, options=-csearch_path=...). Nothing was charged."
                )
            if tables != set(_TABLES):
                raise LedgerCorruptError(
                    f"the database {self.path!r} holds only some of a gpframe ledger's tables "
                    f"({sorted(tables)}); restore it from a backup. Nothing was charged."
                )
            meta = self.meta()
        if meta.get("schema") != SCHEMA or meta.get("version") != VERSION:
            raise LedgerCorruptError(
                f"{self.path!r} has schema {meta.get('schema')!r} version "
                f"{meta.get('version')!r}; this gpframe reads {SCHEMA!r} version {VERSION!r}. "
                "Open it with the gpframe version that wrote it. Nothing was charged."
            )

    # -- transactions ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _txn(self, begin: str, kind: str) -> Iterator[None]:
        errors = self._errors
        try:
            if self._closed:
                raise LedgerError(
                    "this Session was closed (its open reservations were settled at their full "
                    "allocation); open a new Session. Nothing more was charged."
                )
            if self.con.closed:
                # the server ended the connection (a restart, a failover, an administrator):
                # every transaction starts afresh under the lock, so a new connection is safe
                self.con = self._connect()
            if kind == "write":
                # one round trip: on a busy host each one costs a context switch
                ms = int(min(self.timeout, 2**31 / 1000) * 1000)
                cur = self.con.execute(
                    f"{begin}; SET LOCAL lock_timeout = {ms};"
                    f" SELECT id FROM {_P}lock WHERE id = 1 FOR UPDATE"
                )
                while cur.nextset():  # the results of the last statement: the locked row
                    pass
                if cur.description is None or cur.fetchone() is None:
                    # without its row nothing would serialise the writers
                    raise LedgerCorruptError(
                        f"the ledger {self.path!r} lost the row of gpframe_lock that orders its "
                        "writers (it was deleted outside gpframe); restore the database and run "
                        "session.ledger.verify(). Nothing was charged."
                    )
            else:
                self.con.execute(begin)
        except LedgerCorruptError:
            self._rollback()
            raise
        except errors.LockNotAvailable as exc:
            self._rollback()
            raise LedgerError(
                f"the ledger {self.path!r} is locked by another writer for longer than "
                f"{self.timeout:g} s; retry, or raise Session(timeout=...). Nothing was charged."
            ) from exc
        except self._Error as exc:
            self._rollback()
            raise self._failed(exc) from exc
        try:
            yield
        except BaseException as exc:
            self._rollback()
            if isinstance(exc, (errors.UndefinedTable, errors.UndefinedColumn)):
                raise LedgerCorruptError(
                    f"the ledger database {self.path!r} lost part of its schema ({exc}); restore "
                    "it from a backup and run session.ledger.verify(). Nothing was charged."
                ) from exc
            if isinstance(exc, self._Error):
                raise self._failed(exc) from exc
            raise
        try:
            self.con.execute("COMMIT")
        except self._Error as exc:
            self._rollback()
            # a connection lost during COMMIT leaves the outcome unknown: a retry with the same
            # charge_id is then a replay if it did commit (docs/ledger.md, failure semantics)
            raise LedgerError(
                f"the ledger {self.path!r} could not commit ({str(exc).strip()}). Nothing was "
                "charged, unless the connection was lost during the commit: retry with the same "
                "charge_id to find out."
            ) from exc

    def _failed(self, exc: Exception) -> LedgerError | InvalidInputError:
        """Return the gpframe error for a server error inside a transaction (rolled back)."""
        if isinstance(exc, self._psycopg.DataError) and "NUL" in str(exc):
            # SQLite stores NUL inside text; PostgreSQL's text type cannot
            return InvalidInputError(
                "a query name, charge_id or other text given to the ledger holds a NUL character "
                f"(\\x00), which a PostgreSQL ledger ({self.path!r}) cannot store; remove it. "
                "Nothing was charged."
            )
        if isinstance(exc, self._errors.InsufficientPrivilege):
            return LedgerError(
                f"the database role of {self.path!r} may not do this ({str(exc).strip()}): "
                "connect as a role that may write the gpframe_* tables, or open the ledger with "
                "readonly=True to read it. Nothing was charged."
            )
        return LedgerError(
            f"the ledger database {self.path!r} failed ({str(exc).strip()}); retry. Nothing was "
            "charged."
        )

    def _rollback(self) -> None:
        with contextlib.suppress(self._Error):
            if not self.con.closed and self.con.info.transaction_status != 0:  # not IDLE
                self.con.execute("ROLLBACK")

    def write(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive write transaction across processes and hosts.

        Why a row lock: every writer first runs ``SELECT ... FOR UPDATE`` on the single row of
        ``gpframe_lock``, so writers of one ledger run one at a time wherever they are, and as
        READ COMMITTED gives each later statement a fresh snapshot, a writer reads everything
        committed before it got the lock (what SQLite's ``BEGIN IMMEDIATE`` gives). The lock
        belongs to the ledger's own table, so two ledgers in two schemas of one database do
        not wait for each other (an advisory lock key is database-wide), it goes with the
        transaction (commit, rollback, or a client that died: the server ends its session),
        and ``lock_timeout`` bounds the wait. REPEATABLE READ or SERIALIZABLE writers would
        instead fail and retry on conflicts, which the ledger's all-or-nothing bulk reserve
        does not need.
        """
        if self.readonly:
            raise LedgerError(
                f"the ledger {self.path!r} was opened read-only; open it with Session(path) (the "
                "URL) to reserve, charge or change budgets. Nothing was charged."
            )
        return self._txn("BEGIN ISOLATION LEVEL READ COMMITTED", "write")

    def read(self) -> contextlib.AbstractContextManager[None]:
        """Open a consistent read snapshot (REPEATABLE READ, READ ONLY)."""
        return self._txn("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "read")

    # -- meta and users -------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        """All meta entries."""
        return dict(self.con.execute(f"SELECT key, value FROM {_P}meta").fetchall())

    def set_meta(self, items: dict[str, str]) -> None:
        """Insert or replace meta entries."""
        with self.con.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {_P}meta(key, value) VALUES (%s, %s) ON CONFLICT(key) DO UPDATE"
                " SET value = excluded.value",
                list(items.items()),
            )

    def users_from(self, start: int) -> list[Any]:
        """User ids with index >= ``start``, in index order (indices are dense)."""
        rows = self._binary(
            f"SELECT start, n, kind, ids FROM {_P}users WHERE start + n > %s ORDER BY start",
            (start,),
        )
        out: list[Any] = []
        at = rows[0][0] if rows else start
        if at > start:
            at = -1  # a gap before the first batch
        for first, n, kind, ids in rows:
            if first != at:
                raise LedgerCorruptError(
                    "the ledger's user index has gaps; run session.ledger.verify() and restore "
                    "the database from a backup. Nothing was charged."
                )
            out.extend(_decode_users(kind, n, bytes(ids)))
            at = first + n
        return out[start - rows[0][0] :] if rows else out

    def add_users(self, start: int, uids: Sequence[Any]) -> None:
        """Append users with indices ``start, start + 1, ...`` as one batch (one row)."""
        if len(uids) == 0:
            return
        kind, ids = _encode_users(uids)
        self.con.execute(
            f"INSERT INTO {_P}users(start, n, kind, ids) VALUES (%s, %s, %s, %s)",
            (start, len(uids), kind, ids),
        )

    def _binary(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query whose results come back in binary (blobs without hex decoding)."""
        with self.con.cursor(binary=True) as cur:
            cur.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall()

    # -- chunks ---------------------------------------------------------------------------
    def read_chunks(
        self, notion: str, chunks: Sequence[int]
    ) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
        """Spent and budget-override arrays of the given chunks that exist."""
        rows = self._binary(
            f"SELECT chunk, spent, budget FROM {_P}chunks WHERE notion = %s AND chunk ="
            " ANY(%s::bigint[])",
            (notion, [int(c) for c in chunks]),
        )
        return {c: (_arr(s), None if b is None else _arr(b)) for c, s, b in rows}

    def write_chunks(
        self, notion: str, chunks: dict[int, tuple[np.ndarray, np.ndarray | None]]
    ) -> None:
        """Insert or replace whole chunks (one statement for all of them)."""
        if not chunks:
            return
        self.con.execute(
            f"INSERT INTO {_P}chunks(notion, chunk, spent, budget) SELECT %s, c, s, b FROM"
            " unnest(%s::bigint[], %s::bytea[], %s::bytea[]) AS t(c, s, b) ON CONFLICT(notion,"
            " chunk) DO UPDATE SET spent = excluded.spent, budget = excluded.budget",
            (
                notion,
                [int(c) for c in chunks],
                [_blob(s) for s, _ in chunks.values()],
                [None if b is None else _blob(b) for _, b in chunks.values()],
            ),
        )

    def all_chunks(self, notion: str) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
        """Every chunk of a notion."""
        rows = self._binary(
            f"SELECT chunk, spent, budget FROM {_P}chunks WHERE notion = %s", (notion,)
        )
        return {c: (_arr(s), None if b is None else _arr(b)) for c, s, b in rows}

    # -- reservations, queries, charges ---------------------------------------------------
    _RCOLS = "id, notion, query_id, charge_id, kind, created, pid, host, token, idx, alloc"

    @staticmethod
    def _rrow(r: tuple) -> ReservationRow:
        return ReservationRow(*r[:9], _arr(r[9]), _arr(r[10]))

    def reservations(self, notion: str | None = None) -> list[ReservationRow]:
        """Open reservations (of one notion, or all)."""
        q = f"SELECT {self._RCOLS} FROM {_P}reservations"
        rows = (
            self._binary(q) if notion is None else self._binary(q + " WHERE notion = %s", (notion,))
        )
        return [self._rrow(r) for r in rows]

    def reservation(self, rid: str) -> ReservationRow | None:
        """One open reservation, or None when it was settled or cancelled."""
        rows = self._binary(f"SELECT {self._RCOLS} FROM {_P}reservations WHERE id = %s", (rid,))
        return self._rrow(rows[0]) if rows else None

    def has_reservation(self, rid: str) -> bool:
        """Tell whether reservation ``rid`` is open (without reading its blobs)."""
        q = f"SELECT 1 FROM {_P}reservations WHERE id = %s"
        return self.con.execute(q, (rid,)).fetchone() is not None

    def add_reservation(self, row: ReservationRow) -> None:
        """Store an open reservation (its users and allocations as two int64 blobs)."""
        self.con.execute(
            f"INSERT INTO {_P}reservations({self._RCOLS}) VALUES"
            " (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                row.id, row.notion, row.query_id, row.charge_id, row.kind, row.created,
                row.pid, row.host, row.token, _blob(row.idx), _blob(row.alloc),
            ),
        )  # fmt: skip

    def delete_reservation(self, rid: str) -> None:
        """Remove a settled or cancelled reservation."""
        self.con.execute(f"DELETE FROM {_P}reservations WHERE id = %s", (rid,))

    def add_query(
        self, qid: str, name: str, notion: str, kind: str, params: str, created: str
    ) -> None:
        """Record a query (its name, notion, mechanism kind and parameters)."""
        self.con.execute(
            f"INSERT INTO {_P}queries(id, name, notion, kind, params, created)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
            (qid, name, notion, kind, params, created),
        )

    def queries(self) -> dict[str, str]:
        """Query id -> query name."""
        return dict(self.con.execute(f"SELECT id, name FROM {_P}queries").fetchall())

    def query_params(self, qid: str) -> str | None:
        """Return the recorded parameters (JSON text) of query ``qid``, or None if unknown."""
        r = self.con.execute(f"SELECT params FROM {_P}queries WHERE id = %s", (qid,)).fetchone()
        return None if r is None else str(r[0])

    _CCOLS = (
        "charge_id, reservation_id, query_id, notion, kind, created, idx, amount, digest, alloc"
    )

    @staticmethod
    def _crow(r: tuple) -> ChargeRow:
        return ChargeRow(*r[:6], _arr(r[6]), _arr(r[7]), r[8], None if r[9] is None else _arr(r[9]))

    def charge(self, charge_id: str) -> ChargeRow | None:
        """Return a committed charge by id, or None."""
        rows = self._binary(
            f"SELECT {self._CCOLS} FROM {_P}charges WHERE charge_id = %s", (charge_id,)
        )
        return self._crow(rows[0]) if rows else None

    def add_charge(self, row: ChargeRow) -> None:
        """Store a committed charge."""
        self.con.execute(
            f"INSERT INTO {_P}charges({self._CCOLS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                row.charge_id, row.reservation_id, row.query_id, row.notion, row.kind,
                row.created, _blob(row.idx), _blob(row.amount), row.digest,
                None if row.alloc is None else _blob(row.alloc),
            ),
        )  # fmt: skip

    def charges(self, notion: str | None = None) -> Iterator[ChargeRow]:
        """All committed charges (of one notion, or all), oldest first."""
        q = f"SELECT {self._CCOLS} FROM {_P}charges"
        rows = (
            self._binary(q + " ORDER BY pos")
            if notion is None
            else self._binary(q + " WHERE notion = %s ORDER BY pos", (notion,))
        )
        for r in rows:
            yield self._crow(r)

    # -- audit ----------------------------------------------------------------------------
    def audit_head(self) -> tuple[int, str]:
        """(sequence number, hash) of the last audit row; (0, GENESIS) when empty."""
        r = self.con.execute(
            f"SELECT seq, hash FROM {_P}audit ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (0, GENESIS) if r is None else (int(r[0]), str(r[1]))

    def add_audit(self, created: str, op: str, content: str, digest: str) -> int:
        """Append an audit row numbered after the last one (under the write lock); its seq."""
        r = self.con.execute(
            f"INSERT INTO {_P}audit(seq, created, op, content, hash) SELECT coalesce(max(seq),"
            f" 0) + 1, %s, %s, %s, %s FROM {_P}audit RETURNING seq",
            (created, op, content, digest),
        ).fetchone()
        return int(r[0])

    def audit_tail(self) -> list[tuple[int, str, str]]:
        """Return the last two audit rows, newest first: (seq, content, hash)."""
        rows = self.con.execute(
            f"SELECT seq, content, hash FROM {_P}audit ORDER BY seq DESC LIMIT 2"
        ).fetchall()
        return [(int(a), b, c) for a, b, c in rows]

    def audit_hash(self, seq: int) -> str | None:
        """Return the hash of audit row ``seq``, or None when there is no such row."""
        r = self.con.execute(f"SELECT hash FROM {_P}audit WHERE seq = %s", (seq,)).fetchone()
        return None if r is None else str(r[0])

    def n_charges(self) -> int:
        """How many charges are committed."""
        return int(self.con.execute(f"SELECT count(*) FROM {_P}charges").fetchone()[0])

    def audit(self) -> Iterator[tuple[int, str, str, str, str]]:
        """Audit rows in order: (seq, created, op, content, hash)."""
        rows = self.con.execute(
            f"SELECT seq, created, op, content, hash FROM {_P}audit ORDER BY seq"
        ).fetchall()
        for seq, created, op, content, h in rows:
            yield int(seq), created, op, content, h

    # -- whole-store ----------------------------------------------------------------------
    def digest(self) -> str:
        """sha256 over every table's content in a fixed order (reads the whole ledger)."""
        h = hashlib.sha256()
        for name in sorted(set(_TABLES) - {"lock"}):
            for row in self.con.execute(f"SELECT * FROM {_P}{name} ORDER BY 1, 2"):
                h.update(repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in row))
                         .encode())  # fmt: skip
            h.update(b"\x00" + name.encode())
        return h.hexdigest()

    def integrity(self) -> str:
        """'ok' when every ledger table is there and readable (the server checks its pages)."""
        missing = set(_TABLES) - self._tables()
        if missing:
            return f"missing tables {sorted(missing)}"
        for name in _TABLES:
            self.con.execute(f"SELECT count(*) FROM {_P}{name}").fetchone()
        return "ok"

    def close(self) -> None:
        """Close the connection; the server rolls back an open transaction."""
        self._closed = True
        self.con.close()
