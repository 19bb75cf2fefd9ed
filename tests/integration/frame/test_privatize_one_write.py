"""privatize through the accessor: reservation and charge in one durable write.

A privatize call's charge is its allocation, known before any noise (each point's guarantee is
its exact share of the amount), so the accessor runs through the driver's prepaid path: the
reservation's transaction also commits the charge (``docs/ledger.md``), as the SQL face's
batches do. These tests pin that the charge is still exactly the documented one for every
kind of call, that it is durable before the noise is drawn, and that a call with a user whose
amount overflows the ledger's units keeps the reserve-then-charge path.
"""

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"


def _frame(counts: list[int]) -> pd.DataFrame:
    rng = np.random.default_rng(0)  # true points only, never noise
    users = np.repeat(np.arange(len(counts)), counts)
    return pd.DataFrame(
        {
            "u": users,
            "x": 500_000 + rng.uniform(-5_000, 5_000, users.size),
            "y": 4_500_000 + rng.uniform(-5_000, 5_000, users.size),
        }
    )


def _lonlat(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(
        {"u": np.arange(n), "lon": rng.uniform(-74.2, -73.8, n), "lat": rng.uniform(40.6, 40.9, n)}
    )


def _audit_ops(s: Session) -> list[str]:
    return [row[2] for row in s.ledger.store.audit()]


CASES = [
    # (budget, amount keyword, per, counts, expected charge of each user)
    (gp.CGP(rho=1.0), {"rho": 1e-4}, "user", [1, 3, 7], [Fraction(1e-4)] * 3),
    (gp.CGP(rho=1.0), {"rho": 1e-4}, "point", [1, 3, 7], [Fraction(1e-4) * n for n in (1, 3, 7)]),
    (gp.GP(eps=1.0), {"eps": 0.01}, "user", [2, 5], [Fraction(0.01)] * 2),
    (gp.GP(eps=1.0), {"eps": 0.01}, "point", [2, 5], [Fraction(0.01) * n for n in (2, 5)]),
    # GP on a CGP budget: eps²/2 per eps-GP part
    (gp.CGP(rho=1.0), {"eps": 0.01}, "point", [1, 4],
     [Fraction(0.01) ** 2 / 2 * n for n in (1, 4)]),
]  # fmt: skip


@pytest.mark.parametrize(("budget", "amount", "per", "counts", "expected"), CASES)
def test_one_transaction_and_the_documented_charge(budget, amount, per, counts, expected):
    s = Session(budget=budget)
    g = s.ledger._group
    t0 = g.transactions
    out = (
        _frame(counts)
        .geopriv(s, user="u", crs=CRS, x="x", y="y")
        .privatize(**amount, per=per, rng=seeded_rng(3), progress=False)
    )
    assert g.transactions - t0 == 1  # reserve and charge in one durable write
    assert _audit_ops(s)[-2:] == ["reserve", "charge"]
    assert s.ledger.verify()["reservations"] == 0
    spent = s.spent_exact(list(range(len(counts)))).tolist()
    # the ledger keeps each charge in its units (10**-15 of the filter's unit)
    assert all(abs(a - e) < Fraction(1, 10**15) for a, e in zip(spent, expected, strict=True))
    res = out.attrs["geopriv"]
    assert res.n_charged == len(counts) and bool(out.geometry.notna().all())
    assert res.charges.tolist() == [float(a) for a in spent]


def test_projection_scale_and_exclusion_keep_the_charge_exact():
    # lon/lat input projected to a named UTM zone (scale_max > 1) and a user who cannot pay
    df = _lonlat(50)
    s = Session(budget=gp.CGP(rho=1e-3))
    s.set_budget([7], gp.CGP(rho=1e-6))  # below the call's amount: left out, charged nothing
    g = s.ledger._group
    t0 = g.transactions
    out = df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs=CRS).privatize(
        rho=1e-4, rng=seeded_rng(5), progress=False
    )
    assert g.transactions - t0 == 1
    res = out.attrs["geopriv"]
    assert res.params["scale_max"] > 1.0
    assert res.n_excluded == 1 and res.n_charged == 49
    spent = s.spent_exact(list(range(50))).tolist()
    assert spent[7] == 0 and out.geometry.iloc[[7]].isna().all()
    assert {a for i, a in enumerate(spent) if i != 7} == {Fraction(1, 10_000)}


def test_a_user_beyond_the_ledger_units_keeps_reserve_then_charge():
    # 0.5 per point for 20,000 points is 10,000: beyond the ledger's int64 units, so that user
    # is reserved at the maximum (never admitted) and released nothing
    df = _frame([1, 20_000])
    s = Session(budget=gp.GP(eps=1.0))
    g = s.ledger._group
    t0 = g.transactions
    out = df.geopriv(s, user="u", crs=CRS, x="x", y="y").privatize(
        eps=0.5, per="point", rng=seeded_rng(2), progress=False
    )
    assert g.transactions - t0 == 2  # reserve, then charge what was released
    assert s.spent_exact([0, 1]).tolist() == [Fraction(1, 2), 0]
    assert out.attrs["geopriv"].n_excluded == 1
    assert bool(out.geometry.iloc[1:].isna().all()) and out.geometry.iloc[[0]].notna().all()
