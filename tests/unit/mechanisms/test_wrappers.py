"""Release wrappers (secure-noise.md §9, §13): validation before any bit, guarantee, lattice."""

from fractions import Fraction

import numpy as np
import pytest

import gpframe.mechanisms.noise as noise_pkg
from gpframe.errors import GpframeWarning, InvalidInputError
from gpframe.mechanisms import (
    Guarantee,
    Released,
    gaussian_cgp,
    gaussian_zcdp,
    laplace_dp,
    laplace_gp,
    planar_laplace,
)
from gpframe.mechanisms.calibration import round_down_float, sqrt_up
from gpframe.testing import callback_rng, seeded_rng

F = Fraction
G = F(1, 1024)


def _raise(n):
    raise AssertionError("a bit was drawn")


def RaisingBits():
    """A BitSource that raises on every draw: proves nothing was drawn (R8)."""
    return callback_rng(_raise, name="raising")


PTS = np.array([[500_000.3, 4_649_776.2], [500_010.0, 4_649_790.0], [-12.5, 3.0]])
VALS = np.array([120.3, 45.5, 3.0])  # 120.3 is off the 2^-10 lattice

CALLS = {
    "laplace_dp": lambda **kw: laplace_dp(VALS, **{"sensitivity": 1, "epsilon": 1, **kw}),
    "laplace_gp": lambda **kw: laplace_gp(VALS, **{"eps": 0.01, **kw}),
    "planar_laplace": lambda **kw: planar_laplace(PTS, **{"eps": 0.01, **kw}),
    "gaussian_zcdp": lambda **kw: gaussian_zcdp(VALS, **{"l2_sensitivity": 1, "rho": 0.5, **kw}),
    "gaussian_cgp": lambda **kw: gaussian_cgp(PTS, **{"rho": 5e-5, **kw}),
}

BAD = [
    ("laplace_dp", {"epsilon": float("nan")}, "epsilon"),
    ("laplace_dp", {"epsilon": 0}, "epsilon"),
    ("laplace_dp", {"epsilon": 1000}, "epsilon"),
    ("laplace_dp", {"sensitivity": float("inf")}, "sensitivity"),
    ("laplace_dp", {"sensitivity": -1}, "sensitivity"),
    ("laplace_dp", {"integer": True}, "integer"),  # VALS are not integers
    ("laplace_dp", {"draw_scale": 0.5}, "draw_scale"),
    ("laplace_gp", {"eps": float("-inf")}, "eps"),
    ("laplace_gp", {"eps": 2.0**-41}, "eps"),
    ("laplace_gp", {"K": 0}, "K"),
    ("laplace_gp", {"g": 0.001}, "g="),
    ("laplace_gp", {"r_min": float("nan")}, "r_min"),
    ("laplace_gp", {"lattice_exact": True}, "lattice_exact"),
    ("planar_laplace", {"eps": -0.01}, "eps"),
    ("planar_laplace", {"eps": 100, "g": 1}, "eps"),
    ("planar_laplace", {"K": float("nan")}, "K"),
    ("planar_laplace", {"lattice_exact": True}, "lattice_exact"),
    ("gaussian_zcdp", {"rho": float("nan")}, "rho"),
    ("gaussian_zcdp", {"rho": 0}, "rho"),
    ("gaussian_zcdp", {"l2_sensitivity": 0}, "l2_sensitivity"),
    ("gaussian_zcdp", {"integer": True}, "integer"),
    ("gaussian_cgp", {"rho": float("inf")}, "rho"),
    ("gaussian_cgp", {"rho": -5e-5}, "rho"),
    ("gaussian_cgp", {"rho": 1e12}, "rho"),
    ("gaussian_cgp", {"g": 3}, "g="),
    ("gaussian_cgp", {"lattice_exact": True}, "lattice_exact"),
]


@pytest.mark.parametrize(("fn", "kw", "match"), BAD)
def test_bad_parameters_raise_before_any_bit(fn, kw, match):
    with pytest.raises(InvalidInputError, match=match):
        CALLS[fn](rng=RaisingBits(), **kw)


@pytest.mark.parametrize("fn", list(CALLS))
def test_raising_bits_really_raise_when_used(fn):
    # negative control for the test above: valid parameters do reach the BitSource
    with pytest.raises(AssertionError, match="a bit was drawn"):
        CALLS[fn](rng=RaisingBits())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: laplace_gp([1.0, np.nan], eps=0.01, rng=r), "values has 1 NaN"),
        (lambda r: planar_laplace([[0.0, np.inf]], eps=0.01, rng=r), "points has 1 NaN"),
        (lambda r: gaussian_cgp([[0.0, 1.0], [np.nan, 2]], rho=1e-4, rng=r), "points"),
        (lambda r: laplace_dp([np.nan], sensitivity=1, epsilon=1, rng=r), "values"),
        (lambda r: gaussian_zcdp(["a"], l2_sensitivity=1, rho=1, rng=r), "numeric"),
        (lambda r: planar_laplace([1.0, 2.0], eps=0.01, rng=r), "shape"),
        (lambda r: planar_laplace(np.zeros((2, 5)), eps=0.01, rng=r), "2..4"),
        (lambda r: gaussian_cgp(np.zeros((2, 5)), rho=1e-4, rng=r), "1..4"),
        (lambda r: laplace_gp(np.zeros((2, 2)), eps=0.01, rng=r), "shape"),
        (lambda r: laplace_gp([2.0**43], eps=0.01, rng=r), "2\\*\\*52"),
        (lambda r: gaussian_zcdp([1, 2], l2_sensitivity=1, rho=1e-30, integer=True, rng=r), "rho"),
    ],
)
def test_bad_inputs_raise_before_any_bit(call, match):
    with pytest.raises(InvalidInputError, match=match):
        call(RaisingBits())


def test_error_messages_say_nothing_was_charged():
    with pytest.raises(InvalidInputError, match="Nothing was charged"):
        planar_laplace(PTS, eps=float("nan"), rng=RaisingBits())


# ---------------------------------------------------------------- guarantees


@pytest.mark.parametrize(
    ("fn", "kw", "kind", "amount", "metric"),
    [
        ("laplace_dp", {"epsilon": 0.1}, "dp", F(1, 10), "hamming"),
        ("laplace_dp", {"epsilon": F(1, 3)}, "dp", F(1, 3), "hamming"),
        ("laplace_gp", {"eps": 0.003}, "gp", F(3, 1000), ("floor", F(1))),
        ("laplace_gp", {"eps": 0.01, "draw_scale": 4}, "gp", F(1, 100), ("floor", F(1))),
        ("planar_laplace", {"eps": 0.01, "r_min": 2}, "gp", F(1, 100), ("floor", F(2))),
        ("planar_laplace", {"eps": 1e-5}, "gp", F(1, 10**5), ("floor", F(8))),
        ("gaussian_zcdp", {"rho": 0.125}, "zcdp", F(1, 8), "hamming"),
        ("gaussian_cgp", {"rho": 2e-6}, "cgp", F(1, 500000), ("floor", F(1))),
        ("gaussian_cgp", {"rho": 1e-11}, "cgp", F(1, 10**11), ("floor", F(16))),
    ],
)
def test_guarantee_is_exactly_the_request(fn, kw, kind, amount, metric):
    with pytest.warns(GpframeWarning) if kw.get("rho") == 1e-11 or kw.get("eps") == 1e-5 else _no():
        r = CALLS[fn](rng=seeded_rng(1), **kw)
    assert isinstance(r, Released) and isinstance(r.guarantee, Guarantee)
    assert r.guarantee.kind == kind
    assert r.guarantee.amount == amount and isinstance(r.guarantee.amount, Fraction)
    assert r.guarantee.metric == metric
    assert "docs/noise.md" in r.guarantee.spec


class _no:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_coarsening_is_recorded_in_noise_and_metric():
    with pytest.warns(GpframeWarning, match="100 km"):
        r = planar_laplace(PTS, eps=1e-5, rng=seeded_rng(2))
    assert r.g == F(1, 128) and r.noise["coarsen"] == 8 and r.noise["r_min"] == 8
    assert r.guarantee.metric == ("floor", F(8))


def test_lattice_exact_mode_uses_euclidean_metric_and_no_snapping_term():
    x = np.array([[1.0, 2.5], [0.0, -3.0]])  # multiples of 2^-10
    r = planar_laplace(x, eps=0.01, lattice_exact=True, rng=seeded_rng(3))
    assert r.guarantee.metric == "euclidean" and "r_min" not in r.noise
    assert r.noise["a"] == round_down_float(F(1, 100) * G)  # εg/K rounded down to a float
    r = gaussian_cgp(x, rho=5e-5, lattice_exact=True, rng=seeded_rng(3))
    assert r.noise["sigma2"] == (100 * 1024) ** 2 and r.guarantee.metric == "euclidean"
    r = laplace_gp(x[:, 0], eps=0.01, lattice_exact=True, rng=seeded_rng(3))
    assert r.noise["lam"] == F(1, 102400)


def test_noise_parameters_match_the_rows():
    r = laplace_dp([3, 4], sensitivity=2, epsilon=1, integer=True, rng=seeded_rng(4))
    assert r.g == 1 and r.noise["lam"] == F(1, 2) and r.noise["scale"] == 2
    r = laplace_gp(VALS, eps=0.01, K=2, rng=seeded_rng(4))
    assert r.noise["lam"] == F(1, 100) * G / (2 + G)
    r = gaussian_cgp(VALS, rho=5e-5, rng=seeded_rng(4))  # 1-D value: σ_g² = 1025² / (2ρ)
    assert r.noise["sigma2"] == 1025**2 * 10**4
    r = gaussian_zcdp([1.5, 2.25], l2_sensitivity=1, rho=0.5, rng=seeded_rng(4))
    assert r.g == F(1, 2**16) and r.noise["sigma2"] == (2**16 + 1) ** 2
    r = gaussian_cgp(PTS, rho=5e-5, K=sqrt_up(2), rng=seeded_rng(4))
    assert abs(float(r.noise["scale"]) - 100 * (2**0.5 + 2**0.5 / 1024)) < 1e-6


# ---------------------------------------------------------------- outputs


@pytest.mark.parametrize("fn", list(CALLS))
def test_outputs_are_exact_lattice_points(fn):
    r = CALLS[fn](rng=seeded_rng(5))
    y = np.asarray(r)
    g = float(r.g)
    assert y.dtype == np.float64 and np.isfinite(y).all()
    assert (np.rint(y / g) * g == y).all()
    src = PTS if fn in ("planar_laplace", "gaussian_cgp") else VALS
    assert y.shape == src.shape


@pytest.mark.parametrize("fn", list(CALLS))
def test_same_seed_same_output(fn):
    a = CALLS[fn](rng=seeded_rng(6)).values
    b = CALLS[fn](rng=seeded_rng(6)).values
    c = CALLS[fn](rng=seeded_rng(7)).values
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("fn", "sampler"),
    [
        ("laplace_dp", "discrete_laplace"),
        ("laplace_gp", "discrete_laplace"),
        ("planar_laplace", "lattice_laplace"),
        ("gaussian_zcdp", "discrete_gaussian"),
        ("gaussian_cgp", "discrete_gaussian_nd"),
    ],
)
def test_one_sampler_call_per_release(monkeypatch, fn, sampler):
    real = getattr(noise_pkg, sampler)
    calls = []

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(noise_pkg, sampler, counting)
    CALLS[fn](rng=seeded_rng(8))
    assert len(calls) == 1


def test_empty_input_returns_empty_release():
    r = planar_laplace(np.zeros((0, 2)), eps=0.01, rng=RaisingBits())
    assert r.values.shape == (0, 2)
    r = laplace_gp([], eps=0.01, rng=RaisingBits())
    assert r.values.shape == (0,)


def test_scalar_statistic_and_vector_rows():
    r = laplace_dp(7, sensitivity=1, epsilon=1, integer=True, rng=seeded_rng(9))
    assert r.values.shape == () and float(r.values) == np.rint(float(r.values))
    r = laplace_dp(np.zeros((4, 3)), sensitivity=1, epsilon=1, rng=seeded_rng(9))
    assert r.values.shape == (4, 3) and r.noise["width"] == 2**20 + 3
    r = gaussian_zcdp(np.zeros((4, 2)), l2_sensitivity=1, rho=0.5, rng=seeded_rng(9))
    assert r.values.shape == (4, 2)


def test_integer_statistic_released_on_integers():
    r = laplace_dp(np.arange(100), sensitivity=1, epsilon=0.5, integer=True, rng=seeded_rng(10))
    assert (r.values == np.rint(r.values)).all()


# ---------------------------------------------------------------- warnings


def test_warns_when_location_noise_below_one_metre():
    with pytest.warns(GpframeWarning, match="below 1 m"):
        planar_laplace(PTS, eps=10, rng=seeded_rng(11))
    with pytest.warns(GpframeWarning, match="below 1 m"):
        gaussian_cgp(PTS, rho=10, rng=seeded_rng(11))
    with pytest.warns(GpframeWarning, match="below 1 m"):
        laplace_gp(VALS, eps=5, rng=seeded_rng(11))


def test_warns_when_location_noise_above_100_km():
    with pytest.warns(GpframeWarning, match="100 km"):
        gaussian_cgp(PTS, rho=1e-11, rng=seeded_rng(12))
    with pytest.warns(GpframeWarning, match="100 km"):
        laplace_gp(VALS, eps=1e-6, rng=seeded_rng(12))


def test_warning_points_at_the_caller():
    with pytest.warns(GpframeWarning) as rec:
        planar_laplace(PTS, eps=10, rng=seeded_rng(13))
    assert rec[0].filename == __file__


def test_seeded_source_refused_outside_tests():
    from gpframe.errors import InsecureRandomnessError
    from gpframe.testing import seeded_disabled

    with seeded_disabled(), pytest.raises(InsecureRandomnessError):
        planar_laplace(PTS, eps=0.01, rng=seeded_rng(1))


def test_numpy_generator_refused():
    with pytest.raises(InvalidInputError, match="BitSource"):
        planar_laplace(PTS, eps=0.01, rng=np.random.default_rng(0))
