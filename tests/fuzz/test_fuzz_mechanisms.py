"""Bad-input fuzzing of every callable in ``gpframe.mechanisms.__all__`` and the budget classes.

One argument at a time is replaced by a generated bad value (the others stay valid), so a
rejection must name exactly that argument.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp
import gpframe.mechanisms as M

from ._harness import SPECIAL, assert_finite, attempt, bad_scalars, scalars

_nan, _inf = float("nan"), float("inf")

_rng = gp.testing.seeded_rng(7)

#: bad arrays for values / points arguments
BAD_ARRAYS = [
    [],
    np.zeros((0, 2)),
    [_nan],
    [1.0, _inf],
    [[0.0, _nan]],
    [[_inf, 0.0]],
    [1e300],
    [[1e300, 0.0]],
    [[2.0**60, 0.0]],
    ["a", "b"],
    [None],
    [[None, None]],
    np.array([True, False]),
    [[1.0, 2.0, 3.0]],
    np.zeros((2, 2, 2)),
    5.0,
    "x",
    None,
    [[1.0], [2.0]],
    [object()],
    np.array([np.datetime64("2020-01-01")]),
    [[0.0, 0.0], [1.0]],
]  # complex input is a separate bug: test_complex_values_are_refused
good_points = st.lists(
    st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)), min_size=1, max_size=5
).map(lambda v: np.array(v, dtype=np.float64))
good_values = st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=5).map(np.array)
arrays = st.one_of(st.sampled_from(BAD_ARRAYS), good_points, good_values)
flags = st.sampled_from([True, False, None, 0, 1, 2, "yes", _nan, np.bool_(True)])
rngs = st.sampled_from([None, "os", 42, object(), np.random.default_rng(0)])
ints = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 4, 5, 10**9, 2**70, True, 1.5, _nan, None, "2"]))

# sparse_vector: 10**9 runs or cyclic passes is a legitimate (slow) request, not a bad input
svt_ints = st.sampled_from([0, -1, 1, 2, 7, 1000, 2**70, True, 1.5, _nan, None, "2"])

PTS = np.array([[0.0, 0.0], [10.0, -3.5]])
VALS = np.array([1.0, 2.5])
_released = M.laplace_gp(VALS, eps=1.0, rng=_rng)

#: function -> (valid kwargs, {argument: strategy of replacements})
CASES = {
    "laplace_dp_rows": (
        dict(values=VALS, sensitivity=[1.0, 2.0], epsilon=[1.0, 0.5]),
        dict(
            values=arrays,
            sensitivity=st.one_of(arrays, st.lists(scalars, min_size=0, max_size=3)),
            epsilon=st.one_of(arrays, st.lists(scalars, min_size=0, max_size=3)),
            rng=rngs,
        ),
    ),
    "laplace_dp": (
        dict(values=VALS, sensitivity=1.0, epsilon=1.0),
        dict(
            values=arrays,
            sensitivity=scalars,
            epsilon=scalars,
            integer=flags,
            draw_scale=scalars,
            rng=rngs,
        ),
    ),
    "laplace_gp": (
        dict(values=VALS, eps=1.0),
        dict(
            values=arrays,
            eps=scalars,
            K=scalars,
            g=scalars,
            r_min=scalars,
            lattice_exact=flags,
            draw_scale=scalars,
            rng=rngs,
        ),
    ),
    "planar_laplace": (
        dict(points=PTS, eps=0.1),
        dict(
            points=arrays,
            eps=scalars,
            K=scalars,
            g=scalars,
            r_min=scalars,
            lattice_exact=flags,
            rng=rngs,
        ),
    ),
    "gaussian_zcdp": (
        dict(values=VALS, l2_sensitivity=1.0, rho=0.5),
        dict(values=arrays, l2_sensitivity=scalars, rho=scalars, integer=flags, rng=rngs),
    ),
    "gaussian_cgp": (
        dict(points=PTS, rho=1e-2),
        dict(
            points=arrays,
            rho=scalars,
            K=scalars,
            g=scalars,
            r_min=scalars,
            lattice_exact=flags,
            rng=rngs,
        ),
    ),
    "sparse_vector": (
        dict(values=VALS, threshold=1.0, eps=1.0),
        dict(
            values=arrays,
            threshold=scalars,
            eps=scalars,
            rho=scalars,
            K=scalars,
            above=flags,
            cyclic=flags,
            max_cycles=svt_ints,
            runs=svt_ints,
            g=scalars,
            r_min=scalars,
            rng=rngs,
        ),
    ),
    "cgp_sigma": (dict(rho=1e-4), dict(rho=scalars, n=ints, K=scalars)),
    "gp_scale": (dict(eps=0.1), dict(eps=scalars, n=ints, K=scalars)),
    "gp_to_rate": (dict(eps=0.1), dict(eps=scalars, n=ints, K=scalars)),
    "error_bound": (
        dict(released=_released, beta=0.05),
        dict(released=st.sampled_from([None, 1.0, VALS, "r"]), beta=scalars, n=ints),
    ),
    "gaussian_bound": (
        dict(beta=0.05, sigma=2.0, g=Fraction(1, 1024)),
        dict(beta=scalars, sigma=scalars, g=scalars, n=ints),
    ),
    "gaussian_radius_bound": (
        dict(beta=0.05, sigma=2.0, g=Fraction(1, 1024)),
        dict(beta=scalars, sigma=scalars, g=scalars, d=ints, n=ints),
    ),
    "gaussian_radius_nominal": (dict(rho=1e-4, beta=0.05), dict(rho=scalars, beta=scalars, n=ints)),
    "laplace_bound": (
        dict(beta=0.05, scale=2.0, g=Fraction(1, 1024)),
        dict(beta=scalars, scale=scalars, g=scalars, n=ints),
    ),
    "lem45_bound": (dict(beta=0.05, scale=2.0), dict(beta=scalars, scale=scalars, n=ints)),
    "planar_bound": (
        dict(beta=0.05, scale=2.0, g=Fraction(1, 1024)),
        dict(beta=scalars, scale=scalars, g=scalars, d=ints, n=ints),
    ),
    "planar_quantile": (dict(beta=0.05, scale=2.0), dict(beta=scalars, scale=scalars, n=ints)),
    "eps_from_rho": (dict(rho=Fraction(1, 10**4)), dict(rho=scalars)),
    "sqrt_down": (dict(x=Fraction(2)), dict(x=scalars, bits=ints)),
    "sqrt_up": (dict(x=Fraction(2)), dict(x=scalars, bits=ints)),
}
_POSITIONAL = {"values", "points", "released", "rho_pos", "x"}
# eps_from_rho / sqrt_* take their first argument positionally
_POS_ONLY = {"eps_from_rho": "rho"}


def test_every_mechanism_callable_is_fuzzed():
    callables = {
        n for n in M.__all__ if callable(getattr(M, n)) and not isinstance(getattr(M, n), type)
    }
    assert callables == set(CASES), (
        f"add {sorted(callables - set(CASES))} to CASES in tests/fuzz/test_fuzz_mechanisms.py"
    )


#: the release wrappers (the mechanisms proper); the rest of __all__ are error-bound and
#: calibration helpers
RELEASE = (
    "gaussian_cgp",
    "gaussian_zcdp",
    "laplace_dp",
    "laplace_dp_rows",
    "laplace_gp",
    "planar_laplace",
    "sparse_vector",
)
HELPERS = tuple(sorted(set(CASES) - set(RELEASE)))


def _known_bug(fname, arg, value):
    """Inputs of the release wrappers that hit a bug reproduced by an xfail test below.

    Magnitudes outside [1e-200, 1e200] (and ints beyond 2**60) raise OverflowError or name the
    wrong argument (test_release_wrapper_extreme_magnitudes); a huge draw_scale hangs
    (test_laplace_dp_huge_draw_scale_returns_promptly). Excluded so that the fuzz keeps
    searching for new failures.
    """
    if fname not in RELEASE or arg in ("values", "points", "rng", "integer", "lattice_exact"):
        return False
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)) and abs(int(value)) > 2**60:
        return True
    try:
        f = abs(float(value))
    except (TypeError, ValueError, OverflowError):
        return isinstance(value, int)
    if arg == "draw_scale" and f > 1e6:
        return True
    if fname == "gaussian_zcdp" and arg == "rho" and f > 1e15:
        return True
    if arg in ("sensitivity", "l2_sensitivity") and 0 < f < 1e-6:
        return True
    return f > 0 and (f < 1e-200 or f > 1e200)


def _run(fname, data):
    base, pert = CASES[fname]
    arg = data.draw(st.sampled_from(sorted(pert)), label="argument")
    value = data.draw(pert[arg].filter(lambda v: not _known_bug(fname, arg, v)), label=arg)
    kw = dict(base)
    kw[arg] = value
    fn = getattr(M, fname)
    first = next(iter(base))
    pos = [kw.pop(first)] if first in _POSITIONAL or fname in _POS_ONLY else []
    if "rng" in pert and "rng" not in kw:
        kw["rng"] = _rng
    ok, out = attempt(f"mechanisms.{fname}", (arg,), fn, *pos, **kw)
    if ok:
        if hasattr(out, "index") and not isinstance(out, M.Released):  # SVTResult
            assert_finite(f"mechanisms.{fname}", out.index)
        elif isinstance(out, M.Released):
            assert_finite(f"mechanisms.{fname}", out.values)
            assert out.guarantee.amount > 0
        elif isinstance(out, M.ReleasedRows):
            assert_finite(f"mechanisms.{fname}", out.values)
            assert all(e > 0 for e in out.epsilon)
        elif isinstance(out, (float, int, Fraction)):
            assert_finite(f"mechanisms.{fname}", float(out))


@pytest.mark.parametrize("fname", RELEASE)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_release_wrapper_bad_inputs(fname, data):
    _run(fname, data)


@pytest.mark.slow
@pytest.mark.parametrize("fname", RELEASE)
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_release_wrapper_bad_inputs_slow(fname, data):
    _run(fname, data)


@pytest.mark.parametrize("fname", HELPERS)
def test_helper_bad_inputs(fname):
    """Deterministic sweep (no hypothesis: a failing @given inside an xfail crashes pytest's
    report hook here): every hand-picked bad value for every argument, one at a time."""
    base, pert = CASES[fname]
    failures = []
    for arg in sorted(pert):
        for value in [*SPECIAL, 0, -1, 10**6]:
            if arg in ("bits", "n", "d") and isinstance(value, int) and abs(value) > 10**6:
                continue  # sqrt_down/up(bits=10**9) runs for minutes (listed in the reason)
            kw = dict(base)
            kw[arg] = value
            first = next(iter(base))
            pos = [kw.pop(first)] if first in _POSITIONAL or fname in _POS_ONLY else []
            try:
                ok, out = attempt(f"mechanisms.{fname}", (arg,), getattr(M, fname), *pos, **kw)
                if ok and isinstance(out, (float, int, Fraction)):
                    assert_finite(fname, float(out))
            except AssertionError as exc:
                failures.append(f"{arg}={value!r}: {exc}"[:200])
    assert not failures, f"{len(failures)} contract breaches, e.g. " + "; ".join(failures[:3])


#: (function, keyword overrides, what happens) -- each a BUG reproduced exactly
EXTREMES = [
    ("gaussian_cgp", {"K": 10**400}, "OverflowError"),
    ("gaussian_cgp", {"rho": 10**400}, "OverflowError"),
    ("planar_laplace", {"K": 10**400}, "OverflowError"),
    ("laplace_gp", {"K": 10**400}, "OverflowError"),
    ("laplace_gp", {"draw_scale": 10**400}, "OverflowError"),
    ("gaussian_zcdp", {"rho": 5e-324}, "OverflowError"),
    ("laplace_dp", {"sensitivity": 1e-300}, "message names g, not sensitivity"),
    ("gaussian_zcdp", {"l2_sensitivity": 1e-300}, "message names g, not l2_sensitivity"),
    ("gaussian_zcdp", {"rho": 1e300}, "message names values, not rho"),
    ("gaussian_zcdp", {"l2_sensitivity": 1e-14}, "message names values and g, not l2_sensitivity"),
    ("gaussian_zcdp", {"rho": 1.5e20}, "message names values and a g the caller cannot pass"),
]


@pytest.mark.parametrize(
    ("fname", "override", "observed"),
    EXTREMES,
    ids=[f"{f}-{next(iter(o))}" for f, o, _ in EXTREMES],
)
def test_release_wrapper_extreme_magnitudes(fname, override, observed):
    base = dict(CASES[fname][0])
    first = next(iter(base))
    pos = [base.pop(first)]
    base.update(override)
    _run_one(fname, next(iter(override)), pos, base)


@pytest.mark.parametrize("fname", ["laplace_gp", "planar_laplace", "laplace_dp"])
def test_complex_values_are_refused(fname):
    base = dict(CASES[fname][0])
    first = next(iter(base))
    base.pop(first)
    _run_one(fname, first, [np.array([1 + 2j, 3 + 0j])], base)


def _run_one(fname, arg, pos, kw):
    ok, out = attempt(f"mechanisms.{fname}", (arg,), getattr(M, fname), *pos, rng=_rng, **kw)
    if ok:
        assert_finite(fname, out.values)


@pytest.mark.slow
def test_laplace_dp_huge_draw_scale_returns_promptly():
    """laplace_dp(draw_scale=1e300) used to run for minutes; it is now refused at once."""
    code = (
        "import gpframe.mechanisms as M\n"
        "try:\n    M.laplace_dp([1.0], sensitivity=1.0, epsilon=1.0, draw_scale=1e300)\n"
        "except Exception:\n    pass\n"
    )
    subprocess.run([sys.executable, "-c", code], timeout=20, check=True)


BUDGETS = {"GP": "eps", "CGP": "rho", "DP": "epsilon", "zCDP": "rho"}


def _budget(name, value):
    ok, out = attempt(f"gp.{name}", (BUDGETS[name],), getattr(gp, name), **{BUDGETS[name]: value})
    if ok:
        assert out.amount > 0


@pytest.mark.parametrize("name", sorted(BUDGETS))
@settings(max_examples=60, deadline=None)
@given(value=bad_scalars)
def test_budget_constructors_bad_inputs(name, value):
    _budget(name, value)
