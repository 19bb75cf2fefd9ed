"""Positive controls: broken mechanisms the audit must catch, and the references they break.

Each :class:`Mutant` carries audit cases with the claim the *correct* mechanism makes; the
mutant is killed when the audit reports a violation on at least one of them. A mutant that
survives fails the suite (``test_mutants.py``), so the audit can never silently become vacuous.

Planted here:

* under-noising by 10 % (noise scale × 0.9) of 1-D GP Laplace, planar Laplace, central Laplace;
* doubled sensitivity: noise calibrated for half the true sensitivity (central Laplace, central
  Gaussian; a 2-Lipschitz value released with K = 1 under GP);
* per-axis 1-D Laplace passed off as planar Laplace, audited along the diagonal;
* noise in degrees: planar Laplace run on lon/lat with the budget converted at 111 320 m per
  degree on both axes (a degree of longitude is cos(lat) shorter), audited east-west at 70°N;
* float numpy Laplace (support test, secure-noise.md T-FP-1) — see :func:`numpy_reachable`;
* the non-private sparse-vector variants of selection.md §2.5 (no threshold noise, no query
  noise, reporting the noisy value, no stop), with a correct reference AboveThreshold (§2.1).

The ledger-level mutants (skipped charge, eliminated user charged zero rounds) are in
``test_mutants.py`` because they run against ``gp.Session``.

The SVT code here uses numpy floats: it is a reference for the audit only, never a release path.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from .engine import Case, Claim, discrete_featurizer, numpy_rng

__all__ = [
    "MUTANTS",
    "SVT_PAIRS",
    "Mutant",
    "numpy_reachable",
    "svt",
    "svt_case",
]

M_PER_DEG = 111_320.0


@dataclass(frozen=True)
class Mutant:
    """A broken mechanism and the audit cases (with the correct claim) that must expose it."""

    name: str
    description: str
    cases: tuple[Case, ...]


def _quiet(fn, *args, **kwargs):
    from gpframe.errors import GpframeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpframeWarning)
        return fn(*args, **kwargs)


def _repeat(x: Any, n: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.repeat(x[None, ...], n, axis=0)


# --------------------------------------------------------------------------------------------
# noise-level mutants built on gpframe's own exact samplers
# --------------------------------------------------------------------------------------------


def _under_noised_laplace_gp(eps: float = 1.0, d: float = 3.0) -> Mutant:
    from gpframe.mechanisms import laplace_gp

    pair = (1000.123456789, 1000.123456789 + d)

    def run(x, n, rng):  # scale × 0.9: the rate is eps / 0.9
        return _quiet(laplace_gp, _repeat(x, n), eps=Fraction(eps) / Fraction(9, 10), rng=rng)

    case = Case(
        "mutant/under_noise/laplace_gp",
        run,
        pair,
        Claim.gp(eps, d),
        centers=pair,
        n_fast=400_000,
    )
    return Mutant("under_noise_10pct/laplace_gp", "1-D GP Laplace, noise scale × 0.9", (case,))


def _under_noised_planar(eps: float = 1.0, d: float = 3.0) -> Mutant:
    from gpframe.mechanisms import planar_laplace

    from .registry import utm_pair  # lazy: the registry imports the case modules, which use us

    a, b, k = utm_pair(45.0, 45.0, d)

    def run(x, n, rng):
        return _quiet(
            planar_laplace,
            _repeat(x, n),
            eps=Fraction(eps) / Fraction(k) / Fraction(9, 10),
            rng=rng,
        )

    case = Case(
        "mutant/under_noise/planar",
        run,
        (a, b),
        Claim.gp(eps, d),
        centers=(a, b),
        n_fast=400_000,
    )
    return Mutant("under_noise_10pct/planar_laplace", "planar Laplace, noise scale × 0.9", (case,))


def _under_noised_laplace_dp(epsilon: float = 3.0) -> Mutant:
    from gpframe.mechanisms import laplace_dp

    pair = (np.array([2.0, 1.0, 1.0]), np.array([2.0, 1.0]))

    def run(ds, n, rng):
        return laplace_dp(
            np.full(n, ds.sum()),
            sensitivity=1,
            epsilon=Fraction(epsilon) / Fraction(9, 10),
            integer=True,
            rng=rng,
        )

    case = Case(
        "mutant/under_noise/laplace_dp",
        run,
        pair,
        Claim.dp(epsilon),
        centers=(4.0, 3.0),
        n_fast=400_000,
    )
    return Mutant("under_noise_10pct/laplace_dp", "central Laplace, noise scale × 0.9", (case,))


def _half_sensitivity_laplace_dp(epsilon: float = 1.0) -> Mutant:
    from gpframe.mechanisms import laplace_dp

    # one user contributes 2 to the count: the true sensitivity is 2, the mutant passes 1
    pair = (np.array([2.0, 1.0, 0.0, 2.0]), np.array([2.0, 1.0, 0.0]))

    def run(ds, n, rng):
        return laplace_dp(
            np.full(n, ds.sum()), sensitivity=1, epsilon=epsilon, integer=True, rng=rng
        )

    case = Case(
        "mutant/half_sensitivity/laplace_dp", run, pair, Claim.dp(epsilon), centers=(5.0, 3.0)
    )
    return Mutant("double_sensitivity/laplace_dp", "central Laplace calibrated for Δ/2", (case,))


def _half_sensitivity_gaussian_zcdp(rho: float = 0.5) -> Mutant:
    from gpframe.mechanisms import gaussian_zcdp

    pair = (np.array([1.0, 2.0, 2.0]), np.array([1.0, 2.0]))

    def run(ds, n, rng):
        return gaussian_zcdp(np.full(n, ds.sum()), l2_sensitivity=1, rho=rho, integer=True, rng=rng)

    case = Case(
        "mutant/half_sensitivity/gaussian_zcdp",
        run,
        pair,
        Claim.zcdp(rho),
        centers=(5.0, 3.0),
        n_fast=200_000,
    )
    return Mutant(
        "double_sensitivity/gaussian_zcdp", "central Gaussian calibrated for Δ₂/2", (case,)
    )


def _shrunk_sigma(sampler: str):
    """Patch ``gpframe.mechanisms.noise.<sampler>`` to draw at 0.8 sigma (sigma² × 16/25).

    The wrapper's calibration, and so the sigma its Result reports, is unchanged: only the noise
    actually drawn is smaller. Returns a context manager.
    """
    from unittest import mock

    import gpframe.mechanisms.noise as noise_pkg

    orig = getattr(noise_pkg, sampler)

    def shrunk(sigma2, *args):
        return orig(Fraction(sigma2) * Fraction(16, 25), *args)

    return mock.patch.object(noise_pkg, sampler, shrunk)


#: The fast-tier Gaussian cases the 0.8 sigma mutant reruns, and the sampler each one calls.
SMALL_SIGMA_BASES = {
    "gaussian_zcdp/int/rho0.5/sens1": "discrete_gaussian",
    "gaussian_cgp/2d/rho0.02/d10/az45": "discrete_gaussian_nd",
}


def _small_sigma_gaussian() -> Mutant:
    """The fast-tier Gaussian cases, sampled at 0.8 sigma while reporting the nominal sigma.

    Not caught by the conversion-formula claim (the lower bound stays near 0.7 of it); caught by
    the exact-curve check (``engine.failed``: ref_ratio > REF_RATIO_MAX).
    """
    from .registry import CASES  # lazy: the registry imports the case modules, which use us

    cases = []
    for name, sampler in SMALL_SIGMA_BASES.items():
        base = next(c for c in CASES if c.name == name)

        def run(x, n, rng, base=base, sampler=sampler):
            with _shrunk_sigma(sampler):
                return base.run(x, n, rng)

        cases.append(replace(base, name="mutant/sigma_x0.8/" + name, run=run, tiers=frozenset()))
    return Mutant(
        "sigma_x0.8/gaussian",
        "central and CGP Gaussians drawn at 0.8 sigma, reporting the nominal sigma",
        tuple(cases),
    )


def _half_lipschitz_laplace_gp(eps: float = 1.0, d: float = 1.5) -> Mutant:
    from gpframe.mechanisms import laplace_gp

    # the released value is 2·x (2-Lipschitz) but the mutant declares K = 1
    pair = (100.0, 100.0 + d)

    def run(x, n, rng):
        return _quiet(laplace_gp, _repeat(2.0 * x, n), eps=eps, K=1, rng=rng)

    case = Case(
        "mutant/half_sensitivity/laplace_gp",
        run,
        pair,
        Claim.gp(eps, d),
        centers=(200.0, 200.0 + 2 * d),
    )
    return Mutant(
        "double_sensitivity/laplace_gp", "2-Lipschitz GP value released with K=1", (case,)
    )


def _per_axis_planar(eps: float = 1.0, d: float = 3.0) -> Mutant:
    from gpframe.mechanisms import laplace_gp

    from .registry import utm_pair  # lazy: see above

    a, b, k = utm_pair(45.0, 45.0, d)  # the diagonal, where ℓ1 and ℓ2 differ most

    def run(x, n, rng):
        pts = _repeat(x, n)
        out = _quiet(laplace_gp, pts.reshape(-1), eps=Fraction(eps) / Fraction(k), rng=rng)
        return np.asarray(out).reshape(pts.shape)

    case = Case("mutant/per_axis/planar", run, (a, b), Claim.gp(eps, d), centers=(a, b))
    return Mutant("per_axis_laplace_as_planar", "independent 1-D Laplace on x and y", (case,))


def _degrees_planar(eps: float = 5e-4, d: float = 2000.0, lat: float = 70.0) -> Mutant:
    from pyproj import Geod

    from gpframe.mechanisms import planar_laplace

    lon = 5.0
    lon2, lat2, _ = Geod(ellps="WGS84").fwd(lon, lat, 90.0, d)
    a, b = np.array([lon, lat]), np.array([lon2, lat2])
    eps_deg = Fraction(eps) * Fraction(M_PER_DEG)  # "eps per metre × metres per degree"

    def run(x, n, rng):
        return _quiet(
            planar_laplace,
            _repeat(x, n),
            eps=eps_deg,
            g=Fraction(1, 2**26),
            r_min=Fraction(1, 2**17),
            rng=rng,
        )

    case = Case("mutant/degrees/planar", run, (a, b), Claim.gp(eps, d), centers=(a, b))
    return Mutant("noise_in_degrees", "planar Laplace on lon/lat, 111 320 m per degree", (case,))


# --------------------------------------------------------------------------------------------
# float numpy Laplace: the support test (Mironov 2012; secure-noise.md T-FP-1)
# --------------------------------------------------------------------------------------------


def numpy_reachable(y: np.ndarray) -> np.ndarray:
    """True where y is an output numpy's ``Generator.laplace(0, 1)`` can produce.

    numpy draws U = j·2⁻⁵³ and returns ``log(U + U)`` for U < 1/2 and ``-log(2.0 - U - U)``
    otherwise (evaluated left to right in float64). We invert approximately and test the nearby
    j exactly with the same float expressions.
    """
    y = np.asarray(y, dtype=np.float64)
    out = np.zeros(y.shape, dtype=bool)
    neg = y <= 0
    with np.errstate(all="ignore"):
        j0 = np.rint(np.exp(y[neg]) * 2.0**52)  # U + U = j·2⁻⁵² exactly
        ok = np.zeros(j0.shape, dtype=bool)
        for dj in range(-2, 3):
            u = (j0 + dj) * 2.0**-53
            ok |= (u > 0) & (u < 0.5) & (np.log(u + u) == y[neg])
        out[neg] = ok
        pos = ~neg
        j0 = np.rint((1.0 - np.exp(-y[pos]) / 2.0) * 2.0**53)
        ok = np.zeros(j0.shape, dtype=bool)
        for dj in range(-2, 3):
            u = (j0 + dj) * 2.0**-53
            ok |= (u >= 0.5) & (u < 1.0) & (-np.log(2.0 - u - u) == y[pos])
        out[pos] = ok
    return out


def naive_float_laplace(x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """The textbook float mechanism the support test must expose: x + numpy Laplace(0, 1)."""
    return x + rng.laplace(0.0, 1.0, n)


# --------------------------------------------------------------------------------------------
# sparse vector: a reference AboveThreshold and the broken variants of selection.md §2.5
# --------------------------------------------------------------------------------------------

SVT_M = 10
#: the standard counterexample pairs (sensitivity-1 query answers, public threshold T = 0)
SVT_PAIRS: dict[str, tuple[np.ndarray, np.ndarray]] = {
    "shift": (np.zeros(SVT_M), np.ones(SVT_M)),
    "halves": (
        np.array([1.0] * 5 + [0.0] * 5),
        np.array([0.0] * 5 + [1.0] * 5),
    ),
    "prefix": (np.zeros(SVT_M), np.array([1.0] * 4 + [0.0] * (SVT_M - 4))),
}

SVT_VARIANTS = ("reference", "no_threshold_noise", "no_query_noise", "noisy_value", "no_stop")


def svt(
    q: np.ndarray, n: int, rng: np.random.Generator, *, eps: float, variant: str, T: float = 0.0
) -> np.ndarray:
    """n independent runs of AboveThreshold (Δ = 1) on the answers ``q``; vectorised.

    Returns float64 (n, m + 1): per query 0 = ⊥, 1 = ⊤, 2 = not asked (after the stop), and in
    the last column the released noisy value of the ⊤ (``noisy_value`` only; NaN otherwise).

    ``reference``: selection.md §2.1, threshold Lap(2/ε), queries Lap(4/ε), halt at the first ⊤.
    ``no_threshold_noise``: as the reference without the threshold draw.
    ``no_query_noise`` (LSL17 Alg 5): threshold Lap(2/ε), no query noise, no halt.
    ``noisy_value`` (LSL17 Alg 3, c = 1): threshold Lap(2/ε), queries Lap(2/ε), halt at the
    first ⊤ and release q + ν there.
    ``no_stop`` (LSL17 Alg 6): threshold Lap(2/ε), queries Lap(2/ε), no halt.
    """
    q = np.asarray(q, dtype=np.float64)
    m = len(q)
    b_t, b_q, halt = {
        "reference": (2 / eps, 4 / eps, True),
        "no_threshold_noise": (0.0, 4 / eps, True),
        "no_query_noise": (2 / eps, 0.0, False),
        "noisy_value": (2 / eps, 2 / eps, True),
        "no_stop": (2 / eps, 2 / eps, False),
    }[variant]
    rho = rng.laplace(0.0, b_t, (n, 1)) if b_t else np.zeros((n, 1))
    nu = rng.laplace(0.0, b_q, (n, m)) if b_q else np.zeros((n, m))
    noisy = q[None, :] + nu
    top = noisy >= T + rho
    out = np.empty((n, m + 1))
    out[:, :m] = top
    out[:, m] = np.nan
    if halt:
        first = np.where(top.any(axis=1), top.argmax(axis=1), m)
        after = np.arange(m)[None, :] > first[:, None]
        out[:, :m][after] = 2
        if variant == "noisy_value":
            hit = first < m
            out[hit, m] = noisy[hit, first[hit]]
    return out


def _svt_code(out: np.ndarray) -> np.ndarray:
    m = out.shape[1] - 1
    pattern = out[:, :m].astype(np.int64) @ (3 ** np.arange(m, dtype=np.int64))
    v = out[:, m]
    nan = np.isnan(v)
    # value bins 0.5 wide on [-6, 6] (ε = 1: the query noise scale is 2), NaN in bin 0
    vb = 2 + np.clip(np.floor((np.where(nan, 0.0, v) + 6.0) * 2.0), -1, 24).astype(np.int64)
    vb[nan] = 0
    return pattern * 32 + vb


def svt_case(variant: str, pair: str, *, eps: float = 1.0, n_fast: int = 1_000_000) -> Case:
    """An audit case for one SVT variant on one standard pair, with the claim eps-DP."""
    qa, qb = SVT_PAIRS[pair]

    def run(q, n, rng):
        return svt(q, n, rng, eps=eps, variant=variant)

    return Case(
        name=f"svt/{variant}/{pair}",
        run=run,
        inputs=(qa, qb),
        claim=Claim.dp(eps),
        featurizers=(discrete_featurizer(_svt_code),),
        rng=numpy_rng,
        n_fast=n_fast,
        n_slow=4_000_000,
    )


def _svt_mutant(variant: str, pairs: tuple[str, ...], n_fast: int = 1_000_000) -> Mutant:
    return Mutant(
        f"svt/{variant}",
        f"AboveThreshold variant {variant} (selection.md §2.5)",
        tuple(svt_case(variant, p, n_fast=n_fast) for p in pairs),
    )


MUTANTS: list[Mutant] = [
    _under_noised_laplace_gp(),
    _under_noised_planar(),
    _under_noised_laplace_dp(),
    _half_sensitivity_laplace_dp(),
    _half_sensitivity_gaussian_zcdp(),
    _small_sigma_gaussian(),
    _half_lipschitz_laplace_gp(),
    _per_axis_planar(),
    _degrees_planar(),
    _svt_mutant("no_threshold_noise", ("halves",), n_fast=400_000),
    _svt_mutant("no_query_noise", ("halves",), n_fast=100_000),
    _svt_mutant("noisy_value", ("halves",), n_fast=300_000),
    _svt_mutant("no_stop", ("halves",), n_fast=200_000),
]
