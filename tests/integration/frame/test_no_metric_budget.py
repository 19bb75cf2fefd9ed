"""A session without a metric budget is refused by every metric operation, naming it, before the
ledger is touched (one check: ``gpframe.ledger.charges.filter_kind``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.errors import InvalidInputError

BOX = shapely.box(500_000, 4_500_000, 501_000, 4_501_000)
CALLS = {
    "privatize": lambda b: b.privatize(rho=1e-4),
    "range_count": lambda b: b.range_count(BOX, rho=1e-4),
    "kde": lambda b: b.kde([(500_500.0, 4_500_500.0)], bandwidth_m=500, rho=1e-4),
    "knn": lambda b: b.knn((500_500.0, 4_500_500.0), k=1, rho=1e-4),
    "convex_hull": lambda b: b.convex_hull(rho=1e-4),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_central_only_session_is_refused_by_name(name):
    rs = np.random.default_rng(0)  # test data only
    df = pd.DataFrame({"u": np.repeat(np.arange(5), 4),
                       "x": 500_000 + rs.uniform(0, 1_000, 20),
                       "y": 4_500_000 + rs.uniform(0, 1_000, 20)})  # fmt: skip
    s = gp.Session(central=gp.DP(epsilon=1.0))
    b = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="no metric budget") as info:
        CALLS[name](b)
    assert name in str(info.value) and "Nothing was charged" in str(info.value)
    assert s.ledger.snapshot() == before
