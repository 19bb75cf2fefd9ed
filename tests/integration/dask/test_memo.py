"""A persisted frame's first passes, remembered on the workers: the same users, points and charges.

``gpframe.dask.memo``: a worker keeps the first pass over a partition object it holds while the
object lives; a second query on a persisted frame reuses it (its candidate tasks do not pass
over the rows again) and must release and charge exactly what the first did under a seeded
source.
"""

from __future__ import annotations

import dask.dataframe as dd
import pandas as pd

import gpframe as gp
import gpframe.dask
import gpframe.dask.memo

from .test_one_point_paths import KW, ZONE, _tracks


def _count(ddf, seed):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    res = ddf.geopriv(s, **KW).range_count(ZONE, rho=1e-5, component=gp.Last("t"),
                                           rng=gp.testing.seeded_rng(seed))  # fmt: skip
    return s, res


def test_a_remembered_first_pass_releases_and_charges_as_a_fresh_one(cluster):
    ddf = dd.from_pandas(_tracks(seed=7), npartitions=4).persist()
    cluster.run(gpframe.dask.memo.clear)
    s_a, a = _count(ddf, 8)  # every first pass run
    held = cluster.run(lambda: len(gpframe.dask.memo._entries))
    assert sum(held.values()) >= 4  # a pass per partition (a copy moved to the other: more)
    s_b, b = _count(ddf, 8)  # every first pass remembered
    assert (a.value, a.error, a.n_charged) == (b.value, b.error, b.n_charged)
    assert a.params["rounds_histogram"] == b.params["rounds_histogram"]
    pd.testing.assert_series_equal(s_a.spent(), s_b.spent())
    # a privatize on the same frame remembers its own pass (other parameters), per partition
    gp_out = ddf.geopriv(gp.Session(budget=gp.CGP(rho=1e-3)), **KW).privatize(rho=1e-5)
    assert len(gp_out) == len(ddf)
    assert sum(cluster.run(lambda: len(gpframe.dask.memo._entries)).values()) >= 8
