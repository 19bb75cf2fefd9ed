"""Trajectories (several rows per user) in the one-point operations.

See docs/operations/range_count.md.

``range_count``, ``kde``, ``kde_raster`` and ``nearest_users`` read one point per user; a trajectory
is refused with a message that names the operation that was called and suggests only rules that
work on the frame at hand; the charge of a rule-selected point is the one-point charge.
"""

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
BOX = shapely.box(495_000, 4_495_000, 505_000, 4_505_000)
CENTRE = shapely.Point(500_000, 4_500_000)


def _tracks(n_users=40, per_user=3, seed=0, hour=False, time="time"):
    rng = np.random.default_rng(seed)  # true points only, never noise
    n = n_users * per_user
    df = pd.DataFrame(
        {
            "boat": np.repeat(np.arange(n_users), per_user),
            "x": 500_000 + rng.uniform(-8_000, 8_000, n),
            "y": 4_500_000 + rng.uniform(-8_000, 8_000, n),
            "speed": rng.uniform(0, 20, n),
        }
    )
    if time:
        df[time] = pd.Timestamp("2020-12-01", tz="UTC") + pd.to_timedelta(
            np.tile(np.arange(per_user), n_users), unit="h"
        )
    if hour:
        df["hour"] = np.tile(np.arange(per_user), n_users)
    return df


CALLS = {
    "range_count": lambda b: b.range_count(BOX, rho=1e-4),
    "kde": lambda b: b.kde(CENTRE, bandwidth_m=3_000, rho=1e-4),
    "kde_raster": lambda b: b.kde_raster(bandwidth_m=3_000, cell_m=1_000, rho=1e-4),
    "nearest_users": lambda b: b.nearest_users(CENTRE, 3, rho=1e-4),
}


@pytest.mark.parametrize("op", sorted(CALLS))
def test_refusal_names_the_operation_and_only_existing_rules(op):
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _tracks(time="ts").geopriv(s, user="boat", x="x", y="y", crs=CRS)
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError) as info:
        CALLS[op](b)
    msg = str(info.value)
    assert f"; {op} reads one point per user" in msg
    others = [o for o in CALLS if o != op and not op.startswith(o)]
    assert not any(f"{o} reads" in msg for o in others)
    assert "gp.Last('ts')" in msg and "gp.First('ts')" in msg  # the frame's own time column
    assert "'hour'" not in msg and "'time'" not in msg and "speed" not in msg and "'x'" not in msg
    assert "reduce='last'" in msg and msg.endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_refusal_suggests_a_label_column_only_when_there_is_one():
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _tracks(hour=True, time=None).geopriv(s, user="boat", x="x", y="y", crs=CRS)
    with pytest.raises(gp.InvalidInputError) as info:
        b.kde_raster(bandwidth_m=3_000, cell_m=1_000, rho=1e-4)
    msg = str(info.value)
    assert "('hour', value)" in msg and "gp.Last" not in msg  # no datetime column here


def test_last_without_a_time_column_names_no_missing_column():
    s = Session(budget=gp.CGP(rho=1e-3))
    b = _tracks(time=None).geopriv(s, user="boat", x="x", y="y", crs=CRS)
    with pytest.raises(gp.InvalidInputError, match=r"pd\.to_datetime") as info:
        b.range_count(BOX, rho=1e-4, component="last")
    assert "gp.Last('time')" not in str(info.value)


@pytest.mark.parametrize("op", sorted(CALLS))
def test_last_fix_charges_what_one_point_data_charges(op):
    df = _tracks()
    last = df.groupby("boat").tail(1)
    spent = []
    for frame, comp in ((df, gp.Last("time")), (last, None)):
        s = Session(budget=gp.CGP(rho=1e-3))
        b = frame.geopriv(s, user="boat", x="x", y="y", crs=CRS)
        kw = {"rho": 1e-4, "component": comp, "rng": seeded_rng(1)}
        if op == "range_count":
            b.range_count(BOX, **kw)
        elif op == "kde":
            b.kde(CENTRE, bandwidth_m=3_000, **kw)
        elif op == "kde_raster":
            b.kde_raster(bandwidth_m=3_000, cell_m=1_000, **kw)
        else:
            b.nearest_users(CENTRE, 3, **kw)
        spent.append(s.spent().sort_index().to_numpy())
    np.testing.assert_array_equal(spent[0], spent[1])
    assert spent[0].max() <= 1e-4 + 1e-15
