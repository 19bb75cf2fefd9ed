"""``privatize`` through the accessor projects and builds its points on every core, and its
output does not depend on how many: with a seeded source (whose noise is one call), two cores
and one give the same frame, row for row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session
from gpframe.mechanisms.row_ranges import MIN_ROWS
from gpframe.testing import seeded_rng

N = 2 * MIN_ROWS + 11


def _lonlat() -> pd.DataFrame:
    gen = np.random.default_rng(3)  # true points only, never noise
    return pd.DataFrame(
        {"u": np.arange(N) % 5000, "lon": gen.uniform(-74.2, -73.8, N),
         "lat": gen.uniform(40.6, 40.9, N)}
    )  # fmt: skip


def _run(df: pd.DataFrame, threads: int, monkeypatch: pytest.MonkeyPatch) -> tuple[object, dict]:
    import gpframe.mechanisms.row_ranges as rr

    monkeypatch.setattr(rr, "THREADS", threads)
    seen: dict[str, list[int]] = {}
    real = rr.run_in_ranges

    def spy(work, rows, workers, name="gp-rows"):
        seen.setdefault(name, []).append(workers)
        return real(work, rows, workers, name)

    monkeypatch.setattr(rr, "run_in_ranges", spy)
    s = Session(budget=gp.CGP(rho=1e-2))
    bound = df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618")
    out = bound.privatize(rho=1e-4, per="point", rng=seeded_rng(11), progress=False)
    return out, seen


def test_two_cores_and_one_release_the_same_frame(monkeypatch):
    df = _lonlat()
    two, seen_two = _run(df, 2, monkeypatch)
    one, seen_one = _run(df, 1, monkeypatch)
    # the projection there and back and the output points ran on both threads (the small
    # projections of a few points stay on one), then on one
    assert sorted(seen_two["gp-proj"])[-2:] == [2, 2] and seen_two["gp-points"] == [2]
    assert set(seen_one["gp-proj"]) == {1} and "gp-points" not in seen_one  # points_from_xy
    frame_two, frame_one = two, one
    pd.testing.assert_frame_equal(
        pd.DataFrame(frame_two.drop(columns="geometry")),
        pd.DataFrame(frame_one.drop(columns="geometry")),
    )
    assert frame_two.geometry.geom_equals_exact(frame_one.geometry, tolerance=0).all()
    assert frame_two.crs == frame_one.crs == "EPSG:4326"
    assert np.isfinite(frame_two["lon"].to_numpy()).all()  # every point released
    assert np.array_equal(frame_two.geometry.x.to_numpy(), frame_two["lon"].to_numpy())
