"""Exact, vectorised lattice noise samplers in lattice units (``docs/noise.md``).

Every sampler takes exact rational parameters and a :class:`BitSource` (None: OS CSPRNG), returns
int64 lattice indices whose law is exactly the target pmf, and lets no float decide an outcome
outside a proven margin. Release wrappers live in :mod:`gpframe.mechanisms`.
"""

from gpframe.mechanisms.noise.bits import AesCtrRandom, BitSource, OsRandom, resolve_rng
from gpframe.mechanisms.noise.exact import ExactProb, LazyUniform, exp_neg_bounds
from gpframe.mechanisms.noise.gaussian import discrete_gaussian, discrete_gaussian_nd, round_sigma2
from gpframe.mechanisms.noise.laplace import (
    discrete_laplace,
    discrete_laplace_design_a,
    lattice_laplace,
)
from gpframe.mechanisms.noise.lattice import check_g, release, snap

__all__ = [
    "AesCtrRandom",
    "BitSource",
    "ExactProb",
    "LazyUniform",
    "OsRandom",
    "check_g",
    "discrete_gaussian",
    "discrete_gaussian_nd",
    "discrete_laplace",
    "discrete_laplace_design_a",
    "exp_neg_bounds",
    "lattice_laplace",
    "release",
    "resolve_rng",
    "round_sigma2",
    "snap",
]
