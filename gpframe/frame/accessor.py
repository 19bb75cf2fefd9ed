"""``df.geopriv``: the pandas / geopandas face of gpframe (``docs/internals.md``).

Importing this module registers the ``geopriv`` accessor on :class:`pandas.DataFrame` (and so on
:class:`geopandas.GeoDataFrame`, a subclass). The accessor is stateless: pandas rebuilds it on
every attribute access, so ``__init__`` only keeps the frame. Calling it binds a session and the
column roles, validates the points, and returns a :class:`GeoPriv` whose methods run queries (the
points are projected to metres on first use by an operation that needs distances)::

    pings.geopriv(session, user="taxi_id").privatize(rho=1e-4)

What the model protects (``docs/concepts.md``): the coordinates of a user's points.
The number of a user's points and their order are public. Other columns leave only when the
caller declares them public (``public=[...]``): a column computed from the locations (a step
length, a speed) would carry them out, so every output is built by :mod:`gpframe.release` from
the released values, the index and the declared-public columns, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import LedgerUnits, metric_amount, probability
from gpframe.errors import InvalidInputError
from gpframe.ledger.charges import filter_kind, ledger_key_array, ledger_keys
from gpframe.ledger.run import Charge, run, with_on_exhausted
from gpframe.queries import privatize as _pv
from gpframe.queries.clip_user import KAPPA
from gpframe.queries.privatize_plan import actual_units as _actual_units
from gpframe.queries.privatize_plan import amount_keyword
from gpframe.queries.privatize_plan import check_coordinates as _check_coordinates
from gpframe.queries.privatize_plan import preflight as _preflight
from gpframe.queries.privatize_plan import unit_floats as _unit_floats
from gpframe.release import privatized_frame as _build_output
from gpframe.release import protected_columns
from gpframe.release import refuse_coordinate_copies as _refuse_coordinate_copies

if TYPE_CHECKING:  # the result classes' modules import this one: annotations only
    import geopandas as gpd
    import shapely

    from gpframe.mechanisms.noise.bits import BitSource
    from gpframe.queries.range_count import First, Last
    from gpframe.results import KdeResult, NearestResult, Preview, RangeCountResult, Raster

#: which row is each user's one point (see :meth:`GeoPriv.range_count`)
Component: TypeAlias = (
    "tuple[str, Any] | Callable[[pd.DataFrame], Any] | Literal['first', 'last'] | First | Last"
    " | None"
)
#: a region: one polygon in the data's CRS, or a series of them in any CRS
Region: TypeAlias = "shapely.Polygon | shapely.MultiPolygon | gpd.GeoSeries | gpd.GeoDataFrame"
#: one public query point
QueryPoint: TypeAlias = "shapely.Point | tuple[float, float] | gpd.GeoSeries"
#: one or several public query points
QueryPoints: TypeAlias = "shapely.Point | gpd.GeoSeries | gpd.GeoDataFrame | np.ndarray"

__all__ = ["GeoPriv", "GeoPrivAccessor"]


class GeoPrivAccessor:
    """``df.geopriv(session, user=...)``: bind a session and columns, get a :class:`GeoPriv`."""

    def __init__(self, pandas_obj: pd.DataFrame) -> None:
        self._obj = pandas_obj

    def __call__(
        self,
        session: Any,
        *,
        user: str,
        x: str | None = None,
        y: str | None = None,
        lon: str | None = None,
        lat: str | None = None,
        crs: Any = None,
        to_crs: Any = None,
        domain: Any = None,
        public: Any = None,
        partition: Any = None,
    ) -> GeoPriv:
        """Validate the columns and points and bind ``session``.

        The metric CRS is chosen (and the points projected) only when an operation needs metres;
        ``grid_stats`` takes the lon/lat as they are, whatever their extent.

        Parameters
        ----------
        session : gpframe.Session
            The ledger every query charges.
        user : str
            Column of user ids: each user's rows are that user's points.
        x, y : str, optional
            Coordinate columns in ``crs`` units (with ``crs=``).
        lon, lat : str, optional
            Longitude / latitude columns in degrees.
        crs : CRS-like, optional
            CRS of the coordinate columns (a GeoDataFrame brings its own).
        to_crs : CRS-like, optional
            Metric CRS to compute in (default: the input CRS if it is in metres, else a local UTM
            zone, or for a country- or continent-wide extent the projection with the least
            noise inflation; see :mod:`gpframe.geo` and ``docs/wide-extents.md``).
        domain : tuple of 4 floats, optional
            Public extent ``(lon_min, lat_min, lon_max, lat_max)`` of the data. With ``to_crs=`` or
            ``domain=`` the metric CRS and its scale factor depend on public information only;
            without either, lon/lat input is projected around the data's own bounding box, which
            then becomes public (SECURITY.md, "What is public").
        public : list of str, optional
            Columns that do not depend on the locations (an id, a timestamp, a category), kept
            in the outputs built from input rows (``privatize``, ``knn``). Default: only the
            ``user`` column. The index is always kept. Every other column is dropped from the
            outputs, with a warning naming it. The coordinate columns (``x``/``y``,
            ``lon``/``lat``, the active geometry) cannot be public.
        partition : str, optional
            A public column to split by: each part gets its own metric CRS, chosen from its own
            public extent (``domain={part: box, ...}``, one box for all, or the part's data
            extent rounded outward to whole degrees), so country- or continent-wide data is
            noised at the inflation of each part's small extent. The column is declared public
            (it is kept in the output). The call stays one query (one query id) and charges each
            user once per part they appear in. Coordinate columns, the geometry and columns
            computed from the points (their UTM zone, their H3 cell) are refused: the released
            lattice reveals each row's CRS and so its part. ``privatize``, ``range_count``,
            ``knn`` and ``convex_hull`` only; the other operations refuse a split. See
            ``docs/wide-extents.md``.

        Returns
        -------
        GeoPriv
        """
        from gpframe.geo import locate_points

        if session is None or not hasattr(session, "reserve"):
            raise InvalidInputError(
                f"session={session!r} is not a gpframe Session. Pass one: "
                "df.geopriv(gp.Session(budget=gp.CGP(rho=1e-4)), user='user_id'). "
                "Nothing was charged."
            )
        # Validation only: the metric CRS is chosen on first use by an operation that needs
        # metres (GeoPriv.projected); grid_stats works on H3 cells of the lon/lat as given.
        from collections.abc import Mapping

        per_part = partition is not None and isinstance(domain, Mapping)
        located = locate_points(
            self._obj,
            user=user,
            x=x,
            y=y,
            lon=lon,
            lat=lat,
            crs=crs,
            to_crs=to_crs,
            domain=None if per_part else domain,
        )
        domains = None
        if partition is not None:
            from gpframe.frame.partition import check_partition

            prot = protected_columns(self._obj, (*located.coords, x, y, lon, lat))
            domains = check_partition(self._obj, partition, located=located, protected=prot,
                                      to_crs=to_crs, domain=domain)  # fmt: skip
            public = _with(public, partition)
        cols = public_columns(self._obj, user=user, x=x, y=y, lon=lon, lat=lat, public=public,
                              coords=located.coords)  # fmt: skip
        _refuse_coordinate_copies(self._obj, cols[1:], located)
        return GeoPriv(self._obj, session, located, user=user, public=cols, partition=partition,
                       partition_domains=domains)  # fmt: skip


def _with(public: Any, name: Any) -> list[Any]:
    """``public=`` with ``name`` added (a partition column is public: it is in the output)."""
    if public is None:
        names: list[Any] = []
    elif isinstance(public, (str, bytes)) or not hasattr(public, "__iter__"):
        names = [public]
    else:
        names = list(public)
    return names if name in names else [*names, name]


def public_columns(frame: pd.DataFrame, *, user: str, x: Any = None, y: Any = None,
                   lon: Any = None, lat: Any = None, public: Any = None,
                   coords: Any = ()) -> tuple[Any, ...]:  # fmt: skip
    """Validate ``public=`` against the frame (see :func:`gpframe.release.check_public`)."""
    from gpframe.release import check_public

    prot = protected_columns(frame, (*coords, x, y, lon, lat))
    return check_public(frame.columns, public, user=user, protected=prot)


class GeoPriv:
    """A frame bound to a session and its column roles; its methods run private queries."""

    def __init__(
        self,
        frame: pd.DataFrame,
        session: Any,
        located: Any,
        *,
        user: str,
        public: tuple[Any, ...] | None = None,
        partition: Any = None,
        partition_domains: dict[Any, Any] | None = None,
    ) -> None:
        self.frame = frame
        #: the public column the metric operations split by (gpframe.frame.partition), or None
        self.partition = partition
        self.partition_domains = partition_domains
        self._split: Any = None
        self.session = session
        #: the validated points in their input CRS (gpframe.geo.Located), or already projected
        self.located = located
        self._projected = located if hasattr(located, "xy") else None
        self.user = user
        #: the declared-public columns (user first) that outputs keep; see gpframe.release
        self.public = (user,) if public is None else tuple(public)
        #: the columns holding the protected coordinates (never in an output)
        self.protected = protected_columns(frame, getattr(located, "coords", ()))

    @property
    def projected(self) -> Any:
        """The points in metres (:class:`gpframe.geo.Projected`), projected on first use.

        Only operations that need distances read it, so data too wide for one metric CRS
        still runs ``grid_stats`` (H3 cells of the lon/lat as given). Choosing the CRS may
        raise (:class:`~gpframe.errors.CRSError`) or warn (the data-extent convenience path),
        before anything is charged.
        """
        self._refuse_partition()
        if self._projected is None:
            p = self.located.project(threads=None)  # the pandas face: every core
            _refuse_coordinate_copies(self.frame, self.public[1:], p)
            self._projected = p
        return self._projected

    def _parts(self) -> Any:
        """Return the parts of ``partition=``, each projected with its own public extent (cached).

        A list of :class:`gpframe.frame.partition.Part`; choosing the CRSs may warn or raise
        before anything is charged.
        """
        if self._split is None:
            from gpframe.frame.partition import split

            self._split = split(self, _refuse_coordinate_copies)
        return self._split

    def _refuse_partition(self) -> None:
        """Refuse a split for the operations that do not support one."""
        if self.partition is not None:
            raise InvalidInputError(
                f"this operation does not support partition={self.partition!r} (privatize, "
                "range_count, knn and convex_hull do). Run it once per part instead, each with "
                "its own public domain=: "
                f"df[df[{self.partition!r}] == part].geopriv(session, ..., domain=box). "
                "Nothing was charged."
            )

    def __repr__(self) -> str:
        p = self.located
        crs = "not chosen yet" if self._projected is None else self._projected.crs_m.to_string()
        return (
            f"GeoPriv({len(p)} points, {len(pd.unique(p.users))} users, "
            f"metric CRS {crs}, user={self.user!r})"
        )

    # Every query method below is a thin forwarder to its module in gpframe.queries (the
    # *_frame functions); the signatures are spelled out so help() and tab completion show
    # them. tests/integration/frame/test_accessor_signatures.py keeps them equal to the
    # implementations' keywords.

    def range_count(
        self,
        region: Region,
        *,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.05,
        component: Component = None,
        reduce: Literal["first", "last"] | None = None,
        allocations: Any = None,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> RangeCountResult | Preview:
        """Count the users whose point lies inside ``region``, privately.

        Each user contributes one point (see ``component``). The point is never released: the
        users' signed distances to the region's boundary (``dist``) or their points (``pt``)
        are privatized, and with ``*-elim`` the users clearly inside or outside are decided in
        early rounds and pay only for the rounds they ran (Adaptive Privacy Budgeting, the
        range-counting algorithm with iterative elimination).

        Parameters
        ----------
        region : shapely Polygon / MultiPolygon, GeoSeries or GeoDataFrame
            One polygon (holes and several parts allowed) in the data's CRS, or a series of
            them in any CRS (reprojected; one result row per region). Each region is a query of
            its own: K regions charge a user up to K times the allocation.
        rho : float, optional
            Allocation per user and region on a CGP session, in m⁻² (Gaussian noise).
        eps : float, optional
            Allocation per user and region on a GP session, in m⁻¹ (Laplace noise). Pass
            exactly one of ``rho``, ``eps`` and ``allocations``.
        method : {"dist-elim", "pt-elim", "dist", "pt"}
            Privatize the distance to the boundary or the point, once or with elimination.
        rounds : int
            Elimination rounds (``*-elim`` only).
        split : {"doubling", "even"}
            How the allocation is divided between the rounds.
        beta : float
            Failure probability of the reported error bound, in (0, 1).
        component : None, (column, value), callable, "first", "last", gp.First or gp.Last
            Which row is each user's point. ``None``: every row (one per user required).
            ``(column, value)``: the rows where ``frame[column] == value``. A callable
            ``f(frame)`` returning a boolean mask over public columns (never the coordinates).
            ``"first"`` / ``"last"`` or ``gp.First(col, after=t)`` / ``gp.Last(col, before=t)``:
            each user's first / last row by a time column. A trajectory (several rows per
            user) needs one of these: gpframe does not choose the point for you, because which
            point is part of the question; every rule keeps one row per user, so the charge is
            the same as for one-point data (``docs/operations/range_count.md``).
        reduce : {"first", "last"}, optional
            Keep the first / last row (row order) of a user with several rows in the component;
            without it several rows are an error.
        allocations : Series by user, array, scalar or plan, optional
            Per-user allocations instead of ``rho`` / ``eps``; a plan from ``session.plan(...)``
            gives each region its next allocation.
        progress : bool, optional
            Progress bar over regions (None: on in a terminal or notebook with several regions).
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng(seed)``).

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        RangeCountResult
            ``value`` the noisy count (a Series by region for several regions), ``error`` its
            bound at confidence 1 − β, the per-user charges and the rounds each user ran.

        See Also
        --------
        gpframe.frame.range_count.range_count : the implementation (noise, charges).

        Examples
        --------
        >>> import gpframe as gp, pandas as pd, shapely
        >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 530_000.0],
        ...                    "y": [4_500_100.0, 4_500_300.0, 4_530_000.0]})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
        >>> res = bound.range_count(shapely.box(490_000, 4_490_000, 510_000, 4_510_000),
        ...                         rho=1e-4)
        >>> res.n_charged, res.n_excluded
        (3, 0)
        >>> print("users inside:", res.value)  # noisy, 2 here  # doctest: +ELLIPSIS
        users inside: ...
        """
        from gpframe.frame.range_count import range_count

        return range_count(
            self, region, rho=rho, eps=eps, method=method, rounds=rounds, split=split, beta=beta,
            component=component, reduce=reduce, allocations=allocations, progress=progress,
            rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def kde(
        self,
        at: QueryPoints,
        *,
        bandwidth_m: float,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "pt-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.05,
        nu_m: float | None = None,
        component: Component = None,
        reduce: Literal["first", "last"] | None = None,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> KdeResult | Preview:
        """Estimate the Gaussian kernel density of the users' points at ``at``, privately.

        One point per user (see ``component``); the kernel is exp(−d²/(2b²)) with b =
        ``bandwidth_m``. With ``*-elim`` the users far from a query point stop early and keep
        most of their allocation (Adaptive Privacy Budgeting, the KDE algorithm).

        Parameters
        ----------
        at : shapely Point, GeoSeries / GeoDataFrame of points, or array of shape (m, 2)
            The public query points, in the data's CRS unless a GeoSeries carries its own.
        bandwidth_m : float
            Kernel bandwidth b, in ground metres.
        rho : float, optional
            Allocation per user (and per query point, except ``pt``) on a CGP session, m⁻².
        eps : float, optional
            The same on a GP session, m⁻¹. Pass exactly one of ``rho`` / ``eps``.
        method : {"pt-elim", "dist-elim", "pt", "dist"}
            ``pt`` privatizes each point once for all query points (one charge); the others
            are one query per query point (charges add up).
        rounds : int
            Elimination rounds (``*-elim`` only).
        split : {"doubling", "even"}
            How the allocation is divided between the rounds.
        beta : float
            Failure probability of each query point's error bound, in (0, 1).
        nu_m : float, optional
            Elimination distance ν in metres (default 3 × ``bandwidth_m``).
        component : None, (column, value), callable, "first", "last", gp.First or gp.Last
            Which row is each user's point (as in :meth:`range_count`); required for a
            trajectory (several rows per user), e.g. ``gp.Last('time')``.
        reduce : {"first", "last"}, optional
            Keep the first / last row of a user with several rows in the component.
        progress : bool, optional
            Progress bar over query points (None: on in a terminal or notebook with several).
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        KdeResult
            ``value`` the density (a float for one point, a GeoDataFrame for several),
            ``points`` the per-point table (``kde``, ``error``, ``n_far``...), the charges.

        See Also
        --------
        gpframe.frame.kde.kde : the implementation (noise, charges, error bound).

        Examples
        --------
        >>> import gpframe as gp, pandas as pd, shapely
        >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 540_000.0],
        ...                    "y": [4_500_100.0, 4_500_300.0, 4_540_000.0]})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
        >>> res = bound.kde(shapely.Point(500_000, 4_500_000), bandwidth_m=2000, rho=1e-4)
        >>> res.n_charged, int(res.points["n_far"].iloc[0])   # the far boat stops early
        (3, 1)
        >>> print("density:", res.value)  # noisy  # doctest: +ELLIPSIS
        density: ...
        """
        from gpframe.frame.kde import kde

        return kde(
            self, at, bandwidth_m=bandwidth_m, rho=rho, eps=eps, method=method, rounds=rounds,
            split=split, beta=beta, nu_m=nu_m, component=component, reduce=reduce,
            progress=progress, rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def kde_raster(
        self,
        *,
        bandwidth_m: float,
        cell_m: float = 100,
        bounds: tuple[float, float, float, float] | None = None,
        rho: float | None = None,
        eps: float | None = None,
        correct: bool = True,
        component: Component = None,
        reduce: Literal["first", "last"] | None = None,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Raster | Preview:
        """Estimate the density of the users' points on a grid (a heatmap), privately.

        Each user's point is privatized once (one charge however many cells), then the raster
        is the Gaussian KDE of the released points with the noise's own smoothing removed
        (``correct=True``), so it estimates the true points' KDE with bandwidth ``bandwidth_m``.

        Parameters
        ----------
        bandwidth_m : float
            Kernel bandwidth h, in ground metres.
        cell_m : float
            Cell side, in metres.
        bounds : (xmin, ymin, xmax, ymax), optional
            Public extent in the data's CRS (degrees for lon/lat input). None: the extent of
            the released points (never the true ones), padded by 3h.
        rho : float, optional
            Allocation per user on a CGP session, m⁻² (Gaussian noise, exact correction).
        eps : float, optional
            Allocation per user on a GP session, m⁻¹ (planar Laplace). Exactly one of the two.
        correct : bool
            Remove the noise's extra smoothing. Impossible when the Gaussian noise's σ is at
            least h: the call is refused before anything is charged.
        component : None, (column, value), callable, "first", "last", gp.First or gp.Last
            Which row is each user's point (as in :meth:`range_count`); required for a
            trajectory (several rows per user), e.g. ``gp.Last('time')``.
        reduce : {"first", "last"}, optional
            Keep the first / last row of a user with several rows in the component.
        progress : bool, optional
            Unused (one sampler call per distinct allocation); kept for a uniform signature.
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        Raster
            ``value`` the density per m² (ndarray (ny, nx), row 0 north) in the metric CRS,
            with its ``transform`` and ``crs``; ``params`` carry σ and the bandwidth applied.
            The grid is not reprojected to the input CRS (equal square cells exist only in
            metres): ``Raster.cells()`` gives each cell as a polygon in the input CRS.

        See Also
        --------
        gpframe.frame.kde.kde_raster : the implementation (noise, bias correction).

        Examples
        --------
        >>> import gpframe as gp, numpy as np, pandas as pd
        >>> df = pd.DataFrame({"boat": range(200), "x": 500_000.0 + np.arange(200),
        ...                    "y": 4_500_000.0 + np.arange(200)})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
        >>> r = bound.kde_raster(bandwidth_m=1000, cell_m=200, rho=1e-4,
        ...                      bounds=(490_000, 4_490_000, 510_000, 4_510_000))
        >>> r.shape, r.n_charged, float(session.spent().max())   # once per user
        ((100, 100), 200, 0.0001)
        >>> print("peak density per m²:", r.value.max())  # noisy  # doctest: +ELLIPSIS
        peak density per m²: ...
        """
        from gpframe.frame.kde import kde_raster

        return kde_raster(
            self, bandwidth_m=bandwidth_m, cell_m=cell_m, bounds=bounds, rho=rho, eps=eps,
            correct=correct, component=component, reduce=reduce, progress=progress, rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def grid_stats(
        self,
        *,
        value: str,
        bounds: tuple[float, float],
        epsilon: float | None = None,
        epsilon_per_user: float | None = None,
        epsilon_per_statistic: float | None = None,
        cells: int | str,
        clip: Literal["clip-user", "pseudo-user", "none"] = "clip-user",
        occupancy: Literal["public", "private"] | pd.DataFrame | None = None,
        clamp: bool = False,
        beta: float = 0.05,
        order_by: str | None = None,
        rng: BitSource | None = None,
        public_cells: Any = None,
        max_cells: int | None = None,
        max_per_cell: int | None = None,
        salt: str | None = None,
        kappa: float = KAPPA,
        split: tuple[float, float] | None = None,
        error_cap: float | None = None,
        protect_worst_grid: bool = True,
        rollback_incomplete_stage: bool = False,
        shrink: bool = True,
        progress: bool | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> gpd.GeoDataFrame | Preview:
        """Release the mean and variance of ``value`` per H3 cell, under user-level ε-DP.

        A central-DP query on the session's central budget: a user with many samples in a cell
        would dominate its sensitivity, so Clip-User first drops some of the heaviest users'
        cell contributions where that lowers the error, then each cell's mean and variance are
        released with discrete Laplace noise ("On Improving the Composition Privacy Loss in
        Differential Privacy for Fixed Estimation Error").

        Parameters
        ----------
        value : str
            Numeric column to summarise.
        bounds : (L, U)
            Public interval containing every value (chosen without looking at the data).
        epsilon_per_user : float
            The total central ε any one user pays for the whole call (all cells, all
            statistics); gpframe spends it across cells (``docs/operations/grid_stats.md``).
            The recommended way to ask.
        epsilon_per_statistic : float
            The older, per-cell form: ε for each statistic of each cell, so a user pays it
            2× (public occupancy) or 3× (private) per cell they are kept in.
        epsilon : float
            The former name of ``epsilon_per_statistic`` (same meaning).
        cells : int or str
            H3 resolution, or the name of a column of H3 cells (str or int).
        clip : {"clip-user", "pseudo-user", "none"}
            Suppression before release (per-statistic form with public occupancy).
        occupancy : "public", "private" or DataFrame
            Required. ``"public"`` acknowledges that who has samples in which cell is public;
            a DataFrame (user, cell, count) is the public occupancy, checked against the data;
            ``"private"`` bounds each user's contribution instead (needs ``max_cells`` and
            ``max_per_cell``) and releases noisy counts too.
        clamp : bool
            Clamp values outside [L, U] (otherwise they are an error).
        beta : float
            Failure probability of each cell's error bounds, in (0, 1).
        order_by : str, optional
            Column giving each user's canonical sample order (default: row order).
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.
        public_cells : list of H3 cells or shapely geometry, optional
            ``occupancy="private"`` only: the cells to release, or an area (input CRS) whose
            covering cells at resolution ``cells`` are released.
        max_cells : int, optional
            ``occupancy="private"`` only: the cap on the cells one user contributes to.
        max_per_cell : int, optional
            ``occupancy="private"`` only: the cap on one user's samples per cell.
        salt : str, optional
            ``occupancy="private"`` only: key of the public cell-selection hash.
        kappa : float
            Weight of the noise in Clip-User's error metric (default √2); never affects privacy.
        split : (float, float), optional
            Shares of the per-cell ε for the mean and the variance (default (0.5, 0.5) with
            Clip-User, (0.75, 0.25) with ``epsilon_per_user``).
        error_cap : float, optional
            Clip-User's acceptance cap on the error (default: the baseline's worst error).
        protect_worst_grid : bool
            Clip-User never makes the worst cell worse.
        rollback_incomplete_stage : bool
            Undo a Clip-User stage that did not finish.
        shrink : bool
            Per-user total with public occupancy only: pull each released mean toward the average
            of the released means, the more the noisier its cell (empirical Bayes, Efron & Morris
            1973; post-processing of released values, no charge). Lowers the median error when
            noise is large, at the price of a bias toward the other cells; ``mean_error`` widens to
            stay a valid bound. ``False`` releases the plain noisy means
            (``docs/operations/grid_stats.md``).
        progress : bool or None
            tqdm bar over the stages (None: on in a terminal or notebook).

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        geopandas.GeoDataFrame
            One row per cell (index: the H3 cell), hexagons in the input CRS, with ``mean``,
            ``variance``, their error bounds and ``released``. ``attrs["geopriv"]`` is the
            :class:`~gpframe.results.GridStatsResult` (a published view: no user
            ids, no per-user charges; the curator reads those with ``session.report(...)``).

        See Also
        --------
        gpframe.frame.grid_stats.grid_stats : the implementation (noise, charges).

        Examples
        --------
        >>> import gpframe as gp, numpy as np, pandas as pd
        >>> df = pd.DataFrame({"u": np.repeat(np.arange(40), 3),
        ...                    "x": 500_000.0 + np.tile([0.0, 10.0, 20.0], 40),
        ...                    "y": 4_500_000.0 + np.arange(120.0),
        ...                    "speed": np.tile([3.0, 5.0, 7.0], 40)})
        >>> session = gp.Session(central=gp.DP(epsilon=10.0))
        >>> bound = df.geopriv(session, user="u", x="x", y="y", crs="EPSG:32618")
        >>> out = bound.grid_stats(value="speed", bounds=(0, 30), epsilon_per_user=2.0,
        ...                        cells=7, occupancy="public")
        >>> len(out), int(out["n_samples"].sum()), out.attrs["geopriv"].spent_at_most
        (1, 120, 2.0)
        >>> print("mean speed:", out["mean"].iloc[0])  # noisy: about 5  # doctest: +ELLIPSIS
        mean speed: ...
        """
        from gpframe.frame.grid_stats import grid_stats

        return grid_stats(
            self, value=value, bounds=bounds, epsilon=epsilon, epsilon_per_user=epsilon_per_user,
            epsilon_per_statistic=epsilon_per_statistic, cells=cells, clip=clip,
            occupancy=occupancy, clamp=clamp, beta=beta, order_by=order_by, rng=rng,
            public_cells=public_cells, max_cells=max_cells, max_per_cell=max_per_cell, salt=salt,
            kappa=kappa, split=split, error_cap=error_cap, protect_worst_grid=protect_worst_grid,
            rollback_incomplete_stage=rollback_incomplete_stage, shrink=shrink, progress=progress,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def knn(
        self,
        point: QueryPoint,
        k: int,
        *,
        rho: float | None = None,
        eps: float | None = None,
        compat: Literal["reference"] | None = None,
        gamma0: float | None = None,
        scan_order: Literal["random", "input"] | None = None,
        max_cycles: int = 1000,
        beta: float = 0.05,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> pd.DataFrame | Preview:
        """Select each user's k private nearest neighbours of ``point`` among the user's rows.

        k-PNN ("Concentrated Geo-Privacy", private nearest neighbours): it releases which of a
        user's rows are (approximately) nearest, never a coordinate.

        Parameters
        ----------
        point : shapely Point, (x, y) or one-row GeoSeries
            The public query point, in the data's CRS unless a GeoSeries brings its own.
        k : int
            Neighbours per user (a user with fewer rows gets all of them, ranked).
        rho : float, optional
            Each user's budget on a CGP session, m⁻².
        eps : float, optional
            Each user's budget on a GP session, m⁻¹. Exactly one of ``rho`` / ``eps``.
        compat : {"reference"}, optional
            Reproduce the paper's reference implementation (input-order scan, its threshold).
        gamma0 : float, optional
            Public shift of the scan's threshold, in units of the noise scale b = 3/ε of one
            nearest-neighbour call (default 0; ``compat="reference"`` uses −2).
        scan_order : {"random", "input"}, optional
            Order in which a user's rows are scanned.
        max_cycles : int
            Cap on the scan cycles.
        beta : float
            Failure probability of the reported error bound, in (0, 1).
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        pandas.DataFrame
            One row per selected row, sorted by user then rank: the index holds the selected
            rows' labels, then the declared-public columns (``public=``; by default the user
            column) and ``knn_rank`` (1 = first selected). No coordinate of a true point.
            ``attrs["geopriv"]`` is the :class:`~gpframe.results.KnnResult`.

        See Also
        --------
        gpframe.frame.knn.knn : the implementation (noise, charges).

        Examples
        --------
        >>> import gpframe as gp, pandas as pd
        >>> df = pd.DataFrame({"boat": [1, 1, 1, 2],
        ...                    "x": [500_000.0, 500_050.0, 509_000.0, 500_010.0],
        ...                    "y": [4_500_000.0] * 4})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
        >>> out = bound.knn((500_000.0, 4_500_000.0), 2, rho=1e-4)
        >>> list(out.columns), out["knn_rank"].tolist(), session.spent().tolist()
        (['boat', 'knn_rank'], [1, 2, 1], [0.0001, 0.0001])
        >>> out.index.tolist()      # which rows: noisy  # doctest: +ELLIPSIS
        [...]
        """
        from gpframe.frame.knn import knn

        return knn(
            self, point, k, rho=rho, eps=eps, compat=compat, gamma0=gamma0,
            scan_order=scan_order, max_cycles=max_cycles, beta=beta, rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def convex_hull(
        self,
        *,
        rho: float | None = None,
        eps: float | None = None,
        beta: float = 0.1,
        k: int | None = None,
        alpha: float = 0.92,
        k_rule: Literal["reference", "consistent"] = "reference",
        radius_floor_m: float = 10.0,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> gpd.GeoDataFrame | Preview:
        """Release one private convex hull of each user's points.

        The private convex hull of "Concentrated Geo-Privacy": a noisy centre and radius, k
        anchors on a circle around them, a private nearest neighbour for each anchor, and the
        hull of those released points.

        Parameters
        ----------
        rho : float, optional
            Each user's budget on a CGP session, m⁻².
        eps : float, optional
            Each user's budget on a GP session, m⁻¹. Exactly one of ``rho`` / ``eps``.
        beta : float
            Failure probability of the radius enlargement and of the reported error.
        k : int, optional
            Anchors per user; None picks k from the noisy radius (``k_rule``, in [16, 128]).
        alpha : float
            Share of the hull stage's budget spent on the anchors' nearest neighbours.
        k_rule : {"reference", "consistent"}
            How k follows from the noisy radius: as in the authors' code, or from the paper's
            error bound with consistent exponents. k changes the accuracy only, never privacy.
        radius_floor_m : float
            Smallest radius used, in metres.
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        geopandas.GeoDataFrame
            One row per admitted user (index: user id): ``geometry`` (the hull, input CRS),
            ``k``, ``radius_m``, ``error_m``, ``fallback``; ``attrs["geopriv"]`` is the
            :class:`~gpframe.results.HullResult`.

        See Also
        --------
        gpframe.frame.knn.convex_hull : the implementation (budget split, charges).

        Examples
        --------
        >>> import gpframe as gp, numpy as np, pandas as pd
        >>> grid = np.arange(300.0)
        >>> df = pd.DataFrame({"u": np.repeat([1, 2], 300),
        ...                    "x": 500_000 + np.tile(grid * 7 % 2000, 2),
        ...                    "y": 4_500_000 + np.tile(grid * 13 % 2000, 2)})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-2))
        >>> bound = df.geopriv(session, user="u", x="x", y="y", crs="EPSG:32618")
        >>> hulls = bound.convex_hull(rho=1e-3)
        >>> hulls.index.tolist(), session.spent().tolist()
        ([1, 2], [0.001, 0.001])
        >>> hulls.geometry.iloc[0].wkt      # noisy  # doctest: +ELLIPSIS
        'POLYGON ((...))'
        """
        from gpframe.frame.knn import convex_hull

        return convex_hull(
            self, rho=rho, eps=eps, beta=beta, k=k, alpha=alpha, k_rule=k_rule,
            radius_floor_m=radius_floor_m, rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def nearest_users(
        self,
        point: QueryPoint,
        k: int,
        *,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.1,
        component: Component = None,
        reduce: Literal["first", "last"] | None = None,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> NearestResult | Preview:
        """Find the k users nearest to ``point``, one point per user, privately.

        The users' distances to ``point`` are privatized; with ``*-elim`` the users clearly
        among or clearly outside the k nearest are decided early and pay less (Adaptive
        Privacy Budgeting, the k-nearest-users algorithm).

        Parameters
        ----------
        point : shapely Point, (x, y) or one-row GeoSeries
            The public query point, in the data's CRS unless a GeoSeries brings its own.
        k : int
            How many users to find.
        rho : float, optional
            Allocation per user on a CGP session, m⁻².
        eps : float, optional
            Allocation per user on a GP session, m⁻¹. Exactly one of ``rho`` / ``eps``.
        method : {"dist-elim", "pt-elim", "dist", "pt"}
            Privatize the distance or the point, once or with elimination.
        rounds : int
            Elimination rounds (``*-elim`` only).
        split : {"doubling", "even"}
            How the allocation is divided between the rounds.
        beta : float
            Failure probability (half for the eliminations, half for the final selection).
        component : None, (column, value), callable, "first", "last", gp.First or gp.Last
            Which row is each user's point (as in :meth:`range_count`); required for a
            trajectory (several rows per user), e.g. ``gp.Last('time')``.
        reduce : {"first", "last"}, optional
            Keep the first / last row of a user with several rows in the component.
        progress : bool or None
            tqdm bar over the stages (None: on in a terminal or notebook).
        rng : BitSource, optional
            Randomness source; None is the OS CSPRNG.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        NearestResult
            ``value`` the k user ids (nearest first), the per-user charges (users dropped
            early pay less: ``saved``) and the error bound.

        See Also
        --------
        gpframe.frame.knn.nearest_users : the implementation (noise, charges).

        Examples
        --------
        >>> import gpframe as gp, pandas as pd
        >>> df = pd.DataFrame({"boat": [1, 2, 3, 4],
        ...                    "x": [500_000.0, 500_010.0, 530_000.0, 560_000.0],
        ...                    "y": [4_500_000.0] * 4})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-2))
        >>> bound = df.geopriv(session, user="boat", x="x", y="y", crs="EPSG:32618")
        >>> res = bound.nearest_users((500_000.0, 4_500_000.0), 2, rho=1e-3)
        >>> sorted(res.value), res.saved > 0
        ([1, 2], True)
        """
        from gpframe.frame.knn import nearest_users

        return nearest_users(
            self, point, k, rho=rho, eps=eps, method=method, rounds=rounds, split=split,
            beta=beta, component=component, reduce=reduce, progress=progress, rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )  # fmt: skip

    def privatize(
        self,
        *,
        eps: float | None = None,
        rho: float | None = None,
        per: Literal["user", "point"] = "user",
        beta: float = 0.05,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> gpd.GeoDataFrame | Preview:
        """Release a noisy copy of every point.

        See ``docs/operations/privatize.md`` (GP Basic with ``eps=``, CGP Basic with ``rho=``, the
        contract) and ``docs/noise.md`` (lattice calibration, projection scale); Liang & Yi,
        'Concentrated Geo-Privacy' (2023), Thm. 4.6, 4.8.

        Parameters
        ----------
        eps : float, optional
            GP amount per metre (planar lattice Laplace). Exactly one of ``eps`` / ``rho``.
        rho : float, optional
            CGP amount per square metre (lattice Gaussian).
        per : {"user", "point"}
            ``"user"`` (default): the amount covers all of a user's n points, each released at
            amount/n: the charge is the amount whatever n, and the error radius grows like √n
            (CGP) or n (GP) with the user's point count. ``"point"``: each point is released at
            the amount and the user is charged n × amount (what the SQL UDF does row by row);
            the error is one point's. The result's ``per`` and the preview (``dry_run=True``:
            charge and error radius per user, before paying) state which was used.
        beta : float
            Failure probability of the reported error bounds.
        progress : bool or None
            tqdm progress bar (None: on in a terminal or notebook).
        rng : BitSource or None
            Randomness source; None is the OS CSPRNG. Tests pass ``gp.testing.seeded_rng(seed)``.

        on_exhausted : {"exclude", "raise"}
            A user whose budget cannot pay: ``"exclude"`` (default) leaves them out, charged
            nothing and listed in the result's exclusions (and ``session.report(query_id=...)``);
            ``"raise"`` refuses the query with a :class:`~gpframe.errors.BudgetExceededError`
            naming them, before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running: what each user would
            have reserved, who would be excluded and why, the budget left afterwards. Nothing
            is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

        Returns
        -------
        geopandas.GeoDataFrame
            One row per input row, same index, in the input CRS, holding only: the noisy
            points (the geometry; a DataFrame input also gets its x/y or lon/lat columns back
            with the noisy coordinates) and the declared-public columns (``public=`` of
            ``df.geopriv``, by default the user column). Every other column is dropped, with a
            ``GpframeWarning`` naming them: a column computed from the true points (a speed, a
            step length, a copy of lon/lat) would reveal them. Rows of users whose budget
            could not pay have empty geometry (and NaN coordinates).
            ``attrs["geopriv"]`` holds the :class:`~gpframe.results.PrivatizeResult` (as a
            :class:`~gpframe.results.ResultAttr`: it behaves like the result, and is also its
            JSON summary, which ``to_parquet`` stores in the file). Each user's own error bound
            is ``attrs["geopriv"].max_error_m`` (a Series, metres).

        Notes
        -----
        Noise per point: CGP σ = (1 + √2·g/r_min)·scale_max/√(2ρ_pt) per coordinate; GP planar
        Laplace with mean radius 2·(1 + √2·g/r_min)·scale_max/ε_pt; ρ_pt = ρ/n (``per="user"``)
        or ρ (``per="point"``), likewise ε_pt; g = 2⁻¹⁰ m, r_min = 1 m.
        Charge per user: ρ or ε (``per="user"``), n·ρ or n·ε (``per="point"``); a GP release on a
        CGP budget costs ε²/2 per ε-GP part (so n·ε²/2 for ``per="point"``). A Gaussian (``rho=``)
        on a pure-GP budget is refused (BudgetExceededError) before anything is written.
        Error: with probability ≥ 1 − β every point of a user lies within the reported radius:
        CGP √(n ln(n/β)/ρ), GP (n/ε)·(−W₋₁(−β/(n e)) − 1), for ``per="user"``.

        Examples
        --------
        >>> import gpframe as gp, gpframe.frame.accessor, pandas as pd
        >>> from gpframe.ledger import Session
        >>> pings = pd.DataFrame({"taxi": [1, 1, 2], "lon": [-37.05, -37.06, -37.07],
        ...                       "lat": [-10.91, -10.92, -10.93]})
        >>> session = Session(budget=gp.CGP(rho=1e-4))
        >>> bound = pings.geopriv(session, user="taxi", lon="lon", lat="lat", crs="EPSG:4326",
        ...                       to_crs="EPSG:32724")   # named metric CRS: depends on no data
        >>> out = bound.privatize(
        ...     rho=1e-5)
        >>> out.crs.to_epsg(), list(out.index)
        (4326, [0, 1, 2])
        >>> res = out.attrs["geopriv"]
        >>> res.n_charged, res.n_excluded
        (2, 0)
        >>> session.spent().tolist()
        [1e-05, 1e-05]
        """
        from gpframe.mechanisms.noise.bits import resolve_rng

        # refuse an insecure or foreign rng before the reservation: the sampler would only
        # refuse it after the users were reserved, and so charged in full
        rng = resolve_rng(rng)
        kind, amount = metric_amount(rho, eps, example=".privatize(rho=1e-4)")
        _pv.check_amount(kind, per, amount)
        probability(beta)
        if dry_run:
            return _privatize_preview(
                self, kind, amount, per, float(beta),
                lambda: self.privatize(eps=eps, rho=rho, per=per, beta=beta, progress=progress,
                                       rng=rng, on_exhausted=on_exhausted),
            )  # fmt: skip
        if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
            return with_on_exhausted(  # type: ignore[return-value]
                lambda **kw: self.privatize(eps=eps, rho=rho, per=per, beta=beta,
                                            progress=progress, rng=rng, **kw),
                {"on_exhausted": on_exhausted},
            )  # fmt: skip
        if self.partition is not None:
            return _privatize_partitioned(self, kind=kind, amount=amount, per=per, beta=beta,
                                         progress=progress, rng=rng)  # fmt: skip
        p = self.projected
        if "geometry" not in self.protected:  # a DataFrame input gets a new geometry column
            from gpframe.release import check_reserved

            check_reserved(self.public, ["geometry"], "privatize")
        result, released = _privatize_release(
            self, p, kind, amount, per, float(beta), progress, rng
        )
        # The summary first, the output frame last: the frame's 10^6 shapely points are objects
        # the cyclic GC walks on every collection, and everything made for the call but the
        # released points and the result is freed by now (a lower peak while they are made).
        attr = result.to_attr()
        frame = _build_output(self.frame, p, result.value, released, self.public)
        frame.attrs["geopriv"] = attr
        return frame


def _privatize_release(
    bound: GeoPriv,
    p: Any,
    kind: str,
    amount: Fraction,
    per: str,
    beta: float,
    progress: Any,
    rng: Any,
) -> tuple[Any, np.ndarray]:
    """Validate, reserve, draw and charge one privatize call.

    Returns the ``PrivatizeResult`` (its ``value``: the released points in metres) and the mask
    of the rows released.

    A function of its own so that its per-user arrays (codes, counts, allocations, the ledger's
    reservation) are freed when it returns, before the output frame is built.
    """
    ids = np.asarray(p.users)
    if ids.dtype.kind in "iu" and (ids.size < 2 or bool((ids[1:] > ids[:-1]).all())):
        # one row per user, ids ascending (e.g. 0..n-1): factorize's answer without hashing;
        # the Index shares the (read-only) ids instead of copying them
        codes, uniques = np.arange(ids.size, dtype=np.int64), pd.Index(ids, copy=False)
        counts = np.ones(ids.size, dtype=np.int64)
    else:
        codes, uniques = pd.factorize(pd.Series(p.users), sort=False)
        counts = np.bincount(codes, minlength=len(uniques))
    n_users = len(uniques)
    _check_coordinates(p.xy)
    _preflight(kind, amount, per, counts, float(p.scale_max))

    fkind = filter_kind(bound.session)
    ledger = bound.session.ledger
    # Allocations straight in int64 ledger units: one exact conversion of the amount, then
    # ceil(n * units) vectorised (the same units reserve() computes from n x amount).
    alloc_units, too_big = ledger.units_for(
        "metric", amount, np.ones(n_users, np.int64) if per == "user" else counts, kind=kind
    )
    users = ledger_key_array(uniques)  # int64 ids: no Python int per user
    params = {
        amount_keyword(kind): float(amount),
        "per": per,
        "beta": beta,
        "n_points": len(p),
        "crs_m": p.crs_m.to_string(),
        "scale_max": float(p.scale_max),
    }
    prepaid = not bool(too_big.any())
    alloc_in = alloc_units
    if not prepaid:  # cannot be admitted (a budget is at most MAX units)
        alloc_in = alloc_units.copy()
        alloc_in[too_big] = LedgerUnits.MAX

    def compute(r: Any) -> Charge[Any]:
        admitted = np.asarray(r.admitted, dtype=bool) & ~too_big
        out = _pv.privatize_points(
            p.xy,
            codes,
            n_users,
            kind=kind,  # type: ignore[arg-type]
            amount=amount,
            per=per,
            admitted=admitted,
            scale_max=float(p.scale_max),
            beta=beta,
            rng=rng,
            progress=progress,
            threads=None,  # the OS CSPRNG's large calls on every core (mechanisms.row_ranges)
        )
        # Actual charges, in ledger units of the filter, from the mechanisms' guarantees:
        # one conversion per sampler call (per distinct amount), never per user.
        actual_units, actual_f = _actual_units(ledger, fkind, kind, per, out, counts, n_users)
        return Charge((admitted, out, actual_f), actual_units, units=True)

    # The charge is the allocation, known before any noise: each point's guarantee is its
    # exact share (amount or amount/n, a Fraction), so the ledger units the mechanisms
    # report equal ceil(n x units(amount)) reserved above. The reservation's transaction
    # then also commits the charge (one durable write, as the SQL face's batches); the
    # driver refuses (GpframeInternalError, nothing returned) any other reported charge.
    # A user whose amount overflows the ledger's units is reserved at MAX but never
    # released (charged 0), so such a call takes the reserve-then-charge path.
    ran = run(
        bound.session, users, alloc_in, notion="metric", query="privatize", params=params,
        units=True, compute=compute, prepaid=prepaid,
    )  # fmt: skip
    admitted, out, actual_f = ran.value
    query_id = ran.query_id
    alloc_f = _unit_floats(ledger, alloc_units)
    # the reservation and the per-user arrays only the ledger needed: freed before the result
    # is built (a lower peak)
    del ran, alloc_in, alloc_units, users
    result = _make_result(
        kind=kind,
        amount=amount,
        per=per,
        beta=beta,
        users=uniques,
        counts=counts,
        admitted=admitted,
        charges=actual_f,
        out=out,
        query_id=query_id,
        fkind=fkind,
        projected=p,
        allocations=alloc_f,
    )
    return result, out.released


def _privatize_preview(
    bound: GeoPriv, kind: str, amount: Fraction, per: str, beta: float, call: Callable[[], Any]
) -> Any:
    """Preview ``privatize``, with each user's nominal error radius and what ``per`` means.

    The radii read only each user's number of points (``docs/operations/privatize.md``).
    """
    from gpframe.results.preview import preview_call

    if bound.partition is not None:  # the worst part's scale factor for every user
        users = pd.Series(bound.located.users)
        scale = max(q.projected.scale_max for q in bound._parts())
    else:
        p = bound.projected
        users, scale = pd.Series(p.users), p.scale_max
    codes, uniques = pd.factorize(users, sort=False)
    counts = np.bincount(codes, minlength=len(uniques)).astype(np.int64)
    errs = _pv.nominal_errors(kind, amount, per, counts, beta, float(scale))
    count_of = dict(zip(list(ledger_keys(uniques)), counts.tolist(), strict=True))

    def error(table: pd.DataFrame, calls: Any = None) -> tuple[float, str, float] | None:
        n = [count_of.get(u, 0) for u in table.index[table["status"] == "reserved"]]
        if not sum(n):
            return None
        # the released result's error: one bound over every point released
        e = _pv.nominal_errors(kind, amount, per, np.array(n), beta, float(scale), overall=True)
        return float(e), "max point error (m)", 1 - beta

    return preview_call(bound.session, "privatize", call, per=per,
                        per_note=_pv.per_note(kind, per, errs, counts), error=error)  # fmt: skip


def _privatize_partitioned(
    bound: GeoPriv, *, kind: str, amount: Fraction, per: str, beta: float, progress: Any, rng: Any
) -> Any:
    """Privatize each part in its own metric CRS under one query id (``gpframe.frame.partition``).

    Each user's allocation is the sum over the parts they appear in of what a privatize call on
    that part alone would reserve, and so is the actual charge: with ``per="user"`` a user in
    two parts pays ``2 × amount``, with ``per="point"`` ``n × amount`` as without a split.
    """
    from gpframe.frame.partition import Merged, describe

    parts = bound._parts()
    codes, uniques = pd.factorize(pd.Series(bound.located.users), sort=False)
    n_users = len(uniques)
    counts = np.bincount(codes, minlength=n_users).astype(np.int64)
    ledger = bound.session.ledger
    alloc_units = np.zeros(n_users, dtype=np.int64)
    too_big = np.zeros(n_users, dtype=bool)
    local = []
    for part in parts:
        p = part.projected
        lc, lu = pd.factorize(codes[part.rows], sort=False)
        lu = np.asarray(lu, dtype=np.int64)
        lcounts = np.bincount(lc, minlength=len(lu)).astype(np.int64)
        _check_coordinates(p.xy)
        _preflight(kind, amount, per, lcounts, float(p.scale_max))
        mult = np.ones(len(lu), np.int64) if per == "user" else lcounts
        u, big = ledger.units_for("metric", amount, mult, kind=kind)
        over = big | (alloc_units[lu] > LedgerUnits.MAX - u)
        too_big[lu] |= over
        alloc_units[lu] = np.where(over, 0, alloc_units[lu] + np.where(over, 0, u))
        local.append((lc, lu, lcounts))
    if "geometry" not in bound.protected:  # a DataFrame input gets a new geometry column
        from gpframe.release import check_reserved

        check_reserved(bound.public, ["geometry"], "privatize")
    fkind = filter_kind(bound.session)
    described = describe(parts)
    worst = max(parts, key=lambda q: q.projected.noise_inflation).projected
    params = {
        amount_keyword(kind): float(amount),
        "per": per,
        "beta": float(beta),
        "n_points": len(bound.located),
        "partition": str(bound.partition),
        "partitions": described,
    }
    alloc_in = alloc_units.copy()
    alloc_in[too_big] = LedgerUnits.MAX
    n = len(bound.located)

    def compute(r: Any) -> Any:
        admitted = np.asarray(r.admitted, dtype=bool) & ~too_big
        act_u = np.zeros(n_users, dtype=np.int64)
        act_f = np.zeros(n_users, dtype=np.float64)
        xy = np.full((n, 2), np.nan)
        xs, ys = np.full(n, np.nan), np.full(n, np.nan)
        released = np.zeros(n, dtype=bool)
        err = np.full(n_users, np.nan)
        calls, guarantees, err_all = 0, [], np.nan
        for part, (lc, lu, lcounts) in zip(parts, local, strict=True):
            p = part.projected
            out = _pv.privatize_points(
                p.xy, lc, len(lu), kind=kind, amount=amount, per=per,  # type: ignore[arg-type]
                admitted=admitted[lu], scale_max=float(p.scale_max), beta=float(beta), rng=rng,
                progress=progress, threads=None,
            )  # fmt: skip
            u, f = _actual_units(ledger, fkind, kind, per, out, lcounts, len(lu))
            act_u[lu] += u
            act_f[lu] += f
            xy[part.rows] = out.xy
            released[part.rows] = out.released
            if out.released.any():
                rows = part.rows[out.released]
                xs[rows], ys[rows] = p.to_input_crs(out.xy[out.released])
            err[lu] = np.fmax(err[lu], out.max_error_m)
            err_all = np.fmax(err_all, out.max_error_all_m)
            calls += out.n_calls
            guarantees += list(out.guarantees)
        merged = Merged(xy, err, float(err_all), calls, guarantees)
        return Charge((admitted, merged, released, (xs, ys), act_f), act_u, units=True)

    ran = run(
        bound.session, ledger_key_array(uniques), alloc_in, notion="metric", query="privatize",
        params=params, units=True, compute=compute,
    )  # fmt: skip
    admitted, merged, released, xy_in, act_f = ran.value
    frame = _build_output(bound.frame, bound.located, merged.xy, released, bound.public,
                              stacklevel=5, xy_in=xy_in)  # fmt: skip
    result = _pv.make_privatize_result(
        kind=kind, amount=amount, per=per, beta=float(beta), users=uniques, counts=counts,
        admitted=admitted, charges=act_f, out=merged, query_id=ran.query_id, fkind=fkind,
        projected=worst, allocations=_unit_floats(ledger, alloc_units),
    )  # fmt: skip
    # the top-level crs_m / scale_max / noise_inflation are the worst part's; each part's own
    # are in params["partitions"]
    result.params.update(partition=str(bound.partition), partitions=described)
    frame.attrs["geopriv"] = result.to_attr()
    return frame


def _make_result(**kw: Any) -> Any:
    from gpframe.queries.privatize import make_privatize_result

    return make_privatize_result(**kw)


def _register() -> None:
    """Register ``geopriv`` once (re-registering would make pandas warn about an override).

    GeoDataFrame subclasses DataFrame, so it inherits the accessor.
    """
    if "geopriv" not in pd.DataFrame.__dict__:
        pd.api.extensions.register_dataframe_accessor("geopriv")(GeoPrivAccessor)


_register()
