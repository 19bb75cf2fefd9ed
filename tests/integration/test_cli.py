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
    assert list(back.columns) == ["user_id", "track_id", "point_id", "time", "geometry"]
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
