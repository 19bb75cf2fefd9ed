"""Rebuild the small samples shipped in ``gpframe/data/`` (maintainers only; examples never run it).

Sources: the project's ``shared/data`` folder (``GPFRAME_SHARED_DATA``, default ``../shared/data``
beside the checkout). Every source is public domain or permissively licensed; what each file
keeps, and its licence, is in ``gpframe/data/LICENSE.md``.

Run:  python scripts/build_sample_data.py
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import geopandas as gpd
import pandas as pd

OUT = Path(__file__).resolve().parents[1] / "gpframe" / "data"


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


def main() -> None:
    """Build the AIS and polygon samples."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", default=os.environ.get("GPFRAME_SHARED_DATA", "../shared/data"))
    a = ap.parse_args()
    shared = Path(a.shared)
    ais(shared)
    polygons(shared)
    for p in sorted(OUT.glob("*.parquet")):
        print(f"{p.name:40s} {p.stat().st_size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
