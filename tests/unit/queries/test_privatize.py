from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.queries.privatize import (
    allocations,
    check_amount,
    per_point_amounts,
    privatize_points,
)
from gpframe.testing import seeded_rng


def _data(counts):
    codes = np.repeat(np.arange(len(counts)), counts)
    xy = np.column_stack([np.arange(codes.size, dtype=float) * 10.0, np.zeros(codes.size)])
    return xy, codes


def test_per_user_split_sums_exactly_to_the_amount():
    """concentrated-geo-privacy.md §6.1-§6.2: n parts of rho/n, never more than rho."""
    parts = per_point_amounts(np.array([1, 3, 7]), Fraction(1, 10), "user")
    for n, p in zip([1, 3, 7], parts, strict=True):
        assert p * n == Fraction(1, 10)


def test_allocations_per_point_are_n_times_amount():
    assert allocations(np.array([2, 5]), Fraction(1, 100), "point") == [
        Fraction(1, 50),
        Fraction(1, 20),
    ]


@pytest.mark.parametrize("kind", ["gp", "cgp"])
def test_per_user_charges_amount_and_groups_calls_by_point_count(kind):
    xy, codes = _data([2, 2, 5, 1])
    out = privatize_points(
        xy, codes, 4, kind=kind, amount=Fraction(1, 1000), per="user", rng=seeded_rng(1)
    )
    assert out.charges == [Fraction(1, 1000)] * 4
    assert out.n_calls == 3  # n = 1, 2, 5
    assert out.released.all() and np.isfinite(out.xy).all()


@pytest.mark.parametrize("kind", ["gp", "cgp"])
def test_per_point_charges_n_times_amount_in_one_call(kind):
    xy, codes = _data([2, 2, 5, 1])
    out = privatize_points(
        xy, codes, 4, kind=kind, amount=Fraction(1, 1000), per="point", rng=seeded_rng(2)
    )
    assert out.charges == [
        Fraction(2, 1000),
        Fraction(2, 1000),
        Fraction(5, 1000),
        Fraction(1, 1000),
    ]
    assert out.n_calls == 1


def test_scale_max_divides_eps_and_charges_ground_amount():
    """secure-noise.md §7.4(f): the mechanism runs at eps/scale_max, the charge is eps."""
    xy, codes = _data([3])
    out = privatize_points(
        xy,
        codes,
        1,
        kind="gp",
        amount=Fraction(1, 100),
        per="user",
        scale_max=1.25,
        rng=seeded_rng(3),
    )
    assert out.guarantees[0].amount == Fraction(1, 300) / Fraction(5, 4)
    assert out.charges == [Fraction(1, 100)]


def test_not_admitted_users_get_nan_and_zero_charge():
    xy, codes = _data([2, 3])
    out = privatize_points(
        xy,
        codes,
        2,
        kind="cgp",
        amount=Fraction(1, 1000),
        admitted=np.array([True, False]),
        rng=seeded_rng(4),
    )
    assert out.released.tolist() == [True, True, False, False, False]
    assert np.isnan(out.xy[2:]).all()
    assert out.charges == [Fraction(1, 1000), Fraction(0)]
    assert np.isnan(out.max_error_m[1]) and out.max_error_m[0] > 0


def test_same_seed_gives_identical_points():
    xy, codes = _data([4, 4])
    a = privatize_points(xy, codes, 2, kind="gp", amount=Fraction(1, 10), rng=seeded_rng(5))
    b = privatize_points(xy, codes, 2, kind="gp", amount=Fraction(1, 10), rng=seeded_rng(5))
    assert np.array_equal(a.xy, b.xy)


def test_error_bound_grows_with_point_count_as_spec_6_2():
    """CGP Basic: per-user bound ~ sqrt(n ln(n/beta)/rho) (continuous oracle, within 1 %)."""
    xy, codes = _data([1, 100])
    out = privatize_points(
        xy, codes, 2, kind="cgp", amount=Fraction(1, 10_000), beta=0.05, rng=seeded_rng(6)
    )
    for n, bound in zip([1, 100], out.max_error_m, strict=True):
        nominal = np.sqrt(n * np.log(n / 0.05) / 1e-4)
        assert nominal * 0.999 < bound < nominal * 1.01


@pytest.mark.parametrize(
    ("kind", "per", "amount"),
    [
        ("dp", "user", Fraction(1)),
        ("gp", "row", Fraction(1)),
        ("gp", "user", Fraction(1000)),
        ("cgp", "user", Fraction(-1)),
    ],
)
def test_bad_parameters_raise_invalid_input(kind, per, amount):
    with pytest.raises(InvalidInputError, match="Nothing was charged"):
        check_amount(kind, per, amount)
