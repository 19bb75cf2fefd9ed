"""Grid mean/variance in DuckDB: Clip-User plans in Python, exact sums in SQL, noise in a UDF.

See ``docs/operations/grid_stats.md``, ``docs/noise.md`` and ``docs/sql.md`` (plan, release,
pseudo-user, public occupancy, charges, central Laplace, real statistic, exact statistics);
Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy for Fixed
Estimation Error' (2024), Alg. 1, Thm. II.2.

Three steps (the SQL of step 2–3 is ``sql/grid_stats.sql``):

1. ``plan = clip_user(con, "pings", user="vessel", cell="cell", value="speed", bounds=(0, 30),
   epsilon=0.5, occupancy="public")`` computes the occupancy (``count(*) GROUP BY user, cell``)
   in DuckDB, runs the budget admission loop and Clip-User (:func:`clip_user_plan`, Python,
   public and free), and writes three TEMP objects on ``con``:

   * ``gp_grid_input(user_id, cell, value, ord)``: a view over the table (``ord`` is the
     canonical per-user order: ``order_by`` then ``rowid``, ``docs/operations/grid_stats.md``);
   * ``gp_retention(user_id, cell, cell_idx, r)``: the retained count of every kept
     (user, cell) pair (suppressed pairs have no row);
   * ``gp_occupancy(user_id, cell, m)``: the occupancy planned on (the SQL re-counts the table
     and passes the number of differing pairs to the UDF, which refuses to release if it is not
     0: fail closed);
   * ``gp_grid_params(plan_id, L, q, T)``: the fixed-point grid of the exact sums.

2. The SQL ranks each (user, cell)'s rows by ``ord``, keeps the first ``r``, snaps each value
   to an integer ``k = round_even((value − L)/q)`` clamped to [0, T] (the same IEEE operations
   as the Python path, half to even like ``numpy.rint``), and sums ``k`` and ``k²`` as
   integers (HUGEINT): the sums do not depend on the order in which parallel threads add them,
   unlike DOUBLE sums, so the statistic whose sensitivity is W·r*/r is exactly that statistic.
3. ``gp_grid_release(plan_id, cell_idx, n, s1, s2, mismatched_pairs)`` (a side-effecting
   Arrow UDF) releases each cell's mean and 1/r variance with the plan's exact sensitivities,
   exactly as the Python ``grid_stats`` does
   (:func:`~gpframe.queries.grid_stats.release_cells`), returning
   ``STRUCT(mean, variance, variance_unbiased, mean_error, variance_error)``.

Charging: each Arrow batch of cells reserves and charges, under the process-wide lock of
:mod:`gpframe.duckdb` and through the Session's own store, ε_mu + ε_V (= 2 × ``epsilon``) for
every user kept in each of the batch's cells, before the values leave the UDF. Over all cells a
user pays ``epsilon × 2 × |G′_ℓ|``, the Python charge. Every evaluation is charged (DuckDB may
evaluate a row twice; over-charging is allowed, under-charging never). A batch whose exact count
differs from the plan (the table changed after planning) raises and charges nothing.
The SQL output names no user; the per-user charges of each batch, and the users the plan left
out for lack of budget, are the curator's view: ``session.report(query_id=...)`` (the batches'
query ids are in ``session.history(user)``).

Only the **values** are protected: Clip-User needs a public occupancy
(``docs/operations/grid_stats.md``), so ``occupancy="public"`` (or a public table, checked against
the data) must be passed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.duckdb import udf as _u
from gpframe.errors import InvalidInputError
from gpframe.ledger.session import EXCLUDED_KEY

__all__ = ["GridRegistration", "clip_user", "register_grid"]

_UDF = "gp_grid_release"
_NOTHING = "Nothing was charged."
_PLAN_IDS = itertools.count(1)

_LEDGER_LOCK = _u.LEDGER_LOCK
_REGISTRY = _u.Registry()


@dataclass
class GridRegistration(_u.UdfRegistration):
    """``gp_grid_release`` on one connection: the session, the plans, counters for tests.

    ``units`` is always None: the grid functions take cells, not metres.
    """

    plans: dict[int, Any] = field(default_factory=dict)
    cells_released: int = 0


def register_grid(con: Any, session: Any, *, rng: Any = None) -> GridRegistration:
    """Register ``gp_grid_release`` on ``con``, charging ``session`` (idempotent per connection)."""
    import duckdb
    from duckdb.sqltypes import BIGINT, DOUBLE

    names = ("mean", "variance", "variance_unbiased", "mean_error", "variance_error")

    def create(con: Any, reg: GridRegistration) -> None:
        _u.create_single_udf(
            con, _UDF, _make_udf(reg), [BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT],
            duckdb.struct_type(dict.fromkeys(names, DOUBLE)),
        )  # fmt: skip

    return _REGISTRY.install(con, session, GridRegistration, create, rng=rng)


def _ident(name: str, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what}={name!r} must be a non-empty name. {_NOTHING}")
    return '"' + name.replace('"', '""') + '"'


def clip_user(
    con: Any,
    table: str,
    *,
    user: str,
    cell: str,
    value: str,
    bounds: tuple[float, float],
    epsilon: float,
    occupancy: str | pd.DataFrame | None = None,
    clip: str = "clip-user",
    clamp: bool = False,
    order_by: str | None = None,
    on_exhausted: str | None = None,
    **plan_options: Any,
) -> Any:
    """Plan a grid release of ``table`` in DuckDB and write the retention table (module doc).

    See ``docs/operations/grid_stats.md`` (Clip-User, admission, plan/release split, pseudo-user
    step, what is public); Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in
    Differential Privacy for Fixed Estimation Error' (2024), Alg. 1, Prop. V.1, eq. (15). Public and
    free: reads the occupancy and the ledger's remaining budgets, draws nothing and charges nothing
    (the charge happens in ``gp_grid_release``).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` (or :func:`register_grid`) ran.
    table : str
        A base table (its ``rowid`` is the default per-user sample order).
    user, cell, value : str
        Columns: user key, cell key (e.g. an H3 index as UBIGINT or VARCHAR), numeric value.
    bounds : (L, U)
        Public interval of the values; values outside are an error unless ``clamp=True``.
    epsilon : float
        Central ε per statistic per cell (mean and variance each); per-cell ε is 2 × epsilon.
    occupancy : "public" or DataFrame
        Required: the acknowledgement that the occupancy is public
        (``docs/operations/grid_stats.md``), or the public table (user, cell, count), checked
        against the data (fail closed).
    clip : {"clip-user", "pseudo-user", "none"}
    clamp : bool
    order_by : str, optional
        Column of the canonical per-user order (then ``rowid``).
    on_exhausted : {"exclude", "raise"}, optional
        A user whose budget cannot pay their planned charge: ``"exclude"`` leaves them out of
        every cell (charged nothing; the curator's report lists them), ``"raise"`` refuses the
        plan with a :class:`~gpframe.errors.BudgetExceededError` naming them, before anything
        is written on ``con`` (and ``gp_grid_release`` then refuses a batch whose kept users can
        no longer pay, naming them). None: the ``register(..., on_exhausted=)`` setting.
    **plan_options
        kappa, split, error_cap, protect_worst_grid, rollback_incomplete_stage.

    Returns
    -------
    ClipUserPlan
        With ``params["plan_id"]``, the id ``gp_grid_params`` holds.
    """
    from gpframe.accounting.amounts import exact
    from gpframe.duckdb.preview import _mode
    from gpframe.ledger.keys import sql_user_expr
    from gpframe.mechanisms.calibration import check_eps
    from gpframe.queries.clip_user import occupancy_from_records
    from gpframe.queries.grid_stats import (
        CLIPS,
        STATISTICS,
        _admission,
        central_kind,
        value_bounds,
        value_step,
    )

    reg = _REGISTRY.require(con, "clip_user")
    session = reg.session
    mode = _mode(con, on_exhausted, "gp.duckdb.clip_user")
    central_kind(session)
    if clip not in CLIPS:
        raise InvalidInputError(f"clip={clip!r} is not one of {CLIPS}. {_NOTHING}")
    if occupancy is None or (isinstance(occupancy, str) and occupancy != "public"):
        raise InvalidInputError(
            f"occupancy={occupancy!r}: Clip-User's guarantee holds only if the occupancy (which "
            "users have how many samples in which cells) is public "
            "(docs/operations/grid_stats.md); pass "
            "occupancy='public' or the public table (user, cell, count). For private occupancy "
            f"use the Python grid_stats(occupancy='private'). {_NOTHING}"
        )
    eps = check_eps(epsilon, "epsilon")
    lo, hi = value_bounds(bounds)
    t, u, c, v = (_ident(table, "table"), _ident(user, "user"), _ident(cell, "cell"),
                  _ident(value, "value"))  # fmt: skip
    try:
        rel = con.table(table)
        cols = set(rel.columns)
        types = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
    except Exception:  # duckdb.CatalogException and friends
        raise InvalidInputError(
            f"table={table!r} does not exist on this connection. {_NOTHING}"
        ) from None
    for name, what in ((user, "user"), (cell, "cell"), (value, "value"), (order_by, "order_by")):
        if name is not None and name not in cols:
            raise InvalidInputError(
                f"{what}={name!r} is not a column of {table!r} (columns: {sorted(cols)}). "
                f"{_NOTHING}"
            )
    # the accessor's ledger keys for the same ids; float/bool ids: the one refusal
    uk = sql_user_expr(types[user], u, user)
    L, U = float(lo), float(hi)
    bad = con.execute(
        f"SELECT count(*) FILTER ({u} IS NULL OR {c} IS NULL), "
        # TRY_CAST: a text column must be refused by name, not by DuckDB's ConversionException
        f"count(*) FILTER (TRY_CAST({v} AS DOUBLE) IS NULL OR NOT isfinite(TRY_CAST({v} AS "
        f"DOUBLE))), count(*) FILTER (TRY_CAST({v} AS DOUBLE) < ? OR TRY_CAST({v} AS DOUBLE) > ?) "
        f"FROM {t}",
        [L, U],
    ).fetchall()[0]  # fetchall: fetchone() leaves the result pending on the caller's connection
    if bad[0]:
        raise InvalidInputError(f"{bad[0]} row(s) have a NULL {user!r} or {cell!r}. {_NOTHING}")
    if bad[1]:
        raise InvalidInputError(
            f"column {value!r} has {bad[1]} NULL/NaN/inf or non-numeric value(s); filter them out "
            "first "
            f"(docs/operations/grid_stats.md: validate before fixing the occupancy). {_NOTHING}"
        )
    if bad[2] and not clamp:
        raise InvalidInputError(
            f"column {value!r} has {bad[2]} value(s) outside bounds=({L:g}, {U:g}); widen bounds "
            f"or pass clamp=True (docs/operations/grid_stats.md). {_NOTHING}"
        )
    occ_df = con.execute(
        f"SELECT {uk} AS user, {c} AS cell, count(*) AS count FROM {t} GROUP BY ALL"
    ).df()
    data_occ = occupancy_from_records(
        occ_df["user"].to_numpy(), occ_df["cell"].to_numpy(), occ_df["count"].to_numpy()
    )
    if isinstance(occupancy, pd.DataFrame):
        from gpframe.queries.clip_user.planner import _as_occupancy

        table_occ = _as_occupancy(occupancy)
        same = all(
            np.array_equal(getattr(table_occ, a), getattr(data_occ, a))
            for a in ("users", "cells", "u", "j", "m")
        )
        if not same:
            raise InvalidInputError(
                "the public occupancy table does not match the table's per-(user, cell) counts; "
                f"failing closed (docs/operations/grid_stats.md). {_NOTHING}"
            )
    plan_kw = {"lower": lo, "upper": hi, "eps_cell": eps * STATISTICS, "clip": clip,
               **plan_options}  # fmt: skip
    split = plan_options.get("split", (0.5, 0.5))
    stat_eps = tuple(eps * STATISTICS * exact(x, "split") for x in split)
    plan, _rounds = _admission(session, data_occ, plan_kw, stat_eps, set())
    if mode == "raise" and plan.excluded.any():  # refused by name before anything is written
        from gpframe.ledger.run import exhausted_error

        users = plan.occupancy.users
        raise exhausted_error("gp.duckdb.clip_user", users[plan.excluded].tolist(), users.size)
    plan_id = next(_PLAN_IDS)
    plan.params["plan_id"] = plan_id
    plan.params["stat_eps"] = stat_eps
    plan.params["on_exhausted"] = mode
    q = value_step(lo, hi)
    T = int((hi - lo) // q)
    occ = plan.occupancy
    keep = plan.r > 0
    ret = pd.DataFrame(
        {
            "user_id": occ.users[occ.u[keep]],
            "cell": occ.cells[occ.j[keep]],
            "cell_idx": occ.j[keep].astype(np.int64),
            "r": plan.r[keep].astype(np.int64),
        }
    )
    val = f"CAST({v} AS DOUBLE)"
    if clamp:
        val = f"least(greatest({val}, {L!r}), {U!r})"
    ord_expr = "rowid" if order_by is None else _ident(order_by, "order_by")
    with _LEDGER_LOCK:
        reg.plans[plan_id] = plan
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW gp_grid_input AS SELECT {uk} AS user_id, {c} AS cell, "
        f"{val} AS value, {ord_expr} AS ord, rowid AS rid FROM {t}"
    )
    occ_out = pd.DataFrame({"user_id": occ.users[occ.u], "cell": occ.cells[occ.j], "m": occ.m})
    for name, frame in (("gp_retention", ret), ("gp_occupancy", occ_out)):
        tmp = f"_{name}_{plan_id}"
        con.register(tmp, frame)
        try:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {tmp}")
        finally:
            con.unregister(tmp)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE gp_grid_params AS SELECT CAST(? AS BIGINT) AS plan_id, "
        "CAST(? AS DOUBLE) AS L, CAST(? AS DOUBLE) AS q, CAST(? AS BIGINT) AS T",
        [plan_id, L, float(q), T],
    )
    return plan


_np, _nulls = _u.to_numpy, _u.nulls


def _make_udf(reg: GridRegistration) -> Any:
    def udf(plan_id: Any, cell_idx: Any, n: Any, s1: Any, s2: Any, mismatched: Any) -> Any:
        import pyarrow as pa

        bad = _np(mismatched, np.float64)
        if (np.nan_to_num(bad, nan=1.0) != 0).any():
            raise InvalidInputError(
                "gp_grid_release: the table's per-(user, cell) counts differ from the occupancy "
                "gp.duckdb.clip_user planned on (the table changed since); the sensitivities "
                f"are valid only for that occupancy (docs/operations/grid_stats.md). Re-plan. "
                f"{_NOTHING}"
            )

        size = len(cell_idx)
        null = _nulls(plan_id) | _nulls(cell_idx) | _nulls(n) | _nulls(s1) | _nulls(s2)
        cols = {k: np.full(size, np.nan) for k in ("mean", "var", "vu", "em", "ev")}
        rows = np.flatnonzero(~null)
        if rows.size:
            pid = np.unique(_np(plan_id, np.int64)[rows])
            if pid.size != 1:
                raise InvalidInputError(f"gp_grid_release: one plan per query. {_NOTHING}")
            with _LEDGER_LOCK:
                plan = reg.plans.get(int(pid[0]))
                if plan is None:
                    raise InvalidInputError(
                        f"gp_grid_release: unknown plan_id {int(pid[0])}; run "
                        f"gp.duckdb.clip_user(...) on this connection first. {_NOTHING}"
                    )
                rel = _release_batch(
                    reg, plan, _np(cell_idx, np.int64)[rows], _np(n, np.int64)[rows],
                    _np(s1, np.int64)[rows], _np(s2, np.int64)[rows],
                )  # fmt: skip
            j = _np(cell_idx, np.int64)[rows]
            if rel is None:  # planned by gp.duckdb.preview, nothing released: NULL rows
                null = np.ones(size, dtype=bool)
            else:
                for k, src in (("mean", rel.mean), ("var", rel.var), ("vu", rel.var_unbiased),
                               ("em", rel.mean_error), ("ev", rel.var_error)):  # fmt: skip
                    cols[k][rows] = src[j]
        arrs = [pa.array(cols[k], mask=null) for k in ("mean", "var", "vu", "em", "ev")]
        names = ["mean", "variance", "variance_unbiased", "mean_error", "variance_error"]
        return pa.StructArray.from_arrays(arrs, names=names, mask=pa.array(null))

    udf.__name__ = _UDF
    return udf


def _release_batch(
    reg: GridRegistration,
    plan: Any,
    cells: np.ndarray,
    n: np.ndarray,
    s1: np.ndarray,
    s2: np.ndarray,
) -> Any:
    """Check, reserve, release and charge one batch of cells (the caller holds the lock)."""
    from gpframe.queries.grid_stats import release_cells, value_step

    occ = plan.occupancy
    if cells.size != np.unique(cells).size or (cells < 0).any() or (cells >= occ.n_cells).any():
        raise InvalidInputError(
            f"gp_grid_release: cell_idx must list each planned cell once. {_NOTHING}"
        )
    if not np.array_equal(n, plan.r_cell[cells]):
        raise InvalidInputError(
            "gp_grid_release: a cell's kept count differs from the plan; the table changed after "
            "gp.duckdb.clip_user, or the query does not keep the first r rows of gp_retention "
            f"(docs/operations/grid_stats.md). Re-plan. {_NOTHING}"
        )
    L, U = plan.lower, plan.upper
    q = value_step(L, U)
    nc = occ.n_cells
    means: list[Fraction | None] = [None] * nc
    variances: list[Fraction | None] = [None] * nc
    for j, r, a, b in zip(cells.tolist(), n.tolist(), s1.tolist(), s2.tolist(), strict=True):
        if r >= 1:
            means[j] = L + q * Fraction(a, r)
            variances[j] = q * q * Fraction(r * b - a * a, r * r)
    # users kept in the batch's cells, with how many of those cells each
    in_batch = np.zeros(nc, dtype=bool)
    in_batch[cells] = True
    rows = (plan.r > 0) & in_batch[occ.j]
    cnt = np.bincount(occ.u[rows], minlength=occ.n_users)
    payers = np.flatnonzero(cnt > 0)
    session = reg.session
    ledger = session.ledger
    units = np.zeros(payers.size, np.int64)
    for amt in plan.params["stat_eps"]:  # per statistic, never deduplicated
        a, big = ledger.units_for("central", amt, cnt[payers], kind="dp")
        if big.any():
            raise InvalidInputError(
                f"gp_grid_release: epsilon too large for the ledger. {_NOTHING}"
            )
        units += a
    rel = None
    planning = _u.SQL_PREVIEWS.get(id(session))  # the caller holds the lock
    if planning is not None:  # gp.duckdb.preview: the cells the query would release, for the
        # preview's error (gpframe.queries.grid_preview.planned_mean_error, public plan only)
        planning.notes.setdefault("grid_cells", []).append((plan, cells.copy()))

    def work(_admitted: np.ndarray) -> np.ndarray:  # every payer admitted (all_or_none)
        nonlocal rel
        rel = release_cells(
            plan, means, variances, beta=plan.params.get("beta", 0.05), rng=reg.rng, only=cells
        )
        return units

    _u.charge_batch(
        session, occ.users[payers].tolist(), units, work, query="gp_grid_release",
        params={"plan_id": plan.params["plan_id"], "cells": int(cells.size), "source": "duckdb",
                # the curator's record of who the plan left out for lack of budget
                EXCLUDED_KEY: occ.users[plan.excluded].tolist()},
        notion="central", kind="dp", units=True, on_exhausted=plan.params["on_exhausted"],
        all_or_none="gp_grid_release: a kept user's budget no longer covers the plan (spent "
        f"since gp.duckdb.clip_user); re-plan. {_NOTHING}",
    )  # fmt: skip
    with reg._lock:
        reg.cells_released += int(cells.size)
        reg.batches += 1
    return rel
