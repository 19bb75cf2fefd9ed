"""The Dask face's kde_raster on a LocalCluster, against the pandas face (beyond-one-machine.md).

Same charges and Result fields; the same raster law (a seeded comparison with the spread of two
pandas runs); refusals before the ledger is touched.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.dask
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["t"]}
BOUNDS = (490_000, 4_490_000, 510_000, 4_510_000)
CALL = {"bandwidth_m": 1_000, "cell_m": 250, "rho": 1e-4, "component": gp.Last("t")}


def _tracks(n_users=2000, seed=0):
    r = np.random.default_rng(seed)  # true points only, never noise
    counts = r.integers(1, 3, n_users)
    u = np.repeat(np.arange(n_users), counts)
    return pd.DataFrame({
        "u": u, "t": r.permutation(u.size),
        "x": 500_000 + r.normal(0, 2_000, u.size), "y": 4_500_000 + r.normal(0, 2_000, u.size),
    })  # fmt: skip


def _pandas(df, seed, **kw):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    return s, df.geopriv(s, **KW).kde_raster(rng=seeded_rng(seed), **{**CALL, **kw})


def _dask(df, seed, **kw):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    ddf = dd.from_pandas(df, npartitions=4)
    return s, ddf.geopriv(s, **KW).kde_raster(rng=seeded_rng(seed), **{**CALL, **kw})


def test_charges_fields_and_grid_match_the_pandas_face(cluster):
    df = _tracks()
    (s_pd, a), (s_dk, b) = _pandas(df, 1, bounds=BOUNDS), _dask(df, 2, bounds=BOUNDS)
    pd.testing.assert_series_equal(s_dk.spent().sort_index(), s_pd.spent().sort_index())
    assert a.shape == b.shape and a.transform == b.transform and a.crs == b.crs
    da, db = a.to_dict(value=False), b.to_dict(value=False)
    assert da.keys() == db.keys()
    for key in ("type", "mechanism", "guarantee", "n_users", "n_charged", "charges",
                "spent_total", "spent_max"):
        assert da[key] == db[key], key
    assert da["params"] == db["params"]
    assert s_dk.ledger.verify()["charges"] == 1


@pytest.mark.statistical
def test_the_raster_has_the_pandas_law(cluster):
    # Seeded: the L1 distance between the Dask raster and a pandas one is of the size of the
    # distance between two pandas rasters (independent noise). A partition dropped or released
    # twice, or points of the wrong users, moves it (and the mass) by several times that; the
    # noise's own scale is corrected away by design (docs/operations/kde.md), so the noise law
    # itself is tested on privatize (test_privatize.py) and in tests/unit/queries.
    df = _tracks(seed=3)
    _, a1 = _pandas(df, 11, bounds=BOUNDS)
    _, a2 = _pandas(df, 12, bounds=BOUNDS)
    _, b = _dask(df, 13, bounds=BOUNDS)
    ref = np.abs(a1.value - a2.value).sum()
    assert np.abs(a1.value - b.value).sum() < 2.0 * ref
    assert abs(a1.mass - b.mass) < 0.02 and b.n_charged == df["u"].nunique()


def test_bounds_from_the_released_points(cluster):
    _, r = _dask(_tracks(300), 4)
    assert r.n_charged == 300 and r.value.ndim == 2 and np.isfinite(r.value).all()


@pytest.mark.parametrize("kw,match", [
    ({"bandwidth_m": -1.0}, "bandwidth_m"),
    ({"bounds": (1, 2, 3)}, "bounds="),
    ({"component": ("t", -1)}, "no rows"),
    ({"rho": None, "eps": 1e-3}, "filters are CGP"),
])  # fmt: skip
def test_bad_input_is_refused_before_the_ledger_is_touched(cluster, kw, match):
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    before = s.ledger.snapshot()
    bound = dd.from_pandas(_tracks(50), npartitions=2).geopriv(s, **KW)
    with pytest.raises(gp.GpframeError, match=match) as err:
        bound.kde_raster(**{**CALL, **kw})
    assert str(err.value).endswith("Nothing was charged.")
    assert s.ledger.snapshot() == before
