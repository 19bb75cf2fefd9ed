"""The seeded-source guard cannot be flipped: only gpframe's own source classes are accepted.

Regression tests for: a seeded source with ``.seeded = False``, a look-alike object, a subclass
of ``OsRandom`` defined outside gpframe and a source whose ``bytes`` was replaced on the instance
were all accepted by the samplers, the mechanisms, the accessor and ``gp.duckdb.register``;
``GPFRAME_TESTING=1`` in the environment enabled seeded sources for the whole process; and a
source returning constant bytes hung the rejection samplers. Each bad-input test also checks
that the ledger is untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe import monitor
from gpframe.errors import InsecureRandomnessError, InvalidInputError
from gpframe.ledger import Session
from gpframe.mechanisms import noise, planar_laplace
from gpframe.mechanisms.noise import OsRandom
from gpframe.testing import seeded_rng

ROOT = Path(__file__).resolve().parents[3]


class LookAlike:
    """Every attribute of a BitSource, deterministic bytes, and ``seeded = False``."""

    name, seeded = "look-alike", False

    def bytes(self, n):
        return bytes(range(256)) * (n // 256) + bytes(range(n % 256))

    def arr(self, n, dtype):
        import numpy as np

        dt = np.dtype(dtype)
        return np.frombuffer(self.bytes(n * dt.itemsize), dtype=dt)

    def int_bits(self, k):
        return int.from_bytes(self.bytes(k // 8), "little")


class MyOsRandom(OsRandom):
    """A subclass defined outside gpframe: ``type(x) is OsRandom`` is false, isinstance true."""

    def bytes(self, n):  # random bytes: an accepted source must not hang the old code's samplers
        return os.urandom(int(n))


def _flipped() -> Any:
    src = seeded_rng(1)
    try:
        src.seeded = False  # the old bypass: the guard read this flag
    except AttributeError:
        src.__dict__["seeded"] = False
    assert not getattr(src, "seeded", False) or "seeded" in src.__dict__
    return src


def _patched() -> Any:
    src = OsRandom()
    src.bytes = lambda n: os.urandom(int(n))  # replaced on the instance (here harmlessly)
    return src


#: label -> (factory, error). The seeded ones are judged with seeded sources disabled.
BYPASSES: dict[str, tuple[Callable[[], Any], type[Exception]]] = {
    "seeded_flag_flipped": (_flipped, InsecureRandomnessError),
    "look_alike": (LookAlike, InvalidInputError),
    "outside_subclass": (MyOsRandom, InvalidInputError),
    "patched_instance": (_patched, InsecureRandomnessError),
}


def _frame(s: Session) -> Any:
    df = pd.DataFrame({"u": [1, 2], "x": [500_100.0, 500_200.0], "y": [4_500_100.0, 4_500_300.0]})
    return df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")


def _duckdb_register(s: Session, rng: Any) -> Any:
    duckdb = pytest.importorskip("duckdb")
    return gp.duckdb.register(duckdb.connect(), s, rng=rng)


ENTRY_POINTS: dict[str, Callable[[Session, Any], Any]] = {
    "sampler": lambda s, rng: noise.discrete_gaussian(Fraction(4), 3, rng),
    "mechanism": lambda s, rng: planar_laplace([[500_000.0, 4_500_000.0]], eps=0.01, rng=rng),
    "accessor_privatize": lambda s, rng: _frame(s).privatize(rho=1e-4, rng=rng),
    "duckdb_register": _duckdb_register,
    "monitor": lambda s, rng: monitor.threshold_query(
        s, 900, tau=500, users=range(10), epsilon=0.5, rng=rng
    ),
}


@pytest.mark.usefixtures("no_seeded")
@pytest.mark.parametrize("label", sorted(BYPASSES))
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_bypass_refused_everywhere(entry: str, label: str) -> None:
    make, err = BYPASSES[label]
    s = Session(budget=gp.CGP(rho=1e-3), central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(err, match="Nothing was"):
        ENTRY_POINTS[entry](s, make())
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("label", ["look_alike", "outside_subclass", "patched_instance"])
def test_foreign_sources_refused_even_in_tests(label: str) -> None:
    """Enabling seeded sources admits gpframe's test classes only, never a foreign object."""
    make, err = BYPASSES[label]
    with pytest.raises(err):
        noise.discrete_laplace(Fraction(1, 3), 3, make())


def test_positive_control_seeded_runs_when_enabled() -> None:
    s = Session(budget=gp.CGP(rho=1e-3))
    out = _frame(s).privatize(rho=1e-4, rng=seeded_rng(3))
    assert len(out) == 2 and s.spent().sum() > 0
    assert noise.discrete_laplace(Fraction(1, 3), 3, OsRandom()).shape == (3,)


def _child(code: str, env_extra: dict[str, str], timeout: float) -> str:
    env = {**os.environ, **env_extra}
    env.pop("PYTHONPATH", None)
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,  # sys.path[0] == "": the child imports this checkout's gpframe
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


ENV_CHILD = """
import gpframe as gp
from fractions import Fraction
from gpframe.errors import InsecureRandomnessError
from gpframe.mechanisms import noise
assert gp.__file__.startswith({root!r}), gp.__file__
try:
    noise.discrete_laplace(Fraction(1, 3), 3, gp.testing.seeded_rng(1))
    print("accepted")
except InsecureRandomnessError:
    print("refused")
gp.testing.enable_seeded()  # the only switch
print("enabled", noise.discrete_laplace(Fraction(1, 3), 3, gp.testing.seeded_rng(1)).shape)
"""


def test_env_var_enables_nothing() -> None:
    out = _child(ENV_CHILD.format(root=str(ROOT)), {"GPFRAME_TESTING": "1"}, timeout=120)
    assert out.split() == ["refused", "enabled", "(3,)"]


STUCK_CHILD = """
from fractions import Fraction
import gpframe as gp
from gpframe.errors import InsecureRandomnessError, NoiseOverflowError
from gpframe.mechanisms import noise
from gpframe.mechanisms.noise import OsRandom
from gpframe.mechanisms.selection.normal_exact import ExactNormal
assert gp.__file__.startswith({root!r}), gp.__file__
OsRandom.bytes = lambda self, n: b"\\x00" * int(n)  # a stuck source, patched on the class
calls = {{
    "laplace_coarse": lambda: noise.discrete_laplace(Fraction(1, 3), 10, None),
    "laplace_b": lambda: noise.discrete_laplace(Fraction(3, 1000), 10, None),
    "laplace_a": lambda: noise.discrete_laplace_design_a(Fraction(3, 1000), 10, None),
    "gaussian": lambda: noise.discrete_gaussian(Fraction(100), 10, None),
    "planar": lambda: noise.lattice_laplace(Fraction(1, 1024), 2, 10, None),
    "lattice3": lambda: noise.lattice_laplace(Fraction(1, 8), 3, 10, None),
    "exact_normal": lambda: ExactNormal.draw(None),
}}
for name, call in calls.items():
    try:
        call()
        print(name, "returned", flush=True)
    except (InsecureRandomnessError, NoiseOverflowError) as exc:
        print(name, "raised", "broken" in str(exc), flush=True)
"""


def test_constant_bytes_raise_instead_of_hanging() -> None:
    """All-zero bytes hung every sampler; now each raises within seconds (timeout: a hang fails)."""
    out = _child(STUCK_CHILD.format(root=str(ROOT)), {}, timeout=180)
    lines = [ln.split() for ln in out.splitlines()]
    assert len(lines) == 7
    assert all(ln[1:] == ["raised", "True"] for ln in lines), out


def test_constant_bytes_from_a_test_source_raise() -> None:
    """The same through a test source: a Gaussian whose proposals are all rejected."""
    src = gp.testing.callback_rng(lambda n: b"\xff" * n, name="stuck")
    with pytest.raises(InsecureRandomnessError, match="looks broken"):
        noise.discrete_gaussian(Fraction(1, 4), 10, src)
