"""Audit cases for grid statistics (issue 6): Clip-User releases and private-occupancy bounding.

Modules: ``gpframe.queries.grid_stats`` (:func:`release_cells`, :func:`run_grid_stats`),
``gpframe.frame.grid_stats`` (:func:`grid_stats`) and
``gpframe.queries.contribution_bounding`` (:func:`release_private_cells`,
:func:`run_private_grid_stats`).

n independent outputs come from n copies of one cell, each with its own users, released in one
call: every cell's release is an independent mechanism run on the same one-cell dataset.

* **Public occupancy** (clip-user.md §1.3, §10): the neighbour changes the *values* of one user
  (the heaviest, counts (3, 1, 2)), occupancy fixed. In D that user's samples are all at U, in D′
  all at L (the §4.3 witness: the clipped means differ by exactly Δ = W·r*/r). Claim: ε per
  statistic per kept cell (the mean is audited; it gets ``epsilon``).
* **Private occupancy** (:mod:`gpframe.queries.contribution_bounding`): the neighbour removes one
  user with all their rows (add/remove relation). The user has more rows than ``max_per_cell``,
  all at U, so the bounded sum moves by exactly p·H. Claim: ε for the released centred sum s̃1.
* **A per-user total** (``epsilon_per_user``, docs/operations/grid_stats.md): public occupancy,
  the same value neighbours as Clip-User; the plan (public) gives the cell's ε_μ, the claim for
  the released (weighted per-user-average) mean. Private occupancy with one ε per statistic
  (count, sum, squares): the add/remove pair above, claim ε_1 for s̃1.
"""

from __future__ import annotations

from contextlib import contextmanager
from fractions import Fraction

import numpy as np

from .engine import Case, Claim
from .registry import AUDITED_MODULES, FAST, SLOW, register

for _m in (
    "gpframe.queries.grid_stats",
    "gpframe.frame.grid_stats",
    "gpframe.queries.contribution_bounding",
    "gpframe.queries.grid_user_stats",
    "gpframe.frame.grid_stats_user",
):
    if _m not in AUDITED_MODULES:
        AUDITED_MODULES.append(_m)

L, U = 0.0, 10.0
EPS = 0.5  # per statistic
COUNTS = (3, 1, 2)  # per user in the cell; user 0 is the one whose values change
OTHERS = (4.0, 7.5, 2.25)  # the other users' (fixed) values


def _cell_values(which: int) -> list[list[float]]:
    """Per user, the values of the one-cell dataset D (which=0) or D′ (which=1)."""
    target = U if which == 0 else L
    return [[target] * COUNTS[0], [OTHERS[0]] * COUNTS[1], [OTHERS[1], OTHERS[2]]]


def _rows(which: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (user, cell index, value) of n copies of the cell, users distinct per copy."""
    vals = _cell_values(which)
    k = len(vals)
    per = [(i, v) for i, vs in enumerate(vals) for v in vs]
    uu = np.array([i for i, _ in per])
    vv = np.array([v for _, v in per])
    cells = np.repeat(np.arange(n), len(per))
    users = np.tile(uu, n) + k * cells
    return users.astype(np.int64), cells.astype(np.int64), np.tile(vv, n)


def _true_mean(which: int) -> float:
    v = [x for vs in _cell_values(which) for x in vs]
    return float(np.mean(v))


def _session():
    import gpframe as gp
    from gpframe.ledger import Session

    return Session(central=gp.DP(epsilon=100.0))


def _occ(users, cells):
    from gpframe.queries.clip_user import occupancy_from_records

    return occupancy_from_records(users, cells)


def release_cells_case(*, tiers=FAST, n_fast=10_000):
    from gpframe.queries.clip_user import clip_user_plan
    from gpframe.queries.grid_stats import exact_cell_stats, release_cells

    def run(which, n, rng):
        users, cells, vals = _rows(which, n)
        occ = _occ(users, cells)
        plan = clip_user_plan(occ, L, U, 2 * EPS, clip="none")
        means, variances, _ = exact_cell_stats(vals, cells, n, Fraction(L), Fraction(U))
        return release_cells(plan, means, variances, beta=0.05, rng=rng).mean

    return register(
        Case(
            name="grid_stats/release_cells/mean/public",
            covers=("gpframe.queries.grid_stats.release_cells",),
            run=run,
            inputs=(0, 1),
            centers=(_true_mean(0), _true_mean(1)),
            claim=Claim.dp(EPS),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=1_000_000,
            tight=True,
        )
    )


def run_grid_stats_case(*, clip="clip-user", tiers=FAST, n_fast=4_000):
    from gpframe.queries.grid_stats import run_grid_stats

    def run(which, n, rng):
        users, cells, vals = _rows(which, n)
        occ = _occ(users, cells)
        rows_u = np.searchsorted(occ.users, users)
        rows_j = np.searchsorted(occ.cells, cells)
        out = run_grid_stats(
            _session(), occ, rows_u, rows_j, vals, lower=Fraction(L), upper=Fraction(U),
            epsilon=Fraction(EPS), clip=clip, rng=rng,
        )  # fmt: skip
        return out.release.mean

    return register(
        Case(
            name=f"grid_stats/run_grid_stats/mean/{clip}",
            covers=("gpframe.queries.grid_stats.run_grid_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_true_mean(0), _true_mean(1)),
            claim=Claim.dp(EPS),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=100_000,
        )
    )


def _h3_cells(n: int) -> np.ndarray:
    import h3

    base = h3.latlng_to_cell(40.7, -74.0, 3)
    kids = sorted(h3.cell_to_children(base, 9))[:n]
    if len(kids) < n:  # pragma: no cover - 7**6 children
        raise ValueError("too many cells for the audit")
    return np.array([h3.str_to_int(c) for c in kids], dtype=np.uint64)


def grid_stats_frame_case(*, tiers=FAST, n_fast=2_000):
    import pandas as pd

    import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)
    from gpframe.frame.grid_stats import grid_stats

    def run(which, n, rng):
        users, cells, vals = _rows(which, n)
        df = pd.DataFrame(
            {"u": users, "cell": _h3_cells(n)[cells], "v": vals, "lon": -74.0, "lat": 40.7}
        )
        b = df.geopriv(
            _session(), user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618"
        )
        out = grid_stats(
            b, value="v", bounds=(L, U), epsilon=EPS, cells="cell", occupancy="public", rng=rng
        )
        return out["mean"].to_numpy()

    return register(
        Case(
            name="grid_stats/frame/mean/public",
            covers=("gpframe.frame.grid_stats.grid_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_true_mean(0), _true_mean(1)),
            claim=Claim.dp(EPS),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=50_000,
        )
    )


# private occupancy: the target user has 4 rows at U, max_per_cell = 2 keeps 2 of them
P_CAP, TARGET_ROWS = 2, 4


def _private_rows(which: int, n: int):
    """n copies of a cell: others (1 row at 4.0, 2 rows at 7.5); D adds the target user."""
    per_u = [[4.0], [7.5, 7.5]] + ([[U] * TARGET_ROWS] if which == 0 else [])
    k = 3
    per = [(i, v) for i, vs in enumerate(per_u) for v in vs]
    uu = np.array([i for i, _ in per])
    vv = np.array([v for _, v in per])
    cells = np.repeat(np.arange(n), len(per))
    return np.tile(uu, n) + k * cells, cells, np.tile(vv, n)


def _private_s1(which: int) -> float:
    from gpframe.queries.grid_stats import value_step

    q = value_step(Fraction(L), Fraction(U))
    T = int(Fraction(U - L) // q)
    c = L + float(T * q / 2)
    kept = [4.0, 7.5, 7.5] + ([U] * P_CAP if which == 0 else [])
    return float(sum(x - c for x in kept))


def release_private_case(*, tiers=FAST, n_fast=20_000):
    from gpframe.queries.contribution_bounding import bound_contributions, release_private_cells

    def run(which, n, rng):
        users, cells, vals = _private_rows(which, n)
        b = bound_contributions(users, cells, np.arange(n), max_cells=1, max_per_cell=P_CAP)
        rel = release_private_cells(
            vals[b.keep], b.row_j[b.keep], n, lower=L, upper=U, epsilon=EPS,
            max_per_cell=P_CAP, rng=rng,
        )  # fmt: skip
        return rel.s1

    return register(
        Case(
            name="grid_stats/release_private_cells/s1/add-remove",
            covers=("gpframe.queries.contribution_bounding.release_private_cells",),
            run=run,
            inputs=(0, 1),
            centers=(_private_s1(0), _private_s1(1)),
            claim=Claim.dp(EPS),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=1_000_000,
            tight=True,
        )
    )


def run_private_case(*, tiers=FAST, n_fast=4_000):
    from gpframe.queries.contribution_bounding import run_private_grid_stats

    def run(which, n, rng):
        users, cells, vals = _private_rows(which, n)
        out = run_private_grid_stats(
            _session(), users, cells, vals, np.arange(n), lower=L, upper=U, epsilon=EPS,
            max_cells=1, max_per_cell=P_CAP, rng=rng,
        )  # fmt: skip
        return out.release.s1

    return register(
        Case(
            name="grid_stats/run_private_grid_stats/s1/add-remove",
            covers=("gpframe.queries.contribution_bounding.run_private_grid_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_private_s1(0), _private_s1(1)),
            claim=Claim.dp(EPS),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=100_000,
        )
    )


# ------------------------------------------------------------------------------------------
# a per-user total

TOTAL = Fraction(2)  # per user; every user is in one cell, so the cell gets all of it


@contextmanager
def _raw_means():
    """Audit the per-cell release before the shrinkage of the means.

    The batching above needs the n copies to be independent mechanisms, and the shrinkage
    (``shrink_means``) pools every released mean; it is post-processing of the released vector
    (Dwork & Roth 2014, Prop. 2.1), so the per-cell release is what carries the claim.
    """
    import gpframe.queries.grid_user_stats as us

    old, us.SHRINK = us.SHRINK, False
    try:
        yield
    finally:
        us.SHRINK = old


def _user_plan(which: int, n: int):
    from gpframe.queries.grid_budget import plan_budget

    users, cells, vals = _rows(which, n)
    occ = _occ(users, cells)
    plan = plan_budget(occ, TOTAL, lower=Fraction(L), upper=Fraction(U), grid=Fraction(1, 10**9))
    return plan, users, cells, vals, occ


def _weighted_mean(which: int) -> float:
    from gpframe.queries.grid_budget import plan_budget

    occ = _occ(*_rows(which, 1)[:2])
    plan = plan_budget(occ, TOTAL, lower=Fraction(L), upper=Fraction(U), grid=Fraction(1, 10**9))
    c = int(plan.weight_cap[0])
    vals = _cell_values(which)
    w = [min(len(v), c) for v in vals]
    return float(sum(wi * np.mean(v) for wi, v in zip(w, vals, strict=True)) / sum(w))


def _user_eps_mu() -> float:
    plan = _user_plan(0, 1)[0]
    return float(plan.eps_mu[0])


def release_user_stats_case(*, tiers=FAST, n_fast=4_000):
    from gpframe.queries.grid_user_stats import release_user_stats

    def run(which, n, rng):
        plan, users, cells, vals, occ = _user_plan(which, n)
        ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
        with _raw_means():
            return release_user_stats(plan, ru, rj, vals, rng=rng).mean

    return register(
        Case(
            name="grid_stats/release_user_stats/mean/public",
            covers=("gpframe.queries.grid_user_stats.release_user_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_weighted_mean(0), _weighted_mean(1)),
            claim=Claim.dp(_user_eps_mu()),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=1_000_000,
        )
    )


def run_user_grid_stats_case(*, tiers=FAST, n_fast=2_000):
    from gpframe.queries.grid_user_stats import run_user_grid_stats

    def run(which, n, rng):
        users, cells, vals = _rows(which, n)
        occ = _occ(users, cells)
        ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
        with _raw_means():
            out = run_user_grid_stats(
                _session(), occ, ru, rj, vals, lower=Fraction(L), upper=Fraction(U), total=TOTAL,
                rng=rng,
            )  # fmt: skip
        return out.release.mean

    return register(
        Case(
            name="grid_stats/run_user_grid_stats/mean/public",
            covers=("gpframe.queries.grid_user_stats.run_user_grid_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_weighted_mean(0), _weighted_mean(1)),
            claim=Claim.dp(_user_eps_mu()),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=100_000,
        )
    )


def grid_stats_per_user_frame_case(*, tiers=FAST, n_fast=1_000):
    import pandas as pd

    import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)
    from gpframe.frame.grid_stats import grid_stats

    def run(which, n, rng):
        users, cells, vals = _rows(which, n)
        df = pd.DataFrame(
            {"u": users, "cell": _h3_cells(n)[cells], "v": vals, "lon": -74.0, "lat": 40.7}
        )
        b = df.geopriv(
            _session(), user="u", lon="lon", lat="lat", crs="EPSG:4326", to_crs="EPSG:32618"
        )
        # the per-cell release carries the claim; the shrinkage is post-processing (_raw_means)
        out = grid_stats(
            b, value="v", bounds=(L, U), epsilon_per_user=float(TOTAL), cells="cell",
            occupancy="public", rng=rng, shrink=False,
        )  # fmt: skip
        return out["mean"].to_numpy()

    return register(
        Case(
            name="grid_stats/frame/mean/public/epsilon_per_user",
            covers=(
                "gpframe.frame.grid_stats.grid_stats",
                "gpframe.frame.grid_stats_user.per_user_public",
            ),
            run=run,
            inputs=(0, 1),
            centers=(_weighted_mean(0), _weighted_mean(1)),
            claim=Claim.dp(_user_eps_mu()),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=50_000,
        )
    )


PRIVATE_EPS = (Fraction(1, 5), Fraction(1, 2), Fraction(3, 10))  # count, s1, s2


def release_private_split_case(*, tiers=FAST, n_fast=20_000):
    from gpframe.queries.contribution_bounding import bound_contributions, release_private_cells

    def run(which, n, rng):
        users, cells, vals = _private_rows(which, n)
        b = bound_contributions(users, cells, np.arange(n), max_cells=1, max_per_cell=P_CAP)
        rel = release_private_cells(
            vals[b.keep], b.row_j[b.keep], n, lower=L, upper=U, epsilon=EPS,
            max_per_cell=P_CAP, rng=rng, epsilons=PRIVATE_EPS,
        )  # fmt: skip
        return rel.s1

    return register(
        Case(
            name="grid_stats/release_private_cells/s1/add-remove/epsilons",
            covers=("gpframe.queries.contribution_bounding.release_private_cells",),
            run=run,
            inputs=(0, 1),
            centers=(_private_s1(0), _private_s1(1)),
            claim=Claim.dp(float(PRIVATE_EPS[1])),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=1_000_000,
            tight=True,
        )
    )


def release_private_averages_case(*, tiers=FAST, n_fast=20_000):
    """Per-user averages (each kept row carries its user's cell average): same s̃1 claim."""
    from gpframe.queries.contribution_bounding import (
        bound_contributions,
        pair_averages,
        release_private_cells,
    )

    def run(which, n, rng):
        users, cells, vals = _private_rows(which, n)
        b = bound_contributions(users, cells, np.arange(n), max_cells=1, max_per_cell=P_CAP)
        k, d2 = pair_averages(b, vals, L, U)
        rel = release_private_cells(
            vals[b.keep], b.row_j[b.keep], n, lower=L, upper=U, epsilon=EPS,
            max_per_cell=P_CAP, rng=rng, epsilons=PRIVATE_EPS,
            moments=(k[b.keep], d2[b.keep]), shrink=True,
        )  # fmt: skip
        return rel.s1

    return register(
        Case(
            name="grid_stats/release_private_cells/s1/add-remove/user-averages",
            covers=(
                "gpframe.queries.contribution_bounding.release_private_cells",
                "gpframe.queries.contribution_bounding.pair_averages",
            ),
            run=run,
            inputs=(0, 1),
            centers=(_private_s1(0), _private_s1(1)),
            claim=Claim.dp(float(PRIVATE_EPS[1])),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=1_000_000,
            tight=True,
        )
    )


def run_private_averages_case(*, tiers=FAST, n_fast=4_000):
    from gpframe.queries.contribution_bounding import run_private_grid_stats

    def run(which, n, rng):
        users, cells, vals = _private_rows(which, n)
        out = run_private_grid_stats(
            _session(), users, cells, vals, np.arange(n), lower=L, upper=U, epsilon=EPS,
            max_cells=1, max_per_cell=P_CAP, rng=rng, epsilons=PRIVATE_EPS,
            user_averages=True, shrink=True,
        )  # fmt: skip
        return out.release.s1

    return register(
        Case(
            name="grid_stats/run_private_grid_stats/s1/add-remove/user-averages",
            covers=("gpframe.queries.contribution_bounding.run_private_grid_stats",),
            run=run,
            inputs=(0, 1),
            centers=(_private_s1(0), _private_s1(1)),
            claim=Claim.dp(float(PRIVATE_EPS[1])),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=100_000,
        )
    )


release_cells_case()
run_grid_stats_case()
grid_stats_frame_case()
release_private_case()
run_private_case()
run_grid_stats_case(clip="pseudo-user", tiers=SLOW)
release_user_stats_case()
run_user_grid_stats_case()
grid_stats_per_user_frame_case()
release_private_split_case()
release_private_averages_case()
run_private_averages_case()
