import subprocess
import sys

import pytest

from gpframe.cli import main


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "ledger" in out and "examples:" in out


def test_demo_writes_its_files_and_ledger_report_prints(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    assert main(["demo", "--out", str(out_dir), "--no-progress"]) == 0
    for name in (
        "ledger.sqlite",
        "gpframe_demo.duckdb",
        "private_points.parquet",
        "private_points.png",
    ):
        assert (out_dir / name).stat().st_size > 0, name
    printed = capsys.readouterr().out
    assert "PrivatizeResult" in printed and "remaining" in printed
    _assert_no_true_coordinate(out_dir / "private_points.parquet")
    assert main(["ledger", "report", str(out_dir / "ledger.sqlite")]) == 0
    report = capsys.readouterr().out
    assert "spent" in report and "cgp" in report
    # a rerun starts from a fresh ledger: it removes the ledger's anchor file with the ledger
    assert (out_dir / "ledger.sqlite.anchor").exists()
    assert main(["demo", "--out", str(out_dir), "--no-progress"]) == 0


def _assert_no_true_coordinate(path):
    """The demo's private file: noisy geometry and public ids only (it held the exact lon/lat)."""
    import geopandas as gpd
    import numpy as np

    from gpframe.demo import load_sample

    true = load_sample()
    back = gpd.read_parquet(path)
    assert list(back.columns) == ["mmsi", "time", "geometry"]
    assert back.index.equals(true.index)
    # row by row: no released point equals its own true one (the old file held them exactly)
    dx = np.abs(back.geometry.x.to_numpy() - true["lon"].to_numpy())
    dy = np.abs(back.geometry.y.to_numpy() - true["lat"].to_numpy())
    d = np.maximum(dx, dy)
    assert (d[np.isfinite(d)] > 1e-6).all()


def test_ledger_report_on_missing_file_fails_cleanly(tmp_path, capsys):
    assert main(["ledger", "report", str(tmp_path / "missing.sqlite")]) == 1
    assert "gpframe:" in capsys.readouterr().err


def test_entry_point_module_runs():
    r = subprocess.run(
        [sys.executable, "-m", "gpframe.cli", "ledger", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "report" in r.stdout


# ---------------------------------------------------------------------------------------------
# gpframe ledger report: filters, totals, machine-readable output (read-only)


@pytest.fixture
def ledger_file(tmp_path):
    import gpframe as gp

    path = tmp_path / "ledger.sqlite"
    s = gp.Session(path=str(path), create=True, budget=gp.CGP(rho=1e-3),
                   central=gp.DP(epsilon=1.0))  # fmt: skip
    with s.reserve(["ann", "bob", 7], 0.5, notion="central", query="count") as r:
        r.charge([0.5, 0.25, 0.5])
    with s.reserve(["ann"], 1e-4, notion="metric", query="privatize") as r:
        r.charge([1e-4])
    s.set_budget(["bob"], gp.DP(epsilon=0.25))  # bob has nothing left
    s.close()
    return path


def _digest(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ledger_report_prints_rows_then_totals(ledger_file, capsys):
    before = _digest(ledger_file)
    assert main(["ledger", "report", str(ledger_file)]) == 0
    out = capsys.readouterr().out
    rows, totals = out.split("Totals:")
    assert "ann" in rows and "bob" in rows and "central" in rows and "metric" in rows
    assert "exhausted" in totals and "spent_max" in totals
    assert _digest(ledger_file) == before  # read-only


def test_ledger_report_filters_users_and_notion_as_csv(ledger_file, capsys):
    import io

    import pandas as pd

    args = ["ledger", "report", str(ledger_file), "--user", "7", "--user", "ann",
            "--notion", "central", "--format", "csv"]  # fmt: skip
    assert main(args) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert sorted(df["user"].astype(str)) == ["7", "ann"]
    assert set(df["notion"]) == {"central"}
    assert df.set_index(df["user"].astype(str))["spent"].to_dict() == {"ann": 0.5, "7": 0.5}


def test_ledger_report_json_has_rows_and_totals(ledger_file, capsys):
    import json

    assert main(["ledger", "report", str(ledger_file), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 6
    central = next(t for t in doc["totals"] if t["notion"] == "central")
    assert central["users"] == 3 and central["spent"] == pytest.approx(1.25)
    assert central["exhausted"] == 1  # bob
    assert central["spent_max"] == pytest.approx(0.5)


def test_ledger_report_totals_only(ledger_file, capsys):
    import io

    import pandas as pd

    assert main(["ledger", "report", str(ledger_file), "--totals", "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(df["notion"]) == ["metric", "central"] and "user" not in df.columns
    assert df.set_index("notion").loc["metric", "spent"] == pytest.approx(1e-4)


def test_ledger_report_unknown_user_or_notion_fails_cleanly(ledger_file, tmp_path, capsys):
    assert main(["ledger", "report", str(ledger_file), "--user", "zed"]) == 1
    assert "no user 'zed'" in capsys.readouterr().err
    import gpframe as gp

    only_metric = tmp_path / "metric.sqlite"
    gp.Session(path=str(only_metric), create=True, budget=gp.CGP(rho=1e-3)).close()
    assert main(["ledger", "report", str(only_metric), "--notion", "central"]) == 1
    assert "no central budget" in capsys.readouterr().err


def test_missing_ledger_message_speaks_to_cli_users(tmp_path, capsys):
    assert main(["ledger", "report", str(tmp_path / "missing.sqlite")]) == 1
    err = capsys.readouterr().err
    assert "create=True" not in err and "no ledger file" in err
    assert not (tmp_path / "missing.sqlite").exists()


def test_ledger_report_since_adds_the_spend_since_then(ledger_file, capsys):
    import json

    assert main(["ledger", "report", str(ledger_file), "--since", "1d", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "since" in doc
    ann = next(r for r in doc["rows"] if r["user"] == "ann" and r["notion"] == "central")
    assert ann["spent_since"] == pytest.approx(0.5) and ann["queries_since"] == 1
    central = next(t for t in doc["totals"] if t["notion"] == "central")
    assert central["spent_since"] == pytest.approx(1.25)
    assert main(["ledger", "report", str(ledger_file), "--since", "2999-01-01"]) == 0
    out = capsys.readouterr().out
    assert "spent_since" in out and "Charges since 2999-01-01T00:00:00+00:00" in out


@pytest.mark.parametrize("bad", ["yesterday", "7 days", "2026-02-30"])
def test_ledger_report_bad_since_fails_cleanly_before_opening(bad, tmp_path, capsys):
    # the argument is checked first: even a missing file is not reported then
    assert main(["ledger", "report", str(tmp_path / "none.sqlite"), "--since", bad]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpframe: --since={bad!r}") and "7d" in err and "Traceback" not in err


def test_ledger_report_html_refuses_format_and_totals(ledger_file, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["ledger", "report", str(ledger_file), "--html", str(out), "--totals"]) == 1
    assert "--html writes the page only" in capsys.readouterr().err
    assert main(["ledger", "report", str(ledger_file), "--html", str(out), "--top", "0"]) == 1
    assert "--top 0" in capsys.readouterr().err
    assert not out.exists()


def test_ledger_report_of_a_keyed_ledger_takes_its_key_file(tmp_path, capsys):
    import gpframe as gp

    key = tmp_path / "ledger.key"
    key.write_bytes(bytes(range(32)))
    path = tmp_path / "keyed.sqlite"
    s = gp.Session(path=str(path), central=gp.DP(epsilon=1.0), ledger_key=str(key))
    with s.reserve(["ann"], 0.5, notion="central", query="count") as r:
        r.charge([0.5])
    s.close()
    assert main(["ledger", "report", str(path)]) == 1
    assert "keyed" in capsys.readouterr().err
    out = tmp_path / "keyed.html"
    assert main(["ledger", "report", str(path), "--ledger-key", str(key), "--html", str(out)]) == 0
    assert "✔ intact" in out.read_text()


def test_ledger_report_reads_a_postgresql_ledger(pg_url, capsys):
    import gpframe as gp

    with gp.Session(pg_url, central=gp.DP(epsilon=1.0)) as s:
        with s.reserve(["ann", 7], 0.5, notion="central", query="count") as r:
            r.charge([0.5, 0.25])
        before = s.ledger.snapshot()
    assert main(["ledger", "report", pg_url, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("user,") and "ann" in out and "7" in out
    with gp.Session(pg_url, readonly=True) as ro:
        assert ro.ledger.snapshot() == before  # read-only


def test_ledger_report_on_an_unreachable_database_hides_the_password(pg_server, capsys):
    url = f"postgresql://postgres:hunter2@/no_such_db?host={pg_server.root}"
    assert main(["ledger", "report", url]) == 1
    err = capsys.readouterr().err
    assert "no_such_db" in err and "hunter2" not in err and "***" in err


def test_ledger_report_html_of_a_postgresql_ledger(pg_url, tmp_path, capsys):
    import gpframe as gp

    with gp.Session(pg_url, central=gp.DP(epsilon=1.0)) as s:
        with s.reserve(["ann", 7], 0.5, notion="central", query="count") as r:
            r.charge([0.5, 0.25])
    out = tmp_path / "pg.html"
    assert main(["ledger", "report", pg_url, "--html", str(out), "--since", "1d"]) == 0
    page = out.read_text()
    assert "✔ intact" in page and "ann" in page and "count" in page
