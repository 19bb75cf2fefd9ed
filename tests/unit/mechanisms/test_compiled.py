"""Where numba cannot keep its cache, the compiled loops are compiled in memory, same values.

A read-only install with a read-only home gives numba no place for its on-disk cache, and a bare
``njit(cache=True)`` then raises at import. numba's ``NUMBA_CACHE_LOCATOR_CLASSES`` set to a
locator that never applies outside IPython reproduces that (we run as root, so a chmod would
not stop a write).
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_SCRIPT = """
import hashlib, warnings
from fractions import Fraction
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from gpframe.mechanisms.noise import kernels
    from gpframe.queries import knn_scan, grid_budget_fill
    from gpframe.queries.clip_user import stages
    from gpframe.mechanisms.noise.gaussian import discrete_gaussian
    from gpframe.testing import enable_seeded, seeded_rng
    enable_seeded()
    k = discrete_gaussian(Fraction(9, 4), 5000, seeded_rng(7))
print(sum("NUMBA_CACHE_DIR" in str(w.message) for w in caught))
print(hashlib.sha256(k.astype("<i8").tobytes()).hexdigest())
"""


def _run(extra_env: dict[str, str]) -> list[str]:
    env = {**os.environ, **extra_env}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_no_cache_location_compiles_in_memory_warns_once_and_draws_the_same_values():
    cached = _run({})
    uncached = _run({"NUMBA_CACHE_LOCATOR_CLASSES": "IPythonCacheLocator"})
    assert cached[0] == "0"
    assert uncached[0] == "1"  # one warning for all the modules, naming the fix
    assert uncached[1] == cached[1]  # the same machine code's values, compiled in memory
