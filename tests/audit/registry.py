"""The audit registry: every randomised public mechanism, its claim and its neighbouring pairs.

Adding a case is one call to :func:`register` (or one of the builders below) in this file:

    register(Case(
        name="range_count/gp/eps0.05",
        covers=("gpframe.queries.range_count",),
        run=lambda x, n, rng: range_count(..., rng=rng),   # n independent outputs on input x
        inputs=(x, x_prime),                                # the neighbouring pair
        claim=Claim.gp(0.05, d=dist(x, x_prime)),           # or Claim.dp / Claim.cgp / Claim.zcdp
        centers=(x, x_prime),                               # output-space positions, or
        featurizers=(discrete_featurizer(code_fn),),        # ... discrete codes for the output
        tiers=frozenset({"fast", "slow"}),
    ))

``covers`` lists the dotted names of the public functions a case exercises; ``test_registry``
fails when a public randomised function (one taking ``rng``) of a covered module is in no case.
"""

from __future__ import annotations

import functools
import warnings
from fractions import Fraction
from typing import Any

import numpy as np

from .engine import Case, Claim

__all__ = [
    "AUDITED_MODULES",
    "CASES",
    "NOT_MECHANISMS",
    "THIN_WRAPPERS",
    "by_tier",
    "register",
    "utm_pair",
]

#: modules whose public randomised functions must all be in the registry
AUDITED_MODULES = [
    "gpframe.mechanisms",
    "gpframe.queries",
    "gpframe.queries.privatize",
    # where the release wrappers are defined (test_registry matches functions by identity, so
    # the cases' gpframe.mechanisms.<name> covers them here too)
    "gpframe.mechanisms.laplace_mech",
    "gpframe.mechanisms.laplace_rows",
    "gpframe.mechanisms.gaussian_mech",
    "gpframe.mechanisms.svt",
    "gpframe.mechanisms.selection.above_threshold",
    "gpframe.mechanisms.selection.gaussian_at",
    "gpframe.mechanisms.selection.rnm",
    "gpframe.mechanisms.selection.subsample",
    "gpframe.mechanisms.selection.normal_exact",
]

#: public names of audited modules that take ``rng`` but release nothing private (with reasons)
NOT_MECHANISMS: dict[str, str] = {}

#: modules that draw noise or charge a ledger but are not audited here, each with the reason:
#: they only pass an allocation the ledger reserved (or the noise of a function that *is*
#: audited) through, and where their part is tested instead. ``test_registry`` finds every
#: module of ``gpframe/`` that takes ``rng``, resolves a randomness source, or reserves / charges
#: a Session, and fails unless it is in ``AUDITED_MODULES`` or here.
_UDF = (
    "a DuckDB UDF registration: each Arrow batch reserves, runs {fn} (audited) on the admitted "
    "users with the reserved allocation and charges its returned amounts; charges equal the "
    "Python path's (tests/integration/{test}) and the charging path is tortured in "
    "tests/integration/guarantees/test_charge_before_release_ops.py"
)
THIN_WRAPPERS: dict[str, str] = {
    "gpframe.mechanisms.row_ranges": (
        "release_in_ranges runs an audited release wrapper (gaussian_cgp, planar_laplace) on row "
        "ranges of one call's points on several threads, only with the OS CSPRNG (threads_for "
        "gives 1 for a seeded source), and refuses ranges whose noise parameters or guarantees "
        "differ; its resolve_rng call only reads the source's seeded flag. Law (sigma, mean "
        "radius), lattice values, guarantee and charges: "
        "tests/unit/mechanisms/test_row_ranges.py"
    ),
    "gpframe.frame.accessor": (
        "GeoPriv.privatize reserves and calls gpframe.queries.privatize.privatize_points "
        "(audited) with the reserved amount and the projection's scale_max; the query methods "
        "delegate to the gpframe.frame modules; with partition= it reserves once and calls "
        "privatize_points per part with that part's scale_max. Charging: frame/test_accessor.py, "
        "frame/test_partition.py, "
        "guarantees/test_charge_before_release.py"
    ),
    "gpframe.queries.range_count_parts": (
        "range_count over a split by a public column: one reservation, then "
        "gpframe.queries.range_count.range_count_arrays (audited) on each part with the reserved "
        "allocations, the part's metres and its projection's scale_max, at beta / k per part. "
        "Charges and query id: tests/integration/frame/test_partition.py"
    ),
    "gpframe.frame.knn_parts": (
        "knn and convex_hull over a split by a public column: one reservation (the amount once "
        "per part a user has rows in), then gpframe.queries.knn.knn_indices or "
        "gpframe.queries.hull.private_hulls (audited) on each part with the reserved amount, "
        "the part's metres and its projection's scale_max. Charges and query id: "
        "tests/integration/frame/test_partition.py"
    ),
    "gpframe.dask.accessor": (
        "ddf.geopriv: checks the column roles on the frame's meta and delegates to "
        "gpframe.dask.privatize; draws and charges nothing itself"
    ),
    "gpframe.dask.privatize": (
        "the Dask face's privatize: one reservation through the driver, then "
        "gpframe.queries.privatize.privatize_points (audited) on each partition with the "
        "reserved amount, each user's total points over all partitions (n_of=), the "
        "projection's scale_max and the partition's own source; charges from the returned "
        "guarantees as the pandas face. Charges, noise law (KS) and faults: "
        "tests/integration/dask/test_privatize.py, test_faults.py, test_one_point.py"
    ),
    "gpframe.dask.range_count": (
        "the Dask face's range_count: one reservation per region through the driver, then "
        "gpframe.queries.range_count.range_count_arrays (audited) on each partition's users with "
        "the reserved allocations and the query's union-bound n (a child stream per region and "
        "partition); counts and charges summed on the client. "
        "tests/integration/dask/test_range_count.py"
    ),
    "gpframe.dask.kde": (
        "the Dask face's kde_raster: the reservation, checks and charge of "
        "gpframe.queries.kde.raster_from_points (through the driver), with the release done by "
        "gpframe.queries.kde.privatize_once (audited through kde_raster_arrays) on each "
        "partition; the raster is post-processing on the client. tests/integration/dask/test_kde.py"
    ),
    "gpframe.dask.kde_points": (
        "the Dask face's kde at query points: one reservation per query point through the "
        "driver, then gpframe.queries.kde.kde_point (audited) on each partition's users with the "
        "reserved allocations, the query's union-bound n and a child stream per (point, "
        "partition); sums and charges on the client. method='pt': one reservation, "
        "gpframe.queries.kde.privatize_once (audited) on each partition, then "
        "gpframe.queries.kde.kde_points_pt's evaluation of the released points on the client. "
        "tests/integration/dask/test_kde.py"
    ),
    "gpframe.dask.knn": (
        "the Dask face's knn: one reservation through the driver, then "
        "gpframe.queries.knn.knn_indices (audited) on each partition's users with the reserved "
        "amount and the projection's scale_max; charges as the pandas face. "
        "tests/integration/dask/test_knn.py"
    ),
    "gpframe.dask.nearest": (
        "the Dask face's nearest_users: one reservation through the driver, then "
        "gpframe.queries.nearest.nearest_rounds (audited) on the client with a draw that runs "
        "gpframe.queries.elimination.release_part (audited) on each partition's remaining users "
        "at the round's part, with a child stream per (call, partition); only released values "
        "reach the client. Charges as the pandas face: tests/integration/dask/test_nearest.py"
    ),
    "gpframe.dask.hull": (
        "the Dask face's convex_hull: one reservation through the driver, then "
        "gpframe.queries.hull.private_hulls (audited) on each partition's users with the "
        "reserved amount and the projection's scale_max; charges as the pandas face. Same hulls "
        "as the pandas face per partition with the same seeded stream: "
        "tests/integration/dask/test_knn.py"
    ),
    "gpframe.dask.grid_stats": (
        "the Dask face's grid_stats(epsilon_per_user=, occupancy='public'; the other forms: "
        "gpframe.dask.grid_clip, gpframe.dask.grid_private): each partition "
        "reduces its rows to exact int64 per-(user, cell) sums (no noise), the client adds them "
        "and calls gpframe.queries.grid_user_stats.run_user_grid_stats (audited) with them; the "
        "noise is drawn on the client. Same values and charges as the pandas face with the same "
        "seeded source: tests/integration/dask/test_grid_stats.py"
    ),
    "gpframe.dask.grid_clip": (
        "the Dask face's grid_stats(epsilon_per_statistic=, occupancy='public'): each partition "
        "(whole users, input order) counts its (user, cell) pairs, then returns exact int64 "
        "per-cell sums of the rows the plan keeps (no noise); the client calls "
        "gpframe.queries.grid_stats.run_grid_stats (audited) with them, the noise drawn on the "
        "client. Same values and charges as the pandas face with the same seeded source: "
        "tests/integration/dask/test_grid_stats.py"
    ),
    "gpframe.dask.grid_private": (
        "the Dask face's grid_stats(occupancy='private'): each partition (whole users, input "
        "order) runs gpframe.queries.contribution_bounding.bound_contributions and returns exact "
        "int64 per-(user, cell) sums of the kept values (no noise); the client calls "
        "gpframe.queries.contribution_bounding.run_private_grid_stats (audited through its "
        "release) with them, the noise drawn on the client. Same values and charges as the "
        "pandas face with the same seeded source: tests/integration/dask/test_grid_stats.py"
    ),
    "gpframe.dask.privatize_parts": (
        "the Dask face's privatize with partition=: one reservation through the driver (the "
        "amount per part a user is in), then gpframe.queries.privatize.privatize_points "
        "(audited) per (partition, part) with the part's scale_max, its own stream and the "
        "part's union-bound n; charges as the pandas face: tests/integration/dask/test_partition.py"
    ),
    "gpframe.dask.range_count_parts": (
        "the Dask face's range_count with partition=: one reservation per region through the "
        "driver, then gpframe.queries.range_count.range_count_arrays (audited, through "
        "gpframe.dask.range_count.count_partition) per (partition, part) at beta / k with the "
        "part's metres, scale_max and union-bound n; charges as the pandas face: "
        "tests/integration/dask/test_partition.py"
    ),
    "gpframe.dask.knn_parts": (
        "the Dask face's knn and convex_hull with partition=: one reservation (the amount once "
        "per part a user is in), then gpframe.queries.knn.knn_indices or "
        "gpframe.queries.hull.private_hulls (audited) per (partition, part) with the part's "
        "scale_max and its own stream; charges as the pandas face: "
        "tests/integration/dask/test_partition.py"
    ),
    "gpframe.dask.partitions": (
        "shuffles on the user column and validates/counts each partition (draws nothing); "
        "spawn_rng gives each partition a fresh secure source or a child test stream"
    ),
    "gpframe.duckdb.udf": (
        "plumbing of the DuckDB UDFs (checked_rng, charge_batch: reserve, run, charge under one "
        "lock); draws nothing itself. Tortured in guarantees/test_charge_before_release*.py"
    ),
    "gpframe.duckdb.register": (
        "gp.duckdb.register: resolves the rng and the CRS once and runs every operation's "
        "register_* (each listed here); draws and charges nothing itself. duckdb/test_register.py"
    ),
    "gpframe.duckdb.privatize": _UDF.format(
        fn="privatize_points (gp_privatize, gp.duckdb.privatize)", test="duckdb/test_privatize.py"
    ),
    "gpframe.duckdb.range_count": _UDF.format(
        fn="range_count_arrays (gp_in_region)", test="duckdb/test_range_count.py"
    ),
    "gpframe.duckdb.kde": _UDF.format(
        fn="kde_point (gp_kde_contribution)", test="frame/test_kde.py"
    ),
    "gpframe.duckdb.knn": _UDF.format(
        fn="knn_indices / private_hulls (gp_knn, gp_convex_hull)", test="duckdb/test_knn.py"
    ),
    "gpframe.duckdb.grid": _UDF.format(
        fn="grid_stats.release_cells (gp_grid_release; clip_user plans, free)",
        test="duckdb/test_grid.py",
    ),
    "gpframe.queries.monitor": (
        "charges the central ledger, then runs the audited selection mechanisms "
        "(LaplaceSVTRun behind laplace_above_threshold, GaussianATRun behind "
        "gaussian_above_threshold, *_report_noisy_max; cases_selection) and laplace_dp / "
        "gaussian_zcdp (audited) with the charged parts; tests/unit/queries/test_monitor.py, "
        "tests/properties/test_monitor_ledger.py"
    ),
    "gpframe.ledger.run": (
        "the driver: reserves, runs the operation's callable (the audited algorithm), refuses "
        "charges above the allocations and commits them; draws nothing itself. "
        "tests/unit/ledger/test_run.py and every operation's charging tests"
    ),
    "gpframe.ledger.session": (
        "the ledger itself: reserves and charges, never draws noise; tests/unit/ledger, "
        "tests/properties/test_ledger_state_machine.py, the torture tests"
    ),
    "gpframe.mechanisms.noise.bits": (
        "the randomness sources (OsRandom, AesCtrRandom, resolve_rng refuses seeded sources "
        "outside tests); tests/unit/mechanisms/noise/test_noise_bits.py"
    ),
    "gpframe.mechanisms.noise.laplace": (
        "exact lattice samplers behind the audited release wrappers; their laws are tested "
        "exactly (pmf, goodness of fit, pinned streams) in tests/unit/mechanisms/noise"
    ),
    "gpframe.mechanisms.noise.laplace_rates": (
        "the exact many-rates discrete Laplace sampler behind the audited laplace_dp_rows; its "
        "law per rate is tested (goodness of fit, forced exact paths, two-sample against "
        "discrete_laplace) in tests/unit/mechanisms/noise/test_noise_rates.py"
    ),
    "gpframe.mechanisms.noise.gaussian": (
        "exact lattice samplers behind the audited release wrappers; their laws are tested "
        "exactly (pmf, goodness of fit, pinned streams) in tests/unit/mechanisms/noise"
    ),
    "gpframe.mechanisms.noise": "re-exports the samplers of gpframe.mechanisms.noise.*",
}

CASES: list[Case] = []

FAST = frozenset({"fast", "slow"})
SLOW = frozenset({"slow"})


def register(case: Case) -> Case:
    """Add ``case`` to the registry (names must be unique)."""
    if any(c.name == case.name for c in CASES):
        raise ValueError(f"duplicate audit case name {case.name!r}")
    CASES.append(case)
    return case


def by_tier(tier: str) -> list[Case]:
    """The cases run in ``tier`` ("fast" or "slow")."""
    return [c for c in CASES if tier in c.tiers]


def _quiet(fn, *args, **kwargs):
    # Location mechanisms warn (GpframeWarning) on noise scales below 1 m; the audit uses such
    # scales on purpose for the r_min-floor cases, and pytest turns warnings into errors.
    from gpframe.errors import GpframeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpframeWarning)
        return fn(*args, **kwargs)


@functools.lru_cache(maxsize=1)
def _pyproj():
    from pyproj import Geod, Proj, Transformer

    return Geod(ellps="WGS84"), Transformer.from_crs(4326, 32631, always_xy=True), Proj(32631)


def utm_pair(
    lat: float, azimuth: float, d: float, lon: float = 5.0
) -> tuple[np.ndarray, np.ndarray, float]:
    """Two points ``d`` ground metres apart (WGS84 geodesic), projected to UTM zone 31N.

    Returns the projected points (metres) and the largest UTM point scale factor k at either, so
    that a mechanism given eps/k is eps-GP per *ground* metre (secure-noise.md §7.4(f)).
    """
    geod, tr, proj = _pyproj()
    lon2, lat2, _ = geod.fwd(lon, lat, azimuth, d)
    a = np.array(tr.transform(lon, lat))
    b = np.array(tr.transform(lon2, lat2))
    k = max(
        proj.get_factors(lon, lat).meridional_scale, proj.get_factors(lon2, lat2).meridional_scale
    )
    return a, b, float(k)


# --------------------------------------------------------------------------------------------
# builders for the release wrappers of gpframe.mechanisms
# --------------------------------------------------------------------------------------------


def _repeat(x: Any, n: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.repeat(x[None, ...], n, axis=0)


def laplace_gp_case(eps: float, d: float, *, tiers=SLOW, lattice_exact=False, tight=False):
    from gpframe.mechanisms import laplace_gp

    # an off-lattice base point, so that the snapping term of §7.4(c2) is exercised
    x0 = 1000.0 if lattice_exact else 1000.123456789
    pair = (x0, x0 + d)

    def run(x, n, rng):
        return _quiet(laplace_gp, _repeat(x, n), eps=eps, lattice_exact=lattice_exact, rng=rng)

    mode = "exact" if lattice_exact else "snap"
    return register(
        Case(
            name=f"laplace_gp/{mode}/eps{eps:g}/d{d:g}",
            covers=("gpframe.mechanisms.laplace_gp",),
            run=run,
            inputs=pair,
            centers=pair,
            claim=Claim.gp(eps, d, None if lattice_exact else 1.0),
            tiers=tiers,
            tight=tight,
            guarantee=("gp", eps),
        )
    )


def planar_case(
    eps: float,
    d: float,
    *,
    lat: float = 45.0,
    azimuth: float = 45.0,
    tiers=SLOW,
    tight=False,
    lattice_exact=False,
):
    """Planar Laplace on a UTM pair d ground metres apart at (lat, azimuth)."""
    from gpframe.mechanisms import planar_laplace

    a, b, k = utm_pair(lat, azimuth, d)
    if lattice_exact:
        g = 2.0**-10
        a, b = np.rint(a / g) * g, np.rint(b / g) * g
    eps_proj = Fraction(eps) / Fraction(k)  # per projected metre: eps per ground metre (§7.4 f)

    def run(x, n, rng):
        return _quiet(
            planar_laplace, _repeat(x, n), eps=eps_proj, lattice_exact=lattice_exact, rng=rng
        )

    mode = "exact" if lattice_exact else "snap"
    d_claim = float(np.linalg.norm(b - a)) / k if lattice_exact else d
    return register(
        Case(
            name=f"planar_laplace/{mode}/eps{eps:g}/d{d:g}/lat{lat:g}/az{azimuth:g}",
            covers=("gpframe.mechanisms.planar_laplace",),
            run=run,
            inputs=(a, b),
            centers=(a, b),
            claim=Claim.gp(eps, d_claim, None if lattice_exact else 1.0),
            tiers=tiers,
            tight=tight,
        )
    )


def laplace_dp_case(epsilon: float, sensitivity: float, *, integer: bool, tiers=SLOW, tight=False):
    """Central Laplace on a sum over users; the neighbour drops one user of maximal contribution."""
    from gpframe.mechanisms import laplace_dp

    if integer:
        users = np.array([2, 1, 0, 3, 1, int(sensitivity)], dtype=np.float64)
    else:
        users = np.array([0.25, 1.5, 0.125, float(sensitivity) * 0.75, float(sensitivity)])
    pair = (users, users[:-1])

    def run(ds, n, rng):
        stat = float(np.sum(ds))
        return laplace_dp(
            np.full(n, stat), sensitivity=sensitivity, epsilon=epsilon, integer=integer, rng=rng
        )

    kind = "int" if integer else "real"
    return register(
        Case(
            name=f"laplace_dp/{kind}/eps{epsilon:g}/sens{sensitivity:g}",
            covers=("gpframe.mechanisms.laplace_dp",),
            run=run,
            inputs=pair,
            centers=(float(np.sum(pair[0])), float(np.sum(pair[1]))),
            claim=Claim.dp(epsilon),
            tiers=tiers,
            tight=tight,
            guarantee=("dp", epsilon),
        )
    )


def laplace_dp_rows_case(epsilon: float, sensitivity: float, *, tiers=SLOW, tight=False):
    """Many rows, each with its own (ε, Δ) in one call; the audited row is every third one.

    Rows 0, 3, 6, ... release the sum of users at (``epsilon``, ``sensitivity``); the rows in
    between carry other parameters (ε/2 at 3Δ, 4ε at Δ/5), so the audited draws come from a call
    that mixes rates, as ``grid_stats`` makes them.
    """
    from gpframe.mechanisms import laplace_dp_rows

    users = np.array([0.25, 1.5, 0.125, float(sensitivity) * 0.75, float(sensitivity)])
    pair = (users, users[:-1])
    eps3 = [epsilon, epsilon / 2, min(4 * epsilon, 100.0)]
    sens3 = [sensitivity, 3 * sensitivity, sensitivity / 5]

    def run(ds, n, rng):
        stat = float(np.sum(ds))
        r = laplace_dp_rows(np.full(3 * n, stat), sensitivity=sens3 * n, epsilon=eps3 * n, rng=rng)
        return r.values[0::3]

    return register(
        Case(
            name=f"laplace_dp_rows/eps{epsilon:g}/sens{sensitivity:g}",
            covers=("gpframe.mechanisms.laplace_dp_rows",),
            run=run,
            inputs=pair,
            centers=(float(np.sum(pair[0])), float(np.sum(pair[1]))),
            claim=Claim.dp(epsilon),
            tiers=tiers,
            tight=tight,
        )
    )


def gaussian_zcdp_case(rho: float, l2: float, *, integer: bool, tiers=SLOW):
    """Central discrete Gaussian on a sum over users; the neighbour drops one user."""
    from gpframe.mechanisms import gaussian_zcdp

    if integer:
        users = np.array([2, 1, 0, 3, 1, int(l2)], dtype=np.float64)
    else:
        users = np.array([0.25, 1.5, 0.125, float(l2)])
    pair = (users, users[:-1])

    def run(ds, n, rng):
        stat = float(np.sum(ds))
        return gaussian_zcdp(np.full(n, stat), l2_sensitivity=l2, rho=rho, integer=integer, rng=rng)

    kind = "int" if integer else "real"
    return register(
        Case(
            name=f"gaussian_zcdp/{kind}/rho{rho:g}/sens{l2:g}",
            covers=("gpframe.mechanisms.gaussian_zcdp",),
            run=run,
            inputs=pair,
            centers=(float(np.sum(pair[0])), float(np.sum(pair[1]))),
            claim=Claim.zcdp(rho),
            tiers=tiers,
            guarantee=("zcdp", rho),
            meta={"gaussian_curve": True},  # ref_ratio is asserted (engine.failed)
        )
    )


def gaussian_cgp_case(rho: float, d: float, *, dim: int = 2, azimuth: float = 45.0, tiers=SLOW):
    """Lattice Gaussian on a point (dim 2, UTM pair at 45°N) or a 1-D value, pair d metres apart."""
    from gpframe.mechanisms import gaussian_cgp

    if dim == 1:
        a, b = np.array(500.123456789), np.array(500.123456789 + d)
    else:
        a, b, k = utm_pair(45.0, azimuth, d)
        # CGP per ground metre: rho / k² per projected square metre
    scale = 1.0 if dim == 1 else k
    rho_proj = Fraction(rho) / Fraction(scale) ** 2

    def run(x, n, rng):
        return _quiet(gaussian_cgp, _repeat(x, n), rho=rho_proj, rng=rng)

    return register(
        Case(
            name=f"gaussian_cgp/{dim}d/rho{rho:g}/d{d:g}" + (f"/az{azimuth:g}" if dim > 1 else ""),
            covers=("gpframe.mechanisms.gaussian_cgp",),
            run=run,
            inputs=(a, b),
            centers=(a, b),
            claim=Claim.cgp(rho, d),
            tiers=tiers,
            guarantee=("cgp", rho) if dim == 1 else None,
            meta={"gaussian_curve": True},  # ref_ratio is asserted (engine.failed)
        )
    )


# --------------------------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------------------------

# 1-D GP Laplace: the floor regime (eps = 1 /m, r_min = 1 m) and a typical one (eps = 0.05 /m),
# at d in {r_min/2, r_min, 3/eps}; tightness is asked where eps·d is large.
for _eps in (1.0, 0.05):
    for _d in (0.5, 1.0, 3.0 / _eps):
        laplace_gp_case(
            _eps,
            _d,
            tiers=FAST if (_eps == 1.0 and _d in (0.5, 3.0)) else SLOW,
            tight=_d == 3.0 / _eps,
        )
laplace_gp_case(1.0, 3.0, lattice_exact=True, tiers=FAST, tight=True)
laplace_gp_case(1.0, 2.0**-10, lattice_exact=True)  # one lattice step, Euclidean metric

# planar Laplace: 4 directions × latitudes 0°, 45°, 70° (UTM 31N) × d in {r_min/2, r_min, 3/eps}
for _eps in (1.0, 0.05):
    for _lat in (0.0, 45.0, 70.0):
        for _az in (0.0, 45.0, 90.0, 135.0):
            for _d in (0.5, 1.0, 3.0 / _eps):
                _fast = _eps == 1.0 and _lat == 45.0 and _az == 45.0 and _d in (0.5, 3.0)
                planar_case(
                    _eps,
                    _d,
                    lat=_lat,
                    azimuth=_az,
                    tiers=FAST if _fast else SLOW,
                    tight=_d == 3.0 / _eps,
                )
planar_case(1.0, 3.0, lattice_exact=True, tight=True)

# central Laplace: integer counts (g = 1) and real sums (g = 2^(floor(log2 Δ) − 20))
laplace_dp_case(1.0, 1, integer=True, tiers=FAST, tight=True)
laplace_dp_case(2.0, 2, integer=True, tight=True)
laplace_dp_case(3.0, 1.0, integer=False, tiers=FAST, tight=True)
laplace_dp_case(1.0, 0.3, integer=False, tight=True)
# the same release with every row at its own (ε, Δ), all rows in one sampler call
laplace_dp_rows_case(3.0, 1.0, tiers=FAST, tight=True)
laplace_dp_rows_case(1.0, 0.3, tight=True)

# central Gaussian (zCDP) and CGP: audited through (eps, delta) at delta in {1e-1, 1e-2, 1e-3}
gaussian_zcdp_case(0.5, 1, integer=True, tiers=FAST)
gaussian_zcdp_case(2.0, 2, integer=True)
gaussian_zcdp_case(2.0, 1.5, integer=False, tiers=FAST)
for _az in (0.0, 45.0, 90.0, 135.0):
    gaussian_cgp_case(0.02, 10.0, azimuth=_az, tiers=FAST if _az == 45.0 else SLOW)
gaussian_cgp_case(0.5, 0.5)
gaussian_cgp_case(0.5, 1.0)
gaussian_cgp_case(0.02, 10.0, dim=1, tiers=FAST)
gaussian_cgp_case(0.5, 0.5, dim=1)


def privatize_case(
    mode: str, amount: float, d: float, *, azimuth: float = 45.0, tiers=SLOW, tight=False
):
    """privatize (GP Basic / CGP Basic, one point per user): n users at the same location."""
    from gpframe.queries.privatize import privatize_points

    a, b, k = utm_pair(45.0, azimuth, d)

    def run(x, n, rng):
        out = privatize_points(
            _repeat(x, n),
            np.arange(n),
            n,
            kind=mode,
            amount=Fraction(amount),
            per="user",
            scale_max=k,
            rng=rng,
        )
        return out.xy

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(
        Case(
            name=f"privatize/{mode}/{amount:g}/d{d:g}/az{azimuth:g}",
            covers=("gpframe.queries.privatize.privatize_points",),
            run=run,
            inputs=(a, b),
            centers=(a, b),
            claim=claim,
            tiers=tiers,
            tight=tight,
            # privatize groups rows by user: ~10x slower per draw than planar_laplace itself
            n_fast=30_000,
            n_slow=300_000,
        )
    )


privatize_case("gp", 0.05, 60.0, tiers=FAST)
privatize_case("gp", 0.05, 0.5)
privatize_case("gp", 0.05, 60.0, azimuth=0.0)
privatize_case("cgp", 0.02, 10.0, tiers=FAST)
privatize_case("cgp", 0.02, 10.0, azimuth=90.0)

# Later operations (range_count, kde, knn, hulls, grid stats, SVT, ...) add their cases in a module
# of their own, tests/audit/cases_<operation>.py, one register(...) each; it is imported here so
# that the registry is complete whichever test module imports it first. Such a module also appends
# its module path to AUDITED_MODULES (e.g. "gpframe.queries.range_count").


def _load_case_modules() -> None:
    import importlib
    import pkgutil
    from pathlib import Path

    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name.startswith("cases_"):
            importlib.import_module(f"{__package__}.{info.name}")


_load_case_modules()


# --------------------------------------------------------------------------------------------
# public names of audited modules that release nothing themselves
# --------------------------------------------------------------------------------------------

NOT_MECHANISMS["gpframe.mechanisms.selection.normal_exact.normals"] = (
    "the exact N(0, 1) sampler behind gaussian_report_noisy_max / gaussian_above_threshold "
    "(audited); releases nothing itself; its law is tested in "
    "tests/unit/mechanisms/selection/test_mechanisms.py"
)
