"""Clip-User: public planning of per-cell mean/variance releases (the grid-statistics family).

:mod:`~gpframe.queries.clip_user.error` holds the error model (sensitivities, biases, ERR),
:mod:`~gpframe.queries.clip_user.planner` the greedy planner and its plan, and
:mod:`~gpframe.queries.clip_user.pseudo_user` the per-cell cap applied after it. All of it is
public and free: it reads occupancy counts only, draws nothing and charges nothing.
"""

from gpframe.queries.clip_user.error import (
    KAPPA,
    ErrorModel,
    err,
    h,
    h_exact,
    mean_bias,
    mean_sensitivity,
    variance_bias,
    variance_sensitivity,
)
from gpframe.queries.clip_user.planner import (
    ClipUserPlan,
    Occupancy,
    RecordRows,
    clip_user_plan,
    occupancy_from_records,
    occupancy_rows,
)

__all__ = [
    "KAPPA",
    "ClipUserPlan",
    "ErrorModel",
    "Occupancy",
    "RecordRows",
    "clip_user_plan",
    "err",
    "h",
    "h_exact",
    "mean_bias",
    "mean_sensitivity",
    "occupancy_from_records",
    "occupancy_rows",
    "variance_bias",
    "variance_sensitivity",
]
