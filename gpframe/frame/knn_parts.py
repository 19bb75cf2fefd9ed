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


def hull_partitioned(
    bound: Any, *, kind: str, amount: Fraction, b: float, hull_kw: dict[str, Any], rng: Any,
    helpers: tuple[Callable[..., Any], ...],
) -> Any:  # fmt: skip
    """One private convex hull per user and part, under one query id.

    Each part runs Liang & Yi's private hull (Alg. 4) on the user's rows of that part in its own
    metric CRS (noise scale as :func:`gpframe.queries.hull.private_hulls` with the part's
    ``scale_max``); a user pays the amount once per part they have rows in. One output row per
    (user, part): the index is the user id, the partition column says which part. ``helpers``
    are :mod:`gpframe.frame.knn`'s ``(_filter_kind, _filter_units, _hulls_to_input_crs)``.
    """
    import geopandas as gpd

    from gpframe.frame.partition import describe
    from gpframe.queries import hull as _h
    from gpframe.queries.knn import _check_extent
    from gpframe.release import release_frame
    from gpframe.results import HullResult

    _filter_kind, _filter_units, _to_input = helpers
    parts = bound._parts()
    codes, uniques, n_parts = part_users(bound, parts)
    if not len(uniques):
        raise InvalidInputError(f"the frame has no rows: nobody to ask. {_NOTHING}")
    if bound.partition == bound.user or bound.partition in ("k", "radius_m", "error_m", "fallback"):
        raise InvalidInputError(
            f"partition={bound.partition!r} names a column of the convex_hull output; rename "
            f"it. {_NOTHING}"
        )
    prepared = []
    for part in parts:  # every check before the ledger is touched
        p = part.projected
        lc, lu = pd.factorize(codes[part.rows], sort=False)
        lu = np.asarray(lu, dtype=np.int64)
        counts = np.bincount(lc, minlength=len(lu))
        ks = Fraction(float(p.scale_max))
        _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=amount,
                         admitted=np.zeros(1, bool), beta=b, scale_max=ks, **hull_kw)  # fmt: skip
        _h.hull_preflight(kind, amount, b, hull_kw["alpha"], hull_kw["k"],
                          hull_kw["radius_floor_m"], counts, float(p.scale_max))  # fmt: skip
        _check_extent(p.xy)
        prepared.append((part, lc.astype(np.int64), lu, ks))
    worst = max(parts, key=lambda q: q.projected.noise_inflation).projected
    params = {"beta": b, "k": hull_kw["k"], "alpha": float(hull_kw["alpha"]),
              "k_rule": hull_kw["k_rule"], "radius_floor_m": float(hull_kw["radius_floor_m"]),
              "crs_m": worst.crs_m.to_string(), "scale_max": float(worst.scale_max),
              "noise_inflation": float(worst.noise_inflation),
              "partition": str(bound.partition), "partitions": describe(parts)}  # fmt: skip
    alloc = reserve_parts(bound, kind, amount, n_parts)
    from gpframe.ledger.charges import ledger_keys

    def compute(r: Any) -> Charge[Any]:
        adm = np.asarray(r.admitted, dtype=bool)
        outs = [
            _h.private_hulls(part.projected.xy, lc, kind=kind, amount=amount, n_users=len(lu),
                             admitted=adm[lu], beta=b, scale_max=ks, rng=rng, **hull_kw)
            for part, lc, lu, ks in prepared
        ]  # fmt: skip
        return Charge(outs, np.where(adm, alloc, 0), units=True)

    ran = run(bound.session, ledger_keys(uniques), alloc, notion="metric", query="convex_hull",
              params=params, units=True, compute=compute)  # fmt: skip
    outs, adm, qid = ran.value, ran.admitted, ran.query_id
    cols: dict[str, list[Any]] = {c: [] for c in ("user", "part", "k", "radius_m", "error_m",
                                                  "fallback", "geometry")}  # fmt: skip
    r_min = np.inf
    for (part, _lc, lu, _ks), out in zip(prepared, outs, strict=True):
        p = part.projected
        r_min = min(r_min, float(out.r_min))
        idx = np.flatnonzero(adm[lu])
        geoms = gpd.GeoSeries(out.hulls[idx], crs=p.crs_m)
        if not p.crs_m.equals(p.crs_in):
            geoms = _to_input(geoms, p.crs_m, p.crs_in)
        cols["user"] += uniques[lu[idx]].tolist()
        cols["part"] += [part.value] * idx.size
        for name, arr in (("k", out.k), ("radius_m", out.radius), ("error_m", out.error),
                          ("fallback", out.fallback)):  # fmt: skip
            cols[name] += np.asarray(arr)[idx].tolist()
        cols["geometry"] += list(geoms.array)
    # one row per (user, part), from nothing: the public user id and part, the released hull
    rows = pd.DataFrame({bound.user: cols["user"], bound.partition: cols["part"]},
                        index=pd.Index(cols["user"], name="user"))  # fmt: skip
    gdf = release_frame(
        rows, public=(bound.user, bound.partition),
        released={name: np.asarray(cols[name]) for name in ("k", "radius_m", "error_m",
                                                            "fallback")},
        geometry=np.asarray(cols["geometry"], dtype=object), crs=bound.located.crs_in,
        what="convex_hull",
    )  # fmt: skip
    spend = {name: float(v) for name, v in outs[0].spend.items()} if outs else {}
    err = np.asarray(cols["error_m"], dtype=np.float64)
    res = HullResult(
        value=gdf,
        error=float(np.nanmax(err)) if err.size else None,
        confidence=1.0 - b,
        mechanism="gaussian_cgp + pnn" if kind == "cgp" else "planar_laplace + pnn",
        params={**params, "spend": spend},
        kind=_filter_kind(bound.session),
        metric=("floor", r_min),
        r_min=r_min,
        charges=_filter_units(bound, kind, amount, uniques[adm]) * n_parts[adm],
        excluded=uniques[~adm].tolist(),
        query_id=qid,
    )
    gdf.attrs["geopriv"] = res.to_attr()
    return gdf
