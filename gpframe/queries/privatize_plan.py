"""What privatize reserves and charges, shared by the faces (``docs/operations/privatize.md``).

The pandas accessor and the Dask face (``docs/beyond-one-machine.md``) check the same amounts and
coordinates before anything is reserved, and turn the mechanisms' guarantees into ledger units
the same way, so a call charges the same on both. Array code only: the ledger is passed in.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from gpframe.errors import GpframeInternalError, InvalidInputError
from gpframe.queries import privatize as _pv

__all__ = ["actual_units", "amount_keyword", "check_coordinates", "preflight", "unit_floats"]


def actual_units(
    ledger: Any, fkind: str, kind: str, per: str, out: Any, counts: np.ndarray, n_users: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each user's actual charge as (int64 ledger units, float in the filter's units).

    ``per="point"``: n points each costing the guarantee's amount, so charge_for(amount) x n
    (CGP composition adds the points); ``per="user"``: the tuple is one release of the amount,
    so charge_for(n x point amount). Users outside ``out.charge_groups`` are charged 0.
    """
    from gpframe.accounting.filters import charge_for

    groups = out.charge_groups
    # one group of every user with one point count (per="point" over one-point users, the
    # usual case): the arrays made for it are the answer, no zeroed arrays to scatter into
    whole = len(groups) == 1 and groups[0][0].size == n_users and per == "point"
    units = None if whole else np.zeros(n_users, dtype=np.int64)
    floats = None if whole else np.zeros(n_users, dtype=np.float64)
    for users_arr, point_charge in groups:
        # a group of every user (distinct codes, so users_arr is 0..n_users-1): whole-array
        # reads and writes instead of gathers and scatters
        at: Any = slice(None) if users_arr.size == n_users else users_arr
        n_u = counts[at]
        if per == "point":
            u, big = ledger.units_for("metric", point_charge, n_u, kind=kind)
            c = charge_for(fkind, kind, point_charge)
            if n_u.size and int(n_u.min()) == int(n_u.max()):  # one count (one-point users)
                if floats is None:
                    floats = np.full(n_users, float(c * int(n_u[0])), dtype=np.float64)
                else:
                    floats[at] = float(c * int(n_u[0]))
            else:
                if floats is None:
                    floats = np.zeros(n_users, dtype=np.float64)
                for n in np.unique(n_u).tolist():
                    floats[users_arr[n_u == n]] = float(c * int(n))
        else:  # one group per distinct n: each user pays the same, one value
            n = int(n_u[0])
            u, big = ledger.units_for("metric", point_charge * n, None, kind=kind)
            floats[at] = float(charge_for(fkind, kind, point_charge * n))  # type: ignore[index]
        if big.any():
            raise GpframeInternalError("a privatize charge does not fit the ledger's units.")
        if units is None:  # units_for's own fresh array, one entry per user
            units = u
        else:
            units[at] = u
    if units is None:  # no group (nobody released)
        units = np.zeros(n_users, dtype=np.int64)
    if floats is None:
        floats = np.zeros(n_users, dtype=np.float64)
    return units, floats


def unit_floats(ledger: Any, units: np.ndarray) -> np.ndarray:
    """Ledger units as floats of the filter's units, one exact conversion per distinct value."""
    lu = ledger.units["metric"]
    units = np.asarray(units)
    if units.size and int(units.min()) == int(units.max()):  # one value: no sort
        return np.full(units.shape, float(lu.to_fraction(int(units.flat[0]))))
    uniq, inv = np.unique(units, return_inverse=True)
    return np.array([float(lu.to_fraction(int(v))) for v in uniq.tolist()])[inv]


def amount_keyword(kind: str) -> str:
    """Return the keyword of a kind's amount: ``eps`` for GP, ``rho`` for CGP."""
    return "eps" if kind == "gp" else "rho"


def check_coordinates(xy: np.ndarray) -> None:
    """Refuse projected coordinates beyond ±2**40 m (a wrong CRS) before any reservation."""
    if not xy.size:
        return
    # two reductions, no temporaries: NaN makes both comparisons False (refused below)
    if -_pv.COORD_MAX_M < xy.min() and xy.max() < _pv.COORD_MAX_M:
        return
    big = ~(np.abs(xy) < _pv.COORD_MAX_M)
    if big.any():
        i = int(np.flatnonzero(big.any(axis=1))[0])
        raise InvalidInputError(
            f"projected coordinate {xy[i].tolist()!r} (row {i}) is beyond ±2**40 m; check the CRS "
            "(pass to_crs= a local projected CRS). Nothing was charged."
        )


def preflight(kind: str, amount: Fraction, per: str, counts: np.ndarray, scale_max: float) -> None:
    """Run the mechanisms' exact calibration for every per-point amount before any reservation.

    The calibration raises ``InvalidInputError`` for amounts outside the supported ranges
    (``docs/noise.md``); doing it here keeps the ledger untouched on such input.
    """
    # per="user": one check per distinct point count, found without a Python pass per user
    c = np.asarray(counts)
    distinct = [1] if per == "point" else np.unique(c[c > 0]).tolist()
    for n in distinct:
        # the wrapper's full check (range, calibration, largest noise scale) at the amount the
        # mechanism runs at after the CRS's scale factor: anything it would refuse after
        # reserve() must be refused here
        _pv.check_point_amount(kind, amount / n, scale_max=Fraction(scale_max))
