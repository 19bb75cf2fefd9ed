"""gpframe: geo-private analytics on location data from pandas, geopandas and DuckDB."""

from gpframe import (
    datasets,
    duckdb,
    frame,  # noqa: F401 - importing it registers df.geopriv
    mechanisms,
    testing,
)
from gpframe._versions import show_versions
from gpframe.accounting.budgets import CGP, DP, GP, zCDP
from gpframe.errors import (
    BudgetExceededError,
    ChargeConflictError,
    CRSError,
    GpframeError,
    GpframeInternalError,
    GpframeWarning,
    InsecureRandomnessError,
    InvalidInputError,
    LedgerCorruptError,
    LedgerError,
    NoiseOverflowError,
)
from gpframe.ledger import Session
from gpframe.queries import monitor
from gpframe.queries.range_count import First, Last
from gpframe.report_html import ledger_report_html

__version__ = "0.1.0"

__all__ = [
    "CGP",
    "DP",
    "GP",
    "BudgetExceededError",
    "CRSError",
    "ChargeConflictError",
    "First",
    "GpframeError",
    "GpframeInternalError",
    "GpframeWarning",
    "InsecureRandomnessError",
    "InvalidInputError",
    "Last",
    "LedgerCorruptError",
    "LedgerError",
    "NoiseOverflowError",
    "Session",
    "datasets",
    "duckdb",
    "ledger_report_html",
    "mechanisms",
    "monitor",
    "show_versions",
    "testing",
    "zCDP",
]
