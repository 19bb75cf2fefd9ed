"""``gp.show_versions()``: the versions people ask for in a bug report."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

_PACKAGES = (
    "gpframe",
    "numpy",
    "scipy",
    "pandas",
    "geopandas",
    "shapely",
    "pyproj",
    "h3",
    "duckdb",
    "pyarrow",
    "matplotlib",
    "tqdm",
    "cryptography",
    "opendp",
)


def versions() -> dict[str, str]:
    """Installed versions of gpframe and its dependencies (``"not installed"`` if absent)."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def show_versions() -> None:
    """Print the versions of gpframe, Python and the dependencies, one per line."""
    for name, version in versions().items():
        print(f"{name:>12}: {version}")
