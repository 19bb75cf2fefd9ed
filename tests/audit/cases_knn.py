"""Audit cases for the SVT primitive, k-PNN, PCH and nearest users (issue 8).

Each case runs the public function once on many independent users (or runs), so a fast-tier
sample of N outputs is one vectorised call. Claims: GP ε·d_r, CGP ρ·d_r² (the tuple metric
dist_∞, concentrated-geo-privacy.md §0.2, §5.2, §7.1, §8.1; adaptive-budgeting.md §5.3).
"""

from __future__ import annotations

import numpy as np

from .engine import Case, Claim, discrete_featurizer
from .registry import AUDITED_MODULES, FAST, SLOW, _quiet, register

AUDITED_MODULES += [
    "gpframe.mechanisms.svt",
    "gpframe.queries.knn",
    "gpframe.queries.hull",
    "gpframe.queries.nearest",
]

_SVT_COVERS = ("gpframe.mechanisms.svt.sparse_vector", "gpframe.mechanisms.sparse_vector")


def _code(out: np.ndarray) -> np.ndarray:
    return np.asarray(out, dtype=np.int64) + 1


def svt_case(mode: str, amount: float, d: float, *, tiers=SLOW) -> Case:
    """SVT on 4 distance answers; the neighbour moves every answer by d (K = 1)."""
    from gpframe.mechanisms.svt import sparse_vector

    x = np.array([3.0, 1.0, 2.5, 0.5])
    xp = x + d * np.array([1.0, -1.0, 1.0, -1.0])
    kw = {"eps": amount} if mode == "gp" else {"rho": amount}

    def run(v, n, rng):
        return sparse_vector(v, threshold=1.0, runs=n, rng=rng, **kw).index

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"svt/{mode}/{amount:g}/d{d:g}", covers=_SVT_COVERS, run=run,
                         inputs=(x, xp), claim=claim, featurizers=(discrete_featurizer(_code),),
                         tiers=tiers, n_fast=200_000, n_slow=2_000_000))  # fmt: skip


svt_case("gp", 1.0, 1.0, tiers=FAST)
svt_case("cgp", 0.5, 1.0, tiers=FAST)
svt_case("gp", 0.5, 3.0)


def knn_case(mode: str, amount: float, d: float, k: int = 1, *, tiers=SLOW) -> Case:
    """k-PNN on a 3-point tuple; the neighbour moves the nearest point away by d (dist_∞ = d)."""
    from gpframe.queries.knn import knn_indices

    x = np.array([[1.0, 0.0], [2.5, 0.0], [4.0, 0.0]])
    xp = x.copy()
    xp[0, 0] += d

    def run(t, n, rng):
        xy = np.tile(t, (n, 1))
        out = knn_indices(xy, np.repeat(np.arange(n), 3), (0.0, 0.0), k, kind=mode,
                          amount=amount, scan_order="input", rng=rng)  # fmt: skip
        return np.array([r % 3 @ (3 ** np.arange(k)) for r in out.rows])

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"knn/{mode}/{amount:g}/d{d:g}/k{k}",
                         covers=("gpframe.queries.knn.knn_indices",), run=run, inputs=(x, xp),
                         claim=claim, featurizers=(discrete_featurizer(lambda o: np.asarray(
                             o, dtype=np.int64)),), tiers=tiers, n_fast=30_000,
                         n_slow=600_000))  # fmt: skip


knn_case("gp", 0.5, 2.0, tiers=FAST)
knn_case("cgp", 0.25, 2.0, k=2)


def hull_case(mode: str, amount: float, d: float, *, tiers=SLOW) -> Case:
    """PCH on a 3-point tuple with k = 2 anchors; the neighbour shifts every point by d."""
    from gpframe.queries.hull import private_hulls

    x = np.array([[0.0, 0.0], [30.0, 0.0], [0.0, 30.0]])
    xp = x + np.array([d, 0.0])

    def run(t, n, rng):
        out = _quiet(private_hulls, np.tile(t, (n, 1)), np.repeat(np.arange(n), 3), kind=mode,
                     amount=amount, k=2, radius_floor_m=1.0, rng=rng)  # fmt: skip
        return np.array([a.mean(axis=0) for a in out.anchors])

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    c0, c1 = x.mean(axis=0), xp.mean(axis=0)
    return register(Case(name=f"hull/{mode}/{amount:g}/d{d:g}",
                         covers=("gpframe.queries.hull.private_hulls",), run=run,
                         inputs=(x, xp), centers=(c0, c1), claim=claim, tiers=tiers,
                         n_fast=10_000, n_slow=200_000))  # fmt: skip


hull_case("cgp", 0.02, 10.0, tiers=FAST)
hull_case("gp", 0.2, 5.0)


def nearest_case(mode: str, amount: float, d: float, *, tiers=SLOW) -> Case:
    """Nearest users (``dist``, one round), k = 1 of {the user, a fixed decoy}: the output is which
    of the two is selected; the neighbour moves the user by d. One call per output (slow)."""
    from gpframe.queries.nearest import nearest_users_arrays

    x = np.array([[50.0, 0.0]])
    xp = x + np.array([d, 0.0])

    def run(t, n, rng):
        out = np.empty(n, dtype=np.int64)
        decoy = np.array([[0.0, 60.0]])
        for i in range(n):
            r = nearest_users_arrays(np.vstack([t, decoy]), (0.0, 0.0), 1, kind=mode,
                                     amount=amount, method="dist", rng=rng)  # fmt: skip
            out[i] = int(r.selected[0])
        return out

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"nearest/{mode}/{amount:g}/d{d:g}",
                         covers=("gpframe.queries.nearest.nearest_users_arrays",), run=run,
                         inputs=(x, xp), claim=claim, featurizers=(discrete_featurizer(
                             lambda o: np.asarray(o, dtype=np.int64)),), tiers=tiers,
                         n_fast=400, n_slow=20_000))  # fmt: skip


nearest_case("gp", 0.2, 10.0, tiers=FAST)


def nearest_draw_case(
    mode: str, amount: float, d: float, *, method: str = "dist-elim", tiers=SLOW
) -> Case:
    """Nearest users as the Dask face runs it (``dist-elim``, 2 rounds): the rounds on the
    caller's side, each round's values released by ``release_part`` per "partition" (the user,
    a fixed decoy) from its own child stream; the output is which of the two is selected and
    how many rounds the user ran. The neighbour moves the user by d. One call per output."""
    from fractions import Fraction

    from gpframe.queries.elimination import release_part
    from gpframe.queries.nearest import distance_to, nearest_rounds

    x = np.array([[50.0, 0.0]])
    xp = x + np.array([d, 0.0])
    q = np.zeros(2)

    def run(t, n, rng):
        out = np.empty(n, dtype=np.int64)
        held = np.vstack([t, [[0.0, 60.0]]])  # what the "workers" hold

        def draw(idx, part):
            return [(idx[j:j + 1], *release_part(mode, "dist", distance_to(q)(held[idx[j:j + 1]]),
                                                 part, Fraction(1), rng))
                    for j in range(idx.size)]  # fmt: skip

        for i in range(n):
            r = nearest_rounds(np.zeros(2), q, 1, kind=mode, amount=amount, method=method,
                               rounds=2, split="even", beta=0.1, unit=None, scale_max=1,
                               rng=rng, draw=draw)  # fmt: skip
            out[i] = int(r.selected[0]) * 3 + int(r.rounds_run[0])
        return out

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"nearest/draw/{method}/{mode}/{amount:g}/d{d:g}",
                         covers=("gpframe.queries.nearest.nearest_rounds",
                                 "gpframe.queries.elimination.release_part"), run=run,
                         inputs=(x, xp), claim=claim, featurizers=(discrete_featurizer(
                             lambda o: np.asarray(o, dtype=np.int64)),), tiers=tiers,
                         n_fast=400, n_slow=20_000))  # fmt: skip


# the fast tier runs the one-round baseline (half the calls); with the same stream the draw path
# releases exactly what nearest_users_arrays releases
# (tests/unit/queries/test_nearest.py::test_a_draw_from_the_same_stream_gives_the_same_output)
nearest_draw_case("gp", 0.2, 10.0, method="dist", tiers=FAST)
nearest_draw_case("cgp", 0.02, 10.0)


# ------------------------------------------------------------------------------------------
# issue 8 item 9: events on the released hull itself, and k-PNN on the released index *set*


def _hull_outputs(t, n, rng, mode, amount, what):
    from gpframe.queries.hull import private_hulls

    out = _quiet(private_hulls, np.tile(t, (n, 1)), np.repeat(np.arange(n), len(t)), kind=mode,
                 amount=amount, k=3, radius_floor_m=1.0, rng=rng)  # fmt: skip
    if what == "vertex":  # the first released vertex (selection order), a point of the hull
        return np.array([a[0] for a in out.anchors])
    if what == "area":
        return np.array([h.area for h in out.hulls])
    return np.array([[h.centroid.x, h.centroid.y] for h in out.hulls])  # centroid


def hull_output_case(mode: str, amount: float, d: float, what: str, *, tiers=SLOW) -> Case:
    """PCH (k = 3 anchors: a polygon) on a 4-point tuple; the output event is on the released
    hull: its first released vertex, its area or its centroid (featurizer bins chosen on the
    selection sample). The neighbour moves one point outward by d (``area``: dist_∞ = d, true area
    changes) or shifts every point by d (``vertex``, ``centroid``)."""
    x = np.array([[0.0, 0.0], [40.0, 0.0], [0.0, 40.0], [30.0, 30.0]])
    if what == "area":
        xp = x.copy()
        xp[3] += d / np.sqrt(2.0)
        centers = (float(shapely_area(x)), float(shapely_area(xp)))
    else:
        xp = x + np.array([d, 0.0])
        centers = (x.mean(axis=0), xp.mean(axis=0))

    def run(t, n, rng):
        return _hull_outputs(t, n, rng, mode, amount, what)

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"hull-{what}/{mode}/{amount:g}/d{d:g}",
                         covers=("gpframe.queries.hull.private_hulls",), run=run,
                         inputs=(x, xp), centers=centers, claim=claim, tiers=tiers,
                         n_fast=10_000, n_slow=200_000))  # fmt: skip


def shapely_area(pts: np.ndarray) -> float:
    import shapely

    return float(shapely.convex_hull(shapely.multipoints(pts)).area)


hull_output_case("cgp", 0.02, 10.0, "vertex", tiers=FAST)
hull_output_case("gp", 2.0, 0.5, "area", tiers=FAST)
hull_output_case("gp", 0.2, 5.0, "vertex")
hull_output_case("cgp", 0.02, 10.0, "area")
hull_output_case("cgp", 0.02, 10.0, "centroid")
hull_output_case("gp", 0.2, 5.0, "centroid")


def knn_set_case(mode: str, amount: float, d: float, k: int = 2, *, tiers=SLOW) -> Case:
    """k-PNN (random scan order) on a 4-point tuple; the output is the released index *set*
    (order dropped); the neighbour moves the nearest point away by d (dist_∞ = d)."""
    from gpframe.queries.knn import knn_indices

    x = np.array([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [0.0, -4.5]])
    xp = x.copy()
    xp[0, 0] += d

    def run(t, n, rng):
        out = knn_indices(np.tile(t, (n, 1)), np.repeat(np.arange(n), 4), (0.0, 0.0), k,
                          kind=mode, amount=amount, rng=rng)  # fmt: skip
        return np.array([int((1 << (r % 4)).sum()) for r in out.rows])  # bitmask of the set

    claim = Claim.gp(amount, d) if mode == "gp" else Claim.cgp(amount, d)
    return register(Case(name=f"knn-set/{mode}/{amount:g}/d{d:g}/k{k}",
                         covers=("gpframe.queries.knn.knn_indices",), run=run, inputs=(x, xp),
                         claim=claim, featurizers=(discrete_featurizer(lambda o: np.asarray(
                             o, dtype=np.int64)),), tiers=tiers, n_fast=20_000,
                         n_slow=400_000))  # fmt: skip


knn_set_case("gp", 2.0, 0.5, tiers=FAST)
knn_set_case("cgp", 0.25, 2.0)
