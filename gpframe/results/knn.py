"""The results of ``knn`` (k private nearest neighbours), ``convex_hull`` and ``nearest_users``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from gpframe.results.base import Result

__all__ = ["HullResult", "KnnResult", "NearestResult"]


@dataclass(frozen=True, eq=False, repr=False)
class KnnResult(Result):
    """Result of ``knn``: per user, the row labels of its k private nearest neighbours.

    ``value`` maps user id → list of row index labels in rank order; ``error`` is the largest
    per-user error bound (metres, every rank at once, probability ``confidence``);
    ``errors`` the per-user bounds.
    """

    error_kind: str = "distance error of every rank (m)"
    spec: str = (
        "docs/operations/knn.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 2, Thm. 4.10, "
        "4.11, Alg. 3"
    )
    errors: Any = None

    def _value_summary(self) -> str:
        return f"<{len(self.value)} users>"


@dataclass(frozen=True, eq=False, repr=False)
class HullResult(Result):
    """Result of ``convex_hull``: one private hull per user (``value``, a GeoDataFrame).

    ``params["spend"]`` is the per-user budget split (centre, radius, pnn, release); ``error`` the
    largest paper bound γ₁ + γ₂ + γ₃ (metres, "as stated", ``docs/operations/convex_hull.md``).
    """

    error_kind: str = "hull error, paper bound as stated (m)"
    spec: str = (
        "docs/operations/convex_hull.md; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Alg. 4, "
        "Thm. 4.16"
    )

    def _value_summary(self) -> str:
        return f"<{len(self.value)} hulls>"

    def plot(self, ax: Any = None, **kwargs: Any) -> Any:
        """Overlay the users' hulls (one colour per user); returns the matplotlib Axes.

        One polygon collection for all hulls: colours are picked per user here (``cmap``,
        default ``tab20``, cycling), not by a categorical plot, which draws one layer per user
        and redraws the figure each time (seconds for a hundred users). Other keyword
        arguments go to ``GeoSeries.plot``.
        """
        try:
            import matplotlib.pyplot as plt
            from matplotlib import colormaps
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ImportError("install gpframe[plot] to use .plot()") from exc
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 6))
        kwargs.setdefault("alpha", 0.35)
        kwargs.setdefault("edgecolor", "0.2")
        cmap = colormaps[kwargs.pop("cmap", "tab20")]
        hulls = self.value
        if len(hulls):
            codes = pd.factorize(hulls[hulls.columns[0]])[0]
            n = getattr(cmap, "N", 256)
            kwargs.setdefault("color", cmap(codes % n))  # integers index the colour table
            hulls.geometry.plot(ax=ax, **kwargs)
        ax.set_title("convex_hull: private hull per user")
        return ax


@dataclass(frozen=True, eq=False, repr=False)
class NearestResult(Result):
    """Result of ``nearest_users``: ``value`` is the list of the k user ids (nearest first)."""

    error_kind: str = "distance error of every rank (m)"
    spec: str = (
        "docs/operations/knn.md, docs/operations/range_count.md and "
        "docs/operations/nearest_users.md; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), "
        "Alg. 5, Alg. 8"
    )

    def _value_summary(self) -> str:
        return f"<{len(self.value)} users>"
