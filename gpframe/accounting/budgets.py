"""Budget and guarantee notions: ``GP``, ``CGP`` (metric) and ``DP``, ``zCDP`` (central).

Spec: adaptive-budgeting.md §1.2, §2.6; concentrated-geo-privacy.md §1, §3.6. A budget object
names its notion and holds its amount exactly (:func:`gpframe.accounting.amounts.positive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

from gpframe.accounting.amounts import positive

__all__ = ["CGP", "DP", "GP", "Budget", "zCDP"]


@dataclass(frozen=True, init=False)
class Budget:
    """Base class: an exact amount in one privacy notion."""

    amount: Fraction
    kind: ClassVar[str] = ""  # "gp", "cgp", "dp", "zcdp"
    notion: ClassVar[str] = ""  # "metric" or "central"
    param: ClassVar[str] = ""  # keyword users type: eps, rho, epsilon
    unit: ClassVar[str] = ""

    def __init__(self, amount: object) -> None:
        object.__setattr__(self, "amount", positive(amount, self.param))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.param}={float(self.amount):.6g})"

    def describe(self) -> str:
        """Human-readable amount with its unit, e.g. ``rho=2e-06 m⁻²``."""
        return f"{self.param}={float(self.amount):.6g}{self.unit}"


class GP(Budget):
    """Pure geo-privacy: ``eps`` per metre (m⁻¹). Admits Laplace-type mechanisms only.

    >>> GP(eps=0.01)
    GP(eps=0.01)
    """

    kind = "gp"
    notion = "metric"
    param = "eps"
    unit = " m⁻¹"

    def __init__(self, eps: object) -> None:
        super().__init__(eps)

    @property
    def eps(self) -> Fraction:
        """The amount, in m⁻¹."""
        return self.amount


class CGP(Budget):
    """Concentrated geo-privacy: ``rho`` per square metre (m⁻²). GP mechanisms cost eps²/2.

    >>> CGP(rho=2e-6).rho
    Fraction(1, 500000)
    """

    kind = "cgp"
    notion = "metric"
    param = "rho"
    unit = " m⁻²"

    def __init__(self, rho: object) -> None:
        super().__init__(rho)

    @property
    def rho(self) -> Fraction:
        """The amount, in m⁻²."""
        return self.amount


class DP(Budget):
    """Central user-level pure differential privacy, ``epsilon`` (unitless).

    >>> DP(epsilon=1.0)
    DP(epsilon=1)
    """

    kind = "dp"
    notion = "central"
    param = "epsilon"
    unit = ""

    def __init__(self, epsilon: object) -> None:
        super().__init__(epsilon)

    @property
    def epsilon(self) -> Fraction:
        """The amount (unitless)."""
        return self.amount


class zCDP(Budget):  # noqa: N801 - the notion's conventional spelling
    """Central user-level zero-concentrated DP, ``rho`` (unitless). Pure-DP steps cost epsilon²/2.

    >>> zCDP(rho=0.5)
    zCDP(rho=0.5)
    """

    kind = "zcdp"
    notion = "central"
    param = "rho"
    unit = ""

    def __init__(self, rho: object) -> None:
        super().__init__(rho)

    @property
    def rho(self) -> Fraction:
        """The amount (unitless)."""
        return self.amount
