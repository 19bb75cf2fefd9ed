"""Bad-input fuzzing of the DuckDB operations: the UDFs and ``gp.duckdb.clip_user``.

``gp_in_region``, ``gp_kde_contribution``, ``gp_knn``, ``gp_convex_hull`` (registered by
``gp.duckdb.register``) get generated rows: NULLs, NaN, inf, zero / negative / huge budgets and
parameters, bad WKB, empty and ragged lists, several id types. ``clip_user`` gets bad tables,
columns, bounds, epsilons and occupancies. A refusal inside a UDF must be a gpframe error naming
the argument; every refused query must leave the ledger file byte-identical; released values
must be finite.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp

from ._harness import assert_budgets, assert_finite, attempt, bad_scalars, sql_call

_nan, _inf = float("nan"), float("inf")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def ledger_dir():
    d = Path(tempfile.mkdtemp(prefix="gpfuzz-sql-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def session(ledger_dir):
    s = gp.Session(
        str(ledger_dir / "ledger.sqlite"), budget=gp.CGP(rho=1e3), central=gp.DP(epsilon=1e3)
    )
    s.set_budget([5], gp.CGP(rho=1e-6))  # one poor user: exclusion paths
    yield s
    s.close()


@pytest.fixture(scope="module")
def con(session):
    import duckdb

    c = duckdb.connect()
    c.execute("SET threads = 2")
    gp.duckdb.register(c, session)
    yield c
    c.close()


@pytest.fixture(scope="module")
def gp_session(ledger_dir):
    s = gp.Session(str(ledger_dir / "gp.sqlite"), budget=gp.GP(eps=1.0))
    yield s
    s.close()


@pytest.fixture(scope="module")
def con_gp(gp_session):
    import duckdb

    c = duckdb.connect()
    gp.duckdb.register(c, gp_session)
    yield c
    c.close()


def _pick(con, con_gp, session, gp_session, which):
    return (con_gp, gp_session) if which == "gp" else (con, session)


# --------------------------------------------------------------------------------------------
# SQL literals
# --------------------------------------------------------------------------------------------


def lit(v) -> str:
    """A DOUBLE literal for a Python value (NaN / inf through a cast, None as NULL)."""
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return v  # already SQL
    if isinstance(v, float) and not np.isfinite(v):
        return f"CAST('{v}' AS DOUBLE)"
    return repr(float(v))


def ilit(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return v
    return str(v)


num_amount = st.one_of(
    st.sampled_from([_nan, _inf, -_inf, 0.0, -1.0, 1e300, 5e-324, 1e-300, None, 1e-4, 0.5, 2e3]),
    st.floats(1e-6, 1.0),
)
coord = st.one_of(
    st.floats(0.0, 20_000.0),
    st.sampled_from([_nan, _inf, -_inf, 1e300, -1e13, None, 5000.0]),
)
rounds_sql = st.one_of(
    st.integers(1, 12), st.sampled_from([0, -1, 64, 65, 2**31, None, "1.5", "'3'", "'x'"])
)
n_users_sql = st.sampled_from([None, None, 1, 3, 0, -5, 10**6, "9223372036854775807"])
USER_KINDS = [
    st.one_of(st.integers(-2, 6), st.just("NULL"), st.just("9223372036854775807")),
    st.sampled_from(["'a'", "''", "NULL", "'5'", "'ünï'"]),
    st.sampled_from(["1.5", "-0.0", "NULL", "'nan'::DOUBLE"]),
    st.sampled_from(["true", "false", "NULL"]),
]


@st.composite
def users_col(draw, n):
    kind = draw(st.sampled_from(USER_KINDS))  # VALUES needs one type per column
    return [ilit(draw(kind)) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# gp_in_region
# --------------------------------------------------------------------------------------------

_BOX = shapely.box(0, 0, 10_000, 10_000)
WKBS = {
    "box": shapely.to_wkb(_BOX),
    "hole": shapely.to_wkb(
        shapely.Polygon(_BOX.exterior.coords, [shapely.box(4e3, 4e3, 6e3, 6e3).exterior.coords])
    ),
    "bowtie": shapely.to_wkb(shapely.Polygon([(0, 0), (1e4, 1e4), (1e4, 0), (0, 1e4)])),
    "empty": shapely.to_wkb(shapely.Polygon()),
    "point": shapely.to_wkb(shapely.Point(0, 0)),
    "line": shapely.to_wkb(shapely.LineString([(0, 0), (1, 1)])),
    "huge": shapely.to_wkb(shapely.box(0, 0, 1e300, 1e300)),
    "flat": shapely.to_wkb(shapely.Polygon([(0, 0), (1, 0), (2, 0)])),
    "garbage": b"\x01\x02\x03not wkb",
    "emptybytes": b"",
    "null": None,
}


@st.composite
def region_queries(draw):
    n = draw(st.integers(1, 5))
    us = draw(users_col(n))
    rows = [
        f"({us[i]}, {lit(draw(coord))}, {lit(draw(coord))}, {lit(draw(num_amount))}, "
        f"{ilit(draw(rounds_sql))})"
        for i in range(n)
    ]
    nu = draw(n_users_sql)
    extra = "" if draw(st.booleans()) else f", n_users := {ilit(nu)}"
    q = (
        f"SELECT gp_in_region(u, x, y, $w, r, c{extra}) FROM (VALUES {', '.join(rows)}) "
        "t(u, x, y, r, c)"
    )
    return q, draw(st.sampled_from(list(WKBS)))


def _in_region(con, session, q, wkb_key):
    out = sql_call(
        "duckdb.gp_in_region",
        con,
        q,
        {"w": WKBS[wkb_key]},
        ("gp_in_region", "rho", "rounds", "x/y", "region", "CGP"),
        session.path,
    )
    if out is not None:
        assert all(v in (None, True, False) for (v,) in out)
    assert_budgets("duckdb.gp_in_region", session)


@settings(max_examples=80, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), qw=region_queries())
def test_gp_in_region(con, con_gp, session, gp_session, which, qw):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _in_region(c, s, *qw)


@pytest.mark.slow
@settings(max_examples=1500, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), qw=region_queries())
def test_gp_in_region_slow(con, con_gp, session, gp_session, which, qw):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _in_region(c, s, *qw)


# --------------------------------------------------------------------------------------------
# gp_kde_contribution
# --------------------------------------------------------------------------------------------

bandwidths = st.one_of(
    st.floats(1.0, 1e5), st.sampled_from([_nan, _inf, 0.0, -1.0, 1e-300, 1e300, 5e-324, None])
)


@st.composite
def kde_queries(draw):
    n = draw(st.integers(1, 5))
    us = draw(users_col(n))
    rows = [
        f"({us[i]}, {lit(draw(coord))}, {lit(draw(coord))}, {lit(draw(coord))}, "
        f"{lit(draw(coord))}, {lit(draw(bandwidths))}, {lit(draw(num_amount))}, "
        f"{ilit(draw(rounds_sql))})"
        for i in range(n)
    ]
    extra = "" if draw(st.booleans()) else f", n_users := {ilit(draw(n_users_sql))}"
    return (
        f"SELECT gp_kde_contribution(u, x, y, qx, qy, b, r, c{extra}) FROM (VALUES "
        f"{', '.join(rows)}) t(u, x, y, qx, qy, b, r, c)"
    )


def _kde(con, session, q):
    out = sql_call(
        "duckdb.gp_kde_contribution",
        con,
        q,
        None,
        ("gp_kde_contribution", "rho", "rounds", "bandwidth_m", "x, y", "CGP"),
        session.path,
    )
    if out is not None:
        vals = [v for (v,) in out if v is not None]
        assert_finite("duckdb.gp_kde_contribution", vals)
        assert all(0.0 <= v <= 1.0 for v in vals), vals
    assert_budgets("duckdb.gp_kde_contribution", session)


@settings(max_examples=80, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=kde_queries())
def test_gp_kde_contribution(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _kde(c, s, q)


@pytest.mark.slow
@settings(max_examples=1500, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=kde_queries())
def test_gp_kde_contribution_slow(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _kde(c, s, q)


# --------------------------------------------------------------------------------------------
# gp_knn and gp_convex_hull (one row per user, list arguments)
# --------------------------------------------------------------------------------------------


def list_lit(vals) -> str:
    if vals is None:
        return "NULL"
    return "[" + ", ".join(lit(v) for v in vals) + "]::DOUBLE[]"


#: lists mixing good and bad coordinates, NULL elements and whole NULL lists (a NULL list gives
#: NULL and no charge; a NULL element in an answered row is refused before charging)
lists = st.one_of(
    st.lists(st.floats(0.0, 20_000.0), min_size=1, max_size=6),
    st.lists(coord, min_size=0, max_size=4),
    st.none(),
)
ks_sql = st.one_of(st.integers(1, 6), st.sampled_from([0, -1, 10**6, None, "1.5", "'x'", 2**40]))


@st.composite
def knn_queries(draw, hull: bool):
    n = draw(st.integers(1, 4))
    us = draw(users_col(n))
    rows = []
    for i in range(n):
        xs = draw(lists)
        same = draw(st.booleans()) and xs is not None
        ys = [v if v is None else v + 1.0 for v in xs] if same else draw(lists)
        if hull:
            r = draw(num_amount)
            rows.append(f"({us[i]}, {list_lit(xs)}, {list_lit(ys)}, {lit(r)})")
        else:
            rows.append(
                f"({us[i]}, {list_lit(xs)}, {list_lit(ys)}, {lit(draw(coord))}, "
                f"{lit(draw(coord))}, {ilit(draw(ks_sql))}, {lit(draw(num_amount))})"
            )
    if hull:
        return (
            f"SELECT gp_convex_hull(u, xs, ys, r) FROM (VALUES {', '.join(rows)}) t(u, xs, ys, r)"
        )
    return (
        f"SELECT gp_knn(u, xs, ys, px, py, k, r) FROM (VALUES {', '.join(rows)}) "
        "t(u, xs, ys, px, py, k, r)"
    )


KNN_NAMES = (
    "gp_knn",
    "gp_convex_hull",
    "rho",
    "k=",
    "xs",
    "ys",
    "point",
    "coordinate",
    "CGP",
    "list",
)


def _knn(con, session, q, hull):
    entry = "duckdb.gp_convex_hull" if hull else "duckdb.gp_knn"
    out = sql_call(entry, con, q, None, KNN_NAMES, session.path)
    if out is not None:
        for (v,) in out:
            if v is None:
                continue
            if hull:
                assert_finite(entry, shapely.get_coordinates(shapely.from_wkb(v)))
            else:
                assert all(isinstance(i, int) and i >= 1 for i in v), v
    assert_budgets(entry, session)


@settings(max_examples=60, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=knn_queries(hull=False))
def test_gp_knn(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _knn(c, s, q, hull=False)


@settings(max_examples=50, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=knn_queries(hull=True))
def test_gp_convex_hull(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _knn(c, s, q, hull=True)


@pytest.mark.slow
@settings(max_examples=1000, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=knn_queries(hull=False))
def test_gp_knn_slow(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _knn(c, s, q, hull=False)


@pytest.mark.slow
@settings(max_examples=800, **SETTINGS)
@given(which=st.sampled_from(["cgp", "cgp", "cgp", "gp"]), q=knn_queries(hull=True))
def test_gp_convex_hull_slow(con, con_gp, session, gp_session, which, q):
    c, s = _pick(con, con_gp, session, gp_session, which)
    _knn(c, s, q, hull=True)


# --------------------------------------------------------------------------------------------
# clip_user (plans a grid release; draws and charges nothing) and gp_grid_release
# --------------------------------------------------------------------------------------------


def _grid_table(con):
    n = 24
    i = np.arange(n)
    df = pd.DataFrame(
        {
            "u": i % 6,
            "cell": (i % 3) * 1000 + 7,
            "v": (i * 7 % 11) * 1.0,
            "vnan": np.where(i == 2, np.nan, 1.0),
            "s": ["a"] * n,
            "unull": pd.array(np.where(i == 3, pd.NA, i % 6), dtype="Int64"),
        }
    )
    con.register("_grid_src", df)
    con.execute("CREATE OR REPLACE TABLE grid_t AS SELECT * FROM _grid_src")
    con.unregister("_grid_src")


clip_kw = st.fixed_dictionaries(
    {
        "table": st.sampled_from(["grid_t", "grid_t", "nope", "", 5, 'grid_t"; DROP TABLE x; --']),
        "user": st.sampled_from(["u", "u", "unull", "nope", None, ""]),
        "cell": st.sampled_from(["cell", "cell", "nope", "u"]),
        "value": st.sampled_from(["v", "v", "vnan", "s", "nope", 'v"']),
        "bounds": st.one_of(
            st.sampled_from([(0, 10), (0, 11), (10, 0), (0, _nan), (0,), None, (0, 1e300), (0, 1)]),
            st.tuples(bad_scalars, bad_scalars),
        ),
        "epsilon": st.one_of(bad_scalars, st.floats(1e-3, 10.0)),
        "occupancy": st.sampled_from(
            ["public", "public", None, "private", "PUBLIC", 1, "table", "badtable"]
        ),
    },
    optional={
        "clip": st.sampled_from(["clip-user", "pseudo-user", "none", "x"]),
        "clamp": st.sampled_from([True, False]),
        "order_by": st.sampled_from([None, "v", "nope"]),
        "kappa": st.sampled_from([0.5, 1.0, 0, -1.0, _nan, "x"]),
    },
)

GRID_SQL = gp.duckdb.SQL_DIR / "grid_stats.sql"


def _clip(con, session, kw):
    kw = dict(kw)
    if kw["occupancy"] in ("table", "badtable"):
        t = con.execute("SELECT u AS user, cell, count(*) AS count FROM grid_t GROUP BY ALL").df()
        if kw["occupancy"] == "badtable":
            t.loc[0, "count"] += 1
        kw["occupancy"] = t
    ok, _plan = attempt(
        "duckdb.clip_user",
        (
            *[str(v) for v in kw.values() if isinstance(v, str)],
            *kw.keys(),
            "table",
            "column",
            "central",
            "register",
        ),
        gp.duckdb.clip_user,
        con,
        kw["table"] if "table" in kw else None,
        ledger=session.path,
        **{k: v for k, v in kw.items() if k != "table"},
    )
    assert_budgets("duckdb.clip_user", session)
    if ok and GRID_SQL.exists():
        out = sql_call(
            "duckdb.gp_grid_release",
            con,
            GRID_SQL.read_text(),
            None,
            ("gp_grid_release", "plan", "cell", "budget"),
            session.path,
        )
        if out is not None:
            assert_budgets("duckdb.gp_grid_release", session)


@settings(max_examples=60, **SETTINGS)
@given(kw=clip_kw)
def test_clip_user(con, session, kw):
    _grid_table(con)
    _clip(con, session, kw)


@pytest.mark.slow
@settings(max_examples=800, **SETTINGS)
@given(kw=clip_kw)
def test_clip_user_slow(con, session, kw):
    _grid_table(con)
    _clip(con, session, kw)


@settings(max_examples=40, **SETTINGS)
@given(
    args=st.tuples(
        st.sampled_from(["NULL", "1", "-1", "999999", "0"]),
        st.sampled_from(["NULL", "0", "-1", "1000"]),
        st.sampled_from(["NULL", "0", "1", "-3", "4"]),
        st.sampled_from(["NULL", "0", "5", "-9223372036854775808"]),
        st.sampled_from(["NULL", "0", "7"]),
        st.sampled_from(["NULL", "0", "1"]),
    )
)
def test_gp_grid_release_direct(con, session, args):
    """The release UDF called by hand with bad plan ids, cells and counts."""
    sql_call(
        "duckdb.gp_grid_release",
        con,
        f"SELECT gp_grid_release({', '.join(args)})",
        None,
        ("gp_grid_release", "plan", "cell", "count", "budget"),
        session.path,
    )
    assert_budgets("duckdb.gp_grid_release", session)


# --------------------------------------------------------------------------------------------
# regressions
# --------------------------------------------------------------------------------------------


def test_in_region_huge_n_users(con, session):
    # was: RuntimeWarning (int64 cast of 9.2e18) raised inside the UDF
    q = (
        "SELECT gp_in_region(u, x, y, $w, r, c, n_users := 9223372036854775807) FROM "
        "(VALUES ('a', 0.0, 0.0, 1e-3, 1)) t(u, x, y, r, c)"
    )
    assert (
        sql_call("duckdb.gp_in_region", con, q, {"w": WKBS["box"]}, ("gp_in_region",), session.path)
        is not None
    )


@pytest.mark.parametrize("fn", ["kde", "range"])
def test_tiny_rho_refused_before_reserving(con, session, fn):
    # was: "too small to split into 2 rounds" raised inside the reservation (batch charged)
    if fn == "kde":
        q = (
            "SELECT gp_kde_contribution(u, x, y, qx, qy, b, r, c) FROM (VALUES ('a', 0.0, 0.0, "
            "0.0, 0.0, 1.0, 5e-324, 2)) t(u, x, y, qx, qy, b, r, c)"
        )
        p = None
    else:
        q = (
            "SELECT gp_in_region(u, x, y, $w, r, c) FROM (VALUES ('a', 0.0, 0.0, 5e-324, 2)) "
            "t(u, x, y, r, c)"
        )
        p = {"w": WKBS["box"]}
    assert (
        sql_call(f"duckdb.{fn}", con, q, p, ("rho", "allocation", "rounds"), session.path) is None
    )


def test_in_region_huge_region_refused(con, session):
    # was: RuntimeWarning (overflow in the signed distance) inside the reservation
    q = (
        "SELECT gp_in_region(u, x, y, $w, r, c) FROM (VALUES ('a', 0.0, 0.0, 1.0, 1)) "
        "t(u, x, y, r, c)"
    )
    assert (
        sql_call("duckdb.gp_in_region", con, q, {"w": WKBS["huge"]}, ("region_wkb",), session.path)
        is None
    )


def test_kde_tiny_bandwidth_refused(con, session):
    # was: RuntimeWarning (divide by zero in the kernel) inside the reservation
    q = (
        "SELECT gp_kde_contribution(u, x, y, qx, qy, b, r, c) FROM (VALUES ('a', 0.0, 0.0, 0.0, "
        "0.0, 5e-324, 1.0, 1)) t(u, x, y, qx, qy, b, r, c)"
    )
    assert (
        sql_call("duckdb.gp_kde_contribution", con, q, None, ("bandwidth_m",), session.path) is None
    )


# fuzz-found bugs of gpframe/duckdb_knn.py, fixed: their reproducers stay as regression tests


def test_knn_null_list_row_refused_cleanly(con, session):
    nan = "CAST('nan' AS DOUBLE)"
    q = (
        "SELECT gp_knn(u, xs, ys, px, py, k, r) FROM (VALUES "
        f"('a', [0.0]::DOUBLE[], NULL, 0.0, 0.0, 1, {nan}), "
        f"('a', [0.0]::DOUBLE[], [1.0]::DOUBLE[], 0.0, 0.0, 1, {nan}), "
        f"('a', [0.0]::DOUBLE[], [1.0]::DOUBLE[], 0.0, 0.0, 1, {nan}), "
        "('a', [NULL]::DOUBLE[], []::DOUBLE[], 0.0, 0.0, 1, NULL)) t(u, xs, ys, px, py, k, r)"
    )
    sql_call("duckdb.gp_knn", con, q, None, KNN_NAMES, session.path)


def test_knn_null_element_after_null_row_refused_cleanly(con, session):
    q = (
        "SELECT gp_knn(u, xs, ys, 0.0, 0.0, 1, 1e-3) FROM (VALUES (NULL, [0.0, 0.0]::DOUBLE[], "
        "[0.0]::DOUBLE[]), (0, [0.0]::DOUBLE[], [NULL]::DOUBLE[])) t(u, xs, ys)"
    )
    sql_call("duckdb.gp_knn", con, q, None, KNN_NAMES, session.path)


def test_hull_tiny_rho_not_charged(con, session):
    q = (
        "SELECT gp_convex_hull(u, xs, ys, r) FROM (VALUES (0, [0.0]::DOUBLE[], [1.0]::DOUBLE[], "
        "5e-324)) t(u, xs, ys, r)"
    )
    sql_call("duckdb.gp_convex_hull", con, q, None, KNN_NAMES, session.path)
