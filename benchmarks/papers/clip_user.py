"""Reproduce the trends of "On Improving the Composition Privacy Loss ..." (Clip-User), spec §11.

Spec: clip-user.md §11.1 (what survives of the paper's experiments), §11.2 (our protocol).

1. Synthetic (spec §11.2, our parameters): K = 50 cells, N = 200 users, user ℓ occupies
   k_ℓ = max(1, ⌈K(N − ℓ + 1)/N⌉) random cells, counts Geom(0.5), one heavy hitter per cell
   (its smallest user) with factor h ∈ {1, 5, 20}, W = 65. For each ε (per cell) of the grid:
   the mean over ``--draws`` instances of Γ′ε against Γε (the paper's Figs. 3–5) and of E_new
   (after the pseudo-user step) against E* (Figs. 6–8).
2. AIS New York Harbor, 1 h (``ais_nyharbor_1h.parquet``): vessels are the users, ``sog_knots``
   clamped to [0, 30] is the value, H3 resolution 8 cells. Γ′(ε), E_new against E*; then the two
   occupancy modes of ``grid_stats``, released with the seeded test source: ``public``
   (Clip-User + pseudo-user; values protected, occupancy public) and ``private`` (contribution
   bounding, max_cells = 3, max_per_cell = 5; presence protected too, every cell of the public
   list released). Error: median |released mean − true mean| over cells with ≥ 20 samples,
   over ``--reps`` releases.

Writes ``benchmarks/papers/out/clip_user_synthetic.csv``, ``clip_user_ais.csv``,
``clip_user_modes.csv`` and ``clip_user.png``. Default run ≈ 1–3 min; ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import time
from fractions import Fraction

import numpy as np
import pandas as pd

from gpframe.queries.clip_user import clip_user_plan
from gpframe.testing import enable_seeded, seeded_rng

enable_seeded()  # the seeded source, for reproducible releases

OUT = pathlib.Path(__file__).parent / "out"
EPS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
DATA = (
    pathlib.Path(os.environ.get("GPFRAME_DATA", "/work/shared/data"))
    / "ais_nyharbor"
    / "ais_nyharbor_1h.parquet"
)


def synthetic(K: int, N: int, heavy: int, rs: np.random.Generator, p: float = 0.5) -> pd.DataFrame:
    users, cells = [], []
    for ell in range(1, N + 1):
        k = max(1, math.ceil(K * (N - ell + 1) / N))
        cells.append(rs.choice(K, size=k, replace=False))
        users.append(np.full(k, ell - 1))
    df = pd.DataFrame({"user": np.concatenate(users), "cell": np.concatenate(cells)})
    df["count"] = rs.geometric(p, size=len(df))
    df = df.sort_values(["cell", "user"]).reset_index(drop=True)
    df.loc[~df["cell"].duplicated(), "count"] *= heavy
    return df


def run_synthetic(draws: int, eps_grid) -> pd.DataFrame:
    rows = []
    for heavy in (1, 5, 20):
        rs = np.random.default_rng(11 + heavy)  # benchmark data only
        insts = [synthetic(50, 200, heavy, rs) for _ in range(draws)]
        for eps in eps_grid:
            g, gp_, es, en = [], [], [], []
            for occ in insts:
                plan = clip_user_plan(occ, 0, 65, eps, clip="pseudo-user")
                g.append(plan.Gamma)
                gp_.append(plan.Gamma_prime)
                es.append(plan.E_star)
                en.append(plan.E_new)
                assert plan.Gamma_prime <= plan.Gamma and plan.E_new <= plan.E_star * (1 + 1e-12)
            rows.append(
                {
                    "heavy": heavy,
                    "eps": eps,
                    "Gamma": np.mean(g),
                    "Gamma_prime": np.mean(gp_),
                    "loss_before": eps * np.mean(g),
                    "loss_after": eps * np.mean(gp_),
                    "E_star": np.mean(es),
                    "E_new": np.mean(en),
                    "draws": draws,
                }
            )
    return pd.DataFrame(rows)


def ais_frame() -> pd.DataFrame:
    import h3.api.numpy_int as h3n

    d = pd.read_parquet(DATA, columns=["mmsi", "time", "lat", "lon", "sog_knots"])
    d = d.dropna().sort_values(["mmsi", "time"]).reset_index(drop=True)
    d["cell"] = np.array(
        [h3n.latlng_to_cell(a, b, 8) for a, b in zip(d["lat"], d["lon"], strict=True)],
        dtype=np.uint64,
    )
    d["v"] = d["sog_knots"].clip(0, 30)
    return d


def run_ais(d: pd.DataFrame, eps_grid) -> pd.DataFrame:
    occ = d.groupby(["mmsi", "cell"]).size().rename("count").reset_index()
    occ = occ.rename(columns={"mmsi": "user"})
    rows = []
    for eps in eps_grid:
        plan = clip_user_plan(occ, 0, 30, eps, clip="pseudo-user")
        rows.append(
            {
                "eps": eps,
                "Gamma": plan.Gamma,
                "Gamma_prime": plan.Gamma_prime,
                "suppressions": len(plan.suppressed),
                "E_star": plan.E_star,
                "E_new": plan.E_new,
                "users": plan.occupancy.n_users,
                "cells": plan.occupancy.n_cells,
            }
        )
    return pd.DataFrame(rows)


def run_modes(d: pd.DataFrame, eps_grid, reps: int) -> pd.DataFrame:
    """Median |mean error| of the two occupancy modes (no ledger: the release functions)."""
    from gpframe.queries.clip_user import occupancy_from_records
    from gpframe.queries.contribution_bounding import bound_contributions, release_private_cells
    from gpframe.queries.grid_stats import exact_cell_stats, release_cells, retained_rows

    users, cells, v = d["mmsi"].to_numpy(), d["cell"].to_numpy(), d["v"].to_numpy()
    order = d["time"].astype("int64").to_numpy()
    occ = occupancy_from_records(users, cells)
    ru, rj = np.searchsorted(occ.users, users), np.searchsorted(occ.cells, cells)
    truth = pd.Series(v).groupby(rj).mean().to_numpy()
    busy = np.bincount(rj, minlength=occ.n_cells) >= 20
    pub = occ.cells  # the public list: here every cell of the hour (a benchmark simplification)
    b = bound_contributions(users, cells, pub, max_cells=3, max_per_cell=5, order=order)
    rows = []
    for eps in eps_grid:
        plan = clip_user_plan(occ, 0, 30, 2 * eps, clip="pseudo-user")
        keep = retained_rows(plan, ru, rj, order)
        means, variances, _ = exact_cell_stats(
            v[keep], rj[keep], occ.n_cells, Fraction(0), Fraction(30)
        )
        err_pub, err_priv, nan_priv = [], [], []
        for rep in range(reps):
            rel = release_cells(plan, means, variances, beta=0.05, rng=seeded_rng(rep))
            err_pub.append(np.nanmedian(np.abs(rel.mean - truth)[busy]))
            pr = release_private_cells(
                v[b.keep],
                b.row_j[b.keep],
                pub.size,
                lower=0,
                upper=30,
                epsilon=eps,
                max_per_cell=5,
                rng=seeded_rng(1000 + rep),
            )
            e = np.abs(pr.mean - truth)[busy]
            nan_priv.append(float(np.isnan(e).mean()))
            err_priv.append(np.nanmedian(np.where(np.isnan(e), 30.0, e)))
        rows.append(
            {
                "eps_per_statistic": eps,
                "public_median_abs_err": float(np.mean(err_pub)),
                "private_median_abs_err": float(np.mean(err_priv)),
                "private_nan_share": float(np.mean(nan_priv)),
                "public_worst_case_eps": 2 * eps * plan.Gamma_prime,
                "private_worst_case_eps": 3 * eps * 3,
                "busy_cells": int(busy.sum()),
            }
        )
    return pd.DataFrame(rows)


def plot(syn: pd.DataFrame, ais: pd.DataFrame, modes: pd.DataFrame, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(20, 4.6))
    colors = {1: "tab:blue", 5: "tab:orange", 20: "tab:red"}
    for h, g in syn.groupby("heavy"):
        ax[0].plot(g["eps"], g["loss_before"], "--", color=colors[h], alpha=0.6)
        ax[0].plot(g["eps"], g["loss_after"], "o-", color=colors[h], label=f"heavy ×{h}: Γ′ε")
        ax[1].plot(g["eps"], g["E_star"], "--", color=colors[h], alpha=0.6)
        ax[1].plot(g["eps"], g["E_new"], "o-", color=colors[h], label=f"heavy ×{h}: E_new")
    ax[0].set(
        xscale="log",
        yscale="log",
        xlabel="ε per cell",
        ylabel="privacy loss (dashed: Γε)",
        title="Synthetic K=50, N=200: composition loss",
    )
    ax[1].set(
        xscale="log",
        yscale="log",
        xlabel="ε per cell",
        ylabel="worst-case error (dashed: E*)",
        title="Synthetic: worst-case error",
    )
    ax[2].plot(ais["eps"], ais["eps"] * ais["Gamma"], "k--", label="Γε (before)")
    ax[2].plot(ais["eps"], ais["eps"] * ais["Gamma_prime"], "ko-", label="Γ′ε (Clip-User)")
    ax[2].set(
        xscale="log",
        yscale="log",
        xlabel="ε per cell",
        ylabel="privacy loss",
        title=f"AIS NY harbour 1 h ({int(ais['users'][0])} vessels, {int(ais['cells'][0])} cells)",
    )
    ax[3].plot(
        modes["eps_per_statistic"],
        modes["public_median_abs_err"],
        "o-",
        label="public occupancy (Clip-User)",
    )
    ax[3].plot(
        modes["eps_per_statistic"],
        modes["private_median_abs_err"],
        "s-",
        label="private occupancy (bounding)",
    )
    ax[3].set(
        xscale="log",
        yscale="log",
        xlabel="ε per statistic",
        ylabel="median |mean error| (knots)",
        title="AIS: the two occupancy modes (cells ≥ 20 samples)",
    )
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=20, help="Monte Carlo instances per setting")
    ap.add_argument("--reps", type=int, default=5, help="releases per ε in the mode comparison")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    draws, reps, eps_grid = (3, 2, (0.1, 1, 10)) if a.quick else (a.draws, a.reps, EPS)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    syn = run_synthetic(draws, eps_grid)
    syn.to_csv(OUT / "clip_user_synthetic.csv", index=False)
    d = ais_frame()
    ais = run_ais(d, eps_grid)
    ais.to_csv(OUT / "clip_user_ais.csv", index=False)
    modes = run_modes(d, eps_grid, reps)
    modes.to_csv(OUT / "clip_user_modes.csv", index=False)
    plot(syn, ais, modes, OUT / "clip_user.png")
    pd.set_option("display.width", 160)
    print(syn.to_string(index=False))
    print(ais.to_string(index=False))
    print(modes.to_string(index=False))
    print(f"done in {time.perf_counter() - t0:.0f} s -> {OUT}")


if __name__ == "__main__":
    main()
