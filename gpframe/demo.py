"""``gpframe demo``: privatize a small real dataset in Python and in SQL, map it, report the ledger.

The data is a 3,338-fix subset of the Go!Track GPS trajectories of 25 people in Aracaju, Brazil
(CC BY 4.0; see ``gpframe/data/LICENSE.md``). The demo writes into ``out_dir``:

``ledger.sqlite``            the file-backed privacy ledger (every charge of the demo)
``gpframe_demo.duckdb``      an embedded DuckDB database: true points (projected) and private ones
``private_points.parquet``   the Python-privatized points as GeoParquet (input CRS, EPSG:4326):
                             the noisy geometry, user/track/point ids and times, nothing else
``private_points.png``       a map of true vs private points, with the privacy statement

A rerun starts from a fresh ledger and database (it deletes only those demo files).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

__all__ = [
    "BUDGET_RHO",
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


def _plot(true_pts: Any, private: Any, result: Any, crs_m: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    t = true_pts.to_crs(crs_m)
    p = private[~private.geometry.is_empty & private.geometry.notna()].to_crs(crs_m)
    fig, ax = plt.subplots(figsize=(8, 8))
    ax.scatter(
        p.geometry.x / 1000,
        p.geometry.y / 1000,
        s=3,
        c="tab:orange",
        alpha=0.5,
        label=f"private points ({len(p):,})",
    )
    ax.scatter(
        t.geometry.x / 1000,
        t.geometry.y / 1000,
        s=2,
        c="tab:blue",
        alpha=0.8,
        label=f"true points ({len(t):,})",
    )
    xmin, ymin, xmax, ymax = t.total_bounds / 1000
    pad = max(xmax - xmin, ymax - ymin) * 0.6
    ax.set_xlim(xmin - pad, xmax + pad)
    ax.set_ylim(ymin - pad, ymax + pad)
    ax.set_aspect("equal")
    ax.set_xlabel(f"easting, km ({crs_m.name})")
    ax.set_ylabel("northing, km")
    ax.set_title(
        f"Go!Track, Aracaju: each user's points under rho = {RHO_PY:g} m⁻² CGP\n"
        f"(concentrated geo-privacy for all of a user's points together; "
        f"{result.n_charged} users charged)",
        fontsize=10,
    )
    ax.legend(loc="upper right", markerscale=4)
    fig.text(
        0.01, 0.01, "Data: Go!Track (Cruz et al., UCI, doi:10.24432/C54S5Z), CC BY 4.0", fontsize=7
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
