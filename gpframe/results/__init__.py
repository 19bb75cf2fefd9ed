"""Every result type gpframe returns: the released value, its error bound and what it cost.

:class:`Result` (in :mod:`gpframe.results.base`) is the common base: the published view
(``repr``, ``summary()``, ``to_dict()``, the ``attrs`` entry) and the curator's view read from
the ledger. Each operation family subclasses it in its own module; :class:`Raster` (the output of
``kde_raster``) is a result too. Result types only hold and present released values: they build
nothing and import no query, frame or SQL code.
"""

from gpframe.results.base import CuratorViewError, Result, ResultAttr
from gpframe.results.grid_stats import GridStatsResult
from gpframe.results.kde import KdeResult
from gpframe.results.knn import HullResult, KnnResult, NearestResult
from gpframe.results.monitor import MonitorResult
from gpframe.results.preview import Preview
from gpframe.results.privatize import PrivatizeResult
from gpframe.results.range_count import RangeCountResult
from gpframe.results.raster import Raster

__all__ = [
    "CuratorViewError",
    "GridStatsResult",
    "HullResult",
    "KdeResult",
    "KnnResult",
    "MonitorResult",
    "NearestResult",
    "Preview",
    "PrivatizeResult",
    "RangeCountResult",
    "Raster",
    "Result",
    "ResultAttr",
]
