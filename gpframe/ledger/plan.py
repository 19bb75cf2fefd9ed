"""``session.plan(...)``: Algorithm 3 on a real ledger.

See ``docs/ledger.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 3.

A :class:`SessionPlan` gives each next query of a sequence its per-user allocation
a_i^t = B/T + λ_t·pool_i (``docs/ledger.md``), capped by what the user's filter has left
(``docs/ledger.md``) and rounded *down* to the ledger's unit (the ledger rounds reservations up;
rounding down first keeps every allocation admissible and never lets a user's total exceed the
plan's budget), and records what the query actually charged, so the saving flows into later
queries::

    plan = session.plan(total=1e-4, queries=24, schedule="linear")
    for hour in range(24):
        res = bound.range_count(zone, allocations=plan, component=("hour", hour))

Passing the plan as ``allocations=`` draws the next allocation and records the charges; a plain
``plan.next_allocations(users)`` (a Series by user) plus ``plan.record(result)`` works for any
query that takes per-user allocations.

Invariants (``docs/ledger.md``): Σ_t charge_i^t ≤ total for every user (exactly: the plan's
arithmetic is in ``Fraction``), and each allocation ≤ the filter's remaining budget when it was
drawn.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import exact
from gpframe.accounting.schedules import SCHEDULES, Plan
from gpframe.errors import InvalidInputError

__all__ = ["SessionPlan", "plan"]

_NOTHING = "Nothing was charged."


class SessionPlan:
    """Algorithm 3 bound to a session (see :func:`plan`).

    Attributes
    ----------
    session : gpframe.Session
    total : Fraction
        Each user's budget for the whole sequence, in the metric filter's units.
    queries : int
        T.
    schedule : str
    inner : gpframe.accounting.schedules.Plan or None
        The exact Algorithm 3 state (created at the first query when ``users`` was not given).
    """

    def __init__(
        self,
        session: Any,
        total: Any,
        queries: int,
        schedule: str = "linear",
        users: Any = None,
        lam: float | Fraction = Fraction(1, 2),
    ) -> None:
        kinds = getattr(getattr(session, "ledger", None), "kind", None) or {}
        kind = kinds.get("metric") if isinstance(kinds, dict) else None
        if kind not in ("gp", "cgp"):
            raise InvalidInputError(
                "session.plan needs a session with a metric budget: "
                f"gp.Session(budget=gp.CGP(rho=...)). {_NOTHING}"
            )
        if hasattr(total, "kind") and hasattr(total, "amount"):
            if total.kind != kind:
                raise InvalidInputError(
                    f"total={total!r} is a {total.kind} amount but the session's filters are "
                    f"{kind}; pass the total in the filter's notion. {_NOTHING}"
                )
            total = total.amount
        self.total = exact(total, "total")
        if not self.total > 0:
            raise InvalidInputError(f"total={total!r} must be > 0. {_NOTHING}")
        if schedule not in SCHEDULES:
            raise InvalidInputError(
                f"schedule={schedule!r} is not one of {', '.join(map(repr, SCHEDULES))}. {_NOTHING}"
            )
        self.session = session
        self.kind = kind
        self.queries = queries
        self.schedule = schedule
        self.lam = lam
        self.inner: Plan | None = None
        # what the ledger had left for the plan's users when the open query was drawn: a repeated
        # next_allocations() with the ledger unchanged is a peek and returns the same step
        self._drawn_remaining: dict[Any, Fraction] | None = None
        # validate T and lam now (a bad plan must fail before any query)
        Plan(self.total, queries, schedule, lam)
        if users is not None:
            self._start(users)

    def __repr__(self) -> str:
        t = self.inner.t if self.inner is not None else 0
        n = self.inner.n_users if self.inner is not None else 0
        return (
            f"SessionPlan({self.kind} total={float(self.total):.6g}, queries={self.queries}, "
            f"schedule={self.schedule!r}, users={n}, done={t})"
        )

    def _start(self, users: Any) -> None:
        from gpframe.ledger.charges import ledger_keys

        keys = ledger_keys(pd.unique(np.asarray(users)))
        self.inner = Plan(self.total, self.queries, self.schedule, self.lam, users=keys)

    def check_users(self, users: Any) -> None:
        """Start the plan with ``users`` at the first query (later, unknown users get 0)."""
        if self.inner is None:
            self._start(users)

    @property
    def t(self) -> int:
        """Queries recorded so far (a drawn, unrecorded query does not count)."""
        if self.inner is None:
            return 0
        return self.inner.t - (self.inner._open is not None)

    def next_allocations(self, users: Any = None) -> pd.Series:
        """Allocations of the next query, exact ``Fraction`` per user (index: user id).

        Each is min(a_i^t, remaining_i) rounded down to a ledger unit; users ``users`` asks for
        that are not in the plan get 0 (not asked).

        Looking is free: the step is taken by :meth:`record` (which ``allocations=plan`` calls
        after the query), so calling this again before recording returns the same allocations,
        and a query run with ``allocations=plan`` afterwards gets them too. If the ledger charged
        the plan's users since the allocations were drawn (a query ran with them), record its
        charges with :meth:`record` first, or :meth:`cancel` the drawn step.

        Examples
        --------
        >>> import gpframe as gp
        >>> from gpframe.ledger import Session
        >>> p = plan(Session(budget=gp.CGP(rho=1e-3)), total=4e-4, queries=4, users=[1, 2])
        >>> a = p.next_allocations()
        >>> p.next_allocations().equals(a), p.t       # a peek: same step, nothing consumed
        (True, 0)
        """
        if self.inner is None:
            if users is None:
                raise InvalidInputError(
                    f"the plan has no users yet: pass users= to session.plan(...) or to "
                    f"next_allocations(users). {_NOTHING}"
                )
            self._start(users)
        inner = self.inner
        assert inner is not None
        lu = self.session.ledger.units["metric"]
        rem = self.session.remaining_exact(list(inner.users))
        if inner._open is not None:
            drawn = self._drawn_remaining
            changed = drawn is None or any(
                drawn.get(k, v) != v for k, v in zip(rem.index, rem.to_numpy(), strict=True)
            )
            if changed:
                raise InvalidInputError(
                    "the ledger charged this plan's users since its allocations were drawn: if a "
                    "query ran with them, call plan.record(result) first; if not, "
                    f"plan.cancel() draws them afresh. {_NOTHING}"
                )
            inner.cancel()  # a peek: re-draw the same step from the same state
        a = inner.next_allocations(remaining=rem)
        # floor to the ledger unit: the ledger reserves rounded up, so an allocation that is not a
        # multiple of the unit could be refused at the last query; what is cut stays in the pool
        floored = np.empty(a.size, dtype=object)
        floored[:] = [Fraction(lu.down(v), 1) / lu.scale for v in a]
        inner._open = floored  # the open query's cap is the floored allocation
        inner.pool = inner.pool + (a - floored)
        self._drawn_remaining = dict(zip(rem.index, rem.to_numpy(), strict=True))
        out = pd.Series(floored, index=inner.users, dtype=object, name="allocation")
        if users is not None:
            from gpframe.ledger.charges import ledger_keys

            keys = ledger_keys(np.asarray(users))
            out = out.reindex(pd.Index(keys, dtype=object)).fillna(Fraction(0))
        return out

    def cancel(self) -> None:
        """Withdraw allocations drawn by :meth:`next_allocations` for a query that did not run."""
        if self.inner is not None:
            self.inner.cancel()
        self._drawn_remaining = None

    def record(self, charges: Any) -> None:
        """Record what the query charged: a Result (its ``charges``) or a Series by user.

        Users absent from ``charges`` (not asked, or excluded) are recorded as charged 0.
        """
        if self.inner is None:
            raise InvalidInputError("no query is open: call next_allocations() first.")
        if hasattr(charges, "charges") and isinstance(charges.charges, pd.Series):
            charges = charges.charges
        if not isinstance(charges, pd.Series):
            raise InvalidInputError(
                "record() takes a Result or a Series of charges indexed by user id."
            )
        s = charges[charges.index.isin(self.inner.users)]
        vals = np.empty(self.inner.n_users, dtype=object)
        vals[:] = [Fraction(0)] * self.inner.n_users
        pos = self.inner.users.get_indexer(s.index)
        conv = {v: exact(v, "charges") for v in pd.unique(s.to_numpy())}
        for p, v in zip(pos, s.to_numpy(), strict=True):
            vals[p] = conv[v]
        self.inner.record(vals)
        self._drawn_remaining = None

    def frame(self) -> pd.DataFrame:
        """Per-user budget, spent and pool of the plan (floats)."""
        if self.inner is None:
            return pd.DataFrame(columns=["budget", "spent", "pool"])
        return self.inner.frame()


def plan(
    session: Any,
    total: Any,
    queries: int,
    schedule: str = "linear",
    users: Any = None,
    *,
    lam: float | Fraction = Fraction(1, 2),
) -> SessionPlan:
    """Start Algorithm 3 for ``queries`` queries with ``total`` per user (``docs/ledger.md``).

    Parameters
    ----------
    session : gpframe.Session
        Its metric filter is charged; allocations never exceed what it has left.
    total : float or gp.CGP / gp.GP
        Each user's budget for the sequence, in the filter's units (ρ in m⁻² or ε in m⁻¹).
    queries : int
        T (the horizon for an open-ended sequence).
    schedule : {"linear", "even", "proportion"}
        How savings are re-used: λ_t = (t−1)/(T−1), 1/(T−t+1), or ``lam`` (λ_T = 1).
    users : sequence, optional
        The users of the sequence (default: the users of the first query).
    lam : float
        The share of ``proportion``.

    Returns
    -------
    SessionPlan

    Examples
    --------
    >>> import gpframe as gp
    >>> from gpframe.ledger import Session
    >>> s = Session(budget=gp.CGP(rho=1e-3))
    >>> p = plan(s, total=4e-4, queries=4, schedule="even", users=[1, 2])
    >>> [float(a) for a in p.next_allocations()]
    [0.0001, 0.0001]
    >>> p.record(pd.Series({1: 1e-5, 2: 1e-4}))      # user 1 saved 9e-5
    >>> [float(a) for a in p.next_allocations()]     # even: a third of the saving now
    [0.00013, 0.0001]
    """
    return SessionPlan(session, total, queries, schedule, users, lam)
