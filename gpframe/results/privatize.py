"""The result of ``privatize``: the users' points released with noise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpframe.results.base import Result

__all__ = ["PrivatizeResult"]


@dataclass(frozen=True, eq=False, repr=False)
class PrivatizeResult(Result):
    """Result of ``privatize``: the users' points released with noise.

    See ``docs/operations/privatize.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023).

    ``value`` is an (n, 2) array of projected metres or a GeoDataFrame of points.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> r = PrivatizeResult(value=np.zeros((1000, 2)), error=412.3, confidence=0.95,
    ...                     mechanism="gaussian_cgp", params={"rho": 2e-6},
    ...                     charges=pd.Series(2e-6, index=range(28)), query_id="q-7")
    >>> r  # doctest: +NORMALIZE_WHITESPACE
    PrivatizeResult(value=<1000 points>, error_95=412.3 m, charged=28 users, excluded=0,
                    spent_max=rho=2e-06 m⁻², query_id=q-7)
    >>> PrivatizeResult(value=np.zeros((3, 2)), params={"rho": 2e-6, "per": "user"}).per
    'user'
    """

    error_kind: str = "max point error (m)"
    mechanism: str = "gaussian_cgp"
    spec: str = "docs/operations/privatize.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023)"
    #: per-user bound (metres) on the distance of all of that user's points, w.p. >= 1 - beta
    max_error_m: Any = None

    @property
    def n_points(self) -> int:
        """Number of released points."""
        return len(self.value) if self.value is not None else 0

    @property
    def per(self) -> str | None:
        """``"user"`` (the amount covers all of a user's points) or ``"point"`` (each point)."""
        return self.params.get("per")

    def _value_summary(self) -> str:
        # per= decides both the charge (amount vs n × amount) and the noise (amount/n vs amount
        # per point): shown up front (docs/operations/privatize.md)
        per = f", per={self.per!r}" if self.per else ""
        return f"<{self.n_points} points{per}>"
