"""Worst distance-scale factor of candidate metric projections over real extents.

What it measures (``docs/wide-extents.md``)
-------------------------------------------
gpframe calibrates every distance-based mechanism with ``scale_max = max(1, k_max)``, the largest
point scale factor (Tissot semi-major axis) of the metric CRS over the public extent, so the noise
on the ground is between 1 and ``scale_max / k_min`` times the nominal noise (``k_min`` the
smallest Tissot semi-minor axis). For each extent (a city, a UTM zone, a country, the contiguous
US, the US with Alaska, Hawaii and Puerto Rico, a continent) and each candidate projection this
script prints that worst factor ``scale_max`` and the noise inflation ``scale_max / k_min``,
both from :func:`gpframe.geo.scale_range` (a 17 x 17 lon/lat grid over the box, edges included),
and which CRS gpframe's automatic choice (:func:`gpframe.geo.metric_crs_for`) picks.

Candidates: the UTM zone of the box's centre; a transverse Mercator on the centre meridian
(``k_0 = 1``); an azimuthal equidistant (AEQD) on the box's centre; a Lambert conformal conic
(LCC) secant at 1/6 and 5/6 of the box's height; gpframe's choice (for wide boxes the least
inflating of AEQDs along the mid-meridian and LCCs with a few pairs of parallels); and published
CRSs a user might name with ``to_crs=``: EPSG:5070 (CONUS Albers), EPSG:2163 (US National Atlas
equal area), EPSG:3035 (Europe LAEA), EPSG:3395 (World Mercator), EPSG:4087 (equidistant
cylindrical). The baseline is the UTM zone (what a user gets without thinking), measured in the
same run; ``inf`` means the CRS is not defined over the whole box.

Run: ``PYTHONPATH=. python benchmarks/accuracy/projections.py`` (about a second; no options).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pyproj

from gpframe import geo

EXTENTS = {
    "city (New York)": (-74.3, 40.5, -73.7, 40.9),
    "UTM zone 18N (area of use)": (-78.0, 0.0, -72.0, 84.0),
    "country (France)": (-5.2, 41.3, 9.6, 51.1),
    "contiguous US": (-125.0, 24.0, -66.0, 50.0),
    "US + AK/HI/PR (AIS)": (-173.6, 18.0, -64.4, 60.0),
    "continent (Europe)": (-25.0, 34.0, 45.0, 72.0),
}
NAMED = ["EPSG:5070", "EPSG:2163", "EPSG:3035", "EPSG:3395", "EPSG:4087"]


def factors(crs: pyproj.CRS, box: tuple[float, float, float, float]) -> tuple[float, float]:
    """Return (scale_max, noise inflation) of ``crs`` over ``box``."""
    rng = geo.scale_range(crs, *box)
    return max(1.0, rng[1]), geo.noise_inflation(rng)


def candidates(box: tuple[float, float, float, float]) -> dict[str, pyproj.CRS]:
    w, s, e, n = box
    lon_c, lat_c = (w + e) / 2, (s + n) / 2
    wgs = pyproj.CRS("EPSG:4326")
    out = {
        "UTM of centre": geo.utm_crs_for(lon_c, lat_c),
        "TM on centre": geo._local_tm(lon_c, wgs),
        "AEQD on centre": geo._aeqd(lon_c, lat_c, wgs),
    }
    if s * n > 0:  # a secant cone needs both parallels in one hemisphere
        out["LCC 1/6, 5/6"] = geo._lcc(lon_c, s + (n - s) / 6, n - (n - s) / 6, lat_c, wgs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the wide-extent warning: the numbers say it here
        try:
            out["gpframe choice"] = geo.metric_crs_for(*box)[0]
        except geo.CRSError:
            pass
    for code in NAMED:
        out[code] = pyproj.CRS(code)
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    for name, box in EXTENTS.items():
        print(f"\n{name}: lon {box[0]}..{box[2]}, lat {box[1]}..{box[3]}")
        base = None
        for label, crs in candidates(box).items():
            k, f = factors(crs, box)
            base = f if base is None else base
            extra = f"  ({crs.name})" if label == "gpframe choice" else ""
            ratio = f / base if np.isfinite(f) and np.isfinite(base) else float("nan")
            print(f"  {label:<16} scale_max {k:>10.4f}   noise inflation {f:>10.4f}"
                  f"   vs UTM {ratio:>8.3f}{extra}")  # fmt: skip


if __name__ == "__main__":
    main()
