"""Where every random bit comes from (``docs/noise.md``).

The default source is the operating system's CSPRNG (``os.urandom``, Linux ``getrandom(2)``). An
optional AES-256-CTR keystream (``AesCtrRandom``) keys itself afresh from ``os.urandom`` on every
request, so no key outlives a request. A seeded, deterministic source exists only in
:mod:`gpframe.testing`; :func:`resolve_rng` refuses it unless a test called
``gpframe.testing.enable_seeded()``. No environment variable enables it.

:func:`resolve_rng` is the one gate every ``rng`` argument passes: it accepts instances of the
library's own source classes only, recognised by exact class (not by attributes, so look-alike
objects and subclasses defined elsewhere are refused), and a test source only while enabled,
whatever its ``seeded`` attribute says.

Samplers never cache bytes across calls: every call draws what it needs, in an order fixed by
the call's arguments and the bits themselves.

>>> src = resolve_rng(None)
>>> src.name, src.seeded
('os.urandom', False)
>>> len(src.bytes(5)), src.arr(3, "uint16").dtype
(5, dtype('uint16'))
>>> 0 <= src.int_bits(64) < 2**64
True
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gpframe.errors import InsecureRandomnessError, InvalidInputError

__all__ = [
    "AesCtrRandom",
    "BitSource",
    "OsRandom",
    "broken_source",
    "resolve_rng",
    "seeded_allowed",
]


@runtime_checkable
class BitSource(Protocol):
    """A source of uniform random bytes (``docs/noise.md``)."""

    name: str
    seeded: bool

    def bytes(self, n: int) -> bytes:
        """Return ``n`` uniform random bytes."""
        ...

    def arr(self, n: int, dtype: Any) -> np.ndarray:
        """Return ``n`` uniform words of ``dtype`` (``np.frombuffer(bytes(n * itemsize))``)."""
        ...

    def int_bits(self, k: int) -> int:
        """Return ``k`` uniform bits (``k % 8 == 0``) as a Python int."""
        ...


class _Derived:
    """``arr`` and ``int_bits`` derived from ``bytes`` (shared by every concrete source)."""

    name: str = "abstract"
    #: Informational only: :func:`resolve_rng` decides by class, never by this flag.
    _SEEDED: bool = False

    @property
    def seeded(self) -> bool:
        """Whether this is a deterministic test source (read-only: fixed by the class)."""
        return type(self)._SEEDED

    def bytes(self, n: int) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    def arr(self, n: int, dtype: Any) -> np.ndarray:
        """Return ``n`` uniform words of ``dtype``, read-only view of fresh bytes."""
        dt = np.dtype(dtype)
        return np.frombuffer(self.bytes(int(n) * dt.itemsize), dtype=dt)

    def int_bits(self, k: int) -> int:
        """Return ``k`` uniform bits as a Python int; ``k`` must be a multiple of 8."""
        if k % 8:
            raise InvalidInputError(f"int_bits(k={k}): k must be a multiple of 8.")
        return int.from_bytes(self.bytes(k // 8), "little")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class OsRandom(_Derived):
    """The default source: ``os.urandom`` (kernel CSPRNG, no user-space state, fork-safe)."""

    name = "os.urandom"

    def bytes(self, n: int) -> bytes:
        """Return ``n`` bytes from ``os.urandom``; an ``OSError`` propagates before any release."""
        return os.urandom(int(n))


class AesCtrRandom(_Derived):
    """AES-256-CTR keystream with a fresh ``os.urandom`` key and counter block per request.

    Opt-in fast backend (extra ``gpframe[fast]``, ``docs/noise.md``): each ``bytes(n)`` call
    draws a new 32-byte key and 16-byte initial counter from ``os.urandom`` and returns the first
    ``n`` keystream bytes, so a request's key never outlives the request.
    """

    name = "aes-256-ctr"

    def __init__(self) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers import (
                Cipher,
                algorithms,
                modes,
            )
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidInputError(
                "rng=AesCtrRandom() needs the 'cryptography' package: pip install 'gpframe[fast]', "
                "or pass rng=None for the OS source."
            ) from exc
        self._cipher = Cipher
        self._aes = algorithms.AES
        self._ctr = modes.CTR

    def bytes(self, n: int) -> bytes:
        """Return ``n`` keystream bytes under a key used for this request only."""
        n = int(n)
        if n == 0:
            return b""
        enc = self._cipher(self._aes(os.urandom(32)), self._ctr(os.urandom(16))).encryptor()
        return enc.update(bytes(n)) + enc.finalize()


_DEFAULT = OsRandom()
_SEEDED_ENABLED = False
#: The shipped secure sources, accepted by exact class (a subclass may override ``bytes``).
_SECURE = (OsRandom, AesCtrRandom)
#: The test sources of :mod:`gpframe.testing` (registered when it is imported).
_TEST_CLASSES: tuple[type, ...] = ()
_METHODS = ("bytes", "arr", "int_bits")


def _set_seeded(flag: bool) -> None:
    """Enable or disable seeded sources; called only by :mod:`gpframe.testing`."""
    global _SEEDED_ENABLED
    _SEEDED_ENABLED = bool(flag)


def seeded_allowed() -> bool:
    """Whether test sources are accepted (only after ``gpframe.testing.enable_seeded()``)."""
    return _SEEDED_ENABLED


def register_test_sources(*classes: type) -> None:
    """Accept ``classes`` as test sources (still refused until seeded sources are enabled).

    Called by :mod:`gpframe.testing` when it is imported, so this module never imports the
    test module (a test source cannot exist before it was imported). Only classes defined in
    :mod:`gpframe.testing` are accepted.
    """
    global _TEST_CLASSES
    for cls in classes:
        if not isinstance(cls, type) or cls.__module__ != "gpframe.testing":
            raise InvalidInputError(f"{cls!r} is not a test source class of gpframe.testing.")
    _TEST_CLASSES = tuple(dict.fromkeys((*_TEST_CLASSES, *classes)))


def _foreign(rng: Any) -> InvalidInputError:
    return InvalidInputError(
        f"rng={type(rng).__name__} is not a gpframe BitSource. Pass rng=None "
        "(the OS CSPRNG) or gpframe.mechanisms.noise.AesCtrRandom(). Other objects are refused, "
        "whatever their attributes say, and so are subclasses and look-alikes of gpframe's "
        "sources; numpy and `random` generators are not cryptographically secure. "
        "Nothing was charged."
    )


def resolve_rng(rng: Any = None) -> BitSource:
    """Return the source to draw from: ``None`` gives the process-wide ``os.urandom`` source.

    Parameters
    ----------
    rng : BitSource or None
        ``None`` (the secure default), ``OsRandom()``, ``AesCtrRandom()`` or, in tests only,
        ``gpframe.testing.seeded_rng(seed)``.

    Raises
    ------
    InsecureRandomnessError
        A test source while test sources are not enabled, or a gpframe source whose methods
        were replaced on the instance.
    InvalidInputError
        Anything whose class is not one of gpframe's sources: a numpy ``Generator``, an object
        with the right attributes, a subclass of ``OsRandom`` defined elsewhere.
    """
    if rng is None:
        return _DEFAULT
    cls = type(rng)
    if cls in _SECURE:
        pass
    elif cls in _TEST_CLASSES:
        if not _SEEDED_ENABLED:
            raise InsecureRandomnessError(
                f"rng={rng!r} is a seeded test source, refused outside tests: its outputs are "
                "predictable. Pass rng=None for the OS CSPRNG (tests call "
                "gpframe.testing.enable_seeded() first). Nothing was charged."
            )
    else:
        raise _foreign(rng)
    shadowed = [m for m in _METHODS if m in getattr(rng, "__dict__", {})]
    if shadowed:
        raise InsecureRandomnessError(
            f"rng={rng!r} has its {', '.join(shadowed)} replaced on the instance, so its bytes "
            "no longer come from the source. Pass a fresh source or rng=None. Nothing was charged."
        )
    return rng


def broken_source(what: str, bound: str) -> InsecureRandomnessError:
    """Return the error a sampler raises when its bits cannot come from a working source.

    Every loop that draws until the bits decide something (a rejection sampler, a lazily refined
    uniform) is bounded: a stuck source (constant bytes, a patched ``bytes``) would otherwise
    hang it. The bound is set so that a working source reaches it with probability below
    ``bound``, stated at each loop.
    """
    return InsecureRandomnessError(
        f"the randomness source looks broken: {what} (a working source does this with probability "
        f"below {bound}). Its bytes may be constant or patched; pass rng=None for the OS CSPRNG. "
        "Nothing was released."
    )
