"""The ``gpframe`` command line: ``gpframe demo`` and ``gpframe ledger report``.

Examples
--------
>>> main(["--version"])  # doctest: +SKIP
gpframe 0.1.0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]

_EPILOG = """\
examples:
  gpframe demo                         privatize the packaged sample into ./gpframe-demo
  gpframe demo --out /tmp/gp           ... into another directory
  gpframe ledger report ledger.sqlite  per-user budgets and spend of a ledger file
  gpframe ledger report ledger.sqlite --user 42 --notion central --format csv
  gpframe ledger report ledger.sqlite --totals --format json
  gpframe ledger report ledger.sqlite --since 7d --html report.html
"""


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser (exposed for tests and documentation)."""
    from gpframe import __version__

    parser = argparse.ArgumentParser(
        prog="gpframe",
        description="Geo-private analytics on location data: demo and ledger tools.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpframe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="privatize a small real AIS dataset in Python and SQL, draw a map, report the ledger",
        description=(
            "Privatize one hour of AIS fixes of 295 vessels in New York Harbor (8,689 fixes; "
            "U.S. Coast Guard / MarineCadastre.gov, public domain) with "
            "concentrated geo-privacy, in Python (df.geopriv) and in DuckDB SQL "
            "(gp_privatize), charging one file-backed ledger. Writes ledger.sqlite, "
            "gpframe_demo.duckdb, private_points.parquet (GeoParquet) and private_points.png "
            "into the output directory and prints the ledger report. Reruns start afresh."
        ),
    )
    demo.add_argument(
        "--out",
        metavar="DIR",
        default="gpframe-demo",
        help="output directory (default: ./gpframe-demo)",
    )
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    ledger = sub.add_parser(
        "ledger",
        help="inspect a ledger, settle a gone host's reservations",
        description="Inspect a ledger file or database; settle a gone host's reservations.",
    )
    lsub = ledger.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND")
    report = lsub.add_parser(
        "report",
        help="print every user's budget, spend and remaining amount",
        description="Print every user's budget, spend and remaining amount. Read-only.",
    )
    report.add_argument(
        "path",
        metavar="PATH",
        help="the ledger file (e.g. gpframe-demo/ledger.sqlite) or a postgresql:// URL",
    )
    report.add_argument(
        "--user",
        action="append",
        metavar="ID",
        help="only this user (repeat for several; ids are compared as text)",
    )
    report.add_argument(
        "--notion",
        choices=("metric", "central"),
        help="only this budget: metric (geo-privacy, per metre) or central (DP / zCDP)",
    )
    report.add_argument(
        "--since",
        metavar="WHEN",
        help="only the charges at or after WHEN in the spend columns (spent_since, "
        "queries_since) and the HTML timeline: an ISO date (2026-11-01), an ISO date-time "
        "(2026-11-01T12:00, UTC unless it has an offset) or an age (30m, 12h, 7d, 2w)",
    )
    report.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default=None,
        help="table (default: rows, then totals per notion), csv (the rows) or json "
        '({"rows": [...], "totals": [...]})',
    )
    report.add_argument(
        "--totals",
        action="store_true",
        help="only the totals per notion (users, budget, spent, held, remaining, exhausted)",
    )
    report.add_argument(
        "--ledger-key",
        metavar="FILE",
        help="the key file of a keyed ledger (one made with ledger_key=...): its audit chain "
        "is checked with it",
    )
    report.add_argument(
        "--html",
        metavar="OUT",
        help="write a self-contained HTML page (no network, no script) to OUT instead: "
        "integrity, spend distribution, users closest to exhaustion, query timeline, savings",
    )
    report.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="with --html: how many users closest to exhaustion to list (default 10)",
    )
    held = lsub.add_parser(
        "reservations",
        help="list the reservations not yet charged or cancelled (host, pid, age, held)",
        description="List the reservations not yet charged or cancelled. Read-only.",
    )
    held.add_argument("path", metavar="PATH", help="the ledger file or a postgresql:// URL")
    settle = lsub.add_parser(
        "settle",
        help="charge in full the open reservations of a host that is gone",
        description=(
            "Charge, at their full allocation, the open reservations left by a host that is "
            "gone (a Session settles only its own host's). Noise may have been drawn before "
            "the host died, so they are charged, never released. A process of that host that "
            "is still running cannot release anything afterwards."
        ),
    )
    settle.add_argument("path", metavar="PATH", help="the ledger file or a postgresql:// URL")
    settle.add_argument(
        "--host", required=True, metavar="NAME", help="the host, as listed by `reservations`"
    )
    settle.add_argument(
        "--older-than",
        metavar="AGE",
        help="only reservations at least this old: 30m, 12h, 7d or 2w (default: all of them)",
    )
    return parser


def _open_ledger(path: str, readonly: bool) -> Any:
    """Open an existing ledger for a command; raises GpframeError with a message to print."""
    import os

    from gpframe.errors import InvalidInputError
    from gpframe.ledger import Session
    from gpframe.ledger.pg_store import is_postgres_url

    if not is_postgres_url(path) and not os.path.exists(path):
        raise InvalidInputError(
            f"no ledger file at {path!r}. Check the path: ledger files are made by "
            "gp.Session(path=...) in Python or by `gpframe demo`."
        )
    return Session(path=path, create=False, readonly=readonly)


def _ledger_reservations(args: argparse.Namespace) -> int:
    """``gpframe ledger reservations`` and ``gpframe ledger settle``."""
    from gpframe.errors import GpframeError
    from gpframe.ledger.report import parse_age

    def fail(msg: str) -> int:
        print(f"gpframe: {msg}", file=sys.stderr)
        return 1

    older = None
    if args.ledger_command == "settle" and args.older_than is not None:
        older = parse_age(args.older_than, name="--older-than")
        if older is None:
            return fail(f"--older-than {args.older_than!r}: pass an age such as 30m, 12h, 7d.")
    try:
        session = _open_ledger(args.path, readonly=args.ledger_command == "reservations")
    except GpframeError as exc:
        return fail(str(exc))
    try:
        if args.ledger_command == "settle":
            n = session.ledger.settle_host(args.host, older_than=older)
            print(f"settled {n} reservation{'s' if n != 1 else ''} of host {args.host!r} in full")
            return 0
        table = session.ledger.open_reservations()
    except GpframeError as exc:
        return fail(str(exc))
    finally:
        session.close()
    if table.empty:
        print("no open reservations")
    else:
        _print_report(table)
    return 0


def _print_report(report: object) -> None:
    import pandas as pd

    if isinstance(report, pd.DataFrame):
        with pd.option_context("display.max_rows", 200, "display.width", 120):
            print(report.to_string())
    else:
        print(report)


def _ledger_report(args: argparse.Namespace) -> int:
    """``gpframe ledger report``: read-only; filters, totals, table / csv / json / html."""
    import json
    import os

    from gpframe.errors import GpframeError
    from gpframe.ledger import Session
    from gpframe.ledger.pg_store import is_postgres_url
    from gpframe.ledger.report import gather, parse_since

    def fail(msg: str) -> int:
        print(f"gpframe: {msg}", file=sys.stderr)
        return 1

    if args.html is not None and (args.format is not None or args.totals):
        return fail("--html writes the page only: leave out --format and --totals.")
    if args.top < 1:
        return fail(f"--top {args.top}: pass a whole number >= 1.")
    try:  # the arguments are checked before the file is opened
        if args.since is not None:
            parse_since(args.since, name="--since")
    except GpframeError as exc:
        return fail(str(exc))
    if not is_postgres_url(args.path) and not os.path.exists(args.path):
        return fail(
            f"no ledger file at {args.path!r}. Check the path: ledger files are made by "
            "gp.Session(path=...) in Python or by `gpframe demo`; this command only reads them."
        )
    # read-only: a report never writes the file (no schema, no WAL switch, no migration,
    # no settlement of abandoned reservations), whatever state the file is in
    try:
        session = Session(path=args.path, create=False, readonly=True, ledger_key=args.ledger_key)
    except GpframeError as exc:
        return fail(str(exc))
    try:
        users = _cli_users(session, args.user) if args.user else None
        if args.html is not None:
            from gpframe.report_html import ledger_report_html

            out = ledger_report_html(session, args.html, users=users, notion=args.notion,
                                     since=args.since, top=args.top)  # fmt: skip
            print(f"wrote {out}")
            return 0
        data = gather(session, users=users, notion=args.notion, since=args.since, verify=False)
    except GpframeError as exc:
        return fail(str(exc))
    finally:
        session.close()
    rows, totals = data.rows, data.totals
    if args.format == "json":
        doc: dict[str, object] = {"totals": json.loads(totals.to_json(orient="records"))}
        if not args.totals:
            doc["rows"] = json.loads(rows.to_json(orient="records"))
        if data.filters["since"] is not None:
            doc["since"] = data.filters["since"]
        print(json.dumps(doc, indent=2))
    elif args.format == "csv":
        sys.stdout.write((totals if args.totals else rows).to_csv(index=False))
    else:
        if data.filters["since"] is not None:
            print(f"Charges since {data.filters['since']} in spent_since / queries_since.")
        if not args.totals:
            _print_report(rows)
            print()
        print("Totals:")
        _print_report(totals)
    return 0


def _cli_users(session: Any, given: list[str]) -> list[Any]:
    """Return the ledger's users whose id reads as one of ``given`` (compared as text)."""
    from gpframe.errors import InvalidInputError

    by_text: dict[str, list[Any]] = {}
    for u in dict.fromkeys(session.report()["user"].tolist()):
        by_text.setdefault(str(u), []).append(u)
    missing = [u for u in given if u not in by_text]
    if missing:
        raise InvalidInputError(
            f"no user {', '.join(map(repr, missing))} in this ledger (ids are compared as text)."
        )
    return [u for g in dict.fromkeys(given) for u in by_text[g]]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from gpframe.demo import run_demo

        made = run_demo(args.out, progress=False if args.no_progress else None)
        res = made["python"]
        print(f"Python: {res!r}")
        print("SQL, top cells of the 2 km grid of private points (cell_x, cell_y, points, users):")
        for row in made["sql"][:5]:
            print("  ", row)
        report = made["report"]
        print(f"Ledger report ({len(report)} vessels; the first 10):")
        _print_report(report.head(10))
        print(f"   ... the whole table: gpframe ledger report {made['paths']['ledger.sqlite']}")
        print("Files:")
        for p in made["paths"].values():
            print(f"  {p}")
        return 0
    if args.command == "ledger":
        if args.ledger_command in ("reservations", "settle"):
            return _ledger_reservations(args)
        if args.ledger_command != "report":
            parser.parse_args(["ledger", "--help"])
            return 2
        return _ledger_report(args)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
