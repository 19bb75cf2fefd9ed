"""``gp.duckdb.grid_stats``: per-cell mean and variance in DuckDB under a per-user total ε.

See ``docs/operations/grid_stats.md`` (section "A per-user total: how gpframe spends it") and
``docs/sql.md``. A relation helper, like ``gp.duckdb.range_count``: DuckDB validates and reads
the input (user key, cell, value), then the Python path plans, charges and releases exactly as
``df.geopriv(...).grid_stats(epsilon_per_user=..., occupancy="public")`` does
(:func:`gpframe.queries.grid_user_stats.run_user_grid_stats`): the same plan, the same per-user
charges (each user pays at most ``epsilon_per_user``), charged before the relation is returned.
The returned relation holds the released values: reading it again charges nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpframe.duckdb import udf as _u
from gpframe.duckdb.preview import dry_helper, helper_on_exhausted
from gpframe.errors import InvalidInputError

__all__ = ["grid_stats"]

_NOTHING = "Nothing was charged."


def grid_stats(
    con: Any,
    query_or_relation: Any,
    *,
    user: str,
    cell: str,
    value: str,
    bounds: tuple[float, float],
    epsilon_per_user: float,
    occupancy: str = "public",
    clamp: bool = False,
    split: tuple[float, float] = (0.75, 0.25),
    beta: float = 0.05,
    shrink: bool = True,
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Release each cell's mean and variance of ``value``; no user pays more than the total.

    Noise and charges: :func:`gpframe.queries.grid_user_stats.run_user_grid_stats` (weighted
    per-user averages, per-cell ε planned from the public occupancy; user ℓ pays the sum of the
    ε of the cells where ℓ is kept, at most ``epsilon_per_user``).

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection on which ``gp.duckdb.register(con, session)`` ran.
    query_or_relation : str or duckdb.DuckDBPyRelation
        A SELECT query on ``con`` or a relation made on ``con``: one row per sample.
    user, cell, value : str
        Columns: user key, cell key (an H3 index as UBIGINT or VARCHAR, or any public zone
        key), numeric value.
    bounds : (L, U)
        Public interval of the values; values outside are an error unless ``clamp=True``.
    epsilon_per_user : float
        The total ε any one user pays for the whole call.
    occupancy : "public"
        Required acknowledgement that who has how many samples in which cell is public.
    clamp : bool
        Clamp values outside [L, U] instead of refusing.
    split : (float, float)
        Shares of a cell's ε for the mean and the variance.
    beta : float
        Failure probability of each cell's error bounds.
    shrink : bool
        Pull each released mean toward the released means' average, the more the noisier its
        cell (post-processing of released values, no charge; ``docs/operations/grid_stats.md``).
        ``False`` releases the plain noisy means.
    on_exhausted : {"exclude", "raise"}, optional
        A user whose budget cannot pay their planned charge: ``"exclude"`` leaves them out
        (charged nothing; the curator's report lists them), ``"raise"`` refuses the call naming
        them, before anything is reserved or drawn. None: the ``register(..., on_exhausted=)``
        setting.
    dry_run : bool
        Return a :class:`~gpframe.results.Preview` instead (nothing drawn, charged or written):
        the per-user charges, who would be left out and why, and the worst released cell's
        ``mean_error`` before the shrinkage (``docs/operations/grid_stats.md``, "Preview").

    Returns
    -------
    duckdb.DuckDBPyRelation
        One row per occupied cell: ``cell``, ``mean``, ``variance``, ``mean_error``,
        ``variance_error``, ``users``, ``users_kept``, ``epsilon_cell``, ``released``.

    Examples
    --------
    >>> import duckdb, gpframe as gp
    >>> con = duckdb.connect()
    >>> session = gp.Session(central=gp.DP(epsilon=10.0))
    >>> _ = gp.duckdb.register(con, session)
    >>> q = "SELECT u, 'zone-' || (u % 2) AS cell, 5.0 AS v FROM range(40) t(u)"
    >>> rel = gp.duckdb.grid_stats(con, q, user="u", cell="cell", value="v", bounds=(0, 10),
    ...                            epsilon_per_user=2.0)
    >>> sorted(r[0] for r in rel.fetchall()), float(session.spent().max()) <= 2.0
    (['zone-0', 'zone-1'], True)
    """
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(grid_stats, locals(), "grid_stats")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(grid_stats, locals(), "gp.duckdb.grid_stats")
    import pandas as pd
    import pyarrow as pa

    from gpframe.accounting.amounts import exact, probability
    from gpframe.duckdb.grid import _REGISTRY
    from gpframe.duckdb.relations import quote, source
    from gpframe.ledger.keys import sql_user_expr
    from gpframe.queries.clip_user import occupancy_from_records
    from gpframe.queries.grid_stats import central_kind, value_bounds
    from gpframe.queries.grid_user_stats import run_user_grid_stats

    fname = "gp.duckdb.grid_stats"
    reg = _REGISTRY.require(con, fname)
    session = reg.session
    central_kind(session)
    if not (isinstance(occupancy, str) and occupancy == "public"):
        raise InvalidInputError(
            f"{fname}: occupancy={occupancy!r}: this form protects the values only and needs a "
            "public occupancy (docs/operations/grid_stats.md); pass occupancy='public', or use "
            f"the Python grid_stats(occupancy='private') for private occupancy. {_NOTHING}"
        )
    probability(beta)
    try:
        total = exact(epsilon_per_user, "epsilon_per_user")
    except InvalidInputError:
        total = None
    if isinstance(epsilon_per_user, bool) or total is None or not 0 < total <= 10**6:
        raise InvalidInputError(
            f"{fname}: epsilon_per_user={epsilon_per_user!r} must be a number in (0, 1000000]. "
            f"{_NOTHING}"
        )
    try:
        s_mu, s_v = (exact(x, "split") for x in split)
    except (TypeError, ValueError):
        s_mu = s_v = None  # type: ignore[assignment]
    if s_mu is None or s_v is None or not (s_mu > 0 and s_v > 0 and s_mu + s_v == 1):
        raise InvalidInputError(
            f"{fname}: split={split!r} must be two positive shares summing to 1. {_NOTHING}"
        )
    lo, hi = value_bounds(bounds)
    rel = source(con, query_or_relation, fname)
    cols = list(rel.columns)
    types = dict(zip(cols, (str(t) for t in rel.types), strict=True))
    for what, name in (("user", user), ("cell", cell), ("value", value)):
        if name not in cols:
            raise InvalidInputError(
                f"{fname}: {what}={name!r} is not a column (columns: {cols}). {_NOTHING}"
            )
    u, c, v = quote(user, "user"), quote(cell, "cell"), quote(value, "value")
    uk = sql_user_expr(types[user], u, user)  # the accessor's ledger keys for the same ids
    frame = rel.query(
        "__gp_src",
        f"SELECT {uk} AS u, {c} AS c, TRY_CAST({v} AS DOUBLE) AS v FROM __gp_src",
    ).df()
    if frame["u"].isna().any() or frame["c"].isna().any():
        raise InvalidInputError(f"{fname}: rows with a NULL {user!r} or {cell!r}. {_NOTHING}")
    x = frame["v"].to_numpy(dtype=np.float64, na_value=np.nan)
    if not np.isfinite(x).all():
        raise InvalidInputError(
            f"{fname}: column {value!r} has NULL/NaN/inf or non-numeric values; filter them "
            f"out first. {_NOTHING}"
        )
    out_of = (x < float(lo)) | (x > float(hi))
    if out_of.any() and not clamp:
        raise InvalidInputError(
            f"{fname}: column {value!r} has {int(out_of.sum())} value(s) outside bounds="
            f"({float(lo):g}, {float(hi):g}); widen bounds or pass clamp=True. {_NOTHING}"
        )
    x = np.clip(x, float(lo), float(hi))
    users, cells = frame["u"].to_numpy(), frame["c"].to_numpy()
    occ = occupancy_from_records(users, cells)
    rows_u = np.searchsorted(occ.users, users)
    rows_j = np.searchsorted(occ.cells, cells)
    ran = run_user_grid_stats(
        session, occ, rows_u, rows_j, x, lower=lo, upper=hi, total=total, split=(s_mu, s_v),
        beta=beta, rng=reg.rng, shrink=bool(shrink),
        params={"value": value, "bounds": [float(lo), float(hi)], "face": "sql"},
    )  # fmt: skip
    plan, r = ran.plan, ran.release
    out = pd.DataFrame(
        {
            "cell": occ.cells,
            "mean": r.mean,
            "variance": r.var,
            "mean_error": r.mean_error,
            "variance_error": r.var_error,
            "users": np.bincount(occ.j, minlength=occ.n_cells),
            "users_kept": plan.users_kept,
            "epsilon_cell": [float(a + b) for a, b in zip(plan.eps_mu, plan.eps_v, strict=True)],
            "released": r.released,
        }
    )
    return con.from_arrow(pa.Table.from_pandas(out, preserve_index=False))
