"""T-PARAM (R8): bad parameters raise GpframeError subclasses before any bit is drawn."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe import testing
from gpframe.errors import GpframeError, InvalidInputError
from gpframe.mechanisms import noise


def _explode(n):
    raise AssertionError("a bit was drawn before parameter validation")


def ExplodingSource():
    """A BitSource that fails the test if anything is read from it."""
    return testing.callback_rng(_explode, name="exploding")


BAD_SCALARS = [float("nan"), float("inf"), -float("inf"), 0, -1, Fraction(-1, 3), "1", None]

CASES = (
    [("lam", v, lambda v, b: noise.discrete_laplace(v, 10, b)) for v in BAD_SCALARS]
    + [("lam", v, lambda v, b: noise.discrete_laplace_design_a(v, 10, b)) for v in BAD_SCALARS]
    + [
        ("lam", Fraction(1, 2**41), lambda v, b: noise.discrete_laplace(v, 10, b)),
        ("lam", 2**10 + 1, lambda v, b: noise.discrete_laplace(v, 10, b)),
    ]
    + [("sigma2", v, lambda v, b: noise.discrete_gaussian(v, 10, b)) for v in BAD_SCALARS]
    + [
        ("sigma2", Fraction(1, 2**9), lambda v, b: noise.discrete_gaussian(v, 10, b)),
        ("sigma2", 2**48 + 1, lambda v, b: noise.discrete_gaussian(v, 10, b)),
        ("sigma2", float("nan"), lambda v, b: noise.discrete_gaussian_nd(v, 2, 10, b)),
    ]
    + [("a", v, lambda v, b: noise.lattice_laplace(v, 2, 10, b)) for v in BAD_SCALARS]
    + [
        ("a", Fraction(1, 2**25), lambda v, b: noise.lattice_laplace(v, 2, 10, b)),
        ("a", 17, lambda v, b: noise.lattice_laplace(v, 2, 10, b)),
    ]
    + [
        ("d", d, lambda v, b: noise.lattice_laplace(Fraction(1, 8), v, 10, b))
        for d in (0, 5, 2.0, True, "2")
    ]
    + [("d", 5, lambda v, b: noise.discrete_gaussian_nd(Fraction(4), v, 10, b))]
    + [
        ("n", v, lambda v, b: noise.discrete_laplace(Fraction(1, 3), v, b))
        for v in (-1, 1.5, "3", None)
    ]
    + [
        ("n", -2, lambda v, b: noise.lattice_laplace(Fraction(1, 8), 2, v, b)),
        ("n", -2, lambda v, b: noise.discrete_gaussian(Fraction(4), v, b)),
    ]
)


@pytest.mark.parametrize(("name", "value", "call"), CASES)
def test_bad_parameter_raises_before_any_bit(name, value, call):
    with pytest.raises(GpframeError, match=f"{name}="):
        call(value, ExplodingSource())


def test_zero_samples_draw_nothing():
    src = ExplodingSource()
    assert noise.discrete_laplace(Fraction(1, 3), 0, src).shape == (0,)
    assert noise.discrete_gaussian(Fraction(4), 0, src).shape == (0,)
    assert noise.lattice_laplace(Fraction(1, 8), 3, 0, src).shape == (0, 3)


def test_input_too_large_for_lattice_raises():
    with pytest.raises(InvalidInputError, match=r"\|lon / g\| >= 2\*\*52"):
        noise.snap(np.array([2.0**42]), Fraction(1, 2**10), "lon")


def test_numpy_scalars_and_floats_are_converted_exactly():
    out = noise.discrete_laplace(np.float64(0.25), 5, None)
    assert out.shape == (5,)
    assert noise.discrete_gaussian(np.int64(9), 3, None).shape == (3,)
    assert noise.round_sigma2(Fraction(2**16) + Fraction(1, 7)) == 2**16 + 1
