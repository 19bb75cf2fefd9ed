"""gpframe.ledger.report: the data behind `gpframe ledger report` and the HTML page."""

import sqlite3
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpframe as gp
from gpframe.ledger.report import gather, parse_since

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


# -- parse_since ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("12h", NOW - timedelta(hours=12)),
        ("30m", NOW - timedelta(minutes=30)),
        ("2w", NOW - timedelta(weeks=2)),
        (" 1d ", NOW - timedelta(days=1)),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=timezone.utc)),
        ("2026-11-01T12:30", datetime(2026, 11, 1, 12, 30, tzinfo=timezone.utc)),
        ("2026-11-01 12:30:05", datetime(2026, 11, 1, 12, 30, 5, tzinfo=timezone.utc)),
        ("2026-11-01T12:00+01:00", datetime(2026, 11, 1, 11, 0, tzinfo=timezone.utc)),
        ("2026-11-01T12:00Z", datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)),
    ],
)
def test_parse_since_reads_dates_datetimes_and_ages(text, expected):
    got = parse_since(text, now=NOW)
    assert got == expected and got.utcoffset() == timedelta(0)


def test_parse_since_takes_date_and_datetime_objects():
    assert parse_since(date(2026, 11, 1)) == datetime(2026, 11, 1, tzinfo=timezone.utc)
    naive = datetime(2026, 11, 1, 8, 0)
    assert parse_since(naive) == naive.replace(tzinfo=timezone.utc)  # naive is UTC
    tz = timezone(timedelta(hours=-5))
    assert parse_since(datetime(2026, 11, 1, 8, 0, tzinfo=tz)).hour == 13


@pytest.mark.parametrize("bad", ["yesterday", "7", "7 days", "d7", "-3d", "2026-13-01", "", "7y"])
def test_parse_since_refuses_bad_text_naming_the_argument_and_the_forms(bad):
    with pytest.raises(gp.InvalidInputError) as e:
        parse_since(bad, name="--since")
    msg = str(e.value)
    assert msg.startswith(f"--since={bad!r}") and "7d" in msg and "2026-11-01" in msg


def test_parse_since_refuses_an_age_before_year_one():
    with pytest.raises(gp.InvalidInputError, match="before the year 1"):
        parse_since("999999w", now=NOW)


@given(st.text(max_size=30))
def test_parse_since_either_reads_text_or_refuses_it_cleanly(text):
    try:
        got = parse_since(text, now=NOW)
    except gp.InvalidInputError as e:
        assert str(e).startswith("since=")
    else:
        assert got.utcoffset() == timedelta(0)


@pytest.mark.parametrize("bad", [7, 1.5, None, ["7d"]])
def test_parse_since_refuses_other_types(bad):
    with pytest.raises(gp.InvalidInputError, match="must be a str"):
        parse_since(bad)


# -- gather -----------------------------------------------------------------------------------


@pytest.fixture
def session(tmp_path):
    s = gp.Session(path=str(tmp_path / "l.sqlite"), budget=gp.CGP(rho=1e-3),
                   central=gp.DP(epsilon=1.0))  # fmt: skip
    with s.reserve(["ann", "bob", 7], 0.5, notion="central", query="count",
                   params={"rho": 2e-6, "excluded_users": ["zed", 7]}) as r:  # fmt: skip
        r.charge([0.5, 0.25, 0.1])
    s.middle = datetime.now(timezone.utc)
    with s.reserve(["ann"], 1e-4, notion="metric", query="privatize") as r:
        r.charge([1e-4])
    with s.reserve(["bob", "7"], 0.25, notion="central", query="mean") as r:
        r.charge([0.25, 0.25])
    yield s
    s.close()


def test_gather_rows_and_totals_match_session_report(session):
    d = gather(session)
    assert d.rows.equals(session.report())
    central = d.totals.set_index("notion").loc["central"]
    assert central["users"] == 4 and central["spent"] == pytest.approx(1.35)
    assert "spent_since" not in d.rows.columns


def test_gather_timeline_has_each_querys_charges_and_savings(session):
    q = gather(session).queries
    assert list(q["query"]) == ["count", "privatize", "mean"]
    count = q.iloc[0]
    assert count["users"] == 3 and count["charged"] == pytest.approx(0.85)
    assert count["max_charge"] == pytest.approx(0.5)
    assert count["allocated"] == pytest.approx(1.5) and count["saved"] == pytest.approx(0.65)
    assert count["excluded"] == 2 and count["params"] == {"rho": 2e-6}
    assert list(q["time"]) == sorted(q["time"])


def test_gather_savings_per_notion(session):
    s = gather(session).savings.set_index("notion")
    assert s.loc["central", "queries"] == 2 and s.loc["central", "queries_saving"] == 1
    assert s.loc["central", "allocated"] == pytest.approx(2.0)
    assert s.loc["central", "saved"] == pytest.approx(0.65)
    assert s.loc["central", "saved_share"] == pytest.approx(0.325)
    assert s.loc["metric", "saved"] == 0


def test_gather_filters_users_exactly_7_is_not_text_7(session):
    d = gather(session, users=[7])
    assert list(d.rows["user"]) == [7, 7]
    q = d.queries.set_index("query")
    # the timeline counts only user 7: count charged it 0.1 and left it out once (stale list)
    assert list(q.index) == ["count"]
    assert q.loc["count", "users"] == 1 and q.loc["count", "charged"] == pytest.approx(0.1)
    assert q.loc["count", "excluded"] == 1
    text = gather(session, users="7")
    assert list(text.queries["query"]) == ["mean"]


def test_gather_filters_notion(session):
    d = gather(session, notion="metric")
    assert set(d.rows["notion"]) == {"metric"} and list(d.queries["query"]) == ["privatize"]
    assert list(d.totals["notion"]) == ["metric"]


def test_gather_since_restricts_timeline_and_adds_spent_since(session):
    d = gather(session, since=session.middle)
    assert list(d.queries["query"]) == ["privatize", "mean"]
    r = d.rows.set_index(["notion", d.rows["user"].map(repr)])
    assert r.loc[("central", "'bob'"), "spent_since"] == pytest.approx(0.25)
    assert r.loc[("central", "'bob'"), "queries_since"] == 1
    assert r.loc[("central", "'bob'"), "spent"] == pytest.approx(0.5)  # the state, unchanged
    assert r.loc[("central", "'ann'"), "spent_since"] == 0
    assert d.totals.set_index("notion").loc["central", "spent_since"] == pytest.approx(0.5)
    assert d.filters["since"] == session.middle.isoformat()
    later = gather(session, since="1h", now=datetime.now(timezone.utc) + timedelta(hours=2))
    assert later.queries.empty and later.savings.empty
    assert (later.rows["spent_since"] == 0).all()


def test_gather_refuses_unknown_users_notions_and_bad_since_before_reading(session):
    before = session.ledger.snapshot()
    with pytest.raises(gp.InvalidInputError, match="no user 'zed'"):
        gather(session, users=["zed"])
    with pytest.raises(gp.InvalidInputError, match="notion='both'"):
        gather(session, notion="both")
    with pytest.raises(gp.InvalidInputError, match="since='last week'"):
        gather(session, since="last week")
    with pytest.raises(gp.InvalidInputError, match="selects nobody"):
        gather(session, users=[])
    only_metric = gp.Session(budget=gp.CGP(rho=1e-3))
    with pytest.raises(gp.InvalidInputError, match="no central budget"):
        gather(only_metric, notion="central")
    assert session.ledger.snapshot() == before


def test_gather_integrity_ok_and_tampered(session, tmp_path):
    assert gather(session).integrity["ok"] is True
    assert gather(session, verify=False).integrity["ok"] is None
    path = session.path
    session.close()
    # alter one charge's amounts behind gpframe's back: the cheap check on open does not read
    # the charges, the full check does
    con = sqlite3.connect(path)
    blob = con.execute("SELECT amount FROM charges ORDER BY rowid LIMIT 1").fetchone()[0]
    arr = np.frombuffer(blob, dtype=np.int64).copy()
    arr[0] -= 1
    con.execute("UPDATE charges SET amount = ? WHERE rowid = 1", (arr.tobytes(),))
    con.commit()
    con.close()
    ro = gp.Session(path=path, readonly=True, anchor=False)
    try:
        verdict = gather(ro).integrity
    finally:
        ro.close()
    assert verdict["ok"] is False and "does not match its digest" in verdict["message"]
