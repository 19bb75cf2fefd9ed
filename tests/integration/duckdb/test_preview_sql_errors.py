"""SQL previews state the pandas face's a-priori error: range_count, kde, knn, convex_hull.

The relation helpers' ``dry_run=True`` and ``gp.duckdb.preview`` of the raw SQL functions
(``gp_in_region``, ``gp_kde_contribution``, ``gp_knn``, ``gp_convex_hull``) state the error
``df.geopriv(...).<op>(..., dry_run=True)`` states on the same data and parameters, from public
inputs only: nothing drawn, nothing written, and moving the points changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe.testing import callback_rng

duckdb = pytest.importorskip("duckdb")

CRS = "EPSG:32618"
BOX = shapely.box(500_000, 4_500_000, 505_000, 4_505_000)
P = (505_000.0, 4_505_000.0)
Q = "SELECT * FROM pings"


def _frame(shift: float = 0.0) -> pd.DataFrame:
    rs = np.random.default_rng(4)  # test data only
    n = 300
    return pd.DataFrame({"uid": rs.integers(0, 30, n), "ts": np.arange(n),
                         "x": 500_000 + rs.uniform(0, 10_000, n) + shift,
                         "y": 4_500_000 + rs.uniform(0, 10_000, n) - shift})  # fmt: skip


def _con(shift: float = 0.0) -> tuple[Any, Any, list[int]]:
    """A registered connection whose randomness counts the bytes drawn (none may be)."""
    drawn = [0]

    def bits(n: int) -> bytes:
        drawn[0] += n
        return bytes(n)

    s = gp.Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s, rng=callback_rng(bits), crs=CRS)
    con.register("df_in", _frame(shift))
    con.execute("CREATE TABLE pings AS SELECT * FROM df_in")
    con.execute("CREATE TABLE last AS SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y "
                "FROM pings GROUP BY uid")  # fmt: skip
    return s, con, drawn


#: operation -> (SQL helper dry run, raw SQL, pandas dry run); the same data and parameters
CASES: dict[str, tuple[Any, str | None, Any]] = {
    "range_count": (
        lambda c: gp.duckdb.range_count(
            c,
            "SELECT * FROM last",
            BOX,
            user="uid",
            x="x",
            y="y",
            rho=1e-4,
            rounds=10,
            dry_run=True,
        ),
        "SELECT sum(CAST(gp_in_region(uid, x, y, from_hex($w), 1e-4, 10, "
        "(SELECT count(*) FROM last)) AS INT)) FROM last",
        lambda b: b.range_count(BOX, rho=1e-4, rounds=10, dry_run=True),
    ),
    "kde": (
        None,
        "SELECT avg(gp_kde_contribution(uid, x, y, 505000.0, 4505000.0, 2000.0, 1e-4, 10)) "
        "FROM last",
        lambda b: b.kde(shapely.Point(*P), bandwidth_m=2000.0, rho=1e-4, rounds=10, dry_run=True),
    ),
    "knn": (
        lambda c: gp.duckdb.knn(
            c,
            Q,
            user="uid",
            x="x",
            y="y",
            point=P,
            k=2,
            rho=1e-4,
            order_by="ts",
            public=["ts"],
            dry_run=True,
        ),
        "SELECT uid, gp_knn(uid, list(x ORDER BY ts), list(y ORDER BY ts), 505000.0, "
        "4505000.0, 2, 1e-4) FROM pings GROUP BY uid",
        lambda b: b.knn(shapely.Point(*P), 2, rho=1e-4, dry_run=True),
    ),
    "convex_hull": (
        lambda c: gp.duckdb.convex_hulls(c, Q, user="uid", x="x", y="y", rho=1e-4, dry_run=True),
        "SELECT uid, gp_convex_hull(uid, list(x ORDER BY ts), list(y ORDER BY ts), 1e-4) "
        "FROM pings GROUP BY uid",
        lambda b: b.convex_hull(rho=1e-4, dry_run=True),
    ),
}


def _pandas(op: str) -> Any:
    table = "last" if op in ("range_count", "kde") else "pings"
    frame = _frame()
    if table == "last":
        frame = frame.sort_values("ts").groupby("uid", as_index=False).last()
    b = frame.geopriv(gp.Session(budget=gp.CGP(rho=1.0)), user="uid", x="x", y="y", crs=CRS)
    return CASES[op][2](b)


def _raw(con: Any, op: str) -> Any:
    params = {"w": shapely.to_wkb(BOX).hex()} if op == "range_count" else None
    return gp.duckdb.preview(con, CASES[op][1], params)


@pytest.mark.parametrize("op", list(CASES))
def test_sql_preview_states_the_pandas_preview_error(op: str) -> None:
    want = _pandas(op)
    assert want.error is not None and want.error > 0
    s, con, drawn = _con()
    before = s.ledger.snapshot()
    got = [_raw(con, op)]
    if CASES[op][0] is not None:
        got.append(CASES[op][0](con))
    for pv in got:
        assert pv.error == pytest.approx(want.error, rel=1e-12), pv.error_kind
        assert (pv.error_kind, pv.confidence) == (want.error_kind, want.confidence)
    assert drawn[0] == 0  # nothing drawn ...
    assert s.ledger.snapshot() == before and s.spent().empty  # ... nor written


@pytest.mark.parametrize("op", list(CASES))
def test_sql_preview_error_reads_no_location(op: str) -> None:
    """Moving every point (same users, counts and order) leaves the stated error unchanged."""
    _s, con, _ = _con()
    _s2, moved, _ = _con(shift=777.0)
    here = _raw(con, op).error
    assert here is not None and here == _raw(moved, op).error
    if CASES[op][0] is not None:
        here = CASES[op][0](con).error
        assert here is not None and here == CASES[op][0](moved).error


def test_preview_of_mixed_functions_states_no_error() -> None:
    _s, con, _ = _con()
    pv = gp.duckdb.preview(con, "SELECT gp_in_region(uid, x, y, from_hex($w), 1e-4, 10), "
                           "gp_kde_contribution(uid, x, y, 5e5, 45e5, 2000.0, 1e-4, 10) FROM last",
                           {"w": shapely.to_wkb(BOX).hex()})  # fmt: skip
    assert pv.error is None and len(pv.allocations) == 30


@pytest.mark.parametrize("op", ["range_count", "kde"])
def test_elimination_preview_over_several_batches_with_n_users(op: str) -> None:
    """5,000 users (three Arrow batches), n_users = all of them: the whole query's bound."""
    rs = np.random.default_rng(9)  # test data only
    n = 5000
    frame = pd.DataFrame({"uid": np.arange(n), "x": 500_000 + rs.uniform(0, 10_000, n),
                          "y": 4_500_000 + rs.uniform(0, 10_000, n)})  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s, crs=CRS)
    con.register("big", frame)
    nu = "(SELECT count(*) FROM big)"
    if op == "range_count":
        sql = (
            f"SELECT sum(CAST(gp_in_region(uid, x, y, from_hex($w), 1e-4, 10, {nu}) AS INT)) "
            "FROM big"
        )
        pv = gp.duckdb.preview(con, sql, {"w": shapely.to_wkb(BOX).hex()})
        alone = gp.duckdb.preview(con, sql.replace(f", {nu})", ")"),
                                  {"w": shapely.to_wkb(BOX).hex()})  # fmt: skip
    else:
        sql = (
            f"SELECT avg(gp_kde_contribution(uid, x, y, 505000.0, 4505000.0, 2000.0, 1e-4, "
            f"10, {nu})) FROM big"
        )
        pv = gp.duckdb.preview(con, sql)
        alone = gp.duckdb.preview(con, sql.replace(f", {nu})", ")"))
    b = frame.geopriv(gp.Session(budget=gp.CGP(rho=1.0)), user="uid", x="x", y="y", crs=CRS)
    want = CASES[op][2](b)
    assert pv.error == pytest.approx(want.error, rel=1e-12)
    # without n_users each batch's union bound is over its own rows: a narrower statement
    assert alone.error < pv.error


@pytest.mark.parametrize("op", ["range_count", "kde"])
def test_elimination_preview_states_the_least_charge(op: str) -> None:
    """gp_in_region / gp_kde_contribution: round 1's part per user, as the pandas preview."""
    from gpframe.testing import seeded_rng

    want = _pandas(op)
    s, con, _ = _con()
    got = [_raw(con, op)] + ([CASES[op][0](con)] if CASES[op][0] is not None else [])
    for pv in got:
        assert pv.adaptive and pv.saving_best == pytest.approx(want.saving_best, rel=1e-12)
        assert pv.saving_best > 0
        assert pv.table["charge_min"].sort_index().equals(want.table["charge_min"].sort_index())
    gp.duckdb.register(con, s, rng=seeded_rng(3), crs=CRS)  # the real query: at least that
    con.execute(CASES[op][1], {"w": shapely.to_wkb(BOX).hex()} if op == "range_count" else None)
    spent = s.spent()
    low = got[0].table["charge_min"].loc[spent.index]
    assert len(spent) == 30 and (spent >= low - 1e-15).all() and (spent > low + 1e-15).any()
