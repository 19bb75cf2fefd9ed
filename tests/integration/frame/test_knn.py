"""knn / convex_hull / nearest_users through the bound object ``df.geopriv(session, user=...)``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)
from gpframe.accounting.budgets import CGP, GP
from gpframe.errors import InvalidInputError
from gpframe.frame import knn as kf
from gpframe.frame.accessor import GeoPriv
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

HAS_ACCESSOR = all(hasattr(GeoPriv, m) for m in ("knn", "convex_hull", "nearest_users"))


@pytest.fixture
def pings():
    rs = np.random.default_rng(0)
    n = 600
    return pd.DataFrame(
        {
            "boat": np.repeat([1, 2, 3], n // 3),
            "x": 500_000 + rs.uniform(0, 3000, n),
            "y": 4_500_000 + rs.uniform(0, 3000, n),
        }
    )


def _bound(df, session):
    return df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")


def test_knn_rows_ranks_and_charges(pings):
    s = Session(budget=CGP(rho=1e-3))
    out = kf.knn(_bound(pings, s), (501_500.0, 4_501_500.0), 4, rho=1e-4, rng=seeded_rng(1))
    assert out.groupby("boat")["knn_rank"].apply(list).tolist() == [[1, 2, 3, 4]] * 3
    # k-PNN releases row labels: no coordinate, no geometry (the true points stay home)
    assert list(out.columns) == ["boat", "knn_rank"] and not hasattr(out, "crs")
    assert set(out.index) <= set(pings.index)
    assert s.spent().tolist() == [1e-4] * 3
    res = out.attrs["geopriv"]
    assert res.n_charged == 3 and res.error > 0
    assert [lab for u in (1, 2, 3) for lab in res.value[u]] == out.index.tolist()


def test_knn_gp_on_cgp_budget_costs_eps_squared_over_2(pings):
    s = Session(budget=CGP(rho=1e-3))
    kf.knn(_bound(pings, s), (501_500.0, 4_501_500.0), 1, eps=0.02, rng=seeded_rng(2))
    assert s.spent().tolist() == pytest.approx([2e-4] * 3)


def test_convex_hull_one_polygon_per_user_and_split(pings):
    s = Session(budget=CGP(rho=1e-2))
    g = kf.convex_hull(_bound(pings, s), rho=1e-3, rng=seeded_rng(3))
    assert g.index.tolist() == [1, 2, 3] and (g.geom_type == "Polygon").all()
    spend = g.attrs["geopriv"].params["spend"]
    assert sum(spend.values()) == pytest.approx(1e-3)
    assert s.spent().tolist() == [1e-3] * 3
    import matplotlib

    matplotlib.use("Agg")
    ax = g.attrs["geopriv"].plot()
    assert ax is not None


def test_nearest_users_saves_budget(pings):
    df = pings.groupby("boat").head(1).reset_index(drop=True)
    far = pd.DataFrame({"boat": [4, 5], "x": [560_000.0, 590_000.0], "y": [4_500_000.0] * 2})
    df = pd.concat([df, far], ignore_index=True)
    s = Session(budget=CGP(rho=1e-2))
    res = kf.nearest_users(_bound(df, s), (500_000.0, 4_500_000.0), 3, rho=1e-3, rng=seeded_rng(4))
    assert sorted(res.value) == [1, 2, 3]
    assert res.saved > 0 and s.spent().max() <= 1e-3


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda b: kf.knn(b, (np.nan, 0.0), 2, rho=1e-4), "point"),
        (lambda b: kf.knn(b, (501_000.0, 4_501_000.0), 0, rho=1e-4), "k=0"),
        (lambda b: kf.knn(b, (501_000.0, 4_501_000.0), 2), "exactly one"),
        (lambda b: kf.knn(b, (501_000.0, 4_501_000.0), 2, rho=1e-4, compat="x"), "compat"),
        (lambda b: kf.convex_hull(b, rho=1e-4, beta=1.5), "beta"),
        (lambda b: kf.convex_hull(b, rho=1e-4, k=0), "k=0"),
        (
            lambda b: kf.nearest_users(b, (501_000.0, 4_501_000.0), 99, rho=1e-4, component="last"),
            "time column",
        ),
        (lambda b: kf.nearest_users(b, (501_000.0, 4_501_000.0), 1, rho=1e-4), "several rows"),
    ],
)
def test_bad_inputs_leave_the_ledger_untouched(pings, call, match):
    s = Session(budget=CGP(rho=1e-3))
    b = _bound(pings, s)
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=match):
        call(b)
    assert s.ledger.snapshot() == before


def test_rho_on_a_pure_gp_session_is_refused_untouched(pings):
    s = Session(budget=GP(eps=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="pure GP"):
        kf.convex_hull(_bound(pings, s), rho=1e-4)
    assert s.ledger.snapshot() == before


@pytest.mark.skipif(not HAS_ACCESSOR, reason="accessor delegation not wired yet (lead's file)")
def test_accessor_form(pings):
    s = Session(budget=CGP(rho=1e-2))
    b = _bound(pings, s)
    assert len(b.knn((501_500.0, 4_501_500.0), 2, rho=1e-4, rng=seeded_rng(5))) == 6
    assert len(b.convex_hull(rho=1e-3, rng=seeded_rng(6))) == 3


@pytest.mark.parametrize(("budget", "amount"), [(CGP(rho=1e3), {"rho": 1.5e-49}),
                                                (GP(eps=1e3), {"eps": 1e-10})])  # fmt: skip
def test_convex_hull_noise_beyond_the_range_refused_untouched(budget, amount):
    # regression (fuzz): 6 users x 4 points take the fallback, so every calibration accepted
    # rho=1.5e-49; the centre draw then put the anchors beyond ±2**40 m inside the reservation
    # and everybody was charged
    i = np.arange(24)
    df = pd.DataFrame({"boat": np.repeat(np.arange(6), 4), "x": 500_000.0 + (i * 137) % 3000,
                       "y": 4_500_000.0 + (i * 251) % 3000})  # fmt: skip
    s = Session(budget=budget)
    before = s.ledger.snapshot()
    name = next(iter(amount))
    with pytest.raises(InvalidInputError, match=rf"^{name}=.* too small for convex_hull.* "
                       rf"Use a larger {name} .*Nothing was charged\.$"):  # fmt: skip
        kf.convex_hull(_bound(df, s), rng=seeded_rng(7), **amount)
    assert s.ledger.snapshot() == before
