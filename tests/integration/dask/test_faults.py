"""Faults on a real LocalCluster: no result without a committed charge (beyond-one-machine.md).

A worker killed while drawing (Dask recomputes the partition; the first draw never left the dead
process), a worker that raises, and the client killed mid-query (run in a subprocess and sent
SIGKILL). In every case: nothing published without a committed charge, no acknowledged charge
lost, nobody charged twice or above their budget.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask.dataframe as dd
import geopandas as gpd
import numpy as np
import pandas as pd
import pytest

import gpframe as gp
import gpframe.dask
from gpframe.dask import staging
from gpframe.testing import callback_rng

from . import faults

CRS = "EPSG:32618"
KW = {"user": "u", "x": "x", "y": "y", "crs": CRS, "public": ["u"]}
ROOT = Path(__file__).resolve().parents[3]


def _frame(n_users=60):
    r = np.random.default_rng(11)  # true points only, never noise
    u = np.repeat(np.arange(n_users), 2)
    return pd.DataFrame({"u": u, "x": 500_000 + r.uniform(-2e3, 2e3, u.size),
                         "y": 4_500_000 + r.uniform(-2e3, 2e3, u.size)})  # fmt: skip


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_a_worker_that_raises_publishes_nothing_and_settles_in_full(cluster, tmp_path):
    s = gp.Session(tmp_path / "ledger.sqlite", budget=gp.CGP(rho=1e-3))
    bound = dd.from_pandas(_frame(), npartitions=2).geopriv(s, **KW)
    rng = callback_rng(faults.failing_bytes, "failing")
    with pytest.raises(RuntimeError, match="injected worker failure"):
        bound.privatize(rho=1e-5, to=tmp_path / "out", rng=rng)
    assert not (tmp_path / "out").exists()
    assert not [p for p in os.listdir(tmp_path) if ".staging-" in p]  # staging removed
    # the ledger's rule for a failure after the reservation: noise may have been drawn, so
    # every admitted user pays the full allocation, once; nobody above it
    spent = s.spent()
    assert len(spent) == 60 and np.allclose(spent.to_numpy(), 1e-5)
    assert s.ledger.verify()["reservations"] == 0


def _kill_a_task(client, done, record, name="release_partition"):
    """Wait until a task ``name`` is running on a worker, then SIGKILL that worker."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not done.is_set():
        for addr, keys in client.processing().items():
            if any(name in str(k) for k in keys):
                pid = client.run(os.getpid, workers=[addr])[addr]
                os.kill(pid, signal.SIGKILL)
                record["killed"] = (addr, pid)
                return
        time.sleep(0.05)


def test_a_worker_killed_mid_draw_is_recomputed_and_charged_once(cluster, tmp_path):
    df = _frame()
    s = gp.Session(tmp_path / "ledger.sqlite", budget=gp.CGP(rho=1e-3))
    bound = dd.from_pandas(df, npartitions=2).geopriv(s, **KW)
    target = tmp_path / "out"
    done, record = threading.Event(), {}
    killer = threading.Thread(target=_kill_a_task, args=(cluster, done, record))
    killer.start()
    try:
        res = bound.privatize(rho=1e-5, to=target, rng=callback_rng(faults.slow_bytes, "slow"))
    finally:
        done.set()
        killer.join()
    assert "killed" in record, "no release task was seen running"
    with pytest.raises(ProcessLookupError):
        os.kill(record["killed"][1], 0)  # that worker process is gone
    # published: exactly the files the accepted (surviving) tasks wrote, nothing else
    saved = json.loads((target / "_gpframe_result.json").read_text())
    assert sorted(os.listdir(target)) == sorted([*saved["files"], "_gpframe_result.json"])
    assert {n: _sha(target / n) for n in saved["files"]} == saved["files"]
    back = gpd.read_parquet(target)
    assert len(back) == len(df) and back.index.is_unique and back.geometry.notna().all()
    # charged once: one charge row, each user at the amount, never more
    assert s.ledger.verify()["charges"] == 1
    assert np.allclose(s.spent().to_numpy(), 1e-5) and len(s.spent()) == 60
    assert s.history(0)["query_id"].tolist() == [res.query_id]


@pytest.mark.slow
def test_a_worker_killed_mid_count_recomputes_its_first_pass_and_charges_once(cluster, monkeypatch):
    # with many points (here: CLIENT_ROWS = 0), range_count keeps each partition's selected
    # points on its worker between the passes: a killed worker loses them, Dask recomputes them
    # (the same users, checked by digest), and the count is charged once
    import shapely

    from gpframe.dask import one_point

    monkeypatch.setattr(one_point, "CLIENT_ROWS", 0)
    df = _frame()
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    bound = dd.from_pandas(df, npartitions=2).geopriv(s, **KW)
    done, record = threading.Event(), {}
    killer = threading.Thread(target=_kill_a_task, args=(cluster, done, record, "count_partition"))
    killer.start()
    try:
        res = bound.range_count(shapely.box(498_000, 4_498_000, 502_000, 4_502_000), rho=1e-5,
                                method="dist", reduce="last",
                                rng=callback_rng(faults.slow_bytes, "slow"))  # fmt: skip
    finally:
        done.set()
        killer.join()
    assert "killed" in record
    assert 0 <= res.value <= 60 and res.n_charged == 60
    assert s.ledger.verify()["charges"] == 1
    assert np.allclose(s.spent().to_numpy(), 1e-5)


def test_a_worker_killed_in_the_first_pass_of_a_count_is_recomputed_and_charged_once(cluster):
    # few points: they come back with the first pass and the client releases them itself. A
    # worker killed while the first pass reads a partition drew nothing (no noise is drawn
    # there); Dask recomputes its tasks, then the count is released and charged once
    import dask
    import shapely

    df = _frame()
    chunks = [df.iloc[:60], df.iloc[60:]]
    ddf = dd.from_delayed([dask.delayed(faults.slow_part)(c) for c in chunks], meta=df.iloc[:0])
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    done, record = threading.Event(), {}
    killer = threading.Thread(target=_kill_a_task, args=(cluster, done, record, "slow_part"))
    killer.start()
    try:
        res = ddf.geopriv(s, **KW).range_count(
            shapely.box(498_000, 4_498_000, 502_000, 4_502_000), rho=1e-5, method="dist",
            reduce="last")  # fmt: skip
    finally:
        done.set()
        killer.join()
    assert "killed" in record, "no first-pass task was seen running"
    with pytest.raises(ProcessLookupError):
        os.kill(record["killed"][1], 0)  # that worker process is gone
    assert 0 <= res.value <= 60 and res.n_charged == 60
    assert s.ledger.verify()["charges"] == 1
    assert np.allclose(s.spent().to_numpy(), 1e-5) and len(s.spent()) == 60


_CLIENT = """
import sys
import dask.dataframe as dd, gpframe as gp, gpframe.dask, gpframe.testing
from distributed import Client
from tests.integration.dask import faults
from tests.integration.dask.test_faults import KW, _frame

gpframe.testing.enable_seeded()
address, ledger, target = sys.argv[1:4]
with Client(address):
    s = gp.Session(ledger, budget=gp.CGP(rho=1e-3))
    rng = gpframe.testing.callback_rng(faults.slow_bytes, "slow")
    dd.from_pandas(_frame(), npartitions=2).geopriv(s, **KW).privatize(
        rho=1e-5, to=target, rng=rng)
    print("PUBLISHED", flush=True)
"""


def test_a_client_killed_mid_query_publishes_nothing_and_is_settled_on_open(cluster, tmp_path):
    ledger, target = tmp_path / "ledger.sqlite", tmp_path / "out"
    log = tmp_path / "client.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, cluster.scheduler.address, str(ledger), str(target)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        # the staging directory exists once the reservation is durable and the draws started
        while not [p for p in os.listdir(tmp_path) if ".staging-" in p]:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the client never reached the release pass"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "PUBLISHED" not in log.read_text()
    assert not target.exists()  # nothing published
    s = gp.Session(ledger)  # opening settles the dead client's reservation (ledger rules)
    assert s.ledger.verify()["reservations"] == 0
    spent = s.spent()
    assert len(spent) == 60 and np.allclose(spent.to_numpy(), 1e-5)  # in full, once
    # the dead client's staging directory is still there (its lock died with it); the next
    # write to the same destination removes it before anything is reserved, then publishes
    left = [p for p in os.listdir(tmp_path) if ".staging-" in p]
    assert len(left) == 1 and (tmp_path / left[0] / staging.LOCK_FILE).exists()
    res = dd.from_pandas(_frame(), npartitions=2).geopriv(s, **KW).privatize(rho=1e-5, to=target)
    assert not [p for p in os.listdir(tmp_path) if ".staging-" in p]
    assert sorted(os.listdir(target)) == sorted(
        [
            *json.loads((target / "_gpframe_result.json").read_text())["files"],
            "_gpframe_result.json",
        ]
    )
    assert np.allclose(s.spent().to_numpy(), 2e-5) and res.query_id


def _holders(name, dask_scheduler=None):
    """On the scheduler: each worker's number of stored results of tasks named ``name``."""
    out: dict = {}
    for key, ts in dask_scheduler.tasks.items():
        if name in str(key):
            for ws in ts.who_has:
                out[ws.address] = out.get(ws.address, 0) + 1
    return out


def _wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_worker_killed_between_nearest_rounds_is_recomputed_and_charged_once(
    cluster, monkeypatch
):
    # nearest_users runs its rounds from the client; each partition's selected points stay on
    # its worker between the rounds. SIGKILL a worker right after round 1's values came back:
    # its points are lost, Dask recomputes them on the survivor (the same users, checked by
    # digest) for round 2, and the query completes with one charge. The values released in
    # round 1 are the client's; the killed process held no draw that was ever released.
    import gpframe.queries.nearest as nearest_mod

    real, seen = nearest_mod.nearest_rounds, {"rounds": 0}

    def kill_after_round_one(*args, draw, **kw):
        def draw_then_kill(idx, part):
            out = draw(idx, part)
            seen["rounds"] += 1
            if seen["rounds"] == 1:
                # a worker holding some partition's kept points (the first pass's "winners":
                # each user's one point, after the shuffle of the candidates)
                held = cluster.run_on_scheduler(_holders, "winners")
                addr = sorted(held)[0]
                seen["held"] = held[addr]
                pid = cluster.run(os.getpid, workers=[addr])[addr]
                os.kill(pid, signal.SIGKILL)
                seen["killed"] = pid
                _wait_for(lambda: addr not in cluster.scheduler_info()["workers"])
            return out

        return real(*args, draw=draw_then_kill, **kw)

    monkeypatch.setattr(nearest_mod, "nearest_rounds", kill_after_round_one)
    r = np.random.default_rng(4)  # true points only, never noise
    df = pd.DataFrame({"u": np.arange(80), "x": 500_000 + r.uniform(-5e3, 5e3, 80),
                       "y": 4_500_000 + r.uniform(-5e3, 5e3, 80)})  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    bound = dd.from_pandas(df, npartitions=2).geopriv(s, **KW)
    res = bound.nearest_users((500_000.0, 4_500_000.0), 5, rho=1e-4, method="dist-elim")
    assert "killed" in seen and seen["rounds"] >= 2, seen  # rounds ran after the kill
    assert seen["held"] >= 1  # its kept points were lost with it, and recomputed
    with pytest.raises(ProcessLookupError):
        os.kill(seen["killed"], 0)  # that worker process is gone
    assert len(res.value) == 5
    # one committed charge; the Result's charges are exactly the ledger's (none lost, none twice)
    assert s.ledger.verify()["charges"] == 1 and s.ledger.verify()["reservations"] == 0
    spent = s.spent()
    pd.testing.assert_series_equal(spent.sort_index(), res.charges.sort_index(),
                                   check_names=False, check_index_type=False)  # fmt: skip
    assert (spent.to_numpy() <= 1e-4 * (1 + 1e-12)).all()  # nobody above the allocation
    assert res.saved > 0  # users dropped early paid only their rounds
    assert s.history(0)["query_id"].tolist() == [res.query_id]
