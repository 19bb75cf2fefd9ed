"""The canary dataset: a few users, tens of points, every value unique and recognisable."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .canaries import Canaries

CRS_M = "EPSG:32631"  # UTM 31N: the harness computes in metres, public CRS (no auto projection)

#: user ids and their distinct numbers of points (central forms must show neither)
USERS = {
    "uidKestrel9137": 47,
    "uidMarmot4471": 53,
    "uidOcelot2283": 59,
    "uidTapir6619": 61,
    "uidWombat5507": 67,
}
#: the neighbouring dataset adds this user (D' = D + one user)
EXTRA_USER = ("uidZebu8812", 19)

#: public query objects, round numbers far from every canary digit
POINT = (302000.0, 4813000.0)
REGION = (300000.0, 4811000.0, 304000.0, 4815000.0)
H3_RES = 8
T0 = pd.Timestamp("2021-03-04 05:00")


@dataclass(frozen=True)
class Dataset:
    """Projected frame (x/y metres + geometry), a lon/lat twin, and their canaries."""

    frame: pd.DataFrame  # GeoDataFrame in CRS_M
    lonlat: pd.DataFrame  # GeoDataFrame in EPSG:4326 with lon/lat columns beside the geometry
    canaries: Canaries

    @property
    def users(self) -> list[str]:
        return list(pd.unique(self.frame["uid"]))


#: invalid coordinates planted by the refusal cases (one row each), canaries like the true ones:
#: a latitude beyond 90°, a longitude outside UTM 31N's area of use (0°E..6°E), one inside it
#: but outside the public domain= the case names, and an x beyond ±2**40 m
BAD_LAT = 97.6543219876
FAR_LON = 41.2345678912
OUT_LON = 5.8765432198
BIG_X = 2.0**41 + 0.1234567

#: the metric neighbour moves the dataset's westmost point this far west (metres): the data lie
#: west of UTM 31N's central meridian (3°E), so that point sets any scale factor, extent or
#: bounding box computed from the exact data
MOVE_M = 3.0


def make_dataset(*, extra_user: bool = False, move_west: bool = False) -> Dataset:
    """The canary dataset (seeded: the same values on every run).

    D; D + one user (``extra_user``, the central neighbour); or D with its westmost point moved
    ``MOVE_M`` metres west (``move_west``, a metric neighbour: GP/CGP protect exactly this).
    """
    import geopandas as gpd
    import h3.api.numpy_int as h3n
    import pyproj

    users = dict(USERS)
    if extra_user:
        users[EXTRA_USER[0]] = EXTRA_USER[1]
    rs = np.random.default_rng(20260514)  # test data only (no release draws from it)
    rows: list[tuple[str, float, float]] = []
    for u, n in users.items():
        if (u, n) == EXTRA_USER:
            # the added user shares the first user's places (a few cm apart): the same cells,
            # so the released cell set (public under a public occupancy) is the same in D and D'
            first = rows[:n]
            rows += [(u, x + 0.0371, y - 0.0529) for _, x, y in first]
            continue
        # each user around their own centre, all of them within a few km of POINT
        # ~200 km west of the central meridian: the UTM scale factor there exceeds 1, so a
        # scale_max taken over the exact data would follow the westmost point (leak 5)
        cx, cy = 300600.0 + rs.uniform(0, 2800), 4811600.0 + rs.uniform(0, 2800)
        for _ in range(n):
            rows.append((u, cx + rs.uniform(-350, 350), cy + rs.uniform(-350, 350)))
    df = pd.DataFrame(rows, columns=["uid", "x", "y"])
    if move_west:
        df.loc[df["x"].idxmin(), "x"] -= MOVE_M
    n = len(df)
    i = np.arange(n)
    # location-derived and private columns: values that nothing else could produce
    df["step_m"] = 8765.4321 + i * 1.3579111
    df["speed_mps"] = 12.3456789 + i * 0.0007317
    df["val"] = 17.357913 + i * 0.0517131  # in (0, 40): grid_stats' bounds, D and D'
    df["ts"] = T0 + pd.to_timedelta(i * 7 + 3, unit="min")
    # the added user's rows are before the monitored window: the monitors' statistics are the
    # same on D and D', so what differs between them is the membership alone
    df.loc[df["uid"] == EXTRA_USER[0], "ts"] = T0 - pd.Timedelta("2D")
    tr = pyproj.Transformer.from_crs(CRS_M, "EPSG:4326", always_xy=True)
    lon, lat = tr.transform(df["x"].to_numpy(), df["y"].to_numpy())
    df["cell"] = np.array(
        [h3n.latlng_to_cell(b, a, H3_RES) for a, b in zip(lon, lat, strict=True)], dtype=np.uint64
    )
    frame = gpd.GeoDataFrame(df, geometry=gpd.points_from_xy(df.x, df.y), crs=CRS_M)
    # leak 1 of the issue, as a user builds it: lon/lat columns beside points_from_xy geometry
    ll = df.drop(columns=["x", "y"]).assign(lon=lon, lat=lat)
    lonlat = gpd.GeoDataFrame(ll, geometry=gpd.points_from_xy(lon, lat), crs="EPSG:4326")
    can = Canaries(
        floats={
            "coord_m": np.unique(np.r_[df["x"].to_numpy(), df["y"].to_numpy(), BIG_X]),
            "coord_deg": np.unique(np.r_[lon, lat, BAD_LAT, FAR_LON, OUT_LON]),
            "step_m": np.unique(df["step_m"].to_numpy()),
            "speed_mps": np.unique(df["speed_mps"].to_numpy()),
            "val": np.unique(df["val"].to_numpy()),
            "cell": np.unique(df["cell"].to_numpy().astype(np.float64)),
        },
        tokens={
            "user_id": tuple(users),
            "cell": tuple({str(int(c)) for c in df["cell"]} | {f"{int(c):x}" for c in df["cell"]}),
        },
        counts=frozenset(users.values()),
    )
    return Dataset(frame=frame, lonlat=lonlat, canaries=can)
