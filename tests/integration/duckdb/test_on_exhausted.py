"""The SQL face's on_exhausted= and the relation helpers' dry_run=.

``register(con, session, on_exhausted="raise")`` makes a batch with a user who cannot pay refuse,
naming them, before anything is reserved or drawn; the relation helpers take
``on_exhausted=`` (default: the registration's) and refuse their whole query before anything
is charged, and ``dry_run=True`` (a Preview, exactly the real call's reservations).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.results import Preview
from gpframe.testing import seeded_rng

duckdb = pytest.importorskip("duckdb")

LOW = [3, 7]
BOX = shapely.box(500_000, 4_500_000, 505_000, 4_505_000)
P = (505_000.0, 4_505_000.0)
Q = "SELECT * FROM pings"

#: helper name -> call (con, **kw); rows with several fixes per user
HELPERS: dict[str, Any] = {
    "privatize": lambda c, **k: gp.duckdb.privatize(
        c, Q, user="uid", x="x", y="y", rho=1e-5, public=["ts"], **k
    ),
    "range_count": lambda c, **k: gp.duckdb.range_count(
        c, Q, BOX, user="uid", x="x", y="y", rho=1e-4, reduce="last", **k
    ),
    "kde_raster": lambda c, **k: gp.duckdb.kde_raster(
        c,
        "SELECT * FROM last",
        user="uid",
        x="x",
        y="y",
        bandwidth_m=2000,
        cell_m=1000,
        bounds=(5e5, 45e5, 51e4, 451e4),
        rho=1e-4,
        **k,
    ),
    "knn": lambda c, **k: gp.duckdb.knn(
        c, Q, user="uid", x="x", y="y", point=P, k=2, rho=1e-4, order_by="ts", public=["ts"], **k
    ),
    "convex_hulls": lambda c, **k: gp.duckdb.convex_hulls(
        c, Q, user="uid", x="x", y="y", rho=1e-4, **k
    ),
    "nearest_users": lambda c, **k: gp.duckdb.nearest_users(
        c, "SELECT * FROM last", user="uid", x="x", y="y", point=P, k=3, rho=1e-4, **k
    ),
}


def _con(on_exhausted: str = "exclude", low: bool = True, crs: Any = None) -> tuple[Any, Any]:
    rs = np.random.default_rng(4)  # test data only
    n = 300
    df = pd.DataFrame({"uid": rs.integers(0, 30, n), "ts": np.arange(n),
                       "x": 500_000 + rs.uniform(0, 10_000, n),
                       "y": 4_500_000 + rs.uniform(0, 10_000, n)})  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1.0))
    if low:
        s.set_budget(LOW, gp.CGP(rho=1e-9))
    con = duckdb.connect()
    gp.duckdb.register(con, s, rng=seeded_rng(5), on_exhausted=on_exhausted, crs=crs)
    con.register("df_in", df)
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.execute("CREATE TABLE last AS SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y "
                "FROM pings GROUP BY uid")  # fmt: skip
    return s, con


def _committed(s: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), c.alloc.tolist(), strict=True):
            u = s.ledger._index[i]
            out[u] = out.get(u, 0) + int(a)
    return out


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_helper_dry_run_is_the_real_reservation(name: str) -> None:
    s, con = _con()
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    pv = HELPERS[name](con, dry_run=True)
    assert isinstance(pv, Preview)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    assert set(LOW) <= set(pv.excluded.index)
    HELPERS[name](con)
    planned = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    assert planned == _committed(s)


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_helper_raise_names_the_users_and_charges_nothing(name: str) -> None:
    s, con = _con()
    snap = s.ledger.snapshot()
    with pytest.raises(BudgetExceededError) as e:
        HELPERS[name](con, on_exhausted="raise")
    assert "3" in str(e.value) and "7" in str(e.value) and "Nothing was charged" in str(e.value)
    assert s.ledger.snapshot() == snap
    # the registration's setting is the default; "exclude" overrides it
    s2, con2 = _con("raise")
    with pytest.raises(BudgetExceededError):
        HELPERS[name](con2)
    assert (s2.spent() == 0).all()
    HELPERS[name](con2, on_exhausted="exclude")
    spent = s2.spent()
    assert (spent.drop(LOW) > 0).any() and (spent.loc[LOW] == 0).all()


def test_helper_raise_runs_when_everybody_can_pay() -> None:
    s, con = _con("raise", low=False)
    rel = HELPERS["range_count"](con)
    assert rel.fetchall()[0][3] == 0 and len(s.spent()) == 30


def test_registration_raise_refuses_a_sql_batch_before_drawing() -> None:
    s, con = _con("raise")
    snap = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="cannot pay") as e:
        con.execute("SELECT uid, gp_privatize(uid, x, y, 1e-5) FROM pings").fetchall()
    assert "3" in str(e.value) and "7" in str(e.value)
    assert s.ledger.snapshot() == snap  # one batch (300 rows): nothing charged
    # the preview says so: the refusal, and who
    pv = gp.duckdb.preview(con, "SELECT uid, gp_privatize(uid, x, y, 1e-5) FROM pings")
    assert pv.refusal is not None and set(LOW) <= set(pv.excluded.index)
    _s, con2 = _con("exclude")
    out = con2.execute("SELECT uid, gp_privatize(uid, x, y, 1e-5) AS p FROM pings").df()
    assert out.loc[out["uid"].isin(LOW), "p"].isna().all()


def test_bad_on_exhausted_is_refused_before_anything() -> None:
    s = gp.Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    with pytest.raises(InvalidInputError, match="on_exhausted"):
        gp.duckdb.register(con, s, on_exhausted="skip")
    _s, con = _con()
    snap = _s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="on_exhausted='skip'"):
        HELPERS["knn"](con, on_exhausted="skip")
    assert _s.ledger.snapshot() == snap


def test_helper_dry_run_with_raise_states_the_refusal() -> None:
    s, con = _con()
    snap = s.ledger.snapshot()
    pv = HELPERS["nearest_users"](con, on_exhausted="raise", dry_run=True)
    assert pv.refusal is not None and "cannot pay" in pv.refusal
    pv = HELPERS["privatize"](con, on_exhausted="raise", dry_run=True)
    assert pv.refusal is not None and set(LOW) <= set(pv.excluded.index)
    assert s.ledger.snapshot() == snap


def test_helpers_unregistered_are_refused_by_their_own_name() -> None:
    con = duckdb.connect()
    for name in ("knn", "range_count"):
        for kw in ({}, {"dry_run": True}, {"on_exhausted": "raise"}):
            with pytest.raises(InvalidInputError, match=f"gp.duckdb.{name}"):
                HELPERS[name](con, **kw)


@pytest.mark.parametrize("method", ["dist", "dist-elim"])
def test_nearest_users_helper_preview_states_the_error_and_least_charge(method: str) -> None:
    s, con = _con(low=False)
    pv = HELPERS["nearest_users"](con, method=method, dry_run=True)
    rel = HELPERS["nearest_users"](con, method=method)
    err = rel.df()["error_m"].max()
    assert err <= pv.error * (1 + 1e-12)
    if method == "dist":
        assert err == pytest.approx(pv.error, rel=1e-12) and pv.saving_best == 0.0
    else:
        assert pv.adaptive and pv.saving_best > 0
        charged = s.spent()
        assert (charged >= pv.table["charge_min"].loc[charged.index] - 1e-15).all()


def test_kde_raster_helper_preview_states_the_noise_sigma() -> None:
    _s, con = _con(low=False, crs="EPSG:32618")  # the accessor's projection scale
    pv = HELPERS["kde_raster"](con, dry_run=True)
    frame = con.sql("SELECT * FROM last").df()
    s2 = gp.Session(budget=gp.CGP(rho=1.0))
    b = frame.geopriv(s2, user="uid", x="x", y="y", crs="EPSG:32618")
    assert pv.error == b.kde_raster(bandwidth_m=2000, cell_m=1000, rho=1e-4, dry_run=True).error
