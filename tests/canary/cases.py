"""The canary table: one case per operation × frontend, with what is public for it.

A case runs one operation on the canary dataset through one frontend and returns what the
caller receives. ``covers`` names the operations it exercises, in the names discovery uses
(``accessor.<method>``, ``monitor.<function>``, ``duckdb.<function>``, ``sql.<gp_function>``);
``modules`` the gpframe modules its path runs through (linked to the audit registry's module
lists). ``public`` is the set of canary classes the operation's declaration makes public:

* local notions (GP, CGP: privatize, range_count, kde, kde_raster, knn, convex_hull,
  nearest_users): the user ids and each user's number of points are public (the model protects
  the coordinates only, concentrated-geo-privacy.md §0.2); nothing location-derived is;
* central notions (DP, zCDP, ex-post DP: grid_stats, monitor): nothing is public, except the
  occupancy (who has how many points in which cell) when the caller passes
  ``occupancy="public"``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import data
from .data import CRS_M, H3_RES, POINT, REGION, T0, Dataset

LOCAL = frozenset({"user_id", "count"})
NOTHING: frozenset[str] = frozenset()


@dataclass
class Ctx:
    """One dataset, one Session, one DuckDB connection (with the table ``pings``), one seed."""

    data: Dataset
    session: Any
    seed: int
    _con: Any = None

    @property
    def con(self) -> Any:
        """The DuckDB connection, registered on first use (accessor cases never need one, and
        registering is most of a context's cost in the neighbouring checks)."""
        if self._con is None:
            self._con = _connect(self.data, self.session, self.seed)
        return self._con

    def rng(self, k: int) -> Any:
        from gpframe.testing import seeded_rng

        return seeded_rng(self.seed * 1000 + k)

    def bound(self, frame: pd.DataFrame | None = None, **kw: Any) -> Any:
        f = self.data.frame if frame is None else frame
        return f.geopriv(self.session, user="uid", **kw)


#: the metric budget of each kind of canary session: CGP (the default) and pure GP, whose
#: filters admit only eps= (Laplace) releases and refuse the rho= (Gaussian) paths
BUDGETS = ("cgp", "gp")


def make_ctx(data: Dataset, seed: int, path: Any = None, budget: str = "cgp") -> Ctx:
    import gpframe as gp
    from gpframe.testing import enable_seeded

    enable_seeded()
    metric = gp.CGP(rho=100.0) if budget == "cgp" else gp.GP(eps=10.0)
    session = gp.Session(path, budget=metric, central=gp.DP(epsilon=1e5))
    return Ctx(data=data, session=session, seed=seed)


def _connect(data: Dataset, session: Any, seed: int) -> Any:
    import duckdb
    import shapely

    import gpframe as gp
    from gpframe.testing import seeded_rng

    con = duckdb.connect()
    con.execute("SET threads=1")  # one thread: the same batches, so the same draws, every run
    plain = pd.DataFrame(data.frame.drop(columns="geometry"))
    con.register("pings_df", plain)
    con.execute("CREATE TABLE pings AS SELECT * FROM pings_df")
    con.unregister("pings_df")
    con.execute("CREATE TABLE zones AS SELECT 'zone' AS name, ?::BLOB AS wkb",
                [shapely.to_wkb(shapely.box(*REGION))])  # fmt: skip
    gp.duckdb.register(con, session, rng=seeded_rng(seed * 1000 + 999))
    return con


@dataclass(frozen=True)
class Case:
    """One operation through one frontend."""

    name: str
    frontend: str  # accessor | dask | monitor | sql-udf | sql-macro | sql-table-macro | ...
    covers: tuple[str, ...]
    modules: tuple[str, ...]
    run: Callable[[Ctx], Any]
    public: frozenset[str] = LOCAL
    central: bool = False
    expect_error: bool = False
    #: neighbouring check: "result" (the Result's published view only: the frame rows follow a
    #: public occupancy) or "all" forms
    neighbour: str | None = None
    #: fields, by name, that the neighbouring checks leave out: released (noisy) values (one
    #: clamped to a bound can be equal for two seeds on D and differ on D' through the noise)
    #: and values computed from what the caller declared public (a public occupancy)
    exempt: tuple[str, ...] = ()
    #: skip reason when the operation does not exist on this branch (discovery still sees it)
    missing: Callable[[], str | None] = field(default=lambda: None)
    #: the session's metric budget: "cgp" or "gp" (a pure-GP session: the eps= variants)
    budget: str = "cgp"
    #: a refusal that reserves, then cancels: the attempt stays in the ledger's audit log, so
    #: the harness checks that nothing was charged or held instead of an unchanged digest
    audited_refusal: bool = False


CASES: list[Case] = []


def case(**kw: Any) -> Callable[[Callable[[Ctx], Any]], Callable[[Ctx], Any]]:
    def deco(fn: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
        c = Case(run=fn, **kw)
        assert all(c.name != o.name for o in CASES), c.name
        CASES.append(c)
        return fn

    return deco


ACC = "gpframe.frame.accessor"
FK, FKDE = "gpframe.frame.knn", "gpframe.frame.kde"
QF = "gpframe.queries."

# --------------------------------------------------------------------------------------------
# accessor (df.geopriv)


@case(name="privatize/accessor/xy", frontend="accessor", covers=("accessor.privatize",),
      modules=(ACC, QF + "privatize"))  # fmt: skip
def _privatize_xy(ctx: Ctx) -> Any:
    # rho = 1e-8 per user: sigma ~ 7 km per coordinate at the largest user's 41 points
    return ctx.bound().privatize(rho=1e-8, rng=ctx.rng(1))


@case(name="privatize/accessor/lonlat-columns", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"))  # fmt: skip
def _privatize_lonlat(ctx: Ctx) -> Any:
    # the leak 1 as a user writes it: lon/lat columns beside points_from_xy geometry
    b = ctx.data.lonlat.geopriv(ctx.session, user="uid", to_crs=CRS_M)
    return b.privatize(rho=1e-8, rng=ctx.rng(2))


@case(name="privatize/accessor/lonlat-auto-projection", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize", "gpframe.geo"))  # fmt: skip
def _privatize_auto(ctx: Ctx) -> Any:
    # the README quick start: no to_crs= / domain=, so the library picks the projection (issue
    # leak 5: what it publishes about that choice must not depend on the exact extreme points)
    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    return d.geopriv(ctx.session, user="uid").privatize(rho=1e-8, rng=ctx.rng(5))


@case(name="privatize/accessor/gp-per-point", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"))  # fmt: skip
def _privatize_gp(ctx: Ctx) -> Any:
    return ctx.bound().privatize(eps=2e-4, per="point", rng=ctx.rng(3))


@case(name="privatize/accessor/public-step_m", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"),
      public=LOCAL | {"step_m"})  # fmt: skip
def _privatize_public(ctx: Ctx) -> Any:
    # the keep path of the contract's public=[...]: step_m declared public, nothing else kept
    out = ctx.data.frame.geopriv(ctx.session, user="uid", public=["step_m"]).privatize(
        rho=1e-8, rng=ctx.rng(4)
    )
    assert "step_m" in out.columns, "a declared-public column must be kept"
    return out


@case(name="privatize/accessor/partition", frontend="accessor",
      covers=("accessor.privatize",),
      modules=(ACC, "gpframe.frame.partition", QF + "privatize", "gpframe.geo"))  # fmt: skip
def _privatize_partition(ctx: Ctx) -> Any:
    # a split by a public column (each part its own metric CRS, one query): the output keeps the
    # partition column, released points and the declared-public columns only
    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    d = d.assign(fleet=np.where(np.arange(len(d)) % 3 == 0, "north", "south"))
    box = (-1.0, 42.0, 2.0, 45.0)
    b = d.geopriv(ctx.session, user="uid", partition="fleet",
                  domain={"north": box, "south": (-2.0, 41.0, 3.0, 46.0)})  # fmt: skip
    out = b.privatize(rho=1e-8, rng=ctx.rng(6))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="range_count/accessor/partition", frontend="accessor",
      covers=("accessor.range_count",),
      modules=(ACC, "gpframe.frame.range_count", "gpframe.frame.partition",
               QF + "range_count_parts", QF + "range_count"))  # fmt: skip
def _range_count_partition(ctx: Ctx) -> Any:
    import geopandas as gpd
    import shapely

    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    d = d.assign(fleet=np.where(np.arange(len(d)) % 3 == 0, "north", "south"))
    b = d.geopriv(ctx.session, user="uid", partition="fleet",
                  domain={"north": (-1.0, 42.0, 2.0, 45.0),
                          "south": (-2.0, 41.0, 3.0, 46.0)})  # fmt: skip
    zone = gpd.GeoSeries([shapely.box(*REGION)], crs=CRS_M)  # a region in another CRS
    return b.range_count(zone, rho=1e-6, reduce="last", rng=ctx.rng(61))


@case(name="knn/accessor/partition", frontend="accessor", covers=("accessor.knn",),
      modules=(ACC, "gpframe.frame.knn", "gpframe.frame.knn_parts", "gpframe.frame.partition",
               QF + "knn"))  # fmt: skip
def _knn_partition(ctx: Ctx) -> Any:
    # a split by a public column: row labels, public columns (the partition among them) and
    # knn_rank within each (user, part), nothing else
    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    d = d.assign(fleet=np.where(np.arange(len(d)) % 3 == 0, "north", "south"))
    b = d.geopriv(ctx.session, user="uid", partition="fleet",
                  domain={"north": (-1.0, 42.0, 2.0, 45.0),
                          "south": (-2.0, 41.0, 3.0, 46.0)})  # fmt: skip
    import geopandas as gpd
    import shapely

    point = gpd.GeoSeries([shapely.Point(*POINT)], crs=CRS_M)  # projected to each part's CRS
    out = b.knn(point, 3, rho=1e-4, rng=ctx.rng(62))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="convex_hull/accessor/partition", frontend="accessor", covers=("accessor.convex_hull",),
      modules=(ACC, "gpframe.frame.knn", "gpframe.frame.knn_parts", "gpframe.frame.partition",
               QF + "hull"))  # fmt: skip
def _hull_partition(ctx: Ctx) -> Any:
    # a split by a public column: one row per (user, part): the user id, the partition column
    # and the released hull and numbers, nothing else
    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    d = d.assign(fleet=np.where(np.arange(len(d)) % 3 == 0, "north", "south"))
    b = d.geopriv(ctx.session, user="uid", partition="fleet",
                  domain={"north": (-1.0, 42.0, 2.0, 45.0),
                          "south": (-2.0, 41.0, 3.0, 46.0)})  # fmt: skip
    out = b.convex_hull(rho=1e-3, rng=ctx.rng(63))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="range_count/accessor", frontend="accessor", covers=("accessor.range_count",),
      modules=(ACC, "gpframe.frame.range_count", QF + "range_count"))  # fmt: skip
def _range_count(ctx: Ctx) -> Any:
    import shapely

    return ctx.bound().range_count(shapely.box(*REGION), rho=1e-6, reduce="last",
                                   rng=ctx.rng(5))  # fmt: skip


@case(name="kde/accessor", frontend="accessor", covers=("accessor.kde",),
      modules=(ACC, "gpframe.frame.kde", QF + "kde"))  # fmt: skip
def _kde(ctx: Ctx) -> Any:
    return ctx.bound().kde(POINT, bandwidth_m=500.0, rho=1e-6, reduce="last", rng=ctx.rng(7))


@case(name="kde_raster/accessor", frontend="accessor", covers=("accessor.kde_raster",),
      modules=(ACC, "gpframe.frame.kde"))  # fmt: skip
def _kde_raster(ctx: Ctx) -> Any:
    # bounds=None: the grid's extent is chosen by the library (it must not be the data's box)
    return ctx.bound().kde_raster(bandwidth_m=2000.0, cell_m=500.0, rho=1e-6, reduce="last",
                                  rng=ctx.rng(8))  # fmt: skip


@case(name="knn/accessor", frontend="accessor", covers=("accessor.knn",),
      modules=(ACC, "gpframe.frame.knn", QF + "knn"))  # fmt: skip
def _knn(ctx: Ctx) -> Any:
    return ctx.bound().knn(POINT, 3, rho=1e-4, rng=ctx.rng(9))


@case(name="convex_hull/accessor", frontend="accessor", covers=("accessor.convex_hull",),
      modules=(ACC, "gpframe.frame.knn", QF + "hull"))  # fmt: skip
def _hull(ctx: Ctx) -> Any:
    return ctx.bound().convex_hull(rho=1e-4, rng=ctx.rng(10))


@case(name="nearest_users/accessor", frontend="accessor", covers=("accessor.nearest_users",),
      modules=(ACC, "gpframe.frame.knn", QF + "nearest"))  # fmt: skip
def _nearest(ctx: Ctx) -> Any:
    return ctx.bound().nearest_users(POINT, 2, rho=1e-6, reduce="last", rng=ctx.rng(11))


_GRID = dict(value="val", bounds=(0.0, 40.0), epsilon=0.5, cells=H3_RES)


@case(
    name="grid_stats/accessor/public-occupancy",
    frontend="accessor",
    covers=("accessor.grid_stats",),
    modules=(ACC, "gpframe.frame.grid_stats", QF + "grid_stats"),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="result",
    exempt=("error",),
)  # fmt: skip (the largest cell error: from the public occupancy)
def _grid_public(ctx: Ctx) -> Any:
    return ctx.bound().grid_stats(**_GRID, occupancy="public", rng=ctx.rng(12))


@case(name="grid_stats/accessor/private-occupancy", frontend="accessor",
      covers=("accessor.grid_stats",),
      modules=(ACC, "gpframe.frame.grid_stats", QF + "contribution_bounding"),
      public=frozenset({"cell"}), central=True, neighbour="all",
      exempt=("mean", "variance", "variance_unbiased", "count"))  # fmt: skip
def _grid_private(ctx: Ctx) -> Any:
    return ctx.bound().grid_stats(**_GRID, occupancy="private", max_cells=3, max_per_cell=5,
                                  public_cells=public_cells(), rng=ctx.rng(13))  # fmt: skip


@case(
    name="grid_stats/accessor/public-occupancy/epsilon_per_user",
    frontend="accessor",
    covers=("accessor.grid_stats",),
    modules=(
        ACC,
        "gpframe.frame.grid_stats",
        "gpframe.frame.grid_stats_user",
        QF + "grid_user_stats",
        QF + "grid_budget",
    ),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="result",
    exempt=("error",),
)  # fmt: skip (the largest cell error: from the public occupancy and the public plan)
def _grid_public_per_user(ctx: Ctx) -> Any:
    kw = {k: v for k, v in _GRID.items() if k != "epsilon"}
    return ctx.bound().grid_stats(**kw, epsilon_per_user=4.0, occupancy="public",
                                  rng=ctx.rng(15))  # fmt: skip


@case(name="grid_stats/accessor/private-occupancy/epsilon_per_user", frontend="accessor",
      covers=("accessor.grid_stats",),
      modules=(ACC, "gpframe.frame.grid_stats", QF + "contribution_bounding",
               QF + "grid_user_stats"),
      public=frozenset({"cell"}), central=True, neighbour="all",
      exempt=("mean", "variance", "variance_unbiased", "count"))  # fmt: skip
def _grid_private_per_user(ctx: Ctx) -> Any:
    kw = {k: v for k, v in _GRID.items() if k != "epsilon"}
    return ctx.bound().grid_stats(**kw, epsilon_per_user=3.0, occupancy="private", max_cells=3,
                                  max_per_cell=5, public_cells=public_cells(),
                                  rng=ctx.rng(16))  # fmt: skip


def public_cells() -> list[int]:
    """Every H3 cell of a public box around REGION (chosen without the data)."""
    import h3.api.numpy_int as h3n
    import pyproj

    tr = pyproj.Transformer.from_crs(CRS_M, "EPSG:4326", always_xy=True)
    xs, ys = np.meshgrid(np.arange(REGION[0] - 1000, REGION[2] + 1000, 150.0),
                         np.arange(REGION[1] - 1000, REGION[3] + 1000, 150.0))  # fmt: skip
    lon, lat = tr.transform(xs.ravel(), ys.ravel())
    return sorted({int(h3n.latlng_to_cell(b, a, H3_RES)) for a, b in zip(lon, lat, strict=True)})


@case(name="grid_stats/accessor/error-value-out-of-bounds", frontend="accessor",
      covers=("accessor.grid_stats",), modules=(ACC, "gpframe.frame.grid_stats"),
      public=frozenset({"count", "cell"}), central=True, expect_error=True)  # fmt: skip
def _grid_error(ctx: Ctx) -> Any:
    # values above 20 exist: the refusal must not quote one of them (they are the protected data)
    return ctx.bound().grid_stats(value="val", bounds=(0.0, 20.0), epsilon=0.5, cells=H3_RES,
                                  occupancy="public", rng=ctx.rng(14))  # fmt: skip


# --------------------------------------------------------------------------------------------
# gpframe.queries.monitor (central DP)

MON = "gpframe.queries.monitor"


def _hourly(ctx: Ctx) -> pd.Series:
    from gpframe.queries.monitor import zone_counts

    d = ctx.data.lonlat
    lon, lat = d["lon"], d["lat"]
    box = (lon.min() - 0.01, lat.min() - 0.01, lon.max() + 0.01, lat.max() + 0.01)
    import shapely

    # a public zone (whole 0.05-degree cells containing the data)
    box = tuple(np.round(np.array(box) * 20) / 20 + np.array([-0.05, -0.05, 0.05, 0.05]))
    return zone_counts(d, shapely.box(*box), user="uid", time="ts", start=T0,
                       end=T0 + pd.Timedelta("24h"), freq="2h")  # fmt: skip


@case(name="above_threshold/monitor", frontend="monitor", covers=("monitor.above_threshold",),
      modules=(MON,), public=NOTHING, central=True, neighbour="all")  # fmt: skip
def _above(ctx: Ctx) -> Any:
    from gpframe.queries.monitor import above_threshold

    return above_threshold(ctx.session, _hourly(ctx).to_numpy(), 3, users=ctx.data.users,
                           sensitivity=1, epsilon=1.0, integer=True, rng=ctx.rng(20))  # fmt: skip


@case(name="above_threshold/monitor/gaussian", frontend="monitor",
      covers=("monitor.above_threshold",), modules=(MON,), public=NOTHING, central=True,
      neighbour="all")  # fmt: skip
def _above_gauss(ctx: Ctx) -> Any:
    from gpframe.queries.monitor import above_threshold

    shares = _hourly(ctx).to_numpy() / 100.0
    return above_threshold(ctx.session, shares, 0.03, users=ctx.data.users, sensitivity=0.01,
                           noise="gaussian", sigma=0.02, bounds=(0.0, 1.0), max_steps=12,
                           rng=ctx.rng(21))  # fmt: skip


@case(name="report_noisy_max/monitor", frontend="monitor", covers=("monitor.report_noisy_max",),
      modules=(MON,), public=NOTHING, central=True, neighbour="all")  # fmt: skip
def _rnm(ctx: Ctx) -> Any:
    from gpframe.queries.monitor import report_noisy_max

    shares = _hourly(ctx).to_numpy()[:6] / 100.0
    return report_noisy_max(ctx.session, shares, users=ctx.data.users, sensitivity=0.01,
                            sigma=0.05, bounds=(0.0, 1.0), rng=ctx.rng(22))  # fmt: skip


@case(name="threshold_query/monitor", frontend="monitor", covers=("monitor.threshold_query",),
      modules=(MON,), public=NOTHING, central=True, neighbour="all")  # fmt: skip
def _threshold(ctx: Ctx) -> Any:
    from gpframe.queries.monitor import threshold_query

    n_in = int(_hourly(ctx).max())
    return threshold_query(ctx.session, n_in, tau=50, users=ctx.data.users, epsilon=0.5,
                           rng=ctx.rng(23))  # fmt: skip


@case(name="zone_above_threshold/monitor", frontend="monitor",
      covers=("monitor.zone_above_threshold", "monitor.zone_counts"), modules=(MON,),
      public=NOTHING, central=True, neighbour="all")  # fmt: skip
def _zone(ctx: Ctx) -> Any:
    import shapely

    from gpframe.queries.monitor import zone_above_threshold

    return zone_above_threshold(ctx.session, ctx.data.lonlat, shapely.box(0.0, 43.0, 4.0, 44.0),
                                3, user="uid", time="ts", start=T0,
                                end=T0 + pd.Timedelta("24h"), freq="2h", epsilon=1.0,
                                rng=ctx.rng(24))  # fmt: skip


@case(name="zone_above_threshold/monitor/exclude", frontend="monitor",
      covers=("monitor.zone_above_threshold",), modules=(MON,), public=NOTHING, central=True,
      neighbour="all")  # fmt: skip
def _zone_exclude(ctx: Ctx) -> Any:
    import shapely

    import gpframe as gp
    from gpframe.queries.monitor import zone_above_threshold

    # one user cannot pay: on_exhausted="exclude" leaves them out of the counts; the exclusion
    # is the curator's (session.report(query_id=...)), never in the result. A session of its
    # own, so the shared one keeps every user's budget for the other cases.
    s = gp.Session(budget=gp.CGP(rho=1.0), central=gp.DP(epsilon=1e5))
    s.set_budget([ctx.data.users[0]], gp.DP(epsilon=0.1))
    res = zone_above_threshold(s, ctx.data.lonlat, shapely.box(0.0, 43.0, 4.0, 44.0), 3,
                               user="uid", time="ts", start=T0, end=T0 + pd.Timedelta("24h"),
                               freq="2h", epsilon=1.0, on_exhausted="exclude",
                               rng=ctx.rng(25))  # fmt: skip
    rep = s.report(query_id=res.query_id)
    assert rep.loc[rep["status"] == "excluded", "user"].tolist() == [ctx.data.users[0]]
    return res


# --------------------------------------------------------------------------------------------
# Previews (dry_run=True, gp.duckdb.preview): curator-side objects. Nothing is published (the
# case's output is None); the Preview's every text form is scanned as a curator object (ids,
# counts and amounts allowed, never a location or a location-derived value), and a preview
# must not change the ledger.


def _preview_forms(ctx: Ctx, make: Callable[[], Any]) -> tuple[None, str, str, str]:
    snap = ctx.session.ledger.snapshot()
    pv = make()
    if ctx.session.ledger.snapshot() != snap:
        raise AssertionError("a preview wrote to the ledger")
    with pd.option_context("display.max_rows", None, "display.max_columns", None):
        table = pv.to_frame().to_string()
    return None, repr(pv), pv.summary(), table


@case(name="privatize/accessor/preview", frontend="accessor", covers=("accessor.privatize",),
      modules=(ACC, "gpframe.results.preview"))  # fmt: skip
def _privatize_preview(ctx: Ctx) -> Any:
    return _preview_forms(ctx, lambda: ctx.bound().privatize(rho=1e-8, dry_run=True))


@case(name="range_count/accessor/preview", frontend="accessor", covers=("accessor.range_count",),
      modules=("gpframe.frame.range_count", "gpframe.results.preview"))  # fmt: skip
def _range_count_preview(ctx: Ctx) -> Any:
    import shapely

    return _preview_forms(
        ctx,
        lambda: ctx.bound().range_count(
            shapely.box(*REGION), rho=1e-6, reduce="last", on_exhausted="raise", dry_run=True
        ),
    )


@case(name="metric-ops/accessor/preview-error", frontend="accessor",
      covers=("accessor.kde", "accessor.knn", "accessor.convex_hull", "accessor.nearest_users"),
      modules=("gpframe.frame.knn", "gpframe.frame.kde", "gpframe.queries.preview_bounds",
               "gpframe.results.preview"))  # fmt: skip
def _metric_previews(ctx: Ctx) -> Any:
    # the expected error and best-case saving of every metric operation's preview: computed
    # from amounts, k, bandwidths and per-user counts, never from a location
    forms: list[str] = []
    for make in (
        lambda b: b.kde(POINT, bandwidth_m=500, rho=1e-6, reduce="last", dry_run=True),
        lambda b: b.knn(POINT, 3, rho=1e-4, dry_run=True),
        lambda b: b.convex_hull(rho=1e-4, dry_run=True),
        lambda b: b.nearest_users(POINT, 2, rho=1e-6, reduce="last", dry_run=True),
    ):
        forms.extend(_preview_forms(ctx, lambda make=make: make(ctx.bound()))[1:])
    return None, *forms


@case(name="above_threshold/monitor/preview", frontend="monitor",
      covers=("monitor.above_threshold",), modules=("gpframe.queries.monitor",),
      central=True)  # fmt: skip
def _above_preview(ctx: Ctx) -> Any:
    from gpframe.queries.monitor import above_threshold

    return _preview_forms(ctx, lambda: above_threshold(
        ctx.session, _hourly(ctx).to_numpy(), 3, users=ctx.data.users, sensitivity=1,
        epsilon=1.0, integer=True, dry_run=True))  # fmt: skip


@case(name="privatize/sql-preview", frontend="sql-relation", covers=("duckdb.preview",),
      modules=("gpframe.duckdb.preview",))  # fmt: skip
def _sql_preview(ctx: Ctx) -> Any:
    import gpframe as gp

    return _preview_forms(
        ctx,
        lambda: gp.duckdb.preview(
            ctx.con, "SELECT uid, gp_privatize(uid, x, y, 1e-8) AS p FROM pings"
        ),
    )


@case(name="sql-helpers/preview", frontend="sql-relation",
      covers=("duckdb.knn", "duckdb.nearest_users", "duckdb.range_count", "duckdb.privatize"),
      modules=("gpframe.duckdb.preview", "gpframe.duckdb.knn", "gpframe.duckdb.range_count",
               "gpframe.duckdb.privatize"))  # fmt: skip
def _sql_helper_previews(ctx: Ctx) -> Any:
    # dry_run=True of the relation helpers (and on_exhausted="raise": the refusal's text)
    import shapely

    import gpframe as gp

    last = "SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid"
    forms: list[str] = []
    for make in (
        lambda: gp.duckdb.knn(ctx.con, "SELECT * FROM pings", user="uid", x="x", y="y",
                              point=POINT, k=3, rho=1e-4, dry_run=True),
        lambda: gp.duckdb.nearest_users(ctx.con, last, user="uid", x="x", y="y", point=POINT,
                                        k=2, rho=1e-6, on_exhausted="raise", dry_run=True),
        lambda: gp.duckdb.range_count(ctx.con, last, shapely.box(*REGION), user="uid", x="x",
                                      y="y", rho=1e-6, dry_run=True),
        lambda: gp.duckdb.privatize(ctx.con, "SELECT uid, x, y FROM pings", user="uid", x="x",
                                    y="y", rho=1e-8, dry_run=True),
    ):  # fmt: skip
        forms.extend(_preview_forms(ctx, make)[1:])
    return None, *forms


# --------------------------------------------------------------------------------------------
# DuckDB: SQL functions, macros, table macros, relation helpers

DDB = "gpframe.duckdb.register"


def _sql(ctx: Ctx, q: str, params: list | None = None) -> Any:
    return ctx.con.execute(q, params or []).df()


@case(name="privatize/sql-udf", frontend="sql-macro",
      covers=("sql.gp_privatize",),
      modules=(DDB, "gpframe.duckdb.privatize", "gpframe.duckdb.udf"))  # fmt: skip
def _sql_privatize(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_privatize(uid, x, y, 1e-8) AS p FROM pings")


@case(name="privatize_gp/sql-udf", frontend="sql-macro", covers=("sql.gp_privatize_gp",),
      modules=(DDB,))  # fmt: skip
def _sql_privatize_gp(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_privatize_gp(uid, x, y, 2e-4) AS p FROM pings")


@case(name="range_count/sql-udf", frontend="sql-macro", covers=("sql.gp_in_region",),
      modules=("gpframe.duckdb.range_count",))  # fmt: skip
def _sql_range(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT sum(CAST(gp_in_region(p.uid, p.x, p.y, z.wkb, 1e-5, 10) AS INT)) "
                     "AS n FROM pings AS p, zones AS z")  # fmt: skip


@case(name="kde/sql-udf", frontend="sql-macro", covers=("sql.gp_kde_contribution",),
      modules=("gpframe.duckdb.kde",))  # fmt: skip
def _sql_kde(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT avg(gp_kde_contribution(uid, x, y, {qx}, {qy}, 500.0, 1e-5, 10)) "
                     "AS kde FROM pings")  # fmt: skip


_TUPLES = "SELECT uid, list(x ORDER BY ts) AS xs, list(y ORDER BY ts) AS ys FROM pings GROUP BY uid"


@case(name="knn/sql-udf", frontend="sql-macro", covers=("sql.gp_knn",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT uid, gp_knn(uid, xs, ys, {qx}, {qy}, 3, 1e-4) AS pos "
                     f"FROM ({_TUPLES})")  # fmt: skip


@case(name="knn_gp/sql-udf", frontend="sql-macro", covers=("sql.gp_knn_gp",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn_gp(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT uid, gp_knn_gp(uid, xs, ys, {qx}, {qy}, 3, 0.01) AS pos "
                     f"FROM ({_TUPLES})")  # fmt: skip


_ROWS = "SELECT uid AS user_id, ts, x, y FROM pings"


@case(name="knn/sql-table-macro", frontend="sql-table-macro", covers=("sql.gp_knn_rows",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn_rows(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT * FROM gp_knn_rows('{_ROWS}', {qx}, {qy}, 3, 1e-4)")


@case(name="knn_gp/sql-table-macro", frontend="sql-table-macro", covers=("sql.gp_knn_rows_gp",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn_rows_gp(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT * FROM gp_knn_rows_gp('{_ROWS}', {qx}, {qy}, 3, 0.01)")


@case(name="convex_hull/sql-udf", frontend="sql-macro", covers=("sql.gp_convex_hull",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_hull(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_convex_hull(uid, list(x ORDER BY ts), list(y ORDER BY ts), "
                     "1e-4) AS hull FROM pings GROUP BY uid")  # fmt: skip


@case(name="convex_hull_gp/sql-udf", frontend="sql-macro", covers=("sql.gp_convex_hull_gp",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_hull_gp(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_convex_hull_gp(uid, list(x ORDER BY ts), "
                     "list(y ORDER BY ts), 0.05, beta := 0.1, k := 24) AS hull "
                     "FROM pings GROUP BY uid")  # fmt: skip


@case(name="convex_hull/sql-table-macro", frontend="sql-table-macro",
      covers=("sql.gp_convex_hulls",), modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_hulls(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT * FROM gp_convex_hulls('SELECT uid AS user_id, x, y FROM pings', "
                     "1e-4)")  # fmt: skip


@case(name="convex_hull_gp/sql-table-macro", frontend="sql-table-macro",
      covers=("sql.gp_convex_hulls_gp",), modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_hulls_gp(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT * FROM gp_convex_hulls_gp('SELECT uid AS user_id, x, y FROM pings', "
                     "0.05)")  # fmt: skip


def _grid_sql() -> str:

    import gpframe

    return (gpframe.duckdb.SQL_DIR / "grid_stats.sql").read_text()


@case(name="grid_stats/sql-relation+udf", frontend="sql-relation",
      covers=("duckdb.clip_user", "sql.gp_grid_release"),
      modules=(DDB, "gpframe.duckdb.grid"), public=frozenset({"count", "cell"}), central=True,
      neighbour="all", exempt=("mean", "variance", "variance_unbiased", "mean_error",
                               "variance_error", "n_kept"))  # fmt: skip
def _sql_grid(ctx: Ctx) -> Any:
    import gpframe as gp

    plan = gp.duckdb.clip_user(ctx.con, "pings", user="uid", cell="cell", value="val",
                               bounds=(0.0, 40.0), epsilon=0.5, occupancy="public")  # fmt: skip
    # the plan is the curator's object (it lists users); what is published is the query's rows
    return _sql(ctx, _grid_sql()), plan


@case(
    name="grid_stats/duckdb-relation/epsilon_per_user",
    frontend="sql-relation",
    covers=("duckdb.grid_stats",),
    modules=(DDB, "gpframe.duckdb.grid_user", QF + "grid_user_stats", QF + "grid_budget"),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="all",
    exempt=(
        "mean",
        "variance",
        "mean_error",
        "variance_error",
        "epsilon_cell",
        "users_kept",
        "users",
        "released",
    ),
)  # fmt: skip (users*, epsilon_cell, released: the public plan)
def _rel_grid_per_user(ctx: Ctx) -> Any:
    import gpframe as gp

    return gp.duckdb.grid_stats(ctx.con, "SELECT * FROM pings", user="uid", cell="cell",
                                value="val", bounds=(0.0, 40.0), epsilon_per_user=4.0)  # fmt: skip


@case(name="knn/duckdb-relation", frontend="sql-relation", covers=("duckdb.knn",),
      modules=(DDB, "gpframe.duckdb.knn"))  # fmt: skip
def _rel_knn(ctx: Ctx) -> Any:
    import gpframe as gp

    return gp.duckdb.knn(ctx.con, "SELECT * FROM pings", user="uid", x="x", y="y", point=POINT,
                         k=3, rho=1e-4)  # fmt: skip


@case(name="convex_hulls/duckdb-relation", frontend="sql-relation", covers=("duckdb.convex_hulls",),
      modules=(DDB, "gpframe.duckdb.knn"))  # fmt: skip
def _rel_hulls(ctx: Ctx) -> Any:
    import gpframe as gp

    return gp.duckdb.convex_hulls(ctx.con, "SELECT * FROM pings", user="uid", x="x", y="y",
                                  rho=1e-4)  # fmt: skip


@case(name="nearest_users/duckdb-relation", frontend="sql-relation",
      covers=("duckdb.nearest_users",), modules=(DDB, "gpframe.duckdb.knn"))  # fmt: skip
def _rel_nearest(ctx: Ctx) -> Any:
    import gpframe as gp

    last = "SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid"
    return gp.duckdb.nearest_users(ctx.con, last, user="uid", x="x", y="y", point=POINT, k=2,
                                   rho=1e-6)  # fmt: skip


@case(name="kde_raster/duckdb-relation", frontend="sql-relation", covers=("duckdb.kde_raster",),
      modules=(DDB, "gpframe.duckdb.kde", "gpframe.frame.kde", QF + "kde"))  # fmt: skip
def _rel_kde_raster(ctx: Ctx) -> Any:
    import gpframe as gp

    # bounds=None, as the accessor case: the grid's extent comes from the released points
    last = "SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid"
    return gp.duckdb.kde_raster(ctx.con, last, user="uid", x="x", y="y", bandwidth_m=2000.0,
                                cell_m=500.0, rho=1e-6)  # fmt: skip


def _privatize_helper_missing() -> str | None:
    import gpframe as gp

    if getattr(gp.duckdb, "privatize", None) is None:
        return "gp.duckdb.privatize (the relation helper of issue 14) is not on this branch"
    return None


@case(name="privatize/duckdb-relation", frontend="sql-relation", covers=("duckdb.privatize",),
      modules=(DDB, "gpframe.duckdb.privatize"), missing=_privatize_helper_missing)  # fmt: skip
def _rel_privatize(ctx: Ctx) -> Any:
    import gpframe as gp

    fn = gp.duckdb.privatize
    kw = dict(user="uid", x="x", y="y", rho=1e-8)
    params = inspect.signature(fn).parameters
    unknown = [k for k in kw if k not in params]
    assert not unknown, f"gp.duckdb.privatize has no keyword(s) {unknown}: update the canary case"
    return fn(ctx.con, "SELECT * FROM pings", **kw)


# --------------------------------------------------------------------------------------------
# the eps= (GP) variants on a pure-GP session: its filters charge eps itself (a CGP session
# charges eps²/2), and the rho= paths are refused there

GP_SESSION = dict(budget="gp")


@case(name="privatize/accessor/gp-session-per-user", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"), **GP_SESSION)  # fmt: skip
def _privatize_gp_user(ctx: Ctx) -> Any:
    # eps per user: each of n points at eps/n, a mean radius of ~2n/eps (tens of km)
    return ctx.bound().privatize(eps=1e-3, rng=ctx.rng(101))


@case(name="privatize/accessor/gp-session-per-point", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"), **GP_SESSION)  # fmt: skip
def _privatize_gp_point(ctx: Ctx) -> Any:
    return ctx.bound().privatize(eps=2e-4, per="point", rng=ctx.rng(102))


@case(name="range_count/accessor/eps", frontend="accessor", covers=("accessor.range_count",),
      modules=(ACC, "gpframe.frame.range_count", QF + "range_count"), **GP_SESSION)  # fmt: skip
def _range_count_eps(ctx: Ctx) -> Any:
    import shapely

    return ctx.bound().range_count(shapely.box(*REGION), eps=1e-3, reduce="last",
                                   rng=ctx.rng(103))  # fmt: skip


@case(name="kde/accessor/eps", frontend="accessor", covers=("accessor.kde",),
      modules=(ACC, "gpframe.frame.kde", QF + "kde"), **GP_SESSION)  # fmt: skip
def _kde_eps(ctx: Ctx) -> Any:
    return ctx.bound().kde(POINT, bandwidth_m=500.0, eps=1e-3, reduce="last", rng=ctx.rng(104))


@case(name="kde_raster/accessor/eps", frontend="accessor", covers=("accessor.kde_raster",),
      modules=(ACC, "gpframe.frame.kde"), **GP_SESSION)  # fmt: skip
def _kde_raster_eps(ctx: Ctx) -> Any:
    return ctx.bound().kde_raster(bandwidth_m=2000.0, cell_m=500.0, eps=1e-3, reduce="last",
                                  rng=ctx.rng(105))  # fmt: skip


@case(name="knn/accessor/eps", frontend="accessor", covers=("accessor.knn",),
      modules=(ACC, "gpframe.frame.knn", QF + "knn"), **GP_SESSION)  # fmt: skip
def _knn_eps(ctx: Ctx) -> Any:
    return ctx.bound().knn(POINT, 3, eps=1e-2, rng=ctx.rng(106))


@case(name="convex_hull/accessor/eps", frontend="accessor", covers=("accessor.convex_hull",),
      modules=(ACC, "gpframe.frame.knn", QF + "hull"), **GP_SESSION)  # fmt: skip
def _hull_eps(ctx: Ctx) -> Any:
    return ctx.bound().convex_hull(eps=0.05, rng=ctx.rng(107))


@case(name="nearest_users/accessor/eps", frontend="accessor",
      covers=("accessor.nearest_users",), modules=(ACC, "gpframe.frame.knn", QF + "nearest"),
      **GP_SESSION)  # fmt: skip
def _nearest_eps(ctx: Ctx) -> Any:
    return ctx.bound().nearest_users(POINT, 2, eps=1e-3, reduce="last", rng=ctx.rng(108))


# the SQL _gp functions and the relation helpers' eps= on the GP session (same queries as above)
for _name, _fn in (("privatize_gp/sql-udf", _sql_privatize_gp), ("knn_gp/sql-udf", _sql_knn_gp),
                   ("knn_gp/sql-table-macro", _sql_knn_rows_gp),
                   ("convex_hull_gp/sql-udf", _sql_hull_gp),
                   ("convex_hull_gp/sql-table-macro", _sql_hulls_gp)):  # fmt: skip
    _c = next(c for c in CASES if c.name == _name)
    case(name=f"{_name}/gp-session", frontend=_c.frontend, covers=_c.covers, modules=_c.modules,
         **GP_SESSION)(_fn)  # fmt: skip


@case(name="knn/duckdb-relation/eps", frontend="sql-relation", covers=("duckdb.knn",),
      modules=(DDB, "gpframe.duckdb.knn"), **GP_SESSION)  # fmt: skip
def _rel_knn_eps(ctx: Ctx) -> Any:
    import gpframe as gp

    return gp.duckdb.knn(ctx.con, "SELECT * FROM pings", user="uid", x="x", y="y", point=POINT,
                         k=3, eps=1e-2)  # fmt: skip


@case(name="convex_hulls/duckdb-relation/eps", frontend="sql-relation",
      covers=("duckdb.convex_hulls",), modules=(DDB, "gpframe.duckdb.knn"),
      **GP_SESSION)  # fmt: skip
def _rel_hulls_eps(ctx: Ctx) -> Any:
    import gpframe as gp

    return gp.duckdb.convex_hulls(ctx.con, "SELECT * FROM pings", user="uid", x="x", y="y",
                                  eps=0.05)  # fmt: skip


@case(name="nearest_users/duckdb-relation/eps", frontend="sql-relation",
      covers=("duckdb.nearest_users",), modules=(DDB, "gpframe.duckdb.knn"),
      **GP_SESSION)  # fmt: skip
def _rel_nearest_eps(ctx: Ctx) -> Any:
    import gpframe as gp

    last = "SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid"
    return gp.duckdb.nearest_users(ctx.con, last, user="uid", x="x", y="y", point=POINT, k=2,
                                   eps=1e-3)  # fmt: skip


# --------------------------------------------------------------------------------------------
# the Dask face (ddf.geopriv): dask's synchronous scheduler in this process (the LocalCluster
# runs are in tests/integration/dask); each partition draws from its own child of the seeded
# source, so the outputs are reproducible

DASK = ("gpframe.dask.accessor", "gpframe.dask.privatize", "gpframe.dask.partitions",
        QF + "privatize")  # fmt: skip


def _ddf(ctx: Ctx, frame: Any = None) -> Any:
    import dask_geopandas

    import gpframe.dask  # noqa: F401  (registers ddf.geopriv)

    return dask_geopandas.from_geopandas(ctx.data.frame if frame is None else frame,
                                         npartitions=2)  # fmt: skip


def _no_dask() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("dask_geopandas") else "dask is not installed"


@case(name="privatize/dask/in-memory", frontend="dask", covers=("dask.privatize",),
      modules=DASK, missing=_no_dask)  # fmt: skip
def _dask_privatize(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.privatize(rho=1e-8, rng=ctx.rng(120))


@case(name="privatize/dask/parquet", frontend="dask", covers=("dask.privatize",),
      modules=(*DASK, "gpframe.dask.staging"), missing=_no_dask,
      public=LOCAL | {"step_m"})  # fmt: skip
def _dask_privatize_parquet(ctx: Ctx) -> Any:
    # the published directory: the parts as a reader loads them and the Result file beside them
    import dataclasses
    import tempfile
    from pathlib import Path

    import dask
    import geopandas as gpd

    target = Path(tempfile.mkdtemp()) / "out"
    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", public=["step_m"])
        res = b.privatize(eps=2e-4, per="point", to=target, rng=ctx.rng(121))
    back = gpd.read_parquet(target)
    back.attrs["published json"] = (target / "_gpframe_result.json").read_text()
    return dataclasses.replace(res, value=back)


@case(name="range_count/dask/last-fix", frontend="dask", covers=("dask.range_count",),
      modules=("gpframe.dask.accessor", "gpframe.dask.range_count", "gpframe.dask.partitions",
               QF + "range_count", QF + "range_count_regions"), missing=_no_dask)  # fmt: skip
def _dask_range_count(ctx: Ctx) -> Any:
    import dask
    import shapely

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.range_count(shapely.box(*REGION), rho=1e-6, component=gp_last("ts"),
                             rng=ctx.rng(123))  # fmt: skip


@case(name="range_count/dask/zones-with-columns", frontend="dask", covers=("dask.range_count",),
      modules=("gpframe.dask.accessor", "gpframe.dask.range_count", "gpframe.dask.partitions",
               QF + "range_count", QF + "range_count_regions", "gpframe.release"),
      missing=_no_dask)  # fmt: skip
def _dask_range_zones(ctx: Ctx) -> Any:
    # the zones' own columns are public (the caller's query) and kept; they are constants here,
    # so any canary in the output came from the data, not from them
    import dask
    import geopandas as gpd
    import shapely

    x0, y0, x1, y1 = REGION
    xm = (x0 + x1) / 2
    zones = gpd.GeoDataFrame(
        {"zone_name": ["west", "east"], "zone_pop": [1200, 3400]},
        geometry=[shapely.box(x0, y0, xm, y1), shapely.box(xm, y0, x1, y1)], crs=CRS_M,
    )  # fmt: skip
    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        res = b.range_count(zones, rho=1e-6, component=gp_last("ts"), rng=ctx.rng(157))
    assert list(res.to_frame().columns[:2]) == ["zone_name", "zone_pop"], "zone columns kept"
    return res


@case(name="kde_raster/dask/last-fix", frontend="dask", covers=("dask.kde_raster",),
      modules=("gpframe.dask.accessor", "gpframe.dask.kde", "gpframe.dask.partitions",
               QF + "kde", QF + "kde_bounds"), missing=_no_dask)  # fmt: skip
def _dask_kde_raster(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.kde_raster(bandwidth_m=2_000, cell_m=500, bounds=REGION, rho=1e-6,
                            component=gp_last("ts"), rng=ctx.rng(124))  # fmt: skip


@case(name="knn/dask/rows", frontend="dask", covers=("dask.knn",),
      modules=("gpframe.dask.accessor", "gpframe.dask.knn", "gpframe.dask.partitions",
               QF + "knn"), missing=_no_dask)  # fmt: skip
def _dask_knn(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.knn(POINT, 3, rho=1e-6, rng=ctx.rng(125))


def _dask_split(ctx: Ctx) -> Any:
    """The canary frame split by a public column, as a dask frame bound with one box per part.

    One dask partition: the release boundary is each task's (the cluster tests in
    tests/integration/dask/test_partition.py split parts across partitions), and each part's
    projection is the slow step of these cases.
    """
    import dask_geopandas

    import gpframe.dask  # noqa: F401  (registers ddf.geopriv)

    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    d = d.assign(fleet=np.where(np.arange(len(d)) % 3 == 0, "north", "south"))
    ddf = dask_geopandas.from_geopandas(d, npartitions=1)
    return ddf.geopriv(ctx.session, user="uid", partition="fleet",
                                domain={"north": (-1.0, 42.0, 2.0, 45.0),
                                        "south": (-2.0, 41.0, 3.0, 46.0)})  # fmt: skip


DASK_SPLIT = ("gpframe.dask.accessor", "gpframe.dask.parts", "gpframe.dask.partitions",
              QF + "partition_check")  # fmt: skip


@case(name="privatize/dask/partition", frontend="dask", covers=("dask.privatize",),
      modules=(*DASK_SPLIT, "gpframe.dask.privatize_parts", QF + "privatize"),
      missing=_no_dask)  # fmt: skip
def _dask_privatize_partition(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        out = _dask_split(ctx).privatize(rho=1e-8, rng=ctx.rng(171))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="range_count/dask/partition", frontend="dask", covers=("dask.range_count",),
      modules=(*DASK_SPLIT, "gpframe.dask.range_count_parts", QF + "range_count_parts"),
      missing=_no_dask)  # fmt: skip
def _dask_range_count_partition(ctx: Ctx) -> Any:
    import dask
    import geopandas as gpd
    import shapely

    zone = gpd.GeoSeries([shapely.box(*REGION)], crs=CRS_M)  # a region in another CRS
    with dask.config.set(scheduler="synchronous"):
        return _dask_split(ctx).range_count(zone, rho=1e-6, reduce="last", rng=ctx.rng(172))


@case(name="knn/dask/partition", frontend="dask", covers=("dask.knn",),
      modules=(*DASK_SPLIT, "gpframe.dask.knn_parts", QF + "knn"), missing=_no_dask)  # fmt: skip
def _dask_knn_partition(ctx: Ctx) -> Any:
    import dask
    import pyproj

    lon, lat = pyproj.Transformer.from_crs(CRS_M, "EPSG:4326", always_xy=True).transform(*POINT)
    with dask.config.set(scheduler="synchronous"):
        out = _dask_split(ctx).knn((lon, lat), 3, rho=1e-4, rng=ctx.rng(173))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="convex_hull/dask/partition", frontend="dask", covers=("dask.convex_hull",),
      modules=(*DASK_SPLIT, "gpframe.dask.knn_parts", QF + "hull"), missing=_no_dask)  # fmt: skip
def _dask_hull_partition(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        out = _dask_split(ctx).convex_hull(rho=1e-3, rng=ctx.rng(174))
    assert "fleet" in out.columns, "the partition column is public and kept"
    return out


@case(name="nearest_users/dask/last-fix", frontend="dask", covers=("dask.nearest_users",),
      modules=("gpframe.dask.accessor", "gpframe.dask.nearest", "gpframe.dask.partitions",
               QF + "nearest", QF + "elimination"), missing=_no_dask)  # fmt: skip
def _dask_nearest(ctx: Ctx) -> Any:
    # the rounds run in this process, each partition releasing its remaining users' values
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.nearest_users(POINT, 2, rho=1e-6, component=gp_last("ts"), rng=ctx.rng(152))


@case(name="nearest_users/dask/preview", frontend="dask", covers=("dask.nearest_users",),
      modules=("gpframe.dask.nearest", "gpframe.dask.driver", "gpframe.results.preview"),
      missing=_no_dask)  # fmt: skip
def _dask_nearest_preview(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return _preview_forms(
            ctx, lambda: b.nearest_users(POINT, 2, rho=1e-6, reduce="last", dry_run=True)
        )


@case(name="kde/dask/last-fix", frontend="dask", covers=("dask.kde",),
      modules=("gpframe.dask.accessor", "gpframe.dask.kde_points", "gpframe.dask.partitions",
               QF + "kde", QF + "elimination"), missing=_no_dask)  # fmt: skip
def _dask_kde(ctx: Ctx) -> Any:
    # one row per query point: the released KDE, its error and the elimination's counts
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.kde([POINT, POINT], bandwidth_m=500.0, rho=1e-6, component=gp_last("ts"),
                     rng=ctx.rng(151))  # fmt: skip


@case(name="kde/dask/pt", frontend="dask", covers=("dask.kde",),
      modules=("gpframe.dask.kde_points", "gpframe.dask.kde", "gpframe.dask.partitions",
               QF + "kde"), missing=_no_dask)  # fmt: skip
def _dask_kde_pt(ctx: Ctx) -> Any:
    # the baseline: each user's point released once on its worker, the points evaluated on
    # the client
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.kde([POINT, POINT], bandwidth_m=500.0, rho=1e-6, method="pt",
                     component=gp_last("ts"), rng=ctx.rng(155))  # fmt: skip


@case(name="kde/dask/preview", frontend="dask", covers=("dask.kde",),
      modules=("gpframe.dask.kde_points", "gpframe.dask.driver", "gpframe.results.preview"),
      missing=_no_dask)  # fmt: skip
def _dask_kde_preview(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return _preview_forms(
            ctx, lambda: b.kde(POINT, bandwidth_m=500.0, rho=1e-6, reduce="last", dry_run=True)
        )


@case(name="convex_hull/dask", frontend="dask", covers=("dask.convex_hull",),
      modules=("gpframe.dask.accessor", "gpframe.dask.hull", "gpframe.dask.partitions",
               QF + "hull"), missing=_no_dask)  # fmt: skip
def _dask_hull(ctx: Ctx) -> Any:
    # one row per user: the user id and the released hull and numbers, nothing else
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.convex_hull(rho=1e-4, rng=ctx.rng(150))


@case(name="convex_hull/dask/preview", frontend="dask", covers=("dask.convex_hull",),
      modules=("gpframe.dask.hull", "gpframe.dask.driver", "gpframe.results.preview"),
      missing=_no_dask)  # fmt: skip
def _dask_hull_preview(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return _preview_forms(
            ctx, lambda: b.convex_hull(rho=1e-4, on_exhausted="raise", dry_run=True)
        )


@case(
    name="grid_stats/dask/public-occupancy/epsilon_per_user",
    frontend="dask",
    covers=("dask.grid_stats",),
    modules=(
        "gpframe.dask.accessor",
        "gpframe.dask.grid_stats",
        QF + "grid_user_stats",
        QF + "grid_user_output",
        QF + "grid_cells",
        QF + "grid_budget",
    ),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="result",
    exempt=("error",),
    missing=_no_dask,
)  # fmt: skip (the largest cell error: from the public occupancy and the public plan)
def _dask_grid_per_user(ctx: Ctx) -> Any:
    import dask

    kw = {k: v for k, v in _GRID.items() if k != "epsilon"}
    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.grid_stats(**kw, epsilon_per_user=4.0, occupancy="public", rng=ctx.rng(126))


@case(
    name="grid_stats/dask/public-occupancy",
    frontend="dask",
    covers=("dask.grid_stats",),
    modules=(
        "gpframe.dask.accessor",
        "gpframe.dask.grid_clip",
        "gpframe.dask.partitions",
        QF + "grid_stats",
        QF + "grid_clip_output",
    ),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="result",
    exempt=("error",),
    missing=_no_dask,
)  # fmt: skip (the largest cell error: from the public occupancy)
def _dask_grid_public(ctx: Ctx) -> Any:
    # Clip-User, the per-statistic form: the accessor case's source (the same released values)
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.grid_stats(**_GRID, occupancy="public", rng=ctx.rng(12))


@case(
    name="grid_stats/dask/occupancy-table",
    frontend="dask",
    covers=("dask.grid_stats",),
    modules=(
        "gpframe.dask.grid_stats",
        "gpframe.dask.grid_clip",
        QF + "grid_occupancy",
        QF + "grid_stats",
        QF + "grid_clip_output",
    ),
    public=frozenset({"count", "cell"}),
    central=True,
    neighbour="result",
    exempt=("error",),
    missing=_no_dask,
)  # fmt: skip (the largest cell error: from the public occupancy)
def _dask_grid_table(ctx: Ctx) -> Any:
    # the caller's public occupancy table (checked against the partitions' counts): the same
    # release as occupancy="public"
    import dask

    from gpframe.queries.grid_cells import h3_cells

    bound = ctx.bound()
    t = pd.DataFrame({"user": np.asarray(bound.projected.users),
                      "cell": h3_cells(bound.projected, H3_RES)})  # fmt: skip
    table = t.groupby(["user", "cell"]).size().rename("count").reset_index()
    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.grid_stats(**_GRID, occupancy=table, rng=ctx.rng(175))


@case(name="grid_stats/dask/private-occupancy", frontend="dask", covers=("dask.grid_stats",),
      modules=("gpframe.dask.accessor", "gpframe.dask.grid_private", "gpframe.dask.partitions",
               QF + "contribution_bounding", QF + "grid_private"),
      public=frozenset({"cell"}), central=True, neighbour="all",
      exempt=("mean", "variance", "variance_unbiased", "count"), missing=_no_dask)  # fmt: skip
def _dask_grid_private(ctx: Ctx) -> Any:
    # the accessor case's source: the noise is drawn on the client by the same code, so both
    # faces publish the same (a noisy count is an integer: another seed can repeat one by
    # chance, which the canary's text comparison reads as a deterministic change)
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.grid_stats(**_GRID, occupancy="private", max_cells=3, max_per_cell=5,
                            public_cells=public_cells(), rng=ctx.rng(13))  # fmt: skip


@case(name="grid_stats/dask/private-occupancy/epsilon_per_user", frontend="dask",
      covers=("dask.grid_stats",),
      modules=("gpframe.dask.grid_private", QF + "contribution_bounding",
               QF + "grid_user_stats", QF + "grid_private"),
      public=frozenset({"cell"}), central=True, neighbour="all",
      exempt=("mean", "variance", "variance_unbiased", "count"), missing=_no_dask)  # fmt: skip
def _dask_grid_private_per_user(ctx: Ctx) -> Any:
    import dask

    kw = {k: v for k, v in _GRID.items() if k != "epsilon"}
    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.grid_stats(**kw, epsilon_per_user=3.0, occupancy="private", max_cells=3,
                            max_per_cell=5, public_cells=public_cells(),
                            rng=ctx.rng(16))  # fmt: skip


@case(name="privatize/dask/preview", frontend="dask", covers=("dask.privatize",),
      modules=(*DASK, "gpframe.dask.driver", "gpframe.results.preview"),
      missing=_no_dask)  # fmt: skip
def _dask_privatize_preview(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return _preview_forms(ctx, lambda: b.privatize(rho=1e-8, dry_run=True))


@case(name="range_count/dask/preview", frontend="dask", covers=("dask.range_count",),
      modules=("gpframe.dask.range_count", "gpframe.dask.driver", "gpframe.results.preview"),
      missing=_no_dask)  # fmt: skip
def _dask_range_count_preview(ctx: Ctx) -> Any:
    import dask
    import shapely

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return _preview_forms(
            ctx,
            lambda: b.range_count(
                shapely.box(*REGION), rho=1e-6, reduce="last", on_exhausted="raise", dry_run=True
            ),
        )


def gp_last(col: str) -> Any:
    import gpframe as gp

    return gp.Last(col)


@case(name="privatize/dask/budget-exclusion", frontend="dask", covers=("dask.privatize",),
      modules=DASK, missing=_no_dask)  # fmt: skip
def _dask_privatize_excluded(ctx: Ctx) -> Any:
    import dask

    with dask.config.set(scheduler="synchronous"):
        b = _ddf(ctx).geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M)
        return b.privatize(rho=1e3, rng=ctx.rng(122))  # the budget is rho=100


# --------------------------------------------------------------------------------------------
# budget exclusions: users who cannot afford the amount are left out (charged nothing); what
# is returned for their rows must not fall back to the input


@case(name="privatize/accessor/budget-exclusion", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, QF + "privatize"))  # fmt: skip
def _privatize_excluded(ctx: Ctx) -> Any:
    return ctx.bound().privatize(rho=1e3, rng=ctx.rng(110))  # the budget is rho=100


@case(name="privatize/sql-udf/budget-exclusion", frontend="sql-macro",
      covers=("sql.gp_privatize",),
      modules=(DDB, "gpframe.duckdb.privatize", "gpframe.duckdb.udf"))  # fmt: skip
def _sql_privatize_excluded(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_privatize(uid, x, y, 1e3) AS p FROM pings")


@case(name="knn/sql-udf/budget-exclusion", frontend="sql-macro", covers=("sql.gp_knn",),
      modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn_excluded(ctx: Ctx) -> Any:
    qx, qy = POINT
    return _sql(ctx, f"SELECT uid, gp_knn(uid, xs, ys, {qx}, {qy}, 3, 1e3) AS pos "
                     f"FROM ({_TUPLES})")  # fmt: skip


# --------------------------------------------------------------------------------------------
# refusals after validation, that read the data: each names rows (labels are public), never a
# coordinate or a value computed from one. The planted invalid values (data.BAD_LAT, ...) are
# canaries too. A refusal charges nothing (checked with the ledger's digest).
#
# Who reads an error message: the data holder who called. For local notions it may name user
# ids and their numbers of points (public under GP/CGP); a central refusal is the curator's
# view (like session.report()): ids and counts, never a location or a private value.

REFUSAL = dict(expect_error=True)
GEO = "gpframe.geo"


def _lonlat_with(ctx: Ctx, row: int, **values: float) -> pd.DataFrame:
    """The lon/lat twin with row ``row`` set to ``values`` (columns and geometry alike)."""
    import geopandas as gpd

    f = ctx.data.lonlat.copy()
    for col, v in values.items():
        f.loc[row, col] = v
    return f.set_geometry(gpd.points_from_xy(f["lon"], f["lat"]), crs="EPSG:4326")


def _plain_with(ctx: Ctx, **cells: tuple[int, float]) -> pd.DataFrame:
    """The projected frame as a plain DataFrame (x/y columns), with some cells replaced."""
    f = pd.DataFrame(ctx.data.frame.drop(columns="geometry"))
    for col, (row, v) in cells.items():
        f.loc[row, col] = v
    return f


@case(name="refusal/accessor/latitude-out-of-range", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, GEO), **REFUSAL)  # fmt: skip
def _refuse_lat(ctx: Ctx) -> Any:
    f = _lonlat_with(ctx, 5, lat=data.BAD_LAT)
    return f.geopriv(ctx.session, user="uid", to_crs=CRS_M).privatize(rho=1e-8, rng=ctx.rng(120))


@case(name="refusal/accessor/outside-crs-area-of-use", frontend="accessor",
      covers=("accessor.privatize",), modules=(ACC, GEO), **REFUSAL)  # fmt: skip
def _refuse_area(ctx: Ctx) -> Any:
    f = _lonlat_with(ctx, 6, lon=data.FAR_LON)
    return f.geopriv(ctx.session, user="uid", to_crs=CRS_M).privatize(rho=1e-8, rng=ctx.rng(121))


@case(name="refusal/accessor/outside-public-domain", frontend="accessor",
      covers=("accessor.knn",), modules=(ACC, GEO), **REFUSAL)  # fmt: skip
def _refuse_domain(ctx: Ctx) -> Any:
    f = _lonlat_with(ctx, 7, lon=data.OUT_LON)
    b = f.geopriv(ctx.session, user="uid", domain=(0.0, 43.0, 2.0, 44.0))
    return b.knn((0.55, 43.44), 3, rho=1e-4, rng=ctx.rng(122))


@case(name="refusal/accessor/nan-and-inf-coordinates", frontend="accessor",
      covers=("accessor.convex_hull",), modules=(ACC, GEO), **REFUSAL)  # fmt: skip
def _refuse_nan(ctx: Ctx) -> Any:
    f = _plain_with(ctx, x=(8, np.nan), y=(9, np.inf))
    return f.geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M).convex_hull(
        rho=1e-4, rng=ctx.rng(123))  # fmt: skip


@case(name="refusal/accessor/coordinate-beyond-crs", frontend="accessor",
      covers=("accessor.kde",), modules=(ACC, GEO), **REFUSAL)  # fmt: skip
def _refuse_big(ctx: Ctx) -> Any:
    f = _plain_with(ctx, x=(10, data.BIG_X))
    return f.geopriv(ctx.session, user="uid", x="x", y="y", crs=CRS_M).kde(
        POINT, bandwidth_m=500.0, rho=1e-6, reduce="last", rng=ctx.rng(124))  # fmt: skip


def _bowtie() -> Any:
    import shapely

    x0, y0, x1, y1 = REGION
    return shapely.Polygon([(x0, y0), (x1, y1), (x1, y0), (x0, y1)])


@case(name="refusal/accessor/invalid-region", frontend="accessor",
      covers=("accessor.range_count",), modules=(ACC, "gpframe.frame.range_count"),
      **REFUSAL)  # fmt: skip
def _refuse_region(ctx: Ctx) -> Any:
    # the region is the caller's (public); the message may quote it, never the data
    return ctx.bound().range_count(_bowtie(), rho=1e-6, reduce="last", rng=ctx.rng(125))


@case(name="refusal/accessor/several-rows-per-user", frontend="accessor",
      covers=("accessor.nearest_users",), modules=(ACC, "gpframe.frame.knn"),
      **REFUSAL)  # fmt: skip
def _refuse_component(ctx: Ctx) -> Any:
    # nearest_users reads one point per user: without reduce= the refusal names the users
    return ctx.bound().nearest_users(POINT, 2, rho=1e-6, rng=ctx.rng(126))


@case(name="refusal/accessor/budget-nearest_users", frontend="accessor",
      covers=("accessor.nearest_users",), modules=(ACC, "gpframe.frame.knn"),
      **REFUSAL)  # fmt: skip
def _refuse_budget_nearest(ctx: Ctx) -> Any:
    return ctx.bound().nearest_users(POINT, 2, rho=1e3, reduce="last", rng=ctx.rng(127))


@case(name="refusal/accessor/rho-on-gp-session", frontend="accessor",
      covers=("accessor.knn",), modules=(ACC, "gpframe.frame.knn"), **REFUSAL,
      **GP_SESSION)  # fmt: skip
def _refuse_rho_on_gp(ctx: Ctx) -> Any:
    return ctx.bound().knn(POINT, 3, rho=1e-4, rng=ctx.rng(128))


@case(name="refusal/monitor/budget", frontend="monitor", covers=("monitor.threshold_query",),
      modules=(MON,), public=LOCAL, central=True, **REFUSAL)  # fmt: skip
def _refuse_monitor_budget(ctx: Ctx) -> Any:
    import gpframe as gp
    from gpframe.queries.monitor import threshold_query

    # a central budget smaller than the query: the canary session's (1e5) cannot be exceeded
    # by one supported epsilon (<= 100), so the refusal runs on a small session of its own
    small = gp.Session(budget=gp.CGP(rho=1.0), central=gp.DP(epsilon=0.1))
    try:
        return threshold_query(small, int(_hourly(ctx).max()), tau=50, users=ctx.data.users,
                               epsilon=0.5, rng=ctx.rng(129))  # fmt: skip
    finally:
        # nothing charged or held; (the monitors reserve, then cancel: the attempt stays in the
        # audit log, so the ledger's digest changes, unlike the read-only refusals above)
        rep = small.report()
        assert not (rep["spent"].any() or rep["held"].any()), "the refusal charged"


# SQL refusals: the UDF's exception reaches the caller inside DuckDB's message


def _first_row(expr: str, bad: str) -> str:
    """``expr`` with the first ping (step_m is increasing) replaced by ``bad``."""
    return f"CASE WHEN step_m < 8766 THEN {bad} ELSE {expr} END"


@case(name="refusal/sql-udf/privatize-nan", frontend="sql-macro", covers=("sql.gp_privatize",),
      modules=(DDB,), **REFUSAL)  # fmt: skip
def _refuse_sql_nan(ctx: Ctx) -> Any:
    x = _first_row("x", "'nan'::DOUBLE")
    return _sql(ctx, f"SELECT uid, gp_privatize(uid, {x}, y, 1e-8) AS p FROM pings")


@case(name="refusal/sql-udf/privatize-beyond-2**40-m", frontend="sql-macro",
      covers=("sql.gp_privatize",), modules=(DDB,), **REFUSAL)  # fmt: skip
def _refuse_sql_big(ctx: Ctx) -> Any:
    x = _first_row("x", repr(data.BIG_X))
    return _sql(ctx, f"SELECT uid, gp_privatize(uid, {x}, y, 1e-8) AS p FROM pings")


@case(name="refusal/sql-udf/privatize-rho-on-gp-session", frontend="sql-macro",
      covers=("sql.gp_privatize",), modules=(DDB,), **REFUSAL, **GP_SESSION)  # fmt: skip
def _refuse_sql_rho_gp(ctx: Ctx) -> Any:
    return _sql(ctx, "SELECT uid, gp_privatize(uid, x, y, 1e-8) AS p FROM pings")


@case(name="refusal/sql-udf/knn-nan", frontend="sql-macro", covers=("sql.gp_knn",),
      modules=("gpframe.duckdb.knn",), **REFUSAL)  # fmt: skip
def _refuse_sql_knn_nan(ctx: Ctx) -> Any:
    qx, qy = POINT
    x = _first_row("x", "'nan'::DOUBLE")
    return _sql(ctx, f"SELECT uid, gp_knn(uid, list({x}), list(y), {qx}, {qy}, 3, 1e-4) AS pos "
                     "FROM pings GROUP BY uid")  # fmt: skip


@case(name="refusal/sql-table-macro/hull-inf", frontend="sql-table-macro",
      covers=("sql.gp_convex_hulls",), modules=("gpframe.duckdb.knn",), **REFUSAL)  # fmt: skip
def _refuse_sql_hulls_inf(ctx: Ctx) -> Any:
    y = _first_row("y", "'inf'::DOUBLE")
    q = f"SELECT uid AS user_id, x, {y} AS y FROM pings".replace("'", "''")
    return _sql(ctx, f"SELECT * FROM gp_convex_hulls('{q}', 1e-4)")


@case(name="refusal/sql-relation/knn-nan", frontend="sql-relation", covers=("duckdb.knn",),
      modules=(DDB, "gpframe.duckdb.knn"), **REFUSAL)  # fmt: skip
def _refuse_rel_knn_nan(ctx: Ctx) -> Any:
    import gpframe as gp

    q = f"SELECT uid, {_first_row('x', chr(39) + 'nan' + chr(39) + '::DOUBLE')} AS x, y FROM pings"
    return gp.duckdb.knn(ctx.con, q, user="uid", x="x", y="y", point=POINT, k=3, rho=1e-4)


@case(name="refusal/sql-relation/budget-nearest_users", frontend="sql-relation",
      covers=("duckdb.nearest_users",), modules=(DDB, "gpframe.duckdb.knn"), **REFUSAL)  # fmt: skip
def _refuse_rel_budget(ctx: Ctx) -> Any:
    # refused read-only before reserving, like the accessor: the ledger digest must not change
    import gpframe as gp

    last = "SELECT uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid"
    return gp.duckdb.nearest_users(ctx.con, last, user="uid", x="x", y="y", point=POINT, k=2,
                                   rho=1e3)  # fmt: skip


@case(name="refusal/sql-udf/invalid-region", frontend="sql-macro", covers=("sql.gp_in_region",),
      modules=("gpframe.duckdb.range_count",), **REFUSAL)  # fmt: skip
def _refuse_sql_region(ctx: Ctx) -> Any:
    import shapely

    return _sql(ctx, "SELECT sum(CAST(gp_in_region(uid, x, y, ?::BLOB, 1e-5, 10) AS INT)) AS n "
                     "FROM pings", [shapely.to_wkb(_bowtie())])  # fmt: skip


@case(name="refusal/sql-udf/in_region-on-gp-session", frontend="sql-macro",
      covers=("sql.gp_in_region",), modules=("gpframe.duckdb.range_count",), **REFUSAL,
      **GP_SESSION)  # fmt: skip
def _refuse_sql_region_gp(ctx: Ctx) -> Any:
    return _sql_range(ctx)


@case(name="refusal/sql-udf/kde-on-gp-session", frontend="sql-macro",
      covers=("sql.gp_kde_contribution",), modules=("gpframe.duckdb.kde",), **REFUSAL,
      **GP_SESSION)  # fmt: skip
def _refuse_sql_kde_gp(ctx: Ctx) -> Any:
    return _sql_kde(ctx)


@case(name="refusal/sql-relation/grid-value-out-of-bounds", frontend="sql-relation",
      covers=("duckdb.clip_user",), modules=(DDB, "gpframe.duckdb.grid"),
      public=frozenset({"count", "cell"}), central=True, **REFUSAL)  # fmt: skip
def _refuse_sql_grid(ctx: Ctx) -> Any:
    import gpframe as gp

    # values above 20 exist: the refusal must not quote one of them (as the accessor's case)
    return gp.duckdb.clip_user(ctx.con, "pings", user="uid", cell="cell", value="val",
                               bounds=(0.0, 20.0), epsilon=0.5, occupancy="public")  # fmt: skip


# users with few points: k above a user's number of points (knn ranks all of them) and the
# convex hull's fallback (a user with n <= k points gets their n points released, noised)


def _few_points(ctx: Ctx, n: int = 3) -> pd.DataFrame:
    """The projected frame with its first user cut to ``n`` points."""
    f = ctx.data.frame
    first = f["uid"] == f["uid"].iloc[0]
    return f[~first | (first.cumsum() <= n)]


@case(name="knn/accessor/k-above-points", frontend="accessor", covers=("accessor.knn",),
      modules=(ACC, "gpframe.frame.knn", QF + "knn"))  # fmt: skip
def _knn_few(ctx: Ctx) -> Any:
    return ctx.bound(_few_points(ctx)).knn(POINT, 5, rho=1e-4, rng=ctx.rng(130))


@case(name="convex_hull/accessor/few-points-fallback", frontend="accessor",
      covers=("accessor.convex_hull",), modules=(ACC, FK, QF + "hull"))  # fmt: skip
def _hull_few(ctx: Ctx) -> Any:
    return ctx.bound(_few_points(ctx)).convex_hull(rho=1e-4, rng=ctx.rng(131))


_EMPTY_FIRST = "CASE WHEN uid = '{u}' THEN []::DOUBLE[] ELSE list({c}) END"


@case(name="refusal/sql-udf/hull-empty-point-list", frontend="sql-macro",
      covers=("sql.gp_convex_hull",), modules=("gpframe.duckdb.knn",), **REFUSAL)  # fmt: skip
def _refuse_sql_hull_empty(ctx: Ctx) -> Any:
    u = ctx.data.users[0]
    xs, ys = (_EMPTY_FIRST.format(u=u, c=c) for c in ("x", "y"))
    return _sql(ctx, f"SELECT uid, gp_convex_hull(uid, {xs}, {ys}, 1e-4) AS hull FROM pings "
                     "GROUP BY uid")  # fmt: skip


@case(name="refusal/sql-udf/knn-gp-empty-point-list", frontend="sql-macro",
      covers=("sql.gp_knn_gp",), modules=("gpframe.duckdb.knn",), **REFUSAL,
      **GP_SESSION)  # fmt: skip
def _refuse_sql_knn_empty(ctx: Ctx) -> Any:
    qx, qy = POINT
    u = ctx.data.users[0]
    xs, ys = (_EMPTY_FIRST.format(u=u, c=c) for c in ("x", "y"))
    return _sql(ctx, f"SELECT uid, gp_knn_gp(uid, {xs}, {ys}, {qx}, {qy}, 3, 0.01) AS pos "
                     "FROM pings GROUP BY uid")  # fmt: skip


# other input and output shapes: lon/lat input (outputs projected back to degrees), the
# automatic projection for a raster (the grid must not follow the data's exact box), several
# regions / query points (a frame value)


@case(name="kde_raster/accessor/lonlat-auto-projection", frontend="accessor",
      covers=("accessor.kde_raster",), modules=(ACC, FKDE, "gpframe.geo"))  # fmt: skip
def _kde_raster_auto(ctx: Ctx) -> Any:
    d = ctx.data.lonlat.drop(columns=["lon", "lat"])
    return d.geopriv(ctx.session, user="uid").kde_raster(
        bandwidth_m=2000.0, cell_m=500.0, rho=1e-6, reduce="last", rng=ctx.rng(140))  # fmt: skip


@case(name="convex_hull/accessor/lonlat", frontend="accessor", covers=("accessor.convex_hull",),
      modules=(ACC, "gpframe.frame.knn", QF + "hull"))  # fmt: skip
def _hull_lonlat(ctx: Ctx) -> Any:
    b = ctx.data.lonlat.geopriv(ctx.session, user="uid", to_crs=CRS_M)
    return b.convex_hull(rho=1e-4, rng=ctx.rng(141))


@case(name="knn/accessor/lonlat", frontend="accessor", covers=("accessor.knn",),
      modules=(ACC, "gpframe.frame.knn", QF + "knn"))  # fmt: skip
def _knn_lonlat(ctx: Ctx) -> Any:
    b = ctx.data.lonlat.geopriv(ctx.session, user="uid", to_crs=CRS_M, public=["ts"])
    return b.knn((0.55, 43.44), 3, rho=1e-4, rng=ctx.rng(142))


@case(name="range_count/accessor/regions-frame", frontend="accessor",
      covers=("accessor.range_count",),
      modules=(ACC, "gpframe.frame.range_count", QF + "range_count"))  # fmt: skip
def _range_regions(ctx: Ctx) -> Any:
    import geopandas as gpd
    import shapely

    x0, y0, x1, y1 = REGION
    xm = (x0 + x1) / 2
    boxes = [shapely.box(x0, y0, xm, y1), shapely.box(xm, y0, x1, y1)]
    regions = gpd.GeoDataFrame({"name": ["west", "east"]}, geometry=boxes, crs=CRS_M)
    return ctx.bound().range_count(regions, rho=1e-6, reduce="last", rng=ctx.rng(143))


@case(name="range_count/accessor/zones-with-columns", frontend="accessor",
      covers=("accessor.range_count",),
      modules=(ACC, "gpframe.frame.range_count", QF + "range_count"))  # fmt: skip
def _range_zones(ctx: Ctx) -> Any:
    # the zones' own columns are public (the caller's query) and kept; they are constants here,
    # so any canary in the output came from the data, not from them
    import geopandas as gpd
    import shapely

    x0, y0, x1, y1 = REGION
    xm = (x0 + x1) / 2
    zones = gpd.GeoDataFrame(
        {"zone_name": ["west", "east"], "zone_pop": [1200, 3400]},
        geometry=[shapely.box(x0, y0, xm, y1), shapely.box(xm, y0, x1, y1)], crs=CRS_M,
    )  # fmt: skip
    res = ctx.bound().range_count(zones, rho=1e-6, reduce="last", rng=ctx.rng(146))
    assert list(res.to_frame().columns[:2]) == ["zone_name", "zone_pop"], "zone columns kept"
    return res


@case(name="kde/accessor/query-points-frame", frontend="accessor", covers=("accessor.kde",),
      modules=(ACC, "gpframe.frame.kde", QF + "kde"))  # fmt: skip
def _kde_points(ctx: Ctx) -> Any:
    import geopandas as gpd

    at = gpd.GeoSeries(gpd.points_from_xy([POINT[0], POINT[0] + 1000.0], [POINT[1]] * 2),
                       crs=CRS_M)  # fmt: skip
    return ctx.bound().kde(at, bandwidth_m=500.0, rho=1e-6, reduce="last", rng=ctx.rng(144))


@case(name="range_count/duckdb-relation", frontend="sql-relation", covers=("duckdb.range_count",),
      modules=(DDB, "gpframe.duckdb.range_count"))  # fmt: skip
def _rel_range_count(ctx: Ctx) -> Any:
    import shapely

    import gpframe as gp

    # one point per user (the last fix): a count of users, not of rows
    return gp.duckdb.range_count(ctx.con, "SELECT * FROM pings", shapely.box(*REGION), user="uid",
                                 x="x", y="y", rho=1e-5, rounds=10, component="last")  # fmt: skip


@case(name="knn/sql-table-macro/named-columns", frontend="sql-table-macro",
      covers=("sql.gp_knn_rows",), modules=("gpframe.duckdb.knn",))  # fmt: skip
def _sql_knn_rows_named(ctx: Ctx) -> Any:
    qx, qy = POINT
    # the columns named, not aliased: the named x / y columns must stay out of the output
    return _sql(ctx, f"SELECT * FROM gp_knn_rows('SELECT uid, ts, x, y FROM pings', {qx}, {qy}, "
                     "3, 1e-4, user := 'uid', x := 'x', y := 'y')")  # fmt: skip


@case(name="range_count/sql-udf/crs", frontend="sql-macro", covers=("sql.gp_in_region",),
      modules=("gpframe.duckdb.range_count", "gpframe.geo"))  # fmt: skip
def _sql_range_crs(ctx: Ctx) -> Any:
    import duckdb
    import shapely

    import gpframe as gp

    # a connection registered with its metre CRS named (the scale and units path); its own
    # connection, so the shared one keeps its registration for the other cases
    con = duckdb.connect()
    con.execute("SET threads=1")
    con.register("pings", pd.DataFrame(ctx.data.frame.drop(columns="geometry")))
    gp.duckdb.register(con, ctx.session, crs=CRS_M, rng=ctx.rng(31))
    q = (
        "SELECT sum(CAST(gp_in_region(p.uid, p.x, p.y, ?, 1e-5, 10) AS INT)) AS n FROM (SELECT "
        "uid, arg_max(x, ts) AS x, arg_max(y, ts) AS y FROM pings GROUP BY uid) AS p"
    )
    return con.execute(q, [shapely.to_wkb(shapely.box(*REGION))]).df()
