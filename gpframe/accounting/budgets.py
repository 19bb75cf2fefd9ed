"""Budget and guarantee notions: ``GP``, ``CGP`` (metric) and ``DP``, ``zCDP`` (central).

See ``docs/ledger.md`` and ``docs/concepts.md`` (notions, the filter contract, GP and CGP, ledger
rules); Liang & Yi, 'Concentrated Geo-Privacy' (2023). A budget object names its notion and holds
its amount exactly (:func:`gpframe.accounting.amounts.positive`).
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

    @classmethod
    def from_approx_gp(cls, eps: object, delta: object, A: object) -> CGP:
        """Return the CGP budget for an approximate-GP target (ε, δ, A): ρ_max, rounded down.

        ``docs/ledger.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Cor. 4.2: the filter is
        a CGP filter with budget ρ_max(ε, δ, A) (:func:`gpframe.accounting.conversions.rho_max`);
        ``approx`` keeps the target (ε, δ, A) as exact values for reports, which must always state δ
        and A.

        >>> b = CGP.from_approx_gp(eps=0.1, delta=1e-6, A=100)
        >>> f"{float(b.rho):.9e}", b.approx
        ('1.353014690e-04', (Fraction(1, 10), Fraction(1, 1000000), Fraction(100, 1)))
        >>> b
        CGP(rho=0.000135301, from (eps=0.1 m⁻¹, delta=1e-06, A=100 m))
        """
        from gpframe.accounting.amounts import positive as _pos
        from gpframe.accounting.conversions import rho_max

        target = (_pos(eps, "eps"), _pos(delta, "delta"), _pos(A, "A"))
        out = cls(rho_max(*target))
        object.__setattr__(out, "approx", target)
        return out

    #: the approximate-GP target (eps, delta, A) this budget stands for, if any
    approx: tuple[Fraction, Fraction, Fraction] | None = None

    def __repr__(self) -> str:
        if self.approx is None:
            return super().__repr__()
        e, d, a = self.approx
        return (
            f"CGP(rho={float(self.amount):.6g}, from (eps={float(e):.6g} m⁻¹, "
            f"delta={float(d):.6g}, A={float(a):.6g} m))"
        )


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


class zCDP(Budget):
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

    @classmethod
    def from_approx_dp(cls, epsilon: object, delta: object) -> zCDP:
        """Return the zCDP budget for a central (ε, δ)-DP target: ρ_max(ε, δ, 1), rounded down.

        ``docs/ledger.md``; reports state (ε, δ) from ``approx``.

        >>> z = zCDP.from_approx_dp(epsilon=1.0, delta=1e-6)
        >>> f"{float(z.rho):.9e}"
        '1.746890477e-02'
        >>> z
        zCDP(rho=0.0174689, from (epsilon=1, delta=1e-06))
        """
        from gpframe.accounting.amounts import positive as _pos
        from gpframe.accounting.conversions import rho_max

        target = (_pos(epsilon, "epsilon"), _pos(delta, "delta"))
        out = cls(rho_max(target[0], target[1], 1))
        object.__setattr__(out, "approx", target)
        return out

    #: the central (epsilon, delta) target this budget stands for, if any
    approx: tuple[Fraction, Fraction] | None = None

    def __repr__(self) -> str:
        if self.approx is None:
            return super().__repr__()
        e, d = self.approx
        return (
            f"zCDP(rho={float(self.amount):.6g}, "
            f"from (epsilon={float(e):.6g}, delta={float(d):.6g}))"
        )
