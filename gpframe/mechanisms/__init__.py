"""Release wrappers: calibrate from the charged amount, snap, sample on a lattice, release.

See ``docs/noise.md`` (mechanism wrappers) and ``docs/internals.md`` ("Release wrappers"). Every
wrapper returns a :class:`Released` whose ``guarantee`` is what the ledger must be charged. The
exact samplers live in :mod:`gpframe.mechanisms.noise`.
"""

from gpframe.mechanisms import selection
from gpframe.mechanisms.calibration import G_LOC, R_MIN, eps_from_rho, sqrt_down, sqrt_up
from gpframe.mechanisms.gaussian_mech import gaussian_cgp, gaussian_zcdp
from gpframe.mechanisms.laplace_mech import laplace_dp, laplace_gp, planar_laplace
from gpframe.mechanisms.laplace_rows import ReleasedRows, laplace_dp_rows
from gpframe.mechanisms.released import Guarantee, Released
from gpframe.mechanisms.svt import SVTResult, sparse_vector
from gpframe.mechanisms.tails import (
    cgp_sigma,
    error_bound,
    gaussian_bound,
    gaussian_radius_bound,
    gaussian_radius_nominal,
    gp_scale,
    gp_to_rate,
    laplace_bound,
    lem45_bound,
    planar_bound,
    planar_quantile,
)

__all__ = [
    "G_LOC",
    "R_MIN",
    "Guarantee",
    "Released",
    "ReleasedRows",
    "SVTResult",
    "cgp_sigma",
    "eps_from_rho",
    "error_bound",
    "gaussian_bound",
    "gaussian_cgp",
    "gaussian_radius_bound",
    "gaussian_radius_nominal",
    "gaussian_zcdp",
    "gp_scale",
    "gp_to_rate",
    "laplace_bound",
    "laplace_dp",
    "laplace_dp_rows",
    "laplace_gp",
    "lem45_bound",
    "planar_bound",
    "planar_laplace",
    "planar_quantile",
    "selection",
    "sparse_vector",
    "sqrt_down",
    "sqrt_up",
]
