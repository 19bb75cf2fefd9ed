"""Test-only bit sources for the fault tests, importable by the worker processes.

Each serves ``os.urandom`` bytes through ``gpframe.testing.callback_rng`` (refused unless the
worker enabled test sources), slowly or not at all, so a test can kill a worker or the client
while a partition is drawing, or make a worker raise after the reservation.
"""

from __future__ import annotations

import logging
import os
import time

from distributed import WorkerPlugin

import gpframe.testing


def quiet() -> None:
    """Silence the p2p shuffle's start/stop messages (logged at WARNING for every shuffle)."""
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)


class EnableSeeded(WorkerPlugin):
    """Enable test sources in every worker process, including one restarted after a kill."""

    name = "gpframe-enable-seeded"

    def setup(self, worker) -> None:
        gpframe.testing.enable_seeded()
        quiet()


def slow_bytes(n: int) -> bytes:
    """Bytes from the OS CSPRNG, 1.5 s late: the draw is still running when the test strikes."""
    time.sleep(1.5)
    return os.urandom(n)


def slow_part(frame):
    """A partition read in 1.5 s: the first pass is still running when the test strikes."""
    time.sleep(1.5)
    return frame


def failing_bytes(n: int) -> bytes:
    """A worker that raises while drawing."""
    raise RuntimeError("injected worker failure while drawing noise")
