"""The entry-point checks every operation shares: failure probabilities and rho=/eps=."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.accounting.amounts import metric_amount, probability
from gpframe.errors import InvalidInputError


@pytest.mark.parametrize("beta", [0.05, 1e-300, Fraction(1, 3), np.float64(0.5), np.float32(0.25)])
def test_probability_accepts_reals_strictly_inside(beta):
    assert probability(beta) == float(beta)


@pytest.mark.parametrize("beta", [0, 1, 0.0, 1.0, -0.1, True, False, float("nan"), float("inf"),
                                  10**400, "0.05", None, [0.05]])  # fmt: skip
def test_probability_refuses_and_names_the_argument(beta):
    with pytest.raises(InvalidInputError, match=r"^gamma=.*probability in \(0, 1\).*charged\.$"):
        probability(beta, "gamma")


def test_metric_amount_kinds_and_exact_values():
    assert metric_amount(None, 0.1, example="x") == ("gp", Fraction(1, 10))
    assert metric_amount(1e-5, None, example="x", filter_kind="cgp", same_kind=True) == (
        "cgp", Fraction(1, 100000))  # fmt: skip
    # a GP mechanism may run on a CGP filter unless the operation needs the same kind
    assert metric_amount(None, 0.1, example="x", filter_kind="cgp")[0] == "gp"


@pytest.mark.parametrize(
    ("rho", "eps", "kw", "message"),
    [
        (None, None, {}, r"exactly one of eps=.*Example: \.op\(rho=1\)"),
        (1e-4, 0.1, {}, "exactly one of eps"),
        (1e-4, None, {"filter_kind": "gp"}, "pure GP: pass eps"),
        (None, 0.1, {"filter_kind": "cgp", "same_kind": True}, "CGP: pass rho"),
        (True, None, {}, "rho=True must be a number > 0"),
        (None, float("nan"), {}, "not finite"),
        (None, -1.0, {}, "must be > 0"),
    ],
)
def test_metric_amount_refusals(rho, eps, kw, message):
    with pytest.raises(InvalidInputError, match=message) as err:
        metric_amount(rho, eps, example=".op(rho=1)", **kw)
    assert str(err.value).endswith("Nothing was charged.")
