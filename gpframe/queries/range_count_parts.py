"""One private range count over a split by a public column: each part in its own metric CRS.

See ``docs/wide-extents.md`` (a split by a public column) and ``docs/operations/range_count.md``.
Each user has one point (the selected component), so one part; the parts run the same
algorithm as :func:`gpframe.queries.range_count.run_range_count`, each on its own metres and
projection scale factor, inside **one** reservation (one query id), at failure probability
β/k each for k parts, so the summed count error U holds at confidence 1 − β (union bound).
A user is charged as by a count over their own part alone.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.ledger.run import Charge, run
from gpframe.queries.elimination import GroupedAmounts
from gpframe.queries.range_count import (
    METHODS,
    _check_parts_for,
    _floats,
    _ledger_allocations,
    range_count_arrays,
)

__all__ = ["allocations_for", "parts_result", "run_range_count_parts"]

_NOTHING = "Nothing was charged."


def run_range_count_parts(
    session: Any,
    parts: list[tuple[Any, Any]],
    *,
    rho: Any = None,
    eps: Any = None,
    method: str = "dist-elim",
    rounds: int = 10,
    split: str = "doubling",
    beta: float = 0.05,
    rng: Any = None,
    params: dict[str, Any] | None = None,
) -> Any:
    """Reserve → run every part → charge, for one region; return one :class:`Result`.

    Parameters
    ----------
    session : gpframe.Session
    parts : list of (Projected, Polygon)
        Per part: one point per user (ids distinct across parts) in the part's metres, and the
        region already projected to those metres.
    rho, eps, method, rounds, split, beta, rng
        As :func:`gpframe.queries.range_count.run_range_count` (``beta`` for the whole count).
    params : dict, optional
        Extra entries for the Result's ``params`` (the parts' CRSs and factors).

    Returns
    -------
    Result
        ``value`` the summed count, ``error`` the summed U at confidence 1 − β; the top-level
        ``crs_m`` / ``scale_max`` / ``noise_inflation`` are the worst part's.

    Examples
    --------
    >>> import gpframe as gp, shapely
    >>> from gpframe.geo import Projected
    >>> import pyproj
    >>> def part(ids, xs):
    ...     crs = pyproj.CRS("EPSG:32618")
    ...     return Projected(xy=np.c_[xs, np.zeros(len(xs))], users=np.array(ids),
    ...                      index=pd.RangeIndex(len(xs)), crs_in=crs, crs_m=crs, scale_max=1.0)
    >>> s = gp.Session(budget=gp.CGP(rho=1.0))
    >>> box = shapely.box(-1000, -1000, 1000, 1000)
    >>> res = run_range_count_parts(s, [(part([1, 2], [0.0, 9e4]), box),
    ...                                 (part([3], [10.0]), box)], rho=1e-2)
    >>> res.value, res.error, len(set(s.history(1)["query_id"]) | set(s.history(3)["query_id"]))
    (2, 0.0, 1)
    """
    from gpframe.accounting.amounts import metric_amount
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.queries.elimination import split_fractions

    rng = resolve_rng(rng)
    from gpframe.ledger.charges import filter_kind

    led = session.ledger
    kind = filter_kind(session, "range_count")
    # the one rho=/eps= check of both faces; range_count calibrates to the filter's own kind
    _, amt = metric_amount(rho, eps, example=".range_count(region, rho=2e-6)",
                           filter_kind=kind, same_kind=True)  # fmt: skip
    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    split_fractions(split, rounds)
    users = np.concatenate([np.asarray(p.users, dtype=object) for p, _ in parts])
    if not pd.Index(users).is_unique:
        raise InvalidInputError(
            "a user has a point in several parts: range_count reads one point per user; select "
            f"it with component=... (docs/ledger.md). {_NOTHING}"
        )
    bounds = np.cumsum([0] + [len(p.users) for p, _ in parts])
    k = max(len(parts), 1)
    b = beta / k  # each part at beta / k: the summed error holds at 1 - beta
    lu = led.units["metric"]
    unit = Fraction(1) / lu.scale
    for i, (p, _) in enumerate(parts):
        n_i = int(bounds[i + 1] - bounds[i])
        _check_parts_for(_ledger_allocations(lu, amt, n_i), kind, method, rounds, split, b,
                         unit, p.scale_max)  # fmt: skip

    def grouped(r: Any, i: int) -> GroupedAmounts:
        units = np.where(np.asarray(r.admitted, dtype=bool), r.allocation_units, 0)
        return GroupedAmounts.from_units(units[bounds[i] : bounds[i + 1]], unit)

    def check(r: Any) -> None:
        for i, (p, _) in enumerate(parts):
            _check_parts_for(grouped(r, i), kind, method, rounds, split, b, unit, p.scale_max)

    def compute(r: Any) -> Charge[Any]:
        charged = np.zeros(users.size, dtype=np.int64)
        outs = []
        for i, (p, region_m) in enumerate(parts):
            alloc = grouped(r, i)
            out = range_count_arrays(
                p.xy, np.asarray(p.users), region_m, kind=kind, amount=alloc, method=method,
                rounds=rounds, split=split, beta=b, unit=unit, scale_max=p.scale_max, rng=rng,
            )  # fmt: skip
            el = out.elimination
            table = np.array([lu.up(v) for v in el.charge_table.tolist()], dtype=np.int64)
            charged[bounds[i] : bounds[i + 1]] = table[el.charge_codes]
            outs.append((out, alloc))
        return Charge(outs, charged, units=True)

    ran = run(session, users, amt, notion="metric", query="range_count",
              params={"method": method, "rounds": rounds, "split": split, "beta": beta,
                      **(params or {})},
              check=check, compute=compute)  # fmt: skip
    worst = max((p for p, _ in parts), key=lambda p: p.noise_inflation)
    return parts_result(ran.value, users, ran.admitted, worst, kind=kind, method=method,
                        rounds=rounds, split=split, beta=beta, params=params,
                        query_id=ran.query_id)  # fmt: skip


def parts_result(
    outs: list[tuple[Any, Any]], users: np.ndarray, adm: np.ndarray, worst: Any, *, kind: str,
    method: str, rounds: int, split: str, beta: float, params: dict[str, Any] | None,
    query_id: str,
) -> Any:  # fmt: skip
    """Build the :class:`~gpframe.results.Result` of one region's count over a split.

    ``outs`` holds per part its :class:`~gpframe.queries.range_count.RangeCountArrays` (or the
    Dask face's merge of one per partition) and its reserved allocations, the parts' users
    concatenated in ``users``; ``worst`` gives the top-level CRS, scale and inflation.
    """
    from gpframe.results import Result

    idx = pd.Index(users[adm])
    charges = np.concatenate([_floats(o.elimination.charge_table, o.elimination.charge_codes)
                              for o, _ in outs])  # fmt: skip
    allocs = np.concatenate([_floats(a.values, a.codes) for _, a in outs])
    hist = np.zeros(max(o.rounds_histogram.size for o, _ in outs), dtype=np.int64)
    for o, _ in outs:
        hist[: o.rounds_histogram.size] += o.rounds_histogram
    r_min = max(o.r_min for o, _ in outs)
    return Result(
        value=int(sum(o.estimate for o, _ in outs)),
        error=float(sum(o.error for o, _ in outs)),
        error_kind="count error (users)",
        confidence=1.0 - beta,
        mechanism=("gaussian_cgp" if kind == "cgp" else
                   ("laplace_gp" if method.startswith("dist") else "planar_laplace")),
        params={
            "method": method, "rounds": rounds, "split": split, "beta": beta,
            "rounds_histogram": hist.tolist(),
            "n_low": sum(o.n_low for o, _ in outs), "n_high": sum(o.n_high for o, _ in outs),
            "n_undecided": sum(o.n_undecided for o, _ in outs),
            "saving": float(sum(o.saving for o, _ in outs)),
            "sampler_calls": sum(o.n_calls for o, _ in outs),
            "crs_m": worst.crs_m.to_string(), "scale_max": float(worst.scale_max),
            "noise_inflation": float(worst.noise_inflation), **(params or {}),
        },
        kind=kind,
        metric=("floor", r_min),
        r_min=r_min,
        charges=pd.Series(charges[adm], index=idx, dtype=np.float64),
        allocations=pd.Series(allocs[adm], index=idx, dtype=np.float64),
        excluded=users[~adm].tolist(),
        query_id=query_id,
        spec="docs/operations/range_count.md and docs/wide-extents.md; Liang & Yi, 'Adaptive "
             "Privacy Budgeting' (2026), Alg. 4, Alg. 6",
    )  # fmt: skip


def allocations_for(allocations: Any, users: np.ndarray) -> np.ndarray:
    """Return an allocation per selected user (0 = not asked) from a scalar, array or Series.

    How both faces read ``range_count(allocations=...)``.
    """
    if isinstance(allocations, pd.Series):
        a = allocations.reindex(pd.Index(users)).to_numpy(dtype=object)
        return np.array([0 if (v is None or (isinstance(v, float) and math.isnan(v))) else v
                         for v in a], dtype=object)  # fmt: skip
    if np.ndim(allocations) == 0:
        out = np.empty(users.size, dtype=object)
        out[:] = [allocations] * users.size
        return out
    arr = np.asarray(allocations, dtype=object)
    if arr.shape != (users.size,):
        raise InvalidInputError(
            f"allocations has shape {arr.shape}; pass a scalar, a Series indexed by user id, or "
            f"one value per selected user ({users.size}). {_NOTHING}"
        )
    return arr
