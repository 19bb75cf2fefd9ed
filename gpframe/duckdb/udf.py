"""Plumbing shared by the gpframe DuckDB UDF modules (private; ``docs/sql.md``).

:mod:`gpframe.duckdb.privatize`, :mod:`gpframe.duckdb.range_count`, :mod:`gpframe.duckdb.kde`,
:mod:`gpframe.duckdb.knn` and :mod:`gpframe.duckdb.grid` all register side-effecting Arrow UDFs
that reserve and charge a Session once per Arrow batch. What they share lives here:

* registration: :class:`Registry` (one registration per connection; :meth:`Registry.install`
  is the one prologue of every ``register_*``, which makes them idempotent),
  :func:`check_session`, :func:`create_udf` and
  :func:`create_id_udfs` (the ``_int`` / ``_uint`` / ``_str`` UDFs and the ``TEMP MACRO`` that
  picks one from the type of ``user_id``, so user 7 is the same ledger user in SQL and in
  Python, and refuses float, decimal and boolean ids as the accessor does);
* batch checks, all before the ledger is touched: :func:`check_points`,
  :func:`check_units`, :func:`exact_amounts`, :func:`check_rounds`;
* Arrow columns: :func:`to_numpy`, :func:`nulls`, :func:`objects`, :func:`factorize_ids`,
  :func:`user_objects`, :func:`union_sizes`;
* charging: :func:`charge_batch`, one Arrow batch through the one driver
  :func:`gpframe.ledger.run.run` (reserve, compute for the admitted users, charge; an error
  after the reservation charges the full allocation). Batches run in parallel on DuckDB's
  threads: the Ledger serialises only the reserve and the durable charge with its own lock;
  :func:`batch_lock` names the few cases that still run one batch at a time;
  :func:`elimination_batch`, the runner of the elimination functions; :func:`tally` for the
  per-registration counters.

This module imports nothing from the public DuckDB modules, so each of them can import it at
module level without an import cycle.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError, LedgerError
from gpframe.ledger.run import Charge, raising_on_exhausted, run
from gpframe.mechanisms.compiled import njit

#: a batch's points' (x_min, y_min, x_max, y_max), NaN if one of them is NaN
Extent = tuple[float, float, float, float]

#: DuckDB types whose values are charged as Python ints through BIGINT (typeof() is folded when
#: planning); UBIGINT has its own path (gpframe.ledger.keys)
INT_TYPES = "'TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'UTINYINT', 'USMALLINT', 'UINTEGER'"

# The Ledger serialises its own reserve and charge (its RLock around every SQLite transaction),
# so a batch needs no process-wide lock to reserve, draw and charge: DuckDB's threads run their
# batches in parallel, each holding its own reservation (the Ledger counts every open
# reservation as held, so concurrent batches never admit more than a user's budget). This
# re-entrant lock guards what the Ledger does not: SQL_PREVIEWS, a preview's plan (its held
# amounts and calls) and the batches of a seeded test source (see batch_lock).
LEDGER_LOCK = threading.RLock()

#: True restores the old behaviour of every batch's whole work under LEDGER_LOCK (one batch at
#: a time in the process); only benchmarks/speed/duckdb_threads.py sets it, to time the old
#: path next to the new one in the same run.
SERIAL_BATCHES = False

#: id(session) -> the PreviewPlan of a running ``gp.duckdb.preview`` on that session: its
#: batches are planned, not run (DuckDB calls UDFs on its own threads, so a context variable
#: of the calling thread would not reach them). Read and written under LEDGER_LOCK.
SQL_PREVIEWS: dict[int, Any] = {}

#: id(session) -> the ``on_exhausted=`` of the relation helpers running on that session (a
#: stack): while one runs, its value overrides the registration's for every batch charging the
#: session ("raise" is the helper's backstop after its read-only plan; DuckDB's threads do not
#: see the caller's context). Read and written under LEDGER_LOCK.
SQL_ON_EXHAUSTED: dict[int, list[str]] = {}


class _Running(str):
    """``on_exhausted`` of a relation helper's own body call (its mode is set already)."""

    __slots__ = ()


#: what :func:`gpframe.duckdb.preview.helper_on_exhausted` passes as ``on_exhausted`` when it
#: runs the helper's body (compared by identity: no user string is it)
RUNNING = _Running("exclude")


@contextlib.contextmanager
def helper_on_exhausted_mode(session: Any, value: str) -> Iterator[None]:
    """Make ``value`` the ``on_exhausted`` of every batch charging ``session`` meanwhile."""
    key = id(session)
    with LEDGER_LOCK:
        SQL_ON_EXHAUSTED.setdefault(key, []).append(value)
    try:
        yield
    finally:
        with LEDGER_LOCK:
            stack = SQL_ON_EXHAUSTED[key]
            stack.pop()
            if not stack:
                del SQL_ON_EXHAUSTED[key]


def batch_lock(reg: Any) -> contextlib.AbstractContextManager[Any]:
    """Return the lock one batch's whole work runs under: none, except in three cases.

    * a seeded test source (:func:`gpframe.testing.seeded_rng`) keeps a counter: two threads
      drawing from it at once could read the same bytes, so its batches run one at a time;
    * inside ``gp.duckdb.preview`` of the session, the batches are planned one at a time (each
      plan sees the amounts the earlier ones hold; :func:`charge_batch` holds the lock too);
    * :data:`SERIAL_BATCHES` (benchmarks only).

    Otherwise the batch reserves, draws and charges outside any process-wide lock.
    """
    if SERIAL_BATCHES or getattr(reg.rng, "seeded", False):
        return LEDGER_LOCK
    with LEDGER_LOCK:
        previewed = id(reg.session) in SQL_PREVIEWS
    return LEDGER_LOCK if previewed else contextlib.nullcontext()


# ------------------------------------------------------------------------------- registration


@dataclass
class UdfRegistration:
    """The session a connection's functions charge, and counters for audits and tests."""

    session: Any
    rng: Any = None
    rows_drawn: int = 0
    rows_excluded: int = 0
    batches: int = 0
    #: the declared metre CRS (:class:`gpframe.geo.MetricFrame`) or None (unchecked metres)
    units: Any = None
    #: ``register(..., on_exhausted=)``: "exclude" (NULL rows for a user who cannot pay) or
    #: "raise" (the batch is refused, naming them, before it reserves or draws anything)
    on_exhausted: str = "exclude"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def scale_max(self) -> float:
        """The declared CRS's largest scale factor over its public extent (1 without a CRS)."""
        return 1.0 if self.units is None else float(self.units.scale_max)

    @property
    def noise_inflation(self) -> float:
        """Worst ground noise over the declared CRS's public extent, as a multiple of nominal.

        ``scale_max / scale_min`` of ``register(crs=, domain=)`` (1 without a CRS); see
        ``docs/wide-extents.md`` and ``docs/sql.md``.
        """
        return 1.0 if self.units is None else float(self.units.noise_inflation)

    @property
    def crs_m(self) -> str | None:
        """The declared metre CRS as text (``EPSG:32618``), or None (metres unchecked)."""
        return None if self.units is None else str(self.units.label)


def metric_params(reg: Any) -> dict[str, Any]:
    """Return the declared CRS, its ``scale_max`` and noise inflation for a query's params.

    Every metric SQL query records them in the ledger (``session.report(query_id=...)``
    shows the curator the factor the noise was calibrated with; ``docs/sql.md``).
    """
    return {"crs_m": reg.crs_m, "scale_max": float(reg.scale_max),
            "noise_inflation": float(reg.noise_inflation)}  # fmt: skip


class Registry:
    """Connection -> registration; weak where the connection type allows it."""

    def __init__(self) -> None:
        self._weak: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._by_id: dict[int, Any] = {}

    def get(self, con: Any) -> Any:
        """Return the registration of ``con``, or None."""
        try:
            return self._weak.get(con)
        except TypeError:
            return self._by_id.get(id(con))

    def require(self, con: Any, fname: str) -> Any:
        """Return the registration of ``con``; refuse (nothing charged) when there is none."""
        reg = self.get(con)
        if reg is None:
            raise InvalidInputError(
                f"{fname} needs the gpframe functions on this connection: call "
                "gp.duckdb.register(con, session) first. Nothing was charged."
            )
        return reg

    def put(self, con: Any, reg: Any) -> None:
        """Remember ``reg`` as the registration of ``con``."""
        try:
            self._weak[con] = reg
        except TypeError:
            self._by_id[id(con)] = reg

    def install(
        self,
        con: Any,
        session: Any,
        new: Callable[..., Any],
        create: Callable[[Any, Any], None],
        *,
        rng: Any = None,
        crs: Any = None,
        domain: Any = None,
    ) -> Any:
        """Register an operation's functions on ``con`` once: the prologue every module shares.

        Checks the session, resolves ``rng`` and the CRS (before any function exists), then
        either points the existing registration of ``con`` at them (idempotent) or makes one
        with ``new(session=, rng=, units=)``, runs ``create(con, reg)`` and remembers it.
        """
        check_session(session)
        rng = checked_rng(rng)
        units = units_for(crs, domain)
        reg = self.get(con)
        if reg is not None:
            reg.session, reg.rng, reg.units = session, rng, units
            return reg
        reg = new(session=session, rng=rng, units=units)
        create(con, reg)
        self.put(con, reg)
        return reg


def check_on_exhausted(value: Any, fname: str) -> None:
    """Refuse an ``on_exhausted=`` other than "exclude" / "raise" (nothing charged)."""
    if value not in ("exclude", "raise"):
        raise InvalidInputError(
            f"{fname}: on_exhausted={value!r} must be 'exclude' (a user who cannot pay gets "
            "NULL / is left out, charged nothing) or 'raise' (the query is refused, naming "
            "them). Nothing was charged."
        )


def check_session(session: Any) -> None:
    """Refuse anything that is not a Session, before any function is created."""
    if not hasattr(session, "reserve"):
        raise InvalidInputError(
            f"session={session!r} is not a gpframe Session; pass gp.Session(budget=...). "
            "Nothing was charged."
        )


def checked_rng(rng: Any) -> Any:
    """Resolve ``rng`` at registration, so a test-only or foreign source fails before any charge.

    Inside a UDF the batch is reserved before the sampler runs; a source refused there would
    settle the batch's reservation at its full allocation.
    """
    from gpframe.mechanisms.noise.bits import resolve_rng

    return resolve_rng(rng)


# ---------------------------------------------------------------------------------------- units

#: a batch of at least this many rows whose every x lies in [-180, 180] and y in [-90, 90] is
#: taken for degrees when no CRS was declared (metres that small are a 360 m × 180 m patch)
LONLAT_ROWS = 16


def units_for(crs: Any, domain: Any = None) -> Any:
    """Resolve ``register(..., crs=, domain=)`` once: a :class:`gpframe.geo.MetricFrame` or None.

    The CRS is checked (projected, metres, not Web Mercator) and its scale factor bounded over
    its area of use (or ``domain``) by the accessor's own ``to_crs=`` code, before any function
    is created.
    """
    from gpframe.geo import MetricFrame, metric_frame

    if isinstance(crs, MetricFrame):
        return crs
    if crs is None:
        if domain is not None:
            raise InvalidInputError(
                "domain= bounds the scale factor of a declared CRS: pass crs= (the projected "
                "metre CRS of x and y) with it. Nothing was charged."
            )
        return None
    return metric_frame(crs, domain, name="crs")


def check_units(
    units: Any, xy: np.ndarray, fname: str, what: str = "x/y", ext: Extent | None = None
) -> None:
    """Refuse coordinates that cannot be metres of the declared CRS (or look like degrees).

    With a CRS: every point must lie in the public extent its scale bound holds over (the
    check the accessor's ``to_crs=`` path makes). Without one: a batch of
    :data:`LONLAT_ROWS` or more rows that all fit lon/lat ranges is refused as degrees.
    ``ext``: the points' extent if the caller has it (see :func:`outside`).
    """
    fix = (
        "Project lon/lat to a metre CRS first (pyproj / GeoPandas before loading, or DuckDB "
        "spatial's ST_Transform) and name it: gp.duckdb.register(con, session, "
        "crs='EPSG:326NN')."
    )
    if units is None:
        if len(xy) >= LONLAT_ROWS and bool(
            (np.abs(xy[:, 0]) <= 180.0).all() and (np.abs(xy[:, 1]) <= 90.0).all()
        ):
            raise InvalidInputError(
                f"{fname}: all {len(xy)} {what} values of this batch lie within ±180 / ±90: "
                f"they look like degrees, but {what} must be metres of a projected CRS. {fix} "
                "If they really are metres, declare their CRS with crs= (then they are checked "
                "against its area of use instead). Nothing was charged for this batch."
            )
        return
    bad = outside(units, np.asarray(xy, dtype=np.float64), ext)
    if bad.any():
        # counts only, never a coordinate: error text reaches logs and notebooks
        raise InvalidInputError(
            f"{fname}: {int(bad.sum())} of {len(xy)} {what} point(s) are not metres of "
            f"crs={units.label} inside {units.source}, over which its scale factor is bounded. "
            f"Degrees passed as metres land here. {fix} Nothing was charged for this batch."
        )


#: id(footprint) -> (footprint, an axis-aligned box in its interior, or None); the footprint is
#: kept so that its id is not reused while the entry lives (one entry per declared extent)
_INNER: dict[int, tuple[Any, tuple[float, float, float, float] | None]] = {}

#: held around every GEOS call on a declared extent's footprint from a batch. The footprint is
#: a *prepared* polygon shared by all of DuckDB's threads, and GEOS builds a prepared
#: geometry's indexes lazily, without synchronisation (GEOS issue "Prepared geometry is not
#: thread-safe", libgeos/geos#825): shapely releases the GIL, so two batches testing points
#: against a fresh footprint at once corrupted the heap ("malloc(): unaligned tcache chunk
#: detected", the process aborted). Only the points outside :func:`_inner_box` reach GEOS.
GEOS_LOCK = threading.Lock()


def _inner_box(footprint: Any) -> tuple[float, float, float, float] | None:
    """Return a box (xmin, ymin, xmax, ymax) inside ``footprint`` (None if none); cached.

    The caller holds :data:`GEOS_LOCK`.
    """
    hit = _INNER.get(id(footprint))
    if hit is not None and hit[0] is footprint:
        return hit[1]
    import shapely

    x0, y0, x1, y1 = footprint.bounds
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    box = None
    for t in (0.95, 0.9, 0.8, 0.65, 0.5, 0.3):
        b = (cx - t * hx, cy - t * hy, cx + t * hx, cy + t * hy)
        # contains_properly: the box lies in the interior, so do all points strictly inside it
        if shapely.contains_properly(footprint, shapely.box(*b)):
            box = b
            break
    _INNER[id(footprint)] = (footprint, box)
    return box


def outside(units: Any, xy: np.ndarray, ext: Extent | None = None) -> np.ndarray:
    """``units.outside(xy)``, testing only the points outside a box inside the footprint.

    The polygon test of a 2,048-row batch is a tenth of a ``gp_privatize`` call; the points
    strictly inside the box are inside the footprint (:func:`_inner_box`), the rest (and NaN)
    get the exact test, one batch at a time (:data:`GEOS_LOCK`). The mask is the same either
    way. ``ext``: the points' ``(x_min, y_min, x_max, y_max)``, NaN if a point is NaN, when
    the caller computed it already (no reductions here then).
    """
    fp = getattr(units, "footprint", None)
    hit = None if fp is None else _INNER.get(id(fp))
    if hit is not None and hit[0] is fp:
        box = hit[1]
    else:
        with GEOS_LOCK:
            box = None if fp is None else _inner_box(fp)
    if box is None or len(xy) == 0:
        with GEOS_LOCK:
            return np.asarray(units.outside(xy), dtype=bool)
    x, y = xy[:, 0], xy[:, 1]
    # four reductions when every point is inside the box (a NaN fails them): no row masks
    x0, y0, x1, y1 = ext if ext is not None else (x.min(), y.min(), x.max(), y.max())
    if x0 > box[0] and x1 < box[2] and y0 > box[1] and y1 < box[3]:
        return np.zeros(len(xy), dtype=bool)
    rest = ~((x > box[0]) & (x < box[2]) & (y > box[1]) & (y < box[3]))
    out = np.zeros(len(xy), dtype=bool)
    if rest.any():
        with GEOS_LOCK:
            out[rest] = units.outside(xy[rest])
    return out


def coordinate_range(xy: np.ndarray, ext: Extent | None = None) -> tuple[float, float]:
    """(smallest, largest) coordinate of the points, NaN if one is; (0, 0) for no points.

    From their extent when the caller has it (no reductions), else two over ``xy``.
    ``np.min`` / ``np.max`` keep a NaN, where Python's ``min()`` may drop it.

    >>> coordinate_range(np.array([[1.0, -2.0], [3.0, 4.0]])), coordinate_range(np.zeros((0, 2)))
    ((-2.0, 4.0), (0.0, 0.0))
    """
    if not xy.size:
        return 0.0, 0.0
    if ext is not None:
        return float(np.min(ext[:2])), float(np.max(ext[2:]))
    return float(xy.min()), float(xy.max())


def check_points(
    xy: np.ndarray,
    fname: str,
    units: Any = None,
    what: str = "x/y",
    *,
    guess: bool = True,
    ext: Extent | None = None,
) -> None:
    """Refuse a batch whose points are not finite metres of the declared CRS (nothing charged).

    NaN / inf, beyond ±2**40 m (no projected CRS reaches that), then :func:`check_units`
    (``guess=False`` skips its degrees heuristic when no CRS was declared). ``ext``: the
    points' extent when the caller has it (NaN if a point is): no reductions here then.
    """
    from gpframe.queries.privatize import COORD_MAX_M

    # two reductions without a temporary (a NaN fails the comparisons too); the row-wise
    # tests, which cost ten times more on 10⁶ rows, only to word a refusal
    lo, hi = coordinate_range(xy, ext)
    if xy.size and not (-COORD_MAX_M < lo and hi < COORD_MAX_M):
        nonfinite = ~np.isfinite(xy).all(axis=1)
        if nonfinite.any():
            raise InvalidInputError(
                f"{fname}: {what} has {int(nonfinite.sum())} NaN or infinite value(s); filter "
                "them out (WHERE isfinite(x) AND isfinite(y)). Nothing was charged for this batch."
            )
        raise InvalidInputError(
            f"{fname}: a coordinate is beyond ±2**40 m; {what} must be metres of a projected "
            "CRS. Nothing was charged for this batch."
        )
    if units is not None or guess:
        check_units(units, xy, fname, what, ext)


def exact_amounts(vals: np.ndarray, fname: str, param: str, unit: str) -> dict[float, Fraction]:
    """Exact amount of every distinct float amount of a batch: finite and > 0, else refused.

    The batch form of :func:`gpframe.accounting.amounts.positive` (the relation helpers check
    their one amount with :func:`gpframe.accounting.amounts.metric_amount`).
    """
    if vals.size and 0 < vals.min() == vals.max() < np.inf:  # one amount (the usual query)
        return {float(vals[0]): _positive(float(vals[0]), param)}
    bad = ~np.isfinite(vals) | (vals <= 0)
    if bad.any():
        raise InvalidInputError(
            f"{fname}: {param}={float(vals[bad][0])!r} in {int(bad.sum())} row(s) must be finite "
            f"and > 0 ({unit}). Nothing was charged for this batch."
        )
    return {v: _positive(v, param) for v in np.unique(vals).tolist()}


@functools.lru_cache(maxsize=4096)
def _positive(value: float, param: str) -> Fraction:
    """:func:`gpframe.accounting.amounts.positive` of a float, once per distinct value.

    A query repeats its amount in every batch; a ``Fraction`` is immutable, so the cached one
    is shared safely between DuckDB's threads.
    """
    from gpframe.accounting.amounts import positive

    return positive(value, param)


def _existing(con: Any, names: Iterable[str]) -> set[str]:
    listed = ", ".join(f"'{n}'" for n in names)  # internal constant names, never user input
    return {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            f"WHERE function_name IN ({listed})"
        ).fetchall()
    }


def create_udf(
    con: Any, name: str, fn: Any, arg_types: list[Any], return_type: Any, existing: set[str]
) -> None:
    """Create a side-effecting Arrow UDF, replacing one of the same name in ``existing``.

    A function left by an earlier import of the module (DuckDB refuses a name twice) is removed
    first. ``side_effects=True`` stops DuckDB from folding constant arguments, merging repeated
    calls and running the UDF during ``EXPLAIN``; ``null_handling="special"`` hands NULLs to the
    UDF, which returns NULL for them and charges nothing.
    """
    if name in existing:
        con.remove_function(name)
    con.create_function(
        name,
        fn,
        arg_types,
        return_type,
        type="arrow",
        null_handling="special",
        side_effects=True,
    )


def create_id_udfs(
    con: Any,
    macro: str,
    make_udf: Callable[[str], Any],
    params: str,
    casts: str,
    arg_types: list[Any],
    return_type: Any,
) -> None:
    """Create ``{macro}_udf_int`` / ``_uint`` / ``_str`` and ``TEMP MACRO {macro}(user_id, ...)``.

    One canonical ledger key per user (:mod:`gpframe.ledger.keys`), as the Python accessor
    keys the same column: integer ids up to BIGINT (and the unsigned types that fit) go to
    ``_int`` as BIGINT, UBIGINT to ``_uint`` (both charged as the Python int of the value, so
    UBIGINT 7 is user 7), HUGEINT / UHUGEINT to the same UDFs when the value fits (an error
    otherwise), VARCHAR and UUID to ``_str`` as text (a UUID's text is its canonical form).
    Any other type (FLOAT, DOUBLE, DECIMAL, BOOLEAN, ...) raises the error of
    :func:`gpframe.ledger.keys.refusal` before any UDF runs: nothing is charged.
    ``make_udf(id_type)`` gives the Python function of each UDF (``id_type`` is the DuckDB
    type of its first argument); ``arg_types`` are the DuckDB types after ``user_id`` and
    ``casts`` the macro's arguments cast to them. The macro is TEMP: UDFs are not persisted,
    so a stored macro would break in the next process.
    """
    from duckdb.sqltypes import BIGINT, UBIGINT, VARCHAR

    udf = f"{macro}_udf"
    paths = (
        ("_int", "BIGINT", BIGINT), ("_uint", "UBIGINT", UBIGINT), ("_str", "VARCHAR", VARCHAR)
    )  # fmt: skip
    existing = _existing(con, [udf + suffix for suffix, _, _ in paths])
    for suffix, tname, utype in paths:
        create_udf(
            con, udf + suffix, make_udf(tname), [utype, *arg_types], return_type, existing,
        )  # fmt: skip
    body = _dispatch(udf, casts)
    con.execute(f"CREATE OR REPLACE TEMP MACRO {macro}(user_id, {params}) AS {body}")


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _dispatch(udf: str, casts: str) -> str:
    """Return the macro body: pick the UDF (or the refusal) from ``typeof(user_id)``.

    TRY_CAST in the integer branches: a constant id of another type is folded in the branches
    not taken and must not fail there; in the branch taken every value fits.
    """
    from gpframe.ledger import keys

    signed = ", ".join(map(_sql_text, keys.SQL_SIGNED))
    head, tail = str(keys.refusal("user_id", "\x00")).split("\x00")
    what = (
        "CASE WHEN typeof(user_id) IN ('FLOAT', 'DOUBLE') THEN 'float' "
        "WHEN typeof(user_id) LIKE 'DECIMAL%' THEN 'decimal' "
        "WHEN typeof(user_id) = 'BOOLEAN' THEN 'boolean' ELSE typeof(user_id) END"
    )
    big = _sql_text(
        "user_id holds a HUGEINT / UHUGEINT id that does not fit BIGINT / UBIGINT; cast the "
        "column to UBIGINT, BIGINT or VARCHAR. Nothing was charged."
    )

    def wide(target: str) -> str:
        return (
            f"coalesce(TRY_CAST(user_id AS {target}), "
            f"CASE WHEN user_id IS NOT NULL THEN error({big}) END)"
        )

    return (
        f"CASE WHEN typeof(user_id) IN ({signed}) "
        f"THEN {udf}_int(TRY_CAST(user_id AS BIGINT), {casts}) "
        f"WHEN typeof(user_id) = 'UBIGINT' THEN {udf}_uint(TRY_CAST(user_id AS UBIGINT), {casts}) "
        f"WHEN typeof(user_id) IN ('VARCHAR', 'UUID', '\"NULL\"') "  # NULL literal: NULL out
        f"THEN {udf}_str(CAST(user_id AS VARCHAR), {casts}) "
        f"WHEN typeof(user_id) = 'HUGEINT' THEN {udf}_int({wide('BIGINT')}, {casts}) "
        f"WHEN typeof(user_id) = 'UHUGEINT' THEN {udf}_uint({wide('UBIGINT')}, {casts}) "
        f"ELSE error({_sql_text(head)} || {what} || {_sql_text(tail)}) END"
    )


def create_single_udf(con: Any, name: str, fn: Any, arg_types: list[Any], return_type: Any) -> None:
    """:func:`create_udf` for one name, looking up whether it exists first."""
    create_udf(con, name, fn, arg_types, return_type, _existing(con, (name,)))


# ------------------------------------------------------------------------------ Arrow columns


def arrow(a: Any) -> Any:
    """One contiguous Arrow array (DuckDB may hand a ChunkedArray)."""
    return a.combine_chunks() if hasattr(a, "combine_chunks") else a


def to_numpy(a: Any, dtype: Any = None) -> np.ndarray:
    """Return an Arrow column's values as numpy (NULL slots hold arbitrary values or NaN)."""
    return np.asarray(arrow(a).to_numpy(zero_copy_only=False), dtype=dtype)


def nulls(a: Any) -> np.ndarray:
    """Boolean mask of the NULL slots of an Arrow column."""
    a = arrow(a)
    if a.null_count == 0:
        return np.zeros(len(a), dtype=bool)
    return np.asarray(a.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def objects(a: Any) -> np.ndarray:
    """Python objects, one per row (e.g. WKB bytes); user ids go through :func:`user_objects`."""
    a = arrow(a)
    out = np.empty(len(a), dtype=object)
    out[:] = a.to_pylist()
    return out


def union_sizes(n_users: Any) -> np.ndarray:
    """Return the optional ``n_users`` argument of the elimination functions as int64 (-1: NULL).

    Clipped to 2**62: a BIGINT near 2**63 is no int64 after the float round trip, and a larger
    n only widens the union bound, so 2**62 is as safe as the value asked for.
    """
    n = np.clip(np.nan_to_num(to_numpy(n_users, np.float64), nan=-1), -1, 2.0**62)
    return np.where(nulls(n_users), -1, n).astype(np.int64)


def union_of(n_users: Any) -> int | None:
    """Return a row's ``n_users`` as the runs take it: None (the batch's rows asked) if ≤ 0."""
    nu = int(n_users)
    return nu if nu > 0 else None


def factorize_ids(a: Any, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(codes of the non-NULL ``rows`` (None: every row), canonical ledger key of each code).

    The keys are those the accessor uses for the same ids (:mod:`gpframe.ledger.keys`): an
    int64 array when every id is an integer that fits, else an object array of Python ints
    and strs. Arrow factorizes first, so only the distinct ids become Python objects.
    """
    import pandas as pd
    import pyarrow as pa

    from gpframe.ledger.keys import user_keys

    a = arrow(a)
    if rows is not None and len(rows) != len(a):
        a = a.take(pa.array(rows, type=pa.int64()))
    if a.null_count == 0 and (pa.types.is_int64(a.type) or pa.types.is_uint64(a.type)):
        v = np.asarray(a.to_numpy(zero_copy_only=False))
        if v.dtype == np.int64 or (v.size and int(v.max()) < 2**63):
            v = v.astype(np.int64, copy=False)
            if v.size and 0 <= int(v.min()) and int(v.max()) < 4 * v.size + 4096:
                # small non-negative ids (vehicle numbers): one pass over a direct table
                return _dense_first_seen(v, int(v.max()) + 1)
            # the key_array of what user_keys gives, without a Python int per distinct id
            codes, uniques = pd.factorize(v, sort=False)
            return np.asarray(codes, dtype=np.int64), np.asarray(uniques, dtype=np.int64)
    codes, keys = user_keys(a, "user_id")
    return codes, key_array(keys)


@njit(nogil=True)
def _dense_first_seen(v: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(v, sort=False)`` of ids in ``0 .. size-1``: codes in first-seen order.

    Written by hand because pandas' hash table holds the GIL (11 ms on 10⁶ ids): a direct
    table indexed by the id is one compiled pass (about 2 ms) that leaves the GIL to the
    other DuckDB threads. Same codes and uniques as pandas.
    """
    table = np.full(size, -1, np.int64)
    codes = np.empty(v.size, np.int64)
    uniques = np.empty(min(size, v.size), np.int64)
    k = 0
    for i in range(v.size):
        c = table[v[i]]
        if c < 0:
            c = k
            table[v[i]] = k
            uniques[k] = v[i]
            k += 1
        codes[i] = c
    return codes, uniques[:k].copy()


def key_array(keys: list[Any]) -> np.ndarray:
    """Canonical keys as int64 when they all are ints that fit, else as an object array."""
    if keys and all(type(k) is int for k in keys) and -(2**63) <= min(keys) <= max(keys) < 2**63:
        return np.asarray(keys, dtype=np.int64)
    out = np.empty(len(keys), dtype=object)
    out[:] = keys
    return out


def user_objects(a: Any, rows: np.ndarray) -> np.ndarray:
    """Return the canonical ledger key of each of the non-NULL ``rows`` (object array).

    Only the distinct ids are converted; the per-row array is filled by numpy indexing.
    """
    codes, keys = factorize_ids(a, rows)
    table = np.empty(len(keys), dtype=object)
    table[:] = keys.tolist()
    return table[codes]


def group_codes(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Code per row of its tuple of ``columns`` values, in order of first appearance (int64).

    The rows of a batch that share their public parameters (region, rho, rounds...) run as one
    group. A query usually passes constants, so one group is the common case: it is found with
    a comparison per column instead of a pandas ``MultiIndex`` factorization, which costs a
    sizeable share of a 2,048-row batch.

    >>> group_codes({"r": np.array([0.1, 0.1]), "c": np.array([3, 3])}).tolist()
    [0, 0]
    >>> group_codes({"r": np.array([0.1, 0.2, 0.1]), "c": np.array([3, 3, 3])}).tolist()
    [0, 1, 0]
    """
    cols = list(columns.values())
    n = len(cols[0]) if cols else 0
    if n == 0 or all(bool((c == c[0]).all()) for c in cols):
        return np.zeros(n, dtype=np.int64)
    import pandas as pd

    codes, _ = pd.factorize(pd.MultiIndex.from_frame(pd.DataFrame(columns)), sort=False)
    return np.asarray(codes, dtype=np.int64)


def factorize_objects(users: np.ndarray) -> tuple[np.ndarray, Any]:
    """(per-row codes, unique ids) of an object array of ids, in order of first appearance."""
    import pandas as pd

    return pd.factorize(pd.Series(users, dtype=object), sort=False)


def per_user_sum(codes: np.ndarray, n_users: int, amounts: Any) -> list[Any]:
    """Σ of the rows' exact amounts per user (a user with several rows pays for each)."""
    from fractions import Fraction

    total: list[Any] = [Fraction(0)] * n_users
    for i, u in enumerate(codes.tolist()):
        total[u] += amounts[i]
    return total


# ----------------------------------------------------------------------------------- charging


def charge_batch(
    session: Any,
    users: Any,
    alloc: Any,
    work: Callable[[np.ndarray], Any],
    *,
    query: str,
    params: dict[str, Any],
    notion: str = "metric",
    kind: str | None = None,
    units: bool = False,
    all_or_none: str | None = None,
    on_exhausted: str = "exclude",
    prepaid: bool = False,
) -> np.ndarray:
    """Reserve ``alloc`` for ``users``, run ``work(admitted)``, charge what it returns.

    One Arrow batch through the one driver, :func:`gpframe.ledger.run.run`, in the driver's
    order: reserve, ``work``, durable charge, return. No process-wide lock is held: the Ledger
    serialises the reserve and the charge with its own lock, and ``work`` (the noise) runs
    in parallel with other threads' batches (a caller may hold :func:`batch_lock`). ``work``
    gets the boolean admitted mask per user, draws noise for the admitted users only and
    returns each user's actual charge (in ledger units if ``units``, else exact amounts; 0 for
    a refused user, at most the allocation). The charge is durable
    before this returns, so before any value leaves the UDF. If ``work`` raises, the reservation
    is settled at the full allocation (noise may have been drawn). With ``all_or_none`` (an
    error message), a reservation that refuses any user is cancelled before anything is drawn
    and :class:`~gpframe.errors.LedgerError` is raised: nothing is charged. Inside
    ``gp.duckdb.preview`` the batch is only planned (:data:`SQL_PREVIEWS`), under
    :data:`LEDGER_LOCK` (the plan's held amounts are shared by the preview's threads), and
    nobody is admitted, so every row comes out NULL. With ``on_exhausted="raise"`` (the
    registration's, or that of a relation helper running on the session:
    :data:`SQL_ON_EXHAUSTED`) a user
    who cannot pay refuses the batch with a :class:`~gpframe.errors.BudgetExceededError`
    naming them, before anything is reserved or drawn (:func:`gpframe.ledger.run.run`).
    ``prepaid=True`` (a batch whose charge is its allocation, ``units`` only): the reservation's
    transaction commits the charge too, before ``work`` draws anything, so the batch makes one
    durable write instead of two; ``work`` must return the allocations of the admitted users.

    Returns
    -------
    numpy.ndarray
        The admitted mask per user.
    """

    def check(r: Any) -> None:  # no noise yet: raising cancels the reservation
        if all_or_none is not None and not np.asarray(r.admitted, dtype=bool).all():
            raise LedgerError(all_or_none)

    def compute(r: Any) -> Charge[np.ndarray]:
        admitted = np.asarray(r.admitted, dtype=bool)
        return Charge(value=admitted, charges=work(admitted), units=units)

    with LEDGER_LOCK:
        plan = SQL_PREVIEWS.get(id(session))
        helper = SQL_ON_EXHAUSTED.get(id(session))
        strict = (helper[-1] if helper else on_exhausted) == "raise"
    # a preview plans under the lock (admission and plan.add must not interleave); a real
    # batch holds the Ledger's lock only inside reserve and charge. Its writes are durable
    # when they return, but their copy into a file ledger's main file waits for the next
    # checkpoint (at most about a second later; docs/ledger.md): hundreds of batches commit
    # per query, and a checkpoint per commit tripled its fsyncs
    deferring = getattr(getattr(getattr(session, "ledger", None), "store", None), "deferring",
                        None)  # fmt: skip
    with (
        LEDGER_LOCK if plan is not None else contextlib.nullcontext(),
        raising_on_exhausted() if strict else contextlib.nullcontext(),
        deferring() if deferring is not None else contextlib.nullcontext(),
    ):
        ran = run(session, users, alloc, query=query, params=params, notion=notion, kind=kind,
                  units=units, check=check, compute=compute, dry_run=plan,
                  prepaid=prepaid and plan is None)  # fmt: skip
    if ran.status == "preview":  # planned only: no user's rows are computed (NULL out)
        return np.zeros(len(ran.reservation.users), dtype=bool)
    return np.asarray(ran.value, dtype=bool)


# ------------------------------------------------------------------------ elimination batches

#: the fixed public parameters of the SQL elimination functions (``gp_in_region``,
#: ``gp_kde_contribution``): doubling split, β = 0.05, at most 64 rounds
SPLIT, BETA, MAX_ROUNDS = "doubling", 0.05, 64


def check_rounds(rounds: np.ndarray, fname: str) -> np.ndarray:
    """Refuse a batch whose ``rounds`` are outside 1..64 or cannot be split; as int64."""
    from gpframe.queries.elimination import split_fractions

    bad = (rounds < 1) | (rounds > MAX_ROUNDS)
    if bad.any():
        raise InvalidInputError(
            f"{fname}: rounds={int(rounds[bad][0])} must be in 1..{MAX_ROUNDS}. Nothing was "
            "charged for this batch."
        )
    out = np.asarray(rounds, dtype=np.int64)
    for c in np.unique(out).tolist():
        split_fractions(SPLIT, int(c))
    return out


def elimination_batch(
    reg: Any,
    fname: str,
    method: str,
    users: tuple[np.ndarray, np.ndarray],
    amounts: tuple[np.ndarray, dict[float, Fraction]],
    rounds: np.ndarray,
    gcode: np.ndarray,
    release: Callable[[np.ndarray, Any, Fraction], Any],
    *,
    scale_max: float,
    params: dict[str, Any],
    note: Callable[[int], dict[str, Any]] | None = None,
) -> np.ndarray:
    """Reserve, eliminate group by group and charge one batch of rows; returns admitted per row.

    ``release`` returns its rows' charges as an object array (equal charges one object) or as
    ``(codes, values)``: row ``i`` of the group pays ``values[codes[i]]``.

    The one runner of ``gp_in_region`` and ``gp_kde_contribution``: each row is charged the
    parts of the rounds it ran, each user the sum over their rows. ``users`` are the rows'
    codes and the ledger key of each code (:func:`factorize_ids`); ``amounts`` the rows' rho
    and the exact amount of each distinct value (:func:`exact_amounts`); each row's allocation
    is the ledger unit above it, as on the Python path. Every (allocation, rounds) pair's round
    parts are checked before the reservation (a part too small to split was refused inside it,
    so the batch was charged). The admitted rows of group ``g`` (rows that share the public
    parameters) run as one ``release(rows, allocations, unit)``, in batch order, so a one-group
    batch runs exactly as the Python path; ``allocations`` are grouped by value
    (:class:`gpframe.queries.elimination.GroupedAmounts`); it stores its outputs and returns
    each row's charge. The reservation and the charge are int64 ledger units, summed per user
    exactly (:func:`units_per_user`): no ``Fraction`` per row or user.

    Inside ``gp.duckdb.preview``, each group's planned run is noted for the preview's error
    (:func:`preview_note` under ``fname``): its admitted rows' allocations, ``rounds`` and the
    public parameters ``note(first row)`` gives (the union's n, the query point...).
    """
    from gpframe.ledger.charges import filter_kind
    from gpframe.queries.elimination import GroupedAmounts, check_method_parts

    rhos, exact = amounts
    codes, keys = users
    n_u = len(keys)
    session = reg.session  # read once: the allocation and the charge see the same session
    with batch_lock(reg):
        if filter_kind(session) != "cgp":
            raise InvalidInputError(
                f"{fname} releases Gaussian noise (rho=): the session's filters must be CGP (a "
                "Gaussian step is never admitted by a pure-GP filter). Use the Python API with "
                "eps= for GP sessions. Nothing was charged for this batch."
            )
        lu = session.ledger.units["metric"]
        unit = Fraction(1) / lu.scale
        distinct, inv = np.unique(rhos, return_inverse=True)
        v_units = [lu.up(exact[v]) for v in distinct.tolist()]
        row_units = np.asarray(v_units, dtype=np.int64)[inv.reshape(-1)]
        # the distinct (amount, rounds) pairs as one int64 key each (rounds are 1..MAX_ROUNDS):
        # one np.unique instead of a Python tuple per row
        top = MAX_ROUNDS + 1
        pair = np.unique(inv.reshape(-1).astype(np.int64) * top + rounds.astype(np.int64))
        for k, c in zip((pair // top).tolist(), (pair % top).tolist(), strict=True):
            check_method_parts(lu.to_fraction(v_units[k]), kind="cgp", method=method, rounds=c,
                               split=SPLIT, beta=BETA, unit=unit, scale_max=scale_max)  # fmt: skip
        alloc = units_per_user(lu, codes, n_u, inv.reshape(-1),
                               [lu.to_fraction(u) for u in v_units])  # fmt: skip

        def work(adm_u: np.ndarray) -> np.ndarray:
            admitted = adm_u[codes]
            # each row's charge as a code into the few distinct values (0: not run, nothing)
            c_codes = np.zeros(len(rhos), dtype=np.int64)
            values: list[Fraction] = [Fraction(0)]
            for g in range(int(gcode.max()) + 1):
                sel = np.flatnonzero((gcode == g) & admitted)
                if sel.size == 0:
                    continue
                got = release(sel, GroupedAmounts.from_units(row_units[sel], unit), unit)
                g_codes, table = got if isinstance(got, tuple) else _by_object(got)
                c_codes[sel] = len(values) + np.asarray(g_codes, dtype=np.int64)
                values += list(table)
            units = units_per_user(lu, codes, n_u, c_codes, values)
            return np.where(adm_u, units, 0)

        admitted = charge_batch(
            session, keys, alloc, work, query=fname,
            params={"method": method, "split": SPLIT, "beta": BETA, **params, "source": "duckdb",
                    **metric_params(reg)},
            kind=None, units=True, on_exhausted=reg.on_exhausted,
        )[codes]  # fmt: skip

        def planned(adm_u: np.ndarray) -> list[dict[str, Any]]:
            adm = adm_u[codes]
            out = []
            for g in range(int(gcode.max()) + 1) if note is not None else ():
                sel = np.flatnonzero((gcode == g) & adm)
                if sel.size:
                    out.append({"alloc": GroupedAmounts.from_units(row_units[sel], unit),
                                "n": int(sel.size), "rounds": int(rounds[sel[0]]), "unit": unit,
                                "scale_max": scale_max, "codes": codes[sel],
                                **note(int(sel[0]))})  # fmt: skip
            return out

        preview_note(session, fname, planned, least=lambda groups: _least_units(lu, n_u, groups))
        tally(reg, int(admitted.sum()), int((~admitted).sum()))
    return admitted


def preview_note(
    session: Any,
    key: str,
    make: Callable[[np.ndarray], list[Any]],
    least: Callable[[list[Any]], np.ndarray] | None = None,
) -> None:
    """While ``gp.duckdb.preview`` plans ``session``: add what a batch would release to its notes.

    Called right after the batch's :func:`charge_batch`, under :func:`batch_lock` (a preview's
    batches are planned one at a time), so the plan's last call is the batch's: ``make`` gets
    its admitted mask per user and returns the public parameters of what it would release,
    appended to ``notes[key]`` for the preview's expected error. ``least`` (an adaptive
    batch) maps them to each user's least charge in ledger units, kept in
    ``notes["least_units"]`` under the call's id. Nothing outside a preview.
    """
    with LEDGER_LOCK:
        plan = SQL_PREVIEWS.get(id(session))
        if plan is not None and plan.calls:
            call = plan.calls[-1]
            made = make(np.asarray(call.admitted, dtype=bool))
            plan.notes.setdefault(key, []).extend(made)
            if least is not None:
                plan.notes.setdefault("least_units", {})[id(call)] = least(made)


def _least_units(lu: Any, n_users: int, groups: list[dict[str, Any]]) -> np.ndarray:
    """Each user's least charge (ledger units) of a batch's planned elimination groups.

    Every row asked runs round 1 and pays its part π₁·a (rounded down to the ledger unit, as
    :func:`gpframe.queries.elimination.prepare_parts` fixes it); a user pays the sum over
    their rows, as :func:`units_per_user` charges it.
    """
    from gpframe.queries.elimination import prepare_parts, split_fractions

    out = np.zeros(n_users, dtype=np.int64)
    for e in groups:
        parts = prepare_parts(e["alloc"], e["n"], split_fractions(SPLIT, e["rounds"]),
                              unit=e["unit"])  # fmt: skip
        first = np.array([lu.up(row[0]) for row in parts.table] + [0], dtype=np.int64)
        np.add.at(out, e["codes"], first[np.where(parts.codes >= 0, parts.codes,
                                                  len(parts.table))])  # fmt: skip
    return out


def _by_object(charges: np.ndarray) -> tuple[np.ndarray, list[Fraction]]:
    """Return (code per row, distinct values) of an object array of charges.

    Equal charges share one object (one per group and rounds run), so each value is found by
    its ``id`` and converted once.
    """
    ids = np.fromiter(map(id, charges), dtype=np.uint64, count=charges.size)
    c_codes, _ = pd.factorize(ids, sort=False)
    _, first = np.unique(c_codes, return_index=True)
    return c_codes, charges[first].tolist()


def units_per_user(
    lu: Any, codes: np.ndarray, n_users: int, v_codes: np.ndarray, values: list[Fraction]
) -> np.ndarray:
    """Ledger units of Σ over each user's rows of ``values[v_codes[row]]``, rounded up once.

    Exactly what the ledger makes of the per-user ``Fraction`` sum (``lu.up``), without one:
    the few distinct values are brought to a common denominator and the rows' numerators
    summed per user in int64 (Python ints when that could overflow). A sum that does not fit
    int64 is refused before anything is reserved.

    >>> from gpframe.accounting.amounts import LedgerUnits
    >>> lu = LedgerUnits(3)
    >>> units_per_user(lu, np.array([0, 0, 1]), 2, np.array([0, 1, 1]),
    ...                [Fraction(1, 3000), Fraction(1, 2)]).tolist()   # ceil(1/3 + 500), 500
    [501, 500]
    """
    fr = [Fraction(v) * lu.scale for v in values]
    den = math.lcm(*(f.denominator for f in fr)) if fr else 1
    nums = [f.numerator * (den // f.denominator) for f in fr]
    top = max(nums, default=0)
    if top * max(len(codes), 1) + den < 2**62:
        tot = np.zeros(n_users, dtype=np.int64)
        np.add.at(tot, codes, np.asarray(nums, dtype=np.int64)[v_codes])
        return (tot + (den - 1)) // den
    big = [0] * n_users
    for u, k in zip(codes.tolist(), np.asarray(v_codes).tolist(), strict=True):
        big[u] += nums[k]
    exact_u = [-((-t) // den) for t in big]
    if max(exact_u, default=0) > 2**63 - 1:
        raise InvalidInputError(
            "a user's charge in this batch does not fit the ledger's units; use smaller "
            "amounts. Nothing was charged for this batch."
        )
    return np.asarray(exact_u, dtype=np.int64)


def tally(reg: Any, drawn: int, excluded: int) -> None:
    """Count one batch: rows that drew (all charged) and non-NULL rows refused for budget."""
    with LEDGER_LOCK:
        if id(reg.session) in SQL_PREVIEWS:  # a planned batch drew and refused nothing
            return
    with reg._lock:
        reg.rows_drawn += drawn
        reg.rows_excluded += excluded
        reg.batches += 1
