"""The empirical privacy-loss audit: claims, cases, output events, and the two-sample test.

How one case is audited (``audit``):

1. Draw a *selection* sample of N outputs under each input of the neighbouring pair (x, x').
2. Turn outputs into bin codes with one or more featurizers built from the selection sample only
   (projection onto the pair's direction with quantile edges; polar cells around one input;
   or the case's own discrete codes). For each featurizer and each orientation (x against x', x'
   against x), sort the bins by their empirical likelihood ratio and take prefix unions: these are
   the Neyman–Pearson-like candidate events. Pick, for each delta of the claim, the event with
   the highest Clopper–Pearson lower bound of the loss on the selection sample.
3. Draw a *fresh* sample of N outputs per input and compute the exact Clopper–Pearson lower bound of
   ``ln((P(S|x) - delta) / P(S|x'))`` for each chosen event, at ``alpha / len(deltas)`` each.
4. The case is *violated* when a lower bound exceeds the claim at its delta.

The selection sample is independent of the fresh one, so the final bound holds at level
``1 - alpha`` per case whatever the selection did (alpha = 1e-6 by default): a correct mechanism
fails with probability at most 1e-6, and with the fixed seeds the outcome is deterministic.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .stats import gaussian_profile_eps, loss_lower_bound, zcdp_eps

__all__ = [
    "ALPHA",
    "AuditResult",
    "Case",
    "Claim",
    "audit",
    "discrete_featurizer",
]

ALPHA = 1e-6
ZCDP_DELTAS = (1e-1, 1e-2, 1e-3)


# --------------------------------------------------------------------------------------------
# Claims
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What a mechanism promises for one neighbouring pair.

    ``kind="pure"``: the privacy loss of every event is at most ``value`` (GP: eps·d_r; DP: eps).
    ``kind="zcdp"``: the pair is ``value``-zCDP (CGP: rho·d_r²; zCDP: rho), audited through the
    implied (eps, delta) at each of ``deltas``.
    """

    kind: str
    value: float
    label: str
    deltas: tuple[float, ...] = (0.0,)

    @classmethod
    def gp(cls, eps: float, d: float, r_min: float | None = 1.0) -> Claim:
        """eps-GP w.r.t. d_r(x, x') = max(d, r_min) (secure-noise.md §7.4(c2))."""
        dr = d if r_min is None else max(d, r_min)
        return cls("pure", float(eps) * dr, f"GP eps={eps:g}/m, d_r={dr:g} m")

    @classmethod
    def dp(cls, epsilon: float) -> Claim:
        """epsilon-DP for datasets differing in one user."""
        return cls("pure", float(epsilon), f"DP epsilon={epsilon:g}")

    @classmethod
    def cgp(cls, rho: float, d: float, r_min: float | None = 1.0, deltas=ZCDP_DELTAS) -> Claim:
        """rho-CGP w.r.t. d_r: the pair is (rho d_r²)-zCDP (concentrated-geo-privacy.md §1.4)."""
        dr = d if r_min is None else max(d, r_min)
        return cls("zcdp", float(rho) * dr * dr, f"CGP rho={rho:g}/m², d_r={dr:g} m", deltas)

    @classmethod
    def zcdp(cls, rho: float, deltas=ZCDP_DELTAS) -> Claim:
        """rho-zCDP for datasets differing in one user."""
        return cls("zcdp", float(rho), f"zCDP rho={rho:g}", deltas)

    def eps(self, delta: float) -> float:
        """The claimed epsilon at ``delta`` (pure claims ignore delta)."""
        if self.kind == "pure":
            return self.value
        return zcdp_eps(self.value, delta)

    def reference(self, delta: float) -> float:
        """What the nominal noise can show at best: the claim for pure mechanisms, the exact
        continuous-Gaussian profile with mu = sqrt(2 rho) for zCDP-type ones."""
        if self.kind == "pure":
            return self.value
        return gaussian_profile_eps(math.sqrt(2.0 * self.value), delta)


# --------------------------------------------------------------------------------------------
# Featurizers: outputs -> integer bin codes, built from the selection sample only
# --------------------------------------------------------------------------------------------

Featurizer = Callable[[np.ndarray], np.ndarray]
#: factory(anchor_center, other_center, pooled_selection_outputs) -> (featurizer, n_bins)
FeaturizerFactory = Callable[[Any, Any, np.ndarray], tuple[Featurizer, int]]


def _unique_edges(values: np.ndarray, nbins: int, extra: Sequence[float]) -> np.ndarray:
    qs = np.quantile(values, np.linspace(0.0, 1.0, nbins + 1)[1:-1])
    return np.unique(np.concatenate([qs, np.asarray(extra, dtype=np.float64)]))


def proj_featurizer(anchor: Any, other: Any, pooled: np.ndarray, nbins: int = 200):
    """Quantile bins of the projection onto the direction from ``other`` to ``anchor``.

    Half-spaces behind the anchor (away from the other input) are the tail events that saturate
    the Laplace and Gaussian losses.
    """
    a = np.atleast_1d(np.asarray(anchor, dtype=np.float64))
    b = np.atleast_1d(np.asarray(other, dtype=np.float64))
    e = (b - a) / np.linalg.norm(b - a)
    d = float(np.linalg.norm(b - a))

    def z(y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        return (y - a) @ e

    edges = _unique_edges(z(pooled), nbins, [0.0, d])

    def feat(y: np.ndarray) -> np.ndarray:
        return np.searchsorted(edges, z(y), side="right")

    return feat, len(edges) + 1


def polar_featurizer(
    anchor: Any, other: Any, pooled: np.ndarray, n_angle: int = 18, n_radius: int = 16
):
    """Cells of (angle to the direction pointing away from ``other``, radius) around ``anchor``.

    The truncated cone behind the anchor is where a planar Laplace loss approaches eps·d; the
    cells also resolve the orthants that expose per-axis noise along a diagonal.
    """
    a = np.asarray(anchor, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    e = (b - a) / np.linalg.norm(b - a)
    d = float(np.linalg.norm(b - a))

    def polar(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = np.asarray(y, dtype=np.float64) - a
        r = np.sqrt(np.einsum("ij,ij->i", z, z))
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.where(r > 0, -(z @ e) / r, 1.0)
        phi = np.arccos(np.clip(c, -1.0, 1.0))
        return phi, r

    _, r_pool = polar(pooled)
    r_edges = _unique_edges(r_pool, n_radius, [d])

    def feat(y: np.ndarray) -> np.ndarray:
        phi, r = polar(y)
        ab = np.minimum((phi * (n_angle / math.pi)).astype(np.int64), n_angle - 1)
        rb = np.searchsorted(r_edges, r, side="right")
        return ab * (len(r_edges) + 1) + rb

    return feat, n_angle * (len(r_edges) + 1)


def discrete_featurizer(raw: Callable[[np.ndarray], np.ndarray]) -> FeaturizerFactory:
    """Factory for outputs with a case-defined discrete code (e.g. SVT answer patterns).

    ``raw(outputs)`` returns int64 codes; codes not seen in the selection sample share one bin.
    """

    def factory(anchor: Any, other: Any, pooled: np.ndarray):
        seen = np.unique(raw(pooled))

        def feat(y: np.ndarray) -> np.ndarray:
            c = raw(y)
            idx = np.searchsorted(seen, c)
            idx = np.minimum(idx, len(seen) - 1)
            return np.where(seen[idx] == c, idx, len(seen))

        return feat, len(seen) + 1

    return factory


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def _gpframe_rng(seed: int) -> Any:
    from gpframe.testing import seeded_rng

    return seeded_rng(seed)


def numpy_rng(seed: int) -> np.random.Generator:
    """Seeded numpy generator, for mutants and reference algorithms in this test package only."""
    return np.random.default_rng(seed)


@dataclass(frozen=True)
class Case:
    """One audit case: a mechanism, a neighbouring pair, and the claimed guarantee.

    ``run(input, n, rng)`` returns n independent outputs of the mechanism on ``input``
    (array-like, first axis n). ``centers`` are the output-space positions of the two inputs (used
    by the geometric featurizers); discrete cases give ``featurizers`` instead.
    ``covers`` names the public functions the case exercises (the registry completeness test).
    """

    name: str
    run: Callable[[Any, int, Any], Any]
    inputs: tuple[Any, Any]
    claim: Claim
    covers: tuple[str, ...] = ()
    centers: tuple[Any, Any] | None = None
    featurizers: tuple[FeaturizerFactory, ...] = ()
    rng: Callable[[int], Any] = _gpframe_rng
    tiers: frozenset[str] = frozenset({"slow"})
    n_fast: int = 100_000
    n_slow: int = 1_000_000
    tight: bool = False
    guarantee: tuple[str, float] | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def factories(self, dim: int) -> tuple[FeaturizerFactory, ...]:
        if self.featurizers:
            return self.featurizers
        if dim == 1:
            return (proj_featurizer,)
        return (proj_featurizer, polar_featurizer)

    def sample(self, which: int, n: int, seed: int) -> np.ndarray:
        return np.asarray(self.run(self.inputs[which], n, self.rng(seed)))


@dataclass
class DeltaRow:
    delta: float
    claim: float
    reference: float
    lower: float
    estimate: float
    k1: int
    k2: int
    featurizer: str
    orientation: tuple[int, int]

    @property
    def violated(self) -> bool:
        return self.lower > self.claim

    @property
    def ratio(self) -> float:
        return self.lower / self.claim if self.claim > 0 else float("nan")


@dataclass
class AuditResult:
    case: str
    n: int
    rows: list[DeltaRow]
    seconds: float

    @property
    def violated(self) -> bool:
        return any(r.violated for r in self.rows)

    @property
    def tightness(self) -> float:
        """max over deltas of lower bound / claim (the slow tier asks >= 0.9 for pure claims)."""
        return max(r.ratio for r in self.rows)

    @property
    def reference_ratio(self) -> float:
        """max over deltas of lower bound / what the nominal noise can show."""
        return max(r.lower / r.reference if r.reference > 0 else float("nan") for r in self.rows)

    def summary(self) -> str:
        best = max(self.rows, key=lambda r: r.ratio)
        verdict = "VIOLATED" if self.violated else "ok"
        return (
            f"{self.case}: {verdict} n={self.n} lower={best.lower:.4f} claim={best.claim:.4f} "
            f"(delta={best.delta:g}) ratio={best.ratio:.3f} ref_ratio={self.reference_ratio:.3f} "
            f"k=({best.k1},{best.k2}) via {best.featurizer}{best.orientation} "
            f"[{self.seconds:.2f}s]"
        )


#: Largest ``ref_ratio`` a plain Gaussian case may show. For a discrete Gaussian on a fixed shift
#: (a case built with ``meta={"gaussian_curve": True}``), the audit's lower bound is a 1 - alpha
#: lower confidence bound of the mechanism's true epsilon(delta), which is at most the continuous
#: Gaussian curve of the nominal sigma (Canonne, Kamath & Steinke 2020: the discrete Gaussian is
#: no less private than the continuous one at the same sigma and integer shift). So a correct
#: mechanism fails this with probability <= alpha. Measured with the fixed seeds at N = 1e5: the
#: four fast Gaussian cases reach 0.857-0.946 (gaussian_zcdp/int/rho0.5/sens1 0.946), the 0.8 sigma
#: mutants 1.194 (gaussian_cgp/2d/rho0.02/d10/az45) and 1.532 (gaussian_zcdp/int/rho0.5/sens1):
#: margins 0.054 below and 0.194 above the threshold.
REF_RATIO_MAX = 1.0


def failed(case: Case, res: AuditResult) -> bool:
    """The verdict of the fast tier and of the mutant tests for ``res``, an audit of ``case``.

    A case fails when the loss lower bound exceeds the claim; a plain Gaussian case also fails
    when it exceeds the exact curve of the nominal sigma (``ref_ratio > REF_RATIO_MAX``): the
    conversion-formula claim is too loose to catch a Gaussian that draws less noise than it
    reports, the exact curve is not.
    """
    if res.violated:
        return True
    return bool(case.meta.get("gaussian_curve")) and res.reference_ratio > REF_RATIO_MAX


def _seed(name: str, salt: int, which: int) -> int:
    return (zlib.crc32(name.encode()) * 1_000_003 + salt * 10 + which) % (2**31)


def _best_prefix(
    c1: np.ndarray, c2: np.ndarray, n1: int, n2: int, a: float, delta: float
) -> tuple[float, np.ndarray]:
    """Best prefix union of bins ordered by empirical ratio; returns (lower bound, bin mask)."""
    order = np.argsort(-((c1 + 0.5) / (c2 + 0.5)), kind="stable")
    k1 = np.cumsum(c1[order])
    k2 = np.cumsum(c2[order])
    lb = loss_lower_bound(k1, n1, k2, n2, a, delta)
    j = int(np.argmax(lb))
    mask = np.zeros(len(c1), dtype=bool)
    mask[order[: j + 1]] = True
    return float(lb[j]), mask


def audit(
    case: Case, n: int, *, alpha: float = ALPHA, salt: int = 0, n_select: int | None = None
) -> AuditResult:
    """Audit ``case`` with ``n`` fresh outputs per input (and ``n_select`` for the event choice)."""
    t0 = time.perf_counter()
    n_sel = n if n_select is None else n_select
    sel = [case.sample(w, n_sel, _seed(case.name, 2 * salt, w)) for w in (0, 1)]
    fresh = [case.sample(w, n, _seed(case.name, 2 * salt + 1, w)) for w in (0, 1)]
    pooled = np.concatenate(sel)
    dim = 1 if pooled.ndim == 1 else int(np.prod(pooled.shape[1:]))
    deltas = case.claim.deltas
    a_each = alpha / len(deltas)
    centers = case.centers if case.centers is not None else (None, None)

    # candidate events from the selection sample: (lower bound, featurizer, orientation, mask)
    best: list[tuple[float, Any, str, tuple[int, int], np.ndarray]] = [
        (-math.inf, None, "", (0, 1), np.zeros(0, bool)) for _ in deltas
    ]
    for factory in case.factories(dim):
        for o in ((0, 1), (1, 0)):
            feat, nb = factory(centers[o[0]], centers[o[1]], pooled)
            c1 = np.bincount(feat(sel[o[0]]), minlength=nb)
            c2 = np.bincount(feat(sel[o[1]]), minlength=nb)
            for i, delta in enumerate(deltas):
                lb, mask = _best_prefix(c1, c2, n_sel, n_sel, a_each, delta)
                if lb > best[i][0]:
                    name = getattr(factory, "__name__", "discrete")
                    best[i] = (lb, feat, name, o, mask)

    rows = []
    for (_, feat, fname, o, mask), delta in zip(best, deltas, strict=True):
        if feat is None:  # no event with a finite bound: nothing to test at this delta
            rows.append(
                DeltaRow(
                    delta,
                    case.claim.eps(delta),
                    case.claim.reference(delta),
                    -math.inf,
                    math.nan,
                    0,
                    0,
                    "-",
                    o,
                )
            )
            continue
        k1 = int(mask[feat(fresh[o[0]])].sum())
        k2 = int(mask[feat(fresh[o[1]])].sum())
        lower = float(loss_lower_bound(k1, n, k2, n, a_each, delta))
        est = math.log(max(k1 / n - delta, 1e-300) / max(k2 / n, 1e-300)) if k1 else -math.inf
        rows.append(
            DeltaRow(
                delta,
                case.claim.eps(delta),
                case.claim.reference(delta),
                lower,
                est,
                k1,
                k2,
                fname,
                o,
            )
        )
    return AuditResult(case.name, n, rows, time.perf_counter() - t0)
