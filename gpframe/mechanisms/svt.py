"""The sparse vector technique under GP and CGP, with a vectorised block scan.

See ``docs/operations/knn.md`` and ``docs/noise.md`` (Algorithm 1, "below" form, its privacy and the
gpframe rules, the PNN draws, pitfalls, Multi-draw mechanisms); Liang & Yi, 'Concentrated
Geo-Privacy' (2023), Alg. 1, Alg. 2.

One SVT run draws the threshold noise W once and a fresh query noise V_j per visited query, and
halts at the first j with g_j(x) + V_j <= T + W. The scan here draws the V's of a whole *block* of
visits at once, tests the block and keeps the first passing position; the rest of the block is
discarded, never reused (``docs/operations/knn.md``: Vectorised scan). Because every V_j is an
independent draw and the decision at visit j reads V_1..V_j only, the output has exactly the law of
the one-at-a-time algorithm: same visiting order, same halting position. Several independent runs
(users, or repetitions) are scanned together, so one sampler call serves many runs.

Every draw is an exact lattice discrete Laplace (``docs/noise.md``) at the GP 1-D row of
``docs/noise.md`` with ε replaced by ε/s: the threshold at s = 2, the queries at s = 4 (PNN: 3 and
6). All values are compared as integers on one lattice, so no float decides an outcome. The run is
charged its ε (or ρ, run at ε = √(2ρ)) once, never per draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.mechanisms.calibration import (
    G_LOC,
    check_eps,
    check_g,
    check_positive,
    check_rho,
    eps_from_rho,
    gp_laplace,
)
from gpframe.mechanisms.released import Guarantee, _as_array, _noise_fn

__all__ = [
    "LaplacePool",
    "SVTCalibration",
    "SVTResult",
    "calibrate_draws",
    "scan",
    "sparse_vector",
    "svt_law",
]

_NOTHING = "Nothing was charged."
#: first block of visits per run; blocks grow ×BLOCK_GROWTH up to BLOCK_MAX (public constants:
#: they change the running time, never the output law)
#: (doubling keeps the discarded tail of the last block below the visits made, on average ~⅓ of
#: them; the pool below makes the extra blocks cheap)
BLOCK_FIRST = 64
#: draws of the first step over all runs: few runs start with bigger blocks, since a step's fixed
#: cost (a few dozen numpy calls) equals that of ~1,000 draws
FIRST_STEP_DRAWS = 2048
BLOCK_GROWTH = 2
BLOCK_MAX = 1 << 16
#: largest number of draws tested in one vectorised step (memory bound)
STEP_DRAWS = 1 << 20
#: default pool refill, in draws (one sampler call per refill); a pool may grow its refills
POOL_CHUNK = 2048
#: largest refill of a growing pool
POOL_CHUNK_MAX = 1 << 18
#: default public cap of a cyclic scan, in full passes over the list (the k-PNN contract of
#: docs/operations/knn.md)
MAX_CYCLES = 1000


@dataclass(frozen=True)
class SVTCalibration:
    """The lattice and the exact rates of every draw of one SVT/PNN run (``docs/noise.md``).

    Attributes
    ----------
    eps : Fraction
        The GP amount of the whole run (m⁻¹); the ledger is charged this (or ρ) once.
    g : Fraction
        The common lattice step (metres) of the values and all draws.
    r_min : Fraction
        Floor of the metric d_r of the guarantee (metres).
    lam : dict of str to Fraction
        Rate per lattice step of each draw kind, e.g. ``{"threshold": λ_W, "query": λ_V}``.
    scale : dict of str to Fraction
        The same as scales in metres, g/λ = s(K + g/r_min)/ε.
    """

    eps: Fraction
    g: Fraction
    r_min: Fraction
    lam: dict[str, Fraction]
    scale: dict[str, Fraction]

    def metric(self) -> tuple[str, Fraction]:
        """Return the guarantee's metric, ``("floor", r_min)``."""
        return ("floor", self.r_min)


def calibrate_draws(
    eps: Fraction,
    draw_scales: dict[str, Fraction | int],
    *,
    K: Fraction = Fraction(1),
    g: Fraction = G_LOC,
    r_min: Fraction = Fraction(1),
) -> SVTCalibration:
    """Exact rates of a multi-draw run at GP amount ``eps`` (``docs/noise.md``: multi-draw).

    The largest draw scale is calibrated first; if its noise needs a coarser lattice
    (``docs/noise.md``), every other draw uses that same lattice and floor, so all values compare as
    integers of one step.

    >>> c = calibrate_draws(Fraction(1, 100), {"threshold": 2, "query": 4})
    >>> c.scale["threshold"] == 2 * (1 + Fraction(1, 1024)) * 100, c.g
    (True, Fraction(1, 1024))
    """
    names = sorted(draw_scales, key=lambda k: Fraction(draw_scales[k]), reverse=True)
    top = gp_laplace(eps, K=K, d=1, g=g, r_min=r_min, s=Fraction(draw_scales[names[0]]))
    floor = top.r_min if top.r_min is not None else r_min
    lam: dict[str, Fraction] = {names[0]: top.param}
    for name in names[1:]:
        cal = gp_laplace(eps, K=K, d=1, g=top.g, r_min=floor, s=Fraction(draw_scales[name]))
        if cal.g != top.g:  # pragma: no cover - a smaller scale never coarsens further
            raise GpframeInternalError("SVT draws ended on different lattices.")
        lam[name] = cal.param
    return SVTCalibration(
        eps=eps,
        g=top.g,
        r_min=floor,
        lam=lam,
        scale={k: top.g / v for k, v in lam.items()},
    )


class LaplacePool:
    """i.i.d. discrete Laplace draws at one rate, handed out in order and never twice.

    ``take(n)`` returns the next ``n`` draws of the pool, refilling it with one sampler call of
    ``max(n, chunk)`` draws when it runs short. Draws already handed out are never returned again:
    a block's unused tail is simply dropped by the caller (``docs/operations/knn.md``). Draws still
    in the pool have been looked at by nothing, so handing them to the next run is the same as
    drawing them then.

    ``grow=True`` doubles the refill after each sampler call (up to ``POOL_CHUNK_MAX``): a scan
    whose length is unknown in advance then pays O(log) sampler calls and wastes at most the last
    refill's unused part (never handed out, so never looked at).
    """

    def __init__(
        self, lam: Fraction, bits: Any, chunk: int = POOL_CHUNK, grow: bool = False
    ) -> None:
        self.lam = lam
        self.bits = bits
        self.chunk = int(chunk)
        self.grow = bool(grow)
        self._buf = np.empty(0, dtype=np.int64)
        self._pos = 0
        self.calls = 0
        self.drawn = 0

    def take(self, n: int) -> NDArray[np.int64]:
        """Return the next ``n`` draws (int64, lattice units)."""
        n = int(n)
        left = self._buf.size - self._pos
        if left < n:
            m = max(n - left, self.chunk)
            fresh = _noise_fn("discrete_laplace")(self.lam, m, self.bits)
            self.calls += 1
            self.drawn += m
            if self.grow:
                self.chunk = min(2 * self.chunk, max(POOL_CHUNK_MAX, self.chunk))
            # nothing left over (the usual case of a scan's blocks): the refill is the buffer,
            # no copy of up to POOL_CHUNK_MAX draws
            self._buf = np.concatenate([self._buf[self._pos :], fresh]) if left else fresh
            self._pos = 0
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out


def scan(
    values: NDArray[np.int64] | Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.int64]],
    start: NDArray[np.int64],
    length: NDArray[np.int64],
    threshold: NDArray[np.int64],
    cap: NDArray[np.int64],
    pool: LaplacePool,
    *,
    block: int | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Run R independent "below" SVT scans at once; return (position, capped) per run.

    Run r visits positions ``t mod length[r]`` for t = 0, 1, ... up to ``cap[r]`` visits, reads
    the query answer there (``values[start[r] + pos]``, or ``values(runs, pos)`` for a callable
    that snaps only what is visited), adds a fresh query draw V_t from ``pool`` and halts at the
    first t with ``answer + V_t <= threshold[r]`` (integers, lattice units; ``threshold`` already
    holds T + W). The returned position is ``t mod length[r]`` (−1 when the cap was reached: the
    all-⊥ transcript). Each step tests a block of B visits of every still-running run with one
    ``pool.take``; the block's draws past the first pass are discarded (``docs/operations/knn.md``).
    The first block is ``block`` visits (default: ``FIRST_STEP_DRAWS`` shared by the runs, at least
    ``BLOCK_FIRST``); blocks then double. Block sizes depend on R only, never on the data.
    """
    R = int(start.size)
    if callable(values):
        get = values
    else:
        arr = values

        def get(runs: NDArray[np.int64], loc: NDArray[np.int64]) -> NDArray[np.int64]:
            return arr[start[runs, None] + loc]

    pos = np.full(R, -1, dtype=np.int64)
    capped = np.zeros(R, dtype=bool)
    done = np.zeros(R, dtype=np.int64)  # visits made so far
    active = np.flatnonzero(cap > 0)
    capped[cap <= 0] = True
    B = max(BLOCK_FIRST, FIRST_STEP_DRAWS // max(R, 1)) if block is None else max(1, int(block))
    while active.size:
        b = max(1, min(B, STEP_DRAWS // active.size))
        t = done[active, None] + np.arange(b, dtype=np.int64)[None, :]
        valid = t < cap[active, None]
        loc = t % length[active, None]
        v = pool.take(active.size * b).reshape(active.size, b)
        passed = (get(active, loc) + v <= threshold[active, None]) & valid
        hit = passed.any(axis=1)
        first = np.argmax(passed, axis=1)
        h = active[hit]
        pos[h] = loc[hit, first[hit]]
        done[active] += b
        out = ~hit & (done[active] >= cap[active])
        capped[active[out]] = True
        active = active[~hit & ~out]
        B = min(BLOCK_GROWTH * B, BLOCK_MAX)
    return pos, capped


@dataclass(frozen=True)
class SVTResult:
    """What :func:`sparse_vector` returns.

    Attributes
    ----------
    index : ndarray of int64, shape (runs,)
        Position in ``values`` of the first ⊤ of each run; −1 for "none" (a finite list exhausted,
        or the public cap reached).
    capped : ndarray of bool, shape (runs,)
        The run reached the cap (always the case when ``index`` is −1).
    guarantee : Guarantee
        What each run costs its user, charged once per run (never per draw).
    noise : dict
        The exact rates (``lam_threshold``, ``lam_query``, lattice units) and scales (metres).
    """

    index: NDArray[np.int64]
    capped: NDArray[np.bool_]
    guarantee: Guarantee
    noise: dict[str, Fraction] = field(repr=False)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.index, dtype=dtype)

    def __len__(self) -> int:
        return len(self.index)


def _budget(eps: Any, rho: Any) -> tuple[str, Fraction, Fraction]:
    if (eps is None) == (rho is None):
        raise InvalidInputError(
            f"pass exactly one of eps= (GP, per metre) or rho= (CGP, per square metre), got "
            f"eps={eps!r}, rho={rho!r}. {_NOTHING}"
        )
    if eps is not None:
        e = check_eps(eps, "eps")
        return "gp", e, e
    r = check_rho(rho, "rho")
    e = eps_from_rho(r)
    check_eps(e, "sqrt(2*rho)")
    return "cgp", r, e


def _int_arg(value: Any, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InvalidInputError(f"{name}={value!r} must be an integer >= {lo}. {_NOTHING}")
    return int(value)


def sparse_vector(
    values: Any,
    *,
    threshold: float,
    eps: float | Fraction | None = None,
    rho: float | Fraction | None = None,
    K: float | Fraction = 1,
    above: bool = False,
    cyclic: bool = False,
    max_cycles: int = MAX_CYCLES,
    runs: int = 1,
    g: float | Fraction | None = None,
    r_min: float | Fraction = 1,
    rng: Any = None,
) -> SVTResult:
    """Sparse vector technique (AboveThreshold / BelowThreshold) under ε-GP or ρ-CGP.

    See ``docs/operations/knn.md`` and ``docs/noise.md`` (privacy, CGP at ε = √(2ρ), cap, block
    scan, lattice noise, multi-draw); Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 1.

    Parameters
    ----------
    values : array_like, shape (m,) or (runs, m)
        The answers g_j(x) of K-Lipschitz queries (metres), in visiting order. The order must not
        depend on the private data. One row per run, or one row shared by all runs.
    threshold : float
        The public threshold T (metres; data-independent).
    eps, rho : float
        The budget of each run: ``eps`` (GP, m⁻¹) or ``rho`` (CGP, m⁻², run at ε = √(2ρ) rounded
        down). Exactly one.
    K : float
        Lipschitz constant of every query.
    above : bool
        False (default): halt at the first g_j + V_j <= T + W (the paper's form); True: at the first
        g_j + V_j >= T + W (the same algorithm on −g, −T).
    cyclic : bool
        Visit the list again after its end (PNN), up to ``max_cycles`` passes; otherwise a single
        pass and "none" (−1) after it.
    max_cycles : int
        The public cap of a cyclic scan, in passes over the list; reaching it is the all-⊥
        transcript (−1, ``capped``).
    runs : int
        Number of independent runs (each its own W and V's; each is charged separately).
    g, r_min : float
        Lattice step (a power of two, default 2⁻¹⁰ m) and metric floor (default 1 m).
    rng : BitSource or None
        Randomness; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).

    Returns
    -------
    SVTResult
        The position of the first ⊤ per run (−1: none). T + W, W and the V's are never returned.

    Notes
    -----
    Noise: W ~ discrete Laplace of scale 2K'/ε, each V_j of scale 4K'/ε, K' = K + g/r_min
    (``docs/noise.md`` with ε/2 and ε/4), on the lattice g·Z; values and T are snapped to it.
    Charge: ε (GP) or ρ (CGP) per run, once, w.r.t. d_r (``SVTResult.guarantee``), whatever the
    number of ⊥ answers (``docs/operations/knn.md``).

    Examples
    --------
    >>> res = sparse_vector([5.0, 3.0, 1.0], threshold=2.0, eps=1.0, runs=4)
    >>> res.index.shape, res.guarantee.kind, res.guarantee.amount
    ((4,), 'gp', Fraction(1, 1))
    >>> res.noise["scale_query"] == 4 * (1 + Fraction(1, 1024))   # 4K'/eps metres
    True
    >>> sparse_vector([500.0, 100.0], threshold=0.0, rho=5e-5, cyclic=True).guarantee.kind
    'cgp'
    """
    kind, amount, e = _budget(eps, rho)
    k_f = check_positive(K, "K")
    g_f = G_LOC if g is None else check_g(g, "g")
    r_f = check_positive(r_min, "r_min")
    runs = _int_arg(runs, "runs", 1)
    max_cycles = _int_arg(max_cycles, "max_cycles", 1)
    x = _as_array(values, "values", min_ndim=1, max_ndim=2)
    if x.shape[-1] == 0:
        raise InvalidInputError(f"values is empty: pass at least one query answer. {_NOTHING}")
    if x.ndim == 2 and x.shape[0] != runs:
        raise InvalidInputError(
            f"values has {x.shape[0]} rows but runs={runs}; pass one row per run or a 1-D list "
            f"shared by all runs. {_NOTHING}"
        )
    t = _as_array([threshold], "threshold", min_ndim=1, max_ndim=1)[0]
    cal = calibrate_draws(e, {"threshold": 2, "query": 4}, K=k_f, g=g_f, r_min=r_f)
    snap = _noise_fn("snap")
    sign = -1.0 if above else 1.0
    u = snap(sign * x.reshape(-1), cal.g, "values")
    t_int = int(snap(np.array([sign * t]), cal.g, "threshold")[0])
    bits = _noise_fn("resolve_rng")(rng)
    m = x.shape[-1]
    w = _noise_fn("discrete_laplace")(cal.lam["threshold"], runs, bits)
    thr = t_int + w
    start = (np.arange(runs, dtype=np.int64) * m) if x.ndim == 2 else np.zeros(runs, np.int64)
    length = np.full(runs, m, dtype=np.int64)
    cap = np.full(runs, m * max_cycles if cyclic else m, dtype=np.int64)
    pool = LaplacePool(cal.lam["query"], bits, chunk=max(POOL_CHUNK, min(runs * m, 1 << 20)))
    pos, capped = scan(u, start, length, thr, cap, pool)
    spec = (
        "docs/operations/knn.md and docs/noise.md (multi-draw); Liang & Yi, 'Concentrated "
        "Geo-Privacy' (2023), Alg. 1"
    )
    guarantee = Guarantee(kind, amount, cal.metric(), spec)
    noise = {
        "lam_threshold": cal.lam["threshold"],
        "lam_query": cal.lam["query"],
        "scale_threshold": cal.scale["threshold"],
        "scale_query": cal.scale["query"],
        "g": cal.g,
        "eps": e,
    }
    return SVTResult(pos, capped, guarantee, noise)


def svt_law(values: Any, threshold: float, eps: float, K: float = 1.0) -> NDArray[np.float64]:
    """Exact output law of Algorithm 1 on a finite list, continuous Laplace.

    See ``docs/operations/knn.md`` (test oracle).

    Returns P[halt at 1..m] and P[none] by numerical integration over W (scipy); used by tests
    only, never to release anything.

    >>> p = svt_law([5, 3, 1], 2, 1.0)
    >>> [round(float(v), 6) for v in p]
    [0.277723, 0.268541, 0.221152, 0.232584]
    """
    from scipy import integrate

    g = np.asarray(values, dtype=np.float64)
    bw, bv = 2 * K / eps, 4 * K / eps

    def cdf(z: float) -> float:  # P(V <= z), V ~ Lap(bv)
        return 0.5 * math.exp(z / bv) if z < 0 else 1 - 0.5 * math.exp(-z / bv)

    def term(j: int | None) -> float:
        def f(w: float) -> float:
            dens = math.exp(-abs(w) / bw) / (2 * bw)
            p = 1.0
            for i in range(len(g) if j is None else j):
                p *= 1 - cdf(threshold + w - g[i])
            if j is not None:
                p *= cdf(threshold + w - g[j])
            return dens * p

        pts = sorted({float(v - threshold) for v in g} | {0.0})
        lim = 60 * max(bw, bv) + float(np.abs(g).max()) + abs(threshold)
        return integrate.quad(f, -lim, lim, points=pts, limit=400, epsabs=1e-13)[0]

    return np.array([term(j) for j in range(len(g))] + [term(None)])
