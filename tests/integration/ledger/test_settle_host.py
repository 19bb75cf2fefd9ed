"""Settling the reservations of a host that is gone (SQLite file and PostgreSQL).

A Session settles abandoned reservations of its own host only; those of another host keep
holding their amounts until an operator, who knows that host is gone, settles them in full
(``Ledger.settle_host``, ``gpframe ledger settle``). Settling charges the full allocation, never
releases it, and a live process whose reservation was settled under it cannot release anything.
"""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest

import gpframe as gp
import gpframe.ledger.session as session_mod
from gpframe.cli import main
from gpframe.errors import ChargeConflictError, InvalidInputError, LedgerError
from gpframe.ledger import Session


def _reserve_as(monkeypatch, s, host, users, amount):
    """Open a reservation that the ledger records as made on ``host``."""
    monkeypatch.setattr(session_mod, "_HOST", host)
    try:
        return s.reserve(users, amount)
    finally:
        monkeypatch.undo()


def test_settle_host_charges_only_that_hosts_reservations_in_full(ledger_path, monkeypatch):
    with Session(ledger_path, budget=gp.GP(eps=1)) as s:
        gone = _reserve_as(monkeypatch, s, "gone.example", ["a", "b"], Fraction(1, 4))
        alive = _reserve_as(monkeypatch, s, "alive.example", ["a"], Fraction(1, 8))
        table = s.ledger.open_reservations()
        assert sorted(table["host"]) == ["alive.example", "gone.example"]
        assert table.set_index("host").loc["gone.example", ["users", "held"]].tolist() == [2, 0.5]
        assert s.spent_exact(["a", "b"]).tolist() == [0, 0]

        assert s.ledger.settle_host("gone.example") == 1
        # charged in full, never released; the other host's reservation still holds
        assert s.spent_exact(["a", "b"]).tolist() == [Fraction(1, 4), Fraction(1, 4)]
        assert s.ledger.open_reservations()["host"].tolist() == ["alive.example"]
        assert s.remaining_exact(["a"]).tolist() == [Fraction(1) - Fraction(1, 4) - Fraction(1, 8)]
        assert s.ledger.settle_host("gone.example") == 0  # nothing left there

        # the process that held it, if it was alive after all, finds it charged in full
        with pytest.raises(ChargeConflictError):
            gone.charge(Fraction(1, 8))
        alive.charge(Fraction(1, 16))
        assert s.spent_exact(["a"]).tolist() == [Fraction(1, 4) + Fraction(1, 16)]
        assert s.ledger.verify()["reservations"] == 0


def test_older_than_leaves_recent_reservations_alone(ledger_path, monkeypatch):
    with Session(ledger_path, budget=gp.GP(eps=1)) as s:
        r = _reserve_as(monkeypatch, s, "slow.example", ["a"], Fraction(1, 2))
        assert s.ledger.settle_host("slow.example", older_than=timedelta(hours=1)) == 0
        assert len(s.ledger.open_reservations()) == 1
        assert s.ledger.settle_host("slow.example", older_than=timedelta(0)) == 1
        assert s.spent_exact(["a"]).tolist() == [Fraction(1, 2)]
        with pytest.raises(LedgerError):
            r.cancel()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"host": ""}, "host="),
        ({"host": 7}, "host="),
        ({"host": "h", "older_than": 3600}, "older_than="),
        ({"host": "h", "older_than": timedelta(seconds=-1)}, "older_than="),
    ],
)
def test_bad_arguments_settle_nothing(tmp_path, monkeypatch, kwargs, match):
    with Session(str(tmp_path / "l.sqlite"), budget=gp.GP(eps=1)) as s:
        _reserve_as(monkeypatch, s, "h", ["a"], Fraction(1, 2))
        before = s.ledger.snapshot()
        with pytest.raises(InvalidInputError, match=match):
            s.ledger.settle_host(**kwargs)
        assert s.ledger.snapshot() == before


def test_read_only_session_refuses(tmp_path, monkeypatch):
    path = str(tmp_path / "l.sqlite")
    with Session(path, budget=gp.GP(eps=1)) as s:
        _reserve_as(monkeypatch, s, "h", ["a"], Fraction(1, 2))
        with Session(path, readonly=True) as ro:
            assert ro.ledger.open_reservations()["host"].tolist() == ["h"]
            with pytest.raises(LedgerError):
                ro.ledger.settle_host("h")
        assert len(s.ledger.open_reservations()) == 1


def test_cli_lists_and_settles(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "l.sqlite")
    with Session(path, budget=gp.GP(eps=1)) as s:
        _reserve_as(monkeypatch, s, "gone.example", ["a"], Fraction(1, 2))
        assert main(["ledger", "reservations", path]) == 0
        out = capsys.readouterr().out
        assert "gone.example" in out and "0.5" in out
        assert main(["ledger", "settle", path, "--host", "gone.example"]) == 0
        assert "settled 1 reservation" in capsys.readouterr().out
        assert s.spent_exact(["a"]).tolist() == [Fraction(1, 2)]
        assert main(["ledger", "reservations", path]) == 0
        assert "no open reservations" in capsys.readouterr().out
        assert main(["ledger", "settle", path, "--host", "x", "--older-than", "soon"]) == 1
        assert "--older-than" in capsys.readouterr().err
