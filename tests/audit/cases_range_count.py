"""Audit cases for range counting and iterative elimination (issue 10).

Covers ``gpframe.queries.range_count`` (:func:`range_count_arrays`, :func:`run_range_count`),
``gpframe.frame.range_count`` (:func:`range_count`) and
``gpframe.queries.elimination`` (:func:`eliminate_noninteractive`,
:func:`eliminate_interactive`).

What is audited
---------------
The private input is one user's location; the neighbouring pair is that user at two locations
``d`` metres apart (the others fixed). What the user releases is its *transcript*: the noisy value
of every round it took part in (a signed distance for the ``dist`` triple, a point for ``pt``);
the round at which it stopped and the in/out decision are functions of it, and the count, the
error bound and everything else are post-processing. The claim is the user's whole allocation
under the filter's notion: GP ε·max(d, r_min) (Laplace), CGP ρ·max(d, r_min)² audited through the
implied (ε, δ) at δ ∈ {0.1, 0.01, 0.001} (Gaussian).

How the transcript is observed
------------------------------
The operations return aggregates, not per-round values. :class:`ReleaseTap` wraps the three
release wrappers of :mod:`gpframe.mechanisms` (the only noise sources elimination uses) for the
duration of one call and records each release; with one allocation group, round j releases the
users still active, in ascending order, so the per-user transcript follows from each user's
``rounds_run`` (checked: round j's release has exactly #{i: rounds_run_i > j} rows). A hook on the
library side (``Elimination.releases`` as ``Privatized.releases`` has) would make the tap
unnecessary.

Independent samples
-------------------
One call releases n users at the same location: n samples of the user's transcript. For
Algorithm 4 (non-interactive) these are i.i.d.: a user's decisions read only its own releases
and public parameters (``n_union`` is fixed, or the same n for all four samples of a case).
Algorithm 5 (interactive) couples users through the k-th smallest right end; its case uses
k = n − 1 and a huge ``n_union``, so a drop needs two estimates more than 2 widths (≥ 16 noise
scales) apart: every user runs all c rounds except with probability < 1e-30, and the samples are
i.i.d. up to that total-variation distance (negligible against α = 1e-6).

Events
------
:func:`llr_featurizer` bins the transcript's log-likelihood ratio under the continuous law of
each round (Gaussian with the sampled σ, Laplace / planar Laplace with the sampled scale), summed
over the rounds the user took part in: the Neyman–Pearson statistic of the pair, so the prefix
unions of its quantile bins are the most powerful events. Any function of the output gives a valid
event, so approximating the lattice laws by continuous ones affects power only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .engine import Case, Claim, discrete_featurizer

__all__ = [
    "ReleaseTap",
    "llr_featurizer",
    "rounds_featurizer",
    "transcript",
]

#: n of the union bounds for the array-level cases (public; fixed so widths do not depend on N)
N_UNION = 100

_WRAPPERS = ("gaussian_cgp", "laplace_gp", "planar_laplace")


# --------------------------------------------------------------------------------------------
# observing the per-round releases
# --------------------------------------------------------------------------------------------


@dataclass
class Release:
    """One call of a release wrapper: its outputs (rows = users), noise scale and guarantee."""

    wrapper: str
    values: np.ndarray
    scale: float
    guarantee: Any


class ReleaseTap:
    """Context manager recording every call of the release wrappers of :mod:`gpframe.mechanisms`.

    Elimination and ``privatize_once`` look the wrappers up on the module at call time
    (``mech.gaussian_cgp``), so patching the module attributes sees every release. Not
    thread-safe; the audit runs cases one at a time.
    """

    def __init__(self) -> None:
        self.records: list[Release] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> ReleaseTap:
        import gpframe.mechanisms as mech

        for name in _WRAPPERS:
            orig = getattr(mech, name)
            self._saved[name] = orig
            setattr(mech, name, self._wrap(name, orig))
        return self

    def _wrap(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            rel = orig(*args, **kwargs)
            self.records.append(
                Release(
                    name,
                    np.array(rel, dtype=np.float64, copy=True),
                    float(rel.noise["scale"]),
                    rel.guarantee,
                )
            )
            return rel

        return wrapped

    def __exit__(self, *exc: object) -> None:
        import gpframe.mechanisms as mech

        for name, orig in self._saved.items():
            setattr(mech, name, orig)
        self._saved.clear()


def transcript(records: list[Release], rounds_run: Any, dim: int, rounds: int) -> np.ndarray:
    """Per-user transcripts, shape (n, 1 + rounds·(dim + 1)): [r, y_1, s_1, ..., y_c, s_c].

    ``records[j]`` is round j's release to the users with ``rounds_run > j`` (ascending order,
    one allocation group); columns of rounds a user did not run are NaN.
    """
    r = np.asarray(rounds_run, dtype=np.int64)
    n = r.size
    w = dim + 1
    out = np.full((n, 1 + rounds * w), np.nan)
    out[:, 0] = r
    if len(records) > rounds or (r.size and r.max() != len(records)):
        raise AssertionError(
            f"{len(records)} release calls for at most {rounds} rounds and max rounds_run "
            f"{int(r.max()) if r.size else 0}: one call per round expected (one allocation group)"
        )
    for j, rec in enumerate(records):
        idx = np.flatnonzero(r > j)
        y = rec.values.reshape(-1, dim)
        if y.shape[0] != idx.size:
            raise AssertionError(
                f"round {j + 1} released {y.shape[0]} values but {idx.size} users report having "
                "run it: rounds_run does not match the releases"
            )
        out[idx, 1 + j * w : 1 + j * w + dim] = y
        out[idx, 1 + j * w + dim] = rec.scale
    return out


def llr_score(out: np.ndarray, kind: str, dim: int, m0: Any, m1: Any) -> np.ndarray:
    """Σ over the rounds run of ln p(y_j | m0) − ln p(y_j | m1) (continuous laws, sampled σ)."""
    out = np.asarray(out, dtype=np.float64)
    m0 = np.atleast_1d(np.asarray(m0, dtype=np.float64))
    m1 = np.atleast_1d(np.asarray(m1, dtype=np.float64))
    w = dim + 1
    rounds = (out.shape[1] - 1) // w
    score = np.zeros(out.shape[0])
    for j in range(rounds):
        y = out[:, 1 + j * w : 1 + j * w + dim]
        s = out[:, 1 + j * w + dim]
        run = ~np.isnan(s)
        if not run.any():
            continue
        y, s = y[run], s[run]
        if kind == "cgp":
            ll = (np.sum((y - m1) ** 2, axis=1) - np.sum((y - m0) ** 2, axis=1)) / (2 * s * s)
        else:  # Laplace (dim 1) and planar Laplace (dim 2): exp(-||y - m|| / scale)
            ll = (np.linalg.norm(y - m1, axis=1) - np.linalg.norm(y - m0, axis=1)) / s
        score[run] += ll
    return score


def llr_featurizer(kind: str, dim: int, m0: Any, m1: Any, nbins: int = 200):
    """Factory: quantile bins (from the selection sample) of the transcript's LLR score."""

    def llr(anchor: Any, other: Any, pooled: np.ndarray):
        z = llr_score(pooled, kind, dim, m0, m1)
        edges = np.unique(np.quantile(z, np.linspace(0.0, 1.0, nbins + 1)[1:-1]))

        def feat(y: np.ndarray) -> np.ndarray:
            return np.searchsorted(edges, llr_score(y, kind, dim, m0, m1), side="right")

        return feat, len(edges) + 1

    return llr


#: the number of rounds each user ran (the stopping time alone)
rounds_featurizer = discrete_featurizer(lambda y: np.asarray(y)[:, 0].astype(np.int64))


# --------------------------------------------------------------------------------------------
# the pair: one user d metres apart across or along the left edge of a large box
# --------------------------------------------------------------------------------------------

#: a 100 km box whose left edge x = 0 is the only boundary within reach of the noise
_BOX = (0.0, -50_000.0, 100_000.0, 50_000.0)


def _region():
    import shapely

    return shapely.box(*_BOX)


def _point(h: float) -> np.ndarray:
    """The point at signed distance h from the box (negative inside), on the x axis."""
    return np.array([-float(h), 0.0])


def _claim(kind: str, amount: float, d: float) -> Claim:
    return Claim.gp(amount, d) if kind == "gp" else Claim.cgp(amount, d)


#: per-notion allocations and pair distance: GP ε·d = 3 (tight), CGP ρd² = 2 (μ = 2)
AMOUNT = {"gp": 0.1, "cgp": 0.02}
DIST = {"gp": 30.0, "cgp": 10.0}
#: signed distances (h0, h1): straddling the boundary (never eliminated: the full allocation is
#: spent, so the audit can be tight) and inside at a depth where users stop at various rounds
PAIRS = {
    ("gp", "straddle"): (-15.0, 15.0),
    ("cgp", "straddle"): (-5.0, 5.0),
    ("gp", "deep"): (-330.0, -300.0),
    ("cgp", "deep"): (-45.0, -35.0),
}


def rounds_from_charges(charges: np.ndarray, records: list[Release], k2: float) -> np.ndarray:
    """Rounds run per user from its charge: the charge must equal Σ_{j≤r} of the rounds' guarantees
    (× the projection factor); a charge matching no prefix sum raises."""
    cum = np.concatenate(
        [[0.0], np.cumsum([float(Fraction(r.guarantee.amount)) * k2 for r in records])]
    )
    r = np.abs(charges[:, None] - cum[None, :]).argmin(axis=1)
    if not np.allclose(cum[r], charges, rtol=1e-12, atol=0.0):
        raise AssertionError(
            "a user's charge is not the sum of the guarantees of a prefix of rounds"
        )
    return r


# The registry is imported only here, after everything that cases_kde and test_mutants_ops import
# from this module: the registry imports every cases_* module, so whichever of them is imported
# first, the helpers above are complete when the others ask for them.
from .frames import _FRAME_CRS, _FRAME_X0, _FRAME_Y0, _ground_distance  # noqa: E402
from .registry import AUDITED_MODULES, FAST, SLOW, _quiet, register  # noqa: E402

for _m in (
    "gpframe.queries.range_count",
    "gpframe.frame.range_count",
    "gpframe.queries.elimination",
):
    if _m not in AUDITED_MODULES:
        AUDITED_MODULES.append(_m)


def range_count_case(
    kind: str,
    method: str,
    split: str,
    where: str,
    *,
    rounds: int = 4,
    tiers=SLOW,
    n_fast: int = 20_000,
    n_slow: int | None = None,
    tight: bool = False,
) -> Case:
    """range_count_arrays on n copies of the user (independent: Algorithm 4, fixed n_union)."""
    from gpframe.queries.range_count import range_count_arrays

    a, d = AMOUNT[kind], DIST[kind]
    h0, h1 = PAIRS[(kind, where)]
    assert math.isclose(abs(h1 - h0), d)
    x0, x1 = _point(h0), _point(h1)
    region = _region()
    elim = method.endswith("-elim")
    c = rounds if elim else 1
    dim = 1 if method.startswith("dist") else 2
    m0, m1 = (h0, h1) if dim == 1 else (x0, x1)
    pt = dim == 2
    if n_slow is None:
        n_slow = 100_000 if pt else 300_000
    if pt:
        n_fast = min(n_fast, 10_000)

    def run(x, n, rng):
        pts = np.repeat(np.asarray(x, dtype=np.float64)[None, :], n, axis=0)
        with ReleaseTap() as tap:
            out = _quiet(
                range_count_arrays, pts, np.arange(n), region, kind=kind, amount=a,
                method=method, rounds=rounds, split=split, n_union=N_UNION, rng=rng,
            )  # fmt: skip
        return transcript(tap.records, out.rounds_run, dim, c)

    name = f"range_count/{kind}/{method}" + (f"/{split}/c{rounds}" if elim else "") + f"/{where}"
    return register(
        Case(
            name=name,
            covers=(
                "gpframe.queries.range_count.range_count_arrays",
                "gpframe.queries.elimination.eliminate_noninteractive",
            ),
            run=run,
            inputs=(x0, x1),
            centers=(np.atleast_1d(m0), np.atleast_1d(m1)),
            featurizers=(llr_featurizer(kind, dim, m0, m1), rounds_featurizer),
            claim=_claim(kind, a, d),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
            tight=tight,
        )
    )


def eliminate_case(
    kind: str,
    triple: str,
    where: str,
    *,
    interactive: bool,
    split: str = "even",
    rounds: int = 4,
    tiers=SLOW,
    n_fast: int = 20_000,
    n_slow: int | None = None,
) -> Case:
    """eliminate_noninteractive / eliminate_interactive directly, h = signed distance to the box."""
    from gpframe.queries import elimination as el
    from gpframe.queries.range_count import signed_distance

    a, d = AMOUNT[kind], DIST[kind]
    h0, h1 = PAIRS[(kind, where)]
    x0, x1 = _point(h0), _point(h1)
    region = _region()
    dim = 1 if triple == "dist" else 2
    m0, m1 = (h0, h1) if dim == 1 else (x0, x1)
    if n_slow is None:
        n_slow = 100_000 if dim == 2 else 300_000
    if dim == 2:
        n_fast = min(n_fast, 10_000)

    def h(p: np.ndarray) -> np.ndarray:
        return signed_distance(p, region)

    def run(x, n, rng):
        pts = np.repeat(np.asarray(x, dtype=np.float64)[None, :], n, axis=0)
        data = h(pts) if triple == "dist" else pts
        hh = None if triple == "dist" else h
        with ReleaseTap() as tap:
            if interactive:
                # k = n − 1, n_union huge: nobody is dropped (see the module docstring)
                out = _quiet(
                    el.eliminate_interactive, data, a, k=n - 1, kind=kind, triple=triple, h=hh,
                    rounds=rounds, split=split, n_union=10**15, rng=rng,
                )  # fmt: skip
            else:
                out = _quiet(
                    el.eliminate_noninteractive, data, a, kind=kind, triple=triple, h=hh,
                    nu_low=0.0, nu_high=0.0, rounds=rounds, split=split, n_union=N_UNION,
                    rng=rng,
                )  # fmt: skip
        return transcript(tap.records, out.rounds_run, dim, rounds)

    fn = "eliminate_interactive" if interactive else "eliminate_noninteractive"
    return register(
        Case(
            name=f"elimination/{fn}/{kind}/{triple}/{split}/c{rounds}/{where}",
            covers=(f"gpframe.queries.elimination.{fn}",),
            run=run,
            inputs=(x0, x1),
            centers=(np.atleast_1d(m0), np.atleast_1d(m1)),
            featurizers=(llr_featurizer(kind, dim, m0, m1), rounds_featurizer),
            claim=_claim(kind, a, d),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


# --------------------------------------------------------------------------------------------
# the frame-level entry point (Session, ledger, projection): gpframe.frame.range_count
# --------------------------------------------------------------------------------------------


def frame_case(
    kind: str, method: str, split: str, where: str, *, rounds: int = 4, tiers=SLOW,
    n_fast: int = 10_000, n_slow: int = 100_000,
) -> Case:  # fmt: skip
    """range_count(df.geopriv(session, ...), region, ...): a fresh Session per sample batch."""
    import pandas as pd
    import shapely

    a, _ = AMOUNT[kind], DIST[kind]
    h0, h1 = PAIRS[(kind, where)]
    x0 = np.array([_FRAME_X0 - h0, _FRAME_Y0])
    x1 = np.array([_FRAME_X0 - h1, _FRAME_Y0])
    d_ground = _ground_distance(x0, x1)
    region = shapely.box(_FRAME_X0, _FRAME_Y0 - 50_000, _FRAME_X0 + 100_000, _FRAME_Y0 + 50_000)
    dim = 1 if method.startswith("dist") else 2
    m0, m1 = (h0, h1) if dim == 1 else (x0, x1)

    def run(x, n, rng):
        import gpframe as gp
        from gpframe.frame.range_count import range_count
        from gpframe.ledger import Session

        df = pd.DataFrame({"u": np.arange(n), "x": np.full(n, x[0]), "y": np.full(n, x[1])})
        budget = gp.CGP(rho=2 * a) if kind == "cgp" else gp.GP(eps=2 * a)
        amt = {"rho": a} if kind == "cgp" else {"eps": a}
        with Session(budget=budget) as s, ReleaseTap() as tap:
            bound = df.geopriv(s, user="u", x="x", y="y", crs=_FRAME_CRS)
            k = float(bound.projected.scale_max)
            res = _quiet(
                range_count, bound, region, method=method, rounds=rounds, split=split, rng=rng,
                **amt,
            )  # fmt: skip
        ch = res.charges.reindex(np.arange(n)).to_numpy(dtype=np.float64)
        r = rounds_from_charges(ch, tap.records, k * k if kind == "cgp" else k)
        return transcript(tap.records, r, dim, rounds)

    return register(
        Case(
            name=f"range_count_frame/{kind}/{method}/{split}/c{rounds}/{where}",
            covers=(
                "gpframe.frame.range_count.range_count",
                "gpframe.queries.range_count.run_range_count",
            ),
            run=run,
            inputs=(x0, x1),
            centers=(np.atleast_1d(m0), np.atleast_1d(m1)),
            featurizers=(llr_featurizer(kind, dim, m0, m1), rounds_featurizer),
            claim=_claim(kind, a, d_ground),
            tiers=tiers,
            n_fast=n_fast,
            n_slow=n_slow,
        )
    )


# --------------------------------------------------------------------------------------------
# the cases
# --------------------------------------------------------------------------------------------

# fast tier: one array-level case across the boundary, the frame entry point (Session, ledger,
# charges), and the interactive algorithm
range_count_case("cgp", "dist-elim", "even", "straddle", tiers=FAST)
frame_case("gp", "dist-elim", "doubling", "deep", tiers=FAST)
eliminate_case("gp", "dist", "straddle", interactive=True, tiers=FAST)

# slow tier: both triples × both splits × both notions, across the boundary (tight for GP: the
# user never stops early and spends its whole allocation) and at a depth where it stops early
for _kind in ("gp", "cgp"):
    for _method in ("dist-elim", "pt-elim"):
        for _split in ("even", "doubling"):
            if (_kind, _method, _split) != ("cgp", "dist-elim", "even"):
                range_count_case(
                    _kind,
                    _method,
                    _split,
                    "straddle",
                    tight=_kind == "gp" and _method == "dist-elim",
                )
            range_count_case(_kind, _method, _split, "deep")
    # the one-round baselines
    range_count_case(_kind, "dist", "even", "straddle", tight=_kind == "gp")
    range_count_case(_kind, "pt", "even", "straddle")
# elimination directly: the planar / Gaussian point triple, and the interactive algorithm
eliminate_case("gp", "pt", "deep", interactive=False, split="doubling")
eliminate_case("cgp", "dist", "straddle", interactive=True)
eliminate_case("cgp", "pt", "straddle", interactive=True)
frame_case("cgp", "pt-elim", "even", "straddle")
