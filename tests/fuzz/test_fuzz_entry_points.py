"""Bad-input fuzzing of the user-facing entry points against a file-backed ledger.

``df.geopriv(...)`` / ``resolve_points``, ``.privatize(...)``, the DuckDB UDFs, ``gp.Session``,
``session.reserve`` / ``set_budget`` and the CLI. Every rejected call must leave the ledger file
(``ledger.sqlite`` + ``-wal``) byte-identical.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpframe as gp
from gpframe.cli import main as cli_main
from gpframe.geo import locate_points, resolve_points

from ._harness import (
    COUNTS,
    GP_ERROR_NAMES,
    assert_finite,
    attempt,
    bad_scalars,
    ledger_hash,
    scalars,
)

_nan, _inf = float("nan"), float("inf")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def ledger_dir():
    d = Path(tempfile.mkdtemp(prefix="gpfuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def session(ledger_dir):
    s = gp.Session(str(ledger_dir / "ledger.sqlite"), budget=gp.CGP(rho=1e3))
    yield s
    s.close()


# --------------------------------------------------------------------------------------------
# frames
# --------------------------------------------------------------------------------------------

user_values = st.one_of(
    st.integers(0, 3), st.sampled_from(["a", "b", "", None, _nan, True, 1.5, -0.0])
)
coord = st.one_of(
    st.floats(-180, 180),  # lon/lat-like
    st.floats(-1e7, 1e7),  # metres-like
    st.sampled_from([_nan, _inf, -_inf, 1e300, 0.0, 500000.0, 4e6]),
)
CRSS = [
    "EPSG:4326",
    "EPSG:3857",
    "EPSG:32618",
    "EPSG:2263",
    "EPSG:4978",
    None,
    "garbage",
    4326,
    "EPSG:999999",
    "EPSG:3035",
]
TO_CRSS = [None, None, None, "EPSG:4326", "EPSG:3857", "EPSG:32618", "nonsense", 3857]


@st.composite
def frames(draw):
    n = draw(st.integers(0, 5))
    users = draw(st.lists(user_values, min_size=n, max_size=n))
    a = draw(st.lists(coord, min_size=n, max_size=n))
    b = draw(st.lists(coord, min_size=n, max_size=n))
    df = pd.DataFrame({"uid": pd.Series(users, dtype=object), "c1": a, "c2": b})
    dtype = draw(st.sampled_from(["float", "str", "bool", "object", "int", "category"]))
    col = draw(st.sampled_from(["c1", "c2"]))
    if dtype == "str":
        df[col] = df[col].astype(str)
    elif dtype == "bool":
        df[col] = df[col] > 0
    elif dtype == "object":
        df[col] = df[col].astype(object)
    elif dtype == "int" and np.isfinite(df[col]).all() and (df[col].abs() < 1e15).all():
        df[col] = df[col].astype(np.int64)
    elif dtype == "category":
        df[col] = df[col].astype("category")
    if draw(st.booleans()) and n:
        df["uid"] = pd.array(
            [u if isinstance(u, int) and not isinstance(u, bool) else 0 for u in users],
            dtype="Int64",
        )
    roles = draw(st.sampled_from(["lonlat", "xy", "swap", "missing", "mixed"]))
    kw = {"user": draw(st.sampled_from(["uid", "uid", "uid", "nope", None, 3]))}
    if roles == "lonlat":
        kw |= {"lon": "c1", "lat": "c2"}
    elif roles == "xy":
        kw |= {"x": "c1", "y": "c2"}
    elif roles == "swap":
        kw |= {"lon": "c2", "lat": "c1"}
    elif roles == "missing":
        kw |= {"x": "c1", "y": "zz"}
    else:
        kw |= {"x": "c1", "lat": "c2"}
    kw["crs"] = draw(st.sampled_from(CRSS))
    kw["to_crs"] = draw(st.sampled_from(TO_CRSS))
    return df, kw


def _names(kw):
    """A rejection of a frame must name a column or one of the keywords in play."""
    cols = [
        str(v) for k, v in kw.items() if k in ("user", "x", "y", "lon", "lat") and v is not None
    ]
    return (*cols, "user", "crs", "to_crs", "frame", "x", "y", "lon", "lat", "CRS", "EPSG")


@st.composite
def geoframes(draw):
    """GeoDataFrames with polygons (valid, bow-tie, empty), empty points, None, mixed CRS."""
    import geopandas as gpd
    import shapely

    kinds = draw(
        st.lists(
            st.sampled_from(
                [
                    "pt",
                    "pt",
                    "nanpt",
                    "emptypt",
                    "none",
                    "poly",
                    "bowtie",
                    "emptypoly",
                    "line",
                    "multipt",
                ]
            ),
            min_size=0,
            max_size=4,
        )
    )
    geoms = []
    for k in kinds:
        geoms.append(
            {
                "pt": shapely.Point(-37.05, -10.9),
                "nanpt": shapely.Point(_nan, 1.0),
                "emptypt": shapely.Point(),
                "none": None,
                "poly": shapely.box(-37.1, -10.95, -37.0, -10.9),
                "bowtie": shapely.Polygon([(0, 0), (1, 1), (1, 0), (0, 1)]),
                "emptypoly": shapely.Polygon(),
                "line": shapely.LineString([(0, 0), (1, 1)]),
                "multipt": shapely.MultiPoint([(0, 0), (1, 1)]),
            }[k]
        )
    crs = draw(st.sampled_from(["EPSG:4326", "EPSG:3857", None]))
    gdf = gpd.GeoDataFrame({"uid": list(range(len(geoms)))}, geometry=geoms, crs=crs)
    return gdf, {"user": "uid", "crs": draw(st.sampled_from([None, "EPSG:4326", "EPSG:32618"]))}


privatize_kw = st.fixed_dictionaries(
    {},
    optional={
        "eps": scalars,
        "rho": scalars,
        "per": st.sampled_from(["user", "point", "USER", None, 1, ""]),
        "beta": st.one_of(bad_scalars, st.floats(1e-6, 0.99)),
    },
)


def _privatize(session, bound):
    def go(kw):
        names = (*kw.keys(), "eps", "rho", "per", "beta", "budget")
        ok, out = attempt("accessor.privatize", names, bound.privatize, ledger=session.path, **kw)
        if ok:
            res = out.attrs["geopriv"]
            released = ~out.geometry.is_empty.to_numpy() & out.geometry.notna().to_numpy()
            xy = np.column_stack([out.geometry.x.to_numpy(), out.geometry.y.to_numpy()])
            assert_finite("accessor.privatize", xy[released])
            assert res is not None
        return ok

    return go


def _accessor(session, df, kw, pkw):
    ok, _ = attempt("geo.resolve_points", _names(kw), resolve_points, df, ledger=session.path, **kw)
    ok_loc, _ = attempt("geo.locate_points", _names(kw), locate_points, df, ledger=session.path,
                        **kw)  # fmt: skip
    ok2, bound = attempt(
        "accessor.geopriv", _names(kw), df.geopriv, session, ledger=session.path, **kw
    )
    # df.geopriv validates (locate_points) and projects on first metric use (resolve_points)
    assert ok_loc == ok2, "locate_points and df.geopriv disagree on the same input"
    assert ok2 or not ok, "resolve_points accepts what df.geopriv refuses"
    if ok2 and not ok:  # refused by the projection: at the first metric operation, uncharged
        ok3, _ = attempt("accessor.projected", _names(kw), lambda: bound.projected,
                         ledger=session.path)  # fmt: skip
        assert not ok3, "resolve_points refuses what the bound projection accepts"
    elif ok2:
        _privatize(session, bound)(pkw)


#: privatize kwargs that hit the NaN/inf-output bug (test_privatize_tiny_amount_gives_finite_output)
def _tiny(pkw):
    """Also excludes ints beyond float range (test_privatize_huge_int_eps_is_refused_cleanly)."""
    for k in ("eps", "rho"):
        v = pkw.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (0 < v < 1e-8 or v > 1e300):
            return True
    return False


@settings(max_examples=120, **SETTINGS)
@given(frame=frames(), pkw=privatize_kw.filter(lambda d: not _tiny(d)))
def test_accessor_bad_frames(session, frame, pkw):
    df, kw = frame
    _accessor(session, df, kw, pkw)


@settings(max_examples=40, **SETTINGS)
@given(frame=geoframes(), pkw=privatize_kw.filter(lambda d: not _tiny(d)))
def test_accessor_bad_geometries(session, frame, pkw):
    df, kw = frame
    _accessor(session, df, kw, pkw)


GOOD = pd.DataFrame(
    {"uid": [1, 1, 2], "lon": [-37.05, -37.06, -37.07], "lat": [-10.9, -10.91, -10.92]}
)
# a named metric CRS (UTM 24S): the projection depends on no data, so binding GOOD never warns
GOOD_KW = {"user": "uid", "lon": "lon", "lat": "lat", "crs": "EPSG:4326", "to_crs": "EPSG:32724"}


@settings(max_examples=120, **SETTINGS)
@given(pkw=privatize_kw.filter(lambda d: not _tiny(d)))
def test_privatize_bad_parameters(session, pkw):
    bound = GOOD.geopriv(session, **GOOD_KW)
    _privatize(session, bound)(pkw)


@pytest.mark.slow
@settings(max_examples=3000, **SETTINGS)
@given(frame=frames(), pkw=privatize_kw)
def test_accessor_bad_frames_slow(session, frame, pkw):
    df, kw = frame
    _accessor(session, df, kw, pkw)


def test_privatize_tiny_amount_gives_finite_output(session):
    bound = GOOD.geopriv(session, **GOOD_KW)
    _privatize(session, bound)({"rho": 1e-20})


def test_privatize_huge_int_eps_is_refused_cleanly(session):
    bound = GOOD.geopriv(session, **GOOD_KW)
    _privatize(session, bound)({"eps": 10**400})


# --------------------------------------------------------------------------------------------
# DuckDB UDFs
# --------------------------------------------------------------------------------------------


def _sql_num(v):
    if isinstance(v, float) and not np.isfinite(v):
        return f"CAST('{v}' AS DOUBLE)"
    if v is None:
        return "NULL"
    return repr(float(v))


sql_amount = st.one_of(
    st.sampled_from([_nan, _inf, -_inf, 0.0, -1.0, 1e300, 5e-324, None, 1e-4, 0.5, 100.0, 101.0]),
    st.floats(1e-6, 1.0),
)


SQL_USER_KINDS = [
    st.one_of(st.integers(-3, 3), st.just("NULL"), st.just("9223372036854775807")),
    st.sampled_from(["'a'", "''", "NULL", "'1'", "'ünï'"]),
    st.sampled_from(["1.5", "-0.0", "NULL", "'nan'::DOUBLE"]),
    st.sampled_from(["true", "false", "NULL"]),
]


@st.composite
def sql_rows(draw):
    n = draw(st.integers(1, 6))
    users = draw(st.sampled_from(SQL_USER_KINDS))  # VALUES needs one type per column
    return [(draw(users), draw(coord), draw(coord), draw(sql_amount)) for _ in range(n)]


@pytest.fixture(scope="module")
def con(session):
    import duckdb

    c = duckdb.connect()
    c.execute("SET threads = 4")
    gp.duckdb.register(c, session)
    yield c
    c.close()


def _udf(session, con, fn, rows):
    import duckdb

    COUNTS[f"duckdb.{fn}"] += 1
    values = ", ".join(f"({u}, {_sql_num(x)}, {_sql_num(y)}, {_sql_num(a)})" for u, x, y, a in rows)
    q = f"SELECT {fn}(u, x, y, a) AS p FROM (VALUES {values}) t(u, x, y, a)"
    before = ledger_hash(session.path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gp.GpframeWarning)  # an answer, not an error
            out = con.sql(q).fetchall()
    except duckdb.Error as exc:
        msg = str(exc)
        if "Python exception occurred" in msg:  # raised by gpframe's UDF: must be a gpframe error
            assert any(f"{n}:" in msg for n in GP_ERROR_NAMES), msg
            param = "eps" if fn == "gp_privatize_gp" else "rho"
            assert any(n in msg for n in (param, "x/y", "coordinate", "user")), msg
        # else: DuckDB refused the SQL itself (a cast), before gpframe ran
        assert ledger_hash(session.path) == before, f"rejected SQL changed the ledger: {msg}"
        return
    for (p,) in out:
        if p is not None:
            assert_finite(f"duckdb.{fn}", [p["x"], p["y"]])


def _tiny_gp(fn, rows):
    """eps below 2**-40 in gp_privatize_gp: test_duckdb_gp_tiny_eps_rejected_without_charge."""
    return fn == "gp_privatize_gp" and any(a is not None and 0 < a < 2**-40 for *_, a in rows)


@pytest.mark.parametrize("fn", ["gp_privatize", "gp_privatize_gp"])
@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_duckdb_udf_bad_rows(session, con, fn, data):
    rows = data.draw(sql_rows().filter(lambda r: not _tiny_gp(fn, r)), label="rows")
    _udf(session, con, fn, rows)


def test_duckdb_gp_tiny_eps_rejected_without_charge(session, con):
    _udf(session, con, "gp_privatize_gp", [(1, 0.0, 0.0, 5e-324)])


@pytest.mark.slow
@pytest.mark.parametrize("fn", ["gp_privatize", "gp_privatize_gp"])
@settings(max_examples=1500, **SETTINGS)
@given(data=st.data())
def test_duckdb_udf_bad_rows_slow(session, con, fn, data):
    rows = data.draw(sql_rows().filter(lambda r: not _tiny_gp(fn, r)), label="rows")
    _udf(session, con, fn, rows)


@settings(max_examples=30, **SETTINGS)
@given(bad=st.sampled_from([None, "session", 1, object(), gp.GP(eps=1)]))
def test_duckdb_register_bad_session(bad):
    import duckdb

    c = duckdb.connect()
    attempt("duckdb.register", ("session",), gp.duckdb.register, c, bad)
    c.close()


# --------------------------------------------------------------------------------------------
# Session, reserve, set_budget
# --------------------------------------------------------------------------------------------

budgets = st.one_of(
    st.sampled_from(
        [
            None,
            0.1,
            "GP",
            gp.DP(epsilon=1.0),
            gp.zCDP(rho=0.5),
            gp.GP(eps=1.0),
            gp.CGP(rho=1e-4),
            object(),
        ]
    ),
    # ints beyond float range: test_set_budget_huge_int_refused_cleanly
    bad_scalars.filter(lambda v: not (isinstance(v, int) and abs(v) > 1e300)).map(
        lambda v: ("GP", v)
    ),
)


def _make_budget(b):
    if isinstance(b, tuple):
        ok, out = attempt("gp.GP", ("eps",), gp.GP, eps=b[1])
        return out if ok else None
    return b


@settings(max_examples=80, **SETTINGS)
@given(
    budget=budgets,
    central=budgets,
    create=st.sampled_from([True, False, None, "no", 1]),
    # None/NaN/inf timeouts: test_session_bad_timeout_refused
    timeout=st.sampled_from([60.0, 0.1, 5, 0, -1.0, True]),
    path_kind=st.sampled_from(["new", "dir", "garbage", "existing"]),
)
def test_session_constructor(ledger_dir, budget, central, create, timeout, path_kind):
    d = Path(tempfile.mkdtemp(dir=ledger_dir))
    path = {
        "new": d / "l.sqlite",
        "dir": d,
        "garbage": d / "g.sqlite",
        "empty": d / "e.sqlite",
        "existing": d / "x.sqlite",
        "int": 5,
    }[path_kind]
    if path_kind == "garbage":
        path.write_bytes(b"this is not sqlite" * 100)
    elif path_kind == "empty":
        path.write_bytes(b"")
    elif path_kind == "existing":
        gp.Session(str(path), budget=gp.GP(eps=1.0)).close()
    before = ledger_hash(path) if path_kind in ("garbage", "empty", "existing") else None
    names = (
        "budget",
        "central",
        "create",
        "timeout",
        "path",
        "ledger",
        "file",
        str(path),
        "GP",
        "CGP",
    )
    kw = dict(
        budget=_make_budget(budget), central=_make_budget(central), create=create, timeout=timeout
    )
    ok, s = attempt(
        "gp.Session", names, gp.Session, str(path) if path_kind != "int" else path, **kw
    )
    if ok:
        s.close()
    elif before is not None:
        assert ledger_hash(path) == before, "a rejected Session() changed an existing file"
    shutil.rmtree(d, ignore_errors=True)


users_st = st.one_of(
    # a tuple id inside the list is a known bug: test_reserve_tuple_user_id_refused
    st.lists(
        st.one_of(st.integers(-2, 3), st.sampled_from(["a", "a", None, _nan, 1.5, True, b"x", ""])),
        max_size=4,
    ),
    st.sampled_from(
        [
            None,
            "abc",
            5,
            np.array([1, 1]),
            np.array([[1, 2]]),
            np.array([], dtype=object),
            pd.Series([1, 2]),
            {1, 2},
        ]
    ),
)


def _flat(v):
    return not isinstance(v, (list, tuple, np.ndarray, dict))


#: ragged allocations ([nan, [0.1]]) are a known bug: test_reserve_ragged_allocations_refused
alloc_st = st.one_of(
    scalars, st.lists(scalars.filter(_flat), max_size=4), st.sampled_from([np.array([_nan, 0.1])])
)


@settings(max_examples=60, **SETTINGS)
@given(
    users=users_st,
    alloc=alloc_st,
    notion=st.sampled_from(["metric", "metric", "central", "METRIC", "", None, 1]),
    kind=st.sampled_from([None, None, "gp", "cgp", "dp", "zcdp", "xx", 3]),
    query=st.sampled_from(["q", "q", "", None, 5]),
    params=st.sampled_from([None, {}, {"a": 1}, {"a": object()}, {"a": _nan}, "p"]),
    charge_id=st.sampled_from([None, None, "", 5, "cid-fixed"]),
    actual=st.one_of(scalars, st.lists(scalars.filter(_flat), max_size=4)),
)
def test_session_reserve(session, users, alloc, notion, kind, query, params, charge_id, actual):
    names = (
        "users",
        "allocations",
        "notion",
        "kind",
        "query",
        "params",
        "charge_id",
        "budget",
        "filter",
        "user",
    )
    ok, r = attempt(
        "session.reserve",
        names,
        session.reserve,
        users,
        alloc,
        notion=notion,
        kind=kind,
        query=query,
        params=params,
        charge_id=charge_id,
        ledger=session.path,
    )
    if not ok:
        return
    with r:
        ok, _ = attempt(
            "reservation.charge",
            ("actual", "charge", "allocation"),
            r.charge,
            actual,
            ledger=session.path,
        )
        if not ok:
            r.cancel()
    assert session.ledger.verify()


@settings(max_examples=40, **SETTINGS)
@given(users=users_st, budget=budgets)
def test_session_set_budget(session, users, budget):
    attempt(
        "session.set_budget",
        ("users", "budget", "user"),
        session.set_budget,
        users,
        _make_budget(budget),
        ledger=session.path,
    )


def test_reserve_ragged_allocations_refused(session):
    attempt(
        "session.reserve",
        ("allocations",),
        session.reserve,
        [1, 2],
        [_nan, [0.1]],
        ledger=session.path,
    )


def test_reserve_tuple_user_id_refused(session):
    attempt("session.reserve", ("users",), session.reserve, [0, (1,)], 0.1, ledger=session.path)


def test_session_on_empty_file_does_not_write(ledger_dir):
    p = Path(tempfile.mkdtemp(dir=ledger_dir)) / "empty.sqlite"
    p.write_bytes(b"")
    attempt(
        "gp.Session",
        ("path", "ledger", "budget", str(p)),
        gp.Session,
        str(p),
        create=False,
        ledger=p,
    )


def test_cli_report_on_empty_file_does_not_write(ledger_dir):
    p = Path(tempfile.mkdtemp(dir=ledger_dir)) / "empty.sqlite"
    p.write_bytes(b"")
    before = ledger_hash(p)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["ledger", "report", str(p)])
    assert ledger_hash(p) == before


@pytest.mark.parametrize("timeout", [None, _nan, _inf])
def test_session_bad_timeout_refused(ledger_dir, timeout):
    p = Path(tempfile.mkdtemp(dir=ledger_dir)) / "l.sqlite"
    attempt("gp.Session", ("timeout",), gp.Session, str(p), budget=gp.GP(eps=1.0), timeout=timeout)


def test_session_non_path_refused():
    attempt("gp.Session", ("path",), gp.Session, 5, budget=gp.GP(eps=1.0))


def test_set_budget_huge_int_refused_cleanly(session):
    attempt(
        "session.set_budget",
        ("budget",),
        session.set_budget,
        [1],
        gp.GP(eps=10**400),
        ledger=session.path,
    )


def test_cli_report_on_truncated_file_does_not_write(session, ledger_dir):
    p = Path(tempfile.mkdtemp(dir=ledger_dir)) / "t.sqlite"
    p.write_bytes(Path(session.path).read_bytes()[:3000])
    before = ledger_hash(p)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli_main(["ledger", "report", str(p)])
        except Exception:
            pass
    assert ledger_hash(p) == before


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

tokens = st.sampled_from(
    [
        "ledger",
        "report",
        "--version",
        "--help",
        "-h",
        "--out",
        "x",
        "",
        "-",
        "--no-progress",
        "ledger",
        "report",
        "\x00",
        "ünï",
        "--bogus",
    ]
)


@settings(max_examples=80, **SETTINGS)
@given(
    argv=st.lists(tokens, max_size=4),
    target=st.sampled_from(["valid", "missing", "dir", "garbage", None]),
)
def test_cli(session, ledger_dir, argv, target):
    if target is not None:
        src = Path(session.path)
        d = Path(tempfile.mkdtemp(dir=ledger_dir))
        p = {
            "valid": src,
            "missing": d / "none.sqlite",
            "dir": d,
            "garbage": d / "g.sqlite",
            "empty": d / "e.sqlite",
            "truncated": d / "t.sqlite",
        }[target]
        if target == "garbage":
            p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
        elif target == "empty":
            p.write_bytes(b"")
        elif target == "truncated":
            p.write_bytes(src.read_bytes()[:3000])
        argv = ["ledger", "report", str(p)]
    COUNTS["cli.main"] += 1
    path = argv[2] if len(argv) == 3 and argv[:2] == ["ledger", "report"] else None
    before = ledger_hash(path) if path and Path(path).is_file() else None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as e:  # argparse: usage errors (2), --help/--version (0)
            code = e.code
        except gp.GpframeError as e:
            pytest.fail(f"cli.main({argv!r}) raised {type(e).__name__} instead of exit 1: {e}")
        except Exception as e:
            pytest.fail(f"cli.main({argv!r}) raised {type(e).__name__}: {e}")
    if "demo" in argv:
        pytest.fail("the token list must never run the demo")
    assert code in (0, 1, 2), code
    if code == 1:
        assert "gpframe:" in err.getvalue()
    if before is not None:
        assert ledger_hash(path) == before, f"`gpframe {' '.join(argv)}` changed the ledger file"
