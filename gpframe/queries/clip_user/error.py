"""Clip-User's error model: the helper h, per-cell sensitivities, worst-case biases and ERR.

See ``docs/operations/grid_stats.md`` (helper h, sensitivities, worst-case biases, error metric);
Rameshwar & Tandon, 'On Improving the Composition Privacy Loss in Differential Privacy for Fixed
Estimation Error' (2024), Thm. IV.1, IV.2, eq. (10)-(13). Pure functions of public integers (counts,
retained counts) and the interval [L, U]; the planner (:mod:`gpframe.queries.clip_user.planner`) and
the pseudo-user step (:mod:`gpframe.queries.clip_user.pseudo_user`) score candidates with the one
:func:`err` here, so identical triples (m, r, r*) give bit-identical floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.accounting.amounts import exact
from gpframe.errors import InvalidInputError

#: default noise weight of the error metric: the Laplace s.d. √2·b
KAPPA = math.sqrt(2.0)
_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# helper h and the exact one-cell formulas


def _t(k: Any, n: Any) -> Any:
    return np.minimum(k, n // 2)


def h(k: Any, n: Any) -> Any:
    """Return h(k, n) = t(n − t)/n², t = min(k, ⌊n/2⌋), vectorised float64.

    See ``docs/operations/grid_stats.md``.

    The numerator and denominator are exact integers; the one division is correctly rounded, so
    the value is a deterministic function of (k, n).

    >>> float(h(3, 6)), float(h(4, 7)), float(h(1, 5)), float(h(0, 4))
    (0.25, 0.24489795918367346, 0.16, 0.0)
    """
    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    t = _t(k, n)
    num = (t * (n - t)).astype(np.float64)
    den = (n * n).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def h_exact(k: int, n: int) -> Fraction:
    """Exact h(k, n) as a Fraction (for noise calibration, which must not round down).

    >>> h_exact(4, 7), h_exact(5, 10), h_exact(1, 5)
    (Fraction(12, 49), Fraction(1, 4), Fraction(4, 25))
    """
    k, n = int(k), int(n)
    if n < 1 or k < 0:
        raise InvalidInputError(f"h(k, n) needs n >= 1 and k >= 0; got k={k}, n={n}.")
    t = min(k, n // 2)
    return Fraction(t * (n - t), n * n)


def _width(lower: Any, upper: Any) -> Fraction:
    lo, hi = exact(lower, "bounds[0]"), exact(upper, "bounds[1]")
    if not hi > lo:
        raise InvalidInputError(
            f"bounds=({lower!r}, {upper!r}) needs L < U; pass bounds=(L, U) with L below U, e.g. "
            f"bounds=(0, 65). {_NOTHING}"
        )
    return hi - lo


def _counts(counts: Sequence[int], name: str = "counts") -> np.ndarray:
    a = np.asarray(counts)
    if a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu" or (a < 0).any():
        raise InvalidInputError(f"{name} must be a non-empty 1-D array of integers >= 0.")
    return a.astype(np.int64)


def mean_sensitivity(retained: Sequence[int], lower: float, upper: float) -> Fraction:
    """User-level sensitivity of the clipped mean, W·r*/r, exact.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), eq. (9).

    >>> float(mean_sensitivity([3, 1, 2], 0, 65)), mean_sensitivity([2, 2, 2, 1], 10, 40)
    (32.5, Fraction(60, 7))
    """
    r = _counts(retained, "retained")
    tot = int(r.sum())
    if tot < 1:
        raise InvalidInputError("the mean of an empty cell has no sensitivity (r = 0).")
    return _width(lower, upper) * int(r.max()) / tot


def variance_sensitivity(retained: Sequence[int], lower: float, upper: float) -> Fraction:
    """User-level sensitivity of the clipped 1/r variance, W²·h(r*, r), exact.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Lem. III.3.

    >>> variance_sensitivity([4, 1, 2], 10, 40), variance_sensitivity([1] * 5, 0, 1)
    (Fraction(10800, 49), Fraction(4, 25))
    """
    r = _counts(retained, "retained")
    tot = int(r.sum())
    if tot < 1:
        raise InvalidInputError("the variance of an empty cell has no sensitivity (r = 0).")
    w = _width(lower, upper)
    return w * w * h_exact(int(r.max()), tot)


def _bias_counts(original: Sequence[int], retained: Sequence[int]) -> tuple[int, int]:
    m, r = _counts(original, "original"), _counts(retained, "retained")
    if m.shape != r.shape or (r > m).any():
        raise InvalidInputError("retained counts must align with and not exceed the original ones.")
    return int(m.sum()), int(r.sum())


def mean_bias(
    original: Sequence[int], retained: Sequence[int], lower: float, upper: float
) -> Fraction:
    """Worst-case clipping bias of the mean, W·c/m, exact.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Thm. IV.1.

    >>> mean_bias([5, 2, 2, 1], [2, 2, 2, 1], 10, 40), mean_bias([4, 2, 1], [0, 2, 1], 0, 30)
    (Fraction(9, 1), Fraction(120, 7))
    """
    m, r = _bias_counts(original, retained)
    return _width(lower, upper) * (m - r) / m


def variance_bias(
    original: Sequence[int], retained: Sequence[int], lower: float, upper: float
) -> Fraction:
    """Worst-case clipping bias of the variance, W²·h(c, m), exact.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Thm. IV.2.

    >>> variance_bias([5, 2, 2, 1], [2, 2, 2, 1], 10, 40)
    Fraction(189, 1)
    >>> variance_bias([3, 1, 2], [0, 1, 2], 0, 65)
    Fraction(4225, 4)
    """
    m, r = _bias_counts(original, retained)
    if r < 1:
        raise InvalidInputError(
            "the clipped variance needs r >= 1 (docs/operations/grid_stats.md)."
        )
    w = _width(lower, upper)
    return w * w * h_exact(m - r, m)


# ---------------------------------------------------------------------------------------------
# the error metric


@dataclass(frozen=True)
class ErrorModel:
    """Constants of the worst-case error metric.

    See ``docs/operations/grid_stats.md``: all public; Rameshwar & Tandon, 'On Improving the
    Composition Privacy Loss in Differential Privacy for Fixed Estimation Error' (2024),
    eq. (10)-(13).

    ``eps_mu`` and ``eps_v`` are the per-statistic budgets (per-cell ε split); ``kappa`` weighs the
    noise terms (√2: the Laplace standard deviation).
    """

    W: float
    eps_mu: float
    eps_v: float
    kappa: float = KAPPA

    def parts(self, m: Any, r: Any, rs: Any) -> dict[str, np.ndarray]:
        """E_mu, E_V, b_mu, b_V and E for arrays of (m, r, r*), in the fixed operation order."""
        m = np.asarray(m, dtype=np.int64)
        r = np.asarray(r, dtype=np.int64)
        rs = np.asarray(rs, dtype=np.int64)
        W = self.W
        c = m - r
        with np.errstate(invalid="ignore", divide="ignore"):
            e_mu = W * c / m
            e_v = W * W * h(c, m)
            b_mu = W * rs / (r * self.eps_mu)
            b_v = W * W * h(rs, r) / self.eps_v
            e = e_mu + e_v + self.kappa * (b_mu + b_v)
        empty = r == 0
        if np.any(empty):
            b_mu, b_v, e = (np.where(empty, np.inf, a) for a in (b_mu, b_v, e))
        return {"E_mu": e_mu, "E_V": e_v, "b_mu": b_mu, "b_V": b_v, "E": e}


def err(m: Any, r: Any, rs: Any, model: ErrorModel) -> np.ndarray:
    """ERR(m, r, r*): worst-case biases + κ·(b_mu + b_V); +inf when r = 0.

    See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
    Loss in Differential Privacy for Fixed Estimation Error' (2024), Alg. 1.

    >>> model = ErrorModel(W=65.0, eps_mu=0.5, eps_v=0.5)
    >>> round(float(err(8, 7, 5, model)), 6)          # worked check
    3528.110435
    >>> float(err(3, 0, 0, model))
    inf
    """
    m = np.asarray(m, dtype=np.int64)
    r = np.asarray(r, dtype=np.int64)
    rs = np.asarray(rs, dtype=np.int64)
    W = model.W
    # one expression, one operation order: identical triples give identical floats
    with np.errstate(invalid="ignore", divide="ignore"):
        c = m - r
        e = (
            W * c / m
            + W * W * h(c, m)
            + model.kappa * (W * rs / (r * model.eps_mu) + W * W * h(rs, r) / model.eps_v)
        )
    return np.where(r == 0, np.inf, e)
