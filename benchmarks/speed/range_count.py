"""Benchmark: private range counts over 10^6 users and a 50-vertex polygon (issue 5).

Measures, in the same run: the exact non-private count (shapely ``contains_xy``), the exact
signed distances (:func:`gpframe.queries.range_count.signed_distance`), and the private methods
``pt``, ``dist`` and ``dist-elim`` (10 rounds, doubling). Goals: ``pt``/``dist`` ≤ 2× the signed
distances, ``dist-elim`` ≤ 3×. Noise from the OS CSPRNG (the production path).

Run: ``python benchmarks/speed/range_count.py [n]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import shapely

from gpframe.queries.range_count import range_count_arrays, signed_distance


def polygon(n_vertices: int = 50) -> shapely.Polygon:
    ang = np.linspace(0, 2 * np.pi, n_vertices, endpoint=False)
    rad = 3000 + 1000 * np.sin(5 * ang)  # a star: concave, 50 vertices
    return shapely.Polygon(np.column_stack([5000 + rad * np.cos(ang), 5000 + rad * np.sin(ang)]))


def main(n: int = 10**6) -> None:
    region = polygon()
    xy = np.random.default_rng(0).uniform(0, 10000, (n, 2))  # synthetic data, not a release
    users = np.arange(n)

    t = time.perf_counter()
    exact = int(shapely.contains_xy(region, xy[:, 0], xy[:, 1]).sum())
    t_contains = time.perf_counter() - t
    t = time.perf_counter()
    signed_distance(xy, region)
    t_sd = time.perf_counter() - t
    print(f"n={n}  vertices=50  exact count={exact}")
    print(f"contains_xy        {t_contains:7.2f} s")
    print(f"signed distances   {t_sd:7.2f} s   (reference)")
    goals = {"pt": 2.0, "dist": 2.0, "dist-elim": 3.0}
    for method, goal in goals.items():
        t = time.perf_counter()
        out = range_count_arrays(
            xy,
            users,
            region,
            kind="cgp",
            amount=1e-4,
            method=method,
            rounds=10,
            split="doubling",
            beta=0.05,
        )
        dt = time.perf_counter() - t
        ratio = dt / t_sd
        saving = out.saving / (n * 1e-4)
        print(
            f"{method:<10} {dt:7.2f} s  ratio {ratio:4.2f} (goal ≤ {goal:.0f}×) "
            f"{'OK' if ratio <= goal else 'SLOW'}  count={out.estimate} (exact {exact}) "
            f"±{out.error}  saving={saving:.3f}  calls={out.n_calls}  "
            f"stopped per round={out.rounds_histogram[1:].tolist()}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10**6)
