"""The PostgreSQL ledger's layout: its tables, how user ids are stored, its URLs.

The layout mirrors the SQLite store's (:mod:`gpframe.ledger.store`) table for table, each table
prefixed ``gpframe_`` and kept in the connection's current schema (``public`` unless the URL sets
``options=-csearch_path=...``), so one database can hold several ledgers, one per schema
(``docs/ledger.md``, "PostgreSQL ledger"):

``gpframe_users(start, n, kind, ids)``
    The users in batches, one row per batch of first-seen users (indices ``start`` to
    ``start + n - 1``): ``kind`` ``"i64"`` keeps an int64 batch as one little-endian blob (10**6
    new users are one 8 MB value, not 10**6 rows and index entries); ``"tagged"`` keeps each id
    with its type, ``b"i"`` + 8 bytes (int64), ``b"s"`` + UTF-8 (str; PostgreSQL ``text``
    cannot hold NUL) or ``b"u"`` + 8 bytes (a uint64 above int64), each behind its 4-byte length.
    User ``1`` and user ``"1"`` stay two users; the SQLite store keeps the same batches
    (:func:`gpframe.ledger.keys.encode_users`). Uniqueness is the ledger's to keep: it looks
    every id up under the write lock before it adds one, and the audit log's ``state`` hashes
    every id in order.
``gpframe_chunks``, ``gpframe_reservations``, ``gpframe_charges``
    The same little-endian int64 blobs as the SQLite store (``bytea``); charges keep their
    insertion order in an identity column ``pos``.
``gpframe_queries``, ``gpframe_audit``, ``gpframe_meta``
    As in SQLite; the audit's ``seq`` is ``max(seq) + 1`` under the write lock (a sequence
    would leave gaps on rollback, and the chain's rows are numbered without gaps).
``gpframe_lock``
    One row, locked ``FOR UPDATE`` by every write transaction (see
    :meth:`gpframe.ledger.pg_store.PostgresStore.write`).

Examples
--------
>>> redact("postgresql://ann:s3cret@db.example.org/ledger")
'postgresql://ann:***@db.example.org/ledger'
>>> is_postgres_url("postgresql:///ledger?host=/run/postgresql"), is_postgres_url("l.sqlite")
(True, False)
"""

from __future__ import annotations

import re

from gpframe.ledger.keys import uid_from_bytea, uid_to_bytea

__all__ = ["is_postgres_url", "redact", "uid_from_bytea", "uid_to_bytea"]

_SCHEMES = ("postgresql://", "postgres://")
_P = "gpframe_"
_TABLES = {
    "meta": f"CREATE TABLE {_P}meta(key text PRIMARY KEY, value text NOT NULL)",
    "users": (
        f"CREATE TABLE {_P}users(start bigint PRIMARY KEY, n bigint NOT NULL CHECK (n > 0),"
        " kind text NOT NULL, ids bytea NOT NULL)"
    ),
    "chunks": (
        f"CREATE TABLE {_P}chunks(notion text NOT NULL, chunk bigint NOT NULL, spent bytea NOT"
        " NULL, budget bytea, PRIMARY KEY(notion, chunk))"
    ),
    "queries": (
        f"CREATE TABLE {_P}queries(id text PRIMARY KEY, name text NOT NULL, notion text NOT"
        " NULL, kind text NOT NULL, params text NOT NULL, created text NOT NULL)"
    ),
    "reservations": (
        f"CREATE TABLE {_P}reservations(id text PRIMARY KEY, notion text NOT NULL, query_id"
        " text NOT NULL, charge_id text NOT NULL, kind text NOT NULL, created text NOT NULL,"
        " pid bigint NOT NULL, host text NOT NULL, token text NOT NULL, idx bytea NOT NULL,"
        " alloc bytea NOT NULL)"
    ),
    "charges": (
        f"CREATE TABLE {_P}charges(pos bigint GENERATED ALWAYS AS IDENTITY, charge_id text"
        " PRIMARY KEY, reservation_id text NOT NULL, query_id text NOT NULL, notion text NOT"
        " NULL, kind text NOT NULL, created text NOT NULL, idx bytea NOT NULL, amount bytea NOT"
        " NULL, digest text NOT NULL, alloc bytea)"
    ),
    "audit": (
        f"CREATE TABLE {_P}audit(seq bigint PRIMARY KEY, created text NOT NULL, op text NOT"
        " NULL, content text NOT NULL, hash text NOT NULL)"
    ),
    "lock": f"CREATE TABLE {_P}lock(id int PRIMARY KEY)",
}
# int64 blobs of up to 8 MB per 10**6 users: stored out of line uncompressed (EXTERNAL), as
# pglz spends about a second per reservation compressing them for little gain
_EXTERNAL = {
    "users": ("ids",),
    "chunks": ("spent", "budget"),
    "reservations": ("idx", "alloc"),
    "charges": ("idx", "amount", "alloc"),
}


def is_postgres_url(path: object) -> bool:
    """Tell whether ``path`` is a ``postgresql://`` (or ``postgres://``) connection URL."""
    return isinstance(path, str) and path.startswith(_SCHEMES)


def redact(url: str) -> str:
    """Return ``url`` with its password (in the authority or a ``password=`` query) masked."""
    out = re.sub(r"^([a-z]+://[^/@:?#]*):[^/@?#]*@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", out)
