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

__all__ = ["build_parser", "main"]

_EPILOG = """\
examples:
  gpframe demo                         privatize the packaged sample into ./gpframe-demo
  gpframe demo --out /tmp/gp           ... into another directory
  gpframe ledger report ledger.sqlite  per-user budgets and spend of a ledger file
  gpframe ledger report ledger.sqlite --user 42 --notion central --format csv
  gpframe ledger report ledger.sqlite --totals --format json
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
        help="privatize a small real GPS dataset in Python and SQL, draw a map, report the ledger",
        description=(
            "Privatize 3,338 GPS fixes of 25 people (Go!Track, Aracaju; CC BY 4.0) with "
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
        "ledger", help="inspect a ledger file", description="Inspect a ledger file."
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
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default: rows, then totals per notion), csv (the rows) or json "
        '({"rows": [...], "totals": [...]})',
    )
    report.add_argument(
        "--totals",
        action="store_true",
        help="only the totals per notion (users, budget, spent, held, remaining, exhausted)",
    )
    return parser


def _print_report(report: object) -> None:
    import pandas as pd

    if isinstance(report, pd.DataFrame):
        with pd.option_context("display.max_rows", 200, "display.width", 120):
            print(report.to_string())
    else:
        print(report)


def _totals(rows: object) -> object:
    """Per notion: users, summed budget / spent / held / remaining, largest spend, exhausted.

    A user is exhausted when nothing of their budget remains.
    """
    import pandas as pd

    assert isinstance(rows, pd.DataFrame)
    g = rows.groupby(["notion", "kind"], sort=False)
    out = g.agg(
        users=("user", "size"),
        budget=("budget", "sum"),
        spent=("spent", "sum"),
        held=("held", "sum"),
        remaining=("remaining", "sum"),
        spent_max=("spent", "max"),
        exhausted=("remaining", lambda r: int((r <= 0).sum())),
    )
    return out.reset_index()


def _ledger_report(args: argparse.Namespace) -> int:
    """``gpframe ledger report``: read-only; filters, totals, table / csv / json."""
    import json
    import os

    from gpframe.errors import GpframeError
    from gpframe.ledger import Session
    from gpframe.ledger.pg_store import is_postgres_url

    if not is_postgres_url(args.path) and not os.path.exists(args.path):
        print(
            f"gpframe: no ledger file at {args.path!r}. Check the path: ledger files are made by "
            "gp.Session(path=...) in Python or by `gpframe demo`; this command only reads them.",
            file=sys.stderr,
        )
        return 1
    # read-only: a report never writes the file (no schema, no WAL switch, no migration,
    # no settlement of abandoned reservations), whatever state the file is in
    try:
        session = Session(path=args.path, create=False, readonly=True)
    except GpframeError as exc:
        print(f"gpframe: {exc}", file=sys.stderr)
        return 1
    try:
        rows = session.report()
    except GpframeError as exc:
        print(f"gpframe: {exc}", file=sys.stderr)
        return 1
    finally:
        session.close()
    if args.notion is not None:
        if args.notion not in set(rows["notion"]):
            print(f"gpframe: this ledger has no {args.notion} budget.", file=sys.stderr)
            return 1
        rows = rows[rows["notion"] == args.notion]
    if args.user:
        text = rows["user"].map(str)
        missing = [u for u in args.user if u not in set(text)]
        if missing:
            print(
                f"gpframe: no user {', '.join(map(repr, missing))} in this ledger (ids are "
                "compared as text).",
                file=sys.stderr,
            )
            return 1
        rows = rows[text.isin(args.user).to_numpy()]
    rows = rows.reset_index(drop=True)
    totals = _totals(rows)
    if args.format == "json":
        doc: dict[str, object] = {"totals": json.loads(totals.to_json(orient="records"))}
        if not args.totals:
            doc["rows"] = json.loads(rows.to_json(orient="records"))
        print(json.dumps(doc, indent=2))
    elif args.format == "csv":
        sys.stdout.write((totals if args.totals else rows).to_csv(index=False))
    else:
        if not args.totals:
            _print_report(rows)
            print()
        print("Totals:")
        _print_report(totals)
    return 0


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
        print("Ledger report:")
        _print_report(made["report"])
        print("Files:")
        for p in made["paths"].values():
            print(f"  {p}")
        return 0
    if args.command == "ledger":
        if args.ledger_command != "report":
            parser.parse_args(["ledger", "--help"])
            return 2
        return _ledger_report(args)
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
