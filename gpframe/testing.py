"""Test helpers: the only home of deterministic randomness sources (``docs/noise.md``).

``seeded_rng(seed)`` is a deterministic byte stream: request ``i`` returns
``SHAKE-256(b"gpframe-seeded" || seed || i)``. ``callback_rng(fn)`` serves the bytes a test
function returns (to count draws, or to fail when anything is drawn). Release code refuses both
until :func:`enable_seeded` was called in this process; no environment variable enables them, and
a test source is recognised by its class, so setting its ``seeded`` attribute changes nothing.

>>> with seeded_enabled():
...     a = seeded_rng(7).bytes(8)
...     b = seeded_rng(7).bytes(8)
>>> a == b
True
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator

from gpframe.mechanisms.noise import bits as _bits

__all__ = [
    "callback_rng",
    "disable_seeded",
    "enable_seeded",
    "seeded_disabled",
    "seeded_enabled",
    "seeded_rng",
]


class _SeededTestSource(_bits._Derived):
    """Deterministic SHAKE-256 stream; for bit-identical replays in tests only."""

    _SEEDED = True

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

    def spawn(self, i: int) -> _SeededTestSource:
        """Return the ``i``-th child stream: deterministic, and distinct from this one.

        The Dask face (``docs/beyond-one-machine.md``) gives each partition its own child, so
        partitions drawn on different workers never repeat each other's noise.
        """
        child = _SeededTestSource(0)
        child.name = f"{self.name}/{int(i)}"
        child._prefix = self._prefix + b"/spawn/" + int(i).to_bytes(8, "little")
        return child


class _CallbackTestSource(_bits._Derived):
    """Bytes from a test's function; ``arr`` and ``int_bits`` are derived from them."""

    _SEEDED = True

    def __init__(self, fn: Callable[[int], bytes], name: str) -> None:
        self.name = str(name)
        self._fn = fn

    def bytes(self, n: int) -> bytes:
        """Return ``fn(n)``, checked to be ``n`` bytes."""
        out = bytes(self._fn(int(n)))
        if len(out) != int(n):
            raise AssertionError(f"callback_rng {self.name}: asked for {n} bytes, got {len(out)}.")
        return out

    def spawn(self, i: int) -> _CallbackTestSource:
        """Return a source serving the same function (one per partition on the Dask face)."""
        return _CallbackTestSource(self._fn, f"{self.name}/{int(i)}")


# the classes :func:`gpframe.mechanisms.noise.bits.resolve_rng` treats as test sources
_bits.register_test_sources(_SeededTestSource, _CallbackTestSource)


def seeded_rng(seed: int) -> _bits.BitSource:
    """Return a deterministic BitSource for tests (same seed, same bytes, same outputs)."""
    return _SeededTestSource(seed)


def callback_rng(fn: Callable[[int], bytes], name: str = "callback") -> _bits.BitSource:
    r"""Return a test BitSource whose ``bytes(n)`` is ``fn(n)`` (refused like a seeded source).

    For tests that count the bytes drawn, fail when any bit is drawn, or feed degenerate bytes:

    >>> with seeded_enabled():
    ...     src = callback_rng(lambda n: b"\x01" * n, name="ones")
    ...     src.int_bits(16)
    257
    """
    return _CallbackTestSource(fn, name)


def enable_seeded() -> None:
    """Let release code accept test sources in this process (tests and replays only)."""
    _bits._set_seeded(True)


def disable_seeded() -> None:
    """Undo :func:`enable_seeded`: test sources are refused again."""
    _bits._set_seeded(False)


@contextlib.contextmanager
def seeded_enabled() -> Iterator[None]:
    """Context manager: test sources are accepted inside the block."""
    before = _bits._SEEDED_ENABLED
    _bits._set_seeded(True)
    try:
        yield
    finally:
        _bits._set_seeded(before)


@contextlib.contextmanager
def seeded_disabled() -> Iterator[None]:
    """Context manager: test sources are refused inside the block (as outside tests)."""
    before = _bits._SEEDED_ENABLED
    _bits._set_seeded(False)
    try:
        yield
    finally:
        _bits._set_seeded(before)
