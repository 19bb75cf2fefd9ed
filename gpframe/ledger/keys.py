"""One ledger key per user, whatever the frontend or the dtype of the user-id column.

A person must have one budget. The same id read by pandas (``int64``, ``uint64``, ``Int64``,
``object``...), by numpy, or by DuckDB (``TINYINT`` .. ``UBIGINT``, ``VARCHAR``, ``UUID``) must
become the same ledger key, and a column whose values have no unambiguous identity must be
refused by every frontend with the same message, before anything is charged.

Canonical keys
--------------
* **Integers** of any width and sign (numpy ``int8`` .. ``uint64``, pandas ``Int8`` ..
  ``UInt64`` without missing values, Python ``int``, DuckDB ``TINYINT`` .. ``UBIGINT``) become
  the Python ``int`` of the same value: ``uint8`` 7, ``int64`` 7 and DuckDB ``UBIGINT`` 7 are
  one user. Values from ``-2**63`` to ``2**64 - 1`` are accepted. Both ledger stores keep
  first-seen users in batches (:func:`encode_users`): an int64 array as one blob, other ids
  each tagged with its type, a value above ``2**63 - 1`` (``uint64`` only) as 8 unsigned
  bytes, read back as the same Python int. (Files of the SQLite layout's version 1 kept one
  row per user, such a value as the BLOB ``b"u64:" + decimal digits``: :func:`to_sql` /
  :func:`from_sql`.)
* **Text** (``str``; numpy ``<U``, pandas ``object`` / ``string`` / ``str`` / Arrow string,
  DuckDB ``VARCHAR``) stays the ``str``. Text and integers are different users: ``"7"`` is
  not ``7`` (cast the column if they should be the same).
* **UUIDs** (``uuid.UUID`` objects, DuckDB ``UUID``) become the canonical lowercase,
  hyphenated text ``str(uuid)``, which is what DuckDB's ``CAST(u AS VARCHAR)`` gives.

Refused everywhere with the message of :func:`refusal`: floats (``7.0`` would be one user in
one frontend and ``'7.0'`` in another), decimals, booleans, columns mixing types (``1`` and
``"1"``, or ``1`` and ``True``, which pandas would merge), missing ids (NULL / NA) and any
other type (dates, bytes...). Nothing is charged when a key is refused.

Only the distinct ids are converted to Python objects: :func:`user_keys` factorizes the column
first (numpy / pandas / Arrow hash tables), then converts each distinct value once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, LedgerCorruptError, LedgerError

__all__ = [
    "KEY_MAX",
    "KEY_MIN",
    "canonical",
    "check_users",
    "decode_users",
    "encode_users",
    "from_sql",
    "refusal",
    "sql_user_expr",
    "to_sql",
    "uid_from_bytea",
    "uid_to_bytea",
    "user_keys",
]

#: smallest integer id (int64) and largest (uint64)
KEY_MIN = -(2**63)
KEY_MAX = 2**64 - 1
_I64_MAX = 2**63 - 1
_BLOB_PREFIX = b"u64:"

#: DuckDB type names (``typeof``) of integer ids, by the key path they take in SQL
SQL_SIGNED = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")
SQL_UNSIGNED = ("UBIGINT",)
SQL_TEXT = ("VARCHAR", "UUID")
# wider integer types: cast to the 64-bit type of their sign (out-of-range values make the
# cast fail loudly rather than become another user)
SQL_WIDE = {"HUGEINT": "BIGINT", "UHUGEINT": "UBIGINT"}


def refusal(column: str, what: str) -> InvalidInputError:
    """Return the one error every frontend raises for a user-id column that cannot be a ledger key.

    ``what`` names the kind of values (``"float"``, ``"decimal"``, ``"boolean"``,
    ``"mixed-type"`` or a type name) the same way for pandas and DuckDB input.

    >>> print(refusal("uid", "float"))  # doctest: +NORMALIZE_WHITESPACE
    user-id column 'uid' holds float values, which are not user ids (7.0 would not be the same
    user in every frontend). Use integers, text or UUIDs: cast the column to an integer type
    (CAST(uid AS BIGINT) in SQL, df['uid'].astype('int64') in pandas) or to text
    (CAST(uid AS VARCHAR), df['uid'].astype(str)). Nothing was charged.
    """
    return InvalidInputError(
        f"user-id column {column!r} holds {what} values, which are not user ids (7.0 would not "
        "be the same user in every frontend). Use integers, text or UUIDs: cast the column to "
        f"an integer type (CAST({column} AS BIGINT) in SQL, df[{column!r}].astype('int64') in "
        f"pandas) or to text (CAST({column} AS VARCHAR), df[{column!r}].astype(str)). "
        "Nothing was charged."
    )


def _missing(column: str, n: int) -> InvalidInputError:
    return InvalidInputError(
        f"user-id column {column!r} has {n} missing (NULL/NA) user {'id' if n == 1 else 'ids'}; "
        f"every row must belong to a user: drop them first (df.dropna(subset=[{column!r}]), or "
        f"WHERE {column} IS NOT NULL in SQL). Nothing was charged."
    )


def _out_of_range(column: str) -> InvalidInputError:
    return InvalidInputError(
        f"user-id column {column!r} holds integers outside -2**63 .. 2**64 - 1; use text ids "
        f"(df[{column!r}].astype(str), CAST({column} AS VARCHAR)). Nothing was charged."
    )


# ------------------------------------------------------------------------------ classification


def _numpy_what(dtype: np.dtype) -> str | None:
    """None for a dtype whose values can be keys (int, unsigned, text, object), else its kind."""
    kind = dtype.kind
    if kind in "iuUO":
        return None
    return {"f": "float", "c": "complex", "b": "boolean"}.get(kind, str(dtype))


def _object_what(inferred: str) -> str:
    return {
        "floating": "float",
        "mixed-integer-float": "mixed-type",
        "integer-na": "float",
        "decimal": "decimal",
        "boolean": "boolean",
        "mixed-integer": "mixed-type",
        "mixed": "mixed-type",
        "complex": "complex",
    }.get(inferred, inferred)


def _arrow_what(typ: Any) -> str | None:
    import pyarrow as pa

    t = pa.types
    if t.is_integer(typ) or t.is_string(typ) or t.is_large_string(typ):
        return None
    if t.is_floating(typ):
        return "float"
    if t.is_decimal(typ):
        return "decimal"
    if t.is_boolean(typ):
        return "boolean"
    return str(typ)


# ----------------------------------------------------------------------------------- factorize


def _from_ints(arr: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    import pandas as pd

    codes, uniques = pd.factorize(arr, sort=False)
    return np.asarray(codes, dtype=np.int64), np.asarray(uniques).tolist()  # exact Python ints


def _from_objects(arr: np.ndarray, column: str) -> tuple[np.ndarray, list[Any]]:
    import pandas as pd

    if arr.size == 0:
        return np.zeros(0, np.int64), []
    na = pd.isna(arr)
    if na.any():
        raise _missing(column, int(na.sum()))
    # on the whole column: pandas' hash table merges 1 and True (and 1 and 1.0) before the
    # distinct values could show the mix
    inferred = pd.api.types.infer_dtype(arr, skipna=False)
    codes, uniques = pd.factorize(arr, sort=False)
    codes = np.asarray(codes, dtype=np.int64)
    uniq = np.asarray(uniques, dtype=object).tolist()
    if inferred == "integer":
        keys = [int(u) for u in uniq]  # numpy ints in an object column become Python ints
        if min(keys) < KEY_MIN or max(keys) > KEY_MAX:
            raise _out_of_range(column)
        return codes, keys
    if inferred == "string":
        return codes, [str(u) for u in uniq]
    if inferred == "mixed" and all(isinstance(u, uuid.UUID) for u in uniq):
        # UUID never equals a non-UUID, so the hash table kept every distinct value apart
        return codes, [str(u) for u in uniq]
    raise refusal(column, _object_what(inferred))


def _arrow_keys(a: Any, column: str) -> tuple[np.ndarray, list[Any]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if hasattr(a, "combine_chunks"):
        a = a.combine_chunks()
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    what = _arrow_what(a.type)
    if what is not None:
        raise refusal(column, what)
    if a.null_count:
        raise _missing(column, a.null_count)
    if pa.types.is_integer(a.type):
        return _from_ints(np.asarray(a.to_numpy(zero_copy_only=False)))
    enc = pc.dictionary_encode(a)  # text: only the distinct ids become Python strings
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return codes, [str(s) for s in enc.dictionary.to_pylist()]


def _pandas_array(values: Any, column: str) -> np.ndarray:
    """Return the numpy values of a pandas Series/Index/array (nullable ints unmasked)."""
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, np.dtype):
        return np.asarray(values)
    na = values.isna() if hasattr(values, "isna") else pd.isna(values)
    n_na = int(np.asarray(na).sum())
    if pd.api.types.is_bool_dtype(dtype):
        raise refusal(column, "boolean")
    if pd.api.types.is_float_dtype(dtype):
        raise refusal(column, "float")
    if pd.api.types.is_integer_dtype(dtype):  # Int8 .. UInt64, Arrow ints
        if n_na:
            raise _missing(column, n_na)
        return np.asarray(values.to_numpy(dtype=np.dtype(dtype.numpy_dtype)))
    if pd.api.types.is_string_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype):
        if n_na:
            raise _missing(column, n_na)
        return np.asarray(values.to_numpy(dtype=object), dtype=object)
    if isinstance(dtype, pd.CategoricalDtype):  # the categories' own values decide
        return np.asarray(values.to_numpy(dtype=object), dtype=object)
    if isinstance(dtype, pd.ArrowDtype):
        raise refusal(column, _arrow_what(dtype.pyarrow_dtype) or str(dtype))
    raise refusal(column, str(dtype))


def user_keys(values: Any, column: str = "user") -> tuple[np.ndarray, list[Any]]:
    """Factorize user ids into (per-row codes, canonical key of each code).

    Parameters
    ----------
    values : array-like
        One id per row: a pandas Series / Index / array, a numpy array, a pyarrow Array or
        ChunkedArray (e.g. a DuckDB column), or a list.
    column : str
        Name of the user-id column (or argument), used in error messages.

    Returns
    -------
    codes : ndarray of int64
        ``keys[codes[i]]`` is row i's ledger key; codes number the distinct ids in order of
        first appearance.
    keys : list
        Canonical keys (Python ``int`` or ``str``), one per distinct id.

    Raises
    ------
    InvalidInputError
        Floats, decimals, booleans, mixed types, missing ids or any other type
        (:func:`refusal`); integers outside ``-2**63 .. 2**64 - 1``.

    Examples
    --------
    >>> import uuid
    >>> user_keys(np.array([7, 2**64 - 1, 7], dtype=np.uint64))
    (array([0, 1, 0]), [7, 18446744073709551615])
    >>> user_keys(np.array([7, 8], dtype=np.int8))[1] == user_keys([7, 8])[1]
    True
    >>> user_keys([uuid.UUID(int=1)])[1]
    ['00000000-0000-0000-0000-000000000001']
    >>> user_keys(np.array([7.0]), "uid")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: user-id column 'uid' holds float values, ...
    """
    import pandas as pd

    if type(values).__module__.startswith("pyarrow"):
        return _arrow_keys(values, column)
    if isinstance(values, (pd.Series, pd.Index)) or pd.api.types.is_extension_array_dtype(
        getattr(values, "dtype", None)
    ):
        arr = _pandas_array(values, column)
    elif isinstance(values, np.ndarray):
        arr = values
    else:
        arr = np.fromiter(values, dtype=object)  # keeps 1 and "1" apart (asarray would not)
    if arr.ndim != 1:
        raise InvalidInputError(
            f"user ids {column!r} must be one-dimensional, got shape {arr.shape}. "
            "Nothing was charged."
        )
    what = _numpy_what(arr.dtype)
    if what is not None:
        raise refusal(column, what)
    if arr.dtype.kind in "iu":
        return _from_ints(arr)
    if arr.dtype.kind == "U":
        codes, uniques = pd.factorize(arr, sort=False)
        return np.asarray(codes, dtype=np.int64), [str(u) for u in uniques.tolist()]
    return _from_objects(arr, column)


def canonical(values: Any, column: str = "user") -> list[Any]:
    """Return the canonical key of each value, position by position (duplicates stay duplicates).

    For ids that are already distinct (the uniques of a factorized column), this converts
    each one once.

    >>> canonical(np.array([3, 7], dtype=np.uint16))
    [3, 7]
    """
    codes, keys = user_keys(values, column)
    if not keys:
        return []
    table = np.empty(len(keys), dtype=object)
    table[:] = keys
    return table[codes].tolist()


def check_users(values: Any, column: str) -> None:
    """Refuse a user-id column that cannot give ledger keys, before anything is charged.

    Integer and text dtypes are checked by their dtype (and missing values) alone; an object
    column value by value (:func:`user_keys`), since only its values tell 7 from 7.0 or True.

    >>> check_users(np.array([True]), "uid")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: user-id column 'uid' holds boolean values, ...
    """
    import pandas as pd

    dtype = getattr(values, "dtype", None)
    if dtype is not None and not isinstance(dtype, np.dtype):  # a pandas extension dtype
        typed = pd.api.types.is_integer_dtype(dtype) or (
            pd.api.types.is_string_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype)
        )
        if typed:  # every value is an int (or a str): no per-row conversion needed
            n_na = int(np.asarray(pd.isna(values)).sum())
            if n_na:
                raise _missing(column, n_na)
            return
        arr = _pandas_array(values, column)
    else:
        arr = np.asarray(values)
    what = _numpy_what(arr.dtype)
    if what is not None:
        raise refusal(column, what)
    if arr.dtype.kind == "O":
        user_keys(arr, column)


def sql_user_expr(type_name: str, expr: str, column: str) -> str:
    """Return SQL giving the key-ready value of a DuckDB user column of type ``type_name``.

    Integers become BIGINT (signed types and the unsigned ones that fit) or UBIGINT, text and
    UUIDs VARCHAR (a UUID's text is its canonical form); other types are refused with
    :func:`refusal`. ``expr`` is the (quoted) column expression.

    >>> sql_user_expr("UINTEGER", '"u"', "u"), sql_user_expr("UUID", '"u"', "u")
    ('CAST("u" AS BIGINT)', 'CAST("u" AS VARCHAR)')
    """
    t = type_name.upper()
    if t in SQL_SIGNED:
        return f"CAST({expr} AS BIGINT)"
    if t in SQL_UNSIGNED:
        return f"CAST({expr} AS UBIGINT)"
    if t in SQL_WIDE:
        return f"CAST({expr} AS {SQL_WIDE[t]})"
    if t in SQL_TEXT:
        return f"CAST({expr} AS VARCHAR)"
    raise refusal(column, sql_what(t))


def sql_what(type_name: str) -> str:
    """Return the kind of a DuckDB type's values, worded as for pandas (DOUBLE -> float)."""
    t = type_name.upper()
    if t in ("FLOAT", "DOUBLE", "REAL"):
        return "float"
    if t.startswith("DECIMAL"):
        return "decimal"
    if t == "BOOLEAN":
        return "boolean"
    return t


# ----------------------------------------------------------------------------------- storage


def to_sql(key: Any) -> Any:
    """Return the value stored in the ledger's ``users.uid`` column for a canonical key.

    >>> to_sql(7), to_sql("7"), to_sql(2**64 - 1)
    (7, '7', b'u64:18446744073709551615')
    """
    if isinstance(key, int) and key > _I64_MAX:
        return _BLOB_PREFIX + str(key).encode()
    return key


def from_sql(value: Any) -> Any:
    """Return the canonical key of a stored ``users.uid`` value (inverse of :func:`to_sql`).

    >>> from_sql(b'u64:18446744073709551615') == 2**64 - 1
    True
    """
    if isinstance(value, bytes) and value.startswith(_BLOB_PREFIX):
        return int(value[len(_BLOB_PREFIX) :].decode())
    return value


def uid_to_bytea(key: Any) -> bytes:
    r"""Encode a canonical user id inside a ``tagged`` batch (:func:`encode_users`).

    >>> uid_to_bytea(7), uid_to_bytea("7")
    (b'i\x00\x00\x00\x00\x00\x00\x00\x07', b's7')
    """
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        k = int(key)
        if k > 2**63 - 1:
            return b"u" + k.to_bytes(8, "big", signed=False)
        return b"i" + k.to_bytes(8, "big", signed=True)
    raise LedgerError(f"user id {key!r} cannot be stored (int or str only). Nothing was charged.")


def uid_from_bytea(raw: bytes) -> Any:
    """Decode :func:`uid_to_bytea`.

    >>> uid_from_bytea(uid_to_bytea(-5)), uid_from_bytea(uid_to_bytea(2**64 - 1)) == 2**64 - 1
    (-5, True)
    """
    tag, body = raw[:1], raw[1:]
    if tag == b"i":
        return int.from_bytes(body, "big", signed=True)
    if tag == b"s":
        return body.decode("utf-8", "surrogatepass")
    if tag == b"u":
        return int.from_bytes(body, "big", signed=False)
    raise LedgerCorruptError(
        f"the ledger's user table holds an id of unknown type {tag!r}; run "
        "session.ledger.verify() and restore the database from a backup. Nothing was charged."
    )


def encode_users(uids: Sequence[Any]) -> tuple[str, bytes]:
    """Return ``(kind, ids)`` of one batch of users, as both ledger stores keep them.

    ``"i64"``: an int64 array as one little-endian blob (10**6 new users are one 8 MB value,
    not 10**6 rows and index entries); ``"tagged"``: each id with its type (:func:`uid_to_bytea`)
    behind its 4-byte length, so user ``1`` and user ``"1"`` stay two users.

    >>> kind, ids = encode_users(["ann", 7])
    >>> kind, decode_users(kind, 2, ids)
    ('tagged', ['ann', 7])
    >>> encode_users(np.array([1, 2]))[0]
    'i64'
    """
    if isinstance(uids, np.ndarray) and uids.dtype.kind == "i":
        return "i64", np.ascontiguousarray(uids, dtype="<i8").tobytes()
    parts = []
    for u in uids.tolist() if isinstance(uids, np.ndarray) else uids:
        raw = uid_to_bytea(u)
        parts.append(len(raw).to_bytes(4, "little") + raw)
    return "tagged", b"".join(parts)


def decode_users(kind: str, n: int, ids: bytes) -> list[Any]:
    """Inverse of :func:`encode_users`; a batch that does not decode to ``n`` ids is corrupt."""
    out: list[Any] = []
    if kind == "i64" and len(ids) == 8 * n:
        out = np.frombuffer(ids, dtype="<i8").tolist()
    elif kind == "tagged":
        pos = 0
        while pos < len(ids):
            size = int.from_bytes(ids[pos : pos + 4], "little")
            out.append(uid_from_bytea(ids[pos + 4 : pos + 4 + size]))
            pos += 4 + size
    if len(out) != n:
        raise LedgerCorruptError(
            "the ledger's user table holds a damaged batch of ids; run session.ledger.verify() "
            "and restore the database from a backup. Nothing was charged."
        )
    return out
