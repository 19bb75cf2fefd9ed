"""Plumbing of the DuckDB relation helpers (``gp.duckdb.privatize``, ``range_count``, ...).

A relation helper takes a SQL string or a relation made on the registered connection, checks
its columns and rows before anything is charged, runs the query **once** through the registered
UDFs (or, for the multi-round operations, in Python through the same driver) and hands back a
relation over the fetched result, so reading it again draws and charges nothing. What every
helper checks the same way lives here: the input relation (:func:`source`,
:func:`check_input`, :func:`check_rel_units`), the amount (:func:`kind_amount`, the
accessor's :func:`gpframe.accounting.amounts.metric_amount`), the query point, the declared
public columns (:func:`public_columns`, :func:`warn_dropped`) and one point per user
(:func:`one_point_per_user`).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.duckdb import udf as _u
from gpframe.errors import InvalidInputError

#: the name the input relation has inside the helpers' SQL
SRC = "__gp_src"
_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
            "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")  # fmt: skip
_NOT_CHARGED = "Nothing was charged."


def quote(name: Any, what: str) -> str:
    """Quote a column name for SQL (refusing anything but a non-empty string)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what}={name!r} must be a non-empty column name. {_NOT_CHARGED}")
    return '"' + name.replace('"', '""') + '"'


def literal(v: float) -> str:
    """Write a float as an exact DOUBLE literal (repr round-trips; DuckDB rounds correctly)."""
    return f"CAST('{float(v)!r}' AS DOUBLE)"


def source(con: Any, query_or_relation: Any, fname: str) -> Any:
    """Return the input as a relation of ``con``: a SQL string, or a relation made on ``con``."""
    import uuid

    import duckdb

    if isinstance(query_or_relation, str):
        try:
            rel = con.sql(query_or_relation)
        except duckdb.Error as exc:
            raise InvalidInputError(
                f"{fname}: query_or_relation is not a valid query on this connection ({exc}). "
                f"{_NOT_CHARGED}"
            ) from None
        if rel is None:
            raise InvalidInputError(
                f"{fname}: query_or_relation must be a SELECT query (it returned no rows). "
                f"{_NOT_CHARGED}"
            )
        return rel
    if not isinstance(query_or_relation, duckdb.DuckDBPyRelation):
        raise InvalidInputError(
            f"{fname}: query_or_relation must be a SQL string or a DuckDBPyRelation, got "
            f"{type(query_or_relation).__name__}. {_NOT_CHARGED}"
        )
    # the relation must run on ``con`` (its UDFs charge con's session): a TEMP macro of con is
    # visible to it only if it was made on con
    marker = f"__gp_con_{uuid.uuid4().hex}"
    con.execute(f"CREATE TEMP MACRO {marker}() AS 1")
    try:
        query_or_relation.query(SRC, f"SELECT {marker}()").fetchall()
    except duckdb.Error:
        raise InvalidInputError(
            f"{fname}: the relation was made on another connection than con; build it with "
            f"con.sql(...) or con.table(...) on the registered connection. {_NOT_CHARGED}"
        ) from None
    finally:
        con.execute(f"DROP MACRO IF EXISTS temp.{marker}")
    return query_or_relation


def check_input(
    rel: Any,
    fname: str,
    columns: dict[str, str | None],
    reserved: tuple[str, ...] = (),
    *,
    rows: bool = True,
) -> tuple[str, str, str]:
    """Check the columns (names, numeric x/y) and the rows (NULL, NaN/inf, ±2**40 m) of ``rel``.

    Returns the quoted (user, x, y). All checks read public facts about the input only.
    ``rows=False`` checks the columns only: a helper that fetches every row anyway checks them
    on what it fetched (:func:`fetched_points`), so the query runs once, and the rows
    checked are the rows released.
    """
    from gpframe.ledger.keys import sql_user_expr

    cols = list(rel.columns)
    types = dict(zip(cols, (str(t) for t in rel.types), strict=True))
    for what, name in columns.items():
        if name is None:
            continue
        quote(name, what)
        if name not in types:
            raise InvalidInputError(
                f"{fname}: {what}={name!r} is not a column of the input (columns: {cols}). "
                f"{_NOT_CHARGED}"
            )
    for name in reserved:
        if name in types and name not in columns.values():
            raise InvalidInputError(
                f"{fname}: the input already has a column {name!r}, which the output adds; "
                f"rename it in the query. {_NOT_CHARGED}"
            )
    for what in ("x", "y"):
        t = types[columns[what]]  # type: ignore[index]
        if not t.startswith(_NUMERIC):
            raise InvalidInputError(
                f"{fname}: column {columns[what]!r} ({what}) has type {t}; x and y must be "
                f"numeric metres of a projected CRS. {_NOT_CHARGED}"
            )
    u, x, y = (quote(columns[w], w) for w in ("user", "x", "y"))
    sql_user_expr(types[columns["user"]], u, columns["user"])  # float/bool ids: the one refusal
    if rows:
        n, nu, nx, ny, big = rel.query(
            SRC,
            f"SELECT count(*), count(*) FILTER ({u} IS NULL), "
            f"count(*) FILTER ({x} IS NULL OR NOT isfinite(CAST({x} AS DOUBLE))), "
            f"count(*) FILTER ({y} IS NULL OR NOT isfinite(CAST({y} AS DOUBLE))), "
            f"max(greatest(abs(CAST({x} AS DOUBLE)), abs(CAST({y} AS DOUBLE)))) FROM {SRC}",
        ).fetchall()[0]
        _refuse_rows(fname, columns, (n, nu, nx, ny, big))
    return u, x, y


def fetched_points(
    tbl: Any,
    fname: str,
    columns: dict[str, str | None],
    fetched: tuple[str, str, str],
    threads: int = 1,
) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Check the rows of a fetched Arrow table as :func:`check_input` does; return its points.

    ``fetched`` names the table's (user key, x, y) columns: the user column as keyed (NULL
    where the user is NULL) and the coordinates cast to DOUBLE. The refusals are
    :func:`check_input`'s. Returns the points as one (N, 2) float64 array, written once from
    the table's chunks, and their extent ``(x_min, y_min, x_max, y_max)`` (NaN if a point is)
    for the later checks of the same points (:func:`gpframe.duckdb.udf.check_points`).

    The copy and the extent run in row ranges on ``threads`` threads (numpy's copies and
    reductions release the GIL): serial work before the noise can be drawn.
    """
    from gpframe.mechanisms.row_ranges import cores_for, run_in_ranges

    key, fx, fy = (tbl.column(c) for c in fetched)
    n, nu = tbl.num_rows, key.null_count
    xy = np.empty((n, 2), dtype=np.float64)
    # a NULL double comes out of Arrow as NaN: counted as bad, and NaN in the extent
    chunks = [[c.to_numpy(zero_copy_only=False) for c in col.chunks] for col in (fx, fy)]
    starts = np.cumsum([0] + [len(c) for c in chunks[0]]).tolist()

    def copy(lo: int, hi: int) -> list[float]:
        ext = [np.inf, np.inf, -np.inf, -np.inf]
        for i, (a, b) in enumerate(itertools.pairwise(starts)):
            if b <= lo or a >= hi or a == b:
                continue
            s0, s1 = max(lo, a), min(hi, b)
            for k in (0, 1):
                part = chunks[k][i][s0 - a : s1 - a]
                xy[s0:s1, k] = part
                # NaN-propagating: a NaN point makes the extent NaN, which fails every check
                ext[k] = np.minimum(ext[k], part.min())
                ext[k + 2] = np.maximum(ext[k + 2], part.max())
        return ext

    parts = run_in_ranges(copy, n, cores_for(n, threads), name="gp-fetch") if n else []
    ext = tuple(
        float(f([p[k] for p in parts])) if parts else np.nan
        for k, f in ((0, np.min), (1, np.min), (2, np.max), (3, np.max))
    )
    return _checked_points(fname, columns, nu, xy, ext), ext  # type: ignore[return-value]


def frame_points(frame: Any, fname: str, columns: dict[str, str | None]) -> np.ndarray:
    """Check the rows of a fetched pandas frame as :func:`check_input` does; return its points.

    For a helper that reads its input as a frame (``rel.df()``): the query runs once, and the
    rows checked are the rows it uses. Returns the points as one (N, 2) float64 array.
    """
    import pandas as pd

    nu = int(frame[columns["user"]].isna().sum())
    xy = np.empty((len(frame), 2), dtype=np.float64)
    for k, what in enumerate(("x", "y")):  # NULL (None, NA, NaT) becomes NaN: counted as bad
        xy[:, k] = pd.to_numeric(frame[columns[what]]).to_numpy(np.float64, na_value=np.nan)
    return _checked_points(fname, columns, nu, xy)


def _checked_points(
    fname: str,
    columns: dict[str, str | None],
    nu: int,
    xy: np.ndarray,
    ext: tuple[float, float, float, float] | None = None,
) -> np.ndarray:
    """Refuse fetched rows as :func:`check_input` does; return the points.

    From the NULL user count and the fetched points, NULL coordinates as NaN. Two reductions
    when every point is good (a NaN fails them), none when the caller gives the points' extent
    ``ext``; the counts that word a refusal only otherwise.
    """
    from gpframe.queries.knn import COORD_MAX_M

    n = len(xy)
    lo, hi = _u.coordinate_range(xy, ext)
    if n == 0 or (-COORD_MAX_M < lo and hi < COORD_MAX_M):
        _refuse_rows(fname, columns, (n, nu, 0, 0, None))
        return xy
    bad = [~np.isfinite(xy[:, k]) for k in (0, 1)]
    finite = ~(bad[0] | bad[1])
    big = float(np.abs(xy[finite]).max()) if finite.any() else None
    _refuse_rows(fname, columns, (n, nu, int(bad[0].sum()), int(bad[1].sum()), big))
    return xy  # not reached: a bad row is refused above


def _refuse_rows(fname: str, columns: dict[str, str | None], counts: tuple) -> None:
    """Refuse the input from its row counts: (rows, NULL users, bad x, bad y, max |coordinate|)."""
    from gpframe.queries.knn import COORD_MAX_M

    n, nu, nx, ny, big = counts
    if n == 0:
        raise InvalidInputError(f"{fname}: the input has no rows: nobody to ask. {_NOT_CHARGED}")
    if nu:
        u = quote(columns["user"], "user")
        raise InvalidInputError(
            f"{fname}: column {columns['user']!r} has {nu} NULL value(s); filter them first "
            f"(WHERE {u} IS NOT NULL). {_NOT_CHARGED}"
        )
    for what, bad in (("x", nx), ("y", ny)):
        if bad:
            c = quote(columns[what], what)
            raise InvalidInputError(
                f"{fname}: column {columns[what]!r} has {bad} NULL, NaN or infinite value(s); "
                f"filter them first (WHERE isfinite({c})). {_NOT_CHARGED}"
            )
    if big is not None and not float(big) < COORD_MAX_M:
        raise InvalidInputError(
            f"{fname}: a coordinate is beyond ±2**40 m; x and y must be metres of a projected "
            f"CRS. {_NOT_CHARGED}"
        )


def check_rel_units(reg: Any, rel: Any, qx: str, qy: str, fname: str) -> None:
    """Refuse, before anything runs, rows outside the registered CRS's area of use.

    The UDFs check each batch too, but a later batch's refusal would come after earlier
    batches were charged; the relation helpers promise nothing is charged on bad input.
    """
    if reg.units is None:  # without crs= the metres are taken as given, as before
        return
    tbl = rel.query(
        SRC, f"SELECT CAST({qx} AS DOUBLE) AS x, CAST({qy} AS DOUBLE) AS y FROM {SRC}"
    ).to_arrow_table()
    xy = np.column_stack([tbl.column(c).to_numpy() for c in ("x", "y")]).astype(np.float64)
    _u.check_units(reg.units, xy, fname, "x/y")


def kind_amount(
    session: Any, rho: Any, eps: Any, fname: str, *, gp_on_cgp: bool = True
) -> tuple[str, Fraction, float]:
    """(mechanism kind, exact amount, float amount): the accessor's ``rho=`` / ``eps=`` check.

    :func:`gpframe.accounting.amounts.metric_amount`, then the amount the UDFs will charge:
    the SQL literal is a DOUBLE, so the exact amount is that of its float.
    """
    from gpframe.accounting.amounts import metric_amount, positive
    from gpframe.ledger.charges import filter_kind

    param = "rho" if rho is not None else "eps"
    try:
        kind, a = metric_amount(
            rho,
            eps,
            example=f"{fname}(..., rho=1e-5)",
            filter_kind=filter_kind(session),
            same_kind=not gp_on_cgp,
        )
        f = float(a)
        return kind, positive(f, param), f
    except OverflowError:  # an int or Fraction beyond the float range (10**400)
        raise InvalidInputError(
            f"{fname}: {param} is beyond the float range; it must be finite and > 0. {_NOT_CHARGED}"
        ) from None
    except InvalidInputError as exc:  # name the entry point
        raise InvalidInputError(f"{fname}: {exc}") from None


def query_point(point: Any, fname: str) -> tuple[float, float]:
    """Return a public query point, (x, y) or a shapely Point in the data's metres, as floats."""
    import shapely

    if isinstance(point, shapely.Point):
        point = (point.x, point.y) if not point.is_empty else (np.nan, np.nan)
    try:
        px, py = (float(v) for v in point)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"{fname}: point must be (x, y) or a shapely Point in the data's metres, got "
            f"{point!r}. {_NOT_CHARGED}"
        ) from None
    if not (np.isfinite(px) and np.isfinite(py)):
        raise InvalidInputError(f"{fname}: point {point!r} must be finite. {_NOT_CHARGED}")
    return px, py


def public_columns(
    rel: Any, public: Any, user: str, coords: tuple[str, ...], fname: str, reserved: tuple = ()
) -> tuple[str, ...]:
    """Validate ``public=`` on a relation: the kept columns, ``user`` first (gpframe.release)."""
    from gpframe.release import check_public, check_reserved

    try:
        keep = check_public(list(rel.columns), public, user=user, protected=coords)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{fname}: {exc}") from None
    check_reserved(keep, reserved, fname)
    _refuse_coordinate_copies(rel, keep[1:], coords, fname)
    return tuple(str(c) for c in keep)


def _refuse_coordinate_copies(rel: Any, public: tuple, coords: tuple[str, ...], fname: str) -> None:
    """Refuse a public column equal to x or y on every row (as ``df.geopriv`` does)."""
    types = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
    for name in public:
        if not types.get(name, "").startswith(_NUMERIC):
            continue
        c = f"CAST({quote(name, 'public')} AS DOUBLE)"
        tests = ", ".join(
            f"bool_and(abs({c} - CAST({quote(v, 'x')} AS DOUBLE)) <= "
            f"1e-9 * greatest(1, abs(CAST({quote(v, 'x')} AS DOUBLE))))"
            for v in coords
        )
        if any(rel.query(SRC, f"SELECT {tests} FROM {SRC}").fetchall()[0]):
            raise InvalidInputError(
                f"{fname}: public column {name!r} holds the point coordinates (it equals x or y "
                f"on every row), so it cannot be public. Remove it from public=. {_NOT_CHARGED}"
            )


def warn_dropped(rel: Any, keep: tuple[str, ...], coords: tuple[str, ...], fname: str) -> None:
    """Warn (``GpframeWarning``) about the input columns the output leaves out."""
    from gpframe import release

    dropped = [c for c in rel.columns if c not in keep and c not in coords]
    release.warn_dropped(dropped, fname, stacklevel=3)


def one_point_per_user(
    rel: Any, fname: str, columns: tuple[str, str, str], quoted: tuple[str, str, str], units: Any
) -> tuple[Any, np.ndarray, list[Any], np.ndarray]:
    """Read one point per user: (table with column ``u``, codes, the users' ledger keys, xy).

    The keys are the accessor's for the same ids (:mod:`gpframe.ledger.keys`); several rows of
    one user are refused (pick the point in SQL), and with a declared CRS the points must lie
    in its area of use (without one, metres as given), before anything is charged.
    """
    from gpframe.ledger.keys import sql_user_expr, user_keys

    user = columns[0]
    u, qx, qy = quoted
    utype = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))[user]
    tbl = rel.query(
        SRC,
        f"SELECT {sql_user_expr(utype, u, user)} AS u, CAST({qx} AS DOUBLE) AS x, "
        f"CAST({qy} AS DOUBLE) AS y FROM {SRC}",
    ).to_arrow_table()
    codes, keys = user_keys(tbl.column("u"), user)
    if len(keys) != tbl.num_rows:
        raise InvalidInputError(
            f"{fname}: several rows per user: it reads one point per user; pick it in SQL, e.g. "
            f"SELECT {u}, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM ... GROUP BY {u}. "
            f"{_NOT_CHARGED}"
        )
    xy = np.column_stack([tbl.column(c).to_numpy() for c in ("x", "y")]).astype(np.float64)
    if units is not None:  # the accessor's to_crs= check; without crs= metres as given
        _u.check_units(units, xy, fname, "x/y")
    return tbl, np.asarray(codes), keys, xy
