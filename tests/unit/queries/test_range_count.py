"""Range counting: signed distance, §5.6 oracles, error bound, charges, the ledger path."""

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from gpframe.errors import InvalidInputError
from gpframe.queries import range_count as rc
from gpframe.queries.elimination import charge_if_stopped, split_fractions
from gpframe.testing import seeded_rng

BOX = shapely.box(0, 0, 100, 50)
DIAMOND = shapely.Polygon([(141.4213562373095, 0), (0, 141.4213562373095),
                           (-141.4213562373095, 0), (0, -141.4213562373095)])  # fmt: skip

# ------------------------------------------------------------------------ signed distance


def test_signed_distance_oracle():
    f = rc.signed_distance([[10, 10], [110, 60], [50, 25], [-3, 20], [100, 25]], BOX)
    assert f.tolist() == pytest.approx([-10.0, 14.14213562, -25.0, 3.0, 0.0], abs=1e-8)
    g = rc.signed_distance([[0, 0], [100, 100], [200, 0]], DIAMOND)
    assert g.tolist() == pytest.approx([-100.0, 41.42135624, 58.57864376], abs=1e-7)


@functools.lru_cache(maxsize=64)
def _random_region(seed):
    r = np.random.default_rng(seed)
    polys = []
    for k in range(r.integers(1, 3)):
        cx, cy = 3000.0 * k, r.uniform(-200, 200)
        m = int(r.integers(5, 30))  # star-shaped around the centre: the hole stays inside
        ang = np.linspace(0, 2 * np.pi, m, endpoint=False) + r.uniform(0, np.pi / m, m)
        rad = r.uniform(600, 1200, ang.size)
        shell = np.column_stack([cx + rad * np.cos(ang), cy + rad * np.sin(ang)])
        t = np.linspace(0, 2 * np.pi, 12)[:-1]
        ring = np.column_stack([cx + 150 * np.cos(t), cy + 150 * np.sin(t)])
        hole = [ring] if r.random() < 0.6 else []
        polys.append(shapely.Polygon(shell, hole))
    return polys[0] if len(polys) == 1 else shapely.MultiPolygon(polys)


@pytest.mark.parametrize("seed", range(8))
def test_signed_distance_matches_shapely_with_sign(seed):
    region = _random_region(seed)
    assert region.is_valid
    pts = np.random.default_rng(seed + 100).uniform([-1500, -1500], [4500, 1500], (500, 2))
    f = rc.signed_distance(pts, region)
    for (x, y), v in zip(pts[:150], f[:150], strict=True):
        p = shapely.Point(x, y)
        want = region.boundary.distance(p)
        assert abs(v) == pytest.approx(want, abs=1e-9)
        assert (v <= 0) == region.covers(p) or want < 1e-9


@given(
    seed=st.integers(0, 50),
    p=st.tuples(st.floats(-2000, 5000), st.floats(-2000, 2000)),
    q=st.tuples(st.floats(-2000, 5000), st.floats(-2000, 2000)),
)
@settings(max_examples=80, deadline=None)
def test_signed_distance_is_1_lipschitz(seed, p, q):
    """Lemma 6.3 (holes and multipolygons included, boundary = every ring)."""
    region = _random_region(seed)
    f = rc.signed_distance(np.array([p, q]), region)
    assert abs(f[0] - f[1]) <= math.dist(p, q) + 1e-7


def test_invalid_or_empty_region_refused():
    bowtie = shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)])
    for bad in (bowtie, shapely.Polygon(), shapely.Point(0, 0), "box"):
        with pytest.raises(InvalidInputError, match="Nothing was charged"):
            rc.range_count_arrays(np.zeros((1, 2)), [1], bad, kind="cgp", amount=1e-4,
                                  rng=seeded_rng(1))  # fmt: skip


# ------------------------------------------------------------------------ §5.6 oracles


@pytest.mark.parametrize(
    ("n", "beta", "a", "rpt", "rdist"),
    [(10000, 0.05, 1e-4, 349.3719028, 359.1548388), (10000, 0.05, 2e-6, 2470.432416, 2539.608220),
     (100, 0.1, 0.01, 26.28260885, 27.56973424)],
)  # fmt: skip
def test_correctness_radius_oracle(n, beta, a, rpt, rdist):
    assert float(rc.correctness_radius(n, beta, a, "pt")) == pytest.approx(rpt, rel=1e-9)
    assert float(rc.correctness_radius(n, beta, a, "dist")) == pytest.approx(rdist, rel=1e-9)


def test_gp_baseline_radius_oracle():
    assert math.log(10000 / 0.05) / 0.01 == pytest.approx(1220.607265, rel=1e-9)


@pytest.mark.parametrize(
    ("w", "a", "b", "s"),
    [(100, 1000, 1000, 10.10205144), (500, 1000, 1000, 292.8932188), (100, 2000, 500, 8.051866037),
     (300, 500, 500, 196.4466094), (50, 200, 3000, 1.564028866), (1000, 200, 200, 958.5786438)],
)  # fmt: skip
def test_threshold_shift_oracle(w, a, b, s):
    assert float(rc.threshold_shift_rectangle(w, a, b)) == pytest.approx(s, rel=1e-9)
    # dispatch on a (rotated) rectangle uses the closed form
    rect = shapely.affinity.rotate(shapely.box(0, 0, a, b), 30)
    assert float(rc.shift_for_region([w], rect)[0]) == pytest.approx(s, rel=1e-7)


def test_threshold_shift_band_areas_equal():
    def bands(w, a, b, s):
        inner = max(a - 2 * w - 2 * s, 0) * max(b - 2 * w - 2 * s, 0)
        return (a + 2 * w - 2 * s) * (b + 2 * w - 2 * s) - a * b, a * b - inner

    for (w, a, b), want in [((100, 1000, 1000), 391918.3588), ((100, 2000, 500), 493558.5072),
                            ((500, 1000, 1000), 1000000.000)]:  # fmt: skip
        s = float(rc.threshold_shift_rectangle(w, a, b))
        o, i = bands(w, a, b, s)
        assert o == pytest.approx(want, rel=1e-9) and i == pytest.approx(want, rel=1e-9)


def test_polygon_shift_by_bisection_balances_buffered_bands():
    region = _random_region(3)
    s = rc.threshold_shift_polygon(80.0, region)
    assert 0 < s < 80
    o, i = rc._bands(region, 80.0, s)
    assert o == pytest.approx(i, rel=1e-6)


def test_polygon_shift_needs_few_buffers(monkeypatch):
    # each _bands call buffers the region twice: a tenth of a second per buffer on a coastline
    calls = []
    real = rc._bands

    def counting(region, w, s):
        calls.append(s)
        return real(region, w, s)

    monkeypatch.setattr(rc, "_bands", counting)
    region = _random_region(3)
    s = rc.threshold_shift_polygon(80.0, region)
    assert 0 < s < 80
    assert len(calls) == len(set(calls)) and len(calls) <= 16


@functools.lru_cache(maxsize=1)
def _coastline():
    # a jagged shore (1500 vertices, ±12 m of noise on each), a lake and a rough island: the
    # detail a simplification at w/5 removes, in a region whose exact root costs a second
    r = np.random.default_rng(7)
    ang = np.linspace(0, 2 * np.pi, 1500, endpoint=False)
    rad = 3000 + 400 * np.sin(5 * ang) + 150 * np.sin(23 * ang) + r.uniform(-12, 12, ang.size)
    t = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    lake = np.column_stack([200 + 300 * np.cos(t), 200 * np.sin(t)])
    ti = np.linspace(0, 2 * np.pi, 300, endpoint=False)
    ri = 250 + r.uniform(-15, 15, ti.size)
    return shapely.MultiPolygon([
        shapely.Polygon(np.column_stack([rad * np.cos(ang), rad * np.sin(ang)]), [lake]),
        shapely.Polygon(np.column_stack([4200 + ri * np.cos(ti), ri * np.sin(ti)])),
    ])  # fmt: skip


def _fresh_shift(w, region, monkeypatch):
    monkeypatch.setattr(rc, "_SHIFTS", {})
    monkeypatch.setattr(rc, "_SIMPLE", {})
    return float(rc.shift_for_region([w], region)[0])


@pytest.mark.parametrize("w", [30.0, 80.0])
def test_polygon_shift_on_simplified_region_matches_exact_root(w, monkeypatch):
    # docs/operations/range_count.md: within 1 % of w of the full-resolution root
    region = _coastline()
    exact = rc.threshold_shift_polygon(w, region)
    assert 0 < exact < 0.1 * w
    assert abs(_fresh_shift(w, region, monkeypatch) - exact) <= 0.01 * w


@pytest.mark.parametrize("w", [80.0, 150.0])  # a root below w/4 (the model), one above (buffers)
def test_polygon_shift_on_a_simplified_circle_matches_exact_root(w, monkeypatch):
    # a smooth convex region of 2049 vertices: simplified, its chords lie inside the circle, a
    # bias the buffer distances correct for
    circle = shapely.Point(0, 0).buffer(300, quad_segs=512)
    assert shapely.get_num_coordinates(circle) >= rc._SIMPLIFY_MIN_VERTICES
    exact = rc.threshold_shift_polygon(w, circle)
    assert (exact < rc._MODEL_RANGE * w) == (w == 80.0)
    assert abs(_fresh_shift(w, circle, monkeypatch) - exact) <= 0.01 * w


def test_polygon_shift_model_is_exact_for_a_convex_polygon(monkeypatch):
    # an octagon (9 vertices, not simplified): the dilation's area is exactly quadratic in its
    # distance (Steiner), so the second-order outer band leaves only the searches' tolerances
    octagon = shapely.Point(0, 0).buffer(200, quad_segs=2)
    exact = rc.threshold_shift_polygon(80.0, octagon)
    assert 0.2 * 80 < exact < rc._MODEL_RANGE * 80
    assert _fresh_shift(80.0, octagon, monkeypatch) == pytest.approx(exact, abs=4e-4 * 80)


def test_polygon_shift_on_shipped_boroughs_matches_exact_root(monkeypatch):
    import gpframe as gp

    boroughs = gp.datasets.load("nyc_boroughs").to_crs(32618).geometry.values
    w = 70.71067811865476  # the noise scale of ρ = 1e-4
    got = [_fresh_shift(w, b, monkeypatch) for b in boroughs]
    want = [rc.threshold_shift_polygon(w, b) for b in boroughs]
    assert sum(v == 0 for v in want) == 1  # a borough whose outer band is already the smaller
    for g, e in zip(got, want, strict=True):
        assert (g == 0) == (e == 0) and abs(g - e) <= 0.01 * w


def test_polygon_shift_takes_few_buffers_of_the_simplified_region(monkeypatch):
    # Newton with the perimeters as slope: three or four buffers where bisection needs dozens
    calls = []
    real = shapely.buffer

    def counting(geom, distance, **kw):
        calls.append(distance)
        return real(geom, distance, **kw)

    monkeypatch.setattr(shapely, "buffer", counting)
    s = _fresh_shift(80.0, _coastline(), monkeypatch)
    assert 0 < s < 8 and len(calls) <= 6


@pytest.mark.parametrize(
    ("poly", "rate"),
    [(shapely.box(0, 0, 100, 50), 2 * math.pi),  # four convex right angles
     (shapely.Polygon([(0, 0), (100, 0), (100, 40), (40, 40), (40, 100), (0, 100)]),
      5 * math.pi / 2 - 2),  # five convex, one concave: its edges shorten by tan(45°) each
     (shapely.box(0, 0, 100, 100).difference(shapely.box(30, 30, 60, 60)), 2 * math.pi - 8),
     (shapely.box(0, 0, 100, 100).reverse(), 2 * math.pi),  # orientation does not matter
     (shapely.MultiPolygon([shapely.box(0, 0, 100, 50),  # every part's rings, summed
                            shapely.box(200, 0, 300, 100).difference(shapely.box(230, 30, 260, 60)),
                            shapely.box(400, 0, 450, 50).reverse()]), 6 * math.pi - 8)],
)  # fmt: skip
def test_perimeter_rate_of_a_buffer(poly, rate):
    assert rc._perimeter_rate(poly) == pytest.approx(rate, rel=1e-12)
    # against GEOS: the perimeter of a round buffer grows at this rate (its arcs are polygons of
    # 64 segments a quarter, a relative 1e-4 short of circles)
    grown = shapely.buffer(poly, 1.0, quad_segs=64).length - poly.length
    assert grown == pytest.approx(rate, rel=1e-3)


def test_polygon_shift_bands_balance_on_the_full_region(monkeypatch):
    # an oracle independent of both searches: at the returned shift, the buffered bands of the
    # full-resolution region are equal to within the band slope times 1 % of w
    region, w = _coastline(), 80.0
    s = _fresh_shift(w, region, monkeypatch)
    o, i = rc._bands(region, w, s)
    slope = region.length  # both bands grow at about the perimeter per metre
    assert 0 < s < w and abs(o - i) <= 2 * slope * 0.01 * w


def test_polygon_shift_is_zero_when_the_outer_band_is_smaller(monkeypatch):
    # a comb: dilation fills the 10 m gaps, erosion removes the 30 m teeth
    teeth = [shapely.box(40 * k, 0, 40 * k + 30, 600) for k in range(30)]
    comb = shapely.union_all([*teeth, shapely.box(0, -100, 1180, 0)])
    assert rc.threshold_shift_polygon(30.0, comb) == 0.0
    assert _fresh_shift(30.0, comb, monkeypatch) == 0.0


def test_polygon_shift_does_not_depend_on_the_other_scales_asked(monkeypatch):
    region = _coastline()
    alone = _fresh_shift(60.0, region, monkeypatch)
    monkeypatch.setattr(rc, "_SHIFTS", {})
    monkeypatch.setattr(rc, "_SIMPLE", {})
    together = rc.shift_for_region([33.0, 60.0, 250.0], region)
    assert together[1] == alone


def _within_band(region, simple, tol):
    # what the shift's accuracy rests on: the simplified region differs from the region only
    # within tol of its boundary (the band's arcs drawn finely, so its chords do not matter)
    band = shapely.buffer(region.boundary, tol, quad_segs=64)
    return region.symmetric_difference(simple).difference(band).area <= 1e-6 * region.area


def _slit_disc(seed):
    # a disc cut by six slits 4 m wide whose walls wiggle by ±3 m: simplified to 10 m, a slit's
    # walls straighten into chords that can cross each other
    r = np.random.default_rng(seed)
    slits = []
    for k in range(6):
        s = np.linspace(300, 1100, 200)
        line = shapely.LineString(np.column_stack([s, r.uniform(-3, 3, s.size)]))
        slit = line.buffer(2.0, quad_segs=1, cap_style="flat")
        slits.append(shapely.affinity.rotate(slit, 60 * k, origin=(0, 0)))
    return shapely.Point(0, 0).buffer(1000, quad_segs=256).difference(shapely.union_all(slits))


def test_simplified_rings_keep_every_island_and_hole():
    # plain Douglas-Peucker on the whole region drops a ring thinner than the tolerance
    islet = shapely.Polygon([(4200, 400), (4230, 402), (4260, 400), (4230, 398)])
    region = shapely.MultiPolygon([*shapely.get_parts(_coastline()), islet])
    assert len(shapely.get_parts(shapely.simplify(region, 16.0, preserve_topology=False))) < 3
    simple = rc._simplify_rings(region, 16.0)
    assert simple.is_valid and len(shapely.get_parts(simple)) == 3
    assert sum(len(p.interiors) for p in shapely.get_parts(simple)) == 1  # the lake
    assert shapely.get_num_coordinates(simple) < 0.3 * shapely.get_num_coordinates(region)
    assert _within_band(region, simple, 16.0)


def test_simplified_rings_that_cross_are_repaired_within_the_band():
    region = _slit_disc(2)
    rings = shapely.simplify(shapely.get_rings(region), 10.0, preserve_topology=False)
    assert not shapely.Polygon(rings[0], rings[1:]).is_valid  # the raw chords cross
    simple = rc._simplify_rings(region, 10.0)
    assert simple.is_valid and _within_band(region, simple, 10.0)


def test_simplified_parts_that_overlap_are_merged():
    # an islet in a shallow bay: the shore's chord across the bay runs through it
    shore = shapely.box(-500, -500, 500, 0).difference(shapely.box(-50, -8, 50, 0))
    region = shapely.MultiPolygon([shore, shapely.box(-45, -7, 45, -2)])
    simple = rc._simplify_rings(region, 10.0)
    assert simple.is_valid and simple.area == pytest.approx(1000 * 500)
    assert _within_band(region, simple, 10.0)


def test_simplified_part_falls_back_when_a_repair_moves_too_much(monkeypatch):
    # a repair that moved more area than the band within tol of the part's boundary holds is
    # not trusted: that part is simplified topology-preserving instead
    region = _slit_disc(2)
    monkeypatch.setattr(shapely, "make_valid", lambda g, **kw: shapely.buffer(g, -50.0))
    simple = rc._simplify_rings(region, 10.0)
    assert simple.equals(shapely.simplify(region, 10.0, preserve_topology=True))


# ------------------------------------------------------------------------ range_count_arrays


def _population(n, seed=0, half=4000.0):
    return np.random.default_rng(seed).uniform(-half, half, (n, 2))


SQUARE = shapely.box(-1500, -1500, 1500, 1500)


@pytest.mark.parametrize("method", rc.METHODS)
@pytest.mark.parametrize("kind", ["cgp", "gp"])
def test_charges_and_histogram(method, kind):
    n = 600
    xy = _population(n)
    amount = np.full(n, 1e-4 if kind == "cgp" else 0.02)
    amount[:10] = 0.0  # exhausted: excluded and counted
    out = rc.range_count_arrays(
        xy,
        np.arange(n),
        SQUARE,
        kind=kind,
        amount=amount,
        method=method,
        rounds=5,
        split="doubling",
        rng=seeded_rng(7),
    )
    assert out.n_excluded == 10 and out.n_queried == n - 10
    assert (out.charges[:10] == 0).all()
    a = Fraction(repr(float(amount[-1])))
    c = 5 if method.endswith("elim") else 1
    pi = split_fractions("doubling" if c == 5 else "even", c)
    for i in range(10, n):
        assert out.charges[i] == charge_if_stopped(a, pi, int(out.rounds_run[i])) <= a
    assert out.rounds_histogram.sum() == n - 10
    if method.endswith("elim"):
        assert out.saving > 0 and out.n_low + out.n_high > 0
    else:
        assert out.saving == 0 and out.n_undecided == n - 10
    assert 0 <= out.estimate <= out.n_queried and 0 <= out.error <= out.n_undecided


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["dist", "pt-elim", "dist-elim"])
def test_error_bound_holds_at_stated_probability(method):
    """|ĉ − c| ≤ U with probability ≥ 1 − β (spec §5.1), β = 0.2 to make failures visible.

    100 seeded trials; failures are Binomial(100, p ≤ 0.2). The test fails on more than 40,
    which has probability binom.sf(40, 100, 0.2) < 1e-5 when the bound holds (false-failure
    probability < 1e-5). Users are packed near the boundary, where mistakes happen. Negative
    control: reporting U = 0 (no bound) fails the same threshold.
    """
    beta, trials, limit = 0.2, 100, 40
    assert binom.sf(limit, trials, beta) < 1e-5
    r = np.random.default_rng(5)
    ang = r.uniform(0, 2 * np.pi, 120)
    rad = 1500 + r.uniform(-60, 60, 120)
    region = shapely.Point(0, 0).buffer(1500, quad_segs=32)
    xy = np.column_stack([rad * np.cos(ang), rad * np.sin(ang)])
    true = int((rc.signed_distance(xy, region) <= 0).sum())
    rng = seeded_rng(99)
    fails = ctrl = 0
    for _ in range(trials):
        out = rc.range_count_arrays(
            xy,
            np.arange(120),
            region,
            kind="cgp",
            amount=1e-4,
            method=method,
            rounds=3,
            split="even",
            beta=beta,
            rng=rng,
        )
        err = abs(out.estimate - true)
        fails += err > out.error
        ctrl += err > 0
    assert fails <= limit
    assert ctrl > limit  # the mutant "U = 0" would fail


def test_far_users_all_eliminated_and_count_exact():
    """Cor. 6.3: when S is empty the count is exact w.p. ≥ 1 − β."""
    xy = np.array([[0.0, 0.0]] * 5 + [[20000.0, 0.0]] * 5)
    out = rc.range_count_arrays(
        xy,
        np.arange(10),
        SQUARE,
        kind="cgp",
        amount=1e-3,
        method="dist-elim",
        rounds=4,
        split="even",
        rng=seeded_rng(2),
    )
    assert out.n_undecided == 0 and out.estimate == 5 and out.error == 0
    assert out.rounds_histogram[1] == 10  # everybody stopped after round 1: charged a/4


def test_repeated_users_refused():
    with pytest.raises(InvalidInputError, match="one point"):
        rc.range_count_arrays(np.zeros((2, 2)), [1, 1], SQUARE, kind="cgp", amount=1e-4,
                              rng=seeded_rng(1))  # fmt: skip


# ------------------------------------------------------------------------ ledger driver


def _projected(xy, users):
    import pandas as pd
    import pyproj

    from gpframe.geo import Projected

    crs = pyproj.CRS("EPSG:32618")
    return Projected(xy=xy, users=np.asarray(users), index=pd.RangeIndex(len(users)),
                     crs_in=crs, crs_m=crs, scale_max=1.0)  # fmt: skip


def test_run_range_count_charges_savings_into_the_ledger():
    import gpframe as gp

    n = 300
    xy = _population(n) + np.array([500000.0, 4500000.0])
    region = shapely.affinity.translate(SQUARE, 500000.0, 4500000.0)
    s = gp.Session(budget=gp.CGP(rho=2e-4))
    users = [f"u{i}" for i in range(n)]
    res = rc.run_range_count(
        s,
        _projected(xy, users),
        region,
        rho=1e-4,
        method="dist-elim",
        rounds=4,
        split="even",
        rng=seeded_rng(3),
    )
    rem = s.remaining(users)
    spent = s.spent_exact(users)
    assert res.n_charged == n and res.saved > 0
    assert (rem >= 1e-4 - 1e-18).all() and (rem > 1e-4 + 1e-12).any()  # savings are visible
    assert spent.to_numpy().astype(float) == pytest.approx(res.charges.loc[users].to_numpy())
    assert sum(res.params["rounds_histogram"]) == n
    # exhaust a few users: they are excluded and counted, charged nothing
    s.set_budget(users[:7], gp.CGP(rho=1e-5))
    before = s.spent_exact(users[:7])
    res2 = rc.run_range_count(
        s, _projected(xy, users), region, rho=1e-4, method="dist", rng=seeded_rng(4)
    )
    assert res2.n_excluded == 7 and (s.spent_exact(users[:7]) == before).all()


def test_run_range_count_bad_region_leaves_ledger_untouched():
    import gpframe as gp

    s = gp.Session(budget=gp.CGP(rho=2e-4))
    snap = s.ledger.snapshot()
    bowtie = shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)])
    for region, kw in [(bowtie, {"rho": 1e-4}), (SQUARE, {"eps": 0.1}),
                       (SQUARE, {"rho": 1e-4, "method": "exact"})]:  # fmt: skip
        with pytest.raises(InvalidInputError, match="Nothing was charged"):
            rc.run_range_count(s, _projected(np.zeros((2, 2)), [1, 2]), region, **kw)
    assert s.ledger.snapshot() == snap


def test_signed_distance_by_segment_tree_is_bit_identical():
    # a coastline-like ring (3000 vertices, a hole and a second part) and 5000 points: the tree path
    ang = np.linspace(0, 2 * np.pi, 3000, endpoint=False)
    rad = 4000 + 600 * np.sin(9 * ang) + np.random.default_rng(1).uniform(-20, 20, ang.size)
    shell = np.column_stack([rad * np.cos(ang), rad * np.sin(ang)])
    region = shapely.MultiPolygon([
        shapely.Polygon(shell, [shapely.box(-500, -500, 500, 500).exterior.coords]),
        shapely.box(6000, 0, 7000, 1000),
    ])  # fmt: skip
    xy = np.random.default_rng(2).uniform(-6000, 8000, (5000, 2))
    assert rc._TREE_MIN_POINTS <= len(xy)
    want = shapely.distance(region.boundary, shapely.points(xy))
    want = np.where(shapely.contains_xy(region, xy[:, 0], xy[:, 1]), -want, want)
    assert np.array_equal(rc.signed_distance(xy, region), want)


def test_polygon_shift_is_remembered_per_region_and_w(monkeypatch):
    region = _random_region(4)
    calls = []
    real = rc._fast_shift

    def counting(w, simple, area, bias):
        calls.append(w)
        return real(w, simple, area, bias)

    monkeypatch.setattr(rc, "_fast_shift", counting)
    monkeypatch.setattr(rc, "_SHIFTS", {})
    first = rc.shift_for_region([60.0, 60.0, 90.0], region)
    n = len(calls)
    assert n > 0
    again = rc.shift_for_region([90.0, 60.0], region)
    assert len(calls) == n and again.tolist() == [first[2], first[0]]
    rc.shift_for_region([60.0], shapely.affinity.translate(region, 1.0))  # another region
    assert len(calls) > n


def test_shift_is_computed_only_for_users_it_can_decide(monkeypatch):
    # θ = −s with s in [0, w]: an undecided user with estimate ≤ −w is inside and one above 0
    # outside whatever s is, so only the noise scales of users in (−w, 0] need the buffers
    region = _coastline()
    xy = np.random.default_rng(5).uniform(-4000, 4500, (400, 2))
    amount = np.random.default_rng(6).choice([2e-5, 5e-5, 1e-4], xy.shape[0])
    asked = []
    real = rc.shift_for_region

    def spy(w, reg):
        asked.append(np.asarray(w).copy())
        return real(w, reg)

    monkeypatch.setattr(rc, "shift_for_region", spy)
    out = rc.range_count_arrays(xy, np.arange(xy.shape[0]), region, kind="cgp", amount=amount,
                                rng=seeded_rng(8))  # fmt: skip
    el = out.elimination
    S = el.state == 0
    window = S & (el.estimate > -el.std) & (el.estimate <= 0)
    assert 0 < window.sum() < S.sum()  # users on both sides of the window
    assert len(asked) == 1 and np.array_equal(asked[0], el.std[window])
    # the same decisions as shifting every undecided user
    every = el.estimate[S] <= -real(el.std[S], region)
    assert np.array_equal(out.inside[S], every)
