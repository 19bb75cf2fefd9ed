"""One person, one budget: the same user id is the same ledger user in SQL and in Python.

For each id type, SQL spends a user's whole budget and the accessor must then refuse that user,
and the reverse. Float / decimal / boolean ids are refused by both faces with the same message,
and the ledger is left untouched. No seeded randomness: only the charges are checked.
"""

import decimal
import re
import uuid

import duckdb
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session

RHO = 1e-3  # the whole budget of every user
BIG = 2**64 - 1  # a uint64 id above 2**63 - 1
UID = "00000000-0000-4000-8000-00000000abcd"

# (SQL type, SQL literal of the id): the id every case uses
SQL_IDS = [
    ("TINYINT", "7"),
    ("SMALLINT", "7"),
    ("INTEGER", "7"),
    ("BIGINT", "7"),
    ("UTINYINT", "7"),
    ("USMALLINT", "7"),
    ("UINTEGER", "7"),
    ("UBIGINT", "7"),
    ("UBIGINT", str(BIG)),
    ("HUGEINT", "7"),
    ("VARCHAR", "'7'"),
    ("UUID", f"'{UID.upper()}'"),  # DuckDB's UUID text is lowercase, like str(uuid.UUID)
]


def _pandas_ids(sql_type, literal):
    """The same id as a pandas column of another dtype (narrowest signed or unsigned)."""
    if sql_type == "VARCHAR":
        return pd.Series(["7"], dtype="str")
    if sql_type == "UUID":
        return pd.Series([uuid.UUID(UID)], dtype=object)
    if int(literal) == BIG:
        return pd.Series([BIG], dtype=np.uint64)
    # a width and sign different from the SQL type: the key must not depend on either
    return pd.Series(
        [7],
        dtype=np.uint8
        if sql_type.startswith(("TINY", "SMALL", "INT", "BIG", "HUGE"))
        else np.int64,
    )


# pandas dtypes of the id 7 (or BIG, or the UUID) and the SQL type the same id takes in SQL
PANDAS_IDS = [
    (pd.Series([7], dtype=np.int8), "BIGINT", "7"),
    (pd.Series([7], dtype=np.int16), "UBIGINT", "7"),
    (pd.Series([7], dtype=np.int32), "UBIGINT", "7"),
    (pd.Series([7], dtype=np.int64), "UBIGINT", "7"),
    (pd.Series([7], dtype=np.uint8), "TINYINT", "7"),
    (pd.Series([7], dtype=np.uint16), "UBIGINT", "7"),
    (pd.Series([7], dtype=np.uint32), "UBIGINT", "7"),
    (pd.Series([7], dtype=np.uint64), "UBIGINT", "7"),
    (pd.Series([BIG], dtype=np.uint64), "UBIGINT", str(BIG)),
    (pd.Series([BIG], dtype=object), "UBIGINT", str(BIG)),
    (pd.Series([7], dtype="Int64"), "UBIGINT", "7"),
    (pd.Series([7], dtype="UInt8"), "BIGINT", "7"),
    (pd.Series(["7"], dtype="string"), "VARCHAR", "'7'"),
    (pd.Series(["7"], dtype=object), "VARCHAR", "'7'"),
    (pd.Series([uuid.UUID(UID)], dtype=object), "UUID", f"'{UID}'"),
    (pd.Series([UID], dtype="str"), "UUID", f"'{UID}'"),
]


def _frame(ids):
    n = len(ids)
    return pd.DataFrame(
        {"user_id": ids.reset_index(drop=True), "x": np.full(n, 500_000.0),
         "y": np.full(n, 8_800_000.0)}
    )  # fmt: skip


def _sql_spend(con, sql_type, literal):
    """gp_privatize one point of the id, as a column of ``sql_type``; True if released."""
    row = con.execute(
        f"SELECT gp_privatize(u, 1.0, 2.0, {RHO}) IS NOT NULL FROM "
        f"(SELECT CAST({literal} AS {sql_type}) AS u)"
    ).fetchall()
    return row[0][0]


def _py_spend(session, ids):
    out = _frame(ids).geopriv(session, user="user_id", x="x", y="y", crs=32724).privatize(rho=RHO)
    res = out.attrs["geopriv"]
    return res.n_charged, res.n_excluded


def _setup():
    s = Session(budget=gp.CGP(rho=RHO))
    con = duckdb.connect()
    gp.duckdb.register(con, s)
    return s, con


@pytest.mark.parametrize("sql_type, literal", SQL_IDS, ids=[f"{t}-{v}" for t, v in SQL_IDS])
def test_sql_spends_the_budget_then_the_accessor_refuses_the_user(sql_type, literal):
    s, con = _setup()
    assert _sql_spend(con, sql_type, literal)
    spent = s.spent().to_dict()
    assert len(spent) == 1 and list(spent.values()) == [pytest.approx(RHO)]
    assert _py_spend(s, _pandas_ids(sql_type, literal)) == (0, 1)  # the same user: no budget left
    assert s.spent().to_dict() == spent


@pytest.mark.parametrize("sql_type, literal", SQL_IDS, ids=[f"{t}-{v}" for t, v in SQL_IDS])
def test_the_accessor_spends_the_budget_then_sql_refuses_the_user(sql_type, literal):
    s, con = _setup()
    assert _py_spend(s, _pandas_ids(sql_type, literal)) == (1, 0)
    spent = s.spent().to_dict()
    assert not _sql_spend(con, sql_type, literal)  # NULL: refused for lack of budget
    assert s.spent().to_dict() == spent and len(spent) == 1


@pytest.mark.parametrize(
    "ids, sql_type, literal", PANDAS_IDS, ids=[f"{c[0].dtype}-{c[2]}" for c in PANDAS_IDS]
)
def test_each_pandas_dtype_is_the_sql_user_both_ways(ids, sql_type, literal):
    s, con = _setup()
    assert _py_spend(s, ids) == (1, 0)
    assert not _sql_spend(con, sql_type, literal)
    s2, con2 = _setup()
    assert _sql_spend(con2, sql_type, literal)
    assert _py_spend(s2, ids) == (0, 1)
    assert s.spent().index.tolist() == s2.spent().index.tolist()  # one key, one type


def test_a_frame_registered_in_duckdb_is_charged_as_the_same_users():
    """The issue's case: one uint64 column read by pandas and by DuckDB (as UBIGINT)."""
    df = pd.DataFrame({"user_id": np.array([7, 8, BIG], dtype=np.uint64),
                       "x": [500_000.0] * 3, "y": [8_800_000.0] * 3})  # fmt: skip
    s, con = _setup()
    con.register("pts", df)
    assert con.execute("SELECT typeof(user_id) FROM pts LIMIT 1").fetchall() == [("UBIGINT",)]
    n = con.execute(f"SELECT count(gp_privatize(user_id, x, y, {RHO})) FROM pts").fetchall()
    assert n == [(3,)]
    out = df.geopriv(s, user="user_id", x="x", y="y", crs=32724).privatize(rho=RHO)
    assert out.attrs["geopriv"].n_excluded == 3
    assert sorted(s.spent().index.tolist()) == [7, 8, BIG]


def test_big_uint64_ids_survive_reopening_the_ledger(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Session(path, budget=gp.CGP(rho=RHO)) as s:
        con = duckdb.connect()
        gp.duckdb.register(con, s)
        assert _sql_spend(con, "UBIGINT", str(BIG))
        assert _sql_spend(con, "BIGINT", str(2**63 - 1))
    with Session(path) as s:
        assert sorted(s.spent().index.tolist()) == [2**63 - 1, BIG]
        assert _py_spend(s, pd.Series([BIG], dtype=np.uint64)) == (0, 1)
        assert _py_spend(s, pd.Series([2**63 - 1], dtype=np.int64)) == (0, 1)
        s.ledger.verify()


# ------------------------------------------------------------------------------------ refused

REFUSED = [
    (pd.Series([7.0]), "DOUBLE", "7"),
    (pd.Series([7.0], dtype=np.float32), "FLOAT", "7"),
    (pd.Series([7.0], dtype="Float64"), "DOUBLE", "7"),
    (pd.Series([decimal.Decimal("7.00")], dtype=object), "DECIMAL(10,2)", "7"),
    (pd.Series([True]), "BOOLEAN", "true"),
    (pd.Series([True], dtype="boolean"), "BOOLEAN", "true"),
]


def _message(exc):
    return re.sub(r"^.*?Error: ", "", str(exc))


@pytest.mark.parametrize(
    "ids, sql_type, literal", REFUSED, ids=[f"{c[0].dtype}-{c[1]}" for c in REFUSED]
)
def test_float_decimal_bool_ids_are_refused_by_both_faces_with_one_message(ids, sql_type, literal):
    s, con = _setup()
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="not user ids") as py:
        _py_spend(s, ids)
    with pytest.raises(duckdb.Error) as sql:
        _sql_spend(con, sql_type, literal)
    assert _message(py.value) == _message(sql.value)
    assert "'user_id'" in _message(py.value) and "CAST(user_id AS BIGINT)" in _message(py.value)
    assert _message(py.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before


def test_a_table_of_doubles_is_refused_before_any_row_is_charged():
    s, con = _setup()
    con.execute("CREATE TABLE pts AS SELECT CAST(i AS DOUBLE) AS u FROM range(5000) t(i)")
    before = s.ledger.snapshot()
    with pytest.raises(duckdb.Error, match="holds float values"):
        con.execute(f"SELECT gp_privatize(u, 1.0, 2.0, {RHO}) FROM pts").fetchall()
    assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    "ids, what",
    [
        (pd.Series([7, "7"], dtype=object), "mixed-type"),
        (pd.Series([7, True], dtype=object), "mixed-type"),  # pandas would merge 1 and True
        (pd.Series([7, 7.5], dtype=object), "mixed-type"),
        (pd.Series([uuid.UUID(UID), UID], dtype=object), "mixed-type"),
    ],
)
def test_mixed_type_columns_are_refused_and_nothing_is_charged(ids, what):
    s, _ = _setup()
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match=f"holds {what} values, which are not user ids"):
        _py_spend(s, ids)
    assert s.ledger.snapshot() == before


def test_relation_helpers_key_users_like_the_accessor():
    s, con = _setup()
    q = (f"SELECT CAST({BIG} AS UBIGINT) AS boat, 10.0 AS x, 0.0 AS y UNION ALL "
         "SELECT CAST(7 AS UBIGINT), 20.0, 0.0")  # fmt: skip
    rel = gp.duckdb.nearest_users(con, q, user="boat", x="x", y="y", point=(0.0, 0.0), k=1,
                                  rho=RHO)  # fmt: skip
    assert rel.types[0] == "UBIGINT" and rel.fetchall()[0][0] in (7, BIG)
    assert sorted(s.spent().index.tolist()) == [7, BIG]


def test_relation_helpers_refuse_float_ids_by_column_name():
    s, con = _setup()
    before = s.ledger.snapshot()
    q = "SELECT 7.0::DOUBLE AS boat, 10.0 AS x, 0.0 AS y"
    for fn, kw in ((gp.duckdb.knn, {"point": (0.0, 0.0), "k": 1}),
                   (gp.duckdb.nearest_users, {"point": (0.0, 0.0), "k": 1}),
                   (gp.duckdb.convex_hulls, {})):  # fmt: skip
        with pytest.raises(gp.InvalidInputError, match="column 'boat' holds float values"):
            fn(con, q, user="boat", x="x", y="y", rho=RHO, **kw)
    assert s.ledger.snapshot() == before


# every SQL function that keys users, called on one row of the id ``u`` (one point per list)
MACROS = {
    "gp_privatize": f"gp_privatize(u, 1.0, 2.0, {RHO})",
    "gp_privatize_gp": "gp_privatize_gp(u, 1.0, 2.0, 0.03)",
    "gp_in_region": f"gp_in_region(u, 1.0, 2.0, ST_AsWKB_placeholder, {RHO}, 2)",
    "gp_kde_contribution": f"gp_kde_contribution(u, 1.0, 2.0, 0.0, 0.0, 300.0, {RHO}, 2)",
    "gp_knn": f"gp_knn(u, [1.0, 5.0], [2.0, 2.0], 0.0, 0.0, 1, {RHO})",
    "gp_knn_gp": "gp_knn_gp(u, [1.0, 5.0], [2.0, 2.0], 0.0, 0.0, 1, 0.03)",
    "gp_convex_hull": f"gp_convex_hull(u, [1.0, 500.0, 9.0], [2.0, 9.0, 700.0], {RHO})",
    "gp_convex_hull_gp": "gp_convex_hull_gp(u, [1.0, 500.0, 9.0], [2.0, 9.0, 700.0], 0.03)",
}


def _call(con, name, sql_type, literal):
    import shapely

    wkb = shapely.to_wkb(shapely.box(-10.0, -10.0, 10.0, 10.0))
    expr = MACROS[name].replace("ST_AsWKB_placeholder", "$w")
    params = {"w": wkb} if "$w" in expr else {}
    return con.execute(
        f"SELECT {expr} FROM (SELECT CAST({literal} AS {sql_type}) AS u)", params
    ).fetchall()


@pytest.mark.parametrize("name", sorted(MACROS))
def test_every_sql_function_keys_a_big_ubigint_as_the_accessor_does(name):
    s = Session(budget=gp.CGP(rho=1.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s)
    _call(con, name, "UBIGINT", str(BIG))
    assert s.spent().index.tolist() == [BIG]  # the int, not the text '18446744073709551615'
    before = s.ledger.snapshot()
    for sql_type, literal in (("DOUBLE", "7"), ("DECIMAL(10,2)", "7"), ("BOOLEAN", "true")):
        with pytest.raises(duckdb.Error, match=r"column 'user_id' holds .* values, which are not"):
            _call(con, name, sql_type, literal)
    assert s.ledger.snapshot() == before


def test_clip_user_keys_ubigint_and_uuid_users_like_the_accessor():

    import h3

    from gpframe.duckdb.grid import clip_user, register_grid

    sql = (gp.duckdb.SQL_DIR / "grid_stats.sql").read_text()
    cell = h3.str_to_int(h3.latlng_to_cell(40.7, -74.0, 8))
    s = Session(central=gp.DP(epsilon=1000.0))
    con = duckdb.connect()
    register_grid(con, s)
    for typ, a, b in (("UBIGINT", str(BIG), "7"), ("UUID", f"'{UID}'", f"'{UID[:-1]}e'")):
        con.execute(
            f"CREATE OR REPLACE TABLE pings AS SELECT CAST(CASE WHEN i % 2 = 0 THEN {a} ELSE {b} "
            f"END AS {typ}) AS vessel, CAST({cell} AS UBIGINT) AS cell, CAST(i % 30 AS DOUBLE) "
            "AS speed FROM range(40) t(i)"
        )
        clip_user(con, "pings", user="vessel", cell="cell", value="speed", bounds=(0, 30),
                  epsilon=0.5, occupancy="public")  # fmt: skip
        con.sql(sql).fetchall()
    spent = s.spent(notion="central")
    assert sorted(map(str, spent.index.tolist())) == sorted([str(BIG), "7", UID, UID[:-1] + "e"])
    assert all(type(k) is int for k in spent.index.tolist() if str(k).isdigit())
    before = s.ledger.snapshot()
    con.execute("CREATE OR REPLACE TABLE pings AS SELECT 7.0::DOUBLE AS vessel, "
                f"CAST({cell} AS UBIGINT) AS cell, 1.0 AS speed")  # fmt: skip
    with pytest.raises(gp.InvalidInputError, match="column 'vessel' holds float values"):
        clip_user(con, "pings", user="vessel", cell="cell", value="speed", bounds=(0, 30),
                  epsilon=0.5, occupancy="public")  # fmt: skip
    assert s.ledger.snapshot() == before


def test_monitor_users_are_the_accessor_and_sql_ledger_users():
    from gpframe.queries.monitor import threshold_query

    s = Session(central=gp.DP(epsilon=10.0))
    threshold_query(s, 900, tau=500, users=np.array([7, BIG], dtype=np.uint64), epsilon=0.5)
    first = s.spent(notion="central")
    assert sorted(first.index.tolist()) == [7, BIG]
    threshold_query(s, 900, tau=500, users=pd.Series([7], dtype="Int8"), epsilon=0.5)
    second = s.spent(notion="central")
    assert sorted(second.index.tolist()) == [7, BIG] and second[7] > first[7]
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="'users' holds float values"):
        threshold_query(s, 900, tau=500, users=[7.0], epsilon=0.5)
    assert s.ledger.snapshot() == before


ACCESSOR_CALLS = {
    "privatize": lambda b: b.privatize(rho=RHO),
    "knn": lambda b: b.knn((500_000.0, 8_800_000.0), 1, rho=RHO),
    "convex_hull": lambda b: b.convex_hull(rho=RHO),
    "nearest_users": lambda b: b.nearest_users((500_000.0, 8_800_000.0), 1, rho=RHO, reduce="last"),
    "range_count": lambda b: b.range_count(
        __import__("shapely").box(499_000.0, 8_799_000.0, 501_000.0, 8_801_000.0),
        rho=RHO,
        reduce="last",
    ),
    "kde": lambda b: b.kde([(500_000.0, 8_800_000.0)], bandwidth_m=500.0, rho=RHO, reduce="last"),
}


@pytest.mark.parametrize("op", sorted(ACCESSOR_CALLS))
def test_every_accessor_operation_charges_the_canonical_keys(op):
    """Big uint64 ids and UUID objects reach the ledger as the keys SQL uses for them."""
    rs = np.random.default_rng(0)  # true points only
    n = 12
    xy = {"x": 500_000.0 + rs.uniform(-300, 300, n), "y": 8_800_000.0 + rs.uniform(-300, 300, n)}
    for ids, keys in (
        (np.array([7, BIG] * (n // 2), dtype=np.uint64), [7, BIG]),
        (np.array([uuid.UUID(UID), uuid.UUID(int=3)] * (n // 2), dtype=object),
         sorted([UID, str(uuid.UUID(int=3))])),
    ):  # fmt: skip
        s = Session(budget=gp.CGP(rho=1.0))
        df = pd.DataFrame({"user_id": ids, **xy})
        ACCESSOR_CALLS[op](df.geopriv(s, user="user_id", x="x", y="y", crs=32724))
        assert sorted(s.spent().index.tolist()) == keys
