"""Where every random bit comes from (secure-noise.md §3).

The default source is the operating system's CSPRNG (``os.urandom``, Linux ``getrandom(2)``). An
optional AES-256-CTR keystream (``AesCtrRandom``) keys itself afresh from ``os.urandom`` on every
request, so no key outlives a request. A seeded, deterministic source exists only in
:mod:`gpframe.testing`; :func:`resolve_rng` refuses it unless tests enabled it.

Samplers never cache bytes across calls (R7): every call draws what it needs, in an order fixed by
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

__all__ = ["AesCtrRandom", "BitSource", "OsRandom", "resolve_rng", "seeded_allowed"]


@runtime_checkable
class BitSource(Protocol):
    """A source of uniform random bytes (secure-noise.md §3.2)."""

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
    seeded: bool = False

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
    seeded = False

    def bytes(self, n: int) -> bytes:
        """Return ``n`` bytes from ``os.urandom``; an ``OSError`` propagates before any release."""
        return os.urandom(int(n))


class AesCtrRandom(_Derived):
    """AES-256-CTR keystream with a fresh ``os.urandom`` key and counter block per request.

    Opt-in fast backend (extra ``gpframe[fast]``, secure-noise.md §3.1): each ``bytes(n)`` call
    draws a new 32-byte key and 16-byte initial counter from ``os.urandom`` and returns the first
    ``n`` keystream bytes, so a request's key never outlives the request.
    """

    name = "aes-256-ctr"
    seeded = False

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


def _set_seeded(flag: bool) -> None:
    """Enable or disable seeded sources; called only by :mod:`gpframe.testing`."""
    global _SEEDED_ENABLED
    _SEEDED_ENABLED = bool(flag)


def seeded_allowed() -> bool:
    """Whether seeded (test) sources are accepted (``GPFRAME_TESTING=1`` or ``enable_seeded()``)."""
    return _SEEDED_ENABLED or os.environ.get("GPFRAME_TESTING", "") == "1"


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
        A seeded source while seeded sources are not enabled.
    InvalidInputError
        Anything that is not a BitSource, such as a numpy ``Generator``.
    """
    if rng is None:
        return _DEFAULT
    if type(rng) is OsRandom or type(rng) is AesCtrRandom:  # the shipped secure sources
        return rng
    ok = all(hasattr(rng, a) for a in ("name", "seeded", "bytes", "arr", "int_bits"))
    if not ok:
        raise InvalidInputError(
            f"rng={type(rng).__name__} is not a gpframe BitSource. Pass rng=None (the OS CSPRNG) "
            "or gpframe.mechanisms.noise.AesCtrRandom(); numpy and `random` generators are not "
            "cryptographically secure and are refused. Nothing was charged."
        )
    if rng.seeded and not seeded_allowed():
        raise InsecureRandomnessError(
            f"rng={rng!r} is a seeded test source, refused outside tests: its outputs are "
            "predictable. Pass rng=None for the OS CSPRNG (or call gpframe.testing.enable_seeded() "
            "in a test). Nothing was charged."
        )
    return rng
