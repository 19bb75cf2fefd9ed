"""Adaptive budgeting across a sequence of queries: Algorithm 3.

See ``docs/ledger.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 3.

Each user has a budget B_i for T queries. Query t gets the allocation

    a_i^t = B_i/T + λ_t · pool_i,     pool_i ← (1 − λ_t) · pool_i,

and after it ran, the user's saving a_i^t − u_i^t (allocation minus what the query actually
charged) is added to the pool. The schedules λ_t (``docs/ledger.md``):

``even``        λ_t = 1/(T − t + 1)           spread the pool over the remaining queries
``linear``      λ_t = (t − 1)/(T − 1)         rising share (the default)
``proportion``  λ_t = λ (default 1/2), λ_T = 1

All arithmetic is exact (``Fraction``), so Σ_t u_i^t = B_i − pool_i ≤ B_i holds exactly
(``docs/ledger.md``). With a ledger, every allocation is further capped by what the filter has left
(other operations may have spent from it), and the filter has the last word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import exact
from gpframe.errors import InvalidInputError

__all__ = ["SCHEDULES", "Plan", "schedule_lambda", "simulate"]

#: re-use schedules of docs/ledger.md
SCHEDULES = ("even", "linear", "proportion")


def schedule_lambda(schedule: str, t: int, T: int, lam: Fraction = Fraction(1, 2)) -> Fraction:
    """Return the share λ_t of the pool released to query t (1-based), exactly (``docs/ledger.md``).

    >>> [schedule_lambda("even", t, 4) for t in (1, 2, 3, 4)]
    [Fraction(0, 1), Fraction(1, 3), Fraction(1, 2), Fraction(1, 1)]
    >>> [schedule_lambda("linear", t, 4) for t in (1, 2, 3, 4)]
    [Fraction(0, 1), Fraction(1, 3), Fraction(2, 3), Fraction(1, 1)]
    >>> [schedule_lambda("proportion", t, 4) for t in (1, 2, 3, 4)]
    [Fraction(0, 1), Fraction(1, 2), Fraction(1, 2), Fraction(1, 1)]
    """
    if schedule not in SCHEDULES:
        raise InvalidInputError(
            f"schedule={schedule!r} is not one of 'even', 'linear', 'proportion'. "
            "Nothing was charged."
        )
    if t <= 1:
        return Fraction(0)
    if t >= T:
        return Fraction(1)
    if schedule == "even":
        return Fraction(1, T - t + 1)
    if schedule == "linear":
        return Fraction(t - 1, T - 1)
    return Fraction(lam)


def _fractions(values: Any, n: int, name: str) -> np.ndarray:
    """Return an object array of n exact Fractions (one conversion per distinct value)."""
    if np.ndim(values) == 0:
        out = np.empty(n, dtype=object)
        out[:] = [exact(values, name)] * n
        return out
    if isinstance(values, (pd.Series, pd.Index)):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise InvalidInputError(
            f"{name} has shape {arr.shape}; expected ({n},), one per user. Nothing was charged."
        )
    codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    conv = np.empty(len(uniq), dtype=object)
    conv[:] = [exact(v, name) for v in np.asarray(uniq, dtype=object)]
    return conv[codes]


class Plan:
    """Algorithm 3: per-user allocations for T queries that re-use each query's savings.

    Parameters
    ----------
    budgets : scalar or array of shape (n,)
        Each user's total B_i for the sequence, in the filter's units (ε or ρ).
    queries : int
        T, the number of queries (the horizon, for open-ended sequences).
    schedule : {"linear", "even", "proportion"}
        The re-use schedule λ_t (``docs/ledger.md``); ``linear`` is the default.
    lam : float
        The constant share of ``proportion`` (the last query always takes λ = 1).
    users : sequence, optional
        The user ids (for :meth:`frame`); default 0..n−1.

    Examples
    --------
    The oracle of ``docs/ledger.md`` (T = 4, B = 1, linear):

    >>> plan = Plan(1, queries=4, schedule="linear")
    >>> a1 = plan.next_allocations(); plan.record(Fraction(1, 10))
    >>> a2 = plan.next_allocations(); plan.record(a2)
    >>> a3 = plan.next_allocations(); plan.record(a3 * 2 / 3)
    >>> a4 = plan.next_allocations(); plan.record(a4)
    >>> [str(a[0]) for a in (a1, a2, a3, a4)], str(plan.spent[0]), str(plan.pool[0])
    (['1/4', '3/10', '19/60', '7/18'], '1', '0')
    """

    def __init__(
        self,
        budgets: Any,
        queries: int,
        schedule: str = "linear",
        lam: float | Fraction = Fraction(1, 2),
        users: Sequence[Any] | None = None,
    ) -> None:
        if isinstance(queries, bool) or not isinstance(queries, (int, np.integer)) or queries < 1:
            raise InvalidInputError(
                f"queries={queries!r} must be an integer >= 1 (the number of queries T). "
                "Nothing was charged."
            )
        schedule_lambda(schedule, 1, int(queries))  # validates the name
        self.lam = exact(lam, "lam")
        if not 0 < self.lam <= 1:
            raise InvalidInputError(f"lam={lam!r} must be in (0, 1]. Nothing was charged.")
        n = len(users) if users is not None else (1 if np.ndim(budgets) == 0 else len(budgets))
        self.users = pd.Index(range(n) if users is None else list(users))
        self.budgets = _fractions(budgets, n, "budgets")
        if any(b < 0 for b in set(self.budgets.tolist())):
            raise InvalidInputError("budgets must be >= 0. Nothing was charged.")
        self.T = int(queries)
        self.schedule = schedule
        self.t = 0  # queries allocated so far
        self.base = self.budgets / self.T
        self.pool = np.full(n, Fraction(0), dtype=object)
        self.spent = np.full(n, Fraction(0), dtype=object)
        self._open: np.ndarray | None = None  # allocations of the query in flight
        # (t, pool) before the open query was drawn, so a drawn query can be cancelled
        self._before: tuple[int, np.ndarray] | None = None

    @property
    def n_users(self) -> int:
        """Number of users in the plan."""
        return int(self.budgets.size)

    def next_allocations(self, remaining: Any = None) -> np.ndarray:
        """Return the allocations a_i^t of the next query (exact); move λ_t·pool out of the pool.

        ``remaining`` (optional, one per user or a Series indexed by user) caps each allocation
        by what the user's filter has left: a_i^t = min(a_i^t, remaining_i) (``docs/ledger.md``).
        """
        if self._open is not None:
            raise InvalidInputError(
                "the previous query's charges were not recorded; call plan.record(charges) first "
                "(allocations are set before a query runs)."
            )
        if self.t >= self.T:
            raise InvalidInputError(
                f"all {self.T} queries of this plan were allocated; make a new Plan."
            )
        self._before = (self.t, self.pool.copy())
        self.t += 1
        lam = schedule_lambda(self.schedule, self.t, self.T, self.lam)
        alloc = self.base + self.pool * lam
        self.pool = self.pool - self.pool * lam
        if remaining is not None:
            if isinstance(remaining, pd.Series):
                remaining = remaining.reindex(self.users).fillna(0).to_numpy()
            cap = _fractions(remaining, self.n_users, "remaining")
            capped = np.minimum(alloc, cap)
            # what the cap withholds is not spent: it goes back to the pool
            self.pool = self.pool + (alloc - capped)
            alloc = capped
        self._open = alloc
        return alloc.copy()

    def record(self, charges: Any) -> None:
        """Record what the query actually charged (0 ≤ u_i^t ≤ a_i^t); the saving joins the pool."""
        if self._open is None:
            raise InvalidInputError("no query is open: call plan.next_allocations() first.")
        if isinstance(charges, pd.Series):
            charges = charges.reindex(self.users).fillna(0).to_numpy()
        u = _fractions(charges, self.n_users, "charges")
        bad = (u < 0) | (u > self._open)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(
                f"charge {float(u[i])!r} of user {self.users[i]!r} is outside [0, allocation "
                f"{float(self._open[i])!r}]; a query charges at most its allocation."
            )
        self.pool = self.pool + (self._open - u)
        self.spent = self.spent + u
        self._open = None
        self._before = None

    def cancel(self) -> None:
        """Withdraw the open query's allocations as if they had never been drawn.

        Restores t and the pool, so the next :meth:`next_allocations` returns the same values.
        Only for a query that did not run (nothing charged): a query that ran is recorded.

        >>> plan = Plan(1, queries=2, schedule="linear")
        >>> a = plan.next_allocations(); plan.cancel()
        >>> plan.t, [str(v) for v in plan.next_allocations()] == [str(v) for v in a]
        (0, True)
        """
        if self._open is None or self._before is None:
            return
        self.t, self.pool = self._before
        self._open = None
        self._before = None

    def frame(self) -> pd.DataFrame:
        """Per-user budget, spent and pool as floats (for reports)."""
        return pd.DataFrame(
            {
                "budget": [float(v) for v in self.budgets],
                "spent": [float(v) for v in self.spent],
                "pool": [float(v) for v in self.pool],
            },
            index=self.users,
        )


def simulate(
    budgets: Any,
    queries: int,
    schedule: str,
    use: Callable[[int, np.ndarray], Any],
    lam: float | Fraction = Fraction(1, 2),
) -> tuple[list[np.ndarray], list[np.ndarray], Plan]:
    """Run Algorithm 3 with a usage rule ``use(t, allocations) -> charges`` (tests, benchmarks).

    Returns the allocations and charges of every query and the final plan.

    >>> def use(t, a):          # the usage pattern of the oracle
    ...     return [Fraction(1, 10)] if t == 1 else a * 2 / 3 if t == 3 else a
    >>> allocs, used, plan = simulate(1, 4, "even", use)
    >>> [str(a[0]) for a in allocs]
    ['1/4', '3/10', '3/10', '2/5']
    """
    plan = Plan(budgets, queries, schedule, lam)
    allocs: list[np.ndarray] = []
    used: list[np.ndarray] = []
    for t in range(1, plan.T + 1):
        a = plan.next_allocations()
        u = _fractions(use(t, a), plan.n_users, "charges")
        plan.record(u)
        allocs.append(a)
        used.append(u)
    return allocs, used, plan
