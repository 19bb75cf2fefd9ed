"""Benchmark: the first call of kde_raster / range_count on users the ledger has never seen.

For each size n (one point per user; 10^6 by default) and each operation (``--ops``), in the
same run, on the same points, interleaved over ``--repeat`` rounds (best of):

* ``baseline``: the non-private work of ``user_path.py`` (histogram2d + fftconvolve for
  ``kde_raster``; signed distances + ``shapely.contains_xy`` for ``range_count``);
* ``first, memory``: the accessor call on a fresh in-memory Session: every user is created
  by this call (the previous round's Session is closed before the timer starts, so its
  teardown is not counted);
* ``first, file``: the same on a fresh SQLite file ledger (WAL, ``synchronous=FULL``, a
  checkpoint after every write: what ``Session(path)`` does), in a temporary directory
  (``--dir``, default: the system's).

Each line gives the time, its ratio to the baseline (goal of the issue: <= 3x for the memory
ledger) and the ledger's share of the call: the time spent in ``Ledger.reserve`` (users
created, reservation stored, audit row) and in ``Ledger._commit`` (spent chunks, charge row,
audit row, durable before the call returns), also as a multiple of the baseline.

Run: ``PYTHONPATH=. python benchmarks/speed/first_seen.py [--sizes 1000000 10000000]
[--ops kde_raster range_count] [--repeat 2] [--cpu] [--no-file]``. Smallest run:
``--sizes 10000 --repeat 1``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import user_path as up

from gpframe.ledger import Session
from gpframe.ledger import session as _session

CLOCK = time.perf_counter
IN_LEDGER = [0.0]  # seconds inside Ledger.reserve / Ledger._commit during the timed call


def _timed_ledger(name: str) -> None:
    """Wrap ``Ledger.<name>`` so that its time is added to ``IN_LEDGER``."""
    inner = getattr(_session.Ledger, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = CLOCK()
        try:
            return inner(*args, **kwargs)
        finally:
            IN_LEDGER[0] += CLOCK() - t

    setattr(_session.Ledger, name, wrapper)


def paths(op: str, n: int, where: str) -> dict[str, Callable[[], Any]]:
    """The baseline and the first calls (memory, file) of one operation on n points."""
    xy = up.points(n, op)
    df = pd.DataFrame({"u": range(n), "x": xy[:, 0] + up.X0, "y": xy[:, 1] + up.Y0})
    base, _, accessor = up.OPS[op]
    held: dict[str, Session] = {}

    def first(path: str | None) -> Callable[[], Any]:
        def call() -> Any:
            return accessor(df, held["s"])

        def setup() -> None:  # outside the timer: drop the last round's ledger, open anew
            old = held.pop("s", None)
            if old is not None:
                old.close()
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
                os.makedirs(path)
            gc.collect()
            held["s"] = Session(
                None if path is None else os.path.join(path, "ledger.sqlite"), budget=up.BUDGET
            )

        call.setup = setup  # type: ignore[attr-defined]
        return call

    out = {"baseline": lambda: base(xy), "first, memory": first(None)}
    if where:
        out["first, file"] = first(os.path.join(where, f"{op}-{n}"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**6])
    ap.add_argument("--ops", nargs="+", default=["kde_raster"],
                    choices=["kde_raster", "range_count"])  # fmt: skip
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds (best of)")
    ap.add_argument("--cpu", action="store_true", help="time process CPU, not wall clock")
    ap.add_argument("--no-file", action="store_true", help="skip the file ledger")
    ap.add_argument("--dir", default=None, help="where the file ledgers go")
    a = ap.parse_args()
    global CLOCK
    if a.cpu:
        CLOCK = time.process_time
    _timed_ledger("reserve")
    _timed_ledger("_commit")
    tmp = None if a.no_file else tempfile.mkdtemp(prefix="gp-first-seen-", dir=a.dir)
    try:
        for op in a.ops:  # warm-up: imports, pyproj transformers, FFT plans
            for fn in paths(op, 1000, tmp or "").values():
                getattr(fn, "setup", lambda: None)()
                fn()
        for n in a.sizes:
            run = {op: paths(op, n, tmp or "") for op in a.ops}
            best = {(op, p): (math.inf, 0.0) for op in a.ops for p in run[op]}
            for _ in range(a.repeat):
                for op in a.ops:
                    for p, fn in run[op].items():
                        getattr(fn, "setup", lambda: None)()
                        IN_LEDGER[0] = 0.0
                        t = CLOCK()
                        fn()
                        t = CLOCK() - t
                        if t < best[op, p][0]:
                            best[op, p] = (t, IN_LEDGER[0])
            load = os.getloadavg()[0]
            for op in a.ops:
                t0 = best[op, "baseline"][0]
                for p in run[op]:
                    t, led = best[op, p]
                    line = f"n={n:<9d} {op:<12} {p:<14} {t:8.3f} s {t / t0:6.2f}x baseline"
                    if p != "baseline":
                        line += (f"  ledger {led:6.3f} s ({100 * led / t:4.1f}% of the call, "
                                 f"{led / t0:4.2f}x baseline)")  # fmt: skip
                        if p == "first, memory":
                            line += f"  goal <= 3x: {'OK' if t / t0 <= 3 else 'SLOW'}"
                    print(f"{line}  [load {load:.2f}]", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
