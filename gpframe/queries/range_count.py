"""Private range counting over polygons: ``pt``, ``dist``, ``pt-elim``, ``dist-elim``.

See ``docs/operations/range_count.md`` (signed distance (11), Lemma 6.3, the baselines, the
threshold shift of Appendix B, Algorithm 6, the error bound, elimination, charges, pitfalls);
Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 6. Each user contributes one point (one
component, ``docs/ledger.md``); the caller picks it.

This module is the pure algorithm over projected arrays (:func:`range_count_arrays`) plus a thin
ledger driver (:func:`run_range_count`) that reserves, runs, charges and builds the
:class:`~gpframe.results.Result`. Points and regions are in the same projected metre CRS.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pandas as pd
import shapely
from numpy.typing import NDArray
from scipy.optimize import brentq

from gpframe.accounting.amounts import probability
from gpframe.errors import InvalidInputError
from gpframe.ledger.run import Charge, run
from gpframe.queries.elimination import Elimination, GroupedAmounts, eliminate_noninteractive

__all__ = [
    "METHODS",
    "REDUCTIONS",
    "First",
    "Last",
    "RangeCountArrays",
    "check_options",
    "correctness_radius",
    "one_point_hint",
    "range_count_arrays",
    "rectangle_sides",
    "region_result",
    "run_range_count",
    "select_component",
    "shift_for_region",
    "signed_distance",
    "threshold_shift_polygon",
    "threshold_shift_rectangle",
]

#: the four methods of docs/operations/range_count.md
METHODS = ("pt", "dist", "pt-elim", "dist-elim")
#: reductions of several rows of one user in the selected component; both keep one of the
#: user's own points, chosen by row order (public), so the charge stays one point's
REDUCTIONS = ("first", "last")
_NOTHING = "Nothing was charged."


# ---------------------------------------------------------------------------------------------
# geometry


def _check_region(region: Any, name: str = "region") -> Any:
    from gpframe.geo import validate_polygons

    if not isinstance(region, (shapely.Polygon, shapely.MultiPolygon)):
        raise InvalidInputError(
            f"{name} must be a shapely Polygon or MultiPolygon in projected metres, got "
            f"{type(region).__name__}. {_NOTHING}"
        )
    validate_polygons(region, name=name)
    if not region.area > 0:
        raise InvalidInputError(
            f"{name} has zero area; pass a polygon with an interior. {_NOTHING}"
        )
    return region


#: above both (points, boundary segments), a segment tree beats one linear scan of the boundary
#: per point: 20 000 points to a 29 000-segment coastline, 0.4 s instead of 3 s
_TREE_MIN_POINTS = 1000
_TREE_MIN_SEGMENTS = 1000


def _boundary_distance(bnd: Any, p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Distance from each point to the (multi)line ``bnd``, exactly as ``shapely.distance``.

    GEOS measures a point-to-line distance as the minimum of its point-to-segment distances, so the
    nearest segment of an STRtree of the segments gives the same float, bit for bit, without
    scanning every segment for every point.
    """
    pts = shapely.points(p[:, 0], p[:, 1])
    if p.shape[0] < _TREE_MIN_POINTS or shapely.get_num_coordinates(bnd) < _TREE_MIN_SEGMENTS:
        return np.asarray(shapely.distance(bnd, pts), dtype=np.float64)
    segs = []
    for ring in shapely.get_parts(bnd):
        c = shapely.get_coordinates(ring)
        segs.append(np.stack([c[:-1], c[1:]], axis=1))
    tree = shapely.STRtree(shapely.linestrings(np.concatenate(segs)))
    (i_pt, _), dist = tree.query_nearest(pts, return_distance=True, all_matches=False)
    d = np.full(p.shape[0], np.nan)  # what shapely.distance gives a point the tree skips
    d[i_pt] = dist
    return d


def signed_distance(xy: Any, region: Any) -> NDArray[np.float64]:
    """Signed distance f(x) to the boundary of ``region``: −dist inside (closed), +dist outside.

    See ``docs/operations/range_count.md``; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 6,
    eq. (11). The boundary includes every ring (holes, all parts of a MultiPolygon), so f is
    1-Lipschitz (Lemma 6.3). Vectorised with shapely 2, in projected metres; a point on the boundary
    has f = 0 and counts as inside.

    Parameters
    ----------
    xy : array_like, shape (n, 2)
        Points in the region's projected metres.
    region : shapely Polygon or MultiPolygon

    Examples
    --------
    >>> box = shapely.box(0, 0, 100, 50)
    >>> signed_distance([[10, 10], [110, 60], [50, 25], [-3, 20], [100, 25]], box).round(8).tolist()
    [-10.0, 14.14213562, -25.0, 3.0, 0.0]
    """
    region = _check_region(region)
    p = np.asarray(xy, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2:
        raise InvalidInputError(f"xy must have shape (n, 2), got {p.shape}. {_NOTHING}")
    return _signed_distance(p, region)


def _signed_distance(p: NDArray[np.float64], region: Any) -> NDArray[np.float64]:
    """:func:`signed_distance` of an (n, 2) float array to a region already validated."""
    if p.shape[0] == 0:
        return np.zeros(0)
    d = _boundary_distance(region.boundary, p)
    inside = shapely.contains_xy(region, p[:, 0], p[:, 1])
    # contains_xy is the open interior: boundary points have d = 0, so their sign does not matter
    return np.where(inside, -d, d)


def rectangle_sides(region: Any) -> tuple[float, float] | None:
    """Side lengths (a, b) if ``region`` is a (possibly rotated) rectangle, else None.

    >>> rectangle_sides(shapely.box(0, 0, 100, 50))
    (100.0, 50.0)
    >>> rectangle_sides(shapely.Point(0, 0).buffer(10)) is None
    True
    """
    if not isinstance(region, shapely.Polygon) or len(region.interiors):
        return None
    env = shapely.oriented_envelope(region)
    if not isinstance(env, shapely.Polygon) or abs(env.area - region.area) > 1e-9 * env.area:
        return None
    c = np.asarray(env.exterior.coords)
    a = float(np.hypot(*(c[1] - c[0])))
    b = float(np.hypot(*(c[2] - c[1])))
    return (round(max(a, b), 9), round(min(a, b), 9))


def threshold_shift_rectangle(w: Any, a: float, b: float) -> Any:
    """Appendix B threshold shift s(w; a, b) for a rectangle with sides a, b (θ = −s).

    See ``docs/operations/range_count.md``.

    Case 1 (inner rectangle non-empty): s₁ = ((a+b) − √((a+b)² − 16w²))/4; case 2:
    s₂ = w − (√((a+b)² + 4ab) − (a+b))/4; clipped to [0, w]. Vectorised over ``w``.

    >>> round(float(threshold_shift_rectangle(100, 1000, 1000)), 8)
    10.10205144
    >>> round(float(threshold_shift_rectangle(500, 1000, 1000)), 7)
    292.8932188
    """
    w = np.asarray(w, dtype=np.float64)
    ab = a + b
    disc = ab * ab - 16.0 * w * w
    s1 = (ab - np.sqrt(np.maximum(disc, 0.0))) / 4.0
    case1 = (disc >= 0) & (a - 2 * w - 2 * s1 >= 0) & (b - 2 * w - 2 * s1 >= 0)
    s2 = w - (math.sqrt(ab * ab + 4.0 * a * b) - ab) / 4.0
    s = np.where(case1, s1, s2)
    return np.clip(s, 0.0, w)


def _bands(region: Any, w: float, s: float) -> tuple[float, float]:
    area = region.area
    out = (region.buffer(w - s, quad_segs=16).area - area) if w - s > 0 else 0.0
    inner = region.buffer(-(w + s), quad_segs=16)
    return out, area - inner.area


def threshold_shift_polygon(w: float, region: Any, *, xtol: float = 1e-9) -> float:
    r"""Appendix B shift for any polygon: the root of the buffered-band balance.

    See ``docs/operations/range_count.md``.

    Finds s ∈ [0, w] with area(buffer(R, w−s) \\ R) = area(R \\ buffer(R, −(w+s))). With no sign
    change: s = 0 when the outer band is already the smaller, else s = w. The gap between the two
    bands is smooth and decreasing in s, so Brent's method (bracketed, to ``xtol`` × w) needs
    about ten pairs of buffers of the full region where plain bisection needed fifty. This is the
    exact reference; queries use :func:`shift_for_region`, which solves the same balance on a
    simplified region in a few buffers (each buffer of a coastline with tens of thousands of
    vertices costs a tenth of a second or more).

    >>> sq = shapely.box(0, 0, 1000, 1000)
    >>> 9.0 < threshold_shift_polygon(100.0, sq) < 10.2   # round corners: a bit below 10.10
    True
    """
    w = float(w)
    if not w > 0:
        return 0.0

    seen: dict[float, float] = {}

    def gap(s: float) -> float:
        if s not in seen:  # brentq evaluates the ends again: keep their buffers
            o, i = _bands(region, w, s)
            seen[s] = o - i  # decreasing in s
        return seen[s]

    if gap(0.0) <= 0:
        return 0.0
    if gap(w) >= 0:
        return w
    return float(brentq(gap, 0.0, w, xtol=xtol * w, rtol=4 * np.finfo(float).eps))


def shift_for_region(w: Any, region: Any) -> NDArray[np.float64]:
    """Return the shift s per user (θ_i = −s_i) for noise standard deviations ``w``.

    Closed form for rectangles. Any other polygon: the band balance of
    :func:`threshold_shift_polygon`, solved by Newton's method on the region simplified to
    δ ∈ (w/10, w/5] (``docs/operations/range_count.md``: within about 2δ of the exact root to
    first order; within 1 % of w on the NYC boroughs and in the tests), once per distinct w and
    remembered per (region, w) for later queries. Public inputs only (the range and the noise
    scales): the shift moves the count's bias, never its privacy.

    >>> sq = shapely.box(0, 0, 1000, 1000).buffer(50)   # a rounded square: not a rectangle
    >>> s_fast = float(shift_for_region([100.0], sq)[0])
    >>> abs(s_fast - threshold_shift_polygon(100.0, sq)) < 1.0
    True
    """
    w = np.asarray(w, dtype=np.float64)
    sides = rectangle_sides(region)
    if sides is not None:
        return np.asarray(threshold_shift_rectangle(w, *sides), dtype=np.float64)
    uniq, inv = np.unique(w, return_inverse=True)
    key = hashlib.blake2b(shapely.to_wkb(region), digest_size=16).digest()
    vals = np.array([_cached_shift(key, float(v), region) for v in uniq])
    return vals[inv]


#: (region's WKB digest, w) -> shift; monitors and plans query the same zones at the same noise
#: scales again and again
_SHIFTS: dict[tuple[bytes, float], float] = {}
_SHIFTS_MAX = 1024
#: (region's WKB digest, tolerance exponent) -> (simplified region, exact area); a coastline
#: simplification costs tens of milliseconds and serves every w of one power of two
_SIMPLE: dict[tuple[bytes, int], tuple[Any, float, float]] = {}
_SIMPLE_MAX = 32
#: simplification tolerance δ as a fraction of the noise scale (δ ∈ (w/10, w/5]): the root moves
#: by at most about 2δ, by under 1 % of w on the NYC boroughs (docs/operations/range_count.md)
_SIMPLIFY = 0.2
#: regions with fewer vertices are buffered as they are (a circle, a district)
_SIMPLIFY_MIN_VERTICES = 1000
#: Newton stops when its step is below this fraction of w, far below the simplification's error
_NEWTON_TOL = 1e-3
_QUAD_SEGS = 16
#: the outer band's second-order model is used for roots up to this fraction of w
_MODEL_RANGE = 0.25


def _cached_shift(key: bytes, w: float, region: Any) -> float:
    if (key, w) not in _SHIFTS:
        if len(_SHIFTS) >= _SHIFTS_MAX:
            _SHIFTS.pop(next(iter(_SHIFTS)))  # the oldest entry
        _SHIFTS[(key, w)] = _fast_shift(w, *_simplified(key, w, region))
    return _SHIFTS[(key, w)]


def _simplified(key: bytes, w: float, region: Any) -> tuple[Any, float, float]:
    """Return (region R' simplified to δ, R's exact area, bias), δ = _SIMPLIFY · 2^⌊log₂ w⌋.

    bias = (area(R) − area(R')) / perimeter(R'): how far R' lies inside R on average (a
    simplified arc is a polygon of chords, inside a convex curve).

    δ depends on w alone (through its power of two), never on the other scales of a call: the
    shift of a (region, w) is the same whatever else is asked with it.
    """
    e = math.floor(math.log2(w)) if w > 0 else 0
    if (key, e) not in _SIMPLE:
        if len(_SIMPLE) >= _SIMPLE_MAX:
            _SIMPLE.pop(next(iter(_SIMPLE)))
        # a region of few vertices buffers fast as it is
        simple = region
        if shapely.get_num_coordinates(region) >= _SIMPLIFY_MIN_VERTICES:
            simple = _simplify_rings(region, _SIMPLIFY * 2.0**e)
        area = float(region.area)
        _SIMPLE[(key, e)] = (simple, area, (area - float(simple.area)) / float(simple.length))
    return _SIMPLE[(key, e)]


def _simplify_rings(region: Any, tol: float) -> Any:
    """Douglas–Peucker on each ring of ``region`` to ``tol``; every ring (island, hole) kept.

    Each simplified ring stays within ``tol`` of its original (the Douglas–Peucker bound), so a
    point farther than ``tol`` from the boundary keeps its winding number: the simplified region
    differs from the region only within ``tol`` of its boundary, as with a topology-preserving
    simplification, at a tenth of its cost (it checks every new chord against every ring). A
    ring that collapses (a small island, thinner than ``tol``) is kept whole: it has few
    vertices, and dropping it would drop its dilation. A part whose simplified rings cross is
    repaired by GEOS's ``make_valid`` (method "structure") on that part alone; a repaired part
    whose area moved by more than ``tol`` per metre of its boundary (more than the band within
    ``tol`` of it holds) is simplified topology-preserving instead. Parts that now overlap
    (islands closer than ``tol``) are merged.
    """
    parts = shapely.get_parts(region)
    rings, of = shapely.get_rings(parts, return_index=True)
    simple = shapely.simplify(rings, tol, preserve_topology=False)
    collapsed = shapely.get_type_id(simple) != shapely.GeometryType.LINEARRING
    collapsed |= shapely.get_num_coordinates(simple) < 4
    simple[collapsed] = rings[collapsed]
    polys = shapely.polygons(simple, indices=of)
    bad = np.flatnonzero(~shapely.is_valid(polys))
    if bad.size:
        fixed = shapely.make_valid(polys[bad], method="structure", keep_collapsed=False)
        moved = np.abs(shapely.area(fixed) - shapely.area(parts[bad]))
        far = moved > tol * shapely.length(parts[bad])
        if far.any():
            fixed[far] = shapely.simplify(parts[bad][far], tol, preserve_topology=True)
        polys[bad] = fixed
    out = shapely.multipolygons(shapely.get_parts(polys))
    if not shapely.is_valid(out):
        out = shapely.make_valid(out, method="structure", keep_collapsed=False)
    return out


def _band_gap(w: float, simple: Any, area: float, bias: float, inner_w: Any) -> Any:
    """gap(s) = area(buffer(R', w−s)) + area(buffer(R', −(w+s))) − 2·area(R), and its slope.

    R' is the simplified region moved out by ``bias`` (see :func:`_fast_shift`), area(R) the
    exact one and ``inner_w`` = buffer(R', −(w − bias)), so gap = outer band − inner band. The
    slope is −(perimeter of the outer buffer + perimeter of the inner one): the rate at which a
    buffer's area grows with its distance. Erosions by discs compose, so the inner buffer at
    w + s is ``inner_w`` eroded again by s: a short buffer of an already smooth shape.
    """

    def gap(s: float) -> tuple[float, float]:
        if w + bias - s > 0:
            outer = shapely.buffer(simple, w + bias - s, quad_segs=_QUAD_SEGS)
            a_out, l_out = float(outer.area), float(outer.length)
        else:
            a_out, l_out = area, float(simple.length)
        inner = _eroded(inner_w, s)
        return a_out + float(inner.area) - 2.0 * area, l_out + float(inner.length)

    return gap


def _eroded(inner_w: Any, s: float) -> Any:
    return shapely.buffer(inner_w, -s, quad_segs=_QUAD_SEGS) if s > 0 else inner_w


def _perimeter_rate(poly: Any) -> float:
    """d(perimeter)/dt of ``poly`` buffered by t, at t = 0: Σ θ (convex) + Σ 2·tan(θ/2) (concave).

    θ is each vertex's turning angle, positive where the boundary turns around the interior. A
    convex vertex grows a circular arc (its length θ·t), a concave one shortens its two edges by
    tan(|θ|/2)·t each. Summed over every ring (holes turn the other way).
    """
    rings, part = shapely.get_rings(shapely.get_parts(poly), return_index=True)
    shell = np.r_[True, part[1:] != part[:-1]]  # each part's first ring is its shell
    xy, ring = shapely.get_coordinates(rings, return_index=True)
    keep = np.r_[ring[1:] == ring[:-1], False]  # drop each ring's closing repeat
    c, ring = xy[keep], ring[keep]
    start = np.searchsorted(ring, ring, side="left")
    end = np.searchsorted(ring, ring, side="right")  # one past each ring's last vertex
    i = np.arange(ring.size)
    nxt = np.where(i + 1 < end, i + 1, start)  # vertex i + 1 of the same ring, cyclically
    prv = np.where(i > start, i - 1, end - 1)
    d = c[nxt] - c  # edge i runs from vertex i to i + 1
    twice_area = np.bincount(ring, c[:, 0] * c[nxt, 1] - c[nxt, 0] * c[:, 1], rings.size)
    # the interior is on the left of a counter-clockwise shell and of a clockwise hole
    sign = np.where((twice_area > 0) == shell, 1.0, -1.0)
    a = np.arctan2(d[:, 1], d[:, 0])
    th = sign[ring] * np.angle(np.exp(1j * (a - a[prv])))
    th = th[(end - start) >= 3]  # a ring of fewer than three vertices turns nowhere
    return float(th[th > 0].sum() + (2.0 * np.tan(th[th < 0] / 2.0)).sum())


def _model_gap(w: float, area: float, outer_w: Any, inner_w: Any) -> Any:
    """gap(s) with the outer band to second order around w, the inner band exact.

    area(buffer(R', w−s)) ≈ A − L·s + ½·L′·s², with A, L the area and perimeter of ``outer_w``
    = buffer(R', w) and L′ its perimeter rate (:func:`_perimeter_rate`): exact for a convex
    region (L′ = 2π), within 0.02 % of w on the NYC boroughs for s ≤ w/4. One dilation for all s.
    """
    a0, l0 = float(outer_w.area), float(outer_w.length)
    lp = _perimeter_rate(outer_w)

    def gap(s: float) -> tuple[float, float]:
        inner = _eroded(inner_w, s)
        a_out = a0 - l0 * s + 0.5 * lp * s * s
        return a_out + float(inner.area) - 2.0 * area, (l0 - lp * s) + float(inner.length)

    return gap


def _newton(gap: Any, w: float, s: float) -> float:
    """Safeguarded Newton for the root of the decreasing ``gap`` on [0, w], from ``s``.

    As :func:`threshold_shift_polygon`: 0 when gap(0) ≤ 0, w when gap(w) ≥ 0. The ends are
    evaluated only when a step would leave the bracket; a step that does is replaced by
    bisection.
    """
    lo, hi = 0.0, w
    lo_known = hi_known = False  # gap(lo) > 0, gap(hi) < 0 checked
    for _ in range(60):
        g, d = gap(s)
        if s == 0.0 and g <= 0:
            return 0.0  # the outer band is already the smaller: no shift
        if s == w and g >= 0:
            return w  # even the full shift leaves the outer band the larger
        if g == 0:
            return s
        if g > 0:
            lo, lo_known = s, True
        else:
            hi, hi_known = s, True
        nxt = s + g / d if d > 0 else (hi if g > 0 else lo)
        if nxt <= lo and not lo_known:
            nxt = lo  # look at the end before trusting a step past it
        elif nxt >= hi and not hi_known:
            nxt = hi
        elif not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)  # Newton left the bracket: bisect
        if abs(nxt - s) <= _NEWTON_TOL * w and ((lo_known and hi_known) or lo < nxt < hi):
            return float(nxt)
        s = nxt
    return s


def _fast_shift(w: float, simple: Any, area: float, bias: float = 0.0) -> float:
    """Return the band-balance root on the simplified region (docs/operations/range_count.md).

    Every buffer distance is moved by ``bias`` (dilations at w + bias − s, erosions at
    w − bias + s): buffering R' by bias first would put its boundary back at R's on average, and
    buffers by discs compose. Without it a simplified circle's shift is off by about the chords'
    sagitta. One dilation and one erosion of R'; Newton steps on the second-order model of the
    outer band (:func:`_model_gap`), each a short erosion. A root beyond w/4, where the model is
    not trusted, is refined by Newton on buffered outer bands (:func:`_band_gap`).
    """
    if not w > 0:
        return 0.0
    inner_w = shapely.buffer(simple, -(w - bias), quad_segs=_QUAD_SEGS)
    outer_w = shapely.buffer(simple, w + bias, quad_segs=_QUAD_SEGS)
    s = _newton(_model_gap(w, area, outer_w, inner_w), w, 0.0)
    if s <= _MODEL_RANGE * w:
        return s
    return _newton(_band_gap(w, simple, area, bias, inner_w), w, s)


def correctness_radius(n: int, beta: float, a: Any, method: str) -> Any:
    """Baseline correctness radii (continuous): pt √(ln(n/β)/a), dist √(ln(2n/β)/a).

    See ``docs/operations/range_count.md``.

    >>> round(float(correctness_radius(10000, 0.05, 1e-4, "pt")), 7)
    349.3719028
    >>> round(float(correctness_radius(10000, 0.05, 1e-4, "dist")), 7)
    359.1548388
    """
    m = 2 if method.startswith("dist") else 1
    return np.sqrt(math.log(m * n / beta) / np.asarray(a, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# the pure algorithm


@dataclass
class RangeCountArrays:
    """What :func:`range_count_arrays` returns.

    Attributes
    ----------
    estimate : int
        The private count of queried users inside the region.
    error : int
        U: with probability ≥ 1 − β, |estimate − true count| ≤ U
        (``docs/operations/range_count.md``, released values only).
    confidence : float
        1 − β.
    charges : ndarray of object (Fraction), shape (n,)
        Per-user charge in the filter's ground units (0 for users not queried).
    allocations : ndarray of object (Fraction), shape (n,)
        Per-user allocation actually used as the cap (after any mantissa rounding).
    rounds_run : ndarray of signed int (a small dtype), shape (n,)
    rounds_histogram : ndarray of int64, shape (c + 1,)
        ``[r]`` users stopped after exactly r rounds.
    inside : ndarray of bool, shape (n,)
        Each queried user's privatized in/out outcome (post-processing of released values).
    n_queried, n_excluded : int
    n_low, n_high, n_undecided : int
        Users eliminated as inside, as outside, and still undecided (S) after the last round.
    saving : float
        Σ (allocation − charge).
    n_calls : int
        Release wrapper calls.
    r_min : float
        The largest metric floor of the guarantees (metres).
    """

    estimate: int
    error: int
    confidence: float
    charges: NDArray[Any]
    allocations: NDArray[Any]
    rounds_run: NDArray[np.int64]
    rounds_histogram: NDArray[np.int64]
    inside: NDArray[np.bool_]
    n_queried: int
    n_excluded: int
    n_low: int
    n_high: int
    n_undecided: int
    saving: float
    n_calls: int
    r_min: float
    elimination: Elimination = field(repr=False)


def range_count_arrays(
    xy_m: Any,
    users: Any,
    region_m: Any,
    *,
    kind: Literal["cgp", "gp"],
    amount: Any,
    method: str = "dist-elim",
    rounds: int = 10,
    split: str = "doubling",
    beta: float = 0.05,
    shift: bool | None = None,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    n_union: int | None = None,
    rng: Any = None,
) -> RangeCountArrays:
    """Private count of users inside ``region_m`` (``docs/operations/range_count.md``).

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        One point per user, projected metres.
    users : array_like, shape (n,)
        User ids (only checked for uniqueness: one component per user, ``docs/ledger.md``).
    region_m : shapely Polygon or MultiPolygon
        The range, in the same projected metres (holes and several parts allowed).
    kind : {"cgp", "gp"}
        The filter's notion: Gaussian noise (ρ, m⁻²) or Laplace noise (ε, m⁻¹).
    amount : scalar or array of shape (n,)
        Per-user allocation in ground units; 0: the user is not queried (e.g. refused).
    method : {"pt", "dist", "pt-elim", "dist-elim"}
    rounds, split : int, {"even", "doubling"}
        For the ``*-elim`` methods (``docs/operations/range_count.md``); the baselines use one
        round.
    beta : float
        Failure probability of the error bound; the elimination methods spend β/2 on the
        eliminations and β/2 on the survivors (``docs/operations/range_count.md``).
    shift : bool, optional
        Appendix B threshold shift (default: on for ``dist`` methods, off for ``pt``).
    unit : Fraction, optional
        The ledger unit parts are rounded down to.
    scale_max : float
        Projection scale factor (``docs/noise.md``); noise runs at ρ/k² (ε/k).
    n_union : int, optional
        The n of the union bounds (default: the queried users). A caller that processes users
        in batches (a vectorised SQL UDF) passes the query's total so results do not depend on
        the batching.
    rng : BitSource or None

    Returns
    -------
    RangeCountArrays

    Notes
    -----
    Noise: ``pt`` releases each point once (``gaussian_cgp`` d = 2 or ``planar_laplace``), ``dist``
    the signed distance once (``gaussian_cgp`` d = 1 or ``laplace_gp``), at the allocation; the
    ``*-elim`` methods release round j's part to the still-undecided users (Algorithm 4, h = f,
    ν = 0). Charge: baselines the allocation; ``*-elim`` the parts of the rounds run
    (``docs/operations/range_count.md``). Error: U = #{i ∈ S: |f̂_i| ≤ r_i}, r_i the width of user
    i's final estimate at β_post/n.

    Examples
    --------
    >>> from gpframe.testing import seeded_rng, seeded_enabled
    >>> xy = np.array([[50.0, 50.0], [5000.0, 5000.0], [60.0, 40.0]])
    >>> with seeded_enabled():
    ...     out = range_count_arrays(xy, [1, 2, 3], shapely.box(-2000, -2000, 2000, 2000),
    ...                              kind="cgp", amount=1e-4, method="dist-elim", rounds=4,
    ...                              split="even", rng=seeded_rng(3))
    >>> out.estimate, out.error
    (2, 0)
    """
    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    region = _check_region(region_m)
    xy = np.asarray(xy_m, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise InvalidInputError(f"xy_m must have shape (n, 2), got {xy.shape}. {_NOTHING}")
    uid = np.asarray(users)
    if uid.shape != (xy.shape[0],):
        raise InvalidInputError(
            f"users has shape {uid.shape}; expected ({xy.shape[0]},), one per point. {_NOTHING}"
        )
    if not pd.Index(uid).is_unique:  # a hash table: np.unique would sort or hash slower
        raise InvalidInputError(
            "users has repeated ids: range_count reads one point (component) per user; select it "
            f"with component=... or reduce the rows first (docs/ledger.md). {_NOTHING}"
        )
    b = probability(beta)
    is_dist = method.startswith("dist")
    elim = method.endswith("-elim")
    use_shift = is_dist if shift is None else bool(shift)
    n = xy.shape[0]

    def h(p: np.ndarray) -> np.ndarray:
        # region was validated above: not again for every round's release (GEOS's validity
        # check of a 30 000-vertex coastline costs about as much as the distances)
        return _signed_distance(np.asarray(p, dtype=np.float64), region)

    # n of the union bounds: the users asked, fixed before the query
    common = dict(kind=kind, unit=unit, scale_max=scale_max, rng=rng, n_union=n_union)
    if is_dist:
        data, triple, hh = _signed_distance(xy, region), "dist", None
    else:
        data, triple, hh = xy, "pt", h
    if elim:
        out = eliminate_noninteractive(
            data, amount, triple=triple, h=hh, nu_low=0.0, nu_high=0.0, rounds=rounds,
            split=split, beta=b / 2, **common,
        )  # fmt: skip
        beta_post = b / 2
    else:
        out = eliminate_noninteractive(
            data, amount, triple=triple, h=hh, nu_low=-math.inf, nu_high=math.inf, rounds=1,
            split="even", beta=b, **common,
        )  # fmt: skip
        beta_post = b
    del data  # the signed distances (n floats), released already: free before the widths
    queried = out.state >= 0
    nq = int(queried.sum())
    S = out.state == 0
    est = out.estimate
    # the undecided are inside when est <= θ; θ = 0 but where the shift applies (below), so
    # no per-user θ array: est <= 0 for all of them, then est <= θ where θ is not 0
    inside = out.state == 1
    inside |= S & (est <= 0)
    if use_shift:
        # θ = −s with s ∈ [0, w]: the test est ≤ θ depends on s only where −w < est ≤ 0 (below,
        # inside for every s; above 0, outside), and θ = 0 decides the others the same way, so
        # the shift (buffers of the region) is computed for those users' noise scales alone
        need = S & (est > -out.std) & (est <= 0)
        if need.any():
            inside[need] = est[need] <= -shift_for_region(out.std[need], region)
    width = out.width_fn(beta_post / (int(n_union) if n_union is not None else max(nq, 1)))
    uncertain = S & (np.abs(est) <= width)
    saving = float(out.saving)
    r_min = 1.0
    for g in out.guarantees:
        if isinstance(g.metric, tuple) and g.metric and g.metric[0] == "floor":
            r_min = max(r_min, float(g.metric[1]))
    return RangeCountArrays(
        estimate=int(inside[queried].sum()),
        error=int(uncertain.sum()),
        confidence=1.0 - b,
        charges=out.charges,
        allocations=out.allocations,
        rounds_run=out.rounds_run,
        rounds_histogram=out.rounds_histogram,
        inside=inside,
        n_queried=nq,
        n_excluded=int(n - nq),
        n_low=int((out.state == 1).sum()),
        n_high=int((out.state == 2).sum()),
        n_undecided=int(S.sum()),
        saving=saving,
        n_calls=out.n_calls,
        r_min=r_min,
        elimination=out,
    )


# ---------------------------------------------------------------------------------------------
# the ledger driver


def _ledger_allocations(lu: Any, amt: Any, n: int) -> Any:
    """Each user's allocation as :meth:`Session.reserve` will hold it: rounded up to the unit.

    One exact conversion per distinct value (vectorised over users). Allocations that cannot be
    stored are never admitted, so they count as 0 here.
    """
    from gpframe.accounting.amounts import LedgerUnits, nonnegative

    def conv(v: Any) -> Fraction:
        u = lu.up(nonnegative(v, "allocations"))
        return lu.to_fraction(u) if u <= LedgerUnits.MAX else Fraction(0)

    if isinstance(amt, pd.Series | pd.Index):
        amt = amt.to_numpy()
    if np.ndim(amt) == 0:
        return conv(amt)
    arr = np.asarray(amt, dtype=object)
    if arr.ndim != 1 or arr.size != n:
        return amt  # a shape error: reserve() reports it before writing anything
    codes, uniq = pd.factorize(arr, use_na_sentinel=False)
    vals = np.empty(len(uniq), dtype=object)
    vals[:] = [conv(v) for v in np.asarray(uniq, dtype=object)]
    return vals[codes]


def _floats(values: Any, codes: np.ndarray) -> np.ndarray:
    """Per-user floats of amounts given by value (one conversion per distinct value)."""
    return np.array([float(v) for v in values], dtype=np.float64)[codes]


def _check_parts_for(
    alloc: Any, kind: str, method: str, rounds: int, split: str, beta: Any, unit: Fraction,
    scale_max: Any,
) -> None:  # fmt: skip
    """Run the elimination's parameter checks as :func:`range_count_arrays` will; no noise."""
    from gpframe.queries.elimination import check_method_parts

    check_method_parts(alloc, kind=kind, method=method, rounds=rounds, split=split, beta=beta,
                       unit=unit, scale_max=scale_max)  # fmt: skip


def check_options(method: str, rounds: Any, split: str, beta: float) -> None:
    """Validate ``method``, ``rounds``, ``split`` and ``beta`` before the ledger is touched."""
    from gpframe.queries.elimination import split_fractions

    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise InvalidInputError(f"rounds={rounds!r} must be an integer >= 1. {_NOTHING}")
    split_fractions(split, int(rounds))
    probability(beta)


def run_range_count(
    session: Any,
    projected: Any,
    region: Any,
    *,
    rho: Any = None,
    eps: Any = None,
    method: str = "dist-elim",
    rounds: int = 10,
    split: str = "doubling",
    beta: float = 0.05,
    shift: bool | None = None,
    allocations: Any = None,
    rng: Any = None,
    query: str = "range_count",
) -> Any:
    """Reserve → run → charge → :class:`~gpframe.results.Result` for one region.

    See ``docs/operations/range_count.md``.

    Parameters
    ----------
    session : gpframe.Session
        Its metric filter decides the noise: CGP → Gaussian (pass ``rho``), GP → Laplace (``eps``).
    projected : gpframe.geo.Projected
        One point per user (the selected component), projected; ``projected.users`` are the ids.
    region : shapely Polygon or MultiPolygon
        In the data's CRS (``projected.crs_in``); projected to ``projected.crs_m`` here.
    rho, eps : float
        The allocation per user (one of them), in ground units; ``allocations`` (an array aligned
        with the users, e.g. from :class:`gpframe.accounting.schedules.Plan`) overrides it.
    method, rounds, split, beta, shift, rng
        As in :func:`range_count_arrays`.

    Returns
    -------
    Result
        ``value`` the private count, ``error`` U at ``confidence`` 1 − β, per-user ``charges``
        and ``allocations`` (the saving is their difference), ``excluded`` the users refused for
        lack of budget; ``params`` carries the rounds histogram and the counts of eliminated users.

    Notes
    -----
    Invalid regions or parameters raise :class:`~gpframe.errors.InvalidInputError` before the
    ledger is touched. The charge (Σ of the rounds' guarantees) is committed before the Result
    is built.
    """
    from gpframe.geo import project_geometry
    from gpframe.mechanisms.noise.bits import resolve_rng

    # refuse an insecure or foreign rng before the reservation (it would otherwise only fail in
    # the sampler, after the users were reserved and so charged in full)
    rng = resolve_rng(rng)
    from gpframe.ledger.charges import filter_kind

    led = session.ledger
    kind = filter_kind(session, "range_count")
    if kind == "cgp" and (rho is None or eps is not None):
        if allocations is None:
            raise InvalidInputError(
                f"this session's filters are CGP: pass rho=... (the Gaussian versions; "
                "docs/operations/range_count.md). "
                f"{_NOTHING}"
            )
    if kind == "gp" and (eps is None or rho is not None):
        if allocations is None:
            raise InvalidInputError(
                "this session's filters are pure GP: pass eps=... (a Gaussian step is never "
                f"admitted by a pure-GP filter; docs/operations/range_count.md). {_NOTHING}"
            )
    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    from gpframe.queries.elimination import split_fractions

    split_fractions(split, rounds)
    region_m = _check_region(project_geometry(region, projected.crs_in, projected.crs_m))
    users = np.asarray(projected.users)
    if not pd.Index(users).is_unique:
        raise InvalidInputError(
            "several rows per user: range_count reads one point per user; select it with "
            f"component=... (docs/ledger.md). {_NOTHING}"
        )
    amt: Any = allocations if allocations is not None else (rho if kind == "cgp" else eps)
    params = {"method": method, "rounds": rounds, "split": split, "beta": beta,
              "region_wkt": region_m.wkt[:200]}  # fmt: skip
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    # The per-round parts are fixed by the allocations rounded to the ledger's unit, which are
    # known before reserving: check them (too small to split, outside the wrappers' ranges) now,
    # as if every user were admitted, so bad parameters never touch the ledger.
    _check_parts_for(_ledger_allocations(lu, amt, users.size), kind, method, rounds, split, beta,
                     unit, projected.scale_max)  # fmt: skip

    def allocations(r: Any) -> GroupedAmounts:
        units = np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0)
        # the reserved int64 units grouped by value: one exact Fraction per distinct value
        return GroupedAmounts.from_units(units, unit)

    def check(r: Any) -> None:
        # Backstop with the allocations actually reserved (the admitted subset may group
        # differently): this draws no noise, so a refusal here may release the reservation.
        _check_parts_for(allocations(r), kind, method, rounds, split, beta, unit,
                         projected.scale_max)  # fmt: skip

    def compute(r: Any) -> Charge[Any]:
        alloc = allocations(r)
        out = range_count_arrays(
            projected.xy, users, region_m, kind=kind, amount=alloc, method=method,
            rounds=rounds, split=split, beta=beta, shift=shift, unit=unit,
            scale_max=projected.scale_max, rng=rng,
        )  # fmt: skip
        # the charge in ledger units, converted once per distinct value (rounded up, as the
        # ledger converts amounts), then indexed per user: no Fraction per user
        el = out.elimination
        table = np.array([lu.up(v) for v in el.charge_table.tolist()], dtype=np.int64)
        return Charge((out, alloc), table[el.charge_codes], units=True)

    ran = run(session, users, amt, notion="metric", query=query, params=params, check=check,
              compute=compute)  # fmt: skip
    out, alloc = ran.value
    return region_result(out, alloc, users, ran.admitted, params, projected, kind=kind,
                         method=method, query_id=ran.query_id)  # fmt: skip


def region_result(
    out: Any, alloc: Any, users: np.ndarray, adm: np.ndarray, params: dict[str, Any],
    projected: Any, *, kind: str, method: str, query_id: str,
) -> Any:  # fmt: skip
    """Build the :class:`~gpframe.results.Result` of one region's count, after its charge.

    ``out`` is a :class:`RangeCountArrays` (or the Dask face's merge of one per partition),
    ``alloc`` the reserved allocations (:class:`GroupedAmounts`), ``adm`` the admitted mask;
    ``projected`` gives the metric CRS, its ``scale_max`` and ``noise_inflation``.
    """
    from gpframe.results import Result

    every = bool(adm.all())  # everyone admitted (the usual case): no masked copies
    idx = pd.Index(users if every else users[adm])

    def admitted(per_user: np.ndarray) -> pd.Series:  # a fresh array, so the Series may own it
        return pd.Series(per_user if every else per_user[adm], index=idx, dtype=np.float64,
                         copy=False)  # fmt: skip

    return Result(
        value=out.estimate,
        error=float(out.error),
        error_kind="count error (users)",
        confidence=out.confidence,
        mechanism=("gaussian_cgp" if kind == "cgp" else
                   ("laplace_gp" if method.startswith("dist") else "planar_laplace")),
        params={
            **params,
            "rounds_histogram": out.rounds_histogram.tolist(),
            "n_low": out.n_low, "n_high": out.n_high, "n_undecided": out.n_undecided,
            "saving": out.saving, "sampler_calls": out.n_calls,
            "crs_m": projected.crs_m.to_string(), "scale_max": float(projected.scale_max),
            "noise_inflation": float(projected.noise_inflation),
        },
        kind=kind,
        metric=("floor", out.r_min),
        r_min=out.r_min,
        charges=admitted(_floats(out.elimination.charge_table, out.elimination.charge_codes)),
        allocations=admitted(_floats(alloc.values, alloc.codes)),
        excluded=users[~adm].tolist(),
        query_id=query_id,
        spec="docs/operations/range_count.md; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), "
             "Alg. 4, Alg. 6",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# component selection


@dataclass(frozen=True)
class Last:
    """Component rule: each user's last row by the time column ``column``, before ``before``.

    "The user's last fix before τ" reads timestamps only, never locations
    (``docs/operations/range_count.md``). Users without a row before ``before`` are not asked (they
    are not in the count). Exported as ``gp.Last``; pass it as ``component=`` of ``range_count``,
    ``kde``, ``kde_raster`` and ``nearest_users``.

    >>> import gpframe as gp
    >>> gp.Last("time", before="2020-12-02 12:00")
    Last(column='time', before='2020-12-02 12:00')
    """

    column: str
    before: Any = None


@dataclass(frozen=True)
class First:
    """Component rule: each user's first row by the time column ``column``, at/after ``after``.

    Users without a row at or after ``after`` are not asked. Exported as ``gp.First``; pass it
    as ``component=`` of ``range_count``, ``kde``, ``kde_raster`` and ``nearest_users``.

    >>> import gpframe as gp
    >>> gp.First("time", after="2020-12-02 06:00")
    First(column='time', after='2020-12-02 06:00')
    """

    column: str
    after: Any = None


def _time_column(frame: pd.DataFrame, column: str | None, what: str) -> str:
    if column is not None:
        if column not in frame.columns:
            raise InvalidInputError(
                f"component={what!r}: column {column!r} is not in the frame (columns: "
                f"{', '.join(map(str, frame.columns[:12]))}). {_NOTHING}"
            )
        return column
    cands = [c for c in frame.columns if pd.api.types.is_datetime64_any_dtype(frame[c])]
    if len(cands) != 1:
        rule = f"gp.{what.title()}"
        if cands:
            fix = "name one: " + " or ".join(f"component={rule}({c!r})" for c in cands[:4])
        else:
            fix = (
                "convert a time column with pd.to_datetime and pass "
                f"component={rule}(column), or use reduce={what!r} (row order)"
            )
        found = ", ".join(map(repr, cands)) or "none"
        raise InvalidInputError(
            f"component={what!r} needs one time column; found {found}: {fix}. {_NOTHING}"
        )
    return str(cands[0])


def _as_time(value: Any, col: pd.Series, name: str) -> Any:
    if value is None:
        return None
    try:
        t = pd.Timestamp(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name}={value!r} is not a time: {exc}. {_NOTHING}") from None
    tz = getattr(col.dtype, "tz", None)
    if tz is not None and t.tzinfo is None:
        t = t.tz_localize(tz)
    elif tz is None and t.tzinfo is not None:
        raise InvalidInputError(
            f"{name}={value!r} has a time zone but column {col.name!r} has none. {_NOTHING}"
        )
    return t


def one_point_hint(frame: pd.DataFrame, skip: Any = ()) -> str:
    """Return how to pick one point per user, naming only rules that work on ``frame``.

    ``skip`` holds the user and coordinate columns (never a component column). A datetime column
    yields ``gp.Last(col)`` / ``gp.First(col)``; a non-float column yields ``(col, value)``;
    ``reduce=`` always works (``docs/operations/range_count.md``).

    >>> df = pd.DataFrame({"u": [1], "x": [0.0], "t": pd.to_datetime(["2020-01-01"]),
    ...                    "hour": [7]})
    >>> print(one_point_hint(df, skip=("u", "x")))
    Choose each user's point with component=gp.Last('t') (the latest fix), gp.First('t') or gp.Last('t', before=...); component=('hour', value); or reduce='last' / 'first' (row order).
    """  # noqa: E501
    skip = set(skip)
    cols = [c for c in frame.columns if c not in skip]
    times = [c for c in cols if pd.api.types.is_datetime64_any_dtype(frame[c])]
    # a (column, value) rule wants a column of a few labels (hour, day, trip id): not a float
    # (a measurement) and not a geometry
    keys = [
        c for c in cols
        if c not in times and not pd.api.types.is_float_dtype(frame[c])
        and getattr(frame[c].dtype, "name", "") != "geometry"
    ]  # fmt: skip
    opts = []
    if times:
        t = times[0]
        opts.append(
            f"component=gp.Last({t!r}) (the latest fix), gp.First({t!r}) or "
            f"gp.Last({t!r}, before=...)"
        )
    if keys:
        opts.append(f"component=({keys[0]!r}, value)")
    opts.append("or reduce='last' / 'first' (row order)")
    return "Choose each user's point with " + "; ".join(opts) + "."


def _dense_distinct(u: np.ndarray) -> bool:
    """Tell whether ``u`` holds integer ids spanning few values, all distinct (one counting pass).

    False means "not shown distinct" (repeated, sparse or not integers): the caller hashes.
    """
    if u.dtype.kind not in "iu" or u.size == 0:
        return False
    lo, hi = int(u.min()), int(u.max())
    if hi - lo >= 4 * u.size + 1024:
        return False
    return not bool((np.bincount((u - u.dtype.type(lo)).astype(np.intp)) > 1).any())


def select_component(
    frame: pd.DataFrame,
    users: np.ndarray,
    component: Any = None,
    reduce: str | None = None,
    *,
    operation: str = "range_count",
    skip: Any = (),
) -> np.ndarray:
    """Return the positions (into ``frame``'s rows) of each user's one selected point.

    Parameters
    ----------
    frame : DataFrame
        The bound frame (rows aligned with ``users``).
    users : ndarray
        The user id of each row.
    component : None, tuple, callable, ``"first"``, ``"last"``, :class:`First` or :class:`Last`
        ``None``: all rows (each user must have one). ``(column, value)``: rows where
        ``frame[column] == value`` (e.g. ``("hour", 7)``). A callable ``f(frame)`` returning a
        boolean mask (it must read public columns only, never the coordinates).
        ``"last"`` / ``"first"`` (or ``Last(col, before=t)`` / ``First(col, after=t)``): per user
        the last / first row by the time column (the frame's only datetime column for the strings).
    reduce : {"first", "last"}, optional
        What to do with several rows of one user in the component: keep the first / last in row
        order. Without it, several rows are an ``InvalidInputError``. A mean is not offered: it is
        not one of the user's points (and its charge would need the Lipschitz rule of
        ``docs/ledger.md``).
    operation : str
        The operation's name, for messages (``"kde_raster"``, ``"gp.duckdb.range_count"``...).
    skip : sequence
        The user and coordinate columns: never suggested as a component column.

    Returns
    -------
    ndarray of int64
        Row positions, one per selected user, in row order.

    Examples
    --------
    >>> df = pd.DataFrame({"u": [1, 1, 2], "hour": [7, 8, 7],
    ...                    "t": pd.to_datetime(["2020-01-01 07:10", "2020-01-01 08:05",
    ...                                         "2020-01-01 07:30"])})
    >>> select_component(df, df["u"].to_numpy(), ("hour", 7)).tolist()
    [0, 2]
    >>> select_component(df, df["u"].to_numpy(), "last").tolist()
    [1, 2]
    >>> select_component(df, df["u"].to_numpy(), Last("t", before="2020-01-01 08:00")).tolist()
    [0, 2]
    """
    n = len(frame)
    if reduce is not None and reduce not in REDUCTIONS:
        raise InvalidInputError(
            f"reduce={reduce!r} is not one of {', '.join(map(repr, REDUCTIONS))}: a reduction must "
            f"keep one of the user's own points (docs/ledger.md). {_NOTHING}"
        )
    if isinstance(component, str):
        if component not in ("first", "last"):
            raise InvalidInputError(
                f"component={component!r} is not 'first', 'last', a (column, value) pair or a "
                f"callable. {_NOTHING}"
            )
        col = _time_column(frame, None, component)
        component = Last(col) if component == "last" else First(col)
    if component is None:
        mask = np.ones(n, dtype=bool)
    elif isinstance(component, (Last, First)):
        what = "last" if isinstance(component, Last) else "first"
        col = _time_column(frame, component.column, what)
        t = frame[col]
        if t.isna().any():
            raise InvalidInputError(
                f"time column {col!r} has {int(t.isna().sum())} missing values; drop them first. "
                f"{_NOTHING}"
            )
        cut = None  # the rows inside before= / after=, or None: every row
        if isinstance(component, Last) and component.before is not None:
            cut = (t < _as_time(component.before, t, "before")).to_numpy()
        if isinstance(component, First) and component.after is not None:
            cut = (t >= _as_time(component.after, t, "after")).to_numpy()
        from gpframe.queries.pick_rows import pick

        # one compiled pass over the rows (integer ids, numeric or datetime times): the rows
        # of the sort below, without its temporaries of the frame's length
        picked = pick(np.asarray(users), t.to_numpy(), cut, what == "last")
        if picked is not None:
            return picked
        pos = np.flatnonzero(cut) if cut is not None else np.arange(n)
        # sort by (user, time, row) and keep the last / first per user: timestamps only
        order = np.lexsort((pos, t.to_numpy()[pos]))
        srt = pos[order]
        keep = ~pd.Series(users[srt]).duplicated(keep="last" if what == "last" else "first")
        return np.sort(srt[keep.to_numpy()])
    elif isinstance(component, tuple):
        if len(component) != 2:
            raise InvalidInputError(
                f"component={component!r}: pass a (column, value) pair. "
                f"{one_point_hint(frame, skip)} {_NOTHING}"
            )
        col, value = component
        if col not in frame.columns:
            raise InvalidInputError(
                f"component column {col!r} is not in the frame (columns: "
                f"{', '.join(map(str, frame.columns[:12]))}). {_NOTHING}"
            )
        mask = (frame[col] == value).fillna(False).to_numpy(dtype=bool)
    elif callable(component):
        sel = component(frame)
        mask = np.asarray(sel.to_numpy() if isinstance(sel, pd.Series) else sel)
        if mask.dtype != bool or mask.shape != (n,):
            raise InvalidInputError(
                f"component callable returned {mask.dtype} of shape {mask.shape}; it must return "
                f"a boolean mask with one entry per row ({n}). {_NOTHING}"
            )
    else:
        raise InvalidInputError(
            f"component={component!r} is not None, a (column, value) pair, a callable, 'first', "
            f"'last', First(...) or Last(...). {_NOTHING}"
        )
    pos = np.flatnonzero(mask)
    if _dense_distinct(users[pos]):  # one row per user (the usual input): nothing to hash
        return pos
    dup = pd.Series(users[pos]).duplicated(keep=False).to_numpy()
    if dup.any():
        if reduce is None:
            many = pd.unique(users[pos][dup])
            show = ", ".join(map(repr, many[:5].tolist())) + (", ..." if many.size > 5 else "")
            raise InvalidInputError(
                f"{many.size} user(s) have several rows in the selected component (users {show}); "
                f"{operation} reads one point per user, so a trajectory needs a rule for which "
                f"point (docs/operations/range_count.md). {one_point_hint(frame, skip)} "
                f"{_NOTHING}"
            )
        keep = ~pd.Series(users[pos]).duplicated(keep=reduce)
        pos = pos[keep.to_numpy()]
    return pos
