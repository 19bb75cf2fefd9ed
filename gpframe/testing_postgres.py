"""A throwaway PostgreSQL server for tests and benchmarks of the PostgreSQL ledger.

:class:`TempPostgres` runs ``initdb`` into a temporary directory and starts the server on a
Unix socket in that directory only (``listen_addresses=''``: nothing listens on the network),
with ``trust`` authentication for local connections, and removes everything on :meth:`stop`.
PostgreSQL refuses to run as root, so when this process is root the server's files belong to
the ``postgres`` system user and its commands run through ``runuser -u postgres --``.

By default the server runs with ``fsync=off`` to keep the tests fast: the tests kill clients,
never the server, and a client's commit is acknowledged by the server process either way. A
production server keeps ``fsync=on`` (``docs/ledger.md``); so do the benchmarks
(``TempPostgres(fsync=True)``), to compare with SQLite's ``synchronous=FULL``.

Examples
--------
>>> with TempPostgres() as pg:  # doctest: +SKIP
...     url = pg.new_database()
...     import gpframe as gp
...     with gp.Session(url, budget=gp.GP(eps=1.0)) as s:
...         print(s.remaining([1]).tolist())
[1.0]
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["PostgresUnavailable", "TempPostgres", "find_pg_bin"]


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server programs (``initdb``, ``pg_ctl``) are not installed."""


def find_pg_bin() -> Path:
    """Return the directory holding ``initdb`` and ``pg_ctl``.

    PATH first, then Debian's ``/usr/lib/postgresql/<version>/bin`` (newest version).
    """
    found = shutil.which("pg_ctl")
    if found:
        d = Path(os.path.realpath(found)).parent
        if (d / "initdb").exists():
            return d
    cands = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")],
    )
    for p in reversed(cands):
        if (Path(p).parent / "initdb").exists():
            return Path(p).parent
    raise PostgresUnavailable(
        "the PostgreSQL server programs (initdb, pg_ctl) were not found on PATH or in "
        "/usr/lib/postgresql/*/bin; install them (Debian: apt-get install -y postgresql; "
        ".ci/run does it on CI)."
    )


class TempPostgres:
    """Start a private PostgreSQL server in a temporary directory (see the module docstring)."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.bin = find_pg_bin()
        self.fsync = bool(fsync)
        self.root: Path | None = None
        self._names = itertools.count()
        self._as_postgres = os.geteuid() == 0

    # -- commands ---------------------------------------------------------------------------
    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=120, cwd="/"
        )

    def _check(self, out: subprocess.CompletedProcess[str], what: str) -> None:
        if out.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "log").exists():
                log = (self.root / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(
                f"PostgreSQL {what} failed ({out.returncode}): {out.stderr.strip()}\n{log}"
            )

    def start(self) -> TempPostgres:
        """Create the cluster (initdb) and start the server; return self."""
        # a short path: a Unix socket path must stay under 108 bytes
        self.root = Path(tempfile.mkdtemp(prefix="gpf-pg-", dir="/tmp"))
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        try:
            self._check(
                self._run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres",
                          "-E", "UTF8", "--locale=C", "--no-sync"),
                "initdb",
            )  # fmt: skip
            opts = (
                f"-c listen_addresses='' -c unix_socket_directories='{self.root}' "
                + ("" if self.fsync else "-c fsync=off -c full_page_writes=off ")
                + "-c max_connections=60 "
                "-c shared_buffers=64MB"
            )
            self._check(
                self._run("pg_ctl", "-D", str(data), "-l", str(self.root / "log"), "-o", opts,
                          "-w", "-t", "60", "start"),
                "start",
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (immediately) and remove its directory."""
        if self.root is None:
            return
        if (self.root / "data" / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- databases --------------------------------------------------------------------------
    def url(self, dbname: str = "postgres") -> str:
        """Return the URL of database ``dbname`` (user ``postgres``, over the socket)."""
        return f"postgresql://postgres@/{dbname}?host={self.root}"

    def sql(self, statement: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) and return its rows (none for a command)."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as con:
            cur = con.execute(statement)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def new_database(self) -> str:
        """Create an empty database with a fresh name; return its URL."""
        name = f"t{next(self._names)}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)
