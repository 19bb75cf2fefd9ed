"""Private Gaussian KDE over arrays: point queries (Algorithm 7) and bias-corrected rasters.

See ``docs/operations/kde.md``, ``docs/operations/range_count.md`` and ``docs/noise.md`` (kernel,
baselines, error bounds, bias, Algorithm 7, rasters, elimination, through
:mod:`gpframe.queries.elimination`, charges, pitfalls, discrete Gaussian accounting, lattice error
bounds, what the wrappers charge, the σ actually sampled); Liang & Yi, 'Adaptive Privacy Budgeting'
(2026), Alg. 7.

Kernel (``docs/operations/kde.md``, the 2b² convention): K_b(x, q) = exp(−||x − q||²/(2b²)), b the
bandwidth in metres, and KDE(q) = (1/n) Σ_i K_b(x_i, q) ∈ [0, 1], n the users asked (public in the
local model).

Point queries (:func:`kde_point`, :func:`kde_points_pt`): ``pt`` privatizes each user's point once
and reuses it for any number of query points; ``dist`` releases ||x_i − q|| with 1-D noise, tied to
one q; ``pt-elim`` / ``dist-elim`` run Algorithm 4 one-sided (h(x) = ||x − q||, ν_low = −∞,
ν_high = ν = 3b) so that users confidently farther than ν stop early and pay only the rounds
they ran.

Rasters (:func:`kde_raster_arrays`): each user's point is privatized once (the ``pt`` baseline,
charged once however many cells) and the density is estimated on a grid by binning and FFT
convolution with a *deconvolving* bandwidth (see :func:`corrected_bandwidth`).

Everything here is in projected metres; the caller projects and divides the amounts by the
projection's scale factor (``scale_max``), as ``privatize`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from gpframe.accounting.amounts import probability
from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.queries.elimination import eliminate_noninteractive, prepare_parts, small_codes

__all__ = [
    "METHODS",
    "NU_FACTOR",
    "KdePoint",
    "KdePoints",
    "Privatized",
    "RasterArrays",
    "bandwidth_limit",
    "check_length",
    "corrected_bandwidth",
    "cutoff",
    "error_bound_nominal",
    "expected_kernel_dist",
    "expected_kernel_pt",
    "grid_for_bounds",
    "kde_point",
    "kde_points_pt",
    "kde_raster_arrays",
    "kernel",
    "kernel_lipschitz",
    "noise_sigma",
    "preflight",
    "privatize_once",
    "raster_from_points",
]

#: the four methods of docs/operations/kde.md
METHODS = ("pt", "dist", "pt-elim", "dist-elim")
#: ν = NU_FACTOR · b, the elimination distance (3b, cut-off e^{-4.5})
NU_FACTOR = 3.0
#: largest raster side in cells (a 4096 × 4096 float64 grid is 128 MiB)
MAX_CELLS_SIDE = 4096
_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# formulas (the oracle table of docs/operations/kde.md, "KDE")


def kernel(d: Any, bandwidth_m: float) -> Any:
    """Gaussian kernel K_b = exp(−d²/(2b²)) of a distance d.

    See ``docs/operations/kde.md`` (2b² convention).

    >>> round(float(kernel(50.0, 100.0)), 10), round(float(kernel(100.0, 100.0)), 10)
    (0.8824969026, 0.6065306597)
    """
    d = np.asarray(d, dtype=np.float64)
    return np.exp(-(d * d) / (2.0 * bandwidth_m * bandwidth_m))


def kernel_lipschitz(bandwidth_m: float) -> float:
    """L_K = e^{−1/2}/b: the Lipschitz constant of r ↦ e^{−r²/(2b²)} and of x ↦ K_b(x, q).

    See ``docs/operations/kde.md``.

    >>> round(kernel_lipschitz(100.0), 12)
    0.006065306597
    """
    return math.exp(-0.5) / float(bandwidth_m)


def cutoff(nu_m: float, bandwidth_m: float) -> float:
    """e^{−ν²/(2b²)}: the most a user farther than ν from q adds to n·KDE(q).

    See ``docs/operations/kde.md``.

    >>> round(cutoff(200.0, 100.0), 10), round(cutoff(300.0, 100.0), 11)
    (0.1353352832, 0.01110899654)
    """
    return math.exp(-(float(nu_m) ** 2) / (2.0 * float(bandwidth_m) ** 2))


def error_bound_nominal(
    n: int, beta: float, allocation: float, bandwidth_m: float, method: str = "pt"
) -> float:
    """Continuous baseline bound (L_K/n)·Σ_i r_i, r_i = √(ln(m·n/β)/a).

    See ``docs/operations/kde.md`` (m = 1 pt, 2 dist).

    Equal allocations ``a``; uncapped (the bound is vacuous at a = 1e-4: 1.9087).
    The bound gpframe reports uses the noise actually sampled instead (:func:`kde_point`).

    >>> round(error_bound_nominal(1000, 0.05, 1e-2, 100.0, "pt"), 10)
    0.1908740283
    >>> round(error_bound_nominal(1000, 0.05, 1e-2, 100.0, "dist"), 10)
    0.1974407269
    """
    m = 2 if method.startswith("dist") else 1
    return kernel_lipschitz(bandwidth_m) * math.sqrt(math.log(m * n / beta) / allocation)


def expected_kernel_pt(sigma: float, D: float, bandwidth_m: float) -> float:
    """E K_b(x̃, q) for x̃ = x + N(0, σ²I₂), ||x − q|| = D: b²/(b²+σ²)·e^{−D²/(2(b²+σ²))}.

    See ``docs/operations/kde.md``.

    >>> round(expected_kernel_pt(50, 100, 100), 10)
    0.5362560368
    """
    v = bandwidth_m**2 + sigma**2
    return bandwidth_m**2 / v * math.exp(-(D**2) / (2 * v))


def expected_kernel_dist(sigma: float, D: float, bandwidth_m: float) -> float:
    """E e^{−z²/(2b²)} for z = D + N(0, σ²): b/√(b²+σ²)·e^{−D²/(2(b²+σ²))}.

    See ``docs/operations/kde.md``.

    >>> round(expected_kernel_dist(100, 300, 100), 11)
    0.07452850642
    """
    v = bandwidth_m**2 + sigma**2
    return bandwidth_m / math.sqrt(v) * math.exp(-(D**2) / (2 * v))


def noise_sigma(released: Any) -> float:
    """Return the per-coordinate standard deviation parameter of a release, in metres.

    Gaussian (CGP): √(σ_g²)·g from the exact sampler parameter ``noise["sigma2"]`` (the σ actually
    sampled; it includes the g/r_min term of ``docs/noise.md``, so it is slightly above the
    nominal 1/√(2ρ)). Planar Laplace (GP): √3 · scale, the per-coordinate std of the continuous
    planar Laplace (E r² = 6·scale²).
    """
    noise = released.noise
    if "sigma2" in noise:
        return math.sqrt(float(noise["sigma2"])) * float(released.g)
    if "a" in noise:
        return math.sqrt(3.0) * float(noise["scale"])
    raise GpframeInternalError("kde expects a Gaussian or planar Laplace point release.")


def corrected_bandwidth(bandwidth_m: float, sigma_m: Any) -> Any:
    r"""Return the deconvolving bandwidth s = √(h² − σ²) for noisy points with N(0, σ²I₂) noise.

    Why it is unbiased. Write φ_t for the N(0, t²I₂) density on the plane, so that the
    (unnormalised) kernel is K_h(x, q) = 2πh²·φ_h(x − q). A privatized point is x̃ = x + Z with
    Z ~ N(0, σ²I₂), and the expectation over Z is a convolution; Gaussians convolve by adding
    variances, φ_s ∗ φ_σ = φ_{√(s² + σ²)}. With s² = h² − σ² (needs h > σ):

        E φ_s(x̃ − q) = (φ_s ∗ φ_σ)(x − q) = φ_h(x − q),

    so the noisy points' normalised KDE with bandwidth s, (1/n) Σ φ_s(x̃_i − q), is an unbiased
    estimate of the true normalised KDE with bandwidth h, (1/n) Σ φ_h(x_i − q), at every q. In
    the unnormalised convention the same statement reads E[(h²/s²)·K_s(x̃, q)] = K_h(x, q): the
    narrower kernel is rescaled by h²/s² so that each user still carries unit mass (∫φ_s = 1).
    Each user's term is a positive density, so the estimate is ≥ 0 and integrates to 1 (no
    negative lobes, unlike Fourier deconvolution). Its variance grows like 1/s² as h ↓ σ.

    The lattice release is the discrete Gaussian on g·Z² (variance ≤ σ², ``docs/noise.md``)
    after snapping (a shift of at most g/2 = 0.5 mm per axis); both differences are of order g²
    relative to σ² and are ignored.

    Parameters
    ----------
    bandwidth_m : float
        h, metres.
    sigma_m : float or ndarray
        The noise σ per coordinate actually sampled (:func:`noise_sigma`), metres.

    Returns
    -------
    float or ndarray
        s, metres. Raises ``InvalidInputError`` when h ≤ σ (no unbiased Gaussian estimator
        exists: the noisy points are already smoother than the target).

    Examples
    --------
    >>> corrected_bandwidth(500.0, 300.0)
    400.0
    """
    s2 = float(bandwidth_m) ** 2 - np.asarray(sigma_m, dtype=np.float64) ** 2
    if np.any(s2 <= 0):
        sig = float(np.max(sigma_m))
        raise InvalidInputError(
            f"bandwidth_m={float(bandwidth_m):g} is not larger than the noise σ={sig:.4g} m per "
            "coordinate, so the bias correction (bandwidth √(h² − σ²)) does not exist. Use "
            f"bandwidth_m > {sig:.4g}, a larger rho, or correct=False (uncorrected: the raster "
            f"then estimates the density smoothed with √(h² + σ²)). {_NOTHING}"
        )
    s = np.sqrt(s2)
    return float(s) if np.ndim(s) == 0 else s


def bandwidth_limit(kind: str, amount: Any, *, scale_max: float = 1.0) -> float:
    """σ (metres per coordinate) that a one-shot point release at ``amount`` will sample.

    Computed from the wrappers' exact calibration before anything is reserved, so a raster whose
    bandwidth is too small is refused with nothing charged. CGP: √(σ_g²)·g at ρ/k² (k =
    ``scale_max``); GP: √3 · the planar Laplace scale at ε/k.

    >>> round(bandwidth_limit("cgp", 5e-5), 3)          # (1 + √2·2⁻¹⁰)·100 m
    100.138
    """
    from gpframe.accounting.amounts import exact
    from gpframe.mechanisms import calibration as cal

    a = exact(amount, "amount")
    k = exact(scale_max, "scale_max")
    if kind == "cgp":
        c = cal.cgp_gaussian(a / (k * k), d=2)
        return math.sqrt(float(c.param)) * float(c.g)
    c = cal.gp_laplace(a / k, d=2)
    return math.sqrt(3.0) * float(c.g / c.param)


# ---------------------------------------------------------------------------------------------
# one privatization per user (the pt baseline, rasters)


@dataclass
class Privatized:
    """Each queried user's point released once (``docs/operations/kde.md`` ``pt``).

    Per-user amounts are kept per *group* (one group per distinct allocation, one wrapper call
    each), so 10⁶ users cost a few exact ``Fraction`` values, not 10⁶; ``charges`` and
    ``allocations`` expand them to per-user object arrays on demand.

    Attributes
    ----------
    xy : ndarray, shape (n, 2)
        Noisy points in projected metres (NaN for users not queried).
    sigma : ndarray, shape (n,)
        Per-coordinate noise σ of each user's release (:func:`noise_sigma`), NaN if not queried.
    group : ndarray of int64, shape (n,)
        Each user's group (index into ``group_charges``), −1 if not queried. When one call
        released every user, ``sigma`` and ``group`` are read-only broadcast views of their
        one value (no per-user memory).
    group_charges, group_allocations : list of Fraction
        Per group: the ``Released.guarantee`` amount in ground units, and the allocation.
    queried : ndarray of bool, shape (n,)
    releases : list of (ndarray of int64 or slice, Released)
        Users of each wrapper call and its release (for error bounds from the sampled noise);
        ``slice(0, n)`` when one call released every user.
    kind : {"cgp", "gp"}
    r_min : float
        The largest metric floor of the guarantees (metres).
    """

    xy: NDArray[np.float64]
    sigma: NDArray[np.float64]
    group: NDArray[np.int64]
    group_charges: list[Fraction]
    group_allocations: list[Fraction]
    queried: NDArray[np.bool_]
    releases: list[tuple[NDArray[np.int64], Any]] = field(default_factory=list)
    kind: str = "cgp"
    r_min: float = 1.0

    def _expand(self, per_group: list[Fraction]) -> NDArray[Any]:
        table = np.array([Fraction(0), *per_group], dtype=object)
        return table[self.group + 1]

    @property
    def charges(self) -> NDArray[Any]:
        """Per-user charge (object array of Fraction, ground units; 0 if not queried)."""
        return self._expand(self.group_charges)

    @property
    def allocations(self) -> NDArray[Any]:
        """Per-user allocation (object array of Fraction; 0 if not queried)."""
        return self._expand(self.group_allocations)

    @property
    def n_calls(self) -> int:
        """Release wrapper calls (one per distinct allocation)."""
        return len(self.releases)

    def radius(self, beta_each: float) -> NDArray[np.float64]:
        """Per-user bound on ||x̃_i − x_i|| at failure probability ``beta_each`` (sampled noise)."""
        from gpframe.mechanisms import error_bound

        out = np.full(self.xy.shape[0], np.nan)
        for idx, rel in self.releases:
            out[idx] = error_bound(rel, beta_each, n=1)
        return out


def _r_min(guarantees: Any) -> float:
    r = 1.0
    for g in guarantees:
        if isinstance(g.metric, tuple) and g.metric and g.metric[0] == "floor":
            r = max(r, float(g.metric[1]))
    return r


def _factor_allocations(
    allocations: Any, n: int, codes: Any
) -> tuple[NDArray[np.int64], list[Any]]:
    """(code per user, distinct allocations): −1 codes are users not queried.

    Numeric arrays are factorised with ``np.unique`` (no per-user Python object); object arrays
    of ``Fraction`` fall back to hashing, which is slow for millions of users, so callers with
    one allocation per group pass ``codes=`` instead.
    """
    if codes is not None:
        c = np.asarray(codes).reshape(-1)
        vals = list(np.asarray(allocations, dtype=object).reshape(-1))
        # signed codes are kept as given (int8 for a few groups) when code + 1 cannot overflow
        if c.dtype.kind != "i" or np.iinfo(c.dtype).max <= len(vals):
            c = c.astype(np.int64)
        if c.size != n or (c.size and (c.min() < -1 or c.max() >= len(vals))):
            raise InvalidInputError(
                f"codes must have one entry per user ({n}) in [-1, {len(vals) - 1}]. {_NOTHING}"
            )
        return c, vals
    if np.ndim(allocations) == 0:
        return np.zeros(n, dtype=np.int64), [allocations]
    arr = np.asarray(allocations)
    if arr.ndim != 1 or arr.size != n:
        raise InvalidInputError(
            f"allocations has shape {arr.shape} but there are {n} users; pass one per user or a "
            f"scalar. {_NOTHING}"
        )
    if arr.dtype.kind in "iuf":
        uniq, inv = np.unique(arr, return_inverse=True)
        return inv.astype(np.int64).reshape(-1), list(uniq.tolist())
    import pandas as pd

    inv, uniq = pd.factorize(arr, use_na_sentinel=False)
    return inv.astype(np.int64), list(np.asarray(uniq, dtype=object))


def privatize_once(
    xy_m: Any,
    allocations: Any,
    *,
    kind: Literal["cgp", "gp"] = "cgp",
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
    codes: Any = None,
) -> Privatized:
    """Release each user's point once at its whole allocation.

    See ``docs/operations/kde.md`` (``pt``).

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        One point per user, projected metres.
    allocations : scalar or array of shape (n,)
        ρ (m⁻², ``kind="cgp"``) or ε (m⁻¹, ``kind="gp"``) per user, ground units; 0: not queried.
        With ``codes``: the distinct allocations only.
    kind : {"cgp", "gp"}
    unit : Fraction, optional
        Ledger unit the allocation is rounded down to before calibrating.
    scale_max : float
        Projection scale factor k: the wrappers run at ρ/k² (ε/k) per projected metre.
    rng : BitSource or None
    codes : array of int, shape (n,), optional
        User i's allocation is ``allocations[codes[i]]`` (−1: not queried); the fast path for
        millions of users, which never builds a per-user ``Fraction``.

    Returns
    -------
    Privatized

    Notes
    -----
    Noise: ``gaussian_cgp`` (σ = (1 + √2·g/r_min)·k/√(2a)) or ``planar_laplace`` (scale
    (1 + √2·g/r_min)·k/a), one call per distinct allocation (``docs/noise.md``: noise parameters and
    charges, side channels). Charge: the guarantee of the user's call, in ground units (≤ the
    allocation).

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> with seeded_enabled():
    ...     out = privatize_once([[0.0, 0.0], [10.0, 0.0]], 1e-4, rng=seeded_rng(1))
    >>> [float(c) for c in out.charges], out.n_calls
    ([0.0001, 0.0001], 1)
    """
    from gpframe.queries.elimination import _release, _validate_parts

    x = np.asarray(xy_m, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise InvalidInputError(f"points must have shape (n, 2), got {x.shape}. {_NOTHING}")
    if not np.isfinite(x).all():
        raise InvalidInputError(f"the points have NaN/inf entries. {_NOTHING}")
    from gpframe.accounting.amounts import exact

    k = exact(scale_max, "scale_max")
    n = x.shape[0]
    inv, uniq = _factor_allocations(allocations, n, codes)
    # the exact rules (rounding to the unit, validation) run on the distinct values only
    parts = prepare_parts(np.array([*uniq, 0], dtype=object)[:-1], len(uniq), (Fraction(1),),
                          unit=unit)  # fmt: skip
    _validate_parts(kind, "pt", parts, k)
    if len(parts.table) == 1 and len(uniq) == 1 and (n == 0 or int(inv.min()) == 0):
        group = None  # one call for everybody: no per-user index arrays or scatter copies
    elif len(uniq):
        group = np.where(inv >= 0, parts.codes[np.maximum(inv, 0)], -1)
    else:
        group = np.full(n, -1, dtype=np.int64)
    group_charges: list[Fraction] = []
    group_allocs: list[Fraction] = []
    releases = []
    filled: list[tuple[Any, float]] = []  # (users, σ) of each call; group = its position
    out = np.full((n, 2), np.nan) if group is not None else None
    for g, row in enumerate(parts.table):
        idx: Any = np.flatnonzero(group == g) if group is not None else slice(None)
        if (group is not None and idx.size == 0) or row[0] <= 0 or n == 0:
            continue
        rel, charge = _release(kind, "pt", x[idx], row[0], k, rng)
        # the release's own array (float64 already): np.asarray(rel, dtype=...) would copy it,
        # and the release record keeps it anyway
        if out is None:
            out = np.asarray(rel.values, dtype=np.float64)
        else:
            out[idx] = np.asarray(rel.values, dtype=np.float64)
        filled.append((idx, noise_sigma(rel)))
        group_charges.append(charge)
        group_allocs.append(parts.allocations[g])
        releases.append((slice(0, n) if group is None else idx, rel))
    if out is None:
        out = np.full((n, 2), np.nan)
    # the per-user σ and group, made after the sampler calls (not alongside their arrays);
    # one call for everybody: one value each, read-only broadcast views (no per-user memory)
    if group is None and filled:
        sigma = np.broadcast_to(np.float64(filled[0][1]), (n,))
        live = np.broadcast_to(np.int64(0), (n,))
    else:
        sigma = np.full(n, np.nan)
        live = np.full(n, -1, dtype=np.int64)
        for g, (idx, s) in enumerate(filled):
            sigma[idx] = s
            live[idx] = g
    queried = live >= 0
    return Privatized(out, sigma, live, group_charges, group_allocs, queried, releases, kind,
                      _r_min(rel.guarantee for _, rel in releases))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# point queries


@dataclass
class KdePoint:
    """One query point's private KDE (``docs/operations/kde.md``).

    Attributes
    ----------
    value : float
        The private KDE(q) = (1/n) Σ over undecided users of K_b(estimate), in [0, 1].
    error : float
        With probability ≥ 1 − β, |value − KDE(q)| ≤ error (released values only; ≤ 1).
    n_queried, n_far, n_near : int
        Users asked; eliminated as farther than ν (they add 0); kept (S).
    charges, allocations : ndarray of object (Fraction), shape (n,)
    rounds_run : ndarray of signed int (a small dtype), shape (n,)
    rounds_histogram : ndarray of int64
    saving : Fraction
    n_calls : int
    r_min : float
    contributions : ndarray, shape (n,)
        Each user's released contribution K_b(estimate) (0 if eliminated or not queried); the
        value is their mean over the queried users (what the SQL UDF returns per row).
    """

    value: float
    error: float
    n_queried: int
    n_far: int
    n_near: int
    charges: NDArray[Any]
    allocations: NDArray[Any]
    rounds_run: NDArray[np.int64]
    rounds_histogram: NDArray[np.int64]
    saving: Fraction
    n_calls: int
    r_min: float
    contributions: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))


def _check_common(bandwidth_m: Any, beta: Any) -> tuple[float, float]:
    b = _positive_finite(bandwidth_m, "bandwidth_m")
    return b, probability(beta)


def _positive_finite(v: Any, name: str) -> float:
    if isinstance(v, bool):
        raise InvalidInputError(f"{name}={v!r} must be a number of metres > 0. {_NOTHING}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"{name}={v!r} must be a number of metres > 0. {_NOTHING}"
        ) from None
    except OverflowError:  # an int beyond the float range (10**400): refused, not a crash
        # (no repr of v: an int of more than 4300 digits cannot be printed)
        raise InvalidInputError(
            f"{name} is beyond the float range; it must be finite and > 0 (metres), e.g. "
            f"{name}=500. {_NOTHING}"
        ) from None
    if not (math.isfinite(f) and f > 0):
        raise InvalidInputError(
            f"{name}={v!r} must be finite and > 0 (metres), e.g. {name}=500. {_NOTHING}"
        )
    return f


#: length means nothing, and beyond 2⁴⁰ m (the coordinate limit) its square overflows the kernel
#: and error formulas (b = 1e300 gave a ZeroDivisionError after the reservation, so a charge)
LENGTH_MIN_M, LENGTH_MAX_M = 2.0**-10, 2.0**40


def check_length(v: Any, name: str) -> float:
    """``v`` as metres in [2⁻¹⁰, 2⁴⁰], else ``InvalidInputError`` (before any reservation)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > LENGTH_MAX_M:
        f = math.inf  # float(10**400) raises OverflowError inside _positive_finite
    else:
        f = _positive_finite(v, name)
    if not LENGTH_MIN_M <= f <= LENGTH_MAX_M:
        raise InvalidInputError(
            f"{name}={v!r} must be between 2**-10 m (the noise lattice step) and 2**40 m "
            f"(metres on the ground), e.g. {name}=500. {_NOTHING}"
        )
    return f


def preflight(kind: str, amount: Fraction, scale_max: float, method: str) -> None:
    """Run the wrappers' exact calibration for the whole allocation before reserving."""
    from gpframe.mechanisms import calibration as cal

    k = Fraction(scale_max)
    d = 1 if method.startswith("dist") else 2
    if kind == "cgp":
        cal.cgp_gaussian(amount / (k * k), d=d)
    else:
        cal.gp_laplace(amount / k, d=d)


def kde_point(
    xy_m: Any,
    q_m: Any,
    *,
    bandwidth_m: float,
    kind: Literal["cgp", "gp"] = "cgp",
    amount: Any,
    method: str = "pt-elim",
    rounds: int = 10,
    split: str = "doubling",
    beta: float = 0.05,
    nu_m: float | None = None,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    n_union: int | None = None,
    rng: Any = None,
) -> KdePoint:
    """Private KDE at one query point q, Algorithm 7 or a one-round baseline.

    See ``docs/operations/kde.md``.

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        One point per user, projected metres.
    q_m : array_like, shape (2,)
        The query point, same metres (public).
    bandwidth_m : float
        b, metres.
    kind : {"cgp", "gp"}
        Gaussian noise (ρ) or Laplace noise (ε; planar Laplace for ``pt``).
    amount : scalar or array of shape (n,)
        Allocation per user in ground units; 0: not queried.
    method : {"pt", "dist", "pt-elim", "dist-elim"}
    rounds, split : int, {"doubling", "even"}
        For ``*-elim`` (``docs/operations/range_count.md``); baselines run one round.
    beta : float
        Failure probability of the error bound: ``*-elim`` spends β/2 on the eliminations and
        β/2 on the survivors, the baselines β on the survivors.
    nu_m : float, optional
        ν, metres (default 3b).
    unit, scale_max, n_union, rng
        As in :func:`gpframe.queries.elimination.eliminate_noninteractive`.

    Returns
    -------
    KdePoint

    Notes
    -----
    Noise: ``pt*`` release the point (σ = (1 + √2·g/r_min)·k/√(2ρ_j), GP planar Laplace), ``dist*``
    the distance ||x − q|| (σ = (1 + g/r_min)·k/√(2ρ_j), GP Laplace), at round j's part ρ_j (the
    whole allocation for a baseline). Charge: baselines the allocation's guarantee; ``*-elim`` the
    parts of the rounds each user ran (a far user stopped at round r pays a·Σ_{j≤r} π_j; near
    users pay a). Error (w.p. ≥ 1 − β): (L_K/n)·Σ_{i∈S} w_i + (|I_high|/n)·e^{−ν²/(2b²)}, w_i the
    width of user i's final estimate at β_post/n from the sampled noise, capped at 1.

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> xy = np.array([[0.0, 0.0], [30.0, 40.0], [50_000.0, 0.0]])
    >>> with seeded_enabled():
    ...     out = kde_point(xy, [0.0, 0.0], bandwidth_m=1000.0, amount=1e-4, rounds=4,
    ...                     split="even", rng=seeded_rng(5))
    >>> out.n_far, out.n_near                 # the point 50 km away stops early
    (1, 2)
    >>> [float(c) for c in out.charges]       # ... after one round of four
    [0.0001, 0.0001, 2.5e-05]
    """
    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    b, bt = _check_common(bandwidth_m, beta)
    nu = NU_FACTOR * b if nu_m is None else _positive_finite(nu_m, "nu_m")
    x = np.asarray(xy_m, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise InvalidInputError(f"xy_m must have shape (n, 2), got {x.shape}. {_NOTHING}")
    q = np.asarray(q_m, dtype=np.float64).reshape(-1)
    if q.shape != (2,) or not np.isfinite(q).all():
        raise InvalidInputError(
            f"the query point must be 2 finite numbers, got {q_m!r}. {_NOTHING}"
        )
    is_dist = method.startswith("dist")
    elim = method.endswith("-elim")

    def h(p: np.ndarray) -> np.ndarray:
        return np.hypot(p[:, 0] - q[0], p[:, 1] - q[1])

    # dist: the true distance is the released function's input (1-Lipschitz); it only ever
    # reaches the wrapper, never a decision
    data, triple, hh = (h(x), "dist", None) if is_dist else (x, "pt", h)
    common = dict(kind=kind, triple=triple, h=hh, unit=unit, scale_max=scale_max, rng=rng,
                  n_union=n_union)  # fmt: skip
    if elim:
        out = eliminate_noninteractive(data, amount, nu_low=-math.inf, nu_high=nu,
                                       rounds=rounds, split=split, beta=bt / 2,
                                       **common)  # fmt: skip
        beta_post = bt / 2
    else:
        out = eliminate_noninteractive(data, amount, nu_low=-math.inf, nu_high=math.inf,
                                       rounds=1, split="even", beta=bt, **common)  # fmt: skip
        beta_post = bt
    queried = out.state >= 0
    nq = int(queried.sum())
    S = out.state == 0
    far = out.state == 2
    contrib = np.zeros(x.shape[0])
    contrib[S] = kernel(out.estimate[S], b)
    if nq == 0:
        value, err = 0.0, 0.0
    else:
        nun = int(n_union) if n_union is not None else nq
        w = out.width_fn(beta_post / nun)
        value = float(contrib[S].sum()) / nq
        err = kernel_lipschitz(b) * float(w[S].sum()) / nq
        err += float(far.sum()) / nq * cutoff(nu, b)
        err = min(err, 1.0)
    return KdePoint(
        value=value, error=err, n_queried=nq, n_far=int(far.sum()), n_near=int(S.sum()),
        charges=out.charges, allocations=out.allocations, rounds_run=out.rounds_run,
        rounds_histogram=out.rounds_histogram, saving=out.saving, n_calls=out.n_calls,
        r_min=_r_min(out.guarantees), contributions=contrib,
    )  # fmt: skip


@dataclass
class KdePoints:
    """Private KDE at several query points from one privatization per user.

    See ``docs/operations/kde.md`` (``pt``).

    Attributes
    ----------
    values, errors : ndarray, shape (m,)
        KDE(q_j) and its bound: w.p. ≥ 1 − β, |values − KDE| ≤ errors at every q_j at once (the
        bound holds on the single event that every user's noise is within its radius).
    privatized : Privatized
    n_queried : int
    """

    values: NDArray[np.float64]
    errors: NDArray[np.float64]
    privatized: Privatized
    n_queried: int


def kde_points_pt(
    xy_m: Any,
    at_m: Any,
    *,
    bandwidth_m: float,
    kind: Literal["cgp", "gp"] = "cgp",
    amount: Any,
    beta: float = 0.05,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
    chunk: int = 2**22,
    privatize: Callable[[], Privatized] | None = None,
) -> KdePoints:
    """``pt`` baseline at m query points: privatize once, evaluate everywhere.

    See ``docs/operations/kde.md``.

    Noise and charge as :func:`privatize_once` (charged once however many points). Error:
    (L_K/n)·Σ_i r_i with r_i user i's radius at β/n from the sampled noise, capped at 1.
    ``privatize()``, if given, returns the :class:`Privatized` release of the users' points
    made where they are held (the Dask face, ``docs/beyond-one-machine.md``) instead of
    :func:`privatize_once` on ``xy_m`` (then read for nothing).

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> with seeded_enabled():
    ...     out = kde_points_pt([[0.0, 0.0]] * 3, [[0.0, 0.0], [9e4, 0.0]], bandwidth_m=500.0,
    ...                         amount=1e-2, rng=seeded_rng(2))
    >>> out.values.round(2).tolist(), [float(c) for c in out.privatized.charges]
    ([1.0, 0.0], [0.01, 0.01, 0.01])
    """
    b, bt = _check_common(bandwidth_m, beta)
    at = np.asarray(at_m, dtype=np.float64)
    if at.ndim != 2 or at.shape[1] != 2 or not np.isfinite(at).all():
        raise InvalidInputError(
            f"query points must be finite with shape (m, 2), got {at.shape}. {_NOTHING}"
        )
    if privatize is None:
        pv = privatize_once(xy_m, amount, kind=kind, unit=unit, scale_max=scale_max, rng=rng)
    else:
        pv = privatize()
    nq = int(pv.queried.sum())
    m = at.shape[0]
    vals = np.zeros(m)
    if nq:
        p = pv.xy[pv.queried]
        step = max(1, chunk // max(nq, 1))
        for s in range(0, m, step):
            a = at[s : s + step]
            d2 = (p[None, :, 0] - a[:, None, 0]) ** 2 + (p[None, :, 1] - a[:, None, 1]) ** 2
            vals[s : s + step] = np.exp(-d2 / (2 * b * b)).sum(axis=1) / nq
        r = pv.radius(bt / nq)
        err = min(1.0, kernel_lipschitz(b) * float(np.nansum(r)) / nq)
    else:
        err = 0.0
    return KdePoints(vals, np.full(m, err), pv, nq)


# ---------------------------------------------------------------------------------------------
# rasters


def grid_for_bounds(bounds_m: Any, cell_m: float) -> tuple[int, int, tuple[float, ...]]:
    """(ny, nx, transform) of the grid of ``cell_m`` cells covering ``bounds_m`` (north up).

    The transform is the GDAL/affine 6-tuple (a, b, c, d, e, f): x = a·col + b·row + c,
    y = d·col + e·row + f, for the cell corner (col, row); row 0 is the northern edge.

    >>> grid_for_bounds((0, 0, 1000, 450), 100)
    (5, 10, (100.0, 0.0, 0.0, 0.0, -100.0, 500.0))
    """
    c = _positive_finite(cell_m, "cell_m")
    x0, y0, x1, y1 = (float(v) for v in bounds_m)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or not (x1 > x0 and y1 > y0):
        raise InvalidInputError(
            f"bounds={tuple(bounds_m)!r} must be finite (xmin, ymin, xmax, ymax) with xmax > xmin "
            f"and ymax > ymin. {_NOTHING}"
        )
    nx = max(1, math.ceil((x1 - x0) / c - 1e-9))
    ny = max(1, math.ceil((y1 - y0) / c - 1e-9))
    if nx > MAX_CELLS_SIDE or ny > MAX_CELLS_SIDE:
        raise InvalidInputError(
            f"bounds and cell_m={c:g} give a {ny} × {nx} raster; at most {MAX_CELLS_SIDE} cells "
            f"per side. Use a larger cell_m or smaller bounds. {_NOTHING}"
        )
    return ny, nx, (c, 0.0, x0, 0.0, -c, y0 + ny * c)


def _kernel_1d(s_cells: float) -> NDArray[np.float64]:
    """Cell-averaged N(0, s²) weights on integer offsets (|k| ≤ ⌈5s⌉ + 1), summing to 1."""
    from scipy.special import ndtr

    r = math.ceil(5.0 * s_cells) + 1
    edges = (np.arange(-r, r + 2) - 0.5) / s_cells
    w = np.diff(ndtr(edges))
    return w / w.sum()


def _bin(xy: NDArray[np.float64], x0: float, y_top: float, c: float, ny: int, nx: int) -> Any:
    """Count points per cell (nearest-cell binning; rows from the north), via bincount.

    One flat cell index per point and ``np.bincount``: no Python per point or cell. Points
    outside the grid (and NaN rows) are dropped. The points go through in blocks of
    ``_BIN_BLOCK`` rows, so the temporaries (three floats and an int per point) stay
    small at 10^7 points; the counts are integers, so their sum over blocks is exact.
    """
    inv_c = 1.0 / c
    counts = np.zeros(ny * nx, dtype=np.int64)
    for i in range(0, xy.shape[0], _BIN_BLOCK):
        blk = xy[i : i + _BIN_BLOCK]
        # in place: each temporary costs memory bandwidth
        col = np.subtract(blk[:, 0], x0)
        col *= inv_c
        np.floor(col, out=col)
        row = np.subtract(y_top, blk[:, 1])
        row *= inv_c
        np.floor(row, out=row)
        ok = (col >= 0) & (col < nx) & (row >= 0) & (row < ny)
        row *= nx
        row += col  # the flat cell index, exact in float64 (< 2**53)
        counts += np.bincount((row if ok.all() else row[ok]).astype(np.int64),
                              minlength=ny * nx)  # fmt: skip
    return counts.reshape(ny, nx).astype(np.float64)


#: rows per block of :func:`_bin` (a few MB of temporaries, whatever the number of points)
_BIN_BLOCK = 1 << 18


def smooth_density(
    xy_m: Any, weights_groups: Any, *, bounds_m: Any, cell_m: float, bandwidths_m: Any
) -> tuple[NDArray[np.float64], tuple[float, ...]]:
    """Σ_groups Σ_i φ_{s_g}(x_i − cell) on a grid, by binning + separable FFT convolution.

    ``weights_groups`` has one entry per bandwidth in ``bandwidths_m``: a boolean mask or an
    index array selecting that group's points, or ``None`` for all points. The grid is padded
    by the kernel's reach so that points just outside the bounds still contribute; each point's
    mass lands in the padded grid exactly (the discrete kernel sums to 1), so the raster's mass
    is the share of each kernel inside the bounds.
    Returns (density per m² summed over points, transform).
    """
    from scipy.signal import fftconvolve

    ny, nx, tr = grid_for_bounds(bounds_m, cell_m)
    c = float(cell_m)
    xy = np.asarray(xy_m, dtype=np.float64)
    total = np.zeros((ny, nx))
    for sel, s in zip(weights_groups, bandwidths_m, strict=True):
        k1 = _kernel_1d(float(s) / c)
        pad = (k1.size - 1) // 2
        pts = xy if sel is None else xy[sel]
        H = _bin(pts, tr[2] - pad * c, tr[5] + pad * c, c, ny + 2 * pad, nx + 2 * pad)
        # separable: two 1-D FFT convolutions (rows, then columns), 'valid' crops the pad
        G = fftconvolve(H, k1[None, :], mode="valid", axes=1)
        G = fftconvolve(G, k1[:, None], mode="valid", axes=0)
        total += G
    return np.maximum(total, 0.0) / (c * c), tr


@dataclass
class RasterArrays:
    """What :func:`kde_raster_arrays` returns (projected metres).

    Attributes
    ----------
    density : ndarray, shape (ny, nx)
        Estimated density of the users' points, per m² (the normalised KDE (1/n) Σ φ_h(x_i − q)
        at cell centres, cell-averaged): it integrates to 1 over the plane.
    transform : tuple of 6 floats
        GDAL/affine (a, b, c, d, e, f) of the grid (north up).
    bandwidth_m : float
        h, the target bandwidth.
    bandwidth_used_m : ndarray
        The bandwidth(s) applied to the noisy points (√(h² − σ²) when corrected).
    sigma_m : ndarray
        The distinct per-coordinate noise σ sampled (one per allocation group).
    corrected : str
        ``"exact"`` (Gaussian deconvolution), ``"moments"`` (GP), or ``"none"``.
    privatized : Privatized
    n_queried : int
    """

    density: NDArray[np.float64]
    transform: tuple[float, ...]
    bandwidth_m: float
    bandwidth_used_m: NDArray[np.float64]
    sigma_m: NDArray[np.float64]
    corrected: str
    privatized: Privatized
    n_queried: int


def kde_raster_arrays(
    xy_m: Any,
    *,
    bandwidth_m: float,
    cell_m: float = 100.0,
    bounds_m: Any = None,
    kind: Literal["cgp", "gp"] = "cgp",
    amount: Any,
    correct: bool = True,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
    codes: Any = None,
    privatized: Privatized | None = None,
) -> RasterArrays:
    """Density raster from one privatization per user, with the noise bias removed.

    See ``docs/operations/kde.md``.

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        One point per user, projected metres.
    bandwidth_m : float
        h: the raster estimates the true points' Gaussian KDE with this bandwidth.
    cell_m : float
        Cell side, metres.
    bounds_m : (xmin, ymin, xmax, ymax), optional
        Public extent in projected metres. None: the extent of the *released* points (their
        0.5 %-99.5 % quantiles per axis, post-processing) padded by 3h, the cell enlarged if the
        grid would exceed 4096 cells per side.
    kind : {"cgp", "gp"}
    amount : scalar or array
        Allocation per user (ground units); 0: not queried.
    correct : bool
        Remove the noise's smoothing. CGP (Gaussian noise): exact, bandwidth √(h² − σ²)
        (:func:`corrected_bandwidth`); h ≤ σ raises ``InvalidInputError`` *before* any noise is
        drawn. GP (planar Laplace): no closed form exists (the Laplace's Fourier transform
        (1 + t²/ε²)^(−3/2) is not a Gaussian factor), so the correction matches second moments:
        bandwidth √(h² − 3·scale²), which removes the added covariance but leaves the heavier
        Laplace tails (an approximation; the expected raster is φ_s ∗ Laplace ∗ density).
        ``False``: bandwidth h on the noisy points (expected raster: density ∗ φ_√(h²+σ²)).
    unit, scale_max, rng, codes
        As in :func:`privatize_once` (``codes``: ``amount`` holds the distinct allocations and
        ``codes[i]`` user i's, −1 for not queried; the fast path for millions of users).
    privatized : Privatized, optional
        The users' points already released by :func:`privatize_once` with these allocations
        (the Dask face releases each partition on its worker); ``xy_m`` then gives only their
        number and ``rng`` is unused.

    Returns
    -------
    RasterArrays

    Notes
    -----
    Noise and charge: :func:`privatize_once` (the ``pt`` baseline): each user once, however many
    cells. The raster is post-processing of the released points and public parameters.
    Unbiasedness (CGP): E[density(q)] = (1/n) Σ_i φ_h(x_i − q) at every q, up to the binning
    (cell-averaged kernel, nearest-cell binning: errors of order cell²/s²).

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> xy = np.zeros((100, 2))
    >>> with seeded_enabled():
    ...     r = kde_raster_arrays(xy, bandwidth_m=500.0, cell_m=50.0,
    ...                           bounds_m=(-3e3, -3e3, 3e3, 3e3),
    ...                           amount=1e-4, rng=seeded_rng(4))
    >>> r.density.shape, round(float(r.density.sum()) * 50.0**2, 3)   # mass ≈ 1
    ((120, 120), 1.0)
    >>> r.corrected, round(float(r.bandwidth_used_m[0]), 1)             # √(500² − 70.8²)
    ('exact', 495.0)
    """
    h = _positive_finite(bandwidth_m, "bandwidth_m")
    c = _positive_finite(cell_m, "cell_m")
    if bounds_m is not None:
        grid_for_bounds(bounds_m, c)  # validate before any noise
    x = np.asarray(xy_m, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise InvalidInputError(f"points must have shape (n, 2), got {x.shape}. {_NOTHING}")
    # refuse h <= sigma before drawing noise: sigma follows from the public allocations
    inv, uniq = _factor_allocations(amount, x.shape[0], codes)
    if correct:
        present = np.bincount(inv + 1, minlength=len(uniq) + 1)[1:] > 0
        for a in {float(uniq[i]) for i in np.flatnonzero(present).tolist()}:
            if a > 0:
                corrected_bandwidth(h, bandwidth_limit(kind, a, scale_max=float(scale_max)))
    pv = privatized or privatize_once(x, uniq, kind=kind, unit=unit, scale_max=scale_max,
                                      rng=rng, codes=inv)  # fmt: skip
    nq = int(pv.queried.sum())
    # one group of points per distinct σ (one per sampler call, merged when σ's coincide)
    by_sigma: dict[float, list[NDArray[np.int64]]] = {}
    for idx, rel in pv.releases:
        by_sigma.setdefault(noise_sigma(rel), []).append(idx)
    sig_u = np.array(sorted(by_sigma), dtype=np.float64)
    if correct:
        used = np.atleast_1d(corrected_bandwidth(h, sig_u)) if sig_u.size else np.zeros(0)
        how = "exact" if kind == "cgp" else "moments"
    else:
        used = np.full(sig_u.size, h)
        how = "none"
    if bounds_m is None:
        if nq == 0:
            raise InvalidInputError(f"no user was queried and no bounds were given. {_NOTHING}")
        p = pv.xy[pv.queried]
        lo = np.quantile(p, 0.005, axis=0) - 3 * h
        hi = np.quantile(p, 0.995, axis=0) + 3 * h
        side = float(max(hi - lo))
        c = max(c, side / MAX_CELLS_SIDE * (1 + 1e-9))
        bounds_m = (lo[0], lo[1], hi[0], hi[1])
    sels: list[Any] = []
    for s in sig_u.tolist():
        parts = by_sigma[s]
        # everybody in one call: bin the released array as it is (no index copy)
        whole = len(parts) == 1 and (isinstance(parts[0], slice) or parts[0].size == x.shape[0])
        sels.append(None if whole else np.concatenate(parts))
    dens, tr = smooth_density(pv.xy, sels, bounds_m=bounds_m, cell_m=c, bandwidths_m=used)
    if nq:
        dens /= nq
    return RasterArrays(dens, tr, h, used, sig_u, how, pv, nq)


# ---------------------------------------------------------------------------------------------
# kde_raster: reserve, release once per user, raster, charge (both faces)


def _alloc_groups(units: np.ndarray, lu: Any) -> tuple[np.ndarray, list[Fraction], list[int]]:
    """Factorise per-user allocation units: (code per user, −1 for 0; Fractions; units).

    One exact ``Fraction`` per distinct allocation, so 10⁶ users cost a sort at most; the
    codes in the smallest dtype that holds them (:func:`~gpframe.queries.elimination.small_codes`).
    """
    u = np.asarray(units, dtype=np.int64)
    if u.size and int(u.min()) == int(u.max()):  # the usual case: one allocation for all
        uniq, inv = u[:1], np.zeros(u.size, dtype=np.int8)
    else:
        uniq, inv = np.unique(u, return_inverse=True)
    vals = uniq.tolist()
    codes = np.asarray(inv).reshape(-1).astype(small_codes(len(vals)), copy=False)
    if 0 in vals:  # allocation 0: not queried
        z = vals.index(0)
        codes = np.where(codes == z, -1, codes - (codes > z)).astype(codes.dtype, copy=False)
        vals.pop(z)
    return codes, [lu.to_fraction(int(v)) for v in vals], vals


def raster_from_points(
    session: Any,
    keys: Any,
    xy_m: np.ndarray,
    *,
    bandwidth_m: float,
    cell_m: float,
    bounds_m: Any,
    kind: str,
    amount: Fraction,
    correct: bool,
    scale_max: Any,
    crs_m: str | None,
    rng: Any,
    bandwidth_arg: Any = None,
    noise_inflation: float | None = None,
    privatize: Any = None,
) -> Any:
    """Reserve, release each user's point once, build the raster, charge (``kde_raster``'s core).

    Shared by the accessor (after projecting, one point per user) and ``gp.duckdb.kde_raster``
    (metres as given; the ``crs=`` of ``register``, if any, gives ``crs_m`` and ``scale_max``):
    the same checks, reservation, draws and charges for the same points, ledger keys,
    parameters and rng. ``bandwidth_m`` / ``cell_m`` are checked
    lengths, ``bounds_m`` a metric envelope or None, ``amount`` the exact allocation.
    ``privatize(values, codes)``, when given, releases the points instead of
    :func:`privatize_once` on ``xy_m`` (the Dask face: one task per partition, same law).
    """
    h, c, bm = bandwidth_m, cell_m, bounds_m
    bandwidth_arg = h if bandwidth_arg is None else bandwidth_arg
    scale = float(scale_max)
    if bm is not None:
        ny, nx, _tr = grid_for_bounds(bm, c)
        # the smoothing pads the grid by the kernel's reach (about 5h/cell cells a side): a
        # bandwidth of 630 km on 100 m cells asked for a 30 GiB array (MemoryError). The bound
        # is what the bounds=None path can reach (its cell grows with the extent + 6h).
        reach = math.ceil(5.0 * h / c) + 1
        if max(ny, nx) + 2 * reach > 3 * MAX_CELLS_SIDE:
            raise InvalidInputError(
                f"bandwidth_m={bandwidth_arg!r} spans about {reach} cells of cell_m={c:g}; the "
                f"smoothed raster would exceed {3 * MAX_CELLS_SIDE} cells a side. Use a larger "
                f"cell_m (e.g. cell_m={math.ceil(h / 400)}) or a smaller bandwidth. {_NOTHING}"
            )
    preflight(kind, amount, scale, "pt")
    if correct:
        corrected_bandwidth(h, bandwidth_limit(kind, amount, scale_max=scale))
    import pandas as pd

    from gpframe.accounting.amounts import LedgerUnits
    from gpframe.ledger.run import Charge, run
    from gpframe.queries.elimination import check_method_parts
    from gpframe.results import Raster

    if isinstance(keys, np.ndarray) and keys.dtype.kind == "i":
        users = keys  # int64 ledger keys index the Result as they are: no Python int per user
    else:  # the Result's keys: Python ints and strs
        users = np.empty(len(keys), dtype=object)
        users[:] = keys.tolist() if isinstance(keys, np.ndarray) else list(keys)
    led = session.ledger
    lu = led.units["metric"]
    params: dict[str, Any] = {
        "bandwidth_m": h, "cell_m": c, "correct": bool(correct),
        ("rho" if kind == "cgp" else "eps"): float(amount),
        "crs_m": crs_m, "scale_max": scale,
    }  # fmt: skip
    if noise_inflation is not None:  # the accessor's projection states it (docs/wide-extents.md)
        params["noise_inflation"] = float(noise_inflation)
    # integer ledger units end to end (as privatize does): one exact conversion per distinct
    # amount, never a Fraction per user; the amount is in the filter's own units (kind=None)
    # one amount for every user: read-only broadcast views of its units, no per-user arrays
    u1, big1 = led.units_for("metric", amount, np.ones(1, np.int64))
    alloc_units = np.broadcast_to(np.int64(LedgerUnits.MAX if big1[0] else u1[0]), users.shape)
    too_big = np.broadcast_to(bool(big1[0]), users.shape)  # too big: cannot be admitted
    # the allocation every admitted user will hold is known now: check its single part (and the
    # bias correction's bandwidth) before reserving
    checks = dict(kind=kind, method="pt", rounds=1, split="even", beta=0.5,  # beta: unused
                  unit=Fraction(1) / lu.scale, scale_max=scale_max)  # fmt: skip
    if users.size and not too_big.all():
        a0 = lu.to_fraction(int(alloc_units[~too_big][0]))
        check_method_parts(a0, **checks)
        if correct:
            corrected_bandwidth(h, bandwidth_limit(kind, a0, scale_max=scale))

    def reserved_groups(r: Any) -> tuple[np.ndarray, np.ndarray, list[Fraction], list[int]]:
        adm = np.asarray(r.admitted, dtype=bool) & ~too_big
        return (adm, *_alloc_groups(np.where(adm, r.allocation_units, 0), lu))

    def check(r: Any) -> None:  # the same checks on the allocations reserved: no noise yet
        for a in reserved_groups(r)[2]:
            check_method_parts(a, **checks)
            if correct:
                corrected_bandwidth(h, bandwidth_limit(kind, a, scale_max=scale))

    def compute(r: Any) -> Charge[Any]:
        adm, codes, values, uvals = reserved_groups(r)
        pv = None if privatize is None else privatize(values, codes)
        out = kde_raster_arrays(
            xy_m if pv is None else pv.xy, bandwidth_m=h, cell_m=c, bounds_m=bm, kind=kind,
            amount=values, codes=codes, correct=correct, unit=Fraction(1) / lu.scale,
            scale_max=scale_max, rng=rng, privatized=pv,
        )  # fmt: skip
        pv = out.privatized
        group_units = []
        for ch in pv.group_charges:
            u, big = led.units_for("metric", ch, np.ones(1, np.int64))
            if big.any():
                raise GpframeInternalError("a kde_raster charge does not fit the ledger's units.")
            group_units.append(int(u[0]))
        if len(group_units) == 1 and bool(pv.queried.all()):  # one charge for all: a view
            charge_units = np.broadcast_to(np.int64(group_units[0]), (users.size,))
        else:
            charge_units = np.zeros(users.size, dtype=np.int64)
            for g, u0 in enumerate(group_units):
                charge_units[pv.group == g] = u0
        # what the result needs of the released points (their groups, charges and floor):
        # the points themselves are binned already, so they are not held through the charge
        kept = (pv.group, pv.group_charges, pv.r_min)
        return Charge((adm, codes, uvals, replace(out, privatized=None), kept), charge_units,
                      units=True)  # fmt: skip

    r = run(session, keys, alloc_units, notion="metric", query="kde_raster", params=params,
            units=True, check=check, compute=compute)  # fmt: skip
    adm, codes, uvals, out, (group, group_charges, r_min) = r.value
    query_id = r.query_id
    del r  # the reservation's per-user arrays: not held while the result is built
    # the per-user float charges of the result, built after the ledger's write (not alongside
    # its per-user arrays): the same group charges, converted once per group
    charge_f = np.zeros(users.size, dtype=np.float64)
    for g, ch in enumerate(group_charges):
        charge_f[group == g] = float(ch)
    del group
    key_arr = users
    every = bool(adm.all())  # everyone admitted (the usual case): no masked copies
    idx = pd.Index(key_arr if every else key_arr[adm])
    alloc_f = np.array([float(lu.to_fraction(int(v))) for v in uvals], dtype=np.float64)
    params.update(
        sigma_m=[float(v) for v in out.sigma_m],
        bandwidth_used_m=[float(v) for v in out.bandwidth_used_m],
        bias_correction=out.corrected,
        cell_m=float(out.transform[0]),
        n_users=out.n_queried,
    )
    return Raster(
        value=out.density,
        transform=out.transform,
        crs=crs_m,
        confidence=None,
        mechanism="gaussian_cgp" if kind == "cgp" else "planar_laplace",
        params=params,
        kind=kind,
        metric=("floor", r_min),
        r_min=r_min,
        # fresh arrays, so the Series may own them (no copy)
        charges=pd.Series(
            charge_f if every else charge_f[adm], index=idx, dtype=np.float64, copy=False
        ),
        allocations=pd.Series(
            alloc_f[codes if every else codes[adm]], index=idx, dtype=np.float64, copy=False
        ),
        excluded=key_arr[~adm].tolist(),
        query_id=query_id,
    )
