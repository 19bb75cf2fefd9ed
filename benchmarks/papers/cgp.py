"""Reproduce the trends of the identity, kNN and hull figures of "Concentrated Geo-Privacy".

Spec: concentrated-geo-privacy.md §9.1 (protocol: GP vs CGP Basic, k-PNN, PCH and the Basic +
post-processing baselines; GP at the harness budget ε_δ(ρ)), §9.3 (synthetic generator and peer
numbers), §6 (identity errors: CGP ℓ2 = n/√ρ, GP/CGP gap ≈ √n).

Data:

* synthetic, spec §9.3 generator (10 km box, downtown Gaussian, Gamma steps, jitter, permuted;
  ``benchmarks/speed/neighbours.synthetic``); query points of independent walks snapped to 1 m
  cells.
* AIS New York Harbor (``ais_nyharbor_tracks``): each vessel (``mmsi``) is one user, its fixes the
  tuple, projected to UTM by gpframe; vessels with ≥ 200 fixes. Query points: the World Port Index
  ports within the harbour box (public points).

Figures (``benchmarks/papers/out/``): ``cgp_privatize.png`` (tuple ℓ2 and max error vs ρ, GP vs
CGP, with the √n gap), ``cgp_knn.png`` (median kNN ratio vs ρ for k = 1, 4, 16 and vs n),
``cgp_hull.png`` (median Jaccard vs ρ and vs n); ``cgp_results.csv`` holds every measurement.
Runs the array-level algorithms the ledger-backed queries call, with fixed seeds (benchmark
only; the seeded bit source is enabled for reproducibility). ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import time
import warnings

import numpy as np
import pandas as pd
import shapely

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "speed"))

from neighbours import synthetic

from gpframe import mechanisms as mech
from gpframe.queries.hull import private_hulls
from gpframe.queries.knn import knn_indices
from gpframe.testing import enable_seeded, seeded_rng

OUT = pathlib.Path(__file__).resolve().parent / "out"
DATA = pathlib.Path(os.environ.get("GPFRAME_DATA", "/work/shared/data"))
RHOS = [5e-8, 9e-7, 5e-5, 2.5e-4, 5e-4]
KS = (1, 4, 16)
NY_BOX = (-74.30, 40.45, -73.70, 40.95)  # lon/lat box of the harbour (public)


def eps_delta(rho: float, s: float = 10.4, delta: float = 1e-10) -> float:
    """The harness GP budget ε_δ(ρ) of spec §2.2 / §9.1 (for plots only, P-B5)."""
    return s / (s - 1) * 2 * math.sqrt(rho * math.log(2 / ((s + 1) * delta)))


def _seed() -> int:
    _seed.i += 1  # type: ignore[attr-defined]
    return _seed.i  # type: ignore[attr-defined]


_seed.i = 1000  # type: ignore[attr-defined]


def knn_ratio(xy: np.ndarray, q: np.ndarray, rows: np.ndarray, k: int) -> float:
    d = np.hypot(*(xy - q).T)
    best = np.sort(d)[:k].sum()
    return float(d[rows].sum() / max(best, 1e-9))


def jaccard(h: shapely.Geometry, true: shapely.Geometry) -> float:
    u = h.union(true).area
    return float(h.intersection(true).area / u) if u > 0 else 0.0


def basic(xy: np.ndarray, rho: float, gp: bool) -> np.ndarray:
    """GP / CGP Basic (§6.1, §6.2): every point at ε/n or ρ/n."""
    n = len(xy)
    if gp:
        return np.asarray(mech.planar_laplace(xy, eps=eps_delta(rho) / n, rng=seeded_rng(_seed())))
    return np.asarray(mech.gaussian_cgp(xy, rho=rho / n, rng=seeded_rng(_seed())))


# ------------------------------------------------------------------------------------- datasets


def synthetic_sets(n: int, reps: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rs = np.random.default_rng(seed)  # true data only
    return [(synthetic(n, rs), synthetic(1, rs)[0].round() + 0.5) for _ in range(reps)]


def ais_sets(min_fixes: int = 200) -> tuple[list[np.ndarray], np.ndarray]:
    """Per vessel its projected fixes (metres), and the NY ports as query points (same CRS)."""
    from pyproj import Transformer

    from gpframe.geo import resolve_points

    df = pd.read_parquet(DATA / "ais_nyharbor" / "ais_nyharbor_tracks.parquet",
                         columns=["mmsi", "lon", "lat"])  # fmt: skip
    proj = resolve_points(df, user="mmsi", lon="lon", lat="lat", crs="EPSG:4326")
    users = np.asarray(proj.users)
    tuples = []
    for u in pd.unique(users):
        xy = proj.xy[users == u]
        if len(xy) >= min_fixes:
            tuples.append(xy)
    ports = pd.read_parquet(DATA / "world_ports" / "world_ports.parquet", columns=["lon", "lat"])
    lo0, la0, lo1, la1 = NY_BOX
    ports = ports[ports.lon.between(lo0, lo1) & ports.lat.between(la0, la1)]
    tr = Transformer.from_crs("EPSG:4326", proj.crs_m, always_xy=True)
    px, py = tr.transform(ports.lon.to_numpy(), ports.lat.to_numpy())
    return tuples, np.column_stack([px, py])


# ---------------------------------------------------------------------------------- experiments


def run_privatize(rows: list[dict], sets: dict[str, list[np.ndarray]]) -> None:
    for name, tuples in sets.items():
        for rho in RHOS:
            for xy in tuples:
                n = len(xy)
                for method, gp in (("CGP Basic", False), ("GP Basic", True)):
                    err = np.hypot(*(basic(xy, rho, gp) - xy).T)
                    base = dict(exp="privatize", data=name, method=method, rho=rho, n=n, k=0)
                    rows.append({**base, "metric": "l2", "value": float(np.sqrt((err**2).sum()))})
                    rows.append({**base, "metric": "max", "value": float(err.max())})


def run_knn(rows: list[dict], name: str, tuples: list[np.ndarray], queries: np.ndarray,
            rhos: list[float], ks=KS, basic_too: bool = True) -> None:  # fmt: skip
    """All tuples are users of one k-PNN call per (query, ρ, k): the batched engine."""
    codes = np.concatenate([np.full(len(t), i) for i, t in enumerate(tuples)])
    allxy = np.concatenate(tuples)
    off = np.concatenate([[0], np.cumsum([len(t) for t in tuples])[:-1]])
    for rho in rhos:
        # one Basic release per tuple and ρ, post-processed for every query (benchmark only)
        noisy = (
            {gp: [basic(t, rho, gp) for t in tuples] for gp in (False, True)} if basic_too else {}
        )
        for q in queries:
            for k in ks:
                for method, kind, amt in (
                    ("CGP k-PNN", "cgp", rho),
                    ("GP k-PNN", "gp", eps_delta(rho)),
                ):
                    out = knn_indices(
                        allxy, codes, q, k, kind=kind, amount=amt, rng=seeded_rng(_seed())
                    )
                    for i, t in enumerate(tuples):
                        rows.append(
                            dict(
                                exp="knn",
                                data=name,
                                method=method,
                                rho=rho,
                                n=len(t),
                                k=k,
                                metric="ratio",
                                value=knn_ratio(t, q, out.rows[i] - off[i], k),
                            )
                        )
                for gp, method in ((False, "CGP Basic + kNN"), (True, "GP Basic + kNN")):
                    if not basic_too:
                        continue
                    for t, y in zip(tuples, noisy[gp], strict=True):
                        kk = min(k, len(t))
                        rows_ = np.argsort(np.hypot(*(y - q).T))[:kk]
                        v = knn_ratio(t, q, rows_, kk)
                        rows.append(dict(exp="knn", data=name, method=method, rho=rho,
                                         n=len(t), k=k, metric="ratio", value=v))  # fmt: skip


def run_hull(rows: list[dict], name: str, tuples: list[np.ndarray], rhos: list[float]) -> None:
    codes = np.concatenate([np.full(len(t), i) for i, t in enumerate(tuples)])
    allxy = np.concatenate(tuples)
    trues = [shapely.convex_hull(shapely.multipoints(t)) for t in tuples]
    for rho in rhos:
        for method, kind, amt in (("CGP PCH", "cgp", rho), ("GP PCH", "gp", eps_delta(rho))):
            out = private_hulls(allxy, codes, kind=kind, amount=amt, rng=seeded_rng(_seed()))
            for i, t in enumerate(tuples):
                rows.append(dict(exp="hull", data=name, method=method, rho=rho, n=len(t),
                                 k=int(out.k[i]), metric="jaccard",
                                 value=jaccard(out.hulls[i], trues[i])))  # fmt: skip
        for gp, method in ((False, "CGP Basic + hull"), (True, "GP Basic + hull")):
            for t, true in zip(tuples, trues, strict=True):
                h = shapely.convex_hull(shapely.multipoints(basic(t, rho, gp)))
                rows.append(dict(exp="hull", data=name, method=method, rho=rho, n=len(t), k=0,
                                 metric="jaccard", value=jaccard(h, true)))  # fmt: skip


# ------------------------------------------------------------------------------------- plotting


def _med(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    g = df.groupby(by)["value"]
    return pd.DataFrame(
        {"med": g.median(), "p25": g.quantile(0.25), "p75": g.quantile(0.75)}
    ).reset_index()


def plot(df: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # identity
    pv = df[df.exp == "privatize"]
    datas = list(pd.unique(pv.data))
    fig, axes = plt.subplots(1, 2 * len(datas), figsize=(5 * 2 * len(datas), 4))
    for j, name in enumerate(datas):
        for m_i, metric in enumerate(("l2", "max")):
            ax = axes[2 * j + m_i]
            s = _med(pv[(pv.data == name) & (pv.metric == metric)], ["method", "rho"])
            for method, g in s.groupby("method"):
                ax.errorbar(
                    g.rho,
                    g.med,
                    yerr=[g.med - g.p25, g.p75 - g.med],
                    marker="o",
                    label=method,
                    capsize=3,
                )
            if metric == "l2":
                nn = pv[pv.data == name].n.median()
                r = np.array(RHOS)
                ax.plot(r, nn / np.sqrt(r), "k:", label=f"n/√ρ (n={nn:.0f})")
            ax.set(xscale="log", yscale="log", xlabel="ρ (m⁻²)", ylabel=f"{metric} error (m)",
                   title=f"privatize, {name}: {metric}")  # fmt: skip
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "cgp_privatize.png", dpi=110)
    plt.close(fig)

    # kNN
    kn = df[(df.exp == "knn")]
    panels = [
        (d, k) for d in pd.unique(kn.data) for k in KS if ((kn.data == d) & (kn.k == k)).any()
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4), squeeze=False)
    for ax, (name, k) in zip(axes[0], panels, strict=True):
        sub = kn[(kn.data == name) & (kn.k == k)]
        xcol = "rho" if sub.rho.nunique() > 1 else "n"
        s = _med(sub, ["method", xcol])
        for method, g in s.groupby("method"):
            ax.errorbar(
                g[xcol],
                g.med,
                yerr=[g.med - g.p25, g.p75 - g.med],
                marker="o",
                label=method,
                capsize=3,
            )
        ax.set(xscale="log", yscale="log", xlabel="ρ (m⁻²)" if xcol == "rho" else "n",
               ylabel="Σ returned / Σ true kNN distance", title=f"kNN {name}, k={k}")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "cgp_knn.png", dpi=110)
    plt.close(fig)

    # hull
    hu = df[df.exp == "hull"]
    names = list(pd.unique(hu.data))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        sub = hu[hu.data == name]
        xcol = "rho" if sub.rho.nunique() > 1 else "n"
        s = _med(sub, ["method", xcol])
        for method, g in s.groupby("method"):
            ax.errorbar(
                g[xcol],
                g.med,
                yerr=[g.med - g.p25, g.p75 - g.med],
                marker="o",
                label=method,
                capsize=3,
            )
        xl = "ρ (m⁻²)" if xcol == "rho" else "n"
        ax.set(xscale="log", xlabel=xl, ylabel="Jaccard vs true hull",
               ylim=(-0.02, 1.02), title=f"convex hull, {name}")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "cgp_hull.png", dpi=110)
    plt.close(fig)


def headline(df: pd.DataFrame) -> None:
    pv = df[(df.exp == "privatize") & (df.metric == "l2")]
    for name, g in pv.groupby("data"):
        m = g.groupby(["method", "rho"]).value.median().unstack(0)
        n = g.n.median()
        gap = (m["GP Basic"] / m["CGP Basic"]).median()
        rel = (
            g[g.method == "CGP Basic"].value
            / (g[g.method == "CGP Basic"].n / np.sqrt(g[g.method == "CGP Basic"].rho))
        ).median()
        print(f"privatize [{name}] median n={n:.0f}: GP(ε_δ)/CGP l2 error ratio {gap:.1f} = "
              f"{gap / math.sqrt(n):.3f}·√n (theory √6/(ε_δ/√ρ) = 0.240); CGP l2 / (n/√ρ) = "
              f"{rel:.3f}")  # fmt: skip
    kn = df[df.exp == "knn"]
    for (name, k), g in kn.groupby(["data", "k"]):
        if g.rho.nunique() < 2:
            continue
        m = g.groupby(["method", "rho"]).value.median().unstack(0)
        print(f"knn [{name}] k={k} median ratio at ρ=" + ", ".join(
            f"{r:g}: " + " / ".join(f"{c} {m.loc[r, c]:.2f}" for c in m.columns)
            for r in (min(g.rho), max(g.rho))))  # fmt: skip
    hu = df[df.exp == "hull"]
    for name, g in hu.groupby("data"):
        if g.rho.nunique() < 2:
            continue
        m = g.groupby(["method", "rho"]).value.median().unstack(0)
        print(f"hull [{name}] median Jaccard at ρ=" + ", ".join(
            f"{r:g}: " + " / ".join(f"{c} {m.loc[r, c]:.3f}" for c in m.columns)
            for r in (min(g.rho), max(g.rho))))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (tiny grid)")
    args = ap.parse_args()
    enable_seeded()
    warnings.filterwarnings("ignore")  # the wrappers' "noise scale above 100 km" advice at tiny ρ
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    reps, n_syn = (3, 2000) if args.quick else (10, 5000)
    syn = synthetic_sets(n_syn, reps, 2023)
    ais, ports = ais_sets()
    ais, ports = (ais[:8], ports[:2]) if args.quick else (ais, ports[::4])
    print(f"data: {reps} synthetic tuples (n={n_syn}), {len(ais)} AIS vessels, {len(ports)} ports "
          f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip
    rows: list[dict] = []
    run_privatize(rows, {"synthetic": [x for x, _ in syn], "AIS": ais})
    print(f"privatize done ({time.perf_counter() - t0:.1f} s)")
    for xy, q in syn:
        run_knn(rows, "synthetic", [xy], q[None, :], RHOS)
    run_knn(rows, "AIS", ais, ports, RHOS, basic_too=True)
    print(f"knn vs rho done ({time.perf_counter() - t0:.1f} s)")
    # vs n at ρ = 5e-5 (Fig. 4 / 5(b)), k = 4
    for n in (1000, 4000) if args.quick else (2000, 5000, 10000, 20000):
        for xy, q in synthetic_sets(n, max(3, reps // 2), 7 + n):
            run_knn(rows, "synthetic-vs-n", [xy], q[None, :], [5e-5], ks=(4,))
            run_hull(rows, "synthetic-vs-n", [xy], [5e-5])
    print(f"vs n done ({time.perf_counter() - t0:.1f} s)")
    run_hull(rows, "synthetic", [x for x, _ in syn], RHOS)
    run_hull(rows, "AIS", ais, RHOS)
    print(f"hull done ({time.perf_counter() - t0:.1f} s)")
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "cgp_results.csv", index=False)
    plot(df)
    headline(df)
    print(f"wrote {OUT}/cgp_results.csv, cgp_privatize.png, cgp_knn.png, cgp_hull.png "
          f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
