"""The project's own habits: ruff's lint rules and its formatter hold on every file."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(args):
    # ruff is in the test extras: without it this fails (a style check that cannot fail would
    # pass a tree nobody checked)
    r = subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, f"ruff {' '.join(args)}:\n{r.stdout}{r.stderr}"
