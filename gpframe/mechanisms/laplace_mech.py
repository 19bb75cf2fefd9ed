"""Laplace-type release wrappers: central ε-DP, 1-D ε-GP and planar / d-dim ε-GP.

See ``docs/noise.md`` and ``docs/internals.md`` (discrete Laplace, lattice Laplace, lattice choice,
exact snapping, noise parameters and charges, parameter ranges, release wrappers); Liang & Yi,
'Concentrated Geo-Privacy' (2023), Lem. 2.6. Each wrapper checks its parameters and inputs, computes
the exact lattice rate from the amount charged (:mod:`gpframe.mechanisms.calibration`), snaps the
inputs to the lattice, draws all noise in one sampler call, and returns
:class:`~gpframe.mechanisms.released.Released`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import GpframeWarning, InvalidInputError
from gpframe.mechanisms.calibration import (
    D_MAX,
    G_LOC,
    central_laplace,
    check_draw_scale,
    check_eps,
    check_g,
    check_positive,
    gp_laplace,
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
    _noise_fn,
)

__all__ = ["laplace_dp", "laplace_gp", "planar_laplace"]

#: location noise scales outside [1 m, 100 km] trigger a GpframeWarning
SCALE_WARN_LOW = Fraction(1)
SCALE_WARN_HIGH = Fraction(100_000)


#: set (per thread) by a caller that sums the scale warnings of its sampler calls up in one of its
#: own (``queries.privatize``): a ContextVar, not ``warnings.catch_warnings``, which swaps the
#: process-wide filter list and is not safe when DuckDB's threads release batches at once
SCALE_WARNINGS_SUMMED: ContextVar[bool] = ContextVar("gp_scale_warnings_summed", default=False)


@contextmanager
def scale_warnings_left_out() -> Iterator[None]:
    """Leave out the wrappers' noise-scale warnings in this thread (the caller states its own)."""
    token = SCALE_WARNINGS_SUMMED.set(True)
    try:
        yield
    finally:
        SCALE_WARNINGS_SUMMED.reset(token)


def _warn_location_scale(scale: Fraction, what: str) -> None:
    # stacklevel=3: the user's call of the public wrapper
    if SCALE_WARNINGS_SUMMED.get():
        return
    if scale < SCALE_WARN_LOW:
        warnings.warn(
            f"the {what} noise scale is {float(scale):.3g} m, below 1 m: the released locations "
            "are almost exact. Check the budget's units (eps per metre, rho per square metre).",
            GpframeWarning,
            stacklevel=3,
        )
    elif scale > SCALE_WARN_HIGH:
        warnings.warn(
            f"the {what} noise scale is {float(scale) / 1000:.4g} km, above 100 km: the released "
            "locations carry little information. Check the budget's units (eps per metre).",
            GpframeWarning,
            stacklevel=3,
        )


def _location_calibration(cal: Any, scale: Fraction) -> tuple[Any, Fraction, bool]:
    """Return what a location wrapper caches: calibration, noise scale, whether it warns."""
    return cal, scale, _scale_warns(scale)


def _scale_warns(scale: Fraction) -> bool:
    """Whether :func:`_warn_location_scale` would warn (cached with the calibration)."""
    return scale < SCALE_WARN_LOW or scale > SCALE_WARN_HIGH


def _cached_inputs(tag: str, eps: Any, K: Any, g: Any, r_min: Any, draw_scale: Any) -> tuple:
    """``_location_inputs`` through the calibration cache; returns ``(key, checked values)``."""
    key = _cal_key(tag, eps, K, g, r_min, draw_scale)
    return key, _cached(key, lambda: _location_inputs(eps, K, g, r_min, draw_scale))


def _location_inputs(
    eps: Any, K: Any, g: Any, r_min: Any, draw_scale: Any
) -> tuple[Fraction, Fraction, Fraction, Fraction, Fraction]:
    return (
        check_eps(eps, "eps"),
        check_positive(K, "K"),
        G_LOC if g is None else check_g(g, "g"),
        check_positive(r_min, "r_min"),
        check_draw_scale(draw_scale),
    )


def laplace_dp(
    values: Any,
    *,
    sensitivity: float | Fraction,
    epsilon: float | Fraction,
    integer: bool = False,
    draw_scale: float | Fraction = 1,
    rng: Any = None,
) -> Released:
    """Release statistics under central ε-DP with discrete Laplace noise on a lattice.

    See ``docs/noise.md`` (discrete Laplace, lattice choice, central Laplace rows, parameter
    ranges).

    Parameters
    ----------
    values : array_like, shape (n,) or (n, m)
        The exactly computed statistics (``docs/noise.md``). Each row is one release: a scalar,
        or an m-vector whose ℓ1 sensitivity is ``sensitivity``.
    sensitivity : float
        ℓ1 sensitivity Δ of one row (user-level), in the statistic's units. Finite, > 0.
    epsilon : float
        The ε-DP amount of each row, in [2⁻⁴⁰, 100].
    integer : bool
        True for integer statistics (counts): the lattice is g = 1 and values must be integers.
    draw_scale : float
        The multi-draw factor s of ``docs/noise.md`` (SVT: 2 for the threshold, 4 per query): the
        noise is that of ε/s while the guarantee states the run's ε, charged once by the caller.
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG.

    Returns
    -------
    Released
        ``values`` on the lattice, ``noise["lam"]`` (rate per lattice step), ``noise["scale"]`` =
        g/λ in the statistic's units, ``noise["width"]``, and the guarantee ε-DP (hamming).

    Notes
    -----
    Noise: integer statistic, g = 1 and λ = ε/(sΔ); real statistic, g = 2^(⌊log₂Δ⌋−20) and
    λ = ε/(s(⌊Δ/g⌋ + m)), so the scale (⌊Δ/g⌋ + m)g/ε is at least Δ/ε.
    Charge: ``epsilon`` per row on the user's central ledger (``Released.guarantee``).
    Error: |y − x| ≤ (g/λ)·ln(2/β) + g/2 with probability ≥ 1 − β (``docs/noise.md``;
    :func:`gpframe.mechanisms.tails.laplace_bound`).

    Examples
    --------
    >>> r = laplace_dp([10, 20], sensitivity=1, epsilon=0.5, integer=True)
    >>> r.noise["lam"], r.g, r.guarantee.amount
    (Fraction(1, 2), Fraction(1, 1), Fraction(1, 2))
    >>> r.values
    array([...])
    >>> r = laplace_dp([3.25], sensitivity=1.0, epsilon=1.0)
    >>> r.g, r.noise["lam"] == Fraction(1, 2**20 + 1)
    (Fraction(1, 1048576), True)
    """
    key = _cal_key("laplace_dp", epsilon, sensitivity, draw_scale)
    eps_f, delta, s = _cached(
        key,
        lambda: (
            check_eps(epsilon, "epsilon"),
            check_positive(sensitivity, "sensitivity"),
            check_draw_scale(draw_scale),
        ),
    )
    x = _as_array(values, "values", min_ndim=0, max_ndim=2)
    m = x.shape[1] if x.ndim == 2 else 1
    if integer and not np.array_equal(x, np.rint(x)):
        raise InvalidInputError(
            "integer=True but values are not all integers; pass integer=False for real-valued "
            "statistics. Nothing was charged."
        )
    key2 = None if key is None else (*key, (bool, bool(integer)), (int, m))
    cal = _cached(key2, lambda: central_laplace(eps_f, delta, integer=bool(integer), m=m, s=s))
    _check_central_range(x, cal.g, "sensitivity and epsilon")
    y = _lattice_release(x, cal.g, cal.param, "discrete_laplace", rng, "values", None)
    row = "integer statistic" if integer else "real statistic"
    return Released(
        y,
        cal.g,
        {
            "lam": cal.param,
            "scale": cal.g / cal.param,
            "width": cal.width,
            "draw_scale": s,
            "coarsen": cal.coarsen,
        },
        Guarantee("dp", eps_f, "hamming", f"docs/noise.md (central Laplace, {row})"),
    )


def _sample(name: str, param: Fraction, n: int, bits: Any, d: int | None = None) -> np.ndarray:
    """One sampler call for the whole release (never per row: ``docs/noise.md``)."""
    if n == 0:
        return np.zeros((0,) if d is None else (0, d), dtype=np.int64)
    fn = _noise_fn(name)
    return fn(param, n, bits) if d is None else fn(param, d, n, bits)


def _lattice_release(
    x: np.ndarray, g: Fraction, param: Fraction, sampler: str, rng: Any, name: str, d: int | None
) -> np.ndarray:
    """Snap ``x`` to g·Z, add one sampler call of lattice noise and release (``docs/noise.md``).

    ``d`` None: scalar noise per entry (any shape); otherwise ``x`` is (n, d) rows of points.
    The order of the calls (source, snap, sample, release) is what seeded outputs pin.
    """
    bits = _noise_fn("resolve_rng")(rng)
    if d is None:
        u = _noise_fn("snap")(x.reshape(-1), g, name)
        k = _sample(sampler, param, u.size, bits)
        # u is this call's own snapped array, not used after: released into its buffer
        return _noise_fn("release")(u, k, g, reuse_u=True).reshape(x.shape)
    u = _noise_fn("snap")(x, g, name)
    k = _sample(sampler, param, len(x), bits, d=d)
    return _noise_fn("release")(u, k, g, reuse_u=True)


def laplace_gp(
    values: Any,
    *,
    eps: float | Fraction,
    K: float | Fraction = 1,
    g: float | Fraction | None = None,
    r_min: float | Fraction = 1,
    lattice_exact: bool = False,
    draw_scale: float | Fraction = 1,
    rng: Any = None,
) -> Released:
    """Release K-Lipschitz real values (metres) under ε-GP with 1-D lattice Laplace noise.

    See ``docs/noise.md`` and ``docs/operations/knn.md`` (discrete Laplace, the r_min floor, lattice
    choice, GP 1-D row, d = 1, SVT draws, PNN draws); Liang & Yi, 'Concentrated Geo-Privacy' (2023),
    Lem. 2.6, Alg. 1, Alg. 2.

    Parameters
    ----------
    values : array_like, shape (n,)
        One K-Lipschitz value per row (e.g. a distance to a public point), in metres.
    eps : float
        The GP amount of each row, in m⁻¹, in [2⁻⁴⁰, 100].
    K : float
        Lipschitz constant of the released function (an upper bound; 1 for a distance).
    g : float or None
        Lattice step in metres, a power of two; None is 2⁻¹⁰ m (``docs/noise.md``).
    r_min : float
        Floor of the metric d_r(x, x') = max(||x − x'||, r_min), metres (default 1 m).
    lattice_exact : bool
        The values already lie on g·Z (checked): no snapping term, Euclidean metric
        (``docs/noise.md``).
    draw_scale : float
        Multi-draw factor s of ``docs/noise.md`` (SVT: W 2, V 4; PNN: Z, W 3, V 6); the noise is
        that of ε/s and the guarantee states the run's ε, charged once by the caller.
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG.

    Returns
    -------
    Released
        ``noise["lam"]`` (rate per lattice step), ``noise["scale"]`` = g/λ metres, the effective
        ``noise["r_min"]`` and ``noise["coarsen"]``; guarantee ε-GP w.r.t. d_r.

    Notes
    -----
    Noise: discrete Laplace on g·Z at rate λ = εg/(s(K + g/r_min)) per step, i.e. a scale
    s(K + g/r_min)/ε metres; g = 2⁻¹⁰ m, r_min = 1 m, coarsened above 2²⁴ steps (``docs/noise.md``).
    Charge: ``eps`` per row on the user's metric ledger, w.r.t. d_r (``Released.guarantee``).
    Error: |y − x| ≤ scale·ln(2/β) + g/2 with probability ≥ 1 − β (``docs/noise.md``).

    Examples
    --------
    >>> r = laplace_gp([120.0, 45.5], eps=0.01)
    >>> r.noise["scale"] == (1 + Fraction(1, 2**10)) / Fraction(1, 100)   # (1 + g/r_min)/eps metres
    True
    >>> r.guarantee.amount, r.guarantee.metric
    (Fraction(1, 100), ('floor', Fraction(1, 1)))
    >>> r.values
    array([...])
    """
    key, (eps_f, k_f, g_f, r_f, s) = _cached_inputs("laplace_gp", eps, K, g, r_min, draw_scale)
    x = _as_array(values, "values", min_ndim=0, max_ndim=1)
    key2 = None if key is None else (*key, (bool, bool(lattice_exact)))

    def calibrate() -> tuple[Any, Fraction, bool]:
        cal = gp_laplace(eps_f, K=k_f, d=1, g=g_f, r_min=r_f, lattice_exact=lattice_exact, s=s)
        return _location_calibration(cal, cal.g / cal.param)

    cal, scale, warns = _cached(key2, calibrate)
    if lattice_exact:
        _check_on_lattice(x, cal.g, "values")
    if warns:
        _warn_location_scale(scale, "1-D Laplace")
    y = _lattice_release(x, cal.g, cal.param, "discrete_laplace", rng, "values", None)
    noise = {"lam": cal.param, "scale": scale, "draw_scale": s}
    where = "lattice inputs" if lattice_exact else "floored metric"
    return _location_released(y, cal, noise, "gp", eps_f, f"docs/noise.md (GP 1-D, {where})")


def planar_laplace(
    points: Any,
    *,
    eps: float | Fraction,
    K: float | Fraction = 1,
    g: float | Fraction | None = None,
    r_min: float | Fraction = 1,
    lattice_exact: bool = False,
    rng: Any = None,
) -> Released:
    """Release points (or K-Lipschitz vectors) under ε-GP with lattice planar / d-dim Laplace noise.

    See ``docs/noise.md`` and ``docs/operations/privatize.md`` (lattice Laplace, lattice choice, GP
    d-dim row, Laplace mechanism, ``privatize`` calls it with eps/n per point); Liang & Yi,
    'Concentrated Geo-Privacy' (2023), Lem. 2.6, Thm. 4.6.

    Parameters
    ----------
    points : array_like, shape (n, d), 2 <= d <= 4
        Projected coordinates in metres (one point, or one K-Lipschitz vector, per row).
    eps : float
        The GP amount of each row, in m⁻¹, in [2⁻⁴⁰, 100].
    K : float
        Lipschitz constant of the released function (1 for points; √2 for a bounding-box centre).
    g : float or None
        Lattice step in metres, a power of two; None is 2⁻¹⁰ m (``docs/noise.md``).
    r_min : float
        Floor of the metric d_r(x, x') = max(||x − x'||, r_min), metres (default 1 m).
    lattice_exact : bool
        The points already lie on g·Z^d (checked): no snapping term, Euclidean metric
        (``docs/noise.md``).
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG.

    Returns
    -------
    Released
        ``noise["a"]`` (rate per lattice step, an exact float), ``noise["scale"]`` = g/a metres
        (the mean radius is d·scale), ``noise["r_min"]``, ``noise["coarsen"]``; guarantee ε-GP
        w.r.t. d_r.

    Notes
    -----
    Noise: P(k) ∝ exp(−a||k||) on Z^d with a = εg/(K + √d·g/r_min) rounded down to a float;
    g = 2⁻¹⁰ m, r_min = 1 m, so the scale is 1.00138/ε for K = 1, d = 2 (``docs/noise.md``).
    Charge: ``eps`` per row on the user's metric ledger, w.r.t. d_r (``Released.guarantee``).
    Error: ||y − x|| ≤ scale·(−W₋₁(−β/e) − 1) + √2·g with probability ≥ 1 − β (d = 2;
    ``docs/noise.md``; Liang & Yi, 'Concentrated Geo-Privacy' (2023), Lem. 2.6;
    :func:`gpframe.mechanisms.tails.planar_bound`).

    Examples
    --------
    >>> r = planar_laplace([[500_000.0, 4_649_776.2], [500_010.0, 4_649_790.0]], eps=0.01)
    >>> round(float(r.noise["scale"]), 4)     # (1 + √2·2**-10)/0.01 m
    100.1381
    >>> r.guarantee.kind, r.guarantee.amount, r.guarantee.metric
    ('gp', Fraction(1, 100), ('floor', Fraction(1, 1)))
    >>> r.values.shape
    (2, 2)
    """
    key, (eps_f, k_f, g_f, r_f, _) = _cached_inputs("planar_laplace", eps, K, g, r_min, 1)
    x = _as_array(points, "points", min_ndim=2, max_ndim=2)
    d = x.shape[1]
    if not 2 <= d <= D_MAX:
        raise InvalidInputError(
            f"points has {d} columns; planar_laplace supports 2..{D_MAX} dimensions "
            "(use laplace_gp for one value per row). Nothing was charged."
        )
    key2 = None if key is None else (*key, (bool, bool(lattice_exact)), (int, d))

    def calibrate() -> tuple[Any, Fraction, bool]:
        cal = gp_laplace(eps_f, K=k_f, d=d, g=g_f, r_min=r_f, lattice_exact=lattice_exact)
        return _location_calibration(cal, cal.g / cal.param)

    cal, scale, warns = _cached(key2, calibrate)
    if lattice_exact:
        _check_on_lattice(x, cal.g, "points")
    if warns:
        _warn_location_scale(scale, "planar Laplace")
    y = _lattice_release(x, cal.g, cal.param, "lattice_laplace", rng, "points", d)
    noise = {"a": cal.param, "scale": scale}
    where = "lattice inputs" if lattice_exact else "floored metric"
    return _location_released(y, cal, noise, "gp", eps_f, f"docs/noise.md (GP {d}-dim, {where})")
