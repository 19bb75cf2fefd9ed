"""Every ``pip install 'gpframe[...]'`` hint in the package names an extra that pyproject declares.

An error message that tells a user to install an extra that does not exist sends them to a pip
warning ("gpframe 0.1.0 does not provide the extra ...") and leaves the dependency missing.
"""

import re
from pathlib import Path

import pytest

import gpframe

ROOT = Path(gpframe.__file__).resolve().parents[1]
HINT = re.compile(r"gpframe\[([A-Za-z0-9_,\- ]+)\]")


def _extras() -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(data["project"]["optional-dependencies"])


def _hints() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    files = [*sorted((ROOT / "gpframe").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")),
             ROOT / "README.md"]  # fmt: skip
    for path in files:
        for m in HINT.finditer(path.read_text(encoding="utf-8")):
            for name in m.group(1).split(","):
                found.setdefault(name.strip(), []).append(str(path.relative_to(ROOT)))
    return found


def test_the_scanner_finds_the_hints():
    hints = _hints()
    assert {"fast", "plot", "raster"} <= set(hints), hints


def test_every_hinted_extra_exists_in_pyproject():
    extras = _extras()
    missing = {name: where for name, where in _hints().items() if name not in extras}
    assert not missing, f"hints name extras that pyproject does not declare: {missing}"


def test_the_raster_extra_brings_what_raster_exports_import():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    raster = " ".join(deps["optional-dependencies"]["raster"])
    assert "xarray" in raster and "rasterio" in raster
