"""Online selection at equal budget: Gaussian AboveThreshold (mode R vs worst-case) vs Laplace SV.

What it measures (selection.md §7.5, §6.3; issue #9)
----------------------------------------------------
A synthetic bounded daily series: L = 365 shares of a **public** population N = 1000 (Δ = 1/N,
[a, b] = [0, 1]; seeded numpy, data only): a seasonal baseline that stays at or below
ρ − 0.1 plus K = 20 "event" days at U(0.65, 0.9), threshold ρ = 0.6. The noiseless run (no noise
on threshold or queries, a fresh run after every ⊤) answers ⊤ exactly on the K event days; F1 is
measured against it. Every method gets the same per-user budget B (a ``gp.DP(epsilon=B)``
session) and monitors the year until the series ends or the budget stops it:

* ``gauss_mode_R`` — gpframe's ``gp.monitor.above_threshold(noise="gaussian")`` default: exact
  normals, σ_Z = √3·σ_X, runs capped at T_max = 30 days, a fresh run after each ⊤ or cap; each run
  reserves its worst case R and settles to the realized ex-post ε (§6.3 mode R). Monitoring
  stops when a run's R no longer fits the remaining budget.
* ``gauss_fixed_R`` — the same mechanism charged its worst case R per run, ex-ante (§6.5: "fixed
  charging"). The monitor has no such option for a pure-DP budget (a ``gp.zCDP`` session charges
  R ex-ante, but as R²/2 zCDP — another notion), so it is computed from the reported worst case:
  run k is admitted iff R_1 + … + R_k ≤ B. Since mode R admits every run fixed charging admits
  (its settled charges are ≤ R), the fixed-charging transcript is exactly the prefix of the mode-R
  transcript that fits, so both are evaluated on the same draws (a paired comparison).
* ``laplace_sv`` — the Laplace sparse vector (LSL17 Alg 1, §2.4) through
  ``gp.monitor.above_threshold(noise="laplace")`` at ε = B with c = K (the public number of
  events the analyst expects), integer counts (Δ = 1), threshold ρN. It does not depend on σ_X:
  drawn as a horizontal line. ``laplace_sv_c40``: the same with c = 2K (an analyst who over-
  provisions c; each ⊤ then gets half the query budget), to show how much the exact c helps.

Per (σ_X, method), means over the seeds (one synthetic series per seed; gpframe's noise always
from the OS CSPRNG): number of ⊤ released (and how many are correct), F1 against the noiseless
run, total ε spent per user, and days answered before the budget (or c) stopped monitoring.

How to read it: at equal budget, the ex-post ledger (mode R) keeps monitoring longer than
worst-case charging — the gap is the ex-post saving (R − realized) turned into more runs.
Small σ_X makes each run accurate but expensive (the budget runs out early); large σ_X is cheap but
noisy (false ⊤); the best F1 sits in between. The Laplace line shows whether Gaussian selection
is worth it at this budget.

Outputs: ``benchmarks/accuracy/out/selection_at.{csv,png}`` (means) and ``selection_at_runs.csv``
(one row per seed, σ_X and method). A short headline summary is printed last.

Run:  python benchmarks/accuracy/selection_at.py [--quick] [--budgets 1,4] [--seeds S]
      (--quick: 8 seeds, 3 σ_X values; default 50 seeds, 6 σ_X values, B ∈ {1, 4})
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import gpframe as gp
from gpframe.errors import BudgetExceededError
from gpframe.mechanisms.noise import AesCtrRandom

OUT = Path(__file__).resolve().parent / "out"
N = 1000  # public population (configuration, never observed: P-9); Δ = 1/N
L = 365  # days
K = 20  # event days per year (public design; the Laplace SV's c)
RHO = 0.6  # threshold (share)
T_MAX = 30  # public cap of one Gaussian run (days)
RNG = AesCtrRandom()  # unseeded CSPRNG for every gpframe release


def series(seed: int) -> np.ndarray:
    """Integer daily counts out of N (seeded data): baseline ≤ (ρ − 0.1)N, K event days above ρN."""
    rs = np.random.default_rng(seed)
    t = np.arange(L)
    base = (0.30 + 0.10 * np.sin(2 * np.pi * (t - 80) / 365) + 0.03 * np.cos(2 * np.pi * t / 7)
            + rs.normal(0.0, 0.02, L))  # fmt: skip
    q = np.clip(base, 0.0, RHO - 0.1)
    ev = rs.choice(L, size=K, replace=False)
    q[ev] = rs.uniform(0.65, 0.9, K)
    return np.round(q * N).astype(int)


def quality(tops, truth: np.ndarray) -> dict:
    pred, true = {int(t) for t in tops}, set(np.flatnonzero(truth).tolist())
    tp = len(pred & true)
    fp, fn = len(pred) - tp, len(true) - tp
    f1 = 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)
    return {"tops": len(pred), "tp": tp, "fp": fp, "f1": f1}


def gaussian(q: list[float], truth: np.ndarray, users: list, sx: float, budget: float) -> list:
    """Mode R through the monitor, and the fixed-R prefix of the same transcript."""
    sess = gp.Session(central=gp.DP(epsilon=budget))
    try:
        res = gp.monitor.above_threshold(
            sess, q, RHO, users=users, sensitivity=1 / N, noise="gaussian", sigma=sx,
            bounds=(0, 1), max_steps=T_MAX, c=10**6, rng=RNG,
        )  # fmt: skip
    except BudgetExceededError:  # not even the first run fits: nothing released, nothing spent
        empty = {"runs": 0, "spent": 0.0, "days": 0, "worst": math.nan, **quality((), truth)}
        return [{"method": m, **empty} for m in ("gauss_mode_R", "gauss_fixed_R")]
    spent = float(sess.spent(users[:1], notion="central").iloc[0])
    if abs(spent - res.epsilon_realized) > 1e-6 or spent > budget * (1 + 1e-12):
        raise AssertionError(f"ledger {spent} vs reported {res.epsilon_realized} (B = {budget})")
    out = [{"method": "gauss_mode_R", "runs": len(res.runs), "spent": spent,
            "days": int(res.value.size), "worst": res.epsilon_worst, "stopped": res.stopped,
            **quality(res.tops, truth)}]  # fmt: skip
    cum, end, k = 0.0, 0, 0
    for rn in res.runs:  # fixed charging: admit run k iff R_1 + … + R_k ≤ B
        if cum + rn["reserved"] > budget:
            break
        cum += rn["reserved"]
        end, k = rn["start"] + rn["steps"], k + 1
    out.append({"method": "gauss_fixed_R", "runs": k, "spent": cum, "days": end,
                "worst": cum, "stopped": "budget" if k < len(res.runs) else res.stopped,
                **quality([t for t in res.tops if t < end], truth)})  # fmt: skip
    return out


def laplace(counts: np.ndarray, truth: np.ndarray, users: list, budget: float, c: int) -> dict:
    sess = gp.Session(central=gp.DP(epsilon=budget))
    res = gp.monitor.above_threshold(
        sess, counts.tolist(), round(RHO * N), users=users, sensitivity=1, noise="laplace",
        epsilon=budget, c=c, integer=True, rng=RNG,
    )  # fmt: skip
    spent = float(sess.spent(users[:1], notion="central").iloc[0])
    name = "laplace_sv" if c == K else f"laplace_sv_c{c}"
    return {"method": name, "runs": 1, "spent": spent, "days": int(res.value.size),
            "worst": spent, "stopped": res.stopped, **quality(res.tops, truth)}  # fmt: skip


LAB = {
    "gauss_mode_R": ("Gaussian AT, mode R ledger (gpframe default)", "-o", "C0"),
    "gauss_fixed_R": ("Gaussian AT, worst case R charged per run", "-s", "C1"),
    "laplace_sv": ("Laplace sparse vector, ε = B, c = K (gpframe)", "--", "C3"),
    f"laplace_sv_c{2 * K}": ("Laplace sparse vector, ε = B, c = 2K (gpframe)", ":", "C2"),
}


def plot(summ: pd.DataFrame, budgets: list[float], seeds: int) -> None:
    cols = (("tops", f"⊤ released (dotted: correct; K = {K} true)"), ("f1", "F1 vs noiseless run"),
            ("spent", "ε spent per user"), ("days", "days answered before stopping"))  # fmt: skip
    fig, axes = plt.subplots(len(budgets), 4, figsize=(18, 4.2 * len(budgets)), squeeze=False)
    for i, budget in enumerate(budgets):
        sb = summ[summ.budget == budget]
        for ax, (col, title) in zip(axes[i], cols, strict=True):
            for m, (lab, sty, c) in LAB.items():
                g = sb[sb.method == m].sort_values("sigma_x")
                if m.startswith("laplace_sv"):
                    ax.axhline(float(g[col].iloc[0]), ls=sty, color=c, label=lab)
                    if col == "tops" and m == "laplace_sv":
                        ax.axhline(float(g["tp"].iloc[0]), ls=":", color=c)
                    continue
                ax.errorbar(g["sigma_x"], g[col], yerr=g[col + "_se"], fmt=sty, color=c, ms=4,
                            capsize=2, label=lab)  # fmt: skip
                if col == "tops":
                    ax.plot(g["sigma_x"], g["tp"], ":", color=c, marker=sty[-1], ms=3)
            ref = {"tops": K, "spent": budget, "days": L}.get(col)
            if ref is not None:
                ax.axhline(ref, color="k", lw=0.8)
            ax.set(xlabel="σ_X (σ_Z = √3·σ_X)", title=f"B = {budget:g}: {title}")
            if col == "f1":
                ax.set_ylim(0, 1.05)
                ax.legend(fontsize=7)
    fig.suptitle(f"AboveThreshold at equal per-user budget B: L = {L} days, N = {N} (Δ = 1/N), "
                 f"ρ = {RHO}, T_max = {T_MAX}; mean ± s.e. over {seeds} seeds")  # fmt: skip
    fig.tight_layout()
    fig.savefig(OUT / "selection_at.png", dpi=120)
    plt.close(fig)


def headline(summ: pd.DataFrame, budget: float) -> list[str]:
    sb = summ[summ.budget == budget]
    mr = sb[sb.method == "gauss_mode_R"].set_index("sigma_x")
    fx = sb[sb.method == "gauss_fixed_R"].set_index("sigma_x")
    ls = sb[sb.method == "laplace_sv"].iloc[0]
    l2 = sb[sb.method == f"laplace_sv_c{2 * K}"].iloc[0]
    s_r, s_f = mr.f1.idxmax(), fx.f1.idxmax()
    r, f = mr.loc[s_r], fx.loc[s_r]
    days = (mr["days"] / fx["days"].where(fx["days"] > 0)).round(2)
    return [
        f"B = {budget:g}: Gaussian mode R, best σ_X = {s_r:g}: {r.tops:.1f} ⊤ ({r.tp:.1f} "
        f"correct), F1 {r.f1:.3f} ± {r.f1_se:.3f}, spent {r.spent:.3f}, {r.days:.0f} days answered",
        f"B = {budget:g}: same σ_X, worst case R charged per run: {f.tops:.1f} ⊤ ({f.tp:.1f} "
        f"correct), F1 {f.f1:.3f} ± {f.f1_se:.3f}, spent {f.spent:.3f}, {f.days:.0f} days "
        f"answered (its best σ_X = {s_f:g}: F1 {fx.f1[s_f]:.3f})",
        f"B = {budget:g}: Laplace sparse vector, ε = B, c = {K}: {ls.tops:.1f} ⊤ ({ls.tp:.1f} "
        f"correct), F1 {ls.f1:.3f} ± {ls.f1_se:.3f}, spent {ls.spent:.3f}, {ls.days:.0f} days "
        f"answered; with c = {2 * K}: F1 {l2.f1:.3f} ± {l2.f1_se:.3f} ({l2.tops:.1f} ⊤)",
        f"B = {budget:g}: days answered mode R / fixed R by σ_X: {days.dropna().to_dict()}",
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 seeds, 3 σ_X values (≤ 2 min)")
    ap.add_argument("--budgets", default="1,4", help="comma list of per-user ε budgets B")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (default 50)")
    a = ap.parse_args()
    seeds = a.seeds or (8 if a.quick else 50)
    sigmas = (0.045, 0.09, 0.12) if a.quick else (0.03, 0.045, 0.06, 0.09, 0.12, 0.18)
    budgets = [float(x) for x in a.budgets.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    pd.set_option("display.width", 200)
    users = list(range(N))  # everyone the queries read; each is charged
    print(f"# load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    t0 = time.time()
    rows = []
    for seed in range(seeds):
        counts = series(seed)
        truth = counts >= round(RHO * N)
        assert int(truth.sum()) == K
        q = (counts / N).tolist()
        for budget in budgets:
            base = {"seed": seed, "budget": budget}
            for c in (K, 2 * K):  # one draw per seed, drawn as a line
                lap = laplace(counts, truth, users, budget, c)
                rows += [{**base, "sigma_x": sx, **lap} for sx in sigmas]
            for sx in sigmas:
                rows += [
                    {**base, "sigma_x": sx, **r} for r in gaussian(q, truth, users, sx, budget)
                ]
        if seed == 0:
            print(f"# first seed done in {time.time() - t0:.0f} s")
    df = pd.DataFrame(rows)
    cols = ["runs", "tops", "tp", "fp", "f1", "spent", "days"]
    grp = df.groupby(["budget", "sigma_x", "method"])[cols]
    summ = grp.mean().join((grp.std(ddof=1) / math.sqrt(seeds)).add_suffix("_se")).reset_index()
    summ["seeds"] = seeds
    df.to_csv(OUT / "selection_at_runs.csv", index=False)
    summ.to_csv(OUT / "selection_at.csv", index=False)
    plot(summ, budgets, seeds)

    print(f"\nmeans over {seeds} seeds (L = {L}, K = {K}, N = {N}, ρ = {RHO}, T_max = {T_MAX}):")
    show = summ.set_index(["budget", "sigma_x", "method"])[[*cols, "f1_se"]]
    print(show.round(3).to_string())
    print(f"# {time.time() - t0:.0f} s")

    print("\n== selection_at headline ==")
    print(f"equal per-user budget B; {seeds} seeds; {L} days with {K} true ⊤; N = {N}")
    for budget in budgets:
        print("\n".join(headline(summ, budget)))
    print(f"outputs: {OUT}/selection_at*.{{csv,png}}; total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
