"""The ledger report's data: per-user rows, totals, the query timeline, savings and integrity.

``gpframe ledger report`` prints these tables and :meth:`gpframe.ledger.Session.report_html`
draws them (``docs/ledger.md``, "Reports for the privacy officer"). Everything here only reads
the ledger.

Examples
--------
>>> from datetime import datetime, timezone
>>> now = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
>>> parse_since("7d", now=now).isoformat()
'2026-11-19T12:00:00+00:00'
>>> parse_since("2026-11-01").isoformat()
'2026-11-01T00:00:00+00:00'
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeError, InvalidInputError
from gpframe.ledger.keys import canonical
from gpframe.ledger.session import EXCLUDED_KEY, NOTIONS

if TYPE_CHECKING:
    from gpframe.ledger.session import Session

__all__ = ["ReportData", "gather", "parse_since", "totals"]

#: seconds per unit of a relative ``since`` ("7d", "12h", "30m", "2w")
_AGE_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d{1,6})\s*([mhdw])\s*$")

_SINCE_HELP = (
    "pass an ISO date (2026-11-01), an ISO date-time (2026-11-01T12:00, read as UTC unless it "
    "carries an offset such as +01:00 or Z) or an age such as 30m, 12h, 7d or 2w (before now)"
)


def parse_age(text: str, *, name: str = "age") -> timedelta | None:
    """Read an age such as ``30m``, ``12h``, ``7d`` or ``2w``; None if ``text`` is not one.

    Examples
    --------
    >>> parse_age("12h")
    datetime.timedelta(seconds=43200)
    >>> parse_age("2026-11-01") is None
    True
    """
    m = _AGE.match(text)
    if not m:
        return None
    return timedelta(seconds=int(m.group(1)) * _AGE_UNITS[m.group(2)])


def parse_since(since: object, *, now: datetime | None = None, name: str = "since") -> datetime:
    """Read a ``since`` bound as an aware UTC datetime.

    Parameters
    ----------
    since : str or datetime.date or datetime.datetime
        An ISO date (midnight UTC), an ISO date-time (UTC unless it carries an offset), or an
        age before ``now``: a whole number and a unit, ``m`` (minutes), ``h``, ``d`` or ``w``.
    now : datetime.datetime, optional
        The reference of an age (default: the current time).
    name : str
        The argument's name in error messages (``"--since"`` on the command line).

    Raises
    ------
    InvalidInputError
        ``since`` is none of these, naming the argument and the accepted forms.

    Examples
    --------
    >>> parse_since("2026-11-01T12:00+01:00").isoformat()
    '2026-11-01T11:00:00+00:00'
    """
    if isinstance(since, datetime):
        dt = since
    elif isinstance(since, date):
        dt = datetime(since.year, since.month, since.day)
    elif isinstance(since, str):
        age = parse_age(since, name=name)
        if age is not None:
            ref = now if now is not None else datetime.now(timezone.utc)
            try:
                return _utc(ref) - age
            except OverflowError:  # before year 1
                raise InvalidInputError(
                    f"{name}={since!r} reaches back before the year 1: pass a shorter age or a "
                    "date (2026-11-01)."
                ) from None
        text = since.strip()
        if text.endswith(("Z", "z")):  # Python 3.10's fromisoformat does not read "Z"
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInputError(
                f"{name}={since!r} is not a date, a date-time or an age: {_SINCE_HELP}."
            ) from None
    else:
        raise InvalidInputError(
            f"{name}={since!r} must be a str, a datetime.date or a datetime.datetime: "
            f"{_SINCE_HELP}."
        )
    return _utc(dt)


def _utc(dt: datetime) -> datetime:
    """Naive date-times are UTC (the ledger stores UTC times)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def totals(rows: pd.DataFrame) -> pd.DataFrame:
    """Per notion: users, summed budget / spent / held / remaining, largest spend, exhausted.

    A user is exhausted when nothing of their budget remains. With a ``spent_since`` column
    (a ``since`` bound), its sum too.
    """
    g = rows.groupby(["notion", "kind"], sort=False)
    spec: dict[str, tuple[str, Any]] = {
        "users": ("user", "size"),
        "budget": ("budget", "sum"),
        "spent": ("spent", "sum"),
        "held": ("held", "sum"),
        "remaining": ("remaining", "sum"),
        "spent_max": ("spent", "max"),
        "exhausted": ("remaining", lambda r: int((r <= 0).sum())),
    }
    if "spent_since" in rows.columns:
        spec["spent_since"] = ("spent_since", "sum")
    return g.agg(**spec).reset_index()


@dataclass(frozen=True)
class ReportData:
    """What a ledger report shows (every amount a float in its notion's filter units).

    Attributes
    ----------
    rows : pandas.DataFrame
        :meth:`Session.report`'s rows after the filters; with ``since``, also ``spent_since``
        and ``queries_since`` (what the charges at or after ``since`` add up to).
    totals : pandas.DataFrame
        :func:`totals` of ``rows``.
    queries : pandas.DataFrame
        The query timeline, oldest first, restricted to the filters: time (UTC, ISO), query_id,
        query (its name), notion, kind, users (charged), charged (total), max_charge (largest
        per user), allocated (total), saved (allocated - charged), excluded (users left out for
        lack of budget) and params (the recorded parameters, a dict).
    savings : pandas.DataFrame
        Per notion: queries, allocated, charged, saved, saved_share (saved / allocated).
    integrity : dict
        ``{"ok": bool, "message": str}`` from :meth:`Ledger.verify`, plus its counts when ok.
    filters : dict
        The filters applied (users, notion, since) and when the report was made.
    """

    rows: pd.DataFrame
    totals: pd.DataFrame
    queries: pd.DataFrame
    savings: pd.DataFrame
    integrity: dict[str, Any]
    filters: dict[str, Any] = field(default_factory=dict)


_QCOLS = ("time", "query_id", "query", "notion", "kind", "users", "charged", "max_charge",
          "allocated", "saved", "excluded", "params")  # fmt: skip


def gather(
    session: Session,
    *,
    users: object = None,
    notion: str | None = None,
    since: object = None,
    now: datetime | None = None,
    verify: bool = True,
) -> ReportData:
    """Collect a report's tables from ``session`` (read-only).

    Parameters
    ----------
    session : Session
        Any session (read-only ones included).
    users : list of user ids, optional
        Only these users (the ledger's ids: ``7`` and ``"7"`` are different users).
    notion : {"metric", "central"}, optional
        Only this budget.
    since : str or datetime.date or datetime.datetime, optional
        Only the charges at or after this time in the timeline and in ``spent_since``
        (:func:`parse_since`); budgets, spent and remaining stay the ledger's current state.
    now : datetime.datetime, optional
        The reference of a relative ``since`` and the report's time (default: now).
    verify : bool
        Run the full integrity check (:meth:`Ledger.verify`, reads the whole ledger).

    Raises
    ------
    InvalidInputError
        An unknown user or notion, or a ``since`` that cannot be read. Nothing is read then.
    """
    stamp = _utc(now) if now is not None else datetime.now(timezone.utc)
    bound = None if since is None else parse_since(since, now=stamp)
    led = session.ledger
    if notion is not None and notion not in NOTIONS:
        raise InvalidInputError(
            f"notion={notion!r} must be 'metric' or 'central'. Nothing was charged."
        )
    if notion is not None and notion not in led.kind:
        raise InvalidInputError(f"this ledger has no {notion} budget. Nothing was charged.")
    rows = session.report()
    if notion is not None:
        rows = rows[rows["notion"] == notion]
    wanted = _wanted(users, rows)
    if wanted is not None:
        rows = rows[rows["user"].map(lambda u: (type(u), u) in wanted).to_numpy(bool)]
    rows = rows.reset_index(drop=True)
    queries, since_sums = _timeline(session, wanted, notion, bound)
    if bound is not None:
        pos = since_sums["index"].get_indexer(pd.Index(rows["user"].tolist(), dtype=object))
        pairs = list(zip(rows["notion"], pos, strict=True))
        for col in ("spent_since", "queries_since"):
            vals = [since_sums[col][n][p] if p >= 0 else 0 for n, p in pairs]
            rows[col] = np.asarray(vals, dtype=np.float64 if col == "spent_since" else np.int64)
    filters = {
        "users": None if users is None else [str(u) for u in _as_list(users)],
        "notion": notion,
        "since": None if bound is None else bound.isoformat(),
        "since_text": None if since is None else str(since),
        "made": stamp.isoformat(timespec="seconds"),
        "path": None if session.path is None else str(session.path),
    }
    return ReportData(
        rows=rows, totals=totals(rows), queries=queries, savings=_savings(queries),
        integrity=_integrity(session) if verify else {"ok": None, "message": "not checked"},
        filters=filters,
    )  # fmt: skip


def _as_list(users: object) -> list[Any]:
    if isinstance(users, (str, bytes)) or not hasattr(users, "__iter__"):
        return [users]
    return list(users)  # type: ignore[call-overload]


def _wanted(users: object, rows: pd.DataFrame) -> set[tuple[type, Any]] | None:
    """Return the selected users as (type, key) pairs (1 and "1" stay apart)."""
    if users is None:
        return None
    given = _as_list(users)
    if not given:
        raise InvalidInputError("users=[] selects nobody: pass None for every user.")
    keys = [canonical([u], "users")[0] for u in given]  # one by one: ids of several types
    known = {(type(u), u) for u in rows["user"]}
    missing = [k for k in keys if (type(k), k) not in known]
    if missing:
        raise InvalidInputError(
            f"no user {', '.join(map(repr, missing))} in this ledger (or not in the chosen "
            "notion); check the ids (7 and '7' are different users). Nothing was charged."
        )
    return {(type(k), k) for k in keys}


def _timeline(
    session: Session,
    wanted: set[tuple[type, Any]] | None,
    notion: str | None,
    bound: datetime | None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Aggregate the committed charges per query; with ``bound``, per-user sums since then."""
    led = session.ledger
    with led._lock, led._read():
        led._refresh()
        index = led._index
        names = led.store.queries()
        charges = [c for c in led.store.charges() if notion is None or c.notion == notion]
        n = len(index)
        sel = None
        if wanted is not None:
            sel = np.flatnonzero([(type(u), u) in wanted for u in index.tolist()])
        spent_since = {k: np.zeros(n) for k in led.kind}
        count_since = {k: np.zeros(n, dtype=np.int64) for k in led.kind}
        agg: dict[str, dict[str, Any]] = {}
        for c in charges:
            when = _utc(datetime.fromisoformat(c.created))
            if bound is not None and when < bound:
                continue
            keep = np.ones(c.idx.size, bool) if sel is None else np.isin(c.idx, sel)
            scale = 10.0 ** led.units[c.notion].exponent
            amount = c.amount[keep] / scale
            alloc = (c.alloc[keep] if c.alloc is not None else c.amount[keep]) / scale
            idx = c.idx[keep]
            if bound is not None:
                np.add.at(spent_since[c.notion], idx, amount)
                np.add.at(count_since[c.notion], idx, 1)
            q = agg.get(c.query_id)
            if q is None:
                q = agg[c.query_id] = {
                    "time": when, "query_id": c.query_id, "query": names.get(c.query_id, ""),
                    "notion": c.notion, "kind": c.kind, "users": 0, "charged": 0.0,
                    "max_charge": 0.0, "allocated": 0.0,
                }  # fmt: skip
            q["users"] += int(idx.size)
            q["charged"] += float(amount.sum())
            q["allocated"] += float(alloc.sum())
            if amount.size:
                q["max_charge"] = max(q["max_charge"], float(amount.max()))
        picked = []
        for q in agg.values():
            params = _params(led.store.query_params(q["query_id"]))
            left_out = params.pop(EXCLUDED_KEY, [])
            left_out = left_out if isinstance(left_out, list) else []
            if wanted is not None:
                left_out = [u for u in left_out if (type(u), u) in wanted]
                if q["users"] == 0 and not left_out:
                    continue  # a query that did not concern the selected users
            picked.append({**q, "excluded": len(left_out), "params": params})
    picked.sort(key=lambda q: q["time"])
    for q in picked:
        q["saved"] = max(q["allocated"] - q["charged"], 0.0)
        q["time"] = q["time"].isoformat(timespec="seconds")
    queries = pd.DataFrame(picked, columns=list(_QCOLS))
    return queries, {"index": index, "spent_since": spent_since, "queries_since": count_since}


def _params(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"params": text}
    return value if isinstance(value, dict) else {"params": value}


def _savings(queries: pd.DataFrame) -> pd.DataFrame:
    """Per notion: what the queries reserved, what they charged, and the difference."""
    out = []
    for (notion, kind), g in queries.groupby(["notion", "kind"], sort=False):
        allocated, charged = float(g["allocated"].sum()), float(g["charged"].sum())
        saved = max(allocated - charged, 0.0)
        out.append({
            "notion": notion, "kind": kind, "queries": len(g),
            "queries_saving": int((g["saved"] > 0).sum()), "allocated": allocated,
            "charged": charged, "saved": saved,
            "saved_share": saved / allocated if allocated > 0 else math.nan,
        })  # fmt: skip
    cols = ["notion", "kind", "queries", "queries_saving", "allocated", "charged", "saved",
            "saved_share"]  # fmt: skip
    return pd.DataFrame(out, columns=cols)


def _integrity(session: Session) -> dict[str, Any]:
    """Return the full check's verdict: its counts, or what it found wrong (never raises)."""
    try:
        counts = session.ledger.verify()
    except GpframeError as exc:
        return {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
    msg = (
        f"verified: {counts['users']} users, {counts['charges']} charges, "
        f"{counts['audit_rows']} audit rows, {counts['reservations']} open reservations"
    )
    return {"ok": True, "message": msg, **counts}
