"""Certified privacy amounts for the selection mechanisms.

See ``docs/operations/monitoring.md``: sparse vector with c positives, amplification by subsampling,
Gaussian Report-Noisy-Max, Gaussian AboveThreshold, the pure ex-post filter; Lyu, Su & Li,
'Understanding the Sparse Vector Technique for Differential Privacy' (2017), Alg. 1; Roth & Smith,
'Additional tools and applications for DP-stability' (lecture notes); Lebensold, Precup & Balle, 'On
the Privacy of Selection Mechanisms with Gaussian Noise' (2024), Thm. 8, Alg. 1.

Every pure ε here is an **upper** bound that is never below the true value: the log-concave
integrals of ``docs/operations/monitoring.md`` are bracketed by tangent (upper) and chord (lower)
bounds per cell, the float error is covered by a 10⁻¹⁰ margin, and the result is moved one float
towards +∞ (:func:`round_charge`). Any NaN or infinity raises; it never becomes a zero charge.

Pure functions of public parameters; nothing here touches data, randomness or the ledger.
(The layer plan puts these in ``accounting/``; they live here because that package has
another owner. They import nothing from ``ledger``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
from scipy.special import erfcx, log_ndtr, logsumexp

from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.mechanisms.noise.exact import as_fraction

__all__ = [
    "ATParams",
    "amplified_eps",
    "at_run_reservation",
    "at_step_needs",
    "bw18_eps",
    "eps_at_bottom",
    "eps_at_top",
    "eps_rnm",
    "laplace_at_accuracy",
    "log_integral_bracket",
    "round_charge",
    "sigma_for_eps_rnm",
    "sigma_x_for_eps_at",
    "svt_laplace_split",
    "zw20_eps",
    "zw20_rdp",
]

#: default bracket width for ln J (docs/operations/monitoring.md)
TOL = 1e-9
#: cap on the cells of one bracket: refinement stops there and keeps the valid upper end
_MAX_CELLS = 1 << 21
#: margin added to every certified value before rounding up (covers float error ≤ 1e-12)
MARGIN = 1e-10
_LN_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def round_charge(x: float) -> float:
    """``nextafter(x + 1e-10, +inf)``: the value gpframe charges for a certified upper ``x``.

    >>> round_charge(0.5) > 0.5 + 1e-10
    True
    """
    if not math.isfinite(x):
        raise GpframeInternalError(f"a certified privacy amount is {x!r}, not finite.")
    return math.nextafter(x + MARGIN, math.inf)


# --------------------------------------------------------------------------------------------
# the certified bracket of ln ∫ φ(x) Π Φ(s_k x + c_k)^{w_k} dx


def _lnshc(y: np.ndarray, upper: bool) -> np.ndarray:
    """Return an upper (``upper=True``) or lower bound of ln(sinh(y)/y).

    For |y| < 1 the Taylor series y²/6 − y⁴/180 + y⁶/2835 − … alternates with decreasing terms,
    so its partial sums bracket the value (ending on + is above, on − below); this is the hot
    path (refined cells have |y| ≪ 1). Larger |y| use |y| + log1p(−e^(−2|y|)) − ln(2|y|).
    """
    a = np.abs(y)
    y2 = a * a
    out = y2 * (1.0 / 6.0 - y2 * (1.0 / 180.0 - (y2 / 2835.0 if upper else 0.0)))
    big = a >= 1.0
    if big.any():
        ab = a[big]
        out[big] = ab + np.log1p(-np.exp(-2.0 * ab)) - np.log(2.0 * ab)
    return out


class _LogIntegrand:
    """ℓ(x) = −x²/2 − ½ln2π + Σ w ln Φ(s x + c), and ℓ′(x); log-concave (ℓ″ ≤ −1)."""

    def __init__(self, terms: tuple[tuple[float, float, float], ...]) -> None:
        t = [(float(w), float(s), float(c)) for w, s, c in terms if w != 0]
        for w, s, c in t:
            if not (math.isfinite(w) and math.isfinite(s) and math.isfinite(c)) or w < 0:
                raise InvalidInputError(f"integral term (w={w}, s={s}, c={c}) is not valid.")
        self.w = np.array([x[0] for x in t])[:, None]
        self.s = np.array([x[1] for x in t])[:, None]
        self.c = np.array([x[2] for x in t])[:, None]

    def ell(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        out = -0.5 * x * x - _LN_SQRT_2PI
        if self.w.size:
            out = out + (self.w * log_ndtr(self.s * x[None, :] + self.c)).sum(axis=0)
        return out

    def ell_dell(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ℓ and ℓ′ at ``x`` sharing one ``log_ndtr`` evaluation."""
        x = np.asarray(x, dtype=np.float64)
        le = -0.5 * x * x - _LN_SQRT_2PI
        se = -x
        for w, s, c in zip(self.w[:, 0], self.s[:, 0], self.c[:, 0], strict=True):
            u = s * x + c
            ln_phi = log_ndtr(u)
            le = le + w * ln_phi
            se = se + w * s * np.exp(-0.5 * u * u - _LN_SQRT_2PI - ln_phi)
        return le, se

    def dell(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        out = -x
        if self.w.size:
            u = self.s * x[None, :] + self.c
            lam = np.exp(-0.5 * u * u - _LN_SQRT_2PI - log_ndtr(u))  # inverse Mills ratio
            out = out + (self.w * self.s * lam).sum(axis=0)
        return out


def _scalar(f, x: float) -> float:
    return float(f(np.array([x]))[0])


def _mills(u: np.ndarray) -> np.ndarray:
    """λ(u) = φ(u)/Φ(u) to a few ulp: erfcx for u < 0 avoids the cancellation of exp(ℓ − ℓ)."""
    out = np.empty_like(u)
    neg = u < 0
    out[neg] = _SQRT_2_OVER_PI / erfcx(-u[neg] * _INV_SQRT2)
    up = u[~neg]
    out[~neg] = np.exp(-0.5 * up * up - _LN_SQRT_2PI - log_ndtr(up))
    return out


# 4-node Gauss–Legendre on [−1, 1]: ∫λ over an interval of width ≤ 0.05 (see _log_gauss_cell)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(4)


def _log_gauss_cell(s: np.ndarray, kappa: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Return ln ∫_{−r}^{r} exp(s·u − κu²/2) du, elementwise, for κ ≥ 1 and r > 0.

    Completing the square gives e^{s²/2κ}·√(2π/κ)·(Φ(q) − Φ(p)) with q − p = 2r√κ; by the
    symmetry Φ(β) − Φ(α) = Φ(−α) − Φ(−β) the pair is taken with p + q ≤ 0, where log_ndtr is
    accurate. ln(Φ(q) − Φ(p)) = ln Φ(q) + ln(−expm1(D)) with D = ln Φ(p) − ln Φ(q) = −∫_p^q λ.
    For wide pairs D comes from log_ndtr (|D| ≥ 0.05·λ(q), relative error ≲ 1e-13); for narrow
    ones (q − p ≤ 0.05) from a 4-node Gauss–Legendre rule on λ, which is analytic in the strip
    |Im t| < 2.8 (the nearest zeros of Φ), so the rule's error is below 1e-18 relative there:
    no cancellation at any cell width.
    """
    sk = np.sqrt(kappa)
    a = s / sk
    beta, alpha = sk * r - a, -sk * r - a
    flip = s < 0
    q = np.where(flip, -alpha, beta)
    p = np.where(flip, -beta, alpha)
    # the half-width and centre straight from (s, κ, r): q − p from the rounded ends would lose
    # ~ulp(q)/(q − p) relative precision on narrow cells
    half = sk * r
    centre = -np.abs(a)
    lq = log_ndtr(q)
    d = log_ndtr(p) - lq
    narrow = half <= 0.025
    if narrow.any():
        pm, hw = centre[narrow], half[narrow]
        nodes = pm[None, :] + hw[None, :] * _GL_X[:, None]
        lam = _mills(nodes.ravel()).reshape(nodes.shape)
        d[narrow] = -hw * (_GL_W[:, None] * lam).sum(axis=0)
    with np.errstate(divide="ignore"):
        return 0.5 * a * a + 0.5 * np.log(2.0 * np.pi / kappa) + lq + np.log(-np.expm1(d))


class _Integrand3:
    """ℓ, ℓ′ and the per-term pieces of ℓ″ for the third-order bracket.

    ℓ″(x) = −1 + Σ_k w_k s_k² g(s_k x + c_k), g = (ln Φ)″ = −λ(u)(u + λ(u)) ∈ (−1, 0). g is
    increasing (Sampford 1953: the normal hazard rate is convex, i.e. (ln Φ)‴ > 0), so each term
    is monotone in x and its range on a cell lies between its values at the two edges.
    """

    def __init__(self, terms: tuple[tuple[float, float, float], ...]) -> None:
        t = [(float(w), float(s), float(c)) for w, s, c in terms if w != 0]
        for w, s, c in t:
            if not (math.isfinite(w) and math.isfinite(s) and math.isfinite(c)) or w < 0:
                raise InvalidInputError(f"integral term (w={w}, s={s}, c={c}) is not valid.")
        self.w = np.array([x[0] for x in t])[:, None]
        self.s = np.array([x[1] for x in t])[:, None]
        self.c = np.array([x[2] for x in t])[:, None]
        self.kappa_max = 1.0 + float((self.w * self.s * self.s).sum())

    def ell(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        out = -0.5 * x * x - _LN_SQRT_2PI
        if self.w.size:
            out = out + (self.w * log_ndtr(self.s * x[None, :] + self.c)).sum(axis=0)
        return out

    def dell(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        out = -x
        if self.w.size:
            u = self.s * x[None, :] + self.c
            out = out + (self.w * self.s * _mills(u.ravel()).reshape(u.shape)).sum(axis=0)
        return out

    def curvature_terms(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per term: w s² g(u) (float, clipped to [−w s², 0]) and a bound on its float error.

        The error of g computed this way was measured below 1.2e-15·(1 + u²) (mpmath, 40 digits,
        u ∈ [−10⁴, 40]); the pad 1e-13·(1 + u²) leaves a factor 80.
        """
        u = self.s * x[None, :] + self.c
        lam = _mills(u.ravel()).reshape(u.shape)
        g = np.clip(-lam * (u + lam), -1.0, 0.0)
        ws2 = self.w * self.s * self.s
        return ws2 * g, ws2 * 1e-13 * (1.0 + u * u)


def _lse(x: np.ndarray) -> float:
    """Return ln Σ e^x (scipy's logsumexp without its array-API overhead)."""
    mx = float(np.max(x))
    if not math.isfinite(mx):
        return mx
    return mx + math.log(float(np.sum(np.exp(x - mx))))


def log_integral_bracket(
    terms: tuple[tuple[float, float, float], ...], tol: float = TOL
) -> tuple[float, float]:
    """Return ``(lo, up)`` with ``lo <= ln J <= up`` for J = E[Π Φ(s_k X + c_k)^{w_k}], X ~ N(0,1).

    See ``docs/operations/monitoring.md`` (the bracket contract, tails, refinement and fail-closed
    rules) with third-order cell bounds in place of the tangent / chord pair of step 5. On a cell
    [x_m − r, x_m + r] the exact curvature κ(x) = −ℓ″(x) lies in [κ_lo, κ_hi], read off the edge
    values of the monotone terms (:class:`_Integrand3`), so Taylor's theorem with the Lagrange
    remainder gives ℓ_m + s_m u − κ_hi u²/2 ≤ ℓ(x_m + u) ≤ ℓ_m + s_m u − κ_lo u²/2; both sides
    integrate in closed form (:func:`_log_gauss_cell`). The gap per cell is ≈ |ℓ‴| h³/24
    relative instead of |ℓ″| h²/8, so tol = 1e-9 needs ~10³ cells instead of ~10⁵, evaluated as
    numpy arrays. The upper end is valid at every resolution (tails: tangent bounds at the cut
    points); refinement only tightens it. Any NaN or infinity raises.

    Examples
    --------
    >>> lo, up = log_integral_bracket(((1, 1.0, 0.0),))     # E[Φ(X)] = 1/2
    >>> lo <= math.log(0.5) <= up and up - lo < 1e-9
    True
    """
    f = _Integrand3(tuple(terms))
    # 2. the mode: ℓ' is strictly decreasing; 64-point grid searches shrink the bracket 64× each
    lo_x, hi_x = -1.0, 1.0
    while _scalar(f.dell, lo_x) <= 0:
        lo_x *= 2.0
    while _scalar(f.dell, hi_x) >= 0:
        hi_x *= 2.0
    for _ in range(7):
        xs = np.linspace(lo_x, hi_x, 65)
        i = int(np.argmax(f.dell(xs) <= 0))  # first non-positive slope; xs[0] has ℓ' > 0
        lo_x, hi_x = float(xs[max(i - 1, 0)]), float(xs[max(i, 1)])
    m = 0.5 * (lo_x + hi_x)
    lm = _scalar(f.ell, m)
    # 3. the range: ℓ drops by 60 on both sides (all doublings evaluated at once)
    steps = 2.0 ** np.arange(-4, 60)
    drop = f.ell(np.concatenate([m - steps, m + steps])) <= lm - 60.0
    dl, du = drop[: steps.size], drop[steps.size :]
    if not (dl.any() and du.any()):
        raise GpframeInternalError("log_integral_bracket: the integrand does not decay.")
    L, U = m - float(steps[int(np.argmax(dl))]), m + float(steps[int(np.argmax(du))])
    # 6. tails (upper bound only): tangent lines at the cut points
    dL, dU = _scalar(f.dell, L), _scalar(f.dell, U)
    if not (dL > 0 and dU < 0):
        raise GpframeInternalError("log_integral_bracket: tail slopes have the wrong sign.")
    tails = [_scalar(f.ell, L) - math.log(dL), _scalar(f.ell, U) - math.log(-dU)]
    # 4. cells: about 4 per unit of the integrand's width 1/√κ at the mode
    kappa_m = max(1.0, -float(np.diff(f.dell(np.array([m - 1e-4, m + 1e-4])))[0]) / 2e-4)
    n0 = max(32, math.ceil((U - L) * math.sqrt(kappa_m) * 4.0))
    edges = np.linspace(L, U, n0 + 1)
    for _pass in range(7):
        mids = 0.5 * (edges[:-1] + edges[1:])
        r = 0.5 * (edges[1:] - edges[:-1])
        lmid, smid = f.ell(mids), f.dell(mids)
        if f.w.size:
            gk, pad = f.curvature_terms(edges)
            g0, g1, p0, p1 = gk[:, :-1], gk[:, 1:], pad[:, :-1], pad[:, 1:]
            padc = np.maximum(p0, p1)
            k_lo = 1.0 - (np.maximum(g0, g1) + padc).sum(axis=0)
            k_hi = 1.0 - (np.minimum(g0, g1) - padc).sum(axis=0)
            # the exact curvature lies in [1, 1 + Σ w s²] (g ∈ (−1, 0))
            k_lo = np.maximum(k_lo, 1.0)
            k_hi = np.minimum(k_hi, f.kappa_max)
        else:
            k_lo = k_hi = np.ones_like(mids)
        # 5. upper: the smallest curvature bends ℓ least (largest integral); lower: the largest
        cell_up = lmid + _log_gauss_cell(smid, k_lo, r)
        cell_lo = lmid + _log_gauss_cell(smid, k_hi, r)
        up = _lse(np.concatenate([cell_up, tails]))
        lo = _lse(cell_lo)
        if not (math.isfinite(up) and math.isfinite(lo)) or lo > up + 1e-12:
            raise GpframeInternalError("log_integral_bracket: invalid bracket.")
        if up - lo <= tol or _pass == 6:
            break
        # 8. refine: split cell j into k_j parts, k_j³ ∝ its share of the gap (gap ∝ h³)
        share = np.exp(cell_up - up)
        gap = np.expm1(np.maximum(cell_up - cell_lo, 0.0))
        k = np.ceil(np.cbrt(np.maximum(1.0, share * gap * 2.0 * len(r) / tol)))
        k = np.minimum(k, 4096).astype(np.int64)
        if int(k.sum()) > _MAX_CELLS:
            # an unreachable tol (below float resolution) would grow the grid without bound;
            # stop and return the current bracket, whose upper end is valid
            break
        x0, h = edges[:-1], 2.0 * r
        offs = np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)
        inner = np.repeat(x0, k) + offs * np.repeat(h / k, k)
        edges = np.append(inner, edges[-1])
    return lo, up


def _log_integral_bracket_tangent(
    terms: tuple[tuple[float, float, float], ...], tol: float = TOL
) -> tuple[float, float]:
    """Bracket ln J with the second-order cells, as shipped.

    See ``docs/operations/monitoring.md``: tangent / chord.

    Kept as the reference that the faster :func:`log_integral_bracket` is tested and benchmarked
    against; same contract (``lo <= ln J <= up``), but an O(h²) gap per cell, hence ~10⁵ cells
    at tol = 10⁻⁹.

    >>> lo, up = _log_integral_bracket_tangent(((1, 1.0, 0.0),))
    >>> lo <= math.log(0.5) <= up and up - lo < 1e-9
    True
    """
    f = _LogIntegrand(tuple(terms))
    # 2. the mode: ℓ' is strictly decreasing
    lo_x, hi_x = -1.0, 1.0
    while _scalar(f.dell, lo_x) <= 0:
        lo_x *= 2.0
    while _scalar(f.dell, hi_x) >= 0:
        hi_x *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo_x + hi_x)
        if _scalar(f.dell, mid) > 0:
            lo_x = mid
        else:
            hi_x = mid
        if hi_x - lo_x <= 1e-15 * max(1.0, abs(mid)):
            break
    m = 0.5 * (lo_x + hi_x)
    lm = _scalar(f.ell, m)
    # 3. the range: ℓ drops by 60 on both sides
    r = 1.0
    while _scalar(f.ell, m - r) > lm - 60.0:
        r *= 2.0
    L = m - r
    r = 1.0
    while _scalar(f.ell, m + r) > lm - 60.0:
        r *= 2.0
    U = m + r
    # 6. tails (upper bound only): tangent lines at the cut points
    dL, dU = _scalar(f.dell, L), _scalar(f.dell, U)
    if not (dL > 0 and dU < 0):
        raise GpframeInternalError("log_integral_bracket: tail slopes have the wrong sign.")
    tails = [_scalar(f.ell, L) - math.log(dL), _scalar(f.ell, U) - math.log(-dU)]
    # 4. cells on [L, U]; ℓ and ℓ' are evaluated at the cell edges only (shared by neighbours)
    n0 = max(8, math.ceil((U - L) * 32))
    edges = np.linspace(L, U, n0 + 1)
    for _pass in range(7):
        le, se = f.ell_dell(edges)
        x0, x1 = edges[:-1], edges[1:]
        l0, l1, s0, s1 = le[:-1], le[1:], se[:-1], se[1:]
        h = x1 - x0
        # 5. upper: ∫ exp(min of the two edge tangents) (each tangent lies above a concave ℓ;
        # any split point z in [x0, x1] gives a valid bound, so float error in z is harmless)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (l1 - l0 - s1 * x1 + s0 * x0) / (s0 - s1)
        z = np.clip(np.where(np.isfinite(z), z, 0.5 * (x0 + x1)), x0, x1)
        w1, w2 = z - x0, x1 - z
        with np.errstate(divide="ignore"):
            up1 = np.log(w1) + l0 + s0 * w1 / 2.0 + _lnshc(s0 * w1 / 2.0, True)
            up2 = np.log(w2) + l1 - s1 * w2 / 2.0 + _lnshc(s1 * w2 / 2.0, True)
        cell_up = np.logaddexp(up1, up2)
        # lower: the chord lies below a concave ℓ
        cell_lo = np.log(h) + 0.5 * (l0 + l1) + _lnshc((l1 - l0) / 2.0, False)
        up = float(logsumexp(np.concatenate([cell_up, tails])))
        lo = float(logsumexp(cell_lo))
        if not (math.isfinite(up) and math.isfinite(lo)) or lo > up + 1e-12:
            raise GpframeInternalError("log_integral_bracket: invalid bracket.")
        if up - lo <= tol or _pass == 6:
            break
        # 8. refine: split cell j into k_j parts, k_j² ∝ its share of the gap
        share = np.exp(cell_up - up)
        gap = np.expm1(np.maximum(cell_up - cell_lo, 0.0))
        k = np.ceil(np.sqrt(np.maximum(1.0, share * gap * 2.0 * len(h) / tol)))
        k = np.minimum(k, 4096).astype(np.int64)
        offs = np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)
        inner = np.repeat(x0, k) + offs * np.repeat(h / k, k)
        edges = np.append(inner, edges[-1])
        # the split points are strictly increasing floats (h/k >> ulp at these widths)
    return lo, up


def _bracket_diff(num: tuple, den: tuple, tol: float) -> tuple[float, float]:
    nlo, nup = log_integral_bracket(num, tol)
    dlo, dup = log_integral_bracket(den, tol)
    return nlo - dup, nup - dlo


# --------------------------------------------------------------------------------------------
# Gaussian Report-Noisy-Max


def _pos_float(x: object, name: str) -> float:
    v = float(as_fraction(x, name, Fraction(0), lo_open=True))
    if not math.isfinite(v) or v <= 0:
        raise InvalidInputError(f"{name}={x!r} must be finite and > 0. Nothing was charged.")
    return v


def _bounds(bounds: object) -> tuple[float, float]:
    try:
        a, b = bounds  # type: ignore[misc]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"bounds={bounds!r} must be a pair (a, b) of public numbers with a < b, e.g. "
            "bounds=(0, 1). Nothing was charged."
        ) from exc
    fa, fb = float(as_fraction(a, "bounds[0]")), float(as_fraction(b, "bounds[1]"))
    if not fa < fb:
        raise InvalidInputError(f"bounds=({fa:g}, {fb:g}) must satisfy a < b. Nothing was charged.")
    return fa, fb


@lru_cache(maxsize=4096)
def _eps_rnm(sigma: float, delta: float, c: float, d: int, tol: float) -> tuple[float, float]:
    if d == 1:
        return 0.0, 0.0
    de = min(delta, c)
    num = ((d - 1, 1.0, -(c - 2.0 * de) / sigma),)
    den = ((d - 1, 1.0, -c / sigma),)
    return _bracket_diff(num, den, tol)


def eps_rnm(
    sigma: float, *, sensitivity: float, bounds: tuple[float, float], d: int, tol: float = TOL
) -> float:
    """Return the certified pure ε of Gaussian Report-Noisy-Max over ``d`` candidates in [a, b].

    The value is the charged one (rounded up).

    See ``docs/operations/monitoring.md`` (Lebensold et al. Thm 8 with the ln restored, certified
    numerics); Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian
    Noise' (2024), Thm. 8. ε = ln I((c − 2Δ_eff)/σ) − ln I(c/σ), I(m) = E[Φ(Z − m)^(d−1)], c = b −
    a, Δ_eff = min(Δ, c); returned as ``round_charge`` of the certified upper end.

    Examples
    --------
    >>> e = eps_rnm(0.3, sensitivity=0.01, bounds=(0, 1), d=2)   # 0.125942142403524
    >>> 0 <= e - 0.125942142403524 < 1e-8
    True
    """
    s = _pos_float(sigma, "sigma")
    dl = _pos_float(sensitivity, "sensitivity")
    a, b = _bounds(bounds)
    d = _count(d, "d")
    return round_charge(_eps_rnm(s, dl, b - a, d, tol)[1])


def _count(d: object, name: str) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or int(d) < 1:
        raise InvalidInputError(f"{name}={d!r} must be an integer >= 1. Nothing was charged.")
    return int(d)


def sigma_for_eps_rnm(
    epsilon: float, *, sensitivity: float, bounds: tuple[float, float], d: int, tol: float = TOL
) -> float:
    """Smallest σ (up to 10⁻⁹ relative, on the safe side) with certified ε_RNM(σ) ≤ ``epsilon``.

    See ``docs/operations/monitoring.md``: bracket, bisect on ln σ with the charged value, return
    the upper end and re-verify it.

    Examples
    --------
    >>> s = sigma_for_eps_rnm(0.1, sensitivity=0.001, bounds=(0, 1), d=100)   # σ* = 0.161058002124
    >>> 0 <= s - 0.161058002124 < 1e-6
    True
    """
    target = _pos_float(epsilon, "epsilon")
    dl = _pos_float(sensitivity, "sensitivity")
    a, b = _bounds(bounds)
    d = _count(d, "d")
    if d == 1:
        raise InvalidInputError("d=1: a single candidate needs no noise. Nothing was charged.")

    def e(s: float) -> float:
        return round_charge(_eps_rnm(s, dl, b - a, d, tol)[1])

    return _bisect_sigma(e, target)


def _bisect_sigma(e, target: float) -> float:
    lo, hi = 1e-3, 1e2
    while e(lo) <= target:
        lo /= 10.0
        if lo < 1e-12:
            raise InvalidInputError("epsilon is too large to calibrate. Nothing was charged.")
    while e(hi) > target:
        hi *= 10.0
        if hi > 1e12:
            raise InvalidInputError("epsilon is too small to calibrate. Nothing was charged.")
    while hi / lo - 1.0 >= 1e-9:
        mid = math.sqrt(lo * hi)
        if e(mid) > target:
            lo = mid
        else:
            hi = mid
    if not e(hi) <= target:  # the privacy claim rests on this re-verification
        raise GpframeInternalError("sigma calibration failed to re-verify.")
    return hi


def bw18_eps(sigma: float, l2_sensitivity: float, delta: float) -> float:
    """Classical (ε, δ) of the Gaussian mechanism (Balle & Wang 2018, Thm 8), for comparison only.

    See ``docs/operations/monitoring.md`` (with Δ_q = √d·Δ for the RNM baseline); Lebensold,
    Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024), App. B. Not
    a charge.

    >>> round(bw18_eps(0.3, 0.01 * 2**0.5, 1e-5), 4)     # 0.150076
    0.1501
    """
    from scipy.optimize import brentq
    from scipy.special import ndtr

    dq, s = float(l2_sensitivity), float(sigma)

    def g(eps: float) -> float:
        a = dq / (2 * s)
        bb = eps * s / dq
        return float(ndtr(a - bb) - math.exp(eps) * ndtr(-a - bb)) - delta

    if g(0.0) <= 0:
        return 0.0
    hi = 1.0
    while g(hi) > 0:
        hi *= 2.0
    return float(brentq(g, 0.0, hi, xtol=1e-15, rtol=1e-14))


# --------------------------------------------------------------------------------------------
# Gaussian AboveThreshold


@dataclass(frozen=True)
class ATParams:
    """The public parameters of one Gaussian AboveThreshold run (one immutable object).

    The floats are the exact values the sampler uses (it converts them with ``Fraction``).
    """

    sigma_x: float
    sigma_z: float
    threshold: float
    a: float
    b: float
    sensitivity: float

    @classmethod
    def make(
        cls,
        *,
        sigma_x: object,
        sigma_z: object = None,
        threshold: object,
        bounds: object,
        sensitivity: object,
    ) -> ATParams:
        """Validate; ``sigma_z=None`` is √3·σ_X, rounded to a float once.

        See ``docs/operations/monitoring.md`` (Lebensold et al.'s choice).
        """
        sx = _pos_float(sigma_x, "sigma")
        sz = float(math.sqrt(3.0) * sx) if sigma_z is None else _pos_float(sigma_z, "sigma_z")
        a, b = _bounds(bounds)
        t = float(as_fraction(threshold, "threshold"))
        return cls(sx, sz, t, a, b, _pos_float(sensitivity, "sensitivity"))

    @property
    def delta_eff(self) -> float:
        """Δ_eff = min(Δ, b − a)."""
        return min(self.sensitivity, self.b - self.a)


@lru_cache(maxsize=65536)
def _eps_top(p: ATParams, t: int, tol: float) -> tuple[float, float]:
    al = p.sigma_x / p.sigma_z
    de = p.delta_eff

    def terms(xi: float) -> tuple:
        return (
            (t - 1, al, (p.threshold - p.b + xi) / p.sigma_z),
            (1, -al, (p.a - p.threshold + xi) / p.sigma_z),
        )

    return _bracket_diff(terms(de), terms(0.0), tol)


@lru_cache(maxsize=65536)
def _eps_bot(p: ATParams, T: int, tol: float) -> tuple[float, float]:
    al = p.sigma_x / p.sigma_z
    de = p.delta_eff
    num = ((T, al, (p.threshold - p.b + de) / p.sigma_z),)
    den = ((T, al, (p.threshold - p.b) / p.sigma_z),)
    return _bracket_diff(num, den, tol)


def eps_at_top(params: ATParams, t: int, tol: float = TOL) -> float:
    """Charged ex-post ε of a Gaussian AboveThreshold run whose output is ⊥^(t−1)⊤.

    See ``docs/operations/monitoring.md`` (corrected Lebensold et al. Thm 10/17: ln of the ratio, ρ
    − b, −σ_X x in the ⊤ factor, Gaussian AboveThreshold); Lebensold, Precup & Balle, 'On the
    Privacy of Selection Mechanisms with Gaussian Noise' (2024), Thm. 10 (corrected), Alg. 1
    numerics.

    Examples
    --------
    >>> p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    >>> 0 <= eps_at_top(p, 3) - 0.00796829839498567 < 1e-8     # anchor
    True
    """
    return round_charge(_eps_top(params, _count(t, "t"), tol)[1])


def eps_at_bottom(params: ATParams, T: int, tol: float = TOL) -> float:
    """Charged ex-post ε of a run stopped without ⊤ after ``T`` queries.

    See ``docs/operations/monitoring.md`` (output ⊥^T).

    Examples
    --------
    >>> p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    >>> 0 <= eps_at_bottom(p, 1) - 0.00180015748881 < 1e-8
    True
    """
    return round_charge(_eps_bot(params, _count(T, "T"), tol)[1])


def at_step_needs(params: ATParams, t_max: int, tol: float = TOL) -> list[tuple[float, float]]:
    """``[(ε_⊤(t), ε_⊥(t)) for t = 1..t_max]``, charged values (mode S uses their max per step)."""
    return [
        (eps_at_top(params, t, tol), eps_at_bottom(params, t, tol)) for t in range(1, t_max + 1)
    ]


def at_run_reservation(params: ATParams, t_max: int, tol: float = TOL) -> float:
    """Mode R's worst case R = max(max_t ε_⊤(t), max_T ε_⊥(T)) over t, T ≤ t_max.

    See ``docs/operations/monitoring.md``.

    The maxima are taken explicitly (monotonicity in t is only observed,
    ``docs/operations/monitoring.md``).

    >>> p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    >>> 0 <= at_run_reservation(p, 12) - 0.0163224654837 < 1e-8
    True
    """
    t_max = _count(t_max, "max_steps")
    return max(max(pair) for pair in at_step_needs(params, t_max, tol))


def sigma_x_for_eps_at(
    epsilon: float,
    *,
    threshold: float,
    bounds: tuple[float, float],
    sensitivity: float,
    max_steps: int,
    ratio: float = math.sqrt(3.0),
    tol: float = TOL,
) -> float:
    """Smallest σ_X (σ_Z = ratio·σ_X) whose run of ``max_steps`` costs ≤ ``epsilon``.

    See ``docs/operations/monitoring.md``.
    """
    target = _pos_float(epsilon, "epsilon")

    def e(sx: float) -> float:
        p = ATParams.make(
            sigma_x=sx, sigma_z=ratio * sx, threshold=threshold, bounds=bounds,
            sensitivity=sensitivity,
        )  # fmt: skip
        return at_run_reservation(p, max_steps, tol)

    return _bisect_sigma(e, target)


def zw20_rdp(alpha: float, params: ATParams) -> float:
    """ZW20 Thm 7 (GSM Thm 7) Rényi bound of one Gaussian AboveThreshold run (ex-ante baseline).

    See ``docs/operations/monitoring.md``; Lebensold, Precup & Balle, 'On the Privacy of Selection
    Mechanisms with Gaussian Noise' (2024), Thm. 6, 7. Valid when σ_Z ≥ √3 σ_X, ρ ≥ 0 and the
    queries are ≥ 0. Not a charge.
    """
    sx, sz, r, d = params.sigma_x, params.sigma_z, params.threshold, params.sensitivity
    return (
        alpha * d * d / sx**2
        + 2 * alpha * d * d / sz**2
        + math.log(
            1 + 2 * math.sqrt(3) * math.pi * (1 + 9 * r * r / sx**2) * math.exp(r * r / sx**2)
        )
        / (2 * (alpha - 1))
    )


def zw20_eps(params: ATParams, delta: float, conversion: str = "bbghs") -> float:
    """ZW20's ex-ante ε at ``delta``, minimised over α: ``"bbghs"`` (approximate DP) or ``"pdp"``.

    See ``docs/operations/monitoring.md`` (definitions, anchor: 0.0275337158656 BBGHS,
    0.0363862213663 Markov pDP); Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms
    with Gaussian Noise' (2024), Thm. 6, 7. For comparison in Results and benchmarks only (never
    charged).

    >>> p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    >>> round(zw20_eps(p, 1e-5), 8), round(zw20_eps(p, 1e-5, "pdp"), 8)
    (0.02753372, 0.03638622)
    """
    from scipy.optimize import minimize_scalar

    ld = math.log(delta)

    def f(u: float) -> float:
        al = 1.0 + math.exp(u)
        e = zw20_rdp(al, params)
        if conversion == "pdp":
            return e - ld / (al - 1)
        return e + math.log((al - 1) / al) - (ld + math.log(al)) / (al - 1)

    res = minimize_scalar(f, bounds=(-20.0, 20.0), method="bounded", options={"xatol": 1e-12})
    return float(res.fun)


# --------------------------------------------------------------------------------------------
# Laplace sparse vector amplification


def svt_laplace_split(
    epsilon: object, c: int = 1, monotone: bool = False
) -> tuple[Fraction, Fraction]:
    """Return the exact LSL17 split ε = ε₁ + ε₂, ε₁ : ε₂ = 1 : (2c)^(2/3) (monotone 1 : c^(2/3)).

    See ``docs/operations/monitoring.md``; Lyu, Su & Li, 'Understanding the Sparse Vector Technique
    for Differential Privacy' (2017), Alg. 1. ε₁ is a 2⁻⁴⁰-grid rational near the optimum and ε₂ = ε
    − ε₁ exactly, so the run's charge is exactly ε (any split is private; only optimality is
    approximate).

    >>> e1, e2 = svt_laplace_split(1, 1)
    >>> round(float(e1), 9), e1 + e2
    (0.38648821, Fraction(1, 1))
    """
    eps = as_fraction(epsilon, "epsilon", Fraction(0), lo_open=True)
    c = _count(c, "c")
    k = (c if monotone else 2 * c) ** (2.0 / 3.0)
    e1 = Fraction(round(float(eps) / (1.0 + k) * 2**40), 2**40)
    if not 0 < e1 < eps:
        raise GpframeInternalError("svt_laplace_split: split out of range.")
    return e1, eps - e1


def laplace_at_accuracy(epsilon: float, *, sensitivity: float, k: int, beta: float = 0.05) -> float:
    """α = (8Δ/ε)·ln((k + 1)/β).

    See ``docs/operations/monitoring.md``: continuous Laplace, one ⊤, even split; Roth & Smith,
    'Additional tools and applications for DP-stability' (lecture notes).

    With probability ≥ 1 − β: ⊥ at step i ⇒ f_i < t + α, ⊤ ⇒ f_i ≥ t − α.

    >>> round(laplace_at_accuracy(1, sensitivity=1, k=99), 8)       # oracle
    60.80721968
    """
    return 8.0 * float(sensitivity) / float(epsilon) * math.log((k + 1) / float(beta))


def amplified_eps(epsilon0: object, p: object, direction: str = "add") -> float:
    """ε′ = ln(1 + p(e^ε₀ − 1)) of Poisson subsampling at rate p, rounded up.

    See ``docs/operations/monitoring.md``; Roth & Smith, 'Additional tools and applications for
    DP-stability' (lecture notes).

    ``direction="remove"`` gives −ln(1 − p(1 − e^−ε₀)) (never larger; for the oracle table).
    Never the notes' printed "(ε, εδ)". Computed with mpmath at 50 digits, then rounded
    up to a float.

    >>> round(amplified_eps(1, 0.1), 12)          # oracle 0.158565078740
    0.15856507874
    """
    import mpmath as mp

    e0 = as_fraction(epsilon0, "epsilon0", Fraction(0))
    pf = as_fraction(p, "p", Fraction(0), Fraction(1))
    with mp.workdps(50):
        e0m = mp.mpf(e0.numerator) / e0.denominator
        pm = mp.mpf(pf.numerator) / pf.denominator
        if direction == "add":
            v = mp.log(1 + pm * mp.expm1(e0m))
        elif direction == "remove":
            v = -mp.log(1 - pm * (1 - mp.exp(-e0m)))
        else:
            raise InvalidInputError(f"direction={direction!r} is not one of 'add', 'remove'.")
        f = float(v)
        return f if mp.mpf(f) >= v else math.nextafter(f, math.inf)
