"""``gpframe demo``: privatize a small real dataset in Python and in SQL, map it, report the ledger.

The data is one hour of AIS positions of 295 vessels in New York Harbor (8,689 fixes; U.S. Coast
Guard / MarineCadastre.gov, public domain; see ``gpframe/data/LICENSE.md``). Each vessel (its
MMSI) is the protected user. The demo writes into ``out_dir``:

``ledger.sqlite``            the file-backed privacy ledger (every charge of the demo)
``gpframe_demo.duckdb``      an embedded DuckDB database: true fixes (projected) and private ones
``private_points.parquet``   the Python-privatized fixes as GeoParquet (input CRS, EPSG:4326):
                             the noisy geometry, the MMSI and the time, nothing else
``private_points.png``       true and private fixes side by side on the same public extent of
                             the inner harbour, over the NYC boroughs and the harbour zones
                             (shipped with gpframe), with the privacy level and its typical
                             displacement in the title

A rerun starts from a fresh ledger and database (it deletes only those demo files).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

__all__ = [
    "BUDGET_RHO",
    "DEMO_BOX",
    "DEMO_CRS",
    "DEMO_FILES",
    "DEMO_PLACES",
    "RHO_PY",
    "RHO_SQL",
    "load_sample",
    "run_demo",
    "sample_path",
]

#: the per-vessel CGP amount of the Python release (per="user": split over the vessel's fixes)
RHO_PY = 1e-4
#: the per-row CGP amount of the SQL release (each row charged)
RHO_SQL = 1e-6
#: every vessel's CGP budget in the demo ledger
BUDGET_RHO = 1e-3
#: the metric CRS the demo names (UTM zone 18N, WGS 84), so the projection depends on no data
DEMO_CRS = "EPSG:32618"
#: the shipped dataset the demo privatizes
DEMO_DATASET = "ais_nyharbor_1h"
#: files the demo writes (and removes before a rerun)
DEMO_FILES = (
    "ledger.sqlite",
    "ledger.sqlite-wal",
    "ledger.sqlite-shm",
    "ledger.sqlite.anchor",
    "gpframe_demo.duckdb",
    "gpframe_demo.duckdb.wal",
    "private_points.parquet",
    "private_points.png",
)


def sample_path() -> Path:
    """Path of the packaged sample parquet (one hour of AIS in New York Harbor, public domain)."""
    from gpframe.datasets import path

    return path(DEMO_DATASET)


def sql_path() -> Path:
    """Path of the packaged copy of ``sql/privatize.sql``."""
    return Path(str(importlib.resources.files("gpframe") / "duckdb" / "sql" / "privatize.sql"))


def load_sample() -> Any:
    """Load the sample as a GeoDataFrame in EPSG:4326 (mmsi, time, lon, lat, ...).

    >>> pts = load_sample()
    >>> len(pts), pts["mmsi"].nunique(), pts.crs.to_epsg()
    (8689, 295, 4326)
    """
    from gpframe.datasets import load

    return load(DEMO_DATASET)


def _sql_statements(text: str) -> list[str]:
    """Split a SQL file into statements (comments dropped; no ';' inside literals in our file)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def run_demo(
    out_dir: str | Path = "gpframe-demo", *, progress: bool | None = None
) -> dict[str, Any]:
    """Run the demo and return what it made (paths, results, the ledger report).

    Parameters
    ----------
    out_dir : str or Path
        Directory for the ledger, the DuckDB file, the map and the GeoParquet (created).
    progress : bool or None
        tqdm progress bar over the steps (None: on in a terminal or notebook).

    Returns
    -------
    dict
        ``paths`` (name → Path), ``python`` (the PrivatizeResult), ``sql`` (the aggregate rows),
        ``report`` (``session.report()``).
    """
    import duckdb
    from tqdm.auto import tqdm

    import gpframe as gp
    import gpframe.duckdb as gpduck
    import gpframe.frame.accessor  # registers df.geopriv
    from gpframe.ledger import Session
    from gpframe.queries.privatize import progress_enabled

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in DEMO_FILES:
        (out / name).unlink(missing_ok=True)
    paths = {
        name: out / name
        for name in (
            "ledger.sqlite",
            "gpframe_demo.duckdb",
            "private_points.parquet",
            "private_points.png",
        )
    }
    steps = tqdm(total=5, desc="gpframe demo", unit="step", disable=not progress_enabled(progress))

    steps.set_postfix_str("load")
    pts = load_sample()
    session = Session(path=str(paths["ledger.sqlite"]), budget=gp.CGP(rho=BUDGET_RHO))
    steps.update()

    steps.set_postfix_str("privatize (Python)")
    # Name the metric CRS (New York is in UTM zone 18N): the CRS and scale_max then come from the
    # zone's published area of use, not from the data, so they reveal nothing about any vessel.
    # The time is public in the model; lon/lat (the true fixes) and the speed and course over
    # ground (they trace the movement) are not, nor are the vessel's type and length, kept
    # out to keep the file minimal: privatize would drop undeclared columns with a warning, so
    # the demo binds the frame without them. The private file holds the noisy geometry, the
    # MMSI and the time.
    bound = pts[["mmsi", "time", "geometry"]].geopriv(
        session,
        user="mmsi",
        public=["time"],
        to_crs=DEMO_CRS,
    )
    private = bound.privatize(rho=RHO_PY, per="user", progress=False)
    result = private.attrs["geopriv"]
    # the result's JSON summary travels in the file's metadata
    private.to_parquet(paths["private_points.parquet"])
    steps.update()

    steps.set_postfix_str("privatize (SQL)")
    crs_m = bound.projected.crs_m
    xy = bound.projected.xy
    table = pts.drop(columns="geometry").assign(x_m=xy[:, 0], y_m=xy[:, 1])
    con = duckdb.connect(str(paths["gpframe_demo.duckdb"]))
    try:
        con.register("points_df", table)
        con.execute("CREATE OR REPLACE TABLE points_m AS SELECT * FROM points_df")
        con.unregister("points_df")
        gpduck.register(con, session, crs=DEMO_CRS)
        rows: list[Any] = []
        for stmt in _sql_statements(sql_path().read_text()):
            cur = con.execute(stmt)
            if stmt.lstrip().upper().startswith("SELECT"):
                rows = cur.fetchall()
        # keep the SQL release in the database file (TEMP tables vanish on close)
        con.execute(
            "CREATE OR REPLACE TABLE private_points_sql AS "
            "SELECT user_id AS mmsi, time, p.x AS x_m, p.y AS y_m FROM private_points"
        )
    finally:
        con.close()
    steps.update()

    steps.set_postfix_str("map")
    _plot(pts, private, result, crs_m, paths["private_points.png"])
    steps.update()

    steps.set_postfix_str("ledger report")
    report = session.report()
    steps.update()
    steps.close()
    return {"paths": paths, "python": result, "sql": rows, "report": report, "session": session}


#: the public map extent of the demo (lon_min, lat_min, lon_max, lat_max): the inner harbour
#: (Upper Bay, the Kills, Newark Bay, the Hudson to midtown, the East River), chosen from the
#: harbour's chart, not from the data, so the frame reveals nothing about any vessel
DEMO_BOX = (-74.22, 40.53, -73.90, 40.80)

#: place labels of the map: (text, lon, lat, rotation, on water), public positions from the chart
DEMO_PLACES = (
    ("Manhattan", -73.968, 40.778, 60.0, False),
    ("Brooklyn", -73.945, 40.650, 0.0, False),
    ("Staten Island", -74.150, 40.585, 0.0, False),
    ("New Jersey", -74.120, 40.755, 0.0, False),
    ("Upper Bay", -74.085, 40.662, 0.0, True),
    ("Hudson\nRiver", -74.040, 40.775, 0.0, True),
    ("Newark\nBay", -74.165, 40.690, 0.0, True),
    ("Lower Bay", -74.020, 40.548, 0.0, True),
)


def _plot(true_pts: Any, private: Any, result: Any, crs_m: Any, path: Path) -> None:
    """Draw true and private fixes side by side on the same public extent of the harbour."""
    import geopandas as gpd
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np
    import shapely

    from gpframe.datasets import citation, load

    box = gpd.GeoSeries([shapely.box(*DEMO_BOX)], crs="EPSG:4326").to_crs(crs_m)
    x0, y0, x1, y1 = box.total_bounds
    land = load("nyc_boroughs").to_crs(crs_m)
    zones = load("nyharbor_port_zones").to_crs(crs_m)
    t = true_pts.to_crs(crs_m)
    p = private[~private.geometry.is_empty & private.geometry.notna()].to_crs(crs_m)
    frame = box.iloc[0]
    t_in = int(shapely.contains_xy(frame, t.geometry.x, t.geometry.y).sum())
    p_in = int(shapely.contains_xy(frame, p.geometry.x, p.geometry.y).sum())
    users = sorted(true_pts["mmsi"].unique())
    colour = {u: plt.get_cmap("tab20")(i % 20) for i, u in enumerate(users)}

    fig, axes = plt.subplots(1, 2, figsize=(12, 7.6), sharex=True, sharey=True)
    panels = [
        (t, "True AIS fixes (never released)",
         f"{t_in:,} of {len(t):,} fixes of {len(users)} vessels in this frame"),
        (p, "Private fixes (what gpframe releases)",
         f"{p_in:,} of {len(p):,} released fixes in this frame"),
    ]  # fmt: skip
    for ax, (pts, head, sub) in zip(axes, panels, strict=True):
        ax.set_facecolor("#eef3f8")  # water (and New Jersey, which is not drawn)
        land.plot(ax=ax, color="#e4e0d6", edgecolor="#a9a396", linewidth=0.5, zorder=1)
        zones.boundary.plot(ax=ax, color="#8a9bb0", linewidth=0.5, linestyle=(0, (4, 3)),
                            zorder=2)  # fmt: skip
        ax.scatter(pts.geometry.x, pts.geometry.y, s=4, linewidths=0, alpha=0.8, zorder=3,
                   c=[colour[u] for u in pts["mmsi"]])  # fmt: skip
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.set_title(f"{head}\n{sub}", fontsize=10)
        _place_labels(ax, crs_m)
        _scale_bar(ax, x0, y0, x1, y1)
    axes[0].text(0.02, 0.98, "one colour per vessel; dashed: harbour zones",
                 transform=axes[0].transAxes, fontsize=8, va="top", color="0.3")  # fmt: skip
    # per="user": a vessel with n fixes gets sigma = sqrt(n / (2 rho)) per coordinate (n is
    # public), and a fix moves by a Rayleigh distance whose median is sigma * sqrt(2 ln 2)
    n = true_pts.groupby("mmsi")["mmsi"].transform("size").to_numpy()
    typical = float(np.median(np.sqrt(n / (2 * RHO_PY)) * np.sqrt(2 * np.log(2))))
    fig.suptitle(
        f"What privacy costs at rho = {RHO_PY:g} m⁻² per vessel (concentrated geo-privacy): "
        f"a typical fix moves {typical:,.0f} m\n"
        f"(each vessel's fixes share one budget; with 95 % confidence no fix moves more than "
        f"{result.error / 1000:.1f} km)",
        fontsize=11,
    )
    _typical_circle(axes[1], x0, y0, x1, y1, typical)
    credits = "\n".join(citation(n) for n in (DEMO_DATASET, "nyc_boroughs", "nyharbor_port_zones"))
    fig.text(0.01, 0.008, f"Data: {credits}.\nLand: the five NYC boroughs (New Jersey not drawn).",
             fontsize=6.5, color="0.35")  # fmt: skip
    fig.tight_layout(rect=(0, 0.055, 1, 0.95), w_pad=1.0)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _place_labels(ax: Any, crs_m: Any) -> None:
    """Name the places of the public extent (fixed lon/lat positions, projected)."""
    import pyproj
    from matplotlib import patheffects

    halo = [patheffects.withStroke(linewidth=2.5, foreground="white", alpha=0.8)]
    to_m = pyproj.Transformer.from_crs("EPSG:4326", crs_m, always_xy=True)
    for text, lon, lat, rotation, water in DEMO_PLACES:
        x, y = to_m.transform(lon, lat)
        ax.text(x, y, text, fontsize=9, ha="center", va="center", style="italic",
                rotation=rotation, color="#4a6a86" if water else "0.3", zorder=4,
                path_effects=halo)  # fmt: skip


def _scale_bar(ax: Any, x0: float, y0: float, x1: float, y1: float, km: int = 5) -> None:
    """Draw a km scale bar in the lower left corner (the axes are in metres)."""
    bx, by = x0 + 0.05 * (x1 - x0), y0 + 0.04 * (y1 - y0)
    ax.plot([bx, bx + km * 1000], [by, by], color="0.2", linewidth=3, zorder=5)
    ax.text(bx + km * 500, by + 0.012 * (y1 - y0), f"{km} km", ha="center", va="bottom",
            fontsize=8, color="0.2", zorder=5)  # fmt: skip


def _typical_circle(ax: Any, x0: float, y0: float, x1: float, y1: float, r: float) -> None:
    """Draw a circle of the typical displacement beside the scale bar: the cost at map scale."""
    from matplotlib.patches import Circle

    cx, cy = x0 + 0.05 * (x1 - x0) + 5000 + 1.6 * r + 300, y0 + 0.04 * (y1 - y0)
    ax.add_patch(Circle((cx, cy), r, facecolor=(1, 1, 1, 0.7), edgecolor="0.2", linewidth=1.2,
                        zorder=5))  # fmt: skip
    ax.text(
        cx + r + 250,
        cy,
        f"a typical fix moves this far ({r:,.0f} m)",
        va="center",
        fontsize=8,
        color="0.2",
        zorder=5,
        bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1.5},
    )
