"""A-priori error bounds for a preview (``dry_run=True``): public inputs only, no noise drawn.

See ``docs/ledger.md`` ("Previewing a query"). A release's noise parameters follow from its
amount alone: :func:`planned_release` computes them with the wrappers' own calibrations
(``docs/noise.md``) and returns an object the error formulas read like a ``Released`` (noise
parameters, lattice step, zero values), so the bounds below run the very formulas the real
Results use (the elimination's accumulators, ``error_bound``, ``knn_error_bound``...) on the
noise the real call would sample. Nothing here reads a location.

Each ``*_error`` function takes the planned reservations of a dry run (``Planned`` of
:mod:`gpframe.ledger.run`, their recorded ``params``) and returns ``(bound, kind, confidence)``
or None (nobody reserved).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpframe.accounting.amounts import exact
from gpframe.queries import elimination as _el

__all__ = [
    "bound_for",
    "elimination_least",
    "full_run_widths",
    "hooks",
    "hull_error_known",
    "hull_rows_known",
    "kde_error",
    "kde_raster_sigma",
    "knn_error",
    "knn_rows_error",
    "least_for",
    "nearest_error",
    "planned_release",
    "range_count_band",
]

Bound = tuple[float, str, float | None]


class PlannedRelease:
    """What the error formulas read of a release, without its values (all zero).

    ``noise`` and ``g`` are exactly those of the release the same wrapper call would return;
    ``values`` has its shape. It is never a released value and never leaves the preview.
    """

    def __init__(self, noise: dict[str, Fraction], g: Fraction, n: int, d: int) -> None:
        self.noise = noise
        self.g = g
        self.values = np.zeros((n, d)) if d > 1 else np.zeros(n)

    def __array__(self, dtype: Any = None, copy: Any = None) -> NDArray[Any]:
        return self.values if dtype is None else self.values.astype(dtype)


def planned_release(kind: str, triple: str, part: Fraction, k: Fraction, n: int) -> PlannedRelease:
    """Return the noise of ``elimination._release(kind, triple, ·, part, k)`` on ``n`` rows.

    CGP: ``gaussian_cgp`` at ρ = part/k²; GP: ``laplace_gp`` (``triple="dist"``) or
    ``planar_laplace`` (``"pt"``) at ε = part/k, all with the wrappers' default lattice and floor
    (``docs/noise.md``).

    >>> r = planned_release("gp", "dist", Fraction(1, 100), Fraction(1), 3)
    >>> r.noise["scale"] == (1 + Fraction(1, 2**10)) / Fraction(1, 100), r.values.shape
    (True, (3,))
    """
    from gpframe.mechanisms import calibration as cal

    d = 1 if triple == "dist" else 2
    if kind == "cgp":
        c = cal.cgp_gaussian(part / (k * k), d=d)
        noise = {"sigma2": c.param, "scale": cal.sqrt_up(c.param) * c.g}
    elif triple == "dist":
        c = cal.gp_laplace(part / k, d=1)
        noise = {"lam": c.param, "scale": c.g / c.param, "draw_scale": Fraction(1)}
    else:
        c = cal.gp_laplace(part / k, d=2)
        noise = {"a": c.param, "scale": c.g / c.param}
    return PlannedRelease(noise, c.g, n, d)


def _zero_h(p: np.ndarray) -> np.ndarray:
    return np.zeros(np.asarray(p).reshape(-1, 2).shape[0])


def full_run_widths(
    allocations: Any,
    n: int,
    *,
    kind: str,
    triple: str,
    rounds: int,
    split: str,
    beta_elim: float,
    beta_post: float,
    unit: Fraction | None,
    scale_max: Any,
    n_union: int | None = None,
) -> NDArray[np.float64]:
    """Return each user's final width if they run every round (NaN if not asked).

    The same parts (:func:`~gpframe.queries.elimination.prepare_parts`), noise and accumulator
    as :func:`~gpframe.queries.elimination.eliminate_noninteractive` /
    ``eliminate_interactive``, read at ``beta_post`` / (users asked) like their ``width_fn``.
    Equal to the real width for Gaussian and 1-D Laplace releases; for planar Laplace (GP,
    ``triple="pt"``) the real width is the half-length of an intersection of intervals, at most
    this (the smallest radius). ``n_union``: the n of the union bounds when the run is given
    one (a SQL batch's ``n_users``), else the users asked.
    """
    pi = _el.split_fractions(split, rounds)
    k = exact(scale_max, "scale_max")
    parts = _el.prepare_parts(allocations, n, pi, unit=unit)
    asked = np.flatnonzero(parts.codes >= 0)
    nu = max(asked.size, 1) if n_union is None else int(n_union)
    acc = _el._accumulator(kind, triple, n, _zero_h, beta_elim / (nu * len(pi)))
    for g, row in enumerate(parts.table):
        idx = np.flatnonzero(parts.codes == g)
        if not idx.size:
            continue
        for part in row:
            acc.rounds[idx] += 1
            acc.add(idx, planned_release(kind, triple, part, k, idx.size),
                    part / (k if kind == "gp" else k * k))  # fmt: skip
    out = np.full(n, np.nan)
    if asked.size:
        out[asked] = acc.width(asked, beta_post / nu)
    return out


def _grouped(call: Any, unit: Fraction) -> Any:
    units = np.where(np.asarray(call.admitted, dtype=bool), call.allocation_units, 0)
    return _el.GroupedAmounts.from_units(np.asarray(units, dtype=np.int64), unit)


def _widths(call: Any, unit: Fraction, kind: str, scale_max: Any, beta: float,
            alloc: Any = None, half: bool = False) -> NDArray[np.float64]:  # fmt: skip
    # the operations' own split of β: ``*-elim`` β/2 to the eliminations, β/2 after; baselines
    # all of it after (``half``: nearest users' baseline also runs its one round at β/2)
    p = call.params
    method = str(p["method"])
    elim = method.endswith("-elim")
    b = float(beta)
    return full_run_widths(
        _grouped(call, unit) if alloc is None else alloc, len(call.users), kind=kind,
        triple="dist" if method.startswith("dist") else "pt",
        rounds=int(p["rounds"]) if elim else 1, split=str(p["split"]) if elim else "even",
        beta_elim=b / 2 if elim or half else b, beta_post=b / 2 if elim else b, unit=unit,
        scale_max=scale_max,
    )  # fmt: skip


def _admitted(calls: Sequence[Any]) -> list[Any]:
    return [c for c in calls if np.asarray(c.admitted, dtype=bool).any()]


def range_count_band(calls: Sequence[Any], unit: Fraction, kind: str,
                     scale_max: Any) -> Bound | None:  # fmt: skip
    """Return the half-width (m) of the band around the region's edge, at confidence 1 − β.

    The width of a user's final estimate of the signed distance (every round run: the widest),
    the largest over the users and regions: with probability ≥ 1 − β a user farther than about
    this from the edge is classified right (eliminated or not) and is not among the uncertain
    users the Result's count error U counts (U itself reads the released estimates).
    """
    calls = _admitted(calls)
    if not calls:
        return None
    beta = float(calls[0].params["beta"])
    w = max(float(np.nanmax(_widths(c, unit, kind, scale_max, beta))) for c in calls)
    return w, "edge band (m)", 1.0 - beta


def kde_error(calls: Sequence[Any], unit: Fraction, kind: str, scale_max: Any) -> Bound | None:
    """Return the KDE error bound, every query point at once, before any noise (≤ 1).

    ``pt``: (L_K/n)·Σ r_i with r_i user i's radius at β/n, exactly the Result's bound (it
    depends on the noise parameters only). Baselines ``dist``: (L_K/n)·Σ w_i, exact too.
    ``*-elim``: each user contributes L_K·w_i if kept to the end or e^{−ν²/(2b²)} if eliminated
    as far, which only the run decides: the bound takes the larger of the two for everybody, so
    it is at least the Result's error (equal when nobody is eliminated).
    """
    from gpframe.mechanisms import error_bound
    from gpframe.queries.kde import cutoff, kernel_lipschitz

    calls = _admitted(calls)
    if not calls:
        return None
    worst = 0.0
    for c in calls:
        p = c.params
        b, beta = float(p["bandwidth_m"]), float(p["beta"])
        lk = kernel_lipschitz(b)
        method = str(p["method"])
        alloc = _grouped(c, unit)
        nq = int(np.asarray(c.admitted, dtype=bool).sum())
        if method == "pt":  # one release per distinct allocation, radius at β/n
            parts = _el.prepare_parts(alloc, len(c.users), (Fraction(1),), unit=unit)
            k = exact(scale_max, "scale_max")
            tot = 0.0
            for g, row in enumerate(parts.table):
                m = int((parts.codes == g).sum())
                if m:
                    rel = planned_release(kind, "pt", row[0], k, m)
                    tot += m * float(error_bound(rel, beta / nq, n=1))
            err = lk * tot / nq
        else:
            w = _widths(c, unit, kind, scale_max, beta, alloc)
            w = w[np.isfinite(w)]
            if method.endswith("-elim"):
                far = cutoff(float(p["nu_m"]), b)
                err = float(np.maximum(lk * w, far).sum()) / nq
            else:
                err = lk * float(w.sum()) / nq
        worst = max(worst, min(err, 1.0))
    return worst, "KDE error (max over the query points)", 1.0 - beta


def kde_raster_sigma(calls: Sequence[Any], unit: Fraction, kind: str,
                     scale_max: Any) -> Bound | None:  # fmt: skip
    """Return the largest noise σ per coordinate (m) of the points, as ``params["sigma_m"]``.

    A ``Raster`` states no error bound (its error is the noise smoothed by the kernel plus the
    binning); its parameters give σ, which the preview computes exactly.
    """
    from gpframe.queries.kde import noise_sigma

    calls = _admitted(calls)
    if not calls:
        return None
    k = exact(scale_max, "scale_max")
    sig = 0.0
    for c in calls:
        parts = _el.prepare_parts(_grouped(c, unit), len(c.users), (Fraction(1),), unit=unit)
        for row in parts.table:
            sig = max(sig, noise_sigma(planned_release(kind, "pt", row[0], k, 1)))
    return sig, "noise σ per coordinate (m), the Raster's params['sigma_m']", None


def knn_error(calls: Sequence[Any], *, unit: Fraction, kind: str, scale_max: Any,
              counts: dict[Any, int], amount: Fraction) -> Bound | None:  # fmt: skip
    """Return the k-PNN distance error (m) of every rank, the largest over the users asked.

    As the Result's: ``knn_error_bound`` on each user's number of points and the threshold scale
    of the calls, which follow from the allocation alone (``docs/operations/knn.md``).
    """
    calls = _admitted(calls)
    if not calls:
        return None
    worst = -math.inf
    for c in calls:
        p = c.params
        kk, beta, g0 = int(p["k"]), float(p["beta"]), float(p["gamma0"])
        adm = np.asarray(c.admitted, dtype=bool)
        n = np.array([counts[u] for u in np.asarray(c.users, dtype=object)[adm].tolist()])
        worst = max(worst, knn_rows_error(n, kk, beta, g0, kind, amount, scale_max))
    return worst, KNN_KIND, 1.0 - beta


KNN_KIND = "distance error (m), every rank"


def knn_rows_error(n: Any, k: int, beta: float, gamma0: float, kind: str, amount: Fraction,
                   scale_max: Any) -> float:  # fmt: skip
    """Return the largest k-PNN distance error (m) over lists of ``n`` points (one per user).

    ``knn_error_bound`` at each list's k (min(n, k)) and the threshold scale of its calls, plus
    the lattice's 5g, exactly as the Result states it (``docs/operations/knn.md``).
    """
    from gpframe.queries import knn as _k

    n = np.asarray(n, dtype=np.int64)
    ks = Fraction(float(scale_max))
    ku = np.minimum(n, int(k))
    worst = -math.inf
    for kv in np.unique(ku).tolist():
        cal = _k.pnn_calibration(_k.call_eps(kind, amount, int(kv), ks))
        e = _k.knn_error_bound(n[ku == kv], int(kv), beta, float(cal.scale["threshold"]), gamma0)
        worst = max(worst, float(np.max(e)) + 5 * float(cal.g))
    return worst


def nearest_error(calls: Sequence[Any], *, unit: Fraction, kind: str, scale_max: Any,
                  amount: Fraction) -> Bound | None:  # fmt: skip
    """Return the distance error (m) of the selection: twice the largest full-run width.

    The Result's bound is E_{i_j} + max E over the users still undecided at the end (who ran
    every round), or 0 when the elimination ends exact: at most 2·max w_i, w_i the width of a
    user who runs every round (exact for baselines with equal allocations).
    """
    calls = _admitted(calls)
    if not calls:
        return None
    c = calls[0]
    adm = np.asarray(c.admitted, dtype=bool)
    alloc = np.empty(adm.size, dtype=object)
    alloc[:] = [amount if a else Fraction(0) for a in adm.tolist()]
    beta = float(c.params["beta"])
    w = _widths(c, unit, kind, scale_max, beta, alloc, half=True)
    return 2.0 * float(np.nanmax(w)), "distance error (m), every rank", 1.0 - beta


def bound_for(session: Any, scale_max: Any, fn: Any, extra: Any = None) -> Any:
    """Return the ``error`` hook of :func:`gpframe.results.preview.preview_call` (metric).

    Called after the dry run, so the operation has validated its input: ``scale_max()`` gives
    the projection scale factor (the worst part's for a split frame), ``extra()`` more keyword
    arguments of ``fn`` (one of the ``*_error`` functions; ``kind`` there overrides the
    filter's, for GP mechanisms on a CGP filter).
    """
    led = session.ledger
    unit = Fraction(1) / led.units["metric"].scale

    def error(table: Any, calls: Sequence[Any]) -> Bound | None:
        kw = {"kind": led.kind["metric"], **(extra() if extra is not None else {})}
        return fn(calls, unit=unit, scale_max=scale_max(), **kw)

    return error


def scale_of(bound: Any) -> Any:
    """``scale_max()`` for :func:`bound_for` from a ``df.geopriv`` frame (worst part if split)."""

    def scale() -> float:
        if getattr(bound, "partition", None) is not None:
            return max(float(q.projected.scale_max) for q in bound._parts())
        return float(bound.projected.scale_max)

    return scale


def hull_error_known(calls: Sequence[Any], *, unit: Fraction, kind: str, scale_max: Any,
                     counts: dict[Any, int], amount: Fraction) -> Bound | None:  # fmt: skip
    """Return γ₁ + γ₃ (m), the part of the hull error known before the run (largest user).

    The Result's per-user ``error_m`` is γ₁ + γ₂ + γ₃ (``hull_error``, ``docs/operations/
    convex_hull.md``) with γ₂ = 2πR̃/k, R̃ the *released* radius: data-dependent, left out here.
    γ₁ and γ₃ grow with k, and the run's k is at most min(k, n) (given k) or min(128, n) (the
    clamp); the preview takes that largest k, so it bounds the Result's γ₁ + γ₃ for every user.
    """
    calls = _admitted(calls)
    if not calls:
        return None
    worst = 0.0
    p = calls[0].params
    beta, alpha = float(p["beta"]), float(p["alpha"])
    for c in calls:
        adm = np.asarray(c.admitted, dtype=bool)
        n = [counts[u] for u in np.asarray(c.users, dtype=object)[adm].tolist()]
        worst = max(worst, hull_rows_known(kind, amount, n, p.get("k"), beta, alpha,
                                           scale_max))  # fmt: skip
    return worst, HULL_KIND, 1.0 - beta


HULL_KIND = "hull error (m) without the 2πR̃/k term (R̃ released)"


def hull_rows_known(kind: str, amount: Any, n: Any, k: int | None, beta: float,
                    alpha: float, scale_max: Any = 1) -> float:  # fmt: skip
    """Return the largest γ₁ + γ₃ (m) over users of ``n`` points each (k None: the clamp, 128).

    At the amount the noise is calibrated at in the metric CRS (``scale_max`` K: ε/K, ρ/K²).

    >>> round(hull_rows_known("cgp", 5e-4, [5000], 16, 0.1, 0.92), 3)   # 35535.574 + 1649.43
    37185.004
    """
    from gpframe.queries.hull import hull_error, projected_amount

    n = np.asarray(n, dtype=np.float64)
    k_top = 128 if k is None else int(k)
    amount = projected_amount(kind, amount, scale_max)
    g1, _, g3 = hull_error(kind, float(amount), n, np.minimum(n, k_top), np.zeros(n.size),
                           beta=beta, alpha=alpha)  # fmt: skip
    return float(np.max(g1 + g3))


# ---------------------------------------------------------------------------------------------
# the least charge of an adaptive (elimination) run: the best-case saving


def elimination_least(calls: Sequence[Any], *, units: Any, nobody_if_k: bool = False,
                      amount: Fraction | None = None) -> list[Any]:  # fmt: skip
    """Return, per planned reservation, each user's least possible charge (ledger units).

    An elimination run measures every user asked in round 1 and charges the parts of the rounds
    run (``docs/operations/range_count.md``): the least is round 1's part π₁·a, rounded down to
    the ledger's unit like the real parts and charged rounded up, as the real charge is.
    ``nobody_if_k`` (nearest users): when k covers every user asked, nobody is measured.
    ``amount``: the exact allocation the run splits, when it is not the reserved units'
    (nearest users). Baselines (one round) charge the allocation: their least is it.
    """
    unit = Fraction(1) / units.scale
    out = []
    for c in calls:
        adm = np.asarray(c.admitted, dtype=bool)
        alloc = np.where(adm, np.asarray(c.allocation_units, dtype=np.int64), 0)
        p = c.params
        method = str(p.get("method", ""))
        if not method.endswith("-elim"):
            out.append(alloc)
            continue
        if nobody_if_k and int(p["k"]) >= int(adm.sum()):
            out.append(np.zeros(adm.size, dtype=np.int64))
            continue
        pi = _el.split_fractions(str(p["split"]), int(p["rounds"]))
        if amount is None:
            split_of: Any = _el.GroupedAmounts.from_units(alloc, unit)
        else:
            split_of = np.empty(adm.size, dtype=object)
            split_of[:] = [amount if a else Fraction(0) for a in adm.tolist()]
        parts = _el.prepare_parts(split_of, adm.size, pi, unit=unit)
        first = np.array([units.up(row[0]) for row in parts.table] + [0], dtype=np.int64)
        out.append(first[np.where(parts.codes >= 0, parts.codes, len(parts.table))])
    return out


def least_for(session: Any, nobody_if_k: bool = False, amount: Any = None) -> Any:
    """Return the ``least`` hook of :func:`gpframe.results.preview.preview_call` (metric).

    ``amount()``, called after the dry run validated the input, gives the exact allocation
    when the run splits it rather than the reserved units.
    """
    units = session.ledger.units["metric"]

    def least(calls: Sequence[Any]) -> list[Any]:
        a = None if amount is None else amount()
        return elimination_least(calls, units=units, nobody_if_k=nobody_if_k, amount=a)

    return least


def hooks(
    session: Any,
    scale_max: Any,
    fn: Any,
    *,
    least: bool = True,
    kind: str | None = None,
    amount: Fraction | None = None,
    counts: Any = None,
) -> dict[str, Any]:
    """Return the ``error`` (and ``least``) preview hooks of an operation on a split face.

    For a face that knows its public inputs when it plans (the Dask face: ``scale_max`` of its
    first pass, ``counts`` as ``(ledger keys, rows per user)``), the same bounds as the pandas
    face's, so both previews agree.
    """
    kw: dict[str, Any] = {}
    if kind is not None:
        kw["kind"] = kind
    if amount is not None:
        kw["amount"] = amount
    if counts is not None:
        keys, n = counts
        kw["counts"] = dict(zip(list(keys), np.asarray(n).tolist(), strict=True))
    out = {"error": bound_for(session, lambda: float(scale_max), fn,
                              (lambda: kw) if kw else None)}  # fmt: skip
    if least:
        out["least"] = least_for(session)
    return out
