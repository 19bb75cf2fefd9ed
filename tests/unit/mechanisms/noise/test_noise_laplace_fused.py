"""The one-pass design-B discrete Laplace (noise.laplace_fused) decides as the staged path does.

Each comparison draws the same seeded call twice, once through the one-pass loop and once
through the staged kernels (``laplace_fused.usable`` patched to False), and compares the outputs
**and the sizes of every request to the bit source**. The sizes are large enough that round 1
has ambiguous draws (about one in 2¹⁶, decided exactly) and later rounds run; planted words force
the staged fallback (a word tied with a V threshold, a zero word).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.mechanisms.noise import bernoulli, geometric, laplace, laplace_fused
from gpframe.mechanisms.noise.geometric import block_geometric
from gpframe.mechanisms.noise.laplace import discrete_laplace
from gpframe.testing import callback_rng, seeded_rng

#: design-B rates (lam <= 1/32): the k-PNN query rate's order, a fine one and a near-coarse one
LAMS = [Fraction(1, 194_473), Fraction(1, 92682), Fraction(1, 33), Fraction(1, 2**40)]


def _logged(seed: int, plant: tuple[int, int] | None = None):
    """A seeded source logging request sizes; ``plant=(pos, word)`` sets W[pos] of request 1."""
    inner = seeded_rng(seed)
    sizes: list[int] = []

    def fn(n: int) -> bytes:
        b = inner.bytes(n)
        if plant is not None and not sizes:  # W (uint32) is laid out first in the request
            pos, word = plant
            b = b[: 4 * pos] + int(word).to_bytes(4, "little") + b[4 * pos + 4 :]
        sizes.append(n)
        return b

    return callback_rng(fn, name="log"), sizes


def _both(monkeypatch, lam, n, seed, plant=None, counts=None):
    src, fast_sizes = _logged(seed, plant)
    orig = laplace_fused.accept

    def counting(*a):
        out = orig(*a)
        if counts is not None:
            counts["none" if out is None else "used"] += 1
        return out

    with monkeypatch.context() as m:
        m.setattr(laplace_fused, "accept", counting)
        fast = discrete_laplace(lam, n, src)
    src, staged_sizes = _logged(seed, plant)
    with monkeypatch.context() as m:
        m.setattr(laplace_fused, "usable", lambda: False)
        staged = discrete_laplace(lam, n, src)
    return fast, staged, fast_sizes, staged_sizes


@pytest.mark.parametrize("lam", LAMS)
def test_same_draws_and_requests_as_the_staged_path(monkeypatch, lam):
    counts = {"used": 0, "none": 0}
    exact = {"n": 0}
    orig = laplace.lazy_rational_less

    def counting(*a):
        exact["n"] += 1
        return orig(*a)

    monkeypatch.setattr(laplace, "lazy_rational_less", counting)
    for seed, n in [(1, 1), (2, 2048), (3, 400_000)]:
        fast, staged, fs, ss = _both(monkeypatch, lam, n, seed, counts=counts)
        assert fast.dtype == staged.dtype == np.int64
        np.testing.assert_array_equal(fast, staged)
        assert fs == ss
    # the one-pass path really ran (a natural V tie, ~1 word in 10⁷, sends a batch to the stages)
    assert counts["used"] >= 3 and counts["none"] <= 1  # 4 batches (400,000 is two)
    if lam != Fraction(1, 33):  # the near-coarse rate has too few round-1 survivors to be sure
        assert exact["n"] > 0  # ambiguous draws were decided exactly on both paths


@pytest.mark.parametrize("where", ["zero", "tie-low", "tie-mid", "tie-high"])
def test_planted_tie_takes_the_staged_path(monkeypatch, where):
    lam = LAMS[0]
    asc = block_geometric(lam).vt.asc
    word = {"zero": 0, "tie-low": asc[0], "tie-mid": asc[asc.size // 2], "tie-high": asc[-1]}
    counts = {"used": 0, "none": 0}
    for pos in (0, 777):
        fast, staged, fs, ss = _both(monkeypatch, lam, 2048, 40 + pos, (pos, word[where]), counts)
        np.testing.assert_array_equal(fast, staged)
        assert fs == ss and len(fs) > 1  # the tie drew more bits of the same uniform
    assert counts == {"used": 0, "none": 2}


def test_test_hooks_disable_the_one_pass_path(monkeypatch):
    assert laplace_fused.usable()
    with monkeypatch.context() as m:
        m.setattr(geometric, "FORCE_EXACT", True)
        assert not laplace_fused.usable()
    with monkeypatch.context() as m:
        m.setattr(bernoulli, "enclose", lambda lo, hi: (np.floor(lo), np.ceil(hi)))
        assert not laplace_fused.usable()
