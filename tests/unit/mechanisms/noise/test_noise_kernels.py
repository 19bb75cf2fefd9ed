"""The compiled sampler loops (gpframe.mechanisms.noise.kernels) decide as the array code did.

Each digest hashes a seeded call's output **and the sizes of every request to the bit source**,
so it pins the bit-consumption pattern, not only the values. They were produced by the numpy
implementation the kernels replaced and reproduced bit for bit by the kernels, for every sampler
on its fast path and with the exact fallbacks forced: the enclosures widened so that the integer
part, several pieces per element and many exact decisions occur, the V table bypassed, the
large-|k| rows taken exactly (the hooks of test_noise_forced.py). Update a digest only if a
change of released values is intended, and say so.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
import pytest

from gpframe import testing
from gpframe.mechanisms.noise import bernoulli, gaussian, geometric, laplace
from gpframe.mechanisms.noise.gaussian import discrete_gaussian, discrete_gaussian_nd
from gpframe.mechanisms.noise.laplace import discrete_laplace, lattice_laplace
from gpframe.mechanisms.noise.laplace_rates import discrete_laplace_rates

SIGMA2 = [
    Fraction(1, 256),
    Fraction(9, 4),
    Fraction(5, 7),
    Fraction(400),
    Fraction(92682**2),
    Fraction(2**48),
    Fraction(123456789, 1000),
]
LAM = [Fraction(1, 3), Fraction(1, 33), Fraction(1, 92682), Fraction(1, 2**40), Fraction(1024)]
CASES: dict[str, Callable[[object], np.ndarray]] = {}
for _s in SIGMA2:
    CASES[f"dg {_s}"] = lambda r, s=_s: discrete_gaussian(s, 2048, r)
for _lam in LAM:
    CASES[f"dl {_lam}"] = lambda r, lam=_lam: discrete_laplace(lam, 2048, r)
for _a, _d in [(Fraction(1, 4), 2), (Fraction(1, 102400), 2), (Fraction(1, 2**16), 3)]:
    CASES[f"ll {_a} {_d}"] = lambda r, a=_a, d=_d: lattice_laplace(a, d, 1024, r)
CASES["dgnd"] = lambda r: discrete_gaussian_nd(Fraction(10514743094), 2, 1024, r)
CASES["rates"] = lambda r: discrete_laplace_rates([Fraction(1, 5 + i) for i in range(200)], r)
CASES["dg chunks"] = lambda r: discrete_gaussian(Fraction(92682**2), 200_000, r)

#: the hooks of test_noise_forced.py, and a wide enclosure (several pieces, many exact draws)
MODES = ("fast", "zero_ceil", "floor_ceil", "wide")
FORCED = ["dg 9/4", "dg 400", "dg 8589953124", "dl 1/33", "dl 1/92682", "ll 1/102400 2", "rates"]

PINNED = {
    "fast: dg 1/256": "3f6c59529f2c3bef6f6d1c10",
    "fast: dg 9/4": "f1a5e372eb739f32358fe73d",
    "fast: dg 5/7": "37f384861973482936b3284d",
    "fast: dg 400": "9e0cc239acdc1e9a7de5665c",
    "fast: dg 8589953124": "7a58174aa9a162efb5cbf07c",
    "fast: dg 281474976710656": "715caf128833186935d1fda7",
    "fast: dg 123456789/1000": "e6d4fd247ca950b9c835bb10",
    "fast: dl 1/3": "447a5a5826317217cfb068be",
    "fast: dl 1/33": "cbad52f6a99b06d2032ef46b",
    "fast: dl 1/92682": "782ddf6c16054b02add68807",
    "fast: dl 1/1099511627776": "6bfdee0faa94a9e1bab29066",
    "fast: dl 1024": "d843e9507373960e7cbf571e",
    "fast: ll 1/4 2": "25af3c10d69556adcb810ed6",
    "fast: ll 1/102400 2": "2192895e61a2b7befe5743f5",
    "fast: ll 1/65536 3": "1cc45a6864f1c07b8b380153",
    "fast: dgnd": "47601ffa3b6f0bab352abe6f",
    "fast: rates": "a4164e701ef14dcac1ec1338",
    "fast: dg chunks": "c4cfe45980363714f049efba",
    "zero_ceil: dg 9/4": "d13c72b3652d31356d986a34",
    "zero_ceil: dg 400": "95ff81723a17137571d0b891",
    "zero_ceil: dg 8589953124": "11465a170b4263c45ee4c8c6",
    "zero_ceil: dl 1/33": "c694b82bcbe56c122b921914",
    "zero_ceil: dl 1/92682": "d4989c658fc5a525f6cc7668",
    "zero_ceil: ll 1/102400 2": "863545402a53d14f1ad66111",
    "zero_ceil: rates": "159b344eb75519e7851e0089",
    "floor_ceil: dg 9/4": "079468ab7682ac1f5c845ff7",
    "floor_ceil: dg 400": "47757bf8438077ae2a2ad164",
    "floor_ceil: dg 8589953124": "9d1ec09369e6e9759ed6b3cc",
    "floor_ceil: dl 1/33": "c694b82bcbe56c122b921914",
    "floor_ceil: dl 1/92682": "d4989c658fc5a525f6cc7668",
    "floor_ceil: ll 1/102400 2": "9335822def5cb43091ed9fa3",
    "floor_ceil: rates": "91b6345ebd172fad0079535b",
    "wide: dg 9/4": "4647552d020c608c9bc20703",
    "wide: dg 400": "2ba17f49f0929990589e7baf",
    "wide: dg 8589953124": "7a4738f723245c0638d7ed24",
    "wide: dl 1/33": "c694b82bcbe56c122b921914",
    "wide: dl 1/92682": "d4989c658fc5a525f6cc7668",
    "wide: ll 1/102400 2": "f54c1093a1813a1f96cf5591",
    "wide: rates": "081fe1e262595580c585724a",
}


@contextlib.contextmanager
def mode(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if name == "zero_ceil":
        monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (np.zeros_like(lo), np.ceil(hi)))
        monkeypatch.setattr(geometric, "FORCE_EXACT", True)
        monkeypatch.setattr(gaussian, "K_FAST", 1 << 4)
        monkeypatch.setattr(laplace, "BIG_K", 1 << 10)
    elif name == "floor_ceil":
        monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (np.floor(lo), np.ceil(hi)))
    elif name == "wide":
        monkeypatch.setattr(bernoulli, "enclose", lambda lo, hi: (lo * 0.5, hi * 3.0 + 0.2))
    yield


def digest(name: str, seed: int) -> str:
    """sha256 of the output and of the request sizes of one seeded call (24 hex digits)."""
    inner = testing.seeded_rng(seed)
    sizes: list[int] = []

    def fn(n: int) -> bytes:
        sizes.append(n)
        return inner.bytes(n)

    out = CASES[name](testing.callback_rng(fn, name="log"))
    h = hashlib.sha256(np.ascontiguousarray(out).tobytes())
    h.update(np.array(sizes, dtype=np.int64).tobytes())
    return h.hexdigest()[:24]


def all_cases() -> list[tuple[str, str, int]]:
    rows = [("fast", name, 8100 + i) for i, name in enumerate(CASES)]
    for m in MODES[1:]:
        rows += [(m, name, 8200 + i) for i, name in enumerate(FORCED)]
    return rows


@pytest.mark.parametrize(("m", "name", "seed"), all_cases())
def test_request_pattern_and_output_are_pinned(m, name, seed, monkeypatch):
    with mode(m, monkeypatch):
        assert digest(name, seed) == PINNED[f"{m}: {name}"]


def _tie_run(first: int) -> tuple[list[bool], list[int]]:
    """bern_exp_neg with the integer part's first word set to ``first`` (a tie when T_1)."""
    inner = testing.seeded_rng(77)
    sizes: list[int] = []

    def fn(n: int) -> bytes:
        sizes.append(n)
        b = bytearray(inner.bytes(n))
        if len(sizes) == 1:
            b[0:4] = first.to_bytes(4, "little")
        return bytes(b)

    src = testing.callback_rng(fn, name="tie")
    glo = np.array([1.5, 2.25, 0.3, 1.0, 7.9, 30.5])

    def exact_less(i: int, W: int, m: int, M: int, j: int) -> bool:
        return bernoulli.lazy_rational_less(W, m, M, 1, 2, src)

    out = bernoulli.bern_exp_neg(glo, glo.copy(), exact_less, src)
    return out.tolist(), sizes


def test_integer_part_tie_is_decided_by_more_bits_of_the_same_uniform():
    # A word equal to floor(exp(-1) 2**32) extends the uniform by 8 bytes before the rounds.
    t1 = int(bernoulli._int_thresholds()[1])
    assert _tie_run(t1) == ([False, False, True, False, False, False], [20, 8, 12, 6, 2])
    assert _tie_run(t1 + 1) == ([False, False, True, False, False, False], [20, 12, 6, 4])
    assert _tie_run(0) == ([True, False, True, False, False, False], [20, 12, 6, 4])


def test_gauss_bounds_match_the_array_arithmetic_bit_for_bit():
    from gpframe.mechanisms.noise import kernels

    gen = np.random.default_rng(3)  # test vectors, not a randomness source
    plan = gaussian._gauss_plan(Fraction(92682**2))
    k = gen.integers(-(2**36), 2**36, 50_000)
    e = gen.integers(0, plan.t + 1, 50_000)
    glo, ghi = np.empty(k.size), np.empty(k.size)
    rel = gaussian._REL
    big = kernels.gauss_bounds(
        k, e, plan.dt, plan.N, plan.inv_D, plan.inv_t, 1 - rel, 1 + rel, 1 << 37, glo, ghi
    )
    a = (np.abs(k) * plan.dt - plan.N).astype(np.float64)
    g = e.astype(np.float64) * plan.inv_t + (a * a) * plan.inv_D
    assert big == 0
    assert np.array_equal(glo, g * (1 - rel)) and np.array_equal(ghi, g * (1 + rel))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_planar_bounds_match_the_array_arithmetic_bit_for_bit(d):
    from gpframe.mechanisms.noise import kernels

    gen = np.random.default_rng(5)  # test vectors
    _, geo, _, lamB_f, a_f, _ = laplace._lattice_plan(1, 102400, d)
    m = 20_000
    V = gen.integers(0, 3000, m * d)
    k = (V << geo.L) ^ -gen.integers(0, 2, m * d)
    vs, glo, ghi = np.empty(m, dtype=np.int64), np.empty(m), np.empty(m)
    pm = laplace._PLANAR_MARGIN
    vmax = kernels.planar_bounds(k, V, d, a_f, lamB_f, 1 - pm, 1 + pm, vs, glo, ghi)
    kf = k.astype(np.float64)
    N = kf[0::d] * kf[0::d]
    for j in range(1, d):
        N += kf[j::d] * kf[j::d]
    r = np.sqrt(N) * a_f
    c = V.reshape(m, d).sum(axis=1).astype(np.float64) * lamB_f
    assert vmax == V.max() and np.array_equal(vs, V.reshape(m, d).sum(axis=1))
    assert np.array_equal(glo, np.maximum(r * (1 - pm) - c, 0.0))
    assert np.array_equal(ghi, r * (1 + pm) - c)


def test_v_words_match_the_table_and_search():
    from gpframe.mechanisms.noise import kernels

    vt = geometric.v_table(Fraction(1, 20))
    gen = np.random.default_rng(4)  # test vectors
    W = np.concatenate([gen.integers(0, 2**32, 100_000), vt.asc, [0]]).astype(np.uint32)
    V, ties = np.empty(W.size, dtype=np.int64), np.empty(W.size, dtype=np.int64)
    nt = kernels.v_words(vt.table, vt.asc, vt.vmax, False, W, V, ties)
    ref = vt.vmax - np.searchsorted(vt.asc, W.astype(np.int64), side="right")
    tie = (W == 0) | np.isin(W.astype(np.int64), vt.asc)
    assert np.array_equal(V, ref)
    assert np.array_equal(ties[:nt], np.flatnonzero(tie))


if __name__ == "__main__":  # prints the digests (run against the implementation to pin)
    testing.enable_seeded()
    mp = pytest.MonkeyPatch()
    for m, name, seed in all_cases():
        with mode(m, mp):
            print(f'    "{m}: {name}": "{digest(name, seed)}",')
        mp.undo()
