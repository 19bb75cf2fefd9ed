"""Canary inputs and the scanner that looks for them in every serialised output form.

The input carries values that appear nowhere else: true coordinates (projected metres and
lon/lat degrees), location-derived columns (``step_m``, ``speed_mps``), a private value column
(``val``, what grid_stats protects), user ids and per-user point counts. An output form is
walked down to its atoms (numbers, strings, geometry coordinates, WKB, parquet metadata bytes)
and every atom is compared with the canaries:

* numbers at full precision: within ``tol`` of a canary of a float class;
* numbers printed in text (repr, HTML, summaries, messages, JSON): parsed back with the number
  of decimals they were printed with, and compared within half a unit of the last digit; only
  numbers printed finely enough to locate a canary (``text_res``) are compared, so that a noisy
  value rounded to 10 km cannot match a true coordinate by chance;
* user ids: substring search in every string (and in every label);
* per-user counts: integer equality (central forms only: under GP/CGP the number of a user's
  points is public).

The noise of every release in the harness is at least several hundred metres (a privatized
point lands within 1 mm of its true position with probability < 1e-8), so a hit is a leak,
not a coincidence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: canary classes that hold float values (the name is what a failure message shows)
FLOAT_CLASSES = ("coord_m", "coord_deg", "step_m", "speed_mps", "val", "cell")
#: canary classes searched as substrings of every string
TOKEN_CLASSES = ("user_id", "cell")

# full-precision tolerance per class: 0.1 mm for metres, 1e-9 degree (0.1 mm) for lon/lat (a
# leak is exact up to a CRS round trip, ~1e-9 m; released points sit on a 2^-10 m lattice, so
# 1 mm would let one noisy coordinate in ~20 runs match some true one by chance),
# 1e-9 relative for the derived and value columns (they are never noised by any operation)
# (a cell: the H3 index of a true point, a uint64 that float64 keeps to within 128)
_TOL = {"coord_m": 1e-4, "coord_deg": 1e-9, "step_m": 1e-6, "speed_mps": 1e-9, "val": 1e-9,
        "cell": 512.0}  # fmt: skip
# the coarsest printed resolution still compared in text: 1e-4 m (pandas prints 6 decimals;
# WKT's 3 decimals of noisy points would match a true one by chance), 1e-6 degree, ...
_TEXT_RES = {
    "coord_m": 1e-4,
    "coord_deg": 1e-6,
    "step_m": 1e-2,
    "speed_mps": 1e-5,
    "val": 1e-4,
    "cell": 0.0,
}  # fmt: skip (cells in text: as tokens)

_NUM = re.compile(r"(?<![\w.])-?\d+\.(\d+)(?:[eE]([-+]?\d+))?")


@dataclass(frozen=True)
class Canaries:
    """The canary values of one dataset, by class."""

    floats: dict[str, np.ndarray]  # class -> sorted unique values
    tokens: dict[str, tuple[str, ...]]  # class -> strings (user ids; cells in decimal and hex)
    counts: frozenset[int]


@dataclass
class Hit:
    """One canary found in one output form."""

    form: str
    where: str
    cls: str
    found: Any
    canary: Any

    def __str__(self) -> str:
        return f"[{self.form}] {self.cls} canary {self.canary!r} at {self.where}: {self.found!r}"


@dataclass
class Atoms:
    """The numbers (arrays by path) and strings (by path) of one output form."""

    numbers: list[tuple[str, np.ndarray]] = field(default_factory=list)
    strings: list[tuple[str, str]] = field(default_factory=list)


def _short(s: str, i: int, n: int = 60) -> str:
    return s[max(0, i - n) : i + n].replace("\n", "⏎")


_HEX = re.compile(r"[0-9A-Fa-f]+")


def atoms(obj: Any, path: str = "", out: Atoms | None = None, depth: int = 0) -> Atoms:
    """Walk ``obj`` down to numbers and strings; geometry and WKB become coordinates."""
    import shapely

    out = Atoms() if out is None else out
    if depth > 40 or obj is None or isinstance(obj, (bool, np.bool_)):
        return out
    if isinstance(obj, (int, float, np.integer, np.floating)):
        out.numbers.append((path, np.array([float(obj)])))
    elif isinstance(obj, str):
        out.strings.append((path, obj))
        if len(obj) >= 42 and len(obj) % 2 == 0 and _HEX.fullmatch(obj):
            try:  # hex-encoded WKB (the SQL hulls): its coordinates are numbers to check too
                g = shapely.from_wkb(obj)
            except Exception:  # hex that is not WKB: a string only
                pass
            else:
                out.numbers.append((path + ".hexwkb", shapely.get_coordinates(g).ravel()))
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        try:
            g = shapely.from_wkb(b)
        except Exception:  # not WKB: metadata (JSON) or text
            out.strings.append((path, b.decode("utf-8", errors="replace")))
        else:
            out.numbers.append((path + ".wkb", shapely.get_coordinates(g).ravel()))
    elif isinstance(obj, shapely.Geometry):
        out.numbers.append((path + ".coords", shapely.get_coordinates(obj).ravel()))
    elif isinstance(obj, pd.DataFrame):
        atoms(list(map(str, obj.columns)), f"{path}.columns", out, depth + 1)
        atoms(obj.index, f"{path}.index", out, depth + 1)
        for c in obj.columns:
            atoms(obj[c], f"{path}[{c!r}]", out, depth + 1)
    elif isinstance(obj, (pd.Series, pd.Index)):
        if isinstance(obj, pd.Series):
            atoms(obj.name, f"{path}.name", out, depth + 1)
            atoms(obj.index, f"{path}.index", out, depth + 1)
        if isinstance(obj, pd.MultiIndex):
            for i in range(obj.nlevels):
                atoms(obj.get_level_values(i), f"{path}.level{i}", out, depth + 1)
            return out
        atoms(obj.to_numpy(), path, out, depth + 1)
    elif isinstance(obj, np.ndarray):
        if obj.dtype.kind in "iuf":
            out.numbers.append((path, obj.astype(np.float64).ravel()))
        elif obj.dtype.kind == "M":
            return out
        else:
            flat = obj.ravel()
            geoms = [v for v in flat if isinstance(v, shapely.Geometry)]
            if geoms:
                coords = shapely.get_coordinates(np.array(geoms, dtype=object)).ravel()
                out.numbers.append((path + ".coords", coords))
            for i, v in enumerate(flat):
                if not isinstance(v, shapely.Geometry):
                    atoms(v, f"{path}[{i}]", out, depth + 1)
    elif isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            atoms(k, f"{path}.<key {i}>", out, depth + 1)
            atoms(v, f"{path}[{k!r}]", out, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seq = list(obj)
        if seq and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            for v in seq
        ):
            out.numbers.append((path, np.asarray(seq, dtype=np.float64)))
        else:
            for i, v in enumerate(seq):
                atoms(v, f"{path}[{i}]", out, depth + 1)
    elif hasattr(obj, "__geo_interface__") and not isinstance(obj, pd.DataFrame):
        atoms(json.loads(json.dumps(obj.__geo_interface__, default=str)), path, out, depth + 1)
    else:
        # anything else is published through its text
        out.strings.append((path + ".repr", repr(obj)))
    return out


def _near(values: np.ndarray, canary: np.ndarray, tol: np.ndarray | float) -> np.ndarray:
    """Indices of ``values`` within ``tol`` of some canary, and the nearest canary of each."""
    v = values[np.isfinite(values)]
    if not v.size or not canary.size:
        return np.empty(0, int), v, np.empty(0)
    j = np.clip(np.searchsorted(canary, v), 1, canary.size - 1) if canary.size > 1 else None
    if j is None:
        nearest = np.full(v.shape, canary[0])
    else:
        lo, hi = canary[j - 1], canary[j]
        nearest = np.where(np.abs(v - lo) <= np.abs(v - hi), lo, hi)
    hit = np.flatnonzero(np.abs(v - nearest) <= tol)
    return hit, v, nearest


def scan(
    form: str,
    obj: Any,
    can: Canaries,
    *,
    public: frozenset[str],
    check_counts: bool,
    max_hits: int = 5,
) -> list[Hit]:
    """Every canary of a non-public class found in the output form ``obj``.

    ``check_counts``: also look for the per-user counts (exact integers); the caller restricts
    it to forms without noisy released numbers, where a small integer cannot be a coincidence.
    """
    a = atoms(obj, form)
    hits: list[Hit] = []
    for cls in FLOAT_CLASSES:
        if cls in public:
            continue
        c = can.floats[cls]
        for path, arr in a.numbers:
            idx, v, nearest = _near(arr, c, _TOL[cls])
            hits += [Hit(form, path, cls, float(v[i]), float(nearest[i])) for i in idx[:max_hits]]
        for path, s in a.strings:
            for m in _NUM.finditer(s):
                decimals = len(m.group(1)) - int(m.group(2) or 0)
                res = 10.0**-decimals
                if res > _TEXT_RES[cls] or not _TEXT_RES[cls]:
                    continue
                val = float(m.group(0))
                idx, v, nearest = _near(np.array([val]), c, 0.5 * res * (1 + 1e-9) + _TOL[cls])
                if idx.size:
                    hits.append(Hit(form, f"{path}: …{_short(s, m.start())}…", cls, val,
                                    float(nearest[0])))  # fmt: skip
    for cls in TOKEN_CLASSES:
        if cls in public:
            continue
        for path, s in a.strings:
            for u in can.tokens[cls]:
                i = s.find(u)
                if i >= 0:
                    hits.append(Hit(form, f"{path}: …{_short(s, i)}…", cls, u, u))
    if check_counts and "count" not in public:
        wanted = np.array(sorted(can.counts), dtype=np.float64)
        for path, arr in a.numbers:
            if "['value']" in path:  # the released (noisy) value: a count there is noise
                continue
            idx, v, nearest = _near(arr, wanted, 0.0)
            hits += [Hit(form, path, "count", float(v[i]), int(nearest[i])) for i in idx[:max_hits]]
    return hits[: max_hits * 20]
