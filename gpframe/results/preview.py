"""The dry run of an operation: what it would reserve, from whom, and what would be left.

See ``docs/ledger.md`` ("Previewing a query"). Every operation of the pandas face takes
``dry_run=True``, the monitors too, and the SQL face has ``gp.duckdb.preview(con, sql)``: all
of them run the operation's validation and its planning up to the ledger driver
(:func:`gpframe.ledger.run.run`), which computes the admission read-only and never calls the
array algorithm. Nothing is drawn and nothing is written (the ledger's snapshot and audit log
are unchanged). A :class:`Preview` is a *curator-side* object: it names users and their
budgets, like ``session.report()``; it holds no released value and no location, and it is
never a published result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpframe.ledger.run import PreviewPlan, PreviewStop, previewing
from gpframe.ledger.session import EXCLUDED_KEY

__all__ = ["Preview", "dry", "preview_call"]

_UNIT = {"gp": "m⁻¹", "cgp": "m⁻²", "dp": "", "zcdp": ""}

#: ``error(table, calls)``: the operation's a-priori bound from the planned table and its planned
#: reservations (:class:`gpframe.ledger.run.Planned`): ``(bound, kind, confidence or None)``
ErrorHook = Callable[[pd.DataFrame, list[Any]], tuple[float, str, float | None] | None]
#: ``least(calls)``: per planned reservation, each user's least possible charge (ledger units,
#: aligned with the reservation's users) of an adaptive operation
LeastHook = Callable[[list[Any]], list[Any]]


@dataclass(frozen=True, eq=False, repr=False)
class Preview:
    """What a query would charge, who it would leave out, and the budget left afterwards.

    Curator-side: it names users and shows their budgets (like ``session.report()``); never
    publish it. It holds no released value (nothing was drawn) and no location.

    Attributes
    ----------
    operation : str
        The operation previewed (``"range_count"``, ``"sql"``...).
    notion, kind : str
        The filter the query would charge (``"metric"``/``"central"``; ``"gp"``, ``"cgp"``,
        ``"dp"``, ``"zcdp"``).
    table : pandas.DataFrame
        One row per user asked: ``allocation`` (what would be reserved, exactly the real call's
        reservation, in the filter's units, summed over the query's reservations),
        ``allocation_units`` (the same in integer ledger units), ``charge_min`` (the least
        the real call can charge the user, filter units: the allocation unless the operation
        is adaptive; NaN where unknown), ``status`` (``"reserved"`` or
        ``"excluded"``), ``reason`` (why excluded), ``remaining_before`` and
        ``remaining_after`` (the user's budget left, if every reservation were charged in full;
        unchanged when the call would be refused).
    reservations : int
        How many reservations the call would make (one per region, query point, run or Arrow
        batch; 0 when nothing would be asked).
    refusal : str or None
        The error the real call would raise (e.g. a monitor with ``on_exhausted="raise"`` and a
        user who cannot pay); nothing would be charged then.
    adaptive : bool
        The operation charges what it used (elimination, ex-post settlement): the actual
        charge is at most ``allocation``.
    saving_best : float or None
        Adaptive operations: the *best-case* saving, Σ over the users of ``allocation`` −
        ``charge_min`` (filter units): what the run would leave in the budgets if every user
        were decided as early as possible. The actual saving depends on the data (on who is
        decided when) and lies between 0 and this; the Result reports it. 0 for operations
        that charge their allocation; None where the least charge is not known (the Gaussian
        monitors).
    error, error_kind, confidence : float, str, float or None
        The error bound the operation's formula gives before any noise (None where the bound is
        computed from released values: the Result states it).
    per : str or None
        ``privatize`` only: ``"user"`` or ``"point"`` and ``per_note`` the error scale it implies.
    params : dict
        The operation's recorded parameters (of its first reservation).
    """

    operation: str
    notion: str
    kind: str
    table: pd.DataFrame
    reservations: int
    refusal: str | None = None
    adaptive: bool = False
    saving_best: float | None = None
    error: float | None = None
    error_kind: str = ""
    confidence: float | None = None
    per: str | None = None
    per_note: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    # -- per-user views ------------------------------------------------------------------
    @property
    def allocations(self) -> pd.Series:
        """What each asked user would have reserved (float, filter units; 0 if excluded)."""
        return self.table["allocation"]

    @property
    def excluded(self) -> pd.Series:
        """Users who would be left out, with the reason (index: user id)."""
        t = self.table[self.table["status"] == "excluded"]
        return t["reason"]

    @property
    def n_reserved(self) -> int:
        """Number of users with a reservation."""
        return int((self.table["status"] == "reserved").sum())

    @property
    def n_excluded(self) -> int:
        """Number of users who would be left out."""
        return int((self.table["status"] == "excluded").sum())

    def remaining_after(self) -> dict[str, float]:
        """Min / median / max of the budget left after the query, over the users asked."""
        r = self.table["remaining_after"].to_numpy(dtype=np.float64)
        r = r[np.isfinite(r)]
        if r.size == 0:
            return {"min": math.nan, "median": math.nan, "max": math.nan}
        return {"min": float(r.min()), "median": float(np.median(r)), "max": float(r.max())}

    def to_frame(self) -> pd.DataFrame:
        """Return the per-user table (a copy)."""
        return self.table.copy()

    # -- text ----------------------------------------------------------------------------
    def summary(self) -> str:
        """Return a few lines: charge distribution, exclusions, error, budget left."""
        u = _UNIT.get(self.kind, "")
        unit = f" {u}" if u else ""
        a = self.table.loc[self.table["status"] == "reserved", "allocation"]
        lines = [
            f"Preview of {self.operation}: CURATOR-SIDE, do not publish (names users and "
            "their budgets). Nothing was drawn, charged or written.",
            f"  filter: {self.notion} ({self.kind}); reservations: {self.reservations}",
        ]
        if self.refusal:
            lines.append(
                f"  the call would be refused, nobody charged (each asked for min "
                f"{a.min() if a.size else 0:.6g}, max {a.max() if a.size else 0:.6g}{unit})"
            )
        elif a.size:
            lines.append(
                f"  per-user charge{' at most' if self.adaptive else ''}: min {a.min():.6g}, "
                f"median {a.median():.6g}, max {a.max():.6g}{unit} ({a.size} users)"
            )
        else:
            lines.append("  nobody would be charged")
        if self.adaptive:
            save = (
                ""
                if self.saving_best is None
                else f"; best-case saving {self.saving_best:.6g}{unit} (all decided at round 1)"
            )
            lines.append(
                "  adaptive: the actual charge is at most this (it charges what the run used)"
                + save
            )
        if self.per is not None:
            lines.append(f"  per={self.per!r}: {self.per_note}")
        if self.n_excluded:
            reasons = self.excluded.value_counts()
            shown = ", ".join(f"{n} ({r})" for r, n in reasons.items())
            names = ", ".join(repr(x) for x in self.excluded.index[:5].tolist())
            more = "" if self.n_excluded <= 5 else f" and {self.n_excluded - 5} more"
            lines.append(f"  excluded: {shown}: {names}{more}")
        if self.refusal:
            lines.append(f"  refusal: {self.refusal}")
        if self.error is not None:
            at = "" if self.confidence is None else f" at confidence {self.confidence:.3g}"
            lines.append(f"  expected error: {self.error:.6g} {self.error_kind}{at}")
        rem = self.remaining_after()
        if not math.isnan(rem["min"]):
            lines.append(
                f"  budget left afterwards: min {rem['min']:.6g}, median {rem['median']:.6g}, "
                f"max {rem['max']:.6g}{unit}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Preview({self.operation!r}, curator-side: do not publish; "
            f"reserved={self.n_reserved}, excluded={self.n_excluded}, "
            f"reservations={self.reservations})"
        )

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.summary())}</pre>"


def preview_call(
    session: Any,
    operation: str,
    call: Callable[[], Any],
    *,
    adaptive: bool = False,
    error: ErrorHook | None = None,
    least: LeastHook | None = None,
    per: str | None = None,
    per_note: str = "",
    stop: bool = True,
) -> Preview:
    """Run ``call`` as a dry run and build its :class:`Preview`.

    ``call`` is the operation itself (all its validation runs; the driver plans its
    reservations and stops it before any noise). ``error(table, calls)`` gives the operation's
    a-priori error bound from the planned table and reservations, when it has one.
    """
    with previewing(stop=stop) as plan:
        try:
            call()
        except PreviewStop:
            pass
    return build(session, operation, plan, adaptive=adaptive, error=error, least=least,
                 per=per, per_note=per_note)  # fmt: skip


def dry(fn: Callable[..., Any], args: dict[str, Any], operation: str, **info: Any) -> Preview:
    """Preview ``fn(**args)`` (an operation called with ``dry_run=True``; ``args`` its locals).

    ``args["bound"]`` (a ``df.geopriv`` frame) or ``args["session"]`` gives the session; the
    operation is called again with ``dry_run=False`` inside the dry run.
    """
    a = {k: v for k, v in args.items() if k != "dry_run"}
    session = a["bound"].session if "bound" in a else a["session"]
    return preview_call(session, operation, lambda: fn(**a, dry_run=False), **info)


def build(
    session: Any,
    operation: str,
    plan: PreviewPlan,
    *,
    adaptive: bool = False,
    error: ErrorHook | None = None,
    least: LeastHook | None = None,
    per: str | None = None,
    per_note: str = "",
) -> Preview:
    """Aggregate the planned reservations of ``plan`` into a :class:`Preview`."""
    led = session.ledger
    calls = plan.calls
    notion = calls[0].notion if calls else ("metric" if "metric" in led.kind else "central")
    kind = led.kind[notion]
    scale = 10.0 ** led.units[notion].exponent
    alloc: dict[Any, int] = {}
    before: dict[Any, int] = {}
    reason: dict[Any, str] = {}
    order: list[Any] = []
    refusal = None
    for c in calls:
        if c.refusal is not None and refusal is None:
            refusal = c.refusal
        for k in c.params.get(EXCLUDED_KEY, []) or []:  # left out before the reservation
            if k not in alloc and k not in reason:
                order.append(k)
            reason.setdefault(k, "cannot pay (left out before reserving)")
        asked = c.requested_units if c.requested_units is not None else c.allocation_units
        for k, a, ok, rem, want in zip(c.users.tolist(), c.allocation_units.tolist(),
                                       c.admitted.tolist(), c.remaining_units.tolist(),
                                       asked.tolist(), strict=True):  # fmt: skip
            if k not in alloc and k not in reason:
                order.append(k)
            before.setdefault(k, int(rem))
            if ok:
                alloc[k] = alloc.get(k, 0) + int(a)
            elif k not in alloc:
                reason.setdefault(
                    k, f"budget exhausted: {rem / scale:.6g} left, {want / scale:.6g} asked"
                )
    missing = [k for k in order if k not in before]
    if missing:  # users left out before any reservation: read their budget (read-only)
        rem = session.remaining(missing, notion=notion)
        for k, v in zip(missing, rem.tolist(), strict=True):
            before[k] = round(v * scale)
    units = [alloc.get(k, 0) for k in order]
    status = ["reserved" if k in alloc else "excluded" for k in order]
    if least is None and "least" in plan.notes:  # one least charge for every user asked
        low = led.units[notion].up(plan.notes["least"])
        least = lambda cs: [np.where(c.admitted, low, 0) for c in cs]  # noqa: E731
    cmin, saving_best = _least(calls, order, units, adaptive, least, scale)
    rb = np.array([before.get(k, 0) for k in order], dtype=np.float64)
    # a refused call reserves, then cancels: nobody's budget moves
    spend = np.zeros(len(units)) if refusal is not None else np.array(units, dtype=np.float64)
    table = pd.DataFrame(
        {
            "allocation": np.array(units, dtype=np.float64) / scale,
            "allocation_units": pd.array(units, dtype="Int64"),
            "charge_min": cmin,
            "status": status,
            "reason": [
                reason.get(k, "") if s == "excluded" else ""
                for k, s in zip(order, status, strict=True)
            ],
            "remaining_before": rb / scale,
            "remaining_after": (rb - spend) / scale,
        },
        index=pd.Index(order, dtype=object, name="user"),
    )
    err = error(table, calls) if error is not None and len(table) else None
    if err is None and len(table):  # a bound the operation noted while planning
        err = plan.notes.get("error")
    params = {k: v for k, v in calls[0].params.items() if k != EXCLUDED_KEY} if calls else {}
    return Preview(
        operation=operation, notion=notion, kind=kind, table=table, reservations=len(calls),
        refusal=refusal, adaptive=adaptive, saving_best=saving_best,
        error=None if err is None else float(err[0]), error_kind="" if err is None else err[1],
        confidence=None if err is None or err[2] is None else float(err[2]), per=per,
        per_note=per_note, params=params,
    )  # fmt: skip


def _least(
    calls: list[Any], order: list[Any], units: list[int], adaptive: bool,
    least: LeastHook | None, scale: float,
) -> tuple[np.ndarray, float | None]:  # fmt: skip
    """Each user's least possible charge (filter units) and the best-case saving."""
    alloc = np.array(units, dtype=np.float64)
    if not adaptive:  # the allocation is charged in full
        return alloc / scale, 0.0
    if least is None:
        return np.full(alloc.size, np.nan), None
    total: dict[Any, int] = {}
    for c, arr in zip(calls, least(calls), strict=True):
        for k, ok, v in zip(c.users.tolist(), c.admitted.tolist(), np.asarray(arr).tolist(),
                            strict=True):  # fmt: skip
            if ok:
                total[k] = total.get(k, 0) + int(v)
    low = np.array([total.get(k, 0) for k in order], dtype=np.float64)
    return low / scale, float((alloc - low).sum()) / scale
