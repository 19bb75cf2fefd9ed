"""``gp.duckdb.privatize``: privatize the rows of a query once, as a materialised relation.

``con.sql("SELECT ..., gp_privatize(...) ...")`` is a lazy relation: every display, ``.df()``
or ``fetchall()`` runs the query again, draws fresh noise and charges the users again (and
averaging the displays undoes the noise). This helper runs the query once, fetches the result
and hands back a relation over the fetched rows, like :func:`gpframe.duckdb.knn.knn`; reading it
again draws and charges nothing. In SQL, ``CREATE TABLE private AS SELECT ... gp_privatize(...)``
does the same (``sql/privatize.sql``).
"""

from __future__ import annotations

from typing import Any

from gpframe.duckdb.knn import (
    _check_input,
    _kind_amount,
    _literal,
    _public,
    _quote,
    _source,
    _warn_dropped,
)

__all__ = ["privatize"]

_NOT_CHARGED = "Nothing was charged."
_SRC = "__gp_src"


def privatize(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    x: str,
    y: str,
    rho: float | None = None,
    eps: float | None = None,
    public: Any = None,
) -> Any:
    """Release every row's point with noise, running the query once (``gp_privatize`` per row).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` ran (its session is charged).
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con``; one row per point.
    user, x, y : str
        Columns: user id, and coordinates in metres of the CRS named by
        ``gp.duckdb.register(con, session, crs=...)`` (never projected here; points outside that
        CRS's area of use are refused before anything is charged).
    rho, eps : float
        Exactly one: CGP ρ per m² per row (``gp_privatize``) or GP ε per m per row
        (``gp_privatize_gp``).
    public : list of str, optional
        Columns that do not depend on the locations (an id, a timestamp), kept in the output.
        Default: none besides ``user``. ``x`` and ``y`` cannot be public.

    Returns
    -------
    duckdb.DuckDBPyRelation
        One row per input row, in input order: ``user``, the ``public`` columns, and ``x`` /
        ``y`` holding the noisy coordinates (NULL for a user whose budget could not pay). Every
        other column is left out, with a ``GpframeWarning`` naming it. The relation holds the
        fetched result: reading it again draws and charges nothing.

    Notes
    -----
    Noise and charge as ``gp_privatize`` / ``gp_privatize_gp`` (:mod:`gpframe.duckdb`): each row
    is one point of its user released at the amount, so a user with m rows is charged m × ρ
    (or m × ε; m·ε²/2 on a CGP budget), as ``df.geopriv(...).privatize(..., per="point")``.
    Input with a NULL user or a NULL / non-finite coordinate is refused before anything runs.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> from gpframe.ledger import Session
    >>> con = duckdb.connect()
    >>> session = Session(budget=gp.CGP(rho=1e-3))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT * FROM (VALUES (1, 0.0, 0.0), (1, 50.0, 0.0), (2, 9.0, 0.0)) t(boat, x, y)"
    >>> rel = privatize(con, q, user="boat", x="x", y="y", rho=1e-4)
    >>> rel.columns, len(rel.fetchall()), len(rel.fetchall()), session.spent().tolist()
    (['boat', 'x', 'y'], 3, 3, [0.0002, 0.0001])
    """
    from gpframe.duckdb.register import _REGISTRY
    from gpframe.queries import privatize as _pv

    fname = "gp.duckdb.privatize"
    reg = _REGISTRY.require(con, fname)
    kind, amount, f_amt = _kind_amount(reg.session, rho, eps, fname)
    # the UDF's own checks of the amount, now: it would refuse them only batch by batch
    _pv.check_amount(kind, "point", amount)
    from gpframe.duckdb.register import _preflight_one

    _preflight_one(kind, amount, reg.scale_max)  # at the amount after the CRS's k_max
    rel = _source(con, query_or_relation, fname)
    u, qx, qy = _check_input(rel, fname, {"user": user, "x": x, "y": y})
    keep = _public(rel, public, user, (x, y), fname)
    fn = "gp_privatize" if kind == "cgp" else "gp_privatize_gp"
    cols = ", ".join(_quote(c, "public") for c in keep)
    # MATERIALIZED: the UDF runs once per row, whatever the projection below reads of its output
    sql = f"""
        WITH __gp_r AS MATERIALIZED (
            SELECT {cols}, {fn}({u}, {qx}, {qy}, {_literal(f_amt)}) AS __gp_p
            FROM {_SRC})
        SELECT {cols}, __gp_p.x AS {qx}, __gp_p.y AS {qy} FROM __gp_r
    """
    out = con.from_arrow(rel.query(_SRC, sql).to_arrow_table())
    _warn_dropped(rel, keep, (x, y), fname)
    return out
