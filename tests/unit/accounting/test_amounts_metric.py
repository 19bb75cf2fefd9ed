"""metric_amount: the one rho= / eps= check of both faces (gpframe.accounting.amounts)."""

from fractions import Fraction

import pytest

from gpframe.accounting.amounts import metric_amount
from gpframe.errors import InvalidInputError


def test_reads_the_amount_exactly_and_names_the_mechanism():
    assert metric_amount(1e-4, None, "cgp") == ("cgp", Fraction(1, 10_000))
    assert metric_amount(None, 0.1, "gp") == ("gp", Fraction(1, 10))
    # a GP release on a CGP filter (charged eps²/2 there) where the operation allows it
    assert metric_amount(None, 0.5, "cgp") == ("gp", Fraction(1, 2))
    # an int beyond the float range is finite: read exactly, not refused as "not finite"
    assert metric_amount(10**400, None, "cgp") == ("cgp", Fraction(10**400))


@pytest.mark.parametrize(
    ("rho", "eps", "filters", "kw", "match"),
    [
        (1e-4, 0.1, "cgp", {}, "exactly one of rho= .* Example: rho=1e-5"),
        (None, None, "gp", {"example": ".kde(at, rho=1e-5)"}, r"Example: \.kde\(at, rho=1e-5\)"),
        (1e-4, None, "gp", {}, "pure GP: pass eps="),
        (None, 0.1, "cgp", {"gp_on_cgp": False}, "filters are CGP: pass rho="),
        (-1.0, None, "cgp", {}, r"rho=-1.0 must be finite and > 0 \(CGP, per m²\)"),
        (0, None, "cgp", {}, "rho=0 must be finite and > 0"),
        (None, float("nan"), "gp", {}, r"eps=nan must be finite and > 0 \(GP, per m\)"),
        (None, float("inf"), "gp", {}, "eps=inf must be finite"),
        (True, None, "cgp", {}, "is a bool"),
        ("ten", None, "cgp", {}, "not a number"),
    ],
)
def test_refuses_with_a_message_that_says_how_to_fix_it(rho, eps, filters, kw, match):
    with pytest.raises(InvalidInputError, match=match) as info:
        metric_amount(rho, eps, filters, **kw)
    assert str(info.value).endswith("Nothing was charged.")


def test_a_bad_amount_is_named_before_the_filter_mismatch():
    # both faces report the amount first: eps=0 on a CGP-only operation is a bad amount
    with pytest.raises(InvalidInputError, match=r"eps=0\.0 must be finite"):
        metric_amount(None, 0.0, "cgp", gp_on_cgp=False)
