"""Throughput of the exact lattice samplers (secure-noise.md §11, T-SPEED).

One run: warm-up, then the median of 5 calls at n = 10^6 per sampler (single thread, os.urandom by
default), bytes drawn per sample, and the ratio to numpy's float sampler (the unsafe floor) and to
OpenDP 0.16's exact samplers (the safe peer, measured on a smaller vector: it is slow). Then the
rate at DuckDB-sized batches of 2,048. Then the fixed cost per call at small n (1, 8, 64, 2048) for
each sampler and release wrapper, with repeated parameters (the cached-table case that k-PNN, hull
and SVT code hits when it calls a sampler many times).

    python benchmarks/speed/noise.py [--aes] [--quick] [--small]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from gpframe import testing
from gpframe.mechanisms import noise
from gpframe.mechanisms.noise import AesCtrRandom, OsRandom

N = 1_000_000
REPS = 5
SEED = 20260101  # numpy baselines only


class Counting:
    """Counts the bytes a sampler draws from the wrapped source (pass ``.src`` to the sampler).

    A test source (``gpframe.testing.callback_rng``): release code accepts only gpframe's own
    source classes, so the counter wraps the inner source's bytes in one of them.
    """

    def __init__(self, inner):
        self.inner, self.count = inner, 0
        self.src = testing.callback_rng(self._bytes, name="counting")

    def _bytes(self, n):
        self.count += n
        return self.inner.bytes(n)


def rate(fn: Callable[[int], object], n: int, reps: int = REPS, cpu: bool = False) -> float:
    """Median rate over ``reps`` calls: wall clock, or process CPU time if ``cpu``.

    The CPU-time figure is the one to compare on a shared, loaded machine: wall time there also
    counts the time other processes hold the core.
    """
    fn(min(n, 10_000))  # warm-up (tables are built and cached here)
    clock = time.process_time if cpu else time.perf_counter
    times = []
    for _ in range(reps):
        t0 = clock()
        fn(n)
        times.append(clock() - t0)
    return n / statistics.median(times)


def batch_rate(fn: Callable[[int], object], batch: int = 2048, calls: int = 200) -> float:
    fn(batch)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(batch)
    return batch * calls / (time.perf_counter() - t0)


SMALL_NS = (1, 8, 64, 2048)


def per_call_us(fn: Callable[[], object], calls: int, repeats: int = 7) -> float:
    """Best-of-``repeats`` wall time per call in µs (the minimum is the least load-sensitive)."""
    fn()  # warm-up: builds and caches the parameter's tables
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def small_n(src) -> None:
    """µs per call at small n, repeated parameters: samplers and release wrappers."""
    from gpframe.mechanisms import gaussian_cgp, laplace_dp, laplace_gp, planar_laplace

    gen = np.random.default_rng(SEED)  # input data only
    x1 = {n: gen.uniform(0.0, 1000.0, n) for n in SMALL_NS}
    x2 = {n: gen.uniform(0.0, 1000.0, (n, 2)) for n in SMALL_NS}
    a = Fraction(1, 100) * Fraction(1, 2**10)
    cases: list[tuple[str, Callable[[int], object]]] = [
        ("discrete_laplace t=92682", lambda n: noise.discrete_laplace(Fraction(1, 92682), n, src)),
        ("discrete_laplace t=3", lambda n: noise.discrete_laplace(Fraction(1, 3), n, src)),
        (
            "discrete_gaussian s=92682",
            lambda n: noise.discrete_gaussian(Fraction(92682**2), n, src),
        ),
        ("lattice_laplace d=2 eps=0.01", lambda n: noise.lattice_laplace(a, 2, n, src)),
        (
            "discrete_gaussian_nd d=2 s=92682",
            lambda n: noise.discrete_gaussian_nd(Fraction(92682**2), 2, n, src),
        ),
        ("laplace_gp eps=0.01", lambda n: laplace_gp(x1[n], eps=0.01, rng=src)),
        (
            "laplace_dp eps=0.5",
            lambda n: laplace_dp(x1[n], sensitivity=1.0, epsilon=0.5, rng=src),
        ),
        ("planar_laplace eps=0.01", lambda n: planar_laplace(x2[n], eps=0.01, rng=src)),
        ("gaussian_cgp rho=5e-5", lambda n: gaussian_cgp(x2[n], rho=5e-5, rng=src)),
    ]
    print(f"# small n: µs per call (best of 7), source={src.name}, repeated parameters")
    print(f"{'':34s}" + "".join(f"{'n=' + str(n):>10s}" for n in SMALL_NS))
    for label, fn in cases:
        row = [per_call_us(lambda fn=fn, n=n: fn(n), 300 if n <= 64 else 40) for n in SMALL_NS]
        print(f"{label:34s}" + "".join(f"{v:10.1f}" for v in row))
        sys.stdout.flush()


def opendp_rates(n: int = 20_000) -> dict[str, Callable[[float], float]]:
    try:
        import opendp.prelude as dp
    except ImportError:  # pragma: no cover
        return {}
    dp.enable_features("contrib")

    def make(kind: str, scale: float) -> float:
        metric = dp.l1_distance(T=int) if kind == "laplace" else dp.l2_distance(T=int)
        space = dp.vector_domain(dp.atom_domain(T=int), size=n), metric
        m = space >> (dp.m.then_laplace if kind == "laplace" else dp.m.then_gaussian)(scale=scale)
        data = [0] * n
        m(data)
        t0 = time.perf_counter()
        m(data)
        return n / (time.perf_counter() - t0)

    return {
        "laplace": lambda s: make("laplace", s),
        "gaussian": lambda s: make("gaussian", s),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aes", action="store_true", help="use the AES-256-CTR source")
    ap.add_argument("--quick", action="store_true", help="skip OpenDP and batch runs")
    ap.add_argument("--small", action="store_true", help="only the small-n per-call section")
    args = ap.parse_args()
    src = AesCtrRandom() if args.aes else OsRandom()
    if args.small:
        small_n(src)
        return
    gen = np.random.default_rng(SEED)  # baseline only: the insecure float floor
    g = Fraction(1, 2**10)

    np_lap = rate(lambda n: gen.laplace(0.0, 1.0, n), N)
    np_norm = rate(lambda n: gen.normal(0.0, 1.0, n), N)

    def np_planar(n: int, d: int = 2) -> np.ndarray:
        r = gen.gamma(d, 1.0, n)
        if d == 2:
            th = gen.uniform(0, 2 * np.pi, n)
            return np.stack([r * np.cos(th), r * np.sin(th)], axis=1)
        v = gen.normal(size=(n, d))
        return v / np.linalg.norm(v, axis=1, keepdims=True) * r[:, None]

    np_pl2 = rate(lambda n: np_planar(n, 2), N)
    np_pl3 = rate(lambda n: np_planar(n, 3), N)
    od = {} if args.quick else opendp_rates()

    cases: list[tuple[str, Callable, float, str | None, float]] = [
        (
            "discrete_laplace t=3",
            lambda n, b: noise.discrete_laplace(Fraction(1, 3), n, b),
            np_lap,
            "laplace",
            3.0,
        ),
        (
            "discrete_laplace t=92682",
            lambda n, b: noise.discrete_laplace(Fraction(1, 92682), n, b),
            np_lap,
            "laplace",
            92682.0,
        ),
        (
            "discrete_laplace design A t=92682",
            lambda n, b: noise.discrete_laplace_design_a(Fraction(1, 92682), n, b),
            np_lap,
            "laplace",
            92682.0,
        ),
        (
            "discrete_gaussian sigma=10",
            lambda n, b: noise.discrete_gaussian(Fraction(100), n, b),
            np_norm,
            "gaussian",
            10.0,
        ),
        (
            "discrete_gaussian sigma=92682",
            lambda n, b: noise.discrete_gaussian(Fraction(92682**2), n, b),
            np_norm,
            "gaussian",
            92682.0,
        ),
    ]
    for eps in (Fraction(1), Fraction(1, 100), Fraction(1, 10_000)):
        a = eps * g
        cases.append(
            (
                f"planar g=2^-10 eps={float(eps):g}/m (a={float(a):.3g})",
                lambda n, b, a=a: noise.lattice_laplace(a, 2, n, b),
                np_pl2,
                None,
                0.0,
            )
        )
    cases.append(
        (
            "lattice 3-D a=2^-16",
            lambda n, b: noise.lattice_laplace(Fraction(1, 2**16), 3, n, b),
            np_pl3,
            None,
            0,
        )
    )
    cases.append(
        (
            "discrete_gaussian_nd 2-D sigma=92682",
            lambda n, b: noise.discrete_gaussian_nd(Fraction(92682**2), 2, n, b),
            np_norm / 2,
            None,
            0,
        )
    )

    print(f"# load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(
        f"# n={N}, median of {REPS}, source={src.name}, 1 thread; numpy float Laplace "
        f"{np_lap / 1e6:.1f} M/s, normal {np_norm / 1e6:.1f} M/s, planar {np_pl2 / 1e6:.1f} M/s"
    )
    for label, fn, base, od_kind, od_scale in cases:
        r = rate(lambda n, fn=fn: fn(n, src), N)
        r_cpu = rate(lambda n, fn=fn: fn(n, src), N, cpu=True)
        c = Counting(src)
        with testing.seeded_enabled():  # the counter is a test source
            fn(N, c.src)
        per = c.count / N
        line = (
            f"{label}: {r / 1e6:.2f} M/s wall, {r_cpu / 1e6:.2f} M/s cpu ({per:.1f} B/sample); "
            f"numpy float {r / base:.2f}x"
        )
        if od_kind and od_kind in od:
            line += f"; opendp {r / od[od_kind](od_scale):.0f}x"
        else:
            line += "; opendp n/a"
        if not args.quick:
            line += f"; n=2048 batches {batch_rate(lambda n, fn=fn: fn(n, src)) / 1e6:.2f} M/s"
        print(line)
        sys.stdout.flush()
    small_n(src)


if __name__ == "__main__":
    main()
