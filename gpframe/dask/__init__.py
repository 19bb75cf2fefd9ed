"""``ddf.geopriv``: the Dask face of gpframe (``docs/beyond-one-machine.md``).

Importing this package registers the ``geopriv`` accessor on dask DataFrames and
dask-geopandas GeoDataFrames (extra ``dask``: ``pip install gpframe[dask]``)::

    import gpframe.dask
    ddf.geopriv(session, user="taxi_id", to_crs="EPSG:32724").privatize(rho=1e-4, to="out/")

The session (and its ledger) stays in the client process: the client validates, reserves
through the one driver (:func:`gpframe.ledger.run.run`), lets the cluster run the array code
of :mod:`gpframe.queries` on partitions that hold whole users, commits the charge, and only
then publishes or returns the output.
"""

from __future__ import annotations

from gpframe.dask.accessor import DaskGeoPriv, DaskGeoPrivAccessor, register

__all__ = ["DaskGeoPriv", "DaskGeoPrivAccessor"]

register()
