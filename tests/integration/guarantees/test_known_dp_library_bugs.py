"""Known bugs of other DP libraries, as regression tests against gpframe (issue 10).

* NaN passing a clamp: NaN coordinates / values / amounts are refused, never clamped or released.
* Float sampler leaks: released values lie on the exact lattice g·Z and are not numpy-float
  Laplace outputs (the T-FP-1 support test of ``tests/audit``).
* Budget arithmetic: 0.1 + 0.1 + 0.1 <= 0.3 is admitted, a tiny overspend is refused.
* Nominal vs effective parameter after lattice snapping: the ledger is charged
  ``Released.guarantee.amount``, and the noise is never below the calibrated scale.
* Web Mercator units used as metres: EPSG:3857 input is reprojected, so the ground noise radius
  matches 2/ε.
* DuckDB SUM over DOUBLE (re-ordered by a parallel engine): gpframe's SQL never feeds a float SUM
  into a mechanism.
"""

from __future__ import annotations

import re
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyproj
import pytest

import gpframe as gp
import gpframe.mechanisms as M
from gpframe.ledger import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ -> the audit helpers
from audit.mutants import naive_float_laplace, numpy_reachable

ROOT = Path(__file__).resolve().parents[3]
NAN = float("nan")


def _file_session(tmp_path, budget):
    return Session(str(tmp_path / "ledger.sqlite"), budget=budget)


def _bytes(path):
    return b"".join(
        Path(p).read_bytes() if Path(p).exists() else b"-" for p in (path, f"{path}-wal")
    )


# --------------------------------------------------------------------------------------------
# NaN passing a clamp
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "kw"),
    [
        (M.laplace_dp, dict(sensitivity=1.0, epsilon=1.0)),
        (M.laplace_gp, dict(eps=1.0)),
        (M.gaussian_zcdp, dict(l2_sensitivity=1.0, rho=0.5)),
    ],
    ids=["laplace_dp", "laplace_gp", "gaussian_zcdp"],
)
def test_nan_values_are_refused_not_clamped(fn, kw):
    with pytest.raises(gp.InvalidInputError, match="values"):
        fn(np.array([1.0, NAN]), **kw)


@pytest.mark.parametrize("fn", [M.planar_laplace, M.gaussian_cgp], ids=["planar", "cgp"])
def test_nan_points_are_refused_not_clamped(fn):
    kw = {"eps": 0.1} if fn is M.planar_laplace else {"rho": 1e-3}
    with pytest.raises(gp.InvalidInputError, match="points"):
        fn(np.array([[0.0, 0.0], [NAN, 1.0]]), **kw)


def test_nan_coordinates_are_refused_by_privatize_and_nothing_is_charged(tmp_path):
    s = _file_session(tmp_path, gp.CGP(rho=1.0))
    df = pd.DataFrame({"u": [1, 2], "lon": [-37.05, NAN], "lat": [-10.9, -10.9]})
    before = _bytes(s.path)
    with pytest.raises(gp.InvalidInputError, match="lon"):
        df.geopriv(s, user="u", lon="lon", lat="lat", crs="EPSG:4326").privatize(rho=1e-4)
    assert _bytes(s.path) == before


def test_nan_coordinates_and_amounts_are_refused_by_sql_and_nothing_is_charged(tmp_path):
    s = _file_session(tmp_path, gp.CGP(rho=1.0))
    con = duckdb.connect()
    gp.duckdb.register(con, s)
    before = _bytes(s.path)
    for q in (
        "SELECT gp_privatize(1, 'nan'::DOUBLE, 0.0, 1e-4)",
        "SELECT gp_privatize(1, 0.0, 0.0, 'nan'::DOUBLE)",
        "SELECT gp_privatize_gp(1, 'inf'::DOUBLE, 0.0, 0.1)",
    ):
        with pytest.raises(duckdb.Error, match="InvalidInputError"):
            con.sql(q).fetchall()
    assert _bytes(s.path) == before
    assert s.spent().sum() == 0


@pytest.mark.parametrize("value", [NAN, float("inf"), -1.0, 0.0])
def test_nan_or_nonpositive_budget_is_refused(value):
    for cls, kw in ((gp.GP, "eps"), (gp.CGP, "rho"), (gp.DP, "epsilon"), (gp.zCDP, "rho")):
        with pytest.raises(gp.InvalidInputError, match=kw):
            cls(**{kw: value})


# --------------------------------------------------------------------------------------------
# float sampler leaks (Mironov 2012): lattice support test against the released mechanism
# --------------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("x1", [2.0**-20, 1e-6], ids=["one-step", "off-lattice"])
def test_released_laplace_has_lattice_support_not_float_support(x1):
    """The released values from x = 0 and from x' = x1 lie on the same lattice g·Z (x1 is snapped
    first), so no output reveals which input it came from; numpy's float Laplace fails this.

    Deterministic given the seeds apart from the negative control, whose reachable fraction is
    ≈ 1 by construction (false failure probability 0 for the lattice check; < 1e-9 for the
    control's ≥ 0.5 gap at n = 20,000, measured ≈ 0.82).
    """
    n = 20_000
    rng = gp.testing.seeded_rng(11)
    r0 = M.laplace_dp(np.zeros(n), sensitivity=1.0, epsilon=1.0, rng=rng)
    r1 = M.laplace_dp(np.full(n, x1), sensitivity=1.0, epsilon=1.0, rng=rng)
    for r in (r0, r1):
        k = np.asarray(r) / float(r.g)
        assert np.array_equal(k, np.rint(k)), "a released value is off the lattice g·Z"
        assert r.g == Fraction(1, 2**20)
    # an output lies on numpy's float-Laplace support only by coincidence of the lattice
    gap_gp = abs(numpy_reachable(r0.values).mean() - numpy_reachable(r1.values).mean())
    assert gap_gp < 0.05
    # negative control: the classic float mechanism is caught by the same statistic
    y0 = naive_float_laplace(0.0, n, np.random.default_rng(1))
    y1 = naive_float_laplace(x1, n, np.random.default_rng(2))
    assert numpy_reachable(y0).mean() - numpy_reachable(y1).mean() >= 0.5


def test_privatize_outputs_are_lattice_points_in_metres(tmp_path):
    s = Session(budget=gp.CGP(rho=1.0))
    df = pd.DataFrame({"u": [1, 2], "x": [500000.3, 500123.7], "y": [8.8e6 + 0.1, 8.8e6 + 5.5]})
    out = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32724").privatize(
        rho=1e-4, rng=gp.testing.seeded_rng(3)
    )
    g = float(M.G_LOC)
    k = np.column_stack([out["x"], out["y"]]) / g
    assert np.array_equal(k, np.rint(k))


# --------------------------------------------------------------------------------------------
# budget arithmetic
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "kind", "step", "total"),
    [
        (gp.GP(eps=0.3), None, 0.1, Fraction(3, 10)),
        (gp.DP(epsilon=0.3), None, 0.1, Fraction(3, 10)),
        (gp.CGP(rho=0.015), "gp", 0.1, Fraction(3, 200)),  # 3 x eps²/2 with eps = 0.1
        (gp.CGP(rho=3e-5), None, 1e-5, Fraction(3, 10**5)),
    ],
    ids=["gp", "dp", "gp-on-cgp", "cgp"],
)
def test_point_one_three_times_fits_point_three_and_nothing_more(
    tmp_path, budget, kind, step, total
):
    notion = "central" if budget.notion == "central" else "metric"
    kw = {"central": budget} if notion == "central" else {"budget": budget}
    with Session(str(tmp_path / "l.sqlite"), **kw) as s:
        for _ in range(3):
            with s.reserve(["ann"], step, notion=notion, kind=kind) as r:
                assert r.admitted.tolist() == [True]
                r.charge(step)
        assert s.spent_exact(["ann"], notion=notion)["ann"] == total
        # a tiny overspend is refused (the smallest positive double)
        for tiny in (5e-324, 1e-15, float(np.nextafter(0, 1))):
            with s.reserve(["ann"], tiny, notion=notion, kind=kind) as r:
                assert r.admitted.tolist() == [False]
        assert s.spent_exact(["ann"], notion=notion)["ann"] == total
        assert s.ledger.verify()


def test_float_sum_rounding_does_not_leak_budget(tmp_path):
    """0.1 + 0.2 != 0.3 in floats; the ledger is exact: 0.1 then 0.2 exactly fills 0.3."""
    with Session(str(tmp_path / "l.sqlite"), budget=gp.GP(eps=0.3)) as s:
        for a in (0.1, 0.2):
            with s.reserve([1], a) as r:
                assert r.admitted.all()
                r.charge(a)
        assert s.remaining_exact([1])[1] == 0


# --------------------------------------------------------------------------------------------
# nominal vs effective parameter after lattice snapping
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [1e-4, 3.3e-5, 7e-6])
def test_mechanism_guarantee_and_noise_are_the_calibrated_ones(amount):
    pts = np.zeros((2, 2))
    r = M.gaussian_cgp(pts, rho=amount)
    assert r.guarantee.amount <= Fraction(str(amount))
    # per-coordinate σ never below the calibrated σ = 1/√(2ρ) of the charged amount
    assert float(r.noise["scale"]) >= 1 / np.sqrt(2 * float(r.guarantee.amount)) * (1 - 1e-12)
    e = M.planar_laplace(pts, eps=amount * 100)
    assert e.guarantee.amount <= Fraction(str(amount * 100))
    # planar Laplace: scale 1/ε' per metre with ε' the charged amount (mean radius 2·scale)
    assert float(e.noise["scale"]) >= 1 / float(e.guarantee.amount) * (1 - 1e-12)


@pytest.mark.parametrize(("mode", "amount"), [("rho", 3.3e-5), ("eps", 0.0123)])
@pytest.mark.parametrize("per", ["point", "user"])
def test_privatize_charges_the_mechanisms_guarantee(tmp_path, mode, amount, per):
    s = _file_session(tmp_path, gp.CGP(rho=10.0) if mode == "rho" else gp.GP(eps=10.0))
    df = pd.DataFrame({"u": [1, 1, 1, 2], "x": [5e5, 5e5 + 1, 5e5 + 2, 5e5 + 3], "y": [8.8e6] * 4})
    out = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32724").privatize(
        **{mode: amount}, per=per, rng=gp.testing.seeded_rng(5)
    )
    qid = out.attrs["geopriv"].query_id
    fn = M.gaussian_cgp if mode == "rho" else M.planar_laplace
    for u, n in ((1, 3), (2, 1)):
        part = Fraction(str(amount)) / (n if per == "user" else 1)
        g = fn(np.zeros((1, 2)), **{mode: part}).guarantee.amount  # what one point's draw claims
        want = g * n  # n points, each at its guarantee (per="user": n × amount/n)
        h = s.history(u)
        got = h.loc[h["query_id"] == qid, "amount_exact"].sum()
        assert got == want, (u, got, want)
        assert got <= Fraction(str(amount)) * (n if per == "point" else 1)


# --------------------------------------------------------------------------------------------
# Web Mercator units used as metres
# --------------------------------------------------------------------------------------------


@pytest.mark.statistical
def test_web_mercator_input_is_reprojected_ground_radius_matches_2_over_eps():
    """At 60°N one Web Mercator unit is 0.5 ground metres: treating it as a metre would halve the
    ground noise radius. The mean ground displacement of planar Laplace is 2·k/ε (k = the
    calibration factor (1 + √2·g/r_min)·scale_max ≈ 1.0014).

    n = 4,000 points: the mean radius has relative sd 1/√(2n) ≈ 1.1 %; the window ±8 % is > 7 sd
    (false failure probability < 1e-11); the unit bug gives 0.5 and fails it.
    """
    eps, n = 0.01, 4000
    to_merc = pyproj.Transformer.from_crs(4326, 3857, always_xy=True)
    lon = np.full(n, 10.0) + np.linspace(0, 0.01, n)
    lat = np.full(n, 60.0)
    x, y = to_merc.transform(lon, lat)
    df = pd.DataFrame({"u": np.arange(n), "x": x, "y": y})
    s = Session(budget=gp.GP(eps=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gp.GpframeWarning)
        bound = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:3857")
        out = bound.privatize(eps=eps, per="point", rng=gp.testing.seeded_rng(17))
    assert bound.projected.reprojected and bound.projected.crs_m.to_epsg() != 3857
    back = pyproj.Transformer.from_crs(3857, 4326, always_xy=True)
    lon2, lat2 = back.transform(out["x"].to_numpy(), out["y"].to_numpy())
    _, _, dist = pyproj.Geod(ellps="WGS84").inv(lon, lat, lon2, lat2)
    k = (1 + np.sqrt(2) * float(M.G_LOC)) * float(bound.projected.scale_max)
    ratio = dist.mean() / (2 * k / eps)
    assert 0.92 < ratio < 1.08, ratio


# --------------------------------------------------------------------------------------------
# DuckDB SUM over DOUBLE re-ordered by a parallel engine
# --------------------------------------------------------------------------------------------

_GP_CALL = re.compile(r"\bgp_[a-z_]+\s*\(", re.IGNORECASE)
_AGG = re.compile(r"\b(sum|avg|mean|fsum|sumkahan|kahan_sum)\s*\(", re.IGNORECASE)


def _calls(text, pattern):
    """(name, argument text, text after the call) of every call matched by ``pattern``."""
    out = []
    for m in pattern.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append((m.group(0), text[m.end() : i - 1], text[i : i + 80]))
    return out


def _sql_files():
    files = sorted(gp.duckdb.SQL_DIR.glob("*.sql"))
    assert files, "no SQL examples found"
    return files


@pytest.mark.parametrize("path", _sql_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sql_examples_never_feed_a_float_sum_into_a_mechanism(path):
    """A float SUM's value depends on the order a parallel engine adds in, so its sensitivity is
    not that of the exact sum; gpframe's mechanisms must only see row values. In the shipped SQL
    no gp_ call's arguments hold an aggregate, nor a column named after one (``sum(v) AS s``
    then ``gp_...(s)``); aggregates only post-process released values.
    """
    assert _violations(path.read_text()) == [], path.name


def _violations(sql):
    """What the rule above flags in an SQL text."""
    bad = []
    text = re.sub(r"--[^\n]*", "", sql)
    gp_args = [args for _, args, _ in _calls(text, _GP_CALL)]
    aliases = set()
    for _, _, after in _calls(text, _AGG):
        m = re.match(r"\s*(?:::\s*\w+\s*)?AS\s+(\w+)", after, re.IGNORECASE)
        if m:
            aliases.add(m.group(1))
    for args in gp_args:
        if _AGG.search(args):
            bad.append(f"a gp_ call is fed an aggregate: {args[:200]}")
        bad += [
            f"a gp_ call is fed the aggregate {a!r}"
            for a in aliases
            if re.search(rf"\b{a}\b", args)
        ]
    return bad


def test_the_float_sum_rule_flags_a_float_sum_fed_to_a_mechanism():
    """Negative control: the rule catches both shapes of the bug."""
    direct = "SELECT gp_privatize(u, sum(x), sum(y), 1e-4) FROM t GROUP BY u;"
    via_cte = (
        "WITH s AS (SELECT u, SUM(x) AS sx, avg(y) AS sy FROM t GROUP BY u) "
        "SELECT gp_privatize(u, sx, sy, 1e-4) FROM s;"
    )
    post = "SELECT avg(p.x) AS m FROM (SELECT gp_privatize(u, x, y, 1e-4) AS p FROM t);"
    assert _violations(direct) and len(_violations(via_cte)) == 2
    assert _violations(post) == []


def test_duckdb_parallel_float_sum_is_order_dependent_documented():
    """Why the rule above matters: the same DOUBLE SUM in a different order gives different
    bits (here forced by ordering; a parallel engine does it at will)."""
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS i, CASE range % 4 WHEN 0 THEN 1e16 WHEN 2 THEN -1e16 "
        "ELSE 1.0 END::DOUBLE AS v FROM range(4000)"
    )
    a = con.sql("SELECT sum(v ORDER BY i) FROM t").fetchall()[0][0]
    b = con.sql("SELECT sum(v ORDER BY v) FROM t").fetchall()[0][0]
    assert a != b  # float addition is not associative; an exact mechanism must not see this
