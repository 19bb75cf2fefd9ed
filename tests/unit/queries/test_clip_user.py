"""Clip-User planning: formulas, oracles and invariants of clip-user.md §3-§9, §11.3, §12."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpframe.errors import InvalidInputError
from gpframe.queries.clip_user import (
    ErrorModel,
    clip_user_plan,
    err,
    h,
    h_exact,
    mean_bias,
    mean_sensitivity,
    variance_bias,
    variance_sensitivity,
)
from gpframe.queries.clip_user.pseudo_user import pseudo_user_errors

# ------------------------------------------------------------------------------- §12.1-§12.4


@pytest.mark.parametrize(
    ("counts", "lo", "hi", "expected"),
    [
        ((3, 1, 2), 0, 65, Fraction(65, 2)),
        ((5, 2, 2, 1), 10, 40, Fraction(15)),
        ((2, 2, 2, 1), 10, 40, Fraction(60, 7)),
    ],
)
def test_mean_sensitivity_matches_oracles_12_1(counts, lo, hi, expected):
    assert mean_sensitivity(counts, lo, hi) == expected


@pytest.mark.parametrize(
    ("counts", "W", "expected"),
    [
        ((3, 1, 2), 65, Fraction(4225, 4)),
        ((1, 1, 1, 1, 1), 1, Fraction(4, 25)),
        ((4, 1, 2), 30, Fraction(10800, 49)),
        ((2, 1, 1, 1, 1), 30, Fraction(200)),
        ((2, 2, 2, 1), 30, Fraction(9000, 49)),
        ((5, 2, 2, 1), 30, Fraction(225)),
    ],
)
def test_variance_sensitivity_matches_oracles_12_2(counts, W, expected):
    assert variance_sensitivity(counts, 0, W) == expected


@pytest.mark.parametrize(
    ("orig", "ret", "W", "e_mu", "e_v"),
    [
        ((5, 2, 2, 1), (2, 2, 2, 1), 30, Fraction(9), Fraction(189)),
        ((3, 1, 2), (0, 1, 2), 65, Fraction(65, 2), Fraction(4225, 4)),
        ((4, 1, 2), (4, 1, 0), 30, Fraction(60, 7), Fraction(9000, 49)),
        ((4, 2, 1), (0, 2, 1), 30, Fraction(120, 7), Fraction(10800, 49)),
        ((3, 3), (3, 3), 1, Fraction(0), Fraction(0)),
    ],
)
def test_biases_match_oracles_12_3_12_4(orig, ret, W, e_mu, e_v):
    assert mean_bias(orig, ret, 0, W) == e_mu
    assert variance_bias(orig, ret, 0, W) == e_v


def test_h_properties_section_3():
    for n in range(1, 30):
        vals = [h_exact(k, n) for k in range(n + 1)]
        assert vals[0] == 0 and all(a <= b for a, b in itertools.pairwise(vals))
        assert max(vals) <= Fraction(1, 4)
        assert vals[n] == Fraction((n // 2) * ((n + 1) // 2), n * n)
        assert np.allclose(h(np.arange(n + 1), n), [float(v) for v in vals], rtol=1e-15)


@pytest.mark.parametrize(
    ("orig", "ret", "W", "eps", "b_mu", "b_v", "E"),
    [
        ((5, 2, 2, 1), (2, 2, 2, 1), 30, 1, 17.14285714, 367.3469388, 741.7506840),
        ((5, 2, 2, 1), (5, 2, 2, 1), 30, 1, 30.0, 450.0, 678.8225099),
        ((3, 1, 2), (3, 1, 2), 65, 1, 65.0, 2112.5, 3079.450032),
        ((3, 1, 2), (0, 1, 2), 65, 0.5, 173.3333333, 3755.555556, 6645.037952),
    ],
)
def test_scales_and_grid_error_match_oracles_12_5(orig, ret, W, eps, b_mu, b_v, E):
    model = ErrorModel(W=float(W), eps_mu=eps / 2, eps_v=eps / 2)
    m, r, rs = sum(orig), sum(ret), max(ret)
    parts = model.parts(m, r, rs)
    assert float(parts["b_mu"]) == pytest.approx(b_mu, rel=1e-9)
    assert float(parts["b_V"]) == pytest.approx(b_v, rel=1e-9)
    assert float(parts["E"]) == pytest.approx(E, rel=1e-9)
    assert float(err(m, r, rs, model)) == pytest.approx(E, rel=1e-9)


def test_error_is_bit_identical_for_identical_triples():
    model = ErrorModel(W=65.0, eps_mu=0.5, eps_v=0.5)
    a = err(np.array([8, 8, 2]), np.array([7, 7, 1]), np.array([5, 5, 1]), model)
    assert a[0] == a[1] and float(err(8, 7, 5, model)) == a[0]
    assert math.isinf(float(err(3, 0, 0, model)))


# ------------------------------------------------------------------------------- brute force


def _var(x):
    x = np.asarray(x, dtype=float)
    return float(((x - x.mean()) ** 2).mean())


def _brute_sensitivity(counts, grid):
    """max over users and lattice datasets of |f(D) - f(D')|, others held equal (App. B)."""
    best_mu = best_v = 0.0
    for who, k in enumerate(counts):
        others = [c for i, c in enumerate(counts) if i != who]
        n_o = sum(others)
        for o in itertools.combinations_with_replacement(grid, n_o):
            mus, vs = [], []
            for x in itertools.combinations_with_replacement(grid, k):
                d = list(o) + list(x)
                mus.append(float(np.mean(d)))
                vs.append(_var(d))
            best_mu = max(best_mu, max(mus) - min(mus))
            best_v = max(best_v, max(vs) - min(vs))
    return best_mu, best_v


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3).filter(lambda c: sum(c) <= 5))
def test_sensitivities_equal_brute_force_on_lattice(counts):
    """App. B: lattice {0, 1/2, 1} reaches the vertex maxima, so brute force equals the formula."""
    mu, v = _brute_sensitivity(counts, (0.0, 0.5, 1.0))
    assert mu == pytest.approx(float(mean_sensitivity(counts, 0, 1)), abs=1e-12)
    assert v == pytest.approx(float(variance_sensitivity(counts, 0, 1)), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 7), st.data())
def test_biases_equal_brute_force_on_vertices(m, data):
    """§5 / App. A.3-A.4: maxima sit at vertices {0, W}; enumerate all of them."""
    r = data.draw(st.integers(1, m))
    best_mu = best_v = 0.0
    for bits in itertools.product((0.0, 1.0), repeat=m):
        kept = bits[:r]
        best_mu = max(best_mu, abs(np.mean(bits) - np.mean(kept)))
        best_v = max(best_v, abs(_var(bits) - _var(kept)))
    ones = [1] * m
    ret = [1] * r + [0] * (m - r)
    assert best_mu == pytest.approx(float(mean_bias(ones, ret, 0, 1)), abs=1e-12)
    assert best_v == pytest.approx(float(variance_bias(ones, ret, 0, 1)), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_random_neighbours_never_exceed_sensitivity_12_8(counts, seed):
    """§12.8.1 and the witnesses of §4.3 (which attain equality)."""
    rs = np.random.default_rng(seed)
    L, U = 10.0, 40.0
    d_mu, d_v = mean_sensitivity(counts, L, U), variance_sensitivity(counts, L, U)
    for _ in range(20):
        data = [rs.uniform(L, U, c) for c in counts]
        who = int(rs.integers(len(counts)))
        nb = list(data)
        nb[who] = rs.uniform(L, U, counts[who])
        a, b = np.concatenate(data), np.concatenate(nb)
        assert abs(a.mean() - b.mean()) <= float(d_mu) * (1 + 1e-12)
        assert abs(_var(a) - _var(b)) <= float(d_v) * (1 + 1e-12) + 1e-12
    # witnesses
    n, k = sum(counts), max(counts)
    who = counts.index(k)
    t = min(k, n // 2)
    other = [L] * (n - k)
    assert np.mean(other + [U] * k) - np.mean(other + [L] * k) == pytest.approx(float(d_mu))
    assert _var(other + [U] * t + [L] * (k - t)) == pytest.approx(float(d_v))
    del who


# ------------------------------------------------------------------------------- §12.6


def _instance():
    rows = {
        "u0": {0: 5, 1: 1},
        "u1": {0: 1, 2: 1, 3: 1},
        "u2": {0: 1, 2: 3, 4: 1},
        "u3": {0: 1, 1: 1, 3: 1, 4: 2},
    }
    recs = [(u, c, n) for u, d in rows.items() for c, n in d.items()]
    return pd.DataFrame(recs, columns=["user", "cell", "count"])


def _retained(plan):
    o = plan.occupancy
    M = np.zeros((o.n_users, o.n_cells), int)
    M[o.u, o.j] = plan.r
    return M


def test_end_to_end_default_run_12_6():
    plan = clip_user_plan(_instance(), 0, 65, 1, clip="clip-user", trace_candidates=True)
    assert plan.Gamma == 4 and plan.Gamma_prime == 3 and plan.status == "halted"
    assert plan.j_worst == 2
    assert plan.E_star == pytest.approx(3125.411973, abs=1e-6)
    assert plan.suppressed == [("u3", 4), ("u3", 1), ("u1", 3)]
    assert _retained(plan).tolist() == [
        [5, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 0, 3, 0, 1],
        [1, 0, 0, 1, 0],
    ]
    assert np.allclose(
        plan.E, [3102.431002, 1272.597763, 3125.411973, 1272.597763, 1166.069985], rtol=0, atol=1e-6
    )
    assert plan.E.max() == plan.E_star
    assert plan.cells_kept.tolist() == [2, 2, 3, 2]
    assert plan.charges.tolist() == [2, 2, 3, 2]
    assert plan.E0.tolist() == pytest.approx(
        [3102.431002, 3079.450032, 3125.411973, 3079.450032, 2778.143976], abs=1e-6
    )
    cands = plan.params["candidates"]
    first = dict(cands[0][1])
    assert cands[0][0] == "u3"
    assert first[0] == pytest.approx(3528.110435, abs=1e-6)
    assert first[4] == pytest.approx(1166.069985, abs=1e-6)
    # stage 2, u3: an exact tie between g1 and g3 -> the smaller key
    tie = dict(cands[1][1])
    assert tie[1] == tie[3]
    assert math.isinf(dict(cands[3][1])[4])  # u2 would empty g4


@pytest.mark.parametrize(
    ("kw", "pairs", "gp", "E"),
    [
        (
            {"rollback_incomplete_stage": True},
            [("u3", 4)],
            3,
            [3102.431002, 3079.450032, 3125.411973, 3079.450032, 1166.069985],
        ),
        (
            {"protect_worst_grid": False},
            [("u3", 4), ("u3", 1), ("u1", 3), ("u2", 2)],
            2,
            [3102.431002, 1272.597763, 1288.847763, 1272.597763, 1166.069985],
        ),
        (
            {"protect_worst_grid": False, "rollback_incomplete_stage": True},
            [("u3", 4), ("u3", 1), ("u1", 3), ("u2", 2)],
            2,
            [3102.431002, 1272.597763, 1288.847763, 1272.597763, 1166.069985],
        ),
    ],
)
def test_end_to_end_variants_12_6(kw, pairs, gp, E):
    plan = clip_user_plan(_instance(), 0, 65, 1, clip="clip-user", **kw)
    assert plan.suppressed == pairs and plan.Gamma_prime == gp
    assert np.allclose(plan.E, E, rtol=0, atol=1e-6)


def test_user_order_by_key_only_differs_12_6():
    plan = clip_user_plan(_instance(), 0, 65, 1, clip="clip-user", user_order="key")
    assert plan.suppressed == [("u3", 4), ("u1", 3)]
    assert _retained(plan)[3].tolist() == [1, 1, 0, 1, 0]


def test_kappa_one_and_eps_four_12_6():
    p1 = clip_user_plan(_instance(), 0, 65, 1, clip="clip-user", kappa=1.0)
    assert p1.suppressed == [("u3", 4), ("u3", 1), ("u1", 3)]
    assert p1.E_star == pytest.approx(2210.0, abs=1e-6)
    p4 = clip_user_plan(_instance(), 0, 65, 4, clip="clip-user")
    assert p4.suppressed == [] and p4.Gamma_prime == 4 and p4.status == "halted"


def test_pseudo_user_after_default_run_12_6():
    plan = clip_user_plan(_instance(), 0, 65, 1, clip="pseudo-user")
    assert plan.m_ub.tolist() == [5, 1, 3, 1, 1]
    assert plan.E_new == pytest.approx(3125.411973, abs=1e-6)


def test_pseudo_user_oracle_12_7():
    model = ErrorModel(W=65.0, eps_mu=0.5, eps_v=0.5)
    r = np.array([12, 1, 1, 1, 1, 1, 1, 1])
    _, cand, errors = pseudo_user_errors(np.zeros(8, np.int64), r, np.array([19]), model)
    expected = [
        2420.979340,
        3193.839863,
        3648.789869,
        3889.452512,
        3988.192409,
        3988.108497,
        3915.807373,
        3788.200674,
        3662.976528,
        3490.098976,
        3313.963434,
        3095.364832,
    ]
    assert cand.tolist() == list(range(1, 13))
    assert np.allclose(errors, expected, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------- §11.3


def _bench_instance():
    M = np.zeros((40, 15), int)
    for u in range(40):
        k = 15 if u == 0 else 1 + (7 * u % 8)
        for i in range(k):
            j = (3 * u + 2 * i) % 15
            M[u][j] = 1 + ((u + 2 * j) % 4)
    for j in range(15):
        M[min(u for u in range(40) if M[u][j] > 0)][j] *= 5
    u, c = np.nonzero(M)
    return M, pd.DataFrame({"user": u, "cell": c, "count": M[u, c]})


@pytest.mark.parametrize(
    ("eps", "protect", "gp", "supp", "stages", "estar", "enew", "kept"),
    [
        (0.1, True, 2, 120, 14, 29551.27850, 23981.66336, 74),
        (0.1, False, 3, 116, 13, 29551.27850, 23981.66336, 78),
        (0.5, True, 4, 84, 12, 5910.255701, 4494.783866, 110),
        (0.5, False, 4, 84, 12, 5910.255701, 4494.783866, 110),
        (1, True, 4, 62, 12, 2955.127850, 2578.156825, 132),
        (1, False, 4, 62, 12, 2955.127850, 2578.156825, 132),
        (2, True, 7, 13, 9, 1477.563925, 1477.563925, 181),
        (10, False, 15, 0, 1, 295.5127850, 295.5127850, 194),
    ],
)
def test_deterministic_instance_11_3(eps, protect, gp, supp, stages, estar, enew, kept):
    M, occ = _bench_instance()
    assert M.sum() == 602 and (M > 0).sum() == 194
    plan = clip_user_plan(occ, 0, 65, eps, protect_worst_grid=protect)
    assert (plan.Gamma, plan.Gamma_prime, len(plan.suppressed)) == (15, gp, supp)
    assert max(t[0] for t in plan.trace) == stages
    assert plan.j_worst == 1
    assert plan.E_star == pytest.approx(estar, rel=1e-9)
    assert plan.E_clip.max() == pytest.approx(estar, rel=1e-9)
    assert plan.E_new == pytest.approx(enew, rel=1e-9)
    assert int(plan.cells_kept.sum()) == kept
    if eps == 1 and protect:
        assert plan.m_ub.tolist() == [1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1]


# ------------------------------------------------------------------------------- invariants

occupancies = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(1, 12)), min_size=1, max_size=20
)


def _occ(rows):
    d = {}
    for u, c, n in rows:
        d[(u, c)] = n
    return pd.DataFrame([(u, c, n) for (u, c), n in d.items()], columns=["user", "cell", "count"])


@settings(max_examples=150, deadline=None)
@given(
    occupancies,
    st.sampled_from([0.1, 0.5, 1.0, 5.0]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([1.0, 30.0, 65.0]),
)
def test_clip_user_invariants_12_8(rows, eps, protect, rollback, W):
    occ = _occ(rows)
    kw = {"protect_worst_grid": protect, "rollback_incomplete_stage": rollback}
    plan = clip_user_plan(occ, 0, W, eps, clip="pseudo-user", **kw)
    o = plan.occupancy
    assert plan.E_clip.max() <= plan.E_star  # worst-case error never increases
    assert plan.Gamma_prime <= plan.Gamma  # degradation factor never increases
    assert (plan.r_cell >= 1).all()  # no cell emptied
    assert np.all((plan.r_clip == 0) | (plan.r_clip == o.m))
    assert np.all(plan.E <= plan.E_clip)  # pseudo-user never worse, per cell (§9)
    assert np.array_equal(plan.r > 0, plan.r_clip > 0)  # G'_l unchanged by §9
    # every user in a completed stage lost exactly one cell
    G0 = np.bincount(o.u, minlength=o.n_users)
    stages = {t[0] for t in plan.trace}
    done = [s for s in stages if all(t[5] for t in plan.trace if t[0] == s)]
    if not rollback:
        lost = G0 - plan.cells_kept
        assert lost.sum() == len(plan.suppressed)
        assert plan.Gamma - plan.Gamma_prime == len(done)
    # same input, same output; values are never read (there are none)
    again = clip_user_plan(occ.sample(frac=1, random_state=1), 0, W, eps, clip="pseudo-user", **kw)
    assert again.suppressed == plan.suppressed and np.array_equal(again.r, plan.r)
    assert np.array_equal(again.E, plan.E)


@settings(max_examples=60, deadline=None)
@given(occupancies, st.sampled_from([0.1, 1.0]))
def test_efficient_equals_direct_transcription(rows, eps):
    direct_clip_user = _bench().direct_clip_user

    occ = _occ(rows)
    plan = clip_user_plan(occ, 0, 65, eps, clip="clip-user")
    ref_r, ref_pairs, ref_status = direct_clip_user(plan.occupancy, 65.0, eps)
    assert ref_pairs == plan.suppressed and ref_status == plan.status
    assert np.array_equal(ref_r, plan.r)


def test_excluded_users_are_forced_to_zero_section_8():
    plan = clip_user_plan(_instance(), 0, 65, 1, clip="clip-user", excluded=["u3"])
    o = plan.occupancy
    assert (plan.r[o.u == 3] == 0).all() and plan.cells_kept[3] == 0
    assert all(p[0] != "u3" for p in plan.suppressed)
    assert plan.m.tolist() == [8, 2, 4, 2, 3]  # bias still against the original counts


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"lower": 5, "upper": 5}, "L < U"),
        ({"lower": 0, "upper": float("nan")}, "bounds"),
        ({"clip": "foo"}, "clip='foo'"),
        ({"split": (0.3, 0.3)}, "sum"),
        ({"eps_cell": 0}, "eps_cell"),
    ],
)
def test_bad_parameters_raise(kw, match):
    args = {"lower": 0, "upper": 65, "eps_cell": 1, **kw}
    with pytest.raises(InvalidInputError, match=match):
        clip_user_plan(_instance(), **args)


def test_bad_occupancy_tables_raise():
    with pytest.raises(InvalidInputError, match="lacks column"):
        clip_user_plan(pd.DataFrame({"user": [1], "cell": [1]}), 0, 1, 1)
    with pytest.raises(InvalidInputError, match="twice"):
        clip_user_plan(pd.DataFrame({"user": [1, 1], "cell": [1, 1], "count": [1, 2]}), 0, 1, 1)
    with pytest.raises(InvalidInputError, match=">= 1"):
        clip_user_plan(pd.DataFrame({"user": [1], "cell": [1], "count": [0]}), 0, 1, 1)


def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "speed" / "clip_user.py"
    spec = importlib.util.spec_from_file_location("bench_clip_user", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
