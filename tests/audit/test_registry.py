"""The registry is complete, its names are unique and its claims match what the mechanisms state."""

from __future__ import annotations

import importlib
import inspect
import math

import numpy as np
import pytest

from .engine import Claim
from .registry import AUDITED_MODULES, CASES, NOT_MECHANISMS, by_tier
from .stats import zcdp_eps


def _randomised_public_functions() -> set[str]:
    """Dotted names of public functions that take ``rng``: each draws noise and must be audited."""
    found = set()
    for modname in AUDITED_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:  # a layer not built yet
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not callable(obj) or inspect.isclass(obj):
                continue
            try:
                params = inspect.signature(obj).parameters
            except (TypeError, ValueError):
                continue
            if "rng" in params:
                found.add(f"{modname}.{name}")
    return found


def test_every_randomised_public_function_is_registered():
    covered = {c for case in CASES for c in case.covers}
    missing = sorted(_randomised_public_functions() - covered - set(NOT_MECHANISMS))
    assert not missing, (
        f"public randomised functions without an audit case: {missing}; add a register(Case(...)) "
        "entry in tests/audit/registry.py"
    )


def test_the_core_mechanisms_are_found():
    names = _randomised_public_functions()
    for f in ("laplace_dp", "laplace_gp", "planar_laplace", "gaussian_zcdp", "gaussian_cgp"):
        assert f"gpframe.mechanisms.{f}" in names


def test_every_covered_function_has_a_fast_case():
    fast = {c for case in by_tier("fast") for c in case.covers}
    slow = {c for case in CASES for c in case.covers}
    assert slow <= fast, sorted(slow - fast)


def test_case_names_are_unique_and_pairs_are_distinct():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    for c in CASES:
        if c.centers is not None:
            assert np.linalg.norm(np.subtract(c.centers[0], c.centers[1])) > 0, c.name


def test_registry_size():
    # issue 10 asks for at least 60 cases once the operations exist
    assert len(CASES) >= 60
    assert len(by_tier("fast")) >= 8


@pytest.mark.parametrize("case", [c for c in CASES if c.guarantee], ids=lambda c: c.name)
def test_declared_claim_matches_released_guarantee(case):
    from gpframe.testing import seeded_rng

    released = case.run(case.inputs[0], 2, seeded_rng(0))
    kind, amount = case.guarantee
    assert released.guarantee.kind == kind
    assert math.isclose(float(released.guarantee.amount), amount, rel_tol=1e-12)
    out = np.asarray(released)
    assert out.dtype == np.float64 and np.isfinite(out).all()
    g = float(released.g)
    assert np.array_equal(np.rint(out / g) * g, out), "released values must lie on the lattice"


def test_claim_formulas():
    assert Claim.gp(0.1, 0.5, 1.0).value == pytest.approx(0.1)  # the r_min floor
    assert Claim.gp(0.1, 30.0, 1.0).value == pytest.approx(3.0)
    assert Claim.gp(1.0, 0.25, None).value == pytest.approx(0.25)  # lattice-exact: Euclidean
    c = Claim.cgp(0.02, 10.0)
    for delta in c.deltas:
        # eps = rho d² + 2 d sqrt(rho ln 1/delta)
        want = 0.02 * 100 + 2 * 10 * math.sqrt(0.02 * math.log(1 / delta))
        assert c.eps(delta) == pytest.approx(want)
    assert Claim.zcdp(0.5).eps(1e-3) == pytest.approx(zcdp_eps(0.5, 1e-3))
    assert Claim.dp(2.0).eps(0.0) == 2.0
