"""Monitors with exhausted users: named in the error, or excluded with on_exhausted="exclude".

See docs/operations/monitoring.md. One user who cannot pay used to block every monitoring call
with "1 of N users cannot afford ..."; the error now names them (a few, then "and N more") and
offers on_exhausted="exclude", which runs over the users who can pay, computes the queries from
their data only, charges the excluded nothing and records them for the curator.
"""

from __future__ import annotations

import pandas as pd
import pytest
import shapely

import gpframe as gp
from gpframe import monitor
from gpframe.testing import seeded_rng

USERS = [f"u{i:03d}" for i in range(141)]
GAUSS = dict(noise="gaussian", sigma=0.05, bounds=(0, 1), sensitivity=0.01)


def _session(short=("u007",)):
    s = gp.Session(central=gp.DP(epsilon=5.0))
    if short:
        s.set_budget(list(short), gp.DP(epsilon=0.1))  # cannot pay 0.5
    return s


def _excluded(s, res):
    qids = res.query_ids or (res.query_id,)
    rep = pd.concat([s.report(query_id=q) for q in qids])
    return sorted(set(rep.loc[rep["status"] == "excluded", "user"]))


# ---------------------------------------------------------------------------------------------
# "raise": the error names the users and offers the way out; nothing is charged


@pytest.mark.parametrize(
    "call",
    [
        lambda s: monitor.above_threshold(s, [1, 2, 3], 50, users=USERS, sensitivity=1,
                                          epsilon=0.5, integer=True),
        lambda s: monitor.above_threshold(s, [0.1, 0.2], 0.5, users=USERS, max_steps=2,
                                          **GAUSS),
        lambda s: monitor.above_threshold(s, [0.1, 0.2], 0.5, users=USERS, mode="S", **GAUSS),
        lambda s: monitor.threshold_query(s, 90, tau=50, users=USERS, epsilon=0.5),
        lambda s: monitor.report_noisy_max(s, [2, 7, 4], users=USERS, noise="laplace",
                                           epsilon=0.5, sensitivity=1, integer=True),
    ],
    ids=["laplace_at", "gaussian_at_R", "gaussian_at_S", "threshold_query", "rnm"],
)  # fmt: skip
def test_one_exhausted_user_is_named_and_nothing_is_charged(call):
    s = _session()
    with pytest.raises(gp.BudgetExceededError) as info:
        call(s)
    msg = str(info.value)
    assert "1 of 141 users cannot afford" in msg and "'u007'" in msg
    assert msg.endswith("Nothing was charged.")
    # the reservation was cancelled before any noise: nobody paid anything
    assert (s.spent(USERS, notion="central") == 0).all()


def test_many_exhausted_users_are_named_a_few_then_counted():
    s = _session(short=USERS[:8])
    with pytest.raises(gp.BudgetExceededError) as info:
        monitor.above_threshold(s, [1, 2, 3], 50, users=USERS, sensitivity=1, epsilon=0.5,
                                integer=True)  # fmt: skip
    msg = str(info.value)
    assert "8 of 141 users" in msg
    assert "'u000', 'u001', 'u002', 'u003', 'u004' and 3 more" in msg
    assert "'u005'" not in msg
    assert "on_exhausted='exclude'" in msg and "f(users)" in msg


def test_zone_error_offers_exclude_without_the_callable_hint():
    s = _session(short=("zq",))
    df = pd.DataFrame({"id": ["zq", "b"], "lon": [0.5, 0.5], "lat": [0.5, 0.5],
                       "t": pd.to_datetime(["2020-01-01 00:10"] * 2)})  # fmt: skip
    with pytest.raises(gp.BudgetExceededError) as info:
        monitor.zone_above_threshold(s, df, shapely.box(0, 0, 1, 1), 5, user="id", time="t",
                                     start="2020-01-01", end="2020-01-01 02:00",
                                     epsilon=0.5)  # fmt: skip
    assert "on_exhausted='exclude'" in str(info.value) and "f(users)" not in str(info.value)


# ---------------------------------------------------------------------------------------------
# "exclude": run over the users who can pay, with the queries of their data only


def test_laplace_exclude_reads_and_charges_the_admitted_users_only():
    s = _session()
    seen = []

    def queries(users):
        seen.append(list(users))
        return [len(users), 0, 0]

    res = monitor.above_threshold(s, queries, 50, users=USERS, sensitivity=1, epsilon=0.5,
                                  integer=True, on_exhausted="exclude",
                                  rng=seeded_rng(1))  # fmt: skip
    assert seen == [[u for u in USERS if u != "u007"]]
    spent = s.spent(USERS, notion="central")
    assert spent["u007"] == 0 and (spent.drop("u007") == 0.5).all()
    assert _excluded(s, res) == ["u007"]
    assert "u007" not in repr(res) and "u007" not in str(res.to_dict())
    assert res.params["on_exhausted"] == "exclude"


def test_gaussian_mode_r_exclude_charges_nobody_excluded():
    s = _session()
    res = monitor.above_threshold(s, lambda users: [0.1, 0.2, 0.95], 0.5, users=USERS,
                                  max_steps=3, on_exhausted="exclude", rng=seeded_rng(2),
                                  **GAUSS)  # fmt: skip
    assert s.spent(["u007"], notion="central").tolist() == [0.0]
    assert float(s.spent(notion="central").max()) > 0
    assert _excluded(s, res) == ["u007"]


def test_threshold_query_exclude_counts_the_admitted_users():
    s = _session()
    res = monitor.threshold_query(s, lambda users: len(users), tau=10, users=USERS,
                                  epsilon=0.5, on_exhausted="exclude", beta=1e-6,
                                  rng=seeded_rng(3))  # fmt: skip
    assert res.value is True
    assert s.spent(["u007"], notion="central").tolist() == [0.0]
    assert _excluded(s, res) == ["u007"]


def test_zone_exclude_equals_running_without_the_exhausted_user():
    t = pd.to_datetime(["2020-01-01 00:10", "2020-01-01 01:20"] * 3)
    df = pd.DataFrame({"id": ["a", "a", "b", "b", "c", "c"], "lon": [0.5] * 6, "lat": [0.5] * 6,
                       "t": t})  # fmt: skip
    kw = dict(user="id", time="t", start="2020-01-01", end="2020-01-01 02:00", epsilon=0.5,
              on_exhausted="exclude")  # fmt: skip
    s1 = _session(short=("a",))
    r1 = monitor.zone_above_threshold(s1, df, shapely.box(0, 0, 1, 1), 2, rng=seeded_rng(4),
                                      **kw)  # fmt: skip
    s2 = _session(short=())
    r2 = monitor.zone_above_threshold(s2, df[df["id"] != "a"], shapely.box(0, 0, 1, 1), 2,
                                      rng=seeded_rng(4), **kw)  # fmt: skip
    assert r1.value.tolist() == r2.value.tolist() and r1.tops == r2.tops
    assert _excluded(s1, r1) == ["a"] and _excluded(s2, r2) == []


# ---------------------------------------------------------------------------------------------
# refused before the ledger is touched


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: monitor.above_threshold(s, [1, 2], 5, users=USERS, sensitivity=1,
                                           epsilon=0.5, on_exhausted="exclude"),
         r"queries=f\(users\)"),
        (lambda s: monitor.above_threshold(s, lambda u: [0.1], 0.5, users=USERS, mode="S",
                                           on_exhausted="exclude", **GAUSS), "mode='R'"),
        (lambda s: monitor.threshold_query(s, 9, tau=5, users=USERS, epsilon=0.5,
                                           on_exhausted="exclude"), r"count=f\(users\)"),
        (lambda s: monitor.report_noisy_max(s, [1, 2], users=USERS, noise="laplace",
                                            epsilon=0.5, sensitivity=1,
                                            on_exhausted="exclude"), "'raise' only"),
        (lambda s: monitor.above_threshold(s, [1, 2], 5, users=USERS, sensitivity=1,
                                           epsilon=0.5, on_exhausted="skip"), "on_exhausted"),
        (lambda s: monitor.above_threshold(s, lambda u: [1, 2] * len(u), 5, users=USERS,
                                           sensitivity=1, epsilon=0.5, max_steps=2,
                                           on_exhausted="exclude"), None),
    ],
    ids=["precomputed", "mode_s", "count", "rnm", "bad_choice", "ok_callable"],
)  # fmt: skip
def test_bad_exclusion_requests_leave_the_ledger_untouched(call, match):
    s = _session()
    before = s.ledger.snapshot()
    if match is None:  # the control: a valid call charges
        call(s)
        assert s.ledger.snapshot() != before
        return
    with pytest.raises(gp.InvalidInputError, match=match):
        call(s)
    assert s.ledger.snapshot() == before


def test_queries_callable_with_a_membership_dependent_length_cancels():
    s = _session()
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="must not depend on who is admitted"):
        monitor.above_threshold(
            s, monitor._PerUsers(lambda users: [0] * len(users), length=3), 5, users=USERS,
            sensitivity=1, epsilon=0.5, on_exhausted="exclude",
        )  # fmt: skip
    assert s.spent(notion="central").max() == 0
    del before
