"""Exact noise calibration of the release wrappers.

See ``docs/noise.md`` (representation of the variance, snapping and the r_min floor, Gaussian noise
on points, lattice choice, noise parameters and charges, parameter ranges).

Everything here is pure ``Fraction`` arithmetic: no float and no randomness. Each function takes the
amount the ledger will be charged and returns the lattice and the noise parameter the sampler is
called with, rounded so that the noise is never smaller than what was paid for: rates are rounded
down and variances up. Irrational factors (√d, √m) are replaced by upper bounds with at least 60
significant bits (``docs/noise.md``), which can only add noise.

The location lattice policy (``docs/noise.md``): g = 2⁻¹⁰ m and r_min = 1 m by default. When the
noise scale exceeds 2²⁴ lattice steps (ε g < 2⁻²⁴ for planar Laplace, σ/g > 2²⁴ for CGP) the lattice
is coarsened to the smallest power of two that restores the range and r_min is raised to
max(r_min, 2¹⁰ g). The same trigger is used for the 1-D GP wrapper, so that one session lattice
serves every location mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from gpframe.accounting.amounts import exact
from gpframe.errors import InvalidInputError

__all__ = [
    "A_RANGE",
    "D_MAX",
    "EPS_RANGE",
    "G_LOC",
    "LAM_RANGE",
    "LOC_SCALE_MAX",
    "R_MIN",
    "SIGMA_G_RANGE",
    "CentralCalibration",
    "LocationCalibration",
    "central_gaussian",
    "central_laplace",
    "cgp_gaussian",
    "check_draw_scale",
    "check_eps",
    "check_g",
    "check_positive",
    "check_rho",
    "eps_from_rho",
    "floor_log2",
    "gp_laplace",
    "round_down_float",
    "round_up_sigma2",
    "sqrt_down",
    "sqrt_up",
]

#: default location lattice step, metres
G_LOC = Fraction(1, 2**10)
#: default floor of the metric d_r, metres
R_MIN = Fraction(1)
#: allowed eps / epsilon per unit: [2^-40, eps_max = 100]
EPS_RANGE = (Fraction(1, 2**40), Fraction(100))
#: discrete Laplace rate in lattice units
LAM_RANGE = (Fraction(1, 2**40), Fraction(2**10))
#: lattice Laplace rate a = eps g / K'
A_RANGE = (Fraction(1, 2**24), Fraction(2**4))
#: discrete Gaussian sigma in lattice units
SIGMA_G_RANGE = (Fraction(1, 2**4), Fraction(2**24))
#: largest location noise scale, in lattice steps, before the lattice is coarsened
LOC_SCALE_MAX = Fraction(2**24)
#: largest dimension of the lattice Laplace sampler
D_MAX = 4
#: fractional bits of the upper bounds of square roots ("a ceiling of √2 at 2⁻⁶⁰")
SQRT_BITS = 60
#: magnitudes every positive parameter (ε, ρ, K, r_min, sensitivities, draw_scale) must lie in:
#: far outside any meaningful use, and keeps exact arithmetic and float messages in range
PARAM_RANGE = (Fraction(1, 2**256), Fraction(2**256))


def _fmt(x: Fraction) -> str:
    """Format ``x`` for a message without ever overflowing a float."""
    try:
        return f"{float(x):.6g}"
    except OverflowError:
        return f"about 10**{len(str(int(x))) - 1}"


# --------------------------------------------------------------------------------------------
# exact helpers


def floor_log2(x: Fraction) -> int:
    """Exact ⌊log₂ x⌋ of a positive rational.

    >>> floor_log2(Fraction(1, 3)), floor_log2(Fraction(8)), floor_log2(Fraction(7))
    (-2, 3, 2)
    """
    if x <= 0:
        raise InvalidInputError(f"floor_log2 needs a positive value, got {x}.")
    e = x.numerator.bit_length() - x.denominator.bit_length()
    # 2**e is within a factor 2 of x; correct the estimate exactly
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    return e


def _sqrt_bits(x: Fraction, bits: int) -> int:
    # enough fractional bits for `bits` significant bits even when x is tiny
    shrink = x.denominator.bit_length() - x.numerator.bit_length()
    return bits + max(0, (shrink + 1) // 2 + 1)


def _isqrt_scaled(x: Fraction, bits: int) -> tuple[int, int]:
    # (r, k) with r = ⌊√x · 2^k⌋; isqrt(⌊y⌋) = ⌊√y⌋ for real y ≥ 0
    k = _sqrt_bits(x, bits) if x else 0
    return math.isqrt((x.numerator << (2 * k)) // x.denominator), k


def _exact_sqrt(x: Fraction) -> Fraction | None:
    # √(p/q) is rational iff p and q are squares (the fraction is in lowest terms)
    p, q = math.isqrt(x.numerator), math.isqrt(x.denominator)
    return Fraction(p, q) if p * p == x.numerator and q * q == x.denominator else None


#: most significant bits a square-root bound may ask for (the sampler needs 60; more only costs)
SQRT_BITS_MAX = 4096


def _sqrt_args(x: object, bits: object, fn: str) -> Fraction:
    """Check the arguments of :func:`sqrt_down` / :func:`sqrt_up`; return x exactly."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= SQRT_BITS_MAX:
        raise InvalidInputError(
            f"{fn}: bits={bits!r} must be an int in [1, {SQRT_BITS_MAX}] (default {SQRT_BITS})."
        )
    v = x if type(x) is Fraction else Fraction(x) if type(x) is int else exact(x, "x")
    if v < 0:
        raise InvalidInputError(f"{fn} needs x >= 0, got x={_fmt(v)}.")
    return v


def sqrt_down(x: Fraction | int, bits: int = SQRT_BITS) -> Fraction:
    """Return a dyadic lower bound of √x with ``bits`` significant bits (exact for squares).

    >>> sqrt_down(Fraction(2)) <= Fraction(14142135623730950488, 10**19)
    True
    >>> sqrt_down(Fraction(9, 4))
    Fraction(3, 2)
    """
    x = _sqrt_args(x, bits, "sqrt_down")
    exact_root = _exact_sqrt(x)
    if exact_root is not None:
        return exact_root
    r, k = _isqrt_scaled(x, bits)
    return Fraction(r, 1 << k)


def sqrt_up(x: Fraction | int, bits: int = SQRT_BITS) -> Fraction:
    """Return a dyadic upper bound of √x with ``bits`` significant bits (exact for squares).

    >>> sqrt_up(2) >= Fraction(14142135623730950488, 10**19), sqrt_up(4)
    (True, Fraction(2, 1))
    """
    x = _sqrt_args(x, bits, "sqrt_up")
    exact_root = _exact_sqrt(x)
    if exact_root is not None:
        return exact_root
    r, k = _isqrt_scaled(x, bits)
    return Fraction(r + 1, 1 << k)


def round_down_float(x: Fraction) -> Fraction:
    """Return the largest float64 value (53 significant bits) that is ≤ x, as an exact Fraction.

    Used for the lattice Laplace rate ``a``, which must be an exact float (``docs/noise.md``).

    >>> r = round_down_float(Fraction(1, 10))
    >>> r <= Fraction(1, 10) < r * (1 + Fraction(1, 2**52)), Fraction(float(r)) == r
    (True, True)
    """
    if x <= 0:
        raise InvalidInputError(f"round_down_float needs x > 0, got {x}.")
    e = floor_log2(x) - 52  # unit in the last place of a 53-bit significand
    step = Fraction(2) ** e
    return (x // step) * step


def round_up_sigma2(s2: Fraction) -> Fraction:
    """Round a lattice variance up as ``docs/noise.md`` says.

    To an integer when σ_g² ≥ 2¹⁶, otherwise to a multiple of 2⁻¹⁶.

    >>> round_up_sigma2(Fraction(200000, 3))
    Fraction(66667, 1)
    >>> round_up_sigma2(Fraction(1, 3)) * 2**16
    Fraction(21846, 1)
    """
    step = Fraction(1) if s2 >= 2**16 else Fraction(1, 2**16)
    return -((-s2) // step) * step


def eps_from_rho(rho: Fraction) -> Fraction:
    """Return the GP ε at which a CGP algorithm runs a Laplace block: √(2ρ), rounded **down**.

    ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.6: an ε-GP block
    costs ε²/2 ≤ ρ, so rounding ε down only adds noise; the ledger is charged ρ.

    >>> eps_from_rho(Fraction(1, 20000))
    Fraction(1, 100)
    >>> e = eps_from_rho(Fraction(1, 10**6)); e * e / 2 <= Fraction(1, 10**6)
    True
    """
    return sqrt_down(2 * check_rho(rho, "rho"))


# --------------------------------------------------------------------------------------------
# parameter validation (before any bit is drawn)


def check_positive(value: object, name: str) -> Fraction:
    """Exact, finite and > 0, or ``InvalidInputError`` naming ``name``.

    >>> check_positive(1.5, "K")
    Fraction(3, 2)
    """
    # a bool is never an amount: `exact` refuses Python's bool, but numpy's (np.True_, or a
    # 0-d bool array) would read as 1. Refused here for every check built on this one.
    if isinstance(value, (bool, np.bool_)) or getattr(value, "dtype", None) == np.bool_:
        raise InvalidInputError(
            f"{name}={value!r} is a bool; pass a positive number (e.g. {name}=0.5). "
            "Nothing was charged."
        )
    x = exact(value, name)
    if x <= 0:
        raise InvalidInputError(f"{name}={value!r} must be > 0. Nothing was charged.")
    lo, hi = PARAM_RANGE
    if not lo <= x <= hi:
        raise InvalidInputError(
            f"{name}={_fmt(x)} is outside the supported magnitudes [2**-256, 2**256]. "
            "Pass a value in that range. Nothing was charged."
        )
    return x


def check_eps(value: object, name: str) -> Fraction:
    """ε or epsilon in [2⁻⁴⁰, 100] (``docs/noise.md``).

    >>> check_eps(0.01, "eps")
    Fraction(1, 100)
    """
    x = check_positive(value, name)
    lo, hi = EPS_RANGE
    if not lo <= x <= hi:
        raise InvalidInputError(
            f"{name}={_fmt(x)} is outside the supported range [2**-40, 100] "
            "(docs/noise.md). "
            f"Pass a value in that range. Nothing was charged."
        )
    return x


def check_rho(value: object, name: str = "rho") -> Fraction:
    """ρ: finite and > 0 (``docs/noise.md``).

    >>> check_rho(5e-5)
    Fraction(1, 20000)
    """
    return check_positive(value, name)


def check_g(value: object, name: str = "g") -> Fraction:
    """Check a lattice step: a positive power of two (``docs/noise.md``).

    >>> check_g(2**-10)
    Fraction(1, 1024)
    """
    x = check_positive(value, name)
    if x.numerator & (x.numerator - 1) or x.denominator & (x.denominator - 1):
        raise InvalidInputError(
            f"{name}={value!r} is not a power of two; the lattice step must be 2**e "
            f"(e.g. g=2**-10 for 1 mm). Nothing was charged."
        )
    if not Fraction(1, 2**60) <= x <= Fraction(2**60):
        raise InvalidInputError(
            f"{name}={value!r} is outside [2**-60, 2**60]. Nothing was charged."
        )
    return x


def check_draw_scale(value: object) -> Fraction:
    """Check the multi-draw scale factor s of ``docs/noise.md``: exact and >= 1.

    >>> check_draw_scale(4)
    Fraction(4, 1)
    """
    s = check_positive(value, "draw_scale")
    if s < 1:
        raise InvalidInputError(
            f"draw_scale={value!r} must be >= 1 (it divides eps; docs/noise.md). "
            f"Nothing was charged."
        )
    return s


# --------------------------------------------------------------------------------------------
# central mechanisms


@dataclass(frozen=True)
class CentralCalibration:
    """Lattice and noise of a central (DP / zCDP) release.

    ``param`` is ``lam`` (Laplace rate) or ``sigma2`` (Gaussian variance), both in lattice units;
    ``width`` is the sensitivity in lattice units after snapping (⌊Δ/g⌋ + m, or Δ/g when exact).
    """

    g: Fraction
    param: Fraction
    width: Fraction
    coarsen: Fraction


def central_laplace(
    epsilon: Fraction,
    sensitivity: Fraction,
    *,
    integer: bool,
    m: int = 1,
    s: Fraction = Fraction(1),
) -> CentralCalibration:
    """Central Laplace rows of ``docs/noise.md`` (ε-DP, ℓ1 sensitivity Δ of an m-vector).

    Integer statistic: g = 1, λ = ε/(sΔ). Real statistic: g = 2^(⌊log₂Δ⌋−20) (``docs/noise.md``) and
    λ = ε/(s(⌊Δ/g⌋ + m)); for m = 1 this is the table's ⌊Δ/g⌋+1. Each of the m coordinates adds at
    most one lattice step by snapping (|rint a − rint b| ≤ ⌊|a−b|⌋ + 1) and Σ⌊|δⱼ|/g⌋ ≤ ⌊Δ/g⌋.
    ``s`` is the multi-draw scale factor (SVT: 2 and 4).

    >>> c = central_laplace(Fraction(1), Fraction(3), integer=True)
    >>> c.g, c.param
    (Fraction(1, 1), Fraction(1, 3))
    >>> c = central_laplace(Fraction(1, 2), Fraction(1), integer=False)
    >>> c.g, c.param == Fraction(1, 2) / (2**20 + 1)
    (Fraction(1, 1048576), True)
    """
    if integer:
        width = sensitivity
        lam = epsilon / (s * width)
        lo, hi = LAM_RANGE
        if not lo <= lam <= hi:
            raise InvalidInputError(
                f"epsilon/sensitivity = {_fmt(lam)} is outside the discrete Laplace range "
                f"[2**-40, 2**10] (docs/noise.md); change epsilon or sensitivity. "
                f"Nothing was charged."
            )
        return CentralCalibration(Fraction(1), lam, width, Fraction(1))
    g0 = Fraction(2) ** (floor_log2(sensitivity) - 20)
    g = g0
    while True:
        width = Fraction(sensitivity // g + m)
        lam = epsilon / (s * width)
        if lam >= LAM_RANGE[0]:
            break
        g *= 2  # only at epsilon below ~2**-20: a coarser lattice restores the sampler's range
    if lam > LAM_RANGE[1]:  # pragma: no cover - epsilon <= 100 and width >= 2**20
        raise InvalidInputError(f"epsilon={_fmt(epsilon)} is too large. Nothing was charged.")
    return CentralCalibration(g, lam, width, g / g0)


def central_gaussian(
    rho: Fraction, l2_sensitivity: Fraction, *, integer: bool, m: int = 1
) -> CentralCalibration:
    """Central Gaussian rows of ``docs/noise.md`` (ρ-zCDP, ℓ2 sensitivity Δ₂ of an m-vector).

    Integer: g = 1, σ_g² ≥ Δ₂²/(2ρ). Real: g = 2^(⌊log₂σ₀⌋−16) with σ₀ = Δ₂/√(2ρ)
    (``docs/noise.md``) and σ_g² ≥ (Δ₂/g + √m)²/(2ρ). Both rounded up as representation of the
    variance says.

    >>> central_gaussian(Fraction(1, 2), Fraction(1), integer=True).param
    Fraction(1, 1)
    """
    if integer:
        g = Fraction(1)
        width = l2_sensitivity
        s2 = round_up_sigma2(width * width / (2 * rho))
    else:
        sigma0_sq = l2_sensitivity * l2_sensitivity / (2 * rho)
        g = Fraction(2) ** (floor_log2(sigma0_sq) // 2 - 16)
        width = l2_sensitivity / g + sqrt_up(m)
        s2 = round_up_sigma2(width * width / (2 * rho))
    lo, hi = SIGMA_G_RANGE
    if not lo * lo <= s2 <= hi * hi:
        raise InvalidInputError(
            f"rho={_fmt(rho)} with l2_sensitivity={_fmt(l2_sensitivity)} gives a lattice "
            f"sigma of {_fmt(sqrt_up(s2, 8))} steps, outside [2**-4, 2**24] "
            "(docs/noise.md). "
            f"Change rho (or use integer=False for real statistics). Nothing was charged."
        )
    return CentralCalibration(g, s2, width, Fraction(1))


# --------------------------------------------------------------------------------------------
# location mechanisms (GP, CGP)


@dataclass(frozen=True)
class LocationCalibration:
    """Lattice, effective floor and noise parameter of a GP or CGP release.

    ``param`` is ``lam`` (1-D Laplace), ``a`` (lattice Laplace) or ``sigma2`` (Gaussian), in
    lattice units. ``r_min`` is None in lattice-exact mode (Euclidean metric). ``coarsen`` is
    g / g_requested (1 unless the lattice policy coarsened the lattice).
    """

    g: Fraction
    r_min: Fraction | None
    param: Fraction
    coarsen: Fraction
    lipschitz: Fraction  # K + √d g/r_min (upper bound), or K in lattice-exact mode

    @property
    def metric(self) -> str | tuple:
        """``("floor", r_min)`` for snapped real inputs, ``"euclidean"`` for lattice-exact ones."""
        return "euclidean" if self.r_min is None else ("floor", self.r_min)


def _lipschitz(K: Fraction, d: int, g: Fraction, r_min: Fraction | None) -> Fraction:
    # K' = K + √d g / r_min: the snapped query moves by at most K·dist + √d·g
    if r_min is None:
        return K
    return K + sqrt_up(d) * g / r_min


def _location(
    kind: str,
    amount: Fraction,
    *,
    K: Fraction,
    d: int,
    g: Fraction,
    r_min: Fraction,
    lattice_exact: bool,
    s: Fraction,
) -> LocationCalibration:
    g0 = g
    floor = None if lattice_exact else r_min
    while True:
        kp = _lipschitz(K, d, g, floor)
        if kind == "lam":  # GP 1-D: λ = εg/(s K')
            param = amount * g / (s * kp)
            too_coarse = param < 1 / LOC_SCALE_MAX
        elif kind == "a":  # GP d-dim: a = εg/(s K'), an exact float rounded down
            param = round_down_float(amount * g / (s * kp))
            too_coarse = param < 1 / LOC_SCALE_MAX
        else:  # CGP: σ_g² = K'²/(2ρg²), rounded up
            param = round_up_sigma2(kp * kp / (2 * amount * g * g))
            too_coarse = param > LOC_SCALE_MAX**2
        if not too_coarse:
            break
        if lattice_exact:
            name = "rho" if kind == "sigma2" else "eps"
            raise InvalidInputError(
                f"{name}={_fmt(amount)} needs noise above 2**24 lattice steps of "
                f"g={float(g):g} m; lattice-exact inputs cannot be moved to a coarser lattice "
                "(docs/noise.md). Pass lattice_exact=False or a coarser g. "
                "Nothing was charged."
            )
        g *= 2
        floor = max(r_min, 2**10 * g)
    if kind == "sigma2":
        lo, hi = SIGMA_G_RANGE
        ok = param >= lo * lo
        name, rng = "rho", "sigma/g >= 2**-4"
    else:
        lo, hi = LAM_RANGE if kind == "lam" else A_RANGE
        ok = param <= hi
        name, rng = "eps", f"rate <= {hi} per lattice step"
    if not ok:
        raise InvalidInputError(
            f"{name}={_fmt(amount)} asks for noise finer than the lattice g={_fmt(g)} m "
            f"allows ({rng}, docs/noise.md). Lower {name} or pass a finer g. "
            "Nothing was charged."
        )
    return LocationCalibration(g, floor, param, g / g0, kp)


def gp_laplace(
    eps: Fraction,
    *,
    K: Fraction = Fraction(1),
    d: int = 1,
    g: Fraction = G_LOC,
    r_min: Fraction = R_MIN,
    lattice_exact: bool = False,
    s: Fraction = Fraction(1),
) -> LocationCalibration:
    """GP rows of ``docs/noise.md``: λ (d = 1) or a (d ≥ 2) = εg/(s(K + √d·g/r_min)).

    In lattice-exact mode the √d·g/r_min term is dropped (``docs/noise.md``). ``s`` is the
    multi-draw scale factor (SVT W: 2, V: 4; PNN Z, W: 3, V: 6). Defaults g = 2⁻¹⁰ m, r_min = 1 m.

    >>> gp_laplace(Fraction(1, 100)).param == Fraction(1, 100) / 1024 / (1 + Fraction(1, 1024))
    True
    >>> gp_laplace(Fraction(1, 100), lattice_exact=True).param
    Fraction(1, 102400)
    """
    if not 1 <= d <= D_MAX:
        raise InvalidInputError(f"d={d} is not supported; the dimension must be 1..4.")
    return _location(
        "lam" if d == 1 else "a", eps, K=K, d=d, g=g, r_min=r_min, lattice_exact=lattice_exact, s=s
    )


def cgp_gaussian(
    rho: Fraction,
    *,
    K: Fraction = Fraction(1),
    d: int = 2,
    g: Fraction = G_LOC,
    r_min: Fraction = R_MIN,
    lattice_exact: bool = False,
) -> LocationCalibration:
    """CGP rows of ``docs/noise.md``: σ_g = (K + √d·g/r_min)/(g√(2ρ)), as σ_g² rounded up.

    In lattice-exact mode σ_g = K/(g√(2ρ)) (``docs/noise.md``, lattice inputs).

    >>> cgp_gaussian(Fraction(1, 20000), lattice_exact=True).param   # (100 m / 2**-10)**2
    Fraction(10485760000, 1)
    """
    if d < 1:
        raise InvalidInputError(f"d={d} is not supported; the dimension must be >= 1.")
    return _location(
        "sigma2", rho, K=K, d=d, g=g, r_min=r_min, lattice_exact=lattice_exact, s=Fraction(1)
    )
