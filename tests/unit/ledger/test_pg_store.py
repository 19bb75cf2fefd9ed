"""What only the PostgreSQL store has: URLs, the writers' row lock, schemas, server failures.

The behaviour it shares with SQLite is tested on both stores by the session, store, integrity and
torture suites (``ledger_path`` / ``ledger_where`` in tests/conftest.py); these tests use the
private server of ``pg_server`` (gpframe.testing_postgres).
"""

from __future__ import annotations

import threading
import time
from fractions import Fraction

import psycopg
import pytest

import gpframe as gp
from gpframe.errors import LedgerCorruptError, LedgerError
from gpframe.ledger import Session
from gpframe.ledger.pg_store import PostgresStore, is_postgres_url, redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ann:s3cr%40t@db:5432/l", "postgresql://ann:***@db:5432/l"),
        ("postgres://ann@db/l?password=s3cret&sslmode=require",
         "postgres://ann@db/l?password=***&sslmode=require"),
        ("postgresql:///l?host=/run/pg", "postgresql:///l?host=/run/pg"),
    ],
)  # fmt: skip
def test_messages_show_the_url_without_its_password(url, shown):
    assert redact(url) == shown
    assert is_postgres_url(url) and not is_postgres_url("ledger.sqlite")


def test_a_failed_connection_names_the_url_without_the_password(pg_server):
    url = f"postgresql://postgres:hunter2@/missing_db?host={pg_server.root}"
    with pytest.raises(LedgerError, match="missing_db") as info:
        Session(url, budget=gp.GP(eps=1))
    assert "hunter2" not in str(info.value) and "postgres:***@" in str(info.value)


def test_a_writer_waits_for_the_lock_then_gives_up_without_charging(pg_url):
    with Session(pg_url, budget=gp.GP(eps=1)) as s:
        with s.reserve([1], 0.25) as r:
            r.charge(0.25)
        before = s.ledger.snapshot()
        with psycopg.connect(pg_url) as holder:  # another host's writer, mid-transaction
            holder.execute("SELECT id FROM gpframe_lock FOR UPDATE")
            s.ledger.store.timeout = 0.3
            t = time.perf_counter()
            with pytest.raises(LedgerError, match="locked by another writer"):
                s.reserve([1, 2], 0.25)
            assert time.perf_counter() - t < 5
            assert s.remaining([1]).tolist() == [0.75]  # readers do not wait
        assert s.ledger.snapshot() == before
        s.ledger.store.timeout = 60.0
        with s.reserve([1, 2], 0.25) as r:  # the lock is free again
            r.charge(0.25)
        assert s.spent_exact([1, 2]).tolist() == [Fraction(1, 2), Fraction(1, 4)]


def test_writers_of_two_threads_are_serialised(pg_url):
    Session(pg_url, budget=gp.GP(eps=1)).close()
    errors = []

    def work(k):
        try:
            with Session(pg_url) as s:
                for i in range(20):
                    with s.reserve([0, 1, 2], 0.02, query="t", charge_id=f"{k}-{i}") as r:
                        r.charge(0.02)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with Session(pg_url) as s:
        # 60 x 0.02 asked of a budget of 1: exactly 50 admitted per user, never more
        assert s.spent_exact([0, 1, 2]).tolist() == [Fraction(1)] * 3
        assert s.ledger.verify()["charges"] == 60


def test_two_ledgers_in_two_schemas_of_one_database(pg_url, raw):
    db = raw(pg_url)
    db("CREATE SCHEMA team_a")
    db("CREATE SCHEMA team_b")
    a, b = (f"{pg_url}&options=-csearch_path%3D{name}" for name in ("team_a", "team_b"))
    with Session(a, budget=gp.GP(eps=1)) as sa, Session(b, budget=gp.GP(eps=2)) as sb:
        with sa.reserve(["ann"], 0.5) as r:
            r.charge(0.5)
        assert sa.remaining(["ann"]).tolist() == [0.5]
        assert sb.remaining(["ann"]).tolist() == [2.0]
    tables = db("SELECT table_schema, count(*) FROM information_schema.tables WHERE table_name "
                "LIKE 'gpframe%' GROUP BY 1 ORDER BY 1")  # fmt: skip
    assert tables == [("team_a", 8), ("team_b", 8)]


def test_readonly_session_cannot_write_even_through_its_connection(pg_url):
    with Session(pg_url, budget=gp.GP(eps=1)) as s:
        with s.reserve(["ann"], 0.5) as r:
            r.charge(0.5)
        before = s.ledger.snapshot()
    with Session(pg_url, readonly=True) as ro:
        assert ro.remaining(["ann"]).tolist() == [0.5]
        with pytest.raises(LedgerError, match=r"read-only.*Session\(path\)"):
            ro.reserve(["ann"], 0.1)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            ro.ledger.store.con.execute("DELETE FROM gpframe_charges")
        assert ro.ledger.snapshot() == before


def test_readonly_or_create_false_on_an_empty_database_creates_nothing(pg_url, raw):
    for kw in ({"readonly": True}, {"create": False, "budget": gp.GP(eps=1)}):
        with pytest.raises(LedgerCorruptError, match="holds no gpframe ledger"):
            Session(pg_url, **kw)
    assert raw(pg_url)("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE "
                       "'gpframe%'") == [(0,)]  # fmt: skip


def test_first_opens_at_once_create_the_tables_once(pg_url):
    errors, stores = [], []

    def open_():
        try:
            stores.append(PostgresStore(pg_url))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(s.created for s in stores) == 1
    for s in stores:
        s.close()


def test_a_connection_killed_by_the_server_raises_charges_nothing_and_reconnects(pg_url, raw):
    with Session(pg_url, budget=gp.GP(eps=1)) as s:
        with s.reserve(["ann"], 0.25) as r:
            r.charge(0.25)
        before = s.ledger.snapshot()
        pid = s.ledger.store.con.info.backend_pid
        raw(pg_url)(f"SELECT pg_terminate_backend({pid})")
        with pytest.raises(LedgerError, match="Nothing was charged"):
            s.reserve(["ann", "bob"], 0.25)
        assert s.ledger.snapshot() == before  # a new connection: the session goes on
        with s.reserve(["bob"], 0.5) as r:
            r.charge(0.5)
    with Session(pg_url) as s:
        assert s.spent_exact(["ann", "bob"]).tolist() == [Fraction(1, 4), Fraction(1, 2)]
        assert s.ledger.verify()["charges"] == 2


def test_a_sessions_repr_hides_the_password(pg_url):
    url = pg_url.replace("postgres@", "postgres:hunter2@")  # trust auth: any password works
    with Session(url, budget=gp.GP(eps=1)) as s:
        assert "hunter2" not in repr(s) and "postgres:***@" in repr(s)


def test_a_deleted_lock_row_is_refused_not_ignored(pg_url, raw):
    with Session(pg_url, budget=gp.GP(eps=1)) as s:
        raw(pg_url)("DELETE FROM gpframe_lock")
        before = s.ledger.snapshot()
        with pytest.raises(LedgerCorruptError, match="gpframe_lock"):
            s.reserve([1], 0.5)
        assert s.ledger.snapshot() == before
        raw(pg_url)("INSERT INTO gpframe_lock VALUES (1)")


def test_a_reader_role_reads_and_is_told_why_it_cannot_write(pg_server, pg_url):
    """The roles of docs/ledger.md: the reader reads (read-only) and may not open for writing."""
    db = pg_url.split("@/", 1)[1].split("?")[0]
    Session(pg_url, budget=gp.GP(eps=1)).close()
    pg_server.sql("DO $$ BEGIN CREATE ROLE gpframe_reader LOGIN; EXCEPTION WHEN duplicate_object "
                  "THEN NULL; END $$")  # fmt: skip
    pg_server.sql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO gpframe_reader", db)
    reader = pg_url.replace("postgres@", "gpframe_reader@")
    with Session(reader, readonly=True) as ro:
        assert ro.remaining([1]).tolist() == [1.0]
    with pytest.raises(LedgerError, match=r"may not do this.*readonly=True"):
        Session(reader)


def test_a_nul_in_a_query_name_is_refused_clearly_and_charges_nothing(pg_url):
    with Session(pg_url, budget=gp.GP(eps=1)) as s:
        before = s.ledger.snapshot()
        for kw in ({"query": "a\x00b"}, {"charge_id": "job\x00"}):
            with pytest.raises(gp.InvalidInputError, match="NUL character"):
                s.reserve([1, "new"], 0.1, **kw)
        assert s.ledger.snapshot() == before
        with s.reserve([1, "new"], 0.1, query="ab") as r:  # the in-memory index is intact
            r.charge(0.1)
        assert s.ledger.verify()["users"] == 2
