"""Charge before release, at scale: workers write into a staging directory, the client publishes.

See ``docs/beyond-one-machine.md``. ``<target>.staging-<query_id>`` is created after the
reservation; every task writes its partition there under a temporary name and renames it to
``part.<i>.parquet`` (so a recomputed partition replaces, never mixes with, an attempt that
died). Only after the driver committed the charge does the client check each file against the
digest the accepted task reported, remove anything else, and rename the directory to
``target`` (one ``os.rename``: the output appears whole or not at all). A failure before the
charge leaves no ``target``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = ["RESULT_FILE", "check_target", "discard", "part_name", "publish", "staging_dir",
           "write_part"]  # fmt: skip

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
    return target


def staging_dir(target: Path, query_id: str) -> Path:
    """Create the staging directory of one query (next to the target, same filesystem)."""
    path = target.with_name(f"{target.name}.staging-{query_id}")
    path.mkdir()
    return path


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
        if entry not in files:
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


def discard(staging: Path | None) -> None:
    """Remove a staging directory after a failure (nothing in it was ever published)."""
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
