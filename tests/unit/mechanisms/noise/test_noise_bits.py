"""T-RNG and determinism R7 (secure-noise.md §3, §10, §12)."""

from __future__ import annotations

import ast
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import gpframe
from gpframe import testing
from gpframe.errors import InsecureRandomnessError, InvalidInputError
from gpframe.mechanisms import noise
from gpframe.mechanisms.noise import AesCtrRandom, OsRandom, resolve_rng
from gpframe.testing import seeded_rng

SAMPLERS = {
    "laplace_coarse": lambda n, b: noise.discrete_laplace(Fraction(1, 3), n, b),
    "laplace_b": lambda n, b: noise.discrete_laplace(Fraction(3, 1000), n, b),
    "laplace_a": lambda n, b: noise.discrete_laplace_design_a(Fraction(3, 1000), n, b),
    "gaussian": lambda n, b: noise.discrete_gaussian(Fraction(100), n, b),
    "gaussian_nd": lambda n, b: noise.discrete_gaussian_nd(Fraction(100), 2, n, b),
    "planar": lambda n, b: noise.lattice_laplace(Fraction(1, 1024), 2, n, b),
    "lattice3": lambda n, b: noise.lattice_laplace(Fraction(1, 8), 3, n, b),
}


class CountingSource:
    """Wraps a BitSource and counts the bytes requested (``.src`` is the source to pass)."""

    def __init__(self, inner):
        self.count = 0
        self.src = testing.callback_rng(self._bytes, name="counting")
        self._inner = inner

    def _bytes(self, n):
        self.count += n
        return self._inner.bytes(n)


def _gpframe_files():
    root = Path(gpframe.__file__).parent
    return [p for p in root.rglob("*.py") if p.name != "testing.py" or p.parent != root]


def test_ast_scan_finds_no_insecure_randomness():
    """T-RNG lint: no numpy.random, random or default_rng in gpframe/ outside gpframe/testing.py."""
    hits = []
    for path in _gpframe_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                hits += [
                    (path, a.name)
                    for a in node.names
                    if a.name.split(".")[0] == "random" or a.name.startswith("numpy.random")
                ]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if (
                    mod == "random"
                    or mod.startswith("numpy.random")
                    or (mod == "numpy" and any(a.name == "random" for a in node.names))
                ):
                    hits.append((path, mod))
            elif isinstance(node, ast.Attribute) and node.attr in ("random", "default_rng"):
                if isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy"):
                    hits.append((path, f"{node.value.id}.{node.attr}"))
                if node.attr == "default_rng":
                    hits.append((path, "default_rng"))
            elif isinstance(node, ast.Name) and node.id == "default_rng":
                hits.append((path, "default_rng"))
    assert hits == []


@pytest.fixture
def poisoned_random(monkeypatch):
    """numpy.random functions and the random module raise when touched."""

    def boom(*a, **k):
        raise AssertionError("insecure randomness used")

    for name in dir(np.random):
        if not name.startswith("_") and callable(getattr(np.random, name)):
            monkeypatch.setattr(np.random, name, boom)
    for name in (
        "random",
        "randint",
        "getrandbits",
        "randbytes",
        "choice",
        "shuffle",
        "uniform",
        "gauss",
        "seed",
        "Random",
        "SystemRandom",
    ):
        monkeypatch.setattr(random, name, boom)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_work_with_numpy_random_and_random_poisoned(poisoned_random, name):
    for src in (None, OsRandom(), seeded_rng(1)):
        out = SAMPLERS[name](3000, src)
        assert out.dtype == np.int64 and out.shape[0] == 3000


def test_seeded_source_refused_when_testing_disabled():
    with testing.seeded_disabled():
        with pytest.raises(InsecureRandomnessError, match="seeded test source"):
            resolve_rng(seeded_rng(1))
        with pytest.raises(InsecureRandomnessError):
            noise.discrete_laplace(Fraction(1, 3), 10, seeded_rng(1))
        with testing.seeded_enabled():
            assert resolve_rng(seeded_rng(1)).seeded
        testing.enable_seeded()
        try:
            assert resolve_rng(seeded_rng(1)).seeded
        finally:
            testing.disable_seeded()
        with pytest.raises(InsecureRandomnessError):
            resolve_rng(seeded_rng(1))


def test_numpy_generator_is_not_a_bit_source():
    with pytest.raises(InvalidInputError, match="rng=Generator"):
        resolve_rng(np.random.default_rng(0))
    with pytest.raises(InvalidInputError, match="rng="):
        noise.discrete_gaussian(Fraction(4), 3, random.Random(0))


def test_default_and_aes_sources():
    assert resolve_rng(None).name == "os.urandom" and not resolve_rng(None).seeded
    aes = AesCtrRandom()
    a, b = aes.bytes(64), aes.bytes(64)
    assert len(a) == 64 and a != b  # fresh key per request
    assert noise.discrete_laplace(Fraction(1, 5), 100, aes).shape == (100,)
    assert 0 <= aes.int_bits(128) < 2**128


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_determinism_same_seed_same_output_and_bit_count(name):
    """R7: same seed -> bit-identical output, and the bytes consumed depend only on the stream."""
    outs, counts = [], []
    for _ in range(2):
        src = CountingSource(seeded_rng(2024))
        outs.append(SAMPLERS[name](5000, src.src))
        counts.append(src.count)
    assert np.array_equal(outs[0], outs[1]) and counts[0] == counts[1]
    # no cross-call state: an unrelated call in between changes nothing
    SAMPLERS["gaussian"](777, seeded_rng(5))
    assert np.array_equal(SAMPLERS[name](5000, seeded_rng(2024)), outs[0])
    assert not np.array_equal(SAMPLERS[name](5000, seeded_rng(2025)), outs[0])


def test_seeded_rng_stream_is_deterministic():
    assert seeded_rng(1).bytes(100) == seeded_rng(1).bytes(100)
    assert seeded_rng(1).bytes(100) != seeded_rng(2).bytes(100)


def test_only_the_test_module_registers_test_sources():
    """A class from elsewhere cannot make itself a (seeded, predictable) accepted source."""
    from gpframe.errors import InvalidInputError
    from gpframe.mechanisms.noise import bits

    class LookAlike(bits.OsRandom):
        pass

    before = bits._TEST_CLASSES
    with pytest.raises(InvalidInputError, match="not a test source class"):
        bits.register_test_sources(LookAlike)
    assert bits._TEST_CLASSES == before
    with pytest.raises(InvalidInputError, match="not a gpframe BitSource"):
        bits.resolve_rng(LookAlike())
