"""Reproduce the trends of Fig. 3 and Fig. 6 of "Adaptive Privacy Budgeting" for range counting.

Spec: adaptive-budgeting.md §6 (datasets, metrics, what the figures show, the reproduction grid).
The paper used T-Drive taxis; we use the data in ``shared/data`` (spec §6.1 [G] choices):

* AIS New York Harbor (``ais_nyharbor_tracks``, user = ``mmsi``, 141 vessels). One query per sampled
  hour t; each vessel's component is its last fix in [t − 1 h, t) (timestamps only, pitfall 10).
  Ranges: squares of side 1, 2, 4 km centred on World Port Index ports (public points) and the
  23 port zones (Voronoi polygons, any shape) of ``world_ports/nyharbor_port_zones``.
* Go!Track Aracaju (``gotrack_points``, 28 people, 163 tracks). Few users, so each *track* is a
  pseudo-user (a benchmark choice); its component is the fix at a fixed fraction q of the track's
  duration (timestamps only). Ranges: squares of side 1, 2, 4 km centred on a public grid over the
  city centre.

Fig. 3: relative count error |ĉ − c|/max(c, 1) and privacy saving (mean over users of
saving/allocation, spec §6.2) vs ρ for ``pt``, ``dist`` and the elimination variants c4, c64
(even split) and log-c10 (doubling, c = 10). Fig. 6: T range queries at T consecutive hours,
each user with total budget B; the baseline gives every query B/T (``dist``); Algorithm 3 (linear
schedule) runs ``dist-elim`` log-c10 and re-uses each user's savings in later queries. The gain
is the relative reduction of the mean count error.

Runs the pure algorithm (:func:`gpframe.queries.range_count.range_count_arrays`, the code the
ledger-backed ``range_count`` calls) with a fixed seed. Writes ``benchmarks/papers/out/``:
``range_count_fig3.csv``, ``range_count_fig3_<dataset>.png``, ``range_count_fig6.csv``,
``range_count_fig6.png``. ``--quick`` for a smoke run; ``--full`` for the spec §6.4 grid sizes.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import time

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from gpframe.accounting.schedules import Plan
from gpframe.geo import project_geometry, resolve_points
from gpframe.queries.range_count import range_count_arrays
from gpframe.testing import enable_seeded, seeded_rng

DATA = pathlib.Path(os.environ.get("GPFRAME_DATA", "/work/shared/data"))
OUT = pathlib.Path(__file__).resolve().parent / "out"
RHOS = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
SIDES = [1000.0, 2000.0, 4000.0]
#: (label, method, rounds, split) of the paper's plots
VARIANTS = [
    ("pt", "pt", 1, "even"),
    ("dist", "dist", 1, "even"),
    ("pt-elim c4", "pt-elim", 4, "even"),
    ("pt-elim c64", "pt-elim", 64, "even"),
    ("pt-elim log-c10", "pt-elim", 10, "doubling"),
    ("dist-elim c4", "dist-elim", 4, "even"),
    ("dist-elim c64", "dist-elim", 64, "even"),
    ("dist-elim log-c10", "dist-elim", 10, "doubling"),
]


# ---------------------------------------------------------------------------------------------
# data


def ais() -> tuple[pd.DataFrame, object, list, list]:
    """AIS fixes in UTM metres, port centres and port zones (both projected)."""
    df = pd.read_parquet(DATA / "ais_nyharbor" / "ais_nyharbor_tracks.parquet")
    p = resolve_points(df, user="mmsi", lon="lon", lat="lat", crs="EPSG:4326")
    df = pd.DataFrame({"user": p.users, "t": df["time"].to_numpy(), "x": p.xy[:, 0],
                       "y": p.xy[:, 1]})  # fmt: skip
    zones = gpd.read_parquet(DATA / "world_ports" / "nyharbor_port_zones.parquet")
    zm = list(project_geometry(zones.geometry, "EPSG:4326", p.crs_m).array)
    ports = project_geometry(gpd.GeoSeries(gpd.points_from_xy(zones["lon"], zones["lat"]),
                                           crs=4326), "EPSG:4326", p.crs_m)  # fmt: skip
    centres = [(pt.x, pt.y) for pt in ports.array]
    return df, p.crs_m, centres, zm


def ais_queries(df: pd.DataFrame, n_hours: int, rs: np.random.Generator) -> list[pd.DataFrame]:
    """One component per vessel per sampled hour: its last fix in [t − 1 h, t)."""
    t0, t1 = df["t"].min().ceil("h") + pd.Timedelta(hours=1), df["t"].max().floor("h")
    hours = pd.date_range(t0, t1, freq="h")
    pick = np.sort(rs.choice(len(hours), size=min(n_hours, len(hours)), replace=False))
    out = []
    for t in hours[pick]:
        w = df[(df["t"] >= t - pd.Timedelta(hours=1)) & (df["t"] < t)]
        out.append(w.sort_values("t").groupby("user", sort=False).tail(1))
    return out


def gotrack(qs: list[float]) -> tuple[list[pd.DataFrame], list[tuple[float, float]]]:
    """Track = pseudo-user; its component is the fix at fraction q of the track's duration."""
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
        target = start + dur * q
        before = df[df["time"] <= target]
        comps.append(before.sort_values("time").groupby("user", sort=False).tail(1))
    c = project_geometry(shapely.Point(-37.07, -10.93), "EPSG:4326", p.crs_m)
    centres = [(c.x + dx, c.y + dy) for dx in (-3000, 0, 3000) for dy in (-3000, 0, 3000)]
    return comps, centres


# ---------------------------------------------------------------------------------------------
# Fig. 3


def run_fig3(name: str, comps: list[pd.DataFrame], ranges_per_q: list[list], seed: int) -> list:
    rows = []
    k = 0
    for qi, comp in enumerate(comps):
        xy = comp[["x", "y"]].to_numpy()
        users = comp["user"].to_numpy()
        for rname, region in ranges_per_q[qi]:
            true = int(shapely.contains_xy(region, xy[:, 0], xy[:, 1]).sum())
            for rho in RHOS:
                for label, method, c, split in VARIANTS:
                    k += 1
                    out = range_count_arrays(xy, users, region, kind="cgp", amount=rho,
                                             method=method, rounds=c, split=split,
                                             rng=seeded_rng(seed * 1_000_000 + k))  # fmt: skip
                    alloc = np.array([float(a) for a in out.allocations])
                    ch = np.array([float(v) for v in out.charges])
                    rows.append(dict(
                        dataset=name, query=qi, range=rname, rho=rho, variant=label,
                        n=len(users), true=true, est=out.estimate, bound=out.error,
                        rel_err=abs(out.estimate - true) / max(true, 1),
                        saving=float(np.mean((alloc - ch) / alloc)),
                    ))  # fmt: skip
    return rows


def plot_fig3(df: pd.DataFrame, name: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[df.dataset == name]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"pt": ("tab:blue", "-", "o"), "dist": ("tab:red", "-", "s")}
    for label, *_ in VARIANTS:
        base = "dist" if label.startswith("dist") else "pt"
        col, _, mk = styles[base]
        ls = "-" if label in ("pt", "dist") else {"c4": ":", "c64": "--", "log-c10": "-."}[
            label.split()[-1]]  # fmt: skip
        g = d[d.variant == label].groupby("rho")
        m = g["rel_err"].mean()
        axes[0].plot(m.index, m.values, ls=ls, color=col, marker=mk, ms=4, label=label)
        if label not in ("pt", "dist"):
            s = g["saving"].mean()
            axes[1].plot(s.index, 100 * s.values, ls=ls, color=col, marker=mk, ms=4, label=label)
    n_users = int(d.groupby("query")["n"].first().median())
    # symlog: the error is exactly 0 at large rho, which a log axis cannot show
    axes[0].set_yscale("symlog", linthresh=0.01)
    axes[0].set(xscale="log", xlabel="ρ per user and query (m⁻²)", ylim=(0, None),
                ylabel="mean relative count error |ĉ − c| / max(c, 1)",
                title=f"{name}: count error (median {n_users} users/query)")  # fmt: skip
    axes[1].set(xscale="log", xlabel="ρ per user and query (m⁻²)", ylim=(0, 100),
                ylabel="privacy saving (% of allocation)", title=f"{name}: saving")  # fmt: skip
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Fig. 6


def run_fig6(comps_all: list[pd.DataFrame], centres: list, Ts: list[int], Bs: list[float],
             reps: int, seed: int) -> list:  # fmt: skip
    rows = []
    users_all = np.unique(np.concatenate([c["user"].to_numpy() for c in comps_all]))
    rs = np.random.default_rng(seed)  # picks public query times and ranges only
    k = 0
    for T in Ts:
        for B in Bs:
            for rep in range(reps):
                start = int(rs.integers(0, len(comps_all) - T + 1))
                comps = comps_all[start : start + T]
                regs = [
                    shapely.box(cx - 1000, cy - 1000, cx + 1000, cy + 1000)
                    for cx, cy in (centres[i] for i in rs.integers(0, len(centres), T))
                ]
                plan = Plan(B, queries=T, schedule="linear", users=users_all)
                errs = {"fixed B/T, dist": [], "Alg. 3, dist-elim log-c10": []}
                for comp, reg in zip(comps, regs, strict=True):
                    xy, users = comp[["x", "y"]].to_numpy(), comp["user"].to_numpy()
                    true = int(shapely.contains_xy(reg, xy[:, 0], xy[:, 1]).sum())
                    k += 1
                    base = range_count_arrays(
                        xy,
                        users,
                        reg,
                        kind="cgp",
                        amount=B / T,
                        method="dist",
                        rng=seeded_rng(seed + 7 * k),
                    )
                    a = plan.next_allocations()
                    pos = np.searchsorted(users_all, users)
                    out = range_count_arrays(xy, users, reg, kind="cgp", amount=a[pos],
                                             method="dist-elim", rounds=10, split="doubling",
                                             rng=seeded_rng(seed + 7 * k + 1))  # fmt: skip
                    used = np.full(users_all.size, 0, dtype=object)
                    used[pos] = out.charges
                    plan.record(used)
                    errs["fixed B/T, dist"].append(abs(base.estimate - true) / max(true, 1))
                    err = abs(out.estimate - true) / max(true, 1)
                    errs["Alg. 3, dist-elim log-c10"].append(err)
                assert all(s <= b for s, b in zip(plan.spent, plan.budgets, strict=True))
                for name, e in errs.items():
                    rows.append(dict(T=T, B=B, rep=rep, method=name, rel_err=float(np.mean(e))))
    return rows


def plot_fig6(df: pd.DataFrame, path: pathlib.Path) -> pd.DataFrame:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Bs = sorted(df.B.unique())
    fig, axes = plt.subplots(1, len(Bs), figsize=(4.2 * len(Bs), 4.2), sharey=False)
    gains = []
    for ax, B in zip(np.atleast_1d(axes), Bs, strict=True):
        d = df[df.B == B].groupby(["T", "method"])["rel_err"].mean().unstack()
        x = np.arange(len(d.index))
        w = 0.38
        for j, (mname, col) in enumerate([("fixed B/T, dist", "tab:gray"),
                                          ("Alg. 3, dist-elim log-c10", "tab:green")]):  # fmt: skip
            ax.bar(x + (j - 0.5) * w, d[mname].values, w, color=col, label=mname)
        for i, T in enumerate(d.index):
            g = 1 - d.loc[T, "Alg. 3, dist-elim log-c10"] / d.loc[T, "fixed B/T, dist"]
            gains.append(dict(T=T, B=B, gain=g))
            top = max(d.loc[T].values)
            txt = "n/a" if not np.isfinite(g) else f"error {-100 * g:+.0f}%"
            ax.annotate(txt, (i, top), ha="center", va="bottom", fontsize=9)
        ax.set_xticks(x, [f"T={T}" for T in d.index])
        ax.set(title=f"budget B = {B:g} m⁻² per user", ylabel="mean relative count error")
        ax.margins(y=0.15)
        ax.grid(True, axis="y", alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(
        "AIS NY harbor, T queries on 2 km squares: Algorithm 3 (linear) + dist-elim\n"
        "vs a fixed B/T split with dist (annotated: change of the mean error)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return pd.DataFrame(gains)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (seconds)")
    ap.add_argument("--full", action="store_true", help="spec §6.4 sizes (long)")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    hours, reps6, n_q = (3, 2, 2) if args.quick else (100, 50, 9) if args.full else (10, 3, 6)
    enable_seeded()  # a fixed seed for a reproducible benchmark (never in library code)
    OUT.mkdir(parents=True, exist_ok=True)
    rs = np.random.default_rng(args.seed)  # public choices: hours, range centres
    t0 = time.perf_counter()

    df, _crs, ports, zones = ais()
    comps = ais_queries(df, hours, rs)
    ranges = []
    for _ in comps:
        cs = [ports[i] for i in rs.choice(len(ports), 3, replace=False)]
        sq = [(f"square {int(s)} m", shapely.box(cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2))
              for (cx, cy), s in zip(cs, SIDES, strict=True)]  # fmt: skip
        zi = rs.choice(len(zones), 3, replace=False)
        ranges.append(sq + [(f"zone {i}", zones[i]) for i in zi])
    rows = run_fig3("AIS NY harbor", comps, ranges, args.seed)

    gcomps, gcentres = gotrack(list(np.linspace(0.1, 0.9, n_q)))
    granges = []
    for _ in gcomps:
        cs = [gcentres[i] for i in rs.choice(len(gcentres), 3, replace=False)]
        granges.append([(f"square {int(s)} m", shapely.box(cx - s / 2, cy - s / 2, cx + s / 2,
                                                           cy + s / 2))
                        for (cx, cy), s in zip(cs, SIDES, strict=True)])  # fmt: skip
    rows += run_fig3("Go!Track Aracaju", gcomps, granges, args.seed + 1)
    f3 = pd.DataFrame(rows)
    f3.to_csv(OUT / "range_count_fig3.csv", index=False)
    for name, fn in (("AIS NY harbor", "ais"), ("Go!Track Aracaju", "gotrack")):
        plot_fig3(f3, name, OUT / f"range_count_fig3_{fn}.png")
    t3 = time.perf_counter() - t0

    all_comps = ais_queries(df, 10_000, np.random.default_rng(args.seed))  # every hour, in order
    Ts = [5, 10] if args.quick else [5, 10, 20]
    Bs = [1e-5, 1e-4] if args.quick else [1e-6, 1e-5, 1e-4]
    f6 = pd.DataFrame(run_fig6(all_comps, ports, Ts, Bs, reps6, args.seed))
    f6.to_csv(OUT / "range_count_fig6.csv", index=False)
    gains = plot_fig6(f6, OUT / "range_count_fig6.png")
    gains.to_csv(OUT / "range_count_fig6_gain.csv", index=False)
    t6 = time.perf_counter() - t0 - t3

    # headline numbers
    print(f"range_count paper benchmark: fig3 {t3:.0f} s, fig6 {t6:.0f} s -> {OUT}")
    f3l = f3.assign(rho=f3["rho"].map("{:.0e}".format))
    tab = f3l.groupby(["dataset", "variant", "rho"])[["rel_err", "saving"]].mean().unstack("rho")
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.float_format", "{:.3f}".format):  # fmt: skip
        print("relative count error (mean) by rho:")
        print(tab["rel_err"])
        print("privacy saving (mean fraction of the allocation) by rho:")
        print(tab["saving"])
        print("Fig. 6: error reduction of Algorithm 3 + dist-elim over fixed B/T dist:")
        print(
            gains.assign(B=gains["B"].map("B={:.0e}".format)).pivot(
                index="T", columns="B", values="gain"
            )
        )


if __name__ == "__main__":
    main()
