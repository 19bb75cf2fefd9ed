"""The identity query ``privatize``: release a noisy copy of every point of every user.

See ``docs/operations/privatize.md`` and ``docs/noise.md`` (GP Basic, CGP Basic, contract, the r_min
floor, projection scale, lattice calibration, never sample per row); Liang & Yi, 'Concentrated
Geo-Privacy' (2023).

This module is the pure algorithm over arrays. It knows nothing of pandas or of the ledger: the
caller (the accessor, the DuckDB UDF) groups rows into users, reserves the allocations that
:func:`allocations` computes, calls :func:`privatize_points` for the admitted users, and charges
:attr:`PrivatizeArrays.charges`.

Two ways to spend a user's amount (``per=``):

``per="user"``
    The user's amount is split over their n points: each point gets ε/n (GP) or ρ/n (CGP), so
    the whole tuple is ε-GP / ρ-CGP under the max-over-points metric
    (``docs/operations/privatize.md``). The user is charged the amount.
``per="point"``
    Every point is released at the amount; the user is charged n × amount. This is what a SQL
    UDF that sees one row at a time does, and the Python path offers it so both agree exactly.

Units. ε is per metre of the ground and ρ per square metre. The projection stretches distances
by at most ``scale_max`` over the data (UTM: ≤ 1.001 inside its zone), so the mechanism runs at
ε/scale_max (ρ/scale_max²) per projected metre: the guarantee then holds in ground metres
(``docs/noise.md``). The charge is the mechanism's :class:`Guarantee` amount converted back
to ground units, never a recomputed nominal value.
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from gpframe.errors import GpframeInternalError, GpframeWarning, InvalidInputError

__all__ = [
    "KINDS",
    "PERS",
    "PrivatizeArrays",
    "allocations",
    "check_amount",
    "check_point_amount",
    "group_rows",
    "make_privatize_result",
    "nominal_errors",
    "per_note",
    "per_point_amounts",
    "privatize_points",
    "progress_enabled",
    "split_charges",
]

#: the privacy notions privatize runs under: GP (eps, planar Laplace) or CGP (rho, Gaussian)
KINDS = ("gp", "cgp")
#: how a user's amount is spent over their points
PERS = ("user", "point")

#: largest GP eps per metre a mechanism accepts (docs/noise.md: eps_max = 100)
EPS_MAX = Fraction(100)
#: coordinates must satisfy |x / g| < 2**52 for exact snapping (docs/noise.md); with
#: g <= 2**-10 m that is |x| < 2**42 m. We refuse far earlier: no projected CRS goes near 2**40 m.
COORD_MAX_M = float(2**40)
#: largest noise scale privatize releases at, metres (GP 1/ε, CGP σ per coordinate): about
#: the size of the Earth. Beyond it the released point carries no location information and,
#: far enough out (ε ≲ 1e-100), cannot even be mapped back to the input CRS (inf coordinates).
NOISE_SCALE_MAX_M = Fraction(2 * 10**7)


def _fmt(x: Fraction) -> str:
    """``x`` for a message; never overflows (10**400 stays readable)."""
    try:
        return f"{float(x):g}"
    except OverflowError:
        return f"about 10**{len(str(int(x))) - 1}"


def check_amount(kind: str, per: str, amount: Fraction) -> None:
    """Validate the kind, the per option and the amount before anything touches the ledger.

    >>> check_amount("gp", "user", Fraction(1, 10))
    >>> check_amount("dp", "user", Fraction(1, 10))
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: kind='dp' is not one of 'gp', 'cgp'. Nothing was charged.
    """
    if kind not in KINDS:
        raise InvalidInputError(f"kind={kind!r} is not one of 'gp', 'cgp'. Nothing was charged.")
    if per not in PERS:
        raise InvalidInputError(
            f"per={per!r} is not one of 'user', 'point'. Use per='user' to split a user's amount "
            "over their points, or per='point' to charge every point the amount. "
            "Nothing was charged."
        )
    if not isinstance(amount, Fraction) or amount <= 0:
        name = "eps" if kind == "gp" else "rho"
        raise InvalidInputError(f"{name}={amount!r} must be > 0. Nothing was charged.")
    if kind == "gp" and amount > EPS_MAX:
        raise InvalidInputError(
            f"eps={_fmt(amount)} per metre is above the supported maximum {int(EPS_MAX)} "
            "(noise below 2 cm). Lower eps. Nothing was charged."
        )


def check_point_amount(
    kind: str, part: Fraction, *, name: str | None = None, scale_max: Any = 1
) -> None:
    """Run the wrapper's full parameter check for one per-point amount, before any reservation.

    ``part`` is the per-point amount after the per-user split; the mechanism runs at it divided
    by the projection's largest scale factor ``scale_max`` (ε/k for GP, ρ/k² for CGP, in its
    units: ε per projected metre, ρ per m²), and that is what is checked. It checks exactly what
    :func:`~gpframe.mechanisms.planar_laplace` (``check_eps``: ε in [2⁻⁴⁰, 100], ``docs/noise.md``)
    or :func:`~gpframe.mechanisms.gaussian_cgp` would check, runs the calibration, and refuses a
    noise scale above :data:`NOISE_SCALE_MAX_M` (GP 1/ε, CGP σ per coordinate). A failure here
    leaves the ledger untouched.

    >>> check_point_amount("cgp", Fraction(1, 10**4))
    >>> check_point_amount("cgp", Fraction(1, 10**20))
    Traceback (most recent call last):
    ...
    gpframe.errors.InvalidInputError: rho=1e-20 per point gives noise of 7.08e+09 m, ...
    """
    label = name or ("eps" if kind == "gp" else "rho")
    try:
        _checked_point_amount(kind, part, label, Fraction(scale_max))
    except TypeError:  # an unhashable amount (not a Fraction): checked without the cache
        _checked_point_amount.__wrapped__(kind, part, label, Fraction(scale_max))


@functools.lru_cache(maxsize=1024)
def _checked_point_amount(kind: str, part: Fraction, label: str, k: Fraction) -> None:
    """:func:`check_point_amount`, once per (kind, amount, name, scale factor).

    A SQL query checks its one amount in every Arrow batch (hundreds per query), and the
    calibration behind the check is a few dozen ``Fraction`` operations. The check is a pure
    function of public parameters: a refusal raises (and is not cached), a pass returns None.
    """
    from gpframe.mechanisms.calibration import (
        cgp_gaussian,
        check_eps,
        check_rho,
        gp_laplace,
        sqrt_up,
    )

    part = part / k if kind == "gp" else part / (k * k)
    if kind == "gp":
        # the wrapper's own range check: the calibration alone coarsens the lattice without
        # bound, so an ε below 2**-40 would pass it and only fail inside planar_laplace
        check_eps(part, label)
        cal = gp_laplace(part, d=2)
        scale = cal.g / cal.param
    else:
        check_rho(part, label)
        cal = cgp_gaussian(part, d=2)
        scale = sqrt_up(cal.param) * cal.g
    if scale > NOISE_SCALE_MAX_M:
        raise InvalidInputError(
            f"{label}={_fmt(part)} per point gives noise of {float(scale):.3g} m, above the "
            f"supported maximum {float(NOISE_SCALE_MAX_M):g} m (the size of the Earth): the "
            f"released points would carry no location at all. Raise {label} (or, with "
            "per='user', split the amount over fewer points). Nothing was charged."
        )


def split_charges(charges: Sequence[Fraction], counts: NDArray[np.integer]) -> list[Fraction]:
    """Per-point charge of each user (charge / n; 0 for n = 0), computed once per distinct pair.

    >>> split_charges([Fraction(3, 10), Fraction(3, 10)], np.array([3, 3]))
    [Fraction(1, 10), Fraction(1, 10)]
    """
    cache: dict[tuple[int, int], Fraction] = {}
    out = []
    for c, n in zip(charges, counts, strict=True):
        key = (id(c), int(n))
        v = cache.get(key)
        if v is None:
            v = cache[key] = c / int(n) if n else Fraction(0)
        out.append(v)
    return out


def group_rows(
    codes: NDArray[np.integer], n_users: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Row counts per user and a stable order that puts each user's rows together.

    Parameters
    ----------
    codes : ndarray of int, shape (N,)
        The user code (0 .. n_users-1) of each row, e.g. from ``pandas.factorize``.
    n_users : int
        Number of distinct users.

    Returns
    -------
    counts : ndarray of int64, shape (n_users,)
    order : ndarray of int64, shape (N,)
        Row positions sorted by user, input order kept within a user.

    Examples
    --------
    >>> counts, order = group_rows(np.array([1, 0, 1, 1]), 2)
    >>> counts.tolist(), order.tolist()
    ([1, 3], [1, 0, 2, 3])
    """
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.bincount(codes, minlength=n_users).astype(np.int64)
    order = np.argsort(codes, kind="stable").astype(np.int64)
    return counts, order


def allocations(counts: NDArray[np.integer], amount: Fraction, per: str) -> list[Fraction]:
    """Each user's allocation, in the mechanism's units (ε or ρ): what to reserve.

    ``per="user"``: the amount; ``per="point"``: n × amount.

    >>> allocations(np.array([1, 4]), Fraction(1, 10), "user")
    [Fraction(1, 10), Fraction(1, 10)]
    >>> allocations(np.array([1, 4]), Fraction(1, 10), "point")
    [Fraction(1, 10), Fraction(2, 5)]
    """
    if per == "user":
        return [amount] * len(counts)
    return [amount * int(n) for n in counts]


def per_point_amounts(counts: NDArray[np.integer], amount: Fraction, per: str) -> list[Fraction]:
    """Return the ground-unit amount each point of each user is released at.

    ``per="user"`` splits the user's amount over their n points, exactly: n parts of
    ``amount / n`` sum to ``amount``, never more (``docs/operations/privatize.md``; Liang & Yi,
    'Concentrated Geo-Privacy' (2023), Thm. 4.6, Thm. 4.8).

    >>> per_point_amounts(np.array([1, 4]), Fraction(1, 10), "user")
    [Fraction(1, 10), Fraction(1, 40)]
    """
    if per == "user":
        return [amount / int(n) if n > 0 else amount for n in counts]
    return [amount] * len(counts)


def _radius(kind: str, part: Fraction, k: Fraction, beta: float, n: int) -> float:
    """Return the released result's error bound for one per-point amount, over ``n`` points."""
    from gpframe.mechanisms.calibration import cgp_gaussian, gp_laplace, sqrt_up
    from gpframe.mechanisms.tails import gaussian_radius_bound, planar_bound

    if kind == "cgp":
        cal = cgp_gaussian(part / (k * k), d=2)
        return gaussian_radius_bound(beta, sqrt_up(cal.param) * cal.g, cal.g, d=2, n=n)
    cal = gp_laplace(part / k, d=2)
    return planar_bound(beta, cal.g / cal.param, cal.g, d=2, n=n)


def nominal_errors(
    kind: str,
    amount: Fraction,
    per: str,
    counts: NDArray[np.integer],
    beta: float,
    scale_max: float,
    *,
    overall: bool = False,
) -> Any:
    """Each user's error radius (m) before any noise is drawn: the Result's own bound.

    With probability ≥ 1 − β all n points of a user lie within it. The samplers' calibration
    (``docs/noise.md``) gives the noise scale from the per-point amount alone (ρ_pt = ρ/n with
    ``per="user"``, ρ with ``per="point"``, likewise ε_pt, and the projection scale factor),
    and :func:`gpframe.mechanisms.tails.gaussian_radius_bound` / ``planar_bound`` the radius
    with a union bound over the n points: the released result's ``max_error_m``
    (``docs/operations/privatize.md``). ``overall=True``: the one bound over every point of
    every user with a count (the result's ``error``). Reads only the counts; used by the
    preview (``docs/ledger.md``).

    >>> nominal_errors("cgp", Fraction(1, 10**4), "user", np.array([1, 4]), 0.05, 1.0).round(1)
    array([173.3, 419.2])
    """
    c = np.asarray(counts, dtype=np.int64)
    k = _to_fraction(float(scale_max))
    distinct = np.unique(c[c > 0]).tolist()
    if overall:
        total = int(c.sum())
        parts = {amount / n if per == "user" else amount for n in distinct}
        return max((_radius(kind, a, k, beta, total) for a in parts), default=float("nan"))
    out = np.full(c.size, np.nan)
    for n in distinct:
        out[c == n] = _radius(kind, amount / n if per == "user" else amount, k, beta, n)
    return out


def per_note(kind: str, per: str, errors: NDArray[np.float64], counts: NDArray[np.integer]) -> str:
    """One sentence on what ``per`` means for the charge and the error (for the preview)."""
    c = np.asarray(counts)
    med = float(np.median(c)) if c.size else 0.0
    e = errors[np.isfinite(errors)]
    scale = (
        f"; error radius of a user's points from {e.min():.4g} m to {e.max():.4g} m "
        f"(median user, {med:g} points: {float(np.median(e)):.4g} m)"
        if e.size
        else ""
    )
    if per == "user":
        grow = "√n" if kind == "cgp" else "n"
        return (
            "the amount covers all n points of a user (each point at amount/n): the charge is "
            f"the amount whatever n, and the noise grows like {grow}" + scale
        )
    return (
        "each point is released at the full amount (what the SQL function does): the charge "
        "is n × amount per user, the noise per point stays that of one point" + scale
    )


def progress_enabled(progress: bool | None) -> bool:
    """``progress=None`` means on in a terminal or a notebook, off otherwise.

    >>> progress_enabled(False)
    False
    """
    if progress is not None:
        return bool(progress)
    if "ipykernel" in sys.modules:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class PrivatizeArrays:
    """What :func:`privatize_points` returns: noisy points, charges and error bounds.

    Attributes
    ----------
    xy : ndarray, float64, shape (N, 2)
        Noisy points in the projected metres, in input row order; NaN for rows of users that
        were not admitted.
    released : ndarray of bool, shape (N,)
        Which rows carry a released point.
    charges : list of Fraction, length n_users
        Each user's actual charge in ground units of the mechanism's notion (ε or ρ);
        0 for users that were not admitted.
    max_error_m : ndarray, float64, shape (n_users,)
        Per user, the radius all of that user's points stay within w.p. ≥ 1 − β (NaN if not
        admitted), in metres of the projected CRS: the proven lattice bound of
        :func:`gpframe.mechanisms.error_bound` with a union bound over the user's n points
        (continuous forms: CGP √(n ln(n/β)/ρ) for per="user", ``docs/operations/privatize.md``;
        Liang & Yi, 'Concentrated Geo-Privacy' (2023), Thm. 4.8; GP (n/ε)(−W₋₁(−β/(ne)) − 1),
        ``docs/operations/privatize.md``).
    max_error_all_m : float
        The radius that every released point stays within, w.p. ≥ 1 − β (union over all).
    noise_scale_m : ndarray, float64, shape (n_users,)
        The sampled noise scale in metres (``Released.noise["scale"]``): GP 1/ε_noise (the mean
        radius is twice that), CGP σ per coordinate. NaN if not admitted.
    n_calls : int
        How many sampler calls drew the noise (one per distinct per-point amount).
    guarantees : list
        The mechanisms' ``Guarantee`` objects, one per sampler call.
    charge_groups : list of (ndarray of int64, Fraction)
        One entry per sampler call: the user codes it released and the ground-unit charge of
        each of their points (a user's charge is that times its point count). Lets callers
        convert charges to ledger units once per distinct amount instead of once per user.
    """

    xy: NDArray[np.float64]
    released: NDArray[np.bool_]
    charges: list[Fraction]
    max_error_m: NDArray[np.float64]
    max_error_all_m: float
    noise_scale_m: NDArray[np.float64]
    n_calls: int
    guarantees: list[Any] = field(default_factory=list)
    charge_groups: list[tuple[NDArray[np.int64], Fraction]] = field(default_factory=list)


def _to_fraction(x: object) -> Fraction:
    if isinstance(x, Fraction):
        return x
    return Fraction(x)  # type: ignore[arg-type]


def privatize_points(
    xy_m: NDArray[np.float64],
    codes: NDArray[np.integer],
    n_users: int,
    *,
    kind: Literal["gp", "cgp"],
    amount: Fraction,
    per: Literal["user", "point"] = "user",
    admitted: NDArray[np.bool_] | Sequence[bool] | None = None,
    scale_max: float = 1.0,
    beta: float = 0.05,
    rng: Any = None,
    progress: bool | None = False,
    bounds: bool = True,
    n_all: int | None = None,
    n_of: NDArray[np.integer] | None = None,
    threads: int | None = 1,
) -> PrivatizeArrays:
    """Release every point of the admitted users under GP Basic or CGP Basic.

    See ``docs/operations/privatize.md`` and ``docs/noise.md`` (GP Basic, CGP Basic, contract,
    lattice calibration, projection scale, batching); Liang & Yi, 'Concentrated Geo-Privacy' (2023),
    Thm. 4.6, Thm. 4.8.

    Parameters
    ----------
    xy_m : ndarray, float64, shape (N, 2)
        Projected points in metres, finite.
    codes : ndarray of int, shape (N,)
        The user code of each row, in 0 .. n_users-1.
    n_users : int
        Number of users.
    kind : {"gp", "cgp"}
        GP (``amount`` is ε per metre, planar lattice Laplace) or CGP (``amount`` is ρ per m²,
        lattice Gaussian).
    amount : Fraction
        The ε or ρ of the call, exact (read it with :func:`gpframe.accounting.amounts.positive`).
    per : {"user", "point"}
        ``"user"``: each point gets amount/n and the user is charged the amount; ``"point"``:
        each point gets the amount and the user is charged n × amount.
    admitted : array of bool, shape (n_users,), optional
        Users the ledger admitted; the others get no noise, no charge and NaN points.
        Default: everyone.
    scale_max : float
        Largest distance scale factor of the projection over the data (≥ 1 in practice); the
        mechanism runs at ε/scale_max (ρ/scale_max²) per projected metre.
    beta : float
        Failure probability of the reported error bounds, in (0, 1).
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG (tests pass ``gp.testing.seeded_rng``).
    progress : bool or None
        Show a tqdm bar over the sampler calls (None: on in a terminal or notebook).
    bounds : bool
        Compute the error bounds (``False``: ``max_error_m`` and ``max_error_all_m`` stay NaN;
        the SQL path, which has nowhere to report them, skips that work).
    n_all : int, optional
        The number of released points the overall bound ``max_error_all_m`` is a union over
        (default: this call's). A caller that releases one query in several calls (the Dask
        face, one call per partition) passes the query's total, so the bound is the one a
        single call over all the points would give.
    n_of : ndarray of int, shape (n_users,), optional
        Each user's number of points in the whole query (default: the user's rows here). A
        caller that releases one user's points in several calls (the Dask face, a user's rows
        in several partitions) passes the totals, so the amount per point (``per="user"``),
        the error bounds and the charges are those of one call over all the user's points.
    threads : int or None
        Draw a sampler call of many points in row ranges on up to this many threads at once
        (None: :data:`gpframe.mechanisms.row_ranges.THREADS`, by default the machine's cores).
        Only with the OS CSPRNG and at least 65,536 points per range; the released
        distribution, the guarantee and the charges are those of one call
        (:mod:`gpframe.mechanisms.row_ranges`). Default 1: one call.

    Returns
    -------
    PrivatizeArrays

    Notes
    -----
    Noise: GP → ``planar_laplace(points, eps=ε_pt/scale_max)``, mean radius 2·scale_max/ε_pt
    (× 1.00138 for the lattice floor); CGP → ``gaussian_cgp(points, rho=ρ_pt/scale_max²)``,
    σ = scale_max·(1 + √2·g/r_min)/√(2ρ_pt) per coordinate, with ε_pt = ε/n or ε (per user /
    per point), ρ_pt likewise.
    Charge: per user, the sum of its points' ``Released.guarantee.amount`` converted to ground
    units (× scale_max for GP, × scale_max² for CGP): ε (ρ) for ``per="user"``, n × ε for
    ``per="point"``; 0 for users not admitted.
    All noise is drawn in one sampler call per distinct per-point amount (per="point": one call;
    per="user": one per distinct point count), never per row (``docs/noise.md``).

    Examples
    --------
    >>> xy = np.array([[0.0, 0.0], [10.0, 0.0], [500.0, 500.0]])
    >>> out = privatize_points(xy, np.array([0, 0, 1]), 2, kind="cgp",
    ...                        amount=Fraction(1, 10_000), per="user")
    >>> out.charges
    [Fraction(1, 10000), Fraction(1, 10000)]
    >>> out.n_calls             # users with 2 and 1 points: two per-point amounts
    2
    >>> out.xy.shape, bool(out.released.all())
    ((3, 2), True)
    """
    from gpframe.mechanisms import error_bound, gaussian_cgp, planar_laplace
    from gpframe.mechanisms.laplace_mech import scale_warnings_left_out
    from gpframe.mechanisms.row_ranges import release_in_ranges, threads_for

    check_amount(kind, per, amount)
    if not (0.0 < float(beta) < 1.0):
        raise InvalidInputError(f"beta={beta!r} must be in (0, 1). Nothing was charged.")
    xy = np.asarray(xy_m, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.int64)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] != codes.shape[0]:
        raise InvalidInputError(
            f"xy_m must have shape (N, 2) matching codes (N,), got {xy.shape} and {codes.shape}. "
            "Nothing was charged."
        )
    k = _to_fraction(float(scale_max))
    if not (k > 0 and math.isfinite(scale_max)):
        raise InvalidInputError(
            f"scale_max={scale_max!r} must be finite and > 0. Nothing was charged."
        )
    # rows already grouped by user (codes ascending, as factorize gives one-point users): the
    # stable order is the identity, so a call over every row needs no gather nor scatter
    # codes 0..n_users-1 in order (one row per user): strictly increasing between those ends
    one_each = (
        codes.size == n_users > 0 and int(codes[0]) == 0 and int(codes[-1]) == n_users - 1
        and (codes.size < 2 or bool((codes[1:] > codes[:-1]).all()))
    )  # fmt: skip
    ident = one_each or codes.size < 2 or bool((codes[1:] >= codes[:-1]).all())
    order: NDArray[np.int64] | None = None  # the identity when ident: never materialised
    if one_each:
        rows_here = np.ones(n_users, dtype=np.int64)
    elif ident:
        rows_here = np.bincount(codes, minlength=n_users).astype(np.int64, copy=False)
    else:
        rows_here, order = group_rows(codes, n_users)
    counts = rows_here if n_of is None else np.asarray(n_of, dtype=np.int64)
    if counts.shape != (n_users,) or bool((counts < rows_here).any()):
        raise GpframeInternalError("n_of must hold each user's total points (>= rows here).")
    adm = np.ones(n_users, dtype=bool) if admitted is None else np.asarray(admitted, dtype=bool)
    if adm.shape != (n_users,):
        raise GpframeInternalError(f"admitted has shape {adm.shape}, expected ({n_users},).")

    out: NDArray[np.float64] | None = None  # NaN rows unless released (made when needed)
    released = np.zeros(xy.shape[0], dtype=bool)
    charge_parts: list[tuple[NDArray[np.int64], Fraction]] = []  # (users, each one's charge)
    max_err = np.full(n_users, np.nan)
    scale_m = np.full(n_users, np.nan)
    guarantees: list[Any] = []
    charge_groups: list[tuple[NDArray[np.int64], Fraction]] = []

    # Users with the same per-point amount share one sampler call: with per="point" that is
    # everybody, with per="user" one call per distinct point count. Never one call per row:
    # a single-sample call leaks its noise through its run time (docs/noise.md).
    # Grouping is vectorised (no per-user Python): a group's rows are the positions of the
    # stable by-user order whose user is in the group, i.e. users ascending, rows in input
    # order within a user.
    live = adm & (rows_here > 0)
    # the key of a user's sampler call: its point count (per="user"), else one call for all
    keys = _distinct(counts[live]) if per == "user" else ([0] if live.any() else [])
    sorted_codes = codes if order is None else codes[order]
    iterator: Any = keys
    if progress_enabled(progress) and len(keys) > 1:
        from tqdm.auto import tqdm

        iterator = tqdm(keys, desc=f"privatize ({kind})", unit="call", leave=False)

    n_calls = 0
    releases: list[Any] = []
    for key in iterator:
        members = live & (counts == key) if per == "user" else live
        whole = bool(members.all())  # every user (per="point" with all admitted): every row
        in_order = whole and ident  # rows is 0..N-1: the points and the output as they are
        rows: NDArray[np.int64] | None = None  # None: in_order
        if not in_order:
            chosen = members[sorted_codes]
            rows = np.flatnonzero(chosen) if order is None else order[chosen]
        part = amount / int(key) if per == "user" else amount
        # callers preflight this before reserving; repeated here so that a direct call never
        # draws noise that cannot be released
        check_point_amount(kind, part, scale_max=k)
        # the sampler warns about an implausible noise scale once per call, i.e. once per
        # distinct point count: those warnings are left out here (in this thread only) and
        # summed up in one below
        with scale_warnings_left_out():
            pts = xy if in_order else xy[rows]
            workers = 1 if threads == 1 else threads_for(rng, len(pts), threads)
            if kind == "gp":
                sample = functools.partial(planar_laplace, eps=part / k, rng=rng)
                to_ground = k
            else:
                sample = functools.partial(gaussian_cgp, rho=part / (k * k), rng=rng)
                to_ground = k * k
            rel = release_in_ranges(sample, pts, workers)
        n_calls += 1
        guarantees.append(rel.guarantee)
        if rel.guarantee.kind != kind:
            raise GpframeInternalError(
                f"privatize asked for a {kind} release and got a {rel.guarantee.kind} guarantee."
            )
        point_charge = _to_fraction(rel.guarantee.amount) * to_ground
        if point_charge > part:
            raise GpframeInternalError(
                f"a point's guarantee {float(point_charge)!r} exceeds its share {float(part)!r}."
            )
        if in_order:
            # this call released every row: its own fresh array (rel stays local), no copy
            out = np.asarray(rel.values, dtype=np.float64)
            released[:] = True
        else:
            if out is None:
                out = np.full(xy.shape, np.nan, dtype=np.float64)
            out[rows] = np.asarray(rel, dtype=np.float64)
            released[rows] = True
        # made after the draw: one array of n_users fewer at the sampler's peak
        users_arr = np.arange(n_users, dtype=np.int64) if whole else np.flatnonzero(members)
        charge_groups.append((users_arr, point_charge))
        # Error bounds from the noise actually sampled (mechanisms.tails), union over a user's
        # n points: every point of the user is within the bound with probability >= 1 - beta.
        # Charges: n points at point_charge each; one Fraction per distinct n.
        # every user (users_arr is 0..n_users-1): whole-array writes instead of scattered ones
        at: Any = slice(None) if whole else users_arr
        n_u = counts if whole else counts[users_arr]
        distinct_n = _distinct(n_u)
        for n in distinct_n:
            one = len(distinct_n) == 1
            sel = users_arr if one else users_arr[n_u == n]
            if bounds:
                max_err[at if one else sel] = error_bound(rel, beta, n=int(n))
            charge_parts.append((sel, point_charge * int(n)))
        scale_m[at] = float(rel.noise["scale"])
        releases.append(rel)

    _warn_scales(scale_m, kind, per)

    # The overall bound: a union bound over every released point of every user (β/N each).
    n_released = int(released.sum())
    all_bounds = float("nan")
    if n_released and bounds:
        n_union = n_released if n_all is None else max(int(n_all), n_released)
        all_bounds = max(error_bound(rel, beta, n=n_union) for rel in releases)
    return PrivatizeArrays(
        xy=np.full(xy.shape, np.nan, dtype=np.float64) if out is None else out,
        released=released,
        charges=_charge_list(n_users, charge_parts),
        max_error_m=max_err,
        max_error_all_m=all_bounds,
        noise_scale_m=scale_m,
        n_calls=n_calls,
        guarantees=guarantees,
        charge_groups=charge_groups,
    )


def _charge_list(n_users: int, parts: list[tuple[NDArray[np.int64], Fraction]]) -> list[Fraction]:
    """Each user's charge (0 for users in no part); users of one part share one Fraction object.

    >>> _charge_list(3, [(np.array([2]), Fraction(1, 2))])
    [Fraction(0, 1), Fraction(0, 1), Fraction(1, 2)]
    """
    if len(parts) == 1 and parts[0][0].size == n_users:
        # every user in one part (users are distinct): one list, no object array of 10^6 slots
        return [parts[0][1]] * n_users
    arr = np.full(n_users, Fraction(0), dtype=object)
    for users_arr, charge in parts:
        arr[users_arr] = charge
    return arr.tolist()


def _distinct(a: NDArray[np.int64]) -> list[int]:
    """``np.unique(a).tolist()``, without the sort when all entries are equal (the usual case)."""
    if a.size and int(a.min()) == int(a.max()):
        return [int(a[0])]
    return [int(v) for v in np.unique(a).tolist()]


def _warn_scales(scale_m: NDArray[np.float64], kind: str, per: str) -> None:
    """Warn once per call when some users' noise scale is outside [1 m, 100 km].

    The same test as the samplers' (``docs/noise.md``), over all users of the call: one warning
    with how many users and the range of their scales, instead of one per sampler call.
    """
    from gpframe.geo import _stacklevel_outside_gpframe
    from gpframe.mechanisms.laplace_mech import SCALE_WARN_HIGH, SCALE_WARN_LOW

    if scale_m.size:  # two NaN-skipping reductions: most calls are inside the range, no copy
        lo, hi = np.fmin.reduce(scale_m), np.fmax.reduce(scale_m)
        if lo >= float(SCALE_WARN_LOW) and hi <= float(SCALE_WARN_HIGH):  # all NaN: False
            return
    s = scale_m[np.isfinite(scale_m)]
    if not s.size:
        return
    low, high = s[s < float(SCALE_WARN_LOW)], s[s > float(SCALE_WARN_HIGH)]
    what = "planar Laplace" if kind == "gp" else "Gaussian"

    def span(v: NDArray[np.float64], unit: float, fmt: str, name: str) -> str:
        lo, hi = format(v.min() / unit, fmt), format(v.max() / unit, fmt)
        return f"{lo} {name}" if lo == hi else f"{lo} to {hi} {name}"

    parts = []
    if low.size:
        parts.append(
            f"below 1 m for {low.size} of {s.size} users ({span(low, 1.0, '.3g', 'm')}): "
            "their released locations are almost exact"
        )
    if high.size:
        parts.append(
            f"above 100 km for {high.size} of {s.size} users ({span(high, 1000.0, '.4g', 'km')}): "
            "their released locations carry little information"
        )
    if not parts:
        return
    split = (
        " With per='user' a user's amount is split over their points, so users with more "
        "points get more noise."
        if per == "user" and high.size
        else ""
    )
    warnings.warn(
        f"the {what} noise scale is " + "; ".join(parts) + ". Check the budget's units (eps per "
        f"metre, rho per square metre).{split}",
        GpframeWarning,
        stacklevel=_stacklevel_outside_gpframe(),
    )


def make_privatize_result(
    *,
    kind: str,
    amount: Fraction,
    per: str,
    beta: float,
    users: Any,
    counts: NDArray[np.integer],
    admitted: NDArray[np.bool_],
    charges: Sequence[Fraction],
    out: PrivatizeArrays,
    query_id: str,
    fkind: str,
    projected: Any,
    allocations: Sequence[Fraction] | None = None,
) -> Any:
    """Build the :class:`gpframe.results.PrivatizeResult` of one privatize call.

    ``value`` is the (N, 2) array of released points in projected metres (NaN rows for excluded
    users); ``error`` the radius every released point stays within w.p. ≥ 1 − β; ``charges``
    the actual per-user charges in the filter's units.
    """
    import pandas as pd

    from gpframe.results import PrivatizeResult

    ids = np.asarray(users)
    if ids.dtype.kind not in "iu":  # int64 ids index the Result as they are (no int per user)
        ids = ids.astype(object)
    adm = np.asarray(admitted, dtype=bool) & (np.asarray(counts) > 0)
    every = bool(adm.all())  # everyone admitted (the usual case): no masked copies
    # the users' own Index when everyone is in it (an Index is immutable: shared, not copied)
    same = every and isinstance(users, pd.Index) and users.dtype == ids.dtype
    index = users if same else pd.Index(ids if every else ids[adm])
    # float(Fraction) per user is slow; callers may pass floats already (same values). _floats
    # returns a fresh array, so the Series may own it (pandas copies by default)
    charged = pd.Series(_floats(charges, adm), index=index, copy=False)
    alloc = None
    if allocations is not None:
        alloc = pd.Series(_floats(allocations, adm), index=index, copy=False)
    max_err = np.asarray(out.max_error_m, dtype=np.float64)
    g = None
    params = {
        ("eps" if kind == "gp" else "rho"): float(amount),
        "per": per,
        "beta": beta,
        "n_points": int(np.sum(counts)),
        "crs_m": projected.crs_m.to_string(),
        "scale_max": float(projected.scale_max),
        "noise_inflation": float(projected.noise_inflation),
        "sampler_calls": out.n_calls,
    }
    if g is not None:
        params["g_m"] = g
    # the floor of the guarantee: 1 m unless a very coarse noise scale raised it (docs/noise.md)
    floors = [
        float(g.metric[1])
        for g in out.guarantees
        if isinstance(g.metric, tuple) and g.metric[0] == "floor"
    ]
    r_min = max(floors, default=1.0)
    return PrivatizeResult(
        value=out.xy,
        error=None if math.isnan(out.max_error_all_m) else float(out.max_error_all_m),
        confidence=1.0 - beta,
        mechanism="planar_laplace" if kind == "gp" else "gaussian_cgp",
        params=params,
        kind=fkind,
        metric=("floor", r_min),
        r_min=r_min,
        charges=charged,
        max_error_m=pd.Series(
            max_err if every else max_err[adm], index=index, copy=None if every else False
        ),  # a view of ``out``'s: copied
        allocations=alloc,
        excluded=ids[~np.asarray(admitted, dtype=bool) & (np.asarray(counts) > 0)].tolist(),
        query_id=str(query_id),
        spec="docs/operations/privatize.md and docs/noise.md; Liang & Yi, 'Concentrated "
        "Geo-Privacy' (2023), Thm. 4.6, Thm. 4.8",
    )


def _floats(values: Sequence[Any], mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    """``values[mask]`` as float64; an object array of Fractions converts once per distinct one."""
    arr = np.asarray(values)
    if arr.dtype != object:
        return arr.astype(np.float64) if mask.all() else arr.astype(np.float64)[mask]
    sel = arr[mask]
    memo: dict[int, float] = {}
    # callers share one Fraction object among the users of one amount: convert per object
    return np.array(
        [memo[i] if (i := id(v)) in memo else memo.setdefault(i, float(v)) for v in sel],
        dtype=np.float64,
    )
