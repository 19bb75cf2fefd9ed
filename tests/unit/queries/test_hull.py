"""PCH (concentrated-geo-privacy.md §8) on arrays: k rule, error constants, split, utility."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from gpframe.errors import InvalidInputError
from gpframe.queries.hull import choose_k, hull_error, private_hulls
from gpframe.testing import seeded_rng


@pytest.mark.parametrize(
    ("rho", "n", "R", "kref", "kcons", "kc_ref", "kc_cons"),
    [
        (5e-8, 5000, 105587, 4.149316457, 1.483792653, 16, 16),
        (5e-4, 5000, 7250, 14.98976862, 5.360330737, 16, 16),
        (5e-4, 20000, 30000, 37.21658305, 12.96942587, 37, 16),
    ],
)
def test_k_rule_matches_spec_8_oracle(rho, n, R, kref, kcons, kc_ref, kc_cons):
    kr, k = choose_k("cgp", rho, [n], [R], rule="reference")
    assert kr[0] == pytest.approx(kref, rel=1e-8) and k[0] == kc_ref
    kr, k = choose_k("cgp", rho, [n], [R], rule="consistent")
    assert kr[0] == pytest.approx(kcons, rel=1e-8) and k[0] == kc_cons


def test_gp_k_rule_and_error_components_match_spec_8_oracle():
    assert choose_k("gp", 0.02282765162, [20000], [16034])[0][0] == pytest.approx(
        2.619531822, rel=1e-8
    )
    assert sum(hull_error("cgp", 5e-2, 20000, 64, 30000)) == pytest.approx(11579.09728, rel=1e-8)
    assert sum(hull_error("gp", 0.2282765162, 5000, 16, 7250)) == pytest.approx(
        33183.75974, rel=1e-8
    )


def _blob(n, seed):
    rs = np.random.default_rng(seed)
    return np.concatenate(
        [rs.normal(5000, 1200, (n - n // 10, 2)), rs.uniform(0, 10000, (n // 10, 2))]
    )


def test_budget_split_sums_to_rho_and_charges_once():
    xy = _blob(2000, 1)
    out = private_hulls(xy, np.zeros(2000, np.int64), kind="cgp", amount=5e-4, rng=seeded_rng(1))
    s = out.spend
    assert s["centre"] + s["radius"] + s["pnn"] + s["release"] == out.charges[0]
    assert float(s["centre"]) == pytest.approx(2 / 3 * 2.5e-5) and float(s["pnn"]) == (
        pytest.approx(0.92 * 4.75e-4)
    )
    assert len(out.anchors[0]) == out.k[0] == 16


@pytest.mark.statistical
def test_hull_utility_in_the_peer_band_and_improves_with_rho():
    """Synthetic box (spec §9.3): median Jaccard at ρ = 5e-4 is near the peer's 0.58–0.66, and
    far above the ρ = 5e-8 value (seeded; 5 runs each)."""
    xy = _blob(5000, 2)
    true = shapely.convex_hull(shapely.multipoints(xy))
    jac = {}
    for rho in (5e-8, 5e-4):
        js = []
        for s in range(5):
            h = private_hulls(
                xy, np.zeros(len(xy), np.int64), kind="cgp", amount=rho, rng=seeded_rng(40 + s)
            ).hulls[0]
            js.append(h.intersection(true).area / h.union(true).area)
        jac[rho] = float(np.median(js))
    assert jac[5e-4] > 0.45 and jac[5e-8] < 0.1


def test_many_users_small_user_falls_back_to_privatize_all_points():
    xy = np.concatenate([_blob(500, 3), [[100.0, 100.0], [120.0, 90.0], [110.0, 130.0]]])
    codes = np.array([0] * 500 + [1] * 3)
    out = private_hulls(xy, codes, kind="gp", amount=0.05, rng=seeded_rng(4))
    assert out.fallback.tolist() == [False, True] and out.k[1] == 3 and len(out.anchors[1]) == 3


def test_fixed_k_and_admitted_mask():
    xy = _blob(400, 5)
    out = private_hulls(
        xy,
        np.repeat([0, 1], 200),
        kind="cgp",
        amount=1e-3,
        k=20,
        admitted=[True, False],
        rng=seeded_rng(5),
    )
    assert out.k.tolist() == [20, 0] and out.charges[1] == 0 and out.hulls[1] is None


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"k": 0}, "k=0"),
        ({"alpha": 1.5}, "alpha"),
        ({"k_rule": "best"}, "k_rule"),
        ({"beta": 2.0}, "beta"),
        ({"k_min": 50, "k_max": 10}, "k_min"),
    ],
)
def test_bad_inputs_raise(kw, match):
    with pytest.raises(InvalidInputError, match=match):
        private_hulls(np.zeros((3, 2)), [0, 0, 0], kind="cgp", amount=1e-3, **kw)


# R8: every check of private_hulls runs before its first draw. A refusal after the centre and
# radius were drawn is a refusal inside the caller's reservation: the batch is charged.


def _undrawn(rng):
    return rng._counter == 0  # the seeded source counts the blocks it handed out


@pytest.mark.parametrize("beta", [5e-324, 1e-310])
def test_tiny_beta_refused_before_any_draw(beta):
    # regression: ln(2/beta) = inf made R̃ infinite and choose_k's k NaN (then a cast to int64)
    rng = seeded_rng(11)
    with pytest.raises(InvalidInputError, match=r"beta=.*at least 1e-300.*Nothing was charged"):
        private_hulls(_blob(50, 1), np.zeros(50, np.int64), kind="cgp", amount=1e-3, beta=beta,
                      rng=rng)  # fmt: skip
    assert _undrawn(rng)


@pytest.mark.parametrize(
    ("n", "kw", "match"),
    [
        # PNN calls at the smallest reachable k (16) above eps = 100, though k = 128 would pass
        (200, {"kind": "cgp", "amount": 6e5}, r"sqrt\(2\*rho/k\)"),
        # PNN calls at the largest k below eps = 2**-40 (centre and radius still calibrate)
        (200, {"kind": "cgp", "amount": 1e-30}, r"sqrt\(2\*rho/k\)"),
        (200, {"kind": "gp", "amount": 1e-10}, r"eps \(PCH anchor release\)"),
        # a fixed k: its PNN calls, whatever the radius
        (200, {"kind": "cgp", "amount": 1e6, "k": 20}, r"sqrt\(2\*rho/k\)"),
        # Remark 1 fallback (n <= k): all n points at rho_1 / n, finer than the lattice allows
        (3, {"kind": "cgp", "amount": 1e9}, r"rho=.*finer than the lattice"),
    ],
)
def test_k_dependent_phases_refused_before_any_draw(n, kw, match):
    # regression: the dry run stopped after the centre and radius phases, so these were refused
    # only after both had been drawn
    rng = seeded_rng(12)
    with pytest.raises(InvalidInputError, match=match) as info:
        private_hulls(_blob(n, 2), np.zeros(n, np.int64), rng=rng, **kw)
    assert "Nothing was charged" in str(info.value)
    assert _undrawn(rng)


def test_k_phase_checks_accept_what_runs():
    # the same amounts one notch inside the limits still run (the checks are not stricter than
    # the phases they calibrate)
    out = private_hulls(_blob(200, 3), np.zeros(200, np.int64), kind="cgp", amount=5e4,
                        rng=seeded_rng(13))  # fmt: skip
    assert out.hulls[0] is not None and 16 <= out.k[0] <= 128
    out = private_hulls(_blob(3, 4), np.zeros(3, np.int64), kind="cgp", amount=1e8,
                        rng=seeded_rng(14))  # fmt: skip
    assert out.fallback[0] and out.k[0] == 3


@pytest.mark.parametrize(
    ("kind", "amount", "phase"),
    [
        # the fuzz harness's example: n <= 16 (fallback), every calibration accepts the amount,
        # but the centre sigma (~1e25 m) put c̃ ± R̃ beyond ±2**40 m after the draws (charged)
        ("cgp", 1.5e-49, "centre"),
        ("gp", 1e-10, "radius"),
        # the anchor release at k = 128 is the widest phase (alpha = 0.99 leaves it 1%)
        ("cgp", 1e-14, "anchor release"),
    ],
)
def test_noise_beyond_the_earth_refused_before_any_draw(kind, amount, phase):
    n = 4 if phase != "anchor release" else 400
    kw = {"alpha": 0.99} if phase == "anchor release" else {}
    rng = seeded_rng(15)
    name = "rho" if kind == "cgp" else "eps"
    match = rf"^{name}=.* too small for convex_hull: its {phase} noise .*Use a larger {name} "
    with pytest.raises(InvalidInputError, match=match + r".*Nothing was charged\.$"):
        private_hulls(_blob(n, 5), np.zeros(n, np.int64), kind=kind, amount=amount, rng=rng, **kw)
    assert _undrawn(rng)


@pytest.mark.parametrize(("kind", "amount"), [("cgp", 1.5e-49), ("gp", 1e-10), ("gp", 1e-7)])
def test_the_suggested_amount_runs(kind, amount):
    # the refusal's "about X or more" is an amount the query accepts (the bound is not stricter
    # than the phases' own noise scales)
    import re

    with pytest.raises(InvalidInputError) as info:
        private_hulls(_blob(4, 6), np.zeros(4, np.int64), kind=kind, amount=amount)
    least = float(re.search(r"about (\S+) or more", str(info.value)).group(1))
    out = private_hulls(_blob(4, 6), np.zeros(4, np.int64), kind=kind, amount=least,
                        rng=seeded_rng(16))  # fmt: skip
    assert out.fallback[0] and np.isfinite(out.anchors[0]).all()


def test_anchor_targets_beyond_the_range_are_clamped_not_refused_after_the_draws():
    # regression: data reaching to within 10 m of 2**40 m put c̃ + R̃ (enlarged by ~100 m)
    # beyond the range; PCH refused only after the centre and radius draws (the query spent)
    x = np.linspace(5e11, 2.0**40 - 10, 40)
    xy = np.column_stack([x, np.zeros_like(x)])
    out = private_hulls(xy, np.zeros(40, np.int64), kind="cgp", amount=1e-2, k=16,
                        rng=seeded_rng(17))  # fmt: skip
    assert out.centre[0, 0] + out.radius[0] >= 2.0**40  # a target was beyond the range
    assert not out.fallback[0] and out.anchors[0].shape == (16, 2)
    assert np.isfinite(out.anchors[0]).all() and out.hulls[0] is not None


def test_negative_radius_floor_refused_before_any_draw():
    # regression (fuzz): a negative floor let R̃ = max(r̃ + enlargement, floor) go negative when
    # the radius noise did (this seed), and k's rule took its square root after the draws
    xy = np.array([[500_000.0, 4_500_000.0]])
    rng = seeded_rng(78)
    with pytest.raises(InvalidInputError, match=r"^radius_floor_m=-20698380 must be .*at least 0"):
        private_hulls(xy, np.zeros(1, np.int64), kind="gp", amount=3.16,
                      radius_floor_m=-20698380, rng=rng)  # fmt: skip
    assert _undrawn(rng)
    # the same draws with the floor at 0: R̃ is floored at 0 and k comes out of the clamp
    out = private_hulls(xy, np.zeros(1, np.int64), kind="gp", amount=3.16, radius_floor_m=0,
                        rng=seeded_rng(78))  # fmt: skip
    assert out.radius[0] == 0.0 and out.k[0] == 1 and out.fallback[0]
    assert np.isfinite(out.anchors[0]).all() and np.isfinite(out.error[0])


@pytest.mark.parametrize(("kind", "amount", "power"), [("cgp", 1e-3, 2), ("gp", 0.05, 1)])
def test_error_is_stated_at_the_projected_amount(kind, amount, power):
    # the noise is drawn for amount / K (GP) or amount / K² (CGP) in projected metres, so the
    # stated bound must be that amount's: at the ground amount it understated the error by K
    from fractions import Fraction

    from gpframe.queries.preview_bounds import hull_rows_known

    xy, codes, K = _blob(400, 7), np.zeros(400, np.int64), 1.25
    out = private_hulls(xy, codes, kind=kind, amount=amount, k=20, scale_max=K,
                        rng=seeded_rng(7))  # fmt: skip
    want = hull_error(kind, float(Fraction(amount) / Fraction(K) ** power), 400, 20,
                      out.radius[0])  # fmt: skip
    assert out.error[0] == pytest.approx(sum(want), rel=1e-12)
    at_ground = sum(hull_error(kind, amount, 400, 20, out.radius[0]))
    assert out.error[0] > at_ground * 1.1
    # the preview's γ₁ + γ₃ at the same amount
    known = hull_rows_known(kind, amount, [400], 20, 0.1, 0.92, K)
    assert known == pytest.approx(want[0] + want[2], rel=1e-12)


@pytest.mark.parametrize(("kind", "amount"), [("cgp", 0.25), ("gp", 1.0)])
def test_alpha_near_zero_states_an_infinite_bound_not_a_float_warning(kind, amount):
    # found by the operations fuzz (alpha=5e-324): C = A/alpha overflowed in choose_k and
    # alpha * amount underflowed in hull_error, raising RuntimeWarning after the draws
    out = private_hulls(_blob(40, 9), np.repeat(np.arange(4), 10), kind=kind, amount=amount,
                        alpha=5e-324, scale_max=1.25, rng=seeded_rng(9))  # fmt: skip
    assert np.isinf(out.error).all()
