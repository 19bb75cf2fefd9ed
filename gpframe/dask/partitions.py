"""Partitions that hold whole users, and the first pass over them that releases nothing.

See ``docs/beyond-one-machine.md``. An operation that reads all of a user's rows together
(``knn``, ``convex_hull``, the per-user forms of ``grid_stats``) needs every row of a user in one
partition: the frame is shuffled on the user column unless it is already indexed by it with
known divisions (then each user id lies in exactly one partition). ``privatize`` sums each
user's counts over the partitions instead (on the workers, :func:`summed_tree`), and the
one-point-per-user operations shuffle only candidate rows (:mod:`gpframe.dask.one_point`).
The first pass runs the pandas face's own validation (:func:`gpframe.geo.locate_points`,
the projection, the coordinate-copy check) on every partition and returns only what the
client needs to reserve: each partition's users (sorted) and their point counts, and the
public metric CRS. No noise is drawn and nothing is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeInternalError, InvalidInputError

__all__ = [
    "Columns",
    "Component",
    "PartCheck",
    "by_user",
    "check_partition",
    "checked",
    "digest",
    "first",
    "from_xy",
    "from_xy_all",
    "graph_allowance",
    "locate",
    "metric_kind",
    "prepare",
    "share",
    "shipped_privatized",
    "spawn_rng",
    "summed_tree",
    "to_xy",
    "tree",
]

_NOTHING = "Nothing was charged."

#: privatize and the one-point-per-user operations shuffle every row on the user column first
#: (the former way): for tests and benchmarks that compare both ways only
#: (:func:`gpframe.dask.one_point.one_point_pass`, :mod:`gpframe.dask.privatize`)
FULL_SHUFFLE = False


@dataclass(frozen=True)
class Columns:
    """The column roles and public parameters every task gets (never the session)."""

    user: str
    x: Any = None
    y: Any = None
    lon: Any = None
    lat: Any = None
    crs: Any = None
    to_crs: Any = None
    domain: Any = None
    public: tuple[Any, ...] = ()
    #: the frame is indexed by the user column (known divisions): no shuffle, no user column
    index_is_user: bool = False
    #: a GeoDataFrame's active geometry column and CRS (a shuffle may hand back plain frames)
    geometry: Any = None
    geometry_crs: Any = None
    #: ``partition=``: the public column to split by, and each part's public box (or None)
    partition: Any = None
    part_domains: Any = None


@dataclass(frozen=True)
class PartCheck:
    """What the first pass learns of one partition: nothing but public or ledger-side facts."""

    users: np.ndarray  # the partition's distinct user ids, sorted
    counts: np.ndarray  # int64 points per user, aligned with ``users``
    crs_m: str | None = None  # the metric CRS (WKT), chosen from public information only
    choice: str | None = None
    scale_max: float = 1.0
    noise_inflation: float = 1.0
    crs_in: str | None = None  # the input CRS (WKT), for public query objects (a region)
    #: (partition, row, user) of users with several selected rows (``reduce=None``), to refuse
    several: tuple[Any, ...] = ()
    #: :func:`digest` of ``users`` and ``counts``, computed on the worker (:func:`without_users`)
    fingerprint: str = ""


def by_user(ddf: Any, cols: Columns) -> tuple[Any, bool]:
    """Return ``ddf`` with every user's rows in one partition, and whether it was shuffled.

    Skipped when the index is the user column with known divisions. Otherwise a hash shuffle
    on the user column: every row crosses the network once (on a cluster, the whole frame
    is moved between workers; see ``docs/beyond-one-machine.md``).
    """
    if cols.index_is_user:
        return ddf, False
    if cols.geometry is not None:
        # the shuffle moves Arrow tables, which cannot carry a geometry column: the points
        # travel as WKB (exact: the same doubles) and each partition decodes them (_frame)
        meta = _to_wkb(ddf._meta, cols.geometry)
        ddf = ddf.map_partitions(_to_wkb, cols.geometry, meta=meta)
    return ddf.shuffle(on=cols.user), True


def _to_wkb(part: pd.DataFrame, geometry: Any) -> pd.DataFrame:
    """Return a plain frame whose geometry column holds WKB bytes."""
    import shapely

    out = pd.DataFrame(part)
    out[geometry] = shapely.to_wkb(np.asarray(part[geometry].array, dtype=object))
    return out


def to_xy(frame: Any) -> tuple[pd.DataFrame, Any, Any, Any, Any]:
    """Return a frame of points as (frame without geometry, name, CRS, x, y), to ship it fast.

    Pickling shapely objects is slow; two float arrays are not (NaN: an empty geometry).
    """
    import shapely

    name = getattr(frame, "_geometry_column_name", None)
    if name is None or name not in frame.columns:
        return pd.DataFrame(frame), None, None, None, None
    geom = np.asarray(frame[name].array, dtype=object)
    plain = pd.DataFrame(frame).drop(columns=[name])
    cols = list(frame.columns)
    return plain, (name, cols), frame.crs, shapely.get_x(geom), shapely.get_y(geom)


def shipped_privatized(
    frame: pd.DataFrame, p: Any, xy_m: np.ndarray, released: np.ndarray, public: Any,
    *, xy_in: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[pd.DataFrame, Any, Any, Any, Any]:  # fmt: skip
    """Return :func:`to_xy` of :func:`gpframe.release.privatized_frame`, never making points.

    The same output (built by the one builder, :func:`gpframe.release.release_frame`, from the
    same released coordinates, index and public columns), with the noisy points as two float
    arrays in the input CRS (NaN where unreleased): the worker never creates the shapely points
    that the client would only take apart again (:func:`from_xy` creates them once). An input
    bound by x=/y= gets its noisy x/y columns back: they are those two arrays, sent once.
    """
    import geopandas as gpd

    from gpframe.release import protected_columns, release_frame

    every = released.size > 0 and bool(released.all())
    if xy_in is not None:
        xs, ys = xy_in
    elif every:
        xs, ys = p.to_input_crs(xy_m)
    else:
        xs, ys = np.full(len(p), np.nan), np.full(len(p), np.nan)
        if released.any():
            xs[released], ys[released] = p.to_input_crs(xy_m[released])
    gname = getattr(frame, "_geometry_column_name", None)
    is_geo = isinstance(frame, gpd.GeoDataFrame) and gname in frame.columns
    cols = {p.coords[0]: xs, p.coords[1]: ys} if len(p.coords) == 2 else {}
    plain = release_frame(
        frame, public=(() if public is None else tuple(public)),
        protected=protected_columns(frame, p.coords),
        released=cols, geometry=None, what="privatize", owned=xy_in is None,
    )  # fmt: skip
    name = gname if is_geo else "geometry"
    named = (name, [*plain.columns, name])
    if cols:  # the noisy x/y columns are xs/ys: sent once, put back by from_xy_all
        named = (*named, tuple(cols))
        plain = plain.drop(columns=list(cols))
    return plain, named, p.crs_in, xs, ys


def from_xy(shipped: tuple[pd.DataFrame, Any, Any, Any, Any]) -> Any:
    """Undo :func:`to_xy` (on the client): the same GeoDataFrame, column order and CRS."""
    return from_xy_all([shipped])


def from_xy_all(shipped: list[tuple[pd.DataFrame, Any, Any, Any, Any]]) -> Any:
    """Undo :func:`to_xy` of several partitions' outputs: one frame, in their order.

    The plain frames and the coordinates are concatenated first and the points created once,
    with Python's collector paused, on the client's cores (:func:`gpframe.geo.points_array`),
    not per partition.
    """
    import geopandas as gpd

    from gpframe.geo import points_array

    plains = [s[0] for s in shipped]
    plain = pd.concat(plains) if len(plains) > 1 else plains[0]
    _, named, crs, _, _ = shipped[0]
    if named is None:
        return plain
    name, cols = named[:2]
    xs = np.concatenate([s[3] for s in shipped]) if len(shipped) > 1 else shipped[0][3]
    ys = np.concatenate([s[4] for s in shipped]) if len(shipped) > 1 else shipped[0][4]
    # on the client, whose cores are free once the tasks are done (the pandas face's threads)
    geom = points_array(xs, ys, crs, threads=None)
    missing = np.isnan(xs)
    if missing.any():
        geom[missing] = None
    out = plain.copy(deep=False)
    if len(named) == 3:  # the x/y columns (the noisy coordinates) were sent as xs/ys only
        out[named[2][0]], out[named[2][1]] = xs, ys
    out[name] = geom
    return gpd.GeoDataFrame(out[cols], geometry=name, crs=crs)


def _frame(part: pd.DataFrame, cols: Columns) -> pd.DataFrame:
    """Return the partition as the pandas face reads it (the user index back as a column)."""
    out = part
    if cols.geometry is not None and getattr(part, "_geometry_column_name", None) is None:
        import geopandas as gpd

        geom = part[cols.geometry]
        if len(geom) and not isinstance(geom.dtype, gpd.array.GeometryDtype):
            geom = gpd.GeoSeries.from_wkb(geom.to_numpy(), index=part.index)
        out = gpd.GeoDataFrame(part.drop(columns=[cols.geometry]),
                               geometry=gpd.GeoSeries(geom, index=part.index).values,
                               crs=cols.geometry_crs)  # fmt: skip
        out = out.rename_geometry(cols.geometry) if cols.geometry != "geometry" else out
        out = out[list(part.columns)]
    if cols.index_is_user:
        out = out.copy(deep=False)
        out.index = out.index.rename(None)
        out[cols.user] = part.index.to_numpy()
    return out


def locate(part: pd.DataFrame, cols: Columns) -> tuple[pd.DataFrame, Any, Any]:
    """Validate and project one partition exactly as the pandas face does.

    Returns the frame, the :class:`~gpframe.geo.Located` points and their
    :class:`~gpframe.geo.Projected` metres.
    """
    from gpframe.geo import locate_points
    from gpframe.release import refuse_coordinate_copies

    frame = _frame(part, cols)
    located = locate_points(
        frame, user=cols.user, x=cols.x, y=cols.y, lon=cols.lon, lat=cols.lat, crs=cols.crs,
        to_crs=cols.to_crs, domain=cols.domain,
    )  # fmt: skip
    refuse_coordinate_copies(frame, cols.public[1:], located)
    p = located.project()
    refuse_coordinate_copies(frame, cols.public[1:], p)
    return frame, located, p


@dataclass(frozen=True)
class Component:
    """Which row is each user's one point (``range_count``'s ``component=`` and ``reduce=``)."""

    component: Any = None
    reduce: Any = None
    operation: str = "range_count"

    def rows(self, frame: pd.DataFrame, p: Any, cols: Columns) -> np.ndarray:
        """Positions of the selected rows, one per user (the pandas face's rule)."""
        from gpframe.queries.range_count import select_component
        from gpframe.release import protected_columns

        skip = (cols.user, *protected_columns(frame, p.coords))
        return select_component(frame, np.asarray(p.users), self.component, self.reduce,
                                operation=self.operation, skip=skip)  # fmt: skip


def check_partition(
    part: pd.DataFrame, cols: Columns, select: Component | None = None
) -> PartCheck:
    """First pass over one partition: validate it, count its users' points; draw nothing.

    With ``select`` (one point per user), the users are those with a selected row, each
    counted once. Remembered while the partition lives on this worker
    (:mod:`gpframe.dask.memo`).
    """
    from gpframe.dask.memo import first_pass

    return first_pass(part, ("check_partition", cols, select),
                      lambda: _first_pass(part, cols, select)[0])  # fmt: skip


def prepare(part: pd.DataFrame, cols: Columns, select: Component) -> tuple[PartCheck, Any]:
    """Run the first pass of a one-point-per-user operation: (the check, the selected points).

    The points (sorted by user, 16 bytes a user) stay on the worker (persisted) for the
    release pass, which then neither validates nor selects again. Remembered while the
    partition lives on this worker (:mod:`gpframe.dask.memo`).
    """
    from gpframe.dask.memo import first_pass

    return first_pass(part, ("prepare", cols, select), lambda: _first_pass(part, cols, select))


def _first_pass(
    part: pd.DataFrame, cols: Columns, select: Component | None
) -> tuple[PartCheck, Any]:
    if len(part) == 0:
        empty = PartCheck(users=np.array([], dtype=object), counts=np.zeros(0, np.int64))
        return empty, np.zeros((0, 2))
    _, p, pos, check = checked(part, cols, select)
    users_of = np.asarray(p.users)
    xy = None
    if pos is not None:
        users_of = users_of[pos]
        codes, uniq = pd.factorize(pd.Series(users_of), sort=True)
        xy = np.empty((len(uniq), 2))
        xy[codes] = p.xy[pos]  # one row per user, in the sorted users' order
    users, counts = user_counts(users_of)
    return replace(check, users=users, counts=counts), xy


def checked(
    part: pd.DataFrame, cols: Columns, select: Component | None
) -> tuple[pd.DataFrame, Any, np.ndarray | None, PartCheck]:
    """Validate, project and select on one non-empty partition; draw nothing.

    Returns the frame, its projected points, the selected rows' positions (``None`` without
    ``select``) and a check carrying the public metric CRS (its users still to be filled).
    """
    import warnings

    from gpframe.geo import _CHOICE_DATA
    from gpframe.queries.privatize_plan import check_coordinates

    with warnings.catch_warnings():
        # the client states the extent refusal itself; a warning here would stay on a worker
        warnings.simplefilter("ignore")
        frame, _, p = locate(part, cols)
        pos = select.rows(frame, p, cols) if select is not None else None
    if p.crs_choice == _CHOICE_DATA:
        raise InvalidInputError(
            "the Dask face needs a metric CRS chosen from public information: each partition "
            "would otherwise choose its own from its points' extent. Pass to_crs= (a projected "
            "CRS in metres), domain=(lon_min, lat_min, lon_max, lat_max), or coordinates "
            f"already in a projected metre CRS. {_NOTHING}"
        )
    check_coordinates(p.xy)
    return frame, p, pos, PartCheck(
        users=np.array([], dtype=object), counts=np.zeros(0, np.int64), crs_m=p.crs_m.to_wkt(),
        choice=p.crs_choice, scale_max=float(p.scale_max),
        noise_inflation=float(p.noise_inflation), crs_in=p.crs_in.to_wkt(),
    )  # fmt: skip


def metric_kind(session: Any, rho: Any, eps: Any, example: str) -> tuple[str, Any]:
    """Return the session's metric notion and the exact amount (``rho=`` / ``eps=``), checked."""
    from gpframe.accounting.amounts import metric_amount
    from gpframe.ledger.charges import filter_kind

    kind = filter_kind(session, example.lstrip(".").split("(")[0])
    return metric_amount(rho, eps, example=example, filter_kind=kind, same_kind=True)


def first(prepared: tuple[Any, Any]) -> Any:
    """Return the check of a prepared partition (what the client fetches of the first pass)."""
    return prepared[0]


def user_counts(users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct users (sorted) and their row counts; the same order on every pass."""
    codes, uniques = pd.factorize(pd.Series(users), sort=True)
    counts = np.bincount(codes, minlength=len(uniques)).astype(np.int64)
    return np.asarray(uniques, dtype=object), counts


def digest(users: np.ndarray, counts: np.ndarray) -> str:
    """Fingerprint of a partition's users and counts (both passes must see the same).

    Integer ids are hashed as int64 bytes (a partition of 10^6 rows may hold 10^6 users);
    other ids by their type and text.
    """
    h = hashlib.sha256()
    ints = _as_int64(np.asarray(users))
    if ints is not None:
        h.update(b"int64:" + ints.tobytes())
    else:
        h.update(repr([(type(u).__name__, str(u)) for u in users.tolist()]).encode())
    h.update(np.asarray(counts, dtype=np.int64).tobytes())
    return h.hexdigest()


def _as_int64(users: np.ndarray) -> np.ndarray | None:
    """Return the ids as int64 when they are all integers that fit, else None."""
    if users.dtype.kind not in "iuO" or (
        users.dtype.kind == "O" and pd.api.types.infer_dtype(users, skipna=False) != "integer"
    ):
        return None
    if users.dtype.kind == "u" and users.size and int(users.max()) > np.iinfo(np.int64).max:
        return None  # astype would wrap these to negative ids, silently (no OverflowError)
    try:
        return users.astype(np.int64)
    except OverflowError:  # a Python int beyond int64
        return None


def check_same_users(i: int, users: np.ndarray, counts: np.ndarray, want: str) -> None:
    """Refuse a partition whose users or row counts differ from its first pass (``want``)."""
    if digest(users, counts) != want:
        raise GpframeInternalError(f"partition {i} holds other users than the first pass counted.")


def located_users(
    part: pd.DataFrame, cols: Columns, i: int, want: str
) -> tuple[pd.DataFrame, Any, np.ndarray, np.ndarray]:
    """Locate a partition on a worker, check it against its first pass, and code its users.

    Returns the frame, the located points, the distinct users (sorted: the order of the first
    pass and of the reservation) and each row's user code (int64), factorized once.
    """
    frame, _, p = locate(part, cols)
    codes, uniques = pd.factorize(pd.Series(p.users), sort=True)
    counts = np.bincount(codes, minlength=len(uniques)).astype(np.int64)
    users = np.asarray(uniques, dtype=object)
    check_same_users(i, users, counts, want)
    return frame, p, users, codes.astype(np.int64)


def combine(checks: list[PartCheck]) -> tuple[np.ndarray, np.ndarray, np.ndarray, PartCheck]:
    """Concatenate the partitions' users; refuse a user in two partitions or two metric CRSs.

    Returns the users, their counts, each partition's offset into them, and the check that
    carries the (common) metric CRS.
    """
    live = [c for c in checks if len(c.users)]
    if not live:
        raise InvalidInputError(
            f"the frame is empty (0 rows): there is nothing to analyse. {_NOTHING}"
        )
    crs = {(c.crs_m, c.scale_max) for c in live}
    if len(crs) != 1:  # public information only, so the same everywhere: a bug if not
        raise GpframeInternalError(f"the partitions chose different metric CRSs: {crs!r}.")
    users = np.concatenate([c.users for c in checks])
    # integer ids as one int64 array (the same ledger keys): to the ledger without a Python
    # int per user (ledger_key_array), their duplicates found without hashing objects
    ints = _as_int64(users)
    users = users if ints is None else ints
    counts = np.concatenate([c.counts for c in checks]).astype(np.int64)
    if pd.Series(users).duplicated().any():
        raise GpframeInternalError(
            "a user's rows are in several partitions after the shuffle on the user column."
        )
    offsets = np.cumsum([0] + [len(c.users) for c in checks])
    return users, counts, offsets, live[0]


def common_check(checks: list[PartCheck], n_users: int) -> PartCheck:
    """Refuse an empty frame or two metric CRSs; return a check carrying the common CRS.

    ``checks`` may lack their users (:func:`without_users`): a partition with rows is
    one whose first pass chose a metric CRS.
    """
    live = [c for c in checks if c.crs_m is not None]
    if not live or not n_users:
        raise InvalidInputError(
            f"the frame is empty (0 rows): there is nothing to analyse. {_NOTHING}"
        )
    crs = {(c.crs_m, c.scale_max) for c in live}
    if len(crs) != 1:  # public information only, so the same everywhere: a bug if not
        raise GpframeInternalError(f"the partitions chose different metric CRSs: {crs!r}.")
    return live[0]


def without_users(check: PartCheck) -> PartCheck:
    """Return the check without its users, with their digest in ``fingerprint``.

    What the client fetches of a partition when the users are summed on the workers
    (:func:`summed_tree`): its public metric CRS and the digest the release pass checks.
    """
    return replace(check, users=np.array([], dtype=object), counts=np.zeros(0, np.int64),
                   fingerprint=check.fingerprint or digest(check.users, check.counts))  # fmt: skip


def add_counts(*checks: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sum the (users, counts) of several partitions or partial sums: distinct users sorted.

    The same users and order whatever the grouping: a sorted factorization of the union,
    exact integer counts.
    """
    pairs = [(c.users, c.counts) if isinstance(c, PartCheck) else c for c in checks]
    users = np.concatenate([u for u, _ in pairs])
    ints = _as_int64(users)  # integer ids: the same sorted users, factorized as int64 (faster)
    codes, uniq = pd.factorize(pd.Series(users if ints is None else ints), sort=True)
    per = np.concatenate([np.asarray(n, np.int64) for _, n in pairs])
    counts = np.zeros(len(uniq), np.int64)
    np.add.at(counts, codes, per)  # exact integers (a float bincount would round past 2**53)
    return np.asarray(uniq, dtype=object), counts


def summed_tree(checks: list[Any]) -> Any:
    """Return a delayed (users, counts) summed over the partitions' first passes, on the workers.

    The client receives the distinct users once (not once per partition they have rows in).
    """
    return tree(add_counts, checks)


def tree(func: Any, leaves: list[Any], *args: Any, fan_in: int = 8) -> Any:
    """Reduce delayed ``leaves`` on the workers to one delayed result, in a tree.

    A node is ``func(*args, *inputs)`` of up to ``fan_in`` inputs (``func`` also takes its own
    outputs). No worker holds more than ``fan_in`` inputs of a node at a time, and a leaf's
    memory is released as soon as its node ran.
    """
    import dask

    level = list(leaves)
    while True:
        level = [dask.delayed(func)(*args, *level[k : k + fan_in])
                 for k in range(0, len(level), fan_in)]  # fmt: skip
        if len(level) == 1:
            return level[0]


def share(value: Any) -> tuple[Any, int]:
    """Put ``value`` in the graph once, as one key every task depends on (not in each task).

    Returns the delayed value and its pickled size. It is sent once to the scheduler and
    unpickled once per worker (the tasks there share the object); unlike data scattered to the
    workers, Dask recomputes it from the graph if every worker holding it is lost. Compute it
    within :func:`graph_allowance` of that size: distributed warns of a large graph otherwise.
    """
    import pickle
    import uuid

    import dask

    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    key = f"gpframe-shared-{uuid.uuid4().hex}"
    return dask.delayed(pickle.loads, pure=False)(blob, dask_key_name=key), len(blob)


@contextmanager
def graph_allowance(nbytes: int) -> Iterator[None]:
    """Raise distributed's large-graph warning threshold by ``nbytes`` sent once on purpose.

    The warning is for data repeated in a graph; :func:`share` sends its value once.
    """
    import dask
    from dask.utils import parse_bytes

    key = "distributed.admin.large-graph-warning-threshold"
    now = dask.config.get(key, None)
    if now is None:
        yield
        return
    with dask.config.set({key: parse_bytes(now) + nbytes}):
        yield


def spawn_rng(rng: Any, i: int) -> Any:
    """Return what partition ``i`` draws from on its worker (``docs/noise.md``).

    ``None`` stays ``None``: each worker draws from its own OS CSPRNG. A secure source is
    re-created on the worker (its class, never its state). A test source (enabled in the
    worker's process by ``gpframe.testing.enable_seeded()``) gives each partition its own
    child stream, so two partitions never reuse the same bits.
    """
    from gpframe.mechanisms.noise import bits

    if rng is None:
        return None
    if type(rng) in bits._SECURE:
        return _Fresh(type(rng))
    return rng.spawn(i)


@dataclass(frozen=True)
class _Fresh:
    """A secure source class, instantiated where the noise is drawn."""

    cls: type

    def make(self) -> Any:
        return self.cls()


def worker_rng(spawned: Any) -> Any:
    """Turn what :func:`spawn_rng` shipped into the source to draw from on this worker."""
    return spawned.make() if isinstance(spawned, _Fresh) else spawned


def persisted_futures(ddf: Any) -> list[Any] | None:
    """Return the distributed futures of a persisted frame's partitions, in order, or None.

    A frame persisted on a cluster (``ddf.persist()``, what the benchmarks and most sessions
    query) is a graph of futures behind aliases. Tasks submitted on those futures directly
    (``client.map``) skip the collection's graph: no alias task per partition, no dask graph to
    build and send per call. Anything else (a lazy frame, the local schedulers) gives None.
    """
    try:
        from distributed import Future
    except ImportError:  # no distributed: the local schedulers
        return None
    try:
        graph = ddf.__dask_graph__()
        keys = ddf.__dask_keys__()
    except Exception:  # not a collection we can read: the general path
        return None
    out = []
    for key in keys:
        node = graph.get(key)
        for _ in range(8):  # a chain of aliases ends at the future
            if isinstance(node, Future):
                break
            target = getattr(node, "target", None)
            if target is None or target not in graph:
                return None
            node = graph[target]
        if not isinstance(node, Future):
            return None
        out.append(node)
    if not out or len({id(f.client) for f in out}) != 1:
        return None
    return out
