"""``Raster``: a private density grid with its transform, CRS, privacy statement and exports.

Returned by ``df.geopriv(...).kde_raster(...)`` (``docs/operations/kde.md``: Rasters; Liang & Yi,
'Adaptive Privacy Budgeting' (2026), Alg. 7). It is a :class:`~gpframe.results.Result` whose
``value`` is the 2-D numpy array (row 0 = north), plus the georeferencing: ``transform`` is the GDAL
/ ``affine`` 6-tuple (a, b, c, d, e, f) with x = a·col + b·row + c and y = d·col + e·row + f at the
cell's upper-left corner, and ``crs`` the projected metre CRS the grid lives in. Everything here is
post-processing of released values.

Why the grid is not in the input CRS: the density is estimated per square metre on equal square
cells, which exist only in a metric CRS (the one the query projected to, ``crs``). In longitude /
latitude the same cells are neither square nor equal, and resampling them onto a degree grid
would blend neighbouring cells and change the values. So the array stays in ``crs``, and the
input CRS is one call away without resampling: :meth:`Raster.cells` returns every cell as a
polygon with its density, in ``crs_in`` (the data's CRS) or any other CRS, and
:meth:`Raster.plot` reprojects an ``outline`` given with its CRS onto the grid.

Optional dependencies are imported inside the methods: matplotlib for :meth:`Raster.plot`,
xarray for :meth:`Raster.to_xarray`, rasterio for :meth:`Raster.to_geotiff`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpframe.results.base import Result, _fmt

__all__ = ["Raster"]


@dataclass(frozen=True, eq=False, repr=False)
class Raster(Result):
    """A density raster (``value``: ndarray (ny, nx), row 0 north) with transform and CRS.

    Attributes
    ----------
    transform : tuple of 6 floats
        (a, b, c, d, e, f) as in GDAL / ``affine.Affine``: x = a·col + b·row + c,
        y = d·col + e·row + f.
    crs : str
        The grid's CRS (a projected metre CRS, e.g. ``"EPSG:32618"``), as WKT or an authority
        string. Not the input's CRS when the data came in degrees (module docstring: why).
    crs_in : str or None
        The CRS of the input data (e.g. ``"EPSG:4326"``); :meth:`cells` returns the cells in it.
    units : str
        What a cell holds, e.g. ``"density (per m², integrates to 1)"``.

    Examples
    --------
    >>> import pandas as pd
    >>> r = Raster(value=np.ones((2, 3)), transform=(100.0, 0.0, 0.0, 0.0, -100.0, 200.0),
    ...            crs="EPSG:32618", kind="cgp", charges=pd.Series([1e-4, 1e-4]), query_id="q-1")
    >>> r.shape, r.bounds, r.cell_m
    ((2, 3), (0.0, 0.0, 300.0, 200.0), 100.0)
    >>> r  # doctest: +NORMALIZE_WHITESPACE
    Raster(value=<2×3 raster, 100 m cells>, charged=2 users, excluded=0,
           spent_max=rho=0.0001 m⁻², query_id=q-1)
    >>> r.cell_centres()[0][:2].tolist(), r.cell_centres()[1][:, 0].tolist()
    ([50.0, 150.0], [150.0, 50.0])
    >>> r.cells(crs="EPSG:4326").crs.to_epsg(), len(r.cells())
    (4326, 6)
    """

    transform: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, -1.0, 0.0)
    crs: Any = None
    crs_in: Any = None
    units: str = "density (per m², integrates to 1)"
    error_kind: str = "max cell error (per m²)"
    mechanism: str = "gaussian_cgp"
    spec: str = (
        "docs/operations/kde.md and docs/noise.md (rasters); Liang & Yi, 'Adaptive Privacy "
        "Budgeting' (2026), Alg. 7"
    )

    # ------------------------------------------------------------------ geometry

    @property
    def array(self) -> np.ndarray:
        """The raster as a 2-D float64 array (row 0 = north)."""
        return np.asarray(self.value, dtype=np.float64)

    @property
    def shape(self) -> tuple[int, int]:
        """(ny, nx)."""
        return tuple(self.array.shape)  # type: ignore[return-value]

    @property
    def cell_m(self) -> float:
        """Cell side (metres of the grid's CRS)."""
        return float(self.transform[0])

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(xmin, ymin, xmax, ymax) of the grid in its CRS."""
        a, _, c, _, e, f = self.transform
        ny, nx = self.shape
        return (float(c), float(f + e * ny), float(c + a * nx), float(f))

    def cell_centres(self) -> tuple[np.ndarray, np.ndarray]:
        """(x of each column's centre, y of each row's centre as a column vector)."""
        a, _, c, _, e, f = self.transform
        ny, nx = self.shape
        xs = c + a * (np.arange(nx) + 0.5)
        ys = f + e * (np.arange(ny) + 0.5)
        return xs, ys[:, None]

    @property
    def mass(self) -> float:
        """Σ cells × cell area: the share of the estimated density inside the grid."""
        return float(self.array.sum()) * abs(self.transform[0] * self.transform[4])

    def cells(self, crs: Any = None) -> Any:
        """Return every cell as a polygon with its density, in ``crs`` (default: the input's CRS).

        The exact cells of the grid, reprojected vertex by vertex: no resampling, so the values
        are the raster's own (density per m² of the metric CRS ``self.crs``).

        Parameters
        ----------
        crs : CRS-like, optional
            Target CRS. None: ``crs_in`` (the data's CRS), or the grid's own when unknown.

        Returns
        -------
        geopandas.GeoDataFrame
            One row per cell, row-major from the north-west corner: ``row``, ``col``,
            ``density`` and the cell polygon.
        """
        import geopandas as gpd
        import shapely

        a, _, c, _, e, f = self.transform
        ny, nx = self.shape
        col, row = np.meshgrid(np.arange(nx), np.arange(ny))
        x0 = c + a * col.ravel()
        y0 = f + e * row.ravel()
        boxes = shapely.box(x0, y0 + e, x0 + a, y0)
        out = gpd.GeoDataFrame(
            {"row": row.ravel(), "col": col.ravel(), "density": self.array.ravel()},
            geometry=boxes, crs=self._crs_obj(),
        )  # fmt: skip
        target = crs if crs is not None else self.crs_in
        return out if target is None or out.crs is None else out.to_crs(target)

    def _value_summary(self) -> str:
        ny, nx = self.shape
        return f"<{ny}×{nx} raster, {_fmt(self.cell_m)} m cells>"

    # ------------------------------------------------------------------ exports

    def _crs_obj(self) -> Any:
        import pyproj

        return None if self.crs is None else pyproj.CRS(self.crs)

    def to_xarray(self) -> Any:
        """Return the raster as an ``xarray.DataArray`` with ``x`` / ``y`` cell-centre coordinates.

        The CRS (WKT), transform, units and privacy statement are in ``attrs``. Needs xarray.
        """
        try:
            import xarray as xr
        except ImportError as exc:
            raise ImportError(
                "Raster.to_xarray() needs xarray: pip install 'gpframe[raster]'"
            ) from exc
        xs, ys = self.cell_centres()
        crs = self._crs_obj()
        return xr.DataArray(
            self.array,
            dims=("y", "x"),
            coords={"y": ys[:, 0], "x": xs},
            name="kde",
            attrs={
                "crs": crs.to_wkt() if crs is not None else "",
                "transform": tuple(self.transform),
                "units": self.units,
                "privacy": self.privacy_statement(),
                "query_id": self.query_id,
            },
        )

    def to_geotiff(self, path: Any) -> None:
        """Write a one-band float64 GeoTIFF (CRS, transform, privacy statement as a tag).

        Needs rasterio.
        """
        try:
            import rasterio
            from rasterio.transform import Affine
        except ImportError as exc:
            raise ImportError(
                "Raster.to_geotiff() needs rasterio: pip install 'gpframe[raster]'"
            ) from exc
        ny, nx = self.shape
        crs = self._crs_obj()
        with rasterio.open(
            path, "w", driver="GTiff", height=ny, width=nx, count=1, dtype="float64",
            crs=crs.to_wkt() if crs is not None else None, transform=Affine(*self.transform),
        ) as dst:  # fmt: skip
            dst.write(self.array, 1)
            dst.update_tags(privacy=self.privacy_statement(), units=self.units,
                            query_id=self.query_id)  # fmt: skip

    def to_dict(self, *, per_user: bool = True, value: bool = True) -> dict[str, Any]:
        """JSON-serialisable dict: the base result plus shape, transform, CRS and units."""
        out = super().to_dict(per_user=per_user, value=value)
        crs = self._crs_obj()
        out.update(
            shape=list(self.shape),
            transform=[float(v) for v in self.transform],
            crs=crs.to_string() if crs is not None else None,
            crs_in=None if self.crs_in is None else str(self.crs_in),
            units=self.units,
        )
        return out

    # ------------------------------------------------------------------ plot

    def title(self) -> str:
        """Short title with the privacy statement's core (what ``plot`` shows)."""
        bw = self.params.get("bandwidth_m")
        head = f"private KDE, bandwidth {_fmt(bw)} m" if bw is not None else "private KDE"
        return (
            f"{head}\n{self.n_charged} users, each charged at most "
            f"{self._amount(self.spent_max)} ({self.kind.upper()}, r_min = {_fmt(self.r_min)} m)"
        )

    def plot(
        self, ax: Any = None, *, cmap: str = "magma", outline: Any = None, per_km2: bool = True,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """Heatmap with a colour bar and the privacy statement in the title; returns the Axes.

        Parameters
        ----------
        ax : matplotlib Axes, optional
        cmap : str
        outline : shapely geometry, GeoSeries or GeoDataFrame, optional
            Drawn on top as a thin line, e.g. a coastline or boundary: a series / frame with a
            CRS is reprojected to the grid's; a bare geometry is taken to be in it.
        per_km2 : bool
            Show the density per km² (× 10⁶) instead of per m².
        **kwargs
            Passed to ``imshow``.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
            raise ImportError("install gpframe[plot] to use .plot()") from exc
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 6))
        x0, y0, x1, y1 = self.bounds
        scale = 1e6 if per_km2 else 1.0
        im = ax.imshow(self.array * scale, extent=(x0, x1, y0, y1), origin="upper", cmap=cmap,
                       **kwargs)  # fmt: skip
        ax.figure.colorbar(
            im, ax=ax, shrink=0.8,
            label="share of users per km²" if per_km2 else "share of users per m²",
        )  # fmt: skip
        if outline is not None:
            import geopandas as gpd

            if isinstance(outline, gpd.GeoDataFrame):
                outline = outline.geometry
            g = outline if isinstance(outline, gpd.GeoSeries) else gpd.GeoSeries([outline])
            if g.crs is not None and self.crs is not None:
                g = g.to_crs(self._crs_obj())
            g.boundary.plot(ax=ax, color="white", linewidth=0.6)
            ax.set_xlim(x0, x1)  # the outline may reach beyond the grid: keep the grid's extent
            ax.set_ylim(y0, y1)
        ax.set_title(self.title(), fontsize=9)
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_aspect("equal")
        return ax
