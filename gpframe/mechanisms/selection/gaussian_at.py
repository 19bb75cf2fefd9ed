"""Gaussian AboveThreshold with a pure ex-post ε.

See ``docs/operations/monitoring.md``: Gaussian AboveThreshold, the pure ex-post filter; Lebensold,
Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024), Alg. 1.

Noise: exact continuous normals (the exact normals of ``docs/operations/monitoring.md``,
:mod:`.normal_exact`): the threshold ρ̂ = ρ + σ_X·X is drawn once per run, each query gets a fresh
σ_Z·Z_t, and only the comparison bits are released. A run ends at its first ⊤ (output ⊥^(t−1)⊤,
charged ε_⊤(t), ``docs/operations/monitoring.md``) or when it is stopped without ⊤ after T public
steps (output ⊥^T, charged ε_⊥(T), ``docs/operations/monitoring.md``). Several ⊤ need several runs,
each with a fresh threshold draw (``docs/operations/monitoring.md``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.mechanisms.released import Guarantee
from gpframe.mechanisms.selection._common import ATRelease, as_values
from gpframe.mechanisms.selection.certified import (
    TOL,
    ATParams,
    at_run_reservation,
    eps_at_bottom,
    eps_at_top,
    zw20_eps,
)
from gpframe.mechanisms.selection.normal_exact import ExactNormal, decide_ge

__all__ = ["GaussianATRun", "gaussian_above_threshold"]

SPEC = (
    "docs/operations/monitoring.md (Lebensold et al. Thm 17 corrected, exact normals); Lebensold, "
    "Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024), Thm. 10 "
    "(corrected)"
)


class GaussianATRun:
    """One Gaussian AboveThreshold run, stepped one query at a time (for streams).

    The threshold noise is drawn when the run is created; ``step(value)`` compares one clamped
    query value and returns the answer bit. After a ⊤ the run refuses further steps.

    Examples
    --------
    >>> p = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    >>> run = GaussianATRun(p)
    >>> run.step(0.2) in (True, False)
    True
    >>> run.epsilon() > 0
    True
    """

    def __init__(self, params: ATParams, rng: Any = None) -> None:
        self.params = params
        self._bits = resolve_rng(rng)
        self._sx = Fraction(params.sigma_x)
        self._sz = Fraction(params.sigma_z)
        self._rho = Fraction(params.threshold)
        self._a, self._b = Fraction(params.a), Fraction(params.b)
        self._x = ExactNormal.draw(self._bits)  # the one threshold draw of this run
        self.answers: list[bool] = []

    @property
    def done(self) -> bool:
        """True after the run's ⊤."""
        return bool(self.answers) and self.answers[-1]

    def step(self, value: float) -> bool:
        """Answer one query: ⊤ (True) iff q + σ_Z Z ≥ ρ + σ_X X, decided exactly."""
        if self.done:
            raise InvalidInputError(
                "this Gaussian AboveThreshold run already answered ⊤; start a new run (a fresh "
                "threshold draw, docs/operations/monitoring.md). Nothing more was released."
            )
        v = float(value)
        if not np.isfinite(v):
            raise InvalidInputError(f"query value {value!r} is not finite. Nothing was charged.")
        q = min(max(Fraction(v), self._a), self._b)  # clamp inside the mechanism
        z = ExactNormal.draw(self._bits)
        top = decide_ge([(self._sz, z), (-self._sx, self._x)], q - self._rho)
        self.answers.append(top)
        return top

    def epsilon(self, tol: float = TOL) -> float:
        """Return the realized ex-post ε of the answers so far (charged; 0 before any step)."""
        t = len(self.answers)
        if t == 0:
            return 0.0
        if self.done:
            return eps_at_top(self.params, t, tol)
        return eps_at_bottom(self.params, t, tol)


def gaussian_above_threshold(
    values: Any,
    *,
    sigma: float,
    threshold: float,
    bounds: tuple[float, float],
    sensitivity: float,
    sigma_z: float | None = None,
    max_steps: int | None = None,
    rng: Any = None,
) -> ATRelease:
    """One Gaussian AboveThreshold run over precomputed query values, halting at the first ⊤.

    See ``docs/operations/monitoring.md`` (mechanism, ex-post ε, exact normals, charging);
    Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024),
    Alg. 1, Thm. 10 (corrected).

    Parameters
    ----------
    values : array_like, shape (m,)
        Query answers (user-level sensitivity ``sensitivity``), clamped into ``bounds``.
    sigma : float
        σ_X, the threshold noise (and σ_Z = √3·σ_X unless ``sigma_z`` is given).
    threshold : float
        The public threshold ρ.
    bounds : (a, b)
        Public hard bounds of every query.
    sensitivity : float
        Δ, per query, user-level.
    sigma_z : float, optional
        The query noise σ_Z.
    max_steps : int, optional
        Public cap T_max (default: ``len(values)``); the run stops after it without ⊤.
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG.

    Returns
    -------
    ATRelease
        ``answers`` (bits only), ``epsilon`` (the realized ex-post ε, ε_⊤(t) or ε_⊥(T)),
        ``epsilon_max`` (R over outputs of at most T_max steps) and
        ``noise["epsilon_exante"]`` (Zhu & Wang (2020) Thm 7 at δ = 10⁻⁵, BBGHS; for comparison
        only).

    Notes
    -----
    Noise: threshold N(0, σ_X²) once, each query N(0, σ_Z²), continuous and exact
    (``docs/operations/monitoring.md``: exact normals). Charge: the realized ex-post ε on the
    central pure-DP ledger (guarantee kind ``dp_expost``), after reserving ``epsilon_max`` (mode R);
    a zCDP ledger pays R²/2 ex-ante.

    Examples
    --------
    >>> r = gaussian_above_threshold([0.1, 0.2, 0.95], sigma=0.3, threshold=0.75,
    ...                              bounds=(0, 1), sensitivity=1e-3)
    >>> r.answers.dtype, len(r.answers) <= 3, r.epsilon <= r.epsilon_max
    (dtype('bool'), True, True)
    """
    p = ATParams.make(
        sigma_x=sigma, sigma_z=sigma_z, threshold=threshold, bounds=bounds,
        sensitivity=sensitivity,
    )  # fmt: skip
    x = as_values(values)
    if x.size == 0:
        raise InvalidInputError("values is empty: pass at least one query. Nothing was charged.")
    t_max = x.size if max_steps is None else _cap(max_steps)
    t_max = min(t_max, x.size)
    R = at_run_reservation(p, t_max)
    run = GaussianATRun(p, rng)
    for v in x[:t_max]:
        if run.step(float(v)):
            break
    eps = run.epsilon()
    ans = np.array(run.answers, dtype=bool)
    return ATRelease(
        ans,
        tuple(int(i) for i in np.flatnonzero(ans)),
        Fraction(eps),
        Fraction(R),
        Guarantee("dp_expost", Fraction(eps), "hamming", SPEC),
        {
            "sigma_x": p.sigma_x, "sigma_z": p.sigma_z, "threshold": p.threshold,
            "bounds": (p.a, p.b), "sensitivity": p.sensitivity, "max_steps": t_max,
            "epsilon_exante": _exante(p), "sampler": "exact continuous normals (Karney 2016 N)",
            "halted": bool(ans.size and ans[-1]),
        },
    )  # fmt: skip


def _cap(max_steps: object) -> int:
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise InvalidInputError(
            f"max_steps={max_steps!r} must be an integer >= 1 (the public cap of a run). "
            "Nothing was charged."
        )
    return int(max_steps)


def _exante(p: ATParams, delta: float = 1e-5) -> float | None:
    """ZW20's ex-ante ε where Thm 7 applies (σ_Z ≥ √3σ_X, ρ ≥ 0, queries ≥ 0), else None."""
    if p.sigma_z >= 3**0.5 * p.sigma_x * (1 - 1e-15) and p.threshold >= 0 and p.a >= 0:
        try:
            return zw20_eps(p, delta)
        except OverflowError:  # exp(ρ²/σ_X²) beyond float range: the ex-ante bound is vacuous
            return float("inf")
    return None
