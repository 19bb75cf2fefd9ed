"""What a release wrapper returns: the lattice values, the exact noise used and the guarantee.

See ``docs/internals.md`` (``Released``, release wrappers). Queries charge the
ledger with :attr:`Released.guarantee`, never with a nominal amount recomputed from a noise scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["Guarantee", "Released"]


@dataclass(frozen=True)
class Guarantee:
    """The privacy statement a release satisfies, and so what the ledger must be charged.

    Attributes
    ----------
    kind : str
        ``"gp"``, ``"cgp"`` (metric notions) or ``"dp"``, ``"zcdp"`` (central notions).
    amount : Fraction
        The exact amount in that notion's units (m⁻¹, m⁻², or unitless): the charge.
    metric : str or tuple
        ``"euclidean"`` (lattice-exact inputs), ``("floor", r_min)`` for the floored metric
        d_r(x, x') = max(||x - x'||, r_min) of ``docs/noise.md``, or ``"hamming"`` (central).
    spec : str
        The docs pages and papers the guarantee rests on.

    Examples
    --------
    >>> Guarantee("gp", Fraction(1, 100), ("floor", Fraction(1)), "docs/noise.md").kind
    'gp'
    """

    kind: str
    amount: Fraction
    metric: str | tuple
    spec: str

    def describe(self) -> str:
        """One line for results and logs, e.g. ``gp eps=0.01 w.r.t. max(d, 1 m)``."""
        param = {"gp": "eps", "cgp": "rho", "dp": "epsilon", "zcdp": "rho"}.get(self.kind, "amount")
        if isinstance(self.metric, tuple) and self.metric and self.metric[0] == "floor":
            where = f" w.r.t. max(d, {float(self.metric[1]):g} m)"
        elif self.metric == "euclidean":
            where = " w.r.t. the Euclidean distance"
        else:
            where = " (user-level, central)"
        return f"{self.kind} {param}={float(self.amount):.6g}{where}"


@dataclass(frozen=True)
class Released:
    """Released values: exact lattice points ``(snap(x) + k) * g``, with their noise and guarantee.

    Attributes
    ----------
    values : ndarray of float64
        The released values, same shape as the input; every entry is an exact multiple of ``g``.
    g : Fraction
        The lattice step (a power of two).
    noise : dict of str to Fraction
        The exact noise parameters the sampler was called with (``lam``, ``a`` or ``sigma2`` in
        lattice units), the real-unit ``scale``, and for location mechanisms the effective
        ``r_min`` and ``coarsen`` (the factor the lattice was coarsened by, ``docs/noise.md``).
    guarantee : Guarantee
        What the ledger must be charged for this release.

    Examples
    --------
    >>> r = Released(np.array([0.5, 1.0]), Fraction(1, 2), {"lam": Fraction(1, 3)},
    ...              Guarantee("dp", Fraction(1), "hamming", "docs/noise.md"))
    >>> np.asarray(r)
    array([0.5, 1. ])
    """

    values: np.ndarray
    g: Fraction
    noise: dict[str, Fraction] = field(repr=False)
    guarantee: Guarantee

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if dtype is None and not copy:
            return self.values
        return np.array(self.values, dtype=dtype, copy=True)

    def __len__(self) -> int:
        return len(self.values)


# --------------------------------------------------------------------------------------------
# helpers shared by the wrappers (private)


_NOISE_PKG: Any = None


def _noise_fn(name: str) -> Any:
    """Return the sampler ``name`` of ``gpframe.mechanisms.noise`` (imported lazily: no cycle).

    The package attribute is read on every call (tests may replace it); only the module lookup
    is cached.
    """
    global _NOISE_PKG
    pkg = _NOISE_PKG
    if pkg is None:
        import importlib

        pkg = _NOISE_PKG = importlib.import_module("gpframe.mechanisms.noise")
    fn = getattr(pkg, name, None)
    if fn is None:
        import importlib

        for sub in ("lattice", "laplace", "gaussian", "bits"):
            try:
                mod = importlib.import_module(f"gpframe.mechanisms.noise.{sub}")
            except ImportError:
                continue
            fn = getattr(mod, name, None)
            if fn is not None:
                break
    if fn is None:
        from gpframe.errors import GpframeInternalError

        raise GpframeInternalError(f"gpframe.mechanisms.noise provides no {name!r}.")
    return fn


#: Calibrations already computed, keyed on the wrapper's raw parameters with their types (so
#: 1, 1.0 and True stay apart). Only successful calibrations are stored: a hit means every
#: parameter check passed before, so skipping them cannot hide an error. Values are immutable.
_CAL_CACHE: dict[tuple, Any] = {}
_CAL_CACHE_MAX = 1024


def _cal_key(*args: Any) -> tuple | None:
    """Return a hashable, type-tagged key for the raw parameters, or None (nothing cached)."""
    key = tuple((type(a), a) for a in args)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _cached(key: tuple | None, compute: Any) -> Any:
    """Return the calibration cached under ``key``; on a miss (or ``key`` None) compute it."""
    hit = _CAL_CACHE.get(key) if key is not None else None
    return _cal_store(key, compute()) if hit is None else hit


def _cal_store(key: tuple | None, value: Any) -> Any:
    if key is not None:
        if len(_CAL_CACHE) >= _CAL_CACHE_MAX:
            _CAL_CACHE.clear()
        _CAL_CACHE[key] = value
    return value


def _location_released(
    y: np.ndarray, cal: Any, noise: dict[str, Fraction], kind: str, amount: Fraction, spec: str
) -> Released:
    """Build what a location wrapper returns (``laplace_gp``, ``planar_laplace``, ``gaussian_cgp``).

    ``noise`` holds the mechanism's own entries (sampler parameter, ``scale``, ...); this appends
    the location calibration's ``coarsen`` and, unless the inputs were lattice-exact, its effective
    ``r_min`` (``docs/noise.md``), and states the guarantee w.r.t. ``cal.metric``.
    """
    noise = {**noise, "coarsen": cal.coarsen}
    if cal.r_min is not None:
        noise["r_min"] = cal.r_min
    return Released(y, cal.g, noise, Guarantee(kind, amount, cal.metric, spec))


def _as_array(values: Any, name: str, *, min_ndim: int, max_ndim: int) -> np.ndarray:
    """``values`` as a finite float64 array of 0..2 dimensions, or ``InvalidInputError``."""
    from gpframe.errors import InvalidInputError

    # complex input would be cast with only a ComplexWarning, silently dropping the
    # imaginary part: refuse it. One C-level conversion, no per-element Python.
    try:
        pre = values if isinstance(values, np.ndarray) else np.asarray(values)
    except (TypeError, ValueError):
        pre = values  # ragged or odd input: the float conversion below reports it
    if isinstance(pre, np.ndarray) and np.issubdtype(pre.dtype, np.complexfloating):
        raise InvalidInputError(
            f"{name} has complex entries; pass real numbers (e.g. np.real({name}) if the "
            "imaginary parts are 0). Nothing was charged."
        )
    try:
        x = np.asarray(pre, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"{name} must be numeric (an array of numbers), got {type(values).__name__}. "
            "Nothing was charged."
        ) from exc
    if not min_ndim <= x.ndim <= max_ndim:
        raise InvalidInputError(
            f"{name} has shape {x.shape}; expected {min_ndim}..{max_ndim} dimensions "
            "((n,) for values, (n, d) for points). Nothing was charged."
        )
    bad = ~np.isfinite(x)
    if bad.any():
        rows = np.flatnonzero(bad.reshape(len(x), -1).any(axis=1) if x.ndim else bad.ravel())
        shown = ", ".join(str(int(i)) for i in rows[:3])
        raise InvalidInputError(
            f"{name} has {int(bad.sum())} NaN/inf entries "
            f"(rows {shown}{', ...' if len(rows) > 3 else ''}). "
            "Drop or fill them first. Nothing was charged."
        )
    return x


def _check_central_range(x: np.ndarray, g: Fraction, params: str) -> None:
    """Refuse values too large for the lattice step a central wrapper derived from ``params``.

    Central wrappers choose g from the noise scale (``docs/noise.md``), so the caller cannot
    pass a coarser g: the message names the parameters that set it, not g.
    """
    from gpframe.errors import InvalidInputError

    lim = float(g) * 2.0**52
    big = np.abs(x) >= lim
    if big.any():
        raise InvalidInputError(
            f"values has {int(big.sum())} entries at or above {lim:.3g}, too large for the noise "
            f"that {params} ask for: the lattice step g={float(g):.3g} follows from them "
            "(docs/noise.md) and |values / g| must stay below 2**52. Raise the "
            "sensitivity, lower the privacy amount, or recentre the data. Nothing was charged."
        )


def _check_on_lattice(x: np.ndarray, g: Fraction, name: str) -> None:
    """Lattice-exact mode (``docs/noise.md``): assert rint(x/g)*g == x."""
    from gpframe.errors import InvalidInputError

    gf = float(g)
    off = np.rint(x / gf) * gf != x
    if off.any():
        raise InvalidInputError(
            f"lattice_exact=True but {int(off.sum())} entries of {name} are not multiples of "
            f"g={gf:g}. Snap them first, or pass lattice_exact=False (the floored metric, "
            "docs/noise.md). Nothing was charged."
        )
