"""T-EXACT and T-IEEE (secure-noise.md §4.1-§4.3, §12)."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from gpframe.mechanisms.noise import ieee
from gpframe.mechanisms.noise.exact import ExactProb, LazyUniform, exp_neg_bounds, float_bounds
from gpframe.mechanisms.noise.geometric import VTable, block_geometric
from gpframe.testing import seeded_rng

mpmath.mp.prec = 400


def _mp_exp_neg(x: Fraction) -> mpmath.mpf:
    return mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator)


def _rationals(count: int, seed: int) -> list[Fraction]:
    g = np.random.default_rng(seed)  # test vectors only (tests may use numpy.random)
    out = [Fraction(0), Fraction(1, 10**12), Fraction(60), Fraction(1, 3)]
    while len(out) < count:
        den = int(g.integers(1, 10**6))
        out.append(Fraction(int(g.integers(0, 60 * den)), den))
    return out


def test_exp_neg_bounds_bracket_mpmath_400_bits():
    """§4.1: lo <= e^-x 2^P <= hi, width <= 2, for 300 rationals x in [0, 60], P in {64, 130}."""
    for x in _rationals(300, 1):
        for P in (64, 130):
            lo, hi = exp_neg_bounds(x, P)
            v = _mp_exp_neg(x) * mpmath.mpf(2) ** P
            assert lo <= v <= hi, (x, P)
            assert hi - lo <= 2, (x, P, hi - lo)


@pytest.mark.parametrize("x", [Fraction(1, 32), Fraction(1, 16), Fraction(3, 64), Fraction(1)])
def test_v_table_thresholds_equal_mpmath_floors(x):
    """§5.3: T_v = floor(Q^v 2^32), Q = e^-x, for every v up to the last positive one."""
    vt = VTable(x)
    ref = []
    v = 1
    while True:
        t = int(mpmath.floor(_mp_exp_neg(v * x) * 2**32))
        if t == 0:
            break
        ref.append(t)
        v += 1
    assert vt.T.tolist() == ref
    assert vt.vmax <= 711


def test_v_table_buckets_agree_with_direct_count():
    """The 2^16-bucket table gives #{v: T_v > W} for words not tying a threshold."""
    vt = block_geometric(Fraction(1, 92682)).vt
    W = np.random.default_rng(3).integers(1, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    V = vt.from_words(W, seeded_rng(1))
    direct = vt.vmax - np.searchsorted(vt.asc, W.astype(np.int64), side="right")
    assert np.array_equal(V, direct)


def test_exact_prob_derived_constants_match_mpmath():
    """p0 = (1-E)/(1+E) and p = E/(1+E) floors at 32 and 200 bits."""
    for x in [Fraction(1, 3), Fraction(7, 5), Fraction(1, 1000)]:
        E = _mp_exp_neg(x)
        for k in (32, 200):
            assert ExactProb.p_zero(x).floor(k) == int(mpmath.floor((1 - E) / (1 + E) * 2**k))
            assert ExactProb.logistic_exp_neg(x).floor(k) == int(mpmath.floor(E / (1 + E) * 2**k))


@pytest.mark.statistical
def test_lazy_uniform_at_forced_tie():
    """§4.2 at W = T: P(U < p | prefix) = frac(p 2^32); 5 SE band, false failure ~6e-7."""
    p = ExactProb.exp_neg(Fraction(1, 3))
    T = p.floor(32)
    frac = float(_mp_exp_neg(Fraction(1, 3)) * 2**32 - T)
    bits = seeded_rng(11)
    trials = 20_000
    hits = sum(LazyUniform(T, 32, bits).less_than(p) for _ in range(trials))
    se = (frac * (1 - frac) / trials) ** 0.5
    assert abs(hits / trials - frac) < 5 * se


@pytest.mark.statistical
def test_v_exact_at_forced_threshold_tie():
    """T-FORCED (V table): with W = T_v the exact path gives P(V >= v) = frac(Q^v 2^32)."""
    x = Fraction(1, 20)
    vt = VTable(x)
    v = 7
    frac = float(_mp_exp_neg(v * x) * 2**32 - vt.T[v - 1])
    bits = seeded_rng(12)
    trials = 20_000
    hits = sum(vt.v_exact(int(vt.T[v - 1]), bits) >= v for _ in range(trials))
    se = (frac * (1 - frac) / trials) ** 0.5
    assert abs(hits / trials - frac) < 5 * se


def test_v_exact_at_zero_word_goes_past_the_table():
    """W = 0 ties every T_v = 0 beyond the table: V must be able to exceed vmax."""
    vt = VTable(Fraction(1))
    vs = [vt.v_exact(0, seeded_rng(s)) for s in range(50)]
    assert min(vs) >= vt.vmax


def test_float_bounds_enclose():
    for x in [Fraction(1, 3), Fraction(2**60 + 1, 7), Fraction(1, 2)]:
        lo, hi = float_bounds(x)
        assert Fraction(lo) <= x <= Fraction(hi)


def test_ieee_known_answers_pass_on_this_build():
    """T-IEEE: the import-time self test holds, so the float fast paths are enabled."""
    assert ieee.self_test() is True
    assert ieee.EXACT_ONLY is False


@pytest.mark.statistical
@pytest.mark.parametrize("forced", [False, True])
def test_bern_exp_neg_frequencies(monkeypatch, forced):
    """§4.4: P(accept) = exp(-gamma) for gamma in {0, 0.3, 1, 1.7, 5.2, 25.5}; 5 SE each.

    ``forced`` narrows the enclosure to (floor(glo), ceil(ghi)) so the remainder is decided by the
    exact callback. False-failure probability about 6e-7 per gamma.
    """
    from gpframe.mechanisms.noise import bernoulli

    if forced:
        monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (np.floor(lo), np.ceil(hi)))
    gammas = [
        Fraction(0),
        Fraction(3, 10),
        Fraction(1),
        Fraction(17, 10),
        Fraction(26, 5),
        Fraction(51, 2),
    ]
    reps = 20_000
    g = np.repeat(np.array([float(x) for x in gammas]), reps)
    glo, ghi = g * (1 - 2.0**-50), g * (1 + 2.0**-50)
    bits = seeded_rng(21)
    gi = np.repeat(np.arange(len(gammas)), reps)

    def exact_less(i, W, m, M, j):
        x = gammas[gi[i]]
        return bernoulli.lazy_rational_less(
            W, m, M, x.numerator - j * x.denominator, x.denominator, bits
        )

    acc = bernoulli.bern_exp_neg(glo, ghi, exact_less, bits).reshape(len(gammas), reps)
    for x, row in zip(gammas, acc, strict=True):
        p = float(mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator))
        se = max((p * (1 - p) / reps) ** 0.5, 1 / reps)
        assert abs(row.mean() - p) < 5 * se, (x, row.mean(), p)
