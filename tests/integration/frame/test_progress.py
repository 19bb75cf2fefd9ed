"""Progress bars of slow stages: shown when asked, silent with progress=False or no terminal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.queries.progress import Stages
from gpframe.testing import seeded_rng


@pytest.fixture
def boats() -> pd.DataFrame:
    rs = np.random.default_rng(0)
    n = 60
    return pd.DataFrame(
        {
            "u": np.arange(n),
            "x": 500_000 + rs.uniform(0, 3000, n),
            "y": 4_500_000 + rs.uniform(0, 3000, n),
            "speed": rs.uniform(0, 10, n),
        }
    )


def _grid_stats(df: pd.DataFrame, progress: bool | None) -> None:
    s = gp.Session(central=gp.DP(epsilon=10.0))
    b = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    b.grid_stats(value="speed", bounds=(0, 10), epsilon=1.0, cells=7, occupancy="public",
                 progress=progress, rng=seeded_rng(1))  # fmt: skip


def _nearest(df: pd.DataFrame, progress: bool | None) -> None:
    s = gp.Session(budget=gp.CGP(rho=1e-2))
    b = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    b.nearest_users((500_000.0, 4_500_000.0), 3, rho=1e-3, progress=progress, rng=seeded_rng(2))


@pytest.mark.parametrize(("op", "name"), [(_grid_stats, "grid_stats"), (_nearest, "nearest_users")])
def test_bar_only_when_asked(boats, capsys, op, name):
    op(boats, False)
    assert capsys.readouterr().err == ""
    op(boats, None)  # None: on only in a terminal or notebook; pytest's stderr is neither
    assert capsys.readouterr().err == ""
    op(boats, True)
    err = capsys.readouterr().err
    assert name in err and "100%" in err


def test_stages_count_even_when_silent(capsys):
    with Stages(None, "x", 3) as bar:
        for k in range(3):
            bar.step(str(k))
    assert bar.done == 3 and capsys.readouterr().err == ""
