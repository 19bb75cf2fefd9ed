"""numba's ``njit`` with its on-disk cache where numba can write one, without it elsewhere.

The sampler kernels, the k-PNN scan, the Clip-User stage loop and the grid budget fill are
compiled with ``cache=True``, so a process loads machine code instead of compiling it (about
4 s of CPU). numba writes that cache next to the source, or in the user's cache directory when
the package's folder is read-only; where neither is writable (a read-only container image whose
home is read-only too) ``njit(cache=True)`` raises ``RuntimeError`` at import. :func:`njit`
here falls back to compiling in memory, once per process, and says so once, with the fix:
``NUMBA_CACHE_DIR`` names a writable directory.

>>> from gpframe.mechanisms.compiled import njit
>>> @njit(nogil=True)
... def twice(x):
...     return 2 * x
>>> twice(21)
42
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["njit"]

_warned = False


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Return numba's ``njit(cache=True, **options)``, or ``njit(**options)`` if it cannot cache.

    Nothing about the compiled code changes: only where it is kept (the same options, no fast
    math unless asked, and no kernel here asks).
    """
    import numba

    def decorate(fn: Callable[..., Any]) -> Any:
        global _warned
        if not os.path.isfile(inspect.getfile(fn)):  # a doctest or a shell: nothing to cache
            return numba.njit(**options)(fn)
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError as e:  # numba: "cannot cache function ...: no locator available"
            if "no locator available" not in str(e):
                raise
        if not _warned:
            _warned = True
            from gpframe.errors import GpframeWarning

            warnings.warn(
                "numba cannot write its cache here (the package's folder and the user's cache "
                "directory are read-only), so gpframe's compiled loops are compiled in memory "
                "by every process (a few seconds of CPU at first use). Set NUMBA_CACHE_DIR to "
                "a writable directory to keep them.",
                GpframeWarning,
                stacklevel=3,
            )
        return numba.njit(**options)(fn)

    return decorate
