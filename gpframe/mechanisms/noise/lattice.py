"""Exact snapping to the lattice ``g Z^d`` and exact release (secure-noise.md §9.2).

``g`` is a power of two, so ``x / g`` is exact, ``rint`` is exact, and ``(u + k) * g`` is exact
while ``|u + k| < 2**53``: the released floats are lattice points and carry no trace of the
input's low bits.

>>> from fractions import Fraction
>>> import numpy as np
>>> u = snap(np.array([0.3, -1.26]), Fraction(1, 4), "x")
>>> u
array([ 1, -5])
>>> release(u, np.array([2, 0]), Fraction(1, 4))
array([ 0.75, -1.25])
>>> snap(np.array([np.nan]), Fraction(1, 4), "lat")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
gpframe.errors.InvalidInputError: lat has 1 NaN or infinite value(s) (first at position 0). ...
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, NoiseOverflowError

__all__ = ["check_g", "release", "snap"]

_X_LIMIT = 2.0**52
_Y_LIMIT = 1 << 53


def check_g(g: Any, name: str = "g") -> Fraction:
    """Validate a lattice step, a power of two ``2**e`` with ``|e| <= 1000``, as a Fraction."""
    try:
        fr = Fraction(g) if not isinstance(g, bool) else None
    except (TypeError, ValueError, OverflowError):
        fr = None
    ok = fr is not None and fr > 0
    if ok:
        p, q = fr.numerator, fr.denominator
        ok = (p == 1 and q & (q - 1) == 0) or (q == 1 and p & (p - 1) == 0)
        ok = ok and abs((p.bit_length() - 1) - (q.bit_length() - 1)) <= 1000
    if not ok:
        raise InvalidInputError(
            f"{name}={g!r} must be a power of two such as 2**-10 (secure-noise.md §9.1), so that "
            "snapping and release are exact. Nothing was charged."
        )
    return fr  # type: ignore[return-value]


def snap(x: Any, g: Any, name: str) -> np.ndarray:
    """Return ``rint(x / g)`` as int64, exactly (secure-noise.md §9.2).

    Raises
    ------
    InvalidInputError
        NaN or infinite values, or ``|x / g| >= 2**52``, naming ``name``; nothing is drawn.
    """
    g = check_g(g)
    arr = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad.ravel())[0])
        raise InvalidInputError(
            f"{name} has {int(bad.sum())} NaN or infinite value(s) (first at position {first}). "
            "Drop or fill them before releasing. Nothing was charged."
        )
    inv = float(1 / g)  # a power of two: the product below is exact unless it overflows
    with np.errstate(over="ignore"):
        y = arr * inv
    big = ~(np.abs(y) < _X_LIMIT)
    if big.any():
        first = int(np.flatnonzero(big.ravel())[0])
        raise InvalidInputError(
            f"{name} has {int(big.sum())} value(s) with |{name} / g| >= 2**52 (first at position "
            f"{first}, value {arr.ravel()[first]!r}, g={float(g)!r}). Use a coarser lattice step g "
            "or recentre the data. Nothing was charged."
        )
    return np.rint(y).astype(np.int64)


def release(u: Any, k: Any, g: Any) -> np.ndarray:
    """Return ``(u + k) * g`` as float64, exactly (secure-noise.md §9.2).

    Raises
    ------
    NoiseOverflowError
        When some ``|u + k| >= 2**53``, so that the released float would not be exact.
    """
    g = check_g(g)
    u = np.asarray(u, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if (np.abs(u) >= _Y_LIMIT).any() or (np.abs(k) >= (1 << 62)).any():
        raise NoiseOverflowError(
            "release: a snapped value or a noise index is too large for an exact float release "
            "(|u| >= 2**53 or |k| >= 2**62). Use a coarser lattice step g. Nothing was released."
        )
    s = u + k  # no int64 overflow: |u| < 2^53, |k| < 2^62
    if (np.abs(s) >= _Y_LIMIT).any():
        raise NoiseOverflowError(
            "release: u + k reaches 2**53 in lattice units, so (u + k) * g would not be an exact "
            "float. Use a coarser lattice step g. Nothing was released."
        )
    return s.astype(np.float64) * float(g)
