"""A-priori widths and noise of a preview equal those of the real elimination and release."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpframe import mechanisms as mech
from gpframe.queries.elimination import eliminate_noninteractive
from gpframe.queries.preview_bounds import full_run_widths, planned_release
from gpframe.testing import seeded_enabled, seeded_rng


@pytest.mark.parametrize(("kind", "triple"), [("cgp", "dist"), ("cgp", "pt"), ("gp", "dist"),
                                              ("gp", "pt")])  # fmt: skip
def test_planned_release_has_the_real_noise(kind: str, triple: str) -> None:
    part, k = Fraction(1, 10**4) if kind == "cgp" else Fraction(1, 100), Fraction(3, 2)
    x = np.zeros(3) if triple == "dist" else np.zeros((3, 2))
    with seeded_enabled():
        if kind == "cgp":
            rel = mech.gaussian_cgp(x, rho=part / (k * k), rng=seeded_rng(1))
        elif triple == "dist":
            rel = mech.laplace_gp(x, eps=part / k, rng=seeded_rng(1))
        else:
            rel = mech.planar_laplace(x, eps=part / k, rng=seeded_rng(1))
    pl = planned_release(kind, triple, part, k, 3)
    assert pl.noise == {key: rel.noise[key] for key in pl.noise} and pl.g == rel.g
    assert np.asarray(pl, dtype=np.float64).shape == np.asarray(rel).shape


@pytest.mark.parametrize(
    ("kind", "triple", "amount"),
    [("cgp", "dist", 1e-4), ("cgp", "pt", 1e-4), ("gp", "dist", 1e-2), ("gp", "pt", 1e-2)],
)
def test_full_run_widths_are_the_elimination_widths(kind: str, triple: str, amount: float) -> None:
    """Users that run every round (no threshold can be crossed): the real widths, no draw here."""
    n, rounds, beta = 6, 4, 0.05
    alloc = np.array([amount] * 3 + [2 * amount] * 2 + [0.0], dtype=object)
    x = np.zeros(n) if triple == "dist" else np.zeros((n, 2))
    h = None if triple == "dist" else (lambda p: np.hypot(p[:, 0], p[:, 1]))
    with seeded_enabled():
        out = eliminate_noninteractive(x, alloc, kind=kind, triple=triple, h=h, nu_low=-np.inf,
                                       nu_high=np.inf, rounds=rounds, split="doubling",
                                       beta=beta, scale_max=1.25, rng=seeded_rng(4))  # fmt: skip
    assert out.rounds_run[:5].tolist() == [rounds] * 5
    real = out.width_fn(beta / 5)
    got = full_run_widths(alloc, n, kind=kind, triple=triple, rounds=rounds, split="doubling",
                          beta_elim=beta, beta_post=beta / 5 * 5, unit=None,
                          scale_max=1.25)  # fmt: skip
    assert np.isnan(got[5]) and np.isnan(real[5])
    if kind == "gp" and triple == "pt":  # the intersection of intervals: at most the radius
        assert (real[:5] <= got[:5] * (1 + 1e-12)).all()
    else:
        np.testing.assert_allclose(got[:5], real[:5], rtol=1e-12)
    assert got[0] > got[3]  # a larger allocation, a narrower estimate
