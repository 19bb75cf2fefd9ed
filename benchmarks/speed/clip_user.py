"""Clip-User: incremental planner (spec §7.6) vs a direct transcription of spec §7.3.

The transcription keeps the occupancy as per-cell dicts and, for every trial, recomputes each
candidate cell's retained total and largest other count by scanning all the cell's users, and
re-evaluates every cell's error after every step (what "re-evaluate every error at every step"
means). Both use the one error function of spec §6.3, so decisions must be identical.

Synthetic instance (spec §11.2, our parameters): N = 10,000 users, K = 1,000 cells,
k_ℓ = max(1, ⌈K·(N − ℓ + 1)/N / 20⌉) cells per user (scaled down 20× so one run of the
transcription ends in minutes), counts Geom(0.5), heavy hitter ×5 in each cell (its smallest user),
W = 65, per-cell ε as below. Prints one line (STYLE.md §8).

At the issue's size the transcription needs hours (each of the ~2·10⁵ steps re-evaluates every
cell's error over all ~2.5·10⁵ occupied pairs), so it is timed on its first ``--steps``
suppressions (checked to be the same decisions as the planner's) and its per-step cost is
extrapolated to the planner's number of suppressions. Identical output over a whole run is
checked on a smaller instance of the same generator (``--check-users``, ``--check-cells``).

Run: python benchmarks/speed/clip_user.py [--eps 0.5] [--users 10000] [--cells 1000] [--steps 300]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

from gpframe.queries.clip_user import ErrorModel, Occupancy, clip_user_plan, err


def synthetic(
    n_users: int, n_cells: int, *, shrink: int = 20, p: float = 0.5, heavy: int = 5, seed: int = 6
) -> pd.DataFrame:
    """Occupancy per spec §11.2 (user ℓ occupies k_ℓ random cells; Geom(p) counts; heavy hitter)."""
    rs = np.random.default_rng(seed)  # benchmark data only (not gpframe/)
    users, cells = [], []
    for ell in range(1, n_users + 1):
        k = max(1, math.ceil(n_cells * (n_users - ell + 1) / n_users / shrink))
        cells.append(rs.choice(n_cells, size=k, replace=False))
        users.append(np.full(k, ell - 1))
    u = np.concatenate(users)
    c = np.concatenate(cells)
    m = rs.geometric(p, size=u.size)
    df = pd.DataFrame({"user": u, "cell": c, "count": m}).sort_values(["cell", "user"])
    first = ~df["cell"].duplicated()
    df.loc[first, "count"] *= heavy
    return df.reset_index(drop=True)


def direct_clip_user(
    occ: Occupancy,
    W: float,
    eps_cell: float,
    kappa: float = math.sqrt(2),
    protect: bool = True,
    max_steps: int | None = None,
) -> tuple[np.ndarray, list, str]:
    """Literal spec §7.3 (literal halting, no rollback), re-evaluating every error at every step.

    ``max_steps`` stops after that many committed suppressions (status ``"cut"``): the per-step
    cost of the transcription is then timed on a prefix of the run.
    """
    model = ErrorModel(W=W, eps_mu=eps_cell / 2, eps_v=eps_cell / 2, kappa=kappa)
    users, cells = occ.users.tolist(), occ.cells.tolist()
    r: list[dict[int, int]] = [dict() for _ in cells]  # cell -> {user: retained}
    for uu, jj, mm in zip(occ.u.tolist(), occ.j.tolist(), occ.m.tolist(), strict=True):
        r[jj][uu] = mm
    m = [sum(d.values()) for d in r]

    def all_errors() -> list[float]:
        return [
            float(err(m[j], sum(r[j].values()), max(r[j].values(), default=0), model))
            for j in range(len(cells))
        ]

    E0 = all_errors()
    e_star = max(E0)
    jw = E0.index(e_star)
    G = [set() for _ in users]
    for jj, d in enumerate(r):
        for uu in d:
            G[uu].add(jj)
    order = sorted(range(len(users)), key=lambda x: (-len(G[x]), users[x]))
    pairs = []
    while True:
        g = max(len(s) for s in G)
        if g <= 1:
            status = "floor"
            break
        S = [x for x in order if len(G[x]) == g]
        halted = False
        for x in S:
            best_e, best_j = math.inf, None
            for j in sorted(G[x]):
                if protect and j == jw:
                    continue
                r_new = sum(v for y, v in r[j].items() if y != x)
                rs_new = max((v for y, v in r[j].items() if y != x and v > 0), default=0)
                e = float(err(m[j], r_new, rs_new, model))
                if e < best_e:
                    best_e, best_j = e, j
            if best_j is None or best_e > e_star:
                halted = True
                break
            r[best_j][x] = 0
            G[x].remove(best_j)
            pairs.append((users[x], cells[best_j]))
            all_errors()  # re-evaluate every error after the step (the transcription's cost)
            if max_steps is not None and len(pairs) >= max_steps:
                halted = True
                break
        if halted:
            if max_steps is not None and len(pairs) >= max_steps:
                status = "cut"
                break
            status = "halted"
            break
    out = np.array([r[jj][uu] for uu, jj in zip(occ.u.tolist(), occ.j.tolist(), strict=True)])
    return out, pairs, status


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--cells", type=int, default=1_000)
    ap.add_argument("--eps", type=float, default=0.5)
    ap.add_argument("--shrink", type=int, default=20)
    ap.add_argument(
        "--steps",
        type=int,
        default=300,
        help="suppressions the transcription runs at full size (0: run it to the end)",
    )
    ap.add_argument("--check-users", type=int, default=1_000)
    ap.add_argument("--check-cells", type=int, default=100)
    a = ap.parse_args()
    # 1. identical output, whole run, on a smaller instance of the same generator
    small = synthetic(a.check_users, a.check_cells, shrink=a.shrink)
    sp = clip_user_plan(small, 0, 65, a.eps, clip="clip-user")
    t0 = time.perf_counter()
    ref_r, ref_pairs, ref_status = direct_clip_user(sp.occupancy, 65.0, a.eps)
    t_small_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    sp = clip_user_plan(small, 0, 65, a.eps, clip="clip-user")
    t_small = time.perf_counter() - t0
    same_small = (
        ref_pairs == sp.suppressed and np.array_equal(ref_r, sp.r) and ref_status == sp.status
    )
    print(
        f"check {a.check_users} users x {a.check_cells} cells: {len(sp.suppressed)} suppressions, "
        f"incremental {t_small:.2f} s vs transcription {t_small_ref:.2f} s "
        f"({t_small_ref / t_small:.1f}x), identical={same_small}"
    )
    # 2. the size: the incremental planner in full; the transcription on its first
    #    --steps suppressions (same prefix of decisions), per-step cost extrapolated
    occ_df = synthetic(a.users, a.cells, shrink=a.shrink)
    clip_user_plan(occ_df.head(200), 0, 65, a.eps, clip="clip-user")  # warm-up
    t0 = time.perf_counter()
    plan = clip_user_plan(occ_df, 0, 65, a.eps, clip="clip-user")
    fast = time.perf_counter() - t0
    steps = None if a.steps <= 0 else a.steps
    t0 = time.perf_counter()
    ref_r, ref_pairs, ref_status = direct_clip_user(plan.occupancy, 65.0, a.eps, max_steps=steps)
    slow = time.perf_counter() - t0
    n_sup = len(plan.suppressed)
    if ref_status == "cut":
        same = ref_pairs == plan.suppressed[: len(ref_pairs)]
        est = slow / len(ref_pairs) * n_sup
        what = (
            f"transcription timed on its first {len(ref_pairs)} of {n_sup} suppressions: "
            f"{slow:.1f} s, i.e. {slow / len(ref_pairs) * 1e3:.0f} ms/step -> ~{est:.0f} s "
            f"extrapolated (~{est / 3600:.1f} h); same prefix of decisions={same}"
        )
    else:
        same = ref_pairs == plan.suppressed and np.array_equal(ref_r, plan.r)
        est = slow
        what = f"transcription {slow:.1f} s (whole run), identical={same}"
    print(
        f"clip_user {a.users} users x {a.cells} cells, {len(occ_df)} occupied pairs, "
        f"eps={a.eps}, Gamma {plan.Gamma}->{plan.Gamma_prime}, {n_sup} suppressions: "
        f"incremental {fast:.1f} s; {what}; speed-up ~{est / fast:.0f}x"
    )


if __name__ == "__main__":
    main()
