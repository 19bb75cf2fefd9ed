"""A real ``dask.distributed.LocalCluster`` per test module: 2 worker processes, 1 thread each.

Seeded test sources are enabled in the workers' processes too (``gpframe.testing`` refuses them
in any process that did not call ``enable_seeded()``), so tests can pass ``rng=seeded_rng(...)``
through the same guard as the pandas face.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("distributed")
pytest.importorskip("dask_geopandas")


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    from .faults import EnableSeeded, quiet

    quiet()
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as lc, Client(lc) as client:  # fmt: skip
        # a plugin, not client.run: a worker restarted after a kill enables them again
        client.register_plugin(EnableSeeded())
        yield client
