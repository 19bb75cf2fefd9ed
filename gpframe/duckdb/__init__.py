"""The DuckDB face: ``gp.duckdb.register(con, session)``, the SQL functions and relation helpers.

:mod:`~gpframe.duckdb.register` installs the ``gp_*`` functions and macros on a connection;
one module per operation (``privatize``, ``range_count``, ``kde``, ``knn``, ``grid``) holds
its SQL functions and its relation helper; :mod:`~gpframe.duckdb.udf` holds the per-connection
registry and the UDF batch plumbing (every batch goes through :func:`gpframe.ledger.run.run`),
:mod:`~gpframe.duckdb.relations` the relation helpers' shared checks, and
:func:`~gpframe.duckdb.preview.preview` what a query would charge (nothing drawn or
written). The SQL files are in ``gpframe/duckdb/sql/``.
"""

from pathlib import Path

from gpframe.duckdb.grid import clip_user
from gpframe.duckdb.grid_user import grid_stats
from gpframe.duckdb.kde import kde_raster
from gpframe.duckdb.knn import convex_hulls, knn, nearest_users
from gpframe.duckdb.preview import preview
from gpframe.duckdb.privatize import Registration, privatize
from gpframe.duckdb.range_count import range_count
from gpframe.duckdb.register import register

#: the folder of the shipped SQL files (``privatize.sql``, ``grid_stats.sql``, ...), e.g.
#: ``con.execute((gp.duckdb.SQL_DIR / "grid_stats.sql").read_text())`` after ``register``
SQL_DIR = Path(__file__).resolve().parent / "sql"

__all__ = [
    "SQL_DIR",
    "Registration",
    "clip_user",
    "convex_hulls",
    "grid_stats",
    "kde_raster",
    "knn",
    "nearest_users",
    "preview",
    "privatize",
    "range_count",
    "register",
]
