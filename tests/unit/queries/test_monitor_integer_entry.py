"""``integer=True`` with non-integer scores is refused at the entry point: the ledger is untouched.

The selection mechanisms check integrality themselves, but inside the reservation, where a refusal
still writes the reservation and its cancellation to the ledger. Scores known before the call are
checked first.
"""

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.queries import monitor


@pytest.mark.parametrize("values", [[1.5, 2, 3], np.array([1.0, 2.25]), pd.Series([4, 0.5])])
def test_report_noisy_max_refuses_non_integers_before_the_ledger(values):
    s = gp.Session(central=gp.DP(epsilon=5.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=r"integer=True but the value .* is not an integer"):
        monitor.report_noisy_max(s, values, users=[1, 2, 3], noise="laplace", epsilon=1,
                                 sensitivity=1, integer=True)  # fmt: skip
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("values", [[1.5, 2, 3], np.array([3.0, 8.0, 40.5])])
def test_above_threshold_refuses_non_integers_before_the_ledger(values):
    s = gp.Session(central=gp.DP(epsilon=5.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=r"integer=True but the value .* is not an integer"):
        monitor.above_threshold(s, values, 10, users=[1, 2, 3], epsilon=1, sensitivity=1,
                                integer=True)  # fmt: skip
    assert s.ledger.snapshot() == before


def test_integer_scores_still_run_and_charge():
    s = gp.Session(central=gp.DP(epsilon=5.0))
    res = monitor.report_noisy_max(s, [1, 2, 3], users=[1, 2, 3], noise="laplace", epsilon=1,
                                   sensitivity=1, integer=True)  # fmt: skip
    assert res.value in (0, 1, 2) and res.spent_at_most == 1.0
    res = monitor.above_threshold(s, np.array([3.0, 8.0, 40.0]), 10, users=[1, 2, 3], epsilon=1,
                                  sensitivity=1, integer=True)  # fmt: skip
    assert res.spent_at_most == 1.0


def test_lazy_values_are_still_checked_inside_the_run():
    """A zero-argument callable yields its value only in the run; the run refuses it there."""
    s = gp.Session(central=gp.DP(epsilon=5.0))
    with pytest.raises(InvalidInputError, match="not an integer"):
        monitor.above_threshold(s, [lambda: 1.5], 10, users=[1], epsilon=1, sensitivity=1,
                                integer=True)  # fmt: skip
