"""Central ε-DP Laplace release of many statistics, each with its own ε and sensitivity.

See ``docs/noise.md`` (central Laplace, real statistic; "Many rates in one call"). Each row is
exactly what :func:`gpframe.mechanisms.laplace_dp` (``integer=False``) would release for it alone:
the same lattice g = 2^(⌊log₂Δ⌋−20), the same rate λ = ε/(⌊Δ/g⌋ + 1), the same guarantee; only
the noise of all rows comes from one call of
:func:`gpframe.mechanisms.noise.laplace_rates.discrete_laplace_rates` instead of one sampler call
per distinct (ε, Δ).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import InvalidInputError, NoiseOverflowError
from gpframe.mechanisms.calibration import (
    EPS_RANGE,
    LAM_RANGE,
    PARAM_RANGE,
    central_laplace,
    check_eps,
    check_positive,
)

__all__ = ["ReleasedRows", "central_laplace_rows", "laplace_dp_rows"]

_NOTHING = "Nothing was charged."
_EPS_LO, _EPS_HI = EPS_RANGE
_P_LO, _P_HI = PARAM_RANGE
_LAM_LO = LAM_RANGE[0]


@dataclass(frozen=True)
class ReleasedRows:
    """Released rows, each on its own lattice with its own noise and guarantee.

    Attributes
    ----------
    values : ndarray of float64
        ``(snap(x_i) + k_i) * g_i``: every entry an exact multiple of its ``g[i]``.
    g : ndarray of float64
        The lattice step of each row (a power of two, exact).
    lam : tuple of Fraction
        The exact rate of each row's discrete Laplace noise, per lattice step.
    scale : ndarray of float64
        The noise scale g/λ of each row in the statistic's units (rounded; a description).
    epsilon : tuple of Fraction
        The ε-DP amount of each row (user-level, hamming): what the ledger is charged per row.
    """

    values: np.ndarray
    g: np.ndarray
    lam: tuple[Fraction, ...]
    scale: np.ndarray
    epsilon: tuple[Fraction, ...]

    def __len__(self) -> int:
        return len(self.values)

    def error_bound(self, beta: float) -> np.ndarray:
        """Per row, the proven (1 − β) bound of :func:`~gpframe.mechanisms.tails.laplace_bound`.

        |y_i − x_i| ≤ s_i·ln(2/(β(1 + e^{−λ_i}))) + g_i/2 (``docs/noise.md``), floats (a
        description of the noise, never a decision).
        """
        if not 0.0 < float(beta) < 1.0:
            raise InvalidInputError(f"beta={beta!r} must be in (0, 1), e.g. beta=0.05.")
        lam = self.g / self.scale
        return self.scale * np.log(2.0 / (float(beta) * (1.0 + np.exp(-lam)))) + self.g / 2


def _fast(x: Any, lo: Fraction, hi: Fraction) -> Fraction | None:
    """``x`` itself when it is an int or Fraction inside [lo, hi] (integer comparisons only)."""
    t = type(x)
    if t is Fraction:
        a, b = x.numerator, x.denominator
    elif t is int:
        a, b = x, 1
    else:
        return None
    if a * lo.denominator >= lo.numerator * b and a * hi.denominator <= hi.numerator * b:
        return x if t is Fraction else Fraction(x)
    return None


def central_laplace_rows(
    epsilon: Any, sensitivity: Any
) -> tuple[list[tuple[Fraction, Fraction, Fraction]], np.ndarray]:
    """Per row, the calibration of :func:`~gpframe.mechanisms.calibration.central_laplace`.

    Real statistic, one coordinate, no draw scale. Returns the distinct calibrations
    ``(eps, g, lam)`` and, per row, the index of its own: each (ε, Δ) is checked once, exactly as
    ``laplace_dp`` checks it (``InvalidInputError`` naming the row), with integer arithmetic in
    place of ``Fraction`` where it is exact.

    >>> cal, index = central_laplace_rows([Fraction(1, 2)] * 2, [Fraction(1)] * 2)
    >>> index.tolist(), cal[0][1], cal[0][2] == Fraction(1, 2) / (2**20 + 1)
    ([0, 0], Fraction(1, 1048576), True)
    """
    eps_l = _rows(epsilon, "epsilon")
    sens_l = _rows(sensitivity, "sensitivity")
    if len(eps_l) != len(sens_l):
        raise InvalidInputError(
            f"epsilon has {len(eps_l)} entries and sensitivity {len(sens_l)}; pass one of each "
            f"per row. {_NOTHING}"
        )
    cal: list[tuple[Fraction, Fraction, Fraction]] = []
    index = np.empty(len(eps_l), dtype=np.int64)
    seen: dict[tuple, int] = {}
    for i, (e, d) in enumerate(zip(eps_l, sens_l, strict=True)):
        te, td = type(e), type(d)
        if te is Fraction and td is Fraction:  # ints hash faster than Fractions
            key: tuple | None = (e.numerator, e.denominator, d.numerator, d.denominator)
        else:  # typed: True and 1 stay apart (a bool is refused)
            key = (te, e, td, d)
        try:
            c = seen.get(key)
        except TypeError:  # unhashable: not a number, refused by the checks
            c, key = None, None
        if c is None:
            c = len(cal)
            cal.append(_calibrate(i, e, d))
            if key is not None:
                seen[key] = c
        index[i] = c
    return cal, index


def _calibrate(i: int, e: Any, d: Any) -> tuple[Fraction, Fraction, Fraction]:
    """Row ``i``'s checked ε, lattice step and rate (``central_laplace``, in integers)."""
    ef = _fast(e, _EPS_LO, _EPS_HI)
    if ef is None:
        ef = check_eps(e, f"epsilon[{i}]")
    df = _fast(d, _P_LO, _P_HI)
    if df is None:
        df = check_positive(d, f"sensitivity[{i}]")
    p, q = df.numerator, df.denominator
    # ⌊log₂ Δ⌋ from the bit lengths, corrected once (exact)
    k = p.bit_length() - q.bit_length()
    if (p << -k if k < 0 else p) < (q << k if k > 0 else q):
        k -= 1
    s = k - 20  # g = 2**s
    width = ((p << -s) // q if s < 0 else p // (q << s)) + 1
    a, b = ef.numerator, ef.denominator
    if a << 40 < b * width:  # λ below 2**-40: the reference coarsens the lattice
        cal = central_laplace(ef, df, integer=False)
        return ef, cal.g, cal.param
    g = Fraction(1 << s) if s >= 0 else Fraction(1, 1 << -s)
    return ef, g, Fraction(a, b * width)


def _rows(seq: Any, name: str) -> list[Any]:
    """``seq`` as a list of its rows; a scalar, a string or a 2-D array is refused by name."""
    if isinstance(seq, (str, bytes)) or (isinstance(seq, np.ndarray) and seq.ndim != 1):
        seq = None
    try:
        return list(seq)
    except TypeError:
        raise InvalidInputError(
            f"{name} must be a sequence with one number per row (a list or a 1-D array), got "
            f"{type(seq).__name__ if seq is not None else 'a scalar, a string or a 2-D array'}. "
            f"{_NOTHING}"
        ) from None


def _values(values: Any) -> tuple[np.ndarray, dict[int, Any]]:
    """Float values (0 where exact) and the exact ones (int or Fraction) by row."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu" and values.ndim == 1:
        return values.astype(np.float64), {}
    vals = _rows(values, "values")
    exact = {i: v for i, v in enumerate(vals) if type(v) is Fraction or type(v) is int}
    try:
        x = np.array([0.0 if i in exact else v for i, v in enumerate(vals)], dtype=np.float64)
    except (TypeError, ValueError):
        x = None
    if x is None or x.ndim != 1:
        raise InvalidInputError(
            f"values must be one number (float, int or Fraction) per row. {_NOTHING}"
        )
    return x, exact


def laplace_dp_rows(
    values: Any, *, sensitivity: Any, epsilon: Any, rng: Any = None
) -> ReleasedRows:
    """Release real statistics under central ε-DP, row ``i`` at its own ``epsilon[i]``.

    See ``docs/noise.md`` (central Laplace, real statistic; "Many rates in one call").

    Parameters
    ----------
    values : sequence of float or Fraction, length n
        The exactly computed statistics. Fractions are snapped exactly (``round(x / g)``, half to
        even), floats as ``laplace_dp`` snaps them (``rint(x / g)``).
    sensitivity : sequence, length n
        ℓ1 sensitivity Δ_i of row i (user-level), finite and > 0.
    epsilon : sequence, length n
        The ε-DP amount of row i, in [2⁻⁴⁰, 100].
    rng : BitSource or None
        The randomness source (``docs/noise.md``); None is the OS CSPRNG.

    Returns
    -------
    ReleasedRows
        The released values, each row's lattice step, rate, scale and ε.

    Notes
    -----
    Noise: row i gets discrete Laplace noise on g_i·Z, g_i = 2^(⌊log₂Δ_i⌋−20), at the rate
    λ_i = ε_i/(⌊Δ_i/g_i⌋ + 1) (scale at least Δ_i/ε_i), all rows in one exact sampler call.
    Charge: ``epsilon[i]`` for row i on the central ledger of every user the row depends on
    (``ReleasedRows.epsilon``); the caller charges.
    Error: |y_i − x_i| ≤ (g_i/λ_i)·ln(2/β) + g_i/2 with probability ≥ 1 − β per row.

    Examples
    --------
    >>> r = laplace_dp_rows([3.25, Fraction(7, 3)], sensitivity=[1.0, 2], epsilon=[1, 0.5])
    >>> r.g.tolist(), [float(e) for e in r.epsilon]
    ([9.5367431640625e-07, 1.9073486328125e-06], [1.0, 0.5])
    >>> r.lam[0] == Fraction(1, 2**20 + 1)
    True
    """
    from gpframe.mechanisms.noise.bits import resolve_rng
    from gpframe.mechanisms.noise.laplace_rates import discrete_laplace_rates

    cal, index = central_laplace_rows(epsilon, sensitivity)
    x, exact = _values(values)
    if x.size != index.size:
        raise InvalidInputError(
            f"values has {x.size} rows but epsilon and sensitivity {index.size}. {_NOTHING}"
        )
    gs = [g for _, g, _ in cal]
    gf = np.array([float(g) for g in gs], dtype=np.float64)[index]  # exact: powers of two
    with np.errstate(over="ignore", invalid="ignore"):
        y = x / gf  # exact: g is a power of two (inf or nan only for bad inputs)
    ok = np.abs(y) < 2.0**52
    np.rint(y, out=y)  # half to even, as laplace_dp snaps
    u = np.where(ok, y, 0.0).astype(np.int64)
    for i, v in exact.items():  # exact statistics: round(v / g), half to even, in integers
        ui = round(v / gs[index[i]])
        ok[i] = abs(ui) < 2**52
        u[i] = ui if ok[i] else 0
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InvalidInputError(
            f"values[{i}]={exact.get(i, x[i])!r} is not finite or too large for the noise its "
            f"sensitivity and epsilon ask for (|value / g| must stay below 2**52, "
            f"g={gf[i]:.3g}); drop it, or recentre the data. {_NOTHING}"
        )
    bits = resolve_rng(rng)
    k = discrete_laplace_rates([lam for _, _, lam in cal], bits, index=index)
    s = u + k  # |u| < 2**52, |k| < 2**62: no int64 overflow
    if s.size and not (-(1 << 53) < int(s.min()) and int(s.max()) < 1 << 53):
        raise NoiseOverflowError(
            "laplace_dp_rows: u + k reaches 2**53 lattice steps, so the release would not be "
            "an exact float. Nothing was released."
        )
    y = s.astype(np.float64) * gf  # exact: powers of two
    # g/λ as a float (a description of the noise): two correctly rounded conversions
    lam_f = np.array([float(lam) for _, _, lam in cal], dtype=np.float64)[index]
    scale = gf / lam_f
    rows = index.tolist()
    return ReleasedRows(
        y, gf, tuple(cal[c][2] for c in rows), scale, tuple(cal[c][0] for c in rows)
    )
