"""``gpframe demo``: privatize a small real dataset in Python and in SQL, map it, report the ledger.

The data is a 3,338-fix subset of the Go!Track GPS trajectories of 25 people in Aracaju, Brazil
(CC BY 4.0; see ``gpframe/data/LICENSE.md``). The demo writes into ``out_dir``:

``ledger.sqlite``            the file-backed privacy ledger (every charge of the demo)
``gpframe_demo.duckdb``      an embedded DuckDB database: true points (projected) and private ones
``private_points.parquet``   the Python-privatized points as GeoParquet (input CRS, EPSG:4326):
                             the noisy geometry, user/track/point ids and times, nothing else
``private_points.png``       true and private points side by side on the same public extent of
                             central Aracaju, over its coast and rivers (shipped with gpframe),
                             with the privacy level and its typical displacement in the title

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
    "RHO_PY",
    "RHO_SQL",
    "load_sample",
    "run_demo",
    "sample_path",
]

#: the per-user CGP amount of the Python release (per="user": split over the user's points)
RHO_PY = 1e-4
#: the per-row CGP amount of the SQL release (each row charged)
RHO_SQL = 1e-6
#: every user's CGP budget in the demo ledger
BUDGET_RHO = 1e-3
#: the metric CRS the demo names (UTM zone 24S, WGS 84), so the projection depends on no data
DEMO_CRS = "EPSG:32724"
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
    """Path of the packaged sample parquet (Go!Track subset, CC BY 4.0)."""
    from gpframe.datasets import path

    return path("gotrack_aracaju")


def sql_path() -> Path:
    """Path of the packaged copy of ``sql/privatize.sql``."""
    return Path(str(importlib.resources.files("gpframe") / "duckdb" / "sql" / "privatize.sql"))


def load_sample() -> Any:
    """Load the sample as a GeoDataFrame in EPSG:4326 (user_id, track_id, point_id, time, ...).

    >>> pts = load_sample()
    >>> len(pts), pts["user_id"].nunique(), pts.crs.to_epsg()
    (3338, 25, 4326)
    """
    from gpframe.datasets import load

    return load("gotrack_aracaju")


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
    import geopandas as gpd
    from tqdm.auto import tqdm

    import gpframe as gp
    import gpframe.duckdb as gpduck
    import gpframe.frame.accessor
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
    # Name the metric CRS (Aracaju is in UTM zone 24S): the CRS and scale_max then come from the
    # zone's published area of use, not from the data, so they reveal nothing about any user.
    # ids and timestamps are public in the model; lon/lat (the true points) and speed_mps
    # (computed from them) are not: privatize would drop them with a warning, so the demo
    # binds the frame without them. The private file holds the noisy geometry and these ids.
    bound = pts.drop(columns=["lon", "lat", "speed_mps"]).geopriv(
        session,
        user="user_id",
        public=["track_id", "point_id", "time"],
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
            "SELECT user_id, track_id, time, p.x AS x_m, p.y AS y_m FROM private_points"
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
    del gpd
    return {"paths": paths, "python": result, "sql": rows, "report": report, "session": session}


#: the public map extent of the demo (lon_min, lat_min, lon_max, lat_max): central Aracaju,
#: chosen from the city's map, not from the data, so the frame reveals nothing about any user
DEMO_BOX = (-37.125, -11.035, -36.985, -10.835)


def _plot(true_pts: Any, private: Any, result: Any, crs_m: Any, path: Path) -> None:
    """Draw true and private points side by side over the coast and rivers, same extent."""
    import geopandas as gpd
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np
    import shapely

    from gpframe.datasets import citation, load

    box = gpd.GeoSeries([shapely.box(*DEMO_BOX)], crs="EPSG:4326").to_crs(crs_m)
    x0, y0, x1, y1 = box.total_bounds
    coast = load("aracaju_coast").to_crs(crs_m)
    land = coast[coast["kind"] == "land"]
    rivers = coast[coast["kind"] == "river"]
    t = true_pts.to_crs(crs_m)
    p = private[~private.geometry.is_empty & private.geometry.notna()].to_crs(crs_m)
    inside = int(shapely.contains_xy(box.iloc[0], p.geometry.x, p.geometry.y).sum())
    users = sorted(true_pts["user_id"].unique())
    colour = {u: plt.get_cmap("tab20")(i % 20) for i, u in enumerate(users)}

    fig, axes = plt.subplots(1, 2, figsize=(10, 7.4), sharex=True, sharey=True)
    panels = [
        (t, "True GPS fixes (never released)", f"{len(t):,} fixes of {len(users)} users"),
        (p, "Private fixes (what gpframe releases)",
         f"{inside:,} of {len(p):,} released fixes fall in this frame"),
    ]  # fmt: skip
    for ax, (pts, head, sub) in zip(axes, panels, strict=True):
        ax.set_facecolor("#dbe9f4")  # sea
        land.plot(ax=ax, color="#f4f1ea", edgecolor="#9aa5b1", linewidth=0.6, zorder=1)
        rivers.plot(ax=ax, color="#8fb3d0", linewidth=0.8, zorder=2)
        ax.scatter(pts.geometry.x, pts.geometry.y, s=3, linewidths=0, alpha=0.75, zorder=3,
                   c=[colour[u] for u in pts["user_id"]])  # fmt: skip
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.set_title(f"{head}\n{sub}", fontsize=10)
        _place_labels(ax, x0, y0, x1, y1)
        _scale_bar(ax, x0, y0, x1, y1)
    axes[0].text(0.02, 0.98, "one colour per user", transform=axes[0].transAxes, fontsize=8,
                 va="top", color="0.3")  # fmt: skip
    # per="user": a user with n fixes gets sigma = sqrt(n / (2 rho)) per coordinate (n is public),
    # and a fix moves by a Rayleigh distance whose median is sigma * sqrt(2 ln 2)
    n = true_pts.groupby("user_id")["user_id"].transform("size").to_numpy()
    typical = float(np.median(np.sqrt(n / (2 * RHO_PY)) * np.sqrt(2 * np.log(2))))
    fig.suptitle(
        f"What privacy costs at rho = {RHO_PY:g} m⁻² per user (concentrated geo-privacy): "
        f"a typical fix moves {typical / 1000:.1f} km\n"
        f"(each user's fixes share one budget; with 95 % confidence no fix moves more than "
        f"{result.error / 1000:.1f} km)",
        fontsize=11,
    )
    fig.text(0.01, 0.008, f"Data: {citation('gotrack_aracaju')}.\n{citation('aracaju_coast')}.",
             fontsize=6.5, color="0.35")  # fmt: skip
    fig.tight_layout(rect=(0, 0.035, 1, 0.95), w_pad=1.0)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _place_labels(ax: Any, x0: float, y0: float, x1: float, y1: float) -> None:
    """Name the places of the public extent (fixed positions, as fractions of the frame)."""
    style = {"fontsize": 9, "color": "0.25", "ha": "center", "style": "italic", "zorder": 4}
    ax.text(x0 + 0.80 * (x1 - x0), y0 + 0.30 * (y1 - y0), "Atlantic\nOcean",
            color="#4a6a86", **{k: v for k, v in style.items() if k != "color"})  # fmt: skip
    ax.text(x0 + 0.30 * (x1 - x0), y0 + 0.55 * (y1 - y0), "Aracaju", **style)
    ax.text(x0 + 0.80 * (x1 - x0), y0 + 0.78 * (y1 - y0), "Barra dos\nCoqueiros", **style)
    ax.text(x0 + 0.72 * (x1 - x0), y0 + 0.60 * (y1 - y0), "Rio Sergipe", rotation=60,
            color="#4a6a86", **{k: v for k, v in style.items() if k != "color"})  # fmt: skip


def _scale_bar(ax: Any, x0: float, y0: float, x1: float, y1: float, km: int = 2) -> None:
    """Draw a km scale bar in the lower left corner (the axes are in metres)."""
    bx, by = x0 + 0.05 * (x1 - x0), y0 + 0.04 * (y1 - y0)
    ax.plot([bx, bx + km * 1000], [by, by], color="0.2", linewidth=3, zorder=5)
    ax.text(bx + km * 500, by + 0.012 * (y1 - y0), f"{km} km", ha="center", va="bottom",
            fontsize=8, color="0.2", zorder=5)  # fmt: skip
