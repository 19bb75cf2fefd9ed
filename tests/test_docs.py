"""The documentation ships: the site builds warning-free, and what the package cites exists.

(a) ``sphinx-build -W --keep-going -b html docs <tmp>`` succeeds and produces the key pages, with
    the API reference really generated from the docstrings.
(b) User-facing text cites only pages that exist under ``docs/`` (and papers by name): no
    dangling ``docs/<path>.md``, no names of design/spec files that do not ship with the package,
    no issue numbers. "User-facing" is every string literal of ``gpframe/**/*.py`` (docstrings,
    messages), the whole of ``gpframe/duckdb/sql/*.sql`` and ``README.md``; docs citations are
    checked anywhere in those files, comments included.
(c) The Python examples of the operation pages (and of the noise page) run as written.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: pages the build must produce (relative to the HTML output folder)
KEY_PAGES = [
    "index.html",
    "concepts.html",
    "ledger.html",
    "noise.html",
    "sql.html",
    "internals.html",
    "operations/privatize.html",
    "operations/range_count.html",
    "operations/kde.html",
    "operations/nearest_users.html",
    "operations/knn.html",
    "operations/convex_hull.html",
    "operations/grid_stats.html",
    "operations/monitoring.html",
    "api/index.html",
    "api/gpframe.html",
    "api/accessor.html",
    "api/duckdb.html",
    "api/results.html",
    "api/monitor.html",
    "api/mechanisms.html",
]

#: (page, text) pairs that only autodoc can have written: an empty API page fails here
AUTODOC_MARKERS = [
    ("api/accessor.html", "GeoPriv.range_count"),
    ("api/accessor.html", "GeoPriv.privatize"),
    ("api/gpframe.html", "gpframe.Session"),
    ("api/duckdb.html", "gpframe.duckdb.register"),
    ("api/monitor.html", "above_threshold"),
    ("api/mechanisms.html", "gaussian_cgp"),
    ("api/results.html", "PrivatizeResult"),
]


def test_docs_build_warning_free(tmp_path: Path) -> None:
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stderr}\n{proc.stdout}"
    missing = [page for page in KEY_PAGES if not (out / page).is_file()]
    assert not missing, f"pages not built: {missing}"
    for page, marker in AUTODOC_MARKERS:
        assert marker in (out / page).read_text(encoding="utf-8"), f"{marker!r} not in {page}"


# --- (b) citations in user-facing text ---------------------------------------------------------

#: design and spec files that are not part of the package: citing them leaves the reader stranded
SPEC_FILES = (
    "secure-noise.md",
    "adaptive-budgeting.md",
    "concentrated-geo-privacy.md",
    "clip-user.md",
    "selection.md",
    "DESIGN.md",
    "STYLE.md",
)
_SPEC = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, SPEC_FILES)) + r")(?![\w-])")
# "issue 12", "Issue #3", "issues 4", "(#12)"; not "tissue 3" and not a bare "#3" (list markers,
# colours and "# comment" text are no issue numbers)
_ISSUE = re.compile(r"(?i)\bissues?\s+#?\d+|\(#\d+\)")
_DOCS_PAGE = re.compile(r"(?<![\w/.-])docs/[\w./-]*?\.md\b")


def dangling_pages(text: str, root: Path = ROOT) -> list[str]:
    """``docs/<path>.md`` citations in ``text`` with no such file under ``root``."""
    return sorted({m for m in _DOCS_PAGE.findall(text) if not (root / m).is_file()})


def spec_names(text: str) -> list[str]:
    """Names of spec/design files cited in ``text``."""
    return sorted({m.group(1) for m in _SPEC.finditer(text)})


def issue_numbers(text: str) -> list[str]:
    """Issue references (``issue 12``, ``issue #3``, ``(#12)``) in ``text``."""
    return sorted({m.group(0) for m in _ISSUE.finditer(text)})


def python_strings(source: str) -> str:
    """Every string literal of a Python module (docstrings, messages, f-string parts), joined."""
    parts = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    return "\n".join(parts)


def user_facing_files() -> list[Path]:
    files = sorted((ROOT / "gpframe").rglob("*.py"))
    files += sorted((ROOT / "gpframe" / "duckdb" / "sql").glob("*.sql"))
    files.append(ROOT / "README.md")
    return files


def citation_problems(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the citations of one file, one line per problem."""
    text = path.read_text(encoding="utf-8")
    facing = python_strings(text) if path.suffix == ".py" else text
    rel = path.relative_to(root) if path.is_relative_to(root) else path
    problems = [f"{rel}: cites missing page {p}" for p in dangling_pages(text, root)]
    problems += [f"{rel}: cites spec file {s}" for s in spec_names(facing)]
    problems += [f"{rel}: mentions {i!r}" for i in issue_numbers(facing)]
    return problems


def test_user_facing_text_cites_only_shipped_pages() -> None:
    problems = [p for path in user_facing_files() for p in citation_problems(path)]
    assert not problems, f"{len(problems)} citation problems, e.g.:\n" + "\n".join(problems[:40])


def test_user_facing_files_are_found() -> None:
    # the check above must read the package, the SQL files and the README, not an empty list
    files = user_facing_files()
    assert ROOT / "README.md" in files
    assert any(f.suffix == ".sql" for f in files)
    assert ROOT / "gpframe" / "frame" / "accessor.py" in files


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("See ``docs/operations/nowhere.md`` for the method.", "dangling"),
        ("details in docs/nope.md, section 2", "dangling"),
        ("Spec: secure-noise.md §9.3", "secure-noise.md"),
        ("(adaptive-budgeting.md §4.6)", "adaptive-budgeting.md"),
        ("concentrated-geo-privacy.md §7.3", "concentrated-geo-privacy.md"),
        ("clip-user.md §10", "clip-user.md"),
        ("selection.md §2", "selection.md"),
        ("as DESIGN.md §3 says", "DESIGN.md"),
        ("STYLE.md §9", "STYLE.md"),
        ("[aligned with issue 05]", "issue"),
        ("fixed in Issue #3", "issue"),
        ("see issues 12 and 14", "issue"),
        ("the SQL faces (#12)", "issue"),
    ],
)
def test_checker_detects(text: str, kind: str, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    found = {
        "dangling": dangling_pages(text, tmp_path),
        **{name: spec_names(text) for name in SPEC_FILES},
        "issue": issue_numbers(text),
    }[kind]
    assert found, f"{kind} not detected in {text!r}"
    # and a module whose docstring says it is caught by the whole-file check
    mod = tmp_path / "mod.py"
    mod.write_text(f'"""Summary.\n\n{text}\n"""\n', encoding="utf-8")
    assert citation_problems(mod, tmp_path)


@pytest.mark.parametrize(
    "text",
    [
        'See ``docs/operations/range_count.md`` ("Iterative elimination").',
        "Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 5",
        "tissue 3 and reissue 4 are words, #3 is a list marker",
        "a pseudo-selection.md-like name: myselection.md",
    ],
)
def test_checker_accepts(text: str, tmp_path: Path) -> None:
    (tmp_path / "docs" / "operations").mkdir(parents=True)
    (tmp_path / "docs" / "operations" / "range_count.md").write_text("# x\n", encoding="utf-8")
    mod = tmp_path / "mod.py"
    mod.write_text(f'"""Summary.\n\n{text}\n"""\n', encoding="utf-8")
    assert citation_problems(mod, tmp_path) == []


def test_comments_are_not_user_facing_but_their_docs_citations_are_checked(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    mod = tmp_path / "mod.py"
    mod.write_text("# spec: secure-noise.md, issue 3\nX = 1  # docs/gone.md\n", encoding="utf-8")
    assert citation_problems(mod, tmp_path) == ["mod.py: cites missing page docs/gone.md"]


# --- (c) the examples of the operation pages run ----------------------------------------------

_PY_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXAMPLE_PAGES = [*sorted((DOCS / "operations").glob("*.md")), DOCS / "noise.md"]


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: p.stem)
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each page's Python blocks run in order in one namespace, as a reader would paste them; the
    # noise is real (OS randomness), so the examples must work for any draw
    blocks = _PY_BLOCK.findall(page.read_text(encoding="utf-8"))
    assert blocks, f"{page.name} has no Python example"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_example_{page.stem}"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{page.name}[{i}]", "exec"), namespace)
