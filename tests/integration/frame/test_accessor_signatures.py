"""The accessor's methods show their real signatures and stay equal to the implementations.

``df.geopriv(...)`` methods are thin forwarders to the ``gpframe.queries.*_frame`` functions.
A ``**kwargs`` forwarder hides every option from ``help()`` and tab completion, and a spelled-out
forwarder can drift from its implementation (a default changed on one side only, a keyword
added to one side, an argument wired to the wrong keyword). These tests pin all of that.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.frame import grid_stats as grid_stats_frame
from gpframe.frame import kde as kde_frame
from gpframe.frame import knn as knn_frame
from gpframe.frame import range_count as range_count_frame
from gpframe.frame.accessor import GeoPriv

#: method name -> (module, function) of the implementation it forwards to
IMPLEMENTATIONS = {
    "range_count": (range_count_frame, "range_count"),
    "kde": (kde_frame, "kde"),
    "kde_raster": (kde_frame, "kde_raster"),
    "grid_stats": (grid_stats_frame, "grid_stats"),
    "knn": (knn_frame, "knn"),
    "convex_hull": (knn_frame, "convex_hull"),
    "nearest_users": (knn_frame, "nearest_users"),
}
#: public methods implemented in the accessor itself
OWN = {"privatize"}
_VAR = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)


def public_methods() -> list[str]:
    return sorted(n for n, _ in inspect.getmembers(GeoPriv, inspect.isfunction)
                  if not n.startswith("_"))  # fmt: skip


def test_every_public_method_is_listed() -> None:
    # a new method must be added here, so that its signature is checked like the others
    assert set(public_methods()) == set(IMPLEMENTATIONS) | OWN


@pytest.mark.parametrize("name", public_methods())
def test_signature_is_explicit_and_annotated(name: str) -> None:
    sig = inspect.signature(getattr(GeoPriv, name))
    params = list(sig.parameters.values())[1:]  # without self
    assert [p.name for p in params if p.kind in _VAR] == [], f"{name} takes *args / **kwargs"
    assert [p.name for p in params if p.annotation is inspect.Parameter.empty] == []
    assert sig.return_annotation is not inspect.Parameter.empty
    assert sig.return_annotation not in ("Any", Any), f"{name} returns Any: name the result type"
    # the privacy options and tuning knobs are keyword-only; only the query's subject
    # (region, query point(s), k) may be positional
    positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert set(positional) <= {"region", "at", "point", "k"}, positional


@pytest.mark.parametrize("name", public_methods())
def test_docstring_is_numpydoc_with_an_example(name: str) -> None:
    doc = inspect.getdoc(getattr(GeoPriv, name)) or ""
    for section in ("Parameters", "Returns", "Examples"):
        assert re.search(rf"^{section}\n-{{{len(section)}}}$", doc, re.M), (name, section)
    assert ">>> " in doc.split("Examples", 1)[1]
    # every parameter is documented by name in the Parameters section
    params_text = doc.split("Parameters", 1)[1].split("Returns", 1)[0]
    documented = set(re.findall(r"^(\w+)(?: :|$)", params_text, re.M))
    documented |= {n for line in re.findall(r"^(\w+(?:, \w+)+)", params_text, re.M)
                   for n in line.split(", ")}  # fmt: skip
    names = list(inspect.signature(getattr(GeoPriv, name)).parameters)[1:]
    assert [n for n in names if n not in documented] == []


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_signature_equals_the_implementation(name: str) -> None:
    mod, fn = IMPLEMENTATIONS[name]
    impl = inspect.signature(getattr(mod, fn))
    assert [p.name for p in impl.parameters.values() if p.kind in _VAR] == [], (
        f"{mod.__name__}.{fn} takes **kwargs: the accessor cannot spell out its options"
    )
    ours = list(inspect.signature(getattr(GeoPriv, name)).parameters.values())[1:]
    theirs = list(impl.parameters.values())[1:]  # without the bound GeoPriv
    assert [(p.name, p.kind, p.default) for p in ours] == [
        (p.name, p.kind, p.default) for p in theirs
    ]


class _Sentinel:
    """A distinct, recognisable value per parameter."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_forwarder_passes_every_argument_to_its_keyword(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # signature equality cannot see a forwarder that passes beta=rounds or drops an argument
    mod, fn = IMPLEMENTATIONS[name]
    impl = inspect.signature(getattr(mod, fn))
    seen: dict[str, Any] = {}

    def record(bound: Any, *args: Any, **kwargs: Any) -> str:
        seen.update(impl.bind(bound, *args, **kwargs).arguments)
        return "result"

    monkeypatch.setattr(mod, fn, record)
    bound = object.__new__(GeoPriv)
    params = list(inspect.signature(getattr(GeoPriv, name)).parameters.values())[1:]
    values = {p.name: _Sentinel(p.name) for p in params}
    pos = [values[p.name] for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    kw = {p.name: values[p.name] for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert getattr(bound, name)(*pos, **kw) == "result"
    assert seen.pop("bound") is bound
    assert seen == values


def test_first_and_last_are_exported() -> None:
    from gpframe.queries.range_count import First, Last

    assert gp.First is First
    assert gp.Last is Last
    assert {"First", "Last"} <= set(gp.__all__)


def test_help_shows_the_options() -> None:
    import pydoc

    text = pydoc.render_doc(GeoPriv.kde_raster, renderer=pydoc.plaintext)
    assert "bandwidth_m" in text and "cell_m" in text and "**kwargs" not in text


def test_gp_last_selects_each_users_last_fix() -> None:
    # gp.Last works as range_count's component, the way the docstrings show it
    import shapely

    df = pd.DataFrame({
        "u": [1, 1, 2, 2],
        "t": pd.to_datetime(["2024-01-01 08:00", "2024-01-01 09:00"] * 2),
        "x": [500_000.0, 530_000.0, 500_100.0, 500_200.0],
        "y": [4_500_000.0, 4_530_000.0, 4_500_100.0, 4_500_200.0],
    })  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    bound = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618", public=["t"])
    box = shapely.box(490_000, 4_490_000, 510_000, 4_510_000)
    # user 1's last fix is 30 km away, outside; its first fix is inside (noise σ ≈ 70 m)
    counts = {
        rule: bound.range_count(box, rho=1e-4, component=rule, rng=gp.testing.seeded_rng(3)).value
        for rule in (gp.Last("t"), gp.First("t"))
    }
    assert list(counts.values()) == [1, 2]


def test_grid_stats_plan_options_still_reach_clip_user(monkeypatch: pytest.MonkeyPatch) -> None:
    # the former **plan_options are keywords now: values other than the defaults must still
    # reach Clip-User's planner, and an unknown keyword is refused
    from gpframe.queries import grid_stats as gs

    seen: list[dict[str, Any]] = []
    planner = gs.clip_user_plan

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return planner(*args, **kwargs)

    monkeypatch.setattr(gs, "clip_user_plan", spy)
    rs = np.random.default_rng(0)  # test data only
    df = pd.DataFrame({"u": np.repeat(np.arange(30), 4), "x": 500_000.0 + rs.uniform(0, 50, 120),
                       "y": 4_500_000.0 + rs.uniform(0, 50, 120),
                       "v": rs.uniform(0, 10, 120)})  # fmt: skip
    s = gp.Session(central=gp.DP(epsilon=100.0))
    bound = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon=1.0, cells=7,
                              occupancy="public", rng=gp.testing.seeded_rng(1))  # fmt: skip
    out = bound.grid_stats(**kw, error_cap=1e9, kappa=2.0, split=(0.25, 0.75),
                           protect_worst_grid=False, rollback_incomplete_stage=True)  # fmt: skip
    assert len(out) >= 1 and seen
    assert {
        k: seen[0][k]
        for k in ("error_cap", "kappa", "split", "protect_worst_grid", "rollback_incomplete_stage")
    } == {
        "error_cap": 1e9,
        "kappa": 2.0,
        "split": (0.25, 0.75),
        "protect_worst_grid": False,
        "rollback_incomplete_stage": True,
    }
    snap = s.ledger.snapshot()
    with pytest.raises(TypeError):
        bound.grid_stats(**kw, user_order="key")
    assert s.ledger.snapshot() == snap


def test_ambiguous_time_column_error_names_gp_last() -> None:
    # the fix the message suggests must be spelled the way users import it, with the frame's
    # own time columns (not a placeholder the frame does not have)
    import shapely

    t = pd.to_datetime(["2024-01-01 08:00", "2024-01-01 09:00"])
    df = pd.DataFrame({"u": [1, 2], "t1": t, "t2": t, "x": [500_000.0, 500_100.0],
                       "y": [4_500_000.0, 4_500_100.0]})  # fmt: skip
    s = gp.Session(budget=gp.CGP(rho=1e-3))
    bound = df.geopriv(s, user="u", x="x", y="y", crs="EPSG:32618")
    snap = s.ledger.snapshot()
    fix = r"component=gp\.Last\('t1'\) or component=gp\.Last\('t2'\)"
    with pytest.raises(gp.InvalidInputError, match=fix):
        bound.range_count(shapely.box(0, 0, 1, 1), rho=1e-4, component="last")
    assert s.ledger.snapshot() == snap


def test_one_word_for_the_guarantee_kind() -> None:
    # vocabulary: notion= is the budget family ("metric" / "central"), kind= the guarantee
    # ("gp", "cgp", "dp", "zcdp"). mode= meant the kind in privatize only; the one mode= left is
    # the monitor's ledger mode ("R" / "S"), a different thing.
    import importlib
    import pkgutil

    found = []
    for info in pkgutil.walk_packages(gp.__path__, "gpframe."):
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            objs = [(name, obj)]
            if inspect.isclass(obj):
                objs += [(f"{name}.{k}", v) for k, v in vars(obj).items()
                         if inspect.isfunction(v) and not k.startswith("_")]  # fmt: skip
            for label, fn in objs:
                try:
                    params = inspect.signature(fn).parameters
                except (TypeError, ValueError):
                    continue
                if "mode" in params:
                    found.append(f"{info.name}.{label}")
    assert sorted(set(found)) == ["gpframe.queries.monitor.above_threshold"]
