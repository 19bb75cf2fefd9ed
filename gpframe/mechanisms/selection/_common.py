"""Shared pieces of the selection mechanisms: the release record and input checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.released import Guarantee, _as_array

__all__ = ["IDEALISED_NOTE", "ATRelease", "RNMRelease", "as_values", "clamp_fractions"]

#: not used while option (A) ships; kept so a fallback would have one wording (selection.md §5.9)
IDEALISED_NOTE = ""


@dataclass(frozen=True)
class ATRelease:
    """The output of one AboveThreshold / sparse-vector run: answer bits only (selection.md §0.3).

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
    """The output of Report-Noisy-Max: the index only (never a noisy value, selection.md §2.5)."""

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
    """Clamp into [a, b] (selection.md §4.1, P-3: inside the mechanism) as exact Fractions."""
    if np.isnan(x).any():
        raise InvalidInputError("values contain NaN. Nothing was charged.")
    return [Fraction(float(v)) for v in np.clip(x, a, b)]
