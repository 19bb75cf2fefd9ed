"""The ledger: per-user privacy filters, their store and the audit log (``docs/ledger.md``)."""

from gpframe.ledger.session import Ledger, Reservation, Session
from gpframe.ledger.store import SqliteStore, Store

__all__ = ["Ledger", "Reservation", "Session", "SqliteStore", "Store"]
