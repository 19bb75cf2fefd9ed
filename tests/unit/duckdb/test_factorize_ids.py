"""The UDFs' user keys: factorize_ids gives pandas' first-seen codes on every path."""

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from gpframe.duckdb.udf import factorize_ids


def _same_as_pandas(v: np.ndarray) -> None:
    codes, uniques = factorize_ids(pa.array(v, type=pa.int64()), np.arange(v.size))
    want_codes, want_uniques = pd.factorize(v, sort=False)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(uniques, want_uniques)
    assert codes.dtype == np.int64 and uniques.dtype == np.int64


@given(st.lists(st.integers(0, 300), max_size=200))
def test_small_ids_take_the_direct_table_and_match_pandas(ids):
    _same_as_pandas(np.asarray(ids, dtype=np.int64))


@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
def test_any_int64_ids_match_pandas(ids):
    _same_as_pandas(np.asarray(ids, dtype=np.int64))


def test_a_million_vehicle_ids_in_first_seen_order():
    v = ((np.arange(10**6) * 7919) % 10_000).astype(np.int64)
    _same_as_pandas(v)
    codes, _ = factorize_ids(pa.array(v), np.arange(10**6)[::3])  # a subset of the rows
    np.testing.assert_array_equal(codes, pd.factorize(v[::3], sort=False)[0])
