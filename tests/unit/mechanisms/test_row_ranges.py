"""Row ranges on several threads (gpframe.mechanisms.row_ranges): same law, same guarantee."""

import itertools
import threading
import warnings
from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import GpframeInternalError
from gpframe.mechanisms import gaussian_cgp, planar_laplace
from gpframe.mechanisms.laplace_mech import scale_warnings_left_out
from gpframe.mechanisms.row_ranges import MIN_ROWS, release_in_ranges, threads_for
from gpframe.queries.privatize import privatize_points
from gpframe.testing import seeded_rng


def test_threads_for_splits_only_the_os_source_and_only_large_calls():
    assert threads_for(None, 10 * MIN_ROWS, 4) == 4
    assert threads_for(None, 3 * MIN_ROWS, 4) == 3  # every range gets MIN_ROWS rows
    assert threads_for(None, MIN_ROWS + 1, 4) == 1
    assert threads_for(seeded_rng(1), 10 * MIN_ROWS, 4) == 1  # its pinned stream: one call


def test_ranges_release_the_gaussian_law_with_the_one_call_guarantee():
    """4·10⁵ points (8·10⁵ coordinates) in two ranges: σ = (1 + √2·g)/√(2ρ) within 1 %
    (relative standard error 0.08 %), lattice values, and the single call's guarantee."""
    rho = Fraction(1, 10_000)
    pts = np.zeros((400_000, 2))
    seen = []

    def sample(p):
        seen.append((threading.current_thread().name, len(p)))
        return gaussian_cgp(p, rho=rho)

    rel = release_in_ranges(sample, pts, 2)
    # six ranges of at least MIN_ROWS rows (at most RANGES_PER_THREAD = 4 a thread) on 2 threads
    sizes = [n for _, n in seen]
    assert len(sizes) == 6 and sum(sizes) == 400_000 and max(sizes) - min(sizes) <= 1
    assert {name for name, _ in seen} <= {"gp-noise_0", "gp-noise_1"}
    one = gaussian_cgp(np.zeros((10, 2)), rho=rho)
    assert (rel.g, rel.noise, rel.guarantee) == (one.g, one.noise, one.guarantee)
    sigma = (1 + np.sqrt(2) * 2.0**-10) / np.sqrt(2e-4)
    assert abs(rel.values.std() / sigma - 1) < 0.01 and abs(rel.values.mean()) < 0.5
    steps = rel.values / float(rel.g)
    assert np.array_equal(steps, np.round(steps))  # exact lattice points


def test_ranges_release_planar_laplace_at_its_mean_radius():
    """2·10⁵ points: mean radius 2·(1 + √2·g)/ε within 1 % (relative standard error 0.16 %)."""
    eps = Fraction(1, 100)
    rel = release_in_ranges(lambda p: planar_laplace(p, eps=eps), np.zeros((200_000, 2)), 2)
    r = np.hypot(rel.values[:, 0], rel.values[:, 1])
    assert abs(r.mean() / (2 * (1 + np.sqrt(2) * 2.0**-10) / 0.01) - 1) < 0.01


def test_ranges_that_disagree_return_nothing():
    calls = iter([Fraction(1, 10), Fraction(1, 20)])

    def sample(p):
        return gaussian_cgp(p, rho=next(calls))

    with pytest.raises(GpframeInternalError, match="different noise parameters"):
        release_in_ranges(sample, np.zeros((1000, 2)), 2)


def test_the_callers_silenced_scale_warnings_hold_in_the_threads():
    """rho = 1e-14 m⁻² is a scale above 100 km: each range would warn; the caller's
    scale_warnings_left_out() reaches the threads (a copy of its context per range)."""
    tiny = Fraction(1, 10**14)
    with warnings.catch_warnings(record=True) as loud:
        warnings.simplefilter("always")
        release_in_ranges(lambda p: gaussian_cgp(p, rho=tiny), np.zeros((1000, 2)), 2)
    assert loud
    with warnings.catch_warnings(record=True) as quiet, scale_warnings_left_out():
        warnings.simplefilter("always")
        release_in_ranges(lambda p: gaussian_cgp(p, rho=tiny), np.zeros((1000, 2)), 2)
    assert not quiet


def test_privatize_points_in_ranges_charges_as_one_call(monkeypatch):
    """threads=2 with the OS source: two sampler calls on the threads, the same charges,
    guarantees and released mask as one call; a seeded source stays one call."""
    import gpframe.mechanisms.row_ranges as rr

    n = 3 * MIN_ROWS  # 6/7 of the rows admitted: two ranges of at least MIN_ROWS
    xy = np.zeros((n, 2))
    codes = np.arange(n) % 1000
    admitted = np.arange(1000) % 7 != 0
    got = {}
    real = rr.release_in_ranges

    def spy(sample, pts, workers):
        got.setdefault("workers", []).append(workers)
        return real(sample, pts, workers)

    monkeypatch.setattr(rr, "release_in_ranges", spy)
    args = dict(kind="cgp", amount=Fraction(1, 10_000), per="point", admitted=admitted)
    two = privatize_points(xy, codes, 1000, threads=2, **args)
    one = privatize_points(xy, codes, 1000, threads=1, **args)
    seeded = privatize_points(xy, codes, 1000, threads=2, rng=seeded_rng(3), **args)
    assert got["workers"] == [2, 1, 1]
    assert two.charges == one.charges == seeded.charges
    assert two.guarantees == one.guarantees
    assert np.array_equal(two.released, one.released)
    assert np.isnan(two.xy[~two.released]).all() and np.isfinite(two.xy[two.released]).all()


def test_threads_setting_caps_the_accessors_ranges(monkeypatch):
    """threads=None (the accessor's) follows row_ranges.THREADS, else the machine's cores."""
    import os

    import gpframe.mechanisms.row_ranges as rr

    monkeypatch.setattr(rr, "THREADS", 1)
    assert threads_for(None, 10 * MIN_ROWS) == 1
    monkeypatch.setattr(rr, "THREADS", 3)
    assert threads_for(None, 10 * MIN_ROWS) == 3
    monkeypatch.setattr(rr, "THREADS", None)
    assert threads_for(None, 10 * MIN_ROWS) == min(os.cpu_count() or 1, 10)


def test_cores_for_caps_deterministic_steps_like_the_draws(monkeypatch):
    """Projections and point building split like the draws, seeded source or not."""
    import gpframe.mechanisms.row_ranges as rr
    from gpframe.mechanisms.row_ranges import cores_for

    assert cores_for(10 * MIN_ROWS, 4) == 4
    assert cores_for(3 * MIN_ROWS, 4) == 3
    assert cores_for(2 * MIN_ROWS - 1, 4) == 1
    monkeypatch.setattr(rr, "THREADS", 1)
    assert cores_for(10 * MIN_ROWS) == 1
    monkeypatch.setattr(rr, "THREADS", 2)
    assert cores_for(10 * MIN_ROWS) == 2


def test_run_in_ranges_covers_every_row_once_in_order_and_reraises():
    from gpframe.mechanisms.row_ranges import run_in_ranges

    n = 5 * MIN_ROWS + 3
    seen = []

    def work(lo, hi):
        seen.append(threading.current_thread().name)
        return lo, hi

    got = run_in_ranges(work, n, 2, name="gp-test")
    assert got[0][0] == 0 and got[-1][1] == n and len(got) == 5
    assert all(a[1] == b[0] for a, b in itertools.pairwise(got))  # no gap, no overlap
    assert set(seen) <= {"gp-test_0", "gp-test_1"}
    assert run_in_ranges(work, n, 1) == [(0, n)]  # one range, in the caller's thread
    assert seen[-1] == threading.current_thread().name

    def fails(lo, hi):
        if lo > 0:
            raise ValueError("range failed")

    with pytest.raises(ValueError, match="range failed"):
        run_in_ranges(fails, n, 2)
