"""The result of the monitoring operations: the answers and what they cost (central DP).

AboveThreshold / sparse vector, Report-Noisy-Max and threshold queries all return a
:class:`MonitorResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpframe.results.base import Result

__all__ = ["MonitorResult"]


@dataclass(frozen=True, eq=False, repr=False)
class MonitorResult(Result):
    """A monitoring result: the ⊥/⊤ answers (or an index) and what they cost.

    Extra attributes
    ----------------
    tops : tuple of int
        Stream positions (0-based) answered ⊤.
    runs : list of dict
        One entry per run: ``start``, ``steps``, ``output`` (``"top"``/``"bottom"``),
        ``reserved`` and ``charged`` (ε, the mechanism's units).
    epsilon_realized : float
        Σ of the charged ε over runs (Gaussian: ex-post; Laplace: the fixed ε).
    epsilon_worst : float
        Σ of the per-run worst cases (Gaussian mode R: the reservations R).
    epsilon_exante : float or None
        Zhu & Wang's (2020) ex-ante (ε, δ = 10⁻⁵) bound summed over runs, for comparison only
        (Gaussian).
    stopped : str
        Why monitoring ended: ``"c_tops"``, ``"end"``, ``"max_steps"`` or ``"budget"``.
    spent_at_most : float
        What each user paid, in the central filter's units (every user pays the same amount, a
        function of the released answers). Per-user charges are the curator's view, in the
        ledger: ``session.report(query_id=q)`` for each ``q`` in ``query_ids``.
    query_ids : tuple of str
        The ledger queries this result was charged under (a Gaussian monitor reserves once per
        run, or once per step in mode S; ``query_id`` is the last of them).
    """

    tops: tuple[int, ...] = ()
    runs: list[dict[str, Any]] = field(default_factory=list)
    epsilon_realized: float = 0.0
    epsilon_worst: float = 0.0
    epsilon_exante: float | None = None
    stopped: str = ""
    query_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.query_ids and self.query_id:
            object.__setattr__(self, "query_ids", (self.query_id,))

    def _value_summary(self) -> str:
        v = self.value
        if isinstance(v, np.ndarray):
            return f"<{v.size} answers, {len(self.tops)} ⊤>"
        return super()._value_summary()
