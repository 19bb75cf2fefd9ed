"""Staging directories left by dead clients: removed by the next write or by the command.

See ``docs/beyond-one-machine.md`` ("Guarantees under faults"). The owner lock is a real
``flock`` held by a real process (here a subprocess killed with SIGKILL); no cluster is needed.
The kill -9 of a client mid-write on a LocalCluster is in test_faults.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gpframe as gp
from gpframe.dask import staging

_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("LOCKED", flush=True)
time.sleep(600)
"""


def _stage(tmp_path: Path, qid: str, *, result: bool = False) -> Path:
    path = tmp_path / f"out.staging-{qid}"
    path.mkdir()
    (path / staging.part_name(0)).write_bytes(b"PAR1")
    (path / staging.LOCK_FILE).write_text("")
    if result:
        (path / staging.RESULT_FILE).write_text("{}")
    return path


def test_a_live_client_keeps_its_staging_and_a_killed_one_loses_it(tmp_path) -> None:
    path = _stage(tmp_path, "q1")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(path / staging.LOCK_FILE)],
                              stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == b"LOCKED"
        assert staging.clean_staging(tmp_path / "out") == []  # its client lives: untouched
        assert path.exists()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        holder.stdout.close()
    # the next write to the destination (its validation, before anything is reserved)
    assert staging.check_target(tmp_path / "out") == (tmp_path / "out").absolute()
    assert not path.exists()


def test_the_command_removes_orphans_and_leaves_unlocked_directories(tmp_path, capsys) -> None:
    orphan = _stage(tmp_path, "q2")
    legacy = tmp_path / "out.staging-old"  # no lock file: never removed automatically
    legacy.mkdir()
    other = _stage(tmp_path, "q3")
    other.rename(tmp_path / "elsewhere.staging-q3")  # another destination's: not touched
    # python -m gpframe.dask.staging clean <target> (its entry point, in this process)
    assert staging._main(["clean", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.split() == [str(orphan)]
    assert not orphan.exists() and legacy.exists() and (tmp_path / "elsewhere.staging-q3").exists()


def test_a_complete_orphan_is_kept_with_a_warning_or_published_on_request(tmp_path) -> None:
    path = _stage(tmp_path, "q4", result=True)  # charged, died before the rename
    with pytest.warns(gp.GpframeWarning, match="complete outputs"):
        assert staging.clean_staging(tmp_path / "out") == []
    assert path.exists()
    assert staging.clean_staging(tmp_path / "out", publish=True) == [str(path)]
    target = tmp_path / "out"
    assert sorted(os.listdir(target)) == sorted([staging.part_name(0), staging.RESULT_FILE])


def test_this_process_keeps_its_own_staging(tmp_path) -> None:
    path = staging.staging_dir((tmp_path / "out").absolute(), "q5")
    try:
        assert staging.clean_staging(tmp_path / "out") == [] and path.exists()
    finally:
        staging.discard(path)
    assert not path.exists()
