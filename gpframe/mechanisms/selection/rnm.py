"""Report-Noisy-Max: Gaussian with a certified pure ε and Laplace (discrete).

See ``docs/operations/monitoring.md``; Lebensold, Precup & Balle, 'On the Privacy of Selection
Mechanisms with Gaussian Noise' (2024), Thm. 8.

Only the index is released, never a noisy value (``docs/operations/monitoring.md``, StatDP
``noisy_max_v1b``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.laplace_mech import laplace_dp
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.mechanisms.released import Guarantee
from gpframe.mechanisms.selection._common import RNMRelease, as_values, clamp_fractions
from gpframe.mechanisms.selection.certified import _bounds, _pos_float, bw18_eps, eps_rnm
from gpframe.mechanisms.selection.normal_exact import ExactNormal, argmax_exact

__all__ = ["gaussian_report_noisy_max", "laplace_report_noisy_max"]


def gaussian_report_noisy_max(
    values: Any,
    *,
    sigma: float,
    bounds: tuple[float, float],
    sensitivity: float,
    rng: Any = None,
) -> RNMRelease:
    """Index of the largest of ``values`` (clamped to [a, b]) plus exact N(0, σ²) noise.

    See ``docs/operations/monitoring.md`` (mechanism, certified pure ε, exact normals); Lebensold,
    Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024), Thm. 8.

    Parameters
    ----------
    values : array_like, shape (d,)
        Candidate scores, each of user-level sensitivity ``sensitivity``; clamped into ``bounds``.
    sigma : float
        Noise standard deviation (see :func:`~.certified.sigma_for_eps_rnm` to calibrate).
    bounds : (a, b)
        Public hard bounds of the scores.
    sensitivity : float
        Δ per candidate.
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG.

    Returns
    -------
    RNMRelease
        ``index``, ``epsilon`` (certified pure ε, charged as kind ``dp``) and
        ``noise["epsilon_classical"]`` (Balle & Wang (2018) (ε, δ = 10⁻⁵) with Δ_q = √d·Δ,
        comparison only).

    Notes
    -----
    Noise: exact continuous N(0, σ²) per candidate; the argmax is decided exactly.
    Charge: ε_RNM(σ, Δ, b − a, d) on the central ledger (ex-ante, fixed).

    Examples
    --------
    >>> r = gaussian_report_noisy_max([0.1, 0.9, 0.5], sigma=0.3, bounds=(0, 1),
    ...                               sensitivity=0.01)
    >>> r.index in (0, 1, 2), round(float(r.epsilon), 6)
    (True, 0.174434)
    """
    s = _pos_float(sigma, "sigma")
    a, b = _bounds(bounds)
    dl = _pos_float(sensitivity, "sensitivity")
    x = as_values(values)
    d = x.size
    if d == 0:
        raise InvalidInputError(
            "values is empty: pass at least one candidate. Nothing was charged."
        )
    eps = eps_rnm(s, sensitivity=dl, bounds=(a, b), d=d)
    q = clamp_fractions(x, a, b)
    bits = resolve_rng(rng)
    zs = [ExactNormal.draw(bits) for _ in range(d)]
    idx = argmax_exact(q, Fraction(s), zs) if d > 1 else 0
    classical = bw18_eps(s, dl * d**0.5, 1e-5) if d > 1 else 0.0
    return RNMRelease(
        int(idx),
        Fraction(eps),
        Guarantee("dp", Fraction(eps), "hamming",
                  "docs/operations/monitoring.md (Lebensold et al. Thm 8 with ln, exact normals); "
                  "Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms with "
                  "Gaussian Noise' (2024), Thm. 8"),
        {"sigma": s, "bounds": (a, b), "sensitivity": dl, "d": d, "epsilon_classical": classical,
         "sampler": "exact continuous normals (Karney 2016 N)"},
    )  # fmt: skip


def laplace_report_noisy_max(
    values: Any,
    *,
    epsilon: float,
    sensitivity: float,
    integer: bool = False,
    rng: Any = None,
) -> RNMRelease:
    """Index of the largest of ``values`` plus discrete Laplace noise of scale 2Δ/ε (ties: lowest).

    Dwork & Roth, 'The Algorithmic Foundations of Differential Privacy' (2014): Report Noisy Max
    with the scale 2Δ/ε valid when every score may move in either direction; on the lattice the
    proof uses only shifts of one candidate's noise by 2Δ (the argument of
    ``docs/operations/monitoring.md`` (Discrete noise); Roth & Smith, 'Additional tools and
    applications for DP-stability' (lecture notes)), which the discrete Laplace ratio bound and the
    lowest-index tie rule survive. Noise: :func:`~gpframe.mechanisms.laplace_dp` with draw scale s =
    2 (``docs/noise.md``). Charge: ε (kind ``dp``), ex-ante. The noisy values stay inside this
    function.

    Examples
    --------
    >>> r = laplace_report_noisy_max([3, 40, 7], epsilon=1, sensitivity=1, integer=True)
    >>> r.index in (0, 1, 2), r.epsilon
    (True, Fraction(1, 1))
    """
    x = as_values(values)
    if x.size == 0:
        raise InvalidInputError(
            "values is empty: pass at least one candidate. Nothing was charged."
        )
    rel = laplace_dp(x, sensitivity=sensitivity, epsilon=epsilon, integer=integer, draw_scale=2,
                     rng=rng)  # fmt: skip
    idx = int(np.argmax(rel.values))  # lowest index among ties
    g = rel.guarantee
    return RNMRelease(
        idx,
        g.amount,
        Guarantee(
            "dp",
            g.amount,
            "hamming",
            "docs/operations/monitoring.md and docs/noise.md (index only)",
        ),
        {"lam": rel.noise["lam"], "g": rel.g, "scale": rel.noise["scale"]},
    )
