"""Nearest users, Algorithm 8 (adaptive-budgeting.md §5.3): selection, charges, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from gpframe.errors import InvalidInputError
from gpframe.queries.nearest import nearest_users_arrays
from gpframe.testing import seeded_rng


def _users(seed, n=200):
    rs = np.random.default_rng(seed)
    return rs.uniform(-20000, 20000, (n, 2))


def test_elimination_charges_dropped_users_less_and_finds_the_true_k():
    xy = _users(1)
    out = nearest_users_arrays(xy, (0.0, 0.0), 5, kind="cgp", amount=1e-4, rng=seeded_rng(1))
    true = np.argsort(np.hypot(*xy.T))[:5]
    ch = np.array([float(c) for c in out.charges])
    if out.exact:
        assert set(out.selected.tolist()) == set(true.tolist())
    far = np.argsort(np.hypot(*xy.T))[-50:]
    assert (ch[far] < 1e-4).all() and ch.max() <= 1e-4


@pytest.mark.parametrize("method", ["pt", "dist"])
def test_baselines_charge_every_user_the_allocation(method):
    xy = _users(2, 50)
    out = nearest_users_arrays(
        xy, (0.0, 0.0), 3, kind="gp", amount=0.01, method=method, rng=seeded_rng(2)
    )
    assert [float(c) for c in out.charges] == [0.01] * 50 and len(out.selected) == 3
    assert not out.exact and out.error > 0


@pytest.mark.statistical
def test_error_statement_holds_at_its_probability():
    """Over 60 seeded queries (β = 0.1) the stated error holds in ≥ 80 % (false failure < 1e-6
    at the true rate ≥ 0.9; the bound is loose so the rate is ~1)."""
    ok = 0
    for s in range(60):
        xy = _users(100 + s, 100)
        d = np.hypot(*xy.T)
        out = nearest_users_arrays(
            xy, (0.0, 0.0), 4, kind="cgp", amount=2e-6, method="dist", beta=0.1, rng=seeded_rng(s)
        )
        true = np.sort(d)[:4]
        got = np.sort(d[out.selected])
        ok += bool(np.all(got <= true + out.error + 1e-9))
    assert ok >= 48


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"method": "elim"}, "method"),
        ({"k": 0}, "k="),
        ({"point_m": (np.nan, 0)}, "point"),
        ({"beta": 0.0}, "beta"),
    ],
)
def test_bad_inputs_raise(kw, match):
    args = {"point_m": (0.0, 0.0), "k": 2, **kw}
    with pytest.raises(InvalidInputError, match=match):
        nearest_users_arrays(
            _users(3, 10), args.pop("point_m"), args.pop("k"), kind="cgp", amount=1e-4, **args
        )


# ---------------------------------------------------------------------------------------------
# nearest_rounds with ``draw``: the values released where they are held (the Dask face)


def _draw(xy, q, method, kind, rng, pieces=1):
    """A draw that releases ``idx`` in ``pieces`` calls, from ``rng``, as the workers would."""
    from fractions import Fraction

    from gpframe.queries.elimination import release_part
    from gpframe.queries.nearest import distance_to

    triple = "dist" if method.startswith("dist") else "pt"

    def draw(idx, part):
        out = []
        for sub in np.array_split(idx, pieces):
            data = distance_to(q)(xy[sub]) if triple == "dist" else xy[sub]
            out.append((sub, *release_part(kind, triple, data, part, Fraction(1), rng)))
        return out

    return draw


@pytest.mark.parametrize("method,kind", [("dist-elim", "cgp"), ("pt-elim", "gp"),
                                         ("pt-elim", "cgp"), ("dist", "gp")])  # fmt: skip
def test_a_draw_from_the_same_stream_gives_the_same_output(method, kind):
    from gpframe.queries.nearest import nearest_rounds

    xy, q = _users(5, 120), np.zeros(2)
    amt = 1e-5 if kind == "cgp" else 2e-3
    a = nearest_users_arrays(xy, q, 4, kind=kind, amount=amt, method=method, rng=seeded_rng(5))
    rng = seeded_rng(5)
    shape = (120,) if method.startswith("dist") else (120, 2)
    b = nearest_rounds(np.zeros(shape), q, 4, kind=kind, amount=amt, method=method, rounds=10,
                       split="doubling", beta=0.1, unit=None, scale_max=1, rng=rng,
                       draw=_draw(xy, q, method, kind, rng))  # fmt: skip
    assert a.selected.tolist() == b.selected.tolist() and a.error == b.error
    assert a.charges.tolist() == b.charges.tolist()
    assert a.rounds_run.tolist() == b.rounds_run.tolist()
    if method.endswith("-elim"):
        assert a.rounds_run.max() > 1  # several rounds ran


def test_a_draw_in_several_calls_charges_each_user_the_parts_of_its_rounds():
    from fractions import Fraction

    from gpframe.queries.elimination import charge_if_stopped, split_fractions
    from gpframe.queries.nearest import nearest_rounds

    xy, q = _users(6, 90), np.zeros(2)
    rng = seeded_rng(6)
    out = nearest_rounds(
        np.zeros(90),
        q,
        3,
        kind="cgp",
        amount=Fraction(1, 10**5),
        method="dist-elim",
        rounds=10,
        split="doubling",
        beta=0.1,
        unit=None,
        scale_max=1,
        rng=rng,
        draw=_draw(xy, q, "dist-elim", "cgp", rng, 3),
    )
    pi = split_fractions("doubling", 10)
    want = [charge_if_stopped(Fraction(1, 10**5), pi, r) for r in out.rounds_run.tolist()]
    assert out.charges.tolist() == want and len(set(out.rounds_run.tolist())) > 1


def test_two_guarantees_at_one_part_are_refused():
    from fractions import Fraction

    from gpframe.errors import GpframeInternalError
    from gpframe.queries.elimination import release_part
    from gpframe.queries.nearest import nearest_rounds

    def draw(idx, part):  # the second call states half the part: not the same mechanism
        a = (idx[:1], *release_part("cgp", "dist", np.ones(1), part, Fraction(1), None))
        rel, _ = release_part("cgp", "dist", np.ones(idx.size - 1), part / 2, Fraction(1), None)
        return [a, (idx[1:], rel, part / 2)]

    with pytest.raises(GpframeInternalError, match="two guarantees"):
        nearest_rounds(np.zeros(5), np.zeros(2), 1, kind="cgp", amount=1e-4, method="dist",
                       rounds=1, split="even", beta=0.1, unit=None, scale_max=1, rng=None,
                       draw=draw)  # fmt: skip
