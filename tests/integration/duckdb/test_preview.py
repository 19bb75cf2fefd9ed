"""gp.duckdb.preview: every SQL function's batches are planned exactly, nothing drawn or written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.errors import InvalidInputError
from gpframe.testing import seeded_rng

duckdb = pytest.importorskip("duckdb")

ZONE = "POLYGON ((500000 4500000, 510000 4500000, 510000 4510000, 500000 4510000, 500000 4500000))"
QUERIES = {
    "gp_privatize": "SELECT uid, gp_privatize(uid, x, y, 1e-5) AS p FROM pings",
    "gp_privatize_gp": "SELECT uid, gp_privatize_gp(uid, x, y, 2e-3) AS p FROM pings",
    "gp_in_region": "SELECT sum(CAST(gp_in_region(uid, x, y, ST_GeomFromText(?) , 1e-5, 10) "
    "AS INT)) FROM last",
    "gp_kde_contribution": "SELECT avg(gp_kde_contribution(uid, x, y, 505000.0, 4505000.0, "
    "2000.0, 1e-5, 10)) FROM last",
    "gp_knn": "SELECT uid, gp_knn(uid, list(x ORDER BY ts), list(y ORDER BY ts), 505000.0, "
    "4505000.0, 2, 1e-4) FROM pings GROUP BY uid",
    "gp_convex_hull": "SELECT uid, gp_convex_hull(uid, list(x ORDER BY ts), list(y ORDER BY ts), "
    "1e-4) FROM pings GROUP BY uid",
}


_REGS: dict = {}


def _con(budget_low: bool = False):
    rs = np.random.default_rng(4)  # test data only
    n = 5000  # gp_privatize sees several Arrow batches (2,048 rows): a user in each
    df = pd.DataFrame({"uid": rs.integers(0, 30, n), "ts": np.arange(n),
                       "x": 500_000 + rs.uniform(0, 10_000, n),
                       "y": 4_500_000 + rs.uniform(0, 10_000, n)})  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1.0))
    if budget_low:
        s.set_budget([3, 7], gp.CGP(rho=1e-9))
    con = duckdb.connect()
    con.execute("SET threads=2")
    _REGS[id(con)] = gp.duckdb.register(con, s, rng=seeded_rng(5))
    con.register("df_in", df)
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.execute("CREATE TABLE last AS SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y "
                "FROM pings GROUP BY uid")  # fmt: skip
    return s, con


def _committed_allocations(s, what: str = "alloc") -> dict:
    out: dict = {}
    for c in s.ledger.store.charges():
        for i, a in zip(c.idx.tolist(), getattr(c, what).tolist(), strict=True):
            u = s.ledger._index[i]
            out[u] = out.get(u, 0) + int(a)
    return out


def _wkb_param(name: str) -> tuple[str, list]:
    q = QUERIES[name]
    if "ST_GeomFromText" not in q:
        return q, []
    import shapely

    return q.replace("ST_GeomFromText(?) ", "?"), [shapely.from_wkt(ZONE).wkb]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_preview_equals_the_real_query_and_writes_nothing(name: str) -> None:
    s, con = _con(budget_low=True)
    q, params = _wkb_param(name)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    reg = _REGS[id(con)]
    counters = (reg.rows_drawn, reg.rows_excluded, reg.batches)
    pv = gp.duckdb.preview(con, q, params)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    if name.startswith("gp_privatize"):  # the registration's counters: nothing drawn either
        assert (reg.rows_drawn, reg.rows_excluded, reg.batches) == counters
    assert pv.reservations >= 1 and pv.operation == "sql"
    con.execute(q, params).fetchall()
    planned = {u: int(v) for u, v in pv.table["allocation_units"].items() if v}
    assert planned == _committed_allocations(s)
    if not pv.adaptive:  # deterministic charges: the committed charge is the planned one
        assert planned == _committed_allocations(s, "amount")
    if name.startswith("gp_privatize"):
        assert pv.reservations >= 3
    # the exhausted users are listed with the reason
    assert {3, 7} <= set(pv.excluded.index)
    assert all("budget exhausted" in r for r in pv.excluded.loc[[3, 7]])
    if name.startswith("gp_privatize"):
        assert pv.per == "point"
    assert pv.adaptive == (name in ("gp_in_region", "gp_kde_contribution"))


def test_preview_takes_one_select_only() -> None:
    s, con = _con()
    snap = s.ledger.snapshot()
    for bad in ("CREATE TABLE t AS SELECT gp_privatize(uid, x, y, 1e-5) FROM pings",
                "SELECT 1; SELECT 2"):  # fmt: skip
        with pytest.raises(InvalidInputError, match="one SELECT"):
            gp.duckdb.preview(con, bad)
    assert s.ledger.snapshot() == snap
    # the connection is back to normal afterwards: the real query charges
    con.execute(QUERIES["gp_privatize"]).fetchall()
    assert s.ledger.snapshot() != snap


def test_preview_needs_registration() -> None:
    with pytest.raises(InvalidInputError, match="register"):
        gp.duckdb.preview(duckdb.connect(), "SELECT 1")


@pytest.mark.parametrize(
    "name, mode, amount", [("gp_privatize", "cgp", 1e-5), ("gp_privatize_gp", "gp", 2e-3)]
)
def test_privatize_preview_states_the_radius_of_every_released_point(name, mode, amount):
    """Raw SQL and the gp.duckdb.privatize helper: the radius (m) of all the points the
    batches would release (the exhausted users' rows not among them), from their number and
    the amount only; every point the real query releases lies within it (seeded)."""
    from fractions import Fraction

    from gpframe.queries.privatize import nominal_errors

    _s, con = _con(budget_low=True)
    pings = con.execute("SELECT uid, x, y FROM pings ORDER BY ts").df()
    n = int((~pings["uid"].isin([3, 7])).sum())
    q = f"SELECT uid, x AS x0, y AS y0, {name}(uid, x, y, {amount}) AS p FROM pings"
    pv = gp.duckdb.preview(con, q)
    a = Fraction(amount)
    want = float(nominal_errors(mode, a, "point", np.array([n]), 0.05, 1.0, overall=True))
    assert pv.error == pytest.approx(want, rel=1e-12) and pv.confidence == pytest.approx(0.95)
    assert f"all {n} points" in pv.error_kind
    kw = {"rho": amount} if mode == "cgp" else {"eps": amount}
    helper = gp.duckdb.privatize(con, "SELECT uid, x, y FROM pings", user="uid", x="x", y="y",
                                 dry_run=True, **kw)  # fmt: skip
    assert (helper.error, helper.error_kind) == (pv.error, pv.error_kind)
    out = con.execute(q).df().dropna(subset=["p"])
    d = np.hypot(out["p"].str["x"] - out["x0"], out["p"].str["y"] - out["y0"])
    assert len(out) == n and float(d.max()) <= pv.error
