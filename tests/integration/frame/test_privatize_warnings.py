"""One privatize call, one noise-scale warning (docs/noise.md).

With ``per="user"`` users with different point counts get different noise scales and are
released by different sampler calls; a scale outside [1 m, 100 km] used to warn once per call
(one per distinct point count). It is now one warning per privatize call, with the number of
users concerned and the range of their scales.
"""

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.ledger import Session
from gpframe.queries.privatize import privatize_points
from gpframe.testing import seeded_rng

CRS = "EPSG:32618"


def _tracks(counts):
    rng = np.random.default_rng(0)  # true points only, never noise
    users = np.repeat(np.arange(len(counts)), counts)
    return pd.DataFrame(
        {
            "boat": users,
            "x": 500_000 + rng.uniform(-5_000, 5_000, users.size),
            "y": 4_500_000 + rng.uniform(-5_000, 5_000, users.size),
        }
    )


def _scale_records(record):
    return [r for r in record if "noise scale" in str(r.message)]


def test_privatize_with_many_point_counts_warns_once():
    counts = list(range(1, 21))  # 20 distinct counts: 20 sampler calls
    s = Session(budget=gp.GP(eps=1.0))
    b = _tracks(counts).geopriv(s, user="boat", x="x", y="y", crs=CRS)
    with pytest.warns(gp.GpframeWarning) as record:
        out = b.privatize(eps=5e-6, rng=seeded_rng(3))
    assert len(out) == sum(counts)
    scale = _scale_records(record)
    assert len(scale) == 1, [str(r.message) for r in record]
    msg = str(scale[0].message)
    assert "above 100 km for 20 of 20 users" in msg and "per='user'" in msg
    assert scale[0].filename == __file__  # points at the caller's line


def test_low_scale_warns_once_per_call():
    s = Session(budget=gp.GP(eps=1e4))
    b = _tracks([1, 2, 3, 4]).geopriv(s, user="boat", x="x", y="y", crs=CRS)
    with pytest.warns(gp.GpframeWarning) as record:
        b.privatize(eps=20.0, per="point", rng=seeded_rng(4))
    scale = _scale_records(record)
    assert len(scale) == 1
    assert "below 1 m for 4 of 4 users" in str(scale[0].message)


@pytest.mark.parametrize("kind", ["gp", "cgp"])
def test_privatize_points_warns_once_for_all_sampler_calls(kind):
    counts = [1, 2, 3, 5, 8]
    codes = np.repeat(np.arange(len(counts)), counts)
    xy = np.column_stack([np.arange(codes.size, dtype=float), np.zeros(codes.size)])
    amount = Fraction(1, 200_000) if kind == "gp" else Fraction(1, 10**11)
    with pytest.warns(gp.GpframeWarning) as record:
        out = privatize_points(xy, codes, len(counts), kind=kind, amount=amount, per="user",
                               rng=seeded_rng(5))  # fmt: skip
    assert out.n_calls == len(counts)
    assert len(_scale_records(record)) == 1


def test_summing_the_warnings_leaves_the_process_filters_alone(monkeypatch):
    """DuckDB's threads release batches at once: ``warnings.catch_warnings`` swaps the
    process-wide filter list, and two threads restoring it out of order left one thread's
    "ignore" filter installed for good. The samplers' warnings are left out per thread."""
    import threading
    import types
    import warnings

    import gpframe.queries.privatize as pv

    def refuse(*a, **k):
        raise AssertionError("catch_warnings swaps the process-wide warning filters")

    monkeypatch.setattr(pv, "warnings", types.SimpleNamespace(warn=warnings.warn,
                                                              catch_warnings=refuse))  # fmt: skip
    codes = np.repeat(np.arange(4), [1, 2, 3, 4])
    xy = np.column_stack([np.arange(codes.size, dtype=float), np.zeros(codes.size)])
    done = []

    def call():
        privatize_points(xy, codes, 4, kind="cgp", amount=Fraction(10), per="user")
        done.append(True)

    with warnings.catch_warnings(record=True) as record:  # the test's own, in one thread
        warnings.simplefilter("always")
        filters = list(warnings.filters)
        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert warnings.filters == filters
    scale = [str(r.message) for r in _scale_records(record)]
    assert len(done) == 4 and len(scale) == 4  # one summed warning per call, none per sampler
    assert all("below 1 m for 4 of 4 users" in m for m in scale)
