"""The projected test frame shared by the frame-level audit cases (range_count, kde, knn).

Its own module, free of registry imports: the case modules import it while the registry is
still importing them, so it must not import the registry or any case module.
"""

from __future__ import annotations

import numpy as np

#: UTM 18N, on the central meridian (scale factor 0.9996 < 1, so scale_max = 1)
_FRAME_CRS = "EPSG:32618"
_FRAME_X0, _FRAME_Y0 = 500_000.0, 4_500_000.0


def _ground_distance(x0: np.ndarray, x1: np.ndarray) -> float:
    from pyproj import Geod, Transformer

    tr = Transformer.from_crs(_FRAME_CRS, 4326, always_xy=True)
    lon0, lat0 = tr.transform(*x0)
    lon1, lat1 = tr.transform(*x1)
    return float(Geod(ellps="WGS84").inv(lon0, lat0, lon1, lat1)[2])
