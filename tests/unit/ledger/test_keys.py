"""gpframe.ledger.keys: one canonical ledger key per user id, whatever the dtype."""

import decimal
import re
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gpframe as gp
from gpframe.ledger import Session
from gpframe.ledger.keys import (
    canonical,
    check_users,
    from_sql,
    refusal,
    sql_user_expr,
    to_sql,
    user_keys,
)

BIG = 2**64 - 1
U = uuid.UUID("12345678-1234-5678-1234-567812345678")

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_every_integer_width_and_sign_gives_the_python_int(dtype):
    codes, keys = user_keys(np.array([7, 9, 7], dtype=dtype))
    assert codes.tolist() == [0, 1, 0] and codes.dtype == np.int64
    assert keys == [7, 9] and all(type(k) is int for k in keys)


@pytest.mark.parametrize("dtype", [d.capitalize().replace("Ui", "UI") for d in INT_DTYPES])
def test_nullable_integers_give_the_same_keys(dtype):
    assert user_keys(pd.Series([7, 9, 7], dtype=dtype))[1] == [7, 9]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_arrow_integers_give_the_same_keys(dtype):
    assert user_keys(pa.array([7, 9, 7], type=getattr(pa, dtype)()))[1] == [7, 9]
    assert user_keys(pa.chunked_array([[7], [9, 7]], type=getattr(pa, dtype)()))[0].tolist() == [
        0, 1, 0
    ]  # fmt: skip


def test_uint64_above_int64_stays_exact_and_distinct():
    ids = np.array([BIG, 2**63, 2**63 - 1, BIG], dtype=np.uint64)
    codes, keys = user_keys(ids)
    assert keys == [BIG, 2**63, 2**63 - 1] and codes.tolist() == [0, 1, 2, 0]
    assert user_keys(pa.array(ids))[1] == keys
    assert user_keys(pd.Series(ids, dtype="UInt64"))[1] == keys
    assert user_keys(np.array([BIG, -1], dtype=object))[1] == [BIG, -1]
    assert canonical([np.uint64(BIG), np.int8(-3)]) == [BIG, -3]


def test_integers_outside_64_bits_are_refused():
    with pytest.raises(gp.InvalidInputError, match=re.escape("outside -2**63 .. 2**64 - 1")):
        user_keys(np.array([2**64], dtype=object), "uid")
    with pytest.raises(gp.InvalidInputError, match="outside"):
        user_keys([-(2**63) - 1], "uid")


@pytest.mark.parametrize(
    "ids",
    [
        np.array(["a", "b", "a"]),
        np.array(["a", "b", "a"], dtype=object),
        pd.Series(["a", "b", "a"], dtype="string"),
        pd.Series(["a", "b", "a"], dtype="string[pyarrow]"),
        pd.Series(["a", "b", "a"], dtype="str"),
        pd.Series(["a", "b", "a"], dtype=pd.ArrowDtype(pa.string())),
        pa.array(["a", "b", "a"]),
        pa.array(["a", "b", "a"], type=pa.large_string()),
        pa.array(["a", "b", "a"]).dictionary_encode(),
        ["a", "b", "a"],
    ],
    ids=lambda v: type(v).__name__ + "-" + str(getattr(v, "dtype", getattr(v, "type", ""))),
)
def test_text_ids_stay_text(ids):
    codes, keys = user_keys(ids)
    assert codes.tolist() == [0, 1, 0] and keys == ["a", "b"]
    assert all(type(k) is str for k in keys)


def test_text_and_integers_are_different_users():
    assert user_keys(np.array(["7"]))[1] != user_keys(np.array([7]))[1]


def test_uuids_become_their_canonical_text():
    codes, keys = user_keys(pd.Series([U, uuid.UUID(int=1), U], dtype=object))
    assert keys == ["12345678-1234-5678-1234-567812345678", "00000000-0000-0000-0000-000000000001"]
    assert codes.tolist() == [0, 1, 0]
    assert canonical([U]) == [str(U)] == [str(U).lower()]


@pytest.mark.parametrize(
    "ids, what",
    [
        (np.array([7.0]), "float"),
        (np.array([7.0], dtype=np.float32), "float"),
        (pd.Series([7.0], dtype="Float64"), "float"),
        (pd.Series([7.0], dtype=pd.ArrowDtype(pa.float64())), "float"),
        (pa.array([7.0]), "float"),
        (np.array([7.0], dtype=object), "float"),
        ([7.0], "float"),
        (np.array([decimal.Decimal("7.00")], dtype=object), "decimal"),
        (pa.array([decimal.Decimal("7.00")]), "decimal"),
        (pd.Series([decimal.Decimal("7")], dtype=pd.ArrowDtype(pa.decimal128(10, 2))), "decimal"),
        (np.array([True]), "boolean"),
        (pd.Series([True], dtype="boolean"), "boolean"),
        (pa.array([True]), "boolean"),
        ([True, False], "boolean"),
        (np.array([1, True], dtype=object), "mixed-type"),
        (np.array([1, "1"], dtype=object), "mixed-type"),
        (np.array([1, 1.5], dtype=object), "mixed-type"),
        (np.array([U, str(U)], dtype=object), "mixed-type"),
        (np.array([b"a"], dtype=object), "bytes"),
        (np.array(["2020-01-01"], dtype="datetime64[ns]"), "datetime64[ns]"),
    ],
    ids=lambda v: str(getattr(v, "dtype", type(v).__name__)) if not isinstance(v, str) else v,
)
def test_ambiguous_ids_are_refused_with_the_one_message(ids, what):
    with pytest.raises(gp.InvalidInputError) as exc:
        user_keys(ids, "uid")
    assert str(exc.value) == str(refusal("uid", what))
    assert str(exc.value).endswith("Nothing was charged.")


@pytest.mark.parametrize(
    "ids",
    [
        pd.Series([7, None], dtype="Int64"),
        pd.Series(["a", None], dtype="string"),
        np.array(["a", None], dtype=object),
        pa.array([7, None]),
    ],
)
def test_missing_ids_are_refused(ids):
    with pytest.raises(gp.InvalidInputError, match=r"1 missing \(NULL/NA\) user id;"):
        user_keys(ids, "uid")


def test_check_users_refuses_by_dtype_and_accepts_every_key_type():
    for ok in (np.array([1], np.uint64), pd.Series([1], dtype="Int8"), pd.Series(["a"]),
               pd.Series([U], dtype=object)):  # fmt: skip
        check_users(ok, "uid")
    for bad in (pd.Series([1.0]), pd.Series([True]), pd.Series([1, "a"], dtype=object)):
        with pytest.raises(gp.InvalidInputError, match="'uid' holds"):
            check_users(bad, "uid")


def test_canonical_keeps_positions_and_duplicates():
    assert canonical(np.array([3, 1, 3], dtype=np.int16)) == [3, 1, 3]
    assert canonical(np.array([], dtype=np.int64)) == []


@pytest.mark.parametrize(
    "typ, cast",
    [
        ("TINYINT", "BIGINT"),
        ("UINTEGER", "BIGINT"),
        ("BIGINT", "BIGINT"),
        ("UBIGINT", "UBIGINT"),
        ("HUGEINT", "BIGINT"),
        ("VARCHAR", "VARCHAR"),
        ("UUID", "VARCHAR"),
    ],
)
def test_sql_user_expr_casts_each_id_type(typ, cast):
    assert sql_user_expr(typ, '"u"', "u") == f'CAST("u" AS {cast})'


@pytest.mark.parametrize(
    "typ, what",
    [
        ("DOUBLE", "float"),
        ("FLOAT", "float"),
        ("DECIMAL(18,3)", "decimal"),
        ("BOOLEAN", "boolean"),
        ("DATE", "DATE"),
    ],
)
def test_sql_user_expr_refuses_like_pandas(typ, what):
    with pytest.raises(gp.InvalidInputError) as exc:
        sql_user_expr(typ, '"u"', "u")
    assert str(exc.value) == str(refusal("u", what))


def test_storage_encoding_round_trips_and_keeps_types_apart():
    for key in (7, -(2**63), 2**63 - 1, 2**63, BIG, "7", "u64:7", str(U)):
        assert from_sql(to_sql(key)) == key and type(from_sql(to_sql(key))) is type(key)
    assert isinstance(to_sql(BIG), bytes) and to_sql("u64:7") == "u64:7"


def test_the_ledger_keeps_big_uint64_users_across_reopening(tmp_path):
    path = tmp_path / "l.sqlite"
    with Session(path, budget=gp.GP(eps=1)) as s:
        with s.reserve(np.array([BIG, 7], dtype=np.uint64), 0.25) as r:
            r.charge([0.25, 0.25])
        s.spent(["7", 2**63])  # other users: text 7 and 2**63 are not BIG nor 7
    with Session(path) as s:
        spent = s.spent([BIG, 7, "7", 2**63])
        assert spent.tolist() == [0.25, 0.25, 0.0, 0.0]
        assert s.spent([np.uint64(BIG)]).tolist() == [0.25]
        s.ledger.verify()


def test_the_session_api_takes_uuids_and_refuses_floats():
    s = Session(budget=gp.GP(eps=1))
    with s.reserve([U], 0.5) as r:
        r.charge([0.5])
    assert s.spent([str(U)]).tolist() == [0.5]
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="holds float values, which are not user ids"):
        s.reserve(np.array([7.0]), 0.1)
    assert s.ledger.snapshot() == before
