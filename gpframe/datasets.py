"""Small real datasets shipped inside the package, for the examples, the demo and your own trials.

Every file is a small extract of a public dataset whose licence allows redistribution; the
sources, changes and licences are in ``gpframe/data/LICENSE.md`` (:func:`citation` prints each
one's credit line). Nothing here needs a network connection or the repository's layout.

- ``gotrack_aracaju``: 3,338 GPS fixes of 25 people in Aracaju, Brazil (Go!Track, CC BY 4.0);
- ``ais_nyharbor_1h``: 8,689 AIS positions of 295 vessels in New York Harbor over one hour;
- ``ais_nyharbor_week``: 10,102 AIS fixes of 141 vessels over 8 days, one per vessel per half hour;
- ``nyharbor_port_zones``: 23 harbour zones around the World Port Index ports (polygons);
- ``nyc_boroughs``: the 5 NYC boroughs, simplified to about 50 m (polygons).

Points come back as a GeoDataFrame in EPSG:4326 (WGS 84 lon/lat) with their ``lon`` / ``lat``
columns kept; polygons as a GeoDataFrame in EPSG:4326. In gpframe's model the
coordinates are the protected values: bind a frame with ``df.geopriv(...)`` and only released
values leave.

Examples
--------
>>> import gpframe as gp
>>> gp.datasets.names()[:3]
['ais_nyharbor_1h', 'ais_nyharbor_week', 'gotrack_aracaju']
>>> ais = gp.datasets.load("ais_nyharbor_1h")
>>> len(ais), ais["mmsi"].nunique(), ais.crs.to_epsg()
(8689, 295, 4326)
>>> gp.datasets.citation("nyc_boroughs")
'Boundaries: NYC Department of City Planning / NYC Open Data (borough boundary 16A)'
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpframe.errors import InvalidInputError

__all__ = ["citation", "load", "names", "path"]


@dataclass(frozen=True)
class _Dataset:
    file: str
    points: bool  # a table of lon/lat fixes (else a GeoParquet of polygons)
    credit: str


_DATASETS: dict[str, _Dataset] = {
    "gotrack_aracaju": _Dataset(
        "gotrack_aracaju_sample.parquet",
        True,
        "Go!Track: Cruz, Macedo, Barreto & Guimarães, GPS Trajectories, UCI Machine Learning "
        "Repository (2016), doi:10.24432/C54S5Z, CC BY 4.0",
    ),
    "ais_nyharbor_1h": _Dataset(
        "ais_nyharbor_1h.parquet",
        True,
        "AIS data: U.S. Coast Guard / MarineCadastre.gov (BOEM, NOAA), public domain",
    ),
    "ais_nyharbor_week": _Dataset(
        "ais_nyharbor_week.parquet",
        True,
        "AIS data: U.S. Coast Guard / MarineCadastre.gov (BOEM, NOAA), public domain",
    ),
    "nyharbor_port_zones": _Dataset(
        "nyharbor_port_zones.parquet",
        False,
        "World Port Index (Pub. 150), U.S. National Geospatial-Intelligence Agency, public domain",
    ),
    "nyc_boroughs": _Dataset(
        "nyc_boroughs.parquet",
        False,
        "Boundaries: NYC Department of City Planning / NYC Open Data (borough boundary 16A)",
    ),
}


def names() -> list[str]:
    """Return the names of the shipped datasets, sorted.

    >>> "gotrack_aracaju" in names()
    True
    """
    return sorted(_DATASETS)


def _get(name: Any) -> _Dataset:
    try:
        return _DATASETS[name]
    except (KeyError, TypeError):
        raise InvalidInputError(
            f"name={name!r} is not a shipped dataset; pass one of {', '.join(names())} "
            "(gp.datasets.names()). Nothing was charged."
        ) from None


def path(name: str) -> Path:
    """Return the path of a shipped dataset's Parquet file (inside the installed package).

    >>> path("nyc_boroughs").name
    'nyc_boroughs.parquet'
    """
    d = _get(name)
    return Path(str(importlib.resources.files("gpframe") / "data" / d.file))


def citation(name: str) -> str:
    """Return the credit line to cite when you show or publish results from ``name``.

    >>> citation("ais_nyharbor_week").startswith("AIS data")
    True
    """
    return _get(name).credit


def load(name: str) -> Any:
    """Load a shipped dataset as a GeoDataFrame in EPSG:4326.

    Parameters
    ----------
    name : str
        One of :func:`names` (see the module's table).

    Returns
    -------
    geopandas.GeoDataFrame
        For point data (``gotrack_aracaju``, ``ais_*``): one row per fix, the source columns
        (``lon``, ``lat`` included) and a point geometry. For ``nyharbor_port_zones`` and
        ``nyc_boroughs``: the polygons and their attributes.

    Raises
    ------
    gpframe.InvalidInputError
        ``name`` is not a shipped dataset.

    Examples
    --------
    >>> zones = load("nyharbor_port_zones")
    >>> len(zones), list(zones.columns[:4])
    (23, ['zone_id', 'lat', 'lon', 'port_names'])
    >>> pts = load("gotrack_aracaju")
    >>> len(pts), pts["user_id"].nunique()
    (3338, 25)
    """
    import geopandas as gpd
    import pandas as pd

    d = _get(name)
    if not d.points:
        return gpd.read_parquet(path(name))
    df = pd.read_parquet(path(name))
    return gpd.GeoDataFrame(df, geometry=gpd.points_from_xy(df["lon"], df["lat"]), crs="EPSG:4326")
