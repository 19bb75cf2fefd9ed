"""What a session's metric filter charges for a release, and the ledger key of each user.

Shared by both faces (``df.geopriv`` and the DuckDB functions), so that the same release costs the
same on either: the filter kind of a session (GP or CGP), a release's per-user charge in that
filter's units, and the canonical ledger key of each user id.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import InvalidInputError

__all__ = ["filter_charges", "filter_kind", "ledger_keys"]


def filter_kind(session: Any, what: str = "privatize") -> str:
    """Return the kind (``"gp"`` or ``"cgp"``) of the session's default metric budget.

    Raises ``InvalidInputError`` naming the operation ``what`` when the session has no metric
    budget. Every operation of every face that charges a metric budget asks here.
    """
    ledger = getattr(session, "ledger", None)
    kinds = getattr(ledger, "kind", None) or {}
    kind = kinds.get("metric") if isinstance(kinds, dict) else None
    if kind not in ("gp", "cgp"):
        raise InvalidInputError(
            f"the session has no metric budget (GP or CGP), so it cannot pay for {what}. "
            "Open it with gp.Session(budget=gp.CGP(rho=...)) or gp.GP(eps=...). "
            "Nothing was charged."
        )
    return str(kind)


def filter_charges(
    fkind: str, kind: str, per_point: list[Fraction], counts: np.ndarray
) -> list[Fraction]:
    """Each user's charge in the filter's units when each of their n points costs ``per_point``.

    A GP release on a CGP filter costs ε²/2 per point (Lem. 3.6 via
    :func:`gpframe.accounting.filters.charge_for`); CGP composition then adds the n points'
    costs, so a user whose n points are each ε-GP pays n·ε²/2, and a user whose whole tuple is
    ε-GP (``per="user"``: n points at ε/n) pays ε²/2 — the caller passes the per-point amount
    for the former and the tuple's amount with n = 1 for the latter. Raises
    ``BudgetExceededError`` for a Gaussian on a pure-GP filter, before anything is written.

    >>> filter_charges("cgp", "gp", [Fraction(1, 10)], np.array([3]))
    [Fraction(3, 200)]
    """
    from gpframe.accounting.filters import charge_for

    # Few distinct (amount, n) pairs: convert each once and reuse the same Fraction object
    # (Fraction arithmetic and hashing dominate a batch of thousands of users otherwise).
    conv: dict[Fraction, Fraction] = {}
    prod: dict[tuple[int, int], Fraction] = {}
    out = []
    for a, n in zip(per_point, counts, strict=True):
        key = (id(a), int(n))
        v = prod.get(key)
        if v is None:
            c = conv.get(a)
            if c is None:
                c = conv[a] = charge_for(fkind, kind, a)
            v = prod[key] = c * int(n)
        out.append(v)
    return out


def ledger_keys(uniques: Any, column: str = "user") -> list[Any]:
    """Return the canonical ledger key of each user id (:func:`gpframe.ledger.keys.canonical`).

    The same key from every frontend and dtype: ``uint8`` 7, ``int64`` 7 and DuckDB
    ``UBIGINT`` 7 are the int 7, a UUID is its lowercase hyphenated text; floats, decimals,
    bools and mixed types are refused. Pass the distinct ids (each is converted once).

    >>> ledger_keys(np.array([7, 8], dtype=np.uint64))
    [7, 8]
    """
    from gpframe.ledger.keys import canonical

    return canonical(uniques, column) if len(uniques) else []


def ledger_key_array(uniques: Any, column: str = "user") -> np.ndarray:
    """Return the keys of :func:`ledger_keys` as one array: int64 ids stay an int64 array.

    Integer ids that fit int64 are their own canonical keys (the ints of the same value), so
    they go to the ledger as one int64 array instead of one Python int per user; other ids
    (text, UUIDs, uint64 above int64...) are :func:`ledger_keys` in an object array.

    >>> ledger_key_array(pd.Index([7, 8])).dtype, ledger_key_array(["a"]).tolist()
    (dtype('int64'), ['a'])
    """
    arr = uniques.to_numpy() if isinstance(uniques, (pd.Index, pd.Series)) else uniques
    if isinstance(arr, np.ndarray) and arr.ndim == 1 and arr.dtype.kind in "iu":
        if arr.dtype.kind == "i" or not arr.size or int(arr.max()) <= np.iinfo(np.int64).max:
            return arr.astype(np.int64, copy=False)
    out = np.empty(len(uniques), dtype=object)
    out[:] = ledger_keys(uniques, column)
    return out
