"""Reproduce the trends of Fig. 4 of "Adaptive Privacy Budgeting" for the Gaussian KDE.

Spec: adaptive-budgeting.md §5.2 (KDE, Algorithm 7, ν = 3b), §6 (datasets, metrics, Fig. 4, the
reproduction grid). The paper used NYC collisions; we use the data in ``shared/data``:

* AIS New York Harbor (``ais_nyharbor_tracks``, user = ``mmsi``, 141 vessels). One query time per
  sampled hour t; each vessel's point is its last fix in [t − 1 h, t) (timestamps only, pitfall 10).
* Go!Track Aracaju (``gotrack_points``): few people, so each *track* is a pseudo-user (a benchmark
  choice, as in ``range_count.py``); its point is the fix at fraction q of the track's duration.

Query points are the vertices of a k × k grid over a 10 km × 10 km square around a public centre
(the Upper New York Bay; Aracaju's centre). For every query time, bandwidth b ∈ {100, 250, 500} m
and ρ ∈ {1e-7 … 1e-3} m⁻², each variant computes the private KDE at every query point:

* ``pt``: each point privatized once, evaluated at every query point (``kde_points_pt``);
* ``dist``: the distance to q privatized (one release per user and query point);
* ``pt-elim`` / ``dist-elim`` (Algorithm 7, log-c10: doubling split, c = 10; ``--full`` adds c4
  and c64): users confidently farther than ν = 3b stop early and keep the rest of the allocation.

Metrics (spec §6.2): absolute error |KDÊ(q) − KDE(q)| (KDE ∈ [0, 1], 2b² convention), relative
error where KDE(q) ≥ 0.01, and the privacy saving, the mean over users of saving/allocation.
Runs the pure algorithms of :mod:`gpframe.queries.kde` (the code the ledger-backed ``kde``
calls) with fixed seeds. Writes ``benchmarks/papers/out/kde_fig4.csv`` and
``kde_fig4_<dataset>.png``. ``--quick`` for a smoke run; ``--full`` for the spec §6.4 grid.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import numpy as np
import pandas as pd
import shapely

from gpframe.geo import project_geometry, resolve_points
from gpframe.queries.kde import kde_point, kde_points_pt, kernel
from gpframe.testing import enable_seeded, seeded_rng

DATA = pathlib.Path(os.environ.get("GPFRAME_DATA", "/work/shared/data"))
OUT = pathlib.Path(__file__).resolve().parent / "out"
RHOS = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
BANDWIDTHS = [100.0, 250.0, 500.0]
BOX_M = 10_000.0
#: (label, method, rounds, split); pt / dist are the baselines
VARIANTS = [
    ("pt", "pt", 1, "even"),
    ("dist", "dist", 1, "even"),
    ("pt-elim log-c10", "pt-elim", 10, "doubling"),
    ("dist-elim log-c10", "dist-elim", 10, "doubling"),
]
FULL_EXTRA = [
    ("pt-elim c4", "pt-elim", 4, "even"),
    ("dist-elim c4", "dist-elim", 4, "even"),
    ("pt-elim c64", "pt-elim", 64, "even"),
    ("dist-elim c64", "dist-elim", 64, "even"),
]


# ---------------------------------------------------------------------------------------------
# data: one (n, 2) array of projected points per query time, plus the query grid


def grid(centre_lonlat: tuple[float, float], crs_m: object, k: int) -> np.ndarray:
    """k × k vertices of a BOX_M square around a public centre, projected metres."""
    c = project_geometry(shapely.Point(*centre_lonlat), "EPSG:4326", crs_m)
    off = np.linspace(-BOX_M / 2, BOX_M / 2, k)
    gx, gy = np.meshgrid(c.x + off, c.y + off)
    return np.column_stack([gx.ravel(), gy.ravel()])


def ais(n_hours: int, k: int, rs: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    df = pd.read_parquet(DATA / "ais_nyharbor" / "ais_nyharbor_tracks.parquet")
    p = resolve_points(df, user="mmsi", lon="lon", lat="lat", crs="EPSG:4326")
    d = pd.DataFrame({"user": p.users, "t": df["time"].to_numpy(), "x": p.xy[:, 0],
                      "y": p.xy[:, 1]})  # fmt: skip
    t0, t1 = d["t"].min().ceil("h") + pd.Timedelta(hours=1), d["t"].max().floor("h")
    hours = pd.date_range(t0, t1, freq="h")
    pick = np.sort(rs.choice(len(hours), size=min(n_hours, len(hours)), replace=False))
    comps = []
    for t in hours[pick]:
        w = d[(d["t"] >= t - pd.Timedelta(hours=1)) & (d["t"] < t)]
        comps.append(w.sort_values("t").groupby("user", sort=False).tail(1)[["x", "y"]].to_numpy())
    return comps, grid((-74.03, 40.67), p.crs_m, k)  # Upper New York Bay


def gotrack(qs: list[float], k: int) -> tuple[list[np.ndarray], np.ndarray]:
    df = pd.read_parquet(DATA / "gotrack_aracaju" / "gotrack_points.parquet")
    box = (df.lat.between(-11.2, -10.7)) & (df.lon.between(-37.3, -36.9))
    df = df[box].reset_index(drop=True)
    df["user"] = df["user_id"].astype(np.int64) * 10_000 + df["track_id"].astype(np.int64)
    p = resolve_points(df, user="user", lon="lon", lat="lat", crs="EPSG:4326")
    df["x"], df["y"] = p.xy[:, 0], p.xy[:, 1]
    g = df.groupby("user")["time"]
    start, dur = g.transform("min"), g.transform("max") - g.transform("min")
    comps = []
    for q in qs:
        before = df[df["time"] <= start + dur * q]
        comps.append(before.sort_values("time").groupby("user", sort=False).tail(1)[["x", "y"]]
                     .to_numpy())  # fmt: skip
    return comps, grid((-37.06, -10.93), p.crs_m, k)  # Aracaju centre


def true_kde(xy: np.ndarray, q: np.ndarray, b: float) -> np.ndarray:
    d = np.hypot(xy[None, :, 0] - q[:, None, 0], xy[None, :, 1] - q[:, None, 1])
    return kernel(d, b).mean(axis=1)


# ---------------------------------------------------------------------------------------------
# run


def run(name: str, comps: list[np.ndarray], qs: np.ndarray, variants: list, seed: int) -> list:
    rows = []
    k = 0
    for qi, xy in enumerate(comps):
        for b in BANDWIDTHS:
            truth = true_kde(xy, qs, b)
            for rho in RHOS:
                for label, method, c, split in variants:
                    k += 1
                    if method == "pt":  # one privatization, every query point (no saving)
                        out = kde_points_pt(xy, qs, bandwidth_m=b, amount=rho,
                                            rng=seeded_rng(seed * 1_000_000 + k))  # fmt: skip
                        est, saving = out.values, np.zeros(len(qs))
                    else:
                        est, saving = np.empty(len(qs)), np.empty(len(qs))
                        for j, q in enumerate(qs):
                            r = seeded_rng(seed * 1_000_000 + 1000 * k + j)
                            o = kde_point(xy, q, bandwidth_m=b, amount=rho, method=method,
                                          rounds=c, split=split, rng=r)  # fmt: skip
                            est[j] = o.value
                            a = np.array([float(v) for v in o.allocations])
                            ch = np.array([float(v) for v in o.charges])
                            saving[j] = float(np.mean((a - ch) / a))
                    for j in range(len(qs)):
                        err = abs(est[j] - truth[j])
                        rows.append(dict(
                            dataset=name, query=qi, q=j, b=b, rho=rho, variant=label,
                            n=len(xy), true=truth[j], est=est[j], abs_err=err,
                            rel_err=err / truth[j] if truth[j] >= 0.01 else np.nan,
                            saving=saving[j],
                        ))  # fmt: skip
    return rows


def plot(df: pd.DataFrame, name: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[df.dataset == name]
    fig, axes = plt.subplots(2, len(BANDWIDTHS), figsize=(4.6 * len(BANDWIDTHS), 8.2),
                             sharex=True)  # fmt: skip
    colour = {"pt": "tab:blue", "dist": "tab:red"}
    ls = {"": "-", "c4": ":", "c64": "--", "log-c10": "-."}
    marker = {"": "o", "c4": "v", "c64": "^", "log-c10": "D"}
    for col, b in enumerate(BANDWIDTHS):
        db = d[d.b == b]
        for label in db.variant.unique():
            base = "dist" if label.startswith("dist") else "pt"
            tag = label.split()[-1] if " " in label else ""
            g = db[db.variant == label].groupby("rho")
            m = g["abs_err"].mean()
            kw = dict(color=colour[base], ls=ls[tag], marker=marker[tag], ms=4, label=label)
            axes[0, col].plot(m.index, m.values, **kw)
            if tag:
                s = g["saving"].mean()
                axes[1, col].plot(s.index, 100 * s.values, **kw)
        mean_true = db.groupby("q")["true"].mean().mean()
        axes[0, col].set(xscale="log", yscale="log",
                         title=f"b = {b:g} m (mean true KDE {mean_true:.3f})",
                         ylabel="mean |KDÊ − KDE|" if col == 0 else None)  # fmt: skip
        axes[1, col].set(xscale="log", ylim=(0, 100), xlabel="ρ per user and query point (m⁻²)",
                         ylabel="saving (% of allocation)" if col == 0 else None)  # fmt: skip
        for ax in axes[:, col]:
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8, loc="lower right")
    n_users = int(d.groupby("query")["n"].first().median())
    n_q = d.q.nunique()
    fig.suptitle(f"{name}: private Gaussian KDE, point vs distance privatization, with and "
                 f"without elimination (ν = 3b)\nmedian {n_users} users per query time, "
                 f"{n_q} query points on a grid over a 10 km square", fontsize=11)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (seconds)")
    ap.add_argument("--full", action="store_true", help="spec §6.4 grid: 20 × 20, c4 and c64 too")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    times, k = (1, 2) if args.quick else (10, 20) if args.full else (2, 3)
    variants = VARIANTS + (FULL_EXTRA if args.full else [])
    enable_seeded()  # a fixed seed for a reproducible benchmark (never in library code)
    OUT.mkdir(parents=True, exist_ok=True)
    rs = np.random.default_rng(args.seed)  # public choices only: the sampled hours
    t0 = time.perf_counter()
    comps, qs = ais(times, k, rs)
    rows = run("AIS NY harbor", comps, qs, variants, args.seed)
    gcomps, gqs = gotrack(list(np.linspace(0.2, 0.8, times)), k)
    rows += run("Go!Track Aracaju", gcomps, gqs, variants, args.seed + 1)
    df = pd.DataFrame(rows)
    df.to_csv(OUT / "kde_fig4.csv", index=False)
    for name, fn in (("AIS NY harbor", "ais"), ("Go!Track Aracaju", "gotrack")):
        plot(df, name, OUT / f"kde_fig4_{fn}.png")
    dt = time.perf_counter() - t0

    print(f"kde paper benchmark (Fig. 4 trends): {dt:.0f} s, {len(df)} rows -> {OUT}")
    d = df.assign(b=df["b"].astype(int))
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.float_format", "{:.4f}".format):  # fmt: skip
        for what, col in (("mean absolute KDE error", "abs_err"), ("mean saving", "saving")):
            tab = d.groupby(["dataset", "b", "variant", "rho"])[col].mean().unstack("rho")
            tab.columns = [f"{r:.0e}" for r in tab.columns]
            if col == "saving":
                tab = tab[tab.index.get_level_values("variant").str.contains("elim")]
            print(f"{what} by rho:")
            print(tab)
        e = d.groupby(["dataset", "variant"])["abs_err"].mean().unstack("variant")
        print("headline: mean absolute error over all b and rho (dist / pt bias ratio):")
        print(e.assign(dist_over_pt=e["dist"] / e["pt"]))


if __name__ == "__main__":
    main()
