"""Conversions between GP, CGP, approximate GP and central DP, and composition helpers.

See ``docs/ledger.md`` and ``docs/concepts.md`` (relations between the notions, approximate GP,
admission, GP to CGP, CGP to approximate GP, composition of GP blocks via CGP, central DP);
Liang & Yi, 'Adaptive Privacy Budgeting' (2026), eq. (3), Cor. 4.2; Liang & Yi, 'Concentrated
Geo-Privacy' (2023), Lem. 3.6, Lem. 3.7.

Two kinds of result live here, and the rounding direction of each is chosen so that the
library can never claim or spend more privacy than it has:

* **Exact** (rational) conversions return a :class:`fractions.Fraction`: ``gp_to_cgp`` (ε²/2),
  ``gaussian_rho`` (K²/(2σ²)). A GP step on a CGP ledger is charged exactly ε²/2; rounding up to
  ledger units is the ledger's job (:meth:`gpframe.accounting.amounts.LedgerUnits.up`).
* **Irrational** conversions involve a square root or a logarithm. Those that feed a mechanism or
  a budget return an exact ``Fraction`` bound on the safe side (``cgp_block_eps`` and
  ``rho_max`` round **down**: less ε means more noise, a smaller budget refuses more). Those that
  only feed a report (``eps_min``, ``delta_for``, ``zcdp_to_dp``, ...) return floats nudged
  towards the weaker claim (ε and δ up, the distance cap A down) by a relative margin of
  ``2**-40`` (about 1e-12), far above float64's few-ulp error and far below any figure a report
  prints.

``eps_delta`` reproduces the reference harness's GP budget and is for experiments only: it is
not implied by the printed Lemma 3.7 and must never charge a ledger.
"""

from __future__ import annotations

import math
from fractions import Fraction

from gpframe.accounting.amounts import nonnegative, positive
from gpframe.errors import InvalidInputError

__all__ = [
    "A_max",
    "cgp_block_eps",
    "cks_delta",
    "delta_for",
    "dp_advanced_composition",
    "eps_delta",
    "eps_min",
    "gaussian_gp_counterexample",
    "gaussian_rho",
    "gaussian_sigma",
    "gp_advanced_via_cgp",
    "gp_composition_counterexample",
    "gp_to_cgp",
    "rho_max",
    "sqrt_ceil",
    "sqrt_floor",
    "zcdp_to_dp",
]

#: relative safety margin applied to float results (see the module docstring)
_MARGIN = 2.0**-40
#: significant bits kept by the exact square-root bounds
_SQRT_BITS = 64


def _up(x: float) -> float:
    """``x`` moved up by the safety margin (towards the weaker privacy claim)."""
    return x + abs(x) * _MARGIN if x != 0 else 0.0


def _down(x: float) -> float:
    """``x`` moved down by the safety margin."""
    return x - abs(x) * _MARGIN


def _float_up(x: Fraction) -> float:
    """Return the smallest float >= the exact rational ``x``."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _delta(delta: object, name: str = "delta") -> Fraction:
    d = positive(delta, name)
    if d >= 1:
        raise InvalidInputError(
            f"{name}={delta!r} must be in (0, 1); a typical value is 1e-6 or 1e-10. "
            "Nothing was charged."
        )
    return d


def _log_inv(delta: Fraction) -> float:
    """ln(1/δ) as a float (within an ulp or two), without overflow for tiny δ."""
    # log of numerator and denominator separately: exact ints, so no underflow for δ = 1e-400
    return math.log(delta.denominator) - math.log(delta.numerator)


# -------------------- exact square roots


def _sqrt_floor_scaled(x: Fraction, bits: int) -> tuple[int, int]:
    """Return ``(m, p)`` with ``m / 2**p == floor(sqrt(x) * 2**p) / 2**p``, ~``bits`` bits."""
    # choose p so that sqrt(x) * 2**p has about `bits` bits
    approx_log2 = (x.numerator.bit_length() - x.denominator.bit_length()) // 2
    p = max(0, bits - approx_log2)
    # floor(sqrt(y)) == isqrt(floor(y)) for y >= 0, so one integer square root is exact
    m = math.isqrt((x.numerator << (2 * p)) // x.denominator)
    return m, p


def sqrt_floor(x: object, name: str = "x", bits: int = _SQRT_BITS) -> Fraction:
    """Exact lower bound on √x, within a relative ``2**-(bits-1)``.

    >>> sqrt_floor(Fraction(1, 10000))
    Fraction(1, 100)
    >>> sqrt_floor(2) ** 2 <= 2 < (sqrt_floor(2) + Fraction(1, 2**63)) ** 2
    True
    """
    v = nonnegative(x, name)
    exact_root = _sqrt_exact(v)
    if exact_root is not None:
        return exact_root
    m, p = _sqrt_floor_scaled(v, bits)
    return Fraction(m, 1 << p)


def sqrt_ceil(x: object, name: str = "x", bits: int = _SQRT_BITS) -> Fraction:
    """Exact upper bound on √x, within a relative ``2**-(bits-1)``.

    >>> sqrt_ceil(Fraction(1, 4))
    Fraction(1, 2)
    >>> sqrt_ceil(2) ** 2 >= 2
    True
    """
    v = nonnegative(x, name)
    exact_root = _sqrt_exact(v)
    if exact_root is not None:
        return exact_root
    m, p = _sqrt_floor_scaled(v, bits)
    return Fraction(m + 1, 1 << p)  # sqrt(v) is irrational here, so floor < sqrt < floor + 1


def _sqrt_exact(v: Fraction) -> Fraction | None:
    """√v when it is rational (numerator and denominator perfect squares), else None."""
    a, b = math.isqrt(v.numerator), math.isqrt(v.denominator)
    if a * a == v.numerator and b * b == v.denominator:
        return Fraction(a, b)
    return None


# -------------------- GP <-> CGP


def gp_to_cgp(eps: object) -> Fraction:
    """CGP charge of an ε-GP mechanism: ρ = ε²/2, exactly.

    See ``docs/ledger.md`` and ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023),
    Lem. 3.6.

    >>> gp_to_cgp(0.01)
    Fraction(1, 20000)
    >>> float(gp_to_cgp(0.008))
    3.2e-05
    """
    e = nonnegative(eps, "eps")
    return e * e / 2


def cgp_block_eps(rho: object, bits: int = _SQRT_BITS) -> Fraction:
    """ε = √(2ρ) at which a CGP algorithm runs a GP block of budget ρ, rounded **down**.

    Rounding down gives the block slightly more noise than its charge ρ pays for, never less
    (``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.6). The result is
    an exact ``Fraction`` whose square is at most 2ρ, within a relative 2**-63 of √(2ρ).

    >>> cgp_block_eps(Fraction(1, 20000))
    Fraction(1, 100)
    >>> e = cgp_block_eps(5e-8); e * e / 2 <= Fraction(5, 10**8)
    True
    >>> round(float(e), 12)
    0.000316227766
    """
    r = nonnegative(rho, "rho")
    return sqrt_floor(2 * r, "2*rho", bits)


# -------------------- CGP -> (eps, delta, A)-GP


def eps_min(rho: object, delta: object, A: object) -> float:
    """Smallest ε with ρ-CGP ⇒ (ε, δ, A)-GP: ε = ρA + 2√(ρ ln(1/δ)), rounded up (reporting).

    See ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.7; Liang & Yi,
    'Adaptive Privacy Budgeting' (2026), eq. (3).

    >>> round(eps_min(1e-4, 1e-6, 100), 10)
    0.0843384438
    """
    r = float(positive(rho, "rho"))
    a = float(positive(A, "A"))
    L = _log_inv(_delta(delta))
    return _up(r * a + 2.0 * math.sqrt(r * L))


def delta_for(rho: object, eps: object, A: object) -> float:
    """δ with ρ-CGP ⇒ (ε, δ, A)-GP: δ = exp(−(ε − ρA)²/(4ρ)), rounded up (reporting).

    Only meaningful for ε > ρA; otherwise no δ < 1 is implied and this returns 1.0.
    See ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.7.

    >>> f"{delta_for(0.01, 1, 10):.9e}"
    '1.605228055e-09'
    >>> delta_for(0.01, 0.1, 10)
    1.0
    """
    r = float(positive(rho, "rho"))
    e = float(positive(eps, "eps"))
    a = float(positive(A, "A"))
    gap = e - r * a
    if gap <= 0:
        return 1.0
    return min(1.0, _up(math.exp(-(gap * gap) / (4.0 * r))))


def A_max(rho: object, eps: object, delta: object) -> float:
    """Largest distance cap A with ρ-CGP ⇒ (ε, δ, A)-GP: A = (ε − 2√(ρL))/ρ, rounded down.

    Returns 0.0 when no cap works (then ρ-CGP implies no (ε, δ)-GP claim at all).
    See ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.7.

    >>> round(A_max(1e-4, 0.1, 1e-6), 6)
    256.615562
    >>> A_max(0.01, 0.01, 1e-10)
    0.0
    """
    r = float(positive(rho, "rho"))
    e = float(positive(eps, "eps"))
    L = _log_inv(_delta(delta))
    a = (e - 2.0 * math.sqrt(r * L)) / r
    return max(0.0, _down(a))


def rho_max(eps: object, delta: object, A: object) -> Fraction:
    """Largest CGP budget implying (ε, δ, A)-GP: ρ = ((√(L + Aε) − √L)/A)², rounded **down**.

    Used as the budget of a CGP filter that stands for an approximate-GP target
    (``docs/ledger.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Cor. 4.2). The value is an
    exact ``Fraction`` with at most 15 significant decimal digits that is a proven lower bound on
    the real ρ_max (float error is far below the 1e-12 margin taken before truncation).

    See ``docs/ledger.md`` and ``docs/concepts.md`` (relations between the notions, admission);
    Liang & Yi, 'Adaptive Privacy Budgeting' (2026), eq. (3); Liang & Yi, 'Concentrated Geo-Privacy'
    (2023), Lem. 3.7.

    >>> r = rho_max(0.1, 1e-6, 100); f"{float(r):.9e}"
    '1.353014690e-04'
    >>> eps_min(r, 1e-6, 100) <= 0.1 + 1e-12
    True
    """
    e = float(positive(eps, "eps"))
    a = float(positive(A, "A"))
    L = _log_inv(_delta(delta))
    # (sqrt(L + A eps) - sqrt(L)) / A == eps / (sqrt(L + A eps) + sqrt(L)): no cancellation
    u = e / (math.sqrt(L + a * e) + math.sqrt(L))
    val = _down(_down(u * u))
    if not (val > 0 and math.isfinite(val)):
        raise InvalidInputError(
            f"rho_max(eps={eps!r}, delta={delta!r}, A={A!r}) underflows; use larger eps or A. "
            "Nothing was charged."
        )
    return _decimal_floor(Fraction(val), 15)


def _decimal_floor(x: Fraction, digits: int) -> Fraction:
    """``x > 0`` truncated (down) to ``digits`` significant decimal digits."""
    e = len(str(x.numerator)) - len(str(x.denominator))  # floor(log10 x) or one more
    if Fraction(10) ** e > x:
        e -= 1
    scale = Fraction(10) ** (digits - 1 - e)
    v = x * scale
    return Fraction(v.numerator // v.denominator) / scale


# -------------------- central model


def zcdp_to_dp(rho: object, delta: object) -> float:
    """ρ-zCDP ⇒ (ε, δ)-DP with ε = ρ + 2√(ρ ln(1/δ)), rounded up (reporting).

    See ``docs/ledger.md`` and ``docs/concepts.md`` (central DP, admission); Liang & Yi,
    'Concentrated Geo-Privacy' (2023), Lem. 2.2.

    >>> round(zcdp_to_dp(0.5, 1e-6), 8)
    5.75652177
    """
    r = float(positive(rho, "rho"))
    L = _log_inv(_delta(delta))
    return _up(r + 2.0 * math.sqrt(r * L))


def dp_advanced_composition(
    epsilon: object, k: int, delta: object, delta_each: object = 0
) -> tuple[float, float]:
    """Advanced composition of ``k`` (ε', δ')-DP mechanisms: (ε, kδ' + δ), ε rounded up.

    ε = √(2k ln(1/δ))·ε' + kε'(e^ε' − 1).
    See ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 2.5, eq. (1).
    Central DP only: under a Euclidean metric GP has no advanced composition (``docs/ledger.md``);
    use :func:`gp_advanced_via_cgp` there.

    >>> eps, dl = dp_advanced_composition(0.1, 100, 1e-6); round(eps, 8), f"{dl:.3g}"
    (6.30823095, '1e-06')
    """
    e = float(positive(epsilon, "epsilon"))
    kk = _count(k)
    d = _delta(delta)
    L = _log_inv(d)
    out = math.sqrt(2.0 * kk * L) * e + kk * e * math.expm1(e)
    return _up(out), _float_up(kk * nonnegative(delta_each, "delta_each") + d)


def gp_advanced_via_cgp(eps: object, k: int, A: object, delta: object) -> float:
    """Compose k ε'-GP mechanisms into (ε, δ, A)-GP via CGP: ε = ½kε'²A + ε'√(2kL), rounded up.

    L = ln(1/δ).

    See ``docs/concepts.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 3.6, Thm. 3.2,
    Lem. 3.7. Beats basic composition (kε') only while A is moderate; compare before quoting it.

    >>> round(gp_advanced_via_cgp(0.001, 100, 100, 1e-10), 10)
    0.0728614042
    """
    e = float(positive(eps, "eps"))
    kk = _count(k)
    a = float(positive(A, "A"))
    L = _log_inv(_delta(delta))
    return _up(0.5 * kk * e * e * a + e * math.sqrt(2.0 * kk * L))


def _count(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int | Fraction) or int(k) != k or k < 1:
        try:
            import numpy as np  # numpy integers

            if isinstance(k, np.integer) and k >= 1:
                return int(k)
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        raise InvalidInputError(f"k={k!r} must be a positive integer. Nothing was charged.")
    return int(k)


# -------------------- optional CKS (reporting only)


def _cks_log_delta(rho_p: float, eps_p: float) -> tuple[float, float]:
    """Minimise over α > 1 the ln δ_α for one pair (ρ' = ρd², ε' = εd); returns (ln δ, α*)."""
    from scipy.optimize import minimize_scalar

    def f(t: float) -> float:
        am1 = math.exp(t)  # α − 1 > 0
        a = 1.0 + am1
        # ln[ exp((α−1)(αρ' − ε')) / (α−1) · (1 − 1/α)^α ]
        return am1 * (a * rho_p - eps_p) - t + a * (math.log(am1) - math.log(a))

    # the optimum sits near α ≈ (ε' + ρ')/(2ρ'); search a wide log-bracket around it
    centre = max(1e-6, (eps_p + rho_p) / (2.0 * rho_p) - 1.0)
    lo, hi = math.log(centre) - 12.0, math.log(centre) + 6.0
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return float(res.fun), 1.0 + math.exp(float(res.x))


def cks_delta(
    rho: object,
    eps: object,
    A: object,
    *,
    n_grid: int = 64,
    return_alpha: bool = False,
) -> float | tuple[float, float]:
    """δ of the optional Canonne–Kamath–Steinke conversion ρ-CGP ⇒ (ε, δ, A)-GP (reporting only).

    δ(d) = inf_{α>1} exp((α−1)(αρ' − ε'))/(α−1)·(1 − 1/α)^α with ρ' = ρd², ε' = εd. Any α gives
    a valid bound, so a numerical minimiser is safe. Because the bound is not proven monotone
    in d, it is evaluated on a grid of d ∈ (0, A] (linear and geometric, ``n_grid`` points each,
    d = A included) and the maximum is returned, rounded up and capped at 1.

    See ``docs/ledger.md`` (default off; shown beside, never instead of, eq. (3)); Liang & Yi,
    'Adaptive Privacy Budgeting' (2026), Cor. 4.2. Never use it to admit queries.

    >>> f"{cks_delta(1e-4, 0.1, 100):.6e}"
    '1.171417e-10'
    """
    r = float(positive(rho, "rho"))
    e = float(positive(eps, "eps"))
    a = float(positive(A, "A"))
    if n_grid < 1:
        raise InvalidInputError(f"n_grid={n_grid!r} must be >= 1.")
    import numpy as np

    ds = np.unique(
        np.concatenate([np.linspace(a / n_grid, a, n_grid), np.geomspace(a * 1e-4, a, n_grid), [a]])
    )
    worst, alpha_at_a = -math.inf, math.nan
    for d in ds:
        logd, alpha = _cks_log_delta(r * d * d, e * d)
        worst = max(worst, logd)
        if d == a:
            alpha_at_a = alpha
    delta = min(1.0, _up(math.exp(min(worst, 0.0))))
    return (delta, alpha_at_a) if return_alpha else delta


# -------------------- harness (experiments only)


def eps_delta(rho: object, *, s: float = 10.4, delta: float = 1e-10) -> tuple[float, float]:
    """Return the harness's GP budget ε_δ(ρ) and its implicit cap A — EXPERIMENTS ONLY.

    ε_δ = s/(s−1)·2√(ρ ln(2/((s+1)δ))), A = ε_δ/(sρ). This reproduces the paper's GP-vs-CGP
    plots. It is **not** implied by the printed Lem. 3.7 (which needs an ε about 3.6% larger at
    the same A), so it must never charge a ledger or appear in a privacy statement.
    See ``docs/concepts.md`` ("The reference harness's GP budget"); Liang & Yi, 'Concentrated
    Geo-Privacy' (2023), Lem. 3.7.

    >>> e, a = eps_delta(5e-5); round(e, 10), round(a, 6)
    (0.0721873727, 138.821871)
    """
    r = float(positive(rho, "rho"))
    sv = float(positive(s, "s"))
    if sv <= 1:
        raise InvalidInputError(f"s={s!r} must be > 1.")
    d = float(_delta(delta))
    e = sv / (sv - 1.0) * 2.0 * math.sqrt(r * math.log(2.0 / ((sv + 1.0) * d)))
    return e, e / (sv * r)


# -------------------- nominal Gaussian scale


def gaussian_rho(sigma: object, K: object = 1) -> Fraction:
    """Nominal CGP/zCDP cost of a continuous Gaussian: ρ = K²/(2σ²), exact.

    Holds only for lattice-exact inputs; the mechanisms charge ``Released.guarantee``, never a
    value recomputed from σ (``docs/concepts.md``). See ``docs/ledger.md``.

    >>> gaussian_rho(100)
    Fraction(1, 20000)
    """
    s = positive(sigma, "sigma")
    k = positive(K, "K")
    return k * k / (2 * s * s)


def gaussian_sigma(rho: object, K: object = 1) -> float:
    """Nominal Gaussian standard deviation σ = K/√(2ρ) in metres (rounded up: more noise).

    This is the continuous, nominal value of the oracle tables; the lattice wrappers add their
    own g/r_min term (``docs/noise.md``). See ``docs/ledger.md`` and ``docs/concepts.md`` (canonical
    mechanisms, admission).

    >>> gaussian_sigma(2e-6)
    500.0
    >>> round(gaussian_sigma(1e-4), 8)
    70.71067812
    """
    r = positive(rho, "rho")
    k = positive(K, "K")
    # exact upper bound on K / sqrt(2 rho) = K * sqrt(1 / (2 rho)), then the float above it
    return _float_up(k * sqrt_ceil(1 / (2 * r), "1/(2*rho)"))


# -------------------- negative results (tests, docs)


def gp_composition_counterexample(eps: float, k: int, lam: float, delta: float) -> dict[str, float]:
    """Evaluate the k-fold 1-D Laplace composition that is not ((1−λ)kε, δ)-GP (Thm. 3.5).

    See ``docs/concepts.md`` (why GP has no advanced composition); Liang & Yi, 'Concentrated
    Geo-Privacy' (2023), Lem. 3.4, Thm. 3.5. Returns the distance ``Delta`` = (2/(λε)) ln k, ``p`` =
    P[Y∈S*], ``log_p_prime`` = ln P[Y'∈S*] (it underflows floats), ``lower_bound`` on D^δ_∞ and the
    claim ``(1-lam)*k*eps*Delta`` it beats.

    >>> c = gp_composition_counterexample(0.01, 10, 0.5, 0.1)
    >>> round(c["Delta"], 7), round(c["lower_bound"], 7)
    (921.0340372, 75.3133481)
    """
    kk = _count(k)
    dist = 2.0 / (lam * eps) * math.log(kk)
    p = (1.0 - 0.5 * math.exp(-eps * lam * dist / 2.0)) ** kk
    log_pp = kk * (math.log(0.5) - eps * (1.0 - lam / 2.0) * dist)
    return {
        "Delta": dist,
        "p": p,
        "log_p_prime": log_pp,
        "lower_bound": math.log(p - delta) - log_pp,
        "claim": (1.0 - lam) * kk * eps * dist,
    }


def gaussian_gp_counterexample(
    sigma: float,
    eps: float,
    delta: float,
    Delta: float,
) -> dict[str, float]:
    """Show a Gaussian with fixed σ is not (ε, δ)-GP: x, x − Δ and S = {y ≥ x} (Lem. 3.8).

    See ``docs/concepts.md`` (CGP to approximate GP, no advanced composition for GP); Liang & Yi,
    'Concentrated Geo-Privacy' (2023), Lem. 3.7, Lem. 3.4, Thm. 3.5. Valid for Δ > max(4εσ², ln
    4/ε). Returns ``p_prime`` = 1 − Φ(Δ/σ), ``lower_bound`` = ln((1/2 − δ)/p_prime) on D^δ_∞ and
    ``claim`` = εΔ.

    >>> c = gaussian_gp_counterexample(100, 0.01, 0.1, 401)
    >>> round(c["lower_bound"], 6), c["claim"]
    (9.486114, 4.01)
    """
    pp = 0.5 * math.erfc(Delta / sigma / math.sqrt(2.0))
    return {"p_prime": pp, "lower_bound": math.log((0.5 - delta) / pp), "claim": eps * Delta}
