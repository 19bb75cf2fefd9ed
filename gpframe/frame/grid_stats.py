"""The pandas / geopandas face of ``grid_stats``: per-H3-cell private mean and variance.

See ``docs/operations/grid_stats.md`` and ``docs/noise.md`` (noise parameters and charges, exact
statistics). The accessor method ``df.geopriv(session, user=...).grid_stats(value=..., bounds=(L,
U), epsilon=..., cells=..., occupancy="public")`` delegates to :func:`grid_stats` with the bound
:class:`~gpframe.frame.accessor.GeoPriv` object.

**What is protected.** This mechanism follows the paper's model (``docs/operations/grid_stats.md``):
the *occupancy* — which users have samples in which cells, and how many — is **public**, and only
the sample **values** are protected (user-level DP under "replace one user's values"). The caller
must say so: ``occupancy="public"``, or pass the public occupancy table, which is checked against
the data (fail closed on any mismatch). Occupancy derived from private GPS traces is *not* protected
by this mode.

``occupancy="private"`` is the common case where the occupancy itself comes from private data: it
runs standard user-level contribution bounding instead of Clip-User
(:mod:`gpframe.queries.contribution_bounding`): each user keeps at most ``max_cells`` cells and
``max_per_cell`` samples per cell by a data-independent rule, every cell of the public list
``public_cells=`` is released (empty or not), and count, sum and sum of squares get noise
calibrated to those caps. It protects presence and frequency too (add/remove-one-user
neighbours), at the price of noise that does not shrink with a cell's number of users.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import probability
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import with_on_exhausted
from gpframe.queries.clip_user import KAPPA, Occupancy, RecordRows
from gpframe.queries.grid_cells import as_h3 as _as_h3
from gpframe.queries.grid_cells import h3_cells
from gpframe.queries.grid_stats import (
    CLIPS,
    check_cells_argument,
    check_value_column,
    checked_values,
    value_bounds,
)
from gpframe.results.preview import dry

__all__ = ["grid_stats", "h3_cells"]

_NOTHING = "Nothing was charged."
_OCC_HELP = (
    "grid_stats protects the sample values only; its guarantee (docs/operations/grid_stats.md) "
    "holds only if "
    "the occupancy (which users have how many samples in which cells) is public. State it with "
    "occupancy='public', or pass the public occupancy table (columns user, cell, count), which is "
    "checked against the data. If the occupancy comes from private location data (GPS), this mode "
    "gives no protection for where and how often users appear."
)


def _cell_keys(frame: pd.DataFrame, cells: Any, projected: Any) -> np.ndarray:
    check_cells_argument(frame, cells)
    if isinstance(cells, (int, np.integer)):
        return h3_cells(projected, int(cells))
    return _as_h3(frame[cells], f"column {cells!r}")


def _occupancy(
    occupancy: Any, users: np.ndarray, cells: np.ndarray
) -> tuple[Occupancy, RecordRows]:
    """Return the public occupancy (checked against the data) and where each row sits in it."""
    from gpframe.queries.clip_user import occupancy_rows

    data_occ, rows = occupancy_rows(users, cells)
    if isinstance(occupancy, str):
        if occupancy == "public":
            return data_occ, rows
        raise InvalidInputError(
            f"occupancy={occupancy!r} is not 'public', 'private' or a table. "
            + _OCC_HELP
            + f" {_NOTHING}"
        )
    if not isinstance(occupancy, pd.DataFrame):
        raise InvalidInputError(
            f"occupancy={occupancy!r} is missing. " + _OCC_HELP + f" {_NOTHING}"
        )
    from gpframe.queries.grid_occupancy import check_matches, table_occupancy

    # the table equals the data's occupancy array for array, so the rows index it alike
    return check_matches(table_occupancy(occupancy), data_occ), rows


def grid_stats(
    bound: Any,
    *,
    value: str,
    bounds: tuple[float, float],
    epsilon: float | None = None,
    epsilon_per_user: float | None = None,
    epsilon_per_statistic: float | None = None,
    cells: int | str,
    clip: str = "clip-user",
    occupancy: str | pd.DataFrame | None = None,
    clamp: bool = False,
    beta: float = 0.05,
    order_by: str | None = None,
    rng: Any = None,
    public_cells: Any = None,
    max_cells: int | None = None,
    max_per_cell: int | None = None,
    salt: str | None = None,
    kappa: float = KAPPA,
    split: tuple[float, float] | None = None,
    error_cap: float | None = None,
    protect_worst_grid: bool = True,
    rollback_incomplete_stage: bool = False,
    shrink: bool = True,
    progress: bool | None = None,
    on_exhausted: str = "exclude",
    dry_run: bool = False,
) -> Any:
    """Private mean and variance of ``value`` per H3 cell under user-level ε-DP.

    See ``docs/operations/grid_stats.md`` and ``docs/noise.md`` (Laplace release, error bounds,
    charges, Clip-User, release, admission, pseudo-user, public occupancy); Rameshwar & Tandon, 'On
    Improving the Composition Privacy Loss in Differential Privacy for Fixed Estimation Error'
    (2024), Thm. II.1, Prop. II.1, Thm. II.2, Alg. 1, Prop. V.1, eq. (15).

    Parameters
    ----------
    bound : GeoPriv
        The accessor's bound object (frame, session, located points, user column); the points
        are never projected (``bound.located``, not ``bound.projected``).
    value : str
        Numeric column to summarise.
    bounds : (L, U)
        Interval that contains every value (public, chosen without looking at the data).
    epsilon_per_user : float
        The total central ε any one user pays for the call (all cells, all statistics):
        gpframe spends it (``docs/operations/grid_stats.md``; public occupancy:
        :func:`gpframe.queries.grid_user_stats.run_user_grid_stats`; private occupancy:
        :func:`gpframe.queries.grid_user_stats.private_epsilons`). Worst-case charge per user:
        ``epsilon_per_user``.
    epsilon_per_statistic : float
        Central ε per statistic per cell (mean and variance each get ε): worst-case charge per
        user 2ε × Γ′ (public) or 3ε × ``max_cells`` (private).
    epsilon : float
        Former name of ``epsilon_per_statistic``.
    cells : int or str
        H3 resolution, or a column of H3 cells (str or int).
    clip : {"clip-user", "pseudo-user", "none"}
        Suppression before release (``docs/operations/grid_stats.md``).
    occupancy : "public" or DataFrame
        Required acknowledgement that the occupancy is public, or the public table
        (user, cell, count) checked against the data.
    clamp : bool
        Clamp values outside [L, U] (otherwise they are an error).
    beta : float
        Failure probability of each cell's error bounds.
    order_by : str, optional
        Column giving the canonical per-user order of samples (then row position) for the
        pseudo-user cap (``docs/operations/grid_stats.md``); default row position.
    rng : BitSource or None
        Randomness source; None is the OS CSPRNG.
    public_cells : list of H3 cells or shapely geometry, optional
        ``occupancy="private"`` only: the cells to release (H3 str/int), or an area (in the
        frame's input CRS) whose covering H3 cells at resolution ``cells`` are released.
    max_cells, max_per_cell : int, optional
        ``occupancy="private"`` only (required there): the contribution caps per user.
    salt : str, optional
        ``occupancy="private"`` only: key of the public cell-selection hash (default constant).
    kappa, split, error_cap, protect_worst_grid, rollback_incomplete_stage
        Options of Clip-User (:func:`gpframe.queries.clip_user.clip_user_plan`; its defaults).
    shrink : bool
        Per-user total (both occupancies): pull each released mean toward the average of the
        released means, the more the noisier its cell (empirical Bayes, Efron & Morris 1973;
        post-processing of released values, no charge). Lowers the median error when noise is
        large, at the price of a bias toward the other cells; ``mean_error`` widens to stay a
        valid bound. Cells with no noisy mean (public occupancy: left unreleased by the plan)
        get that average with the bound W, and cells with no variance the pooled variance;
        with private occupancy no mean is withheld. ``False`` releases the plain noisy means
        and NaN where nothing was (or, private, nothing useful could be) released
        (``docs/operations/grid_stats.md``).
    progress : bool or None
        tqdm bar over the stages with ``occupancy="public"`` (occupancy, Clip-User plan, release,
        output frame; None: on in a terminal or notebook).

    Returns
    -------
    geopandas.GeoDataFrame
        One row per cell (index: H3 cell as a string), hexagons in the input CRS, with ``mean``,
        ``variance`` (1/r), ``variance_unbiased`` (1/(r−1)), ``mean_error``, ``variance_error``,
        ``n_samples``, ``n_kept``, ``n_suppressed``, ``users``, ``users_kept``, ``m_ub``,
        ``released``. ``attrs["geopriv"]`` holds the :class:`GridStatsResult`, a published view:
        it states the public per-user bound ``spent_at_most`` and names no user; the per-user
        charges and the users left out for lack of budget are the curator's, read from the
        ledger with ``session.report(query_id=result.query_id)``.

    Notes
    -----
    With ``epsilon_per_user=E`` and public occupancy: per cell, weighted per-user averages with
    discrete Laplace noise of scale 2H·max w/(Σw·ε_μ,j) (mean) and H²·max w/(Σw·ε_V,j) (second
    moment), the ε planned from the public occupancy; charge Σ over the user's kept cells of
    ε_μ,j + ε_V,j ≤ E. Output columns ``epsilon_cell``, ``users``, ``users_kept``, ``released``
    (False: not released, no ε: NaN, or with ``shrink`` the pooled centre). With private
    occupancy: the per-statistic form below with
    (ε_n, ε_1, ε_2) = E/``max_cells`` split by ``private_epsilons``, each kept row carrying
    its user's average in the cell (per-user averages, same noise); charge ≤ E.

    Per-statistic form:
    Noise: per cell, discrete Laplace on the lattice 2^(⌊log₂Δ⌋−20) with
    λ = ε/(⌊Δ/g⌋+1), Δ = W·r*/r (mean) and W²·h(r*, r) (variance).
    Charge: ε × 2 × (cells where the user is kept) per user on the central ledger; users whose
    budget cannot cover it are suppressed everywhere and charged nothing.
    Error: |mean − true mean| ≤ W·c/m + scale·ln(2/(β(1+e^{−λ}))) + g/2 + q (both statistics
    jointly with probability ≥ 1 − β per cell; q is the fixed-point step of the exact sums).

    With ``occupancy="private"``: one row per public cell with ``count`` (noisy), ``mean``,
    ``variance``, ``mean_error`` (noise only, against the bounded mean) and ``released``; noise
    λ = ε/p (count) and scales p·H/ε, p·H²/(2ε) (sums, H = W/2); charge ε × 3 × (cells kept,
    at most ``max_cells``) per user (:mod:`gpframe.queries.contribution_bounding`).
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        args = dict(locals())
        from gpframe.queries.grid_preview import error_hook

        with error_hook() as error:  # Clip-User plans: the a-priori mean error per cell
            return dry(grid_stats, args, "grid_stats", error=error)
    if on_exhausted != "exclude":  # "raise" (or a bad value, refused there)
        return with_on_exhausted(grid_stats, locals())
    from gpframe.mechanisms.calibration import check_eps
    from gpframe.queries.grid_stats import central_kind, run_grid_stats

    # H3 cells of the lon/lat as given: no metric CRS is chosen, so no extent is too wide
    if getattr(bound, "partition", None) is not None:
        # cells need no metric CRS, so a split would only multiply the charges
        bound._refuse_partition()
    frame, session, p = bound.frame, bound.session, bound.located
    central_kind(session)
    if clip not in CLIPS:
        raise InvalidInputError(
            f"clip={clip!r} is not one of {', '.join(map(repr, CLIPS))}. {_NOTHING}"
        )
    probability(beta)
    name, amount = _which_epsilon(epsilon, epsilon_per_user, epsilon_per_statistic)
    if isinstance(amount, (bool, np.bool_)):  # check_eps takes np.True_ as 1
        raise InvalidInputError(f"{name}={amount!r} must be a number > 0. {_NOTHING}")
    per_user = name == "epsilon_per_user"
    eps = _check_total(amount) if per_user else check_eps(amount, name)
    split_f = _check_split(split, per_user)
    if per_user and clip != "clip-user":
        raise InvalidInputError(
            f"clip={clip!r} applies to the per-statistic form only; epsilon_per_user plans its "
            f"own contribution bounds (docs/operations/grid_stats.md). Drop clip=. {_NOTHING}"
        )
    lo, hi = value_bounds(bounds)
    check_value_column(frame, value)
    x = checked_values(frame, value, lo, hi, clamp=clamp)
    if occupancy is None:
        raise InvalidInputError("occupancy= is required. " + _OCC_HELP + f" {_NOTHING}")
    order = None
    if order_by is not None:
        if order_by not in frame.columns or frame[order_by].isna().any():
            raise InvalidInputError(
                f"order_by={order_by!r} must be a column without missing values. {_NOTHING}"
            )
        order = frame[order_by].to_numpy()
    plan_options = {"kappa": kappa, "split": split_f, "error_cap": error_cap,
                    "protect_worst_grid": protect_worst_grid,
                    "rollback_incomplete_stage": rollback_incomplete_stage}  # fmt: skip
    cell_keys = _cell_keys(frame, cells, p)
    users = np.asarray(p.users)
    if isinstance(occupancy, str) and occupancy == "private":
        return _private(
            bound, x, cell_keys, users, cells=cells, public_cells=public_cells,
            max_cells=max_cells, max_per_cell=max_per_cell, salt=salt, lo=lo, hi=hi, eps=eps,
            beta=beta, order=order, rng=rng, value=value, per_user=per_user, split=split_f,
            shrink=bool(shrink),
        )  # fmt: skip
    if public_cells is not None or max_cells is not None or max_per_cell is not None:
        raise InvalidInputError(
            "public_cells, max_cells and max_per_cell apply to occupancy='private' only. "
            f"{_NOTHING}"
        )
    from gpframe.queries.progress import Stages

    if per_user:
        from gpframe.frame.grid_stats_user import per_user_public

        occ, rows = _occupancy(occupancy, users, cell_keys)
        return per_user_public(
            bound, x, rows, occ=occ, lo=lo,
            hi=hi, total=eps,
            split=split_f, beta=beta, rng=rng, cells=cells, value=value, progress=progress,
            shrink=bool(shrink),
        )  # fmt: skip
    with Stages(progress, "grid_stats", 4) as bar:
        occ, rows = _occupancy(occupancy, users, cell_keys)
        bar.step("occupancy")
        run = run_grid_stats(
            session,
            occ,
            rows.u,
            rows.j,
            x,
            lower=lo,
            upper=hi,
            epsilon=eps,
            clip=clip,
            beta=beta,
            order=order,
            rng=rng,
            plan_options=plan_options,
            params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
            on_stage=bar.step,
            coo=rows.coo,
        )
        bar.step("release")
        from gpframe.queries.grid_clip_output import clip_stats_output

        out = clip_stats_output(session, run, crs_in=p.crs_in, eps=eps, lo=lo, hi=hi,
                                clip=clip, cells=cells, beta=beta)  # fmt: skip
        bar.step("output frame")
    return out


def _which_epsilon(epsilon: Any, per_user: Any, per_statistic: Any) -> tuple[str, Any]:
    """Return the one ε argument given, with its name.

    ``epsilon`` is the former name of the per-statistic form.
    """
    given = [(n, v) for n, v in (("epsilon_per_user", per_user),
                                  ("epsilon_per_statistic", per_statistic),
                                  ("epsilon", epsilon)) if v is not None]  # fmt: skip
    if len(given) != 1:
        raise InvalidInputError(
            "grid_stats needs exactly one of epsilon_per_user= (the total any one user pays "
            "for the call: recommended) or epsilon_per_statistic= (ε for each statistic of "
            f"each cell; 'epsilon=' is its former name); got {[n for n, _ in given] or 'none'}. "
            f"{_NOTHING}"
        )
    return given[0]


#: the largest epsilon_per_user accepted (a total, not one draw: larger than one draw's 100)
_TOTAL_MAX = 10**6


def _check_total(amount: Any) -> Fraction:
    """``epsilon_per_user`` as an exact number in (0, 10⁶]."""
    from gpframe.accounting.amounts import exact

    try:
        e = exact(amount, "epsilon_per_user")
    except InvalidInputError:
        e = None
    if e is None or not 0 < e <= _TOTAL_MAX:
        raise InvalidInputError(
            f"epsilon_per_user={amount!r} must be a number in (0, {_TOTAL_MAX}]: the total ε "
            f"any one user pays for the call, e.g. epsilon_per_user=4. {_NOTHING}"
        )
    return e


def _check_split(split: Any, per_user: bool) -> tuple[Any, Any]:
    """Return the (mean, variance) shares, with each form's default."""
    if split is None:
        return (0.75, 0.25) if per_user else (0.5, 0.5)
    try:
        a, b = split
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"split={split!r} must be a pair (mean share, variance share), e.g. (0.75, 0.25). "
            f"{_NOTHING}"
        ) from None
    if per_user:
        from gpframe.accounting.amounts import exact

        ea, eb = exact(a, "split[0]"), exact(b, "split[1]")
        if not (ea > 0 and eb > 0 and ea + eb == 1):
            raise InvalidInputError(
                f"split={split!r} must be two positive shares (mean, variance) summing to 1, "
                f"e.g. split=(0.75, 0.25). {_NOTHING}"
            )
    return (a, b)


def _private(
    bound: Any,
    x: np.ndarray,
    cell_keys: np.ndarray,
    users: np.ndarray,
    *,
    cells: Any,
    public_cells: Any,
    max_cells: Any,
    max_per_cell: Any,
    salt: Any,
    lo: Fraction,
    hi: Fraction,
    eps: Fraction,
    beta: float,
    order: Any,
    rng: Any,
    value: str,
    per_user: bool = False,
    split: tuple[Any, Any] = (0.75, 0.25),
    shrink: bool = True,
) -> Any:
    """occupancy="private": contribution bounding and release of every public cell.

    With ``per_user`` the total ``eps`` is spent as ``eps``/``max_cells`` per cell, split over
    count, sum and sum of squares by
    :func:`~gpframe.queries.grid_user_stats.private_epsilons` (rounded down to the ledger's
    grid), so no user pays more than ``eps``.
    """
    from gpframe.queries.contribution_bounding import (
        DEFAULT_SALT,
        run_private_grid_stats,
    )

    p = bound.located
    if max_cells is None or max_per_cell is None:
        raise InvalidInputError(
            "occupancy='private' needs max_cells= and max_per_cell= (public caps on how many "
            "cells a user contributes to and how many samples per cell), e.g. max_cells=5, "
            f"max_per_cell=10. {_NOTHING}"
        )
    from gpframe.queries.grid_private import public_cell_keys

    pub = public_cell_keys(public_cells, cells, p.crs_in)
    total = eps
    epsilons = None
    if per_user:
        from gpframe.queries.grid_user_stats import private_epsilons

        epsilons = private_epsilons(bound.session, eps, max_cells, split)
        eps = max(epsilons)  # ignored by the release when epsilons is given
        # every kept row carries its user's average in the cell (pair_averages), so which rows
        # are kept does not change a released value: no spread order (spread_order) is needed
    run = run_private_grid_stats(
        bound.session, users, cell_keys, x, pub, lower=lo, upper=hi, epsilon=eps,
        max_cells=max_cells, max_per_cell=max_per_cell, order=order,
        salt=DEFAULT_SALT if salt is None else salt, beta=beta, rng=rng,
        params={"value": value, "bounds": [float(lo), float(hi)], "cells": str(cells)},
        epsilons=epsilons, user_averages=per_user, shrink=per_user and shrink,
    )  # fmt: skip
    from gpframe.queries.grid_private import private_stats_output

    return private_stats_output(bound.session, run, crs_in=p.crs_in, eps=eps, total=total,
                                epsilons=epsilons, lo=lo, hi=hi, cells=cells,
                                beta=beta, shrink=shrink)  # fmt: skip
