"""Private KDE over arrays (issue 7): oracles, charges, error bounds, bias correction, rasters.

Spec: adaptive-budgeting.md §5.2 (KDE, Algorithm 7, rasters), §5.6 (oracles), §4.6 (charges),
§7; secure-noise.md §9.3 (the σ actually sampled).
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binom

from gpframe.errors import InvalidInputError
from gpframe.queries import kde as K
from gpframe.queries.elimination import charge_if_stopped, split_fractions
from gpframe.testing import seeded_rng

# ---------------------------------------------------------------------------------------------
# §5.6 oracle table (KDE, b = 100 m)


def test_oracles_kde_table_5_6():
    assert K.cutoff(200, 100) == pytest.approx(0.1353352832, abs=1e-10)
    assert K.cutoff(300, 100) == pytest.approx(0.01110899654, abs=1e-11)
    assert K.kernel_lipschitz(100) == pytest.approx(0.006065306597, abs=1e-12)
    assert float(K.kernel(50, 100)) == pytest.approx(0.8824969026, abs=1e-10)
    assert float(K.kernel(100, 100)) == pytest.approx(0.6065306597, abs=1e-10)
    assert K.error_bound_nominal(1000, 0.05, 1e-4, 100, "pt") == pytest.approx(1.908740283, 1e-9)
    assert K.error_bound_nominal(1000, 0.05, 1e-2, 100, "pt") == pytest.approx(0.1908740283, 1e-9)
    assert K.error_bound_nominal(1000, 0.05, 1e-2, 100, "dist") == pytest.approx(0.1974407269, 1e-9)
    # elimination: |S| = 200 survivors term and |I_high| = 800 term (n = 1000, a = 1e-4)
    surv = K.kernel_lipschitz(100) / 1000 * 200 * math.sqrt(math.log(1000 / 0.05) / 1e-4)
    assert surv == pytest.approx(0.3817480565, 1e-9)
    assert 800 / 1000 * K.cutoff(300, 100) == pytest.approx(0.008887197231, 1e-9)


@pytest.mark.parametrize(
    "sigma, D, true, e_pt, e_dist",
    [
        (50, 0, 1.0, 0.8000000000, 0.8944271910),
        (50, 100, 0.6065306597, 0.5362560368, 0.5995524758),
        (100, 300, 0.01110899654, 0.05269961228, 0.07452850642),
    ],
)
def test_bias_oracles_5_6(sigma, D, true, e_pt, e_dist):
    assert float(K.kernel(D, 100)) == pytest.approx(true, abs=1e-10)
    assert K.expected_kernel_pt(sigma, D, 100) == pytest.approx(e_pt, abs=1e-10)
    assert K.expected_kernel_dist(sigma, D, 100) == pytest.approx(e_dist, abs=1e-10)


# ---------------------------------------------------------------------------------------------
# charges


@pytest.mark.parametrize("method", ["pt-elim", "dist-elim"])
def test_elim_charges_equal_rounds_run_and_stay_within_allocation(method):
    gen = np.random.default_rng(1)
    xy = np.vstack([gen.normal(0, 300, (50, 2)), gen.normal(0, 300, (50, 2)) + 40_000])
    out = K.kde_point(
        xy,
        [0, 0],
        bandwidth_m=500,
        amount=1e-4,
        method=method,
        rounds=4,
        split="even",
        rng=seeded_rng(3),
    )
    pi = split_fractions("even", 4)
    for c, a, r in zip(out.charges, out.allocations, out.rounds_run, strict=True):
        assert c <= a
        assert c == charge_if_stopped(Fraction(1, 10**4), pi, int(r))
    assert out.n_far > 40 and out.n_near >= 50  # far cluster stops early, near ones never
    assert (out.rounds_run[:50] == 4).all()
    assert out.saving > 0


def test_baseline_charges_full_allocation():
    xy = np.zeros((5, 2))
    for method in ("pt", "dist"):
        out = K.kde_point(
            xy, [0, 0], bandwidth_m=500, amount=1e-4, method=method, rng=seeded_rng(4)
        )
        assert [float(c) for c in out.charges] == [1e-4] * 5
        assert out.n_far == 0


def test_gp_elim_charges_in_eps():
    xy = np.array([[0.0, 0.0], [90_000.0, 0.0]])
    out = K.kde_point(
        xy,
        [0, 0],
        bandwidth_m=500,
        kind="gp",
        amount=0.01,
        method="dist-elim",
        rounds=4,
        split="even",
        rng=seeded_rng(5),
    )
    assert float(out.charges[0]) == pytest.approx(0.01)
    assert float(out.charges[1]) < 0.01 and out.n_far == 1


# ---------------------------------------------------------------------------------------------
# error bounds hold at their stated probability


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["pt", "dist", "pt-elim", "dist-elim"])
def test_error_bound_coverage(method):
    """|kde − KDE| ≤ error in ≥ 95 % of runs (β = 0.05).

    Stated probability ≥ 0.95 per run; with 40 runs, failing means ≥ 7 misses, which has
    probability binom.sf(6, 40, 0.05) ≈ 0.0475 if the bound were exactly tight; the bounds
    are conservative (union + Lipschitz), so the real false-failure probability is far below
    1e-6 (typical errors are 0.1-3 % of the bound). Negative control: a bound 1000× too small
    must miss in more than a quarter of the runs.
    """
    gen = np.random.default_rng(7)
    xy = np.vstack([gen.normal(0, 400, (150, 2)), gen.uniform(-20_000, 20_000, (150, 2))])
    b, q = 500.0, np.array([100.0, -50.0])
    true = float(K.kernel(np.hypot(*(xy - q).T), b).mean())
    misses, tight_misses = 0, 0
    for s in range(40):
        out = K.kde_point(
            xy,
            q,
            bandwidth_m=b,
            amount=2e-3,
            method=method,
            rounds=4,
            split="doubling",
            beta=0.05,
            rng=seeded_rng(1000 + s),
        )
        misses += abs(out.value - true) > out.error
        tight_misses += abs(out.value - true) > out.error / 1000
    assert misses <= 6, misses
    assert binom.sf(6, 40, 0.05) < 0.05
    assert tight_misses > 10  # the check can fail


def test_kde_points_pt_matches_single_point_kernel():
    xy = np.array([[0.0, 0.0], [100.0, 0.0]])
    out = K.kde_points_pt(xy, [[0, 0], [1e6, 0]], bandwidth_m=200, amount=1.0, rng=seeded_rng(6))
    # rho = 1 m⁻²: σ ≈ 0.7 m, so the value is close to the exact KDE
    assert out.values[0] == pytest.approx((1 + math.exp(-(100**2) / (2 * 200**2))) / 2, abs=0.01)
    assert out.values[1] == 0.0
    assert [float(c) for c in out.privatized.charges] == [1.0, 1.0]


# ---------------------------------------------------------------------------------------------
# bias correction and rasters


def test_corrected_bandwidth_and_refusal():
    assert K.corrected_bandwidth(500.0, 300.0) == 400.0
    with pytest.raises(InvalidInputError, match="bandwidth_m=100 is not larger than the noise"):
        K.corrected_bandwidth(100.0, 150.0)


def test_bandwidth_limit_is_the_sampled_sigma():
    out = K.privatize_once(np.zeros((3, 2)), 5e-5, rng=seeded_rng(8))
    assert out.sigma[0] == pytest.approx(K.bandwidth_limit("cgp", 5e-5), rel=1e-12)
    assert out.sigma[0] > 100.0  # above the nominal 1/√(2ρ): the g/r_min term


def _gauss_density(x, y, s):
    return np.exp(-(x**2 + y**2) / (2 * s * s)) / (2 * np.pi * s * s)


@pytest.mark.statistical
def test_raster_bias_correction_against_known_density():
    """True points ~ N(0, τ²I): the true KDE's expectation is φ_√(τ²+h²); noise σ ≈ 707 m.

    Corrected raster ≈ φ_√(τ²+h²) (peak within 3 %); uncorrected ≈ φ_√(τ²+h²+σ²) (peak ~20 %
    lower: the mutant/negative control). n = 200,000 points: the raster's sampling error at
    the peak is < 0.5 % (false failure < 1e-9 by a Gaussian tail at > 6 standard errors).
    """
    gen = np.random.default_rng(9)
    tau, h, rho = 1000.0, 1000.0, 1e-6
    xy = gen.normal(0, tau, (200_000, 2))
    kw = dict(bandwidth_m=h, cell_m=100.0, bounds_m=(-8000, -8000, 8000, 8000), amount=rho)
    cor = K.kde_raster_arrays(xy, rng=seeded_rng(10), **kw)
    raw = K.kde_raster_arrays(xy, rng=seeded_rng(10), correct=False, **kw)
    sig = float(cor.sigma_m[0])
    assert 707 < sig < 709
    ny, nx = cor.density.shape
    xs = cor.transform[2] + 100 * (np.arange(nx) + 0.5)
    ys = cor.transform[5] - 100 * (np.arange(ny) + 0.5)
    X, Y = np.meshgrid(xs, ys)
    target = _gauss_density(X, Y, math.hypot(tau, h))
    smoothed = _gauss_density(X, Y, math.sqrt(tau**2 + h**2 + sig**2))
    assert abs(cor.density.max() / target.max() - 1) < 0.03
    assert abs(raw.density.max() / smoothed.max() - 1) < 0.03
    assert raw.density.max() < 0.85 * target.max()
    l1 = np.abs(cor.density - target).sum() * 100**2
    assert l1 < 0.03
    # mass: every kernel lies well inside the bounds
    assert cor.density.sum() * 100**2 == pytest.approx(1.0, abs=1e-3)
    assert [float(c) for c in cor.privatized.charges[:2]] == [1e-6, 1e-6]


def test_raster_refuses_h_below_sigma_before_noise():
    with pytest.raises(InvalidInputError, match="not larger than the noise"):
        K.kde_raster_arrays(np.zeros((3, 2)), bandwidth_m=100.0, amount=1e-6, rng=seeded_rng(1))
    out = K.kde_raster_arrays(
        np.zeros((3, 2)),
        bandwidth_m=100.0,
        amount=1e-6,
        correct=False,
        bounds_m=(-5e3, -5e3, 5e3, 5e3),
        rng=seeded_rng(1),
    )
    assert out.corrected == "none"


def test_raster_gp_moment_correction_keeps_mass():
    gen = np.random.default_rng(2)
    xy = gen.normal(0, 500, (20_000, 2))
    out = K.kde_raster_arrays(
        xy,
        bandwidth_m=1000.0,
        cell_m=100.0,
        kind="gp",
        amount=0.01,
        bounds_m=(-9000, -9000, 9000, 9000),
        rng=seeded_rng(3),
    )
    assert out.corrected == "moments"
    assert out.density.sum() * 100**2 == pytest.approx(1.0, abs=0.01)
    assert out.bandwidth_used_m[0] == pytest.approx(math.sqrt(1000**2 - out.sigma_m[0] ** 2))


def test_raster_default_bounds_from_released_points():
    xy = np.random.default_rng(4).normal(0, 500, (1000, 2))
    out = K.kde_raster_arrays(xy, bandwidth_m=500.0, cell_m=50.0, amount=1e-4, rng=seeded_rng(5))
    a, _, x0, _, _e, y1 = out.transform
    assert x0 < -1500 and y1 > 1500 and a == 50.0


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(bandwidth_m=-1), "bandwidth_m"),
        (dict(bandwidth_m=float("nan")), "bandwidth_m"),
        (dict(cell_m=0), "cell_m"),
        (dict(bounds_m=(0, 0, -1, 5)), "bounds"),
        (dict(bounds_m=(0, 0, 1e7, 1e7), cell_m=1.0), "cells per side"),
    ],
)
def test_raster_bad_inputs(kw, match):
    args = dict(bandwidth_m=1000.0, cell_m=100.0, bounds_m=(0, 0, 1e4, 1e4), amount=1e-4)
    args.update(kw)
    with pytest.raises(InvalidInputError, match=match):
        K.kde_raster_arrays(np.zeros((3, 2)), rng=seeded_rng(1), **args)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(method="elim"), "method='elim' is not one of"),
        (dict(bandwidth_m=0), "bandwidth_m"),
        (dict(beta=1.5), "beta"),
        (dict(q=[np.nan, 0]), "query point"),
    ],
)
def test_point_bad_inputs(kw, match):
    q = kw.pop("q", [0, 0])
    args = dict(bandwidth_m=500.0, amount=1e-4)
    args.update(kw)
    with pytest.raises(InvalidInputError, match=match):
        K.kde_point(np.zeros((3, 2)), q, rng=seeded_rng(1), **args)


@pytest.mark.parametrize("big", [10**400, 10**5000], ids=["1e400", "1e5000"])
@pytest.mark.parametrize("name", ["bandwidth_m", "nu_m"])
def test_positive_finite_huge_int_is_refused_not_overflow(name, big):
    # regression: float(10**400) raised OverflowError instead of an InvalidInputError
    with pytest.raises(
        InvalidInputError, match=rf"{name} is beyond the float range.*> 0.*Nothing was charged"
    ):
        K._positive_finite(big, name)
    args = dict(bandwidth_m=500.0, amount=1e-4)
    args[name] = big
    with pytest.raises(InvalidInputError, match=name):
        K.kde_point(np.zeros((3, 2)), [0, 0], rng=seeded_rng(1), **args)
