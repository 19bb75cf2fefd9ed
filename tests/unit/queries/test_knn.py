"""k-PNN (concentrated-geo-privacy.md §7) on arrays: oracles, semantics, bounds, bad inputs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.queries.knn import (
    call_eps,
    expected_visits,
    knn_error_bound,
    knn_indices,
    pnn_calibration,
    thm412_gamma,
)
from gpframe.testing import seeded_rng


@pytest.mark.parametrize(
    ("rho", "k", "eps_call", "b"),
    [
        (5e-8, 16, 7.905694150e-5, 37947.33192),
        (5e-4, 4, 0.01581138830, 189.7366596),
        (5e-5, 50, 1.414213562e-3, 2121.320344),
    ],
)
def test_call_scales_match_spec_7_oracle(rho, k, eps_call, b):
    e = call_eps("cgp", Fraction(rho), k, Fraction(1))
    assert float(e) == pytest.approx(eps_call, rel=1e-9)
    cal = pnn_calibration(e)
    lat = 1 + float(cal.g) / float(cal.r_min)
    assert float(cal.scale["threshold"]) == pytest.approx(b * lat, rel=1e-9)
    assert float(cal.scale["query"]) == pytest.approx(2 * b * lat, rel=1e-9)


def test_error_bounds_match_spec_7_oracles():
    assert thm412_gamma(20000, 16, 0.1, math.sqrt(2 * 5e-4 / 16), all_ranks=False) == (
        pytest.approx(27768.28761, rel=1e-9)
    )
    assert thm412_gamma(20000, 50, 0.05, math.sqrt(2 * 5e-5 / 50), all_ranks=False) == (
        pytest.approx(162859.8892, rel=1e-9)
    )
    assert thm412_gamma(20000, 16, 0.1, 0.2282765162 / 16, all_ranks=False) == pytest.approx(
        15386.78390, rel=1e-9
    )
    b = 3 / 0.03162277660
    assert knn_error_bound(20000, 1, 0.1, b, -2.0) == pytest.approx(3981.201618, rel=1e-6)
    assert expected_visits(0.0) == pytest.approx(3.715256467, rel=1e-7)
    assert expected_visits(1.0) == pytest.approx(2.447697941, rel=1e-7)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("g0", "g1", "gamma_b", "p0"),
    [
        (500, 100, 0.0, 0.4803067784),
        (500, 100, -2.0, 0.3882324088),
        (100, 500, 0.0, 0.7940453005),
        (300, 100, 0.0, 0.5852200326),
    ],
)
def test_pnn_two_point_law_spec_7(g0, g1, gamma_b, p0):
    """§7 oracle (ε = 0.01, input order, γ₀ = −600 m = −2b): 40,000 seeded users, 6 SE band
    (false failure ~2e-9); the lattice noise is 0.1 % wider, far inside the band."""
    U = 40_000
    xy = np.tile([[g0, 0.0], [g1, 0.0]], (U, 1))
    out = knn_indices(
        xy,
        np.repeat(np.arange(U), 2),
        (0.0, 0.0),
        1,
        kind="gp",
        amount=0.01,
        gamma0=gamma_b,
        scan_order="input",
        rng=seeded_rng(31),
    )
    freq = float(np.mean(np.array([r[0] for r in out.rows]) % 2 == 0))
    assert abs(freq - p0) < 6 * math.sqrt(p0 * (1 - p0) / U)


def test_kpnn_returns_distinct_indices_of_own_rows_and_charges_once():
    rs = np.random.default_rng(0)
    xy = rs.uniform(0, 1000, (300, 2))
    codes = np.repeat(np.arange(3), 100)
    out = knn_indices(xy, codes, (500.0, 500.0), 16, kind="cgp", amount=1e-4, rng=seeded_rng(2))
    for u in range(3):
        r = out.rows[u]
        assert len(set(r.tolist())) == 16 and (codes[r] == u).all()
    assert [float(c) for c in out.charges] == [1e-4] * 3


def test_user_with_one_point_and_users_with_fewer_than_k_points():
    xy = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 1.0], [3.0, 3.0]])
    out = knn_indices(xy, [0, 1, 1, 1], (0.0, 0.0), 5, kind="gp", amount=0.1, rng=seeded_rng(3))
    assert out.rows[0].tolist() == [0]
    assert sorted(out.rows[1].tolist()) == [1, 2, 3]
    assert out.k.tolist() == [1, 3]


@pytest.mark.statistical
def test_pnn_error_bound_holds_at_its_probability():
    """The reported all-ranks bound holds in ≥ 1 − β of seeded runs (β = 0.2, 300 users: the
    bound is loose, so a failure rate above β has probability < 1e-9 unless the bound is wrong).
    Negative control: a bound 100× smaller fails often."""
    rs = np.random.default_rng(5)
    U, n, k = 300, 200, 3
    xy = rs.uniform(0, 5000, (U * n, 2))
    codes = np.repeat(np.arange(U), n)
    p = np.array([2500.0, 2500.0])
    out = knn_indices(xy, codes, p, k, kind="cgp", amount=5e-5, beta=0.2, rng=seeded_rng(6))
    d = np.hypot(*(xy - p).T)
    worst = []
    for u in range(U):
        own = np.sort(d[codes == u])[:k]
        got = d[out.rows[u]]
        worst.append(np.max(got - own))  # rank j: ||x_{t_j} - p|| - ||x_{t*_j} - p||
    worst = np.array(worst)
    assert np.mean(worst > out.error) <= 0.2
    assert np.mean(worst > out.error / 100) > 0.2


def test_reference_compat_uses_input_order_and_negative_shift():
    xy = np.array([[500.0, 0.0], [100.0, 0.0]])
    ref = knn_indices(
        xy, [0, 0], (0.0, 0.0), 1, kind="gp", amount=0.01, compat="reference", rng=seeded_rng(7)
    )
    assert ref.error[0] == pytest.approx(
        knn_error_bound(2, 1, 0.05, 300 * (1 + 2**-10), -2.0) + 5 * 2**-10, rel=1e-9
    )


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"k": 0}, "k=0"),
        ({"point_m": (np.nan, 0.0)}, "point"),
        ({"compat": "paper"}, "compat"),
        ({"gamma0": 50.0}, "gamma0"),
        ({"amount": -1.0}, "amount"),
        ({"kind": "dp"}, "kind"),
        ({"codes": [0, 2]}, "no points"),
        ({"max_cycles": 0}, "max_cycles"),
    ],
)
def test_bad_inputs_raise(kw, match):
    args = {
        "xy_m": [[0.0, 0.0], [1.0, 1.0]],
        "codes": [0, 0],
        "point_m": (0.0, 0.0),
        "k": 1,
        "kind": "gp",
        "amount": 0.1,
        **kw,
    }
    with pytest.raises(InvalidInputError, match=match):
        knn_indices(args.pop("xy_m"), args.pop("codes"), args.pop("point_m"), args.pop("k"), **args)


# ------------------------------------------------------------------ scan order (P-S4), pitfalls


def test_scan_order_is_a_permutation_from_the_query_randomness_only():
    from gpframe.queries.knn import ScanOrder

    n = np.array([1, 2, 3, 7, 1000, 4097])

    def walk(o):  # lazy extension block by block, as a scan asks for positions
        out = []
        for r, m in enumerate(n.tolist()):
            got, pos = [], 0
            while pos < m:
                b = min(m - pos, 5 + pos)
                got += o(np.array([r]), np.arange(pos, pos + b)[None, :])[0].tolist()
                pos += b
            out.append(got)
        return out

    first = walk(ScanOrder(n, "random", seeded_rng(5)))
    for got, m in zip(first, n.tolist(), strict=True):
        assert sorted(got) == list(range(m))
    # same bits and the same requests, no data anywhere: the same order
    assert walk(ScanOrder(n, "random", seeded_rng(5))) == first
    assert walk(ScanOrder(n, "random", seeded_rng(7)))[4][:50] != first[4][:50]
    o = ScanOrder(n, "random", seeded_rng(6))
    o(np.array([4]), np.arange(10)[None, :])
    o.materialize()
    for r, m in enumerate(n.tolist()):
        assert sorted(o(np.array([r]), np.arange(m)[None, :])[0].tolist()) == list(range(m))
    assert ScanOrder(n, "input")(np.array([4]), np.arange(5)[None, :]).tolist() == [[0, 1, 2, 3, 4]]


@pytest.mark.statistical
def test_scan_order_prefix_is_uniform():
    """The first two positions of the lazy order over 20 rows are uniform over the 380 ordered
    pairs: chi-square on 8,000 seeded orders (379 d.o.f.; mean 379, sd 27.5) below 550, a 6-sd
    margin (false failure < 1e-6). A prefix drawn with replacement (a repeat allowed) would put
    5 % of the mass off the pairs and fail the support check."""
    from collections import Counter

    from gpframe.queries.knn import ScanOrder

    z = np.arange(2)[None, :]
    cnt = Counter(
        tuple(ScanOrder(np.array([20]), "random", seeded_rng(s))(np.array([0]), z)[0].tolist())
        for s in range(8_000)
    )
    assert all(i != j for i, j in cnt)
    e = 8_000 / 380
    obs = np.array([cnt.get((i, j), 0) for i in range(20) for j in range(20) if i != j])
    assert ((obs - e) ** 2 / e).sum() < 550


def test_first_visit_is_spread_over_positions():
    """The lazy order's first visited row over 2,000 keys is roughly uniform on 0..9 (chi-square
    with 9 d.o.f. below 40: false failure < 1e-5 for a uniform draw)."""
    from gpframe.queries.knn import ScanOrder

    z = np.zeros((1, 1), np.int64)
    first = [
        int(ScanOrder(np.array([10]), "random", seeded_rng(s))(np.array([0]), z)[0, 0])
        for s in range(2000)
    ]
    cnt = np.bincount(first, minlength=10)
    assert ((cnt - 200) ** 2 / 200).sum() < 40


@pytest.mark.parametrize("k", [1, 5])
def test_threshold_noise_is_fresh_for_every_call_p_s1(monkeypatch, k):
    """P-S1: each PNN call draws its own (Z, W) - 2·k·U threshold-rate draws, never fewer."""
    import gpframe.mechanisms.svt as svt

    drawn: list[tuple[Fraction, int]] = []
    real = svt._noise_fn

    def spy(name):
        fn = real(name)
        if name != "discrete_laplace":
            return fn

        def wrapped(lam, m, bits):
            drawn.append((lam, m))
            return fn(lam, m, bits)

        return wrapped

    monkeypatch.setattr(svt, "_noise_fn", spy)
    U = 3
    xy = np.random.default_rng(0).uniform(0, 1000, (60, 2))
    knn_indices(xy, np.repeat(np.arange(U), 20), (0.0, 0.0), k, kind="cgp", amount=1e-3,
                rng=seeded_rng(1))  # fmt: skip
    lam_t = pnn_calibration(call_eps("cgp", Fraction(1, 1000), k, Fraction(1))).lam["threshold"]
    assert sum(m for lam, m in drawn if lam == lam_t) == 2 * k * U


def test_web_mercator_and_lonlat_input_run_in_ground_metres_p_u1_p_u3():
    """P-U1/P-U3: lon/lat and Web Mercator input are projected to a local metric CRS (UTM), so
    the calls run per ground metre; the scale factor used is the UTM one (≈ 1), never 1.3."""
    import pandas as pd
    from pyproj import Transformer

    import gpframe as gp
    import gpframe.frame.accessor
    from gpframe.ledger import Session

    lon = -74.0 + np.linspace(0, 0.05, 30)
    lat = 40.7 + np.linspace(0, 0.03, 30)
    df = pd.DataFrame({"v": np.repeat([1, 2], 15), "lon": lon, "lat": lat})
    x, y = Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True).transform(lon, lat)
    dm = pd.DataFrame({"v": df.v, "x": x, "y": y})
    NYC = (-75.0, 40.0, -73.0, 41.0)  # a public domain=: the UTM choice depends on no data
    for frame, kw, pt in (
        (df, {"lon": "lon", "lat": "lat", "crs": "EPSG:4326", "domain": NYC}, (-74.0, 40.7)),
        (dm, {"x": "x", "y": "y", "crs": "EPSG:3857", "domain": NYC}, (x[0], y[0])),
    ):
        s = Session(budget=gp.CGP(rho=1e-2))
        out = frame.geopriv(s, user="v", **kw).knn(pt, 2, rho=1e-3, rng=seeded_rng(2))
        params = out.attrs["geopriv"]["params"]
        assert "32618" in params["crs_m"]  # UTM 18N, not degrees, not Web Mercator
        assert 0.999 < params["scale_max"] < 1.001
        assert s.spent().tolist() == pytest.approx([1e-3, 1e-3])


def test_km_coordinates_are_not_rescaled_p_u2():
    """P-U2: the array API takes metres only; the same data in km with ρ·10⁶ is the same
    guarantee, and the call scale follows the declared units (no hidden conversion)."""
    e_m = call_eps("cgp", Fraction(5, 10**4), 1, Fraction(1))
    e_km = call_eps("cgp", Fraction(5, 10**4) * 10**6, 1, Fraction(1))
    assert float(e_km) == pytest.approx(1000 * float(e_m), rel=1e-9)


# --------------------------------------------------------------------------- parity (§9.4)


def _reference_knn(xy, p, k, rho, rs, gamma_b=-2.0):
    """Faithful transcription of the authors' k-PNN (continuous numpy Laplace, input order,
    γ₀ = −2·3/ε per call, cyclic scan): a test oracle, never a release path."""
    eps = math.sqrt(2 * rho / k)
    d = np.hypot(*(xy - p).T)
    cand = np.arange(len(xy))
    out = []
    for _ in range(k):
        dc = d[cand]
        T = dc.min() + rs.laplace(0, 3 / eps) + gamma_b * 3 / eps + rs.laplace(0, 3 / eps)
        t = 0
        while True:  # block of one pass (same law as one at a time)
            hit = np.flatnonzero(dc + rs.laplace(0, 6 / eps, dc.size) <= T)
            if hit.size:
                i = int(cand[hit[0]])
                break
            t += 1
        out.append(i)
        cand = cand[cand != i]
    return np.array(out)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("k", [1, 4])
def test_parity_mode_median_inside_reference_iqr(k):
    """§9.4 parity: on 40 synthetic instances (spec §9.3 generator, n = 5000, ρ = 5e-4), the median
    kNN ratio of ``compat="reference"`` lies inside [p25, p75] of the transcription's ratios on
    the same instances. Seeded; for equal laws the median of 40 leaves the other sample's IQR with
    probability < 1e-3. Negative control (k = 1): a mutant that spends the calls at ρ/10⁴ (a
    wrong-units slip, P-U2) lands outside the interval."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "speed" / "neighbours.py"
    spec = importlib.util.spec_from_file_location("bench_neighbours", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rs = np.random.default_rng(99)  # true data and the oracle's float noise only
    ours, ref, mutant = [], [], []
    for i in range(40):
        xy = bench.synthetic(5000, rs)
        q = bench.synthetic(1, rs)[0].round() + 0.5
        d = np.hypot(*(xy - q).T)
        best = np.sort(d)[:k].sum()
        out = knn_indices(xy, np.zeros(5000, np.int64), q, k, kind="cgp", amount=5e-4,
                          compat="reference", rng=seeded_rng(500 + i))  # fmt: skip
        ours.append(d[out.rows[0]].sum() / best)
        ref.append(d[_reference_knn(xy, q, k, 5e-4, rs)].sum() / best)
        if k == 1:
            mut = knn_indices(xy, np.zeros(5000, np.int64), q, k, kind="cgp", amount=5e-8,
                              compat="reference", rng=seeded_rng(900 + i))  # fmt: skip
            mutant.append(d[mut.rows[0]].sum() / best)
    lo, hi = np.percentile(ref, [25, 75])
    assert lo <= np.median(ours) <= hi, (np.median(ours), lo, hi)
    if k == 1:
        assert not lo <= np.median(mutant) <= hi, (np.median(mutant), lo, hi)


@pytest.mark.parametrize("gamma0_b", [0.0, -2.0])
@pytest.mark.parametrize("beta", [2.2250738585072014e-308, 5e-324])
def test_knn_error_bound_stays_finite_at_the_smallest_beta(beta, gamma0_b):
    """A beta near the smallest double must give a finite bound, not inf from k/beta or beta²."""
    from fractions import Fraction

    import mpmath

    from gpframe.queries.knn import expected_visits, knn_error_bound

    got = knn_error_bound(20000, 3, beta, 100.0, gamma0_b)
    mb, k, n = mpmath.mpf(Fraction(beta).numerator) / Fraction(beta).denominator, 3, 20000
    if gamma0_b == 0.0:
        L = mpmath.log((4 * n + 2) * k / mb)
        want = 100.0 * (5 * L + mpmath.sqrt(2 * L))
    else:
        b1 = mb / (3 * k)
        l1 = mpmath.log(1 / b1)
        want = (
            100.0 * (mpmath.sqrt(2 * l1) + l1)
            + 200.0 * mpmath.log(expected_visits(gamma0_b) * n / (b1 * b1))
            + gamma0_b * 100.0
        )
    assert np.isfinite(got)
    assert got == pytest.approx(float(want), rel=1e-9)


@pytest.mark.parametrize("top", [3, 2**64 - 1])
def test_scan_order_sort_is_the_stable_sort_even_with_ties(top):
    from gpframe.queries.knn import _stable_argsort

    rs = np.random.default_rng(top % 1000)
    for n in (0, 1, 2, 700):
        keys = rs.integers(0, top, n, dtype=np.uint64)
        assert _stable_argsort(keys).tolist() == np.argsort(keys, kind="stable").tolist()
