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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from gpframe.errors import GpframeInternalError
from gpframe.ledger.session import Reservation

T = TypeVar("T")

__all__ = ["Charge", "Ran", "run"]


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
    nothing was charged) or ``"replay"`` (the ``charge_id`` was committed before: nothing was
    drawn or charged, ``value`` is None; see :meth:`Session.reserve`).
    """

    value: T | None
    reservation: Reservation
    status: Literal["charged", "refused", "replay"]
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

    Returns
    -------
    Ran
        The released value, the reservation (query id, admitted mask, allocations) and status.
    """
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
