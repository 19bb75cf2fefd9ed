"""Result objects returned by every query: the value, its error bound and what it cost.

See ``docs/internals.md`` (one call's data flow). A :class:`Result` carries the private value, an
error bound at a stated confidence 1 − β (computed from released values and public parameters only,
never from the true data), the mechanism and its parameters, the guarantee (notion,
metric and the r_min floor of ``docs/noise.md``), and the per-user charges committed to
the ledger before the result was built. Operations subclass it (one module per family in
:mod:`gpframe.results`) and override :meth:`Result._value_summary`.

Published view and curator's view. Everything a Result shows (``repr``, ``_repr_html_``,
``summary()``, ``to_dict()``, the ``attrs`` entry and the GeoParquet metadata written from it) is
the *published view*. For the metric notions (GP, CGP: the local model, which protects where
users are, not whether they are in the data) it lists the per-user charges and exclusions. For
the central notions (``kind`` "dp", "zcdp", "dp_expost") a Result holds no per-user charges, no
user ids, no exclusions and no count or total that depends on the data except through noise:
under central DP who is in the data is itself protected. It states the public bound
``spent_at_most`` instead. The per-user charges, exclusions and counts of a central query are
the *curator's view*, read from the ledger with ``session.report(query_id=result.query_id)``
(SECURITY.md, "What a published result contains").
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.errors import GpframeError, InvalidInputError

__all__ = ["CuratorViewError", "Result", "ResultAttr"]

# parameter name and unit of each notion, as users type them
_PARAM = {"gp": "eps", "cgp": "rho", "dp": "epsilon", "zcdp": "rho", "dp_expost": "epsilon"}
_UNIT = {"gp": " m⁻¹", "cgp": " m⁻²", "dp": "", "zcdp": "", "dp_expost": ""}
_NOTION = {
    "gp": "metric",
    "cgp": "metric",
    "dp": "central",
    "zcdp": "central",
    "dp_expost": "central",
}
_NAME = {
    "gp": "geo-privacy (GP)",
    "cgp": "concentrated geo-privacy (CGP)",
    "dp": "user-level differential privacy (DP)",
    "zcdp": "user-level zero-concentrated DP (zCDP)",
    "dp_expost": "user-level ex-post differential privacy",
}


class CuratorViewError(GpframeError, AttributeError):
    """A per-user quantity was asked of a central-DP result; it lives in the ledger only."""


_FLOAT_MAX = Fraction(np.finfo(np.float64).max)


def _fsum(values: np.ndarray) -> float:
    """``math.fsum`` of finite floats (the correctly rounded sum), without a pass in Python.

    Per-user charges take few distinct values (one per point, or per allocation step), so the
    exact sum is ``sum(count * value)`` over the distinct values, in exact rationals, rounded
    once to the nearest float: the value ``math.fsum`` returns, as both round the exact sum
    half to even. Many distinct values (or non-finite ones) take ``math.fsum`` itself.
    """
    a = np.asarray(values, dtype=np.float64).ravel()
    if a.size == 0 or not bool(np.isfinite(a).all()):
        return float(math.fsum(a))
    if bool((a == a[0]).all()):
        distinct, counts = a[:1], np.array([a.size])
    else:
        distinct, counts = np.unique(a, return_counts=True)
        if distinct.size > 4096:
            return float(math.fsum(a))
    total = sum(Fraction(float(v)) * int(c) for v, c in zip(distinct, counts, strict=True))
    if not total:  # exactly 0 (no saving): fsum's +0.0 unless every entry is -0.0 (its sign)
        return 0.0 if not bool(np.signbit(a).all()) else float(math.fsum(a))
    if abs(total) >= _FLOAT_MAX:  # overflow: fsum raises
        return float(math.fsum(a))
    return float(total)


def _curator_only(name: str, query_id: str) -> CuratorViewError:
    qid = repr(query_id) if query_id else "result.query_id"
    return CuratorViewError(
        f"{name} is not part of a central-DP result: per-user charges, exclusions and user counts "
        "depend on who is in the data, so the published result does not hold them. The curator "
        f"reads them from the ledger: session.report(query_id={qid})."
    )


def _fmt(x: float | None, digits: int = 4) -> str:
    """Short human number: ``412.3``, ``2e-06``, ``1.5e+04``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{float(x):.{digits}g}"


def _series(values: object, name: str) -> pd.Series:
    """Per-user amounts as a float64 Series indexed by user id (exact Fractions become floats)."""
    if values is None:
        return pd.Series([], dtype="float64", name=name)
    if isinstance(values, Mapping):
        s = pd.Series(dict(values), dtype="object")
    elif isinstance(values, pd.Series):
        s = values
    else:
        raise InvalidInputError(f"{name} must be a pandas Series or a mapping user -> amount.")
    if s.dtype.kind in "iuf":  # already numeric: no per-user Python work
        # pandas' copy-on-write makes this a lazy copy when s is float64 already: no buffer
        # is copied, and a later write to either Series copies it first
        out = s.astype("float64").rename(name)
    else:  # exact Fractions from the ledger
        floats = np.array([float(v) for v in s.to_numpy()], dtype="float64")
        out = pd.Series(floats, index=s.index, name=name, copy=False)
    out.index.name = s.index.name or "user"
    return out


def _jsonable(obj: Any) -> Any:
    """Convert ``obj`` to plain JSON types (Fractions and numpy scalars become floats/ints)."""
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating | Fraction):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "__geo_interface__") and hasattr(obj, "to_json"):  # GeoDataFrame/GeoSeries
        return json.loads(obj.to_json())
    if isinstance(obj, pd.DataFrame):
        return _jsonable(obj.to_dict(orient="records"))
    if isinstance(obj, pd.Series | pd.Index):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, Iterable):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "__geo_interface__"):  # a shapely geometry
        return _jsonable(obj.__geo_interface__)
    return str(obj)


@dataclass(frozen=True, eq=False, repr=False)
class Result:
    """What a query returns: the private value, its error bound and its privacy cost.

    Parameters
    ----------
    value : any
        The released value (array, GeoDataFrame, scalar, ...). Post-processing only.
    error : float or None
        Error bound that holds with probability ``confidence`` (= 1 − β); None if the operation
        states none.
    error_kind : str
        What ``error`` bounds, with its unit in parentheses, e.g. ``"max point error (m)"``.
    confidence : float or None
        1 − β, the probability with which ``error`` holds.
    mechanism : str
        The mechanism's name, e.g. ``"gaussian_cgp"``.
    params : dict
        The public parameters the query ran with (ρ or ε, β, method, lattice step, ...).
    kind : {"gp", "cgp", "dp", "zcdp", "dp_expost"}
        The notion the charges are expressed in (the filter's units).
    metric : str or tuple
        The metric of the guarantee: ``"euclidean"``, ``("floor", r_min)`` or ``"hamming"``.
    r_min : float or None
        The lattice floor in metres (``docs/noise.md``); None for central notions.
    charges : Series or mapping
        Amount committed per admitted user (index: user id), in the filter's units. Metric
        notions only: a central result drops it (it is ``None``; see ``query_id``).
    allocations : Series, mapping or None
        Amount reserved per admitted user; ``saved`` is allocation − charge. None: no savings.
        Dropped (``None``) for central notions.
    excluded : sequence
        Ids of users left out because their budget could not cover the allocation (charged 0).
        Dropped (``None``) for central notions.
    query_id : str
        The id of the query in the ledger. For a central result, the curator's per-user view
        (charges, allocations, exclusions) is ``session.report(query_id=result.query_id)``.
    spec : str
        The docs pages and papers the operation implements.
    approx : tuple or None
        Optional (δ, A) to add, for information only, the approximate-GP reading of a CGP
        charge ("≈ (ε, δ, A)-GP via Lem. 3.7", ``docs/ledger.md``).
    spent_at_most : float or None
        Central notions: what any one user can have been charged by this query, in the filter's
        units, computed from public parameters (e.g. 3·ε per cell × ``max_cells``) or from
        released values only. It is what the published view states in place of the realised
        per-user charges. None: not stated.

    Examples
    --------
    >>> import pandas as pd
    >>> r = Result(value=3.0, error=1.5, error_kind="count error (users)", confidence=0.95,
    ...            mechanism="laplace_gp", kind="gp", charges=pd.Series({"a": 0.01, "b": 0.01}),
    ...            query_id="q-1")
    >>> r  # doctest: +NORMALIZE_WHITESPACE
    Result(value=3, error_95=1.5 users, charged=2 users, excluded=0,
           spent_max=eps=0.01 m⁻¹, query_id=q-1)
    >>> r.n_charged, r.spent_total
    (2, 0.02)

    A central-DP result publishes the public bound only; the per-user view is in the ledger:

    >>> c = Result(value=7.0, kind="dp", charges={"a": 0.5}, excluded=["b"], query_id="q-2",
    ...            spent_at_most=0.5)
    >>> c
    Result(value=7, spent_at_most=epsilon=0.5, query_id=q-2)
    >>> c.charges is None, "excluded" in c.to_dict()
    (True, False)
    """

    value: Any
    error: float | None = None
    error_kind: str = ""
    confidence: float | None = None
    mechanism: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "cgp"
    metric: str | tuple = "euclidean"
    r_min: float | None = 1.0
    charges: Any = None
    allocations: Any = None
    excluded: Any = ()
    query_id: str = ""
    spec: str = ""
    approx: tuple[float, float] | None = None
    spent_at_most: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in _PARAM:
            raise InvalidInputError(
                f"kind={self.kind!r} is not one of {', '.join(map(repr, _PARAM))}."
            )
        object.__setattr__(self, "params", dict(self.params))
        if self.spent_at_most is not None:
            object.__setattr__(self, "spent_at_most", float(self.spent_at_most))
        if _NOTION[self.kind] == "central":
            # Published view: who was charged, how much and who was left out depend on who is
            # in the data. They are dropped here, at the one constructor every central result
            # goes through, so no output form (repr, to_dict, attrs, pickle) can carry them.
            object.__setattr__(self, "r_min", None)
            for name in ("charges", "allocations", "excluded"):
                object.__setattr__(self, name, None)
            return
        charges = _series(self.charges, "charge")
        object.__setattr__(self, "charges", charges)
        if self.allocations is not None:
            alloc = _series(self.allocations, "allocation").reindex(charges.index)
            object.__setattr__(self, "allocations", alloc)
        object.__setattr__(self, "excluded", tuple(self.excluded))

    # ---------------------------------------------------------------- counts and spend

    @property
    def notion(self) -> str:
        """``"metric"`` (GP, CGP) or ``"central"`` (DP, zCDP)."""
        return _NOTION[self.kind]

    @property
    def published_only(self) -> bool:
        """True for central notions: the result holds the published view only (no per-user data)."""
        return self.notion == "central"

    def _per_user(self, name: str) -> None:
        if self.published_only:
            raise _curator_only(name, self.query_id)

    @property
    def n_charged(self) -> int:
        """Number of users admitted (and charged, possibly less than their allocation).

        Metric notions only; central results raise :class:`CuratorViewError` (the count depends
        on who is in the data): read ``session.report(query_id=result.query_id)``.
        """
        self._per_user("n_charged")
        return len(self.charges)

    @property
    def n_excluded(self) -> int:
        """Number of users left out for lack of budget (charged nothing). Metric notions only."""
        self._per_user("n_excluded")
        return len(self.excluded)

    @property
    def n_users(self) -> int:
        """Number of users the query was asked of: charged + excluded. Metric notions only."""
        return self.n_charged + self.n_excluded

    @property
    def spent_total(self) -> float:
        """Sum of the charges over users, in the filter's units. Metric notions only."""
        self._per_user("spent_total")
        return _fsum(self.charges.to_numpy()) if self.n_charged else 0.0

    @property
    def spent_max(self) -> float:
        """Largest per-user charge: the privacy loss of the worst-off user for this query.

        Central notions: the public bound :attr:`spent_at_most` (0 when not stated), never the
        realised maximum, which would depend on the data.
        """
        if self.published_only:
            return 0.0 if self.spent_at_most is None else self.spent_at_most
        if not self.n_charged:
            return 0.0
        # numpy's NaN-skipping maximum of the float64 charges: Series.max's value without
        # pandas' masked reduction (to_dict asks three times; 10^7 users, 9 ms each)
        return float(np.fmax.reduce(self.charges.to_numpy(dtype=np.float64)))

    @property
    def spent_mean(self) -> float:
        """Mean per-user charge over charged users (0 when nobody was charged). Metric only."""
        return self.spent_total / self.n_charged if self.n_charged else 0.0

    @property
    def saved(self) -> float:
        """Total saving: allocations minus charges, summed over users.

        See ``docs/operations/range_count.md``.

        Metric notions only (a central saving is summed over the data's users).
        """
        self._per_user("saved")
        if self.allocations is None or not self.n_charged:
            return 0.0
        alloc, charges = self.allocations, self.charges
        if not alloc.index.equals(charges.index):
            return _fsum((alloc - charges).to_numpy())
        # aligned by position (the constructor reindexes the allocations to the charges)
        a, c = alloc.to_numpy(dtype=np.float64), charges.to_numpy(dtype=np.float64)
        if np.array_equal(a, c) and bool(np.isfinite(a).all()):
            return 0.0  # charged the allocations (a prepaid query): every x - x is +0.0
        with np.errstate(invalid="ignore", over="ignore"):  # as pandas' subtraction: no warning
            return _fsum(a - c)

    @property
    def beta(self) -> float | None:
        """The failure probability β = 1 − confidence of the error bound."""
        return None if self.confidence is None else 1.0 - self.confidence

    # ---------------------------------------------------------------- privacy statement

    def _amount(self, x: float) -> str:
        return f"{_PARAM[self.kind]}={_fmt(x)}{_UNIT[self.kind]}"

    @property
    def guarantee(self) -> dict[str, Any]:
        """The guarantee of this query for the worst-off user, as a plain dict."""
        return {
            "kind": self.kind,
            "notion": self.notion,
            "amount": self.spent_at_most if self.published_only else self.spent_max,
            "param": _PARAM[self.kind],
            "unit": _UNIT[self.kind].strip(),
            "metric": self.metric,
            "r_min": self.r_min,
            "statement": self.privacy_statement(),
        }

    def privacy_statement(self) -> str:
        """One paragraph saying what the charges protect, per notion (``docs/ledger.md``)."""
        amt = self._amount(self.spent_max)
        if self.kind == "gp":
            core = (
                f"Each charged user spent at most {amt} of {_NAME['gp']}: moving all of the "
                "user's locations by up to r metres changes the probability of any output by at "
                "most a factor exp(eps·r)."
            )
        elif self.kind == "cgp":
            core = (
                f"Each charged user spent at most {amt} of {_NAME['cgp']}: moving all of the "
                "user's locations by up to r metres keeps the Rényi divergence of order α of the "
                "output at most α·rho·r²."
            )
            if self.approx is not None:
                from gpframe.accounting.conversions import eps_min

                d, a = self.approx
                if self.spent_max > 0:
                    e = eps_min(self.spent_max, d, a)
                    core += (
                        f" For information: ≈ ({_fmt(e)} m⁻¹, {_fmt(d)}, {_fmt(a)} m)-GP via "
                        "Lem. 3.7 (ε, δ, A)."
                    )
        elif self.kind == "dp":
            core = (
                f"Each charged user spent at most {amt} of {_NAME['dp']}: adding, removing or "
                "changing one user's data changes the probability of any output by at most a "
                "factor exp(epsilon)."
            )
        elif self.kind == "zcdp":
            core = (
                f"Each charged user spent at most {amt} of {_NAME['zcdp']}: one user's data "
                "changes the Rényi divergence of order α of the output by at most α·rho."
            )
        else:
            core = (
                f"Each charged user was charged the realized ex-post {amt} of this output "
                "(docs/operations/monitoring.md); the pure-DP filter keeps the user's total within "
                "budget."
            )
        if self.notion == "metric":
            core += (
                f" Distances are read as max(r, r_min): protection below r_min = "
                f"{_fmt(self.r_min)} m equals that at {_fmt(self.r_min)} m."
            )
        if self.published_only:
            if self.spent_at_most is None:
                core += " (The per-user amount of this query is not stated.)"
            core += (
                " Who was charged, how much and who was left out for lack of budget are not part "
                "of this published result (they depend on who is in the data); the curator reads "
                "them from the ledger: session.report(query_id=...)."
            )
        elif self.n_excluded:
            core += (
                f" {self.n_excluded} user(s) were excluded for lack of budget; they were charged "
                "nothing and are not in the output."
            )
        return core

    # ---------------------------------------------------------------- display

    def _value_summary(self) -> str:
        """Short description of ``value`` for the one-line repr; subclasses override."""
        v = self.value
        if v is None:
            return "None"
        if isinstance(v, bool | int | float | np.integer | np.floating | Fraction):
            return _fmt(float(v), 6)
        if isinstance(v, pd.DataFrame):
            return f"<{type(v).__name__}: {len(v)} rows>"
        if isinstance(v, pd.Series):
            return f"<{type(v).__name__}: {len(v)} values>"
        if isinstance(v, np.ndarray):
            return f"<array {'×'.join(map(str, v.shape))}>"
        return f"<{type(v).__name__}>"

    def _error_label(self) -> str:
        pct = 100.0 * self.confidence if self.confidence is not None else math.nan
        return f"error_{pct:.0f}" if math.isfinite(pct) and pct == round(pct) else f"error_{pct:g}"

    def _error_unit(self) -> str:
        k = self.error_kind
        if k.endswith(")") and "(" in k:
            return k[k.rindex("(") + 1 : -1]
        return ""

    def _error_text(self) -> str:
        if self.error is None:
            return "n/a"
        unit = self._error_unit()
        return f"{_fmt(self.error)} {unit}".rstrip()

    def __repr__(self) -> str:
        parts = [f"value={self._value_summary()}"]
        if self.error is not None and self.confidence is not None:
            parts.append(f"{self._error_label()}={self._error_text()}")
        if self.published_only:
            parts.append(f"spent_at_most={self._bound_text()}")
        else:
            parts += [
                f"charged={self.n_charged} users",
                f"excluded={self.n_excluded}",
                f"spent_max={self._amount(self.spent_max)}",
            ]
            if self.allocations is not None:
                parts.append(f"saved={_fmt(self.saved)}")
        parts.append(f"query_id={self.query_id or '-'}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _bound_text(self) -> str:
        if self.spent_at_most is None:
            return "n/a"
        return self._amount(self.spent_at_most)

    def _rows(self) -> list[tuple[str, str]]:
        conf = "" if self.confidence is None else f" (confidence {_fmt(self.confidence)})"
        rows = [
            ("value", self._value_summary()),
            (self.error_kind or "error", self._error_text() + conf),
            ("mechanism", self.mechanism or "-"),
            ("parameters", ", ".join(f"{k}={v}" for k, v in self.params.items()) or "-"),
        ]
        if self.published_only:
            rows += [
                ("spent per user, at most", self._bound_text()),
                ("per-user view", "session.report(query_id=...) (ledger, curator only)"),
            ]
        else:
            rows += [
                ("users charged / excluded", f"{self.n_charged} / {self.n_excluded}"),
                (
                    "spent total / max / mean",
                    " / ".join(_fmt(x) for x in (self.spent_total, self.spent_max, self.spent_mean))
                    + f" ({_PARAM[self.kind]}{_UNIT[self.kind]})",
                ),
                ("saved", _fmt(self.saved)),
            ]
        rows += [
            ("guarantee", self.privacy_statement()),
            ("query id", self.query_id or "-"),
        ]
        if self.spec:
            rows.append(("spec", self.spec))
        return rows

    def _repr_html_(self) -> str:
        """Return a small two-column HTML table for notebooks."""
        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        return (
            f"<table class='gpframe-result'><caption>{html.escape(type(self).__name__)}"
            f"</caption>{body}</table>"
        )

    def summary(self) -> str:
        """Multi-line text summary, ending with the privacy statement."""
        width = max(len(k) for k, _ in self._rows())
        lines = [type(self).__name__]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in self._rows()]
        return "\n".join(lines)

    # ---------------------------------------------------------------- export

    def to_frame(self) -> pd.DataFrame:
        """Per-user table: status (charged / excluded), allocation, charge and saving.

        Excluded users appear with charge 0 and no allocation. Metric notions only: for a
        central result this table is the curator's view and comes from the ledger,
        ``session.report(query_id=result.query_id)`` (:class:`CuratorViewError` here).
        """
        self._per_user("to_frame()")
        charged = pd.DataFrame(
            {
                "status": "charged",
                "allocation": (
                    self.allocations if self.allocations is not None else self.charges
                ).to_numpy(dtype="float64"),
                "charge": self.charges.to_numpy(dtype="float64"),
            },
            index=self.charges.index,
        )
        excluded = pd.DataFrame(
            {
                "status": "excluded",
                "allocation": np.full(self.n_excluded, np.nan),
                "charge": np.zeros(self.n_excluded),
            },
            index=pd.Index(list(self.excluded), name=self.charges.index.name),
        )
        frames = [f for f in (charged, excluded) if len(f)]
        out = pd.concat(frames) if frames else charged
        out["saved"] = (out["allocation"] - out["charge"]).fillna(0.0)
        out.index.name = self.charges.index.name or "user"
        return out

    def to_dict(self, *, per_user: bool = True, value: bool = True) -> dict[str, Any]:
        """JSON-serialisable dict of the result (``json.dumps`` works on it).

        ``per_user=False`` leaves out the per-user charges and ``value=False`` the released value,
        for a compact summary (what a DataFrame's ``attrs`` and a GeoParquet file keep).

        A central result (kind dp, zcdp, dp_expost) gives its published view whatever the
        arguments: no user counts, charges, exclusions or spend totals, but ``spent_at_most``
        (the public per-user bound) and ``view="published"``; the curator's per-user view is
        ``session.report(query_id=...)``.
        """
        if self.published_only:
            return self._published_dict(value)
        total = self.spent_total  # one pass over the charges (spent_mean would sum them again)
        return {
            **self._released_dict(value),
            "n_users": self.n_users,
            "n_charged": self.n_charged,
            "n_excluded": self.n_excluded,
            "excluded": _jsonable(list(self.excluded)),
            "charges": (
                dict(zip(map(str, self.charges.index), self.charges.tolist(), strict=True))
                if per_user
                else None
            ),
            "spent_total": total,
            "spent_max": self.spent_max,
            "spent_mean": total / self.n_charged if self.n_charged else 0.0,
            "saved": self.saved,
            "query_id": self.query_id,
            "spec": self.spec,
        }

    def _released_dict(self, value: bool) -> dict[str, Any]:
        """Return the fields every view shares: the released value, its error, public parameters."""
        return {
            "type": type(self).__name__,
            "value": _jsonable(self.value) if value else None,
            "error": _jsonable(self.error),
            "error_kind": self.error_kind,
            "confidence": _jsonable(self.confidence),
            "mechanism": self.mechanism,
            "params": _jsonable(self.params),
            "guarantee": self._guarantee_json(),
        }

    def _guarantee_json(self) -> Any:
        g = self.guarantee
        metric = list(self.metric) if isinstance(self.metric, tuple) else self.metric
        return _jsonable({**g, "metric": metric})

    def _published_dict(self, value: bool) -> dict[str, Any]:
        """Return the central published view: released values and public parameters only."""
        return {
            **self._released_dict(value),
            "view": "published",
            "spent_at_most": _jsonable(self.spent_at_most),
            "query_id": self.query_id,
            "spec": self.spec,
        }

    def to_attr(self) -> ResultAttr:
        """Return the form this result takes in ``DataFrame.attrs`` (see :class:`ResultAttr`)."""
        return ResultAttr(self)


class ResultAttr(dict):
    """A :class:`Result` as stored in ``DataFrame.attrs["geopriv"]``.

    It is the result's compact JSON summary (a plain ``dict`` to ``json.dumps``, so geopandas'
    ``to_parquet`` can store it) that also behaves like the result: attribute access, ``repr``
    and the notebook view go to the :class:`Result` itself, kept in ``.result``. pandas deep-copies
    ``attrs`` on every operation; a result is immutable, so copies share it instead. For a
    central-DP result the dict is the published view (:meth:`Result.to_dict`): no user ids,
    per-user charges or data-dependent counts.

    Examples
    --------
    >>> import json, pandas as pd
    >>> r = Result(value=3.0, error=1.5, mechanism="laplace_gp", kind="gp",
    ...            charges=pd.Series({"a": 0.01}), query_id="q-1")
    >>> attr = r.to_attr()
    >>> attr.n_charged, attr["n_charged"], attr.result is r
    (1, 1, True)
    >>> json.loads(json.dumps(attr))["query_id"]
    'q-1'
    """

    __slots__ = ("result",)

    def __init__(self, result: Result) -> None:
        super().__init__(result.to_dict(per_user=False, value=False))
        self.result = result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.result, name)

    def __repr__(self) -> str:
        return repr(self.result)

    def _repr_html_(self) -> str:
        return self.result._repr_html_()

    def __copy__(self) -> ResultAttr:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultAttr:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (ResultAttr, (self.result,))
