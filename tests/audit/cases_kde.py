"""Audit cases for private KDE (issue 10): ``gpframe.queries.kde``.

Public randomised functions: :func:`kde_point` (Algorithm 7 and its one-round baselines),
:func:`kde_points_pt`, :func:`privatize_once`, :func:`kde_raster_arrays`.

As in :mod:`.cases_range_count`: the private input is one user's location, the pair is that user
at two locations ``d`` metres apart, and what is audited is the user's released transcript, the
noisy value of every round it took part in (the distance ||x − q|| for ``dist``, the point for
``pt``), recorded with :class:`~.cases_range_count.ReleaseTap`; the KDE value, its error bound and
the raster are post-processing. ``kde_point`` runs Algorithm 4 one-sided (ν_low = −∞,
ν_high = 3b), so each user's decisions read only its own releases: n copies of the user in one
call are n i.i.d. samples (``n_union`` fixed). The ``pt`` functions release each point once; their
released points are read from ``Privatized.xy`` and audited with the harness's geometric events.
Claims: the user's allocation, GP ε·max(d, r_min) or CGP ρ·max(d, r_min)² via (ε, δ).
"""

from __future__ import annotations

import numpy as np

from .cases_range_count import (
    AMOUNT,
    DIST,
    N_UNION,
    ReleaseTap,
    llr_featurizer,
    rounds_featurizer,
    rounds_from_charges,
    transcript,
)
from .engine import Case, Claim
from .registry import AUDITED_MODULES, FAST, SLOW, _quiet, register

for _m in ("gpframe.queries.kde", "gpframe.frame.kde"):
    if _m not in AUDITED_MODULES:
        AUDITED_MODULES.append(_m)

#: bandwidth b (m); ν = 3b = 300 m is where Algorithm 7 eliminates
BANDWIDTH = 100.0
Q = np.array([0.0, 0.0])

#: distances to q (D0, D1): near q (never eliminated: the whole allocation is spent) and just
#: beyond ν (users stop at various rounds)
PAIRS = {
    ("gp", "near"): (5.0, 35.0),
    ("cgp", "near"): (20.0, 30.0),
    ("gp", "far"): (640.0, 610.0),
    ("cgp", "far"): (345.0, 335.0),
}


def _claim(kind: str, amount: float, d: float) -> Claim:
    return Claim.gp(amount, d) if kind == "gp" else Claim.cgp(amount, d)


def _repeat(x, n: int) -> np.ndarray:
    return np.repeat(np.asarray(x, dtype=np.float64)[None, :], n, axis=0)


def kde_point_case(
    kind: str,
    method: str,
    where: str,
    *,
    split: str = "doubling",
    rounds: int = 4,
    tiers=SLOW,
    n_fast: int = 10_000,
    n_slow: int | None = None,
    tight: bool = False,
) -> Case:
    """kde_point on n copies of the user on the x axis, q at the origin."""
    from gpframe.queries.kde import kde_point

    a, d = AMOUNT[kind], DIST[kind]
    D0, D1 = PAIRS[(kind, where)]
    x0, x1 = np.array([D0, 0.0]), np.array([D1, 0.0])
    elim = method.endswith("-elim")
    c = rounds if elim else 1
    dim = 1 if method.startswith("dist") else 2
    m0, m1 = (D0, D1) if dim == 1 else (x0, x1)
    if n_slow is None:
        n_slow = 100_000 if dim == 2 else 300_000

    def run(x, n, rng):
        with ReleaseTap() as tap:
            out = _quiet(
                kde_point, _repeat(x, n), Q, bandwidth_m=BANDWIDTH, kind=kind, amount=a,
                method=method, rounds=rounds, split=split, n_union=N_UNION, rng=rng,
            )  # fmt: skip
        return transcript(tap.records, out.rounds_run, dim, c)

    name = f"kde_point/{kind}/{method}" + (f"/{split}/c{rounds}" if elim else "") + f"/{where}"
    return register(
        Case(
            name=name,
            covers=("gpframe.queries.kde.kde_point",),
            run=run,
            inputs=(x0, x1),
            centers=(np.atleast_1d(m0), np.atleast_1d(m1)),
            featurizers=(llr_featurizer(kind, dim, m0, m1), rounds_featurizer),
            claim=_claim(kind, a, d),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
            tight=tight,
        )
    )


def _pt_pair(kind: str) -> tuple[np.ndarray, np.ndarray, float]:
    d = DIST[kind]
    # a diagonal pair off the lattice, so the snapping and both axes are exercised
    e = np.array([np.sqrt(0.5), np.sqrt(0.5)])
    x0 = np.array([12.3456789, -7.654321])
    return x0, x0 + d * e, d


def pt_case(fn: str, kind: str, *, tiers=SLOW, n_fast: int = 20_000, n_slow: int = 300_000):
    """privatize_once / kde_points_pt / kde_raster_arrays: the released point, ``Privatized.xy``."""
    from gpframe.queries import kde

    a = AMOUNT[kind]
    x0, x1, d = _pt_pair(kind)

    def run(x, n, rng):
        xy = _repeat(x, n)
        if fn == "privatize_once":
            pv = _quiet(kde.privatize_once, xy, a, kind=kind, rng=rng)
        elif fn == "kde_points_pt":
            res = _quiet(
                kde.kde_points_pt, xy, [[0.0, 0.0], [50.0, 50.0]], bandwidth_m=BANDWIDTH,
                kind=kind, amount=a, rng=rng,
            )  # fmt: skip
            pv = res.privatized
        else:
            res = _quiet(
                kde.kde_raster_arrays, xy, bandwidth_m=BANDWIDTH, cell_m=50.0,
                bounds_m=(-500.0, -500.0, 500.0, 500.0), kind=kind, amount=a, rng=rng,
            )  # fmt: skip
            pv = res.privatized
        return pv.xy

    return register(
        Case(
            name=f"kde/{fn}/{kind}/d{d:g}",
            covers=(f"gpframe.queries.kde.{fn}",),
            run=run,
            inputs=(x0, x1),
            centers=(x0, x1),
            claim=_claim(kind, a, d),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
            tight=kind == "gp",
        )
    )


# fast tier: Algorithm 7 with the point triple at the elimination distance, and the three
# one-shot functions
kde_point_case("cgp", "pt-elim", "far", tiers=FAST)
pt_case("privatize_once", "gp", tiers=FAST)
pt_case("kde_points_pt", "cgp", tiers=FAST)
pt_case("kde_raster_arrays", "cgp", tiers=FAST, n_fast=10_000)

# slow tier: both triples × both notions × near/far, both splits for one, and the baselines
for _kind in ("gp", "cgp"):
    for _method in ("pt-elim", "dist-elim"):
        for _where in ("near", "far"):
            if (_kind, _method, _where) != ("cgp", "pt-elim", "far"):
                kde_point_case(
                    _kind, _method, _where, tight=_kind == "gp" and _method == "dist-elim"
                    and _where == "near",
                )  # fmt: skip
    kde_point_case(_kind, "dist-elim", "far", split="even")
    kde_point_case(_kind, "dist", "near", tight=_kind == "gp")
    kde_point_case(_kind, "pt", "near")
pt_case("privatize_once", "cgp")
pt_case("kde_points_pt", "gp")
pt_case("kde_raster_arrays", "gp")


# --------------------------------------------------------------------------------------------
# the frame-level entry points (Session, ledger, projection): kde_frame.kde / kde_raster
# --------------------------------------------------------------------------------------------


def kde_frame_case(kind: str, what: str, *, method: str = "pt-elim", tiers=SLOW, n_fast=10_000,
                   n_slow=100_000) -> Case:  # fmt: skip
    """kde / kde_raster on frames (``gpframe.frame.kde``): a fresh Session per batch.

    As ``cases_range_count.frame_case``: n users at the same location in a UTM frame (the
    projection factor is applied by the frame layer), the pair that user at two points whose
    ground distance is the claim's d; the audited output is the user's release transcript,
    recovered with ``ReleaseTap`` and the per-user rounds read from the charged amounts.
    """
    import pandas as pd
    import shapely

    # defined below cases_range_count's import of the registry: imported here, when the case is
    # built (the registry imports the cases_* modules while cases_range_count may be half-loaded)
    from .frames import _FRAME_CRS, _FRAME_X0, _FRAME_Y0, _ground_distance

    a = AMOUNT[kind]
    d0, d1 = PAIRS[(kind, "near")]
    x0 = np.array([_FRAME_X0 + d0, _FRAME_Y0])
    x1 = np.array([_FRAME_X0 + d1, _FRAME_Y0])
    d_ground = _ground_distance(x0, x1)
    elim = what == "kde" and method.endswith("-elim")
    rounds = 4 if elim else 1
    dim = 1 if method.startswith("dist") and what == "kde" else 2
    m0, m1 = (d0, d1) if dim == 1 else (x0, x1)
    q = shapely.Point(_FRAME_X0, _FRAME_Y0)
    box = (_FRAME_X0 - 500, _FRAME_Y0 - 500, _FRAME_X0 + 500, _FRAME_Y0 + 500)

    def run(x, n, rng):
        import gpframe as gp
        from gpframe.frame.kde import kde, kde_raster
        from gpframe.ledger import Session

        df = pd.DataFrame({"u": np.arange(n), "x": np.full(n, x[0]), "y": np.full(n, x[1])})
        budget = gp.CGP(rho=2 * a) if kind == "cgp" else gp.GP(eps=2 * a)
        amt = {"rho": a} if kind == "cgp" else {"eps": a}
        with Session(budget=budget) as s, ReleaseTap() as tap:
            bound = df.geopriv(s, user="u", x="x", y="y", crs=_FRAME_CRS)
            k = float(bound.projected.scale_max)
            if what == "kde":
                res = _quiet(kde, bound, q, bandwidth_m=BANDWIDTH, method=method, rounds=rounds,
                             rng=rng, **amt)  # fmt: skip
            else:
                res = _quiet(kde_raster, bound, bandwidth_m=BANDWIDTH, cell_m=50.0, bounds=box,
                             rng=rng, **amt)  # fmt: skip
        ch = res.charges.reindex(np.arange(n)).to_numpy(dtype=np.float64)
        r = rounds_from_charges(ch, tap.records, k * k if kind == "cgp" else k)
        return transcript(tap.records, r, dim, rounds)

    name = f"kde_frame/{what}/{kind}" + (f"/{method}/c{rounds}" if what == "kde" else "")
    return register(
        Case(
            name=name,
            # kde_raster releases through raster_from_points, the core the SQL face shares
            covers=(f"gpframe.frame.kde.{what}",)
            + (("gpframe.queries.kde.raster_from_points",) if what == "kde_raster" else ()),
            run=run,
            inputs=(x0, x1),
            centers=(np.atleast_1d(m0), np.atleast_1d(m1)),
            featurizers=(llr_featurizer(kind, dim, m0, m1), rounds_featurizer),
            claim=Claim.gp(a, d_ground) if kind == "gp" else Claim.cgp(a, d_ground),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


kde_frame_case("cgp", "kde", tiers=FAST)
kde_frame_case("gp", "kde_raster", tiers=FAST)
kde_frame_case("gp", "kde", method="dist-elim")
kde_frame_case("cgp", "kde", method="pt")
kde_frame_case("cgp", "kde_raster")
