"""Snapping and release (secure-noise.md §9.2): T-LAT, T-FP-1 (Mironov), T-FP-2 (low bits)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import InvalidInputError, NoiseOverflowError
from gpframe.mechanisms import noise
from gpframe.testing import seeded_rng

from .noise_stats import ALPHA, two_sample_chi2

G = Fraction(1, 2**20)


def test_snap_is_exact_rint_and_release_is_exact():
    x = np.array([0.0, 2.0**-21, 3 * 2.0**-21, -1.5e-6, 123.456])
    u = noise.snap(x, G, "x")
    assert u.dtype == np.int64
    assert u.tolist() == [0, 0, 2, -2, round(123.456 * 2**20)]
    y = noise.release(u, np.array([1, -1, 0, 5, 7]), G)
    assert y.dtype == np.float64
    assert (np.rint(y / float(G)) * float(G) == y).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 2.0**32, -(2.0**33)])
def test_snap_rejects_nonfinite_and_huge(bad):
    with pytest.raises(InvalidInputError, match="column_x"):
        noise.snap(np.array([1.0, bad]), G, "column_x")


@pytest.mark.parametrize("g", [0, -1, 3, Fraction(1, 3), 0.1, float("nan"), "x", True])
def test_lattice_step_must_be_power_of_two(g):
    with pytest.raises(InvalidInputError, match="power of two"):
        noise.snap(np.zeros(2), g, "x")


def test_release_overflow_raises():
    with pytest.raises(NoiseOverflowError):
        noise.release(np.array([2**52]), np.array([2**52]), Fraction(1))
    with pytest.raises(NoiseOverflowError):
        noise.release(np.array([0]), np.array([2**62]), Fraction(1))


def test_the_blocked_large_array_path_equals_the_one_pass_path(monkeypatch):
    """Arrays above the block size run block by block: the same integers, floats and errors."""
    from gpframe.mechanisms.noise import lattice

    gen = np.random.default_rng(3)
    x = gen.uniform(-(2.0**31), 2.0**31, (1001, 2))
    x[::5] = gen.normal(0.0, 2.0**-19, x[::5].shape)  # around the rounding of 0.5 g
    x[7] = [0.5 * float(G), -1.5 * float(G)]  # exact ties: rint rounds half to even
    k = gen.integers(-(2**40), 2**40, x.shape)
    one_u, one_y = noise.snap(x, G, "x"), noise.release(noise.snap(x, G, "x"), k, G)
    monkeypatch.setattr(lattice, "_BLOCK", 16)  # 126 blocks and a short last one
    u = noise.snap(x, G, "x")
    y = noise.release(u, k, G)
    assert u.dtype == np.int64 and u.shape == x.shape and np.array_equal(u, one_u)
    assert y.dtype == np.float64 and y.shape == x.shape and np.array_equal(y, one_y)
    bad = x.copy()
    bad[900, 1] = np.nan  # in a late block: refused with the one-pass message (its position)
    with pytest.raises(InvalidInputError, match=r"1 NaN or infinite value\(s\) \(first at po"
                                                r"sition 1801\)"):  # fmt: skip
        noise.snap(bad, G, "x")
    big = k.copy()
    big[950, 0] = 2**62  # a noise index out of range, after blocks whose u + k are fine
    with pytest.raises(NoiseOverflowError, match="noise index is too large"):
        noise.release(u, big, G)


def _released(kind: str, x: np.ndarray, g: Fraction, seed: int) -> np.ndarray:
    src = seeded_rng(seed)
    n = x.shape[0]
    if kind == "laplace":
        k = noise.discrete_laplace(Fraction(1, 1000), n, src)
    elif kind == "gaussian":
        k = noise.discrete_gaussian(Fraction(10**6), n, src)
    elif kind == "planar":
        k = noise.lattice_laplace(Fraction(1, 1024), 2, n, src)
    else:
        k = noise.discrete_gaussian_nd(Fraction(10**6), 2, n, src)
    return noise.release(noise.snap(x, g, "x"), k, g)


@pytest.mark.parametrize("kind", ["laplace", "gaussian", "planar", "gaussian2"])
def test_t_lat_outputs_on_lattice(kind):
    """T-LAT: released values are lattice points, float64 and finite (on/off-lattice inputs)."""
    g = Fraction(1, 1024)
    d = 2 if kind in ("planar", "gaussian2") else 1
    shape = (100_000, d) if d == 2 else (100_000,)
    x = np.linspace(-5e4, 5e4, 100_000 * d).reshape(shape) + 1e-7  # mostly off-lattice
    x[::2] = np.rint(x[::2] * 1024) / 1024  # half on the lattice
    y = _released(kind, x, g, 401)
    assert y.dtype == np.float64 and np.isfinite(y).all()
    assert (np.rint(y / float(g)) * float(g) == y).all()


def _reachable_by_numpy_laplace(y: np.ndarray) -> np.ndarray:
    """Is y an output of numpy's Generator.laplace(0, 1)?

    numpy draws U = j 2^-53 and returns log(U + U) for U < 1/2, -log(2 - U - U) otherwise; we try
    the few grid values of U around the inverse and recompute with the same float operations.
    """
    y = np.asarray(y, dtype=np.float64)
    out = np.zeros(y.shape, dtype=bool)
    neg = y < 0
    with np.errstate(all="ignore"):
        j0 = np.rint(np.exp(y) / 2 * 2.0**53)
        j1 = np.rint((2 - np.exp(-y)) / 2 * 2.0**53)
    for dj in range(-4, 5):
        U = (j0 + dj) * 2.0**-53
        ok = (U > 0) & (U < 0.5)
        with np.errstate(all="ignore"):
            out |= neg & ok & (np.log(U + U) == y)
        U = (j1 + dj) * 2.0**-53
        ok = (U >= 0.5) & (U < 1)
        with np.errstate(all="ignore"):
            out |= ~neg & ok & (-np.log((2.0 - U) - U) == y)
    return out


@pytest.mark.statistical
def test_t_fp1_mironov_support_attack():
    """T-FP-1: event S0 = "reachable by numpy's float Laplace(0, 1)"; lattice 2^-20, scale 1.

    gpframe: |P0 - P1| <= 0.01 with N = 2e5 per input (>= 6 SE; false failure < 1e-9).
    Naive numpy control: P0 ~ 1 and advantage >= 0.5 (it is ~0.8).
    """
    n = 200_000
    lam = G  # scale 1 in real units = 2^20 lattice units
    probs = {}
    for i, xp in enumerate([0.0, float(G), 1e-6]):
        k = noise.discrete_laplace(lam, n, seeded_rng(410 + i))
        y = noise.release(noise.snap(np.full(n, xp), G, "x"), k, G)
        probs[xp] = _reachable_by_numpy_laplace(y).mean()
    assert abs(probs[0.0] - probs[float(G)]) <= 0.01
    assert abs(probs[0.0] - probs[1e-6]) <= 0.01
    g = np.random.default_rng(7)  # the naive (insecure) control
    p0 = _reachable_by_numpy_laplace(g.laplace(0.0, 1.0, n)).mean()
    p1 = _reachable_by_numpy_laplace(g.laplace(0.0, 1.0, n) + float(G)).mean()
    assert p0 > 0.99
    assert p0 - p1 >= 0.5


@pytest.mark.statistical
@pytest.mark.parametrize("offset", [0.3, 0.5])
def test_t_fp2_low_bits(offset):
    """T-FP-2: the 8 low lattice bits of u + k do not depend on x (two-sample chi2, alpha 1e-6)."""
    n = 100_000
    g = float(G)
    lam = Fraction(1, 1000)
    y0 = noise.release(
        noise.snap(np.zeros(n), G, "x"), noise.discrete_laplace(lam, n, seeded_rng(420)), G
    )
    y1 = noise.release(
        noise.snap(np.full(n, offset * g), G, "x"),
        noise.discrete_laplace(lam, n, seeded_rng(421)),
        G,
    )
    low0 = np.rint(y0 / g).astype(np.int64) & 255
    low1 = np.rint(y1 / g).astype(np.int64) & 255
    assert two_sample_chi2(low0, low1, nbins=256) > ALPHA
    assert math.isfinite(y1.sum())


def test_release_into_the_snapped_buffer_gives_the_same_floats_and_errors():
    # reuse_u: large inputs are released into u's own buffer (8 bytes per value less at the
    # peak), with the same floats; a refusal leaves u as it was (checked before any write)
    n = 3 * (1 << 15) + 7  # several blocks and a partial one
    gen = np.random.default_rng(3)
    u = gen.integers(-(2**40), 2**40, n)
    k = gen.integers(-(2**20), 2**20, n)
    want = noise.release(u.copy(), k, G)
    mine = u.copy()
    got = noise.release(mine, k, G, reuse_u=True)
    assert np.array_equal(got, want) and got.dtype == np.float64
    assert np.shares_memory(got, mine)
    bad = u.copy()
    bad[-1] = 2**53 - 1  # u + k reaches 2**53 in the last block only
    k2 = k.copy()
    k2[-1] = 5
    kept = bad.copy()
    with pytest.raises(NoiseOverflowError) as plain:
        noise.release(bad.copy(), k2, G)
    with pytest.raises(NoiseOverflowError) as reused:
        noise.release(bad, k2, G, reuse_u=True)
    assert str(reused.value) == str(plain.value) and np.array_equal(bad, kept)
