"""The ledger report as one self-contained HTML page, for the person who answers for the budget.

:func:`ledger_report_html` (``gp.ledger_report_html``; ``gpframe ledger report --html``) writes a
page with no network access and no script: inline CSS and SVG charts, and a Content Security
Policy that forbids scripts and remote content. Every string from the ledger (user ids, query
names and parameters, the path) is escaped. See ``docs/ledger.md``, "Reports for the privacy
officer".
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpframe._versions import versions
from gpframe.errors import InvalidInputError
from gpframe.ledger.report import ReportData, gather

__all__ = ["ledger_report_html", "render"]

#: what one unit of each budget kind is (amounts are shown in these units)
UNITS = {
    "gp": "ε per metre (geo-privacy)",
    "cgp": "ρ per m² (concentrated geo-privacy)",
    "dp": "ε (differential privacy)",
    "zcdp": "ρ (zero-concentrated DP)",
}
#: the timeline chart draws at most this many queries (the newest); the table lists them all
CHART_QUERIES = 120
#: the timeline table lists at most this many queries (the newest)
TABLE_QUERIES = 500

# no script, nothing remote: an injected tag could neither run nor fetch anything
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#1d2433;background:#f5f6f8;margin:0}
main{max-width:1100px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:18px;margin:0 0 10px}
section{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:16px 20px;
 margin:16px 0}
.sub{color:#5b6475;margin:0}
.note{background:#fff6e0;border:1px solid #f0d58a;border-radius:6px;padding:8px 12px;
 margin:12px 0 0}
.ok{border-left:6px solid #2e8b57} .bad{border-left:6px solid #c0392b}
.unknown{border-left:6px solid #8a93a5}
.verdict{font-weight:600;font-size:15px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #e7eaef;vertical-align:top}
td{overflow-wrap:break-word} td.w{overflow-wrap:anywhere} td.n,td.t{white-space:nowrap}
th{background:#f0f2f5;font-weight:600} td.n{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:flex;flex-wrap:wrap;gap:18px}
figure{margin:0} figcaption{color:#5b6475;font-size:12px;max-width:460px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}
dt{color:#5b6475} dd{margin:0}
code{font-size:12px;word-break:break-all}
.bar{display:inline-block;height:10px;background:#d35400;border-radius:2px;vertical-align:middle}
.scroll{max-height:520px;overflow:auto}
"""

#: columns shown as text even when they hold numbers (user 1234567 is not "1,234,567")
_TEXT_COLS = frozenset({"user", "query", "query_id"})
#: long unbreakable text (ids, JSON parameters): may wrap anywhere rather than widen the table
_WRAP_COLS = frozenset({"user", "query_id", "params_text"})

_FILL = {"metric": "#2b6cb0", "central": "#8e44ad"}
_LIGHT = {"metric": "#bcd3ee", "central": "#dcc6e6"}


def _e(value: object) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _num(x: object) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return f"{float(x):.4g}"  # type: ignore[arg-type]


def _when(iso: str) -> str:
    """Show an ISO UTC time as ``2026-11-26 04:02:49`` (the headings say UTC)."""
    return iso.replace("T", " ").removesuffix("+00:00")


def _unit(kind: object) -> str:
    return UNITS.get(str(kind), str(kind))


def _table(df: pd.DataFrame, cols: list[tuple[str, str]], raw: tuple[str, ...] = ()) -> str:
    """Return an HTML table of ``df``'s columns ``(column, heading)``; numbers right-aligned.

    Every cell is escaped except the columns named in ``raw``, which hold markup this module
    made from numbers only.
    """
    head = "".join(f"<th>{_e(h)}</th>" for _, h in cols)
    body = []
    for rec in df.to_dict("records"):
        cells = []
        for c, _ in cols:
            v = rec[c]
            if c in raw:
                cells.append(f"<td>{v}</td>")
            elif c == "time":
                cells.append(f'<td class="t">{_e(v)}</td>')
            elif c in _WRAP_COLS:  # a list: one escaped item per line
                text = "<br>".join(map(_e, v)) if isinstance(v, list) else _e(v)
                cells.append(f'<td class="w">{text}</td>')
            elif c not in _TEXT_COLS and isinstance(v, (int, float, np.integer, np.floating)):
                cells.append(f'<td class="n">{_e(_num(v))}</td>')
            else:
                cells.append(f"<td>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# -- charts (inline SVG) -----------------------------------------------------------------------


def _histogram(fractions: np.ndarray, notion: str) -> str:
    """Users per tenth of their budget spent (the last bar: 90 % to 100 %, exhausted included)."""
    counts = np.bincount(np.minimum((np.clip(fractions, 0, 1) * 10).astype(int), 9),
                         minlength=10)  # fmt: skip
    w, h, left, bottom, top = 460, 220, 44, 36, 14
    bw = (w - left - 10) / 10
    peak = max(int(counts.max()), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
        f'class="chart" data-chart="histogram-{_e(notion)}" '
        f'aria-label="users by share of budget spent, {_e(notion)}">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#555"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#555"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">{peak}</text>',
        f'<text x="{left - 6}" y="{h - bottom}" font-size="11" text-anchor="end">0</text>',
        f'<text x="12" y="{(h - bottom + top) / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {(h - bottom + top) / 2})">users</text>',
    ]
    for i, c in enumerate(counts):
        bh = (h - bottom - top) * int(c) / peak
        x = left + i * bw
        parts.append(
            f'<rect x="{x + 2:.1f}" y="{h - bottom - bh:.1f}" width="{bw - 4:.1f}" '
            f'height="{bh:.1f}" fill="{_FILL.get(notion, "#555")}">'
            f"<title>{i * 10}–{(i + 1) * 10} % spent: {int(c)} users</title></rect>"
        )
        if c:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{h - bottom - bh - 3:.1f}" '
                         f'font-size="10" text-anchor="middle">{int(c)}</text>')  # fmt: skip
        if i % 2 == 0:
            parts.append(f'<text x="{x:.1f}" y="{h - bottom + 14}" font-size="10" '
                         f'text-anchor="middle">{i * 10}%</text>')  # fmt: skip
    parts.append(f'<text x="{w - 10}" y="{h - bottom + 14}" font-size="10" '
                 'text-anchor="end">100%</text>')  # fmt: skip
    parts.append(f'<text x="{(left + w) / 2}" y="{h - 4}" font-size="11" '
                 'text-anchor="middle">share of budget spent</text></svg>')  # fmt: skip
    return "".join(parts)


def _timeline_chart(q: pd.DataFrame, notion: str) -> str:
    """Each query's allocated total (light) and charged total (dark), oldest on the left."""
    q = q.tail(CHART_QUERIES)
    n = len(q)
    w, h, left, bottom, top = 900, 220, 60, 34, 14
    bw = min((w - left - 10) / max(n, 1), 36.0)  # a few queries: bars, not blocks
    peak = float(max(q["allocated"].max(), q["charged"].max(), 0.0)) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
        f'class="chart" data-chart="timeline-{_e(notion)}" '
        f'aria-label="allocated and charged per query, {_e(notion)}">',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#555"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#555"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-size="11" text-anchor="end">'
        f"{_e(_num(peak))}</text>",
        f'<text x="{left - 6}" y="{h - bottom}" font-size="11" text-anchor="end">0</text>',
    ]
    for i, rec in enumerate(q.to_dict("records")):
        x = left + i * bw
        for key, fill, inset in (("allocated", _LIGHT, 0.0), ("charged", _FILL, bw * 0.2)):
            bh = (h - bottom - top) * float(rec[key]) / peak
            parts.append(
                f'<rect x="{x + 1 + inset:.1f}" y="{h - bottom - bh:.1f}" '
                f'width="{max(bw - 2 - 2 * inset, 1):.1f}" height="{bh:.1f}" '
                f'fill="{fill.get(notion, "#555")}"><title>{_e(rec["time"])} '
                f"{_e(rec['query'])}: {key} {_e(_num(rec[key]))}</title></rect>"
            )
    if n:
        first, last = _when(q["time"].iloc[0]), _when(q["time"].iloc[-1])
        span = first if first == last else f"{first} → {last}"
        parts.append(f'<text x="{left}" y="{h - bottom + 14}" font-size="10">{_e(span)}</text>')
    parts.append(f'<text x="{(left + w) / 2}" y="{h - 4}" font-size="11" text-anchor="middle">'
                 "queries, oldest first (UTC; light: allocated, dark: charged; summed over users)"
                 "</text></svg>")  # fmt: skip
    return "".join(parts)


def _savings_chart(s: pd.DataFrame) -> str:
    """One horizontal bar per budget: charged (dark) and saved (light) shares of the allocation."""
    w, rowh, left = 560, 34, 90
    h = rowh * len(s) + 26
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             'class="chart" data-chart="savings" aria-label="charged and saved">']  # fmt: skip
    span = w - left - 70
    for i, rec in enumerate(s.to_dict("records")):
        y = 6 + i * rowh
        share = rec["saved_share"] if rec["allocated"] > 0 else 0.0
        cw = span * (1 - share)
        notion = str(rec["notion"])
        parts.append(f'<text x="{left - 8}" y="{y + 15}" font-size="12" '
                     f'text-anchor="end">{_e(notion)}</text>')  # fmt: skip
        parts.append(f'<rect x="{left}" y="{y}" width="{cw:.1f}" height="22" '
                     f'fill="{_FILL.get(notion, "#555")}"><title>charged '
                     f"{_e(_num(rec['charged']))}</title></rect>")  # fmt: skip
        parts.append(f'<rect x="{left + cw:.1f}" y="{y}" width="{span - cw:.1f}" height="22" '
                     f'fill="{_LIGHT.get(notion, "#ccc")}"><title>saved '
                     f"{_e(_num(rec['saved']))}</title></rect>")  # fmt: skip
        parts.append(f'<text x="{left + span + 6}" y="{y + 15}" font-size="12">'
                     f"{share * 100:.0f}% saved</text>")  # fmt: skip
    parts.append(f'<text x="{left}" y="{h - 4}" font-size="11">dark: charged, light: saved '
                 "(reserved but not charged)</text></svg>")  # fmt: skip
    return "".join(parts)


# -- sections ------------------------------------------------------------------------------


def _filters(d: ReportData, top: int) -> str:
    f = d.filters
    users = "every user" if f["users"] is None else ", ".join(f["users"])
    since = "the whole history" if f["since"] is None else f"{f['since']} ({f['since_text']})"
    items = [
        ("ledger", f["path"] or "in memory"),
        ("users", users),
        ("budget", f["notion"] or "every budget"),
        ("charges since", since),
        ("closest to exhaustion", f"the top {top}"),
        ("report made", f["made"]),
    ]
    body = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    return f'<section id="filters"><h2>Filters applied</h2><dl>{body}</dl></section>'


def _integrity(d: ReportData) -> str:
    ok = d.integrity.get("ok")
    cls, mark = {True: ("ok", "✔ intact"), False: ("bad", "✘ NOT intact")}.get(
        ok, ("unknown", "not checked")
    )
    return (
        f'<section id="integrity" class="{cls}"><h2>Ledger integrity</h2>'
        f'<p class="verdict">{_e(mark)}</p><p>{_e(d.integrity.get("message", ""))}</p>'
        "<p class=\"sub\">The full check: SQLite's pages, the audit log's hash chain, every "
        "charge's digest and audit row, and every user's spend recomputed from the charges."
        "</p></section>"
    )


def _summary(d: ReportData) -> str:
    t = d.totals.copy()
    t["unit"] = t["kind"].map(_unit)
    cols = [("notion", "budget"), ("unit", "unit"), ("users", "users"),
            ("budget", "budget (sum)"), ("spent", "spent (sum)"), ("held", "held"),
            ("remaining", "remaining (sum)"), ("spent_max", "largest spend"),
            ("exhausted", "exhausted users")]  # fmt: skip
    if "spent_since" in t.columns:
        cols.append(("spent_since", "spent since"))
    return (f'<section id="summary"><h2>Budgets at a glance</h2>{_table(t, cols)}'
            "</section>")  # fmt: skip


def _fractions(rows: pd.DataFrame) -> np.ndarray:
    budget = rows["budget"].to_numpy(np.float64)
    spent = rows["spent"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(budget > 0, spent / budget, 1.0)  # no budget at all: exhausted
    return np.nan_to_num(frac, nan=1.0, posinf=1.0)


def _distribution(d: ReportData) -> str:
    figs = []
    for (notion, kind), g in d.rows.groupby(["notion", "kind"], sort=False):
        frac = _fractions(g)
        figs.append(
            f"<figure>{_histogram(frac, str(notion))}<figcaption><b>{_e(notion)}</b> "
            f"({_e(_unit(kind))}): {len(g)} users, median {np.median(frac) * 100:.0f} % of "
            f"their budget spent, {int((g['remaining'] <= 0).sum())} exhausted."
            "</figcaption></figure>"
        )
    body = "".join(figs) or "<p>No users match the filters.</p>"
    return (
        '<section id="distribution"><h2>Spend distribution per budget</h2>'
        f'<p class="sub">How many users have spent which share of their budget.</p>'
        f'<div class="charts">{body}</div></section>'
    )


def _exhaustion(d: ReportData, top: int) -> str:
    rows = d.rows.copy()
    rows["used"] = _fractions(rows)
    rows = rows.sort_values(["used", "spent"], ascending=[False, False], kind="stable").head(top)
    rows["share"] = [
        f'<span class="bar" style="width:{min(u, 1.0) * 80:.0f}px"></span> {u * 100:.1f} %'
        for u in rows["used"]
    ]
    cols = [("user", "user"), ("notion", "budget"), ("kind", "kind"), ("budget", "budget"),
            ("spent", "spent"), ("held", "held"), ("remaining", "remaining"),
            ("n_queries", "queries"), ("share", "spent of budget")]  # fmt: skip
    table = _table(rows, cols, raw=("share",))
    return (
        f'<section id="exhaustion"><h2>Users closest to exhaustion (top {top})</h2>'
        '<p class="sub">Largest share of their budget spent first; amounts in the budget\'s '
        f"units.</p>{table}</section>"
    )


def _params_text(params: dict[str, Any]) -> list[str]:
    """Parameters as ``key=value`` items; long values (coordinate lists) shortened."""
    parts = []
    for k, v in params.items():
        text = json.dumps(v, ensure_ascii=False, default=str)
        if len(text) > 60:
            text = text[:57] + "…"
        parts.append(f"{k}={text}")
    return parts


def _timeline(d: ReportData) -> str:
    q = d.queries
    if q.empty:
        return ('<section id="timeline"><h2>Query timeline</h2>'
                "<p>No charges match the filters.</p></section>")  # fmt: skip
    charts = "".join(
        f"<figure>{_timeline_chart(g, str(n))}<figcaption><b>{_e(n)}</b> "
        f"({_e(_unit(g['kind'].iloc[0]))}): {len(g)} queries"
        f"{f', the newest {CHART_QUERIES} drawn' if len(g) > CHART_QUERIES else ''}."
        "</figcaption></figure>"
        for n, g in q.groupby("notion", sort=False)
    )
    shown = q.tail(TABLE_QUERIES).iloc[::-1].copy()
    shown["time"] = [_when(t) for t in shown["time"]]
    shown["params_text"] = [_params_text(p) for p in shown["params"]]
    cols = [("time", "time (UTC)"), ("query", "query"), ("notion", "budget"),
            ("users", "users charged"), ("charged", "total charged"),
            ("max_charge", "max per user"), ("allocated", "allocated"), ("saved", "saved"),
            ("excluded", "excluded"), ("params_text", "parameters"),
            ("query_id", "query id")]  # fmt: skip
    more = f" (the newest {TABLE_QUERIES} of {len(q)})" if len(q) > TABLE_QUERIES else ""
    return (
        f'<section id="timeline"><h2>Query timeline</h2><div class="charts">{charts}</div>'
        f'<h3>Queries, newest first{_e(more)}</h3><div class="scroll">{_table(shown, cols)}'
        "</div></section>"
    )


def _savings(d: ReportData) -> str:
    s = d.savings
    if s.empty:
        return ('<section id="savings"><h2>Savings from elimination and adaptive budgeting</h2>'
                "<p>No charges match the filters.</p></section>")  # fmt: skip
    s = s.copy()
    s["unit"] = s["kind"].map(_unit)
    s["saved %"] = [f"{x * 100:.1f} %" if not math.isnan(x) else "–" for x in s["saved_share"]]
    cols = [("notion", "budget"), ("unit", "unit"), ("queries", "queries"),
            ("queries_saving", "queries that saved"), ("allocated", "allocated"),
            ("charged", "charged"), ("saved", "saved"), ("saved %", "saved share")]  # fmt: skip
    return (
        '<section id="savings"><h2>Savings from elimination and adaptive budgeting</h2>'
        '<p class="sub">Each query reserves an allocation per user and charges at most that: '
        "users eliminated early by iterative elimination, or charged less by adaptive "
        "budgeting, keep the difference (summed over users).</p>"
        f"<figure>{_savings_chart(s)}</figure>{_table(s, cols)}</section>"
    )


def render(data: ReportData, *, top: int = 10) -> str:
    """Return the report page's HTML for ``data`` (:func:`gpframe.ledger.report.gather`)."""
    f = data.filters
    where = f["path"] or "an in-memory ledger"
    version = versions().get("gpframe", "?")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Privacy budget report: {_e(where)}</title><style>{_CSS}</style></head>"
        "<body><main><header><h1>Privacy budget report</h1>"
        f'<p class="sub">{_e(where)} · made {_e(f["made"])} · gpframe {_e(version)}</p>'
        '<p class="note">This page names users and their spend: it is for the person who '
        "answers for the budget, not for publication.</p></header>"
        + _filters(data, top)
        + _integrity(data)
        + _summary(data)
        + _distribution(data)
        + _exhaustion(data, top)
        + _timeline(data)
        + _savings(data)
        + "</main></body></html>\n"
    )


def ledger_report_html(
    session: Any,
    path: str | os.PathLike[str],
    *,
    users: object = None,
    notion: str | None = None,
    since: object = None,
    top: int = 10,
) -> Path:
    """Write the ledger report of ``session`` as one self-contained HTML page.

    The page shows the filters applied, the ledger's integrity (the full check), totals per
    budget, the spend distribution per budget (users by share of budget spent), the ``top``
    users closest to exhaustion, the query timeline (each query's parameters, users charged,
    total and largest charge, allocation, exclusions) and the savings from elimination and
    adaptive budgeting. It loads nothing from the network and runs no script. It names users:
    it is for the person who answers for the budget, not for publication (``docs/ledger.md``,
    "Reports for the privacy officer").

    Parameters
    ----------
    session : gpframe.Session
        The ledger to report (a read-only session is enough: nothing is written to it).
    path : str or os.PathLike
        The HTML file to write (replaced if it exists); its directory must exist.
    users : list of user ids, optional
        Only these users (``7`` and ``"7"`` are different users).
    notion : {"metric", "central"}, optional
        Only this budget.
    since : str or datetime.date or datetime.datetime, optional
        Only the charges at or after this time in the timeline and savings: an ISO date or
        date-time (UTC unless it carries an offset) or an age such as ``"7d"``, ``"12h"``.
    top : int
        How many users the "closest to exhaustion" table lists.

    Returns
    -------
    pathlib.Path
        The page written.

    Raises
    ------
    InvalidInputError
        A bad ``path``, ``top``, ``since``, ``notion`` or user; nothing is written then.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import gpframe as gp
    >>> s = gp.Session(central=gp.DP(epsilon=1.0))
    >>> with s.reserve(["ann", "bob"], 0.5, notion="central", query="count") as r:
    ...     _ = r.charge([0.5, 0.25])
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "report.html"
    >>> gp.ledger_report_html(s, out, since="7d").name
    'report.html'
    >>> "Users closest to exhaustion" in out.read_text()
    True
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InvalidInputError(
            f"path={path!r} must be the HTML file to write (a str or path). Nothing was charged."
        )
    out = Path(path)
    if not out.parent.is_dir():
        raise InvalidInputError(
            f"path={str(path)!r}: the directory {str(out.parent)!r} does not exist; create it "
            "first. Nothing was charged."
        )
    if out.is_dir():
        raise InvalidInputError(f"path={str(path)!r} is a directory: name the HTML file.")
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise InvalidInputError(
            f"top={top!r} must be a whole number >= 1 (how many users to list). Nothing was "
            "charged."
        )
    data = gather(session, users=users, notion=notion, since=since)
    out.write_text(render(data, top=int(top)), encoding="utf-8")
    return out
