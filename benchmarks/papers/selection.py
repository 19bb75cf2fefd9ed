"""Fidelity of the selection mechanisms vs the Gaussian-selection paper (selection.md §7).

Two experiments, PNG + CSV in ``benchmarks/papers/out/selection_*``:

1. **RNM (§7.4, §8.4; GSM Fig 7/8)**: certified pure ε of Gaussian Report-Noisy-Max vs the
   classical (ε, δ = 10⁻⁵) bound with Δ_q = √d·Δ, Δ = 10⁻³, σ ∈ {0.1, …, 0.5},
   d ∈ {16, …, 1024}. Expected trend: the pure ε grows slowly in d, the classical one like √d;
   the pure bound wins from d = 52 on at every σ.
2. **Online selection (§7.2, §7.5; GSM Fig 4/17/18)** on a real stream: hourly distinct-vessel
   counts of the "New York City" port zone (AIS, New York Harbor, Dec 1–8 2020), as shares of a
   public cap N = 50 (Δ = 1/N, [0, 1]), ρ = 0.5 (25 vessels), σ_Z = √3σ_X, runs capped at
   T_max = 24 h; a new run starts after each ⊤ or cap. Privacy spent over the week per user by
   (a) gpframe's ex-post charges (ε_⊤(t) / ε_⊥(T), mode R settled), (b) the same runs charged
   ZW20's ex-ante bound (Thm 7, Markov pDP at δ = 1/N, the paper's filter baseline), (c) the
   runs charged their worst case R (mode R without settling); and the F1 of the released ⊤/⊥
   vector against the noiseless run. 50 repetitions per σ_X.

The run simulation uses numpy float normals (a benchmark of the accounting, never a release
path); the ε values are gpframe's certified amounts at tol = 10⁻⁷ (upper ends, valid bounds).

Run:  python benchmarks/papers/selection.py   (≈ 1–2 min)
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import gpframe as gp
from gpframe.mechanisms.selection import (
    ATParams,
    bw18_eps,
    eps_at_bottom,
    eps_at_top,
    eps_rnm,
    zw20_eps,
)

OUT = Path(__file__).resolve().parent / "out"
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TOL = 1e-7


def rnm_grid() -> pd.DataFrame:
    ds = [16, 28, 52, 95, 172, 312, 565, 1024]
    rows = []
    for s in (0.1, 0.2, 0.3, 0.4, 0.5):
        for d in ds:
            pure = eps_rnm(s, sensitivity=1e-3, bounds=(0, 1), d=d, tol=TOL)
            classical = bw18_eps(s, 1e-3 * math.sqrt(d), 1e-5)
            rows.append({"sigma": s, "d": d, "eps_pure": pure, "eps_classical": classical})
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (s, g) in enumerate(df.groupby("sigma")):
        col = f"C{i}"
        ax.plot(g["d"], g["eps_pure"], "-o", color=col, ms=3, label=f"σ={s:g} pure (ours)")
        ax.plot(g["d"], g["eps_classical"], "--", color=col, label=f"σ={s:g} (ε, 1e-5)")
    ax.set(xscale="log", yscale="log", xlabel="candidates d", ylabel="ε",
           title="Gaussian Report-Noisy-Max, Δ = 1e-3: pure ε vs classical")  # fmt: skip
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(OUT / "selection_rnm.png", dpi=130)
    plt.close(fig)
    df.to_csv(OUT / "selection_rnm.csv", index=False)
    return df


def ais_stream(n_cap: int) -> pd.Series:
    import geopandas as gpd

    tracks = pd.read_parquet(DATA / "ais_nyharbor" / "ais_nyharbor_tracks.parquet")
    zones = gpd.read_parquet(DATA / "world_ports" / "nyharbor_port_zones.parquet")
    zone = zones.loc[zones["port_names"] == "New York City"]
    counts = gp.monitor.zone_counts(
        tracks, zone, user="mmsi", time="time", start="2020-12-01", end="2020-12-08"
    )
    return (counts / n_cap).clip(0, 1)


def simulate(q: np.ndarray, p: ATParams, t_max: int, rs: np.random.Generator):
    """One monitoring pass: list of (start, length, top) runs and the released ⊤ positions."""
    runs, tops, i = [], [], 0
    while i < q.size:
        th = p.threshold + p.sigma_x * rs.standard_normal()
        t_cap = min(t_max, q.size - i)
        z = q[i : i + t_cap] + p.sigma_z * rs.standard_normal(t_cap)
        hit = np.flatnonzero(z >= th)
        if hit.size:
            t = int(hit[0]) + 1
            runs.append((i, t, True))
            tops.append(i + t - 1)
        else:
            t = t_cap
            runs.append((i, t, False))
        i += t
    return runs, tops


def f1(pred: list[int], truth: np.ndarray) -> float:
    pred_set, true_set = set(pred), set(np.flatnonzero(truth).tolist())
    tp = len(pred_set & true_set)
    if tp == 0:
        return 0.0
    prec, rec = tp / len(pred_set), tp / len(true_set)
    return 2 * prec * rec / (prec + rec)


def online(reps: int = 50) -> pd.DataFrame:
    n_cap, rho, t_max = 50, 0.5, 24
    q = ais_stream(n_cap).to_numpy()
    truth = q >= rho
    rows, curves = [], {}
    for sx in (0.06, 0.08, 0.10, 0.12, 0.15):
        p = ATParams.make(sigma_x=sx, threshold=rho, bounds=(0, 1), sensitivity=1 / n_cap)
        top = [eps_at_top(p, t, TOL) for t in range(1, t_max + 1)]
        bot = [eps_at_bottom(p, t, TOL) for t in range(1, t_max + 1)]
        worst = max(max(top), max(bot))
        exante = zw20_eps(p, 1 / n_cap, "pdp")
        rs = np.random.default_rng(int(sx * 1000))
        for r in range(reps):
            runs, tops = simulate(q, p, t_max, rs)
            post = [top[t - 1] if hit else bot[t - 1] for _, t, hit in runs]
            rows.append({
                "sigma_x": sx, "rep": r, "runs": len(runs), "tops": len(tops),
                "spent_expost": sum(post), "spent_exante_zw20": exante * len(runs),
                "spent_worst_R": worst * len(runs), "f1": f1(tops, truth),
            })  # fmt: skip
            if r == 0:
                t_end = np.array([s + t for s, t, _ in runs])
                curves[sx] = (t_end, np.cumsum(post), exante * np.arange(1, len(runs) + 1))
    df = pd.DataFrame(rows)
    summ = df.groupby("sigma_x").mean(numeric_only=True).drop(columns="rep")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    ax.plot(summ.index, summ["spent_expost"], "-o", label="ex-post (gpframe mode R, settled)")
    ax.plot(summ.index, summ["spent_exante_zw20"], "-s", label="ex-ante ZW20 pDP, δ=1/N")
    ax.plot(summ.index, summ["spent_worst_R"], "-^", label="worst case R per run")
    ax.set(xlabel="σ_X", ylabel="ε spent per vessel over the week", yscale="log",
           title="privacy spent (mean of 50)")  # fmt: skip
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.plot(summ.index, summ["f1"], "-o")
    ax.set(xlabel="σ_X", ylabel="F1 vs noiseless", title="quality of released ⊤/⊥", ylim=(0, 1))
    ax = axes[2]
    sx = 0.10
    t_end, cp, ca = curves[sx]
    ax.step(t_end, cp, where="post", label="ex-post")
    ax.step(t_end, ca, where="post", label="ex-ante ZW20")
    ax.set(xlabel="hour of the week", ylabel="cumulative ε", title=f"spend over time, σ_X={sx}")
    ax.legend(fontsize=7)
    fig.suptitle("Gaussian AboveThreshold on hourly vessel counts, NYC zone (N=50, ρ=25 vessels)")
    fig.tight_layout()
    fig.savefig(OUT / "selection_online.png", dpi=130)
    plt.close(fig)
    df.to_csv(OUT / "selection_online_runs.csv", index=False)
    summ.to_csv(OUT / "selection_online.csv")
    return summ


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    g = rnm_grid()
    piv = g.assign(ratio=g.eps_classical / g.eps_pure).pivot(index="sigma", columns="d",
                                                             values="ratio")  # fmt: skip
    print("RNM classical / pure ε (≥ 1: the pure bound is smaller):")
    print(piv.round(2).to_string())
    s = online()
    print("online selection, means over 50 repetitions:")
    print(s.round(4).to_string())
    print(f"# {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
