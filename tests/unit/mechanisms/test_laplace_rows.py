"""laplace_dp_rows: each row released as laplace_dp would release it alone (docs/noise.md)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.mechanisms import laplace_dp, laplace_dp_rows
from gpframe.mechanisms.calibration import central_laplace, check_eps, check_positive
from gpframe.mechanisms.laplace_rows import central_laplace_rows
from gpframe.mechanisms.tails import laplace_bound
from gpframe.testing import seeded_rng


def _params(n: int, seed: int) -> tuple[list, list]:
    rs = np.random.default_rng(seed)  # test parameters only
    eps = [
        Fraction(int(a), int(b))
        for a, b in zip(rs.integers(1, 10**6, n), rs.integers(1, 10**5, n), strict=True)
    ]
    eps = [min(max(e, Fraction(1, 2**39)), Fraction(100)) for e in eps]
    sens = [
        Fraction(int(a), int(b))
        for a, b in zip(rs.integers(1, 10**9, n), rs.integers(1, 10**9, n), strict=True)
    ]
    # floats, ints, powers of two, and an ε small enough that the lattice is coarsened
    eps += [0.5, 3, Fraction(1, 2**39), 2.0**-39, 100]
    sens += [1.0, Fraction(1, 1024), Fraction(5, 7), 1e6, 7]
    return eps, sens


def test_calibration_equals_central_laplace_per_row():
    eps, sens = _params(300, 1)
    cal, index = central_laplace_rows(eps, sens)
    coarsened = 0
    for i, (e, d) in enumerate(zip(eps, sens, strict=True)):
        # laplace_dp's own checks (floats are read as their shortest decimal, as it reads them)
        e_x, d_x = check_eps(e, "epsilon"), check_positive(d, "sensitivity")
        ref = central_laplace(e_x, d_x, integer=False)
        assert cal[index[i]] == (e_x, ref.g, ref.param), i
        coarsened += ref.coarsen > 1
    assert coarsened  # the coarsened-lattice branch was compared too


def test_rows_are_on_their_lattices_with_their_own_noise():
    eps, sens = _params(40, 2)
    x = np.linspace(-50.0, 50.0, len(eps)) + 0.123
    r = laplace_dp_rows(x, sensitivity=sens, epsilon=eps, rng=seeded_rng(3))
    for i in range(len(eps)):
        ref = laplace_dp([x[i]], sensitivity=sens[i], epsilon=eps[i], rng=seeded_rng(4))
        assert r.g[i] == float(ref.g) and r.lam[i] == ref.noise["lam"]
        assert r.epsilon[i] == ref.guarantee.amount
        assert r.scale[i] == pytest.approx(float(ref.noise["scale"]), rel=1e-15)
        assert np.rint(r.values[i] / r.g[i]) * r.g[i] == r.values[i]
    bound = r.error_bound(0.1)
    want = [laplace_bound(0.1, s, g) for s, g in zip(r.scale, r.g, strict=True)]
    np.testing.assert_allclose(bound, want, rtol=1e-13)


def test_exact_statistics_are_snapped_exactly(monkeypatch):
    """With the noise replaced by zeros the release is the snap: half to even, exact."""
    from gpframe.mechanisms.noise import laplace_rates

    monkeypatch.setattr(
        laplace_rates,
        "discrete_laplace_rates",
        lambda lams, bits, index=None: np.zeros(len(index), dtype=np.int64),
    )
    g = central_laplace(Fraction(1), Fraction(1), integer=False).g
    vals = [Fraction(5, 2) * g, Fraction(7, 2) * g, Fraction(1, 3), 3, float(Fraction(5, 2) * g)]
    r = laplace_dp_rows(vals, sensitivity=[1] * 5, epsilon=[1] * 5, rng=seeded_rng(5))
    want = [2 * g, 4 * g, round(Fraction(1, 3) / g) * g, Fraction(3), 2 * g]
    assert r.values.tolist() == [float(w) for w in want]


def test_bad_rows_are_refused_before_any_bit_is_drawn():
    class Counting:
        def __init__(self):
            self.inner, self.calls = seeded_rng(6), 0

        def __getattr__(self, name):
            self.calls += 1
            return getattr(self.inner, name)

    src = Counting()
    bad = [
        dict(values=[1.0, 2.0], sensitivity=[1, 1], epsilon=[1, 0]),
        dict(values=[1.0, 2.0], sensitivity=[1, -1], epsilon=[1, 1]),
        dict(values=[1.0, 2.0], sensitivity=[1, True], epsilon=[1, 1]),
        dict(values=[1.0, 2.0], sensitivity=[1, 1], epsilon=[1, 101]),
        dict(values=[1.0, np.nan], sensitivity=[1, 1], epsilon=[1, 1]),
        dict(values=[1.0, 2.0**60], sensitivity=[1, 1], epsilon=[1, 1]),
        dict(values=[1.0], sensitivity=[1, 1], epsilon=[1, 1]),
        dict(values=[1.0, 2.0], sensitivity=[1], epsilon=[1, 1]),
        dict(values=["a", 2.0], sensitivity=[1, 1], epsilon=[1, 1]),
    ]
    for kw in bad:
        with pytest.raises(InvalidInputError):
            laplace_dp_rows(**kw, rng=src)
    assert src.calls == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"values": 5.0, "sensitivity": [1.0], "epsilon": [1.0]}, "values"),
        ({"values": [5.0], "sensitivity": 1.0, "epsilon": [1.0]}, "sensitivity"),
        ({"values": [5.0], "sensitivity": [1.0], "epsilon": 1.0}, "epsilon"),
        ({"values": "5", "sensitivity": [1.0], "epsilon": [1.0]}, "values"),
        ({"values": np.ones((1, 1)), "sensitivity": [1.0], "epsilon": [1.0]}, "values"),
    ],
)
def test_scalars_and_non_sequences_are_refused_by_name(kwargs, name):
    # found by the slow fuzz tier: a scalar raised TypeError ("'float' object is not iterable")
    with pytest.raises(InvalidInputError, match=f"^{name} must be"):
        laplace_dp_rows(kwargs.pop("values"), **kwargs)
