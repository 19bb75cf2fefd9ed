"""The result of ``range_count``: private user counts per region."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gpframe.results.base import Result, _fmt

__all__ = ["RangeCountResult"]


@dataclass(frozen=True, eq=False, repr=False)
class RangeCountResult(Result):
    """Result of ``range_count``: private counts per region.

    See ``docs/operations/range_count.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 6.

    ``value`` is the private count (an int) for one polygon, or a (Geo)DataFrame with one row per
    region (index of the regions) for a GeoSeries / GeoDataFrame. :meth:`to_frame` always gives the
    per-region table: ``count``, ``error`` (U: |count − true count| ≤ error with probability
    ``confidence``), ``n_charged``, ``n_excluded``, ``saving`` (Σ allocation − charge),
    ``n_low`` / ``n_high`` / ``n_undecided`` (eliminated inside / outside / never), the rounds
    histogram and the query id. Charges and allocations are per user, summed over the regions.

    Examples
    --------
    >>> r = RangeCountResult(value=12, error=3.0, confidence=0.95, mechanism="gaussian_cgp",
    ...                      charges=pd.Series([1e-6, 2e-6]), allocations=pd.Series([2e-6, 2e-6]),
    ...                      query_id="q-1")
    >>> r  # doctest: +NORMALIZE_WHITESPACE
    RangeCountResult(value=12, error_95=3 users, charged=2 users, excluded=0,
                     spent_max=rho=2e-06 m⁻², saved=1e-06, query_id=q-1)
    """

    error_kind: str = "count error (users)"
    spec: str = (
        "docs/operations/range_count.md and docs/ledger.md; Liang & Yi, 'Adaptive Privacy "
        "Budgeting' (2026), Thm. 5.1, Alg. 4, Alg. 6"
    )
    #: per-region table (see the class docstring)
    regions: Any = None
    #: Σ over regions of the number of users who stopped after exactly r rounds (index r)
    rounds_histogram: Any = None

    def _value_summary(self) -> str:
        if isinstance(self.value, pd.DataFrame):
            return f"<{len(self.value)} regions>"
        return _fmt(self.value, 12)

    @property
    def counts(self) -> pd.Series:
        """Private count per region."""
        return self.regions["count"]

    @property
    def saving_fraction(self) -> float:
        """Saved / allocated over all charged users (the privacy saving)."""
        if self.allocations is None or not self.n_charged:
            return 0.0
        tot = float(math.fsum(self.allocations.to_numpy()))
        return self.saved / tot if tot > 0 else 0.0

    def to_frame(self) -> pd.DataFrame:
        """Per-region table (a GeoDataFrame with the regions' geometry in their input CRS)."""
        return self.regions.copy()

    def per_user(self) -> pd.DataFrame:
        """Per-user table: status, allocation, charge and saving (Result.to_frame of the base)."""
        return Result.to_frame(self)

    def plot(self, ax: Any = None, *, cmap: str = "viridis", **kwargs: Any) -> Any:
        """Draw the region(s) coloured by private count, with a colour bar; returns the Axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
            raise ImportError("install gpframe[plot] to use .plot()") from exc
        g = self.regions
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 6))
        kwargs.setdefault("edgecolor", "0.3")
        kwargs.setdefault("linewidth", 0.6)
        g.plot(column="count", ax=ax, cmap=cmap, legend=True,
               legend_kwds={"label": f"private count (± error at {_fmt(self.confidence)})",
                            "shrink": 0.8}, **kwargs)  # fmt: skip
        ax.set_title(f"range_count ({self.params.get('method', '')}): private count per region")
        ax.set_aspect("equal" if g.crs is None or not g.crs.is_geographic else "auto")
        return ax
