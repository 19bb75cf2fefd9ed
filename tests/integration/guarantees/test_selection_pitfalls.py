"""The privacy pitfalls of selection.md §9, one test (or a small group) per item, P-1 … P-14.

This file is the checklist of issue 9: every pitfall has a direct check here, even where a
broader test elsewhere covers it too (named in the docstring). Randomness is seeded with
:func:`gpframe.testing.seeded_rng`; the comparison bits are scripted where the ledger logic,
not the noise, is under test.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp

import gpframe as gp
from gpframe import monitor
from gpframe.errors import BudgetExceededError, GpframeInternalError, InvalidInputError
from gpframe.mechanisms.selection import (
    ATParams,
    ATRelease,
    GaussianATRun,
    LaplaceSVTRun,
    RNMRelease,
    amplified_eps,
    at_run_reservation,
    certified,
    eps_at_bottom,
    eps_at_top,
    eps_rnm,
    gaussian_above_threshold,
    gaussian_report_noisy_max,
    laplace_above_threshold,
    log_integral_bracket,
    normal_exact,
    sigma_for_eps_rnm,
)
from gpframe.mechanisms.selection import above_threshold as at_module
from gpframe.mechanisms.selection import gaussian_at as gat_module
from gpframe.mechanisms.selection import rnm as rnm_module
from gpframe.testing import seeded_rng

SQ3 = math.sqrt(3.0)
P = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
KW = dict(noise="gaussian", sigma=0.3, bounds=(0, 1), sensitivity=1e-3)


def _script(monkeypatch, outputs):
    """Replace the exact comparison of GaussianATRun by scripted bits (cycled)."""
    it = itertools.cycle(outputs)

    def step(self, value):
        top = next(it)
        self.answers.append(top)
        return top

    monkeypatch.setattr(monitor.GaussianATRun, "step", step)


def _spent(s, users):
    return s.spent_exact(users, notion="central")


# --------------------------------------------------------------------------------------------
# Formulas


def test_P01_translation_oracle():
    """P-1: ρ − b (not ρ − (b − a), not ρ − (b + a)) — [2, 3], ρ = 2.75 equals [0, 1], ρ = 0.75.

    §5.3 table: t = 10 is 0.0152171148239 in both; the printed ρ − (b − a) gives
    0.00313736989845 on [2, 3] (×4.9 under-stated). Also test_translation_invariance_p1_8_2.
    """
    p01 = ATParams.make(sigma_x=0.3, threshold=0.75, bounds=(0, 1), sensitivity=1e-3)
    p23 = ATParams.make(sigma_x=0.3, threshold=2.75, bounds=(2, 3), sensitivity=1e-3)
    e01, e23 = eps_at_top(p01, 10), eps_at_top(p23, 10)
    want = 0.0152171148239
    assert want <= e01 <= want + 1e-8 and want <= e23 <= want + 1e-8
    assert abs(e01 - e23) <= 2e-9

    # the misprinted first factor ρ − (b − a) + Δ, evaluated with the same certified numerics
    al, sz = p23.sigma_x / p23.sigma_z, p23.sigma_z

    def ln_n(first_shift, xi):
        return log_integral_bracket(
            ((9, al, (p23.threshold + first_shift + xi) / sz),
             (1, -al, (p23.a - p23.threshold + xi) / sz))
        )  # fmt: skip

    wrong = ln_n(-(p23.b - p23.a), 1e-3)[1] - ln_n(-(p23.b - p23.a), 0.0)[0]
    assert wrong == pytest.approx(0.00313736989845, abs=1e-8)
    assert wrong < e23 / 4  # the printed form under-states: it must not be what we charge

    # RNM: exponent d − 1 and shift c − 2Δ, with the ln (§4.2; d = 2 closed form)
    s, dl = 0.3, 0.01
    closed = math.log(0.5 * math.erfc((1 - 2 * dl) / (s * 2))) - math.log(
        0.5 * math.erfc(1 / (s * 2))
    )
    assert closed <= eps_rnm(s, sensitivity=dl, bounds=(0, 1), d=2) <= closed + 1e-8
    # same σ, Δ, d on [5, 6]: only c = b − a enters
    assert eps_rnm(s, sensitivity=dl, bounds=(5, 6), d=10) == eps_rnm(
        s, sensitivity=dl, bounds=(0, 1), d=10
    )


def test_P02_amplification_never_the_printed_claim():
    """P-2: Poisson subsampling at rate p charges ln(1 + p(e^ε₀ − 1)), never the notes' p·ε₀.

    §3.1 oracles; the charged value is rounded up (≥ the 50-digit value). Also
    test_amplification_3_1_and_not_the_printed_claim_p2.
    """
    for e0, p, want in ((1, 0.1, 0.158565078740), (1, 0.5, 0.620114506958),
                        (0.5, 0.01, 0.00646626130464), (2, 0.05, 0.277217108945)):  # fmt: skip
        got = amplified_eps(e0, p)
        with mp.workdps(50):
            exact = mp.log(1 + mp.mpf(p) * mp.expm1(mp.mpf(e0)))
        assert mp.mpf(got) >= exact
        assert got == pytest.approx(want, abs=1e-12)
        if e0 == 1:
            assert got > p * e0  # the printed "(ε, εδ)" under-states
    with pytest.raises(InvalidInputError):
        amplified_eps(1, 1.5)  # not a rate


def test_P03_bounds_clamped_inside_and_delta_eff():
    """P-3: values are clamped into the public [a, b] inside the mechanism; Δ_eff = min(Δ, b − a).

    Out-of-range inputs give the same decisions as their clamped values under the same draws;
    missing or infinite bounds are refused before the ledger is touched.
    """
    raw, clamped = [5.0, -3.0, 0.5, 1.0], [1.0, 0.0, 0.5, 1.0]
    for seed in range(5):
        a = gaussian_report_noisy_max(raw, sigma=0.3, bounds=(0, 1), sensitivity=0.01,
                                      rng=seeded_rng(seed))  # fmt: skip
        b = gaussian_report_noisy_max(clamped, sigma=0.3, bounds=(0, 1), sensitivity=0.01,
                                      rng=seeded_rng(seed))  # fmt: skip
        assert a.index == b.index
        r1 = gaussian_above_threshold([-50.0, 40.0], sigma=0.3, threshold=0.75, bounds=(0, 1),
                                      sensitivity=1e-3, rng=seeded_rng(100 + seed))  # fmt: skip
        r2 = gaussian_above_threshold([0.0, 1.0], sigma=0.3, threshold=0.75, bounds=(0, 1),
                                      sensitivity=1e-3, rng=seeded_rng(100 + seed))  # fmt: skip
        assert r1.answers.tolist() == r2.answers.tolist()
    # Δ > c is clamped to Δ_eff = c (§4.6: Δ = 2 on [0, 1], d = 3 → 1.72240356741)
    e = eps_rnm(1, sensitivity=2, bounds=(0, 1), d=3)
    assert 1.72240356741 <= e <= 1.72240356741 + 1e-8
    assert e == eps_rnm(1, sensitivity=1, bounds=(0, 1), d=3)
    assert ATParams.make(sigma_x=0.3, threshold=0.5, bounds=(0, 1), sensitivity=5).delta_eff == 1
    # no pure guarantee without hard bounds
    s = gp.Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    for bounds in (None, (0, math.inf), (-math.inf, 1), (1, 1)):
        with pytest.raises(InvalidInputError, match="bounds"):
            monitor.above_threshold(s, [0.1], 0.5, users=["u"], noise="gaussian", sigma=0.3,
                                    bounds=bounds, sensitivity=1e-3, rng=seeded_rng(1))  # fmt: skip
    assert s.ledger.snapshot() == before


def test_P04_truncated_run_charged_eps_bottom():
    """P-4: a run that ends without ⊤ is charged ε_⊥(T) — not 0, not ε_⊤ of anything.

    Real exact draws; σ_X = 0.01 puts ⊤ on values 0 vs ρ = 0.999 beyond 40 standard deviations.
    Also test_gaussian_no_crossing_is_charged_eps_bottom_p4 (unit) and the state machine.
    """
    s = gp.Session(central=gp.DP(epsilon=10.0))
    p = ATParams.make(sigma_x=0.01, threshold=0.999, bounds=(0, 1), sensitivity=1e-3)
    res = monitor.above_threshold(s, [0.0] * 5, 0.999, users=["a", "b"], noise="gaussian",
                                  sigma=0.01, bounds=(0, 1), sensitivity=1e-3,
                                  rng=seeded_rng(4))  # fmt: skip
    assert res.value.tolist() == [False] * 5 and res.stopped == "end"
    want = eps_at_bottom(p, 5)
    assert res.runs[0]["charged"] == want > 0
    assert want != eps_at_top(p, 5)
    assert res.runs[0]["reserved"] == at_run_reservation(p, 5) >= want
    spent = _spent(s, ["a", "b"])
    for u in ("a", "b"):  # rounded up to ledger units, never below the certified value
        assert Fraction(want) <= spent[u] <= Fraction(want) + Fraction(1, 10**9)
    # mechanism level: the release's ε is the bottom value too
    rel = gaussian_above_threshold([0.0] * 3, sigma=0.01, threshold=0.999, bounds=(0, 1),
                                   sensitivity=1e-3, rng=seeded_rng(5))  # fmt: skip
    assert not rel.answers.any() and float(rel.epsilon) == eps_at_bottom(p, 3)


# --------------------------------------------------------------------------------------------
# Numerics


def test_P05_round_up_and_fail_closed():
    """P-5: charges are certified upper values + 1e-10, moved up one float; NaN/inf raise.

    An unreachable tolerance stops refinement and keeps the valid upper end; σ calibration
    returns the safe end; admission compares exact ledger units with no tolerance.
    """
    x = 0.123
    assert certified.round_charge(x) == math.nextafter(x + 1e-10, math.inf) > x + 1e-10
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(GpframeInternalError):
            certified.round_charge(bad)
    with pytest.raises(InvalidInputError):
        log_integral_bracket(((1, math.nan, 0.0),))
    with pytest.raises(InvalidInputError):
        log_integral_bracket(((-1, 1.0, 0.0),))
    # Φ^(t−1) is never formed outside log space: t = 10⁵ is finite, positive and ordered
    e_big = eps_at_top(P, 100_000)
    assert math.isfinite(e_big) and eps_at_top(P, 1000) < e_big < 0.1
    # tol far below float resolution: returns (capped), and the charge is still ≥ the truth
    lo, up = log_integral_bracket(((9, 1.0, -1 / 0.3),), tol=1e-30)
    with mp.workdps(30):
        ref = mp.log(mp.quad(lambda z: mp.npdf(z) * mp.ncdf(z - 1 / mp.mpf(0.3)) ** 9,
                             [-mp.inf, 0, 2, 3, 4, 6, mp.inf]))  # fmt: skip
    assert abs(up - lo) < 1e-12
    assert mp.mpf(up) + certified.MARGIN >= ref
    # calibration: the returned σ satisfies the target, a σ 1e-6 smaller does not
    s = sigma_for_eps_rnm(0.1, sensitivity=0.001, bounds=(0, 1), d=100)
    assert eps_rnm(s, sensitivity=0.001, bounds=(0, 1), d=100) <= 0.1
    assert eps_rnm(s * (1 - 1e-6), sensitivity=0.001, bounds=(0, 1), d=100) > 0.1
    assert s >= 0.161058002124  # σ* of §4.4 (safe side)
    # admission: spent + p <= B exactly, no tolerance either way
    sess = gp.Session(central=gp.DP(epsilon=0.5))
    monitor.above_threshold(sess, [0] * 3, 10**6, users=["u"], sensitivity=1, epsilon=0.5,
                            integer=True, rng=seeded_rng(6))  # fmt: skip
    assert _spent(sess, ["u"])["u"] == Fraction(1, 2)
    with pytest.raises(BudgetExceededError, match="Nothing was charged"):
        monitor.above_threshold(sess, [0] * 3, 10**6, users=["u"], sensitivity=1,
                                epsilon=1e-9, integer=True, rng=seeded_rng(7))  # fmt: skip
    assert _spent(sess, ["u"])["u"] == Fraction(1, 2)


def _gauss_hermite_eps_rnm(sigma, delta, d, nodes):
    """A 15-digit fixed-node rule (Gauss–Hermite in log space): what P-6 forbids for charges."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    lw = np.log(w / w.sum())

    def ln_i(m):
        return logsumexp(lw + (d - 1) * log_ndtr(x - m))

    return ln_i((1 - 2 * delta) / sigma) - ln_i(1 / sigma)


def test_P06_fixed_node_quadrature_understates_certified_does_not():
    """P-6: fixed-node float quadrature can under-state ε; the certified bracket never does.

    §8.1: σ = 0.3, Δ = 0.01, d = 1000 is 0.416993348802. A 20-node Gauss–Hermite rule gives
    0.165 (×2.5 too small) and a 10-node rule under-states even d = 2. The charge path has no
    Monte Carlo and no mpmath: it goes through log_integral_bracket only.
    """
    want = 0.416993348802
    gh = _gauss_hermite_eps_rnm(0.3, 0.01, 1000, 20)
    assert gh < want / 2
    assert _gauss_hermite_eps_rnm(0.3, 0.01, 2, 10) < 0.125942142403524 - 1e-6
    cert = eps_rnm(0.3, sensitivity=0.01, bounds=(0, 1), d=1000)
    assert want * (1 - 1e-11) <= cert <= want + 1e-8
    src = inspect.getsource(certified)
    start = src.index("def log_integral_bracket(")
    body = src[start : src.index("def _log_integral_bracket_tangent(")]
    for forbidden in ("mp.quad", "random", "quad("):
        assert forbidden not in body, forbidden


def test_P07_noise_scales_rounded_up_and_one_parameter_object():
    """P-7: Laplace scales ≥ 2Δ/ε, 4Δ/ε, 2cΔ/ε₂ exactly; the Gaussian σ charged is the σ drawn.

    ATParams is frozen and is what both the sampler and the certified charge read.
    """
    for eps in (0.1, 0.3, Fraction(1, 3), 0.7, 2.5):
        for integer in (True, False):
            run = LaplaceSVTRun(threshold=0, epsilon=eps, sensitivity=1, integer=integer,
                                rng=seeded_rng(7))  # fmt: skip
            e = Fraction(str(eps))  # the shortest decimal, as the ledger reads floats
            assert run.scales[0] >= 2 / e and run.scales[1] >= 4 / e
        for c in (2, 5):
            run = LaplaceSVTRun(threshold=0, epsilon=eps, sensitivity=1, c=c, integer=True,
                                rng=seeded_rng(8))  # fmt: skip
            e1, e2 = run.split
            assert e1 + e2 == run.epsilon == Fraction(str(eps))
            assert run.scales[0] >= 1 / e1 and run.scales[1] >= 2 * c / e2
    p = ATParams.make(sigma_x=0.1, threshold=0.5, bounds=(0, 1), sensitivity=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sigma_x = 0.2  # type: ignore[misc]
    run = GaussianATRun(p, seeded_rng(9))
    assert run.params is p
    assert run._sx == Fraction(p.sigma_x) and run._sz == Fraction(p.sigma_z)
    assert p.sigma_z == float(SQ3 * p.sigma_x)
    run.step(0.2)
    assert run.epsilon() == (eps_at_top(p, 1) if run.done else eps_at_bottom(p, 1))


# --------------------------------------------------------------------------------------------
# Noise and randomness


def test_P08_fresh_noise_every_step_and_every_run(monkeypatch):
    """P-8: one threshold draw per run, one fresh query draw per step, a new run per ⊤.

    Counts the sampler calls; identical repeated queries get independent answers (no cache).
    """
    calls = {"n": 0, "sizes": []}
    real = at_module.discrete_laplace

    def counting(lam, n, bits):
        calls["n"] += 1
        calls["sizes"].append(n)
        return real(lam, n, bits)

    monkeypatch.setattr(at_module, "discrete_laplace", counting)
    run = LaplaceSVTRun(threshold=0, epsilon=1, sensitivity=1, c=200, integer=True,
                        rng=seeded_rng(10))  # fmt: skip
    assert calls["n"] == 1  # the threshold, once
    k_t = run._k_t
    answers = [run.step(0) for _ in range(60)]
    assert calls["n"] == 61 and set(calls["sizes"]) == {1}
    assert run._k_t == k_t
    assert 0 < sum(answers) < 60  # the same query, fresh noise: not one cached answer

    draws = {"n": 0}
    real_draw = normal_exact.ExactNormal.draw.__func__

    def counting_draw(cls, rng=None):
        draws["n"] += 1
        return real_draw(cls, rng)

    monkeypatch.setattr(normal_exact.ExactNormal, "draw", classmethod(counting_draw))
    rel = gaussian_above_threshold([0.2, 0.3, 0.1, 0.2], sigma=0.3, threshold=0.75,
                                   bounds=(0, 1), sensitivity=1e-3, rng=seeded_rng(11))  # fmt: skip
    assert draws["n"] == 1 + rel.answers.size
    # a monitor seeking c = 3 ⊤ starts a fresh run (new threshold draw) after every ⊤
    inits = {"n": 0}
    real_init = monitor.GaussianATRun.__init__

    def counting_init(self, params, rng=None):
        inits["n"] += 1
        real_init(self, params, rng)

    monkeypatch.setattr(monitor.GaussianATRun, "__init__", counting_init)
    s = gp.Session(central=gp.DP(epsilon=10.0))
    res = monitor.above_threshold(s, [1.0] * 10, 0.5, users=["u"], c=3, rng=seeded_rng(12),
                                  **{**KW, "sigma": 0.05})  # fmt: skip
    assert len(res.tops) == 3 and inits["n"] == len(res.runs) == 3
    # after its ⊤ a run refuses further steps (no reuse of ρ̂)
    grun = GaussianATRun(ATParams.make(sigma_x=0.01, threshold=0.0, bounds=(0, 1),
                                       sensitivity=1e-3), seeded_rng(13))  # fmt: skip
    assert grun.step(1.0)
    with pytest.raises(InvalidInputError, match="fresh"):
        grun.step(1.0)


def test_P09_stops_and_parameters_depend_on_public_information_only(monkeypatch):
    """P-9: caps, run ends and reservations depend on public parameters and outputs only.

    Two different datasets with the same released bits give identical run records and charges;
    the Gaussian zone monitor needs a configured public N (never the observed user count).
    """
    _script(monkeypatch, [False, False, True])
    recs = []
    for data in ([0.1] * 9, [0.7, 0.2, 0.05, 0.3, 0.0, 0.6, 0.4, 0.1, 0.2]):
        s = gp.Session(central=gp.DP(epsilon=1.0))
        res = monitor.above_threshold(s, data, 0.75, users=["u"], max_steps=4, c=5,
                                      rng=seeded_rng(14), **KW)  # fmt: skip
        recs.append((res.runs, res.stopped, _spent(s, ["u"])["u"]))
    assert recs[0] == recs[1]
    # caps: min(max_steps, what is left of the stream), both public
    assert [r["reserved"] for r in recs[0][0]] == [at_run_reservation(P, t) for t in (4, 4, 3)]
    import pandas as pd
    import shapely

    df = pd.DataFrame({"id": [1, 2], "lon": [0.5, 0.6], "lat": [0.5, 0.5],
                       "t": pd.to_datetime(["2020-01-01 00:10"] * 2)})  # fmt: skip
    s = gp.Session(central=gp.DP(epsilon=1.0))
    before = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="n_public"):
        monitor.zone_above_threshold(s, df, shapely.box(0, 0, 1, 1), 1, user="id", time="t",
                                     start="2020-01-01", end="2020-01-01 02:00",
                                     noise="gaussian", sigma=0.3)  # fmt: skip
    assert s.ledger.snapshot() == before


def test_P10_membership_is_fixed_for_a_whole_run(monkeypatch):
    """P-10: a user who cannot pay is refused for the whole run; nobody is dropped mid-run.

    Mode R: if one user cannot afford R the run does not start and nobody pays. Mode S with
    unequal budgets: the poorest user's limit stops the run for everyone, and every member
    pays exactly the same amount for every run.
    """
    _script(monkeypatch, [False])
    s = gp.Session(central=gp.DP(epsilon=0.05))
    s.set_budget(["poor"], gp.DP(epsilon=0.01))
    with pytest.raises(BudgetExceededError, match="Nothing was charged"):
        monitor.above_threshold(s, [0.5] * 12, 0.75, users=["rich", "poor"], max_steps=12,
                                rng=seeded_rng(15), **KW)  # fmt: skip
    assert (_spent(s, ["rich", "poor"]) == 0).all()
    res = monitor.above_threshold(s, [0.5] * 40, 0.75, users=["rich", "poor"], max_steps=40,
                                  mode="S", c=1, rng=seeded_rng(16), **KW)  # fmt: skip
    spent = _spent(s, ["rich", "poor"])
    assert spent["rich"] == spent["poor"] <= Fraction(1, 100)
    assert res.stopped == "budget"
    assert res.runs[0]["steps"] < 40  # the poorer budget ended the run for both


def test_P11_continuous_exact_normals_never_the_discrete_gaussian(monkeypatch):
    """P-11: the Gaussian selection mechanisms draw exact continuous normals (§5.9 (A)).

    The discrete Gaussian is never reachable from them; numpy generators are refused. The law
    of the draws is checked in test_exact_normals_pass_ks_and_a_scaled_copy_fails.
    """
    import gpframe.mechanisms.noise as noise_pkg

    def boom(*a, **k):
        raise AssertionError("discrete Gaussian used by a Gaussian selection mechanism")

    for mod in (noise_pkg, gat_module, rnm_module, normal_exact):
        if hasattr(mod, "discrete_gaussian"):
            monkeypatch.setattr(mod, "discrete_gaussian", boom)
    gaussian_above_threshold([0.2, 0.9], sigma=0.3, threshold=0.5, bounds=(0, 1),
                             sensitivity=1e-3, rng=seeded_rng(17))  # fmt: skip
    gaussian_report_noisy_max([0.2, 0.9], sigma=0.3, bounds=(0, 1), sensitivity=1e-3,
                              rng=seeded_rng(18))  # fmt: skip
    for mod in (gat_module, rnm_module, normal_exact):
        assert "discrete_gaussian" not in inspect.getsource(mod)
    # the deviates are exact (a 2⁻⁶⁴-wide rational interval refined on demand), not floats
    z = normal_exact.ExactNormal.draw(seeded_rng(19))
    lo, hi = z.interval()
    assert isinstance(lo, Fraction) and hi - lo == Fraction(1, 2**64)
    with pytest.raises(InvalidInputError, match="not a gpframe BitSource"):
        gaussian_report_noisy_max([0.2, 0.9], sigma=0.3, bounds=(0, 1), sensitivity=1e-3,
                                  rng=np.random.default_rng(0))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Composition


def test_P12_no_fsrc_every_run_is_paid_and_the_filter_halts(monkeypatch):
    """P-12: FSRC as printed (shared δ, pDP) is not offered; gpframe uses modes R and S.

    The API has no δ / FSRC / ε_max knob; the ex-ante ZW20 number is reported, never charged;
    every run costs > 0, so on an endless stream the pure filter halts within budget (the
    spec's counterexample needs runs that cost nothing while ⊥).
    """
    assert not hasattr(monitor, "fsrc") and not hasattr(gp, "fsrc")
    params = set(inspect.signature(monitor.above_threshold).parameters)
    assert not params & {"delta", "eps_max", "epsilon_max", "fsrc", "pdp"}
    _script(monkeypatch, [False])
    s = gp.Session(central=gp.DP(epsilon=0.02))
    res = monitor.above_threshold(s, itertools.repeat(0.5), 0.75, users=["u"], max_steps=6,
                                  c=10**6, rng=seeded_rng(20), **KW)  # fmt: skip
    assert res.stopped == "budget" and all(r["charged"] > 0 for r in res.runs)
    spent = _spent(s, ["u"])["u"]
    assert spent <= Fraction(1, 50)
    assert float(spent) == pytest.approx(res.epsilon_realized, abs=1e-9)
    assert res.epsilon_exante is not None and res.epsilon_exante != pytest.approx(
        res.epsilon_realized
    )
    # an unsized stream without a cap has no finite worst case: refused (variant (ii) needs it)
    with pytest.raises(InvalidInputError, match="max_steps"):
        monitor.above_threshold(s, itertools.repeat(0.5), 0.75, users=["u"],
                                rng=seeded_rng(21), **KW)  # fmt: skip


def test_P13_one_notion_per_release():
    """P-13: ex-post charges only on a pure-DP filter; zCDP pays R²/2 ex-ante; metric refuses.

    Also test_zcdp_session_pays_r_squared_over_two_p13.
    """
    from gpframe.accounting.filters import charge_for

    with pytest.raises(BudgetExceededError, match="ex-post"):
        charge_for("zcdp", "dp_expost", Fraction(1, 10))
    for metric in ("gp", "cgp"):
        with pytest.raises(InvalidInputError):
            charge_for(metric, "dp_expost", Fraction(1, 10))
    assert charge_for("dp", "dp_expost", Fraction(1, 10)) == Fraction(1, 10)
    # zCDP session: mode S refused, mode R charged R²/2 whatever the realized output
    z = gp.Session(central=gp.zCDP(rho=1.0))
    with pytest.raises(InvalidInputError, match="mode='S'"):
        monitor.above_threshold(z, [0.1], 0.75, users=["a"], mode="S", rng=seeded_rng(22), **KW)
    res = monitor.above_threshold(z, [0.1, 0.2], 0.75, users=["a"], rng=seeded_rng(23), **KW)
    R = res.runs[0]["reserved"]
    assert res.runs[0]["charged"] == R
    assert float(z.spent(["a"], notion="central").iloc[0]) == pytest.approx(R * R / 2, rel=1e-9)
    # a metric-only (GP) session has no central filter: refused, nothing charged
    g = gp.Session(budget=gp.GP(eps=1.0))
    with pytest.raises(InvalidInputError, match="central"):
        monitor.above_threshold(g, [0.1], 0.75, users=["a"], rng=seeded_rng(24), **KW)


def test_P14_broken_svt_variants_refused_and_their_mutants_killed():
    """P-14: no un-noised queries, no uncapped ⊤, no c-blind noise, no numeric output.

    The API offers none of them (also test_broken_svt_variants_are_not_reachable_p14); the
    audit carries each as a mutant that tests/audit/test_mutants.py must kill — this test
    checks the four are registered against the correct ε-DP claim.
    """
    from tests.audit.mutants import MUTANTS

    names = {m.name for m in MUTANTS}
    for variant in ("no_threshold_noise", "no_query_noise", "noisy_value", "no_stop"):
        assert f"svt/{variant}" in names
    for m in MUTANTS:
        if m.name.startswith("svt/"):
            assert m.cases and all(c.claim.kind == "pure" and c.claim.value == 1.0 for c in m.cases)
    forbidden = {"query_noise", "threshold_noise", "noise_scale", "return_values", "uncapped"}
    for f in (laplace_above_threshold, LaplaceSVTRun.__init__, monitor.above_threshold):
        assert not forbidden & set(inspect.signature(f).parameters)
    for bad_c in (0, None, math.inf, 1.5):
        with pytest.raises(InvalidInputError):
            laplace_above_threshold([1, 2], threshold=0, epsilon=1, sensitivity=1, c=bad_c,
                                    rng=seeded_rng(25))  # fmt: skip
    # c-scaled query noise: doubling c doubles the query scale at the same split
    r1 = LaplaceSVTRun(threshold=0, epsilon=1, sensitivity=1, c=2, integer=True,
                       rng=seeded_rng(26))  # fmt: skip
    assert r1.scales[1] >= 4 / r1.split[1]
    rel = laplace_above_threshold([5, 50], threshold=10, epsilon=1, sensitivity=1, integer=True,
                                  rng=seeded_rng(27))  # fmt: skip
    assert isinstance(rel, ATRelease) and rel.answers.dtype == bool
    rnm = gaussian_report_noisy_max([0.1, 0.2], sigma=0.3, bounds=(0, 1), sensitivity=0.01,
                                    rng=seeded_rng(28))  # fmt: skip
    assert isinstance(rnm, RNMRelease) and not hasattr(rnm, "values")
