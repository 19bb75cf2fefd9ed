"""Nearest users: the k users whose one point is nearest to a public point (Algorithm 8).

See ``docs/operations/nearest_users.md`` and ``docs/operations/range_count.md`` (baselines ``pt`` /
``dist``, Lemmas 6.4–6.7, Algorithm 8 over Algorithm 5, ties, interactive elimination, the exact
charge, charges: a user dropped at round r pays the parts of rounds 1..r, pitfalls); Liang & Yi,
'Adaptive Privacy Budgeting' (2026), Alg. 8, Alg. 5.

Each user contributes one point (one component); h(x) = ||x − q|| is 1-Lipschitz. The elimination
machinery is :func:`gpframe.queries.elimination.eliminate_interactive`; this module adds the
final selection (post-processing of released values only) and the error bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from gpframe.accounting.amounts import probability
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.queries.elimination import Draw, Elimination, eliminate_interactive

__all__ = [
    "METHODS",
    "NearestArrays",
    "admitted_allocations",
    "check_admitted",
    "distance_to",
    "nearest_result",
    "nearest_rounds",
    "nearest_users_arrays",
]

METHODS = ("pt", "dist", "pt-elim", "dist-elim")
_NOTHING = "Nothing was charged."


@dataclass
class NearestArrays:
    """What :func:`nearest_users_arrays` returns.

    Attributes
    ----------
    selected : ndarray of int64, shape (k,)
        Positions (into the input users) of the k users output, nearest first by their final
        noisy estimate.
    exact : bool
        Algorithm 8 ended with |S| = k: with probability ≥ 1 − β_elim the output is exactly the
        true k nearest (Cor. 6.5).
    error : float
        Distance error (metres) of every output rank at confidence 1 − β: 0 when ``exact``, else
        E_{i_j} + max_i E_i with each user's width at β_post/n (Lemmas 6.4–6.7).
    charges, allocations : ndarray of object (Fraction)
        Per user, in the filter's units (eliminated users pay less,
        ``docs/operations/range_count.md``).
    rounds_run : ndarray of signed int (a small dtype)
    elimination : Elimination
    """

    selected: NDArray[np.int64]
    exact: bool
    error: float
    charges: NDArray[Any]
    allocations: NDArray[Any]
    rounds_run: NDArray[np.int64]
    elimination: Elimination


def nearest_users_arrays(
    xy_m: Any,
    point_m: Any,
    k: int,
    *,
    kind: Literal["cgp", "gp"],
    amount: Any,
    method: str = "dist-elim",
    rounds: int = 10,
    split: Literal["even", "doubling"] = "doubling",
    beta: float = 0.1,
    unit: Fraction | None = None,
    scale_max: float | Fraction = 1,
    rng: Any = None,
) -> NearestArrays:
    """Find the k users nearest to ``point_m``, one point per user.

    See ``docs/operations/nearest_users.md`` (Algorithm 8).

    Parameters
    ----------
    xy_m : array_like, shape (n, 2)
        One point per user (the selected component), projected metres.
    point_m : (x, y)
        The public query point, same CRS.
    k : int
        Users to return, 1 ≤ k ≤ number of users asked.
    kind : {"cgp", "gp"}
        Gaussian (ρ, m⁻²) or Laplace (ε, m⁻¹) releases.
    amount : scalar or array of shape (n,)
        Allocation per user (0: not asked).
    method : {"pt", "dist", "pt-elim", "dist-elim"}
        Point or distance privatization, one round (baselines) or interactive elimination.
    rounds, split : int, {"even", "doubling"}
        Elimination rounds c and split π (``docs/operations/range_count.md``; default doubling, c =
        10).
    beta : float
        Total failure probability: β/2 for the eliminations, β/2 for the final selection.
    unit : Fraction, optional
        Ledger unit the parts are rounded down to.
    scale_max : float
        Projection scale factor (mechanisms at ρ/k_s², ε/k_s).
    rng : BitSource or None

    Returns
    -------
    NearestArrays

    Notes
    -----
    Noise: round j releases ||x_i − q|| (``dist``; lattice Gaussian σ = (1 + g/r_min)/√(2ρ_j) or
    Laplace scale (1 + g/r_min)/ε_j) or x_i (``pt``) for the users still in S.
    Charge: baselines the allocation; ``*-elim`` a_i Σ_{j ≤ r_i} π_j (dropped at round r_i, or
    the rounds run before |S| = k).
    Error: see :class:`NearestArrays`.

    Examples
    --------
    >>> xy = np.array([[0.0, 10.0], [5.0, 0.0], [9000.0, 0.0], [0.0, 12000.0]])
    >>> out = nearest_users_arrays(xy, (0.0, 0.0), 2, kind="cgp", amount=1e-3, rounds=4,
    ...                            split="even")
    >>> sorted(out.selected.tolist()), out.exact
    ([0, 1], True)
    >>> [float(c) for c in out.charges][2] < 1e-3            # far users are dropped early
    True
    """
    from gpframe.mechanisms.noise import resolve_rng

    if method not in METHODS:
        raise InvalidInputError(
            f"method={method!r} is not one of {', '.join(map(repr, METHODS))}. {_NOTHING}"
        )
    p = np.asarray(xy_m, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 2 or not np.isfinite(p).all():
        raise InvalidInputError(f"xy_m must be finite with shape (n, 2), got {p.shape}. {_NOTHING}")
    q = np.asarray(point_m, dtype=np.float64).reshape(-1)
    if q.shape != (2,) or not np.isfinite(q).all():
        raise InvalidInputError(f"point must be one finite (x, y), got {point_m!r}. {_NOTHING}")
    data = distance_to(q)(p) if method.startswith("dist") else p
    return nearest_rounds(data, q, k, kind=kind, amount=amount, method=method, rounds=rounds,
                          split=split, beta=beta, unit=unit, scale_max=scale_max,
                          rng=resolve_rng(rng))  # fmt: skip


def distance_to(q: Any) -> Callable[[Any], np.ndarray]:
    """Return h(x) = ||x − q|| on an (m, 2) array of points (1-Lipschitz; q public)."""
    q = np.asarray(q, dtype=np.float64).reshape(-1)

    def h(pts: Any) -> np.ndarray:
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        return np.hypot(pts[:, 0] - q[0], pts[:, 1] - q[1])

    return h


def nearest_rounds(
    data: Any,
    point_m: Any,
    k: int,
    *,
    kind: Literal["cgp", "gp"],
    amount: Any,
    method: str,
    rounds: int,
    split: Literal["even", "doubling"],
    beta: float,
    unit: Fraction | None,
    scale_max: float | Fraction,
    rng: Any,
    draw: Draw | None = None,
) -> NearestArrays:
    """Run Algorithm 8 on prepared values: the rounds, then the final selection.

    ``data`` is the distances to ``point_m`` (``dist*``, shape (n,)) or the points (``pt*``,
    shape (n, 2)); ``rng`` a resolved bit source. With ``draw`` (see
    :func:`gpframe.queries.elimination.eliminate_interactive`), the values are released where
    they are held (the Dask face, ``docs/beyond-one-machine.md``): ``data`` is read for its
    shape only, and ``rng`` draws only the final selection's random order of ties. Noise,
    charge and error as in :func:`nearest_users_arrays`.
    """
    b = probability(beta)
    elim = method.endswith("-elim")
    dist = method.startswith("dist")
    bits = rng
    common = dict(kind=kind, triple="dist" if dist else "pt",
                  h=None if dist else distance_to(point_m), unit=unit, scale_max=scale_max,
                  rng=bits, draw=draw)  # fmt: skip
    if elim:
        out = eliminate_interactive(data, amount, k=k, rounds=rounds, split=split, beta=b / 2,
                                    **common)  # fmt: skip
        b_post = b / 2
    else:
        out = eliminate_interactive(data, amount, k=k, rounds=1, split="even", beta=b / 2,
                                    **common)  # fmt: skip
        b_post = b
    S = np.flatnonzero(out.state == 0)
    queried = int((out.state >= 0).sum())
    est = out.estimate[S]
    if S.size and not np.asarray(out.rounds_run).any():
        # k >= the users: every user is among the k nearest, known without a look at the data;
        # listed in a random order of the query (no estimates exist to rank them)
        sel = S[np.argsort(bits.arr(S.size, np.uint64), kind="stable")]
        exact_out, err = True, 0.0
    elif elim and S.size == k:
        sel = S[np.argsort(est, kind="stable")] if np.isfinite(est).all() else S
        exact_out, err = True, 0.0
    else:
        # ties (and the order of equal estimates) by a random permutation of the query
        keys = bits.arr(S.size, np.uint64)
        order = np.lexsort((keys, est))
        sel = S[order[:k]]
        w = out.width_fn(b_post / max(queried, 1))
        # Lemmas 6.4–6.7 with each user's own width (unequal allocations): E_{i_j} + max E
        err = float(np.nanmax(w[sel]) + np.nanmax(w[S])) if S.size else math.nan
        exact_out = False
    return NearestArrays(
        selected=np.asarray(sel, dtype=np.int64),
        exact=exact_out,
        error=err,
        charges=out.charges,
        allocations=out.allocations,
        rounds_run=out.rounds_run,
        elimination=out,
    )


def refuse_if_fewer_can_pay(session: Any, keys: list[Any], amount: Fraction, k: int,
                            prefix: str = "") -> None:  # fmt: skip
    """Raise ``BudgetExceededError`` when fewer than ``k`` of ``keys`` can pay ``amount``.

    Read-only, so a refusal leaves the ledger file as it was (a reserve-then-cancel would log the
    attempt); the reservation's own admission stays the backstop for a race with other writers.
    Both frontends of nearest users call it before reserving.
    """
    units = session.ledger.units["metric"]
    need = units.to_fraction(units.up(amount))
    can = sum(1 for v in session.remaining_exact(keys, notion="metric").tolist() if v >= need)
    if can < k:
        raise too_few_can_pay(can, k, prefix)


def too_few_can_pay(can: int, k: int, prefix: str = "") -> BudgetExceededError:
    """Return the refusal of a nearest-users query that fewer than ``k`` users can pay for."""
    return BudgetExceededError(
        f"{prefix}only {can} users can afford the allocation, fewer than k={k}; lower rho/eps "
        f"or k. {_NOTHING}"
    )


def admitted_allocations(admitted: Any, amount: Fraction) -> np.ndarray:
    """Each user's allocation in a nearest-users reservation: ``amount`` if admitted, else 0."""
    alloc = np.empty(len(admitted), dtype=object)
    alloc[:] = [amount if a else Fraction(0) for a in np.asarray(admitted).tolist()]
    return alloc


def check_admitted(admitted: Any, amount: Fraction, k: int, checks: dict[str, Any]) -> None:
    """Refuse a reservation that admitted fewer than ``k`` users or allocations the method refuses.

    Both faces' ``check`` before any noise is drawn (a refusal cancels the reservation): a writer
    may have spent budgets since the read-only count, and the method's checks are the backstop
    on the allocations actually used.
    """
    from gpframe.queries.elimination import check_method_parts

    n_adm = int(np.asarray(admitted, dtype=bool).sum())
    if n_adm < k:
        raise too_few_can_pay(n_adm, k)
    check_method_parts(admitted_allocations(admitted, amount), **checks)


def nearest_result(
    out: NearestArrays, admitted: np.ndarray, users: np.ndarray, *, params: dict[str, Any],
    beta: float, kind: str, fkind: Any, query_id: Any,
) -> Any:  # fmt: skip
    """Return the :class:`~gpframe.results.NearestResult` of a committed run (both faces).

    ``out`` is the run's value, ``admitted`` its per-user admission; called only after the
    charge is committed. Charges and allocations are per admitted user (curator-side).
    """
    import pandas as pd

    from gpframe.results import NearestResult

    adm = np.asarray(admitted, dtype=bool)
    idx = pd.Index(users[adm], name="user")
    return NearestResult(
        value=users[out.selected].tolist(),
        error=out.error,
        confidence=1.0 - beta,
        mechanism="gaussian_cgp" if kind == "cgp" else "laplace_gp",
        params={**params, "exact": out.exact,
                "rounds_histogram": out.elimination.rounds_histogram.tolist()},
        kind=fkind,
        metric=("floor", 1.0),
        charges=pd.Series([float(c) for c in out.charges[adm]], index=idx),
        allocations=pd.Series([float(a) for a in out.allocations[adm]], index=idx),
        excluded=users[~adm].tolist(),
        query_id=query_id,
    )  # fmt: skip
