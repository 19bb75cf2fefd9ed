"""Private convex hull of each user's points (PCH).

See ``docs/operations/convex_hull.md`` and ``docs/noise.md`` (the algorithm, reference structure,
CGP, choosing k: the "reference" and "consistent" rules and the clamp, GP variant, error components,
output contract, pitfalls); Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 4, Thm. 4.16.

Per user: a noisy bounding-box centre c̃ and radius R̃ (ρ₀ = ρ/20), k from R̃ by the paper's rule
clamped to [k_min, k_max], k PNN calls toward k points evenly spaced on the circle (c̃, R̃) at
αρ₁/k each (without replacement), and the k chosen points released with Gaussian (GP: planar
Laplace) noise at (1 − α)ρ₁/k each; the hull of the noisy anchors is post-processing. When
k ≥ n the PNNs are skipped and all n points are released at ρ₁ (Remark 1). Only c̃, R̃, k, the
noisy anchors and their hull are returned (``docs/operations/convex_hull.md``). All users are
processed together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import shapely
from numpy.typing import NDArray

from gpframe.accounting.amounts import exact, probability
from gpframe.errors import InvalidInputError
from gpframe.mechanisms.calibration import check_eps, eps_from_rho, sqrt_up
from gpframe.mechanisms.svt import MAX_CYCLES
from gpframe.queries.knn import (
    COORD_MAX_M,
    ScanOrder,
    _check_common,
    _check_extent,
    group_rows,
    k_pnn,
    pnn_calibration,
    resolve_compat,
)
from gpframe.queries.knn_scan import squared_distances

_NO_OWNER = np.empty(0, dtype=np.int64)

__all__ = [
    "K_RULES",
    "HullArrays",
    "check_noise_range",
    "choose_k",
    "hull_error",
    "hull_preflight",
    "private_hulls",
    "projected_amount",
]

K_RULES = ("reference", "consistent")
ALPHA = Fraction(23, 25)  # 0.92, the reference harness
_NOTHING = "Nothing was charged."
#: largest |coordinate| of a PNN anchor target: inside the data's range (|x| < 2**40 m)
_TARGET_MAX_M = float(np.nextafter(COORD_MAX_M, 0.0))
#: largest noise scale (metres) of a phase that releases a coordinate: 2**40 m / 2**12, so that
#: the anchor circle c̃ ± R̃ stays inside ±2**40 m but with probability below e^(-500)
#: (:func:`check_noise_range`)
ANCHOR_NOISE_MAX_M = Fraction(int(COORD_MAX_M), 2**12)


def choose_k(
    kind: str,
    amount: float,
    n: Any,
    R: Any,
    *,
    beta: float = 0.1,
    alpha: float = 0.92,
    rule: str = "reference",
    k_min: int = 16,
    k_max: int = 128,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """(k_raw, clamped k) per user from public n, R̃, budget, β, α.

    See ``docs/operations/convex_hull.md``.

    CGP: L = ln(2/β) + ln(4n+2), A = (15L + 3√(2L))/√2, B = √(ln(2/β)); "reference" uses A^(2/3),
    B^(2/3) inside C = A/√α + B/√(1−α); k_raw = (4πR̃√ρ₁/C)^(2/3), ρ₁ = 0.95ρ. GP: A' = 15L +
    3√(2L), B' = √(2 ln(2/β)) + ln(2/β), C' = A'/α + B'/(1−α), k_raw = √(2π ε₁ R̃/C'). k =
    clamp(⌊k_raw⌋).

    >>> kr, k = choose_k("cgp", 5e-4, [20000, 20000], [7326.0, 30000.0])
    >>> [round(float(v), 6) for v in kr], k.tolist()        # oracle
    ([14.540085, 37.216583], [16, 37])
    >>> choose_k("gp", 0.2282765162, [5000], [7250.0])[0].round(6).tolist()
    [5.787598]
    """
    if rule not in K_RULES:
        raise InvalidInputError(f"k_rule={rule!r} is not one of 'reference', 'consistent'.")
    n = np.asarray(n, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    # an alpha so close to 0 that C exceeds the floats gives k_raw = 0: k_min, not a warning
    with np.errstate(divide="ignore", over="ignore"):
        L = math.log(2 / beta) + np.log(4 * n + 2)
        if kind == "cgp":
            A = (15 * L + 3 * np.sqrt(2 * L)) / math.sqrt(2)
            B = math.sqrt(math.log(2 / beta))
            if rule == "reference":
                A, B = A ** (2 / 3), B ** (2 / 3)
            C = A / math.sqrt(alpha) + B / math.sqrt(1 - alpha)
            kraw = (4 * math.pi * R * math.sqrt(0.95 * amount) / C) ** (2 / 3)
        else:
            A = 15 * L + 3 * np.sqrt(2 * L)
            l2 = math.log(2 / beta)
            B = math.sqrt(2 * l2) + l2
            C = A / alpha + B / (1 - alpha)
            kraw = np.sqrt(2 * math.pi * 0.95 * amount * R / C)
    k = np.clip(np.floor(kraw), k_min, k_max).astype(np.int64)
    return np.asarray(kraw, dtype=np.float64), k


def projected_amount(kind: str, amount: Any, scale_max: Any) -> Fraction:
    """Return the amount the noise is calibrated at in metres: ε/K (GP) or ρ/K² (CGP).

    A projection stretches distances by at most K (``scale_max``), so each phase draws noise for
    ``amount / K`` (``amount / K²`` under CGP) in projected metres to keep the ground guarantee;
    the error bound in projected metres is that of this amount.

    >>> projected_amount("cgp", Fraction(1, 100), 2), projected_amount("gp", 1, 2)
    (Fraction(1, 400), Fraction(1, 2))
    """
    ks = Fraction(scale_max)
    return Fraction(amount) / (ks * ks if kind == "cgp" else ks)


def hull_error(
    kind: str, amount: float, n: Any, k: Any, R: Any, *, beta: float = 0.1, alpha: float = 0.92
) -> tuple[Any, Any, Any]:
    """Return the paper's (as stated) hull error components γ₁, γ₂, γ₃ in metres.

    See ``docs/operations/convex_hull.md``.

    ``n``, ``k`` and ``R`` may be arrays (one entry per user); the components are then arrays.

    >>> [round(v, 3) for v in hull_error("cgp", 5e-4, 5000, 16, 7250.0)]
    [35535.574, 2847.068, 1649.43]
    >>> round(sum(hull_error("gp", 0.2282765162, 5000, 16, 7250.0)), 2)
    33183.76
    """
    # arrays (one entry per user) come back as arrays, scalars as plain floats
    scalar = not (np.ndim(n) or np.ndim(k) or np.ndim(R))
    n, k, R = (np.asarray(v, dtype=np.float64) for v in (n, k, R))
    # an amount or alpha so small that a bound exceeds the floats is stated as inf (the honest
    # bound), not raised as a float warning after the draws
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        L1 = np.log(4 * k * (4 * n + 2) / beta)
        core = 15 * L1 + 3 * np.sqrt(2 * L1)
        g2 = 2 * math.pi * R / k
        a1 = np.float64(0.95 * amount)
        if kind == "cgp":
            g1 = np.sqrt(k) * core / np.sqrt(2 * np.float64(alpha) * a1)
            g3 = np.sqrt(k * np.log(4 * k / beta) / ((1 - np.float64(alpha)) * a1))
        else:
            g1 = k * core / (np.float64(alpha) * a1)
            u = np.log(4 * k / beta)
            g3 = k / ((1 - np.float64(alpha)) * a1) * (np.sqrt(2 * u) + u)
    if scalar:
        return float(g1), float(g2), float(g3)
    return g1, g2, g3


@dataclass
class HullArrays:
    """What :func:`private_hulls` returns (aligned with users 0..U−1; NaN / None if not admitted).

    Attributes
    ----------
    hulls : ndarray of shapely geometries
        CONV(noisy anchors) per user, metric CRS (a Point or LineString when degenerate).
    anchors : list of ndarray, shape (k_u, 2)
        The released noisy anchors in selection order (or the n noisy points, Remark 1).
    centre : ndarray, shape (U, 2)
        c̃, the released noisy bounding-box centre.
    radius : ndarray, shape (U,)
        R̃ after the enlargement and the floor.
    k, k_raw : ndarray
        The clamped k used (n_u when Remark 1 applied) and the rule's raw value.
    fallback : ndarray of bool
        Remark 1 applied (k ≥ n: all points released at ρ₁).
    error : ndarray
        γ₁ + γ₂ + γ₃ per user (the paper's bound as stated, ``docs/operations/convex_hull.md``
        caveat), metres.
    spend : dict of str to Fraction
        The budget split per user: centre, radius, pnn, release (sums to the amount).
    charges : ndarray of object (Fraction)
        Per-user charge in the mechanism's units.
    r_min : float
    """

    hulls: NDArray[Any]
    anchors: list[NDArray[np.float64]]
    centre: NDArray[np.float64]
    radius: NDArray[np.float64]
    k: NDArray[np.int64]
    k_raw: NDArray[np.float64]
    fallback: NDArray[np.bool_]
    error: NDArray[np.float64]
    spend: dict[str, Fraction]
    charges: NDArray[Any]
    r_min: float


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    # per-phase scales are slices of the budget: the wrappers' "above 100 km" advice is expected
    # (left out in this thread only: catch_warnings would swap the process-wide filters)
    from gpframe.mechanisms.laplace_mech import scale_warnings_left_out

    with scale_warnings_left_out():
        return fn(*args, **kwargs)


def _split(kind: str, amount: Fraction, alpha: Fraction) -> dict[str, Fraction]:
    a0 = amount / 20
    a1 = amount - a0
    return {
        "centre": 2 * a0 / 3,
        "radius": a0 / 3,
        "pnn": alpha * a1,
        "release": (1 - alpha) * a1,
    }


def _release_points(
    kind: str, pts: NDArray[np.float64], part: Fraction, ks: Fraction, K: Any, bits: Any
) -> Any:
    from gpframe import mechanisms as mech

    if kind == "cgp":
        return _quiet(mech.gaussian_cgp, pts, rho=part / (ks * ks), K=K, rng=bits)
    return _quiet(mech.planar_laplace, pts, eps=part / ks, K=K, rng=bits)


def _scale(kind: str, c: Any) -> Fraction:
    """Noise scale of a calibrated release in metres: GP 1/rate, CGP σ per coordinate."""
    return c.g / c.param if kind == "gp" else sqrt_up(c.param) * c.g


def _fixed_phases(kind: str, spend: dict[str, Fraction], ks: Fraction) -> dict[str, Fraction]:
    """Calibrate the centre and radius releases; return their noise scales in metres."""
    from gpframe.mechanisms import calibration as cal

    if kind == "cgp":
        c = cal.cgp_gaussian(spend["centre"] / (ks * ks), K=sqrt_up(2), d=2)
        r = cal.cgp_gaussian(spend["radius"] / (ks * ks), d=1)
    else:
        c = cal.gp_laplace(check_eps(spend["centre"] / ks, "eps (centre)"), K=sqrt_up(2), d=2)
        r = cal.gp_laplace(check_eps(spend["radius"] / ks, "eps (radius)"), d=1)
    return {"centre": _scale(kind, c), "radius": _scale(kind, r)}


def check_noise_range(kind: str, amount: Fraction, scales: dict[str, Fraction]) -> None:
    """Refuse an amount whose noise would put the released coordinates beyond the supported range.

    ``scales`` are the noise scales (metres) of the phases that release coordinates: the centre
    c̃, the radius R̃ (the anchor targets P_j = c̃ + R̃·u lie on the circle they span) and the
    anchor (or fallback) releases. A tiny amount (ρ = 1e-30 gives a centre σ of about 5·10¹⁵ m)
    puts the circle beyond ±2**40 m, which shows only after the centre and radius draws, when
    the query is spent; so every scale must be at most :data:`ANCHOR_NOISE_MAX_M` (2**28 m).
    Then the enlargement of R̃ (at most ln(2/β) ≤ 691 scales, β ≥ 1e-300) is below 2**38 m, and
    a centre or radius deviation beyond 2**37 m takes more than 512 scales (probability below
    e^(-500)); with data in any real CRS (|x| < 2**26 m) and the radius floor below 2**39 m,
    c̃ ± R̃ and the released points stay inside ±2**40 m but with that probability. A target
    still outside (data at the edge of the range) is clamped by :func:`private_hulls`. Run by
    both faces' preflight (:func:`hull_preflight`) and by :func:`private_hulls` before a draw.

    >>> check_noise_range("cgp", Fraction(1, 10**30), {"centre": Fraction(10**16)})
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: rho=1e-30 is too small for convex_hull: ...
    """
    if not scales:
        return
    phase, scale = max(scales.items(), key=lambda kv: kv[1])
    if scale <= ANCHOR_NOISE_MAX_M:
        return
    name = "rho" if kind == "cgp" else "eps"
    # CGP σ ∝ 1/√ρ, GP 1/ε ∝ 1/ε (up to the lattice rounding, hence "about")
    ratio = scale / ANCHOR_NOISE_MAX_M
    least = amount * (ratio * ratio if kind == "cgp" else ratio)
    raise InvalidInputError(
        f"{name}={float(amount):g} is too small for convex_hull: its {phase} noise would be "
        f"{float(scale):.3g} m, above the supported maximum 2**28 m "
        f"({float(ANCHOR_NOISE_MAX_M):.3g} m), so the released centre and radius could put the "
        "anchors beyond ±2**40 m after the draws (and no released point would carry a "
        f"location). Use a larger {name} (about {float(least) * 1.01:.3g} or more). {_NOTHING}"
    )


def check_beta_and_floor(beta: float, radius_floor_m: Any) -> None:
    """Refuse a β or radius floor that PCH could only reject after its first draws.

    Shared with the accessor and SQL preflights, which run it before reserving.
    """
    if not beta >= 1e-300:  # ln(2/β) must stay finite: β = 5e-324 made R̃ infinite, k NaN
        raise InvalidInputError(
            f"beta={beta!r} must be at least 1e-300 (the radius enlargement uses ln(2/beta)). "
            f"{_NOTHING}"
        )
    r = radius_floor_m
    # comparisons, not math.isfinite (which overflows on huge ints); NaN and ±inf fail them.
    # Beyond 2**39 m the anchor circle (radius R̃ around c̃) could leave ±2**40 m. Below 0 the
    # floor let R̃ = max(r̃ + enlargement, floor) go negative when the radius noise was, and k's
    # rule took the square root of it after the draws (NaN k, charged).
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < COORD_MAX_M / 2:
        raise InvalidInputError(
            f"radius_floor_m={r!r} must be a finite number of metres, at least 0 and below "
            f"2**39 (the anchors lie within it of the centre). {_NOTHING}"
        )


def _check_k_phases(
    kind: str,
    spend: dict[str, Fraction],
    ks: Fraction,
    counts: NDArray[np.int64],
    k: int | None,
    k_min: int,
    k_max: int,
) -> dict[str, Fraction]:
    """Calibrate every PNN and release group PCH may run, before any bit is drawn.

    k per user is drawn from R̃ (a noisy quantity), but it is public that it lies in
    [k_min, k_max] (or equals the fixed ``k``), and that a user with n ≤ k takes the fallback
    (all n points at ρ₁/n; Remark 1). Each part shrinks as k (or n) grows and every calibration
    accepts an interval of amounts, so calibrating the smallest and largest k (and n) that any
    user can reach covers every group the run can form. ``counts`` are the public n per user.
    Returns the largest noise scale (metres) of each coordinate release that can run: the
    anchor release and the fallback release, for :func:`check_noise_range`.
    """
    from gpframe.mechanisms import calibration as cal

    n = np.asarray(counts, dtype=np.int64)
    if n.size == 0:
        return {}
    k_lo, k_hi = (int(k), int(k)) if k is not None else (k_min, k_max)
    pnn_n = n[n > k_lo]  # users that can run the PNN phase (k_u < n_u for some allowed k_u)
    pnn_ks = {k_lo, min(k_hi, int(pnn_n.max()) - 1)} if pnn_n.size else set()
    fb_n = n[n <= k_hi]  # users that can take the fallback (k_u >= n_u for some allowed k_u)
    fb_ns = {int(fb_n.min()), int(fb_n.max())} if fb_n.size else set()
    scales: dict[str, Fraction] = {}
    for kk in sorted(pnn_ks):
        if kind == "cgp":
            pnn_calibration(check_eps(eps_from_rho(spend["pnn"] / (kk * ks * ks)),
                                      "sqrt(2*rho/k) (one PCH anchor call)"))  # fmt: skip
            c = cal.cgp_gaussian(cal.check_rho(spend["release"] / (kk * ks * ks),
                                               "rho (PCH anchor release)"), d=2)  # fmt: skip
        else:
            pnn_calibration(check_eps(spend["pnn"] / (kk * ks), "eps (one PCH anchor call)"))
            c = cal.gp_laplace(check_eps(spend["release"] / (kk * ks),
                                         "eps (PCH anchor release)"), d=2)  # fmt: skip
        scales["anchor release"] = max(scales.get("anchor release", Fraction(0)), _scale(kind, c))
    for n_u in sorted(fb_ns):
        part = (spend["pnn"] + spend["release"]) / n_u
        if kind == "cgp":
            c = cal.cgp_gaussian(cal.check_rho(part / (ks * ks), "rho (PCH fallback release)"),
                                 d=2)  # fmt: skip
        else:
            c = cal.gp_laplace(check_eps(part / ks, "eps (PCH fallback release)"), d=2)
        scales["fallback release"] = max(scales.get("fallback release", Fraction(0)),
                                         _scale(kind, c))  # fmt: skip
    return scales


def private_hulls(
    xy_m: Any,
    codes: Any,
    *,
    kind: Literal["cgp", "gp"],
    amount: Any,
    n_users: int | None = None,
    admitted: Any = None,
    beta: float = 0.1,
    alpha: float | Fraction = ALPHA,
    k: int | None = None,
    k_rule: str = "reference",
    k_min: int = 16,
    k_max: int = 128,
    radius_floor_m: float = 10.0,
    scan_order: str | None = None,
    max_cycles: int = MAX_CYCLES,
    scale_max: float | Fraction = 1,
    rng: Any = None,
) -> HullArrays:
    """Private convex hull of every user's points (PCH; ``docs/operations/convex_hull.md``).

    Parameters
    ----------
    xy_m, codes : array_like
        All users' points (projected metres) and their user codes 0..U−1.
    kind : {"cgp", "gp"}
        ``amount`` is ρ (m⁻²; Gaussian centre, radius and release) or ε (m⁻¹; Laplace).
    amount : float
        Each user's budget; split ρ₀ = ρ/20 (⅔ centre, ⅓ radius), α·ρ₁ to the PNNs and
        (1 − α)·ρ₁ to the release (``docs/operations/convex_hull.md``).
    admitted : array_like of bool, optional
        Users to answer; the others draw nothing and are charged 0.
    beta : float
        Failure probability of the radius enlargement and of the reported error.
    alpha : float
        PNN share of ρ₁ (default 0.92, the reference harness).
    k : int, optional
        Fixed number of anchors; None (default) picks k per user from R̃ by ``k_rule``, clamped to
        [k_min, k_max] (``docs/operations/convex_hull.md``). k affects utility only, never privacy.
    radius_floor_m : float
        R̃ ← max(R̃, radius_floor_m) (post-processing); at least 0 and below 2**39 m.
    scan_order, max_cycles
        PNN scan order (default random) and public cap (``docs/operations/knn.md``).
    scale_max : float
        Projection scale factor k_s: mechanisms run at ρ/k_s² (ε/k_s) per metric-CRS metre.
    rng : BitSource or None

    Returns
    -------
    HullArrays

    Notes
    -----
    Noise (CGP): centre lattice Gaussian σ = (√2 + √2·g/r_min)/√(2ρ_c) per coordinate; radius
    σ = (1 + g/r_min)/√(2ρ_r), enlarged by σ√(2 ln(2/β)) + g; PNN calls at ε_j = √(2αρ₁/k)
    (draw scales 3 and 6); anchors σ = (1 + √2·g/r_min)/√(2(1 − α)ρ₁/k). GP: planar Laplace
    (K = √2) at 2ε₀/3, laplace_gp at ε₀/3 enlarged by scale·ln(2/β) + g, PNN at αε₁/k, planar
    Laplace at (1 − α)ε₁/k (``docs/noise.md``).
    Charge per admitted user: ρ (or ε), the exact sum of the four shares.
    Error: the paper's sandwich bound γ₁ + γ₂ + γ₃ (``docs/operations/convex_hull.md``, "as
    stated").

    Examples
    --------
    >>> rng0 = np.random.default_rng(0)  # test-only: example data, never noise
    >>> xy = rng0.uniform(0, 1000, (200, 2))
    >>> out = private_hulls(xy, np.zeros(200, np.int64), kind="cgp", amount=1e-2)
    >>> int(out.k[0]), out.hulls[0].geom_type, [float(v) for v in out.spend.values()]
    (16, 'Polygon', [0.0003333333333333333, 0.00016666666666666666, 0.00874, 0.00076])
    """
    from gpframe.mechanisms.noise import resolve_rng

    p, c, U, counts = _check_common(xy_m, codes, n_users)
    _check_extent(p)
    if kind not in ("cgp", "gp"):
        raise InvalidInputError(f"kind={kind!r} is not one of 'cgp', 'gp'. {_NOTHING}")
    amt = exact(amount, "rho" if kind == "cgp" else "eps")
    al = exact(alpha, "alpha")
    if amt <= 0 or not 0 < al < 1:
        raise InvalidInputError(
            f"the amount must be > 0 and alpha in (0, 1); got {amount!r}, {alpha!r}. {_NOTHING}"
        )
    b = probability(beta)
    check_beta_and_floor(b, radius_floor_m)
    ks = exact(scale_max, "scale_max")
    if ks < 1:
        raise InvalidInputError(f"scale_max={scale_max!r} must be >= 1. {_NOTHING}")
    for name, v in (("k_min", k_min), ("k_max", k_max)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidInputError(f"{name}={v!r} must be an integer >= 1. {_NOTHING}")
    if k_min > k_max:
        raise InvalidInputError(f"k_min={k_min} exceeds k_max={k_max}. {_NOTHING}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
        raise InvalidInputError(f"k={k!r} must be None or an integer >= 1. {_NOTHING}")
    if k_rule not in K_RULES:
        raise InvalidInputError(
            f"k_rule={k_rule!r} is not one of 'reference', 'consistent'. {_NOTHING}"
        )
    _, order = resolve_compat(None, None, scan_order)
    adm = np.ones(U, dtype=bool) if admitted is None else np.asarray(admitted, dtype=bool)
    if adm.shape != (U,):
        raise InvalidInputError(f"admitted must have shape ({U},). {_NOTHING}")
    spend = _split(kind, amt, al)
    if sum(spend.values()) != amt:  # pragma: no cover - exact Fractions
        raise InvalidInputError("the PCH budget split does not sum to the amount.")
    # validate the fixed phases before any bit is drawn
    scales = _fixed_phases(kind, spend, ks)
    # ... and the k-dependent phases too: k depends on R̃, but only within public bounds
    scales.update(_check_k_phases(kind, spend, ks, counts, k, int(k_min), int(k_max)))
    if adm.any():  # nothing is drawn otherwise (the faces' dry run: hull_preflight checks)
        check_noise_range(kind, amt, scales)
    bits = resolve_rng(rng)

    users = np.flatnonzero(adm)
    centre = np.full((U, 2), np.nan)
    radius = np.full(U, np.nan)
    kk = np.zeros(U, dtype=np.int64)
    kraw = np.full(U, np.nan)
    fallback = np.zeros(U, dtype=bool)
    err = np.full(U, np.nan)
    anchors: list[NDArray[np.float64]] = [np.empty((0, 2))] * U
    hulls = np.empty(U, dtype=object)
    r_min = 1.0
    if users.size == 0:
        charges = np.full(U, Fraction(0), dtype=object)
        return HullArrays(hulls, anchors, centre, radius, kk, kraw, fallback, err, spend,
                          charges, r_min)  # fmt: skip

    srt = group_rows(c)
    # sorted codes (e.g. one user): group_rows is the identity, so skip the gathers of n rows
    ident = c.size < 2 or bool((c[1:] >= c[:-1]).all())
    start = np.zeros(U, dtype=np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    ps = p if ident else p[srt]
    lo = np.minimum.reduceat(ps, start, axis=0)
    hi = np.maximum.reduceat(ps, start, axis=0)
    # step 2: centre, √2-Lipschitz, at 2ρ₀/3
    rel_c = _release_points(kind, ((lo + hi) / 2)[users], spend["centre"], ks, sqrt_up(2), bits)
    centre[users] = np.asarray(rel_c)
    # step 3: max distance to the *released* centre, 1-Lipschitz, at ρ₀/3
    # the same float operations as hypot(x − cx, y − cy), in two buffers (fewer page faults)
    if U == 1:
        d_c = np.subtract(ps[:, 0], centre[0, 0])
        dy = np.subtract(ps[:, 1], centre[0, 1])
    else:
        cs = c if ident else c[srt]
        d_c = np.subtract(ps[:, 0], centre[cs, 0])
        dy = np.subtract(ps[:, 1], centre[cs, 1])
    np.hypot(d_c, dy, out=d_c)
    rmax = np.maximum.reduceat(np.nan_to_num(d_c, copy=False, nan=0.0), start)
    from gpframe import mechanisms as mech

    if kind == "cgp":
        rel_r = _quiet(mech.gaussian_cgp, rmax[users], rho=spend["radius"] / (ks * ks), rng=bits)
        enl = float(rel_r.noise["scale"]) * math.sqrt(2 * math.log(2 / b)) + float(rel_r.g)
    else:
        rel_r = _quiet(mech.laplace_gp, rmax[users], eps=spend["radius"] / ks, rng=bits)
        enl = float(rel_r.noise["scale"]) * math.log(2 / b) + float(rel_r.g)
    for rel in (rel_c, rel_r):
        if isinstance(rel.guarantee.metric, tuple):
            r_min = max(r_min, float(rel.guarantee.metric[1]))
    radius[users] = np.maximum(np.asarray(rel_r) + enl, float(radius_floor_m))
    # step 4: k from public quantities only
    kr, kc = choose_k(kind, float(amt), counts[users], radius[users], beta=b, alpha=float(al),
                      rule=k_rule, k_min=int(k_min), k_max=int(k_max))  # fmt: skip
    kraw[users] = kr
    kk[users] = kc if k is None else int(k)
    fallback[users] = kk[users] >= counts[users]
    grouped = srt
    px, py = np.ascontiguousarray(p[:, 0]), np.ascontiguousarray(p[:, 1])
    # Remark 1: k >= n, release all n points at ρ₁ (per point ρ₁/n), grouped by n
    fb_users = users[fallback[users]]
    for n_u in np.unique(counts[fb_users]).tolist():
        grp = fb_users[counts[fb_users] == n_u]
        rows = np.concatenate([srt[start[u] : start[u] + n_u] for u in grp.tolist()])
        part = (spend["pnn"] + spend["release"]) / n_u
        rel = _release_points(kind, p[rows], part, ks, 1, bits)
        y = np.asarray(rel).reshape(grp.size, n_u, 2)
        for i, u in enumerate(grp.tolist()):
            anchors[u] = y[i]
        kk[grp] = n_u
    # steps 5–6 per k group: anchors by PNN toward P_j, then their release
    pnn_users = users[~fallback[users]]
    for k_u in np.unique(kk[pnn_users]).tolist():
        grp = pnn_users[kk[pnn_users] == k_u]
        if kind == "cgp":
            e_j = eps_from_rho(spend["pnn"] / (k_u * ks * ks))
        else:
            e_j = spend["pnn"] / (k_u * ks)
        cal = pnn_calibration(check_eps(e_j, "eps (one PCH anchor call)"))
        in_grp = np.zeros(U, dtype=bool)
        in_grp[grp] = True
        rem = grouped if grp.size == U else grouped[in_grp[c[grouped]]]
        theta = 2 * np.pi * np.arange(k_u) / k_u
        cg, rg = centre[grp], radius[grp]

        # gathered once (not at all when already in order): the k calls only change P_j
        gx, gy = (px, py) if ident and grp.size == U else (px[rem], py[rem])
        # one buffer for all k calls (every call rewrites it in full): fresh arrays of n floats
        # per call cost more in page faults than the arithmetic
        buf = np.empty_like(gx)
        who = _NO_OWNER if grp.size == 1 else None  # one user: no gather of P by owner

        def values(j: int, r: Any, owner: Any, cg=cg, rg=rg, theta=theta, gx=gx, gy=gy,
                   buf=buf, who=who) -> Any:  # fmt: skip
            P = cg + rg[:, None] * np.array([math.cos(theta[j]), math.sin(theta[j])])
            # the target P_j lies within R̃ of c̃, both noisy: a target beyond ±2**40 m (data near
            # that edge; check_noise_range refused the amounts that reach it) is clamped into the
            # data's range, where every distance snaps exactly. This is post-processing of c̃ and
            # R̃ and a no-op otherwise; it replaces a refusal that came after the draws (charged)
            np.clip(P, -_TARGET_MAX_M, _TARGET_MAX_M, out=P)
            # (x − px)² + (y − py)² in one compiled pass, the same float operations
            return squared_distances(gx, gy, P, owner if who is None else who, buf)

        sel, _ = k_pnn(rem, counts[grp], int(k_u), values, cal, gamma0_b=0.0,
                       order=ScanOrder(counts[grp], order, bits),
                       max_cycles=int(max_cycles), bits=bits)  # fmt: skip
        r_min = max(r_min, float(cal.r_min))
        rel = _release_points(kind, p[sel.reshape(-1)], spend["release"] / k_u, ks, 1, bits)
        y = np.asarray(rel).reshape(grp.size, k_u, 2)
        for i, u in enumerate(grp.tolist()):
            anchors[u] = y[i]
    # the noise was calibrated at the projected amount (amount / K, amount / K² for CGP):
    # the bound must be too, or it understates the error by up to K on wide extents
    err[users] = sum(hull_error(kind, float(projected_amount(kind, amt, ks)), counts[users],
                                kk[users], radius[users], beta=b, alpha=float(al)))  # fmt: skip
    owner = np.repeat(users, [len(anchors[u]) for u in users.tolist()])
    allpts = np.concatenate([anchors[u] for u in users.tolist()])
    mp = shapely.multipoints(allpts, indices=np.searchsorted(users, owner))
    hulls[users] = shapely.convex_hull(mp)
    charges = np.empty(U, dtype=object)
    charges[:] = [amt if a else Fraction(0) for a in adm.tolist()]
    return HullArrays(hulls, anchors, centre, radius, kk, kraw, fallback, err, spend, charges,
                      r_min)  # fmt: skip


def hull_preflight(kind: str, amount: Fraction, beta: float, alpha: Any, k: Any,
                   radius_floor_m: Any, counts: np.ndarray, scale_max: float) -> None:  # fmt: skip
    """Run the checks PCH makes only after its first draws, before the reservation.

    :func:`private_hulls`' dry run (no admitted user) stops after the centre and radius phases,
    so a k-dependent phase it refuses (a PNN call or an anchor release below the supported
    amounts) used to be refused inside the reservation, charging everybody. k is public (given,
    or clamped to [16, 128]) and the fallback releases the n points of a user
    with n <= k, so every group the run can form is checked now (both ends of k and n). Last,
    :func:`check_noise_range` refuses an amount whose centre, radius or anchor noise could put
    the anchors beyond ±2**40 m, which PCH would only see after its draws.
    """
    check_beta_and_floor(beta, radius_floor_m)
    # exact() as in private_hulls (accepts what its dry run accepted, e.g. a 0-d array)
    spend = _split(kind, amount, exact(alpha, "alpha"))
    ks = Fraction(scale_max)
    scales = _fixed_phases(kind, spend, ks)
    # the PNN and release groups any user can reach (k in the clamp or fixed, the fallback's n)
    scales.update(_check_k_phases(kind, spend, ks, counts, None if k is None else int(k),
                                  16, 128))  # fmt: skip
    # last, so that every calibration refusal above keeps its own message
    check_noise_range(kind, amount, scales)
