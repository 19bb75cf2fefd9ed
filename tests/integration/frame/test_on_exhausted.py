"""on_exhausted="exclude" | "raise" on every accessor operation, the same way for all of them.

"exclude" (the default) leaves the users who cannot pay out and lists them; "raise" refuses
the query before anything is reserved, naming them; a preview with "raise" states the refusal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gpframe as gp
from gpframe.errors import BudgetExceededError, InvalidInputError
from gpframe.testing import seeded_rng

from .test_preview import LOW, METRIC, N, _bound, _frame


def _op(name: str) -> tuple[Any, Any]:
    op, _ = METRIC[name]
    return op, _bound(_frame(4 if name in ("knn", "convex_hull") or "privatize" in name else 1))


@pytest.mark.parametrize("name", sorted(METRIC))
def test_raise_names_the_users_and_writes_nothing(name: str) -> None:
    op, (s, b) = _op(name)
    snap, audit = s.ledger.snapshot(), list(s.ledger.store.audit())
    with pytest.raises(BudgetExceededError, match=r"2 of 30 users cannot pay.*: 3, 5\.") as e:
        op(b, on_exhausted="raise", rng=seeded_rng(1))
    assert "on_exhausted='exclude'" in str(e.value) and "Nothing was charged." in str(e.value)
    assert s.ledger.snapshot() == snap and list(s.ledger.store.audit()) == audit
    pv = op(b, on_exhausted="raise", dry_run=True)
    assert "cannot pay" in pv.refusal and set(pv.excluded.index) == set(LOW)
    assert s.ledger.snapshot() == snap


@pytest.mark.parametrize("name", ["privatize", "range_count", "knn"])
def test_raise_runs_when_everyone_can_pay(name: str) -> None:
    op, (s, b) = _op(name)
    s.set_budget(LOW, gp.CGP(rho=1e-3))
    op(b, on_exhausted="raise", rng=seeded_rng(1))
    assert (s.spent(list(range(N))) > 0).all()


@pytest.mark.parametrize("name", ["privatize", "range_count"])
def test_bad_value_is_refused(name: str) -> None:
    op, (s, b) = _op(name)
    snap = s.ledger.snapshot()
    with pytest.raises(InvalidInputError, match="on_exhausted='skip' must be"):
        op(b, on_exhausted="skip")
    assert s.ledger.snapshot() == snap


def test_grid_stats_raise_names_who_it_would_leave_out() -> None:
    rs = np.random.default_rng(1)  # test data only
    df = _frame(4).assign(v=rs.uniform(0, 10, N * 4))
    s, b = _bound(df, central=True)
    snap = s.ledger.snapshot()
    kw: dict[str, Any] = dict(value="v", bounds=(0, 10), epsilon=1.0, cells=7,
                              occupancy="public", rng=seeded_rng(2))  # fmt: skip
    with pytest.raises(BudgetExceededError, match="3, 5"):
        b.grid_stats(**kw, on_exhausted="raise")
    assert s.ledger.snapshot() == snap
    out = b.grid_stats(**kw)  # exclude: the curator's report lists them, the result does not
    res = out.attrs["geopriv"]
    rep = s.report(query_id=res.query_id)
    assert set(rep.loc[rep["status"] == "excluded", "user"]) == set(LOW)
    # ... never the published view of this central result
    from gpframe.results import CuratorViewError

    with pytest.raises(CuratorViewError):
        _ = res.n_excluded
    assert not res.result.excluded and "excluded" not in res.to_dict()


def test_raise_plans_every_reservation_of_the_call_first() -> None:
    # each user can pay the first region's reservation but not the second: refused before the
    # first region is charged (without planning the whole call it would be charged, then raise)
    from .test_preview import REGIONS

    s, b = _bound(_frame())
    s.set_budget(list(range(N)), gp.CGP(rho=1.5e-4))
    snap = s.ledger.snapshot()
    with pytest.raises(BudgetExceededError, match="30 of 30 users cannot pay"):
        b.range_count(REGIONS, rho=1e-4, on_exhausted="raise", rng=seeded_rng(1))
    assert s.ledger.snapshot() == snap
