"""Monitoring streams of bounded statistics: AboveThreshold, Report-Noisy-Max, threshold queries.

See ``docs/operations/monitoring.md`` (Laplace AboveThreshold / sparse vector, Gaussian
Report-Noisy-Max, Gaussian AboveThreshold, ex-post charges, modes R and S, threshold query); Lyu,
Su & Li, 'Understanding the Sparse Vector Technique for Differential Privacy' (2017), Alg. 1;
Lebensold, Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' (2024),
Thm. 8, Alg. 1; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), Alg. 9. Every operation charges the
session's per-user **central** ledger before any answer is released (charge first, release second)
and returns a :class:`MonitorResult` with the realized ε beside the worst case and the ex-ante
comparison.

Published view. A :class:`MonitorResult` is central-DP, so it holds no user ids, per-user
charges or user counts (who is in ``users`` is what DP protects): every user pays the same
amount, a function of the released answers only, stated as ``spent_at_most``. The curator reads
the per-user charges from the ledger: ``session.report(query_id=result.query_id)``.

Users and queries. ``users`` are the ids of everyone whose data the queries read; each pays the
charge. The queries are precomputed values or zero-argument callables over data the caller
holds, so a user cannot be removed from them: by default (``on_exhausted="raise"``) a run
starts only if **every** user is admitted, otherwise monitoring stops (the reservation is
cancelled before any noise, nothing is charged for that run: membership never changes inside a
run) and the error names the users who cannot pay. With ``on_exhausted="exclude"`` a run goes
ahead with the users who can pay, and the queries are computed from their data only: the caller
passes the queries as a callable ``f(users)`` (``zone_above_threshold`` does this itself). The
exclusion depends on the ledger only, never on the data being monitored; the answers are then
about the admitted users (a different population), and who was left out is in the curator's
view (``session.report(query_id=...)``, status ``"excluded"``), never in the published result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from gpframe.accounting.amounts import positive, probability
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.ledger import run as driver
from gpframe.ledger.run import Charge, active_preview
from gpframe.ledger.session import EXCLUDED_KEY
from gpframe.mechanisms.noise.bits import resolve_rng
from gpframe.mechanisms.selection import (
    ATParams,
    GaussianATRun,
    LaplaceSVTRun,
    at_run_reservation,
    at_step_needs,
    eps_rnm,
    gaussian_report_noisy_max,
    laplace_at_accuracy,
    laplace_report_noisy_max,
    sigma_for_eps_rnm,
    zw20_eps,
)
from gpframe.results import MonitorResult, Preview
from gpframe.results.preview import dry

__all__ = [
    "above_threshold",
    "report_noisy_max",
    "threshold_query",
    "zone_above_threshold",
    "zone_counts",
]

_NOISES = ("laplace", "gaussian")
_MODES = ("R", "S")
#: what a monitor does when some users cannot pay (docs/operations/monitoring.md)
ON_EXHAUSTED = ("raise", "exclude")


# --------------------------------------------------------------------------------------------
# validation helpers (all run before the ledger is touched)


def _choice(value: object, name: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise InvalidInputError(
            f"{name}={value!r} is not one of {', '.join(map(repr, options))}. Nothing was charged."
        )
    return str(value)


def _users(users: object) -> list[Any]:
    if users is None:
        raise InvalidInputError(
            "users=None: pass the ids of every user whose data the queries read (each is "
            "charged). Nothing was charged."
        )
    if isinstance(users, (str, bytes)):
        users = [users]
    from gpframe.ledger.keys import canonical

    # the ledger keys of every frontend: uint8 7 and int64 7 are one user, a UUID its text
    out = canonical(users if hasattr(users, "dtype") else list(users), "users")
    if not out:
        raise InvalidInputError("users is empty. Nothing was charged.")
    if len(set(out)) != len(out):
        raise InvalidInputError(
            "users has duplicate ids; pass each user once. Nothing was charged."
        )
    return out


def _int(value: object, name: str, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise InvalidInputError(f"{name}={value!r} must be an integer >= 1. Nothing was charged.")
    return int(value)


def _check_integer_scores(values: Any, integer: bool) -> None:
    """Refuse ``integer=True`` with non-integer values, when they are known before reserving.

    Values given as numbers (a list, tuple, array or Series) are checked here, at the entry
    point; a zero-argument callable or ``f(users)`` yields its value only inside the run, where
    the run's own check cancels the reservation.
    """
    numbers = isinstance(values, (list, tuple, np.ndarray, pd.Series))
    if not integer or _per_users(values) or not numbers:
        return
    if any(callable(v) for v in values):
        return
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return  # the run's own checks name the bad value
    finite = x[np.isfinite(x)]
    if not np.array_equal(finite, np.rint(finite)):
        bad = finite[finite != np.rint(finite)][0]
        raise InvalidInputError(
            f"integer=True but the value {float(bad)!r} is not an integer; pass integer=False "
            "for real-valued scores. Nothing was charged."
        )


def _central_kind(session: Any) -> str:
    kind = getattr(session, "ledger", None) and session.ledger.kind.get("central")
    if kind is None:
        raise InvalidInputError(
            "the session has no central budget; open it with central=gp.DP(epsilon=...). "
            "Nothing was charged."
        )
    return kind


@dataclass(frozen=True)
class _PerUsers:
    """Queries computed from the data of the users a run admits: ``fn(users)`` -> the values.

    ``length`` is the public number of queries when known before the data are read.
    """

    fn: Callable[[list[Any]], Iterable[Any]]
    length: int | None = None


def _per_users(queries: Any) -> bool:
    """Whether ``queries`` is a callable of the admitted users (not an iterable of queries)."""
    return isinstance(queries, _PerUsers) or (
        callable(queries) and not isinstance(queries, Iterable)
    )


class _Stream:
    """The query stream: values or zero-argument callables, read one at a time (public order).

    Built from a callable ``f(users)`` (or :class:`_PerUsers`), the values are computed by
    :meth:`bind` over each run's admitted users; the position carries over between runs.
    """

    def __init__(self, queries: Iterable[Any]) -> None:
        self._factory: Callable[[list[Any]], Iterable[Any]] | None = None
        self._peek: list[Any] = []
        self.pos = 0
        if _per_users(queries):
            per = queries if isinstance(queries, _PerUsers) else _PerUsers(queries)  # type: ignore[arg-type]
            self._factory, self._len, self._bound = per.fn, per.length, False
            self._it: Iterator[Any] = iter(())
            return
        if isinstance(queries, (str, bytes)) or not isinstance(queries, Iterable):
            raise InvalidInputError(
                f"queries={type(queries).__name__} must be an iterable of numbers or of "
                "zero-argument callables, or a callable f(users) returning the values. Nothing "
                "was charged."
            )
        self._len = len(queries) if hasattr(queries, "__len__") else None  # type: ignore[arg-type]
        self._it = iter(queries)
        self._bound = True

    @property
    def per_users(self) -> bool:
        """Whether the values are computed from the admitted users' data."""
        return self._factory is not None

    def bind(self, users: list[Any]) -> None:
        """Compute the values over ``users`` (a run's admitted users), from the current position.

        Called from a reservation's check, so a bad result cancels it: nothing is charged.
        """
        if self._factory is None:
            return
        values = self._factory(list(users))
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise InvalidInputError(
                f"queries(users) returned {type(values).__name__}, not an iterable of numbers. "
                "Nothing was charged."
            )
        vals = list(values)
        if self._len is None:
            self._len = len(vals)
        elif len(vals) != self._len:
            raise InvalidInputError(
                f"queries(users) returned {len(vals)} values, expected {self._len}: the number "
                "of queries must not depend on who is admitted. Nothing was charged."
            )
        self._it, self._peek, self._bound = iter(vals[self.pos :]), [], True

    def remaining(self) -> int | None:
        return None if self._len is None else self._len - self.pos

    def has_next(self) -> bool:
        if self._peek:
            return True
        if not self._bound:  # values not computed yet: the public length decides
            return self._len is None or self.pos < self._len
        try:
            self._peek.append(next(self._it))
        except StopIteration:
            return False
        return True

    def next_value(self) -> float:
        item = self._peek.pop() if self._peek else next(self._it)
        self.pos += 1
        v = item() if isinstance(item, Callable) else item  # type: ignore[arg-type]
        try:
            f = float(v)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"query {self.pos - 1} returned {v!r}, not a number.") from exc
        if not math.isfinite(f):
            raise InvalidInputError(f"query {self.pos - 1} returned {f!r}, not a finite number.")
        return f


def _refused_users(r: Any, ulist: list[Any], shown: int = 5) -> str:
    """Name the users a reservation refused: the first ``shown``, then "and N more"."""
    idx = np.flatnonzero(~np.asarray(r.admitted, dtype=bool))
    text = ", ".join(repr(ulist[i]) for i in idx[:shown])
    return text + (f" and {idx.size - shown} more" if idx.size > shown else "")


def _exhausted_error(r: Any, ulist: list[Any], what: str, fix: str) -> BudgetExceededError:
    return BudgetExceededError(
        f"{r.n_refused} of {len(ulist)} users cannot afford {what}: {_refused_users(r, ulist)}. "
        f"{fix} session.report() shows what each user has left. Nothing was charged."
    )


def _exclude_fix(per_users: bool, lower: str, arg: str = "queries") -> str:
    how = (
        "" if per_users else
        f" ({arg} must then be a callable f(users) computed from the admitted users' data "
        "only)"
    )  # fmt: skip
    return f"Pass on_exhausted='exclude' to run without them{how}, {lower}, or raise their budgets."


def _affordable(session: Any, ulist: list[Any], amount: Any, kind: str) -> np.ndarray:
    """Which users' central filters can pay ``amount`` of ``kind`` now (reads only).

    Compares in the ledger's integer units, rounded up exactly as the reservation will.
    """
    ledger = session.ledger
    need, big = ledger.units_for("central", Fraction(amount), kind=kind)
    if bool(big[0]):
        return np.zeros(len(ulist), dtype=bool)
    scale = ledger.units["central"].scale
    rem = session.remaining_exact(ulist, notion="central").to_numpy()
    return np.array([int(x * scale) >= int(need[0]) for x in rem.tolist()], dtype=bool)


def _run_central(
    session: Any,
    ulist: list[Any],
    amount: Any,
    *,
    kind: str,
    query: str,
    params: dict[str, Any],
    compute: Callable[[Any], Charge[Any]],
    on_exhausted: str,
    what: str,
    fix: str,
    bind: Callable[[list[Any]], None] | None = None,
    quiet: bool = False,
    retries: int = 3,
) -> Any:
    """Reserve ``amount`` on the central ledger for a monitor run, then run ``compute``.

    ``"raise"``: every user must be admitted, else a :class:`BudgetExceededError` naming the
    users who cannot pay (nothing charged). ``"exclude"``: the users who can pay now are
    reserved and the others recorded as excluded (``session.report(query_id=...)``); if the
    ledger changed in between (another process spent), it is read again. ``bind(users)``
    computes the queries over the run's users inside the reservation's check, so a bad value
    cancels it. ``quiet``: a refusal returns None instead of raising (a later run of a
    monitor stops there).
    """

    def check_for(users: list[Any]) -> Callable[[Any], bool]:
        def check(r: Any) -> bool:
            if not r.admitted.all():
                if quiet or on_exhausted == "exclude":
                    return False  # stop here (quiet) or read the ledger again (exclude)
                raise _exhausted_error(r, ulist, what, fix)
            if bind is not None:
                bind(users)
            return True

        return check

    if on_exhausted == "raise":
        ran = driver.run(session, ulist, amount, notion="central", kind=kind, query=query,
                         params=params, check=check_for(ulist), compute=compute)  # fmt: skip
        return None if ran.status == "refused" else ran
    for _ in range(retries):
        ok = _affordable(session, ulist, amount, kind)
        payers = [u for u, k in zip(ulist, ok, strict=True) if k]
        if not payers:
            if quiet:
                return None
            raise BudgetExceededError(
                f"none of the {len(ulist)} users can afford {what}; raise their budgets. "
                "Nothing was charged."
            )
        left_out = [u for u, k in zip(ulist, ok, strict=True) if not k]
        # the curator's record of who was left out; never part of the published result
        rec = {**params, EXCLUDED_KEY: left_out} if left_out else params
        ran = driver.run(session, payers, amount, notion="central", kind=kind, query=query,
                         params=rec, check=check_for(payers), compute=compute)  # fmt: skip
        if ran.status != "refused":
            return ran
    if quiet:
        return None
    raise BudgetExceededError(
        f"the users' budgets changed {retries} times while admitting {what} (another process "
        "is spending from this ledger); try again. Nothing was charged."
    )


def _check_rounds(kind: str, parts: list[Fraction]) -> None:
    """Run the central wrappers' calibration for each round's part of a threshold query.

    ``laplace_dp`` / ``gaussian_zcdp`` (integer, sensitivity 1) would refuse a part outside the
    samplers' ranges only inside the reservation, where a refusal settles the full allocation.
    """
    from gpframe.mechanisms.calibration import (
        central_gaussian,
        central_laplace,
        check_eps,
        check_rho,
    )

    for part in sorted(set(parts)):
        if kind == "dp":
            central_laplace(check_eps(part, "epsilon (one round's part)"), Fraction(1),
                            integer=True)  # fmt: skip
        else:
            central_gaussian(check_rho(part, "rho (one round's part)"), Fraction(1), integer=True)


def _units(session: Any, kind: str, amount: Any) -> int:
    """Ledger units one user pays for ``amount`` of ``kind``, rounded up as the ledger charges."""
    u, _big = session.ledger.units_for("central", Fraction(amount), kind=kind)
    return int(u[0])


def _per_user(session: Any, units: int) -> float:
    """``units`` of the central filter as a float amount (what each user paid)."""
    return units / 10.0 ** session.ledger.units["central"].exponent


# --------------------------------------------------------------------------------------------
# AboveThreshold


def above_threshold(
    session: Any,
    queries: Iterable[Any],
    threshold: float,
    *,
    users: Any,
    sensitivity: float,
    noise: str = "laplace",
    epsilon: float | None = None,
    sigma: float | None = None,
    sigma_z: float | None = None,
    bounds: tuple[float, float] | None = None,
    max_steps: int | None = None,
    c: int = 1,
    monotone: bool = False,
    integer: bool = False,
    mode: str = "R",
    beta: float = 0.05,
    rng: Any = None,
    on_exhausted: str = "raise",
    dry_run: bool = False,
) -> MonitorResult | Preview:
    """Watch a stream of queries and answer ⊤ when one crosses ``threshold`` (up to ``c`` times).

    See ``docs/operations/monitoring.md`` (``noise="laplace"``: one run, Lyu, Su & Li (2017) Alg 1
    with c ⊤, ε ex-ante, Gaussian AboveThreshold, ``noise="gaussian"``: a fresh run per ⊤, exact
    normals, realized ex-post ε under mode R or S); Lyu, Su & Li, 'Understanding the Sparse Vector
    Technique for Differential Privacy' (2017), Alg. 1; Lebensold, Precup & Balle, 'On the Privacy
    of Selection Mechanisms with Gaussian Noise' (2024), Alg. 1.

    Parameters
    ----------
    session : gp.Session
        Charged on its central budget (``gp.DP``; a ``gp.zCDP`` budget pays Gaussian runs R²/2
        ex-ante and Laplace runs ε²/2).
    queries : iterable or callable
        Numbers or zero-argument callables, asked in order; each has user-level sensitivity
        ``sensitivity`` and must be chosen from public information and earlier answers only.
        Or a callable ``f(users)`` returning them computed from the data of ``users`` only
        (each run's admitted users): required by ``on_exhausted="exclude"``.
    threshold : float
        The public threshold (ρ in ``docs/operations/monitoring.md``; Lebensold, Precup & Balle, 'On
        the Privacy of Selection Mechanisms with Gaussian Noise' (2024), Alg. 1).
    users : sequence
        Ids of all users the queries read; each is charged.
    sensitivity : float
        Δ of every query (e.g. 1/N for a share of a public N; never an observed count).
    noise : {"laplace", "gaussian"}
    epsilon : float
        Laplace: the run's ε (required).
    sigma, sigma_z : float
        Gaussian: σ_X (required) and σ_Z (default √3·σ_X).
    bounds : (a, b)
        Gaussian: public hard bounds; queries are clamped into them (required).
    max_steps : int, optional
        Laplace: cap on the number of queries. Gaussian: the cap T_max of each run (required
        unless ``queries`` has a length; mode R reserves the worst case over T_max steps).
    c : int
        Number of ⊤ before monitoring stops.
    monotone : bool
        Laplace with c > 1 only: all queries move in one direction between neighbours.
    integer : bool
        Laplace: integer queries (lattice g = 1).
    mode : {"R", "S"}
        Gaussian ledger mode (``docs/operations/monitoring.md``): R reserves each run's worst case
        and settles to the realized ε (default); S checks every step against the remaining budget
        (prefix filter).
    beta : float
        Failure probability of the reported accuracy bound (``docs/operations/monitoring.md``):
        the Laplace run's margin, or each Gaussian run's.
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG.
    on_exhausted : {"raise", "exclude"}
        Some users cannot pay a run: ``"raise"`` refuses it (``BudgetExceededError`` naming
        them, nothing charged); ``"exclude"`` runs it over the users who can pay, with
        ``queries(admitted users)``; the excluded users are charged nothing and listed in
        ``session.report(query_id=...)`` only (``docs/operations/monitoring.md``). Not with
        ``mode="S"`` (membership must not change inside a run, and S re-admits every step).

    dry_run : bool
        Return a :class:`~gpframe.results.Preview` of the first run instead: what each user
        would reserve, who would be excluded or would make the call raise, the budget left
        afterwards. Nothing is drawn, charged or written (``docs/ledger.md``, "Previewing a
        query").

    Returns
    -------
    MonitorResult
        ``value``: the ⊥/⊤ answers (bool array, one per asked query); ``error``: the threshold
        margin α at confidence 1 − β (Gaussian: per run); ``tops``; per-run records;
        ``epsilon_realized`` vs ``epsilon_worst`` and ``epsilon_exante``; ``spent_at_most``, what
        each user paid (per-user charges: ``session.report(query_id=q)`` for ``q`` in
        ``query_ids``).

    Raises
    ------
    InvalidInputError
        Bad parameters; nothing is charged.
    BudgetExceededError
        Not every user can pay the first run (or, with ``on_exhausted="exclude"``, nobody
        can); the message names them; nothing is charged.

    Examples
    --------
    >>> import gpframe as gp
    >>> s = gp.Session(central=gp.DP(epsilon=1.0))
    >>> res = above_threshold(s, [3, 8, 40, 90], 50, users=["a", "b"], sensitivity=1,
    ...                       epsilon=0.5, integer=True)
    >>> res.epsilon_realized, res.kind, res.spent_at_most
    (0.5, 'dp', 0.5)
    >>> res.value                                  # doctest: +ELLIPSIS
    array([...])
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(above_threshold, locals(), "above_threshold", adaptive=noise == "gaussian")
    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    noise = _choice(noise, "noise", _NOISES)
    mode = _choice(mode, "mode", _MODES)
    ulist = _users(users)
    c = int(_int(c, "c"))  # type: ignore[arg-type]
    if noise == "laplace":
        _check_integer_scores(queries, integer)
    max_steps = _int(max_steps, "max_steps", allow_none=True)
    probability(beta)  # the Laplace run's margin uses it after the charge: refuse it now
    fkind = _central_kind(session)
    on_exhausted = _choice(on_exhausted, "on_exhausted", ON_EXHAUSTED)
    stream = _Stream(queries)
    if on_exhausted == "exclude" and not stream.per_users:
        raise InvalidInputError(
            "on_exhausted='exclude' needs queries=f(users), a callable computing the values "
            "from the admitted users' data only: precomputed values include every user, and an "
            "excluded user is charged nothing, so their data must not be in them. Nothing was "
            "charged."
        )
    if on_exhausted == "exclude" and noise == "gaussian" and mode == "S":
        raise InvalidInputError(
            "on_exhausted='exclude' needs mode='R' with noise='gaussian': mode S admits users "
            "at every step and a run's users must not change inside it. Nothing was charged."
        )
    if noise == "laplace":
        if epsilon is None:
            raise InvalidInputError(
                "noise='laplace' needs epsilon=... (the run's ε, charged once). "
                "Nothing was charged."
            )
        if mode != "R":
            raise InvalidInputError(
                "mode='S' applies to noise='gaussian' only. Nothing was charged."
            )
        return _laplace_monitor(
            session, stream, threshold, ulist, sensitivity, epsilon, c, monotone, integer,
            max_steps, beta, rng, on_exhausted,
        )  # fmt: skip
    if sigma is None or bounds is None:
        raise InvalidInputError(
            "noise='gaussian' needs sigma=... (σ_X) and bounds=(a, b) (public hard bounds of the "
            "queries; docs/operations/monitoring.md). Nothing was charged."
        )
    p = ATParams.make(
        sigma_x=sigma, sigma_z=sigma_z, threshold=threshold, bounds=bounds, sensitivity=sensitivity
    )
    if max_steps is None and stream.remaining() is None:
        raise InvalidInputError(
            "noise='gaussian' over an unsized stream needs max_steps=... (the public cap of a "
            "run; its worst-case ε is unbounded otherwise, docs/operations/monitoring.md). Nothing "
            "was charged."
        )
    if fkind == "zcdp" and mode == "S":
        raise InvalidInputError(
            "mode='S' needs a pure-DP central budget (ex-post charges compose only there, "
            "docs/operations/monitoring.md); use mode='R' (charged R²/2 ex-ante). Nothing was "
            "charged."
        )
    return _gaussian_monitor(session, stream, p, ulist, max_steps, c, mode, fkind, rng,
                             on_exhausted, beta)  # fmt: skip


def _laplace_monitor(
    session, stream, threshold, ulist, sensitivity, epsilon, c, monotone, integer, max_steps,
    beta, rng, on_exhausted="raise",
) -> MonitorResult:  # fmt: skip
    # the run is built (and every parameter checked) before the reservation; its threshold
    # draw is discarded unreleased if the reservation is refused
    run = LaplaceSVTRun(
        threshold=threshold, epsilon=epsilon, sensitivity=sensitivity, c=c,
        monotone=monotone, integer=integer, rng=rng, draw=active_preview() is None,
    )  # fmt: skip
    # the public number of queries the run may ask (docs/operations/monitoring.md)
    cap = min((x for x in (max_steps, stream.remaining()) if x is not None), default=None)
    planning = active_preview()
    if planning is not None and cap is not None:  # the margin reads only public parameters
        planning.notes["error"] = (
            _laplace_margin(run, sensitivity, beta, 0, cap),
            "threshold margin α (query units)",
            1.0 - float(beta),
        )
    elif planning is not None:  # unsized: the margin grows with the queries the run asks
        planning.notes["error"] = (
            _laplace_margin(run, sensitivity, beta, 1, None),
            "threshold margin α (query units) after the first query: an unsized stream's "
            "grows with the K queries asked, b_t·ln(2/β) + b_q·ln(2K(K + 1)/β) + g",
            1.0 - float(beta),
        )
    params = {"noise": "laplace", "epsilon": float(epsilon), "sensitivity": float(sensitivity),
              "threshold": float(threshold), "c": c, "monotone": bool(monotone)}  # fmt: skip
    if on_exhausted != "raise":
        params["on_exhausted"] = on_exhausted

    def compute(r: Any) -> Charge[str]:
        stopped = "end"
        while True:
            if max_steps is not None and stream.pos >= max_steps:
                stopped = "max_steps"
                break
            if not stream.has_next():
                break
            run.step(stream.next_value())
            if run.done:
                stopped = "c_tops"
                break
        return Charge(stopped, run.epsilon)

    ran = _run_central(
        session, ulist, run.epsilon, kind="dp", query="above_threshold", params=params,
        compute=compute, on_exhausted=on_exhausted, what=f"epsilon={float(epsilon):g}",
        fix=_exclude_fix(stream.per_users, "lower epsilon"), bind=stream.bind,
    )  # fmt: skip
    stopped, qid = ran.value, ran.query_id
    ans = np.array(run.answers, dtype=bool)
    err = _laplace_margin(run, sensitivity, beta, ans.size, cap)
    eps = float(run.epsilon)
    return MonitorResult(
        value=ans, error=err, error_kind="threshold margin α (query units)",
        confidence=1 - beta, mechanism="laplace_above_threshold", params=params, kind="dp"
        if session.ledger.kind["central"] == "dp" else "zcdp", metric="hamming",
        query_id=qid, spec="docs/operations/monitoring.md; Roth & Smith, 'Additional tools and "
                           "applications for DP-stability' (lecture notes); Lyu, Su & Li, "
                           "'Understanding the Sparse Vector Technique for Differential Privacy' "
                           "(2017), Alg. 1",
        spent_at_most=_per_user(session, _units(session, "dp", run.epsilon)),
        tops=tuple(int(i) for i in np.flatnonzero(ans)),
        runs=[{"start": 0, "steps": int(ans.size), "output": "top" if ans.any() else "bottom",
               "reserved": eps, "charged": eps}],
        epsilon_realized=eps, epsilon_worst=eps, epsilon_exante=eps, stopped=stopped,
    )  # fmt: skip


def _laplace_margin(run: LaplaceSVTRun, sensitivity: float, beta: float, asked: int,
                    cap: int | None) -> float:  # fmt: skip
    """Return the threshold margin α at confidence 1 − β, in query units.

    See ``docs/operations/monitoring.md``; Roth & Smith, 'Additional tools and applications for
    DP-stability' (lecture notes).

    With a public cap k (``max_steps`` or a sized stream) every one of the ≤ k + 1 draws stays
    within its scale × ln((k + 1)/β) (union bound), so α = (b_t + b_q)·ln((k + 1)/β), and for
    c = 1 at least the textbook (8Δ/ε)·ln((k + 1)/β). k must be the cap, not the number of queries
    the run happened to ask: that number depends on the draws, and a union bound over a random
    k does not hold at 1 − β. Without a cap the i-th query draw gets β/(2i(i + 1)) and the
    threshold draw β/2 (Σ = β over any length), so α = b_t ln(2/β) + b_q ln(2K(K + 1)/β) with K
    the queries asked. One lattice step g covers the discrete noise's tail excess (≤ e^(g/b)).
    """
    bt, bq = (float(x) for x in run.scales)
    if cap is not None:
        k = max(1, cap)
        err = (bt + bq) * math.log((k + 1) / beta)
        if run.c == 1:
            eps = float(run.epsilon)
            err = max(err, laplace_at_accuracy(eps, sensitivity=float(sensitivity), k=k, beta=beta))
    else:
        k = max(1, asked)
        err = bt * math.log(2 / beta) + bq * math.log(2 * k * (k + 1) / beta)
    return err + float(run.g)


def _gaussian_margin(p: ATParams, steps: int, beta: float) -> float:
    """Return the threshold margin α of one Gaussian run of at most ``steps`` queries, at 1 − β.

    See ``docs/operations/monitoring.md``. A ⊤ for a (clamped) query q means
    q + σ_Z Z ≥ ρ + σ_X X, a ⊥ the opposite: every answer of the run is right up to α as long
    as |σ_X X| + |σ_Z Z_i| ≤ α for its one threshold draw and its ≤ ``steps`` query draws
    (exact normals, no lattice). With P(|N(0, 1)| > t) ≤ 2e^{−t²/2} and a union bound, β/2 to
    the threshold draw and β/(2·steps) to each query draw:
    α = σ_X √(2 ln(4/β)) + σ_Z √(2 ln(4·steps/β)). It reads public parameters only (σ_X, σ_Z
    and the run's cap), so the preview states it before any noise.

    >>> p = ATParams.make(sigma_x=1.0, sigma_z=1.0, threshold=0.5, bounds=(0, 1),
    ...                   sensitivity=0.01)
    >>> round(_gaussian_margin(p, 1, 0.05), 4)
    5.9208
    """
    k = max(1, int(steps))
    return (float(p.sigma_x) * math.sqrt(2 * math.log(4 / beta))
            + float(p.sigma_z) * math.sqrt(2 * math.log(4 * k / beta)))  # fmt: skip


def _gaussian_monitor(session, stream, p, ulist, max_steps, c, mode, fkind, rng,
                      on_exhausted="raise", beta=0.05) -> MonitorResult:  # fmt: skip
    paid = 0  # ledger units each user paid over all runs (the same for every user)
    all_qids: list[str] = []
    answers: list[bool] = []
    tops: list[int] = []
    runs: list[dict[str, Any]] = []
    params = {"noise": "gaussian", "mode": mode, "sigma_x": p.sigma_x, "sigma_z": p.sigma_z,
              "threshold": p.threshold, "bounds": (p.a, p.b), "sensitivity": p.sensitivity,
              "max_steps": max_steps, "c": c}  # fmt: skip
    if on_exhausted != "raise":
        params["on_exhausted"] = on_exhausted
    stopped = "end"
    qid = ""
    exante = _exante(p)
    # every run asks at most the first run's cap (the cap is fixed, the stream only shrinks):
    # its margin holds for every run, each at 1 − β, and reads public parameters only
    first = min((x for x in (max_steps, stream.remaining()) if x is not None), default=None)
    margin = None if first is None else _gaussian_margin(p, first, float(beta))
    kind_m = "threshold margin α (query units), per run"
    planning = active_preview()
    if planning is not None and margin is not None and stream.has_next():
        planning.notes["error"] = (margin, kind_m, 1.0 - float(beta))
    while len(tops) < c:
        if not stream.has_next():
            stopped = "end"
            break
        rem = stream.remaining()
        t_max = min(x for x in (max_steps, rem) if x is not None)
        start = stream.pos
        # the first run names the users who cannot pay; a later refusal stops monitoring
        admit = {"on_exhausted": on_exhausted, "what": f"the run's worst case over {t_max} steps",
                 "fix": _exclude_fix(stream.per_users, "lower the cap max_steps, raise sigma"),
                 "bind": stream.bind, "quiet": bool(runs)}  # fmt: skip
        if mode == "R":
            out = _run_mode_r(session, stream, p, ulist, t_max, fkind, rng, params, admit)
        else:
            out = _run_mode_s(session, stream, p, ulist, t_max, rng, params, admit)
        if out is None:  # refused before any noise: nothing charged for this run
            stopped = "budget"
            break
        ans, reserved, charged, qids, budget_stop, units = out
        paid += units
        qid = qids[-1]
        all_qids += qids
        runs.append({"start": start, "steps": len(ans), "output": "top" if ans and ans[-1]
                     else "bottom", "reserved": reserved, "charged": charged})  # fmt: skip
        for i, a in enumerate(ans):
            answers.append(a)
            if a:
                tops.append(start + i)
        if budget_stop:  # mode S stopped this run; the next run must pass admission again
            stopped = "budget"
        if len(tops) >= c:
            stopped = "c_tops"
        # a run that hit its cap without ⊤ is followed by a fresh run
        # (docs/operations/monitoring.md)
    real = float(sum(rn["charged"] for rn in runs))
    worst = float(sum(rn["reserved"] for rn in runs))
    ans_arr = np.array(answers, dtype=bool)
    return MonitorResult(
        value=ans_arr, mechanism="gaussian_above_threshold", params=params,
        error=margin if runs else None, error_kind=kind_m, confidence=1 - float(beta),
        kind="dp_expost" if fkind == "dp" else "zcdp", metric="hamming",
        spent_at_most=_per_user(session, paid), query_id=qid, query_ids=tuple(all_qids),
        spec=f"docs/operations/monitoring.md (exact normals, ledger mode {mode}); Lebensold, "
             "Precup & Balle, 'On the Privacy of Selection Mechanisms with Gaussian Noise' "
             "(2024), Thm. 10 (corrected)",
        tops=tuple(tops), runs=runs, epsilon_realized=real, epsilon_worst=worst,
        epsilon_exante=None if exante is None else exante * len(runs), stopped=stopped,
    )  # fmt: skip


def _exante(p: ATParams) -> float | None:
    if p.sigma_z >= 3**0.5 * p.sigma_x * (1 - 1e-15) and p.threshold >= 0 and p.a >= 0:
        try:
            return zw20_eps(p, 1e-5)
        except OverflowError:  # exp(ρ²/σ_X²) beyond float range: the ex-ante bound is vacuous
            return math.inf
    return None


def _run_mode_r(session, stream, p, ulist, t_max, fkind, rng, params, admit):
    """Mode R: reserve R for all users, run, settle to the realized ex-post ε.

    See ``docs/operations/monitoring.md``.
    """
    R = at_run_reservation(p, t_max)
    kind = "dp_expost" if fkind == "dp" else "dp"  # zCDP: R as pure ε, ex-ante

    def compute(r: Any) -> Charge[tuple[list[bool], float]]:
        run = GaussianATRun(p, rng)
        while len(run.answers) < t_max and stream.has_next():
            if run.step(stream.next_value()):
                break
        used = run.epsilon() if fkind == "dp" else R
        return Charge((list(run.answers), used), Fraction(used))

    ran = _run_central(
        session, ulist, Fraction(R), kind=kind, query="above_threshold",
        params={**params, "run_max_steps": t_max, "reserved": R}, compute=compute, **admit,
    )  # fmt: skip
    if ran is None:
        return None
    answers, used = ran.value
    return answers, R, used, [ran.query_id], False, _units(session, kind, used)


def _run_mode_s(session, stream, p, ulist, t_max, rng, params, admit):
    """Mode S: before step t hold need_t − (already charged); charge the realized increment."""
    needs = at_step_needs(p, t_max)
    charged = Fraction(0)  # this run's cumulative charge (the provisional ε_⊥ of its prefix)
    units = 0  # what each user paid for this run, in ledger units (per step, rounded up)
    run: GaussianATRun | None = None
    qids: list[str] = []
    budget_stop = False
    for t in range(1, t_max + 1):
        if not stream.has_next():
            break
        need = Fraction(max(needs[t - 1]))
        inc = max(Fraction(0), need - charged)

        def compute(r: Any, charged: Fraction = charged) -> Charge[bool]:
            nonlocal run
            if run is None:
                run = GaussianATRun(p, rng)
            top = run.step(stream.next_value())
            return Charge(top, max(Fraction(0), Fraction(run.epsilon()) - charged))

        # the run's first step admits (naming refused users if it is the first run); later
        # steps of the run need everyone, else the filter stops the run (mode S is "raise" only)
        ran = _run_central(
            session, ulist, inc, kind="dp_expost", query="above_threshold",
            params={**params, "step": t, "need": float(need)}, compute=compute,
            **(admit if run is None else {**admit, "quiet": True, "bind": None}),
        )  # fmt: skip
        if ran is None:
            if run is None:
                return None
            budget_stop = True  # the filter stops the run: output ⊥^(t−1), already paid
            break
        top = ran.value
        realized = Fraction(run.epsilon())
        units += _units(session, "dp_expost", max(Fraction(0), realized - charged))
        charged = max(charged, realized)
        qids.append(ran.query_id)
        if top:
            break
    if run is None:
        return None
    worst = float(max(max(n) for n in needs))
    return list(run.answers), worst, float(charged), qids, budget_stop, units


# --------------------------------------------------------------------------------------------
# Report-Noisy-Max


def report_noisy_max(
    session: Any,
    values: Any,
    *,
    users: Any,
    sensitivity: float,
    noise: str = "gaussian",
    sigma: float | None = None,
    epsilon: float | None = None,
    bounds: tuple[float, float] | None = None,
    integer: bool = False,
    beta: float = 0.05,
    rng: Any = None,
    on_exhausted: str = "raise",
    dry_run: bool = False,
) -> MonitorResult | Preview:
    """Return the index of the (noisily) largest candidate, charged on the central ledger.

    See ``docs/operations/monitoring.md`` (Gaussian: certified pure ε; give ``sigma``, or
    ``epsilon`` to calibrate σ; accuracy: the score gap); Lebensold, Precup & Balle, 'On the
    Privacy of Selection Mechanisms with Gaussian Noise' (2024), Thm. 8, Dwork & Roth (2014) Report
    Noisy Max with discrete Laplace 2Δ/ε (``noise="laplace"``).

    Parameters
    ----------
    session : gp.Session
        Charged on its central budget (``gp.DP``).
    values : array_like, shape (k,)
        The k candidate scores, each of user-level sensitivity ``sensitivity``, computed over
        every user in ``users``.
    users : sequence
        Ids of all users the scores read; each is charged.
    sensitivity : float
        Δ of every score.
    noise : {"gaussian", "laplace"}
    sigma, epsilon : float
        Gaussian: exactly one of σ or a target ε (σ is then calibrated); Laplace: ε (required).
    bounds : (a, b)
        Gaussian: public hard bounds; scores are clamped into them (required).
    integer : bool
        Laplace: integer scores (lattice g = 1).
    beta : float
        Failure probability of the stated score gap ``error``.
    rng : BitSource or None
        The randomness source; None is the OS CSPRNG.
    on_exhausted : {"raise"}
        The only choice: ``values`` were computed over every user and the charge depends on their
        number, so the call is refused (naming the users who cannot pay); leaving someone out
        means recomputing ``values`` without them and passing ``users=`` without them.
    dry_run : bool
        Return a :class:`~gpframe.results.Preview` of the query instead, with the same ``error``:
        nothing is drawn, charged or written (``docs/ledger.md``, "Previewing a query").

    Returns
    -------
    MonitorResult
        ``value``: the selected index; ``error``: the score gap α (``error_kind``) at
        ``confidence`` 1 − β: with probability ≥ 1 − β the selected candidate's score (Gaussian:
        clamped into ``bounds``) is within α of the largest score; ``epsilon_realized`` the ε
        charged; ``spent_at_most``, what each user paid.

    Notes
    -----
    Noise: Gaussian, exact continuous N(0, σ²) per candidate; Laplace, discrete Laplace of scale
    b = 2Δ/ε on the lattice g (``docs/noise.md``; real scores: b = 2(⌊Δ/g⌋ + 1)g/ε).
    Charge: Gaussian, the certified pure ε_RNM(σ, Δ, b − a, k); Laplace, ε; kind ``dp``,
    ex-ante, on the central ledger.
    Error (k ≥ 2 candidates; 0 for one): Gaussian α = 2σ√(2 ln(2k/β)); Laplace
    α = 2b·ln(2k/(β(1 + e^{−g/b}))) + g (≈ 2b·ln(k/β)); both read public parameters only.

    Examples
    --------
    >>> import gpframe as gp
    >>> s = gp.Session(central=gp.DP(epsilon=1.0))
    >>> res = report_noisy_max(s, [0.2, 0.7, 0.4], users=[1, 2, 3], sigma=0.3, bounds=(0, 1),
    ...                        sensitivity=0.01)
    >>> res.value in (0, 1, 2), round(res.epsilon_realized, 6)
    (True, 0.174434)
    >>> round(res.error, 4), res.confidence      # 2·0.3·√(2 ln(2·3/0.05))
    (1.8566, 0.95)
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(report_noisy_max, locals(), "report_noisy_max")
    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    noise = _choice(noise, "noise", _NOISES)
    if _choice(on_exhausted, "on_exhausted", ON_EXHAUSTED) == "exclude":
        raise InvalidInputError(
            "report_noisy_max takes on_exhausted='raise' only: its values were computed over "
            "every user; recompute them without the users who cannot pay and pass users= "
            "without them. Nothing was charged."
        )
    beta = probability(beta)
    ulist = _users(users)
    _central_kind(session)
    x = np.asarray(values, dtype=np.float64) if not callable(values) else None
    if x is None or x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise InvalidInputError(
            "values must be a non-empty 1-D array of finite candidate scores. Nothing was charged."
        )
    if noise == "laplace":
        _check_integer_scores(x, integer)
    if noise == "gaussian":
        if bounds is None or (sigma is None) == (epsilon is None):
            raise InvalidInputError(
                "noise='gaussian' needs bounds=(a, b) and exactly one of sigma=... or "
                "epsilon=... (a target ε to calibrate σ, docs/operations/monitoring.md). Nothing "
                "was charged."
            )
        if sigma is None:
            sigma = sigma_for_eps_rnm(epsilon, sensitivity=sensitivity, bounds=bounds, d=x.size)
        eps = eps_rnm(sigma, sensitivity=sensitivity, bounds=bounds, d=x.size)
        gap = _rnm_gap(int(x.size), beta, sigma=float(sigma))
    else:
        if epsilon is None:
            raise InvalidInputError("noise='laplace' needs epsilon=.... Nothing was charged.")
        from gpframe.mechanisms.calibration import central_laplace, check_eps, check_positive

        eps = check_eps(epsilon, "epsilon")
        # the calibration laplace_dp will use (draw scale 2): public, so the preview states it
        cal = central_laplace(eps, check_positive(sensitivity, "sensitivity"),
                              integer=bool(integer), s=Fraction(2))  # fmt: skip
        gap = _rnm_gap(int(x.size), beta, scale=cal.g / cal.param, g=cal.g)
    kind_g = _RNM_GAP_KIND[noise]
    planning = active_preview()
    if planning is not None:
        planning.notes["error"] = (gap, kind_g, 1.0 - beta)
    params = {"noise": noise, "sigma": sigma, "epsilon": float(eps), "bounds": bounds,
              "sensitivity": float(sensitivity), "d": int(x.size)}  # fmt: skip

    def compute(r: Any) -> Charge[Any]:
        if noise == "gaussian":
            rel = gaussian_report_noisy_max(
                x, sigma=sigma, bounds=bounds, sensitivity=sensitivity, rng=rng
            )
        else:
            rel = laplace_report_noisy_max(
                x, epsilon=epsilon, sensitivity=sensitivity, integer=integer, rng=rng
            )
        return Charge(rel, rel.epsilon)

    ran = _run_central(
        session, ulist, Fraction(eps), kind="dp", query="report_noisy_max", params=params,
        compute=compute, on_exhausted="raise", what=f"epsilon={float(eps):.6g}",
        fix="Recompute values without them and pass users= without them, raise sigma (or "
            "lower epsilon), or raise their budgets.",
    )  # fmt: skip
    rel, qid = ran.value, ran.query_id
    classical = rel.noise.get("epsilon_classical")
    # the gap from the noise parameters the release actually drew with (equal to the plan's)
    err = (
        _rnm_gap(int(x.size), beta, sigma=float(rel.noise["sigma"])) if noise == "gaussian"
        else _rnm_gap(int(x.size), beta, scale=rel.noise["scale"], g=rel.noise["g"])
    )  # fmt: skip
    return MonitorResult(
        value=int(rel.index), mechanism=f"{noise}_report_noisy_max", params=params,
        error=err, error_kind=kind_g, confidence=1.0 - beta,
        kind="dp" if session.ledger.kind["central"] == "dp" else "zcdp", metric="hamming",
        spent_at_most=_per_user(session, _units(session, "dp", rel.epsilon)), query_id=qid,
        spec=rel.guarantee.spec,
        runs=[{"start": 0, "steps": int(x.size), "output": int(rel.index),
               "reserved": float(rel.epsilon), "charged": float(rel.epsilon)}],
        epsilon_realized=float(rel.epsilon), epsilon_worst=float(rel.epsilon),
        epsilon_exante=classical, stopped="end",
    )  # fmt: skip


#: what ``error`` of report_noisy_max bounds (docs/operations/monitoring.md)
_RNM_GAP_KIND = {
    "gaussian": "score gap α (clamped score units): the best clamped score minus the selected "
                "one's",
    "laplace": "score gap α (score units): the best score minus the selected one's",
}  # fmt: skip


def _rnm_gap(
    k: int, beta: float, *, sigma: float | None = None, scale: Any = None, g: Any = None
) -> float:
    """Return the score gap α of Report-Noisy-Max over ``k`` candidates, at confidence 1 − β.

    See ``docs/operations/monitoring.md`` (Report-Noisy-Max, accuracy). The selected candidate s
    beat the best one m after noise, so x_m − x_s ≤ n_s − n_m ≤ 2·max_i |n_i|: a union bound over
    the k noises, β/k each, bounds the gap (0 for one candidate). Gaussian (exact continuous
    normals of σ, no lattice; scores clamped): P(|N(0, 1)| > t) ≤ 2e^{−t²/2} gives
    α = 2σ√(2 ln(2k/β)). Laplace (``scale`` b = g/λ, lattice ``g``): the scores are snapped to
    g·Z (|rint − x| ≤ g/2 each) and P(|K| ≥ m) = 2e^{−λm}/(1 + e^{−λ}), so
    α = 2·(b·ln(2k/(β(1 + e^{−λ}))) + g/2) = 2·:func:`~gpframe.mechanisms.tails.laplace_bound`
    (β, b, g, n=k). Public parameters only: the preview states it before any noise.

    >>> round(_rnm_gap(3, 0.05, sigma=0.3), 4)
    1.8566
    >>> round(_rnm_gap(10, 0.05, scale=2, g=1), 4)   # 2·2·ln(20/(0.05(1 + e^{−1/2}))) + 1
    23.0696
    >>> _rnm_gap(1, 0.05, sigma=0.3)
    0.0
    """
    if k <= 1:
        return 0.0
    if sigma is not None:
        return 2.0 * float(sigma) * math.sqrt(2.0 * math.log(2.0 * k / beta))
    from gpframe.mechanisms.tails import laplace_bound

    return 2.0 * laplace_bound(beta, scale, g, n=k)


# --------------------------------------------------------------------------------------------
# Threshold query (docs/operations/monitoring.md)


def _laplace_sum_tail_t(m: int, beta: float) -> float:
    """t_m(β): P(|Σ_{j≤m} L_j| > t) = β for i.i.d. Lap(1) (``docs/operations/range_count.md``)."""

    def tail(t: float) -> float:
        s = 0.0
        for i in range(m):
            for k in range(i + 1):
                s += (
                    t ** (i - k) / math.factorial(i - k) / math.factorial(k)
                    * math.factorial(m - 1 + k) / math.factorial(m - 1) / 2 ** (m + k)
                )  # fmt: skip
        return 2 * math.exp(-t) * s

    lo, hi = 0.0, 1.0
    while tail(hi) > beta:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tail(mid) > beta else (lo, mid)
    return hi


def threshold_query(
    session: Any,
    count: Any,
    *,
    tau: float,
    users: Any,
    epsilon: float | None = None,
    rho: float | None = None,
    rounds: int = 10,
    beta: float = 0.05,
    rng: Any = None,
    on_exhausted: str = "raise",
    dry_run: bool = False,
) -> MonitorResult | Preview:
    """Is a count of distinct users ≥ ``tau``? Cheap when the count is far from ``tau``.

    See ``docs/operations/monitoring.md`` (App C, Alg 9); Liang & Yi, 'Adaptive Privacy Budgeting'
    (2026), Alg. 9 with the doubling split π_j = 2^(j−1)/(2^c − 1): round j releases the count with
    fresh noise of budget π_j·(total), stops as soon as the weighted estimate ± its width clears
    ``tau``; every user pays only the rounds run. Central zCDP (``rho``): discrete Gaussian
    (``gaussian_zcdp``); central DP (``epsilon``): discrete Laplace (``laplace_dp``, with the
    Laplace-tail width of ``docs/operations/range_count.md``). ``count`` must count each user at
    most once (sensitivity 1) and ``tau`` must be public (e.g. p·N with a public N).

    ``on_exhausted="raise"`` (default) refuses the query if some user cannot pay, naming them;
    ``"exclude"`` runs it over the users who can, with ``count`` a callable ``f(users)`` counting
    the admitted users only (the excluded are charged nothing and appear in
    ``session.report(query_id=...)`` only; ``docs/operations/monitoring.md``).


    ``dry_run=True`` returns a :class:`~gpframe.results.Preview` of the query instead: nothing is
    drawn, charged or written (``docs/ledger.md``, "Previewing a query").

    Examples
    --------
    >>> import gpframe as gp
    >>> s = gp.Session(central=gp.DP(epsilon=1.0))
    >>> res = threshold_query(s, 900, tau=100, users=range(1000), epsilon=0.5, beta=1e-9)
    >>> res.value, res.epsilon_realized < 0.5  # wrong with probability at most beta
    (True, True)
    """
    if dry_run:  # the same call, planned by the ledger driver: nothing drawn or written
        return dry(threshold_query, locals(), "threshold_query", adaptive=True)
    from gpframe.mechanisms import gaussian_zcdp, laplace_dp

    rng = resolve_rng(rng)  # refused before reserving (a refusal later would be charged)
    ulist = _users(users)
    fkind = _central_kind(session)
    c = int(_int(rounds, "rounds"))  # type: ignore[arg-type]
    if (epsilon is None) == (rho is None):
        raise InvalidInputError("pass exactly one of epsilon=... or rho=.... Nothing was charged.")
    on_exhausted = _choice(on_exhausted, "on_exhausted", ON_EXHAUSTED)
    per_users = on_exhausted == "exclude"
    if per_users and not callable(count):
        raise InvalidInputError(
            "on_exhausted='exclude' needs count=f(users), a callable counting the admitted "
            "users only: a precomputed count includes every user, and an excluded user is "
            "charged nothing. Nothing was charged."
        )

    def read_count(v: Any) -> float:
        try:
            f = float(v)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"count={v!r} is not a number. Nothing was charged.") from exc
        if not math.isfinite(f) or f != round(f):
            raise InvalidInputError(f"count={v!r} must be an integer count. Nothing was charged.")
        return f

    cnt = 0.0 if per_users else read_count(count() if callable(count) else count)
    probability(beta)
    # Read exactly (0.1 is 1/10): Fraction(0.1) would be the binary double 0.1000000000000000055...,
    # which the ledger rounds up, so three queries at 0.1 would not fit a budget of 0.3.
    total = positive(*((epsilon, "epsilon") if epsilon is not None else (rho, "rho")))
    kind = "dp" if epsilon is not None else "zcdp"
    den = 2**c - 1
    pis = [Fraction(2 ** (j - 1), den) for j in range(1, c + 1)]
    _check_rounds(kind, [p * total for p in pis])  # every round's calibration, before reserving
    beta1 = beta / c
    outs: list[float] = []
    wts: list[Fraction] = []
    params = {"tau": float(tau), "kind": kind, "total": float(total), "rounds": c, "beta": beta}
    if per_users:
        params["on_exhausted"] = on_exhausted

    lower = f"lower {'epsilon' if kind == 'dp' else 'rho'}"

    def bind(users: list[Any]) -> None:
        nonlocal cnt
        if per_users:  # the count of the admitted users; a bad one cancels (nothing charged)
            cnt = read_count(count(list(users)))

    def compute(r: Any) -> Charge[tuple[bool, float, Fraction]]:
        answer = None
        used = Fraction(0)
        for j in range(c):
            part = pis[j] * total
            if kind == "dp":
                y = float(
                    laplace_dp([cnt], sensitivity=1, epsilon=part, integer=True, rng=rng).values[0]
                )
            else:
                y = float(
                    gaussian_zcdp([cnt], l2_sensitivity=1, rho=part, integer=True, rng=rng).values[
                        0
                    ]
                )
            used += part
            outs.append(y)
            wts.append(part)
            cbar = float(sum(w * Fraction(o) for w, o in zip(wts, outs, strict=True)) / used)
            if kind == "dp":
                wid = _laplace_sum_tail_t(j + 1, beta1) / float(used)
            else:
                wid = math.sqrt(math.log(2 / beta1) / float(used))
            if cbar - wid > tau:
                answer = True
                break
            if cbar + wid < tau:
                answer = False
                break
        if answer is None:
            answer = bool(cbar >= tau)
        return Charge((answer, wid, used), used)

    planning = active_preview()
    if planning is not None:  # before the reservation: its margin and least charge, a priori
        # the run stops after some round j: its margin is that round's width, at most the
        # largest over the rounds (public: the parts and β); it charges at least round 1's part
        cum = [float(sum(pis[: j + 1]) * total) for j in range(c)]
        wids = [(_laplace_sum_tail_t(j + 1, beta1) if kind == "dp" else
                 math.sqrt(math.log(2 / beta1))) / (u if kind == "dp" else math.sqrt(u))
                for j, u in enumerate(cum)]  # fmt: skip
        planning.notes["error"] = (max(wids), "count margin (users)", 1.0 - float(beta))
        planning.notes["least"] = pis[0] * total
    ran = _run_central(
        session, ulist, total, kind=kind, query="threshold_query", params=params,
        compute=compute, on_exhausted=on_exhausted, what=f"{kind} {float(total):g}",
        fix=_exclude_fix(per_users, lower, "count"), bind=bind,
    )  # fmt: skip
    (answer, wid, used), qid = ran.value, ran.query_id
    return MonitorResult(
        value=bool(answer), error=wid, error_kind="count margin (users)", confidence=1 - beta,
        mechanism="threshold_query", params=params, kind=fkind, metric="hamming",
        spent_at_most=_per_user(session, _units(session, kind, used)), query_id=qid,
        spec="docs/operations/monitoring.md; Liang & Yi, 'Adaptive Privacy Budgeting' (2026), "
             "Alg. 9", runs=[{"start": 0, "steps": len(outs), "output": answer,
        "reserved": float(total), "charged": float(used)}],
        epsilon_realized=float(used),
        epsilon_worst=float(total), stopped="decided" if len(outs) < c else "end",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Spatial helpers: distinct-user counts in a zone per time bin, fed to above_threshold


def _region_geometry(region: Any) -> Any:
    """Return one shapely (Multi)Polygon from a geometry, GeoSeries or GeoDataFrame (union)."""
    import shapely

    from gpframe.geo import validate_polygons

    validate_polygons(region, name="region")
    geom = getattr(region, "geometry", region)
    if hasattr(geom, "union_all"):
        geom = geom.union_all()
    elif isinstance(geom, (list, tuple)):
        geom = shapely.union_all(list(geom))
    shapely.prepare(geom)
    return geom


def zone_counts(
    data: pd.DataFrame,
    region: Any,
    *,
    user: str,
    time: str,
    start: Any,
    end: Any,
    freq: str = "1h",
    lon: str = "lon",
    lat: str = "lat",
) -> pd.Series:
    """Count distinct users inside ``region`` per time bin (the exact, unprotected statistic).

    One user changes each bin's count by at most 1, whatever their number of rows, so the
    series has user-level sensitivity 1 per query (``docs/operations/monitoring.md``). The bins are
    ``[start, end)`` at ``freq`` and must be public (chosen before the data are read);
    bins without users count 0.

    Parameters
    ----------
    data : DataFrame
        One row per observation with columns ``user``, ``time``, ``lon``, ``lat`` (WGS84
        degrees, in the CRS of ``region``).
    region : shapely (Multi)Polygon, GeoSeries or GeoDataFrame
        The zone (several polygons are merged).
    user, time, lon, lat : str
        Column names.
    start, end : timestamp-like
        Public start and end of the monitored period.
    freq : str
        Bin width, a pandas offset alias (default one hour).

    Returns
    -------
    Series
        int64 counts indexed by the bins' start times.

    Examples
    --------
    >>> import shapely
    >>> df = pd.DataFrame({"id": [1, 1, 2, 3], "lon": [0.5, 0.6, 0.5, 5.0],
    ...                    "lat": [0.5, 0.5, 0.4, 5.0],
    ...                    "t": pd.to_datetime(["2020-01-01 00:10", "2020-01-01 00:50",
    ...                                         "2020-01-01 01:30", "2020-01-01 00:20"])})
    >>> zone_counts(df, shapely.box(0, 0, 1, 1), user="id", time="t",
    ...             start="2020-01-01", end="2020-01-01 03:00").tolist()
    [1, 1, 0]
    """
    import shapely

    missing = [c for c in (user, time, lon, lat) if c not in data.columns]
    if missing:
        raise InvalidInputError(
            f"data has no column(s) {missing}; name them with user=, time=, lon=, lat=."
        )
    geom = _region_geometry(region)
    ts = pd.to_datetime(data[time])
    t0, t1 = pd.Timestamp(start), pd.Timestamp(end)
    if ts.dt.tz is not None:
        t0 = t0.tz_localize(ts.dt.tz) if t0.tzinfo is None else t0.tz_convert(ts.dt.tz)
        t1 = t1.tz_localize(ts.dt.tz) if t1.tzinfo is None else t1.tz_convert(ts.dt.tz)
    bins = pd.date_range(t0, t1, freq=freq, inclusive="left")
    if bins.size == 0:
        raise InvalidInputError(
            f"start={start!r}, end={end!r} with freq={freq!r} give no time bins; pass end > start."
        )
    x = data[lon].to_numpy(dtype=np.float64)
    y = data[lat].to_numpy(dtype=np.float64)
    inside = shapely.contains_xy(geom, x, y) & (ts >= t0).to_numpy() & (ts < t1).to_numpy()
    sub = pd.DataFrame({"u": data[user].to_numpy()[inside], "t": ts.to_numpy()[inside]})
    sub["bin"] = sub["t"].dt.floor(freq) if sub.size else sub["t"]
    counts = sub.drop_duplicates(["u", "bin"]).groupby("bin").size()
    out = counts.reindex(bins, fill_value=0).astype(np.int64)
    out.index.name = time
    out.name = "users"
    return out


def zone_above_threshold(
    session: Any,
    data: pd.DataFrame,
    region: Any,
    threshold: float,
    *,
    user: str,
    time: str,
    start: Any,
    end: Any,
    freq: str = "1h",
    lon: str = "lon",
    lat: str = "lat",
    noise: str = "laplace",
    n_public: int | None = None,
    on_exhausted: str = "raise",
    **kwargs: Any,
) -> MonitorResult:
    """Alert when the number of distinct users in ``region`` per ``freq`` crosses ``threshold``.

    Builds :func:`zone_counts` and runs :func:`above_threshold` on it; every user in ``data``
    is charged (any of them could have been in the zone). Laplace: integer counts, Δ = 1.
    Gaussian: shares count/N of a public ``n_public`` = N, clamped to [0, 1], Δ = 1/N,
    ``threshold`` given as a count and converted to a share (``docs/operations/monitoring.md``: N
    must come from configuration, never from the data).

    See ``docs/operations/monitoring.md`` (Laplace AboveThreshold and sparse vector, through
    :func:`above_threshold`); Lyu, Su & Li, 'Understanding the Sparse Vector Technique for
    Differential Privacy' (2017), Alg. 1; Lebensold, Precup & Balle, 'On the Privacy of Selection
    Mechanisms with Gaussian Noise' (2024), Alg. 1. Other keyword arguments (``epsilon``, ``sigma``,
    ``max_steps``, ``c``, ``mode``, ``rng``, …) are passed on.

    ``on_exhausted="raise"`` (default) refuses a run some user cannot pay, naming them.
    ``"exclude"`` runs it over the users who can pay, counting only their rows: the counts are
    recomputed for each run's admitted users, the excluded are charged nothing, and they are
    listed in ``session.report(query_id=...)`` (status ``"excluded"``), never in the result.
    The alert is then about the admitted users' counts (``docs/operations/monitoring.md``).

    Examples
    --------
    >>> import gpframe as gp, shapely
    >>> df = pd.DataFrame({"id": [1, 2, 3], "lon": [0.5, 0.6, 5.0], "lat": [0.5, 0.5, 5.0],
    ...                    "t": pd.to_datetime(["2020-01-01 00:10"] * 3)})
    >>> s = gp.Session(central=gp.DP(epsilon=1.0))
    >>> res = zone_above_threshold(s, df, shapely.box(0, 0, 1, 1), 50, user="id", time="t",
    ...                            start="2020-01-01", end="2020-01-01 04:00", epsilon=0.5)
    >>> res.spent_at_most, res.epsilon_realized
    (0.5, 0.5)
    >>> s.report(query_id=res.query_id)["user"].tolist()  # the curator's view, in the ledger
    [1, 2, 3]
    """
    counts = zone_counts(
        data, region, user=user, time=time, start=start, end=end, freq=freq, lon=lon, lat=lat
    )
    users = pd.unique(data[user])
    noise = _choice(noise, "noise", _NOISES)
    on_exhausted = _choice(on_exhausted, "on_exhausted", ON_EXHAUSTED)
    n = 1 if noise == "laplace" else _int(n_public, "n_public")
    from gpframe.ledger.keys import canonical

    # each row's ledger key, to keep the rows of a run's admitted users only
    row_keys = pd.Series(canonical(data[user].to_numpy(), "users"), dtype=object)

    def admitted_counts(admitted: list[Any]) -> np.ndarray:
        rows = data[row_keys.isin(set(admitted)).to_numpy()]
        c = zone_counts(rows, region, user=user, time=time, start=start, end=end,
                        freq=freq, lon=lon, lat=lat).to_numpy()  # fmt: skip
        return c / n if n != 1 else c

    # the counts are computed inside each run's reservation, over its users (everyone unless
    # on_exhausted="exclude"); the number of bins is public (start, end, freq)
    queries = _PerUsers(admitted_counts, length=len(counts))
    if noise == "laplace":
        kwargs.setdefault("integer", True)
        return above_threshold(
            session, queries, threshold, users=users, sensitivity=1, noise="laplace",
            on_exhausted=on_exhausted, **kwargs,
        )  # fmt: skip
    return above_threshold(
        session, queries, float(threshold) / n, users=users,
        sensitivity=1.0 / n, noise="gaussian", bounds=(0.0, 1.0), on_exhausted=on_exhausted,
        **kwargs,
    )  # fmt: skip
