"""Monitoring a harbour zone: alert when the hourly number of vessels crosses a threshold.

Data: one week of AIS positions in New York Harbor (../shared/data/ais_nyharbor) and the port
zones of ../shared/data/world_ports. Each vessel (MMSI) is a user of the central ledger; the
hourly count of distinct vessels in a zone changes by at most 1 when one vessel is added or
removed, so the stream has sensitivity 1.

Run:  python examples/02_monitoring.py
"""

from __future__ import annotations

import os
from pathlib import Path

import geopandas as gpd
import pandas as pd

import gpframe as gp

DATA = Path(os.environ.get("GPFRAME_SHARED", Path(__file__).resolve().parents[2] / "shared"))
tracks = pd.read_parquet(DATA / "data/ais_nyharbor/ais_nyharbor_tracks.parquet")
zones = gpd.read_parquet(DATA / "data/world_ports/nyharbor_port_zones.parquet")

# the period and the zone are public choices, made before looking at the counts
START, END = "2020-12-01", "2020-12-08"
zone = zones.loc[zones["port_names"] == "New York City"]
print("zone:", zone["port_names"].iloc[0], f"({zone['area_m2'].iloc[0] / 1e6:.0f} km²)")

# the exact statistic stays with the data holder; only the alerts below are released
counts = gp.monitor.zone_counts(tracks, zone, user="mmsi", time="time", start=START, end=END)
print(f"{counts.size} hourly counts; an alert threshold of 25 vessels")

session = gp.Session(central=gp.DP(epsilon=4.0))  # each vessel may lose at most ε = 4

# 1. Laplace AboveThreshold: up to 2 alerts for a fixed ε = 1, charged once
res = gp.monitor.zone_above_threshold(
    session, tracks, zone, 25, user="mmsi", time="time", start=START, end=END,
    epsilon=1.0, c=2,
)  # fmt: skip
print("Laplace alerts at hours", [str(counts.index[i]) for i in res.tops])
print(f"  charged ε = {res.epsilon_realized:g} per vessel; ±{res.error:.1f} vessels at 95 %")

# 2. Gaussian AboveThreshold with a pure ex-post ε (mode R): shares of a public
#    cap N = 50 vessels (Δ = 1/50), runs of at most 12 hours; a run that halts early is
#    charged less than the worst case it reserved
res = gp.monitor.zone_above_threshold(
    session, tracks, zone, 25, user="mmsi", time="time", start=START, end=END,
    noise="gaussian", n_public=50, sigma=0.12, max_steps=12, c=2,
)  # fmt: skip
print("Gaussian alerts at hours", [str(counts.index[i]) for i in res.tops])
print(f"  realized ε = {res.epsilon_realized:.4f} (worst case reserved {res.epsilon_worst:.4f})")
print(session.spent(notion="central").describe()[["count", "max"]].to_string())
