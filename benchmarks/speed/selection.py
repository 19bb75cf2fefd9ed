"""Selection mechanisms vs baselines measured in the same run (selection.md §2–§5, issue 9).

Each line prints gpframe's rate, the baseline's rate and their ratio (gpframe / baseline; < 1
means gpframe is slower). Baselines are float-noise transcriptions with numpy's
``default_rng`` (the unsafe floor: they are timing references only, never a release path) or
scalar loops; the certified ε is compared with the mpmath quadrature the paper uses (§4.3).
CPU time (``time.process_time``), best of REPS.

Run:  python benchmarks/speed/selection.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from fractions import Fraction

import numpy as np

from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.mechanisms.selection import (
    ATParams,
    GaussianATRun,
    LaplaceSVTRun,
    eps_at_top,
    eps_rnm,
    poisson_subsample,
)
from gpframe.mechanisms.selection.certified import (
    _eps_bot,
    _eps_top,
    _log_integral_bracket_tangent,
    at_step_needs,
    log_integral_bracket,
)
from gpframe.mechanisms.selection.normal_exact import ExactNormal, argmax_exact

REPS = 3


def best(fn, reps: int = REPS) -> float:
    """Best CPU seconds of ``reps`` calls."""
    out = math.inf
    for _ in range(reps):
        t = time.process_time()
        fn()
        out = min(out, time.process_time() - t)
    return max(out, 1e-9)


def line(label: str, n: int, t_gp: float, t_base: float, base: str) -> None:
    print(
        f"{label}: gpframe {n / t_gp:,.0f}/s, {base} {n / t_base:,.0f}/s, ratio {t_base / t_gp:.3g}"
    )
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    scale = 0.2 if args.quick else 1.0
    bits = resolve_rng(None)
    rs = np.random.default_rng(0)
    print(f"# load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; CPU time")

    # 1. one exact N(0, 1) deviate (Karney N, lazily refined) vs numpy float normals
    n = int(5_000 * scale)
    t_gp = best(lambda: [ExactNormal.draw(bits) for _ in range(n)])
    t_np = best(lambda: rs.standard_normal(n))
    t_loop = best(lambda: [rs.standard_normal() for _ in range(n)])
    line("exact normal vs numpy vectorised", n, t_gp, t_np, "numpy")
    line("exact normal vs numpy scalar loop", n, t_gp, t_loop, "numpy loop")

    # 2. Laplace AboveThreshold, 100 queries below the threshold (steps / s)
    m = int(100 * scale) or 10

    def lap_run():
        run = LaplaceSVTRun(threshold=50, epsilon=1, sensitivity=1, integer=True, rng=bits)
        for _ in range(m):
            if run.step(0):
                break

    def lap_float():  # the textbook transcription, float Laplace per step
        th = 50 + rs.laplace(0, 2)
        for _ in range(m):
            if rs.laplace(0, 4) >= th:
                break

    line("laplace AboveThreshold step", m, best(lap_run), best(lap_float), "float loop")

    # 3. Gaussian AboveThreshold (exact decisions) vs a float transcription
    p = ATParams.make(sigma_x=0.1, threshold=0.9, bounds=(0, 1), sensitivity=0.01)

    def g_run():
        run = GaussianATRun(p, bits)
        for _ in range(m):
            if run.step(0.1):
                break

    def g_float():
        th = 0.9 + 0.1 * rs.standard_normal()
        for _ in range(m):
            if 0.1 + p.sigma_z * rs.standard_normal() >= th:
                break

    line("gaussian AboveThreshold step", m, best(g_run), best(g_float), "float loop")

    # 4. Gaussian Report-Noisy-Max, d = 100 (draws / s)
    d = 100
    q = np.linspace(0, 1, d)
    qf = [Fraction(float(v)) for v in q]

    def rnm_exact():
        argmax_exact(qf, Fraction(3, 10), [ExactNormal.draw(bits) for _ in range(d)])

    def rnm_float():
        int(np.argmax(q + 0.3 * rs.standard_normal(d)))

    k = 5
    line(
        "gaussian RNM d=100 (exact argmax)",
        k,
        best(lambda: [rnm_exact() for _ in range(k)]),
        best(lambda: [rnm_float() for _ in range(k)]),
        "numpy float",
    )

    # 5. Poisson subsampling, exact Bernoulli(p) (rows / s)
    n = int(1_000_000 * scale)
    line(
        "poisson_subsample p=0.1",
        n,
        best(lambda: poisson_subsample(n, p=0.1, rng=bits)),
        best(lambda: rs.random(n) < 0.1),
        "numpy float",
    )

    # 6. certified ε (bracket) vs the mpmath reference quadrature of §4.3 (the paper's method)
    import mpmath as mp

    pa = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)

    def certified(tol):
        def f():
            _eps_top.cache_clear()
            eps_at_top(pa, 10, tol)

        return f

    def mpmath_ref():
        sx, sz, rho, de = 0.3, 0.3 * math.sqrt(3), 0.75, 1e-3
        with mp.workdps(30):

            def n_t(xi):
                def f(x):
                    return (
                        mp.npdf(x)
                        * mp.ncdf((sx * x + rho - 1 + xi) / sz) ** 9
                        * mp.ncdf((0 - rho - sx * x + xi) / sz)
                    )

                return mp.quad(f, [-mp.inf, -5, -2, 0, 2, 5, mp.inf])

            return mp.log(n_t(de)) - mp.log(n_t(0))

    t_ref = best(mpmath_ref, 1)
    line("certified eps_top(10) tol=1e-9 vs mpmath 30 digits", 1, best(certified(1e-9), 1), t_ref,
         "mpmath")  # fmt: skip
    line("certified eps_top(10) tol=1e-7 vs mpmath 30 digits", 1, best(certified(1e-7), 1), t_ref,
         "mpmath")  # fmt: skip
    t = time.process_time()
    eps_rnm(0.1, sensitivity=1e-3, bounds=(0, 1), d=1024, tol=1e-8)
    print(f"# certified eps_rnm d=1024 tol=1e-8: {time.process_time() - t:.3f} s CPU")

    # 7. §5.6 certified bracket: third-order cells (shipped) vs the second-order tangent / chord
    # cells it replaced (baseline), same integrals, same tol, same run
    sq3 = math.sqrt(3.0)
    integrals = [
        (
            (9, 1 / sq3, (0.75 - 1 + 1e-3) / (0.3 * sq3)),
            (1, -1 / sq3, (-0.75 + 1e-3) / (0.3 * sq3)),
        ),
        ((49, 1 / sq3, (0.5 - 1 + 1e-2) / (0.1 * sq3)),),
        ((999, 1.0, -(1 - 2e-3) / 0.1),),
        ((9999, 1 / sq3, (0.75 - 1) / (0.3 * sq3)),),
    ]
    for tol in (1e-9, 1e-7):
        t_new = best(lambda tol=tol: [log_integral_bracket(tm, tol) for tm in integrals])
        t_old = best(lambda tol=tol: [_log_integral_bracket_tangent(tm, tol) for tm in integrals])
        line(f"certified bracket (4 integrals) tol={tol:g}, 3rd vs 2nd order", len(integrals),
             t_new, t_old, "2nd-order cells")  # fmt: skip
    t_new = best(lambda: (_eps_top.cache_clear(), _eps_bot.cache_clear(), at_step_needs(pa, 50)), 1)
    print(f"# mode S needs, t = 1..50 (200 integrals, tol 1e-9): {t_new:.2f} s CPU")


if __name__ == "__main__":
    main()
