"""Certified amounts of selection.md against its oracle tables.

Sections: §2.3, §2.4, §3.1, §4.4–4.6, §5.2–5.8, §8.

Tests: charged value ≥ table value and charged − table ≤ 1e-8 (§8 preamble); an mpmath reference
(§4.3) at 30 digits confirms the safe rounding direction.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.mechanisms.selection import (
    ATParams,
    amplified_eps,
    at_run_reservation,
    bw18_eps,
    eps_at_bottom,
    eps_at_top,
    eps_rnm,
    laplace_at_accuracy,
    log_integral_bracket,
    sigma_for_eps_rnm,
    svt_laplace_split,
    zw20_eps,
)

SQ3 = math.sqrt(3.0)


def _ok(charged: float, table: float, tol: float = 1e-8) -> None:
    assert charged >= table - 5e-13 * max(1.0, abs(table)), (charged, table)  # table is rounded
    assert charged - table <= tol, (charged, table)


# §4.6 and §8.1 ---------------------------------------------------------------------------------
RNM_46 = [
    (0.3, 0.01, (0, 1), 2, 0.125942142403524),
    (0.1, 0.001, (0, 1), 2, 0.101828796011115),
    (1, 0.25, (0, 2), 2, 0.607738249254361),
    (2, 0.1, (-5, 5), 4, 0.415473575790),
    (1, 2, (0, 1), 3, 1.72240356741),
    (1, 0.5, (0, 1), 3, 1.07996767309),
]


@pytest.mark.parametrize("sigma,delta,bounds,d,want", RNM_46)
def test_eps_rnm_matches_spec_4_6(sigma, delta, bounds, d, want):
    _ok(eps_rnm(sigma, sensitivity=delta, bounds=bounds, d=d), want)


GRID_81 = {
    (0.1, 0.001): (0.101828796011, 0.192171724117, 0.232416279634, 0.253055384312),
    (0.1, 0.01): (1.00945151737, 1.90618340767, 2.30707436092, 2.51312775172),
    (0.2, 0.001): (0.0267398077702, 0.0537172795209, 0.0693161616715, 0.0785489880869),
    (0.2, 0.01): (0.265275674142, 0.533455001966, 0.689005808365, 0.781216390013),
    (0.3, 0.001): (0.0126845931033, 0.0267738209216, 0.0360480449318, 0.0418867640742),
    (0.3, 0.01): (0.125942142404, 0.266139983761, 0.358669145177, 0.416993348802),
    (0.5, 0.001): (0.00527456293209, 0.0118914310776, 0.0168580064809, 0.0201765911083),
    (0.5, 0.01): (0.0524424414827, 0.118364593799, 0.167944388336, 0.201102450638),
    (1.0, 0.001): (0.0018319426562, 0.00445858782647, 0.00668905754426, 0.00826349360043),
    (1.0, 0.01): (0.0182508184002, 0.044456030772, 0.0667364015035, 0.0824722756106),
}
CLASSICAL_81 = {(0.3, 0.01): (0.150076, 0.360789, 1.27109, 4.65298),
                (0.1, 0.001): (0.0399906, 0.0969791, 0.340669, 1.19937)}  # fmt: skip
DS = (2, 10, 100, 1000)


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=pytest.mark.slow) if i else k for i, k in enumerate(GRID_81)],
    ids=str,
)
def test_eps_rnm_grid_8_1(key):
    sigma, delta = key
    for d, want in zip(DS, GRID_81[key], strict=True):
        # table entries are 12 s.f.: allow their rounding on the low side
        got = eps_rnm(sigma, sensitivity=delta, bounds=(0, 1), d=d)
        assert got >= want * (1 - 1e-11) and got - want <= 1e-8, (d, got, want)


@pytest.mark.parametrize("key", list(CLASSICAL_81), ids=str)
def test_classical_baseline_8_1(key):
    sigma, delta = key
    for d, want in zip(DS, CLASSICAL_81[key], strict=True):
        assert bw18_eps(sigma, delta * math.sqrt(d), 1e-5) == pytest.approx(want, rel=1e-5)


def test_eps_rnm_other_ranges_8_1():
    for c, wants in ((0.5, (0.0778097161995, 0.179777773020, 0.259596538393)),
                     (2, (0.230405814373, 0.449373726999, 0.563670832546))):  # fmt: skip
        for d, want in zip((2, 10, 100), wants, strict=True):
            got = eps_rnm(0.3, sensitivity=0.01, bounds=(0, c), d=d)
            assert got >= want * (1 - 1e-11) and got - want <= 1e-8


def test_eps_rnm_d2_closed_form_and_d1_zero():
    s, dl, c = 0.3, 0.01, 1.0
    closed = math.log(0.5 * math.erfc((c - 2 * dl) / (s * 2))) - math.log(
        0.5 * math.erfc(c / (s * 2))
    )
    _ok(eps_rnm(s, sensitivity=dl, bounds=(0, 1), d=2), closed)
    assert eps_rnm(s, sensitivity=dl, bounds=(0, 1), d=1) <= 2e-10  # 0 + the charge margin


def test_rnm_misprints_p1_ratio_and_wrong_shift_differ():
    """P-1: the printed ratio (no ln) and the shift c − Δ give other numbers than the ln form."""
    e = eps_rnm(0.3, sensitivity=0.01, bounds=(0, 1), d=10)
    _lo_n, up_n = log_integral_bracket(((9, 1.0, -(1 - 0.02) / 0.3),))
    lo_d, _up_d = log_integral_bracket(((9, 1.0, -1 / 0.3),))
    assert math.exp(up_n - lo_d) > e + 0.5  # the ratio itself is ~1.3, not 0.27
    _lo_w, up_w = log_integral_bracket(((9, 1.0, -(1 - 0.01) / 0.3),))
    assert up_w - lo_d < e - 0.1  # c − Δ under-states


# mpmath reference of §4.3 ----------------------------------------------------------------------


def _mp_log_integral(terms, dps=30):
    with mp.workdps(dps):

        def ell(x):
            v = -x * x / 2 - mp.log(mp.sqrt(2 * mp.pi))
            for w, s, c in terms:
                if w:
                    v += w * mp.log(mp.ncdf(s * x + c))
            return v

        a, b = mp.mpf(-30), mp.mpf(30)
        for _ in range(200):  # ternary search for the mode
            m1, m2 = a + (b - a) / 3, b - (b - a) / 3
            if ell(m1) < ell(m2):
                a = m1
            else:
                b = m2
        m = (a + b) / 2
        lm = ell(m)
        h = mp.mpf("1e-4")
        kappa = -(ell(m + h) - 2 * lm + ell(m - h)) / h**2
        w = 1 / mp.sqrt(max(kappa, 1))
        pts = [mp.ninf] + [m + k * w / 2 for k in range(-60, 61)] + [mp.inf]
        val = mp.quad(lambda x: mp.exp(ell(x) - lm), pts, maxdegree=10)
        return mp.log(val) + lm


@pytest.mark.parametrize(
    "sx,rho,delta,t",
    [(0.3, 0.75, 1e-3, 3)]
    + [
        pytest.param(*a, marks=pytest.mark.slow)
        for a in ((0.1, 0.5, 1e-2, 10), (0.2, 0.3, 0.05, 2))
    ],
)
def test_eps_at_top_is_above_the_mpmath_reference(sx, rho, delta, t):
    sz = SQ3 * sx
    al = sx / sz

    def terms(xi):
        return ((t - 1, al, (rho - 1 + xi) / sz), (1, -al, (0 - rho + xi) / sz))

    ref = float(_mp_log_integral(terms(delta)) - _mp_log_integral(terms(0.0)))
    p = ATParams.make(sigma_x=sx, sigma_z=sz, threshold=rho, bounds=(0, 1), sensitivity=delta)
    _ok(eps_at_top(p, t), ref)


def test_bracket_contains_the_mpmath_reference():
    terms = ((49, 1.0, -0.98 / 0.2),)
    lo, up = log_integral_bracket(terms)
    ref = float(_mp_log_integral(terms))
    assert lo <= ref <= up and up - lo < 1e-8


# §5.3, §5.4, §5.8, §8.2, §8.3 ------------------------------------------------------------------


def P(sx, rho, delta, bounds=(0, 1)):
    return ATParams.make(sigma_x=sx, sigma_z=SQ3 * sx, threshold=rho, bounds=bounds,
                         sensitivity=delta)  # fmt: skip


def test_eps_top_1_closed_forms_5_8():
    for sx, dl, bounds, rho, want in ((0.3, 0.001, (0, 1), 0.75, 0.00288021141869642),
                                      (0.1, 0.01, (0, 1), 0.5, 0.139999357586279),
                                      (0.2, 0.05, (-1, 1), 0, 0.345739947709832)):  # fmt: skip
        _ok(eps_at_top(P(sx, rho, dl, bounds), 1), want)


SEQ_58 = [
    (0.00288021141870, 0.00180015748881), (0.00582695539404, 0.00305414619816),
    (0.00796829839499, 0.00400093832994), (0.00962544905607, 0.00475362398410),
    (0.0109633886466, 0.00537382175191), (0.0120770913569, 0.00589847443296),
    (0.0130257542844, 0.00635132257001), (0.0138485209101, 0.00674844917781),
    (0.0145724883307, 0.00710121145558), (0.0152171148239, 0.00741790283247),
    (0.0157967989757, 0.00770474924194), (0.0163224654837, 0.00796653421763),
]  # fmt: skip


@pytest.mark.slow
def test_full_sequence_5_8():
    p = P(0.3, 0.75, 1e-3)
    for t, (top, bot) in enumerate(SEQ_58, start=1):
        _ok(eps_at_top(p, t), top, 1e-8 + 1e-14)
        _ok(eps_at_bottom(p, t), bot, 1e-8 + 1e-14)


GRID_82 = {
    (0.1, 0.001, 0.5): (0.0141023370549, 0.0367072234702, 0.0522042457274, 0.0981348865997, 0.141947071825, 0.166280554903),  # noqa: E501
    (0.1, 0.01, 0.75): (0.198207701616, 0.366016975196, 0.482822357718, 0.842216553905, 1.21436682155, 1.4364944523),  # noqa: E501
    (0.2, 0.001, 0.75): (0.00565469964891, 0.0110202805503, 0.0148647924389, 0.0274920376126, 0.0422949171061, 0.0520459313048),  # noqa: E501
    (0.2, 0.01, 0.5): (0.0429619904657, 0.109005522376, 0.155552765509, 0.303517038684, 0.467213861348, 0.570368212162),  # noqa: E501
    (0.3, 0.001, 0.5): (0.00232114682652, 0.00580282046758, 0.0082948101612, 0.0164979888848, 0.026185074244, 0.0326085100445),  # noqa: E501
    (0.3, 0.01, 0.75): (0.0286987164791, 0.0580091710705, 0.0793176094306, 0.151512521346, 0.24092760206, 0.302336952752),  # noqa: E501
}  # fmt: skip
TS = (1, 2, 3, 10, 50, 200)


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=pytest.mark.slow) if i else k for i, k in enumerate(GRID_82)],
    ids=str,
)
def test_eps_top_grid_8_2(key):
    p = P(key[0], key[2], key[1])
    for t, want in zip(TS, GRID_82[key], strict=True):
        got = eps_at_top(p, t)
        assert got >= want * (1 - 1e-11) and got - want <= 1e-8, (t, got, want)


def test_translation_invariance_p1_8_2():
    """[0, 2] with ρ = 1.5 must equal [−1, 1] with ρ = 0.5 (and [2, 3], ρ = 2.75 = [0, 1], 0.75)."""
    wants = (0.00470330938170, 0.0119534970770, 0.0215716801770, 0.0323242513907)
    for bounds, rho in (((0, 2), 1.5), ((-1, 1), 0.5)):
        p = P(0.3, rho, 0.001, bounds)
        for t, want in zip((1, 3, 10, 50), wants, strict=True):
            _ok(eps_at_top(p, t), want)
    _ok(eps_at_top(P(0.3, 2.75, 0.001, (2, 3)), 10), 0.0152171148239)


GRID_83 = {
    (0.1, 0.001, 0.5): ((0.0141023370549, 0.048921359926, 0.0827652882964), (0.118576, 0.13659)),
    (0.1, 0.01, 0.75): ((0.0854081711706, 0.321253777728, 0.602206348904), (1.63015, 1.72831)),
    (0.3, 0.001, 0.75): ((0.00180015748881, 0.00741790283247, 0.0154461929956), (0.0275337, 0.0363862)),  # noqa: E501
    (0.3, 0.01, 0.5): ((0.0231140339323, 0.0904711032175, 0.177671290482), (0.279134, 0.343141)),
}  # fmt: skip


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=pytest.mark.slow) if i else k for i, k in enumerate(GRID_83)],
    ids=str,
)
def test_eps_bottom_and_exante_grid_8_3(key):
    """P-4: a run without ⊤ is charged ε_⊥(T); the ex-ante ZW20 numbers for comparison."""
    p = P(key[0], key[2], key[1])
    bots, (bbghs, pdp) = GRID_83[key]
    for T, want in zip((1, 10, 200), bots, strict=True):
        got = eps_at_bottom(p, T)
        assert got >= want * (1 - 1e-11) and got - want <= 1e-8
    assert zw20_eps(p, 1e-5) == pytest.approx(bbghs, rel=2e-5)
    assert zw20_eps(p, 1e-5, "pdp") == pytest.approx(pdp, rel=2e-5)


def test_exante_anchor_5_2():
    p = P(0.3, 0.75, 1e-3)
    assert zw20_eps(p, 1e-5) == pytest.approx(0.0275337158656, abs=1e-10)
    assert zw20_eps(p, 1e-5, "pdp") == pytest.approx(0.0363862213663, abs=1e-10)


def test_misprint_rho_minus_b_minus_a_understates_p1():
    """§5.3: the printed ρ − (b − a) gives 0.00313736989845 at [2, 3], ρ = 2.75, t = 10."""
    p = P(0.3, 2.75, 0.001, (2, 3))
    assert eps_at_top(p, 10) > 0.0152 > 0.00313736989845 * 4


def test_run_reservation_6_5():
    p = P(0.3, 0.75, 1e-3)
    _ok(at_run_reservation(p, 12), 0.0163224654837)


# §4.4 calibration ------------------------------------------------------------------------------


def test_sigma_for_eps_rnm_4_4_and_reverifies():
    s = sigma_for_eps_rnm(0.1, sensitivity=0.001, bounds=(0, 1), d=100)
    assert 0.161058002124 <= s <= 0.161058002124 * (1 + 1e-8)
    assert eps_rnm(s, sensitivity=0.001, bounds=(0, 1), d=100) <= 0.1


@pytest.mark.slow
@pytest.mark.parametrize("eps,delta,d,want", [(1.0, 0.01, 365, 0.167249284248),
                                              (0.5, 0.001, 1000, 0.0684898336464)])  # fmt: skip
def test_sigma_for_eps_rnm_4_4_slow(eps, delta, d, want):
    s = sigma_for_eps_rnm(eps, sensitivity=delta, bounds=(0, 1), d=d)
    assert want <= s <= want * (1 + 1e-8)


# §2, §3.1 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "c,mono,e1",
    [(1, False, 0.386488209564), (1, True, 0.5), (2, False, 0.284103653417),
     (5, False, 0.177255030363), (5, True, 0.254840845968), (10, False, 0.119501968416)],
)  # fmt: skip
def test_svt_split_2_4(c, mono, e1):
    a, b = svt_laplace_split(1, c, mono)
    assert a + b == 1
    assert float(a) == pytest.approx(e1, abs=1e-11)


def test_laplace_accuracy_2_3():
    assert laplace_at_accuracy(1, sensitivity=1, k=99, beta=0.05) == pytest.approx(
        60.80721968, abs=1e-8
    )


@pytest.mark.parametrize(
    "e0,p,add,remove",
    [(1, 0.1, 0.158565078740, 0.0652983359988), (1, 0.5, 0.620114506958, 0.379885493042),
     (0.5, 0.01, 0.00646626130464, 0.00394245467447), (2, 0.05, 0.277217108945, 0.0441956328420)],
)  # fmt: skip
def test_amplification_3_1_and_not_the_printed_claim_p2(e0, p, add, remove):
    got = amplified_eps(e0, p)
    assert got >= add * (1 - 1e-12) and got == pytest.approx(add, rel=1e-11)
    assert amplified_eps(e0, p, "remove") == pytest.approx(remove, rel=1e-11)
    if e0 == 1:
        assert got > p  # the notes' printed "(ε, εδ)" under-states


def test_bad_parameters_raise():
    with pytest.raises(InvalidInputError, match="bounds"):
        eps_rnm(0.3, sensitivity=0.01, bounds=(1, 0), d=3)
    with pytest.raises(InvalidInputError, match="sigma"):
        eps_rnm(float("nan"), sensitivity=0.01, bounds=(0, 1), d=3)
    with pytest.raises(InvalidInputError, match="d="):
        eps_rnm(0.3, sensitivity=0.01, bounds=(0, 1), d=0)
    assert np.isfinite(eps_rnm(0.3, sensitivity=5, bounds=(0, 1), d=3))  # Δ clamped to c


# third-order bracket vs the second-order one it replaced (§4.3, §5.6) ---------------------------

AGREE = [
    ((9, 1.0, -1 / 0.3),),  # RNM d = 10
    ((999, 1.0, -(1 - 0.02) / 0.1),),  # RNM d = 1000, sharp
    ((9, 1 / SQ3, (0.75 - 1 + 1e-3) / (0.3 * SQ3)), (1, -1 / SQ3, (0 - 0.75 + 1e-3) / (0.3 * SQ3))),
    ((199, 1 / SQ3, (0.5 - 1) / (0.1 * SQ3)),),  # ε_⊥(200) denominator
    ((1, 1.0, 0.0),),
]


@pytest.mark.parametrize(
    "terms",
    [t if i == 0 else pytest.param(t, marks=pytest.mark.slow) for i, t in enumerate(AGREE)],
    ids=[str(i) for i in range(len(AGREE))],
)
def test_third_order_bracket_agrees_with_the_tangent_bracket(terms):
    """Both brackets hold ln J; at tol = 1e-9 they overlap and each upper end is ≥ the 30-digit
    reference (the new one is never below the true value, and within tol of it)."""
    from gpframe.mechanisms.selection.certified import _log_integral_bracket_tangent

    lo, up = log_integral_bracket(terms, 1e-9)
    lo0, up0 = _log_integral_bracket_tangent(terms, 1e-9)
    ref = _mp_log_integral(terms)
    assert lo - 1e-12 <= float(ref) <= up + 1e-12
    assert mp.mpf(up) + 1e-13 >= ref and up - float(ref) <= 1e-9
    assert max(lo, lo0) <= min(up, up0) + 1e-12  # the two brackets overlap
    assert abs(up - up0) <= 2e-9


def test_third_order_cell_integral_matches_mpmath():
    """_log_gauss_cell (closed form, both branches: narrow Gauss–Legendre and wide log_ndtr)."""
    from gpframe.mechanisms.selection.certified import _log_gauss_cell

    cases = [(0.3, 1.0, 1e-4), (-2.0, 3.0, 0.01), (25.0, 1.2, 0.4), (-40.0, 50.0, 0.02),
             (0.0, 1.0, 2.0), (8.0, 1.0, 1e-6), (-0.5, 400.0, 0.003)]  # fmt: skip
    s, k, r = (np.array(v, dtype=float) for v in zip(*cases, strict=True))
    got = _log_gauss_cell(s, k, r)
    with mp.workdps(40):
        for (si, ki, ri), g in zip(cases, got, strict=True):
            si, ki, ri = mp.mpf(si), mp.mpf(ki), mp.mpf(ri)
            ref = mp.log(mp.quad(lambda u, si=si, ki=ki: mp.exp(si * u - ki * u * u / 2),
                                 [-ri, 0, ri]))  # fmt: skip
            assert abs(g - float(ref)) <= 1e-12 * max(1.0, abs(float(ref))), (si, ki, ri)


def test_curvature_range_contains_the_true_second_derivative():
    """Sampford's monotonicity: ℓ″ on a cell lies within the range read off its edges."""
    from gpframe.mechanisms.selection.certified import _Integrand3

    f = _Integrand3(AGREE[2])
    edges = np.linspace(-6, 6, 49)
    g, pad = f.curvature_terms(edges)
    k_lo = 1 - (np.maximum(g[:, :-1], g[:, 1:]) + np.maximum(pad[:, :-1], pad[:, 1:])).sum(0)
    k_hi = 1 - (np.minimum(g[:, :-1], g[:, 1:]) - np.maximum(pad[:, :-1], pad[:, 1:])).sum(0)
    with mp.workdps(30):
        for j in range(edges.size - 1):
            for frac in (0.1, 0.5, 0.9):
                x = mp.mpf(edges[j]) + frac * (mp.mpf(edges[j + 1]) - mp.mpf(edges[j]))
                kap = 1
                for w, s_, c in AGREE[2]:
                    u = s_ * x + c
                    lam = mp.npdf(u) / mp.ncdf(u)
                    kap += w * s_ * s_ * lam * (u + lam)
                assert k_lo[j] - 1e-12 <= kap <= k_hi[j] + 1e-12
