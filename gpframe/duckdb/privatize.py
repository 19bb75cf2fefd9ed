"""``gp_privatize`` / ``gp_privatize_gp`` and ``gp.duckdb.privatize``: points released with noise.

``register_privatize(con, session)`` (run by :func:`gpframe.duckdb.register`) adds, on ``con``:

``gp_privatize(user_id, x, y, rho)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus lattice Gaussian noise at ``rho`` (CGP, per m²): σ = (1 + √2·g)/√(2ρ)
    metres per coordinate, g = 2⁻¹⁰ m (``docs/operations/privatize.md`` and ``docs/noise.md``:
    Gaussian noise on points, noise parameters and charges; Liang & Yi, 'Concentrated Geo-Privacy'
    (2023), Thm. 4.8 with n = 1). The user's metric budget is charged ``rho`` for the row.
``gp_privatize_gp(user_id, x, y, eps)  -> STRUCT(x DOUBLE, y DOUBLE)``
    The row's point plus planar lattice Laplace noise at ``eps`` (GP, per m): mean radius
    2·(1 + √2·g)/ε metres (``docs/noise.md``: lattice Laplace, noise parameters and charges).
    Charged ``eps`` (ε²/2 on a CGP budget).

Both are SQL macros over Arrow UDFs (``gp_privatize_udf_int`` / ``_uint`` / ``_str`` and the
``gp_privatize_gp_udf_*`` ones); the macro picks the UDF from the type of ``user_id``, so
integer ids are charged as integers and text ids as text, exactly as the Python accessor keys
the same column. Units and charging: :mod:`gpframe.duckdb.register`.

Semantics of a row (``per="point"`` in Python terms): each row is one point of its user, released
at the row's amount; a user with m rows in a query is charged m × amount. The same rows through
``df.geopriv(...).privatize(rho=..., per="point")`` are charged exactly the same.

``con.sql("SELECT ..., gp_privatize(...) ...")`` is a lazy relation: every display, ``.df()``
or ``fetchall()`` runs the query again, draws fresh noise and charges the users again (and
averaging the displays undoes the noise). :func:`privatize` runs the query once, releases its
rows as one batch (one reservation and one charge per query, where ``gp_privatize`` makes one
per 2,048-row vector) and hands back a relation over the result, like
:func:`gpframe.duckdb.knn.knn`; reading it again draws and charges nothing. In SQL,
``CREATE TABLE private AS SELECT ... gp_privatize(...)`` also releases once, batch by batch
(``sql/privatize.sql``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import positive
from gpframe.duckdb import udf as _u
from gpframe.duckdb.preview import dry_helper, helper_on_exhausted
from gpframe.duckdb.relations import (
    SRC,
    check_input,
    fetched_points,
    kind_amount,
    public_columns,
    quote,
    source,
    warn_dropped,
)
from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.mechanisms.row_ranges import MIN_ROWS
from gpframe.queries import privatize as _pv

__all__ = ["Registration", "privatize", "register_privatize"]

_NOT_CHARGED = "Nothing was charged."

#: the UDFs and macros register() creates: (udf name, macro name, mode, amount keyword); each
#: macro dispatches to an integer-id UDF or a text-id UDF, so user 7 is the same ledger user in
#: SQL and in Python (the ledger keeps 7 and "7" apart)
FUNCTIONS = (
    ("gp_privatize_udf", "gp_privatize", "cgp", "rho"),
    ("gp_privatize_gp_udf", "gp_privatize_gp", "gp", "eps"),
)

# con -> Registration, so that registering is idempotent per connection
_REGISTRY = _u.Registry()


@dataclass
class Registration(_u.UdfRegistration):
    """The functions registered on one connection, and counters for audits and tests.

    Attributes
    ----------
    session : gpframe.Session
        The session the functions charge (the latest one passed to :func:`register`).
    rows_drawn : int
        Rows that received noise (every one of them was charged).
    rows_excluded : int
        Non-NULL rows of users whose budget could not pay (NULL out, no charge).
    batches : int
        UDF calls (Arrow batches) that drew noise.
    """

    #: (mode, float amount) -> exact amount, validated and calibrated once
    _amounts: dict[tuple[str, float], Fraction] = field(default_factory=dict, repr=False)


def register_privatize(
    con: Any, session: Any, *, crs: Any = None, domain: Any = None, rng: Any = None
) -> Registration:
    """Register ``gp_privatize`` and ``gp_privatize_gp`` on ``con``, charging ``session``.

    Idempotent per connection; :func:`gpframe.duckdb.register` runs it with the other
    operations' registrations (parameters there).
    """
    import duckdb
    from duckdb.sqltypes import DOUBLE

    def create(con: Any, reg: Registration) -> None:
        rtype = duckdb.struct_type({"x": DOUBLE, "y": DOUBLE})
        for _udf, macro, mode, param in FUNCTIONS:  # create_id_udfs names the pair f"{macro}_udf_*"
            _u.create_id_udfs(
                con, macro, lambda _id_type, mode=mode: _make_udf(reg, mode),
                f"x, y, {param}", f"CAST(x AS DOUBLE), CAST(y AS DOUBLE), CAST({param} AS DOUBLE)",
                [DOUBLE, DOUBLE, DOUBLE], rtype,
            )  # fmt: skip

    return _REGISTRY.install(con, session, Registration, create, rng=rng, crs=crs, domain=domain)


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
    on_exhausted: str | None = None,
    dry_run: bool = False,
) -> Any:
    """Release every row's point with noise: one batch, one reservation and one charge per query.

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
    on_exhausted : {"exclude", "raise"}, optional
        A user whose budget cannot pay: left out and charged nothing (``"exclude"``), or the
        whole query refused before anything is charged, naming them (``"raise"``: its query is
        planned read-only first). None: the ``register(..., on_exhausted=)`` setting.
    dry_run : bool
        Return a :class:`~gpframe.results.Preview` instead (``docs/ledger.md``, "Previewing a
        query"): the helper's query planned as by ``gp.duckdb.preview``, nothing drawn,
        charged or written.

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
    The query runs once; its rows are fetched and released as one batch of those functions'
    code (``docs/sql.md``, "The relation helpers charge once per query"): every row is checked
    before anything is reserved, then one reservation commits every admitted user's charge
    (durable before any value is returned), so a user is released whole or left out. With the
    OS CSPRNG the noise is drawn in row ranges on the connection's ``threads`` while that
    reservation commits; the draws of a user it does not admit are dropped (NULL out), and
    nothing is drawn ahead with ``on_exhausted="raise"`` or in a preview. Input with a NULL
    user or a NULL / non-finite coordinate is refused before anything is drawn or charged.

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
    if dry_run:  # planned like gp.duckdb.preview: nothing drawn, charged or written
        return dry_helper(privatize, locals(), "privatize")
    if on_exhausted is not _u.RUNNING:  # None: the registration's; "raise": planned first
        return helper_on_exhausted(privatize, locals(), "gp.duckdb.privatize")
    fname = "gp.duckdb.privatize"
    reg = _REGISTRY.require(con, fname)
    kind, amount, f_amt = kind_amount(reg.session, rho, eps, fname)
    # the UDF's own checks of the amount, now: it would refuse them only batch by batch
    _pv.check_amount(kind, "point", amount)
    _pv.check_point_amount(kind, amount, scale_max=reg.scale_max)  # after the CRS's k_max
    rel = source(con, query_or_relation, fname)
    # the rows are checked as fetched (_whole_relation): the query runs once
    u, qx, qy = check_input(rel, fname, {"user": user, "x": x, "y": y}, rows=False)
    keep = public_columns(rel, public, user, (x, y), fname)
    out = _whole_relation(reg, rel, kind, f_amt, (user, x, y), (u, qx, qy), keep, _threads(con))
    warn_dropped(rel, keep, (x, y), fname)
    return con.from_arrow(out)


def _whole_relation(
    reg: Registration,
    rel: Any,
    mode: str,
    f_amt: float,
    names: tuple[str, str, str],
    quoted: tuple[str, str, str],
    keep: tuple[str, ...],
    threads: int = 1,
) -> Any:
    """Release every row of ``rel`` as **one** batch: one reservation and charge per query.

    The rows are fetched once (one snapshot of the query, one run of it), checked as fetched
    (:func:`gpframe.duckdb.relations.fetched_points`: the rows checked are the rows
    released), keyed as the UDFs key them
    (:func:`gpframe.ledger.keys.sql_user_expr`, then :func:`gpframe.duckdb.udf.factorize_ids`)
    and run through the UDFs' own batch function, :func:`_privatize_batch`: its checks (every
    row, before anything is reserved), one prepaid reservation and charge (durable before any
    value is returned), the noise (with several threads, drawn while the reservation commits:
    :class:`_DrawAhead`). Running the rows through ``gp_privatize`` instead would make
    one durable write per 2,048-row vector (``benchmarks/speed/duckdb_threads.py``). Returns
    the Arrow table: the ``keep`` columns as fetched, then ``x`` / ``y`` (NULL where the
    user's budget could not pay).
    """
    import pyarrow as pa

    from gpframe.ledger.keys import sql_user_expr

    user, x, y = names
    u, qx, qy = quoted
    # the noise on the connection's threads, unless the source is seeded (tests: its counter
    # serves one thread, as batch_lock makes the UDFs' batches wait for each other)
    workers = 1 if getattr(reg.rng, "seeded", False) else threads
    utype = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))[user]
    cols = ", ".join(quote(c, "public") for c in keep)
    tbl = rel.query(
        SRC,
        f"SELECT {cols}, {sql_user_expr(utype, u, user)} AS __gp_key, "
        f"CAST({qx} AS DOUBLE) AS __gp_x, CAST({qy} AS DOUBLE) AS __gp_y FROM {SRC}",
    ).to_arrow_table()
    fetched = ("__gp_key", "__gp_x", "__gp_y")
    names_of = {"user": user, "x": x, "y": y}
    xy, ext = fetched_points(tbl, "gp.duckdb.privatize", names_of, fetched, workers)
    param = "rho" if mode == "cgp" else "eps"
    ahead = None
    try:
        with _u.batch_lock(reg):
            if workers > 1 and len(xy) >= 2 * PART_MIN_ROWS and _may_draw_ahead(reg):
                # the batch's checks, then the noise on the threads while the ids are keyed
                # and the reservation commits (_DrawAhead)
                _validate_batch(param, xy, np.array([f_amt]), reg.units, ext)
                amount = _exact_amount(reg, mode, param, f_amt)
                ahead = _DrawAhead(reg, mode, amount, xy, workers)
            codes, uniques = _u.factorize_ids(tbl.column("__gp_key"))
            released, xy = _privatize_batch(
                reg, mode, param, codes, uniques, xy, f_amt, workers, ahead=ahead
            )  # fmt: skip
    except InvalidInputError as exc:  # the batch's checks refused the rows: name the helper
        msg = str(exc).removeprefix("gp_privatize: ").replace(" for this batch.", ".")
        raise InvalidInputError(f"gp.duckdb.privatize: {msg}") from None
    finally:
        if ahead is not None:  # a refused or failed batch: wait for the draws, drop them
            ahead.close()
    # no validity bitmap when every row was released: a mask costs 1.7 ms on 10⁶ rows
    null = None if released.all() else ~released
    out = [tbl.column(c) for c in keep]
    out += [pa.array(xy[:, 0], mask=null), pa.array(xy[:, 1], mask=null)]
    return pa.Table.from_arrays(out, names=[*keep, x, y])


def _threads(con: Any) -> int:
    """Return the connection's ``threads`` setting, at most the machine's cores (at least 1)."""
    import os

    ((n,),) = con.execute("SELECT current_setting('threads')").fetchall()
    return max(1, min(int(n), os.cpu_count() or 1))


def _make_udf(reg: Registration, mode: str) -> Any:
    param = "rho" if mode == "cgp" else "eps"

    def udf(user_id: Any, x: Any, y: Any, amount: Any) -> Any:
        import pyarrow as pa

        n = len(x)
        null = _u.nulls(user_id) | _u.nulls(x) | _u.nulls(y) | _u.nulls(amount)
        ok = ~null
        out_x = np.full(n, np.nan)
        out_y = np.full(n, np.nan)
        if ok.any():
            rows = np.flatnonzero(ok)
            xy = np.column_stack([_u.to_numpy(c, np.float64)[rows] for c in (x, y)])
            amts = _u.to_numpy(amount, np.float64)[rows]
            # no process-wide lock (docs/sql.md): the Ledger serialises the reserve and the
            # charge, so DuckDB's threads draw their batches' noise in parallel
            with _u.batch_lock(reg):
                codes, uniques = _u.factorize_ids(user_id, rows)
                released, xy = _privatize_batch(reg, mode, param, codes, uniques, xy, amts)
            out_x[rows] = xy[:, 0]
            out_y[rows] = xy[:, 1]
            null[rows[~released]] = True
        mask = pa.array(null)
        fx = pa.array(out_x, mask=null)
        fy = pa.array(out_y, mask=null)
        return pa.StructArray.from_arrays([fx, fy], names=["x", "y"], mask=mask)

    udf.__name__ = f"gp_privatize_{mode}_udf"
    return udf


def _validate_batch(
    param: str, xy: np.ndarray, amts: np.ndarray, units: Any = None, ext: _u.Extent | None = None
) -> None:
    """Refuse a batch's amounts and points (``ext``: their extent, if the caller has it)."""
    unit = "CGP, per m²" if param == "rho" else "GP, per m"
    _u.exact_amounts(amts, "gp_privatize", param, unit)
    _u.check_points(xy, "gp_privatize", units, ext=ext)


def _exact_amount(reg: Registration, mode: str, param: str, value: float) -> Fraction:
    """Return the exact amount of a float argument (validated and calibrated once per reg)."""
    key = (mode, value, reg.scale_max)
    a = reg._amounts.get(key)
    if a is None:
        a = positive(value, param)  # finite and > 0: checked for the batch (_validate_batch)
        _pv.check_amount(mode, "point", a)
        # the wrapper's full check at the amount the mechanism runs at (after the CRS's k_max):
        # the calibration alone accepts eps below 2**-40, which planar_laplace then refuses
        # after reserve() has charged the user
        _pv.check_point_amount(mode, a, scale_max=reg.scale_max)
        reg._amounts[key] = a
    return a


def _units_of_sum(ledger: Any, mode: str, parts: list[tuple[Fraction, np.ndarray]]) -> np.ndarray:
    """Ledger units of Σ_a cnt_a × charge_for(a) per user, rounded up once, exactly.

    With one amount this is ``ledger.units_for``; with several, the amounts are brought to a
    common denominator so that the sum is still rounded up only once (as a ``Fraction`` sum
    would be), in int64 when it cannot overflow, else in Python ints.
    """
    from gpframe.accounting.filters import charge_for

    if len(parts) == 1:
        ((a, cnt),) = parts
        units, big = ledger.units_for("metric", a, cnt, kind=mode)
    else:
        lu, fkind = ledger.units["metric"], ledger.kind["metric"]
        fr = [charge_for(fkind, mode, a) * lu.scale for a, _ in parts]
        den = math.lcm(*(f.denominator for f in fr))
        nums = [f.numerator * (den // f.denominator) for f in fr]
        top = max(int(c.max()) for _, c in parts)
        if top * sum(nums) + den < 2**62:
            tot = sum(c.astype(np.int64) * k for (_, c), k in zip(parts, nums, strict=True))
            units, big = (tot + (den - 1)) // den, np.zeros(tot.size, dtype=bool)
        else:
            tot = sum(c.astype(object) * k for (_, c), k in zip(parts, nums, strict=True))
            exact_u = -((-tot) // den)
            big = np.array([u > 2**63 - 1 for u in exact_u.tolist()], dtype=bool)
            units = np.array([min(u, 2**63 - 1) for u in exact_u.tolist()], dtype=np.int64)
    if big.any():
        raise InvalidInputError(
            "gp_privatize: a user's charge in this batch does not fit the ledger's units; use "
            "smaller amounts. Nothing was charged for this batch."
        )
    return np.asarray(units, dtype=np.int64)


#: below twice this many rows the batch is drawn in one call (a thread per row range of at
#: least this many rows, :mod:`gpframe.mechanisms.row_ranges`)
PART_MIN_ROWS = MIN_ROWS


class _DrawAhead:
    """Per-point noise of the relation helper's one batch, drawn while it reserves.

    One amount, drawn on a background thread while the reservation is made and committed (its
    write and fsync overlap the draws): one :func:`gpframe.queries.privatize.privatize_points`
    call (``per="point"``) over every row taken as the points of one user, in row ranges on
    ``workers`` threads (:mod:`gpframe.mechanisms.row_ranges`). A point's noise and charge do
    not depend on the other points (per point, the guarantee is the amount), so these are the
    draws of the batch, in input order (no sort by user, no gather and scatter). Only the OS
    CSPRNG, never a seeded source (its counter serves one thread). Nothing drawn here leaves
    the batch before its charge is durable: :meth:`take` runs inside the batch's ``work``,
    after the reservation (with the charge) committed, and overwrites with NaN every row of a
    user who was not admitted.
    """

    def __init__(self, reg: Registration, mode: str, amount: Fraction, xy: np.ndarray,
                 workers: int) -> None:  # fmt: skip
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        self.amount = amount
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="gp-draw-ahead")
        self._drawn = self._pool.submit(
            contextvars.copy_context().run, _pv.privatize_points,
            xy, np.zeros(len(xy), dtype=np.int64), 1, kind=mode, amount=amount, per="point",
            scale_max=reg.scale_max, rng=reg.rng, progress=False, bounds=False, threads=workers,
        )  # fmt: skip

    def take(self, released: np.ndarray) -> tuple[np.ndarray, Fraction]:
        """(noisy points, the charge of one point); NaN on the rows not ``released``."""
        got = self._drawn.result()
        charges = {c for _users, c in got.charge_groups}
        if len(charges) > 1:
            raise GpframeInternalError(
                f"gp.duckdb.privatize: the draws report different point charges {charges}; "
                "nothing of the batch is returned (its users stay charged their allocations)."
            )
        noisy = got.xy
        if not released.all():  # users not admitted: their draws never leave the batch
            noisy[~released] = np.nan
        return noisy, charges.pop() if charges else self.amount

    def close(self) -> None:
        """Wait for the draws (a refused reservation: they are dropped unread)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _may_draw_ahead(reg: Registration) -> bool:
    """Tell whether noise may be drawn before the reservation answers.

    Not while a preview plans (nothing is drawn then), nor with ``on_exhausted="raise"`` (a
    refused query draws nothing).
    """
    with _u.LEDGER_LOCK:
        if id(reg.session) in _u.SQL_PREVIEWS:
            return False
        helper = _u.SQL_ON_EXHAUSTED.get(id(reg.session))
    return (helper[-1] if helper else reg.on_exhausted) != "raise"


def _privatize_batch(
    reg: Registration,
    mode: str,
    param: str,
    codes: np.ndarray,
    uniques: np.ndarray,
    xy: np.ndarray,
    amts: np.ndarray | float,
    workers: int = 1,
    ahead: _DrawAhead | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate, reserve, draw and charge one Arrow batch; returns (released mask, noisy xy).

    ``xy``: the batch's points, shape (N, 2); ``amts``: each row's amount, or one float for
    every row (the relation helper's one amount).

    ``workers > 1`` (the relation helper's one batch, unseeded source): the noise of one
    amount is drawn in that many row ranges on as many threads (:class:`_DrawAhead`): from
    before the reservation when the caller passes ``ahead`` (it ran :func:`_validate_batch`
    on these rows and started drawing their noise at the amount ``amts``), else once the
    reservation committed; the reservation and the charge stay one each, and no draw leaves
    before the charge is durable (a user not admitted gets NaN, the draws dropped).

    Runs on any of DuckDB's threads (the caller holds :func:`gpframe.duckdb.udf.batch_lock`).
    One reservation and one charge per batch, both in
    int64 ledger units computed once per distinct amount (no per-user ``Fraction``); the charge
    is durable before the batch's values are returned, and an error after the reservation
    charges the full allocation.
    """
    n = len(xy)
    one = not isinstance(amts, np.ndarray)  # one amount for every row: no per-row array
    if ahead is None:  # else checked by the caller before it started drawing
        _validate_batch(param, xy, np.array([amts], dtype=np.float64) if one else amts, reg.units)
    elif not one:
        raise GpframeInternalError("_privatize_batch: noise drawn ahead needs one amount.")
    n_users = len(uniques)
    if one:
        distinct = np.array([amts], dtype=np.float64)
    else:
        distinct = amts[:1] if amts.size and amts.min() == amts.max() else np.unique(amts)
    exact = [(float(f), _exact_amount(reg, mode, param, float(f))) for f in distinct]
    single = len(exact) == 1
    sels = [None] if single else [np.flatnonzero(amts == f) for f, _ in exact]
    cnts = [np.bincount(codes if sel is None else codes[sel], minlength=n_users) for sel in sels]
    from gpframe.ledger.charges import filter_kind

    session = reg.session
    filter_kind(session)  # a session without a metric budget: refuse before any write
    ledger = session.ledger
    alloc = _units_of_sum(ledger, mode, [(a, c) for (_, a), c in zip(exact, cnts, strict=True)])
    params = {param: [f for f, _ in exact[:16]], "rows": n, "source": "duckdb",
              **_u.metric_params(reg)}  # fmt: skip
    noisy: np.ndarray | None = None  # NaN where not released (made when needed)
    released = np.zeros(n, dtype=bool)

    def work(admitted: np.ndarray) -> np.ndarray:
        nonlocal noisy, released
        charged: list[tuple[Fraction, np.ndarray]] = []
        for (_, a), sel, cnt in zip(exact, sels, cnts, strict=True):
            parts = sel is None and workers > 1 and n >= 2 * PART_MIN_ROWS and admitted.any()
            if ahead is not None or parts:  # the reservation and its charge are durable now
                released = np.ones(n, dtype=bool) if admitted.all() else admitted[codes]
                draws = ahead if ahead is not None else _DrawAhead(reg, mode, a, xy, workers)
                try:
                    noisy, point_charge = draws.take(released)
                finally:
                    if draws is not ahead:
                        draws.close()
                charged.append((point_charge, np.where(admitted, cnt, 0)))
                continue
            res = _pv.privatize_points(
                xy if sel is None else xy[sel],
                codes if sel is None else codes[sel],
                n_users,
                kind=mode,  # type: ignore[arg-type]
                amount=a,
                per="point",
                admitted=admitted,
                scale_max=reg.scale_max,
                rng=reg.rng,
                progress=False,
                bounds=False,
            )
            if sel is None:
                noisy, released = res.xy, res.released
            else:
                if noisy is None:
                    noisy = np.full(xy.shape, np.nan)
                noisy[sel] = res.xy
                released[sel] = res.released
            # per point the mechanism's guarantee (<= a); one group with per="point"
            for _users, point_charge in res.charge_groups:
                charged.append((point_charge, np.where(admitted, cnt, 0)))
        actual = _units_of_sum(ledger, mode, charged) if charged else np.zeros(n_users, np.int64)
        return np.where(admitted, actual, 0)

    # a point's charge is its amount, known before any noise: the charge is committed with
    # the reservation (one durable write per batch), before any value is returned
    _u.charge_batch(
        session, np.asarray(uniques), alloc, work, query="gp_privatize", params=params,
        kind=None, units=True, on_exhausted=reg.on_exhausted, prepaid=True,
    )  # fmt: skip
    with _u.LEDGER_LOCK:  # held already while a preview plans (batch_lock): its last call
        planning = _u.SQL_PREVIEWS.get(id(session))
        if planning is not None and planning.calls:  # the points the batch would release,
            # per amount, for the preview's error radius (counts only, no location)
            adm = np.asarray(planning.calls[-1].admitted, dtype=bool)
            planning.notes.setdefault("points", []).append(
                (mode, [(a, int(c[adm].sum())) for (_, a), c in zip(exact, cnts, strict=True)],
                 float(reg.scale_max)))  # fmt: skip
    n_rel = int(released.sum())
    _u.tally(reg, n_rel, n - n_rel)
    return released, np.full(xy.shape, np.nan) if noisy is None else noisy
