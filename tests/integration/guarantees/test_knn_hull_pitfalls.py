"""Issue 8 checklist, item 8: the pitfalls of concentrated-geo-privacy.md §10 for knn / hull /
nearest users (and adaptive-budgeting.md §7 items 8, 14, 15 for nearest users).

Already covered elsewhere (not repeated): P-U1/P-U3 lon/lat and Web Mercator for knn
(test_knn.py), P-U2 (test_knn.py), P-S1 threshold-draw count for knn (test_knn.py) and for PCH
(test_knn_hull_oracles.py::test_pch_per_pnn_call_scales), P-S1/P-S2 law (test_knn_hull_guarantees.py
k-PNN transcription with a shared-threshold mutant), P-S7 γ₀ range (test_knn.py), P-S8 and P-N4 /
P-N6 scales (test_knn_hull_oracles.py), P-B3 split (test_knn_hull_oracles.py), P-B4 for hulls
(tests/integration/frame/test_knn.py).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from pyproj import Transformer
from scipy import stats

import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)
from gpframe.accounting.budgets import CGP, GP
from gpframe.errors import InvalidInputError
from gpframe.frame import knn as kf
from gpframe.ledger import Session
from gpframe.mechanisms.svt import SVTResult, sparse_vector
from gpframe.queries.hull import HullArrays, hull_error, private_hulls
from gpframe.queries.knn import KnnArrays, knn_indices
from gpframe.queries.nearest import nearest_users_arrays
from gpframe.testing import seeded_rng


def _lonlat_frames():
    lon = -74.0 + np.linspace(0, 0.05, 40)
    lat = 40.7 + np.linspace(0, 0.03, 40)[::-1]
    df = pd.DataFrame({"v": np.repeat([1, 2], 20), "lon": lon, "lat": lat})
    x, y = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True).transform(lon, lat)
    dm = pd.DataFrame({"v": df.v, "x": x, "y": y})
    # a public domain= (around New York): the automatic UTM choice then depends on no data
    ll = {"lon": "lon", "lat": "lat", "crs": "EPSG:4326", "domain": (-75.0, 40.0, -73.0, 41.0)}
    wm = {"x": "x", "y": "y", "crs": "EPSG:3857", "domain": ll["domain"]}
    return (df, ll, (-74.0, 40.7)), (dm, wm, (x[0], y[0]))


@pytest.mark.parametrize("which", [0, 1], ids=["lonlat", "web-mercator"])
def test_hull_and_nearest_run_in_ground_metres_p_u1_p_u3(which):
    """P-U1/P-U3 for convex_hull and nearest_users: degrees and Web Mercator (k ≈ 1.32 at
    40.7°N) are projected to UTM 18N; the hull runs at scale ≈ 1, never on degrees or Mercator."""
    frame, kw, pt = _lonlat_frames()[which]
    s = Session(budget=CGP(rho=1e-2))
    g = frame.geopriv(s, user="v", **kw).convex_hull(rho=1e-3, rng=seeded_rng(1))
    params = g.attrs["geopriv"].params
    assert "32618" in params["crs_m"] and 0.999 < params["scale_max"] < 1.001
    one = frame.groupby("v").head(1)
    res = one.geopriv(s, user="v", **kw).nearest_users(pt, 1, rho=1e-3, rng=seeded_rng(2))
    assert "32618" in res.params["crs_m"]
    spent = s.spent()
    assert (spent >= 1e-3 * (1 - 1e-12)).all() and (spent <= 2e-3 * (1 + 1e-12)).all()


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_projection_scale_divides_the_call_budget_p_u3(kind):
    """P-U3: with a projection scale k_s the calls run at ε/k_s per CRS metre (CGP √(2ρ/k)/k_s)."""
    xy = np.random.default_rng(0).uniform(0, 500, (40, 2))
    amt = Fraction(1, 1000) if kind == "cgp" else Fraction(1, 20)
    base = knn_indices(xy, np.zeros(40, np.int64), (0.0, 0.0), 4, kind=kind, amount=amt,
                       rng=seeded_rng(3))  # fmt: skip
    scaled = knn_indices(xy, np.zeros(40, np.int64), (0.0, 0.0), 4, kind=kind, amount=amt,
                         scale_max=Fraction(5, 4), rng=seeded_rng(3))  # fmt: skip
    assert scaled.eps_call[0] == pytest.approx(base.eps_call[0] / 1.25, rel=1e-6)
    assert scaled.eps_call[0] <= base.eps_call[0] / 1.25  # rounded down, never up


def test_query_point_in_another_crs_is_projected_p_u4():
    """P-U4: a query point given as a GeoSeries in EPSG:4326 while the data are in UTM is the
    same public point: same seed, same answer as the point given in UTM."""
    import geopandas as gpd
    import shapely

    rs = np.random.default_rng(4)
    df = pd.DataFrame({"v": np.repeat([1, 2], 50), "x": 583_000 + rs.uniform(0, 3000, 100),
                       "y": 4_507_000 + rs.uniform(0, 3000, 100)})  # fmt: skip
    q = (584_500.0, 4_508_500.0)
    lon, lat = Transformer.from_crs("EPSG:32618", "EPSG:4326", always_xy=True).transform(*q)
    q_ll = gpd.GeoSeries([shapely.Point(lon, lat)], crs="EPSG:4326")
    outs = []
    for point in (q, q_ll):
        s = Session(budget=CGP(rho=1e-2))
        b = df.geopriv(s, user="v", x="x", y="y", crs="EPSG:32618")
        outs.append(kf.knn(b, point, 3, rho=1e-3, rng=seeded_rng(5)).index.tolist())
    assert outs[0] == outs[1]


def test_no_numpy_randomness_in_release_paths_p_n1_p_n2(monkeypatch):
    """P-N1/P-N2: knn, convex_hull and nearest_users never touch numpy's generators (all noise
    comes from the BitSource); a numpy Generator passed as rng is refused, nothing charged."""
    rs = np.random.default_rng(6)  # test data, created before the trap is set
    xy = rs.uniform(0, 2000, (300, 2))
    codes = np.repeat(np.arange(3), 100)

    def trap(*a, **k):
        raise AssertionError("numpy randomness used in a release path")

    for name in (
        "default_rng",
        "RandomState",
        "seed",
        "laplace",
        "normal",
        "uniform",
        "random",
        "rand",
        "randn",
        "permutation",
        "shuffle",
        "choice",
        "randint",
        "exponential",
    ):
        monkeypatch.setattr(np.random, name, trap)
    knn_indices(xy, codes, (1000.0, 1000.0), 5, kind="cgp", amount=1e-3, rng=seeded_rng(7))
    private_hulls(xy, codes, kind="gp", amount=0.1, rng=seeded_rng(8))
    nearest_users_arrays(xy, (1000.0, 1000.0), 5, kind="cgp", amount=1e-3, rng=seeded_rng(9))
    monkeypatch.undo()
    df = pd.DataFrame({"v": codes, "x": 500_000 + xy[:, 0], "y": 4_500_000 + xy[:, 1]})
    s = Session(budget=CGP(rho=1e-2))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="BitSource"):
        kf.knn(df.geopriv(s, user="v", x="x", y="y", crs="EPSG:32618"), (500_500.0, 4_500_500.0),
               2, rho=1e-3, rng=np.random.default_rng(0))  # fmt: skip
    assert s.ledger.snapshot() == before


@pytest.mark.statistical
def test_gp_hull_centre_is_planar_laplace_not_per_axis_p_n3():
    """P-N3: the GP centre noise is planar Laplace: radius Gamma(2, 1/ε') and uniform angle
    (KS p > 1e-6 each; false failure ≤ 2e-6). Power: the same radii fail the KS test against
    Exp (the Exp-radius slip), and the norms of a per-axis Laplace sample of the same size and
    scale (a generated mutant) fail the Gamma(2) test."""
    U = 3000
    eps = 0.2282765162
    x0 = np.array([1000.0, 2000.0])
    out = private_hulls(np.tile(x0, (U * 20, 1)), np.repeat(np.arange(U), 20), kind="gp",
                        amount=eps, k=16, rng=seeded_rng(10))  # fmt: skip
    z = out.centre - x0
    r, ang = np.hypot(*z.T), np.arctan2(z[:, 1], z[:, 0])
    scale = 371.7106567 * (1 + np.sqrt(2) * 2**-10) / 2  # 1/ε', lattice factor included
    assert stats.kstest(r, stats.gamma(2, scale=scale).cdf).pvalue > 1e-6
    assert stats.kstest(r, stats.expon(scale=2 * scale).cdf).pvalue < 1e-6
    assert stats.kstest(ang, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > 1e-6
    per_axis = np.random.default_rng(11).laplace(0, scale, (U, 2))  # the mutant, test data only
    assert stats.kstest(np.hypot(*per_axis.T), stats.gamma(2, scale=scale).cdf).pvalue < 1e-6


def test_nothing_but_the_answer_is_released_p_s3_p_o1():
    """P-S3/P-O1: no T, T+W, Z, W, V or visit count in any output. SVTResult holds positions,
    cap flags, the guarantee and the (public) rates; knn returns row ids only; the hull returns
    noisy anchors, c̃, R̃, k and bounds only; the frames add only rank / k / radius / error."""
    assert set(SVTResult.__dataclass_fields__) == {"index", "capped", "guarantee", "noise"}
    res = sparse_vector([1.0, 2.0, 3.0], threshold=1.0, eps=1.0, runs=3, rng=seeded_rng(12))
    assert all(isinstance(v, Fraction) for v in res.noise.values())
    assert set(res.noise) == {"lam_threshold", "lam_query", "scale_threshold", "scale_query", "g",
                              "eps"}  # fmt: skip
    assert set(KnnArrays.__dataclass_fields__) == {"rows", "k", "capped", "eps_call", "charges",
                                                   "error", "r_min", "sampler_calls"}  # fmt: skip
    assert set(HullArrays.__dataclass_fields__) == {"hulls", "anchors", "centre", "radius", "k",
                                                    "k_raw", "fallback", "error", "spend",
                                                    "charges", "r_min"}  # fmt: skip
    rs = np.random.default_rng(13)
    df = pd.DataFrame(
        {
            "v": np.repeat([1, 2], 60),
            "x": 500_000 + rs.uniform(0, 3000, 120),
            "y": 4_500_000 + rs.uniform(0, 3000, 120),
            "tag": np.arange(120),
        }
    )
    s = Session(budget=CGP(rho=1e-2))
    b = df.geopriv(s, user="v", x="x", y="y", crs="EPSG:32618", public=["tag"])
    out = kf.knn(b, (501_500.0, 4_501_500.0), 3, rho=1e-3, rng=seeded_rng(14))
    # row ids (index), the user, the declared-public tag and the rank: never the rows' x/y
    assert set(out.columns) == {"v", "tag", "knn_rank"}
    assert (out["tag"].to_numpy() == df.loc[out.index, "tag"].to_numpy()).all()  # as given
    forbidden = {"T", "W", "Z", "V", "threshold", "visits", "h", "noise", "distances"}
    assert not forbidden & set(out.attrs["geopriv"]["params"])
    g = kf.convex_hull(b, rho=1e-3, rng=seeded_rng(15))
    assert set(g.columns) == {"v", "k", "radius_m", "error_m", "fallback", "geometry"}
    assert not forbidden & set(g.attrs["geopriv"].params)


@pytest.mark.parametrize("k", [1, 3])
def test_scan_order_does_not_depend_on_the_data_p_s4(k):
    """P-S4: with γ₀ = +20b and ε small against the spread, every call halts at its first
    visited candidate, so the answer is the start of the scan order. Two tuples of the same size
    with opposite distance rankings give the same rows under the same seed (the order comes from
    the randomness only); over seeds the first answer is spread over the rows (not the nearest).
    A distance-sorted scan would return the nearest row every time."""
    n = 12
    near = np.column_stack([np.arange(n) * 10.0, np.zeros(n)])  # row i at 10·i m
    far = near[::-1].copy()  # opposite ranking
    firsts = []
    for seed in range(40):
        a = knn_indices(near, np.zeros(n, np.int64), (0.0, 0.0), k, kind="gp", amount=1e-4,
                        gamma0=20.0, rng=seeded_rng(seed))  # fmt: skip
        b = knn_indices(far, np.zeros(n, np.int64), (0.0, 0.0), k, kind="gp", amount=1e-4,
                        gamma0=20.0, rng=seeded_rng(seed))  # fmt: skip
        assert a.rows[0].tolist() == b.rows[0].tolist()
        firsts.append(int(a.rows[0][0]))
    assert len(set(firsts)) >= 6 and firsts.count(0) < 20


@pytest.mark.statistical
def test_capped_calls_answer_a_uniform_remaining_row_p_s6():
    """P-S6 / §7.3: with γ₀ = −20b and one pass, calls hit the public cap; the answer is a
    uniform remaining row from the query randomness, flagged ``capped``, charged as usual.
    Chi-square against uniform on 5 rows, p > 1e-6 (false failure 1e-6); 5,000 users."""
    U, n = 5000, 5
    xy = np.tile(np.column_stack([np.arange(n) * 50.0, np.zeros(n)]), (U, 1))
    out = knn_indices(xy, np.repeat(np.arange(U), n), (0.0, 0.0), 1, kind="gp", amount=0.01,
                      gamma0=-20.0, max_cycles=1, scan_order="input",
                      rng=seeded_rng(16))  # fmt: skip
    capped = np.array([c[0] for c in out.capped])
    assert capped.mean() > 0.99
    rows = np.array([r[0] for r in out.rows])[capped] % n
    cnt = np.bincount(rows, minlength=n)
    assert stats.chisquare(cnt).pvalue > 1e-6
    assert all(c == Fraction(1, 100) for c in out.charges)


@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_per_call_budget_is_amount_over_k_p_b1(kind):
    """P-B1: CGP calls at √(2ρ/k), GP at ε/k; a user with n_u < k ranks all n_u rows at
    ρ/n_u (ε/n_u) per call: each user pays the amount once."""
    xy = np.random.default_rng(17).uniform(0, 500, (23, 2))
    codes = np.array([0] * 20 + [1] * 3)
    amt = 5e-4 if kind == "cgp" else 0.08
    out = knn_indices(xy, codes, (0.0, 0.0), 8, kind=kind, amount=amt, rng=seeded_rng(18))
    for u, k_u in ((0, 8), (1, 3)):
        nominal = np.sqrt(2 * amt / k_u) if kind == "cgp" else amt / k_u
        assert out.eps_call[u] == pytest.approx(nominal, rel=1e-9)
        assert out.eps_call[u] <= nominal * (1 + 1e-15)


@pytest.mark.parametrize(
    "call",
    [
        lambda b: kf.knn(b, (500_500.0, 4_500_500.0), 2, rho=1e-4),
        lambda b: kf.nearest_users(b, (500_500.0, 4_500_500.0), 1, rho=1e-4),
    ],
    ids=["knn", "nearest_users"],
)
def test_pure_gp_ledger_refuses_cgp_mechanisms_p_b4(call):
    """P-B4 for knn and nearest_users: a pure-GP filter never admits a CGP charge; refused
    before the ledger is touched."""
    df = pd.DataFrame({"v": [1, 2, 3], "x": [500_000.0, 500_100.0, 500_900.0],
                       "y": [4_500_000.0] * 3})  # fmt: skip
    s = Session(budget=GP(eps=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match=r"pure GP|GP"):
        call(df.geopriv(s, user="v", x="x", y="y", crs="EPSG:32618"))
    assert s.ledger.snapshot() == before


def test_error_bounds_use_public_quantities_only_p_o2():
    """P-O2: knn's and the nearest baselines' bounds are equal for two different tuples with the
    same n, k, ρ, β; the hull bound is recomputable from released R̃, k and public n, ρ, β."""
    rs = np.random.default_rng(19)
    a, b = rs.uniform(0, 100, (50, 2)), rs.uniform(0, 90_000, (50, 2))
    z = np.zeros(50, np.int64)
    ea = knn_indices(a, z, (0.0, 0.0), 4, kind="cgp", amount=1e-4, rng=seeded_rng(20)).error
    eb = knn_indices(b, z, (0.0, 0.0), 4, kind="cgp", amount=1e-4, rng=seeded_rng(21)).error
    assert ea.tolist() == eb.tolist()
    na = nearest_users_arrays(a, (0.0, 0.0), 3, kind="cgp", amount=1e-4, method="dist",
                              rng=seeded_rng(22)).error  # fmt: skip
    nb = nearest_users_arrays(b, (0.0, 0.0), 3, kind="cgp", amount=1e-4, method="dist",
                              rng=seeded_rng(23)).error  # fmt: skip
    assert na == pytest.approx(nb, rel=1e-12)
    h = private_hulls(b, z, kind="cgp", amount=1e-3, rng=seeded_rng(24))
    assert h.error[0] == pytest.approx(sum(hull_error("cgp", 1e-3, 50, int(h.k[0]),
                                                      float(h.radius[0]))), rel=1e-12)  # fmt: skip


def test_nearest_users_queries_every_user_in_round_one_adaptive_pitfall_8():
    """adaptive-budgeting §7 item 8: no pre-filtering by true position; every user with an
    allocation takes part in round 1 (and pays for it), however far from q."""
    xy = np.concatenate([np.random.default_rng(25).uniform(-100, 100, (10, 2)),
                         [[1e6, 1e6], [-2e6, 5e5]]])  # fmt: skip
    out = nearest_users_arrays(xy, (0.0, 0.0), 2, kind="cgp", amount=1e-4, rng=seeded_rng(26))
    assert (out.rounds_run >= 1).all()
    assert all(c > 0 for c in out.charges)
