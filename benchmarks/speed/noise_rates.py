"""Many rates in one call: ``discrete_laplace_rates`` against one ``discrete_laplace`` per rate.

The case of ``grid_stats(epsilon_per_user=..., occupancy="public")``: every cell has its own ε,
so every cell's statistic has its own discrete Laplace rate. For n rows with n distinct rates
(the calibrations of n cells: λ = ε/(⌊Δ/g⌋ + 1), as ``laplace_dp`` gives them), one run measures

* ``cold``: rates never seen before (a new query's budgets): the per-rate loop builds one exact
  geometric table per rate, the vectorised sampler one table for all;
* ``warm``: the same rates again (the per-rate loop's tables cached),

each as the best of ``--repeat`` CPU times, and prints the ratio per-rate ÷ one call.

    PYTHONPATH=. python benchmarks/speed/noise_rates.py [--rows 55 200 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np

from gpframe.mechanisms.noise import discrete_laplace
from gpframe.mechanisms.noise.laplace_rates import discrete_laplace_rates


def rates(n: int, salt: int) -> list[Fraction]:
    """n distinct rates like the cells' of a grid release (ε on a 10⁻⁹ grid, Δ/g in [2²⁰, 2²¹))."""
    rs = np.random.default_rng(salt)  # benchmark parameters only, not noise
    eps = rs.integers(10**7, 10**11, n)  # ε in [0.01, 100] in units of 10⁻⁹
    width = rs.integers(2**20 + 1, 2**21 + 1, n)
    return [Fraction(int(e), 10**9 * int(w)) for e, w in zip(eps, width, strict=True)]


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[55, 200, 1000])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    discrete_laplace_rates([Fraction(1, 3000)], None)  # imports and the one table, untimed
    print(f"{'rows':>6} {'case':<5} {'per rate (ms)':>14} {'one call (ms)':>14} {'ratio':>7}")
    for n in a.rows:
        cold_loop, cold_one = [], []
        for r in range(a.repeat):  # fresh rates every repetition: nothing cached
            lam = rates(n, 1000 * n + r)
            cold_loop.append(cpu(lambda lam=lam: [discrete_laplace(x, 1, None) for x in lam]))
            lam = rates(n, 5000 * n + r)
            cold_one.append(cpu(lambda lam=lam: discrete_laplace_rates(lam, None)))
        lam = rates(n, 9000 * n)
        [discrete_laplace(x, 1, None) for x in lam]  # fill the per-rate caches
        warm_loop = [cpu(lambda lam=lam: [discrete_laplace(x, 1, None) for x in lam])
                     for _ in range(a.repeat)]  # fmt: skip
        warm_one = [cpu(lambda lam=lam: discrete_laplace_rates(lam, None))
                    for _ in range(a.repeat)]  # fmt: skip
        for case, lo, one in (("cold", cold_loop, cold_one), ("warm", warm_loop, warm_one)):
            t_lo, t_one = min(lo) * 1e3, min(one) * 1e3
            print(f"{n:>6} {case:<5} {t_lo:>14.2f} {t_one:>14.2f} {t_lo / t_one:>7.1f}")


if __name__ == "__main__":
    main()
