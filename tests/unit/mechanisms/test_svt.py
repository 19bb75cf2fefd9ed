"""The GP/CGP sparse vector primitive (concentrated-geo-privacy.md §5, secure-noise.md §9.3)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise import discrete_laplace
from gpframe.mechanisms.svt import LaplacePool, calibrate_draws, scan, sparse_vector, svt_law
from gpframe.testing import seeded_rng

G = Fraction(1, 1024)


@pytest.mark.parametrize(
    ("budget", "K", "w_scale", "v_scale"),
    [
        ({"eps": 0.01}, 1, 200, 400),
        ({"eps": 0.1}, 2, 40, 80),
        ({"rho": 5e-5}, 1, 200, 400),
        ({"rho": 2e-4}, 1, 100, 200),
    ],
)
def test_svt_noise_scales_match_spec_5_oracle(budget, K, w_scale, v_scale):
    """§5 oracle table: W scale 2K/eps, V scale 4K/eps, times the lattice factor (1 + g/K r_min)."""
    res = sparse_vector([1.0, 2.0], threshold=0.0, K=K, **budget, rng=seeded_rng(1))
    factor = 1 + float(G) / K
    assert float(res.noise["scale_threshold"]) == pytest.approx(w_scale * factor, rel=1e-9)
    assert float(res.noise["scale_query"]) == pytest.approx(v_scale * factor, rel=1e-9)
    kind = "gp" if "eps" in budget else "cgp"
    assert res.guarantee.kind == kind
    assert float(res.guarantee.amount) == pytest.approx(next(iter(budget.values())))


def test_svt_law_reproduces_spec_5_oracle():
    assert svt_law([5, 3, 1], 2, 1.0) == pytest.approx(
        [0.2777226852, 0.2685412261, 0.2211524221, 0.2325836666], abs=1e-7
    )
    assert svt_law([1, -1, 2, -3], 0, 0.5) == pytest.approx(
        [0.4585311379, 0.2523658092, 0.08208925022, 0.09127134073, 0.1157424620], abs=1e-7
    )


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("values", "T", "eps", "law"),
    [
        ((5, 3, 1), 2, 1.0, [0.2777226852, 0.2685412261, 0.2211524221, 0.2325836666]),
        (
            (1, -1, 2, -3),
            0,
            0.5,
            [0.4585311379, 0.2523658092, 0.08208925022, 0.09127134073, 0.1157424620],
        ),
    ],
)
def test_svt_frequencies_match_exact_law_spec_5(values, T, eps, law):
    """10⁶ seeded runs; §5 asks ±0.0025 (≈ 5 SE: false failure < 1e-5 per frequency).

    The lattice noise is 0.1 % wider than the continuous law, far inside the band.
    """
    res = sparse_vector(list(values), threshold=T, eps=eps, runs=10**6, rng=seeded_rng(11))
    freq = np.bincount(res.index[res.index >= 0], minlength=len(values)) / 1e6
    none = float(np.mean(res.index == -1))
    assert np.abs(freq - np.array(law[:-1])).max() < 0.0025
    assert abs(none - law[-1]) < 0.0025


def _scalar_reference(u, thr_lam, q_lam, t_int, m, runs, bits, cap):
    """One-visit-at-a-time transcription of Alg. 1 (cyclic), same exact samplers, one draw each."""
    out = np.empty(runs, dtype=np.int64)
    for r in range(runs):
        thr = t_int + int(discrete_laplace(thr_lam, 1, bits)[0])
        out[r] = -1
        for t in range(cap):
            if u[t % m] + int(discrete_laplace(q_lam, 1, bits)[0]) <= thr:
                out[r] = t % m
                break
    return out


@pytest.mark.statistical
def test_block_scan_has_the_law_of_the_scalar_transcription():
    """χ² two-sample test on the halting position: vectorised block scan vs one draw per visit.

    Cyclic list, the cap in play (positions and the all-⊥ outcome compared). Seeded; the test
    fails if p < 1e-6 (false-failure probability 1e-6). A mutant scan that reuses the first V of
    each block for the whole block must be rejected.
    """
    cal = calibrate_draws(Fraction(1, 50), {"threshold": 2, "query": 4})
    vals = np.array([300.0, 40.0, 250.0, 120.0, 500.0])
    u = np.rint(vals / float(cal.g)).astype(np.int64)
    runs, cap = 6000, 3 * len(vals)
    bits = seeded_rng(21)
    ref = _scalar_reference(
        u, cal.lam["threshold"], cal.lam["query"], 0, len(vals), 1500, bits, cap
    )
    w = discrete_laplace(cal.lam["threshold"], runs, bits)
    pool = LaplacePool(cal.lam["query"], bits)
    pos, capped = scan(
        u, np.zeros(runs, np.int64), np.full(runs, 5), w, np.full(runs, cap), pool, block=2
    )
    assert (pos[capped] == -1).all()

    def table(a, b):
        ca = np.bincount(a + 1, minlength=6)
        cb = np.bincount(b + 1, minlength=6)
        keep = (ca + cb) > 0
        return np.vstack([ca[keep], cb[keep]])

    assert stats.chi2_contingency(table(pos, ref))[1] > 1e-6

    class Reuse(LaplacePool):  # mutant: one draw repeated over the block (not independent)
        def take(self, n):
            return np.repeat(super().take(1), n)

    bad, _ = scan(
        u,
        np.zeros(runs, np.int64),
        np.full(runs, 5),
        w,
        np.full(runs, cap),
        Reuse(cal.lam["query"], bits),
        block=cap,
    )
    assert stats.chi2_contingency(table(bad, ref))[1] < 1e-6


def test_above_form_is_below_form_on_negated_values():
    a = sparse_vector(
        [5.0, 3.0, 1.0], threshold=2.0, eps=1.0, above=True, runs=5, rng=seeded_rng(4)
    )
    b = sparse_vector([-5.0, -3.0, -1.0], threshold=-2.0, eps=1.0, runs=5, rng=seeded_rng(4))
    assert a.index.tolist() == b.index.tolist()


def test_cyclic_cap_returns_none_and_flags_it():
    res = sparse_vector(
        [1e6], threshold=0.0, eps=1.0, cyclic=True, max_cycles=3, runs=4, rng=seeded_rng(5)
    )
    assert res.index.tolist() == [-1] * 4 and res.capped.all()


def test_same_seed_same_output_r7():
    a = sparse_vector(np.arange(50.0), threshold=10.0, eps=0.1, runs=20, rng=seeded_rng(9))
    b = sparse_vector(np.arange(50.0), threshold=10.0, eps=0.1, runs=20, rng=seeded_rng(9))
    assert a.index.tolist() == b.index.tolist()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"eps": 1.0, "rho": 1.0}, "exactly one of eps"),
        ({}, "exactly one of eps"),
        ({"eps": -1.0}, "eps"),
        ({"eps": 1.0, "values": []}, "empty"),
        ({"eps": 1.0, "values": [1.0, np.nan]}, "NaN"),
        ({"eps": 1.0, "runs": 0}, "runs"),
        ({"eps": 1.0, "max_cycles": 0}, "max_cycles"),
    ],
)
def test_bad_inputs_raise_before_drawing(kw, match):
    kw = {"values": [1.0, 2.0], **kw}
    with pytest.raises(InvalidInputError, match=match):
        sparse_vector(kw.pop("values"), threshold=0.0, **kw)
