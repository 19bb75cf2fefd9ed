"""The canary harness: nothing raw leaves any operation, frontend or output form (issue 14).

See README.md in this folder for the table of what is covered and what cannot be reached.
"""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from .canaries import Hit, atoms, scan
from .cases import BUDGETS, CASES, Case, Ctx, make_ctx
from .data import MOVE_M, make_dataset
from .forms import forms

#: the ledger's view: ids, charges, exact counts (and the cells of a declared-public occupancy),
#: never a location or a location-derived value
CURATOR = frozenset({"user_id", "count", "cell"})


@dataclass
class Run:
    """What one case produced: the published forms, the curator's objects, an error."""

    forms: dict[str, Any] = field(default_factory=dict)
    curator: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    #: a refusal wrote to the ledger (its digest changed): refusals charge nothing
    ledger_changed: bool = False


def execute(c: Case, ctx: Ctx, *, plots: bool = True) -> Run:
    """Run ``c`` once; warnings and error messages are output forms too."""
    run = Run()
    before = _ledger_state(ctx.session, c) if c.expect_error else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = c.run(ctx)
        except Exception as exc:  # an error message is published (logs, notebooks)
            run.error = exc
            run.forms["error message"] = f"{type(exc).__name__}: {exc}"
            out = None
        if out is not None:
            if isinstance(out, tuple):
                out, *curator = out
                run.curator = {f"curator object {i}": repr(o) for i, o in enumerate(curator)}
            run.forms.update(forms(out, plots=plots))
    for i, w in enumerate(caught):
        run.forms[f"warning {i} ({w.category.__name__})"] = str(w.message)
    if before is not None:
        run.ledger_changed = _ledger_state(ctx.session, c) != before
    return run


def _ledger_state(session: Any, c: Case) -> Any:
    """What a refusal must leave unchanged: the ledger's digest, or (a refusal that reserved
    and cancelled: its attempt is audited) every user's spent and held amounts."""
    if c.audited_refusal:
        rep = session.report()
        return rep[["user", "notion", "spent", "held"]].to_json()
    return session.ledger.snapshot()


@pytest.fixture(scope="module")
def ctxs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ctx]:
    """One context per kind of metric budget (CGP, pure GP), on the same dataset."""
    # ledger files: the curator's store is scanned too (test_curator_...)
    d, root = make_dataset(), tmp_path_factory.mktemp("canary")
    return {b: make_ctx(d, seed=1, path=root / f"{b}.sqlite", budget=b) for b in BUDGETS}


@pytest.fixture(scope="module")
def ctx(ctxs: dict[str, Ctx]) -> Ctx:
    return ctxs["cgp"]


@pytest.fixture(scope="module")
def runs(ctx: Ctx) -> dict[str, Run]:
    """Each case runs once per module, on first use (one Session, one DuckDB connection)."""
    return {}


def _get(runs: dict[str, Run], ctx: Ctx, c: Case) -> Run:
    if c.name not in runs:
        runs[c.name] = execute(c, ctx)
    return runs[c.name]


def _report(c: Case, hits: list[Hit]) -> str:
    """Which canary classes leak through which forms, then one example of each pair."""
    by: dict[tuple[str, str], list[Hit]] = {}
    for h in hits:
        by.setdefault((h.form, h.cls), []).append(h)
    lines = [f"{c.name} (frontend {c.frontend}): canaries leaked in {len(by)} (form, class) pairs:"]
    lines += [f"  - {form}: {cls} x{len(hs)}, e.g. {hs[0]}" for (form, cls), hs in by.items()]
    return "\n".join(lines)


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.name)
def test_no_canary_in_any_published_form(c: Case, ctxs: dict[str, Ctx], runs: dict[str, Run]
                                         ) -> None:  # fmt: skip
    reason = c.missing()
    if reason:
        pytest.skip(reason)
    ctx = ctxs[c.budget]
    run = _get(runs, ctx, c)
    if run.error is not None and not c.expect_error:
        pytest.fail(
            f"{c.name} (frontend {c.frontend}) raised instead of releasing: "
            f"{type(run.error).__name__}: {run.error}"
        )
    if c.expect_error:
        assert run.error is not None, f"{c.name}: expected a refusal"
        import duckdb

        from gpframe.errors import GpframeError

        # a gpframe refusal (DuckDB wraps the UDF's): a crash or a failed check is not one
        assert isinstance(run.error, (GpframeError, duckdb.Error)), repr(run.error)
        assert not run.ledger_changed, f"{c.name}: the refusal wrote to the ledger"
    hits: list[Hit] = []
    for name, obj in run.forms.items():
        # per-user counts are looked for where no noisy number lives: the Result's view
        counts = c.central and _is_result_form(name)
        hits += scan(name, obj, ctx.data.canaries, public=c.public, check_counts=counts)
    for name, obj in run.curator.items():
        hits += scan(name, obj, ctx.data.canaries, public=CURATOR, check_counts=False)
    assert not hits, _report(c, hits)


@pytest.mark.parametrize("budget", BUDGETS)
def test_curator_report_shows_ids_and_charges_but_no_location(budget: str, ctxs: dict[str, Ctx],
                                                              runs: dict) -> None:  # fmt: skip
    """session.report() and history(): user ids and charges are allowed, locations never."""
    ctx = ctxs[budget]
    for c in CASES:  # the ledger after every operation ran
        if not c.missing() and c.budget == budget:
            _get(runs, ctx, c)
    s = ctx.session
    f = {"session.report()": s.report()}
    with pd.option_context("display.max_columns", None, "display.width", 100_000):
        f["session.report() repr"] = repr(f["session.report()"])
        for u in ctx.data.users:
            h = s.history(u)
            f[f"session.history({u!r})"] = h
            f[f"session.history({u!r}) repr"] = repr(h)
    f.update(_ledger_file(s))
    f["gp.ledger_report_html page"] = _report_page(s)
    hits = [h for n, o in f.items() for h in scan(n, o, ctx.data.canaries, public=CURATOR,
                                                     check_counts=False)]  # fmt: skip
    assert not hits, "\n".join(map(str, hits[:25]))
    assert set(ctx.data.users) <= set(f["session.report()"]["user"]), "every user was charged"


def _report_page(session: Any) -> str:
    """The HTML ledger report's text (a curator view like session.report())."""
    import tempfile

    import gpframe as gp

    with tempfile.TemporaryDirectory() as d:
        return gp.ledger_report_html(session, Path(d) / "r.html", top=50).read_text()


def _ledger_file(session: Any) -> dict[str, Any]:
    """Every row of every table of the ledger file (query params, audit log, meta)."""
    import sqlite3

    path = getattr(session, "path", None)
    assert path, "the canary session has a ledger file"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {}
        for t in tables:
            rows = con.execute(f'SELECT * FROM "{t}"').fetchall()
            # text cells only: the binary state columns are per-user amounts (curator data)
            out[f"ledger file table {t}"] = [[v for v in r if isinstance(v, str)] for r in rows]
        return out
    finally:
        con.close()


# --------------------------------------------------------------------------------------------
# neighbouring datasets, same seed: D vs D + one user (central notions) and D vs D with one
# point moved (GP/CGP). A field is noisy if it differs between two seeds on D; a field that is
# the same for both seeds on D but differs on the neighbour is a deterministic function of what
# the notion protects: a leak (issue 14, leaks 3 and 5).


def _fields(run: Run, which: str, exempt: tuple[str, ...] = ()
            ) -> tuple[dict[str, Any], dict[str, frozenset[str]]]:  # fmt: skip
    nums: dict[str, Any] = {}
    toks: dict[str, frozenset[str]] = {}
    for name, obj in run.forms.items():
        if which == "result" and (not _is_result_form(name) or name.endswith("to_dict() json")):
            continue  # (the JSON twin of to_dict() also holds the value, left out here)
        if "file bytes" in name or name.endswith(("frame.repr", "sql.repr")):
            continue  # binary, or the printed form of a frame whose values are compared as such
        a = atoms(obj, name)
        # in "result" mode the Result's value is the frame itself (rows follow the public
        # occupancy); what is checked is everything else the Result publishes
        drop = (*(f"[{n!r}]" for n in exempt), *(("['value']",) if which == "result" else ()))

        def keep(p: str, drop: tuple[str, ...] = drop) -> bool:
            return not any(d in p for d in drop)

        for path, arr in a.numbers:
            if keep(path):
                nums[path] = np.round(arr, 12)
        for path, s in a.strings:
            if keep(path) and "['ticks']" not in path:  # tick labels follow released values
                toks[path] = frozenset(re.findall(r"[\w.+\-=/%]+", s))
    return nums, toks


def _is_result_form(name: str) -> bool:
    return name.startswith(("attrs", "result", "to_parquet attrs"))


_CENTRAL = [c for c in CASES if c.neighbour]
_LOCAL = [c for c in CASES if not c.central and not c.expect_error]


def _deterministic_changes(c: Case, d: Any, d1: Any, which: str) -> list[str]:
    """Fields of the published forms that are equal on ``d`` for two seeds but differ on ``d1``
    with the first seed: a deterministic function of what distinguishes the datasets."""
    # (without plots: their titles and labels come from the Result's fields compared here, and
    # drawing them is most of the cost; the no-canary test scans their text)
    r_a, r_b, r_n = (execute(c, make_ctx(ds, seed, budget=c.budget), plots=False)
                     for ds, seed in ((d, 7), (d, 8), (d1, 7)))  # fmt: skip
    for r in (r_a, r_b, r_n):
        if r.error is not None:
            pytest.fail(f"{c.name} raised: {type(r.error).__name__}: {r.error}")
    (na, ta), (nb, tb), (nn, tn) = (_fields(r, which, c.exempt) for r in (r_a, r_b, r_n))
    changed = []
    for path, v in na.items():
        stable = path in nb and np.array_equal(v, nb[path])
        if stable and (path not in nn or not np.array_equal(v, nn[path])):
            after = nn.get(path, "<absent>")
            changed.append(f"{path}: {_short(v)} on D, {_short(after)} on the neighbour")
    if set(na) == set(nb):  # a field that only appears on the neighbour
        changed += [f"{p}: new field {_short(nn[p])} on the neighbour" for p in set(nn) - set(na)]
    for path, t in ta.items():
        stable = t & tb.get(path, frozenset())
        gone = stable - tn.get(path, frozenset())
        if gone:
            changed.append(f"{path}: text {sorted(gone)[:6]} on D is different on the neighbour")
    return changed


@pytest.mark.parametrize("c", _CENTRAL, ids=lambda c: c.name)
def test_neighbouring_dataset_changes_nothing_but_noise(c: Case) -> None:
    """Central DP: D vs D + one user (issue 14, leak 3)."""
    reason = c.missing()
    if reason:
        pytest.skip(reason)
    changed = _deterministic_changes(c, make_dataset(), make_dataset(extra_user=True),
                                     c.neighbour or "all")  # fmt: skip
    assert not changed, (
        f"{c.name} (frontend {c.frontend}): published fields that change deterministically when "
        f"one user is added ({len(changed)}):\n  - " + "\n  - ".join(changed[:25])
    )


@pytest.mark.parametrize("c", _LOCAL, ids=lambda c: c.name)
def test_moving_one_point_changes_nothing_but_noise(c: Case) -> None:
    """GP / CGP: D vs D with its westmost point moved a few metres. A published field that
    follows the move for every seed reads the protected coordinate without noise (issue 14,
    leak 5: a projection, extent or bounding box derived from the exact data)."""
    reason = c.missing()
    if reason:
        pytest.skip(reason)
    changed = _deterministic_changes(c, make_dataset(), make_dataset(move_west=True), "all")
    assert not changed, (
        f"{c.name} (frontend {c.frontend}): published fields that change deterministically when "
        f"one point moves {MOVE_M:g} m ({len(changed)}):\n  - " + "\n  - ".join(changed[:25])
    )


def _short(v: Any) -> str:
    s = np.array2string(v, threshold=6) if isinstance(v, np.ndarray) else repr(v)
    return s if len(s) < 120 else s[:117] + "..."


# --------------------------------------------------------------------------------------------
# discovery: every operation of every frontend has a canary case


#: public callables and SQL functions that are not operations (they release nothing)
NOT_OPERATIONS = {
    "duckdb.register": "registers the SQL functions on a connection; releases nothing",
    "monitor.zone_counts": (
        "the exact statistic on the caller's own data (documented as unprotected); it is what "
        "zone_above_threshold releases with noise, and is covered through that case"
    ),
}


def _sql_functions(con: Any) -> set[str]:
    rows = con.sql(
        "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_name LIKE 'gp_%'"
    ).fetchall()
    return {r[0] for r in rows}


def discovered_operations(con: Any) -> set[str]:
    """Every operation a user can call, by frontend, found by introspection."""
    import gpframe as gp
    from gpframe.frame.accessor import GeoPriv

    found = {
        f"accessor.{n}"
        for n, f in inspect.getmembers(GeoPriv, inspect.isfunction)
        if not n.startswith("_")
    }
    try:
        from gpframe.dask import DaskGeoPriv
    except ImportError:  # the dask extra is not installed: no Dask face to discover
        DaskGeoPriv = None
    if DaskGeoPriv is not None:
        found |= {
            f"dask.{n}"
            for n, f in inspect.getmembers(DaskGeoPriv, inspect.isfunction)
            if not n.startswith("_")
        }
    for prefix, mod in (("monitor", gp.monitor), ("duckdb", gp.duckdb)):
        # the public names: __all__, and any public function of the module (or of its
        # gpframe.duckdb_* siblings) it exposes without listing it; re-exported mechanisms
        # (gpframe.queries.monitor imports gpframe.mechanisms.selection) are not the frontend's own
        names = set(getattr(mod, "__all__", ())) | {n for n in dir(mod) if not n.startswith("_")}
        for n in names:
            obj = getattr(mod, n, None)
            home = getattr(obj, "__module__", "") or ""
            own = n in getattr(mod, "__all__", ()) or home.startswith(mod.__name__)
            if callable(obj) and not inspect.isclass(obj) and own:
                found.add(f"{prefix}.{n}")
    for fn in _sql_functions(con):
        # the Arrow UDFs behind a macro (gp_x_udf_int / _uint / _str) are reached through the macro
        m = re.fullmatch(r"(gp_\w+?)_udf_(int|uint|str)", fn)
        found.add(f"sql.{m.group(1)}" if m else f"sql.{fn}")
    return found


def test_every_operation_has_a_canary_case(ctx: Ctx) -> None:
    found = discovered_operations(ctx.con)
    covered = {n for c in CASES for n in c.covers} | set(NOT_OPERATIONS)
    missing = sorted(found - covered)
    assert not missing, (
        f"operations without a canary case: {missing}. Add a case to tests/canary/cases.py "
        "(operation x frontend, with what is public for it), or, if it releases nothing, list it "
        "in NOT_OPERATIONS with the reason."
    )


def test_discovery_sees_every_frontend(ctx: Ctx) -> None:
    """A discovery that silently found nothing would make the previous test vacuous."""
    found = discovered_operations(ctx.con)
    for name in (
        "accessor.privatize",
        "accessor.grid_stats",
        "dask.privatize",
        "monitor.threshold_query",
        "duckdb.knn",
        "sql.gp_privatize",
        "sql.gp_knn_rows",
        "sql.gp_grid_release",
    ):
        assert name in found, name  # fmt: skip
    assert not any(n.endswith(("_udf_int", "_udf_uint", "_udf_str")) for n in found)


def test_case_names_are_real_operations(ctx: Ctx) -> None:
    """A typo in ``covers`` would leave an operation looking covered (missing helpers aside)."""
    found = discovered_operations(ctx.con) | set(NOT_OPERATIONS)
    stale = sorted(n for c in CASES if not c.missing() for n in c.covers if n not in found)
    assert not stale, stale
    import importlib.util

    unknown = sorted({m for c in CASES for m in c.modules if importlib.util.find_spec(m) is None})
    assert not unknown, f"cases name modules that do not exist: {unknown}"


#: modules of the audit registry (tests/audit/registry.py) without a user-facing output of their
#: own: their outputs reach users only through the frontends canaried above
NO_FRONTEND = {
    "gpframe.mechanisms": (
        "mechanisms return noisy arrays to library code; every frontend that assembles their "
        "output into a frame, Result or SQL row is a case"
    ),
    "gpframe.ledger.session": "the ledger: its output is the curator's view (session.report())",
    "gpframe.ledger.run": (
        "the driver: hands each operation's values back to its frontend (every case runs "
        "through it)"
    ),
    "gpframe.queries.elimination": "rounds of range_count / kde / nearest_users (their cases)",
    "gpframe.queries": "package of the query modules (each listed by its own name)",
}


def _no_frontend(mod: str) -> bool:
    return any(mod == m or mod.startswith(m + ".") for m in NO_FRONTEND)


def test_every_audited_module_with_a_frontend_has_a_canary_case() -> None:
    """The canary table follows the audit registry: a new audited or wrapper module (a new
    operation) fails here until a canary case runs through it or it is declared frontend-free."""
    from tests.audit.registry import AUDITED_MODULES, THIN_WRAPPERS

    in_cases = {m for c in CASES for m in c.modules}
    modules = set(AUDITED_MODULES) | set(THIN_WRAPPERS)
    missing = sorted(m for m in modules if m not in in_cases and not _no_frontend(m))
    assert not missing, (
        f"modules of the audit registry with no canary case: {missing}. Add a case that runs "
        "through them (tests/canary/cases.py, field modules=) or list them in NO_FRONTEND."
    )
    assert all(any(m == a or a.startswith(m + ".") for a in modules) for m in NO_FRONTEND)


# --------------------------------------------------------------------------------------------
# the harness can fail: planted leaks are found in every kind of form


def test_scanner_finds_planted_canaries() -> None:
    import geopandas as gpd

    d = make_dataset()
    can = d.canaries
    f = d.frame.iloc[:3]
    x0, y0 = float(f["x"].iloc[0]), float(f["y"].iloc[0])
    cases = {
        "number": (x0 + 4e-5, "coord_m"),
        "text": (f"error near ({x0:.4f}, {y0:.5f})", "coord_m"),
        "pandas repr": (repr(pd.DataFrame(f[["x"]])), "coord_m"),
        "geometry": (gpd.GeoSeries(f.geometry).to_numpy(), "coord_m"),
        "wkb": (f.geometry.iloc[0].wkb, "coord_m"),
        "degrees": (float(d.lonlat["lon"].iloc[5]) - 5e-10, "coord_deg"),
        "cell": (f"cell {int(f['cell'].iloc[0]):x} is hot", "cell"),
        "derived": ({"v": [float(f["step_m"].iloc[1])]}, "step_m"),
        "derived text": (f"{float(f['speed_mps'].iloc[2]):.6f}", "speed_mps"),
        "user": (f"charges {{'{d.users[2]}': 1e-4}}", "user_id"),
        "count": ({"n": sorted(can.counts)[1]}, "count"),
    }
    for what, (obj, cls) in cases.items():
        hits = scan(what, obj, can, public=frozenset(), check_counts=True)
        assert any(h.cls == cls for h in hits), (what, hits)
        assert not scan(what, obj, can, public=frozenset({cls}), check_counts=cls != "count")
    # values far from every canary (rounded to 10 m, 1e-3 degree) are not hits
    clean = [round(x0, -1) + 10, f"{x0:.0f}", round(float(d.lonlat["lon"].iloc[0]), 3)]
    assert not scan("clean", clean, can, public=frozenset(), check_counts=True)


def test_raster_files_and_plot_text_are_scanned() -> None:
    """The Raster file forms (GeoTIFF pixels, tags and georeferencing; the xarray DataArray and
    its netCDF file) and a plot's text reach the scanner: planted canaries are found there."""
    import pyproj

    from gpframe.results import Raster

    from .data import CRS_M
    from .forms import plot_text

    d = make_dataset()
    x0, y0 = float(d.frame["x"].iloc[0]), float(d.frame["y"].iloc[0])
    step = float(d.frame["step_m"].iloc[3])
    r = Raster(value=np.full((2, 3), step), transform=(100.0, 0.0, x0, 0.0, -100.0, y0),
               crs=pyproj.CRS(CRS_M).to_wkt(), kind="cgp", charges=pd.Series([1e-4]),
               query_id="q-1", units=f"per m² ({d.users[1]})")  # fmt: skip
    found = {(h.form, h.cls) for n, o in forms(r).items()
             for h in scan(n, o, d.canaries, public=frozenset(), check_counts=False)}  # fmt: skip
    for form, cls in [
        ("result.to_geotiff() pixels", "step_m"),
        ("result.to_geotiff() georeferencing", "coord_m"),
        ("result.to_geotiff() tags", "user_id"),
        ("result.to_xarray() values", "step_m"),
        ("result.to_xarray() attrs", "coord_m"),
        ("result.to_xarray() attrs", "user_id"),
        ("result.to_netcdf() read back", "step_m"),
        ("result.to_netcdf() read back", "coord_m"),
        ("result.to_netcdf() file bytes", "user_id"),
    ]:
        assert (form, cls) in found, (form, cls, sorted(found))

    class Plotted:  # a plot whose title quotes a true coordinate
        def plot(self) -> Any:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            _, ax = plt.subplots()
            ax.set_title(f"centre ({x0:.6f}, {y0:.6f})")
            return ax

    hits = scan("plot", plot_text(Plotted()), d.canaries, public=frozenset(), check_counts=False)
    assert {h.cls for h in hits} == {"coord_m"}, hits
