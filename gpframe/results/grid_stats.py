"""The result of ``grid_stats``: per-cell private mean and variance (a central-DP result)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpframe.results.base import Result, _fmt

__all__ = ["GridStatsResult"]


@dataclass(frozen=True, eq=False, repr=False)
class GridStatsResult(Result):
    """Result of ``grid_stats``: a GeoDataFrame of cells plus Γ, Γ′ and the per-user bound.

    ``error`` is the largest per-cell mean error bound; the per-cell bounds are the columns
    ``mean_error`` and ``variance_error`` of ``value``. Like every central-DP result it is a
    published view: ``spent_at_most`` is the public bound ε × statistics × Γ′ (occupancy
    "private": 3 × ε × ``max_cells``); who was charged how much, and who was left out for lack
    of budget, are read from the ledger with ``session.report(query_id=result.query_id)``.
    """

    error_kind: str = "max mean error (value units)"
    mechanism: str = "laplace_dp"
    kind: str = "dp"
    metric: str | tuple = "hamming"
    spec: str = (
        "docs/operations/grid_stats.md and docs/noise.md; Rameshwar & Tandon, 'On Improving the "
        "Composition Privacy Loss in Differential Privacy for Fixed Estimation Error' (2024), "
        "Alg. 1, Prop. V.1, eq. (15)"
    )
    Gamma: int = 0
    Gamma_prime: int = 0
    E_star: float = math.nan
    E_new: float = math.nan
    n_suppressed_pairs: int = 0

    def _value_summary(self) -> str:
        n = 0 if self.value is None else len(self.value)
        return f"<{n} cells, Γ={self.Gamma}→{self.Gamma_prime}>"

    def plot(self, column: str = "mean", ax: Any = None, **kwargs: Any) -> Any:
        """Choropleth of ``column`` with a colour bar; returns the matplotlib Axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:  # pragma: no cover
            raise ImportError("install gpframe[plot] to use .plot()") from None
        if ax is None:
            _, ax = plt.subplots()
        kwargs.setdefault("legend", True)
        kwargs.setdefault("legend_kwds", {"label": column})
        kwargs.setdefault("missing_kwds", {"color": "lightgrey"})
        self.value.plot(column=column, ax=ax, **kwargs)
        ax.set_title(f"private {column} per cell (Γ′ε = {_fmt(self.spent_max)})")
        return ax
