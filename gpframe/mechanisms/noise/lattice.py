"""Exact snapping to the lattice ``g Z^d`` and exact release (``docs/noise.md``).

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
from functools import lru_cache
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, NoiseOverflowError

__all__ = ["check_g", "release", "snap"]

_X_LIMIT = 2.0**52
_Y_LIMIT = 1 << 53
_K_LIMIT = 1 << 62


@lru_cache(maxsize=256)
def _g_floats(num: int, den: int) -> tuple[float, float]:
    # (g, 1/g) as floats: exact, both are powers of two within the float range.
    return num / den, den / num


def _g_key(g: Any) -> tuple[int, int] | None:
    """``(num, den)`` of a Fraction or int that is a valid lattice step, else None (slow path)."""
    t = type(g)
    if t is Fraction:
        p, q = g.numerator, g.denominator
    elif t is int:
        p, q = g, 1
    else:
        return None
    if p > 0 and ((p == 1 and q & (q - 1) == 0) or (q == 1 and p & (p - 1) == 0)):
        if abs((p.bit_length() - 1) - (q.bit_length() - 1)) <= 1000:
            return p, q
    return None


def check_g(g: Any, name: str = "g") -> Fraction:
    """Validate a lattice step, a power of two ``2**e`` with ``|e| <= 1000``, as a Fraction."""
    if type(g) is Fraction and _g_key(g) is not None:
        return g
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
            f"{name}={g!r} must be a power of two such as 2**-10 (docs/noise.md), so that "
            "snapping and release are exact. Nothing was charged."
        )
    return fr  # type: ignore[return-value]


def snap(x: Any, g: Any, name: str) -> np.ndarray:
    """Return ``rint(x / g)`` as int64, exactly (``docs/noise.md``).

    Raises
    ------
    InvalidInputError
        NaN or infinite values, or ``|x / g| >= 2**52``, naming ``name``; nothing is drawn.
    """
    key = _g_key(g)
    if key is None:
        gg = check_g(g)
        key = (gg.numerator, gg.denominator)
    inv = _g_floats(*key)[1]  # a power of two: the product below is exact unless it overflows
    arr = np.asarray(x, dtype=np.float64)
    if arr.size > _BLOCK:
        out = _snap_blocks(arr, inv)
        if out is not None:
            return out
    # small inputs, and the refusals of large ones (the same messages), in one pass
    with np.errstate(over="ignore", invalid="ignore"):
        y = arr * inv
    # One test covers NaN, infinities and the range: |y| < 2^52 is False for all of them.
    if not (np.abs(y) < _X_LIMIT).all():
        bad = ~np.isfinite(arr)
        if bad.any():
            first = int(np.flatnonzero(bad.ravel())[0])
            raise InvalidInputError(
                f"{name} has {int(bad.sum())} NaN or infinite value(s) (first at position "
                f"{first}). Drop or fill them before releasing. Nothing was charged."
            )
        big = ~(np.abs(y) < _X_LIMIT)
        first = int(np.flatnonzero(big.ravel())[0])
        gf = _g_floats(*key)[0]
        raise InvalidInputError(
            f"{name} has {int(big.sum())} value(s) with |{name} / g| >= 2**52 (first at position "
            f"{first}, value {arr.ravel()[first]!r}, g={gf!r}). Use a coarser lattice step g "
            "or recentre the data. Nothing was charged."
        )
    np.rint(y, out=y)
    return y.astype(np.int64)


#: elements per block of the large-array paths: the temporaries stay in the CPU cache (at 10**7
#: points whole-array temporaries made snap and release memory-bound, 25 times their 10**6 cost)
_BLOCK = 1 << 15


def _snap_blocks(arr: np.ndarray, inv: float) -> np.ndarray | None:
    """``rint(arr * inv)`` as int64 block by block, or None if some value must be refused.

    The same float operations on every element as the one-pass path, so the same integers.
    A C-contiguous array is read as one column of rows (a view, no copy).
    """
    if arr.ndim == 2 and not arr.flags.c_contiguous:
        return _snap_rows(arr, inv)
    out = _snap_rows(arr.reshape(-1, 1), inv)
    return None if out is None else out.reshape(arr.shape)


def _snap_rows(arr: np.ndarray, inv: float) -> np.ndarray | None:
    """:func:`_snap_blocks` of an (n, d) array of any strides, by blocks of rows.

    Projected points come as an (n, 2) view of their x and y columns (:mod:`gpframe.geo`):
    ``reshape(-1)`` would copy them first. The same operations on the same elements.
    """
    n, d = arr.shape
    rows = max(1, _BLOCK // max(d, 1))
    out = np.empty((n, d), dtype=np.int64)
    y = np.empty((rows, d), dtype=np.float64)
    a = np.empty((rows, d), dtype=np.float64)
    ok = np.empty((rows, d), dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, n, rows):
            blk = arr[i : i + rows]
            m = blk.shape[0]
            yb, ab, okb = y[:m], a[:m], ok[:m]
            np.multiply(blk, inv, out=yb)
            np.abs(yb, out=ab)
            if not np.less(ab, _X_LIMIT, out=okb).all():  # NaN, infinite or out of range
                return None
            np.rint(yb, out=yb)
            out[i : i + m] = yb  # integral floats below 2**52: the int64 cast is exact
    return out


def _release_blocks(
    u: np.ndarray, k: np.ndarray, gf: float, into: np.ndarray | None = None,
    check_only: bool = False,
) -> np.ndarray | None:  # fmt: skip
    """``(u + k) * gf`` block by block, or None if some block fails a range check.

    A failure sends the caller to the one-pass checks, which raise their own error.
    ``into``: a float64 array of u's size to write into (u's own buffer: each block of u is
    read before its floats are written there); ``check_only``: run the checks, write nothing
    (returns u when they pass).
    """
    fu, fk = u.reshape(-1), k.reshape(-1)
    out = None if check_only else (
        np.empty(fu.size, dtype=np.float64) if into is None else into.reshape(-1))  # fmt: skip
    s = np.empty(_BLOCK, dtype=np.int64)
    for i in range(0, fu.size, _BLOCK):
        ub, kb = fu[i : i + _BLOCK], fk[i : i + _BLOCK]
        m = ub.size
        if not (-_Y_LIMIT < int(ub.min()) and int(ub.max()) < _Y_LIMIT):
            return None
        if not (-_K_LIMIT < int(kb.min()) and int(kb.max()) < _K_LIMIT):
            return None
        sb = np.add(ub, kb, out=s[:m])  # no int64 overflow: |u| < 2^53, |k| < 2^62
        if not (-_Y_LIMIT < int(sb.min()) and int(sb.max()) < _Y_LIMIT):
            return None
        if out is None:
            continue
        ob = out[i : i + m]
        ob[...] = sb
        ob *= gf  # exact: |u + k| < 2^53 and g a power of two
    return u if out is None else out.reshape(u.shape)


def release(u: Any, k: Any, g: Any, *, reuse_u: bool = False) -> np.ndarray:
    """Return ``(u + k) * g`` as float64, exactly (``docs/noise.md``).

    ``reuse_u=True`` (a caller that discards ``u``, the snapped int64 array it owns): large
    inputs are released into ``u``'s own buffer, viewed as float64 (8 bytes per value less
    at the peak), once every block has passed the range checks; the same floats, the same
    errors. ``u`` then holds the floats' bits, not the snapped integers.

    Raises
    ------
    NoiseOverflowError
        When some ``|u + k| >= 2**53``, so that the released float would not be exact.
    """
    key = _g_key(g)
    if key is None:
        gg = check_g(g)
        key = (gg.numerator, gg.denominator)
    gf = _g_floats(*key)[0]
    u = np.asarray(u, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if u.size > _BLOCK and u.shape == k.shape:
        if (reuse_u and u.flags.c_contiguous and u.flags.writeable
                and _release_blocks(u, k, gf, check_only=True) is not None):  # fmt: skip
            # every block passed: none can fail now, so u is overwritten only on success
            y = _release_blocks(u, k, gf, into=u.view(np.float64))
        else:
            y = _release_blocks(u, k, gf)
        if y is not None:
            return y
    # small inputs, broadcasting, and the refusals of large ones (the same errors), in one pass
    # Range checks by reductions (no full-size temporaries): |u| < 2^53, |k| < 2^62.
    if u.size and not (-_Y_LIMIT < int(u.min()) and int(u.max()) < _Y_LIMIT):
        _release_overflow()
    if k.size and not (-_K_LIMIT < int(k.min()) and int(k.max()) < _K_LIMIT):
        _release_overflow()
    s = u + k  # no int64 overflow: |u| < 2^53, |k| < 2^62
    if s.size and not (-_Y_LIMIT < int(s.min()) and int(s.max()) < _Y_LIMIT):
        raise NoiseOverflowError(
            "release: u + k reaches 2**53 in lattice units, so (u + k) * g would not be an exact "
            "float. Use a coarser lattice step g. Nothing was released."
        )
    y = s.astype(np.float64)
    y *= gf  # exact: |u + k| < 2^53 and g a power of two
    return y


def _release_overflow() -> None:
    raise NoiseOverflowError(
        "release: a snapped value or a noise index is too large for an exact float release "
        "(|u| >= 2**53 or |k| >= 2**62). Use a coarser lattice step g. Nothing was released."
    )
