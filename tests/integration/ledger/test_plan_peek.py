"""``plan.next_allocations()`` is a look, not a step (docs/ledger.md).

Peeking at the next allocations, even twice, then running the query with ``allocations=plan`` gives
the same allocations and charges as running it without peeking; a query that ran with drawn
allocations but was not recorded is still caught.
"""

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.frame.range_count import range_count
from gpframe.ledger import Session
from gpframe.ledger.plan import plan
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
BOX = shapely.box(495_000, 4_495_000, 505_000, 4_505_000)


def _pings(n_users=60, seed=0):
    rng = np.random.default_rng(seed)  # true points only, never noise
    return pd.DataFrame(
        {
            "boat": np.arange(n_users),
            "x": 500_000 + rng.uniform(-12_000, 12_000, n_users),
            "y": 4_500_000 + rng.uniform(-12_000, 12_000, n_users),
        }
    )


def _sequence(peek: bool):
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    b = df.geopriv(s, user="boat", x="x", y="y", crs=CRS)
    p = plan(s, total=4e-4, queries=3, schedule="even", users=df.boat.unique())
    allocs, charges, peeks = [], [], []
    for t in range(3):
        if peek:
            first = p.next_allocations()
            second = p.next_allocations(df.boat)
            assert p.t == t  # looking took no step
            peeks.append((first, second))
        res = range_count(b, BOX, allocations=p, rng=seeded_rng(50 + t))
        allocs.append(res.allocations.astype(float).to_numpy())
        charges.append(res.charges.astype(float).to_numpy())
    assert p.t == 3
    return allocs, charges, peeks, s.spent().to_numpy()


def test_peeking_twice_then_running_equals_not_peeking():
    a0, c0, _, spent0 = _sequence(peek=False)
    a1, c1, peeks, spent1 = _sequence(peek=True)
    for t in range(3):
        np.testing.assert_array_equal(a0[t], a1[t])
        np.testing.assert_array_equal(c0[t], c1[t])
        first, second = peeks[t]
        # what was looked at is what the query got
        np.testing.assert_array_equal(first.astype(float).to_numpy(), a1[t])
        np.testing.assert_array_equal(second.astype(float).to_numpy(), a1[t])
    np.testing.assert_array_equal(spent0, spent1)
    # later queries re-use savings: the peek did not disturb the pool
    assert (a1[2] > a1[0]).any()


def test_unrecorded_query_is_still_caught_and_cancel_redraws():
    df = _pings()
    s = Session(budget=gp.CGP(rho=1e-3))
    b = df.geopriv(s, user="boat", x="x", y="y", crs=CRS)
    p = plan(s, total=4e-4, queries=3, users=df.boat.unique())
    a = p.next_allocations()
    range_count(b, BOX, allocations=a, rng=seeded_rng(60))  # ran, but not recorded
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=r"plan.record\(result\)"):
        p.next_allocations()
    assert s.ledger.snapshot() == before
    p.cancel()
    assert p.t == 0
    again = p.next_allocations()
    assert len(again) == len(a)


def test_plain_plan_cancel_restores_the_step():
    from fractions import Fraction

    from gpframe.accounting.schedules import Plan

    inner = Plan(1, queries=3, schedule="linear")
    a = inner.next_allocations()
    inner.cancel()
    assert inner.t == 0 and inner.pool[0] == Fraction(0)
    assert list(inner.next_allocations()) == list(a)
