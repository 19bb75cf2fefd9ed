"""``ddf.geopriv``: the accessor on dask DataFrames and dask-geopandas GeoDataFrames.

See ``docs/beyond-one-machine.md``. Calling it checks the column roles against the frame's
``meta`` (no data is read) and binds a session; the ledger stays in the client process and is
never sent to a worker. The data are validated by each operation's first pass, before anything
is reserved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from gpframe.errors import CRSError, InvalidInputError
from gpframe.release import check_public, protected_columns

if TYPE_CHECKING:
    from gpframe.mechanisms.noise.bits import BitSource

__all__ = ["DaskGeoPriv", "DaskGeoPrivAccessor"]

_NOTHING = "Nothing was charged."


class DaskGeoPrivAccessor:
    """``ddf.geopriv(session, user=...)``: bind a session and columns, get a DaskGeoPriv."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

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
    ) -> DaskGeoPriv:
        """Check the column roles on the frame's ``meta`` and bind ``session``.

        The parameters are the pandas accessor's (:class:`gpframe.frame.accessor.GeoPrivAccessor`).
        The metric CRS must come from public information: ``to_crs=``, ``domain=`` or
        coordinates already in a projected metre CRS; the pandas face's fallback to the data's
        own extent would let every partition choose its own.

        Parameters
        ----------
        session : gpframe.Session
            The ledger every query charges; it lives in this (the client's) process.
        user : str
            Column of user ids, or the name of the index when the frame is indexed by user
            with known divisions (then no shuffle is needed).
        x, y, lon, lat, crs, to_crs, domain, public
            As for the pandas accessor.
        partition : str, optional
            As for the pandas accessor (``docs/wide-extents.md``): a public column to split by,
            each part noised in its own metric CRS, one query id, each user charged once per
            part they appear in; ``privatize`` only on this face (the other operations
            refuse a split). Each part's extent must be public: ``domain={part: box, ...}``
            (or one box, or coordinates in a projected metre CRS); the data-extent fallback
            is refused as above. The checks that read the column (missing values, a column
            computed from the points, a part without a box) run in the first pass.

        Returns
        -------
        DaskGeoPriv

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 1, 2, 3], "fleet": ["a", "b", "a", "b"],
        ...                    "x": [500_100.0, 500_150.0, 500_200.0, 530_000.0],
        ...                    "y": [4_500_100.0, 4_500_120.0, 4_500_300.0, 4_530_000.0]})
        >>> s = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(
        ...     s, user="boat", x="x", y="y", crs="EPSG:32618", partition="fleet")
        >>> out = bound.privatize(rho=1e-5)        # boat 1 is in both fleets: it pays twice
        >>> sorted(out.columns), s.spent().sort_index().tolist()
        (['boat', 'fleet', 'geometry', 'x', 'y'], [2e-05, 1e-05, 1e-05])
        """
        meta = self._obj._meta
        if session is None or not hasattr(session, "reserve"):
            raise InvalidInputError(
                f"session={session!r} is not a gpframe Session. Pass one: "
                f"ddf.geopriv(gp.Session(budget=gp.CGP(rho=1e-4)), user='user_id'). {_NOTHING}"
            )
        by_index = user not in meta.columns and meta.index.name == user
        if by_index and not self._obj.known_divisions:
            raise InvalidInputError(
                f"user={user!r} is the index but its divisions are unknown, so a user's rows may "
                f"be in several partitions. Use ddf.reset_index() (gpframe then shuffles on the "
                f"column) or ddf.set_index({user!r}) (sorted, known divisions). {_NOTHING}"
            )
        if user not in meta.columns and not by_index:
            raise InvalidInputError(
                f"user={user!r} is not a column of the frame (columns: "
                f"{list(map(str, meta.columns))}). Name the user-id column, e.g. "
                f"user='user_id'. {_NOTHING}"
            )
        for arg, name in (("x", x), ("y", y), ("lon", lon), ("lat", lat)):
            if name is not None and name not in meta.columns:
                raise InvalidInputError(
                    f"{arg}={name!r} is not a column of the frame (columns: "
                    f"{list(map(str, meta.columns))}). {_NOTHING}"
                )
        if x is None and y is None and lon is None and lat is None:
            gname = getattr(meta, "_geometry_column_name", None)
            if gname is None or gname not in meta.columns:
                raise InvalidInputError(
                    "no coordinates: pass x=/y= or lon=/lat= column names with crs=, or a "
                    f"dask-geopandas GeoDataFrame with a point geometry column. {_NOTHING}"
                )
            if getattr(meta, "crs", None) is None and crs is None:
                raise CRSError(
                    "the GeoDataFrame has no CRS: set it first (ddf = ddf.set_crs('EPSG:4326')) "
                    f"or pass crs=. gpframe never guesses units. {_NOTHING}"
                )
        elif crs is None:
            raise CRSError(
                f"columns {x or lon!r}/{y or lat!r} have no CRS: pass crs= explicitly, e.g. "
                f"crs='EPSG:4326'. gpframe never guesses units. {_NOTHING}"
            )
        from gpframe.dask.partitions import Columns

        prot = protected_columns(meta, (x, y, lon, lat))
        part_domains = None
        if partition is not None:
            from gpframe.dask.parts import check_split

            part_domains = check_split(meta, partition, protected=prot, to_crs=to_crs,
                                       domain=domain)  # fmt: skip
            public = _with(public, partition)
        cols = tuple(meta.columns) + ((user,) if by_index else ())
        pub = check_public(cols, public, user=user, protected=prot)
        gname = getattr(meta, "_geometry_column_name", None)
        geo = gname in meta.columns
        spec = Columns(user=user, x=x, y=y, lon=lon, lat=lat, crs=crs, to_crs=to_crs,
                       domain=None if part_domains is not None else domain, public=pub,
                       index_is_user=by_index, geometry=gname if geo else None,
                       geometry_crs=getattr(meta, "crs", None) if geo else None,
                       partition=partition, part_domains=part_domains)  # fmt: skip
        dropped = [c for c in meta.columns if c not in pub and c not in prot]
        return DaskGeoPriv(self._obj, session, spec, dropped=dropped)


def _with(public: Any, name: Any) -> list[Any]:
    """``public=`` with ``name`` added (a partition column is public: it is in the output)."""
    if public is None:
        names: list[Any] = []
    elif isinstance(public, (str, bytes)) or not hasattr(public, "__iter__"):
        names = [public]
    else:
        names = list(public)
    return names if name in names else [*names, name]


class DaskGeoPriv:
    """A dask frame bound to a session and its column roles; its methods run private queries.

    Every method validates on the client, reserves through the one driver
    (:func:`gpframe.ledger.run.run`), runs the array code of :mod:`gpframe.queries` in the
    Dask graph, and returns or publishes nothing before the charge is committed.
    """

    def __init__(self, ddf: Any, session: Any, cols: Any, *, dropped: list[Any]) -> None:
        self.ddf = ddf
        self.session = session
        self.cols = cols
        #: input columns the outputs leave out (named in one warning per call)
        self.dropped = dropped
        meta = ddf._meta
        self.is_geo = getattr(meta, "_geometry_column_name", None) in meta.columns

    def _refuse_partition(self) -> None:
        """Refuse a split for the operations that do not run one on this face."""
        if self.cols.partition is not None:
            raise InvalidInputError(
                f"this operation does not support partition={self.cols.partition!r} on the Dask "
                "face (privatize does). Run it once per part instead, each with its own public "
                f"domain=: ddf[ddf[{self.cols.partition!r}] == part].geopriv(session, ..., "
                f"domain=box). {_NOTHING}"
            )

    def __repr__(self) -> str:
        return (
            f"DaskGeoPriv({self.ddf.npartitions} partitions, user={self.cols.user!r}, "
            f"shuffle={'no' if self.cols.index_is_user else 'on ' + repr(self.cols.user)})"
        )

    def privatize(
        self,
        *,
        rho: float | None = None,
        eps: float | None = None,
        per: Literal["user", "point"] = "user",
        beta: float = 0.05,
        to: Any = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Any:
        """Release every point with noise, partition by partition (``docs/beyond-one-machine.md``).

        The pandas face's privatize (``docs/operations/privatize.md``; Liang & Yi,
        'Concentrated Geo-Privacy' (2023), Thm. 4.6, Thm. 4.8) run on partitions that hold
        whole users. Noise: GP planar Laplace at ε/n per point (``eps``), CGP lattice Gaussian
        at ρ/n per point (``rho``), n the user's number of points (``per="user"``); the amount
        per point with ``per="point"``. Charge: per user, the amount (``per="user"``) or
        n × amount (``per="point"``), committed before anything is returned or published.

        Parameters
        ----------
        rho, eps : float, optional
            Per-user amount on a CGP (ρ, m⁻²) or GP (ε, m⁻¹) session; exactly one.
        per : {"user", "point"}
            Split a user's amount over their points, or charge every point the amount.
        beta : float
            Failure probability of the reported error bounds, in (0, 1).
        to : path, optional
            Write the output as Parquet (one file per partition) to this new directory:
            staged in ``<to>.staging-<query_id>`` and renamed to ``to`` after the charge. On
            a cluster, a filesystem the workers and the client share. None: return the
            output in memory.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG. Tests pass
            ``gp.testing.seeded_rng(seed)`` (each partition gets its own child stream).
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        geopandas.GeoDataFrame or PrivatizeResult
            In memory: the pandas face's output (noisy points, index, public columns), rows
            grouped by partition, with the :class:`~gpframe.results.PrivatizeResult` in
            ``attrs["geopriv"]``. With ``to=``: the Result (``value`` None,
            ``params["output"]`` the published directory, which also holds it as
            ``_gpframe_result.json``).

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 1, 2, 3], "x": [500_100.0, 500_150.0, 500_200.0,
        ...                    530_000.0], "y": [4_500_100.0, 4_500_120.0, 4_500_300.0,
        ...                    4_530_000.0]})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> ddf = dd.from_pandas(df, npartitions=2)
        >>> out = ddf.geopriv(session, user="boat", x="x", y="y",
        ...                   crs="EPSG:32618").privatize(rho=1e-5)
        >>> len(out), out.attrs["geopriv"].n_charged, session.spent().tolist()
        (4, 3, [1e-05, 1e-05, 1e-05])
        """
        if self.cols.partition is not None:  # one metric CRS per public part
            from gpframe.dask.privatize_parts import privatize_split

            return privatize_split(self, rho=rho, eps=eps, per=per, beta=beta, to=to, rng=rng,
                                   on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip
        from gpframe.dask.privatize import privatize

        return privatize(
            self,
            rho=rho,
            eps=eps,
            per=per,
            beta=beta,
            to=to,
            rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
        )

    def range_count(
        self,
        region: Any,
        *,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.05,
        component: Any = None,
        reduce: Literal["first", "last"] | None = None,
        allocations: Any = None,
        progress: bool | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Any:
        """Count the users whose point lies inside ``region``, privately, partition by partition.

        The pandas face's ``range_count`` (``docs/operations/range_count.md``; Liang & Yi,
        'Adaptive Privacy Budgeting' (2026), Alg. 4, Alg. 6) for one region or several; each
        user's point (``component=``) is selected once, on the partition holding all of the
        user's rows; for each region every partition runs the elimination on its users, and the
        count, its error and the rounds histogram are exact integer sums
        (``docs/beyond-one-machine.md``). Noise: ``dist`` the
        signed distance to the boundary, ``pt`` the point, lattice Gaussian (``rho``) or Laplace
        (``eps``) at each round's part of the allocation. Charge: per user, the allocation
        (``pt``, ``dist``) or the parts of the rounds the user ran (``*-elim``), committed
        before the result is returned.

        Parameters
        ----------
        region : shapely Polygon / MultiPolygon, GeoSeries or GeoDataFrame
            A polygon in the data's CRS, or a series of them in any CRS (one row per region,
            a GeoDataFrame's other columns kept as public). Each region is one query: K regions
            charge each user up to K × the allocation, as on the pandas face.
        rho, eps, method, rounds, split, beta, component, reduce
            As for the pandas accessor.
        allocations : Series by user, array, scalar or SessionPlan, optional
            As for the pandas accessor: per-user allocations instead of ``rho``/``eps`` (a user
            missing from a Series is not asked and is reported excluded), or a plan
            (``session.plan(...)``) that gives each region its next allocations and records
            its charges. Not with ``partition=``.
        progress : bool or None
            A tqdm bar over the regions (None: on in a terminal or notebook when there are
            several).
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG.
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        RangeCountResult
            ``value`` the noisy count, ``error`` its bound at 1 − β, the per-user charges
            (several regions: ``value`` is the table of regions, one count and error each).

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, shapely, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 530_000.0],
        ...                    "y": [4_500_100.0, 4_500_300.0, 4_530_000.0]})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(session, user="boat", x="x",
        ...                                                   y="y", crs="EPSG:32618")
        >>> res = bound.range_count(shapely.box(490_000, 4_490_000, 510_000, 4_510_000),
        ...                         rho=1e-4)
        >>> res.n_charged, res.n_excluded, res.value        # far from the edges: all decided
        (3, 0, 2)
        """
        if self.cols.partition is not None:  # one metric CRS per public part
            from gpframe.dask.range_count_parts import range_count_split

            if allocations is not None:
                raise InvalidInputError(
                    f"allocations= is not supported with partition={self.cols.partition!r}; "
                    f"pass rho= or eps=. {_NOTHING}"
                )

            return range_count_split(self, region, rho=rho, eps=eps, method=method,
                                     rounds=rounds, split=split, beta=beta, component=component,
                                     reduce=reduce, rng=rng, on_exhausted=on_exhausted,
                                     dry_run=dry_run, progress=progress)  # fmt: skip
        from gpframe.dask.range_count import range_count

        return range_count(self, region, rho=rho, eps=eps, method=method, rounds=rounds,
                           split=split, beta=beta, component=component, reduce=reduce,
                           rng=rng, on_exhausted=on_exhausted, dry_run=dry_run,
                           allocations=allocations, progress=progress)  # fmt: skip

    def kde(
        self,
        at: Any,
        *,
        bandwidth_m: float,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt-elim", "dist-elim", "dist", "pt"] = "pt-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.05,
        nu_m: float | None = None,
        component: Any = None,
        reduce: Literal["first", "last"] | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Any:
        """Private Gaussian KDE at the query point(s) ``at``, partition by partition.

        The pandas face's ``kde`` (``docs/operations/kde.md``; Liang & Yi, 'Adaptive Privacy
        Budgeting' (2026), Alg. 7): each user's point (``component=``) is selected on the
        partition holding the user's rows; for each query point every partition runs the
        elimination on its users with the query's union-bound n, and the client adds the
        partitions' sums (``docs/beyond-one-machine.md``); the ``pt`` baseline releases each
        user's point once on its worker and the client evaluates every query point from the
        released points. Noise: ``pt*`` the point, ``dist*`` the distance, lattice Gaussian
        (``rho``) or Laplace (``eps``) at each round's part of the allocation (``pt``: the whole
        allocation, once). Charge: per user, the allocation once (``pt``), per query point the
        allocation (``dist``) or the parts of the rounds the user ran (``*-elim``), committed
        before the result is returned.

        Parameters
        ----------
        at : shapely Point, GeoSeries of points, or array (m, 2)
            Public query points, in the data's CRS unless a GeoSeries carries its own.
        bandwidth_m, rho, eps, rounds, split, beta, nu_m, component, reduce
            As for the pandas accessor.
        method : {"pt-elim", "dist-elim", "dist", "pt"}
            As for the pandas accessor.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG.
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        KdeResult
            As the pandas face's: the value (one point) or a table of the points.

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, shapely, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 2, 3], "x": [500_100.0, 500_200.0, 540_000.0],
        ...                    "y": [4_500_100.0, 4_500_300.0, 4_540_000.0]})
        >>> s = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(s, user="boat", x="x", y="y",
        ...                                                   crs="EPSG:32618")
        >>> res = bound.kde(shapely.Point(500_000, 4_500_000), bandwidth_m=2000, rho=1e-4)
        >>> res.n_charged, int(res.points["n_far"].iloc[0])  # the boat 56 km away stops early
        (3, 1)
        >>> res = bound.kde([(500_000, 4_500_000), (540_000, 4_540_000)], bandwidth_m=2000,
        ...                 rho=1e-4, method="pt")          # one release for both points
        >>> len(res.points), res.n_charged
        (2, 3)
        """
        self._refuse_partition()
        from gpframe.dask.kde_points import kde

        return kde(self, at, bandwidth_m=bandwidth_m, rho=rho, eps=eps, method=method,
                   rounds=rounds, split=split, beta=beta, nu_m=nu_m, component=component,
                   reduce=reduce, rng=rng, on_exhausted=on_exhausted,
                   dry_run=dry_run)  # fmt: skip

    def kde_raster(
        self,
        *,
        bandwidth_m: float,
        cell_m: float = 100,
        bounds: tuple[float, float, float, float] | None = None,
        rho: float | None = None,
        eps: float | None = None,
        correct: bool = True,
        component: Any = None,
        reduce: Literal["first", "last"] | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Any:
        """Estimate the density of the users' points on a grid, privately, across partitions.

        The pandas face's ``kde_raster`` (``docs/operations/kde.md``; Liang & Yi, 'Adaptive
        Privacy Budgeting' (2026), Alg. 7): each user's point (``component=``) is released once
        on the worker holding the user's rows, and the client builds the raster from the
        released points (``docs/beyond-one-machine.md``). Noise: one release per user at the
        allocation (CGP lattice Gaussian, σ = (1 + √2·g/r_min)·k/√(2ρ) per coordinate; GP
        planar Laplace). Charge: the allocation's guarantee, once per user however many cells.

        Parameters
        ----------
        bandwidth_m, cell_m, bounds, rho, eps, correct, component, reduce
            As for the pandas accessor.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG.
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        Raster
            ``value`` the density per m² (row 0 north) in the metric CRS.

        Examples
        --------
        >>> import dask.dataframe as dd, numpy as np, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": range(200), "x": 500_000.0 + np.arange(200),
        ...                    "y": 4_500_000.0 + np.arange(200)})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(session, user="boat", x="x",
        ...                                                   y="y", crs="EPSG:32618")
        >>> r = bound.kde_raster(bandwidth_m=1000, cell_m=200, rho=1e-4,
        ...                      bounds=(490_000, 4_490_000, 510_000, 4_510_000))
        >>> r.shape, r.n_charged, float(session.spent().max())
        ((100, 100), 200, 0.0001)
        """
        self._refuse_partition()
        from gpframe.dask.kde import kde_raster

        return kde_raster(self, bandwidth_m=bandwidth_m, cell_m=cell_m, bounds=bounds, rho=rho,
                          eps=eps, correct=correct, component=component, reduce=reduce,
                          rng=rng, on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip

    def knn(
        self,
        point: Any,
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
    ) -> Any:
        """Select each user's k private nearest neighbours of ``point`` among the user's rows.

        The pandas face's k-PNN (``docs/operations/knn.md``; Liang & Yi, 'Concentrated
        Geo-Privacy' (2023), Alg. 2), each partition running it for the users it holds
        (``docs/beyond-one-machine.md``). It releases which rows are nearest, never a
        coordinate. Noise: PNN calls with Laplace draws at ε = √(2ρ/k) per call (CGP) or ε/k
        (GP). Charge: ρ (or ε) once per admitted user (a GP run on a CGP budget costs ε²/2).

        Parameters
        ----------
        point : shapely Point or (x, y)
            The public query point, in the data's CRS.
        k, rho, eps, compat, gamma0, scan_order, max_cycles, beta
            As for the pandas accessor.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG.
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        pandas.DataFrame
            The selected rows: their labels (index), the declared-public columns and
            ``knn_rank``, rows grouped by partition; ``attrs["geopriv"]`` is the KnnResult.

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 1, 1, 2], "x": [500_000.0, 500_050.0, 509_000.0,
        ...                    500_010.0], "y": [4_500_000.0] * 4})
        >>> s = gp.Session(budget=gp.CGP(rho=1e-3))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(s, user="boat", x="x", y="y",
        ...                                                   crs="EPSG:32618")
        >>> out = bound.knn((500_000.0, 4_500_000.0), 2, rho=1e-4)
        >>> sorted(out["knn_rank"].tolist()), list(out.columns), s.spent().tolist()
        ([1, 1, 2], ['boat', 'knn_rank'], [0.0001, 0.0001])
        """
        if self.cols.partition is not None:  # one metric CRS per public part
            from gpframe.dask.knn_parts import knn_split

            return knn_split(self, point, k, rho=rho, eps=eps, compat=compat, gamma0=gamma0,
                             scan_order=scan_order, max_cycles=max_cycles, beta=beta, rng=rng,
                             on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip
        from gpframe.dask.knn import knn

        return knn(self, point, k, rho=rho, eps=eps, compat=compat, gamma0=gamma0,
                   scan_order=scan_order, max_cycles=max_cycles, beta=beta, rng=rng,
                   on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip

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
    ) -> Any:
        """Release one private convex hull of each user's points, partition by partition.

        The pandas face's private hull (``docs/operations/convex_hull.md``; Liang & Yi,
        'Concentrated Geo-Privacy' (2023), Alg. 4), each partition running it for the users it
        holds (``docs/beyond-one-machine.md``). Noise: a noisy centre and radius (ρ/20), k PNN
        calls toward anchors on the circle (α of the rest) and the anchors' release (the
        remainder); lattice Gaussian (``rho``) or Laplace (``eps``). Charge: ρ (or ε) once per
        admitted user (a GP run on a CGP budget costs ε²/2), committed before the result is
        returned.

        Parameters
        ----------
        rho, eps, beta, k, alpha, k_rule, radius_floor_m
            As for the pandas accessor.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG.
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        geopandas.GeoDataFrame
            The pandas face's output: one row per admitted user (index: user id, sorted by
            partition), ``geometry`` (input CRS), ``k``, ``radius_m``, ``error_m``,
            ``fallback``; ``attrs["geopriv"]`` is the :class:`~gpframe.results.HullResult`.

        Examples
        --------
        >>> import dask.dataframe as dd, numpy as np, pandas as pd, gpframe as gp, gpframe.dask
        >>> grid = np.arange(300.0)
        >>> df = pd.DataFrame({"u": np.repeat([1, 2], 300),
        ...                    "x": 500_000 + np.tile(grid * 7 % 2000, 2),
        ...                    "y": 4_500_000 + np.tile(grid * 13 % 2000, 2)})
        >>> s = gp.Session(budget=gp.CGP(rho=1e-2))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(s, user="u", x="x", y="y",
        ...                                                   crs="EPSG:32618")
        >>> hulls = bound.convex_hull(rho=1e-3)
        >>> sorted(hulls.index.tolist()), hulls["k"].tolist(), s.spent().tolist()
        ([1, 2], [16, 16], [0.001, 0.001])
        """
        if self.cols.partition is not None:  # one metric CRS per public part
            from gpframe.dask.knn_parts import hull_split

            return hull_split(self, rho=rho, eps=eps, beta=beta, k=k, alpha=alpha,
                              k_rule=k_rule, radius_floor_m=radius_floor_m, rng=rng,
                              on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip
        from gpframe.dask.hull import convex_hull

        return convex_hull(self, rho=rho, eps=eps, beta=beta, k=k, alpha=alpha, k_rule=k_rule,
                           radius_floor_m=radius_floor_m, rng=rng, on_exhausted=on_exhausted,
                           dry_run=dry_run)  # fmt: skip

    def nearest_users(
        self,
        point: Any,
        k: int,
        *,
        rho: float | None = None,
        eps: float | None = None,
        method: Literal["pt", "dist", "pt-elim", "dist-elim"] = "dist-elim",
        rounds: int = 10,
        split: Literal["doubling", "even"] = "doubling",
        beta: float = 0.1,
        component: Any = None,
        reduce: Literal["first", "last"] | None = None,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
    ) -> Any:
        """Find the k users nearest to ``point``, one point per user, privately.

        The pandas face's ``nearest_users`` (``docs/operations/nearest_users.md``; Liang & Yi,
        'Adaptive Privacy Budgeting' (2026), Alg. 8). Each user's point (``component=``) is
        selected on the partition holding all of the user's rows and stays there; the client
        runs the rounds, each partition releasing its remaining users' values for the round
        and sending back only those released values (``docs/beyond-one-machine.md``). Noise:
        ``dist`` the distance to ``point``, ``pt`` the point, lattice Gaussian (``rho``) or
        Laplace (``eps``) at each round's part of the allocation. Charge: per user, the
        allocation (``pt``, ``dist``) or the parts of the rounds the user ran (``*-elim``),
        committed before the result is returned.

        Parameters
        ----------
        point : shapely Point or (x, y)
            The public query point, in the data's CRS.
        k, rho, eps, method, rounds, split, beta, component, reduce
            As for the pandas accessor.
        rng : BitSource, optional
            None: each worker draws from its own OS CSPRNG (the client only orders ties).
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor: leave out (and list) the users who cannot pay, or
            refuse the query naming them before anything is reserved.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running, as the pandas
            accessor does (``docs/ledger.md``, "Previewing a query"): the first pass runs (no
            noise), no release task is submitted, nothing is drawn, charged or written.

        Returns
        -------
        NearestResult
            ``value`` the k user ids (nearest first), the per-user charges (users dropped
            early pay less: ``saved``) and the error bound.

        Examples
        --------
        >>> import dask.dataframe as dd, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": [1, 2, 3, 4],
        ...                    "x": [500_000.0, 500_010.0, 530_000.0, 560_000.0],
        ...                    "y": [4_500_000.0] * 4})
        >>> session = gp.Session(budget=gp.CGP(rho=1e-2))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(session, user="boat", x="x",
        ...                                                   y="y", crs="EPSG:32618")
        >>> res = bound.nearest_users((500_000.0, 4_500_000.0), 2, rho=1e-3)
        >>> sorted(res.value), res.saved > 0
        ([1, 2], True)
        """
        self._refuse_partition()
        from gpframe.dask.nearest import nearest_users

        return nearest_users(self, point, k, rho=rho, eps=eps, method=method, rounds=rounds,
                             split=split, beta=beta, component=component, reduce=reduce,
                             rng=rng, on_exhausted=on_exhausted, dry_run=dry_run)  # fmt: skip

    def grid_stats(
        self,
        value: str,
        *,
        bounds: tuple[float, float],
        epsilon_per_user: float | None = None,
        epsilon_per_statistic: float | None = None,
        epsilon: float | None = None,
        cells: int | str = 8,
        occupancy: Any = None,
        clamp: bool = False,
        beta: float = 0.05,
        split: tuple[float, float] | None = None,
        public_cells: Any = None,
        max_cells: int | None = None,
        max_per_cell: int | None = None,
        salt: str | None = None,
        order_by: str | None = None,
        clip: Literal["clip-user", "pseudo-user", "none"] = "clip-user",
        kappa: float | None = None,
        error_cap: float | None = None,
        protect_worst_grid: bool = True,
        rollback_incomplete_stage: bool = False,
        rng: BitSource | None = None,
        on_exhausted: Literal["exclude", "raise"] = "exclude",
        dry_run: bool = False,
        shrink: bool = True,
    ) -> Any:
        """Private mean and variance of ``value`` per H3 cell (user-level central DP).

        The pandas face's ``grid_stats`` (``docs/operations/grid_stats.md``) in three of its
        forms (``docs/beyond-one-machine.md``):

        * ``epsilon_per_user=E, occupancy="public"`` ("A per-user total: how gpframe spends
          it"): each partition is reduced to exact per-(user, cell) integer sums, which the
          client adds (no shuffle); the public occupancy is their counts; the plan, the noise
          (drawn on the client) and the charge are the pandas face's. Noise: per released cell,
          discrete Laplace of scale 2H·max w/(Σw·ε_μ,j) (mean) and H²·max w/(Σw·ε_V,j) (second
          moment). Charge: each kept user pays Σ over their kept cells of ε_μ,j + ε_V,j ≤ E.
        * ``epsilon_per_statistic=ε`` (``epsilon=`` is its former name) with
          ``occupancy="public"`` (Clip-User, ``clip=``, ``order_by=``): after the shuffle on
          the user column each partition counts its (user, cell) pairs; the client plans and
          reserves, then each partition returns the exact sums of the rows the plan keeps.
          Noise: per released cell, discrete Laplace with sensitivity W·r*/r (mean) and
          W²·h(r*, r) (variance) at ε each. Charge: 2ε per kept cell per user.
        * ``occupancy="private"`` with ``epsilon_per_user=E`` or ``epsilon_per_statistic=ε``
          (``epsilon=`` is its former name), ``public_cells``, ``max_cells`` and
          ``max_per_cell``: after the shuffle on the user column each partition bounds its
          users' contributions with the pandas face's rule (at most ``max_cells`` cells of the
          public list, ``max_per_cell`` rows per cell, by row position in the dask frame's
          order, ``order_by=`` or the per-user form's spread) and returns exact integer sums;
          the client adds them and releases every public cell. Noise: per public cell, Laplace
          on the count (λ = ε_n/p), the centred sum (scale p·H/ε_1) and sum of squares
          (p·H²/(2ε_2)), p = ``max_per_cell``. Charge: (ε_n + ε_1 + ε_2) per kept cell per
          user, at most E (or 3ε × ``max_cells``).

        Parameters
        ----------
        value : str
            Numeric column to summarise.
        bounds : (L, U)
            Interval that contains every value (public, chosen without looking at the data).
        epsilon_per_user : float, optional
            The total central ε any one user pays for the call.
        epsilon_per_statistic, epsilon : float, optional
            ε per statistic per cell. Exactly one of the three amounts.
        cells : int or str
            H3 resolution, or a column of H3 cells (str or int).
        occupancy : {"public", "private"} or DataFrame
            ``"public"``: the per-(user, cell) counts are public by declaration; the public
            occupancy table itself (columns ``user``, ``cell``, ``count``): the same, checked
            against the partitions' exact counts before anything is reserved (the query fails
            closed when they differ); ``"private"``: they are protected too (contribution
            bounding).
        clamp, beta, split
            As for the pandas accessor.
        public_cells, max_cells, max_per_cell, salt
            ``occupancy="private"``: as for the pandas accessor (``public_cells`` an H3 list or
            an area in the data's CRS).
        order_by : str, optional
            The per-statistic and private forms: the column ordering a user's rows (then row
            position, the dask frame's row order).
        clip, kappa, error_cap, protect_worst_grid, rollback_incomplete_stage
            The per-statistic form with public occupancy: as for the pandas accessor
            (``kappa=None``: Clip-User's default).
        rng : BitSource, optional
            None: the client's OS CSPRNG (the noise is drawn on the client).
        on_exhausted : {"exclude", "raise"}
            As for the pandas accessor.
        dry_run : bool
            Return a :class:`~gpframe.results.Preview` instead of running (the sums are
            computed, nothing is drawn, charged or written).
        shrink : bool
            As for the pandas accessor: pull noisy means toward the released means' average
            (post-processing, no charge); ``False`` releases the plain noisy means.

        Returns
        -------
        geopandas.GeoDataFrame
            The pandas face's output: one row per cell, ``attrs["geopriv"]`` the
            :class:`~gpframe.results.GridStatsResult`.

        Examples
        --------
        >>> import dask.dataframe as dd, numpy as np, pandas as pd, gpframe as gp, gpframe.dask
        >>> df = pd.DataFrame({"boat": np.repeat(np.arange(40), 3), "lon": -74.0,
        ...                    "lat": 40.7, "speed": np.tile([2.0, 4.0, 6.0], 40)})
        >>> s = gp.Session(central=gp.DP(epsilon=10.0))
        >>> bound = dd.from_pandas(df, npartitions=2).geopriv(
        ...     s, user="boat", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618")
        >>> out = bound.grid_stats("speed", bounds=(0, 10), epsilon_per_user=1.0, cells=7,
        ...                        occupancy="public")
        >>> out[["users", "n_samples"]].values.tolist(), float(s.spent().max()) <= 1.0
        ([[40, 120]], True)
        >>> import h3
        >>> cell = h3.latlng_to_cell(40.7, -74.0, 7)
        >>> out = bound.grid_stats("speed", bounds=(0, 10), epsilon_per_user=1.0, cells=7,
        ...                        occupancy="private", public_cells=[cell], max_cells=1,
        ...                        max_per_cell=2)
        >>> list(out.index) == [cell], float(s.spent().max()) <= 2.0
        (True, True)
        >>> out = bound.grid_stats("speed", bounds=(0, 10), epsilon_per_statistic=0.5, cells=7,
        ...                        occupancy="public")
        >>> out[["users", "n_samples"]].values.tolist()
        [[40, 120]]
        """
        self._refuse_partition()
        from gpframe.dask.grid_stats import grid_stats

        return grid_stats(
            self,
            value=value,
            bounds=bounds,
            epsilon_per_user=epsilon_per_user,
            cells=cells,
            occupancy=occupancy,
            clamp=clamp,
            beta=beta,
            split=split,
            rng=rng,
            on_exhausted=on_exhausted,
            dry_run=dry_run,
            shrink=shrink,
            epsilon=epsilon,
            epsilon_per_statistic=epsilon_per_statistic,
            public_cells=public_cells,
            max_cells=max_cells,
            max_per_cell=max_per_cell,
            salt=salt,
            order_by=order_by,
            clip=clip,
            plan_options=_plan_options(
                kappa, error_cap, protect_worst_grid, rollback_incomplete_stage
            ),
        )


def _plan_options(kappa: Any, error_cap: Any, protect: bool, rollback: bool) -> dict[str, Any]:
    """Clip-User's options as the pandas face passes them (``kappa=None``: its default)."""
    from gpframe.queries.clip_user import KAPPA

    return {"kappa": KAPPA if kappa is None else kappa, "error_cap": error_cap,
            "protect_worst_grid": protect, "rollback_incomplete_stage": rollback}  # fmt: skip


def register() -> None:
    """Register ``geopriv`` on dask DataFrames once (dask-geopandas frames inherit it)."""
    import dask.dataframe as dd
    from dask.dataframe.extensions import register_dataframe_accessor

    if "geopriv" not in dd.DataFrame.__dict__:
        register_dataframe_accessor("geopriv")(DaskGeoPrivAccessor)
