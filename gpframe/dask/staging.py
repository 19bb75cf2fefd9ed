"""Charge before release, at scale: workers write into a staging directory, the client publishes.

See ``docs/beyond-one-machine.md``. ``<target>.staging-<query_id>`` is created after the
reservation; every task writes its partition there under a temporary name and renames it to
``part.<i>.parquet`` (so a recomputed partition replaces, never mixes with, an attempt that
died). Only after the driver committed the charge does the client check each file against the
digest the accepted task reported, remove anything else, and rename the directory to
``target`` (one ``os.rename``: the output appears whole or not at all). A failure before the
charge leaves no ``target``.

A client killed mid-query leaves its staging directory behind. The client holds an exclusive
``flock`` on ``<staging>/.gpframe-owner.lock`` from the directory's creation until it publishes
or discards it; the operating system releases the lock when the process dies (``kill -9``
included). The next write to the same destination (:func:`check_target`) and
:func:`clean_staging` (``python -m gpframe.dask.staging clean <target>``) remove every staging
directory of that destination whose lock they can take: its client is gone and nothing in it was
ever published. A directory that already holds the Result file (the client died after the
charge, between writing it and the rename) is a complete, charged output: it is kept and named
in a warning, and ``clean_staging(target, publish=True)`` renames it to ``target``. A staging
directory without a lock file (left by an older version) is never removed automatically.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

from gpframe.errors import GpframeInternalError, GpframeWarning, InvalidInputError

__all__ = ["LOCK_FILE", "RESULT_FILE", "check_target", "clean_staging", "discard", "part_name",
           "publish", "staging_dir", "write_part"]  # fmt: skip

#: held (flock) by the client that created the staging directory, until it publishes or
#: discards it; a leading dot keeps Parquet readers from reading it
LOCK_FILE = ".gpframe-owner.lock"
#: the open lock of each staging directory this process owns (closing it releases the lock)
_HELD: dict[str, int] = {}

#: the published Result (JSON) beside the parts; the leading underscore keeps Parquet readers
#: (pyarrow's dataset discovery, dask's read_parquet) from taking it for data
RESULT_FILE = "_gpframe_result.json"


def check_target(to: Any) -> Path:
    """Validate ``to=`` before anything is reserved: a new path in an existing directory."""
    try:
        target = Path(os.fspath(to)).absolute()
    except TypeError:
        raise InvalidInputError(
            f"to={to!r} is not a path. Pass the directory to write the Parquet output to, "
            "e.g. to='out/privatized'. Nothing was charged."
        ) from None
    if target.exists():
        raise InvalidInputError(
            f"to={str(target)!r} exists already: gpframe publishes a new directory in one "
            "rename and never overwrites. Choose a new path or remove it. Nothing was charged."
        )
    if not target.parent.is_dir():
        raise InvalidInputError(
            f"to={str(target)!r}: the directory {str(target.parent)!r} does not exist. "
            "Create it first. Nothing was charged."
        )
    clean_staging(target, stacklevel=6)  # what dead clients left for this destination
    return target


def staging_dir(target: Path, query_id: str) -> Path:
    """Create the staging directory of one query (next to the target, same filesystem).

    The calling process takes the directory's owner lock and keeps it until :func:`publish` or
    :func:`discard`: while it lives, no cleaner removes the directory.
    """
    path = target.with_name(f"{target.name}.staging-{query_id}")
    path.mkdir()
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _HELD[str(path)] = fd
    return path


def _release(path: Path) -> None:
    """Close this process's owner lock of ``path`` (if it holds one)."""
    fd = _HELD.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def _orphaned(path: Path) -> int | None:
    """Take the owner lock of a staging directory if its owner is gone; return the fd or None."""
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDWR)
    except OSError:  # no lock file: not ours to judge (an older version, or being created)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # its client still holds it: alive
        os.close(fd)
        return None
    return fd


def clean_staging(target: Any, *, publish: bool = False, stacklevel: int = 2) -> list[str]:
    """Remove the staging directories of ``target`` left by clients that died mid-query.

    Only directories whose owner lock can be taken (their client process is gone) are touched:
    one without the Result file was never published and is removed (its reservation is settled
    by the ledger when a Session next opens it, ``docs/ledger.md``); one with the Result file is
    a complete output whose charge was committed: it is kept and named in a warning, or, with
    ``publish=True`` and no ``target`` yet, renamed to ``target``. Called by every write to
    ``target``; also ``python -m gpframe.dask.staging clean <target> [--publish]``.

    Parameters
    ----------
    target : path
        The destination passed as ``to=``.
    publish : bool
        Rename a complete orphaned output to ``target`` instead of keeping it.
    stacklevel : int
        Where the warning points.

    Returns
    -------
    list of str
        The directories removed or published.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp()) / "out"
    >>> stale = out.with_name("out.staging-q1")
    >>> stale.mkdir(); _ = (stale / LOCK_FILE).write_text("")  # its client is gone
    >>> [Path(p).name for p in clean_staging(out)], stale.exists()
    (['out.staging-q1'], False)
    """
    target = Path(os.fspath(target)).absolute()
    done, complete = [], []
    if not target.parent.is_dir():
        return done
    import glob

    for path in sorted(target.parent.glob(f"{glob.escape(target.name)}.staging-*")):
        if not path.is_dir() or str(path) in _HELD:
            continue
        fd = _orphaned(path)
        if fd is None:
            continue
        try:
            if not (path / RESULT_FILE).exists():
                shutil.rmtree(path, ignore_errors=True)
                done.append(str(path))
            elif publish and not target.exists():
                os.remove(path / LOCK_FILE)
                os.rename(path, target)
                done.append(str(path))
            else:
                complete.append(str(path))
        finally:
            os.close(fd)
    if complete:
        warnings.warn(
            f"{complete!r}: complete outputs of queries whose charge was committed, left "
            "unpublished by a client that died before the rename. Publish one with "
            f"gpframe.dask.staging.clean_staging({str(target)!r}, publish=True), or remove it.",
            GpframeWarning,
            stacklevel=stacklevel,
        )
    return done


def part_name(i: int) -> str:
    """File name of partition ``i``."""
    return f"part.{int(i):05d}.parquet"


def write_part(frame: Any, staging: str, i: int) -> tuple[str, str]:
    """Write one partition's output into ``staging``; return (file name, SHA-256 of its bytes).

    Written under a unique temporary name, then renamed over ``part.<i>.parquet``: a worker
    killed mid-write leaves only a temporary file, which :func:`publish` removes, and a
    recomputation replaces the file of an attempt whose result the scheduler never accepted.
    """
    name = part_name(i)
    tmp = os.path.join(staging, f".{name}.{uuid.uuid4().hex}.tmp")
    frame.to_parquet(tmp)
    digest = _sha256(tmp)
    os.replace(tmp, os.path.join(staging, name))
    return name, digest


def _sha256(path: Any) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def publish(staging: Path, target: Path, files: dict[str, str], result_json: str) -> None:
    """Check the staged files, write the Result, and rename the directory to ``target``.

    ``files`` maps each file name to the SHA-256 the accepted task reported; any other entry
    (the temporary file of a killed attempt) is removed first. Called only after the charge
    is committed.
    """
    for entry in os.listdir(staging):
        if entry not in files and entry != LOCK_FILE:
            os.remove(staging / entry)
    for name, digest in files.items():
        h = _sha256(staging / name)
        if h != digest:
            raise GpframeInternalError(
                f"{staging / name} is not the file its task reported (sha256 {h} != {digest}); "
                f"the charge is committed, the output was not published (left in {staging})."
            )
    (staging / RESULT_FILE).write_text(result_json)
    os.rename(staging, target)
    # the published directory holds the parts and the Result only; the lock ends with it
    try:
        os.remove(target / LOCK_FILE)
    finally:
        _release(staging)


def discard(staging: Path | None) -> None:
    """Remove a staging directory after a failure (nothing in it was ever published)."""
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
        _release(staging)


def _main(argv: list[str] | None = None) -> int:
    """``python -m gpframe.dask.staging clean <target> [--publish]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gpframe.dask.staging",
                                 description=clean_staging.__doc__.splitlines()[0])  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("clean", help="remove the staging directories dead clients left")
    c.add_argument("target", help="the destination passed as to=")
    c.add_argument("--publish", action="store_true", help="publish a complete orphaned output")
    args = ap.parse_args(argv)
    for path in clean_staging(args.target, publish=args.publish):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
