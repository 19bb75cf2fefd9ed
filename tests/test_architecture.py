"""gpframe's import graph: no cycles, every edge points down the layer table, two faces apart.

The graph is read from the source with :mod:`ast`, not by importing: every ``import`` and
``from ... import`` statement anywhere in a module counts, including the lazy ones inside functions
and the annotation-only ones under ``if TYPE_CHECKING:`` (a reader follows them just the same),
and ``importlib.import_module("gpframe....")`` with a literal name. ``from pkg import name`` is an
edge to the submodule ``pkg.name`` when there is one, otherwise to ``pkg`` itself.

Layers (``docs/internals.md``; a module may import its own layer or any layer below it):

  0  gpframe.errors, gpframe._versions
  1  gpframe.mechanisms.*, gpframe.accounting.*
  2  gpframe.ledger.*
  3  gpframe.geo, gpframe.results(.*)
  4  gpframe.queries.*
  5  gpframe.release
  6  gpframe.frame.*, gpframe.duckdb.*, gpframe.dask.*   (the faces: none imports another)
  7  gpframe.cli, gpframe.demo, gpframe.datasets, gpframe.testing(_postgres), gpframe.report_html,
     gpframe (the package
     ``__init__``)

Sideways edges inside a layer are allowed; a cycle anywhere (sideways included) is not. Each
checker is tested first on a small synthetic graph, so a passing check on the real graph means
something.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import gpframe

PACKAGE_DIR = Path(gpframe.__file__).resolve().parent

#: the layer table, bottom up: a module belongs to the layer of its longest matching prefix
LAYERS: tuple[tuple[str, ...], ...] = (
    ("gpframe.errors", "gpframe._versions"),
    ("gpframe.mechanisms", "gpframe.accounting"),
    ("gpframe.ledger",),
    ("gpframe.geo", "gpframe.results"),
    ("gpframe.queries",),
    ("gpframe.release",),
    ("gpframe.frame", "gpframe.duckdb", "gpframe.dask"),
    (
        "gpframe.cli",
        "gpframe.demo",
        "gpframe.datasets",
        "gpframe.testing",
        "gpframe.testing_postgres",
        "gpframe.report_html",
        "gpframe",
    ),
)

#: the faces of layer 6, which must not import each other
FACES = ("gpframe.frame", "gpframe.duckdb", "gpframe.dask")

Graph = dict[str, set[str]]


# --------------------------------------------------------------------------------------------
# building the graph
# --------------------------------------------------------------------------------------------


def module_names(package_dir: Path) -> dict[str, Path]:
    """Map every module of the package in ``package_dir`` to its file (``__init__`` = package)."""
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module ``name`` lives in: itself, or its longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[list[str]]:
    """For each import in ``tree``, the candidate dotted names, most specific first."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield [alias.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from pkg import sub`` imports the submodule pkg.sub if there is one
                yield [f"{source}.{alias.name}", source]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield [node.args[0].value]


def build_graph(package_dir: Path) -> Graph:
    """The import graph of the package in ``package_dir``: module -> modules of it it imports."""
    modules = module_names(package_dir)
    top = package_dir.name
    graph: Graph = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for candidates in _imported_names(tree, name, path.name == "__init__.py"):
            for candidate in candidates:
                target = _resolve(candidate, modules)
                if target is None or not (target == top or target.startswith(top + ".")):
                    continue
                if target != name:
                    graph[name].add(target)
                break
    return graph


# --------------------------------------------------------------------------------------------
# the three checks
# --------------------------------------------------------------------------------------------


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    """The layer of ``module`` (its longest matching prefix in ``layers``), or None.

    A top-level entry (``gpframe``: the package ``__init__``) names only itself; were it a
    prefix, every module would have a layer and a module missing from the table would go unseen.
    """
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for number, prefixes in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or ("." in prefix and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), number)
    return None if best is None else best[1]


def upward_edges(
    graph: Mapping[str, Iterable[str]], layers: tuple[tuple[str, ...], ...] = LAYERS
) -> list[str]:
    """Every edge into a higher layer, as ``"a (layer) -> b (layer)"``."""
    found = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            low, high = layer_of(source, layers), layer_of(target, layers)
            if low is not None and high is not None and high > low:
                found.append(f"{source} ({low}) -> {target} ({high})")
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def cross_face_edges(
    graph: Mapping[str, Iterable[str]], faces: tuple[str, ...] = FACES
) -> list[str]:
    """Every edge from one face to another, as ``"a -> b"``."""
    return [
        f"{source} -> {target}"
        for source in sorted(graph)
        for target in sorted(graph[source])
        for a in faces
        for b in faces
        if a != b and _in(source, a) and _in(target, b)
    ]


# --------------------------------------------------------------------------------------------
# the checkers on synthetic graphs: each finds what it is for and nothing else
# --------------------------------------------------------------------------------------------

SYNTHETIC_LAYERS = (("p.low",), ("p.mid",), ("p.high", "p.other", "p"))


def test_find_cycles_finds_a_cycle_and_only_the_cycle():
    graph = {
        "p.a": {"p.b"},
        "p.b": {"p.c"},
        "p.c": {"p.a", "p.d"},  # a -> b -> c -> a, and a tail to d
        "p.d": {"p.e"},
        "p.e": set(),
        "p.x": {"p.y"},
        "p.y": {"p.x"},  # a second, two-module cycle
    }
    assert find_cycles(graph) == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]
    graph["p.c"].discard("p.a")
    graph["p.y"].discard("p.x")
    assert find_cycles(graph) == []


def test_find_cycles_handles_a_long_chain_without_recursion():
    chain = {f"m{i:05d}": {f"m{i + 1:05d}"} for i in range(5000)}
    chain["m05000"] = set()
    assert find_cycles(chain) == []
    chain["m05000"] = {"m00000"}
    assert [len(c) for c in find_cycles(chain)] == [5001]


def test_layer_of_takes_the_longest_prefix():
    assert layer_of("p.low.x", SYNTHETIC_LAYERS) == 0
    assert layer_of("p.mid", SYNTHETIC_LAYERS) == 1
    assert layer_of("p", SYNTHETIC_LAYERS) == 2
    assert layer_of("q.low", SYNTHETIC_LAYERS) is None
    assert layer_of("p.lowish", SYNTHETIC_LAYERS) is None  # a name prefix is not a package prefix
    assert layer_of("p.new", SYNTHETIC_LAYERS) is None  # the top package names only itself
    assert layer_of("gpframe.duckdb.sql") == 6
    assert layer_of("gpframe") == 7
    assert layer_of("gpframe.queries.clip_user.planner") == 4
    assert layer_of("gpframe.new_module") is None


def test_upward_edges_finds_an_upward_edge_and_allows_down_and_sideways():
    graph = {
        "p.high": {"p.mid.a", "p.low", "p.other"},  # down, down, sideways
        "p.mid.a": {"p.mid.b", "p.low"},  # sideways inside the layer, down
        "p.mid.b": set(),
        "p.low": {"p.mid.b"},  # up: the defect
        "p.other": set(),
    }
    assert upward_edges(graph, SYNTHETIC_LAYERS) == ["p.low (0) -> p.mid.b (1)"]
    graph["p.low"] = set()
    assert upward_edges(graph, SYNTHETIC_LAYERS) == []


def test_cross_face_edges_finds_either_direction():
    graph = {
        "g.frame.kde": {"g.queries.kde", "g.duckdb.udf"},
        "g.duckdb": {"g.frame"},
        "g.duckdb.udf": {"g.queries"},
        "g.framework": {"g.duckdb"},  # not the frame package
    }
    faces = ("g.frame", "g.duckdb")
    assert cross_face_edges(graph, faces) == ["g.duckdb -> g.frame", "g.frame.kde -> g.duckdb.udf"]
    graph["g.frame.kde"] = {"g.queries.kde"}
    graph["g.duckdb"] = set()
    assert cross_face_edges(graph, faces) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_build_graph_reads_every_kind_of_import(tmp_path):
    _write(
        tmp_path,
        {
            "p/__init__.py": "from p.high import run\n",
            "p/low/__init__.py": "from . import core\n",  # relative, package __init__
            "p/low/core.py": """
                import os

                def late():
                    from p.mid import helper  # lazy: counts
                    return helper
            """,
            "p/mid.py": """
                from typing import TYPE_CHECKING
                from .low.core import late  # relative from a module
                if TYPE_CHECKING:
                    from p.high import Thing  # annotation-only: counts
                def helper():
                    import importlib
                    return importlib.import_module("p.other")
            """,
            "p/high.py": "import p.low.core as c\nfrom p import other\nfrom p.low import nope\n",
            "p/other.py": "import numpy\nfrom p import run_alias\n",  # not a module: edge to p
        },
    )
    graph = build_graph(tmp_path / "p")
    assert graph == {
        "p": {"p.high"},
        "p.low": {"p.low.core"},
        "p.low.core": {"p.mid"},
        "p.mid": {"p.low.core", "p.high", "p.other"},
        "p.high": {"p.low.core", "p.other", "p.low"},
        "p.other": {"p"},
    }
    assert find_cycles(graph) == [["p", "p.high", "p.low", "p.low.core", "p.mid", "p.other"]]


# --------------------------------------------------------------------------------------------
# the real graph
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(PACKAGE_DIR)


def test_the_graph_is_the_whole_package(graph):
    # the checks below would pass vacuously on an empty or half-read graph
    files = list(PACKAGE_DIR.rglob("*.py"))
    assert len(graph) == len(files) > 50
    assert any(_in(target, "gpframe.ledger") for target in graph["gpframe.frame.accessor"])
    assert sum(len(targets) for targets in graph.values()) > 100


def test_every_module_is_in_a_layer(graph):
    missing = [module for module in sorted(graph) if layer_of(module) is None]
    assert not missing, f"modules in no layer of LAYERS (add them to the table): {missing}"


def test_every_layer_entry_names_modules(graph):
    # an entry left behind by a rename matches nothing: the table would describe a package that
    # no longer exists, and a new module of that name would be placed without anyone deciding
    stale = [
        prefix
        for layer in LAYERS
        for prefix in layer
        if not any(m == prefix or m.startswith(prefix + ".") for m in graph)
    ]
    assert not stale, f"layer entries that match no module: {stale}"


def test_no_import_cycles(graph):
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_import_points_down(graph):
    edges = upward_edges(graph)
    assert not edges, "imports into a higher layer:\n" + "\n".join(edges)


def test_the_faces_do_not_import_each_other(graph):
    edges = cross_face_edges(graph)
    assert not edges, "imports between the faces:\n" + "\n".join(edges)
