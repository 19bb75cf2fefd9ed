"""Gaussian release wrappers: central ρ-zCDP and ρ-CGP, with exact discrete Gaussian noise.

See ``docs/noise.md``, ``docs/internals.md``, ``docs/operations/privatize.md`` and
``docs/concepts.md`` (discrete Gaussian, Gaussian noise on points, lattice choice, exact snapping,
noise parameters and charges, parameter ranges, release wrappers, Gaussian mechanism, CGP Basic);
Liang & Yi, 'Concentrated Geo-Privacy' (2023), Thm. 3.1, Thm. 4.8. The σ's of the oracle tables are
nominal (σ = K/√(2ρ)); the released noise adds the lattice term of ``docs/noise.md`` and is never
smaller than what the charge pays for.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.calibration import (
    D_MAX,
    G_LOC,
    central_gaussian,
    cgp_gaussian,
    check_g,
    check_positive,
    check_rho,
    sqrt_up,
)
from gpframe.mechanisms.laplace_mech import (
    _lattice_release,
    _location_calibration,
    _warn_location_scale,
)
from gpframe.mechanisms.released import (
    Guarantee,
    Released,
    _as_array,
    _cached,
    _cal_key,
    _check_central_range,
    _check_on_lattice,
    _location_released,
)

__all__ = ["gaussian_cgp", "gaussian_zcdp"]


def gaussian_zcdp(
    values: Any,
    *,
    l2_sensitivity: float | Fraction,
    rho: float | Fraction,
    integer: bool = False,
    rng: Any = None,
) -> Released:
    """Release statistics under central ρ-zCDP with discrete Gaussian noise on a lattice.

    See ``docs/noise.md`` (discrete Gaussian accounting, lattice choice, central Gaussian rows,
    parameter ranges).

    Parameters
    ----------
    values : array_like, shape (n,) or (n, m)
        The exactly computed statistics. Each row is one release: a scalar, or an m-vector whose
        ℓ2 sensitivity is ``l2_sensitivity``.
    l2_sensitivity : float
        ℓ2 sensitivity Δ₂ of one row (user-level), in the statistic's units. Finite, > 0.
    rho : float
        The zCDP amount of each row (unitless). Finite, > 0.
    integer : bool
        True for integer statistics (counts): g = 1, values must be integers.
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG.

    Returns
    -------
    Released
        ``noise["sigma2"]`` (lattice units², the exact sampler parameter), ``noise["scale"]`` (an
        upper bound of σ in the statistic's units); guarantee ρ-zCDP (hamming).

    Notes
    -----
    Noise: integer, σ_g² ≥ Δ₂²/(2ρ) on Z; real, g = 2^(⌊log₂σ₀⌋−16) with σ₀ = Δ₂/√(2ρ) and
    σ_g² ≥ (Δ₂/g + √m)²/(2ρ); rounded up as ``docs/noise.md`` says.
    Charge: ``rho`` per row on the user's central ledger (``Released.guarantee``).
    Error: |y − x| ≤ σ·√(2 ln(2/β)) + g/2 per coordinate with probability ≥ 1 − β
    (sub-Gaussian, ``docs/noise.md``).

    Examples
    --------
    >>> r = gaussian_zcdp([40, 7], l2_sensitivity=1, rho=0.5, integer=True)
    >>> r.noise["sigma2"], r.guarantee.amount     # sigma² = 1/(2·0.5)
    (Fraction(1, 1), Fraction(1, 2))
    >>> r.values
    array([...])
    """
    key = _cal_key("gaussian_zcdp", rho, l2_sensitivity)
    rho_f, delta = _cached(
        key, lambda: (check_rho(rho, "rho"), check_positive(l2_sensitivity, "l2_sensitivity"))
    )
    x = _as_array(values, "values", min_ndim=0, max_ndim=2)
    m = x.shape[1] if x.ndim == 2 else 1
    if integer and not (x == x.round()).all():
        raise InvalidInputError(
            "integer=True but values are not all integers; pass integer=False for real-valued "
            "statistics. Nothing was charged."
        )
    key2 = None if key is None else (*key, (bool, bool(integer)), (int, m))

    def calibrate() -> tuple[Any, Fraction]:
        cal = central_gaussian(rho_f, delta, integer=bool(integer), m=m)
        return cal, sqrt_up(cal.param) * cal.g

    cal, scale = _cached(key2, calibrate)
    _check_central_range(x, cal.g, "l2_sensitivity and rho")
    y = _lattice_release(x, cal.g, cal.param, "discrete_gaussian", rng, "values", None)
    row = "integer" if integer else f"real {m}-vector"
    return Released(
        y,
        cal.g,
        {"sigma2": cal.param, "scale": scale, "width": cal.width},
        Guarantee("zcdp", rho_f, "hamming", f"docs/noise.md (central Gaussian, {row})"),
    )


def gaussian_cgp(
    points: Any,
    *,
    rho: float | Fraction,
    K: float | Fraction = 1,
    g: float | Fraction | None = None,
    r_min: float | Fraction = 1,
    lattice_exact: bool = False,
    rng: Any = None,
) -> Released:
    """Release points under rho-CGP with lattice Gaussian noise (privatize: rho/n per point).

    See ``docs/noise.md`` and ``docs/operations/privatize.md`` (Gaussian noise on points, noise
    parameters and charges, Gaussian mechanism, CGP Basic); Liang & Yi, 'Concentrated Geo-Privacy'
    (2023), Thm. 3.1, Thm. 4.8. [name `gaussian_cgp`, returns `Released`, `rng` keyword-only, secure
    default]

    Parameters
    ----------
    points : array_like, shape (n, d), 1 <= d <= 4, or (n,)
        The user's points, projected, in metres; or one K-Lipschitz value per row (d = 1).
    rho : float
        The CGP amount of each row, in m⁻². Must be finite and > 0.
    K : float
        Lipschitz constant of the released function (1 for points; sqrt(2) for a bounding-box
        centre).
    g : float or None
        Lattice step in metres, a power of two; None is 2⁻¹⁰ m (``docs/noise.md``).
    r_min : float
        Floor of the metric d_r(x, x') = max(||x − x'||, r_min), metres (default 1 m).
    lattice_exact : bool
        The points already lie on g·Z^d (checked): σ = K/√(2ρ), Euclidean metric
        (``docs/noise.md``).
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG (tests pass a seeded one).

    Returns
    -------
    Released
        ``noise["sigma2"]`` (lattice units², the exact sampler parameter), ``noise["scale"]`` (an
        upper bound of the sampled σ in metres), ``noise["r_min"]``, ``noise["coarsen"]``;
        guarantee ρ-CGP w.r.t. d_r.

    Notes
    -----
    Noise: discrete Gaussian on the lattice g·Z² (g = 2⁻¹⁰ m), each coordinate with
    sigma = (K + sqrt(2) g / r_min) / sqrt(2 rho) metres, r_min = 1 m (``docs/noise.md``).
    Charge: rho on the user's metric ledger, w.r.t. the floored metric d_r (Released.guarantee).
    Error (K = 1): ||y_i - x_i|| <= sqrt(ln(1 / beta) / rho) with probability >= 1 - beta for the
    continuous law; the reported bound uses the lattice tail (``docs/noise.md``,
    :func:`gpframe.mechanisms.tails.gaussian_radius_bound`).

    Examples
    --------
    >>> import gpframe as gp
    >>> gp.mechanisms.cgp_sigma(rho=5e-5, n=1)   # nominal sigma oracle (no lattice term)
    100.0
    >>> r = gp.mechanisms.gaussian_cgp([[500_000.0, 4_649_776.2]], rho=5e-5)
    >>> round(float(r.noise["scale"]), 4)      # (1 + √2·2**-10)·100 m
    100.1381
    >>> r.guarantee.kind, r.guarantee.amount, r.guarantee.metric
    ('cgp', Fraction(1, 20000), ('floor', Fraction(1, 1)))
    >>> r.values
    array([[...]])
    """
    key = _cal_key("gaussian_cgp", rho, K, g, r_min)
    rho_f, k_f, g_f, r_f = _cached(
        key,
        lambda: (
            check_rho(rho, "rho"),
            check_positive(K, "K"),
            G_LOC if g is None else check_g(g, "g"),
            check_positive(r_min, "r_min"),
        ),
    )
    x = _as_array(points, "points", min_ndim=1, max_ndim=2)
    d = 1 if x.ndim == 1 else x.shape[1]
    if not 1 <= d <= D_MAX:
        raise InvalidInputError(
            f"points has {d} columns; gaussian_cgp supports 1..{D_MAX} dimensions "
            "(docs/noise.md). Nothing was charged."
        )
    key2 = None if key is None else (*key, (bool, bool(lattice_exact)), (int, d))

    def calibrate() -> tuple[Any, Fraction, bool]:
        cal = cgp_gaussian(rho_f, K=k_f, d=d, g=g_f, r_min=r_f, lattice_exact=lattice_exact)
        return _location_calibration(cal, sqrt_up(cal.param) * cal.g)

    cal, scale, warns = _cached(key2, calibrate)
    if lattice_exact:
        _check_on_lattice(x, cal.g, "points")
    if warns:
        _warn_location_scale(scale, "Gaussian")
    if d == 1:  # one value per row: x is 1-D
        y = _lattice_release(x, cal.g, cal.param, "discrete_gaussian", rng, "points", None)
    else:
        y = _lattice_release(x, cal.g, cal.param, "discrete_gaussian_nd", rng, "points", d)
    noise = {"sigma2": cal.param, "scale": scale}
    where = ", lattice inputs" if lattice_exact else ""
    return _location_released(y, cal, noise, "cgp", rho_f, f"docs/noise.md (CGP {d}-dim{where})")
