"""The release boundary: the one builder of every frame an operation returns (SECURITY.md).

An output frame is never a copy of the input with some columns overwritten: copying lets through
whatever the caller's frame happened to hold (the exact ``lon``/``lat`` beside a noisy geometry,
a ``step_m`` or ``speed_mps`` computed from the true points). :func:`release_frame` starts from an
empty frame and adds only

(a) what the mechanism released (noisy geometry or x/y, selected row labels, ranks, ...),
(b) the columns the caller declared public (``df.geopriv(..., public=[...])``; by default only
    the user column), read from the input rows the output stands for, and
(c) public parameters, which the operations put in ``attrs`` (the Result), not in columns.

The index of the output is the input's index (or the labels of the selected rows): it identifies
rows and is public. Every other input column is dropped, and one :class:`gpframe.GpframeWarning`
per call names the dropped columns (names only, never values). The columns that hold the
protected coordinates (``x``/``y``, ``lon``/``lat``, the active geometry) can never be declared
public; they are dropped without a warning, as there is nothing the caller could do to keep them.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeWarning, InvalidInputError

__all__ = [
    "check_public",
    "check_reserved",
    "privatized_frame",
    "refuse_coordinate_copies",
    "release_frame",
    "warn_dropped",
    "zones_builder",
]

_NOTHING = "Nothing was charged."


def protected_columns(frame: pd.DataFrame, coords: Any = ()) -> tuple[Any, ...]:
    """Return the columns holding the protected coordinates: ``coords``, the active geometry."""
    out = [c for c in coords if c is not None]
    name = getattr(frame, "_geometry_column_name", None)
    if name is not None and name in frame.columns and name not in out:
        out.append(name)  # a GeoDataFrame's points, even when x=/y= named other columns
    return tuple(out)


def check_public(
    columns: Sequence[Hashable], public: Any, *, user: Hashable, protected: Iterable[Hashable]
) -> tuple[Hashable, ...]:
    """Validate ``public=`` and return the declared-public columns (user column first).

    Parameters
    ----------
    columns : sequence of column names
        The input's columns (``frame.columns``, or a DuckDB relation's ``columns``).
    public : None, a column name, or a list of column names
        Columns that do not depend on the locations. None: only ``user``.
    user : column name
        The user column, always public (the privacy unit is known to be in the data).
    protected : column names
        The columns holding the protected coordinates; declaring one public is an error.

    Examples
    --------
    >>> df = pd.DataFrame({"u": [1], "t": [0], "x": [0.0], "y": [0.0]})
    >>> check_public(df.columns, ["t"], user="u", protected=("x", "y"))
    ('u', 't')
    >>> check_public(df.columns, None, user="u", protected=("x", "y"))
    ('u',)
    """
    if public is None:
        names: list[Any] = []
    elif isinstance(public, (str, bytes)) or not isinstance(public, Iterable):
        names = [public]  # one column name (a str is iterable, but it names one column)
    else:
        names = list(public)
    cols = list(columns)
    for name in names:
        try:
            known = name in columns
        except TypeError:  # an unhashable entry (a list inside the list)
            known = False
        if not known:
            shown = ", ".join(map(repr, cols[:12])) + (", ..." if len(cols) > 12 else "")
            raise InvalidInputError(
                f"public={public!r}: column {name!r} is not in the frame (columns: {shown}). "
                f"Pass the names of columns that do not depend on the locations. {_NOTHING}"
            )
    coords = [c for c in protected if c is not None]
    bad = [n for n in names if n in coords]
    if bad:
        raise InvalidInputError(
            f"public={public!r}: {', '.join(map(repr, bad))} cannot be public: they are the "
            "protected coordinates (the operation releases them only with noise, or not at "
            f"all). Remove them from public=. {_NOTHING}"
        )
    out: list[Hashable] = [user]
    for n in names:
        if n not in out:
            out.append(n)
    return tuple(out)


def check_reserved(public: Sequence[Hashable], reserved: Iterable[Hashable], what: str) -> None:
    """Refuse a declared-public column whose name the output uses for a released value.

    Called before anything is charged, so the clash cannot cost the caller anything.
    """
    clash = [n for n in reserved if n in public]
    if clash:
        raise InvalidInputError(
            f"{what}: the output adds the column(s) {', '.join(map(repr, clash))}, which the "
            f"frame also has and declares public; rename them in the frame first. {_NOTHING}"
        )


def warn_dropped(dropped: Sequence[Hashable], what: str, *, stacklevel: int = 3) -> None:
    """Warn once, naming the dropped columns, when there are any (names only, never values)."""
    if not dropped:
        return
    warnings.warn(
        f"dropped columns {list(dropped)!r}: {what} returns only released values, the index "
        "and the columns declared public. Pass public=[...] to keep columns that do not depend "
        "on the locations (e.g. df.geopriv(session, user=..., public=['time'])); a column "
        "computed from the coordinates must stay out of the output.",
        GpframeWarning,
        stacklevel=stacklevel + 1,
    )


def release_frame(
    source: pd.DataFrame,
    *,
    public: Sequence[Hashable],
    protected: Iterable[Hashable] = (),
    rows: np.ndarray | None = None,
    released: Mapping[Hashable, Any] | None = None,
    geometry: Any = None,
    geometry_name: str = "geometry",
    crs: Any = None,
    what: str,
    stacklevel: int = 3,
    owned: bool = False,
) -> pd.DataFrame:
    """Build an operation's output frame from nothing (the one builder; module docstring).

    Parameters
    ----------
    source : DataFrame
        The input frame. Only its index and its ``public`` columns are read.
    public : sequence of column names
        Declared-public columns (from :func:`check_public`), kept in this order.
    protected : column names
        The coordinate columns: dropped without a warning.
    rows : int array, optional
        Positions of the output rows in ``source`` (None: every row, in order).
    released : mapping, optional
        Released columns (name -> values aligned with the output rows), added after the public
        ones. A released name equal to a coordinate column replaces it (noisy x/y).
    geometry : array-like of shapely geometries, optional
        Released geometry; the output is then a GeoDataFrame in ``crs``.
    geometry_name : str
        Name of the geometry column.
    crs : CRS-like, optional
        CRS of ``geometry``.
    owned : bool
        True when the ``released`` arrays and ``geometry`` were made for this output and are
        held nowhere else: the frame then takes them without copying them (pandas copies
        arrays by default), which saves a copy of every released column at the peak.
    what : str
        The operation's name, for the warning.
    stacklevel : int
        Frames between the caller of the operation and this function's caller.

    Returns
    -------
    DataFrame or GeoDataFrame
        Index: ``source``'s index at ``rows``; columns: public, then released, then geometry.

    Examples
    --------
    >>> df = pd.DataFrame({"u": [1, 2], "x": [0.0, 1.0], "y": [5.0, 6.0], "t": [3, 4]})
    >>> out = release_frame(df, public=("u", "t"), protected=("x", "y"), rows=np.array([1]),
    ...                     released={"rank": [1]}, what="demo")
    >>> out
       u  t  rank
    1  2  4     1
    """
    released = dict(released or {})
    pos = None if rows is None else np.asarray(rows, dtype=np.int64)
    # every row in order: the (immutable) index as it is and one copy of each public column
    index = source.index if pos is None else source.index[pos]
    data: dict[Hashable, Any] = {}
    for name in public:
        # .array keeps the column's dtype (categoricals, tz-aware times, nullable ints)
        col = source[name] if pos is None else source[name].iloc[pos]
        data[name] = col.array.copy()
    for name, values in released.items():
        data[name] = values
    # from nothing: a fresh frame of only the columns above, never a copy of ``source``
    # the public columns are fresh copies; the released ones are fresh when ``owned``
    out = pd.DataFrame({k: _values(v) for k, v in data.items()}, index=index,
                       copy=False if owned else None)  # fmt: skip
    if geometry is not None:
        import geopandas as gpd

        if isinstance(geometry, gpd.GeoSeries):
            geometry = geometry.array  # its own index is not the output's
        if not isinstance(geometry, gpd.array.GeometryArray):
            geometry = np.asarray(geometry, dtype=object)
        # an owned geometry array is taken as it is (pandas would copy it: 8 B per row, and an
        # incref of every point)
        geo = gpd.GeoSeries(geometry, index=index, crs=crs, copy=False if owned else None)
        out = gpd.GeoDataFrame(out, geometry=geo.rename(geometry_name), crs=crs,
                               copy=False if owned else None)  # fmt: skip
        if out.geometry.name != geometry_name:  # geopandas names a passed series "geometry"
            out = out.rename_geometry(geometry_name)
    keep = set(map(_key, public)) | set(map(_key, released))
    if geometry is not None:
        keep.add(_key(geometry_name))
    skip = set(map(_key, protected))
    dropped = [c for c in source.columns if _key(c) not in keep and _key(c) not in skip]
    warn_dropped(dropped, what, stacklevel=stacklevel)
    return out


def _values(v: Any) -> Any:
    """Values without their own index (the output's index is set once, from ``source``)."""
    if isinstance(v, (pd.Series, pd.Index)):
        return v.to_numpy()
    return v


def _key(name: Any) -> Any:
    """Return a hashable key for a column name (names are hashable in pandas; be safe with NaN)."""
    return ("nan",) if isinstance(name, float) and name != name else name


_HEAD = 64  # rows compared first by refuse_coordinate_copies


def _close(v: np.ndarray, r: np.ndarray) -> bool:
    """Whether ``v`` equals ``r`` on every row, to 1e-9 relative (NaN never equals)."""
    return bool(np.all(np.abs(v - r) <= 1e-9 * np.maximum(1, np.abs(r))))


def refuse_coordinate_copies(frame: pd.DataFrame, public: Any, points: Any) -> None:
    """Refuse a declared-public column that is a copy of the x or y coordinates.

    A safety net for the commonest mistake: a GeoDataFrame built with
    ``points_from_xy(df.lon, df.lat)`` still holds ``lon``/``lat``, and declaring them public
    would release the true points. A column equal (to 1e-9, relative) on every row to the input
    x or y (``points`` a :class:`~gpframe.geo.Located`), or to the projected ones (``points`` a
    :class:`~gpframe.geo.Projected`, checked when the projection is made) is such a copy.
    Columns computed from the points in other ways cannot be recognised: only the caller knows
    what is public.
    """
    if not len(public) or not len(points):
        return
    if hasattr(points, "xy"):
        refs = [points.xy[:, 0], points.xy[:, 1]]
    else:
        refs = [points.xs, points.ys]
        if points.to_crs is not None:
            # the named metric CRS is public and known now: catch a copy in its metres at once
            # (a copy in an automatically chosen CRS is caught when that CRS is chosen)
            refs += list(points.to_crs_xy())
    for name in public:
        col = frame[name]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            continue
        # a copy equals x or y on every row, so on the first rows too: most columns differ
        # there, and are not converted nor compared whole (temporaries of the column's size)
        head = col.iloc[:_HEAD].to_numpy(dtype=np.float64, na_value=np.nan)
        near = [r for r in refs if len(r) == len(col) and _close(head, r[:_HEAD])]
        if not near:
            continue
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)
        if any(_close(v, r) for r in near):
            raise InvalidInputError(
                f"public=[..., {name!r}, ...]: column {name!r} holds the point coordinates "
                "(it equals x or y on every row), so it cannot be public. Remove it from "
                "public=. Nothing was charged."
            )


def privatized_frame(
    frame: pd.DataFrame,
    p: Any,
    xy_m: np.ndarray,
    released: np.ndarray,
    public: Any = None,
    *,
    stacklevel: int = 4,
    xy_in: tuple[np.ndarray, np.ndarray] | None = None,
) -> Any:
    """Build the output from nothing: noisy points in the input CRS, index, public columns.

    ``xy_in``: the released points already in the input CRS (NaN where unreleased), for a
    split whose parts were noised in different metric CRSs; ``p`` then only gives the
    coordinate columns and the input CRS. Unreleased rows get empty geometry (and NaN
    coordinates). An input bound by x=/y= (or lon=/lat=) gets those columns back holding the
    noisy coordinates; a GeoDataFrame input its geometry column. Nothing else of the input is
    copied (:func:`gpframe.release.release_frame`).
    """
    import geopandas as gpd

    from gpframe.geo import points_array

    # every row released (the usual case): no masked copies, no empty geometries
    every = released.size > 0 and bool(released.all())
    if xy_in is not None:
        xs, ys = xy_in
    elif every:
        xs, ys = p.to_input_crs(xy_m)
    else:
        xs, ys = np.full(len(p), np.nan), np.full(len(p), np.nan)
        if released.any():
            bx, by = p.to_input_crs(xy_m[released])
            xs[released], ys[released] = bx, by
    # a Projected says how many cores it may use; a Located (Dask worker parts) uses one
    geom = points_array(xs, ys, p.crs_in, threads=getattr(p, "threads", 1))
    if not every:
        geom[~released] = None
    gname = getattr(frame, "_geometry_column_name", None)
    is_geo = isinstance(frame, gpd.GeoDataFrame) and gname in frame.columns
    cols: dict[Any, Any] = {}
    if len(p.coords) == 2:  # bound by x=/y= (lon=/lat=): those columns come back, noisy
        cols = {p.coords[0]: xs, p.coords[1]: ys}
    return release_frame(
        frame,
        public=(() if public is None else tuple(public)),
        protected=protected_columns(frame, p.coords),
        released=cols,
        geometry=geom,
        geometry_name=gname if is_geo else "geometry",
        crs=p.crs_in,
        what="privatize",
        stacklevel=stacklevel,
        owned=xy_in is None,  # xs, ys and geom made here (a caller's xy_in: copied)
    )


def zones_builder(source: Any, zone_cols: tuple[Any, ...]) -> Any:
    """How the table of regions is built when the zones are a GeoDataFrame with columns.

    The zones' own columns are public (they are the caller's query) and come first, then the
    released counts; the one output builder makes the frame, never a copy of the zones frame.
    Every face's ``range_count`` over a GeoDataFrame of zones (``docs/operations/range_count.md``)
    passes it to :func:`gpframe.queries.range_count_regions.combine_regions`.
    """
    if not zone_cols:
        return None

    def build(table: pd.DataFrame, geometry: Any, crs: Any) -> Any:
        return release_frame(
            source, public=zone_cols,
            released={c: table[c].to_numpy() for c in table.columns}, geometry=geometry,
            geometry_name=source._geometry_column_name, crs=crs, what="range_count",
        )  # fmt: skip

    return build
