"""Laplace AboveThreshold and the sparse vector technique with up to c ⊤.

See ``docs/operations/monitoring.md``; Lyu, Su & Li, 'Understanding the Sparse Vector Technique for
Differential Privacy' (2017), Alg. 1.

Noise: the exact discrete Laplace of ``docs/noise.md`` on the statistic's lattice
(``docs/operations/monitoring.md``: Discrete noise), threshold drawn **once** per run, fresh noise
for every query, only the ⊥/⊤ bits released. Scales: c = 1 (the default,
``docs/operations/monitoring.md``): threshold 2Δ/ε and queries 4Δ/ε
(``docs/operations/monitoring.md``); c > 1: Lyu, Su & Li (2017) Alg 1
(``docs/operations/monitoring.md``), threshold Δ/ε₁ and queries 2cΔ/ε₂ (cΔ/ε₂ for ``monotone``), ε₁
+ ε₂ = ε. Each draw uses the central Laplace row of ``docs/noise.md`` with its draw scale s; the run
is charged ε once, ex-ante, however many queries it answers.

The broken variants of ``docs/operations/monitoring.md`` (no query noise, no cap on ⊤, noise
ignoring c, a released noisy value) are not implemented; the audit carries them as mutants only.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.calibration import central_laplace, check_eps, check_positive
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.mechanisms.noise.laplace import discrete_laplace
from gpframe.mechanisms.noise.lattice import snap
from gpframe.mechanisms.released import Guarantee
from gpframe.mechanisms.selection._common import ATRelease, as_values
from gpframe.mechanisms.selection.certified import svt_laplace_split

__all__ = ["LaplaceSVTRun", "laplace_above_threshold"]

SPEC = (
    "docs/operations/monitoring.md and docs/noise.md (Lyu, Su & Li (2017) Alg 1, multi-draw); "
    "Roth & Smith, 'Additional tools and applications for DP-stability' (lecture notes)"
)


def _count(c: object, name: str) -> int:
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or int(c) < 1:
        raise InvalidInputError(f"{name}={c!r} must be an integer >= 1. Nothing was charged.")
    return int(c)


class LaplaceSVTRun:
    """One Laplace sparse-vector run, stepped query by query; halts after ``c`` ⊤.

    The threshold noise is drawn when the run is built; ``draw=False`` checks every parameter
    and computes the scales without drawing it (a preview, ``docs/ledger.md``): such a run
    cannot step.

    Examples
    --------
    >>> run = LaplaceSVTRun(threshold=50, epsilon=1, sensitivity=1, integer=True)
    >>> run.scales                       # (threshold, query) = (2Δ/ε, 4Δ/ε)
    (Fraction(2, 1), Fraction(4, 1))
    >>> run.step(10) in (True, False)
    True
    """

    def __init__(
        self,
        *,
        threshold: float,
        epsilon: float,
        sensitivity: float,
        c: int = 1,
        monotone: bool = False,
        integer: bool = False,
        rng: Any = None,
        draw: bool = True,
    ) -> None:
        eps = check_eps(epsilon, "epsilon")
        delta = check_positive(sensitivity, "sensitivity")
        self.c = _count(c, "c")
        t = float(threshold)
        if not math.isfinite(t):
            raise InvalidInputError(
                f"threshold={threshold!r} must be a finite public number. Nothing was charged."
            )
        if self.c == 1 and not monotone:
            e1 = e2 = eps / 2  # Lap(2Δ/ε) and Lap(4Δ/ε)
        else:
            e1, e2 = svt_laplace_split(eps, self.c, bool(monotone))
        mult = self.c if monotone else 2 * self.c
        s_t, s_q = eps / e1, mult * eps / e2  # draw scales of docs/noise.md
        cal_t = central_laplace(eps, delta, integer=bool(integer), s=s_t)
        cal_q = central_laplace(eps, delta, integer=bool(integer), s=s_q)
        if cal_t.g != cal_q.g:
            raise InvalidInputError(
                f"epsilon={float(eps):g} is too small for one common lattice of the threshold and "
                "query noise; raise epsilon. Nothing was charged."
            )
        self.epsilon, self.g = eps, cal_t.g
        self.lam_t, self.lam_q = cal_t.param, cal_q.param
        self.scales = (cal_t.g / cal_t.param, cal_q.g / cal_q.param)
        self.split = (e1, e2)
        self.integer = bool(integer)
        self._bits = resolve_rng(rng)
        # ⊤ iff u + k_q − k_t ≥ ceil(T/g): exact on the lattice (T is public)
        tg = Fraction(t) / self.g
        self._t_units = -((-tg.numerator) // tg.denominator)
        # drawn once; ``draw=False`` (a preview: every parameter checked, nothing drawn) leaves
        # the run unable to step
        self._k_t = int(discrete_laplace(self.lam_t, 1, self._bits)[0]) if draw else None
        self.answers: list[bool] = []

    @property
    def done(self) -> bool:
        """True once c ⊤ were answered."""
        return sum(self.answers) >= self.c

    def step(self, value: float) -> bool:
        """Answer one query with fresh noise; refuses after the c-th ⊤."""
        if self.done:
            raise InvalidInputError(
                f"this sparse-vector run already answered its c={self.c} ⊤; start a new run. "
                "Nothing more was released."
            )
        x = np.array([float(value)])
        if self.integer and x[0] != np.rint(x[0]):
            raise InvalidInputError(
                f"integer=True but the query value {value!r} is not an integer. "
                "Nothing was charged."
            )
        if self._k_t is None:
            raise InvalidInputError("this sparse-vector run was built with draw=False (a preview).")
        u = int(snap(x, self.g, "value")[0])
        k = int(discrete_laplace(self.lam_q, 1, self._bits)[0])
        top = u + k - self._k_t >= self._t_units
        self.answers.append(bool(top))
        return bool(top)


def laplace_above_threshold(
    values: Any,
    *,
    threshold: float,
    epsilon: float,
    sensitivity: float,
    c: int = 1,
    monotone: bool = False,
    integer: bool = False,
    max_steps: int | None = None,
    rng: Any = None,
) -> ATRelease:
    """Laplace AboveThreshold (c = 1) / sparse vector (c > 1) over precomputed query values.

    See ``docs/operations/monitoring.md`` and ``docs/noise.md`` (c = 1, Lyu, Su & Li (2017) Alg 1,
    accuracy, discrete Laplace, multi-draw rows); Roth & Smith, 'Additional tools and applications
    for DP-stability' (lecture notes); Lyu, Su & Li, 'Understanding the Sparse Vector Technique for
    Differential Privacy' (2017), Alg. 1.

    Parameters
    ----------
    values : array_like, shape (m,)
        Query answers with user-level sensitivity ``sensitivity`` each.
    threshold : float
        Public threshold T.
    epsilon : float
        The run's ε, charged once (ex-ante).
    sensitivity : float
        Δ of every query.
    c : int
        Number of ⊤ answers before the run halts.
    monotone : bool
        Only when every neighbouring pair moves all queries in one direction (counts of users
        under add/remove): query noise cΔ/ε₂ instead of 2cΔ/ε₂.
    integer : bool
        Integer queries on the lattice g = 1 (exact Δ); otherwise real values snapped to
        g = 2^(⌊log₂Δ⌋−20) with ⌊Δ/g⌋ + 1 in place of Δ.
    max_steps : int, optional
        Public cap on the number of queries.
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG.

    Returns
    -------
    ATRelease
        The answer bits; ``epsilon`` = ``epsilon_max`` = ε, guarantee ``dp``.

    Notes
    -----
    Noise: discrete Laplace, threshold scale Δ/ε₁ and query scale 2cΔ/ε₂ (c = 1: 2Δ/ε, 4Δ/ε), in
    lattice units rounded up. Charge: ε on each user's central ledger, whatever the length.

    Examples
    --------
    >>> r = laplace_above_threshold([3, 8, 40, 90], threshold=50, epsilon=1, sensitivity=1,
    ...                             integer=True)
    >>> r.epsilon, r.guarantee.kind, r.answers.size <= 4
    (Fraction(1, 1), 'dp', True)
    """
    x = as_values(values)
    run = LaplaceSVTRun(
        threshold=threshold, epsilon=epsilon, sensitivity=sensitivity, c=c,
        monotone=monotone, integer=integer, rng=rng,
    )  # fmt: skip
    if integer and not np.array_equal(x, np.rint(x)):
        raise InvalidInputError(
            "integer=True but values are not all integers; pass integer=False for real-valued "
            "queries. Nothing was charged."
        )
    m = x.size if max_steps is None else min(x.size, _count(max_steps, "max_steps"))
    for v in x[:m]:
        run.step(float(v))
        if run.done:
            break
    ans = np.array(run.answers, dtype=bool)
    return ATRelease(
        ans,
        tuple(int(i) for i in np.flatnonzero(ans)),
        run.epsilon,
        run.epsilon,
        Guarantee("dp", run.epsilon, "hamming", SPEC),
        {
            "lam_threshold": run.lam_t, "lam_query": run.lam_q, "g": run.g,
            "scale_threshold": run.scales[0], "scale_query": run.scales[1],
            "epsilon1": run.split[0], "epsilon2": run.split[1], "c": run.c,
            "monotone": bool(monotone), "halted": run.done,
        },
    )  # fmt: skip
