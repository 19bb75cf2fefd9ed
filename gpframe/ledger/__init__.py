"""The ledger: per-user privacy filters, their store and the audit log (``docs/ledger.md``)."""

from gpframe.ledger.pg_store import PostgresStore
from gpframe.ledger.session import Ledger, Reservation, Session
from gpframe.ledger.store import SqliteStore, Store

__all__ = ["Ledger", "PostgresStore", "Reservation", "Session", "SqliteStore", "Store"]
