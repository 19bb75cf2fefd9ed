"""gp.datasets: the shipped samples load from the installed package, with their credits."""

from pathlib import Path

import pytest

import gpframe as gp

ROOT = Path(gp.__file__).resolve().parents[1]


@pytest.mark.parametrize("name", gp.datasets.names())
def test_every_dataset_loads_in_wgs84_with_a_credit(name):
    g = gp.datasets.load(name)
    assert len(g) > 0 and g.crs.to_epsg() == 4326 and g.geometry.notna().all()
    assert gp.datasets.path(name).is_file()
    assert gp.datasets.path(name).parent == Path(gp.__file__).resolve().parent / "data"
    assert len(gp.datasets.citation(name)) > 20


def test_points_keep_lon_lat_and_match_their_geometry():
    for name in ("gotrack_aracaju", "ais_nyharbor_1h", "ais_nyharbor_week"):
        g = gp.datasets.load(name)
        assert (g.geometry.x == g["lon"]).all() and (g.geometry.y == g["lat"]).all(), name


def test_every_shipped_file_is_a_dataset_and_documented_and_packaged():
    data = Path(gp.__file__).resolve().parent / "data"
    files = {p.name for p in data.glob("*.parquet")}
    assert files == {gp.datasets.path(n).name for n in gp.datasets.names()}
    licence = (data / "LICENSE.md").read_text()
    assert all(f"`{f}`" in licence for f in files), "each file has its licence section"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["gpframe"]
    assert "data/*" in package_data
    # permissive licences only: no (L)GPL data and no GPL licence text ships in the wheel
    assert not [p.name for p in data.iterdir() if "GPL" in p.name.upper()]
    assert "General Public License" not in licence
    # a small addition to the wheel: the samples stay under 1.5 MB together
    assert sum((data / f).stat().st_size for f in files) < 1.5e6


def test_unknown_name_is_refused_with_the_list():
    with pytest.raises(gp.InvalidInputError, match=r"'nope'.*ais_nyharbor_1h.*Nothing was charged"):
        gp.datasets.load("nope")
    with pytest.raises(gp.InvalidInputError, match="not a shipped dataset"):
        gp.datasets.path(["a"])
