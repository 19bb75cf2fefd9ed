"""Iterative elimination: the §4.8 oracles, charges, vectorisation and the Lemma 5.2 guarantee."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from gpframe.errors import InvalidInputError
from gpframe.queries import elimination as el
from gpframe.testing import seeded_rng

# ------------------------------------------------------------------------ §4.8 oracles


@pytest.mark.parametrize(
    ("d", "beta", "want"),
    [(1, 0.05, 2.716203031), (2, 0.05, 2.447746831), (2, 1.25e-6, 5.213898159),
     (1, 1.25e-6, 5.345187403), (784, 1e-3, 30.74082172)],
)  # fmt: skip
def test_gamma_d_oracle(d, beta, want):
    assert el.gamma_d(d, beta) == pytest.approx(want, rel=1e-9)


def test_laurent_massart_is_looser_for_d1_d2_oracle():
    assert el.gamma_laurent_massart(1, 0.05) == pytest.approx(3.233125626, rel=1e-9)
    assert el.gamma_laurent_massart(2, 0.05) == pytest.approx(3.589840973, rel=1e-9)


def test_split_schedule_oracle():
    a = Fraction(1, 10**4)
    dbl = el.split_fractions("doubling", 10)
    assert sum(dbl) == 1 and sum(el.split_fractions("even", 7)) == 1
    assert float(dbl[0] * a) == pytest.approx(9.775171065e-8, rel=1e-9)
    assert float(dbl[9] * a) == pytest.approx(5.004887586e-5, rel=1e-9)
    assert float(el.charge_if_stopped(a, dbl, 3)) == pytest.approx(6.842619746e-7, rel=1e-9)
    assert float(a - el.charge_if_stopped(a, dbl, 3)) == pytest.approx(9.931573803e-5, rel=1e-9)
    ev4 = el.split_fractions("even", 4)
    assert el.charge_if_stopped(a, ev4, 1) == Fraction(25, 10**6)
    assert a - el.charge_if_stopped(a, ev4, 1) == Fraction(75, 10**6)
    ev64 = el.split_fractions("even", 64)
    assert float(ev64[0] * a) == pytest.approx(1.5625e-6, rel=1e-12)
    assert float(el.charge_if_stopped(a, ev64, 5)) == pytest.approx(7.8125e-6, rel=1e-12)


def test_weighted_average_oracle():
    assert float(el.weighted_average([100.0, 20.0], [1e-5, 3e-5])) == pytest.approx(40.0)
    assert 1 / np.sqrt(2 * 4e-5) == pytest.approx(111.8033989, rel=1e-9)
    pts = el.weighted_average([[100.0, 0.0], [20.0, 4.0]], [1e-5, 3e-5])
    assert pts.tolist() == pytest.approx([40.0, 3.0])


@pytest.mark.parametrize(
    ("rle", "wh", "wpt"),
    [(2.5e-5, 755.9236519, 737.3565489), (5.0e-5, 534.5187403, 521.3898159),
     (7.5e-5, 436.4327239, 425.7130020), (1.0e-4, 377.9618259, 368.6782745)],
)  # fmt: skip
def test_width_oracle(rle, wh, wpt):
    b1 = 0.05 / (10000 * 4)
    assert b1 == pytest.approx(1.25e-6)
    assert float(el.width_dist_nominal(rle, b1)) == pytest.approx(wh, rel=1e-9)
    assert float(el.width_pt_nominal(rle, b1)) == pytest.approx(wpt, rel=1e-9)


def test_noninteractive_decisions_oracle():
    w1 = float(el.width_dist_nominal(2.5e-5, 1.25e-6))
    low, high = el.decide_noninteractive([-900.0, 400.0], [w1, w1], 0.0, 0.0)
    assert low.tolist() == [True, False] and high.tolist() == [False, False]
    zbar = float(el.weighted_average([400.0, 100.0], [2.5e-5, 2.5e-5]))
    assert zbar == 250.0
    w2 = float(el.width_dist_nominal(5e-5, 1.25e-6))
    low, high = el.decide_noninteractive([zbar], [w2], 0.0, 0.0)
    assert not low[0] and not high[0]


def test_interactive_round_oracle():
    keep = el.interactive_step([10, 12, 30, 16, 40], [5] * 5, 2)
    assert keep.tolist() == [True, True, False, True, False]  # S = {A, B, D}


@pytest.mark.parametrize(
    ("m", "beta", "t"), [(1, 0.05, 2.995732274), (4, 1e-6, 19.26575785), (16, 0.01, 14.96461961)]
)
def test_laplace_width_oracle(m, beta, t):
    assert el.laplace_width_t(m, beta) == pytest.approx(t, rel=1e-9)


def test_laplace_tail_and_widths_oracle():
    assert el.laplace_sum_tail(5.0, 4) == pytest.approx(0.07903050334, rel=1e-9)
    E = [0.0025 * m for m in (1, 2, 3, 4)]
    ts = [13.59236701, 15.77713278, 17.50972333, 19.00796948]
    ws = [5436.946803, 3155.426556, 2334.629778, 1900.796948]
    for m in range(1, 5):
        t = el.laplace_width_t(m, 1.25e-6)
        assert t == pytest.approx(ts[m - 1], rel=1e-9)
        assert t / E[m - 1] == pytest.approx(ws[m - 1], rel=1e-9)


def test_planar_radius_oracle():
    assert el.planar_radius_nominal(0.01, 0.05) == pytest.approx(474.3864518, rel=1e-9)
    assert el.planar_radius_nominal(0.001, 1e-6) == pytest.approx(16688.42079, rel=1e-9)
    assert el.planar_radius_nominal(1, 0.5) == pytest.approx(1.678346990, rel=1e-9)


# ------------------------------------------------------------------------ parts


@given(
    a=st.fractions(min_value=Fraction(1, 10**9), max_value=10),
    c=st.integers(1, 64),
    split=st.sampled_from(el.SPLITS),
    e=st.integers(6, 20),
)
@settings(max_examples=200, deadline=None)
def test_parts_rounded_down_never_exceed_allocation(a, c, split, e):
    """§4.6 [G]: Σ parts ≤ a exactly, every part on the unit lattice."""
    unit = Fraction(1, 10**e)
    parts = el.round_parts(a, el.split_fractions(split, c), unit)
    assert sum(parts) <= a
    assert all((p / unit).denominator == 1 and p >= 0 for p in parts)


def test_many_distinct_allocations_are_quantized_down():
    alloc = np.linspace(1e-4, 1.9e-4, 500)
    p = el.prepare_parts(alloc, 500, el.split_fractions("even", 2))
    assert p.quantized and len(p.table) <= 2 * 64  # two octaves
    for a, code in zip(alloc, p.codes, strict=True):
        eff = p.allocations[code]
        assert eff <= Fraction(repr(float(a))) and eff >= Fraction(repr(float(a))) * Fraction(
            63, 64
        )


def test_too_small_allocation_refused_before_noise():
    with pytest.raises(InvalidInputError, match="too small"):
        el.prepare_parts([Fraction(1, 10**6)], 1, el.split_fractions("doubling", 10),
                         unit=Fraction(1, 10**8))  # fmt: skip


# ------------------------------------------------------------------------ Algorithm 4


def _values(n, spread=4000.0, seed=0):
    return np.random.default_rng(seed).uniform(-spread, spread, n)


@pytest.mark.parametrize("kind", el.KINDS)
@pytest.mark.parametrize("split", el.SPLITS)
def test_charges_equal_rounds_run_and_never_exceed_allocation(kind, split):
    """§4.6: charge = Σ_{j≤r} part_j, r = rounds actually run; ≤ allocation; savings ≥ 0."""
    n, c = 400, 6
    amount = 1e-4 if kind == "cgp" else 0.02
    alloc = np.where(np.arange(n) % 3 == 0, amount, 2 * amount)
    alloc[::7] = 0.0  # not queried
    out = el.eliminate_noninteractive(_values(n), alloc, kind=kind, rounds=c, split=split,
                                      rng=seeded_rng(11))  # fmt: skip
    pi = el.split_fractions(split, c)
    for i in range(n):
        a = Fraction(repr(float(alloc[i])))
        if a == 0:
            assert out.state[i] == -1 and out.rounds_run[i] == 0 and out.charges[i] == 0
            continue
        r = int(out.rounds_run[i])
        assert 1 <= r <= c
        assert out.charges[i] == el.charge_if_stopped(a, pi, r)
        assert out.charges[i] <= a
        # users that stopped before c were eliminated; users still in S ran all c rounds
        assert (out.state[i] == 0) == (r == c and out.state[i] == 0)
        if out.state[i] == 0:
            assert r == c
    assert out.rounds_histogram.sum() == (alloc > 0).sum()
    assert out.rounds_histogram[1:c].sum() > 0  # some users saved


def test_one_wrapper_call_per_round_and_part_not_per_user():
    n, c = 2000, 5
    out = el.eliminate_noninteractive(_values(n), 1e-4, rounds=c, split="doubling",
                                      rng=seeded_rng(5))  # fmt: skip
    rounds_with_users = int((out.rounds_histogram[::-1].cumsum()[::-1][1:] > 0).sum())
    assert out.n_calls == rounds_with_users <= c
    # two allocation groups: at most two calls per round
    alloc = np.where(np.arange(n) % 2, 1e-4, 3e-4)
    out2 = el.eliminate_noninteractive(_values(n), alloc, rounds=c, rng=seeded_rng(5))
    assert out2.n_calls <= 2 * c


def test_round_noise_only_for_active_users(monkeypatch):
    """Pitfall 2: round j draws noise for the users still in S only."""
    from gpframe import mechanisms

    sizes = []
    real = mechanisms.gaussian_cgp

    def spy(points, **kw):
        sizes.append(len(points))
        return real(points, **kw)

    monkeypatch.setattr(mechanisms, "gaussian_cgp", spy)
    out = el.eliminate_noninteractive(_values(3000), 1e-4, rounds=8, split="doubling",
                                      rng=seeded_rng(9))  # fmt: skip
    active = out.rounds_histogram[::-1].cumsum()[::-1][1:]
    assert sizes == [int(a) for a in active if a > 0]
    assert sizes == sorted(sizes, reverse=True)


def test_same_seed_same_everything():
    a = el.eliminate_noninteractive(_values(500), 1e-4, rounds=4, rng=seeded_rng(3))
    b = el.eliminate_noninteractive(_values(500), 1e-4, rounds=4, rng=seeded_rng(3))
    assert np.array_equal(a.estimate, b.estimate) and list(a.charges) == list(b.charges)


def test_projection_scale_charges_ground_units():
    out = el.eliminate_noninteractive(_values(50), 1e-4, rounds=2, split="even", scale_max=2,
                                      rng=seeded_rng(1))  # fmt: skip
    # mechanisms ran at rho/4 per projected m²; the charge is back in ground units
    assert {g.amount for g in out.guarantees} == {Fraction(1, 80000)}
    assert max(out.charges) == Fraction(1, 10**4)


@pytest.mark.parametrize("kind", el.KINDS)
def test_point_triple_runs_and_decides(kind):
    xy = np.column_stack([_values(300, seed=1), np.zeros(300)])

    def h(p):
        return p[:, 0]

    amount = 1e-4 if kind == "cgp" else 0.02
    out = el.eliminate_noninteractive(xy, amount, kind=kind, triple="pt", h=h, rounds=4,
                                      split="even", rng=seeded_rng(4))  # fmt: skip
    x = xy[:, 0]
    assert (x[out.state == 1] < 0).all() and (x[out.state == 2] > 0).all()
    assert (out.state == 1).sum() > 50 and (out.state == 2).sum() > 50


@pytest.mark.statistical
@pytest.mark.parametrize("kind", el.KINDS)
def test_lemma_5_2_holds_at_stated_probability(kind):
    """Lemma 5.2: P(some eliminated user is on the wrong side) ≤ β.

    Users sit right next to the threshold (|h| ≤ 30 m against widths of hundreds of metres), so
    wrong eliminations are as likely as the bound allows. 300 trials at β = 0.2: failures are
    Binomial(300, p ≤ 0.2); we fail the test if there are more than 95, which has probability
    binom.sf(95, 300, 0.2) < 1e-6 when the lemma holds (false-failure probability < 1e-6).
    The negative control shrinks the widths tenfold and must fail the same threshold.
    """
    beta, trials, limit = 0.2, 300, 95
    assert binom.sf(limit, trials, beta) < 1e-6
    amount = 1e-4 if kind == "cgp" else 0.01
    h = np.linspace(-30, 30, 40)
    rng = seeded_rng(1234)
    bad = 0
    for _ in range(trials):
        out = el.eliminate_noninteractive(h, amount, kind=kind, rounds=3, split="even",
                                          beta=beta, rng=rng)  # fmt: skip
        bad += bool((h[out.state == 1] >= 0).any() or (h[out.state == 2] <= 0).any())
    assert bad <= limit

    # negative control: widths / 10 must produce many wrong eliminations
    orig = el._GaussAcc.width if kind == "cgp" else el._LaplaceDistAcc.width
    cls = el._GaussAcc if kind == "cgp" else el._LaplaceDistAcc
    try:
        cls.width = lambda self, idx, b: orig(self, idx, b) / 10  # type: ignore[method-assign]
        bad_ctrl = 0
        for _ in range(40):
            out = el.eliminate_noninteractive(h, amount, kind=kind, rounds=3, split="even",
                                              beta=beta, rng=rng)  # fmt: skip
            bad_ctrl += bool((h[out.state == 1] >= 0).any() or (h[out.state == 2] <= 0).any())
    finally:
        cls.width = orig  # type: ignore[method-assign]
    assert bad_ctrl > 40 * limit / trials


# ------------------------------------------------------------------------ Algorithm 5


def test_interactive_keeps_k_smallest_and_charges_rounds():
    h = np.concatenate([[0.0, 5.0, 10.0], np.linspace(20000, 40000, 97)])
    out = el.eliminate_interactive(h, 1e-4, k=3, rounds=6, split="doubling", rng=seeded_rng(8))
    kept = np.flatnonzero(out.state == 0)
    assert {0, 1, 2} <= set(kept.tolist())
    pi = el.split_fractions("doubling", 6)
    for i in range(h.size):
        assert out.charges[i] == el.charge_if_stopped(
            Fraction(1, 10**4), pi, int(out.rounds_run[i])
        )
    # the loop stopped as soon as |S| <= k (then survivors saved too) or ran all rounds
    assert kept.size == 3 or out.rounds_run[kept].min() == 6


def test_interactive_validates_k():
    with pytest.raises(InvalidInputError, match="k="):
        el.eliminate_interactive([1.0, 2.0], 1e-4, k=3, rng=seeded_rng(1))


def test_bad_parameters_refused():
    with pytest.raises(InvalidInputError, match="split"):
        el.eliminate_noninteractive([1.0], 1e-4, split="log", rng=seeded_rng(1))
    with pytest.raises(InvalidInputError, match="rounds"):
        el.eliminate_noninteractive([1.0], 1e-4, rounds=0, rng=seeded_rng(1))
    with pytest.raises(InvalidInputError, match="kind"):
        el.eliminate_noninteractive([1.0], 1e-4, kind="dp", rng=seeded_rng(1))
    with pytest.raises(InvalidInputError, match="eps"):  # a part outside the wrapper's range
        el.eliminate_noninteractive([1.0], 1000.0, kind="gp", rounds=2, rng=seeded_rng(1))


def test_grouped_amounts_give_the_parts_of_the_same_fractions():
    """Users grouped by int64 units (with a duplicated value) split exactly as one Fraction each."""
    unit = Fraction(1, 10**12)
    units = np.array([5 * 10**7, 0, 10**8, 5 * 10**7, 10**8])
    pi = el.split_fractions("doubling", 4)
    fr = np.array([unit * int(u) for u in units], dtype=object)
    want = el.prepare_parts(fr, 5, pi, unit=unit)
    g = el.GroupedAmounts.from_units(units, unit)
    codes = g.codes.copy()
    codes[3] = len(g.values)  # user 3 points at a second copy of its value: merged
    dup = el.GroupedAmounts(codes, (*g.values, g.values[codes[0]]))
    for got in (el.prepare_parts(g, 5, pi, unit=unit), el.prepare_parts(dup, 5, pi, unit=unit)):
        assert got.codes.tolist() == want.codes.tolist()
        assert got.table == want.table and got.allocations == want.allocations
    assert g.to_array().tolist() == fr.tolist()
    with pytest.raises(InvalidInputError, match="4 users but there are 5"):
        el.prepare_parts(el.GroupedAmounts(g.codes[:4], g.values), 5, pi, unit=unit)


# ------------------------------------------------------------------------ memory at the peak


@pytest.mark.parametrize(("kind", "interactive"), [("cgp", False), ("gp", False), ("cgp", True)])
def test_estimates_made_at_the_end_are_those_held_through_the_rounds(monkeypatch, kind,
                                                                     interactive):  # fmt: skip
    # without h, no (n,) array of estimates is held through the rounds: the estimates made at
    # the end from the final sums must be the ones the rounds made, bit for bit (and the state,
    # rounds and charges the same draws)
    x = np.random.default_rng(5).normal(0, 3000, 2000)
    amount = 1e-3 if kind == "cgp" else 1e-1

    def go():
        if interactive:
            return el.eliminate_interactive(x, amount, k=50, kind=kind, rounds=6,
                                            rng=seeded_rng(9))  # fmt: skip
        return el.eliminate_noninteractive(x, amount, kind=kind, rounds=6, rng=seeded_rng(9))

    made_at_end = go()
    monkeypatch.setattr(el, "_held_estimates", lambda acc, n: np.full(n, np.nan))
    held = go()
    assert len(np.unique(made_at_end.rounds_run)) >= 3  # users stopped at several rounds
    assert np.array_equal(made_at_end.estimate, held.estimate, equal_nan=True)
    assert np.array_equal(made_at_end.std, held.std, equal_nan=True)
    assert np.array_equal(made_at_end.state, held.state)
    assert np.array_equal(made_at_end.rounds_run, held.rounds_run)
    assert made_at_end.charges.tolist() == held.charges.tolist()


def test_per_user_codes_and_rounds_take_a_byte_each():
    g = el.GroupedAmounts.from_units(np.array([3, 0, 3, 7]), Fraction(1, 10))
    assert g.codes.dtype == np.int8 and g.codes.tolist() == [1, 0, 1, 2]
    out = el.eliminate_noninteractive([-5000.0, 20.0, 5000.0], g.values[1], rounds=4,
                                      split="even", rng=seeded_rng(1))  # fmt: skip
    assert out.rounds_run.dtype == np.int8 and out.charge_codes.itemsize <= 2
    many = el.GroupedAmounts.from_units(np.arange(300), Fraction(1, 10))
    assert many.codes.dtype == np.int16 and many.codes.tolist() == list(range(300))
    # a remap of small codes keeps their dtype (no int64 copy per user)
    assert el._remapped(np.array([1, 0]), np.array([0, 1, 1], np.int8)).dtype == np.int8
