"""Pseudo-user post-processing of a Clip-User plan: a per-cell cap m_UB on retained counts.

See ``docs/operations/grid_stats.md``; Rameshwar & Tandon, 'On Improving the Composition Privacy
Loss in Differential Privacy for Fixed Estimation Error' (2024), eq. (15): for each cell with r̄_j
>= 1 scan **every** integer m_UB in 1..r̄*_j (the function is not unimodal,
``docs/operations/grid_stats.md``), set r_ℓj = min(r̄_ℓj, m_UB), score ERR(m_j, Σ_ℓ r_ℓj, min(r̄*_j,
m_UB)) with the one error function of ``docs/operations/grid_stats.md`` (bias against the original
m_j, sensitivity from the clipped counts), and keep the argmin, ties to the **largest** m_UB (clips
least). m_UB >= 1 keeps at least one sample of every retained user, so the sets G′_ℓ, Γ′ and the
charges do not change. Public and free like Clip-User (``docs/operations/grid_stats.md``).

The scan is vectorised over all cells at once: Σ_j r̄*_j candidates in total.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpframe.queries.clip_user.error import err

__all__ = ["pseudo_user", "pseudo_user_errors"]


def pseudo_user_errors(
    cells: np.ndarray, r: np.ndarray, m_cell: np.ndarray, model: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Error of every candidate m_UB of every cell.

    Parameters
    ----------
    cells : ndarray of int
        Cell index of each COO row.
    r : ndarray of int
        Retained count of each row after Clip-User (0 or m_ℓj).
    m_cell : ndarray of int
        Original total per cell.
    model : ErrorModel
        The constants of the error metric.

    Returns
    -------
    seg_cell : ndarray
        Cell index of each candidate (cells with r̄_j = 0 have none).
    m_ub : ndarray
        The candidate m_UB (1..r̄*_j within each cell, ascending).
    errors : ndarray
        ERR(m_j, Σ min(r̄, m_UB), m_UB) per candidate.
    """
    n_c = m_cell.size
    keep = r > 0
    cj, v = cells[keep].astype(np.int64), r[keep].astype(np.int64)
    top = np.zeros(n_c, np.int64)
    np.maximum.at(top, cj, v)
    off = np.concatenate([[0], np.cumsum(top)])
    total = int(off[-1])
    seg_cell = np.repeat(np.arange(n_c), top)
    m_ub = np.arange(total, dtype=np.int64) - off[seg_cell] + 1
    # D[p]: rows of cell j with value exactly M (p = off_j + M - 1)
    D = np.zeros(total + 1, np.int64)
    np.add.at(D, off[cj] + v - 1, 1)
    # count_ge(M) = #{rows with r >= M}: a reverse cumulative sum within each cell segment
    rc = np.cumsum(D[::-1])[::-1]  # rc[p] = sum_{q >= p} D[q]; rc[total] = 0
    ge = rc[:total] - rc[off[1:]][seg_cell]
    # r(M) = Σ_{M' <= M} count_ge(M') = Σ_rows min(r, M): a forward cumsum within the segment
    fc = np.concatenate([[0], np.cumsum(ge)])
    r_tot = fc[1:] - fc[off[:-1]][seg_cell]
    errors = err(m_cell[seg_cell], r_tot, m_ub, model)
    return seg_cell, m_ub, errors


def pseudo_user(
    cells: np.ndarray, r: np.ndarray, m_cell: np.ndarray, model: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Apply: return the capped retained counts per row and m_UB^opt per cell (0 if empty).

    See ``docs/operations/grid_stats.md``.

    >>> from gpframe.queries.clip_user import ErrorModel
    >>> model = ErrorModel(W=65.0, eps_mu=0.5, eps_v=0.5)
    >>> cells = np.zeros(8, np.int64); r = np.array([12, 1, 1, 1, 1, 1, 1, 1])
    >>> r_new, m_ub = pseudo_user(cells, r, np.array([19]), model)
    >>> m_ub.tolist(), r_new.tolist()
    ([1], [1, 1, 1, 1, 1, 1, 1, 1])
    """
    n_c = m_cell.size
    seg_cell, cand, errors = pseudo_user_errors(cells, r, m_cell, model)
    m_ub = np.zeros(n_c, np.int64)
    if cand.size:
        present = np.unique(seg_cell)
        starts = np.searchsorted(seg_cell, present)
        seg_min = np.minimum.reduceat(errors, starts)
        at_min = errors == seg_min[np.searchsorted(present, seg_cell)]
        # ties: the largest m_UB (clips least)
        best = np.maximum.reduceat(np.where(at_min, cand, 0), starts)
        m_ub[present] = best
    capped = np.minimum(r, m_ub[cells])
    return np.where(r > 0, capped, 0).astype(np.int64), m_ub
