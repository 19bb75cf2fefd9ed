"""Ground-metre noise over a country-wide extent (Alaska to Puerto Rico): the mean noise radius,
measured with a geodesic, is never below nominal anywhere and at most the stated inflation above.

Statistics: privatize (CGP, per point) draws N = 20 000 points at each of 8 sites; the noise radius
of a 2-D Gaussian has coefficient of variation sqrt((4 - pi) / pi) = 0.523, so the site mean has a
relative standard error of 0.0037. Each bound is checked with a margin of 5 standard errors: one
check fails falsely with probability Phi(-5) < 3e-7 (two-sided 6e-7), the 24 checks together
(lower and upper bound, and the conformal prediction, at 8 sites) below 1e-5. The seed is fixed,
so the test is deterministic; the probability is that of a seed being unlucky.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyproj
import pytest

import gpframe as gp
import gpframe.frame.accessor  # registers df.geopriv
from gpframe.ledger import Session
from gpframe.mechanisms import calibration as M
from gpframe.testing import seeded_rng

DOMAIN = (-174.0, 18.0, -64.0, 61.0)  # the US with Alaska, Hawaii and Puerto Rico: public
SITES = [(-173.6, 52.1), (-150.0, 60.5), (-157.9, 21.3), (-122.4, 37.8), (-119.0, 28.75),
         (-95.0, 29.5), (-70.0, 42.0), (-64.4, 18.1)]  # fmt: skip
N, USERS, RHO = 20_000, 40, 5e-7  # per point: sigma_nominal = 1000 m
Z = 5.0
CV = math.sqrt((4 - math.pi) / math.pi)


def test_ground_noise_between_nominal_and_the_stated_inflation():
    per_user = N // USERS
    lon = np.repeat([s[0] for s in SITES], N)
    lat = np.repeat([s[1] for s in SITES], N)
    users = np.repeat(np.arange(len(SITES) * USERS), per_user)
    df = pd.DataFrame({"u": users, "lon": lon, "lat": lat})
    session = Session(budget=gp.CGP(rho=per_user * RHO * 1.001))
    bound = df.geopriv(session, user="u", lon="lon", lat="lat", crs="EPSG:4326", domain=DOMAIN)
    with pytest.warns(gp.GpframeWarning, match="least distortion"):
        out = bound.privatize(rho=RHO, per="point", rng=seeded_rng(16), progress=False)
    res = out.attrs["geopriv"]
    f, k = res.params["noise_inflation"], res.params["scale_max"]
    crs = bound.projected.crs_m
    assert crs.name.startswith("gpframe Lambert conformal conic")  # conformal: round noise
    assert res.params["crs_m"] == crs.to_string() and 1.0 < k < f < 1.1
    sigma = (1 + math.sqrt(2) * float(M.G_LOC)) / math.sqrt(2 * RHO)  # ground metres, nominal
    nominal = sigma * math.sqrt(math.pi / 2)  # mean radius of the nominal 2-D Gaussian
    _, _, d = pyproj.Geod(ellps="WGS84").inv(lon, lat, out.lon.to_numpy(), out.lat.to_numpy())
    ratio = d.reshape(len(SITES), N).mean(axis=1) / nominal
    margin = Z * CV / math.sqrt(N)
    assert np.all(ratio >= 1 - margin), ratio
    assert np.all(ratio <= f * (1 + margin)), (ratio, f)
    # conformal: the ground noise at a site is scale_max / k(site) times the nominal one, between
    # 1 (k = k_max, at the box's edges) and the stated f (k = k_min, between the parallels)
    site_k = pyproj.Proj(crs).get_factors([s[0] for s in SITES], [s[1] for s in SITES])
    expect = k / np.asarray(site_k.meridional_scale)
    assert np.all(np.abs(ratio - expect) <= margin * expect), (ratio, expect)
    assert expect.max() > f - 0.01 and expect.min() < 1.01  # the sites reach both ends
