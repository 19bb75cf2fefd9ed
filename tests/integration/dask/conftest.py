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


def _quiet() -> None:
    # the p2p shuffle logs every start/stop at WARNING: noise in the test output
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    logging.getLogger("distributed.shuffle._scheduler_plugin").setLevel(logging.ERROR)


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    import gpframe.testing

    _quiet()
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as lc, Client(lc) as client:  # fmt: skip
        client.run(gpframe.testing.enable_seeded)
        client.run(_quiet)
        yield client
