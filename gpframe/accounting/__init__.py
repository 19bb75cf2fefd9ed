"""Privacy accounting: exact amounts, budgets, conversions between notions and filters.

See ``docs/ledger.md``, ``docs/concepts.md`` and ``docs/operations/monitoring.md``; Liang & Yi,
'Adaptive Privacy Budgeting' (2026); Liang & Yi, 'Concentrated Geo-Privacy' (2023). Pure functions
and small value objects; nothing here touches data, randomness or storage.
"""

from gpframe.accounting.amounts import LedgerUnits, exact, nonnegative, positive
from gpframe.accounting.budgets import CGP, DP, GP, Budget, zCDP
from gpframe.accounting.conversions import (
    A_max,
    cgp_block_eps,
    cks_delta,
    delta_for,
    dp_advanced_composition,
    eps_delta,
    eps_min,
    gaussian_rho,
    gaussian_sigma,
    gp_advanced_via_cgp,
    gp_to_cgp,
    rho_max,
    sqrt_ceil,
    sqrt_floor,
    zcdp_to_dp,
)
from gpframe.accounting.filters import (
    FILTER_KINDS,
    GUARANTEE_KINDS,
    Filter,
    Reservation,
    charge_for,
    notion_of,
)

__all__ = [
    "CGP",
    "DP",
    "FILTER_KINDS",
    "GP",
    "GUARANTEE_KINDS",
    "A_max",
    "Budget",
    "Filter",
    "LedgerUnits",
    "Reservation",
    "cgp_block_eps",
    "charge_for",
    "cks_delta",
    "delta_for",
    "dp_advanced_composition",
    "eps_delta",
    "eps_min",
    "exact",
    "gaussian_rho",
    "gaussian_sigma",
    "gp_advanced_via_cgp",
    "gp_to_cgp",
    "nonnegative",
    "notion_of",
    "positive",
    "rho_max",
    "sqrt_ceil",
    "sqrt_floor",
    "zCDP",
    "zcdp_to_dp",
]
