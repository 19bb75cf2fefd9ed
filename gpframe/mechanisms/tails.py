"""Error bounds and nominal scales for results (utility statements, not releases).

See ``docs/noise.md``, ``docs/operations/privatize.md``, ``docs/concepts.md`` and ``docs/ledger.md``
(Gaussian mechanism, Laplace mechanism, radius laws, GP Basic, CGP Basic, discrete Gaussian
accounting, lattice error bounds, utility on the lattice, canonical mechanisms, admission);
Liang & Yi, 'Concentrated Geo-Privacy' (2023), Thm. 3.1, Lem. 2.6, Lem. 4.1, 4.7, Thm. 4.6,
Thm. 4.8. Floats (and scipy) are fine here: these numbers describe the noise, they never decide it.
Every ``*_bound`` function is a *proven* bound for the lattice noise gpframe releases, with the
parameters actually sampled (``Released.noise``), plus the snapping error; the ``*_quantile`` /
``nominal`` helpers are the continuous formulas of the oracle tables. A bound for n points at once
splits β over them (union bound, ``n=``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from gpframe.accounting.amounts import exact, positive
from gpframe.errors import InvalidInputError

__all__ = [
    "cgp_sigma",
    "error_bound",
    "gaussian_bound",
    "gaussian_radius_bound",
    "gaussian_radius_nominal",
    "gp_scale",
    "gp_to_rate",
    "laplace_bound",
    "lem45_bound",
    "planar_bound",
    "planar_quantile",
]


#: argument checks shared by every public helper here (utility statements still refuse nonsense)
_POSITIVE = ("rho", "eps", "K", "scale", "sigma", "g")
_COUNTS = {"n": 10**15, "d": 4}
_RANGE = (2.0**-256, 2.0**256)


def _check_args(fn: Any) -> Any:
    """Validate the helper's arguments by name and refuse a non-finite result.

    Every message names the argument (``InvalidInputError``), so a bad value never surfaces as a
    ``ZeroDivisionError``, an ``OverflowError`` or a NaN bound.
    """
    import functools
    import inspect

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> float:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"{fn.__name__}: {exc}.") from exc
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            if name in _COUNTS and (value is not None or sig.parameters[name].default is not None):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | Fraction)
                    or (isinstance(value, Fraction) and value.denominator != 1)
                ):
                    raise InvalidInputError(f"{name}={value!r} must be a positive integer.")
                if not 1 <= int(value) <= _COUNTS[name]:
                    raise InvalidInputError(
                        f"{name}={value!r} must be between 1 and {_COUNTS[name]}."
                    )
            elif name in _POSITIVE:
                x = positive(value, name)
                if not _RANGE[0] <= x <= _RANGE[1]:
                    raise InvalidInputError(f"{name}={value!r} is outside [2**-256, 2**256].")
            elif name == "beta":
                b = exact(value, "beta")
                if not 0 < b < 1:
                    raise InvalidInputError(f"beta={value!r} must be in (0, 1), e.g. beta=0.05.")
            elif name == "released" and not hasattr(value, "noise"):
                raise InvalidInputError(
                    f"released={value!r} is not a Released (the output of a gpframe mechanism)."
                )
        try:
            out = fn(*bound.args, **bound.kwargs)
        except (OverflowError, ZeroDivisionError, ValueError) as exc:
            if isinstance(exc, InvalidInputError):
                raise
            raise InvalidInputError(
                f"{fn.__name__}{tuple(bound.arguments.items())!r} has no finite value ({exc}); "
                "check beta, n and the scale arguments."
            ) from exc
        if not math.isfinite(out):
            raise InvalidInputError(
                f"{fn.__name__} gives {out!r} for {dict(bound.arguments)!r}: beta, n or the scale "
                "arguments are too extreme for a finite bound."
            )
        return out

    return checked


def _beta(beta: object, n: int) -> float:
    b = float(exact(beta, "beta"))
    if not 0 < b < 1:
        raise InvalidInputError(f"beta={beta!r} must be in (0, 1).")
    if int(n) < 1:
        raise InvalidInputError(f"n={n!r} must be >= 1.")
    return b / int(n)


# --------------------------------------------------------------------------------------------
# nominal scales (continuous laws; the oracle tables' numbers)


@_check_args
def cgp_sigma(rho: object, n: int = 1, K: object = 1) -> float:
    """Nominal CGP standard deviation σ = K·√(n/(2ρ)) m per coordinate (before the lattice term).

    ``docs/noise.md`` and ``docs/operations/privatize.md`` (Gaussian mechanism, ``privatize`` gives
    each of n points ρ/n); Liang & Yi, 'Concentrated Geo-Privacy' (2023), Thm. 3.1, Thm. 4.8.

    >>> cgp_sigma(rho=5e-5, n=1)
    100.0
    >>> round(cgp_sigma(rho=5e-6, n=5000), 5)
    22360.67977
    """
    v = Fraction(int(n)) * exact(K, "K") ** 2 / (2 * positive(rho, "rho"))
    return math.sqrt(v)


@_check_args
def gp_scale(eps: object, n: int = 1, K: object = 1) -> float:
    """Nominal GP Laplace scale n·K/ε metres (the mean planar radius is twice this).

    >>> gp_scale(eps=0.01)
    100.0
    """
    return float(Fraction(int(n)) * exact(K, "K") / positive(eps, "eps"))


@_check_args
def gp_to_rate(eps: object, n: int = 1, K: object = 1) -> float:
    """Nominal per-point Laplace rate ε' = ε/(n·K) in m⁻¹.

    See ``docs/noise.md`` and ``docs/operations/privatize.md``: Laplace mechanism, GP Basic;
    Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 2.6, Thm. 4.6.

    >>> gp_to_rate(eps=0.2282765162, n=5000)
    4.565530324e-05
    """
    return float(positive(eps, "eps") / (int(n) * exact(K, "K")))


@_check_args
def gaussian_radius_nominal(rho: object, beta: object, n: int = 1) -> float:
    """Continuous 2-D Gaussian radius quantile r_β = √(ln(1/β)/ρ), σ = 1/√(2ρ) (Lem. 4.7).

    Exact for the continuous law only; results use :func:`gaussian_radius_bound`.

    >>> round(gaussian_radius_nominal(5e-5, 0.1), 7)
    214.5966026
    """
    b = _beta(beta, n)
    return math.sqrt(math.log(1 / b) / float(positive(rho, "rho")))


# --------------------------------------------------------------------------------------------
# planar / d-dim Laplace


def _w_minus1(z: float) -> float:
    from scipy.special import lambertw

    return float(lambertw(z, k=-1).real)


@_check_args
def planar_quantile(beta: object, scale: object, n: int = 1) -> float:
    """Continuous planar Laplace radius (1 − β)-quantile: scale·(−W₋₁(−β/e) − 1).

    ``docs/noise.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 2.6; ``scale`` = K/ε
    metres.

    >>> round(planar_quantile(0.1, 100), 7)
    388.972017
    """
    b = _beta(beta, n)
    return float(scale) * (-_w_minus1(-b / math.e) - 1)


@_check_args
def lem45_bound(beta: object, scale: object, n: int = 1) -> float:
    """Return the closed-form planar bound of Lem. 4.5: scale·(√(2 ln(1/β)) + ln(1/β)).

    >>> round(lem45_bound(0.1, 100), 7)
    444.8551119
    """
    L = math.log(1 / _beta(beta, n))
    return float(scale) * (math.sqrt(2 * L) + L)


@_check_args
def planar_bound(beta: object, scale: object, g: object, *, d: int = 2, n: int = 1) -> float:
    """Proven (1 − β) bound on ||y − x|| for lattice Laplace noise of scale g/a plus snapping.

    ``docs/noise.md`` (lattice error bounds, utility on the lattice): "the continuous Gamma(d)
    quantile plus √d·g". Proof: every lattice point k and every z in its unit cell satisfy | ||z|| −
    ||k|| | ≤ √d/2, so the lattice tail P(||k|| > R) ≤ e^{√d·a}·P_Gamma(d, 1/a)(r > R − √d/2).
    Solving at β·e^{−√d·a} and adding the snapping error √d·g/2 gives scale·q_d(β e^{−√d a}) + √d·g
    metres.

    >>> # √2·g plus the effect of the e^{√2a} factor
    >>> round(planar_bound(0.1, 100, 2**-10) - planar_quantile(0.1, 100), 4)
    0.0031
    """
    b = _beta(beta, n)
    s, gf = float(scale), float(g)
    a = gf / s
    b_adj = b * math.exp(-math.sqrt(d) * a)
    if d == 2:
        q = -_w_minus1(-b_adj / math.e) - 1
    else:
        from scipy.stats import gamma

        q = float(gamma.isf(b_adj, d))
    return s * q + math.sqrt(d) * gf


# --------------------------------------------------------------------------------------------
# Gaussian


def _subgaussian_u(b: float, d: int) -> float:
    # smallest u >= d/2 with (2u/d)^(d/2) e^{-(u - d/2)} <= b (Chernoff, see gaussian_radius_bound)
    if d == 2:
        return -_w_minus1(-b / math.e)
    from scipy.optimize import brentq

    def f(u: float) -> float:
        return (d / 2) * math.log(2 * u / d) - (u - d / 2) - math.log(b)

    hi = d / 2 + 1.0
    while f(hi) > 0:
        hi *= 2
    return brentq(f, d / 2, hi, xtol=1e-12, rtol=1e-14) * (1 + 1e-12)


def _cell_tail_2d(R: float, s: float) -> float:
    # 2-D lattice Gaussian tail bound in lattice units, cell comparison with h = √2/2:
    # P(||k|| > R) <= ∫_{||z||>R-h} e^{-(||z||-h)²/2s²} / ∫ e^{-(||z||+h)²/2s²}
    from scipy.special import erfc

    h = math.sqrt(2) / 2
    # substitute t = ||z|| - h; the region ||z|| > max(R - h, 0) is t > max(R - 2h, -h)
    t0 = max(R - 2 * h, -h)
    num = s * s * math.exp(-(t0 * t0) / (2 * s * s)) + h * s * math.sqrt(math.pi / 2) * erfc(
        t0 / (s * math.sqrt(2))
    )
    den = s * s * math.exp(-(h * h) / (2 * s * s)) - h * s * math.sqrt(math.pi / 2) * erfc(
        h / (s * math.sqrt(2))
    )
    return num / den if den > 0 else math.inf


@_check_args
def gaussian_radius_bound(
    beta: object, sigma: object, g: object, *, d: int = 2, n: int = 1
) -> float:
    """Proven (1 − β) bound on ||y − x|| for lattice Gaussian noise (sampled σ) plus snapping.

    ``docs/noise.md`` (Utility): the discrete Gaussian is sub-Gaussian with variance proxy σ²
    (Canonne–Kamath–Steinke 2020), so E e^{λ||k||²} ≤ (1 − 2λσ²)^{−d/2} and Chernoff gives
    P(||k|| ≥ σ√(2u)) ≤ (2u/d)^{d/2} e^{−(u − d/2)}; for d = 2 this is e·u·e^{−u}, solved by
    u = −W₋₁(−β/e). For d = 2 the tighter of this and a unit-cell comparison with the continuous
    law (both proven) is used. The snapping error √d·g/2 is added.

    >>> r = gaussian_radius_bound(0.1, 100, 2**-10)
    >>> 214.5966026 < r < 215.0      # close to the continuous r_β = 214.5966026 m at σ = 100 m
    True
    """
    b = _beta(beta, n)
    s, gf = float(sigma), float(g)
    if d == 1:
        return s * math.sqrt(2 * math.log(2 / b)) + gf / 2
    r = s * math.sqrt(2 * _subgaussian_u(b, d))
    if d == 2:
        from scipy.optimize import brentq

        sg = s / gf  # lattice units
        lo, hi = 0.0, r / gf
        if _cell_tail_2d(hi, sg) <= b:
            r = min(r, brentq(lambda R: _cell_tail_2d(R, sg) - b, lo, hi, xtol=1e-9) * gf)
            # brentq returns a root within xtol; step up so the bound side is kept
            r += 1e-9 * gf
    return r + math.sqrt(d) * gf / 2


@_check_args
def laplace_bound(beta: object, scale: object, g: object, *, n: int = 1) -> float:
    """Proven (1 − β) bound on |y − x| for 1-D lattice Laplace noise (λ = g/scale) plus snapping.

    ``docs/noise.md``: P(|k| ≥ m) = 2e^{−λm}/(1 + e^{−λ}) for integer m, so
    |y − x| ≤ scale·ln(2/(β(1 + e^{−λ}))) + g/2.

    >>> round(laplace_bound(0.1, 100, 2**-10), 3)     # ≈ 100·ln(10) + 0.0005
    230.259
    """
    b = _beta(beta, n)
    s, gf = float(scale), float(g)
    lam = gf / s
    return s * math.log(2 / (b * (1 + math.exp(-lam)))) + gf / 2


@_check_args
def gaussian_bound(beta: object, sigma: object, g: object, *, n: int = 1) -> float:
    """Proven (1 − β) bound on |y − x| for 1-D lattice Gaussian noise: σ√(2 ln(2/β)) + g/2.

    >>> round(gaussian_bound(0.05, 1.0, 2**-10), 4)
    2.7167
    """
    return gaussian_radius_bound(beta, sigma, g, d=1, n=n)


@_check_args
def error_bound(released: Any, beta: object, *, n: int | None = None) -> float:
    """Return the proven (1 − β) error bound of a :class:`Released`, simultaneously for its n rows.

    Uses the noise parameters actually sampled (``released.noise``) and the union bound over the
    rows (``n`` defaults to the number of rows). The bound is per row: |y − x| for scalars, the
    Euclidean norm for points.
    """
    noise, g = released.noise, released.g
    vals = released.values
    rows = int(n) if n is not None else (len(vals) if getattr(vals, "ndim", 0) else 1)
    rows = max(rows, 1)
    if "a" in noise:
        return planar_bound(beta, noise["scale"], g, d=vals.shape[-1], n=rows)
    if "lam" in noise:  # per entry, union over every entry of every row
        m = vals.shape[1] if vals.ndim == 2 else 1
        return laplace_bound(beta, noise["scale"], g, n=rows * m)
    if "sigma2" in noise:
        d = vals.shape[1] if vals.ndim == 2 else 1
        if d == 1:
            return gaussian_bound(beta, noise["scale"], g, n=rows)
        return gaussian_radius_bound(beta, noise["scale"], g, d=d, n=rows)
    raise InvalidInputError("released carries no known noise parameters (a, lam or sigma2).")
