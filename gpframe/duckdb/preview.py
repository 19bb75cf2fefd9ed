"""``gp.duckdb.preview(con, sql)``: what a SQL query would charge, without running its releases.

See ``docs/ledger.md`` ("Previewing a query") and ``docs/sql.md``. The query runs with every
gpframe function planned instead of released: each Arrow batch's reservation is computed
read-only by the ledger driver (:func:`gpframe.ledger.run.run`), no noise is drawn, the ledger
is not written, and the functions return NULL. The :class:`~gpframe.results.Preview` sums the
batches: a user with rows in several batches is planned for each, as the real query reserves
them (the SQL functions charge per row, ``per="point"``).
"""

from __future__ import annotations

from typing import Any

from gpframe.duckdb import udf as _u
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import PreviewPlan
from gpframe.results.preview import Preview, build

__all__ = ["preview"]

#: queries whose charge is adaptive (they charge the rounds run, at most the reservation)
_ADAPTIVE = ("gp_in_region", "gp_kde_contribution")


def _session(con: Any) -> Any:
    import importlib

    for name in ("privatize", "range_count", "kde", "knn", "grid"):  # modules, not helpers
        reg = importlib.import_module(f"gpframe.duckdb.{name}")._REGISTRY.get(con)
        if reg is not None:
            return reg.session
    raise InvalidInputError(
        "gp.duckdb.preview needs the gpframe functions on this connection: call "
        "gp.duckdb.register(con, session) first. Nothing was charged."
    )


def preview(con: Any, sql: str, params: Any = None) -> Preview:
    """Preview a SELECT: each user's planned charge, who would get NULL, the budget left.

    Runs ``sql`` with every gpframe function planned instead of run: nothing is drawn, charged
    or written to the ledger (its snapshot and audit log are unchanged), and the functions
    return NULL, so the rows fetched are discarded. Only one SELECT statement is accepted (a
    ``CREATE TABLE ... AS`` would store the NULLs). While it runs, other SQL queries charging
    the same Session from other connections are planned too: preview when nothing else runs.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection with ``gp.duckdb.register(con, session)``.
    sql : str
        One SELECT statement, exactly as it would be run.
    params : list or dict, optional
        Its prepared-statement parameters.

    Returns
    -------
    gpframe.results.Preview
        Curator-side (it names users): the per-user allocation summed over the query's batches
        (exactly what the real query would reserve, as long as the budgets do not change in
        between), who would be refused (NULL rows) and why, the budget left afterwards.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> con = duckdb.connect()
    >>> s = gp.Session(budget=gp.CGP(rho=1e-4))
    >>> _ = gp.duckdb.register(con, s)
    >>> _ = con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 500000.0, 4500000.0), "
    ...                 "(1, 500010.0, 4500000.0), (2, 500020.0, 4500000.0)) v(u, x, y)")
    >>> pv = gp.duckdb.preview(con, "SELECT gp_privatize(u, x, y, 1e-5) FROM t")
    >>> pv.allocations.tolist(), s.spent().tolist()
    ([2e-05, 1e-05], [])
    """
    session = _session(con)
    if not isinstance(sql, str):
        raise InvalidInputError(
            f"sql must be a str, got {type(sql).__name__}. Nothing was charged."
        )
    import duckdb

    statements = con.extract_statements(sql)
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise InvalidInputError(
            "gp.duckdb.preview takes one SELECT statement (the query whose charge you want to "
            "see); preview the SELECT of a CREATE TABLE ... AS on its own. Nothing was charged."
        )
    plan = PreviewPlan(stop=False)
    key = id(session)
    with _u.LEDGER_LOCK:
        if key in _u.SQL_PREVIEWS:
            raise InvalidInputError(
                "another gp.duckdb.preview of this Session is running; wait for it. Nothing "
                "was charged."
            )
        _u.SQL_PREVIEWS[key] = plan
    try:
        con.execute(sql, params).fetchall()
    finally:
        with _u.LEDGER_LOCK:
            _u.SQL_PREVIEWS.pop(key, None)
    queries = {c.query for c in plan.calls}
    per = "point" if queries & {"gp_privatize", "gp_privatize_gp", "privatize"} else None
    note = (
        "each row is released at the full amount and its user pays for every row (n × amount "
        "per user); the noise per point is that of one point" if per else ""
    )
    return build(session, "sql", plan, adaptive=bool(queries & set(_ADAPTIVE)), per=per,
                 per_note=note)  # fmt: skip
