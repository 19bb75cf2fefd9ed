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
