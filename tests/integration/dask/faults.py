"""Test-only bit sources for the fault tests, importable by the worker processes.

Each serves ``os.urandom`` bytes through ``gpframe.testing.callback_rng`` (refused unless the
worker enabled test sources), slowly or not at all, so a test can kill a worker or the client
while a partition is drawing, or make a worker raise after the reservation.
"""

from __future__ import annotations

import os
import time


def slow_bytes(n: int) -> bytes:
    """Bytes from the OS CSPRNG, 1.5 s late: the draw is still running when the test strikes."""
    time.sleep(1.5)
    return os.urandom(n)


def failing_bytes(n: int) -> bytes:
    """A worker that raises while drawing."""
    raise RuntimeError("injected worker failure while drawing noise")
