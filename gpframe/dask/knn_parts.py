"""``knn`` and ``convex_hull`` on a dask frame split by a public column (``partition=``).

See ``docs/wide-extents.md`` and ``docs/beyond-one-machine.md``. As on the pandas face: each part
runs the per-user mechanism in its own metric CRS (k-PNN, Liang & Yi, 'Concentrated Geo-Privacy'
(2023), Alg. 2; the private hull, Alg. 4) on a user's rows of that part; the call is one query
(one query id) and a user pays the amount once per part they have rows in. On the cluster,
every partition holds whole users (the shuffle on the user column) and splits its rows by the
column (:mod:`gpframe.dask.parts`); one task per partition runs the mechanism once per part it
holds, with the part's ``scale_max``, the part's query point (``knn``) and its own stream per
part. Noise per part as :func:`gpframe.queries.knn.knn_indices` and
:func:`gpframe.queries.hull.private_hulls`. Charge: the amount × the user's number of parts,
committed before the output is returned.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeWarning, InvalidInputError
from gpframe.queries import preview_bounds as _pb

__all__ = ["hull_split", "knn_split"]

_NOTHING = "Nothing was charged."


@dataclass(frozen=True)
class _Call:
    """The public parameters of a split task (never the session)."""

    cols: Any
    op: str  # "knn" or "convex_hull"
    kind: str
    amount: Fraction
    beta: float
    options: dict[str, Any]  # knn: k, gamma0, scan_order, max_cycles; hull: its keywords
    scale_max: tuple[Fraction, ...]  # per part of the call (global order)
    points_m: tuple[Any, ...] = ()  # knn: the query point in each part's metres


def run_split_partition(
    part: pd.DataFrame, i: int, call: _Call, parts: list[int], admitted: np.ndarray, want: str,
    rngs: list[Any],
) -> list[Any]:  # fmt: skip
    """Run the mechanism once per part of one partition (a worker); one record per part.

    ``parts`` gives each of the partition's parts its position in the call's global order.
    """
    from gpframe.dask.partitions import check_same_users, worker_rng
    from gpframe.dask.parts import split_rows
    from gpframe.queries.hull import private_hulls
    from gpframe.queries.knn import knn_indices
    from gpframe.release import protected_columns, release_frame

    if len(part) == 0:
        return []
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpframeWarning)  # the client warns once
        s = split_rows(part, call.cols)
        counts = np.bincount(s.codes, minlength=len(s.users)).astype(np.int64)
        check_same_users(i, s.users, counts, want)
        for jj, (rows, p) in enumerate(zip(s.rows, s.projected, strict=True)):
            j = parts[jj]
            lc, lu = pd.factorize(s.codes[rows], sort=True)
            lu = np.asarray(lu, dtype=np.int64)
            adm = admitted[lu]
            if call.op == "knn":
                o = call.options
                r = knn_indices(
                    p.xy, lc, call.points_m[j], o["k"], kind=call.kind,  # type: ignore[arg-type]
                    amount=call.amount, n_users=len(lu), admitted=adm, gamma0=o["gamma0"],
                    scan_order=o["scan_order"], max_cycles=o["max_cycles"], beta=call.beta,
                    scale_max=call.scale_max[j], rng=worker_rng(rngs[jj]),
                )  # fmt: skip
                live = np.flatnonzero(adm)
                pos = np.concatenate([rows[r.rows[u]] for u in live] or [np.empty(0, np.int64)])
                ranks = np.concatenate([np.arange(1, r.k[u] + 1) for u in live]
                                       or [np.empty(0, np.int64)])  # fmt: skip
                frame = release_frame(
                    s.frame, public=call.cols.public,
                    protected=protected_columns(s.frame, s.located.coords), rows=pos,
                    released={"knn_rank": np.asarray(ranks, dtype=np.int64)}, what="knn",
                )  # fmt: skip
                out.append({
                    "users": lu, "frame": frame, "error": np.asarray(r.error),
                    "labels": [list(s.frame.index[rows[r.rows[u]]]) if adm[u] else None
                               for u in range(len(lu))],
                    "capped": int(sum(int(r.capped[u].sum()) for u in live)),
                    "r_min": float(r.r_min),
                })  # fmt: skip
            else:
                r = private_hulls(
                    p.xy, lc, kind=call.kind, amount=call.amount,  # type: ignore[arg-type]
                    n_users=len(lu), admitted=adm, beta=call.beta, scale_max=call.scale_max[j],
                    rng=worker_rng(rngs[jj]), **call.options,
                )  # fmt: skip
                out.append({
                    "users": lu, "hulls": r.hulls, "k": np.asarray(r.k),
                    "radius": np.asarray(r.radius), "error": np.asarray(r.error),
                    "fallback": np.asarray(r.fallback), "spend": r.spend,
                    "r_min": float(r.r_min),
                })  # fmt: skip
    return out


@dataclass(frozen=True)
class _First:
    """The split first pass as the client holds it, with each user's number of parts."""

    parts: list[Any]
    checks: list[Any]
    c: Any
    n_parts: np.ndarray
    wants: list[str]
    crs_in: Any
    metrics: list[Any]
    described: list[dict[str, Any]]
    worst: Any


def _first_pass(bound: Any) -> _First:
    import dask
    import pyproj

    from gpframe.dask.partitions import by_user, digest
    from gpframe.dask.parts import StatedCrs, combine_split, split_check
    from gpframe.queries.partition_check import describe_part

    cols = bound.cols
    data, shuffled = by_user(bound.ddf, cols)
    if shuffled:
        data = data.persist()
    parts = data.to_delayed()
    checks = list(dask.compute(*[dask.delayed(split_check)(d, cols) for d in parts]))
    c = combine_split(checks, cols.partition)
    n_parts = np.zeros(len(c.users), np.int64)
    for i, ch in enumerate(checks):
        for lu in ch.local_users:
            n_parts[c.offsets[i] + lu] += 1
    metrics = [SimpleMetric(StatedCrs(f.crs_text), f.scale_max, f.noise_inflation)
               for f in c.facts]  # fmt: skip
    described = [describe_part(v, m, f.n_points)
                 for v, m, f in zip(c.values, metrics, c.facts, strict=True)]  # fmt: skip
    worst = metrics[max(range(len(metrics)), key=lambda j: c.facts[j].noise_inflation)]
    crs_in = pyproj.CRS.from_wkt(next(ch.crs_in for ch in checks if ch.crs_in))
    return _First(parts, checks, c, n_parts, [digest(ch.users, ch.counts) for ch in checks],
                  crs_in, metrics, described, worst)  # fmt: skip


@dataclass(frozen=True)
class SimpleMetric:
    """A part's public metric CRS, scale factor and inflation, as a Result states them."""

    crs_m: Any
    scale_max: float
    noise_inflation: float


def _release(bound: Any, fp: _First, call: _Call, rng: Any, alloc: np.ndarray) -> Any:
    """Return the driver's ``compute``: run every partition's parts, charge the allocations."""
    import dask

    from gpframe.dask.partitions import spawn_rng
    from gpframe.ledger.run import Charge

    c, n_all = fp.c, len(fp.c.values)

    def compute(r: Any) -> Any:
        adm = np.asarray(r.admitted, dtype=bool)
        tasks = [
            dask.delayed(run_split_partition)(
                d,
                i,
                call,
                c.index[i],
                adm[c.offsets[i] : c.offsets[i + 1]],
                fp.wants[i],
                [spawn_rng(rng, i * n_all + j) for j in c.index[i]],
            )
            for i, d in enumerate(fp.parts)
        ]
        return Charge(list(dask.compute(*tasks)), np.where(adm, alloc, 0), units=True)

    return compute


def _allocations(bound: Any, kind: str, amount: Fraction, n_parts: np.ndarray) -> np.ndarray:
    """Each user's allocation in ledger units: the amount once per part they are in."""
    from gpframe.accounting.amounts import LedgerUnits

    units, big = bound.session.ledger.units_for("metric", amount, n_parts, kind=kind)
    units = units.copy()
    units[big] = LedgerUnits.MAX
    return units


def knn_split(
    bound: Any, point: Any, k: int, *, rho: Any, eps: Any, compat: Any, gamma0: Any,
    scan_order: Any, max_cycles: int, beta: float, rng: Any, on_exhausted: str = "exclude",
    dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run knn on a split dask frame (see :meth:`gpframe.dask.DaskGeoPriv.knn`)."""
    from gpframe.accounting.filters import charge_for
    from gpframe.dask.driver import settle
    from gpframe.dask.knn import _point_m, client_checks
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import run
    from gpframe.queries import knn as _k
    from gpframe.release import warn_dropped
    from gpframe.results import KnnResult

    session, cols = bound.session, bound.cols
    rng, fk, kind, amount, k_asked, b, g0, order = client_checks(
        bound, k, rho=rho, eps=eps, compat=compat, gamma0=gamma0, scan_order=scan_order,
        max_cycles=max_cycles, beta=beta, rng=rng, on_exhausted=on_exhausted,
    )  # fmt: skip

    fp = _first_pass(bound)
    c = fp.c
    users = c.users
    if not len(users):
        raise InvalidInputError(f"the frame has no rows: nobody to ask. {_NOTHING}")
    kk = min(k_asked, max(int(c.counts.sum()), 1))
    import pyproj

    points, ks = [], []
    for f in c.facts:  # every check and calibration before the ledger is touched
        q = _point_m(point, fp.crs_in, pyproj.CRS(f.crs_m))
        _k._check_extent(q)
        points.append(q)
        ks.append(Fraction(float(f.scale_max)))
    for i, ch in enumerate(fp.checks):
        for j, lc in zip(c.index[i], ch.local_counts, strict=True):
            for n_k in np.unique(np.minimum(lc, kk)).tolist():
                _k.pnn_calibration(_k.call_eps(kind, amount, int(n_k), ks[j]))
    warn_dropped(bound.dropped, "knn", stacklevel=3)
    described = [dict(d, point_m=q.tolist()) for d, q in zip(fp.described, points, strict=True)]
    params = {"k": kk, "gamma0": g0, "scan_order": order, "compat": compat, "beta": b,
              "max_cycles": int(max_cycles), "crs_m": fp.worst.crs_m.to_string(),
              "scale_max": float(fp.worst.scale_max),
              "noise_inflation": float(fp.worst.noise_inflation),
              "partition": str(cols.partition), "partitions": described}  # fmt: skip
    call = _Call(cols=cols, op="knn", kind=kind, amount=amount, beta=b,
                 options={"k": kk, "gamma0": g0, "scan_order": order,
                          "max_cycles": int(max_cycles)},
                 scale_max=tuple(ks), points_m=tuple(points))  # fmt: skip
    alloc = _allocations(bound, kind, amount, fp.n_parts)

    def go(**_: Any) -> Any:
        ran = run(session, ledger_keys(users), alloc, notion="metric", query="knn",
                  params=params, units=True,
                  compute=_release(bound, fp, call, rng, alloc))  # fmt: skip
        adm = np.asarray(ran.admitted, dtype=bool)
        frames, capped = [], 0
        value: dict[Any, list[Any]] = {}
        err = np.full(len(users), np.nan)
        r_min = np.full(len(c.values), 1.0)
        for j in range(len(c.values)):  # the pandas face's order: part by part
            for i, recs in enumerate(ran.value):
                for jj, rec in enumerate(recs):
                    if c.index[i][jj] != j:
                        continue
                    g = c.offsets[i] + rec["users"]
                    frames.append(rec["frame"])
                    capped += rec["capped"]
                    r_min[j] = max(r_min[j], rec["r_min"])
                    for u, lab in zip(g.tolist(), rec["labels"], strict=True):
                        if lab is not None:
                            value.setdefault(users[u], []).extend(lab)
                    err[g] = np.fmax(err[g], rec["error"])
        frame = pd.concat(frames) if len(frames) > 1 else frames[0]
        c_one = float(charge_for(fk, kind, amount))
        rm = float(r_min.min())
        res = KnnResult(
            value=value,
            error=float(np.nanmax(err[adm])) if adm.any() else None,
            confidence=1.0 - b,
            mechanism="pnn (laplace_gp draws, docs/noise.md)",
            params={**params, "capped": capped},
            kind=fk,
            metric=("floor", rm),
            r_min=rm,
            charges=pd.Series(c_one * fp.n_parts[adm], index=pd.Index(users[adm], name="user")),
            excluded=users[~adm].tolist(),
            query_id=ran.query_id,
            errors=pd.Series(err[adm], index=pd.Index(users[adm], name="user")),
        )
        frame.attrs["geopriv"] = res.to_attr()
        return frame

    scale = max(f.scale_max for f in c.facts)
    return settle(
        session,
        "knn",
        go,
        on_exhausted=on_exhausted,
        dry_run=dry_run,
        **_pb.hooks(
            session,
            scale,
            _pb.knn_error,
            least=False,
            kind=kind,
            amount=amount,
            counts=(ledger_keys(users), c.counts),
        ),
    )


def hull_split(
    bound: Any, *, rho: Any, eps: Any, beta: float, k: Any, alpha: Any, k_rule: Any,
    radius_floor_m: Any, rng: Any, on_exhausted: str = "exclude", dry_run: bool = False,
) -> Any:  # fmt: skip
    """Run convex_hull on a split dask frame (see :meth:`gpframe.dask.DaskGeoPriv.convex_hull`).

    One output row per (user, part): the index is the user id, the partition column says
    which part, as on the pandas face.
    """
    import geopandas as gpd
    import pyproj

    from gpframe.accounting.filters import charge_for
    from gpframe.dask.driver import settle
    from gpframe.dask.hull import _OUTPUT, _to_input_crs, client_checks
    from gpframe.ledger.charges import ledger_keys
    from gpframe.ledger.run import run
    from gpframe.queries import hull as _h
    from gpframe.release import release_frame, warn_dropped
    from gpframe.results import HullResult

    session, cols = bound.session, bound.cols
    rng, fk, kind, amount, b, kw = client_checks(
        bound, rho=rho, eps=eps, beta=beta, k=k, alpha=alpha, k_rule=k_rule,
        radius_floor_m=radius_floor_m, rng=rng, on_exhausted=on_exhausted,
    )  # fmt: skip
    name = cols.partition
    if name == cols.user or name in _OUTPUT:
        raise InvalidInputError(
            f"partition={name!r} names a column of the convex_hull output; rename it. {_NOTHING}"
        )
    fp = _first_pass(bound)
    c = fp.c
    users = c.users
    ks = [Fraction(float(f.scale_max)) for f in c.facts]
    for i, ch in enumerate(fp.checks):  # every check before the ledger is touched
        for j, lc in zip(c.index[i], ch.local_counts, strict=True):
            _h.private_hulls(np.zeros((1, 2)), np.zeros(1, np.int64), kind=kind, amount=amount,
                             admitted=np.zeros(1, bool), beta=b, scale_max=ks[j], **kw)  # fmt: skip
            _h.hull_preflight(kind, amount, b, alpha, k, radius_floor_m, lc,
                              float(c.facts[j].scale_max))  # fmt: skip
    warn_dropped(bound.dropped, "convex_hull", stacklevel=3)
    params = {"beta": b, "k": k, "alpha": float(alpha), "k_rule": k_rule,
              "radius_floor_m": float(radius_floor_m), "crs_m": fp.worst.crs_m.to_string(),
              "scale_max": float(fp.worst.scale_max),
              "noise_inflation": float(fp.worst.noise_inflation),
              "partition": str(name), "partitions": fp.described}  # fmt: skip
    call = _Call(cols=cols, op="convex_hull", kind=kind, amount=amount, beta=b, options=kw,
                 scale_max=tuple(ks))  # fmt: skip
    alloc = _allocations(bound, kind, amount, fp.n_parts)

    def go(**_: Any) -> Any:
        ran = run(session, ledger_keys(users), alloc, notion="metric", query="convex_hull",
                  params=params, units=True,
                  compute=_release(bound, fp, call, rng, alloc))  # fmt: skip
        adm = np.asarray(ran.admitted, dtype=bool)
        out: dict[str, list[Any]] = {n: [] for n in ("user", "part", "k", "radius_m", "error_m",
                                                     "fallback", "geometry")}  # fmt: skip
        r_min = np.full(len(c.values), 1.0)
        spend = None
        for j in range(len(c.values)):  # the pandas face's order: part by part
            crs_m = pyproj.CRS(c.facts[j].crs_m)
            for i, recs in enumerate(ran.value):
                for jj, rec in enumerate(recs):
                    if c.index[i][jj] != j:
                        continue
                    g = c.offsets[i] + rec["users"]
                    idx = np.flatnonzero(adm[g])
                    r_min[j] = max(r_min[j], rec["r_min"])
                    spend = rec["spend"] if spend is None else spend
                    geoms = gpd.GeoSeries(rec["hulls"][idx], crs=crs_m)
                    if not crs_m.equals(fp.crs_in):
                        geoms = _to_input_crs(geoms, crs_m, fp.crs_in)
                    out["user"] += users[g[idx]].tolist()
                    out["part"] += [c.values[j]] * idx.size
                    for col, key in (("k", "k"), ("radius_m", "radius"), ("error_m", "error"),
                                     ("fallback", "fallback")):  # fmt: skip
                        out[col] += np.asarray(rec[key])[idx].tolist()
                    out["geometry"] += list(geoms.array)
        rows = pd.DataFrame({cols.user: out["user"], name: out["part"]},
                            index=pd.Index(out["user"], name="user"))  # fmt: skip
        gdf = release_frame(
            rows, public=(cols.user, name),
            released={n: np.asarray(out[n]) for n in ("k", "radius_m", "error_m", "fallback")},
            geometry=np.asarray(out["geometry"], dtype=object), crs=fp.crs_in,
            what="convex_hull",
        )  # fmt: skip
        err = np.asarray(out["error_m"], dtype=np.float64)
        rm = float(r_min.min())
        c_one = float(charge_for(fk, kind, amount))
        res = HullResult(
            value=gdf,
            error=float(np.nanmax(err)) if err.size else None,
            confidence=1.0 - b,
            mechanism="gaussian_cgp + pnn" if kind == "cgp" else "planar_laplace + pnn",
            params={**params, "spend": {n: float(v) for n, v in (spend or {}).items()}},
            kind=fk,
            metric=("floor", rm),
            r_min=rm,
            charges=pd.Series(c_one * fp.n_parts[adm], index=pd.Index(users[adm])),
            excluded=users[~adm].tolist(),
            query_id=ran.query_id,
        )
        gdf.attrs["geopriv"] = res.to_attr()
        return gdf

    scale = max(f.scale_max for f in c.facts)
    return settle(
        session,
        "convex_hull",
        go,
        on_exhausted=on_exhausted,
        dry_run=dry_run,
        **_pb.hooks(
            session,
            scale,
            _pb.hull_error_known,
            least=False,
            kind=kind,
            amount=amount,
            counts=(ledger_keys(users), c.counts),
        ),
    )
