"""Grid mean/variance at an equal total ε per user: gpframe vs PipelineDP and OpenDP.

Question: with the same total privacy loss per user for the whole grid, how accurate are the
per-H3-cell mean and variance of a bounded value (vessel speed) from gpframe's two modes and from
the DP libraries, and how fast?

Data: AIS vessel tracks of New York Harbor (U.S. Coast Guard / MarineCadastre.gov, public domain),
the vessel (``mmsi``) is the user, ``speed_mps`` clamped to [0, 15] m/s is the value.
``--data shipped`` uses the week of tracks shipped with gpframe
(``gp.datasets.load("ais_nyharbor_week")``: one fix per vessel per half hour, 10k fixes);
``--data PATH`` takes any parquet with ``mmsi``, ``lat``, ``lon`` and the ``--value`` column,
e.g. the full tracks file ``ais_nyharbor_tracks.parquet`` (181k fixes) of the project's data
folder, which is the default when it exists (else the shipped week).

Methods (each given the same total ε per user; every occupied cell is a public partition):

Every method gets the H3 cells precomputed (column ``cell``), so wall times compare the DP work.

* ``gp-public``: ``grid_stats(epsilon_per_user=E, occupancy="public")`` (no tuning knob).
  With the default ``shrink=True`` the means are pooled (empirical Bayes, post-processing) and
  cells left unreleased carry the pooled centre instead of NaN; ``--no-shrink`` runs both gpframe
  modes with ``shrink=False`` (NaN cells then score the midpoint, as for the peers).
* ``gp-private``: ``grid_stats(epsilon_per_user=E, occupancy="private", max_cells=L,
  max_per_cell=C)``.
* ``pipelinedp``: PipelineDP 0.3.1 ``DPEngine.aggregate`` with MEAN and VARIANCE, Laplace noise,
  ``max_partitions_contributed=L``, ``max_contributions_per_partition=C``, public partitions,
  ``NaiveBudgetAccountant(total_epsilon=E)`` (its docs' recipe).
* ``opendp``: per-user averages with OpenDP 0.16's vector Laplace (``make_laplace``): each user
  keeps L random cells and one average per cell; per cell a count, a centred sum and a centred
  sum of squares, E/3 each, with L1 sensitivities L, L·H and L·H² (add/remove one user).

The caps (L, C) of the three bounded methods are tuned by **oracle** on a grid (the best median
error of the mean over the runs is kept): generous to them. Unreleased cells (NaN) are scored as
the data-free answer (the midpoint for the mean, W²/12 for the variance). Prints per resolution
and ε: median absolute error of mean and variance, share of cells with the mean within 1 m/s,
share released, wall time, and the ratios to the best peer (mean, variance, time) and to the
data-free constant.
Writes ``out/grid_vs_peers.csv``.

    PYTHONPATH=. python benchmarks/accuracy/grid_vs_peers.py --quick
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

L_, U_ = 0.0, 15.0
W = U_ - L_
DATA = Path("/work/shared/data/ais_nyharbor/ais_nyharbor_tracks.parquet")
SHRINK = True  # gpframe's shrinkage (``--no-shrink``)


def load(path: Path | str, value: str, res: int) -> pd.DataFrame:
    import h3.api.numpy_int as h3n

    if str(path) == "shipped":
        import gpframe as gp

        d = pd.DataFrame(gp.datasets.load("ais_nyharbor_week")[["mmsi", "lat", "lon", value]])
        d = d.dropna()
    else:
        d = pd.read_parquet(path, columns=["mmsi", "lat", "lon", value]).dropna()
    d = d.rename(columns={value: "v"})
    d["v"] = d["v"].clip(L_, U_)
    d["cell"] = np.array(
        [
            h3n.latlng_to_cell(a, b, res)
            for a, b in zip(d.lat.to_numpy(), d.lon.to_numpy(), strict=True)
        ],
        dtype=np.uint64,
    )
    return d.reset_index(drop=True)


def truth(d: pd.DataFrame) -> pd.DataFrame:
    g = d.groupby("cell")["v"]
    return pd.DataFrame({"mean": g.mean(), "var": g.var(ddof=0)})


def score(est: pd.DataFrame, tr: pd.DataFrame) -> dict[str, float]:
    e = est.reindex(tr.index)
    released = e["mean"].notna()
    m = e["mean"].fillna((L_ + U_) / 2)
    v = e["var"].fillna(W * W / 12)
    am = (m - tr["mean"]).abs()
    av = (v - tr["var"]).abs()
    return {
        "mean_mae": float(am.median()),
        "var_mae": float(av.median()),
        "within_1": float((am <= 1.0).mean()),
        "released": float(released.mean()),
    }


# ------------------------------------------------------------------------------------------------
# the methods: each returns a frame indexed by cell with columns mean, var


def gp_public(d: pd.DataFrame, eps: float, res: int, **_: int) -> pd.DataFrame:
    import h3

    import gpframe as gp

    s = gp.Session(central=gp.DP(epsilon=1e4))
    b = d.geopriv(s, user="mmsi", x="lon", y="lat", crs="EPSG:4326")
    out = b.grid_stats(value="v", bounds=(L_, U_), epsilon_per_user=eps, cells="cell",
                       occupancy="public", progress=False, shrink=SHRINK)  # fmt: skip
    idx = [h3.str_to_int(c) for c in out.index]
    return pd.DataFrame({"mean": out["mean"].to_numpy(), "var": out["variance"].to_numpy()},
                        index=pd.Index(np.array(idx, dtype=np.uint64)))  # fmt: skip


def gp_private(d: pd.DataFrame, eps: float, res: int, L: int, C: int) -> pd.DataFrame:
    import h3

    import gpframe as gp

    s = gp.Session(central=gp.DP(epsilon=1e4))
    b = d.geopriv(s, user="mmsi", x="lon", y="lat", crs="EPSG:4326")
    cells = np.unique(d["cell"].to_numpy())
    out = b.grid_stats(value="v", bounds=(L_, U_), epsilon_per_user=eps, cells="cell",
                       occupancy="private", public_cells=cells, max_cells=L, max_per_cell=C,
                       progress=False, shrink=SHRINK)  # fmt: skip
    idx = [h3.str_to_int(c) for c in out.index]
    return pd.DataFrame({"mean": out["mean"].to_numpy(), "var": out["variance"].to_numpy()},
                        index=pd.Index(np.array(idx, dtype=np.uint64)))  # fmt: skip


def pipelinedp(d: pd.DataFrame, eps: float, res: int, L: int, C: int) -> pd.DataFrame:
    import pipeline_dp

    acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=0)
    engine = pipeline_dp.DPEngine(acc, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.MEAN, pipeline_dp.Metrics.VARIANCE],
        max_partitions_contributed=L, max_contributions_per_partition=C,
        min_value=L_, max_value=U_,
    )  # fmt: skip
    ext = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
        value_extractor=lambda r: r[2],
    )  # fmt: skip
    rows = list(zip(d["mmsi"].tolist(), d["cell"].tolist(), d["v"].tolist(), strict=True))
    cells = sorted(set(d["cell"].tolist()))
    res_ = engine.aggregate(rows, params, ext, public_partitions=cells)
    acc.compute_budgets()
    out = {k: (v.mean, v.variance) for k, v in res_}
    idx = np.array(list(out), dtype=np.uint64)
    vals = np.array(list(out.values()), dtype=float).reshape(-1, 2)
    return pd.DataFrame({"mean": np.clip(vals[:, 0], L_, U_),
                         "var": np.clip(vals[:, 1], 0, W * W / 4)}, index=idx)  # fmt: skip


def opendp(d: pd.DataFrame, eps: float, res: int, L: int, C: int = 1) -> pd.DataFrame:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    rng = np.random.default_rng()  # the bounding's random cell choice (OpenDP leaves it to us)
    H = W / 2
    c = L_ + H
    pu = d.groupby(["mmsi", "cell"])["v"].agg(
        a="mean", s=lambda x: float(np.mean((x - c) ** 2))
    ).reset_index()  # fmt: skip
    pu["r"] = rng.random(len(pu))
    pu = pu[pu.groupby("mmsi")["r"].rank(method="first") <= L]
    cells = np.unique(d["cell"].to_numpy())
    j = np.searchsorted(cells, pu["cell"].to_numpy())
    n = np.bincount(j, minlength=cells.size).astype(float)
    s1 = np.bincount(j, weights=pu["a"].to_numpy() - c, minlength=cells.size)
    s2 = np.bincount(j, weights=pu["s"].to_numpy(), minlength=cells.size)
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    met = dp.l1_distance(T=float)
    e = eps / 3
    nn = np.asarray(dp.m.make_laplace(dom, met, scale=L / e)(n.tolist()))
    n1 = np.asarray(dp.m.make_laplace(dom, met, scale=L * H / e)(s1.tolist()))
    n2 = np.asarray(dp.m.make_laplace(dom, met, scale=L * H * H / e)(s2.tolist()))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = nn >= 1
        m = np.where(ok, np.clip(c + n1 / nn, L_, U_), np.nan)
        q = np.clip(n2 / nn, 0, H * H)
        v = np.where(ok, np.clip(q - (m - c) ** 2, 0, W * W / 4), np.nan)
    return pd.DataFrame({"mean": m, "var": v}, index=cells)


METHODS = {"gp-public": gp_public, "gp-private": gp_private, "pipelinedp": pipelinedp,
           "opendp": opendp}  # fmt: skip
CAPS = {
    "gp-public": [(0, 0)],
    "gp-private": [(L, C) for L in (1, 2, 4, 8) for C in (1, 4, 16, 64)],
    "pipelinedp": [(L, C) for L in (1, 2, 4, 8) for C in (1, 4, 16, 64)],
    "opendp": [(L, 1) for L in (1, 2, 3, 4, 6, 8)],
}


def run_method(name: str, d: pd.DataFrame, tr: pd.DataFrame, eps: float, res: int,
               runs: int) -> dict[str, float]:  # fmt: skip
    best: dict[str, float] | None = None
    for L, C in CAPS[name]:
        scores, times = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            est = METHODS[name](d, eps, res, L=L, C=C)
            times.append(time.perf_counter() - t0)
            scores.append(score(est, tr))
        agg = {k: float(np.median([s[k] for s in scores])) for k in scores[0]}
        agg["seconds"] = float(np.median(times))
        agg["L"], agg["C"] = L, C
        if best is None or agg["mean_mae"] < best["mean_mae"]:
            best = agg
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--data",
        default=str(DATA) if DATA.exists() else "shipped",
        help="'shipped' (the week packaged with gpframe) or a parquet path",
    )
    ap.add_argument("--value", default="speed_mps")
    ap.add_argument("--res", type=int, nargs="+", default=[6, 7])
    ap.add_argument("--eps", type=float, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--quick", action="store_true", help="res 6, ε 4 and 16, one run")
    ap.add_argument("--no-shrink", action="store_true", help="gpframe with shrink=False")
    a = ap.parse_args()
    global SHRINK
    SHRINK = not a.no_shrink
    if a.quick:
        a.res, a.eps, a.runs = [6], [4.0, 16.0], 1
    import gpframe.frame.accessor  # noqa: F401  (registers df.geopriv)

    warnings.simplefilter("ignore")  # the peers' own warnings (e.g. PipelineDP's)
    rows = []
    for res in a.res:
        d = load(a.data, a.value, res)
        tr = truth(d)
        free = score(pd.DataFrame({"mean": np.nan, "var": np.nan}, index=tr.index), tr)
        print(f"\nres {res}: {d.mmsi.nunique()} users, {len(d)} rows, {len(tr)} cells; "
              f"data-free constant: mean MAE {free['mean_mae']:.3f}, variance MAE "
              f"{free['var_mae']:.2f}")  # fmt: skip
        hdr = (f"{'eps':>5} {'method':<11} {'L,C':>6} {'mean MAE':>9} {'var MAE':>8} "
               f"{'≤1m/s':>6} {'rel.':>5} {'sec':>6} {'/best peer':>10} {'/const':>7} "
               f"{'var/peer':>8} {'t/peer':>7}")  # fmt: skip
        print(hdr)
        for eps in a.eps:
            got = {m: run_method(m, d, tr, eps, res, a.runs) for m in a.methods}
            peers = [m for m in got if not m.startswith("gp-")]
            bp = min((got[m]["mean_mae"] for m in peers), default=np.nan)
            bpv = min((got[m]["var_mae"] for m in peers), default=np.nan)
            bps = min((got[m]["seconds"] for m in peers), default=np.nan)
            for m, g in got.items():
                r = g["mean_mae"] / bp
                print(f"{eps:>5g} {m:<11} {g['L']:>2},{g['C']:<3} {g['mean_mae']:>9.3f} "
                      f"{g['var_mae']:>8.2f} {g['within_1']:>6.2f} {g['released']:>5.2f} "
                      f"{g['seconds']:>6.2f} {r:>10.2f} {g['mean_mae'] / free['mean_mae']:>7.2f} "
                      f"{g['var_mae'] / bpv:>8.2f} {g['seconds'] / bps:>7.2f}")  # fmt: skip
                rows.append({"res": res, "eps": eps, "method": m, **g,
                             "ratio_best_peer": r, "ratio_const": g["mean_mae"] / free["mean_mae"],
                             "var_ratio_best_peer": g["var_mae"] / bpv,
                             "time_ratio_fastest_peer": g["seconds"] / bps})  # fmt: skip
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "grid_vs_peers.csv", index=False)
    print(f"\nwrote {out / 'grid_vs_peers.csv'}")


if __name__ == "__main__":
    main()
