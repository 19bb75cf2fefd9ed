"""``gp.duckdb.preview(con, sql)``: what a SQL query would charge, without running its releases.

See ``docs/ledger.md`` ("Previewing a query") and ``docs/sql.md``. The query runs with every
gpframe function planned instead of released: each Arrow batch's reservation is computed
read-only by the ledger driver (:func:`gpframe.ledger.run.run`), no noise is drawn, the ledger
is not written, and the functions return NULL. The :class:`~gpframe.results.Preview` sums the
batches: a user with rows in several batches is planned for each, as the real query reserves
them (the SQL functions charge per row, ``per="point"``). The relation helpers
(``gp.duckdb.range_count``, ``knn``, ...) take ``dry_run=True`` (:func:`dry_helper`, the same
planning) and ``on_exhausted=`` (:func:`helper_on_exhausted`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gpframe.duckdb import udf as _u
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import PreviewPlan, PreviewStop, previewing
from gpframe.ledger.session import EXCLUDED_KEY
from gpframe.results.preview import Preview, build

__all__ = ["dry_helper", "helper_on_exhausted", "helper_plan", "preview"]

#: queries whose charge is adaptive (they charge the rounds run, at most the reservation)
_ADAPTIVE = ("gp_in_region", "gp_kde_contribution")


def _registrations(con: Any) -> list[Any]:
    import importlib

    regs = []
    for name in ("privatize", "range_count", "kde", "knn", "grid"):  # modules, not helpers
        reg = importlib.import_module(f"gpframe.duckdb.{name}")._REGISTRY.get(con)
        if reg is not None:
            regs.append(reg)
    return regs


def _session(con: Any) -> Any:
    regs = _registrations(con)
    if regs:
        return regs[0].session
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
    with _planning(session) as plan:
        con.execute(sql, params).fetchall()
    return _build(session, "sql", plan, error=_sql_error(plan))


def _sql_error(plan: PreviewPlan) -> Callable[[Any, list[Any]], Any]:
    """Return the ``error`` hook of a SQL preview: what its batches would release, a priori.

    * ``gp_grid_release`` (``grid_stats.sql`` after ``gp.duckdb.clip_user``) releases each cell
      with the ``mean_error`` of its Clip-User plan, a function of the public plan only
      (:func:`gpframe.queries.grid_preview.planned_mean_error`): the preview states the worst
      of the cells its batches would release, exactly the largest ``mean_error`` the query
      returns.
    * ``gp_privatize`` / ``gp_privatize_gp`` (and ``gp.duckdb.privatize``): the error radius
      (m) of every point the batches would release at once, at confidence 1 − 0.05
      (:func:`gpframe.queries.privatize.nominal_errors` with ``per="point"`` over the number
      of points, the registered CRS's scale factor): the bound ``df.geopriv(...).privatize(...,
      per="point", beta=0.05)`` states for the same points. SQL returns no error column.

    * ``gp_in_region`` (and ``gp.duckdb.range_count``): the edge band (m), the largest final
      width of a row that runs every round (:func:`gpframe.queries.preview_bounds.full_run_widths`
      on each group's allocations, rounds and ``n_users``), as ``range_count(..., dry_run=True)``.
    * ``gp_kde_contribution``: the KDE error at each query point (bandwidth), the mean over the
      rows asked there of max(L_K·w_i, e^{−ν²/(2b²)}) as :func:`~gpframe.queries.preview_bounds.
      kde_error` states for ``pt-elim``; the largest over the query points.
    * ``gp_knn`` / ``gp_knn_gp`` (and ``gp.duckdb.knn``): the distance error (m) of every rank,
      the largest over the rows (:func:`~gpframe.queries.preview_bounds.knn_rows_error` on their
      point counts, β = 0.05, γ₀ = 0), as ``knn(..., dry_run=True)``.
    * ``gp_convex_hull`` / ``gp_convex_hull_gp`` (and ``gp.duckdb.convex_hulls``): γ₁ + γ₃ (m),
      the largest over the rows (:func:`~gpframe.queries.preview_bounds.hull_rows_known`), at
      confidence 1 − the largest ``beta`` asked, as ``convex_hull(..., dry_run=True)``.

    Each batch notes only public parameters (counts, amounts, rounds, ``n_users``, the query
    point): no location is read. Other functions state no bound (None); so does a query mixing
    two kinds.
    """

    def error(table: Any, calls: list[Any]) -> Any:
        if calls and all(c.query == "gp_privatize" for c in calls):
            return _points_error(plan)
        fns = {_FAMILY.get(c.query) for c in calls}
        fn = fns.pop() if len(fns) == 1 else None
        if fn is not None:  # one kind of function: what its batches noted
            notes = [e for q in sorted({c.query for c in calls}) for e in plan.notes.get(q, [])]
            return fn(notes) if notes else None
        import numpy as np

        from gpframe.queries.grid_preview import planned_mean_error, summary
        from gpframe.queries.grid_stats import value_step

        got = plan.notes.get("grid_cells")
        if not got or any(c.query != "gp_grid_release" for c in calls):
            return None
        per, beta = [], 0.05
        for p, cells in got:
            beta = float(p.params.get("beta", 0.05))
            per.append(planned_mean_error(p, beta, value_step(p.lower, p.upper))[cells])
        return summary(np.concatenate(per), beta)

    return error


def _points_error(plan: PreviewPlan) -> tuple[float, str, float] | None:
    """Return the radius (m) of every point the planned ``gp_privatize`` batches release."""
    import numpy as np

    from gpframe.queries.privatize import nominal_errors

    got = plan.notes.get("points", [])
    total = sum(n for _mode, parts, _k in got for _a, n in parts)
    if not total:
        return None
    beta = _u.BETA
    worst = max(float(nominal_errors(mode, a, "point", np.array([total]), beta, k, overall=True))
                for mode, parts, k in got for a, n in parts if n)  # fmt: skip
    return worst, f"max point error (m), all {total} points released at once", 1.0 - beta


def _band(notes: list[dict[str, Any]]) -> tuple[float, str, float]:
    """Return the edge band (m) of the planned ``gp_in_region`` groups (``dist-elim``)."""
    import numpy as np

    from gpframe.queries.preview_bounds import full_run_widths

    b = _u.BETA
    w = max(float(np.nanmax(full_run_widths(
        e["alloc"], e["n"], kind="cgp", triple="dist", rounds=e["rounds"], split=_u.SPLIT,
        beta_elim=b / 2, beta_post=b / 2, unit=e["unit"], scale_max=e["scale_max"],
        n_union=e["n_union"]))) for e in notes)  # fmt: skip
    return w, "edge band (m)", 1.0 - b


def _kde(notes: list[dict[str, Any]]) -> tuple[float, str, float]:
    """Return the largest KDE error over the query points of the planned contributions."""
    import numpy as np

    from gpframe.queries.kde import NU_FACTOR, cutoff, kernel_lipschitz
    from gpframe.queries.preview_bounds import full_run_widths

    b, at = _u.BETA, {}
    for e in notes:  # pt-elim: the point released, nu = 3b; sum and rows per query point
        w = full_run_widths(e["alloc"], e["n"], kind="cgp", triple="pt", rounds=e["rounds"],
                            split=_u.SPLIT, beta_elim=b / 2, beta_post=b / 2, unit=e["unit"],
                            scale_max=e["scale_max"], n_union=e["n_union"])  # fmt: skip
        bw = e["b"]
        far = cutoff(NU_FACTOR * bw, bw)
        tot, n = at.get((e["q"], bw), (0.0, 0))
        at[(e["q"], bw)] = (tot + float(np.maximum(kernel_lipschitz(bw) * w, far).sum()),
                            n + e["n"])  # fmt: skip
    err = max(min(tot / n, 1.0) for tot, n in at.values())
    return err, "KDE error (max over the query points)", 1.0 - b


def _knn(notes: list[dict[str, Any]]) -> tuple[float, str, float]:
    """Return the k-PNN distance error (m) of every rank of the planned ``gp_knn`` rows."""
    from gpframe.queries import preview_bounds as _pb

    b = _u.BETA  # the SQL form's: β = 0.05, γ₀ = 0 (the accessor's defaults)
    err = max(_pb.knn_rows_error(e["n"], e["k"], b, 0.0, e["kind"], e["amount"], e["scale_max"])
              for e in notes)  # fmt: skip
    return err, _pb.KNN_KIND, 1.0 - b


def _hull(notes: list[dict[str, Any]]) -> tuple[float, str, float]:
    """Return γ₁ + γ₃ (m) of the planned ``gp_convex_hull`` rows, the largest."""
    from gpframe.queries import hull as _h
    from gpframe.queries import preview_bounds as _pb

    err = max(_pb.hull_rows_known(e["kind"], e["amount"], e["n"], e["k"], e["beta"], _h.ALPHA,
                                  e["scale_max"]) for e in notes)  # fmt: skip
    return err, _pb.HULL_KIND, 1.0 - max(e["beta"] for e in notes)


#: the SQL functions whose preview states an error, and its function (of the batches' notes)
_FAMILY: dict[str, Callable[[list[dict[str, Any]]], tuple[float, str, float]]] = {
    "gp_in_region": _band, "gp_kde_contribution": _kde, "gp_knn": _knn, "gp_knn_gp": _knn,
    "gp_convex_hull": _hull, "gp_convex_hull_gp": _hull,
}  # fmt: skip


@contextlib.contextmanager
def _planning(session: Any) -> Iterator[PreviewPlan]:
    """Plan every batch charging ``session`` (:data:`gpframe.duckdb.udf.SQL_PREVIEWS`)."""
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
        yield plan
    finally:
        with _u.LEDGER_LOCK:
            _u.SQL_PREVIEWS.pop(key, None)


def _build(session: Any, operation: str, plan: PreviewPlan, **info: Any) -> Preview:
    queries = {c.query for c in plan.calls}
    per = "point" if queries & {"gp_privatize", "gp_privatize_gp", "privatize"} else None
    note = (
        "each row is released at the full amount and its user pays for every row (n × amount "
        "per user); the noise per point is that of one point"
        if per
        else ""
    )
    info.setdefault("adaptive", bool(queries & set(_ADAPTIVE)))
    lows = plan.notes.get("least_units")
    if lows is not None and "least" not in info:  # the elimination batches' round 1 parts
        import numpy as np

        def least(calls: list[Any]) -> list[Any]:  # other calls charge their allocation
            return [lows.get(id(c), np.where(c.admitted, c.allocation_units, 0)) for c in calls]

        info["least"] = least
    return build(session, operation, plan, per=per, per_note=note, **info)


def _bounds(operation: str, con: Any, a: dict[str, Any]) -> dict[str, Any]:
    """Return the expected-error and least-charge hooks of a helper with an a-priori bound.

    ``kde_raster``: the noise σ; ``nearest_users``: its distance error and, for ``*-elim``, the
    least charge (the same functions as the pandas face, at the registered CRS's scale).
    """
    from gpframe.queries import preview_bounds as _pb

    reg = _registrations(con)[0]

    def scale() -> float:
        return float(reg.scale_max)

    if operation == "kde_raster":
        return {"error": _pb.bound_for(reg.session, scale, _pb.kde_raster_sigma)}
    if operation == "nearest_users":
        from gpframe.duckdb.relations import kind_amount

        def amount() -> Any:
            kind, amt, _ = kind_amount(reg.session, a.get("rho"), a.get("eps"),
                                       "gp.duckdb.nearest_users", gp_on_cgp=False)  # fmt: skip
            return kind, amt

        return {"error": _pb.bound_for(reg.session, scale, _pb.nearest_error,
                                       lambda: dict(zip(("kind", "amount"), amount(),
                                                        strict=True))),
                "least": _pb.least_for(reg.session, True, lambda: amount()[1]),
                "adaptive": str(a.get("method", "")).endswith("-elim")}  # fmt: skip
    return {}


# ------------------------------------------------------------------------------------------
# the relation helpers' dry_run= and on_exhausted= (gp.duckdb.range_count, knn, ...)


def helper_plan(con: Any, call: Callable[[], Any]) -> tuple[Any, PreviewPlan]:
    """Run a relation helper ``call`` as a dry run; return (session, its plan).

    Its UDF batches are planned as in :func:`preview` (they return NULL and the helper goes
    on over them) and its reservations made in Python (``nearest_users``, ``kde_raster``)
    through :func:`gpframe.ledger.run.previewing`, which stops the helper there. Nothing is
    drawn or written.
    """
    session = _session(con)
    with _planning(session) as sql_plan, previewing() as py_plan:
        try:
            call()
        except PreviewStop:
            pass
    # the notes: what the helper's planning knew of its error before any noise
    return session, PreviewPlan(
        stop=False,
        calls=[*sql_plan.calls, *py_plan.calls],
        notes={**sql_plan.notes, **py_plan.notes},
    )


def _mode(con: Any, value: Any, fname: str) -> str:
    """Return the ``on_exhausted`` a helper runs with: its argument, else the registration's."""
    if value is None:
        regs = _registrations(con)
        value = regs[0].on_exhausted if regs else "exclude"
    _u.check_on_exhausted(value, fname)
    return str(value)


def dry_helper(fn: Callable[..., Any], args: dict[str, Any], operation: str) -> Preview:
    """``dry_run=True`` of a relation helper ``fn`` (``args`` its locals): its Preview.

    With ``on_exhausted="raise"`` the preview records the refusal the real call would make.
    """
    from gpframe.ledger.run import raising_on_exhausted

    a = {k: v for k, v in args.items() if k not in ("on_exhausted", "dry_run")}
    con = a["con"]
    mode = _mode(con, args.get("on_exhausted"), f"gp.duckdb.{operation}")
    if not _registrations(con):  # the helper refuses it, by its own name
        return fn(**a, on_exhausted=_u.RUNNING, dry_run=False)  # type: ignore[no-any-return]
    session = _session(con)
    with (
        _u.helper_on_exhausted_mode(session, mode),
        raising_on_exhausted() if mode == "raise" else contextlib.nullcontext(),
    ):
        session, plan = helper_plan(con, lambda: fn(**a, on_exhausted=_u.RUNNING, dry_run=False))
    info = _bounds(operation, con, a)
    info.setdefault("error", _sql_error(plan))  # the functions' own a-priori bounds
    return _build(session, operation, plan, **info)


def helper_on_exhausted(fn: Callable[..., Any], args: dict[str, Any], fname: str) -> Any:
    """Apply a relation helper's ``on_exhausted=`` (None: the registration's); run ``fn``.

    The value holds for every batch the helper's query runs on the session. ``"raise"``: plan
    the helper's whole query read-only first and refuse it, naming the users who cannot pay,
    before anything is reserved or drawn; then run it with every batch refusing such a user
    (the backstop if budgets change in between: batches that ran before stay charged).
    """
    from gpframe.ledger.run import exhausted_error, raising_on_exhausted

    a = {k: v for k, v in args.items() if k not in ("on_exhausted", "dry_run")}
    con = a["con"]
    mode = _mode(con, args.get("on_exhausted"), fname)

    def body() -> Any:
        return fn(**a, on_exhausted=_u.RUNNING, dry_run=False)

    if not _registrations(con):  # the helper refuses it, by its own name
        return body()
    session = _session(con)

    if mode == "exclude":
        with _u.helper_on_exhausted_mode(session, "exclude"):
            return body()
    with _u.helper_on_exhausted_mode(session, "exclude"):  # plan who would be left out
        _s, plan = helper_plan(con, body)
    refused: list[Any] = []
    asked: set[Any] = set()
    for c in plan.calls:
        asked.update(c.users.tolist())
        for u in [*c.params.get(EXCLUDED_KEY, []), *c.users[~c.admitted].tolist()]:
            if u not in refused:
                refused.append(u)
    if refused:
        raise exhausted_error(fname, refused, len(asked | set(refused)))
    with _u.helper_on_exhausted_mode(session, "raise"), raising_on_exhausted():
        return body()
