"""T-IEEE: known-answer checks of assumption A-IEEE, run once at import.

See ``docs/noise.md``: certified float comparisons, tests.

The fast paths rely on numpy's float64 ``+ - * / sqrt`` and int64->float64 casts being IEEE-754
binary64 with round-to-nearest-even. If any known answer is wrong, ``EXACT_ONLY`` becomes True and
the samplers switch to design A (``docs/noise.md``, no float at all) and to exact acceptance bounds,
with a ``GpframeWarning``.

>>> self_test()
True
"""

from __future__ import annotations

import warnings

import numpy as np

from gpframe.errors import GpframeWarning

__all__ = ["EXACT_ONLY", "self_test"]


def _sqrt_ok() -> bool:
    # 10^4 non-square integers below 2^53 from a fixed multiplicative sequence (not a randomness
    # source: these are test vectors). A correctly rounded sqrt lies in [isqrt(x), isqrt(x) + 1].
    i = np.arange(1, 10_001, dtype=np.uint64)
    x = (i * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(11)
    s = np.sqrt(x.astype(np.float64))
    xi = x.astype(np.int64)
    # Integer square roots in int64 (all squares < 2^54): floor(s), corrected by one either way,
    # then verified from the definition r^2 <= x < (r + 1)^2.
    r = np.floor(s).astype(np.int64)
    r -= r * r > xi
    r += (r + 1) * (r + 1) <= xi
    is_isqrt = (r * r <= xi) & ((r + 1) * (r + 1) > xi)
    rf = r.astype(np.float64)
    nonsq = r * r != xi
    return bool(is_isqrt.all() and np.all((s >= rf) & (s <= rf + 1.0)) and nonsq.sum() > 9_000)


def _rounding_ok() -> bool:
    one = np.float64(1.0)
    e52, e53 = np.float64(2.0**-52), np.float64(2.0**-53)
    checks = [
        one + e53 == one,  # tie to even (down)
        (one + e52) + e53 == one + 2 * e52,  # tie to even (up)
        np.float64(2.0**27 + 1) * np.float64(2.0**27 - 1) == np.float64(2.0**54),  # 2^54-1: tie
        np.float64(1.0) / np.float64(3.0) == float.fromhex("0x1.5555555555555p-2"),
        np.float64(2.0) / np.float64(3.0) == float.fromhex("0x1.5555555555555p-1"),
        np.float64(1.0) - e53 / 2 == one,
        np.array([2**53 + 1, 2**53 + 3, -(2**53) - 1], dtype=np.int64).astype(np.float64).tolist()
        == [2.0**53, 2.0**53 + 4, -(2.0**53)],
        np.sqrt(np.float64(2.0)) == float.fromhex("0x1.6a09e667f3bcdp+0"),
    ]
    return all(bool(c) for c in checks)


def self_test() -> bool:
    """Run the T-IEEE known-answer tests; True if A-IEEE holds on this build."""
    try:
        with np.errstate(all="ignore"):
            return _rounding_ok() and _sqrt_ok()
    except Exception:  # pragma: no cover - a broken build
        return False


EXACT_ONLY: bool = not self_test()
if EXACT_ONLY:  # pragma: no cover - only on a non-IEEE numpy build
    warnings.warn(
        "gpframe: numpy float64 arithmetic failed the IEEE-754 known-answer tests (docs/noise.md); "
        "noise samplers use the slower float-free paths.",
        GpframeWarning,
        stacklevel=2,
    )
