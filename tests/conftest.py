"""Shared fixtures. Tests may use seeded randomness: enable it for the whole run.

Seeded sources are enabled by calling ``gpframe.testing.enable_seeded()`` (there is no environment
variable); a child process started by a test must call it itself if it uses ``seeded_rng``.
"""

import pytest

import gpframe.testing

gpframe.testing.enable_seeded()  # for collection-time use (module-level seeded draws)


@pytest.fixture(autouse=True)
def _seeded_sources_enabled():
    """Every test starts, and leaves the process, with seeded sources enabled.

    A test that checks the refusal disables them (``gpframe.testing.seeded_disabled()``); this
    fixture restores them so later tests and doctests are unaffected.
    """
    gpframe.testing.enable_seeded()
    yield
    gpframe.testing.enable_seeded()


@pytest.fixture
def no_seeded():
    """As outside tests: seeded sources are refused in this test (enabled again afterwards)."""
    with gpframe.testing.seeded_disabled():
        yield


# ---- ledger stores: SQLite and a real PostgreSQL server ------------------------------------------
@pytest.fixture(scope="session")
def pg_server():
    """A private PostgreSQL server for the whole run, started on first use, stopped at the end.

    Missing server programs fail the tests that need them (never a skip): the PostgreSQL ledger
    is part of the default run, and ``.ci/run`` installs Debian's ``postgresql`` when needed.
    """
    from gpframe.testing_postgres import PostgresUnavailable, TempPostgres

    try:
        server = TempPostgres()
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a new, empty database on the test server (one per test)."""
    return pg_server.new_database()


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_path(request, tmp_path):
    """Where a persistent ledger lives: an SQLite file path, or a PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_where(request):
    """The ``path`` of a scratch ledger: ``None`` (SQLite in memory) or a PostgreSQL URL."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_url")


class RawLedger:
    """Plain SQL on a ledger's tables, bypassing gpframe (to tamper with it in tests).

    Statements name tables as ``{meta}``, ``{chunks}``, ... and parameters as ``?``; the names
    and the parameter style are translated for PostgreSQL (``gpframe_`` prefix, ``%s``).
    """

    TABLES = ("meta", "users", "chunks", "queries", "reservations", "charges", "audit", "lock")

    def __init__(self, path):
        self.path = str(path)
        self.pg = self.path.startswith("postgresql://")
        if self.pg:
            import psycopg

            self.con = psycopg.connect(self.path, autocommit=True)
        else:
            import sqlite3

            self.con = sqlite3.connect(self.path, isolation_level=None)

    def __call__(self, statement, params=()):
        names = {t: (f"gpframe_{t}" if self.pg else t) for t in self.TABLES}
        sql = statement.format(**names)
        if self.pg:
            sql = sql.replace("?", "%s")
        cur = self.con.execute(sql, (params or None) if self.pg else params)
        return cur.fetchall() if cur.description else []

    def close(self):
        self.con.close()


@pytest.fixture
def raw():
    """``raw(path)`` opens a :class:`RawLedger`; every one is closed after the test."""
    opened = []

    def open_(path):
        opened.append(RawLedger(path))
        return opened[-1]

    yield open_
    for r in opened:
        r.close()
