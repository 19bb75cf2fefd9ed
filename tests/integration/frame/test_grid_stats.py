"""grid_stats on a (Geo)DataFrame: output frame, occupancy rules (§10), bad inputs, ledger."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor
from gpframe.errors import InvalidInputError
from gpframe.frame.grid_stats import grid_stats
from gpframe.ledger import Session
from gpframe.results import GridStatsResult
from gpframe.testing import seeded_rng


@pytest.fixture
def pings():
    rs = np.random.default_rng(0)
    n = 600
    return pd.DataFrame(
        {
            "vessel": rs.integers(0, 20, n),
            "lon": -74 + rs.uniform(0, 0.03, n),
            "lat": 40.7 + rs.uniform(0, 0.03, n),
            "speed": rs.uniform(0, 30, n),
        }
    )


@pytest.fixture
def session():
    return Session(central=gp.DP(epsilon=1000.0))


def _bound(df, session):
    return df.geopriv(
        session, user="vessel", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618"
    )


def test_grid_stats_returns_one_row_per_cell_with_result(pings, session):
    out = grid_stats(
        _bound(pings, session),
        value="speed",
        bounds=(0, 30),
        epsilon=0.5,
        cells=8,
        occupancy="public",
        rng=seeded_rng(1),
    )
    res = out.attrs["geopriv"].result
    assert isinstance(res, GridStatsResult)
    assert out.crs.to_epsg() == 4326 and out.geometry.geom_type.eq("Polygon").all()
    assert out["n_samples"].sum() == len(pings)
    assert (out["n_kept"] + out["n_suppressed"] == out["n_samples"]).all()
    assert res.Gamma_prime <= res.Gamma
    # the published result states the public bound; the per-user charges are in the ledger
    assert res.spent_at_most == res.spent_max == pytest.approx(res.Gamma_prime * 1.0)
    rep = session.report(query_id=res.query_id)
    charged = rep[rep["status"] == "charged"]
    kept = charged["charge"].to_numpy() / (0.5 * 2)  # epsilon x 2 statistics per kept cell
    assert np.allclose(kept, np.round(kept)) and kept.min() >= 1
    assert kept.max() == pytest.approx(res.Gamma_prime)
    assert round(kept.sum()) == out["users_kept"].sum()  # one charge per kept (user, cell)
    assert out.loc[out["released"], "mean"].between(0, 30).all()


def test_grid_stats_plot_has_colour_bar(pings, session):
    import matplotlib

    matplotlib.use("Agg")
    out = grid_stats(
        _bound(pings, session),
        value="speed",
        bounds=(0, 30),
        epsilon=0.5,
        cells=8,
        occupancy="public",
        rng=seeded_rng(2),
    )
    ax = out.attrs["geopriv"].plot()
    assert len(ax.figure.axes) == 2  # the map and its colour bar
    import matplotlib.pyplot as plt

    plt.close("all")


def test_public_occupancy_table_checked_and_fails_closed(pings, session):
    import h3

    b = _bound(pings, session)
    cells = [h3.latlng_to_cell(la, lo, 8) for la, lo in zip(pings.lat, pings.lon, strict=True)]
    table = (
        pd.DataFrame({"user": pings.vessel, "cell": cells})
        .value_counts()
        .rename("count")
        .reset_index()
    )
    grid_stats(
        b, value="speed", bounds=(0, 30), epsilon=0.5, cells=8, occupancy=table, rng=seeded_rng(3)
    )
    before = session.ledger.snapshot()
    bad = table.copy()
    bad.loc[0, "count"] += 1
    with pytest.raises(InvalidInputError, match="does not match"):
        grid_stats(b, value="speed", bounds=(0, 30), epsilon=0.5, cells=8, occupancy=bad)
    assert session.ledger.snapshot() == before


@pytest.mark.parametrize(
    ("mutate", "kw", "match"),
    [
        (lambda d: d.assign(speed=d.speed.where(d.index != 3, np.nan)), {}, "NaN"),
        (lambda d: d, {"value": "nope"}, "not a column"),
        (lambda d: d, {"bounds": (30, 0)}, "L < U"),
        (lambda d: d, {"bounds": (5, 5)}, "L < U"),
        (lambda d: d.assign(speed=d.speed + 100), {}, "outside bounds"),
        (lambda d: d.assign(cell="not-a-cell"), {"cells": "cell"}, "not a valid H3"),
        (lambda d: d, {"occupancy": None}, "occupancy"),
        (lambda d: d, {"occupancy": "private"}, "max_cells"),
        (lambda d: d, {"occupancy": "private", "max_cells": 2, "max_per_cell": 3}, "public_cells"),
        (
            lambda d: d,
            {"occupancy": "private", "max_cells": 0, "max_per_cell": 3, "public_cells": [1]},
            "not a valid H3",
        ),
        (lambda d: d, {"max_cells": 2}, "occupancy='private' only"),
        (lambda d: d, {"occupancy": "maybe"}, "occupancy"),
        (lambda d: d, {"clip": "cap"}, "clip="),
        (lambda d: d, {"epsilon": -1}, "epsilon"),
    ],
)
def test_bad_inputs_raise_and_leave_ledger_untouched(pings, session, mutate, kw, match):
    df = mutate(pings.copy())
    before = session.ledger.snapshot()
    args = {
        "value": "speed",
        "bounds": (0, 30),
        "epsilon": 0.5,
        "cells": 8,
        "occupancy": "public",
        **kw,
    }
    with pytest.raises(InvalidInputError, match=match):
        grid_stats(_bound(df, session), **args)
    assert session.ledger.snapshot() == before


def test_clamp_accepts_out_of_range_values(pings, session):
    df = pings.assign(speed=pings.speed + 10)
    out = grid_stats(
        _bound(df, session),
        value="speed",
        bounds=(0, 30),
        epsilon=0.5,
        cells=8,
        occupancy="public",
        clamp=True,
        rng=seeded_rng(4),
    )
    assert len(out) > 0


def test_cell_column_of_h3_strings(pings, session):
    import h3

    df = pings.assign(
        cell=[h3.latlng_to_cell(a, b, 7) for a, b in zip(pings.lat, pings.lon, strict=True)]
    )
    out = grid_stats(
        _bound(df, session),
        value="speed",
        bounds=(0, 30),
        epsilon=0.5,
        cells="cell",
        occupancy="public",
        clip="pseudo-user",
        rng=seeded_rng(5),
    )
    assert set(out.index) == set(df["cell"])


def test_private_occupancy_releases_every_public_cell_and_no_counts(pings, session):
    import h3
    import shapely

    area = shapely.box(-74.0, 40.7, -73.97, 40.73)
    out = grid_stats(
        _bound(pings, session), value="speed", bounds=(0, 30), epsilon=0.5, cells=8,
        occupancy="private", public_cells=area, max_cells=2, max_per_cell=4, rng=seeded_rng(2),
    )  # fmt: skip
    cover = sorted(h3.geo_to_cells(area, 8))
    assert sorted(out.index) == cover and out["released"].all()
    assert "n_samples" not in out.columns  # true counts are private in this mode
    res = out.attrs["geopriv"].result
    assert res.spent_at_most == pytest.approx(0.5 * 3 * 2)  # public: 3 draws x max_cells
    assert session.report(query_id=res.query_id)["charge"].max() <= 0.5 * 3 * 2 + 1e-12
    assert res.params["worst_case_epsilon"] == pytest.approx(3.0)
