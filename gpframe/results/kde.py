"""The result of ``kde``: the private kernel density at each query point.

``kde_raster`` returns a :class:`gpframe.results.raster.Raster`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from gpframe.results.base import Result, _fmt

__all__ = ["KdeResult"]


@dataclass(frozen=True, eq=False, repr=False)
class KdeResult(Result):
    """Result of ``kde``: the private KDE at each query point.

    See ``docs/operations/kde.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 7.

    ``value`` is a float for one query point, else a GeoDataFrame (one row per query point, in the
    query points' CRS) with ``kde``, ``error`` (w.p. ``confidence``, |kde − true KDE| ≤ error),
    ``n_far`` / ``n_near`` (users eliminated as farther than ν / kept), ``saving`` and ``query_id``.
    KDE(q) = (1/n) Σ_i exp(−||x_i − q||²/(2b²)) ∈ [0, 1] (the 2b² convention of Liang & Yi).

    Examples
    --------
    >>> r = KdeResult(value=0.25, error=0.05, confidence=0.95, charges=pd.Series([1e-4, 2e-5]),
    ...               allocations=pd.Series([1e-4, 1e-4]), query_id="q-1")
    >>> r  # doctest: +NORMALIZE_WHITESPACE
    KdeResult(value=0.25, error_95=0.05, charged=2 users, excluded=0,
              spent_max=rho=0.0001 m⁻², saved=8e-05, query_id=q-1)
    """

    error_kind: str = "absolute KDE error"
    mechanism: str = "gaussian_cgp"
    spec: str = (
        "docs/operations/kde.md and docs/operations/range_count.md; Liang & Yi, 'Adaptive Privacy "
        "Budgeting' (2026), Alg. 4, Alg. 7"
    )
    #: per query point table (a GeoDataFrame), also for a single point
    points: Any = None

    def _value_summary(self) -> str:
        if isinstance(self.value, pd.DataFrame):
            return f"<{len(self.value)} query points>"
        return _fmt(self.value, 4)

    def to_frame(self) -> pd.DataFrame:
        """Return the per query point table."""
        return self.points.copy()

    def per_user(self) -> pd.DataFrame:
        """Per-user table: status, allocation, charge and saving."""
        return Result.to_frame(self)
