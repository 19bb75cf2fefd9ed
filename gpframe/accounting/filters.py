"""Privacy filters: what a filter is charged for a mechanism, and an in-memory reference filter.

See ``docs/ledger.md`` and ``docs/operations/monitoring.md`` (filter (7), the contract, charging
table and rules, admission oracles, ledger rules, conventions, the pure ex-post filter, the Gaussian
selection exception on a central pure-DP filter); Liang & Yi, 'Adaptive Privacy Budgeting' (2026),
Thm. 4.2.

Filter kinds (the budget a user holds) and guarantee kinds (what ``Released.guarantee`` states):

* ``gp`` (metric): pure geo-privacy, ε per metre (Laplace, planar Laplace).
* ``cgp`` (metric): concentrated geo-privacy, ρ per m² (Gaussian).
* ``dp`` (central): user-level pure ε-DP, ex-ante (Laplace; the Gaussian Report-Noisy-Max at its
  certified pure ε, ``docs/operations/monitoring.md``; Lebensold, Precup & Balle, 'On the Privacy of
  Selection Mechanisms with Gaussian Noise' (2024), Thm. 8).
* ``zcdp`` (central): user-level ρ-zCDP (Gaussian).
* ``dp_expost`` (central, guarantee kind only): the *realized* pure ε of a Gaussian
  AboveThreshold run (``docs/operations/monitoring.md``: Gaussian AboveThreshold, the pure ex-post
  filter; Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise'
  (2024), Alg. 1). A central pure-DP filter admits it at ε and turns ex-post charges into an ex-ante
  guarantee by basic composition. A zCDP filter refuses it (``docs/operations/monitoring.md``:
  charge the run's worst-case pure ε R there as kind ``dp``, costing R²/2).

Charging table (:func:`charge_for`; rows: the filter, columns: the mechanism's guarantee)::

    filter   gp      cgp     dp      zcdp    dp_expost
    gp       ε       REFUSE  mix     mix     mix
    cgp      ε²/2    ρ       mix     mix     mix
    dp       mix     mix     ε       REFUSE  ε
    zcdp     mix     mix     ε²/2    ρ       REFUSE

REFUSE raises :class:`~gpframe.errors.BudgetExceededError` (the mechanism's ε is infinite for
that filter); "mix" raises :class:`~gpframe.errors.InvalidInputError`: metric and central notions
are separate filters and never pay for each other.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

from gpframe.accounting.amounts import LedgerUnits, nonnegative
from gpframe.accounting.budgets import Budget
from gpframe.errors import BudgetExceededError, InvalidInputError

__all__ = [
    "FILTER_KINDS",
    "GUARANTEE_KINDS",
    "Filter",
    "Reservation",
    "charge_for",
    "notion_of",
]

#: the budget kinds a filter may hold, with their notion
FILTER_KINDS: dict[str, str] = {"gp": "metric", "cgp": "metric", "dp": "central", "zcdp": "central"}
#: the guarantee kinds a mechanism may state, with their notion
GUARANTEE_KINDS: dict[str, str] = {**FILTER_KINDS, "dp_expost": "central"}

_PARAM = {"gp": "eps", "cgp": "rho", "dp": "epsilon", "zcdp": "rho", "dp_expost": "epsilon"}
_UNIT = {"gp": " m⁻¹", "cgp": " m⁻²", "dp": "", "zcdp": "", "dp_expost": ""}


def notion_of(kind: str) -> str:
    """``"metric"`` or ``"central"`` for a filter or guarantee kind.

    >>> notion_of("cgp"), notion_of("dp_expost")
    ('metric', 'central')
    """
    try:
        return GUARANTEE_KINDS[kind]
    except (KeyError, TypeError):
        raise InvalidInputError(
            f"kind={kind!r} is not one of {', '.join(map(repr, GUARANTEE_KINDS))}."
        ) from None


def _filter_kind(filter_kind: object) -> str:
    kind = filter_kind.kind if isinstance(filter_kind, Budget) else filter_kind
    if kind not in FILTER_KINDS:
        raise InvalidInputError(
            f"filter_kind={filter_kind!r} is not one of 'gp', 'cgp', 'dp', 'zcdp' "
            "(or a gp.GP / gp.CGP / gp.DP / gp.zCDP budget). Nothing was charged."
        )
    return str(kind)


def charge_for(filter_kind: str | Budget, guarantee_kind: str, amount: object) -> Fraction:
    """Return what a ``filter_kind`` filter is charged for a step with guarantee ``(kind, amount)``.

    Implements the charging table of ``docs/ledger.md``: the
    result is exact (ε²/2 of a GP step on a CGP filter is a ``Fraction``); rounding up to ledger
    units is the ledger's job.

    Parameters
    ----------
    filter_kind : {"gp", "cgp", "dp", "zcdp"} or Budget
        The kind of the user's filter (or the budget object itself).
    guarantee_kind : {"gp", "cgp", "dp", "zcdp", "dp_expost"}
        The notion in which the mechanism states its guarantee (``Released.guarantee.kind``).
    amount : number
        The mechanism's amount in its own units (ε or ρ), finite and >= 0.

    Returns
    -------
    Fraction
        The charge in the filter's units.

    Raises
    ------
    BudgetExceededError
        The filter can never pay for this mechanism (a Gaussian on a pure-GP or pure-DP filter,
        an ex-post ε on a zCDP filter). Nothing is charged.
    InvalidInputError
        Unknown kinds, a negative/NaN amount, or a metric step on a central filter (or the reverse).

    Examples
    --------
    >>> charge_for("cgp", "gp", 0.008)
    Fraction(1, 31250)
    >>> charge_for("gp", "gp", 0.1) + charge_for("gp", "gp", 0.1) + charge_for("gp", "gp", 0.1)
    Fraction(3, 10)
    >>> charge_for("gp", "cgp", 5e-5)
    Traceback (most recent call last):
    ...
    gpframe.errors.BudgetExceededError: a pure-GP budget cannot pay for a Gaussian ...
    """
    fk = _filter_kind(filter_kind)
    gk = guarantee_kind
    g_notion = notion_of(gk)
    a = nonnegative(amount, _PARAM[gk])
    if FILTER_KINDS[fk] != g_notion:
        raise InvalidInputError(
            f"a {fk!r} filter ({FILTER_KINDS[fk]} notion) cannot be charged for a {gk!r} "
            f"guarantee ({g_notion} notion): metric (gp, cgp) and central (dp, zcdp) budgets are "
            "separate filters. Charge the session's "
            f"{'central' if g_notion == 'central' else 'metric'} budget instead "
            "(notion=... in Session.reserve). Nothing was charged."
        )
    if fk == gk or (fk == "dp" and gk == "dp_expost"):
        return a
    if (fk, gk) in (("cgp", "gp"), ("zcdp", "dp")):
        # Lem 3.1 / Bun–Steinke: pure eps implies eps²/2 concentrated (never less)
        return a * a / 2
    shown = f"{_PARAM[gk]}={float(a):.6g}{_UNIT[gk]}"
    if fk == "gp":  # gk == "cgp"
        raise BudgetExceededError(
            f"a pure-GP budget cannot pay for a Gaussian (CGP) mechanism ({shown}): a Gaussian "
            "has no finite eps per metre at any distance (docs/ledger.md). "
            "Open the session with gp.CGP(rho=...) to run Gaussian methods, or use a "
            "Laplace-based method on this GP budget. Nothing was charged."
        )
    if fk == "dp":  # gk == "zcdp"
        raise BudgetExceededError(
            f"a pure-DP budget cannot pay for a zCDP (Gaussian) mechanism ({shown}): its pure "
            "epsilon is infinite. Open the session with central=gp.zCDP(rho=...), or use a "
            "Laplace mechanism or a bounded Gaussian selection mechanism that certifies a pure "
            "epsilon (docs/operations/monitoring.md). Nothing was charged."
        )
    # fk == "zcdp", gk == "dp_expost"
    raise BudgetExceededError(
        f"a zCDP budget cannot settle an ex-post epsilon ({shown}): ex-post losses compose only "
        "under a pure-DP filter (docs/ledger.md). Charge the run's worst-case pure epsilon R "
        "as kind 'dp' (cost R²/2), or open the session with central=gp.DP(epsilon=...). "
        "Nothing was charged."
    )


@dataclass(frozen=True)
class Reservation:
    """An open hold on a :class:`Filter`: ``amount`` in the filter's units (exact)."""

    id: int
    amount: Fraction


class Filter:
    """Pure in-memory reference privacy filter (the filter contract of ``docs/ledger.md``).

    ``spent`` and ``held`` are exact; ``admits(p)`` is ``spent + held + p <= budget`` with no
    tolerance. With ``units`` (a :class:`~gpframe.accounting.amounts.LedgerUnits`) the filter
    models the persistent ledger instead: the budget is rounded down and every reservation and
    charge up to whole ledger units, so it can only refuse more than the exact filter.

    Parameters
    ----------
    budget : Budget
        ``gp.GP``, ``gp.CGP``, ``gp.DP`` or ``gp.zCDP``.
    units : LedgerUnits or None
        None: exact ``Fraction`` arithmetic. Otherwise integer ledger units.

    Examples
    --------
    >>> from gpframe.accounting.budgets import GP
    >>> f = Filter(GP(eps=0.3))
    >>> for _ in range(3):
    ...     _ = f.commit(f.reserve(0.1), 0.1)
    >>> f.spent, f.admits(1e-18)
    (Fraction(3, 10), False)
    """

    def __init__(self, budget: Budget, units: LedgerUnits | None = None) -> None:
        if not isinstance(budget, Budget):
            raise InvalidInputError(f"budget={budget!r} must be gp.GP, gp.CGP, gp.DP or gp.zCDP.")
        self.kind: str = budget.kind
        self.notion: str = budget.notion
        self.units = units
        self._budget = self._down(budget.amount)
        self._spent = 0 if units is not None else Fraction(0)
        self._held = 0 if units is not None else Fraction(0)
        self._open: dict[int, Fraction | int] = {}
        self._ids = itertools.count(1)

    # amounts are ints (ledger units) or Fractions internally; the public view is Fractions
    def _down(self, x: Fraction) -> Fraction | int:
        return self.units.down(x) if self.units is not None else x

    def _up(self, x: Fraction) -> Fraction | int:
        return self.units.up(x) if self.units is not None else x

    def _out(self, x: Fraction | int) -> Fraction:
        return self.units.to_fraction(int(x)) if self.units is not None else Fraction(x)

    @property
    def budget(self) -> Fraction:
        """The budget (rounded down to ledger units when ``units`` is set)."""
        return self._out(self._budget)

    @property
    def spent(self) -> Fraction:
        """Exact sum of committed charges."""
        return self._out(self._spent)

    @property
    def held(self) -> Fraction:
        """Exact sum of open reservations."""
        return self._out(self._held)

    @property
    def remaining(self) -> Fraction:
        """``budget - spent - held``."""
        return self._out(self._budget - self._spent - self._held)

    def _amount(self, p: object, kind: str | None, name: str) -> Fraction | int:
        x = nonnegative(p, name)
        if kind is not None:
            x = charge_for(self.kind, kind, x)
        return self._up(x)

    def admits(self, p: object, kind: str | None = None) -> bool:
        """Whether a step costing ``p`` fits: ``spent + held + p <= budget``, exactly.

        ``kind`` (e.g. ``"gp"`` on a CGP filter) converts ``p`` with :func:`charge_for` first;
        a mechanism the filter can never pay for raises ``BudgetExceededError``.
        """
        return self._spent + self._held + self._amount(p, kind, "p") <= self._budget

    def reserve(self, p: object, kind: str | None = None) -> Reservation | None:
        """Hold ``p`` if it fits; ``None`` (REFUSED) otherwise. A refusal changes nothing."""
        amount = self._amount(p, kind, "p")
        if self._spent + self._held + amount > self._budget:
            return None
        self._held += amount
        rid = next(self._ids)
        self._open[rid] = amount
        return Reservation(rid, self._out(amount))

    def commit(self, token: Reservation, used: object, kind: str | None = None) -> Fraction:
        """Charge ``used`` (0 <= used <= the reservation) and close the reservation."""
        held = self._take(token)
        try:
            amount = self._amount(used, kind, "used")
        except Exception:
            self._open[token.id] = held
            raise
        if amount > held:
            self._open[token.id] = held
            raise InvalidInputError(
                f"used={float(self._out(amount))!r} exceeds the reservation "
                f"{float(self._out(held))!r}; a query may charge at most its allocation."
            )
        self._held -= held
        self._spent += amount
        return self._out(amount)

    def settle(self, token: Reservation) -> Fraction:
        """Charge the full reservation (a query left without a commit, ``docs/ledger.md``)."""
        held = self._take(token)
        self._held -= held
        self._spent += held
        return self._out(held)

    def cancel(self, token: Reservation) -> None:
        """Release a reservation before any noise was drawn; nothing is charged."""
        self._held -= self._take(token)

    def _take(self, token: Reservation) -> Fraction | int:
        try:
            return self._open.pop(token.id)
        except (KeyError, AttributeError):
            raise InvalidInputError(
                f"reservation {token!r} is not open on this filter (already committed, "
                "settled or cancelled)."
            ) from None

    def __repr__(self) -> str:
        p = _PARAM[self.kind]
        return (
            f"Filter({self.kind}, budget {p}={float(self.budget):.6g}, "
            f"spent={float(self.spent):.6g}, held={float(self.held):.6g})"
        )
