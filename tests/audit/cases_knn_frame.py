"""Audit cases for the frame layer of k-PNN, PCH and nearest users (issue 10):
``gpframe.frame.knn`` through the accessor, ``df.geopriv(session, user=...).knn(...)``,
``.convex_hull(...)`` and ``.nearest_users(...)``.

As ``cases_range_count.frame_case`` and ``cases_kde.kde_frame_case``: a fresh Session per sample
batch, the data in a projected CRS (UTM 18N on the central meridian, so the frame layer applies
its own projection factor), and the pair is one user's point(s) moved by d projected metres; the
claim is the per-user amount passed to the method (GP ε·d_r or CGP ρ·d_r² via (ε, δ)) at the
*ground* distance of the move (dist_∞ over the user's tuple). The audited output is what the
method releases to the analyst:

* ``knn``: which of the user's rows the result holds, in rank order (n users, each its own
  3- or 4-point tuple, in one call: every user's k-PNN draws only its own noise);
* ``convex_hull``: the centroid of the released hull (k = 3 anchors), binned by the harness's
  half-planes and polar cells; the neighbour shifts every point of the user by d;
* ``nearest_users``: whether the moved user is the one selected (k = 1 of the user and a fixed
  decoy, method ``dist``): one call per output.
"""

from __future__ import annotations

import numpy as np

from .engine import Case, Claim, discrete_featurizer
from .registry import AUDITED_MODULES, FAST, SLOW, _quiet, register

if "gpframe.frame.knn" not in AUDITED_MODULES:
    AUDITED_MODULES.append("gpframe.frame.knn")


def _frame_helpers():
    """The UTM 18N frame of ``cases_range_count.frame_case``: (crs, origin, ground distance).

    Imported when a case is built: these names come after cases_range_count's import of the
    registry, which imports the cases_* modules while cases_range_count may be half-loaded.
    """
    from .frames import _FRAME_CRS, _FRAME_X0, _FRAME_Y0, _ground_distance

    return _FRAME_CRS, np.array([_FRAME_X0, _FRAME_Y0]), _ground_distance


def _claim(kind: str, amount: float, d: float) -> Claim:
    return Claim.gp(amount, d) if kind == "gp" else Claim.cgp(amount, d)


def _amount(kind: str, amount: float) -> dict[str, float]:
    return {"rho": amount} if kind == "cgp" else {"eps": amount}


def _session(kind: str, amount: float, calls: int = 1):
    """A fresh Session whose per-user budget pays ``calls`` runs at ``amount`` (and one more)."""
    import gpframe as gp
    from gpframe.ledger import Session

    b = (calls + 1) * amount
    return Session(budget=gp.CGP(rho=b) if kind == "cgp" else gp.GP(eps=b))


def _geopriv(session, t: np.ndarray, n: int):
    """n users, each with its own copy of the tuple ``t`` (rows of a user are consecutive)."""
    import pandas as pd

    crs, _, _ = _frame_helpers()
    m = len(t)
    xy = np.tile(np.asarray(t, dtype=np.float64), (n, 1))
    df = pd.DataFrame({"u": np.repeat(np.arange(n), m), "x": xy[:, 0], "y": xy[:, 1]})
    return df.geopriv(session, user="u", x="x", y="y", crs=crs)


def _moved_distance(x0: np.ndarray, x1: np.ndarray) -> float:
    """dist_∞ over the tuple, in ground metres."""
    _, _, ground = _frame_helpers()
    return max(ground(a, b) for a, b in zip(x0, x1, strict=True))


def _code(o):
    return np.asarray(o, dtype=np.int64)


def knn_frame_case(kind: str, amount: float, d: float, k: int = 1, *, tiers=SLOW,
                   n_fast: int = 10_000, n_slow: int = 300_000) -> Case:  # fmt: skip
    """``.knn(point, k)`` with the input scan order: the released rows of each user, as a code
    (row position within the user's tuple, in rank order). The neighbour moves the user's nearest
    point away from the query by d, past the other two for d > 3 m (as ``cases_knn.knn_case``,
    in a UTM frame)."""
    _, origin, _ = _frame_helpers()
    m = 3
    off = np.array([[1.0, 0.0], [2.5, 0.0], [4.0, 0.0]])
    x0 = origin + off
    x1 = x0.copy()
    x1[0, 0] += d
    q = (float(origin[0]), float(origin[1]))

    def run(t, n, rng):
        with _session(kind, amount) as s:
            out = _geopriv(s, t, n).knn(q, k, scan_order="input", rng=rng, **_amount(kind, amount))
        out = out.sort_values(["u", "knn_rank"])
        if len(out) != n * k:
            raise AssertionError(f"{len(out)} rows released for {n} users × k={k}")
        pos = (out.index.to_numpy() % m).reshape(n, k)
        return pos @ (m ** np.arange(k))

    return register(
        Case(
            name=f"knn_frame/knn/{kind}/{amount:g}/d{d:g}/k{k}",
            covers=("gpframe.frame.knn.knn",),
            run=run,
            inputs=(x0, x1),
            claim=_claim(kind, amount, _moved_distance(x0, x1)),
            featurizers=(discrete_featurizer(_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


def hull_frame_case(kind: str, amount: float, d: float, *, tiers=SLOW, n_fast: int = 5_000,
                    n_slow: int = 100_000) -> Case:  # fmt: skip
    """``.convex_hull(k=3)`` on a 4-point tuple per user: the centroid of the released hull
    (events: half-planes and polar cells around the true centroids); the neighbour shifts every
    point of the user by d."""
    _, origin, _ = _frame_helpers()
    off = np.array([[0.0, 0.0], [40.0, 0.0], [0.0, 40.0], [30.0, 30.0]])
    x0 = origin + off
    x1 = x0 + np.array([d, 0.0])

    def run(t, n, rng):
        with _session(kind, amount) as s:
            hulls = _quiet(
                _geopriv(s, t, n).convex_hull,
                k=3,
                radius_floor_m=1.0,
                rng=rng,
                **_amount(kind, amount),
            )
        hulls = hulls.sort_index()
        if len(hulls) != n or hulls.geometry.isna().any():
            raise AssertionError(f"{len(hulls)} hulls released for {n} users")
        c = hulls.geometry.centroid
        return np.column_stack([c.x.to_numpy(), c.y.to_numpy()])

    return register(
        Case(
            name=f"knn_frame/convex_hull/{kind}/{amount:g}/d{d:g}",
            covers=("gpframe.frame.knn.convex_hull",),
            run=run,
            inputs=(x0, x1),
            centers=(x0.mean(axis=0), x1.mean(axis=0)),
            claim=_claim(kind, amount, _moved_distance(x0, x1)),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


def nearest_frame_case(kind: str, amount: float, d: float, *, tiers=SLOW, n_fast: int = 300,
                       n_slow: int = 10_000) -> Case:  # fmt: skip
    """``.nearest_users(point, 1, method="dist")`` on two users, the audited one and a fixed
    decoy: the output is 1 when the audited user is selected. The neighbour moves the user by d
    away from the query. One call per output, on one Session per sample batch whose budget pays
    them all (each call's draws are independent of the ledger's state while everybody is
    admitted; a refusal would raise)."""
    import pandas as pd

    crs, origin, _ = _frame_helpers()
    x0 = (origin + np.array([50.0, 0.0]))[None, :]
    x1 = x0 + np.array([d, 0.0])
    decoy = origin + np.array([0.0, 60.0])
    q = (float(origin[0]), float(origin[1]))

    def run(t, n, rng):
        xy = np.vstack([t, decoy])
        df = pd.DataFrame({"u": ["user", "decoy"], "x": xy[:, 0], "y": xy[:, 1]})
        out = np.empty(n, dtype=np.int64)
        with _session(kind, amount, calls=n) as s:
            bound = df.geopriv(s, user="u", x="x", y="y", crs=crs)
            for i in range(n):
                res = bound.nearest_users(q, 1, method="dist", rng=rng, **_amount(kind, amount))
                out[i] = res.value == ["user"]
        return out

    return register(
        Case(
            name=f"knn_frame/nearest_users/{kind}/{amount:g}/d{d:g}",
            covers=("gpframe.frame.knn.nearest_users",),
            run=run,
            inputs=(x0, x1),
            claim=_claim(kind, amount, _moved_distance(x0, x1)),
            featurizers=(discrete_featurizer(_code),),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


# fast tier: one case per method of the accessor (test_registry asks a fast case of every covered
# function), each a few seconds
knn_frame_case("gp", 0.5, 10.0, tiers=FAST, n_fast=15_000)
hull_frame_case("cgp", 0.02, 10.0, tiers=FAST)
nearest_frame_case("gp", 0.2, 10.0, tiers=FAST, n_fast=150, n_slow=5_000)

# slow tier: the other notion of each, and k = 2 for k-PNN
knn_frame_case("cgp", 0.02, 10.0, k=2)
hull_frame_case("gp", 0.2, 5.0)
nearest_frame_case("cgp", 0.02, 10.0, n_slow=5_000)
