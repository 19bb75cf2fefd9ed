"""Every form in which an operation's output can be published, as objects the scanner walks.

``forms(out)`` maps a form name (what a failure message shows) to an object: the returned
frame's columns, index and values, its printed repr, ``attrs`` and their JSON, the attached
Result's ``to_dict()`` / JSON / ``repr`` / ``_repr_html_`` / ``summary()``, the ``to_parquet``
file (read back: schema metadata and every column, geometry as WKB), a Raster's exports, a
DuckDB relation's rows and printed form, the text of a Result's ``plot()``. A Raster's files
(GeoTIFF through rasterio, the xarray DataArray and its netCDF file) need the test extra.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd


def _json(obj: Any) -> str:
    return json.dumps(obj, default=str, ensure_ascii=False)


def result_forms(r: Any, prefix: str = "result", *, plots: bool = True) -> dict[str, Any]:
    """The published forms of a Result (and its subclasses: Raster, MonitorResult, ...)."""
    from gpframe.results import CuratorViewError

    out: dict[str, Any] = {}
    d = r.to_dict()
    out[f"{prefix}.to_dict()"] = d
    out[f"{prefix}.to_dict() json"] = _json(d)
    out[f"{prefix}.repr"] = repr(r)
    out[f"{prefix}._repr_html_"] = r._repr_html_()
    out[f"{prefix}.summary()"] = r.summary()
    value = getattr(r, "value", None)
    if not isinstance(value, pd.DataFrame):  # a frame value is scanned as the frame itself
        out[f"{prefix}.value"] = value
    for name in ("transform", "crs", "bounds"):  # Raster georeferencing
        if hasattr(type(r), name) or name in getattr(r, "__dataclass_fields__", {}):
            try:
                out[f"{prefix}.{name}"] = getattr(r, name)
            except Exception as exc:  # a property that cannot be computed publishes nothing
                out[f"{prefix}.{name}"] = f"<{type(exc).__name__}>"
    # the per-user / per-region / per-query-point tables (a central result refuses: its
    # per-user view is the curator's, in the ledger)
    for name in ("to_frame", "per_user"):
        fn = getattr(r, name, None)
        if callable(fn):
            try:
                out[f"{prefix}.{name}()"] = fn()
            except CuratorViewError:
                pass
    if callable(getattr(r, "cells", None)):  # a Raster's cells as polygons (input CRS)
        out[f"{prefix}.cells()"] = r.cells()
    if hasattr(r, "to_xarray"):
        out.update(_xarray_forms(r, prefix))
    if hasattr(r, "to_geotiff"):
        out.update(_geotiff_forms(r, prefix))
    if plots and callable(getattr(r, "plot", None)):
        out[f"{prefix}.plot() text"] = plot_text(r)
    return out


def _xarray_forms(r: Any, prefix: str) -> dict[str, Any]:
    """``Raster.to_xarray()``: attrs, coords and values; and the netCDF file it writes."""
    import xarray as xr

    da = r.to_xarray()
    out: dict[str, Any] = {
        f"{prefix}.to_xarray() attrs": dict(da.attrs),
        f"{prefix}.to_xarray() coords": {str(k): v.to_numpy() for k, v in da.coords.items()},
        f"{prefix}.to_xarray() values": da.to_numpy(),
        f"{prefix}.to_xarray() name": str(da.name),
    }
    # netCDF 3 through scipy (installed with the test extra): the file's bytes (attribute
    # text) and what a reader gets back (attrs of the variable and of the file, coords, values)
    raw = bytes(da.to_netcdf())
    with xr.open_dataset(io.BytesIO(raw)) as ds:
        back = {"attrs": dict(ds.attrs)}
        for name, var in {**ds.coords, **ds.data_vars}.items():
            back[str(name)] = {"attrs": dict(var.attrs), "values": var.to_numpy()}
    out[f"{prefix}.to_netcdf() read back"] = back
    out[f"{prefix}.to_netcdf() file bytes"] = raw.decode("latin-1")
    return out


def _geotiff_forms(r: Any, prefix: str) -> dict[str, Any]:
    """``Raster.to_geotiff()``: every tag namespace, georeferencing and pixel, and the file."""
    import tempfile
    from pathlib import Path

    import rasterio

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "r.tif"
        r.to_geotiff(p)
        with rasterio.open(p) as src:
            tags = {ns or "default": dict(src.tags(ns=ns)) for ns in (None, *src.tag_namespaces())}
            out: dict[str, Any] = {
                f"{prefix}.to_geotiff() tags": tags,
                f"{prefix}.to_geotiff() band tags": [dict(src.tags(i)) for i in src.indexes],
                f"{prefix}.to_geotiff() descriptions": [str(d) for d in src.descriptions],
                f"{prefix}.to_geotiff() georeferencing": {
                    "transform": tuple(src.transform),
                    "bounds": tuple(src.bounds),
                    "crs": src.crs.to_wkt() if src.crs else None,
                    "nodata": src.nodata,
                },
                f"{prefix}.to_geotiff() pixels": src.read(),
            }
        out[f"{prefix}.to_geotiff() file bytes"] = p.read_bytes().decode("latin-1")
    return out


def plot_text(r: Any) -> dict[str, list[str]]:
    """Every text artist of the figure ``r.plot()`` draws: titles, axis and colour-bar labels,
    legends, annotations ("text"), and the tick labels ("ticks": they follow the axes' limits,
    set by the released values, so the neighbouring checks leave them out).

    The pixels are out of scope: they are a picture of the released values. The figure is
    drawn once with Agg so that tick labels exist, then closed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    ax = r.plot()
    fig = ax.figure
    try:
        fig.canvas.draw()
        ticks = set()
        for a in fig.axes:  # colour bars are axes too
            for axis in (a.xaxis, a.yaxis):
                ticks.add(id(axis.offsetText))  # the "1e6" of the tick labels
                for tk in (*axis.get_major_ticks(), *axis.get_minor_ticks()):
                    ticks.update((id(tk.label1), id(tk.label2)))
        texts = [t for t in fig.findobj(Text) if t.get_text()]
        return {
            "text": [t.get_text() for t in texts if id(t) not in ticks],
            "ticks": [t.get_text() for t in texts if id(t) in ticks],
        }
    finally:
        plt.close(fig)


def _parquet_forms(frame: pd.DataFrame) -> dict[str, Any]:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    frame.to_parquet(buf)
    raw = buf.getvalue()
    table = pq.read_table(io.BytesIO(raw))
    raw_meta = table.schema.metadata or {}
    meta = {k.decode(): v.decode("utf-8", "replace") for k, v in raw_meta.items()}
    out = {}
    # DataFrame.attrs in the file (the Result's view): geopandas writes PANDAS_ATTRS, pandas
    # keeps them in its own "pandas" metadata
    if "PANDAS_ATTRS" in meta:
        out["to_parquet attrs"] = json.loads(meta["PANDAS_ATTRS"])
    elif json.loads(meta.get("pandas", "{}") or "{}").get("attrs"):
        out["to_parquet attrs"] = json.loads(meta["pandas"])["attrs"]
    return out | {
        "to_parquet schema metadata": meta,
        "to_parquet columns": {n: table.column(n).to_pylist() for n in table.column_names},
        "to_parquet file bytes": raw.decode("latin-1"),
    }


def frame_forms(frame: pd.DataFrame, *, parquet: bool = True, plots: bool = True
                ) -> dict[str, Any]:  # fmt: skip
    """The published forms of a returned (Geo)DataFrame."""
    out: dict[str, Any] = {
        "frame.columns": [str(c) for c in frame.columns],
        "frame.index": frame.index,
        "frame.values": pd.DataFrame(frame),
    }
    with pd.option_context("display.max_columns", None, "display.width", 100_000):
        out["frame.repr"] = repr(frame)
    if frame.attrs:
        out["attrs"] = dict(frame.attrs)
        out["attrs json"] = _json(frame.attrs)
        for key, val in frame.attrs.items():
            r = getattr(val, "result", None)
            if r is not None:
                out.update(result_forms(r, prefix=f"attrs[{key!r}].result", plots=plots))
    if parquet:
        out.update(_parquet_forms(frame))
    return out


def relation_forms(rel: Any) -> dict[str, Any]:
    """A DuckDB relation (or a query's rows): its columns and every row, and its printed form."""
    df = rel.df()
    out = {"sql.columns": list(map(str, rel.columns)), "sql.rows": df}
    out["sql.repr"] = str(rel)
    return out


def forms(out: Any, *, plots: bool = True) -> dict[str, Any]:
    """The published forms of whatever an operation returned (``plots``: with plot text)."""
    from gpframe.results import Result

    if isinstance(out, pd.DataFrame):
        return frame_forms(out, plots=plots)
    if isinstance(out, Result):
        f = result_forms(out, plots=plots)
        if isinstance(getattr(out, "value", None), pd.DataFrame):
            fv = frame_forms(out.value, plots=plots)
            f.update({f"result.value {k}": v for k, v in fv.items()})
        return f
    if hasattr(out, "df") and hasattr(out, "columns"):  # duckdb relation
        return relation_forms(out)
    return {"returned object": out, "returned repr": repr(out)}
