"""``knn`` on a frame split by a public column (``df.geopriv(..., partition="region")``).

Each part runs k-PNN in its own metric CRS, chosen from its own public extent
(``docs/wide-extents.md``); the call is one query (one query id). A user is charged the amount
once per part they have rows in (each part is a release of its own: Liang & Yi, 'Concentrated
Geo-Privacy' (2023), Alg. 2, on that part's rows), and ``knn_rank`` counts within a user's rows
of one part. Noise scale per part as :func:`gpframe.queries.knn.knn_indices` with that part's
``scale_max``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError
from gpframe.ledger.run import Charge, run
from gpframe.results import KnnResult

_NOTHING = "Nothing was charged."


def part_users(bound: Any, parts: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global user codes, the users, and how many parts each user has rows in."""
    codes, uniques = pd.factorize(pd.Series(bound.located.users), sort=False)
    n_parts = np.zeros(len(uniques), dtype=np.int64)
    for part in parts:
        n_parts[np.unique(codes[part.rows])] += 1
    return codes.astype(np.int64), np.asarray(uniques), n_parts


def reserve_parts(bound: Any, kind: str, amount: Fraction, n_parts: np.ndarray) -> np.ndarray:
    """Return each user's allocation in ledger units: the amount once per part they are in."""
    from gpframe.accounting.amounts import LedgerUnits

    units, big = bound.session.ledger.units_for("metric", amount, n_parts, kind=kind)
    units = units.copy()
    units[big] = LedgerUnits.MAX
    return units


def knn_partitioned(
    bound: Any, point: Any, kk: int, *, kind: str, amount: Fraction, g0: float, order: str,
    compat: Any, max_cycles: int, b: float, rng: Any, helpers: tuple[Callable[..., Any], ...],
) -> pd.DataFrame:  # fmt: skip
    """Run k-PNN per part under one query id (arguments checked by gpframe.frame.knn.knn).

    ``helpers`` are :mod:`gpframe.frame.knn`'s ``(_point_m, _filter_kind, _filter_units)``,
    passed in because that module imports this one.
    """
    from gpframe.frame.partition import describe

    _point_m, _filter_kind, _filter_units = helpers
    from gpframe.queries import knn as _k
    from gpframe.release import release_frame

    parts = bound._parts()
    codes, uniques, n_parts = part_users(bound, parts)
    if not len(uniques):
        raise InvalidInputError(f"the frame has no rows: nobody to ask. {_NOTHING}")
    prepared = []
    for part in parts:  # every check and calibration before the ledger is touched
        p = part.projected
        q = _point_m(point, p)
        _k._check_extent(p.xy, q)
        lc, lu = pd.factorize(codes[part.rows], sort=False)
        lu = np.asarray(lu, dtype=np.int64)
        counts = np.bincount(lc, minlength=len(lu))
        ks = Fraction(float(p.scale_max))
        for n_k in np.unique(np.minimum(counts, kk)).tolist():
            _k.pnn_calibration(_k.call_eps(kind, amount, int(n_k), ks))
        prepared.append((part, q, lc.astype(np.int64), lu, ks))
    described = describe(parts)
    for d, (_part, q, *_rest) in zip(described, prepared, strict=True):
        d["point_m"] = q.tolist()
    worst = max(parts, key=lambda q: q.projected.noise_inflation).projected
    params = {"k": kk, "gamma0": g0, "scan_order": order, "compat": compat, "beta": b,
              "max_cycles": int(max_cycles), "crs_m": worst.crs_m.to_string(),
              "scale_max": float(worst.scale_max),
              "noise_inflation": float(worst.noise_inflation),
              "partition": str(bound.partition), "partitions": described}  # fmt: skip
    alloc = reserve_parts(bound, kind, amount, n_parts)
    from gpframe.ledger.charges import ledger_keys

    def compute(r: Any) -> Charge[Any]:
        adm = np.asarray(r.admitted, dtype=bool)
        outs = []
        for part, q, lc, lu, ks in prepared:
            outs.append(_k.knn_indices(
                part.projected.xy, lc, q, kk, kind=kind, amount=amount, n_users=len(lu),
                admitted=adm[lu], gamma0=g0, scan_order=order, max_cycles=int(max_cycles),
                beta=b, scale_max=ks, rng=rng,
            ))  # fmt: skip
        return Charge(outs, np.where(adm, alloc, 0), units=True)

    ran = run(bound.session, ledger_keys(uniques), alloc, notion="metric", query="knn",
              params=params, units=True, compute=compute)  # fmt: skip
    outs, adm, qid = ran.value, ran.admitted, ran.query_id
    pos, ranks, capped = [], [], 0
    value: dict[Any, list[Any]] = {}
    err = np.full(len(uniques), np.nan)
    r_min = np.inf
    for (part, _q, _lc, lu, _ks), out in zip(prepared, outs, strict=True):
        r_min = min(r_min, float(out.r_min))
        for j in np.flatnonzero(adm[lu]):
            rows = part.rows[out.rows[j]]
            pos.append(rows)
            ranks.append(np.arange(1, out.k[j] + 1))
            value.setdefault(uniques[lu[j]], []).extend(bound.frame.index[rows])
            err[lu[j]] = np.fmax(err[lu[j]], out.error[j])
            capped += int(out.capped[j].sum())
    empty = np.empty(0, np.int64)
    frame = release_frame(
        bound.frame, public=bound.public, protected=bound.protected,
        rows=np.concatenate(pos or [empty]).astype(np.int64),
        released={"knn_rank": np.concatenate(ranks or [empty]).astype(np.int64)},
        what="knn", stacklevel=4,
    )  # fmt: skip
    charges = _filter_units(bound, kind, amount, uniques[adm]) * n_parts[adm]
    res = KnnResult(
        value=value,
        error=float(np.nanmax(err[adm])) if adm.any() else None,
        confidence=1.0 - b,
        mechanism="pnn (laplace_gp draws, docs/noise.md)",
        params={**params, "capped": capped},
        kind=_filter_kind(bound.session),
        metric=("floor", r_min),
        r_min=r_min,
        charges=charges,
        excluded=uniques[~adm].tolist(),
        query_id=qid,
        errors=pd.Series(err[adm], index=pd.Index(uniques[adm], name="user")),
    )
    frame.attrs["geopriv"] = res.to_attr()
    return frame
