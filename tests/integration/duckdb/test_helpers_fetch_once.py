"""The relation helpers that fetch their input (gp.duckdb.privatize, gp.duckdb.range_count) run
its query once and check the rows they fetched, with the refusals of the SQL pre-check the
other helpers run (relations.check_input), before anything is charged."""

import duckdb
import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp
from gpframe.duckdb import register
from gpframe.ledger import Session
from gpframe.testing import seeded_rng

BOX = shapely.box(495_000, 8_795_000, 505_000, 8_805_000)


def _points(n, users, seed):
    rng = np.random.default_rng(seed)  # true points only
    return pd.DataFrame(
        {
            "user_id": (np.arange(n) * 7919) % users,
            "x": 500_000 + rng.uniform(-5000, 5000, n),
            "y": 8_800_000 + rng.uniform(-5000, 5000, n),
        }
    )


def _call(helper, con, query):
    cols = {"user": "user_id", "x": "x", "y": "y", "rho": 1e-4}
    if helper == "privatize":
        return gp.duckdb.privatize(con, query, **cols)
    return gp.duckdb.range_count(con, f"SELECT DISTINCT ON (user_id) * FROM ({query})", BOX, **cols)


def _con(session, df, seed):
    con = duckdb.connect()
    register(con, session, crs=32724, rng=seeded_rng(seed))
    con.register("pts", df)
    return con


_BAD_ROWS = [
    ("SELECT * FROM pts WHERE x < 0", "the input has no rows"),
    ("SELECT CASE WHEN user_id = 3 THEN NULL ELSE user_id END AS user_id, x, y FROM pts",
     r"column 'user_id' has (250|1) NULL value\(s\); filter them first \(WHERE \"user_id\" IS"),
    ("SELECT user_id, CASE WHEN user_id = 3 THEN 'nan'::DOUBLE ELSE x END AS x, y FROM pts",
     r"column 'x' has (250|1) NULL, NaN or infinite value\(s\)"),
    ("SELECT user_id, x, CASE WHEN user_id < 2 THEN NULL ELSE y END AS y FROM pts",
     r"column 'y' has (500|2) NULL, NaN or infinite value\(s\)"),
    ("SELECT user_id, x, CASE WHEN user_id = 2 THEN -'inf'::DOUBLE ELSE y END AS y FROM pts",
     r"column 'y' has (250|1) NULL, NaN or infinite"),
    ("SELECT user_id, CASE WHEN user_id = 3 THEN NULL ELSE x::BIGINT END AS x, y FROM pts",
     r"column 'x' has (250|1) NULL, NaN or infinite"),  # a nullable integer column
    ("SELECT user_id, CASE WHEN user_id = 3 THEN 1e13 ELSE x END AS x, y FROM pts",
     r"beyond ±2\*\*40 m"),
]  # fmt: skip


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
@pytest.mark.parametrize(("query", "match"), _BAD_ROWS)
def test_bad_rows_are_refused_as_fetched_and_charge_nothing(helper, query, match):
    df = _points(5000, 20, seed=8)  # user 3 has 250 rows
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 15)
    before = s.ledger.snapshot()
    with pytest.raises(gp.errors.InvalidInputError, match=match) as info:
        _call(helper, con, query)
    assert str(info.value).startswith(f"gp.duckdb.{helper}: ")
    assert "Nothing was charged" in str(info.value)
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
def test_good_decimal_and_integer_coordinates_are_accepted(helper):
    df = _points(2000, 20, seed=10)
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 17)
    q = "SELECT user_id, x::DECIMAL(12, 2) AS x, y::BIGINT AS y FROM pts"
    assert len(_call(helper, con, q).fetchall()) == (2000 if helper == "privatize" else 1)
    assert (s.spent() > 0).all()


@pytest.mark.parametrize("helper", ["privatize", "range_count"])
def test_the_query_runs_once(helper):
    """The checks and the release read one run of the query: a volatile query cannot show the
    checks other rows than those released (and an expensive one is not paid twice)."""
    from duckdb.sqltypes import DOUBLE

    seen = []

    def tap(x):  # counts the rows each run of the query reads
        seen.append(len(x))
        return x

    df = _points(5000, 20, seed=9)
    s = Session(budget=gp.CGP(rho=1.0))
    con = _con(s, df, 16)
    con.create_function("tap", tap, [DOUBLE], DOUBLE, type="arrow", side_effects=True)
    rel = _call(helper, con, "SELECT user_id, tap(x) AS x, y FROM pts")
    assert sum(seen) == 5000
    rel.fetchall()
    assert sum(seen) == 5000  # reading the result runs nothing again


_CELLS = [None, float("nan"), float("inf"), -float("inf"), 1e13, 500_000.0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([None, 1, 2]), st.sampled_from(_CELLS), st.sampled_from(_CELLS)),
        min_size=0,
        max_size=12,
    )
)
def test_the_fetched_checks_refuse_as_the_sql_pre_check(rows):
    """For any mix of NULL users, NULL / NaN / infinite / too large coordinates (or none),
    the checks on fetched rows (Arrow and pandas) raise exactly the SQL pre-check's refusal."""
    from gpframe.duckdb import relations as R

    con = duckdb.connect()
    con.execute("CREATE TABLE t(u BIGINT, x DOUBLE, y DOUBLE)")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    cols = {"user": "u", "x": "x", "y": "y"}

    def refusal(check):
        try:
            check()
        except gp.errors.InvalidInputError as exc:
            return str(exc)
        return None

    rel = con.sql("SELECT * FROM t")
    sql = refusal(lambda: R.check_input(rel, "f", cols))
    tbl = con.sql("SELECT u, x, y FROM t").to_arrow_table()
    arrow = refusal(lambda: R.fetched_points(tbl, "f", cols, ("u", "x", "y")))
    frame = refusal(lambda: R.frame_points(con.sql("SELECT * FROM t").df(), "f", cols))
    assert arrow == sql and frame == sql


def test_the_points_and_extent_fetched_on_two_threads_are_one_threads():
    """Chunks of uneven sizes (an empty one too), ranges across their edges: the same points
    and extent on two threads as on one, and a NaN anywhere makes the extent NaN."""
    import pyarrow as pa

    from gpframe.duckdb.relations import fetched_points
    from gpframe.mechanisms.row_ranges import MIN_ROWS

    gen = np.random.default_rng(4)  # true points only
    sizes = [100_000, 0, 3, 122_880, MIN_ROWS - 7, 50_001]
    cols = {k: [gen.uniform(-1e6, 1e6, m) for m in sizes] for k in ("x", "y")}
    n = sum(sizes)

    def table(xs, ys):
        key = pa.chunked_array([pa.array(np.arange(m), pa.int64()) for m in sizes])
        return pa.Table.from_arrays(
            [key, pa.chunked_array([pa.array(a) for a in xs]),
             pa.chunked_array([pa.array(a) for a in ys])],
            names=["k", "x", "y"],
        )  # fmt: skip

    names = {"user": "u", "x": "x", "y": "y"}
    args = ("gp.duckdb.privatize", names, ("k", "x", "y"))
    one, ext1 = fetched_points(table(cols["x"], cols["y"]), *args, 1)
    two, ext2 = fetched_points(table(cols["x"], cols["y"]), *args, 2)
    allx, ally = np.concatenate(cols["x"]), np.concatenate(cols["y"])
    assert one.shape == (n, 2) and np.array_equal(one, two)
    assert np.array_equal(two, np.column_stack([allx, ally]))
    assert ext1 == ext2 == (allx.min(), ally.min(), allx.max(), ally.max())
    # a NaN in the chunk after the empty one: seen by the two-thread extent and refused
    cols["y"][2][1] = np.nan
    with pytest.raises(gp.errors.InvalidInputError, match=r"column 'y' has 1 NULL, NaN"):
        fetched_points(table(cols["x"], cols["y"]), *args, 2)


@pytest.mark.parametrize(
    ("row", "value", "match"),
    [(-1, 1e13, r"beyond ±2\*\*40 m"), (-1, float("nan"), r"column 'x' has 1 NULL, NaN"),
     (-1, 2_000_000.0, r"1 of 262144 x/y point\(s\) are not metres of crs=EPSG:32724"),
     (70_000, -1e13, r"beyond ±2\*\*40 m")],
)  # fmt: skip
def test_a_bad_row_in_any_range_of_a_threaded_fetch_is_refused(row, value, match):
    """OS CSPRNG, threads=2, 4·65,536 rows: the fetch and the checks of the noise drawn ahead
    read the extent the ranges computed; one bad row anywhere is refused, nothing charged."""
    df = _points(4 * 65_536, 100, seed=11)
    df.loc[df.index[row], "x"] = value
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    con.execute("SET threads = 2")
    register(con, s, crs=32724)  # the OS CSPRNG: the threaded path
    con.register("pts", df)
    before = s.ledger.snapshot()
    with pytest.raises(gp.errors.InvalidInputError, match=match):
        _call("privatize", con, "SELECT * FROM pts")
    assert s.ledger.snapshot() == before
    df.loc[df.index[row], "x"] = 500_000.0
    con.register("pts", df)  # the mended frame
    assert len(_call("privatize", con, "SELECT * FROM pts").fetchall()) == len(df)
