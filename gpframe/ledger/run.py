"""The one path of a private query through the ledger: reserve, run, charge, hand back.

Every operation of both faces (the pandas accessor, the DuckDB UDF batches, the monitors and
grid statistics) calls :func:`run` with its array algorithm as a callable. The driver

1. reserves each user's allocation (one transaction; users who cannot pay are left out),
2. calls ``check(reservation)``: checks of what was reserved that draw no noise. Raising
   cancels the reservation (nothing is charged) and re-raises; returning ``False`` cancels it
   and returns a refused :class:`Ran` (e.g. a monitor that needs every user, or a planner that
   re-plans without the refused users),
3. calls ``compute(reservation)``, which draws noise for the admitted users only and returns a
   :class:`Charge`: the released values and what each user actually pays,
4. refuses a charge above a user's allocation (an internal error: the block is then settled at
   the full allocation, since noise was drawn), and commits the charge durably,
5. returns a :class:`Ran` for the operation's output builder.

A *dry run* (``dry_run=`` or inside :func:`previewing`) stops after step 2: the admission is
computed read-only (:meth:`gpframe.ledger.session.Ledger.admission`: nothing is written, not
even an audit row), ``check`` runs on the planned reservation, ``compute`` is never called (no
noise is drawn) and the planned reservation is recorded in a :class:`PreviewPlan`. Every
operation of both faces gets its preview from here (``docs/ledger.md``, "Previewing a query").

An exception from ``compute`` settles every admitted user at the full allocation: noise may
have been drawn, so releasing the reservation could leak (see ``docs/ledger.md``). A
``charge_id`` already committed makes the reservation a replay: nothing is drawn, ``compute``
is not called, and the committed charge is reported back.

Examples
--------
>>> import numpy as np
>>> import gpframe as gp
>>> from gpframe.ledger.run import Charge, run
>>> s = gp.Session(budget=gp.GP(eps=1.0))
>>> def count(r):  # the array algorithm: noise for the admitted users only
...     return Charge(value=int(r.admitted.sum()), charges=np.where(r.admitted, 0.25, 0))
>>> ran = run(s, ["ann", "bob"], 0.5, query="count", compute=count)
>>> ran.value, ran.status, s.spent().tolist()
(2, 'charged', [0.25, 0.25])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from gpframe.errors import BudgetExceededError, GpframeInternalError, LedgerError
from gpframe.ledger.session import EXCLUDED_KEY, Reservation

T = TypeVar("T")

__all__ = [
    "Charge",
    "Planned",
    "PreviewPlan",
    "PreviewStop",
    "Ran",
    "active_preview",
    "end_preview",
    "exhausted_error",
    "previewing",
    "raising_on_exhausted",
    "run",
    "with_on_exhausted",
]


@dataclass(frozen=True)
class Charge(Generic[T]):
    """What an array algorithm released and what each user pays for it.

    ``charges`` is a scalar or one amount per user (aligned with the reserved users; entries
    of refused users are ignored), in the reservation's ``kind`` units, or in int64 ledger
    units of the filter when ``units`` is True.
    """

    value: T
    charges: Any
    units: bool = False


@dataclass(frozen=True)
class Ran(Generic[T]):
    """The outcome of :func:`run`.

    ``status`` is ``"charged"`` (``value`` is the algorithm's, the charge is committed),
    ``"refused"`` (``check`` returned False: the reservation was cancelled, ``value`` is None,
    nothing was charged), ``"preview"`` (a dry run that continues: nothing was written or
    drawn, ``value`` is None, the reservation is the planned one) or ``"replay"`` (the
    ``charge_id`` was committed before: nothing was drawn or charged, ``value`` is None; see
    :meth:`Session.reserve`).
    """

    value: T | None
    reservation: Reservation
    status: Literal["charged", "refused", "replay", "preview"]
    charged: bool = False

    @property
    def query_id(self) -> str:
        """The query id of the reservation (of the committed charge for a replay)."""
        return self.reservation.query_id

    @property
    def admitted(self) -> np.ndarray:
        """Boolean mask aligned with the reserved users (all False for a replay)."""
        return np.asarray(self.reservation.admitted, dtype=bool)

    @property
    def allocation_units(self) -> np.ndarray:
        """Reserved int64 ledger units per user (0 for refused users)."""
        return np.asarray(self.reservation.allocation_units)


@dataclass(frozen=True)
class Planned:
    """One reservation a dry run planned: what :meth:`Session.reserve` would have held.

    ``allocation_units`` and ``remaining_units`` (each user's budget left before it) are int64
    ledger units of the notion's filter (0 allocation for a user who would be refused);
    ``refusal`` is the message of the error the real call would raise at this point (a check
    that needs every user), or None.
    """

    query: str
    notion: str
    kind: str
    users: np.ndarray
    admitted: np.ndarray
    allocation_units: np.ndarray
    remaining_units: np.ndarray
    params: dict[str, Any]
    refusal: str | None = None
    requested_units: np.ndarray | None = None


@dataclass
class PreviewPlan:
    """The reservations of one dry run, in the order the operation would make them.

    ``stop``: raise :class:`PreviewStop` after the first planned reservation (the pandas face,
    whose operations need the released values to go on) or return a ``"preview"``
    :class:`Ran` and let the operation continue (the SQL face: each Arrow batch is planned and
    outputs NULL). Later reservations of the same run see the earlier ones as held in full
    (``held``): a real call charges at most the allocation, so a user planned as admitted
    can afford it.
    """

    stop: bool = True
    calls: list[Planned] = field(default_factory=list)
    #: what an operation knows of its result before any noise, for the Preview (``"error"``:
    #: its a-priori bound, ``(value, kind, confidence)``; ``"least"``: the least amount it can
    #: charge each user asked, exact, in the filter's ground units)
    notes: dict[str, Any] = field(default_factory=dict)
    _held: dict[str, dict[Any, int]] = field(default_factory=dict)

    def held(self, notion: str) -> dict[Any, int]:
        """Units per user key held by the reservations planned so far on ``notion``."""
        return self._held.setdefault(notion, {})

    def add(self, p: Planned) -> None:
        """Record a planned reservation; its admitted allocations are held from now on."""
        self.calls.append(p)
        if p.refusal is not None:  # the real call stops here: nothing is held
            return
        h = self.held(p.notion)
        for k, a in zip(p.users.tolist(), p.allocation_units.tolist(), strict=True):
            if a:
                h[k] = h.get(k, 0) + int(a)


class PreviewStop(BaseException):
    """Ends an operation's dry run once its reservation is planned (never escapes a preview).

    A ``BaseException`` so that no ``except Exception`` inside an operation swallows it.
    """


_ACTIVE: ContextVar[PreviewPlan | None] = ContextVar("gpframe_preview", default=None)


@contextlib.contextmanager
def previewing(stop: bool = True) -> Iterator[PreviewPlan]:
    """Make every :func:`run` in this context (thread) a dry run recorded in the yielded plan.

    Examples
    --------
    >>> import gpframe as gp
    >>> s = gp.Session(budget=gp.GP(eps=1.0))
    >>> before = s.ledger.snapshot()
    >>> with previewing() as plan:
    ...     try:
    ...         run(s, ["ann", "bob"], 0.5, query="count", compute=None)
    ...     except PreviewStop:
    ...         pass
    >>> plan.calls[0].admitted.tolist(), s.ledger.snapshot() == before
    ([True, True], True)
    """
    token = _ACTIVE.set(PreviewPlan(stop=stop))
    try:
        yield _ACTIVE.get()  # type: ignore[misc]
    finally:
        _ACTIVE.reset(token)


_RAISE: ContextVar[bool] = ContextVar("gpframe_on_exhausted_raise", default=False)


@contextlib.contextmanager
def raising_on_exhausted(on: bool = True) -> Iterator[None]:
    """Make every :func:`run` in this context refuse a query that would leave a user out.

    The driver's side of ``on_exhausted="raise"``: before reserving, the admission is computed
    read-only and a user who cannot pay (or whom the operation left out before reserving, its
    ``params["excluded_users"]``) raises :class:`~gpframe.errors.BudgetExceededError` naming
    them; nothing is written. A reservation that still refuses someone (another process spent
    in between) is cancelled before any noise, with the same error.
    """
    token = _RAISE.set(on)
    try:
        yield
    finally:
        _RAISE.reset(token)


def exhausted_error(query: str, users: list[Any], n: int, shown: int = 5) -> BudgetExceededError:
    """Build the refusal of ``on_exhausted="raise"``, naming the users who cannot pay."""
    names = ", ".join(repr(u) for u in users[:shown])
    more = f" and {len(users) - shown} more" if len(users) > shown else ""
    return BudgetExceededError(
        f"{query}: {len(users)} of {n} users cannot pay this query: {names}{more}. Pass "
        "on_exhausted='exclude' to run without them (they are charged nothing and listed in "
        "session.report(query_id=...)), lower the amount, or raise their budgets "
        "(session.set_budget). Nothing was charged."
    )


ON_EXHAUSTED = ("exclude", "raise")


def with_on_exhausted(fn: Callable[..., T], args: dict[str, Any]) -> T | None:
    """Apply an operation's ``on_exhausted=`` (``args`` its locals); None when it is "exclude".

    ``"raise"``: plan the whole call read-only (a dry run) and refuse it, naming the users, if
    any reservation would leave someone out; then call ``fn`` with ``on_exhausted="exclude"``
    inside :func:`raising_on_exhausted`, so that every reservation still refuses a user who
    cannot pay by then (nothing is drawn under a refused reservation).
    """
    value = args.get("on_exhausted")
    if value not in ON_EXHAUSTED:
        from gpframe.errors import InvalidInputError

        raise InvalidInputError(
            f"on_exhausted={value!r} must be 'exclude' (users who cannot pay are left out, "
            "charged nothing and listed in the result) or 'raise' (the query is refused, naming "
            "them). Nothing was charged."
        )
    if value == "exclude":
        return None
    a = {k: v for k, v in args.items() if k != "on_exhausted"}
    if _ACTIVE.get() is None:
        # plan the whole call first (read-only): a user who can pay the first of its
        # reservations but not a later one is refused before anything is charged
        with previewing() as plan:
            try:
                fn(**a, on_exhausted="exclude")
            except PreviewStop:
                pass
        refused: list[Any] = []
        asked: set[Any] = set()
        for c in plan.calls:
            asked.update(c.users.tolist())
            for u in [*c.params.get(EXCLUDED_KEY, []), *c.users[~c.admitted].tolist()]:
                if u not in refused:
                    refused.append(u)
        if refused:
            query = plan.calls[0].query
            raise exhausted_error(query, refused, len(asked | set(refused)))
    with raising_on_exhausted():  # the backstop: budgets spent by others in between
        return fn(**a, on_exhausted="exclude")


def end_preview() -> None:
    """Raise :class:`PreviewStop` when a dry run is active (after a loop that planned several)."""
    if _ACTIVE.get() is not None:
        raise PreviewStop


def active_preview() -> PreviewPlan | None:
    """Return the dry run active in this context, or None."""
    return _ACTIVE.get()


def run(
    session: Any,
    users: object,
    allocations: object,
    *,
    query: str,
    compute: Callable[[Reservation], Charge[T]],
    notion: str = "metric",
    kind: str | None = None,
    params: dict[str, Any] | None = None,
    units: bool = False,
    charge_id: str | None = None,
    check: Callable[[Reservation], bool | None] | None = None,
    lock: contextlib.AbstractContextManager[Any] | None = None,
    dry_run: PreviewPlan | None = None,
    prepaid: bool = False,
) -> Ran[T]:
    """Reserve ``allocations`` for ``users``, run ``compute``, charge what it returns.

    Parameters
    ----------
    session : gpframe.Session
    users, allocations, notion, kind, params, units, charge_id
        As :meth:`Session.reserve` (``query`` is the recorded query name).
    compute : callable
        ``compute(reservation) -> Charge``: the array algorithm. It draws noise for
        ``reservation.admitted`` users only.
    check : callable, optional
        ``check(reservation)``, run before ``compute``, must draw no noise: raising cancels the
        reservation and re-raises; returning False cancels it and returns a refused outcome.
    lock : context manager, optional
        Held from the reservation to the committed charge (the DuckDB face serialises its
        batches with one).
    dry_run : PreviewPlan, optional
        Plan instead of run (also when a :func:`previewing` context is active): the admission
        is computed read-only, ``check`` runs, ``compute`` is not called; the planned
        reservation is added to the plan, then :class:`PreviewStop` is raised (``plan.stop``)
        or a ``"preview"`` outcome returned.
    prepaid : bool
        For an operation whose charge is its allocation, known before any noise (``privatize``
        per point): the reservation's own transaction also commits the charge of every
        admitted user's full allocation, after ``check`` (one durable write instead of two),
        and ``compute`` runs once it is committed. ``compute`` must then report exactly the
        allocations (in ledger units), else :class:`~gpframe.errors.GpframeInternalError` is
        raised and nothing is returned (the users stay charged). No ``charge_id``.

    Returns
    -------
    Ran
        The released value, the reservation (query id, admitted mask, allocations) and status.
    """
    plan = dry_run if dry_run is not None else _ACTIVE.get()
    if _RAISE.get():
        check = _all_or_raise(session, users, allocations, query=query, notion=notion,
                              kind=kind, params=params, units=units, check=check,
                              preview=plan is not None)  # fmt: skip
    if plan is not None:
        return _plan(session, users, allocations, plan, query=query, notion=notion, kind=kind,
                     params=params, units=units, check=check, lock=lock)  # fmt: skip
    if prepaid:
        return _prepaid(session, users, allocations, query=query, compute=compute,
                        notion=notion, kind=kind, params=params, units=units, check=check,
                        lock=lock)  # fmt: skip
    with lock if lock is not None else contextlib.nullcontext():
        r = session.reserve(
            users, allocations, notion=notion, kind=kind, query=query, params=params,
            charge_id=charge_id, units=units,
        )  # fmt: skip
        if r.replay:  # committed before: nothing may be drawn under it
            return Ran(value=None, reservation=r, status="replay")
        if check is not None:
            try:
                ok = check(r)
            except BaseException:
                r.cancel()  # no noise was drawn: the reservation is released
                raise
            if ok is False:
                r.cancel()
                return Ran(value=None, reservation=r, status="refused")
        with r:  # leaving without charge() (compute raised): the full allocation is charged
            out = compute(r)
            if out.units:
                _refuse_over(r, out.charges, query)
            done = r.charge(out.charges, units=out.units)  # durable before anything returns
    return Ran(value=out.value, reservation=r, status="charged", charged=done)


def _prepaid(
    session: Any,
    users: object,
    allocations: object,
    *,
    query: str,
    compute: Callable[[Reservation], Charge[T]],
    notion: str,
    kind: str | None,
    params: dict[str, Any] | None,
    units: bool,
    check: Callable[[Reservation], bool | None] | None,
    lock: contextlib.AbstractContextManager[Any] | None,
) -> Ran[T]:
    """:func:`run` with the charge committed with the reservation, before ``compute``."""
    if getattr(session, "_closed", False):
        raise LedgerError("this Session is closed; open a new one. Nothing was charged.")

    def strict(r: Reservation) -> None:  # inside the write: raising rolls it all back
        if check is not None and check(r) is False:
            raise GpframeInternalError(f"{query}: a prepaid run cannot be refused by its check.")

    with lock if lock is not None else contextlib.nullcontext():
        r = session.ledger.reserve(
            users, allocations, notion=notion, kind=kind, query=query, params=params,
            charge_id=None, units=units, paid=True, check=strict,
        )  # fmt: skip
        out = compute(r)  # the admitted users' full allocations are committed already
        if not out.units or not _charges_allocations(r, out.charges):
            raise GpframeInternalError(
                f"{query} was prepaid its allocations but reports other charges; nothing of it "
                "is returned (its users stay charged their allocations)."
            )
    return Ran(value=out.value, reservation=r, status="charged", charged=True)


def _charges_allocations(r: Reservation, charges: Any) -> bool:
    """Tell whether ``charges`` (ledger units) are the admitted users' allocations."""
    c = np.broadcast_to(np.asarray(charges), r.admitted.shape)
    if r.admitted.all():  # everyone admitted (the usual case): no masked copies
        return bool(np.array_equal(c, r.allocation_units))
    return bool(
        np.array_equal(np.where(r.admitted, c, 0), np.where(r.admitted, r.allocation_units, 0))
    )


def _refuse_over(r: Reservation, charges: Any, query: str) -> None:
    """Refuse ledger-unit charges above a user's allocation (0 for a refused user)."""
    c = np.broadcast_to(np.asarray(charges), r.admitted.shape)
    cap = np.where(r.admitted, r.allocation_units, 0)
    over = c > cap
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise GpframeInternalError(
            f"{query} would charge {int(c[i])} ledger units above the allocation "
            f"{int(cap[i])} for user {r.users[i]!r}."
        )


def _plan(
    session: Any,
    users: object,
    allocations: object,
    plan: PreviewPlan,
    *,
    query: str,
    notion: str,
    kind: str | None,
    params: dict[str, Any] | None,
    units: bool,
    check: Callable[[Any], bool | None] | None,
    lock: contextlib.AbstractContextManager[Any] | None,
) -> Ran[Any]:
    """Plan one :func:`run`: admission read-only, ``check``, record; nothing written."""
    if getattr(session, "_closed", False):
        raise LedgerError("this Session is closed; open a new one. Nothing was charged.")
    with lock if lock is not None else contextlib.nullcontext():
        r = session.ledger.admission(
            users, allocations, notion=notion, kind=kind, query=query, units=units,
            held=plan.held(notion),
        )  # fmt: skip
        refusal = None
        if check is not None:
            try:
                ok = check(r)
            except (BudgetExceededError, LedgerError) as exc:  # what the real call would raise
                ok, refusal = False, str(exc)
            if ok is False and refusal is None:
                refusal = (
                    f"{query}: {r.n_refused} of {r.admitted.size} users cannot pay and the "
                    "operation needs every user it asked; it would leave them out and ask again."
                )
    plan.add(Planned(
        query=query, notion=r.notion, kind=r.kind, users=r.users,
        admitted=np.asarray(r.admitted, dtype=bool), allocation_units=r.allocation_units,
        remaining_units=np.asarray(r.remaining_units), params=dict(params or {}),
        refusal=refusal, requested_units=r.requested_units,
    ))  # fmt: skip
    if plan.stop:
        raise PreviewStop
    return Ran(value=None, reservation=r, status="preview")


def _all_or_raise(
    session: Any,
    users: object,
    allocations: object,
    *,
    query: str,
    notion: str,
    kind: str | None,
    params: dict[str, Any] | None,
    units: bool,
    check: Callable[[Any], bool | None] | None,
    preview: bool,
) -> Callable[[Any], bool | None]:
    """``on_exhausted="raise"``: refuse before reserving; return the check that backs it up."""
    left_out = list((params or {}).get(EXCLUDED_KEY, []) or [])
    if not preview:  # a preview records the refusal instead (its check raises below)
        r = session.ledger.admission(users, allocations, notion=notion, kind=kind, query=query,
                                     units=units)  # fmt: skip
        refused = left_out + r.users[~np.asarray(r.admitted, dtype=bool)].tolist()
        if refused:
            raise exhausted_error(query, refused, r.users.size + len(left_out))

    def strict(r: Any) -> bool | None:  # no noise yet: raising cancels the reservation
        refused = left_out + r.users[~np.asarray(r.admitted, dtype=bool)].tolist()
        if refused:
            raise exhausted_error(query, refused, r.users.size + len(left_out))
        return None if check is None else check(r)

    return strict
