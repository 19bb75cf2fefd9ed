"""Test helpers: the only home of a seeded randomness source (secure-noise.md §3.1, R1).

``seeded_rng(seed)`` is a deterministic byte stream: request ``i`` returns
``SHAKE-256(b"gpframe-seeded" || seed || i)``. Release code refuses it unless env
``GPFRAME_TESTING=1`` is set or :func:`enable_seeded` was called.

>>> with seeded_enabled():
...     a = seeded_rng(7).bytes(8)
...     b = seeded_rng(7).bytes(8)
>>> a == b
True
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

from gpframe.mechanisms.noise import bits as _bits

__all__ = ["disable_seeded", "enable_seeded", "seeded_enabled", "seeded_rng"]


class _SeededTestSource(_bits._Derived):
    """Deterministic SHAKE-256 stream; for bit-identical replays in tests only."""

    seeded = True

    def __init__(self, seed: int) -> None:
        seed = int(seed)
        self.name = f"seeded-test({seed})"
        self._prefix = b"gpframe-seeded" + seed.to_bytes(32, "little", signed=True)
        self._counter = 0

    def bytes(self, n: int) -> bytes:
        """Return the next ``n`` bytes of the stream."""
        n = int(n)
        if n == 0:
            return b""
        h = hashlib.shake_256(self._prefix + self._counter.to_bytes(8, "little"))
        self._counter += 1
        return h.digest(n)


def seeded_rng(seed: int) -> _bits.BitSource:
    """Return a deterministic BitSource for tests (same seed, same bytes, same outputs)."""
    return _SeededTestSource(seed)


def enable_seeded() -> None:
    """Let release code accept seeded sources (tests and replays only)."""
    _bits._set_seeded(True)


def disable_seeded() -> None:
    """Undo :func:`enable_seeded` (env ``GPFRAME_TESTING=1`` still enables seeded sources)."""
    _bits._set_seeded(False)


@contextlib.contextmanager
def seeded_enabled() -> Iterator[None]:
    """Context manager: seeded sources are accepted inside the block."""
    before = _bits._SEEDED_ENABLED
    _bits._set_seeded(True)
    try:
        yield
    finally:
        _bits._set_seeded(before)
