"""Benchmark: private KDE raster of 10^6 users on a 512 × 512 grid (issue 7).

Measures, in the same run and on the same points and grid: a non-private KDE (numpy
``histogram2d`` binning + ``scipy.signal.fftconvolve`` with the same truncated Gaussian kernel) and
the private ``kde_raster_arrays`` (one lattice Gaussian release per user, bias-corrected bandwidth,
binning + separable FFT convolution). Goal: private ≤ 2× the non-private KDE. Noise from the OS
CSPRNG (the production path). One warm-up of each first.

Run: ``python benchmarks/bench_kde.py [n]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.signal import fftconvolve

from gpframe.queries.kde import _kernel_1d, kde_raster_arrays

CELL, SIDE, H, RHO = 100.0, 512, 1000.0, 1e-5  # σ ≈ 224 m < h = 1 km


def nonprivate(xy: np.ndarray) -> np.ndarray:
    k1 = _kernel_1d(H / CELL)
    pad = (k1.size - 1) // 2
    lo, hi = -pad * CELL, (SIDE + pad) * CELL
    counts, _, _ = np.histogram2d(
        xy[:, 1], xy[:, 0], bins=SIDE + 2 * pad, range=[[lo, hi], [lo, hi]]
    )
    dens = fftconvolve(counts, np.outer(k1, k1), mode="valid")
    return dens[::-1] / (CELL * CELL * len(xy))


def private(xy: np.ndarray) -> np.ndarray:
    out = kde_raster_arrays(
        xy, bandwidth_m=H, cell_m=CELL, bounds_m=(0, 0, SIDE * CELL, SIDE * CELL), amount=RHO
    )
    return out.density


def main(n: int = 10**6) -> None:
    gen = np.random.default_rng(0)  # synthetic true points, not a release
    centres = gen.uniform(5_000, 46_000, (20, 2))
    xy = centres[gen.integers(0, 20, n)] + gen.normal(0, 2_000, (n, 2))
    nonprivate(xy[:1000]), private(xy[:1000])  # warm-up
    t = time.perf_counter()
    base = nonprivate(xy)
    t_base = time.perf_counter() - t
    t = time.perf_counter()
    dens = private(xy)
    t_priv = time.perf_counter() - t
    rel = float(np.abs(dens - base).sum() / base.sum())
    ratio = t_priv / t_base
    from gpframe.mechanisms import gaussian_cgp

    t = time.perf_counter()
    gaussian_cgp(xy, rho=RHO)
    t_noise = time.perf_counter() - t
    print(
        f"  of which the secure lattice Gaussian sampler alone (gaussian_cgp, 10^6 points): "
        f"{t_noise:.2f} s; private minus sampler vs non-private: "
        f"{(t_priv - t_noise) / t_base:.2f}x"
    )
    print(
        f"kde_raster vs non-private binning+FFT KDE: {n / 1e6:.1f}M users, {SIDE}x{SIDE}, "
        f"h={H:g} m, rho={RHO:g}: {t_priv:.2f} s vs {t_base:.2f} s, {ratio:.2f}x "
        f"(goal <= 2x: {'OK' if ratio <= 2 else 'SLOW'}); L1 difference {rel:.3f}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10**6)
