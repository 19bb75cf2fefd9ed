"""Shared pieces of the selection mechanisms: the release record and input checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.released import Guarantee, _as_array

__all__ = ["IDEALISED_NOTE", "ATRelease", "RNMRelease", "as_values", "clamp_fractions"]

#: not used while option (A) ships; kept so a fallback would have one wording
#: (docs/operations/monitoring.md)
IDEALISED_NOTE = ""


@dataclass(frozen=True)
class ATRelease:
    """The output of one AboveThreshold / sparse-vector run: answer bits only.

    See ``docs/operations/monitoring.md``.

    Attributes
    ----------
    answers : ndarray of bool
        ⊥ (False) / ⊤ (True) for each query that was asked, in order.
    tops : tuple of int
        0-based positions of the ⊤ answers.
    epsilon : Fraction
        What the run costs: the fixed ε (Laplace) or the realized ex-post ε (Gaussian,
        charged value).
    epsilon_max : Fraction
        The worst case over the run's possible outputs (Gaussian: mode R's reservation R;
        Laplace: ε).
    guarantee : Guarantee
        ``dp`` (Laplace, ex-ante) or ``dp_expost`` (Gaussian, realized).
    noise : dict
        The exact public noise parameters.
    """

    answers: np.ndarray
    tops: tuple[int, ...]
    epsilon: Fraction
    epsilon_max: Fraction
    guarantee: Guarantee
    noise: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def halted(self) -> bool:
        """True when the run ended on its last permitted ⊤."""
        return bool(self.noise.get("halted", False))


@dataclass(frozen=True)
class RNMRelease:
    """The output of Report-Noisy-Max: the index only.

    See ``docs/operations/monitoring.md``; Lyu, Su & Li, 'Understanding the Sparse Vector Technique
    for Differential Privacy' (2017), Fig. 1.
    """

    index: int
    epsilon: Fraction
    guarantee: Guarantee
    noise: dict[str, Any] = field(repr=False, default_factory=dict)

    def __int__(self) -> int:
        return self.index


def as_values(values: Any, name: str = "values") -> np.ndarray:
    """Return ``values`` as a finite float64 vector (``InvalidInputError`` otherwise)."""
    x = _as_array(values, name, min_ndim=1, max_ndim=1)
    return x


def clamp_fractions(x: np.ndarray, a: float, b: float) -> list[Fraction]:
    """Clamp into [a, b] as exact Fractions.

    See ``docs/operations/monitoring.md``; Lebensold, Precup & Balle, 'On the Privacy of Selection
    Mechanisms with Gaussian Noise' (2024), Thm. 8.
    """
    if np.isnan(x).any():
        raise InvalidInputError("values contain NaN. Nothing was charged.")
    return [Fraction(float(v)) for v in np.clip(x, a, b)]
