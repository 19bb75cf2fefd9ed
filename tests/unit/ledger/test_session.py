"""Unit tests of the ledger and gp.Session (adaptive-budgeting.md §2.6, §2.7; DESIGN.md §4)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import gpframe as gp
from gpframe.ledger import Session


# Every test runs on both stores: ``path`` is an SQLite file or a PostgreSQL database URL, and
# ``where`` (for tests of the ledger's logic) SQLite in memory or a PostgreSQL database; tests
# of one store's file or tables say which (``sqlite_path``, ``pg_url``).
@pytest.fixture
def path(ledger_path):
    return ledger_path


@pytest.fixture
def where(ledger_where):
    return ledger_where


@pytest.fixture
def sqlite_path(tmp_path):
    return str(tmp_path / "ledger.sqlite")


def _commit(s, users, amount, **kw):
    with s.reserve(users, amount, **kw) as r:
        r.charge(amount)
    return r


# ---- §2.7 filter admission oracle table, through the Session API ------------------------------
@pytest.mark.parametrize(
    ("request_eps", "expected"), [(0.005, True), (0.006, False)], ids=["0.005", "0.006"]
)
def test_gp_filter_admits_exactly_to_budget_2_7(request_eps, expected, where):
    with Session(where, budget=gp.GP(eps=0.05)) as s:
        for e in (0.01, 0.015, 0.02):
            _commit(s, [1], e, kind="gp")
        with s.reserve([1], request_eps, kind="gp") as r:
            assert r.admitted.tolist() == [expected]
            r.cancel()


def test_gp_filter_refuses_gaussian_and_writes_nothing_2_7(where):
    with Session(where, budget=gp.GP(eps=0.05)) as s:
        before = s.ledger.snapshot()
        with pytest.raises(gp.BudgetExceededError):
            s.reserve([1, 2], 1e-9, kind="cgp")
        assert s.ledger.snapshot() == before


@pytest.mark.parametrize(
    ("amount", "kind", "expected"),
    [
        (0.008, "gp", True),  # Laplace eps=0.008 -> 3.2e-5, total 9.2e-5
        (2e-4, "cgp", False),  # Gaussian sigma=50
        (5e-5, "cgp", False),  # Gaussian sigma=100: 1.1e-4 > 1e-4
        (4e-5, "cgp", True),  # exactly 1e-4
    ],
)
def test_cgp_filter_oracle_rows_2_7(amount, kind, expected, where):
    with Session(where, budget=gp.CGP(rho=1e-4)) as s:
        _commit(s, ["u"], 6e-5)
        with s.reserve(["u"], amount, kind=kind) as r:
            assert r.admitted.tolist() == [expected]
            r.charge(amount)
        want = Fraction("6e-5") + (
            (gp.CGP(rho=amount).amount if kind == "cgp" else Fraction("0.008") ** 2 / 2)
            if expected
            else 0
        )
        assert s.spent_exact(["u"])["u"] == want


def test_refused_users_cost_nothing_and_are_admitted_by_cheaper_query_2_7(where):
    with Session(where, budget=gp.CGP(rho=1e-4)) as s:
        _commit(s, ["u", "v"], 6e-5)
        for amt in (2e-4, 5e-5):
            with s.reserve(["u", "v"], amt) as r:
                assert not r.admitted.any()
        assert s.spent_exact()["u"] == Fraction("6e-5")
        with s.reserve(["u", "v"], 4e-5) as r:
            assert r.admitted.all()
        assert s.spent_exact().tolist() == [Fraction("1e-4")] * 2
        assert s.remaining_exact().tolist() == [0, 0]


def test_point_one_three_times_fits_point_three_but_next_float_does_not_2_7(where):
    with Session(where, budget=gp.GP(eps=0.3)) as s:
        _commit(s, [1, 2], 0.1)
        _commit(s, [1, 2], 0.1)
        with s.reserve([1, 2], [0.1, 0.10000000000000002]) as r:
            assert r.admitted.tolist() == [True, False]
            r.charge([0.1, 0])
        assert s.spent_exact([1])[1] == Fraction(3, 10)
        assert s.remaining([1, 2]).tolist() == pytest.approx([0.0, 0.1])


def test_mixed_allocations_admit_per_user(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        _commit(s, [1, 2, 3], [0.5, 0.9, 0.0])
        with s.reserve([1, 2, 3, 4], [0.5, 0.2, 1.0, 1.5]) as r:
            assert r.admitted.tolist() == [True, False, True, False]
            assert r.n_refused == 2
            assert r.allocations.tolist() == [Fraction(1, 2), 0, 1, 0]
            r.cancel()


# ---- reserve / charge / cancel semantics ----------------------------------------------------
def test_charge_below_allocation_returns_remainder(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with s.reserve([1, 2], 0.5) as r:
            assert s.remaining([1, 2]).tolist() == [0.5, 0.5]  # held
            r.charge([0.1, 0.5])
        assert s.spent_exact([1, 2]).tolist() == [Fraction(1, 10), Fraction(1, 2)]
        assert s.remaining_exact([1, 2]).tolist() == [Fraction(9, 10), Fraction(1, 2)]


def test_leaving_block_without_charge_charges_full_allocation(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with s.reserve([1], 0.25):
            pass
        assert s.spent_exact([1])[1] == Fraction(1, 4)


def test_exception_in_block_charges_full_allocation_and_propagates(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with pytest.raises(KeyError), s.reserve([1, 2], [0.25, 2.0]):
            raise KeyError("boom")
        assert s.spent_exact([1, 2]).tolist() == [Fraction(1, 4), 0]  # 2 was refused


def test_cancel_releases_everything(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with s.reserve([1], 0.25) as r:
            r.cancel()
        assert s.spent_exact([1])[1] == 0
        assert s.remaining_exact([1])[1] == 1
        with pytest.raises(gp.LedgerError):
            r.charge(0.1)


def test_charge_above_allocation_rejected_then_block_exit_settles_full(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with pytest.raises(gp.InvalidInputError, match="exceeds its allocation"):
            with s.reserve([1], 0.1) as r:
                r.charge(0.2)
        assert s.spent_exact([1])[1] == Fraction(1, 10)


def test_kind_gp_on_cgp_filter_charges_eps_squared_over_two(where):
    with Session(where, budget=gp.CGP(rho=1e-4)) as s:
        with s.reserve([1], 0.008, kind="gp") as r:
            assert r.allocations[0] == Fraction("3.2e-5")
            r.charge(0.004)
        assert s.spent_exact([1])[1] == Fraction("0.004") ** 2 / 2
        assert s.history(1)["kind"].tolist() == ["gp"]


def test_central_notion_is_a_separate_filter(where):
    with Session(where, budget=gp.GP(eps=1), central=gp.DP(epsilon=2)) as s:
        _commit(s, [1], 1.0)
        _commit(s, [1], 1.5, notion="central")
        assert s.spent_exact([1])[1] == 1
        assert s.spent_exact([1], notion="central")[1] == Fraction(3, 2)
        rep = s.report()
        assert set(rep["notion"]) == {"metric", "central"}
        assert rep.set_index("notion").loc["central", "remaining"] == 0.5


def test_int_and_str_ids_are_distinct_users(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        _commit(s, [1, "1"], [0.25, 0.5])
        sp = s.spent_exact([1, "1"])
        assert sp.tolist() == [Fraction(1, 4), Fraction(1, 2)]
        _commit(s, np.array([1, 2], dtype=np.int64), 0.25)
        assert s.spent_exact([1])[1] == Fraction(1, 2)


def test_set_budget_overrides_one_user(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        s.set_budget(["vip"], gp.GP(eps=3))
        with s.reserve(["vip", "x"], 2.0) as r:
            assert r.admitted.tolist() == [True, False]
        assert s.remaining_exact(["vip"])["vip"] == 1
        with pytest.raises(gp.InvalidInputError, match="one filter kind"):
            s.set_budget(["vip"], gp.CGP(rho=1))
        with pytest.raises(gp.InvalidInputError, match="does not fit"):
            s.set_budget(["vip"], gp.GP(eps=1e10))


def test_report_and_history(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        _commit(s, [1, 2], 0.25, query="count")
        _commit(s, [1], 0.5, query="kde")
        rep = s.report().set_index("user")
        assert rep.loc[1, "n_queries"] == 2 and rep.loc[2, "n_queries"] == 1
        assert rep.loc[1, "spent"] == 0.75 and rep.loc[1, "remaining"] == 0.25
        h = s.history(1)
        assert h["query"].tolist() == ["count", "kde"]
        assert h["amount_exact"].tolist() == [Fraction(1, 4), Fraction(1, 2)]
        assert s.history("nobody").empty
        assert isinstance(s.spent(), pd.Series) and s.spent().dtype == np.float64


def test_million_user_path_is_vectorised_in_memory(where):
    n = 200_000
    with Session(where, budget=gp.CGP(rho=1e-4)) as s:
        users = np.arange(n)
        with s.reserve(users, 1e-5) as r:
            r.charge(np.where(users % 2 == 0, 1e-5, 5e-6))
        sp = s.spent()
        assert sp.iloc[0] == pytest.approx(1e-5) and sp.iloc[1] == pytest.approx(5e-6)
        assert s.ledger.verify()["users"] == n


# ---- idempotent charges -----------------------------------------------------------------------
def test_replayed_charge_id_does_not_debit_twice(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        for i in range(1000):
            with s.reserve([1, 2], 0.5, charge_id="job-7") as r:
                assert r.replay == (i > 0) and r.admitted.tolist() == [i == 0] * 2
                assert r.charge([0.25, 0.5]) == (i == 0)
        assert s.spent_exact([1, 2]).tolist() == [Fraction(1, 4), Fraction(1, 2)]
        assert s.ledger.verify()["charges"] == 1


def test_replay_admits_nobody_and_reports_the_committed_charge(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        with s.reserve([1, 2], 0.5, charge_id="c1") as first:
            first.charge([0.25, 0.5])
        before = s.ledger.snapshot()
        with s.reserve([2, 1], [0.5, 0.5], charge_id="c1") as r:  # order does not matter
            assert r.replay and r.admitted.tolist() == [False, False] and r.n_admitted == 0
            assert r.allocation_units.tolist() == [0, 0]
            assert r.prior_charges.tolist() == [Fraction(1, 2), Fraction(1, 4)]
            assert r.prior_admitted.tolist() == [True, True]
            assert r.query_id == r.prior_query_id == first.query_id
            with pytest.raises(gp.ChargeConflictError, match="charge_id"):
                r.charge([0.25, 0.5])  # the users' amounts swapped: not the committed charge
            assert r.charge([0.5, 0.25]) is False
            assert r.charge([0.5, 0.25]) is False
        with s.reserve([1, 2], 0.5, charge_id="c1") as r:
            pass  # left without charge(): a replay reserved nothing, so nothing to settle
        assert s.ledger.snapshot() == before
        fresh = s.reserve([1, 2], 0.5, charge_id="c2")
        assert fresh.prior_charges is None and fresh.prior_query_id is None
        fresh.cancel()
        assert first.replay is False and first.prior_admitted is None


def test_replay_cannot_draw_noise_for_an_exhausted_user(where):
    """The review's r03 scenario: an exhausted user is never admitted under a replayed id."""
    with Session(where, budget=gp.CGP(rho=1e-4)) as s:
        _commit(s, [1], 1e-4, query="q", charge_id="job-1")
        assert s.remaining().tolist() == [0.0]
        before = s.ledger.snapshot()
        with pytest.raises(gp.ChargeConflictError, match="other allocations"):
            s.reserve([1], 1.0, query="q", charge_id="job-1")  # 10^4 x the budget
        for _ in range(3):
            with s.reserve([1], 1e-4, query="q", charge_id="job-1") as r:
                assert r.admitted.tolist() == [False]
                with pytest.raises(gp.ChargeConflictError):
                    r.charge(5e-5)
        assert s.ledger.snapshot() == before
        with s.reserve([1], 1e-4, query="q", charge_id="job-2") as r:  # a new release: refused
            assert r.admitted.tolist() == [False]
        assert s.spent_exact([1])[1] == Fraction(1, 10_000)


def test_replay_must_repeat_the_committed_request(where):
    with Session(where, budget=gp.GP(eps=1), central=gp.DP(epsilon=1)) as s:
        _commit(s, [9], 1.0)  # user 9 has nothing left
        with s.reserve([1, 9], 0.5, charge_id="c1") as r:
            assert r.admitted.tolist() == [True, False]
            r.charge(0.5)
        before = s.ledger.snapshot()
        bad = [
            ([1, 9], [0.25, 0.5]),  # lower allocation
            ([1, 9], [1.0, 0.5]),  # higher allocation
            ([9], 0.5),  # a charged user missing
            ([1, 9, "new"], 0.5),  # a user the ledger never saw
        ]
        for users, alloc in bad:
            with pytest.raises(gp.ChargeConflictError, match="charge_id='c1'"):
                s.reserve(users, alloc, charge_id="c1")
        with pytest.raises(gp.ChargeConflictError, match="metric filter"):
            s.reserve([1, 9], 0.5, notion="central", charge_id="c1")
        assert s.ledger.snapshot() == before
        r = s.reserve([1, 9], [0.5, 0.75], charge_id="c1")  # the refused user's entry is free
        assert r.replay and r.prior_admitted.tolist() == [True, False]
        assert r.prior_charges.tolist() == [Fraction(1, 2), 0]
        assert r.charge([0.5, 0.3]) is False  # entries of users the charge left out are ignored


def test_charge_id_of_an_open_reservation_cannot_be_reserved_again(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        r = s.reserve([1], 0.5, charge_id="c1")
        with pytest.raises(gp.ChargeConflictError, match="still open"):
            s.reserve([1], 0.5, charge_id="c1")  # both could draw noise, one would pay
        assert r.charge(0.5) is True
        assert s.reserve([1], 0.5, charge_id="c1").replay
        assert s.spent_exact([1])[1] == Fraction(1, 2)


def test_settled_crash_is_replayed_not_rerun(path):
    """A reservation settled in full after a crash makes its retry a replay that admits nobody."""
    s = Session(path, budget=gp.GP(eps=1))
    s.reserve([1, 2], 0.25, charge_id="job")  # noise drawn, then the process "dies"
    s.close()  # settles in full
    with Session(path) as s2:
        with s2.reserve([1, 2], 0.25, charge_id="job") as r:
            assert r.replay and not r.admitted.any()
            assert r.prior_charges.tolist() == [Fraction(1, 4)] * 2
        assert s2.spent_exact([1, 2]).tolist() == [Fraction(1, 4)] * 2
        assert s2.ledger.verify()["charges"] == 1


def test_ledger_without_recorded_allocations_is_migrated(sqlite_path):
    path = sqlite_path  # SQLite files from before charges recorded their allocations
    with Session(path, budget=gp.GP(eps=1)) as s:
        _commit(s, [1], 0.25, charge_id="old")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE charges DROP COLUMN alloc")  # a file from before the column
    con.close()
    with Session(path) as s:
        assert s.ledger.store.charge("old").alloc is None
        with pytest.raises(gp.ChargeConflictError):
            s.reserve([1], 0.125, charge_id="old")  # cannot have covered the charge
        r = s.reserve([1], 0.5, charge_id="old")
        assert r.replay and not r.admitted.any() and r.charge(0.25) is False
        _commit(s, [1], 0.25, charge_id="new")
        units = s.ledger.units["metric"].up(Fraction(1, 4))
        assert s.ledger.store.charge("new").alloc.tolist() == [units]
        assert s.ledger.verify()["charges"] == 2


def test_charging_same_reservation_twice_is_idempotent(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        r = s.reserve([1], 0.5)
        assert r.charge(0.25) is True
        assert r.charge(0.25) is False
        with pytest.raises(gp.ChargeConflictError):
            r.charge(0.5)
        assert s.spent_exact([1])[1] == Fraction(1, 4)


# ---- bad input leaves the ledger untouched ------------------------------------------------------
@pytest.mark.parametrize(
    ("users", "amounts", "kw", "match"),
    [
        ([1, 2], [0.1, float("nan")], {}, "not finite"),
        ([1, 2], [0.1, float("inf")], {}, "not finite"),
        ([1, 2], [0.1, -0.1], {}, "negative"),
        ([1, 2], -0.1, {}, ">= 0"),
        ([1, 2], [0.1], {}, "2 users"),
        ([1, 2], 0.1, {"notion": "local"}, "unknown"),
        ([1, 2], 0.1, {"notion": "central"}, "no central budget"),
        ([1, 1], 0.1, {}, "repeats"),
        ([1.5, 2], 0.1, {}, "holds mixed-type values, which are not user ids"),
        ([True], 0.1, {}, "holds boolean values, which are not user ids"),
        (5, 0.1, {}, "list or array"),
        ([1], 0.1, {"kind": "laplace"}, "laplace"),
    ],
)
def test_bad_input_raises_and_leaves_ledger_untouched(path, users, amounts, kw, match):
    with Session(path, budget=gp.GP(eps=1)) as s:
        _commit(s, [1], 0.1)
        before = s.ledger.snapshot()
        with pytest.raises(gp.InvalidInputError, match=match):
            s.reserve(users, amounts, **kw)
        assert s.ledger.snapshot() == before


def test_bad_charge_amount_leaves_ledger_untouched(where):
    with Session(where, budget=gp.GP(eps=1)) as s:
        r = s.reserve([1, 2], 0.5)
        before = s.ledger.snapshot()
        for bad in ([0.1, np.nan], [0.1], -1, [0.1, 0.6]):
            with pytest.raises(gp.InvalidInputError):
                r.charge(bad)
        assert s.ledger.snapshot() == before
        r.cancel()


# ---- persistence, durability, corruption ---------------------------------------------------------
def test_charge_is_durable_in_a_new_process(path):
    with Session(path, budget=gp.GP(eps=1)) as s:
        _commit(s, ["a", 7], [0.25, 0.5])
    code = (
        "import sys; from gpframe.ledger import Session;"
        "s = Session(sys.argv[1], create=False);"
        "print(sorted(map(str, s.spent_exact().items()))); s.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, check=True
    ).stdout
    assert "('a', Fraction(1, 4))" in out and "(7, Fraction(1, 2))" in out


def test_reopen_keeps_budget_and_rejects_a_different_one(path):
    Session(path, budget=gp.GP(eps=1)).close()
    with Session(path) as s:
        assert s.ledger.kind == {"metric": "gp"}
    with pytest.raises(gp.InvalidInputError, match="stored budget"):
        Session(path, budget=gp.GP(eps=2))
    with pytest.raises(gp.InvalidInputError, match="stored budget"):
        Session(path, budget=gp.CGP(rho=1))


def test_missing_file_with_create_false_raises(sqlite_path):
    path = sqlite_path
    with pytest.raises(gp.LedgerCorruptError, match="does not exist"):
        Session(path, budget=gp.GP(eps=1), create=False)
    assert not os.path.exists(path)


def test_database_without_a_ledger_and_create_false_raises_untouched(pg_url, raw):
    with pytest.raises(gp.LedgerCorruptError, match="holds no gpframe ledger"):
        Session(pg_url, budget=gp.GP(eps=1), create=False)
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
    assert raw(pg_url)(tables) == [(0,)]


def test_garbage_file_raises_corrupt(sqlite_path):
    path = sqlite_path
    with open(path, "wb") as f:
        f.write(b"this is not a database" * 1000)
    with pytest.raises(gp.LedgerCorruptError):
        Session(path, budget=gp.GP(eps=1))


def test_truncated_ledger_raises_corrupt(sqlite_path):
    path = sqlite_path
    with Session(path, budget=gp.GP(eps=1)) as s:
        for i in range(50):
            _commit(s, list(range(i * 100, i * 100 + 100)), 0.01)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(os.urandom(size // 2))
    with pytest.raises(gp.LedgerCorruptError):
        s2 = Session(path)
        s2.ledger.verify()
        s2.close()


def test_partial_ledger_tables_raise_corrupt(pg_url, raw):
    Session(pg_url, budget=gp.GP(eps=1)).close()
    raw(pg_url)("DROP TABLE {charges}")
    with pytest.raises(gp.LedgerCorruptError, match="only some"):
        Session(pg_url, budget=gp.GP(eps=1))


def test_foreign_schema_raises_corrupt(sqlite_path):
    path = sqlite_path
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE accounts(id INTEGER, balance REAL)")
    con.commit()
    con.close()
    with pytest.raises(gp.LedgerCorruptError, match="foreign schema"):
        Session(path, budget=gp.GP(eps=1))


def test_schema_version_mismatch_raises_corrupt(path, raw):
    Session(path, budget=gp.GP(eps=1)).close()
    raw(path)("UPDATE {meta} SET value = '99' WHERE key = 'version'")
    with pytest.raises(gp.LedgerCorruptError, match="version"):
        Session(path)


def test_verify_detects_tampered_spent_and_audit(path, raw):
    # tampered while a Session is open (a new open would refuse the file: see
    # tests/integration/ledger/test_integrity.py), so that verify() itself must find it
    with Session(path, budget=gp.GP(eps=1)) as s:
        _commit(s, [1, 2], 0.25)
        assert s.ledger.verify()["charges"] == 1
        db = raw(path)
        good = bytes(db("SELECT spent FROM {chunks}")[0][0])
        blob = np.frombuffer(good, "<i8").copy()
        blob[0] = 0
        db("UPDATE {chunks} SET spent = ?", (blob.tobytes(),))
        with pytest.raises(gp.LedgerCorruptError, match="charges add up"):
            s.ledger.verify()
        db("UPDATE {chunks} SET spent = ?", (good,))
        db("UPDATE {audit} SET content = replace(content, 'reserve', 'reserv') WHERE seq = 2")
        with pytest.raises(gp.LedgerCorruptError, match="hash chain"):
            s.ledger.verify()


def test_crashed_session_reservation_is_settled_in_full_on_reopen(path):
    s = Session(path, budget=gp.GP(eps=1))
    s.reserve([1, 2], [0.25, 0.5])
    s._simulate_crash()
    with Session(path) as s2:
        assert s2.spent_exact([1, 2]).tolist() == [Fraction(1, 4), Fraction(1, 2)]
        assert s2.ledger.verify()["reservations"] == 0


def test_close_settles_open_reservations(path):
    s = Session(path, budget=gp.GP(eps=1))
    r = s.reserve([1], 0.25)
    s.close()
    with Session(path) as s2:
        assert s2.spent_exact([1])[1] == Fraction(1, 4)
    with pytest.raises(gp.LedgerError):
        r.charge(0.1)


def test_report_of_one_query_is_the_curators_per_user_view(path):
    from gpframe.ledger.session import EXCLUDED_KEY

    with Session(path, central=gp.DP(epsilon=1.0)) as s:
        with s.reserve([7, 8], [0.5, 0.5], notion="central", query="other") as r0:
            r0.charge([0.5, 0.5])
        with s.reserve(["ann", 7], [0.5, 0.25], notion="central", query="q",
                       params={EXCLUDED_KEY: ["bob"]}) as r:  # fmt: skip
            r.charge([0.25, 0.25])
        qid = r.query_id
        rep = s.report(query_id=qid)
    assert list(rep.columns) == ["user", "status", "allocation", "charge", "saved", "notion",
                                 "kind"]  # fmt: skip
    assert rep["user"].tolist() == [7, "ann", "bob"]  # charged in ledger order, then excluded
    assert rep["status"].tolist() == ["charged", "charged", "excluded"]
    assert rep["charge"].tolist() == [0.25, 0.25, 0.0]
    assert rep["allocation"].tolist()[:2] == [0.25, 0.5] and np.isnan(rep["allocation"].iloc[2])
    assert rep["saved"].tolist() == [0.0, 0.25, 0.0]
    assert set(rep["notion"]) == {"central"} and set(rep["kind"]) == {"dp"}
    # another process (read-only) sees the same view
    with Session(path, readonly=True) as ro:
        pd.testing.assert_frame_equal(ro.report(query_id=qid), rep)


def test_amounts_given_as_objects_convert_once_per_distinct_object(where):
    """Object arrays are grouped by identity, not hashed per user: same units as one by one."""
    from gpframe.ledger.session import _factorize_objects

    a, b = Fraction(1, 3), Fraction(2, 7)
    amounts = np.array([b, a, b, Fraction(1, 3), 0, 0.25], dtype=object)
    codes, uniq = _factorize_objects(amounts)
    assert codes.tolist() == [0, 1, 0, 2, 3, 4] and uniq.tolist() == [b, a, a, 0, 0.25]
    s = Session(where, budget=gp.CGP(rho=1.0))
    with s.reserve(range(6), 0.5, query="t") as r:
        r.charge(amounts)
    lu = s.ledger.units["metric"]
    assert s.spent_exact().tolist() == [lu.to_fraction(lu.up(Fraction(v))) for v in amounts]
    before = s.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="-1"):  # the first bad value, in user order
        s.reserve([7, 8, 9], np.array([0.1, Fraction(-1), -2.0], dtype=object), query="u")
    assert s.ledger.snapshot() == before
    s.close()


@pytest.mark.parametrize(
    "values",
    [[], [2**63 - 1] * 5, [-(2**63), -1, 5, 2**63 - 1], list(range(-1000, 10**5, 7))],
)
def test_exact_sum_of_units_matches_python_ints(values):
    from gpframe.ledger.session import _exact_sum

    assert _exact_sum(np.array(values, dtype=np.int64)) == sum(values)
