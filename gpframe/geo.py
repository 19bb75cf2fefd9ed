"""Column resolution, CRS handling, projection to metres and polygon validation.

Every distance-based mechanism in gpframe works in **metres on a projected CRS**: GP's ``eps`` is
per metre and CGP's ``rho`` per square metre (``docs/concepts.md``). This module turns
what the user hands over (a GeoDataFrame, or a DataFrame with ``x=``/``y=`` or ``lon=``/``lat=``
columns and an explicit ``crs=``) into a validated ``(n, 2)`` float64 array of metres, and maps
released points back to the input CRS.

Which metric CRS is used (the policy of :func:`resolve_points`)
----------------------------------------------------------------
The metric CRS and its worst-case scale factor ``scale_max`` (which divides eps, so it sets the
noise scale) are **outputs**: the CRS can be read off released coordinates, because they are exact
2⁻¹⁰ m lattice points of it. They must therefore be chosen from public information, or be declared
public. The *public extent* is the explicit ``domain=`` box (lon/lat degrees, chosen without
looking at the data) if given, else the CRS's published area of use
(:attr:`pyproj.CRS.area_of_use`).

1. ``to_crs=`` given (recommended for releases): that CRS, which must be projected, in metres
   and not Web Mercator. ``scale_max`` is taken over the public extent; without one (no
   ``domain=``, no area of use) :class:`~gpframe.errors.CRSError` asks for ``domain=``.
   ``crs_choice="to_crs"``.
2. The input CRS itself, if it is projected, in metres, not Web Mercator, and its point scale
   factor stays within ``1 ± max_scale_error`` over the public extent (e.g. EPSG:32618: at most
   0.098 % over its whole zone). ``crs_choice="input"``. A metre CRS with neither an area of use nor
   ``domain=`` is refused with a request for ``domain=``.
3. Otherwise (lon/lat input, feet, Web Mercator, a CRS too distorted over its area of use) the data
   is reprojected, keeping the input's datum (WGS 84 if that datum is a sphere, as EPSG:2163's
   is: see :func:`_projection_datum`), to the automatic choice for a lon/lat box: the UTM
   zone of the box's centre if its scale error over the box is within the bound (at most 0.098 %
   inside a zone), else a transverse Mercator centred on the box (``lon_0`` = centre, ``k_0`` = 1;
   fine up to about ±2.5° / cos(latitude) of longitude), else (a country, a continent) the
   candidate with the least noise inflation ``scale_max / scale_min`` over the box: UTM, that
   transverse Mercator, an azimuthal equidistant centred on the box's mid-meridian or a Lambert
   conformal conic secant inside it (about 1.03 over the contiguous US, 1.08 from Alaska to
   Puerto Rico, 1.05 over Europe; ``docs/wide-extents.md``), with a
   :class:`~gpframe.errors.GpframeWarning` above 5 % and a :class:`~gpframe.errors.CRSError`
   above 2 (about a hemisphere). The box is

   a. ``domain=`` when given: public, ``crs_choice="domain"``;
   b. otherwise the bounding box of the data **rounded outward to whole degrees**:
      ``crs_choice="data extent (public)"``. This convenience path makes that coarse extent part
      of the output (the UTM zone or TM centre and the k_max over the box are functions of the
      1° cells the extreme points fall in, which belong to individual users), and says so with a
      :class:`~gpframe.errors.GpframeWarning`. Nothing finer than the whole-degree cover can be
      read back: moving the extreme points within their cells changes neither the CRS nor
      ``scale_max`` (bit for bit). It is for exploration, not for releases.

In the public cases (1, 2, 3a) rows outside the public extent are refused, naming them, before
anything is charged: moving one user inside the extent cannot change the CRS or ``scale_max``.
The choice never depends on the data there, including whether the input CRS is used as is.

Feet (EPSG:2263 NY State Plane, US survey feet, and any non-metre projected CRS) are therefore
*converted* by reprojection, never refused and never treated as metres. Data crossing the
antimeridian is centred correctly (longitudes are unwrapped before the centre is taken); a
``domain=`` with ``lon_min > lon_max`` crosses the antimeridian.

The scale factor and the privacy guarantee
------------------------------------------
``docs/concepts.md`` and ``docs/noise.md``. A projection with point scale factor
``k`` stretches ground distances by up to ``k_max`` over an extent, so a mechanism calibrated per
projected metre is only ``eps * k_max``-GP per ground metre. :attr:`Projected.scale_max` is the
largest Tissot semi-major axis (the largest scale in any direction, so it is right for non-conformal
CRSs too) on a 17 × 17 lon/lat grid spanning :attr:`Projected.extent` (the public extent, or the
data's whole-degree cover on the convenience path), clamped below at 1 so that dividing by it never
*raises* eps. Mechanisms pass ``eps / scale_max`` (CGP: ``rho / scale_max**2``). The ground-metre
statement holds for pairs of locations inside that extent. Area-of-use bounds are published in WGS
84 degrees and compared with the data's own datum; the offset (metres, rarely more than a few
hundred) changes k by far less than 10⁻⁶.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pyproj
import shapely
from pyproj.crs import ProjectedCRS
from pyproj.crs.coordinate_operation import (
    AzimuthalEquidistantConversion,
    LambertConformalConic2SPConversion,
    TransverseMercatorConversion,
    UTMConversion,
)

from gpframe.errors import CRSError, GpframeWarning, InvalidInputError

__all__ = [
    "MAX_INFLATION",
    "MAX_SCALE_ERROR",
    "WARN_INFLATION",
    "Located",
    "Projected",
    "locate_points",
    "metric_crs_for",
    "noise_inflation",
    "points_frame",
    "project_geometry",
    "resolve_points",
    "scale_range",
    "utm_crs_for",
    "validate_polygons",
]

#: Default bound on |k - 1| over the data's extent for an automatically chosen metric CRS (0.1 %).
MAX_SCALE_ERROR = 1e-3

_NOTHING = "Nothing was charged."
_SHOW = 5  # how many bad row labels a message lists
_GRID = 17  # lon/lat grid side on which the scale factor is evaluated
_PSEUDO_MERCATOR = "popular visualisation pseudo mercator"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # gpframe/, for warnings


# --------------------------------------------------------------------------------------------------
# result type


@dataclass(frozen=True, eq=False)
class Projected:
    """Validated points in metres, with everything needed to map results back.

    Attributes
    ----------
    xy : ndarray of float64, shape (n, 2)
        Easting/northing in metres of :attr:`crs_m`, aligned with :attr:`index`.
    users : ndarray, shape (n,)
        The user id of each row (never missing).
    index : pandas.Index
        The input frame's index, so outputs can keep it.
    crs_in : pyproj.CRS
        The input CRS; outputs go back to it.
    crs_m : pyproj.CRS
        The projected metre CRS the mechanisms run in.
    scale_max : float
        Worst-case point scale factor of ``crs_m`` over the data's extent, at least 1. Pass
        ``eps / scale_max`` (``rho / scale_max**2``) to a mechanism (``docs/noise.md``).
    scale_min : float
        Smallest point scale factor over the extent (for the distance-accuracy statement only).
    coords : tuple of str
        Where the coordinates came from: ``(x_column, y_column)`` or ``(geometry_column,)``.
    crs_choice : str
        How :attr:`crs_m` and :attr:`scale_max` were chosen: ``"to_crs"`` (named by the user),
        ``"input"`` (the input CRS as is), ``"domain"`` (automatic, from the public ``domain=``)
        or ``"data extent (public)"`` (automatic, from the data's bounding box rounded outward to
        whole degrees, which the output then reveals; see the module docstring). The first three
        depend on no data.
    extent : tuple of float or None
        ``(lon_min, lat_min, lon_max, lat_max)`` in degrees over which :attr:`scale_max` holds
        (``lon_max`` may exceed 180 across the antimeridian): ``domain=``, the CRS's area of use,
        or the data's bounding box rounded outward to whole degrees.
    threads : int or None
        How many cores :meth:`to_input_crs` and the output points built from it may use: 1 (the
        default: the Dask workers and the array API) or None, which the pandas face passes
        (:data:`gpframe.mechanisms.row_ranges.THREADS`, else the machine's cores; large calls
        only, see :func:`~gpframe.mechanisms.row_ranges.cores_for`). The values do not depend on
        it.
    """

    xy: np.ndarray
    users: np.ndarray
    index: pd.Index
    crs_in: pyproj.CRS
    crs_m: pyproj.CRS
    scale_max: float
    scale_min: float = 1.0
    coords: tuple[str, ...] = ()
    # A hand-built Projected declares the conservative answer: its extent is treated as public.
    crs_choice: str = "data extent (public)"
    extent: tuple[float, float, float, float] | None = None
    _back: pyproj.Transformer | None = field(default=None, repr=False)
    threads: int | None = field(default=1, repr=False)

    def __len__(self) -> int:
        return int(self.xy.shape[0])

    @property
    def noise_inflation(self) -> float:
        """Worst ground noise over :attr:`extent` as a multiple of the nominal noise.

        ``scale_max / scale_min`` (:func:`noise_inflation`): about 1.0014 inside a UTM zone,
        the azimuthal equidistant's ``scale_max`` over a country or a continent.
        """
        return noise_inflation((self.scale_min, self.scale_max))

    @property
    def reprojected(self) -> bool:
        """Whether the metric CRS differs from the input CRS."""
        return self._back is not None

    def to_input_crs(self, xy_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map points in metres of :attr:`crs_m` back to the input CRS.

        Parameters
        ----------
        xy_m : array_like, shape (n, 2)
            Points in metres (e.g. released points).

        Returns
        -------
        (x, y) : tuple of ndarray
            Coordinates in :attr:`crs_in`, in (x, y) = (lon, lat) order for geographic CRSs.
        """
        xy_m = np.asarray(xy_m, dtype=np.float64)
        if xy_m.ndim != 2 or xy_m.shape[1] != 2:
            raise InvalidInputError(f"xy_m must have shape (n, 2); got {xy_m.shape}. {_NOTHING}")
        if self._back is None:
            return xy_m[:, 0].copy(), xy_m[:, 1].copy()
        buf = _transformed(self._back, xy_m[:, 0], xy_m[:, 1], self.threads)
        return buf[0], buf[1]

    def to_frame(self, xy_m: np.ndarray, like: pd.DataFrame | None = None) -> pd.DataFrame:
        """Build the output frame of points in metres: input CRS and index (see points_frame)."""
        x, y = self.to_input_crs(xy_m)
        cols = self.coords if len(self.coords) == 2 else (None, None)
        return points_frame((x, y), self.index, self.crs_in, like=like, x=cols[0], y=cols[1])


# --------------------------------------------------------------------------------------------------
# small helpers


def _rows(mask: np.ndarray, index: pd.Index) -> tuple[int, str]:
    """Count of True in ``mask`` and the first few row labels, for a message."""
    bad = np.flatnonzero(mask)
    labels = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in index[bad[:_SHOW]])
    more = ", ..." if bad.size > _SHOW else ""
    return int(bad.size), f"(rows {labels}{more})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _as_crs(value: Any, name: str) -> pyproj.CRS:
    try:
        return pyproj.CRS.from_user_input(value)
    except pyproj.exceptions.CRSError as exc:
        raise CRSError(
            f"{name}={value!r} is not a CRS pyproj understands ({exc}). Pass an EPSG code such as "
            f"'EPSG:4326' or 'EPSG:32618'. {_NOTHING}"
        ) from None


def _horizontal(crs: pyproj.CRS) -> pyproj.CRS:
    # A compound CRS (e.g. UTM + height) carries its horizontal part first.
    if crs.is_compound and crs.sub_crs_list:
        return crs.sub_crs_list[0]
    return crs


def _linear_unit(crs: pyproj.CRS) -> tuple[str, float]:
    axis = crs.axis_info[0]
    return axis.unit_name, float(axis.unit_conversion_factor)


def _is_pseudo_mercator(crs: pyproj.CRS) -> bool:
    op = crs.coordinate_operation
    return op is not None and _PSEUDO_MERCATOR in op.method_name.lower().replace("-", " ")


def _describe(crs: pyproj.CRS) -> str:
    auth = crs.to_authority()
    return f"{auth[0]}:{auth[1]} ({crs.name})" if auth else crs.name


def _check_metric_target(crs: pyproj.CRS, name: str) -> pyproj.CRS:
    crs = _horizontal(crs)
    if not crs.is_projected:
        raise CRSError(
            f"{name}={_describe(crs)} is not a projected CRS; distances would be in degrees. Name "
            f"a projected CRS in metres, e.g. the data's UTM zone. {_NOTHING}"
        )
    unit, factor = _linear_unit(crs)
    if factor != 1.0:
        raise CRSError(
            f"{name}={_describe(crs)} has units of {unit}, not metres; gpframe's eps is per metre "
            f"and rho per square metre. Name a projected CRS in metres. {_NOTHING}"
        )
    if _is_pseudo_mercator(crs):
        raise CRSError(
            f"{name}={_describe(crs)} is Web Mercator, whose units are not ground metres (scale "
            f"1/cos(latitude)). Name a local CRS in metres, e.g. the UTM zone, or omit {name}. "
            f"{_NOTHING}"
        )
    return crs


def _lon_extent(lon: np.ndarray) -> tuple[float, float]:
    """Return the data's west and east longitude, unwrapped so east >= west (may exceed 180)."""
    lo, hi = float(lon.min()), float(lon.max())
    shifted = np.where(lon < 0, lon + 360.0, lon)
    lo2, hi2 = float(shifted.min()), float(shifted.max())
    # Data straddling the antimeridian is narrower in [0, 360) than in [-180, 180].
    return (lo2, hi2) if hi2 - lo2 < hi - lo else (lo, hi)


def _wrap(lon: np.ndarray | float) -> np.ndarray | float:
    return (np.asarray(lon) + 180.0) % 360.0 - 180.0


# --------------------------------------------------------------------------------------------------
# metric CRS choice and scale factors


def utm_crs_for(lon: float, lat: float, geodetic: Any = "EPSG:4326") -> pyproj.CRS:
    """Return the UTM zone CRS of a point (standard 6° zones, no Norway/Svalbard exceptions).

    Parameters
    ----------
    lon, lat : float
        The point in degrees.
    geodetic : CRS-like
        Datum of the result. WGS 84 gives the EPSG code (326zz north, 327zz south); another
        geographic CRS gives a UTM on that datum, so projecting needs no datum shift; a
        spherical datum gives WGS 84's (PROJ has no UTM on a sphere).

    Returns
    -------
    pyproj.CRS

    Examples
    --------
    >>> utm_crs_for(-74.0, 40.7).to_epsg()
    32618
    >>> utm_crs_for(-37.05, -10.9).to_epsg()
    32724
    >>> utm_crs_for(-74.0, 40.7, geodetic="EPSG:4269").name
    'NAD83 / UTM zone 18N'
    >>> utm_crs_for(-90.0, 40.0, geodetic="EPSG:2163").to_epsg()   # on a sphere
    32616
    """
    if not (np.isfinite(lon) and np.isfinite(lat) and -90.0 <= lat <= 90.0):
        raise InvalidInputError(f"utm_crs_for needs a finite lon/lat; got ({lon}, {lat}).")
    zone = int((float(_wrap(lon)) + 180.0) // 6.0) % 60 + 1
    south = lat < 0
    base = _projection_datum(_as_crs(geodetic, "geodetic"))
    if base.equals(pyproj.CRS("EPSG:4326"), ignore_axis_order=True):
        return pyproj.CRS.from_epsg((32700 if south else 32600) + zone)
    hemi = "S" if south else "N"
    return ProjectedCRS(
        conversion=UTMConversion(zone, hemisphere=hemi),
        geodetic_crs=base,
        name=f"{base.name} / UTM zone {zone}{hemi}",
    )


def _local_tm(lon0: float, geodetic: pyproj.CRS) -> pyproj.CRS:
    # k_0 = 1 on the central meridian: scale grows as 1 + (dlon cos(lat))^2 / 2 away from it.
    lon0 = round(float(_wrap(lon0)), 6)
    return ProjectedCRS(
        conversion=TransverseMercatorConversion(
            latitude_natural_origin=0.0,
            longitude_natural_origin=lon0,
            false_easting=500_000.0,
            false_northing=0.0,
            scale_factor_natural_origin=1.0,
        ),
        geodetic_crs=geodetic,
        name=f"gpframe local transverse Mercator lon_0={lon0}",
    )


def scale_range(
    crs_m: pyproj.CRS, lon_min: float, lat_min: float, lon_max: float, lat_max: float
) -> tuple[float, float]:
    """Smallest and largest point scale factor of ``crs_m`` over a lon/lat box.

    The largest is the maximum Tissot semi-major axis (largest scale in any direction), the smallest
    the minimum semi-minor axis, on a 17 × 17 grid including the box's edges (plus the equator when
    the box spans it). ``lon_max`` may exceed 180 for a box crossing the antimeridian.

    Examples
    --------
    >>> lo, hi = scale_range(pyproj.CRS("EPSG:32631"), 0.0, 0.0, 6.0, 0.0)  # zone 31, equator
    >>> round(lo, 6), round(hi, 6)
    (0.9996, 1.000981)
    """
    # a function of public inputs only (the CRS's definition and the box), asked again by every
    # call on the same to_crs= / domain=: kept per definition (pyproj's user input string),
    # never the CRS object itself (pyproj objects belong to the thread that made them)
    box = (float(lon_min), float(lat_min), float(lon_max), float(lat_max))
    if not crs_m.srs:
        return _scale_factors(crs_m, *box)
    return _scale_range(crs_m.srs, *box)


@lru_cache(maxsize=256)
def _scale_range(
    srs: str, lon_min: float, lat_min: float, lon_max: float, lat_max: float
) -> tuple[float, float]:
    return _scale_factors(pyproj.CRS.from_user_input(srs), lon_min, lat_min, lon_max, lat_max)


def _scale_factors(
    crs_m: pyproj.CRS, lon_min: float, lat_min: float, lon_max: float, lat_max: float
) -> tuple[float, float]:
    lon = _wrap(np.linspace(lon_min, lon_max, _GRID))
    lat = np.linspace(lat_min, lat_max, _GRID)
    if lat_min < 0.0 < lat_max:
        # Transverse Mercator scale peaks on the equator: make sure the grid has that row.
        lat = np.append(lat, 0.0)
    lat = np.clip(lat, -89.999, 89.999)
    glon, glat = (a.ravel() for a in np.meshgrid(lon, lat))
    f = pyproj.Proj(crs_m).get_factors(glon, glat, errcheck=False)
    hi = np.asarray(f.tissot_semimajor, dtype=np.float64)
    lo = np.asarray(f.tissot_semiminor, dtype=np.float64)
    if not (np.all(np.isfinite(hi)) and np.all(np.isfinite(lo))):
        return 0.0, np.inf
    return float(lo.min()), float(hi.max())


def _within(rng: tuple[float, float], tol: float) -> bool:
    return rng[1] - 1.0 <= tol and 1.0 - rng[0] <= tol


def _aeqd(lon_c: float, lat_c: float, geodetic: pyproj.CRS) -> pyproj.CRS:
    # Azimuthal equidistant: scale 1 along every geodesic from the centre, c/sin(c) across them
    # (c the angular distance), so k >= 1 everywhere and about 1 + c^2/6 at distance c.
    lon_c = round(float(_wrap(lon_c)), 2)
    lat_c = round(float(lat_c), 2)
    return ProjectedCRS(
        conversion=AzimuthalEquidistantConversion(
            latitude_natural_origin=lat_c, longitude_natural_origin=lon_c
        ),
        geodetic_crs=geodetic,
        name=f"gpframe azimuthal equidistant lon_0={lon_c} lat_0={lat_c}",
    )


def noise_inflation(rng: tuple[float, float]) -> float:
    """Worst ground-metre noise of a projection, as a multiple of the nominal noise.

    Mechanisms run at eps / scale_max (scale_max = max(1, k_max)), so where the local scale in
    a direction is k the ground noise is scale_max / k times the nominal one: between 1 (at
    k = k_max) and ``scale_max / k_min``, the number returned (``docs/wide-extents.md``).

    Examples
    --------
    >>> round(noise_inflation((0.9996, 1.000981)), 6)     # a whole UTM zone at the equator
    1.001382
    >>> noise_inflation((1.0, 1.2))                        # azimuthal equidistant: k >= 1
    1.2
    """
    lo, hi = rng
    return float(max(1.0, hi) / lo) if lo > 0 and np.isfinite(hi) else float("inf")


#: Above this noise inflation no automatic projection is accepted (the extent is too wide for
#: one projection: about a hemisphere), and above WARN_INFLATION the choice warns.
MAX_INFLATION, WARN_INFLATION = 2.0, 1.05


def _wide_candidates(
    lon_min: float, lat_min: float, lon_max: float, lat_max: float, geod: pyproj.CRS
) -> list[tuple[pyproj.CRS, tuple[float, float]]]:
    """Projections for a wide box, each with its scale range over it; only the box is read.

    Azimuthal equidistant projections centred on the box's mid-meridian at a few latitudes (the
    worst factor is set by the farthest corners; moving the centre balances the northern and
    southern ones), and, for a box in one hemisphere, Lambert conformal conics secant on
    parallels at 10 %, 1/6 and 25 % of its height from each edge (best for boxes wide east-west,
    such as the US).
    """
    lon_c = (lon_min + lon_max) / 2.0
    out = []
    for f in np.linspace(-0.25, 0.25, 9):
        lat_c = float(np.clip((lat_min + lat_max) / 2.0 + f * (lat_max - lat_min), -89.0, 89.0))
        crs = _aeqd(lon_c, lat_c, geod)
        out.append((crs, scale_range(crs, lon_min, lat_min, lon_max, lat_max)))
    if lat_min * lat_max > 0:  # a cone needs both parallels in one hemisphere
        for f in (0.1, 1 / 6, 0.25):
            h = lat_max - lat_min
            crs = _lcc(lon_c, lat_min + f * h, lat_max - f * h, (lat_min + lat_max) / 2, geod)
            out.append((crs, scale_range(crs, lon_min, lat_min, lon_max, lat_max)))
    return out


def _lcc(lon_c: float, lat_1: float, lat_2: float, lat_0: float, geodetic: pyproj.CRS) -> Any:
    # Lambert conformal conic, secant on two parallels inside the box: k < 1 between them, > 1
    # outside; conformal, so the noise stays round on the ground (wide east-west extents).
    lon_c, lat_1, lat_2, lat_0 = (round(float(v), 2) for v in (_wrap(lon_c), lat_1, lat_2, lat_0))
    return ProjectedCRS(
        conversion=LambertConformalConic2SPConversion(
            latitude_first_parallel=lat_1,
            latitude_second_parallel=lat_2,
            latitude_false_origin=lat_0,
            longitude_false_origin=lon_c,
        ),
        geodetic_crs=geodetic,
        name=f"gpframe Lambert conformal conic lon_0={lon_c} lat_1={lat_1} lat_2={lat_2}",
    )


def _projection_datum(crs: pyproj.CRS) -> pyproj.CRS:
    """Return the geographic CRS to build automatic projections on: the input's, unless a sphere.

    A datum on a sphere (EPSG:2163's Clarke 1866 authalic sphere, a ``+R=`` CRS) is a display
    convention, not a model of the ground: PROJ refuses UTM on it, and scale factors computed on
    it would miss the ellipsoid's real distortion (up to about 0.5 % between the equator and the
    poles). Projections are then built on WGS 84 (the transformation from the sphere keeps
    lon/lat as they are), so ``scale_max`` is measured against the ground.

    Examples
    --------
    >>> _projection_datum(pyproj.CRS("EPSG:2163")).to_epsg()
    4326
    >>> _projection_datum(pyproj.CRS("EPSG:26918")).name
    'NAD83'
    """
    geod = _horizontal(crs)
    geod = geod if geod.is_geographic else geod.geodetic_crs
    ell = geod.ellipsoid
    if ell is None or ell.semi_minor_metre >= ell.semi_major_metre:
        return _WGS84
    return geod


def metric_crs_for(
    lon_min: float,
    lat_min: float,
    lon_max: float,
    lat_max: float,
    geodetic: Any = "EPSG:4326",
    max_scale_error: float = MAX_SCALE_ERROR,
    *,
    label: str = "the data",
) -> tuple[pyproj.CRS, tuple[float, float]]:
    """Choose the automatic metric CRS for a lon/lat box.

    The UTM zone of its centre, else a transverse Mercator centred on it, if one keeps |k - 1|
    within ``max_scale_error``; else (a country, a continent) the candidate (UTM, that
    transverse Mercator, azimuthal equidistant projections centred on the box, Lambert conformal
    conics secant inside it) with the least noise inflation (:func:`noise_inflation`), warned
    about (:class:`~gpframe.errors.GpframeWarning`) above 5 % and refused (:class:`CRSError`)
    above 2 (``docs/wide-extents.md``).

    Returns the CRS and its (min, max) scale factor over the box. The result depends only on the
    box: pass a public box (``domain=``) to keep the choice independent of the data. ``label``
    names the box in messages.

    Examples
    --------
    >>> crs, (lo, hi) = metric_crs_for(-74.3, 40.5, -73.7, 40.9)   # New York City
    >>> crs.to_epsg(), hi < 1.0
    (32618, True)
    >>> crs, _ = metric_crs_for(-79.0, 39.0, -77.0, 41.0)          # straddles zones 17 and 18
    >>> crs.name
    'gpframe local transverse Mercator lon_0=-78.0'
    >>> crs, rng = metric_crs_for(-10.0, 36.0, 30.0, 60.0)          # western Europe
    >>> crs.name, round(noise_inflation(rng), 3)
    ('gpframe azimuthal equidistant lon_0=10.0 lat_0=46.5', 1.017)
    """
    geod = _projection_datum(_as_crs(geodetic, "geodetic"))
    lon_c = (lon_min + lon_max) / 2.0
    lat_c = (lat_min + lat_max) / 2.0
    utm = utm_crs_for(lon_c, lat_c, geodetic=geod)
    rng_utm = scale_range(utm, lon_min, lat_min, lon_max, lat_max)
    if _within(rng_utm, max_scale_error):
        return utm, rng_utm
    tm = _local_tm(lon_c, geod)
    rng_tm = scale_range(tm, lon_min, lat_min, lon_max, lat_max)
    if _within(rng_tm, max_scale_error):
        return tm, rng_tm
    cands = [(utm, rng_utm), (tm, rng_tm), *_wide_candidates(lon_min, lat_min, lon_max, lat_max,
                                                              geod)]  # fmt: skip
    crs, rng = min(cands, key=lambda c: noise_inflation(c[1]))  # first of equals: stable
    f = noise_inflation(rng)
    span = (
        f"{label} spans lon {_wrap(lon_min):.4f}..{_wrap(lon_max):.4f}, lat "
        f"{lat_min:.4f}..{lat_max:.4f}"
    )
    if not f <= MAX_INFLATION:
        err = 100 * max(rng_tm[1] - 1.0, 1.0 - rng_tm[0])
        raise CRSError(
            f"{span}: too wide for one transverse Mercator projection (scale error up to "
            f"{err:.3g} % > {100 * max_scale_error:.3g} %) and for any one projection gpframe "
            f"chooses (the best, {crs.name}, would multiply the noise by up to {f:.3g}), so "
            "distances would not be metres. Pass an explicit to_crs= (a projected CRS in metres "
            "suited to the whole extent; its worst-case scale factor is then reported as "
            f"scale_max and divides eps), or split the data by a public region. {_NOTHING}"
        )
    if f > WARN_INFLATION:
        warnings.warn(
            f"{span}: too wide for UTM or a local transverse Mercator, so distances are "
            f"measured in {crs.name}, the projection with the least distortion over that "
            f"extent. Its scale factor (up to {max(1.0, rng[1]):.4f}) divides eps, so the noise "
            f"is up to {f:.3f} times the nominal noise (more near the centre). To avoid it, pass "
            "a smaller public domain=, or analyse each public region (a state, a country) "
            "separately with its own domain=.",
            GpframeWarning,
            stacklevel=_stacklevel_outside_gpframe(),
        )
    return crs, rng


# --------------------------------------------------------------------------------------------------
# column resolution


def _numeric_column(df: pd.DataFrame, col: str, arg: str) -> np.ndarray:
    if not isinstance(col, str) and not np.isscalar(col):
        raise InvalidInputError(f"{arg}= must name a column; got {col!r}. {_NOTHING}")
    if col not in df.columns:
        raise InvalidInputError(
            f"{arg}={col!r} is not a column of the frame (columns: {list(map(str, df.columns))}). "
            f"{_NOTHING}"
        )
    s = df[col]
    if isinstance(s, pd.DataFrame):
        raise InvalidInputError(f"column {col!r} is duplicated in the frame. {_NOTHING}")
    if pd.api.types.is_bool_dtype(s.dtype) or not pd.api.types.is_numeric_dtype(s.dtype):
        bad = pd.to_numeric(s, errors="coerce").isna().to_numpy() & s.notna().to_numpy()
        if pd.api.types.is_bool_dtype(s.dtype):
            bad = np.ones(len(s), dtype=bool)
        n, rows = _rows(bad, df.index)
        raise InvalidInputError(
            f"column {col!r} has dtype {s.dtype}, not a numeric coordinate; {n} of {len(s)} values "
            f"are not numbers {rows}. Convert it first: df[{col!r}] = pd.to_numeric(df[{col!r}]). "
            f"{_NOTHING}"
        )
    # Nullable dtypes (Float64, Int64) carry pd.NA: map it to NaN so the finiteness check counts it.
    return s.to_numpy(dtype=np.float64, na_value=np.nan)


def _check_finite(vals: np.ndarray, col: str, index: pd.Index, cols: Sequence[str]) -> None:
    bad = ~np.isfinite(vals)
    if bad.any():
        n, rows = _rows(bad, index)
        raise InvalidInputError(
            f"column {col!r} has {n} NaN/inf {'value' if n == 1 else 'values'} {rows}. Drop or "
            f"fill them first: df = df[np.isfinite(df[{list(cols)!r}]).all(axis=1)]. {_NOTHING}"
        )


def _geometry_xy(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, str]:
    geo = df.geometry
    name = str(geo.name)
    arr = np.asarray(geo.array, dtype=object)
    missing = shapely.is_missing(arr) | shapely.is_empty(arr)
    if missing.any():
        n, rows = _rows(missing, df.index)
        raise InvalidInputError(
            f"geometry column {name!r} has {n} missing or empty "
            f"{'geometry' if n == 1 else 'geometries'} {rows}. Drop them first: df = "
            f"df[~(df.geometry.isna() | df.geometry.is_empty)]. {_NOTHING}"
        )
    kinds = shapely.get_type_id(arr)
    notpoint = kinds != shapely.GeometryType.POINT
    if notpoint.any():
        n, rows = _rows(notpoint, df.index)
        seen = sorted(
            {shapely.GeometryType(int(k)).name.title() for k in np.unique(kinds[notpoint])}
        )
        raise InvalidInputError(
            f"geometry column {name!r} has {n} non-point {'geometry' if n == 1 else 'geometries'} "
            f"({', '.join(seen)}) {rows}; this operation needs one point per row. Convert first, "
            "e.g. df.geometry = df.geometry.representative_point(), or explode multipoints with "
            f"df.explode(index_parts=False). {_NOTHING}"
        )
    return shapely.get_x(arr), shapely.get_y(arr), name


def resolve_points(
    df: pd.DataFrame,
    *,
    user: str,
    x: str | None = None,
    y: str | None = None,
    lon: str | None = None,
    lat: str | None = None,
    crs: Any = None,
    to_crs: Any = None,
    max_scale_error: float = MAX_SCALE_ERROR,
    domain: Sequence[float] | None = None,
) -> Projected:
    """Validate a frame's user ids and point coordinates and project them to metres.

    For a release, name the metric CRS (``to_crs=``, or input already in a projected metre CRS)
    or a public ``domain=``: the metric CRS and ``scale_max`` (which sets the noise scale) are
    then fixed from public information only, and moving one user inside that extent cannot change
    them. Without either, for lon/lat input, they are chosen from the data's bounding box rounded
    outward to whole degrees, and the output reveals that coarse box: the UTM zone of its centre
    (or a local transverse Mercator centred on it) and k_max over it, functions of the 1° cells
    the extreme points of individual users fall in. That path is recorded as
    ``crs_choice="data extent (public)"`` and warns (:class:`~gpframe.errors.GpframeWarning`).

    Parameters
    ----------
    df : pandas.DataFrame or geopandas.GeoDataFrame
        One row per location.
    user : str
        Column of user ids; missing ids are refused.
    x, y : str, optional
        Coordinate columns in ``crs`` units (x = easting or longitude).
    lon, lat : str, optional
        Coordinate columns in degrees; ``crs`` must then be geographic.
    crs : CRS-like, optional
        CRS of the coordinates. Required with columns; with a GeoDataFrame it may stand in for a
        missing ``df.crs`` but must not contradict one.
    to_crs : CRS-like, optional
        Metric CRS to use instead of the automatic choice (see the module docstring).
        ``scale_max`` is computed over ``domain=`` if given, else over the CRS's area of use;
        points outside that extent are refused.
    max_scale_error : float
        Bound on |k - 1| over the extent for the automatic choice (default 0.1 %).
    domain : (lon_min, lat_min, lon_max, lat_max), optional
        A **public** box in degrees of the data's geographic CRS, fixed without looking at the data
        (e.g. the city or country of the study); ``lon_min > lon_max`` crosses the antimeridian.
        The metric CRS (if not named) and ``scale_max`` are computed from it alone; points outside
        it are refused.

    Returns
    -------
    Projected

    Raises
    ------
    InvalidInputError
        Empty frame, unknown column, missing user ids, non-numeric/NaN/inf coordinates, degrees
        out of range, missing/empty/non-point geometries. The message names the column and the
        first bad rows.
        Points outside ``domain=``, or a malformed ``domain=``.
    CRSError
        No CRS, contradicting CRSs, an unusable ``to_crs``, an extent too wide for the automatic
        choice, a named/input metre CRS without an area of use and no ``domain=``, or points
        outside the area of use of the named/input CRS.

    Examples
    --------
    >>> df = pd.DataFrame({"uid": [1, 1, 2], "lon": [-74.0, -73.99, -73.98],
    ...                    "lat": [40.7, 40.71, 40.72]})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:   # the convenience path warns
    ...     warnings.simplefilter("always")
    ...     p = resolve_points(df, user="uid", lon="lon", lat="lat", crs="EPSG:4326")
    >>> print(caught[0].message)                              # doctest: +ELLIPSIS
    no to_crs= or domain= given: ... (lon -74..-73, lat 40..41), and that coarse extent ...
    >>> p.crs_m.to_epsg(), p.xy.shape, p.scale_max, p.crs_choice, p.extent
    (32618, (3, 2), 1.0, 'data extent (public)', (-74.0, 40.0, -73.0, 41.0))
    >>> q = resolve_points(df, user="uid", lon="lon", lat="lat", crs="EPSG:4326",
    ...                    to_crs="EPSG:32618")          # public: zone 18N's area of use
    >>> q.crs_choice, round(q.scale_max, 6), q.extent
    ('to_crs', 1.000981, (-78.0, 0.0, -72.0, 84.0))
    >>> r = resolve_points(df, user="uid", lon="lon", lat="lat", crs="EPSG:4326",
    ...                    domain=(-74.3, 40.5, -73.7, 40.9))  # public box: New York City
    >>> r.crs_choice, r.crs_m.to_epsg(), r.scale_max
    ('domain', 32618, 1.0)
    >>> lon, lat = p.to_input_crs(p.xy)
    >>> bool(np.allclose(lon, df["lon"], rtol=0, atol=1e-9))
    True
    """
    return locate_points(
        df, user=user, x=x, y=y, lon=lon, lat=lat, crs=crs, to_crs=to_crs,
        max_scale_error=max_scale_error, domain=domain,
    ).project()  # fmt: skip


def locate_points(
    df: pd.DataFrame,
    *,
    user: str,
    x: str | None = None,
    y: str | None = None,
    lon: str | None = None,
    lat: str | None = None,
    crs: Any = None,
    to_crs: Any = None,
    max_scale_error: float = MAX_SCALE_ERROR,
    domain: Sequence[float] | None = None,
) -> Located:
    """Validate a frame's user ids and coordinates, ``domain=`` and ``to_crs=``; project nothing.

    The first half of :func:`resolve_points` (same arguments, same errors for bad columns, a
    malformed ``domain=`` or an unusable ``to_crs=``). Operations on public cells use
    :meth:`Located.lonlat`; metric ones :meth:`Located.project`, which may still refuse the data
    (an extent too wide for the automatic choice, points outside a public extent).

    Examples
    --------
    >>> df = pd.DataFrame({"uid": [1, 2], "lon": [-170.0, -65.0], "lat": [55.0, 18.5]})
    >>> loc = locate_points(df, user="uid", lon="lon", lat="lat", crs="EPSG:4326")
    >>> loc.lonlat()[0].tolist()                  # as given: no metric CRS needed
    [-170.0, -65.0]
    """
    if not isinstance(df, pd.DataFrame):
        raise InvalidInputError(
            f"expected a pandas DataFrame or GeoDataFrame; got {type(df).__name__}. {_NOTHING}"
        )
    if len(df) == 0:
        raise InvalidInputError(
            f"the frame is empty (0 rows): there is nothing to analyse. {_NOTHING}"
        )
    if not (np.isfinite(max_scale_error) and 0 < max_scale_error < 1):
        raise InvalidInputError(f"max_scale_error must be in (0, 1); got {max_scale_error!r}.")
    index = df.index

    # -- user ids
    if user is None or user not in df.columns:
        raise InvalidInputError(
            f"user={user!r} is not a column of the frame (columns: {list(map(str, df.columns))}). "
            f"Name the user-id column, e.g. user='user_id'. {_NOTHING}"
        )
    users_s = df[user]
    missing = users_s.isna().to_numpy()
    if missing.any():
        n, rows = _rows(missing, index)
        raise InvalidInputError(
            f"column {user!r} has {n} missing user {'id' if n == 1 else 'ids'} {rows}. Every row "
            f"must belong to a user: df = df.dropna(subset=[{user!r}]). {_NOTHING}"
        )
    from gpframe.ledger.keys import check_users

    check_users(users_s, user)  # floats, bools, mixed types: refused as in SQL
    users = users_s.to_numpy()

    # -- coordinates
    pairs = {"x/y": (x, y), "lon/lat": (lon, lat)}
    given = [k for k, (a, b) in pairs.items() if a is not None or b is not None]
    if len(given) > 1:
        raise InvalidInputError(f"pass either x=/y= or lon=/lat=, not both. {_NOTHING}")
    if given:
        kind = given[0]
        cx, cy = pairs[kind]
        names = ("x", "y") if kind == "x/y" else ("lon", "lat")
        if cx is None or cy is None:
            raise InvalidInputError(
                f"pass both {names[0]}= and {names[1]}= (got {names[0]}={cx!r}, "
                f"{names[1]}={cy!r}). {_NOTHING}"
            )
        if crs is None:
            hint = "crs='EPSG:4326' for WGS84 degrees" if kind == "lon/lat" else "crs='EPSG:32618'"
            raise CRSError(
                f"columns {cx!r}/{cy!r} have no CRS: pass crs= explicitly, e.g. {hint}. gpframe "
                f"never guesses units. {_NOTHING}"
            )
        crs_in = _horizontal(_as_crs(crs, "crs"))
        xs = _numeric_column(df, cx, names[0])
        ys = _numeric_column(df, cy, names[1])
        _check_finite(xs, cx, index, (cx, cy))
        _check_finite(ys, cy, index, (cx, cy))
        coords: tuple[str, ...] = (cx, cy)
        if kind == "lon/lat" and not crs_in.is_geographic:
            raise CRSError(
                f"lon=/lat= columns need a geographic crs, but crs={_describe(crs_in)} is "
                f"projected. Use x=/y= for projected coordinates. {_NOTHING}"
            )
    else:
        if not hasattr(df, "geometry") or not _has_active_geometry(df):
            raise InvalidInputError(
                "no coordinates: pass x=/y= or lon=/lat= column names with crs=, or a "
                f"GeoDataFrame with a point geometry column. {_NOTHING}"
            )
        frame_crs = df.crs
        if frame_crs is None and crs is None:
            raise CRSError(
                "the GeoDataFrame has no CRS: set it first (df = df.set_crs('EPSG:4326') for "
                f"WGS84 degrees) or pass crs=. gpframe never guesses units. {_NOTHING}"
            )
        crs_in = _horizontal(
            pyproj.CRS(frame_crs) if frame_crs is not None else _as_crs(crs, "crs")
        )
        if frame_crs is not None and crs is not None:
            other = _horizontal(_as_crs(crs, "crs"))
            if not other.equals(crs_in, ignore_axis_order=True):
                raise CRSError(
                    f"crs={_describe(other)} contradicts the GeoDataFrame's CRS "
                    f"{_describe(crs_in)}. Drop crs=, or reproject first with df.to_crs(...). "
                    f"{_NOTHING}"
                )
        xs, ys, gname = _geometry_xy(df)
        coords = (gname,)
        _check_finite(xs, gname, index, ("x", "y"))
        _check_finite(ys, gname, index, ("x", "y"))
        cx, cy = gname, gname

    dom = _check_domain(domain) if domain is not None else None
    _check_input_crs(xs, ys, crs_in, index, (cx, cy))
    if to_crs is not None:  # public: refuse an unusable to_crs= here, whatever the operation
        _named_metric(to_crs, dom, "to_crs")
    return Located(
        xs=xs, ys=ys, users=users, index=index, crs_in=crs_in, coords=coords, cols=(cx, cy),
        to_crs=to_crs, domain=dom, max_scale_error=max_scale_error,
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class Located:
    """Validated points in their input CRS, not yet projected (made by :func:`locate_points`).

    Operations on public cells (H3) need only :meth:`lonlat`; the metric ones call
    :meth:`project`, which chooses the metric CRS (the policy of the module docstring) and may
    refuse the data (an extent too wide, points outside a public extent). Validation of the
    columns, ``domain=`` and a named ``to_crs=`` is already done.
    """

    xs: np.ndarray
    ys: np.ndarray
    users: np.ndarray
    index: pd.Index
    crs_in: pyproj.CRS
    coords: tuple[str, ...]
    cols: tuple[str, str]
    to_crs: Any = None
    domain: Box | None = None
    max_scale_error: float = MAX_SCALE_ERROR

    def __len__(self) -> int:
        return int(self.xs.shape[0])

    def lonlat(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point's WGS 84 longitude and latitude, with no metric projection.

        lon/lat input in WGS 84 comes back as it is (the very arrays); other CRSs are
        transformed to ``EPSG:4326`` (a datum shift or an inverse projection).
        """
        if self.crs_in.is_geographic and self.crs_in.equals(_WGS84, ignore_axis_order=True):
            return self.xs, self.ys
        lon, lat = pyproj.Transformer.from_crs(self.crs_in, _WGS84, always_xy=True).transform(
            self.xs, self.ys
        )
        lon = np.asarray(lon, dtype=np.float64)
        lat = np.asarray(lat, dtype=np.float64)
        bad = ~(np.isfinite(lon) & np.isfinite(lat))
        if bad.any():
            n, rows = _rows(bad, self.index)
            raise CRSError(
                f"columns {self.cols[0]!r}/{self.cols[1]!r}: {_plural(n, 'point')} fall outside "
                f"the valid area of {_describe(self.crs_in)} {rows}. Check the crs. {_NOTHING}"
            )
        return lon, lat

    def to_crs_xy(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the points in metres of the named ``to_crs=`` (NaN where undefined), unchecked.

        For the safety check on declared-public columns only; the mechanisms use
        :meth:`project`.
        """
        crs_m = _horizontal(_as_crs(self.to_crs, "to_crs"))
        tr = pyproj.Transformer.from_crs(self.crs_in, crs_m, always_xy=True)
        x, y = tr.transform(self.xs, self.ys, errcheck=False)
        return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)

    def subset(self, rows: np.ndarray, domain: Any = None) -> Located:
        """Return the points at positions ``rows``, with their own public ``domain=`` (or ours).

        For a split by a public column (``docs/wide-extents.md``): each part chooses its metric
        CRS from its own public extent. ``domain`` is validated like ``domain=``.

        Examples
        --------
        >>> df = pd.DataFrame({"uid": [1, 2], "lon": [-150.0, -66.0], "lat": [61.0, 18.2]})
        >>> loc = locate_points(df, user="uid", lon="lon", lat="lat", crs="EPSG:4326")
        >>> part = loc.subset(np.array([1]), domain=(-68, 17, -65, 19))
        >>> part.xs.tolist(), part.domain
        ([-66.0], (-68.0, 17.0, -65.0, 19.0))
        """
        dom = self.domain if domain is None else _check_domain(domain)
        return Located(
            xs=self.xs[rows], ys=self.ys[rows], users=self.users[rows], index=self.index[rows],
            crs_in=self.crs_in, coords=self.coords, cols=self.cols, to_crs=self.to_crs,
            domain=dom, max_scale_error=self.max_scale_error,
        )  # fmt: skip

    def project(self, threads: int | None = 1) -> Projected:
        """Choose the metric CRS and project the points to metres (see :func:`resolve_points`).

        ``threads``: how many cores the projections (this one and the way back, see
        :attr:`Projected.threads`) may use; the pandas face passes None (every core).
        """
        xy_m, crs_m, rng, back, choice, ext = _project(
            self.xs, self.ys, self.crs_in, self.to_crs, self.domain, self.index, self.cols,
            self.max_scale_error, threads,
        )  # fmt: skip
        return Projected(
            xy=xy_m,
            users=self.users,
            index=self.index,
            crs_in=self.crs_in,
            crs_m=crs_m,
            scale_max=max(1.0, rng[1]),
            scale_min=rng[0],
            coords=self.coords,
            crs_choice=choice,
            extent=tuple(float(v) for v in ext),
            _back=back,
            threads=threads,
        )


_WGS84 = pyproj.CRS.from_epsg(4326)


def _check_input_crs(
    xs: np.ndarray, ys: np.ndarray, crs_in: pyproj.CRS, index: pd.Index, cols: tuple[str, str]
) -> None:
    """Refuse an input CRS that is neither geographic in degrees nor projected, and bad degrees."""
    if crs_in.is_geographic:
        unit = crs_in.axis_info[0].unit_name.lower()
        if "degree" not in unit:
            raise CRSError(
                f"geographic CRS {_describe(crs_in)} is in {unit}, not degrees. {_NOTHING}"
            )
        for vals, col, lim, what in (
            (xs, cols[0], 180.0, "longitude"),
            (ys, cols[1], 90.0, "latitude"),
        ):
            bad = np.abs(vals) > lim
            if bad.any():
                n, rows = _rows(bad, index)
                raise InvalidInputError(
                    f"column {col!r} has {n} {what} {'value' if n == 1 else 'values'} outside "
                    f"[-{lim:g}, {lim:g}] {rows}. Check that lon and lat are not swapped and that "
                    f"the CRS {_describe(crs_in)} is right. {_NOTHING}"
                )
    elif not crs_in.is_projected:
        raise CRSError(
            f"{_describe(crs_in)} is neither geographic (lon/lat) nor projected; gpframe needs one "
            f"of those. {_NOTHING}"
        )


def _has_active_geometry(df: pd.DataFrame) -> bool:
    try:
        df.geometry  # noqa: B018 - geopandas raises AttributeError when no active geometry is set
    except AttributeError:
        return False
    return True


Box = tuple[float, float, float, float]

_CHOICE_TO_CRS = "to_crs"
_CHOICE_INPUT = "input"
_CHOICE_DOMAIN = "domain"
_CHOICE_DATA = "data extent (public)"


def _check_domain(domain: Any) -> Box:
    """Validate ``domain=``; return it with ``lon_max`` unwrapped (>= lon_min, may exceed 180)."""
    try:
        vals = np.asarray(domain, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        vals = np.empty(0)
    if vals.size != 4 or not np.all(np.isfinite(vals)):
        raise InvalidInputError(
            f"domain={domain!r} must be four finite numbers (lon_min, lat_min, lon_max, lat_max) "
            f"in degrees: a public box fixed without looking at the data, e.g. the city or "
            f"country the study covers. {_NOTHING}"
        )
    w, s, e, n = (float(v) for v in vals)
    if not (-180.0 <= w <= 180.0 and -180.0 <= e <= 180.0 and -90.0 <= s < n <= 90.0 and w != e):
        raise InvalidInputError(
            f"domain={domain!r} is not a lon/lat box: need -180 <= lon <= 180, "
            f"-90 <= lat_min < lat_max <= 90 and lon_min != lon_max (lon_min > lon_max means the "
            f"box crosses the antimeridian). {_NOTHING}"
        )
    return (w, s, e + 360.0 if e < w else e, n)


def _area_box(crs: pyproj.CRS) -> Box | None:
    """Return the CRS's published area of use as an unwrapped lon/lat box, or None."""
    area = crs.area_of_use
    if area is None:
        return None
    w, s, e, n = (float(v) for v in area.bounds)
    if not np.all(np.isfinite([w, s, e, n])) or not s < n or w == e:
        return None
    return (w, s, e + 360.0 if e < w else e, n)


def _box_text(box: Box, digits: int = 4) -> str:
    return (
        f"lon {float(_wrap(box[0])):.{digits}f}..{float(_wrap(box[2])):.{digits}f}, "
        f"lat {box[1]:.{digits}f}..{box[3]:.{digits}f}"
    )


def _outside(lon: np.ndarray, lat: np.ndarray, box: Box) -> np.ndarray:
    # Longitude measured eastwards from the box's west edge, so a box across 180 needs no special
    # case; the edges are inside.
    width = box[2] - box[0]
    d = np.mod(lon - box[0], 360.0)
    return (d > width) | (lat < box[1]) | (lat > box[3])


def _bbox_inside(lon: np.ndarray, lat: np.ndarray, box: Box) -> bool:
    """Whether the points' bounding box lies in ``box`` unwrapped (then none is outside it).

    The fast path of :func:`_refuse_outside`. For ``box[0] <= lon <= box[2] < box[0] + 360``,
    ``lon - box[0]`` is in [0, 360), which ``np.mod`` returns unchanged, and is at most the
    box's width by monotone rounding (so :func:`_outside` is False everywhere); NaN
    fails every comparison here, so such input takes the full check (as do points across the
    antimeridian, last example).

    >>> _bbox_inside(np.array([-74.0, -73.5]), np.array([40.6, 40.9]), (-78.0, 0.0, -72.0, 84.0))
    True
    >>> _bbox_inside(np.array([179.5]), np.array([0.0]), (170.0, -10.0, 190.0, 10.0))
    True
    >>> _bbox_inside(np.array([-179.5]), np.array([0.0]), (170.0, -10.0, 190.0, 10.0))
    False
    """
    if lon.size == 0:
        return True
    w, s, e, n = box
    return bool(
        lon.min() >= w and lon.max() <= e and e - w < 360.0
        and lat.min() >= s and lat.max() <= n
    )  # fmt: skip


def _refuse_outside(
    lon: np.ndarray,
    lat: np.ndarray,
    box: Box,
    index: pd.Index,
    cols: tuple[str, str],
    source: str,
    fix: str,
    error: type[InvalidInputError],
) -> None:
    if _bbox_inside(lon, lat, box):  # the usual case: four reductions instead of a full pass
        return
    bad = _outside(lon, lat, box)
    if bad.any():
        n, rows = _rows(bad, index)
        verb = "lies" if n == 1 else "lie"
        raise error(
            f"columns {cols[0]!r}/{cols[1]!r}: {_plural(n, 'point')} {verb} outside {source} "
            f"({_box_text(box)}) {rows}. The metric CRS and scale_max are fixed from that public "
            f"extent so that they reveal nothing about the data; points outside it are not "
            f"covered. {fix} {_NOTHING}"
        )


def _lonlat_of(
    xs: np.ndarray,
    ys: np.ndarray,
    crs_in: pyproj.CRS,
    geod: pyproj.CRS,
    cols: tuple[str, str],
    index: pd.Index,
) -> tuple[np.ndarray, np.ndarray]:
    """Every point's lon/lat in the input's datum (for checking it against a public extent)."""
    if crs_in.is_geographic:
        return xs, ys
    lon, lat = pyproj.Transformer.from_crs(crs_in, geod, always_xy=True).transform(xs, ys)
    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    if bad.any():
        n, rows = _rows(bad, index)
        raise CRSError(
            f"columns {cols[0]!r}/{cols[1]!r}: {_plural(n, 'point')} fall outside the valid area "
            f"of {_describe(crs_in)} {rows}. Check the crs. {_NOTHING}"
        )
    return lon, lat


#: the outline of the data's rectangle is sampled every this many metres
_OUTLINE_STEP_M = 500.0
#: and must lie this many degrees inside the public box (and within 85 degrees of latitude)
_OUTLINE_MARGIN_DEG = 0.01


def _inside_by_outline(
    xs: np.ndarray, ys: np.ndarray, crs_in: pyproj.CRS, geod: pyproj.CRS, box: Box
) -> bool:
    """Tell whether every projected point surely lies in the lon/lat ``box``, from the outline.

    The inverse projection maps the data's bounding rectangle onto the region its outline
    encloses, so when the outline, sampled every ``_OUTLINE_STEP_M`` m, lies
    ``_OUTLINE_MARGIN_DEG`` inside the box (a curve sampled that finely strays metres, not a
    kilometre, between samples), every point does: a few thousand transformed points instead
    of every point (:func:`_lonlat_of`). False means "not shown": the caller then checks every
    point, which also names the rows outside. Geographic input is checked directly.
    """
    if crs_in.is_geographic or xs.size == 0:
        return False
    x0, x1, y0, y1 = float(xs.min()), float(xs.max()), float(ys.min()), float(ys.max())
    if not np.all(np.isfinite([x0, x1, y0, y1])):
        return False
    m = _OUTLINE_MARGIN_DEG
    inner = (box[0] + m, box[1] + m, box[2] - m, box[3] - m)
    if not (inner[0] < inner[2] and -85.0 <= inner[1] < inner[3] <= 85.0):
        return False
    k = int(max(x1 - x0, y1 - y0) * _linear_unit(crs_in)[1] / _OUTLINE_STEP_M) + 2
    if k > 20_000:
        return False
    t = np.linspace(0.0, 1.0, k)
    ex = np.concatenate([x0 + (x1 - x0) * t, np.full(k, x1), x1 - (x1 - x0) * t, np.full(k, x0)])
    ey = np.concatenate([np.full(k, y0), y0 + (y1 - y0) * t, np.full(k, y1), y1 - (y1 - y0) * t])
    lon, lat = pyproj.Transformer.from_crs(crs_in, geod, always_xy=True).transform(ex, ey)
    lon, lat = np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)
    if not np.all(np.isfinite(lon) & np.isfinite(lat)):
        return False
    return not bool(_outside(lon, lat, inner).any())


def _data_box(
    xs: np.ndarray, ys: np.ndarray, crs_in: pyproj.CRS, geod: pyproj.CRS, cols: tuple[str, str]
) -> Box:
    """Return the data's lon/lat bounding box (convenience path only: it depends on every point)."""
    if crs_in.is_geographic:
        lo, hi = _lon_extent(xs)
        return (lo, float(ys.min()), hi, float(ys.max()))
    to_geo = pyproj.Transformer.from_crs(crs_in, geod, always_xy=True)
    b = to_geo.transform_bounds(
        float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()), densify_pts=21
    )
    if not np.all(np.isfinite(b)):
        raise CRSError(
            f"columns {cols[0]!r}/{cols[1]!r} fall outside the valid area of "
            f"{_describe(crs_in)}. Check the crs. {_NOTHING}"
        )
    # transform_bounds reports a box across the antimeridian as east < west: unwrap it.
    return (b[0], b[1], b[2] + 360.0 if b[2] < b[0] else b[2], b[3])


def _coarse_box(box: Box) -> Box:
    """Round a lon/lat box outward to whole degrees (the convenience path's public extent).

    Every point of a 1° cell maps to the same box, so two datasets whose extreme points differ
    only inside their cells get the same CRS and bit-identical ``scale_max``: at most the
    whole-degree cover of the data (about 111 km north-south) can be read back from the output.
    Whole degrees rather than UTM zone boundaries because the box then grows by less than 1° on
    each side, which keeps k_max at or close to 1 (the clamp hides it completely for data near a
    central meridian), whereas a whole 6° zone always includes its edges (k_max up to 1.00098,
    0.1 % more noise for everyone) and data straddling two zones would need a 12° box, too wide
    for any single transverse Mercator.
    """
    w, s, e, n = box
    # Half-open 1° cells [k, k+1): a point exactly on a whole degree opens the next cell, so the
    # box is never empty and depends on the cells the extreme points fall in, nothing more.
    w_c, e_c = float(np.floor(w)), float(np.floor(e)) + 1.0
    s_c = float(min(np.floor(s), 89.0))
    n_c = float(min(np.floor(n) + 1.0, 90.0))
    if w_c >= 180.0:  # the unwrapped box starts east of 180: report it in [-180, 180)
        w_c, e_c = w_c - 360.0, e_c - 360.0
    return (w_c, s_c, e_c, n_c)


def _warn_coarse_extent(box: Box, crs_m: pyproj.CRS) -> None:
    epsg = crs_m.to_epsg()
    fix = f"to_crs='EPSG:{epsg}'" if epsg is not None else "to_crs= (a projected CRS in metres)"
    warnings.warn(
        "no to_crs= or domain= given: the metric CRS and scale_max were chosen from the data's "
        f"extent rounded outward to whole degrees ({_box_text(box, digits=0)}), and that coarse "
        "extent becomes public (it can be read back from the released coordinates and "
        f"scale_max). For a release, pass {fix} or a public domain=(lon_min, lat_min, lon_max, "
        "lat_max) fixed without looking at the data.",
        GpframeWarning,
        stacklevel=_stacklevel_outside_gpframe(),
    )


def _stacklevel_outside_gpframe() -> int:
    """Return the ``stacklevel`` of the first frame outside gpframe, for the caller's warn().

    The warning then points at the user's line whichever entry point they called.
    """
    frame = sys._getframe(2)  # the caller of the function that will call warn()
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


_ASK_DOMAIN = (
    "pass domain=(lon_min, lat_min, lon_max, lat_max): a public box in degrees fixed "
    "without looking at the data (e.g. the study's city or country)"
)


def _named_metric(
    to_crs: Any, domain: Box | None, name: str
) -> tuple[pyproj.CRS, tuple[float, float], Box, str]:
    """Check a named metric CRS; return it, its scale range, its extent and the extent's name.

    The extent is ``domain`` if given, else the CRS's published area of use.
    """
    crs_m = _check_metric_target(_as_crs(to_crs, name), name)
    ext = domain if domain is not None else _area_box(crs_m)
    if ext is None:
        raise CRSError(
            f"{name}={_describe(crs_m)} publishes no area of use, so its scale factor cannot "
            f"be bounded without looking at the data: {_ASK_DOMAIN}. {_NOTHING}"
        )
    source = "domain=" if domain is not None else f"the area of use of {name}={_describe(crs_m)}"
    rng = scale_range(crs_m, *ext)
    if not np.isfinite(rng[1]):
        raise CRSError(
            f"{name}={_describe(crs_m)} is not defined over all of {source} "
            f"({_box_text(ext)}). Name a CRS that covers it, or {_ASK_DOMAIN}. {_NOTHING}"
        )
    return crs_m, rng, ext, source


@dataclass(frozen=True)
class MetricFrame:
    """A named projected metre CRS with the public extent its scale bound holds over.

    Made by :func:`metric_frame` for callers that receive coordinates already in metres (the
    DuckDB functions): :attr:`scale_max` divides eps (``rho / scale_max**2``) exactly as the
    accessor's ``to_crs=`` path does, and :meth:`outside` finds the points that cannot be
    metres of the CRS inside that extent.
    """

    crs: pyproj.CRS
    scale_max: float
    extent: Box
    source: str
    #: how messages name the CRS (e.g. ``EPSG:32724``)
    label: str
    #: the extent's outline projected into the CRS (densified), a shapely Polygon. The check
    #: runs in projected metres with shapely only: pyproj objects crashed the process when
    #: used from DuckDB's worker threads
    footprint: Any = field(repr=False, compare=False)
    #: the smallest point scale factor over :attr:`extent`
    scale_min: float = 1.0

    @property
    def noise_inflation(self) -> float:
        """Worst ground noise over :attr:`extent` as a multiple of the nominal noise.

        ``scale_max / scale_min`` (:func:`noise_inflation`; ``docs/wide-extents.md``).
        """
        return noise_inflation((self.scale_min, self.scale_max))

    def outside(self, xy: np.ndarray) -> np.ndarray:
        """Boolean mask of the points (metres of :attr:`crs`) outside the projected extent."""
        import shapely

        xy = np.asarray(xy, dtype=np.float64)
        return ~shapely.contains_xy(self.footprint, xy[:, 0], xy[:, 1])


#: vertices per edge of a projected extent, and the tolerance (metres) added around it for the
#: chords between them (a chord of a curved edge lies inside it by well under a metre)
_FOOTPRINT_VERTICES, _FOOTPRINT_TOL_M = 721, 1.0


def _footprint(crs_m: pyproj.CRS, box: Box) -> Any:
    """Return the lon/lat box's outline projected into ``crs_m``, as a polygon in metres."""
    import shapely

    w, s, e, n = box
    t = np.linspace(0.0, 1.0, _FOOTPRINT_VERTICES)
    lon = np.concatenate([w + (e - w) * t, np.full_like(t, e), e - (e - w) * t, np.full_like(t, w)])
    lat = np.concatenate([np.full_like(t, s), s + (n - s) * t, np.full_like(t, n), n - (n - s) * t])
    lat = np.clip(lat, -89.999, 89.999)
    fwd = pyproj.Transformer.from_crs(crs_m.geodetic_crs, crs_m, always_xy=True)
    x, y = fwd.transform(_wrap(lon), lat, errcheck=False)
    xy = np.column_stack([x, y])
    xy = xy[np.isfinite(xy).all(axis=1)]
    poly = shapely.make_valid(shapely.Polygon(xy)).buffer(_FOOTPRINT_TOL_M)
    shapely.prepare(poly)
    return poly


def metric_frame(crs: Any, domain: Any = None, *, name: str = "crs") -> MetricFrame:
    """Check ``crs`` (a projected metre CRS) and bound its scale factor, as ``to_crs=`` does.

    Examples
    --------
    >>> f = metric_frame("EPSG:32724")
    >>> f.crs.to_epsg(), round(f.scale_max, 6), round(f.noise_inflation, 6)
    (32724, 1.000981, 1.001382)
    >>> f.outside(np.array([[500_000.0, 8_800_000.0], [-37.05, -10.9]])).tolist()
    [False, True]
    """
    dom = _check_domain(domain) if domain is not None else None
    crs_m, rng, ext, source = _named_metric(crs, dom, name)
    _warn_named_inflation(crs_m, rng, ext, source, name, crs_m.geodetic_crs)
    return MetricFrame(
        crs=crs_m, scale_max=max(1.0, rng[1]), extent=ext, source=source,
        label=crs_m.to_string(), footprint=_footprint(crs_m, ext), scale_min=rng[0],
    )  # fmt: skip


def _root(a: np.ndarray) -> Any:
    """Return the object that owns ``a``'s memory (the end of its ``.base`` chain)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def _pair(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``np.column_stack([xs, ys])``'s values, as a read-only view when no copy is needed.

    pandas keeps a frame's float64 columns in one 2-D block, a column per row of it (and a
    point geometry's coordinates come as one (n, 2) array): x and y are then one strided
    (n, 2) array already, and a copy would cost 16 bytes per point at the peak of every
    operation that reads the projected points. The view has the same values; it is made only
    when x and y have the same stride and y lies a fixed whole number of elements from x in
    the same buffer (so every element it reads is one of x's or y's), else they are copied.

    >>> block = np.arange(6.0).reshape(2, 3)
    >>> v = _pair(block[0], block[1])
    >>> v.tolist(), np.shares_memory(v, block), v.flags.writeable
    ([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], True, False)
    >>> xy = np.arange(6.0).reshape(3, 2)
    >>> np.shares_memory(_pair(xy[:, 0], xy[:, 1]), xy)         # an (n, 2) array's columns
    True
    >>> _pair(np.zeros(2), np.ones(2)).flags.c_contiguous    # separate arrays: a copy
    True
    """
    f8 = np.dtype(np.float64)
    if (
        xs.dtype == f8 and ys.dtype == f8 and xs.ndim == ys.ndim == 1 and xs.size == ys.size > 1
        and xs.strides == ys.strides and _root(xs) is _root(ys)
    ):  # fmt: skip
        gap = ys.__array_interface__["data"][0] - xs.__array_interface__["data"][0]
        if gap != 0 and gap % f8.itemsize == 0:  # y after x, or before it
            return np.lib.stride_tricks.as_strided(
                xs, shape=(xs.size, 2), strides=(xs.strides[0], gap), writeable=False
            )
    return np.column_stack([xs, ys])


def _transformed(
    tr: pyproj.Transformer, xs: np.ndarray, ys: np.ndarray, threads: int | None = 1
) -> np.ndarray:
    """``tr.transform(xs, ys)`` as one new (2, n) float64 buffer, on several cores if large.

    The points are copied into the buffer, which PROJ transforms in place. PROJ maps each
    point on its own and pyproj releases the GIL meanwhile (its Transformer is thread-safe
    since 3.1), so row ranges transformed at once give the same floats as one call:
    ``threads`` as in :func:`gpframe.mechanisms.row_ranges.cores_for` (1: one call). Two
    cores take 0.06 s instead of 0.11 s for 10⁶ lon/lat points to UTM.

    >>> tr = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
    >>> lon, lat = np.linspace(-75, -74, 200_000), np.linspace(40, 41, 200_000)
    >>> x, y = tr.transform(lon, lat)
    >>> buf = _transformed(tr, lon, lat, threads=2)
    >>> bool((buf[0] == x).all() and (buf[1] == y).all())
    True
    """
    from gpframe.mechanisms.row_ranges import cores_for, run_in_ranges

    buf = np.empty((2, len(xs)), dtype=np.float64)

    def work(lo: int, hi: int) -> None:
        buf[0, lo:hi], buf[1, lo:hi] = xs[lo:hi], ys[lo:hi]
        tr.transform(buf[0, lo:hi], buf[1, lo:hi], inplace=True)

    run_in_ranges(work, len(xs), cores_for(len(xs), threads), name="gp-proj")
    return buf


def _transform_pair(
    tr: pyproj.Transformer, xs: np.ndarray, ys: np.ndarray, threads: int | None = 1
) -> np.ndarray:
    """``np.column_stack(tr.transform(xs, ys))``'s values, as a read-only (n, 2) view.

    The points are copied once into a (2, n) buffer that PROJ transforms in place, and the
    result is that buffer seen as (n, 2) (x and y each contiguous, as :func:`_pair` gives for
    a frame's columns): the same floats as transforming copies and stacking them, without
    pyproj's two copies and the stack (16 bytes a point fewer at the peak). ``threads``: see
    :func:`_transformed`.

    >>> tr = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:32618", always_xy=True)
    >>> lon, lat = np.array([-75.0, -74.5]), np.array([40.0, 40.5])
    >>> xy = _transform_pair(tr, lon, lat)
    >>> bool((xy == np.column_stack(tr.transform(lon, lat))).all()), xy.flags.writeable
    (True, False)
    """
    xy = _transformed(tr, xs, ys, threads).T
    xy.flags.writeable = False
    return xy


def _project(
    xs: np.ndarray,
    ys: np.ndarray,
    crs_in: pyproj.CRS,
    to_crs: Any,
    domain: Box | None,
    index: pd.Index,
    cols: tuple[str, str],
    tol: float,
    threads: int | None = 1,
) -> tuple[np.ndarray, pyproj.CRS, tuple[float, float], pyproj.Transformer | None, str, Box]:
    _check_input_crs(xs, ys, crs_in, index, cols)
    geod = crs_in if crs_in.is_geographic else crs_in.geodetic_crs

    # Everything up to the containment check below reads only public inputs (the CRSs, domain=,
    # max_scale_error), never xs/ys: that is what keeps crs_m and scale_max data-independent.
    ask_domain = _ASK_DOMAIN
    crs_m: pyproj.CRS | None = None
    if to_crs is not None:
        crs_m, rng, ext, source = _named_metric(to_crs, domain, "to_crs")
        choice = _CHOICE_TO_CRS
        _warn_named_inflation(crs_m, rng, ext, source, "to_crs", geod)
    else:
        source = ""
        if (
            crs_in.is_projected
            and _linear_unit(crs_in)[1] == 1.0
            and not _is_pseudo_mercator(crs_in)
        ):
            ext = domain if domain is not None else _area_box(crs_in)
            if ext is None:
                raise CRSError(
                    f"the input CRS {_describe(crs_in)} publishes no area of use, so whether it "
                    f"can be used as is (and its scale_max) cannot be decided without looking at "
                    f"the data: {ask_domain}, or name the metric CRS with to_crs=. {_NOTHING}"
                )
            rng = scale_range(crs_in, *ext)
            if _within(rng, tol):
                crs_m, choice = crs_in, _CHOICE_INPUT
                source = (
                    "domain="
                    if domain is not None
                    else f"the area of use of the input CRS {_describe(crs_in)}"
                )
        if crs_m is None and domain is not None:
            ext = domain
            crs_m, rng = metric_crs_for(
                *domain, geodetic=geod, max_scale_error=tol, label="domain="
            )
            choice, source = _CHOICE_DOMAIN, "domain="
        if crs_m is None:
            # The convenience path: the box, hence crs_m and scale_max, come from the data, but
            # only through its whole-degree cover: nothing finer than a degree can be read back.
            ext = _coarse_box(_data_box(xs, ys, crs_in, geod, cols))
            crs_m, rng = metric_crs_for(
                *ext,
                geodetic=geod,
                max_scale_error=tol,
                label="the data's extent rounded outward to whole degrees",
            )
            choice = _CHOICE_DATA
            _warn_coarse_extent(ext, crs_m)

    if choice != _CHOICE_DATA and not _inside_by_outline(xs, ys, crs_in, geod, ext):
        lon, lat = _lonlat_of(xs, ys, crs_in, geod, cols, index)
        if source == "domain=":
            fix = (
                "Widen domain= to a public box that covers every point you may analyse (fixed "
                "from public knowledge, not from these points), or drop those rows."
            )
            err: type[InvalidInputError] = InvalidInputError
        else:
            fix = f"Drop those rows, name a to_crs= whose area of use covers them, or {ask_domain}."
            err = CRSError
        _refuse_outside(lon, lat, ext, index, cols, source, fix, err)

    if crs_m.equals(crs_in, ignore_axis_order=True):
        return _pair(xs, ys), crs_in, rng, None, choice, ext
    fwd = pyproj.Transformer.from_crs(crs_in, crs_m, always_xy=True)
    back = pyproj.Transformer.from_crs(crs_m, crs_in, always_xy=True)
    xy = _transform_pair(fwd, xs, ys, threads)
    # one flat test first (a row-wise all() over two columns is many times slower): the rows
    # are only needed to name them in the error
    if not np.isfinite(xy).all():
        bad = ~np.isfinite(xy).all(axis=1)
        n, rows = _rows(bad, index)
        raise CRSError(
            f"columns {cols[0]!r}/{cols[1]!r}: {n} {'point' if n == 1 else 'points'} could not be "
            f"projected to {_describe(crs_m)} {rows}. Check the input CRS {_describe(crs_in)}. "
            f"{_NOTHING}"
        )
    if choice == _CHOICE_TO_CRS and not _exact_conversion(crs_in, crs_m, rng, tol):
        _refuse_lossy_round_trip(xs, ys, xy, crs_in, crs_m, back, index, cols, threads)
    return xy, crs_m, rng, back, choice, ext


def _exact_conversion(
    crs_in: pyproj.CRS, crs_m: pyproj.CRS, rng: tuple[float, float], tol: float
) -> bool:
    """Whether a named ``to_crs=`` is what the automatic choice trusts without a round trip.

    Lon/lat input to a transverse Mercator (a UTM zone) on the input's own datum, with its
    scale factor within ``tol`` over the extent (the points were checked to lie inside it):
    exactly the CRS :func:`metric_crs_for` picks for such an extent, whose points are never
    round-tripped. No datum changes, so no shift grid can be missing; what is left is PROJ's
    transverse Mercator (Poder/Engsager), whose inverse returns within nanometres inside the
    zone, far below the lattice spacing (``tests/unit/geo/test_geo_to_crs.py`` checks it over
    a zone). Every other named CRS takes :func:`_refuse_lossy_round_trip`.
    """
    if not crs_in.is_geographic or not crs_m.is_projected or not _within(rng, tol):
        return False
    op = crs_m.coordinate_operation
    if op is None or op.method_name != "Transverse Mercator":
        return False
    return bool(crs_m.geodetic_crs.equals(crs_in, ignore_axis_order=True))


def _round_trip_metres(
    xs: np.ndarray, ys: np.ndarray, bx: np.ndarray, by: np.ndarray, crs_in: pyproj.CRS
) -> np.ndarray:
    """Geodesic distances (m) between lon/lat points and their round trips, or upper bounds.

    The geodesic is no longer than the path along the meridian, then along the parallel:
    ``|dlat| * a**2 / b + |dlon| * a`` in radians (the meridian's radius of curvature is at
    most ``a**2 / b``, a parallel's radius at most ``a``). Where that bound (with a relative
    slack of 1e-9 for its rounding) is already within ``G_LOC`` it stands in for the distance;
    the exact geodesic (:meth:`pyproj.Geod.inv`) is computed only for the other points. A
    point the bound passes is within ``G_LOC``; one it does not pass is decided by the
    geodesic, as before, so the refusals are the geodesic's (up to its own rounding, about
    1e-8 m), for a fraction of its cost: an exact round trip is off by about 1e-9 degrees.
    """
    from gpframe.mechanisms.calibration import G_LOC

    ell = crs_in.ellipsoid
    a = float(ell.semi_major_metre) if ell is not None else float("nan")
    b = float(ell.semi_minor_metre) if ell is not None else float("nan")
    dlon = np.abs(np.mod(bx - xs + 180.0, 360.0) - 180.0)
    bound = (np.abs(by - ys) * (a * a / b) + dlon * a) * (np.pi / 180.0) * (1 + 1e-9)
    far = ~(bound <= float(G_LOC))  # NaN bounds (no ellipsoid, NaN points) take the geodesic
    if not far.any():
        return bound
    _, _, d = crs_in.get_geod().inv(xs[far], ys[far], bx[far], by[far])
    bound[far] = np.asarray(d, dtype=np.float64)
    return bound


def _refuse_lossy_round_trip(
    xs: np.ndarray,
    ys: np.ndarray,
    xy: np.ndarray,
    crs_in: pyproj.CRS,
    crs_m: pyproj.CRS,
    back: pyproj.Transformer,
    index: pd.Index,
    cols: tuple[str, str],
    threads: int | None = 1,
) -> None:
    """Refuse a ``to_crs=`` whose round trip from the input does not come back within g.

    A datum shift without its grid (NAD27 in Alaska: 141 m) would move every released point by
    that much on the way back to the input CRS, noise or not; g = 2⁻¹⁰ m is the lattice spacing
    the mechanisms guarantee their points on.
    """
    from gpframe.mechanisms.calibration import G_LOC

    bx, by = _transformed(back, xy[:, 0], xy[:, 1], threads)
    if crs_in.is_geographic:
        d = _round_trip_metres(xs, ys, bx, by, crs_in)
    else:
        d = np.hypot(bx - xs, by - ys) * _linear_unit(crs_in)[1]
    bad = ~(d <= float(G_LOC))
    if bad.any():
        n, rows = _rows(bad, index)
        worst = float(np.nanmax(np.where(np.isfinite(d), d, np.inf)))
        raise CRSError(
            f"to_crs={_describe(crs_m)}: {_plural(n, 'point')} of columns {cols[0]!r}/{cols[1]!r} "
            f"do not come back to the input CRS {_describe(crs_in)} within the lattice spacing "
            f"2**-10 m (up to {worst:.3g} m) {rows}: the transformation between their datums "
            "is approximate there (a missing shift grid), so released points would move by that "
            "much. Name a to_crs= on the input's datum (e.g. its UTM zone on that datum), or omit "
            f"to_crs= and give domain= so that gpframe chooses one. {_NOTHING}"
        )


def _warn_named_inflation(
    crs_m: pyproj.CRS, rng: tuple[float, float], ext: Box, source: str, name: str, geod: Any
) -> None:
    """Warn when a named metric CRS inflates the noise by more than WARN_INFLATION over its extent.

    The message names the factor and what gpframe's own choice for the same public extent
    would give (``docs/wide-extents.md``).
    """
    f = noise_inflation(rng)
    if not f > WARN_INFLATION:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            auto, rng_a = metric_crs_for(*ext, geodetic=geod)
        alt = (
            f" gpframe's own choice for that extent ({auto.name}) would give "
            f"{noise_inflation(rng_a):.4g}: omit {name}= and pass domain= instead, or name a CRS "
            "suited to the extent (docs/wide-extents.md)."
        )
    except CRSError:
        alt = " Pass a smaller public domain= (docs/wide-extents.md)."
    warnings.warn(
        f"{name}={_describe(crs_m)}: its scale factor over {source} ({_box_text(ext, 2)}) "
        f"ranges {rng[0]:.4g}..{rng[1]:.4g}, so eps is divided by scale_max = "
        f"{max(1.0, rng[1]):.4g} and the noise on the ground is up to {f:.4g} times the "
        f"nominal noise.{alt}",
        GpframeWarning,
        stacklevel=_stacklevel_outside_gpframe(),
    )


# --------------------------------------------------------------------------------------------------
# regions


def _geometry_array(geoms: Any) -> tuple[np.ndarray, pd.Index, pyproj.CRS | None]:
    """Normalise a geometry, sequence, GeoSeries or GeoDataFrame to (array, labels, crs)."""
    if isinstance(geoms, pd.DataFrame):
        if not _has_active_geometry(geoms):
            raise InvalidInputError(f"the frame has no active geometry column. {_NOTHING}")
        geoms = geoms.geometry
    if isinstance(geoms, pd.Series):
        crs = getattr(geoms, "crs", None)
        return np.asarray(geoms.array, dtype=object), geoms.index, crs
    if isinstance(geoms, shapely.Geometry) or geoms is None:
        return np.array([geoms], dtype=object), pd.RangeIndex(1), None
    arr = np.asarray(geoms, dtype=object).ravel()
    return arr, pd.RangeIndex(arr.size), None


def validate_polygons(geoms: Any, name: str = "region") -> None:
    """Refuse anything but valid, non-empty (Multi)Polygons with finite coordinates.

    Parameters
    ----------
    geoms : shapely geometry, sequence of geometries, GeoSeries or GeoDataFrame
    name : str
        How the message refers to the argument.

    Raises
    ------
    InvalidInputError
        Naming ``name``, the number of bad polygons, the first few labels and, for invalid ones, why
        (``shapely.is_valid_reason``) with the repair to try (``shapely.make_valid``).

    Examples
    --------
    >>> validate_polygons(shapely.box(0, 0, 1, 1))
    >>> bowtie = shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)])
    >>> validate_polygons(bowtie, name="downtown")
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: downtown has 1 invalid polygon (rows 0: Self-intersection...
    """
    arr, labels, _ = _geometry_array(geoms)
    if arr.size == 0:
        raise InvalidInputError(f"{name} is empty: pass at least one polygon. {_NOTHING}")
    try:
        missing = shapely.is_missing(arr) | shapely.is_empty(arr)
    except TypeError:
        raise InvalidInputError(
            f"{name} must hold shapely geometries; got {type(arr[0]).__name__}. {_NOTHING}"
        ) from None
    if missing.any():
        n, rows = _rows(missing, labels)
        raise InvalidInputError(
            f"{name} has {n} missing or empty {'geometry' if n == 1 else 'geometries'} {rows}. "
            f"Drop them first. {_NOTHING}"
        )
    kinds = shapely.get_type_id(arr)
    notpoly = ~np.isin(kinds, [shapely.GeometryType.POLYGON, shapely.GeometryType.MULTIPOLYGON])
    if notpoly.any():
        n, rows = _rows(notpoly, labels)
        seen = sorted(
            {shapely.GeometryType(int(k)).name.title() for k in np.unique(kinds[notpoly])}
        )
        raise InvalidInputError(
            f"{name} has {n} non-polygon {'geometry' if n == 1 else 'geometries'} "
            f"({', '.join(seen)}) {rows}; a region must be a Polygon or MultiPolygon (buffer "
            f"points or lines first, e.g. geom.buffer(100) in metres). {_NOTHING}"
        )
    coords, which = shapely.get_coordinates(arr, return_index=True)
    nonfinite = np.zeros(arr.size, dtype=bool)
    nonfinite[which[~np.isfinite(coords).all(axis=1)]] = True
    if nonfinite.any():
        n, rows = _rows(nonfinite, labels)
        raise InvalidInputError(
            f"{name} has {_plural(n, 'polygon')} with NaN/inf coordinates {rows}. {_NOTHING}"
        )
    invalid = ~shapely.is_valid(arr)
    if invalid.any():
        bad = np.flatnonzero(invalid)
        reasons = shapely.is_valid_reason(arr[bad[:_SHOW]])
        parts = ", ".join(f"{labels[i]}: {r}" for i, r in zip(bad[:_SHOW], reasons, strict=True))
        more = ", ..." if bad.size > _SHOW else ""
        raise InvalidInputError(
            f"{name} has {_plural(int(bad.size), 'invalid polygon')} (rows {parts}{more}). Repair "
            "with shapely.make_valid(geom) (GeoSeries: .make_valid()) and check the result is the "
            f"area you meant. {_NOTHING}"
        )


def project_geometry(
    geom_or_series: Any, crs_in: Any, crs_m: Any, *, name: str | None = None
) -> Any:
    """Project geometries (regions, query points) into the metric CRS, vertex by vertex, vectorised.

    Parameters
    ----------
    geom_or_series : shapely geometry, sequence, GeoSeries or GeoDataFrame
        Bare shapely geometries are taken to be in ``crs_in``, the data's CRS (one CRS for
        data and regions). A GeoSeries/GeoDataFrame with its own CRS is projected from that CRS.
    crs_in, crs_m : CRS-like
        Source and target CRS.
    name : str, optional
        The caller's argument name (``"region"``, ``"point"``, ...), put in error messages.

    Returns
    -------
    The same kind of object: a shapely geometry, an object ndarray, or a GeoSeries in ``crs_m``.
    Vertices are transformed; edges are not densified, so each edge stays a straight segment
    in ``crs_m``.

    Examples
    --------
    >>> sq = shapely.box(-74.0, 40.7, -73.99, 40.71)
    >>> m = project_geometry(sq, "EPSG:4326", "EPSG:32618")
    >>> round(m.area / 1e6, 3)   # km²
    0.938
    """
    src_default = _horizontal(_as_crs(crs_in, "crs_in"))
    dst = _horizontal(_as_crs(crs_m, "crs_m"))
    if isinstance(geom_or_series, pd.DataFrame):
        if not _has_active_geometry(geom_or_series):
            raise InvalidInputError(f"the frame has no active geometry column. {_NOTHING}")
        geom_or_series = geom_or_series.geometry
    series_crs = (
        getattr(geom_or_series, "crs", None) if isinstance(geom_or_series, pd.Series) else None
    )
    src = _horizontal(pyproj.CRS(series_crs)) if series_crs is not None else src_default
    arr, labels, _ = _geometry_array(geom_or_series)
    if src.equals(dst, ignore_axis_order=True):
        out = arr.copy()
    else:
        tr = pyproj.Transformer.from_crs(src, dst, always_xy=True)

        def _fn(c: np.ndarray) -> np.ndarray:
            ex, ny = tr.transform(c[:, 0], c[:, 1])
            return np.column_stack([ex, ny])

        out = shapely.transform(arr, _fn)
        coords, which = shapely.get_coordinates(out, return_index=True)
        bad = np.zeros(arr.size, dtype=bool)
        bad[which[~np.isfinite(coords).all(axis=1)]] = True
        if bad.any():
            n, rows = _rows(bad, labels)
            what = f"{name}: " if name else ""
            raise CRSError(
                f"{what}{_plural(n, 'geometry')} could not be projected from {_describe(src)} to "
                f"{_describe(dst)} {rows}: they lie outside its valid area. Check the CRS the "
                f"geometry is given in (set it on a GeoSeries). {_NOTHING}"
            )
    if isinstance(geom_or_series, pd.Series):
        import geopandas as gpd

        return gpd.GeoSeries(out, index=labels, crs=dst, name=geom_or_series.name)
    if isinstance(geom_or_series, shapely.Geometry):
        return out[0]
    return out


# --------------------------------------------------------------------------------------------------
# outputs


def points_array(xs: np.ndarray, ys: np.ndarray, crs: Any, threads: int | None = 1) -> Any:
    """``geopandas.points_from_xy(xs, ys, crs=crs)`` with Python's cyclic GC paused meanwhile.

    Creating 10⁶ shapely points allocates 10⁶ Python objects, which triggers the collector
    hundreds of times, each pass walking every object alive: 0.85 s of the 1.0 s spent here at
    10⁶ points, 0.18 s with the collector paused (measured by ``benchmarks/speed/user_path.py
    --ops privatize``). No reference cycle is created meanwhile, and the collector is restored
    as it was, whatever happens.

    ``threads`` (as in :func:`gpframe.mechanisms.row_ranges.cores_for`; 1: one call): GEOS
    builds the points with the GIL released for part of the work, so row ranges built at once
    on two cores take about 0.6 of one call's time at 10⁷ points. The points are the same.

    >>> points_array(np.array([1.0]), np.array([2.0]), "EPSG:32618")[0].wkt
    'POINT (1 2)'
    >>> xs = np.arange(200_000.0)
    >>> bool((points_array(xs, -xs, None, threads=2) == points_array(xs, -xs, None)).all())
    True
    """
    import gc

    import geopandas as gpd

    from gpframe.mechanisms.row_ranges import cores_for, run_in_ranges

    workers = cores_for(len(xs), threads)
    was_on = gc.isenabled()
    gc.disable()
    try:
        if workers <= 1:
            return gpd.points_from_xy(xs, ys, crs=crs)
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        out = np.empty(len(xs), dtype=object)

        def work(lo: int, hi: int) -> None:
            shapely.points(xs[lo:hi], ys[lo:hi], out=out[lo:hi])

        run_in_ranges(work, len(xs), workers, name="gp-points")
        # what points_from_xy wraps its shapely.points array in
        return gpd.array.GeometryArray(out, crs=crs)
    finally:
        if was_on:
            gc.enable()


def points_frame(
    xy_in: np.ndarray | tuple[np.ndarray, np.ndarray],
    index: pd.Index,
    crs_in: Any,
    like: pd.DataFrame | None = None,
    *,
    x: str | None = None,
    y: str | None = None,
) -> pd.DataFrame:
    """Build an output frame of points in the input CRS, keeping the input index.

    Parameters
    ----------
    xy_in : ndarray (n, 2) or tuple (x, y)
        Coordinates in ``crs_in`` (e.g. from :meth:`Projected.to_input_crs`).
    index : pandas.Index
        Row labels of the result.
    crs_in : CRS-like
        CRS of the coordinates.
    like : DataFrame, optional
        The input frame. A GeoDataFrame gives a copy with its active geometry replaced; a DataFrame
        with ``x=``/``y=`` column names gives a copy with those columns replaced (DataFrame in,
        DataFrame out). Its length must match.
    x, y : str, optional
        Coordinate column names for a plain DataFrame ``like``.

    Returns
    -------
    GeoDataFrame (or DataFrame when ``like`` is a plain DataFrame with ``x``/``y``).

    Examples
    --------
    >>> xy = (np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    >>> out = points_frame(xy, pd.Index([10, 20]), "EPSG:32618")
    >>> list(out.index), out.crs.to_epsg(), out.geometry.x.tolist()
    ([10, 20], 32618, [1.0, 2.0])
    """
    import geopandas as gpd

    if isinstance(xy_in, tuple):
        xs, ys = (np.asarray(a, dtype=np.float64) for a in xy_in)
    else:
        arr = np.asarray(xy_in, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise InvalidInputError(f"xy_in must have shape (n, 2); got {arr.shape}. {_NOTHING}")
        xs, ys = arr[:, 0], arr[:, 1]
    if not (xs.shape == ys.shape == (len(index),)):
        raise InvalidInputError(
            f"points_frame: {xs.shape[0]} x values, {ys.shape[0]} y values and {len(index)} index "
            f"labels must match. {_NOTHING}"
        )
    crs = _as_crs(crs_in, "crs_in")
    if like is not None and len(like) != len(index):
        raise InvalidInputError(
            f"points_frame: like= has {len(like)} rows but there are {len(index)} points. "
            f"{_NOTHING}"
        )
    if like is not None and x is not None and y is not None:
        out = like.copy()
        out.index = index
        out[x] = xs
        out[y] = ys
        return out
    pts = points_array(xs, ys, crs)
    if isinstance(like, gpd.GeoDataFrame) and _has_active_geometry(like):
        out = like.copy()
        out.index = index
        gname = like.geometry.name
        out[gname] = gpd.GeoSeries(pts, index=index, crs=crs)
        return out.set_geometry(gname, crs=crs) if out.crs is None else out
    return gpd.GeoDataFrame(geometry=pts, index=index, crs=crs)
