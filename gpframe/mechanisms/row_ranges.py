"""One release of many points drawn in row ranges on several threads (OS CSPRNG only).

A point's lattice noise does not depend on the other points of its release call: the
samplers draw every row independently, and the guarantee of a call is that of each of its
points. So a call over N points and k calls over k row ranges of them release the same
distribution with the same guarantee, and the k calls can run at once: the samplers'
compiled kernels release the GIL. Only the OS CSPRNG is split this way; a seeded test source
keeps a counter that serves one thread, and its stream is pinned by tests, so it always
draws in one call (``docs/noise.md``, "Noise on several cores").

The same ranges serve the pandas face's deterministic array steps whose values do not depend
on the split (:func:`cores_for`, :func:`run_in_ranges`): PROJ projections and GEOS point
building in :mod:`gpframe.geo`. :data:`THREADS` caps them all.

>>> import numpy as np
>>> from fractions import Fraction
>>> from gpframe.mechanisms import gaussian_cgp
>>> pts = np.zeros((200_000, 2))
>>> rel = release_in_ranges(lambda p: gaussian_cgp(p, rho=Fraction(1, 100)), pts, 2)
>>> rel.values.shape, rel.guarantee.amount <= Fraction(1, 100)
((200000, 2), True)
"""

from __future__ import annotations

import contextvars
import itertools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from gpframe.errors import GpframeInternalError
from gpframe.mechanisms.released import Released

T = TypeVar("T")

__all__ = [
    "MIN_ROWS",
    "RANGES_PER_THREAD",
    "THREADS",
    "cores_for",
    "release_in_ranges",
    "run_in_ranges",
    "threads_for",
]

#: the fewest rows a thread draws for: below, one call is faster than a thread's start
MIN_ROWS = 65_536

#: the threads the pandas face's large draws, projections and point building use; None: the
#: machine's cores
THREADS: int | None = None

#: row ranges per thread (each of at least MIN_ROWS rows): bounds the memory held at once
RANGES_PER_THREAD = 4


def cores_for(rows: int, threads: int | None = None) -> int:
    """Return how many row ranges to run a deterministic array step over ``rows`` rows in.

    At most ``threads`` (None: :data:`THREADS`, else the machine's cores), and every range gets
    at least :data:`MIN_ROWS` rows. For steps whose result does not depend on the split
    (projections, building points); noise goes through :func:`threads_for`.

    >>> cores_for(10**6, 2), cores_for(100_000, 2), cores_for(10**6, 1)
    (2, 1, 1)
    """
    want = threads if threads is not None else THREADS if THREADS is not None else os.cpu_count()
    return max(1, min(int(want or 1), rows // MIN_ROWS))


def threads_for(rng: Any, rows: int, threads: int | None = None) -> int:
    """Return how many row ranges to draw ``rows`` points in.

    1 unless the source is the OS CSPRNG and every range gets at least :data:`MIN_ROWS` rows;
    ``threads``: at most this many (None: :data:`THREADS`, else the machine's cores).

    >>> threads_for(None, 10**6, 2), threads_for(None, 100_000, 2)
    (2, 1)
    """
    from gpframe.mechanisms.noise.bits import resolve_rng

    if getattr(resolve_rng(rng), "seeded", False):
        return 1
    return cores_for(rows, threads)


def run_in_ranges(
    work: Callable[[int, int], T], rows: int, workers: int, name: str = "gp-rows"
) -> list[T]:
    """Return ``[work(lo, hi), ...]`` over row ranges covering ``range(rows)``, on threads.

    ``workers`` threads named ``name``, at most :data:`RANGES_PER_THREAD` ranges a thread,
    each of at least :data:`MIN_ROWS` rows (one range, in the caller's thread, when
    ``workers`` ≤ 1). Each range runs in a copy of the caller's context, so context-local
    settings hold in the threads too. The results come back in row order; the first exception
    raised is re-raised.

    >>> run_in_ranges(lambda lo, hi: hi - lo, 200_000, 2)
    [66666, 66667, 66667]
    """
    if workers <= 1 or rows < 2:
        return [work(0, rows)]
    from concurrent.futures import ThreadPoolExecutor

    # RANGES_PER_THREAD ranges a thread, of at least MIN_ROWS rows: the temporaries held at
    # once are those of ``workers`` small ranges, not of two halves
    ranges = max(workers, min(workers * RANGES_PER_THREAD, rows // MIN_ROWS))
    cuts = np.linspace(0, rows, min(ranges, rows) + 1).astype(np.int64).tolist()
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        futures = [
            pool.submit(contextvars.copy_context().run, work, lo, hi)
            for lo, hi in itertools.pairwise(cuts)
        ]
        return [f.result() for f in futures]


def release_in_ranges(
    sample: Callable[[np.ndarray], Released], pts: np.ndarray, workers: int
) -> Released:
    """Return ``sample(pts)``, drawn as calls on row ranges of ``pts`` on ``workers`` threads.

    ``sample`` must draw from the OS CSPRNG (see :func:`threads_for`). Every range must come
    back with the same lattice step, noise parameters and guarantee (the release's), else
    :class:`~gpframe.errors.GpframeInternalError` and nothing is returned. Each range runs in
    a copy of the caller's context, so context-local settings (the samplers' silenced scale
    warnings) hold in the threads too. The values are written into one output by the threads.
    """
    n = len(pts)
    if workers <= 1 or n < 2:
        return sample(pts)
    out = np.empty(np.shape(pts), dtype=np.float64)

    def draw(lo: int, hi: int) -> tuple[Any, Any, Any]:
        got = sample(pts[lo:hi])
        out[lo:hi] = got.values
        return got.g, got.noise, got.guarantee  # the range's values are freed here

    parts = run_in_ranges(draw, n, workers, name="gp-noise")
    if any(p != parts[0] for p in parts[1:]):
        raise GpframeInternalError(
            "the row ranges of one release came back with different noise parameters or "
            "guarantees; nothing of the release is returned."
        )
    g, noise, guarantee = parts[0]
    return Released(values=out, g=g, noise=noise, guarantee=guarantee)
