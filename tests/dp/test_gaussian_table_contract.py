"""Contract tests of the table sampler (pipeline.dp.gaussian_table): exact, deterministic, no statistics.

The sampler returns X = min{k : U* < F(k)} for one uniform U* whose 64-bit head U comes first and whose
further 64-bit digits come only when needed (module docstring; CKS20's discrete Gaussian, privacy by the
discrete analogue of Thm 19.37(iii) of the seed chapter, holds only for that exact law).  So every output is
checked here against that definition evaluated in mpmath, for U* fed digit by digit from a scripted source:
- table entries: L = floor(F 2^64), H = ceil(F 2^64) exactly, K the least k with G(K+1) <= 2^-64;
- every branch (guide, binary search, refinement over several rounds, beyond a short table) on chosen U*;
- how many digits are drawn, and when (refinement draws one digit per undecided sample per round, 15 rounds);
- the validation of hand-built tables (errors name what is wrong), the guide's size rule, and both LRUs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from pipeline.dp import gaussian_table as nt
from pipeline.dp.cdf import CdfEnclosure, LaplaceCdf, cdf_enclosure
from pipeline.dp.random_source import seeded_random_source

DPS = 110
MASK = (1 << 64) - 1


class ScriptedSource:
    """A RandomSource returning the given uint64 values in order; records the size of every request."""

    name = "scripted (tests only)"
    publishable = False

    def __init__(self, values: list[int], extra: int = 0) -> None:
        self._values = [int(v) for v in values]
        self._extra = extra  # values returned beyond the size asked for (a broken source)
        self.requests: list[int] = []

    def uniform_uint64(self, size: int) -> np.ndarray:
        self.requests.append(size)
        take = size + self._extra
        assert len(self._values) >= take, "script exhausted"
        out, self._values = self._values[:take], self._values[take:]
        return np.array(out, dtype=np.uint64)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        raise AssertionError("not used by the table sampler")

    def bind(self, secret: bytes) -> None:
        pass

    @property
    def left(self) -> int:
        return len(self._values)


def _mpq(x: Fraction) -> mp.mpf:
    return mp.mpf(x.numerator) / x.denominator


@functools.cache
def _gaussian_tails(sigma2: Fraction, cut: int) -> tuple[list[mp.mpf], mp.mpf]:
    """(tail, Z) with tail[m] = sum_{j >= m} w_j, w_j = exp(-j^2 / (2 sigma2)), j <= cut."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        w = [mp.exp(-mp.mpf(j * j) / (2 * s2)) for j in range(cut + 1)]
        tail = [mp.mpf(0)] * (cut + 2)
        for m in range(cut, -1, -1):
            tail[m] = tail[m + 1] + w[m]
        return tail, 2 * tail[0] - w[0]


def gaussian_cdf(sigma2: Fraction, ks: range) -> dict[int, mp.mpf]:
    """F(k) of N_Z(0, sigma2) at DPS digits for k in ks (terms below 1e-(DPS+30) of the total dropped)."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        cut = max(int(mp.ceil(mp.sqrt(2 * s2 * (DPS + 30) * mp.log(10)))), abs(ks.start), abs(ks.stop)) + 2
    tail, z = _gaussian_tails(sigma2, cut)
    with mp.workdps(DPS + 10):
        return {k: tail[-k] / z if k < 0 else 1 - tail[k + 1] / z for k in ks}


def laplace_cdf(scale: Fraction, ks: range) -> dict[int, mp.mpf]:
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        return {k: q ** (-k) / (1 + q) if k < 0 else 1 - q ** (k + 1) / (1 + q) for k in ks}


def invert(cdf: dict[int, mp.mpf], value: int, bits: int) -> int:
    """min{k : U* < F(k)} for U* = value / 2^bits (exact dyadic), searched over the keys of ``cdf``."""
    with mp.workdps(DPS + 10):
        u = mp.mpf(value) / mp.mpf(2) ** bits
        ks = sorted(cdf)
        found = [k for k in ks if u < cdf[k]]
        assert found and found[0] > ks[0], "window too small"
        return found[0]


def digits(seed: int, n: int) -> list[int]:
    return [int(v) for v in seeded_random_source(seed).uniform_uint64(n)]


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    nt.clear_caches()
    yield
    nt.clear_caches()


# ---- tables: entries against mpmath ---------------------------------------------------------------------


def gaussian_kmax(sigma2: Fraction) -> int:
    """Least K >= 0 with G(K+1) 2^64 <= 1, from mpmath (asserting no knife edge)."""
    reach = int(4 * math.sqrt(float(sigma2) * 64)) + 5
    cdf = gaussian_cdf(sigma2, range(-reach, 1))
    with mp.workdps(DPS):
        for k in range(reach):
            g = cdf[-k - 1] * mp.mpf(2) ** 64
            assert abs(g - 1) > mp.mpf(10) ** -20
            if g <= 1:
                return k
    raise AssertionError


def floor_ceil(f: mp.mpf) -> tuple[int, int]:
    with mp.workdps(DPS):
        v = f * mp.mpf(2) ** 64
        return int(mp.floor(v)), int(mp.ceil(v))


@pytest.mark.parametrize("sigma2", ["1/100", "1/20", "1/8", "1/2", "7/3", "50"])  # 1/100, 1/8: K = J - 1
@pytest.mark.parametrize("widen", [0, 3, 2**62])
def test_table_entries_are_floor_and_ceiling_of_the_cdf(sigma2: str, widen: int) -> None:
    """L = floor(F 2^64) - widen (>= 0), H = ceil(F 2^64) + widen (<= 2^64): the 128-bit enclosure decides
    the rounding of every entry here (no F 2^64 is within 2^-60 of an integer)."""
    s2 = Fraction(sigma2)
    table = nt.build_table(s2, widen=widen) if widen else nt.build_table(s2)
    k = table.kmax
    assert k == gaussian_kmax(s2)
    assert (table.sigma2, table.law, table.low.size, table.high_m1.size) == (s2, "gaussian", 2 * k + 2, 2 * k + 2)
    cdf = gaussian_cdf(s2, range(-k - 1, k + 1))
    for t, kk in enumerate(range(-k - 1, k + 1)):
        lo, hi = floor_ceil(cdf[kk])
        assert int(table.low[t]) == max(lo - widen, 0), kk
        assert int(table.high_m1[t]) + 1 == min(hi + widen, 1 << 64), kk


def test_default_kmax_rule_is_inclusive() -> None:
    """K is the least k with G(K+1) <= 2^-64 *surely*, i.e. with the 128-bit upper bound of G(K+1) at most 2^64
    units: at a sigma2 where that bound for G(4) is exactly 2^64 (found by bisection on the very enclosure the
    table is built from), K = 3, not 4."""
    target, k = 1 << 64, 3
    a, b = Fraction(1, 10), Fraction(1, 4)
    for _ in range(300):
        m = Fraction(round((a + b) / 2 * 2**200), 2**200)
        v = cdf_enclosure(m, nt.TABLE_PREC).g_hi[k]
        if v == target:
            break
        a, b = (m, b) if v < target else (a, m)
    else:
        pytest.fail("no sigma2 with an upper bound of G(4) 2^128 equal to 2^64")
    assert cdf_enclosure(m, nt.TABLE_PREC).g_hi[k - 1] > target
    assert nt.build_table(m).kmax == k


@pytest.mark.parametrize("sigma2", ["500", "5000"])
def test_default_kmax_at_large_sigma2(sigma2: str) -> None:
    """Where G(K) / G(K+1) < 2 (sigma2 above ~200) the rule's threshold 2^-64 (not 2^-63) decides K exactly."""
    s2 = Fraction(sigma2)
    table = nt.build_table(s2)
    assert table.kmax == gaussian_kmax(s2)
    with mp.workdps(DPS):
        cdf = gaussian_cdf(s2, range(-table.kmax - 1, -table.kmax + 1))
        assert cdf[-table.kmax - 1] * mp.mpf(2) ** 64 <= 1 < cdf[-table.kmax] * mp.mpf(2) ** 64 <= 2


@pytest.mark.parametrize(("sigma2", "kmax"), [("7/3", 0), ("7/3", 3), ("1/2", 10**6)])
def test_short_and_capped_tables(sigma2: str, kmax: int) -> None:
    """``kmax`` shortens the table (same entries for the boundaries kept); it never exceeds the enclosure's J."""
    s2 = Fraction(sigma2)
    full = nt.build_table(s2)
    table = nt.build_table(s2, kmax=kmax)
    j = cdf_enclosure(s2, nt.TABLE_PREC).jmax
    assert table.kmax == min(kmax, j)
    k = table.kmax
    cut = slice(full.kmax - k, full.kmax + k + 2) if k <= full.kmax else slice(None)
    if k <= full.kmax:
        assert np.array_equal(table.low, full.low[cut]) and np.array_equal(table.high_m1, full.high_m1[cut])
    else:  # beyond the default K: the outer entries are F(k) 2^64 rounded, i.e. 0 / 1 and 2^64 - 1 / 2^64
        cdf = gaussian_cdf(s2, range(-k - 1, k + 1))
        for t, kk in enumerate(range(-k - 1, k + 1)):
            lo, hi = floor_ceil(cdf[kk])
            assert (int(table.low[t]), int(table.high_m1[t]) + 1) == (lo, max(hi, 1)), kk


# ---- table_from_bounds: validation, dtype, guide size ------------------------------------------------


def hand_table(kmax: int, law: str = "gaussian") -> nt.GaussianTable:
    """Boundaries spread evenly over [0, 2^64) with small enclosures (L = H - 1 - t % 3)."""
    n = 2 * kmax + 2
    high = [((t + 1) << 64) // (n + 1) for t in range(n)]
    low = [h - 1 - t % 3 for t, h in enumerate(high)]
    return nt.table_from_bounds(Fraction(3), kmax, np.array(low, dtype=np.uint64), np.array(high, dtype=np.uint64) - 1,
                                law=law)


@pytest.mark.parametrize(
    ("kmax", "low", "high_m1", "law", "match"),
    [
        (1, [1, 2, 3, 4], [1, 2, 3, 4], "normal", "law"),
        (1, [1, 2, 3], [1, 2, 3, 4], "gaussian", "2 kmax \\+ 2"),
        (1, [1, 2, 3, 4, 5], [1, 2, 3, 4, 5], "gaussian", "2 kmax \\+ 2"),
        (1, [1, 2, 3, 4], [1, 2, 3], "gaussian", "2 kmax \\+ 2"),
        (-1, [], [], "gaussian", "2 kmax \\+ 2"),
        (1, [1, 3, 2, 4], [1, 2, 3, 4], "gaussian", "nondecreasing"),
        (1, [1, 2, 3, 4], [1, 2, 4, 3], "gaussian", "nondecreasing"),
        (1, [2, 1, 3, 4], [1, 2, 3, 4], "gaussian", "nondecreasing"),
        (1, [1, 2, 3, 4], [2, 1, 3, 4], "gaussian", "nondecreasing"),
    ],
)
def test_table_from_bounds_refuses_bad_bounds(kmax: int, low: list[int], high_m1: list[int], law: str,
                                              match: str) -> None:
    with pytest.raises(ValueError, match=match):
        nt.table_from_bounds(Fraction(1), kmax, np.array(low, dtype=np.uint64), np.array(high_m1, dtype=np.uint64),
                             law=law)


def test_table_from_bounds_accepts_ties_and_every_law() -> None:
    """Equal neighbouring bounds are nondecreasing; the default law is the Gaussian; lists are accepted."""
    table = nt.table_from_bounds(Fraction(1), 1, [5, 5, 9, 9], [6, 6, 9, 9])  # type: ignore[arg-type]
    assert table.law == "gaussian" and table.low.dtype == np.uint64 and table.high_m1.dtype == np.uint64
    assert table.low.tolist() == [5, 5, 9, 9] and table.high_m1.tolist() == [6, 6, 9, 9]
    assert (table.sigma2, table.kmax) == (Fraction(1), 1)
    for law in ("gaussian", "laplace", "laplace_difference"):
        assert hand_table(0, law).law == law
    two = nt.table_from_bounds(Fraction(1), 0, np.array([7, 8], dtype=np.uint64), np.array([7, 8], dtype=np.uint64))
    assert two.kmax == 0


@pytest.mark.parametrize(
    ("kmax", "dtype", "bits"),
    [
        (0, np.int16, 10),  # 2 boundaries: at least 2^10 cells
        (3, np.int16, 10),  # 8 boundaries: 4 + 6 bits
        (7, np.int16, 11),  # 16 boundaries: 5 + 6 bits, ~64 cells per boundary
        (100, np.int16, 14),
        (8191, np.int16, 19),  # 16384 boundaries: 15 + 6 = 21 bits, capped at 2^19 int16 cells = GUIDE_BYTES
        (32765, np.int16, 19),  # the largest K whose +-(K+1) stays below the int16 maximum
        (32766, np.int32, 18),  # int32 from here: 2^18 cells = GUIDE_BYTES
        (40000, np.int32, 18),
    ],
)
def test_guide_dtype_and_size(kmax: int, dtype: type, bits: int) -> None:
    """The guide: the smallest dtype whose maximum exceeds K+1, 2^(bits) cells with bits = bit_length(2K+2) + 6,
    at least 10, and no more than GUIDE_BYTES of guide."""
    table = hand_table(kmax)
    assert table.guide.dtype == dtype and table.sentinel == np.iinfo(dtype).min
    assert table.guide.size == 1 << bits and int(table.shift) == 64 - bits
    assert table.guide.nbytes <= nt.GUIDE_BYTES


def brute_guide(low: list[int], high: list[int], kmax: int, bits: int, sentinel: int) -> list[int]:
    """The guide from its definition: cell c is pure iff #{H <= start} == #{L <= end} =: i with 0 < i < 2K+2."""
    s = 64 - bits
    out = []
    for c in range(1 << bits):
        start, end = c << s, ((c + 1) << s) - 1
        i = sum(h <= start for h in high)
        j = sum(lo <= end for lo in low)
        out.append(i - kmax - 1 if i == j and 0 < i < len(low) else sentinel)
    return out


@pytest.mark.parametrize("case", ["spread", "clustered", "wide"])
def test_guide_matches_its_definition(case: str) -> None:
    kmax = 2
    if case == "spread":
        high = [(t + 1) << 61 for t in range(6)]
        low = [h - 5 for h in high]
    elif case == "clustered":  # several boundaries inside one cell, one boundary exactly on a cell start
        cell = 1 << 54
        high = [cell * 3 + 10, cell * 3 + 20, cell * 5, cell * 5 + 1, cell * 700, MASK + 1]
        low = [cell * 3 + 9, cell * 3 + 19, cell * 5 - 1, cell * 5, cell * 699 + 5, (1 << 64) - 1]
    else:  # enclosures spanning several cells
        high = [(t + 1) << 61 for t in range(6)]
        low = [h - (3 << 55) for h in high]
    table = nt.table_from_bounds(Fraction(2), kmax, np.array(low, dtype=np.uint64),
                                 np.array([h - 1 for h in high], dtype=np.uint64))
    bits = 64 - int(table.shift)
    assert bits == 10
    assert table.guide.tolist() == brute_guide(low, high, kmax, bits, table.sentinel)
    pure = table.guide != table.sentinel
    assert pure.any() and (~pure).any()


# ---- sampling: every branch against the definition ------------------------------------------------------


def boundary_us(table: nt.GaussianTable) -> list[int]:
    """U values on both sides of every L and H, and the two ends."""
    us = {0, 1, MASK, MASK - 1}
    for t in range(table.low.size):
        for edge in (int(table.low[t]), int(table.high_m1[t]) + 1):
            us |= {min(max(edge + d, 0), MASK) for d in (-2, -1, 0, 1)}
    return sorted(us)


def expected_by_inversion(us: list[int], refined: list[int], first_digits: list[int],
                          cdf: dict[int, mp.mpf]) -> list[int]:
    """X for each U when the samples ``refined`` (in sample order) took one more digit each, in that order, and
    no second round was needed (the callers assert that from the draws)."""
    digit_of = dict(zip(refined, first_digits, strict=True))
    return [invert(cdf, (u << 64) | digit_of[i], 128) if i in digit_of else invert(cdf, u, 64)
            for i, u in enumerate(us)]


def decided_at_64_bits(table: nt.GaussianTable, u: int) -> bool:
    """U decides when some i has H_{i-1} <= U and U + 1 <= L_i (0 < i < 2K+2)."""
    low = [int(x) for x in table.low]
    high = [int(x) + 1 for x in table.high_m1]
    return any(high[i - 1] <= u and u + 1 <= low[i] for i in range(1, len(low)))


@pytest.mark.parametrize(("sigma2", "kmax"), [("7/3", None), ("1/2", None), ("7/3", 2), ("50", None)])
def test_sample_table_is_inversion_for_every_branch(sigma2: str, kmax: int | None) -> None:
    """Each U on either side of every bound (and the ends): decided ones by the guide or the binary search with
    no further digit, the others refined with exactly one fresh digit each (in sample order); every output is
    min{k : U* < F(k)} in mpmath.  A short table sends the tails through refinement too."""
    s2 = Fraction(sigma2)
    table = nt.build_table(s2, kmax=kmax)
    us = boundary_us(table)
    refined = [i for i, u in enumerate(us) if not decided_at_64_bits(table, u)]
    assert refined and len(refined) < len(us)
    extra = digits(11, len(refined))
    rng = ScriptedSource(us + extra)
    x = nt.sample_table(table, len(us), rng)
    assert rng.requests == [len(us), len(refined)] and rng.left == 0
    cdf = gaussian_cdf(s2, range(-200, 201))
    assert x.dtype == np.int64
    assert x.tolist() == expected_by_inversion(us, refined, extra, cdf)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_sample_table_with_one_impure_sample(which: int) -> None:
    """Exactly one U in an impure cell (one refined, one decided by the binary search, one beyond the table)."""
    s2 = Fraction(7, 3)
    table = nt.build_table(s2, kmax=3)
    t = table.kmax + 1
    u_odd = [int(table.low[t]), int(table.low[t]) - 1, MASK][which]
    pure_cells = np.flatnonzero(table.guide != table.sentinel)[[0, 5, -1]]
    us = [int(c) << int(table.shift) for c in pure_cells]
    us.insert(1, u_odd)
    extra = digits(12, 1)
    rng = ScriptedSource(us + extra)
    x = nt.sample_table(table, len(us), rng)
    cdf = gaussian_cdf(s2, range(-40, 41))
    if which == 1:
        assert rng.requests == [4] and x.tolist() == [invert(cdf, u, 64) for u in us]
    else:
        assert rng.requests == [4, 1]
        assert x.tolist() == [invert(cdf, (u << 64) | extra[0], 128) if u == u_odd else invert(cdf, u, 64) for u in us]


def test_sample_table_in_several_chunks_is_one_stream() -> None:
    """More than one chunk: the outputs are those of one stream of U's, decided by the table's rule (the
    production table needs no refinement at this size: probability ~2^-49 per sample)."""
    table = nt.build_table(Fraction(5))
    n = 2 * nt._CHUNK + 123
    x = nt.sample_table(table, n, seeded_random_source(13))
    u = seeded_random_source(13).uniform_uint64(n)
    i = np.searchsorted(table.high_m1, u, side="left")
    assert np.all(u < table.low[np.minimum(i, table.low.size - 1)])
    assert np.array_equal(x, i - (table.kmax + 1))
    assert nt.sample_table(table, 0, seeded_random_source(13)).size == 0


def test_sample_table_chunk_without_impure_samples() -> None:
    """A first chunk whose every U falls in a pure cell, then a second chunk: both are filled."""
    table = nt.build_table(Fraction(7, 3))
    pure = np.flatnonzero(table.guide != table.sentinel)
    cells = [int(c) for c in pure if table.guide[c] != 0][:5]
    us = [c << int(table.shift) for c in cells]
    n = nt._CHUNK + 3
    script = [us[i % len(us)] for i in range(n)]
    rng = ScriptedSource(script)
    x = nt.sample_table(table, n, rng)
    assert rng.requests == [nt._CHUNK, 3]
    expected = [int(table.guide[c]) for c in cells]
    assert x.tolist() == [expected[i % len(us)] for i in range(n)] and 0 not in expected


def test_resolve_impure_mixed_batch() -> None:
    """Branch 2 and branch 3 in one call, on a short table (kmax = 2 at 7/3: both tails reach refinement)."""
    s2 = Fraction(7, 3)
    table = nt.build_table(s2, kmax=2)
    t = table.kmax + 1
    us = [0, int(table.low[t]) - 1, int(table.low[t]), int(table.high_m1[t]) + 1, MASK, int(table.low[0]) - 1]
    refined = [i for i, u in enumerate(us) if not decided_at_64_bits(table, u)]
    assert refined == [0, 2, 4, 5]
    extra = digits(14, len(refined))
    rng = ScriptedSource(extra)
    x = nt.resolve_impure(table, np.array(us, dtype=np.uint64), rng)
    assert rng.requests == [len(refined)] and x.dtype == np.int64
    cdf = gaussian_cdf(s2, range(-40, 41))
    assert x.tolist() == expected_by_inversion(us, refined, extra, cdf)


# ---- refinement -----------------------------------------------------------------------------------------


def undecided_at(prec: int, enc: CdfEnclosure | LaplaceCdf, k: int) -> int:
    """A prec-bit value inside the enclosure of F(k) (so ``locate`` cannot decide it at prec bits)."""
    v = enc.lo(k)
    assert enc.locate(v, prec) is None
    return v


@pytest.mark.parametrize("law", ["gaussian", "laplace"])
def test_refine_over_three_rounds(law: str, fresh_caches: None) -> None:
    """U* chosen inside the 128- and 192-bit enclosures of boundaries: rounds 1 and 2 leave them undecided, so
    they take digits 1, 2 and 3; others finish earlier.  Each round draws one digit per undecided sample."""
    param = Fraction(7, 3)
    cdf = gaussian_cdf(param, range(-60, 61)) if law == "gaussian" else laplace_cdf(param, range(-400, 401))
    enc = (lambda p: cdf_enclosure(param, p)) if law == "gaussian" else (lambda p: LaplaceCdf(param, p))
    e128, e192 = enc(128), enc(192)
    v2 = undecided_at(128, e128, 1)  # undecided after round 1
    v3 = undecided_at(192, e192, -2)  # undecided after rounds 1 and 2
    assert e128.locate(v3 >> 64, 128) is None
    r = digits(15, 12)
    us = [v2 >> 64, 5 << 60, v3 >> 128, (1 << 63) + 12345]
    script = [v2 & MASK, r[0], (v3 >> 64) & MASK, r[1],  # round 1: one digit for each of the four samples
              r[2], v3 & MASK,  # round 2: the first and third, still undecided at 128 bits
              r[3]]  # round 3: the third, still undecided at 192 bits
    rounds = [[0, 1, 2, 3], [0, 2], [2]]  # samples undecided in each round (the 2nd and 4th finish in round 1)
    rng = ScriptedSource(script)
    x = nt._refine(param, np.array(us, dtype=np.uint64), rng, law)
    assert rng.requests == [len(rd) for rd in rounds] and rng.left == 0 and x.dtype == np.int64
    expected = [invert(cdf, (v2 << 64) | r[2], 192), invert(cdf, (5 << 124) | r[0], 128),
                invert(cdf, (v3 << 64) | r[3], 256), invert(cdf, (((1 << 63) + 12345) << 64) | r[1], 128)]
    assert x.tolist() == expected
    keys = set(nt._enclosures)
    if law == "gaussian":
        assert {(param, 128), (param, 192), (param, 256)} <= keys
    else:
        assert {("laplace", param, 128), ("laplace", param, 192), ("laplace", param, 256)} <= keys


def test_refine_beyond_the_table_on_both_sides(fresh_caches: None) -> None:
    s2 = Fraction(1, 2)
    cdf = gaussian_cdf(s2, range(-40, 41))
    r = digits(16, 2)
    rng = ScriptedSource([r[0] >> 20, MASK - (r[1] >> 20)])
    x = nt._refine(s2, np.array([0, MASK], dtype=np.uint64), rng)
    assert rng.requests == [2]
    assert x.tolist() == [invert(cdf, r[0] >> 20, 128), invert(cdf, (MASK << 64) | (MASK - (r[1] >> 20)), 128)]
    assert x[0] < -5 and x[1] > 5


def test_refine_gives_up_after_fifteen_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Useless enclosures never decide: 15 rounds of one digit each, then ArithmeticError naming the law."""
    def useless(sigma2: Fraction, prec: int, law: str = "gaussian") -> CdfEnclosure:
        return CdfEnclosure(sigma2, prec, [0, 0], [1 << prec, 1 << prec])

    monkeypatch.setattr(nt, "_enclosure", useless)
    rng = ScriptedSource(digits(17, 15))
    with pytest.raises(ArithmeticError, match="laplace"):
        nt._refine(Fraction(1), np.array([2**63], dtype=np.uint64), rng, "laplace")
    assert rng.requests == [1] * 15 and nt._MAX_ROUNDS == 15


def test_refine_refuses_a_source_returning_the_wrong_count(fresh_caches: None) -> None:
    rng = ScriptedSource(digits(18, 10), extra=1)
    with pytest.raises(ValueError):
        nt._refine(Fraction(7, 3), np.array([int(nt.build_table(Fraction(7, 3)).low[5])], dtype=np.uint64), rng)


# ---- the two LRU caches ---------------------------------------------------------------------------------


def test_enclosure_cache_keys_and_reuse(fresh_caches: None) -> None:
    a = nt._enclosure(Fraction(5), 128)
    assert nt._enclosure(Fraction(5), 128) is a and isinstance(a, CdfEnclosure) and a.prec == 128
    b = nt._enclosure(Fraction(5), 128, "laplace")
    assert isinstance(b, LaplaceCdf) and (b.scale, b.prec) == (Fraction(5), 128)
    c = nt._enclosure((Fraction(5), 3), 64, "laplace_difference")
    assert c.sigma2 == (Fraction(5), 3)
    assert list(nt._enclosures) == [(Fraction(5), 128), ("laplace", Fraction(5), 128),
                                    ("laplace_difference", (Fraction(5), 3), 64)]
    assert nt._enclosure(Fraction(5), 128, "laplace") is b
    assert list(nt._enclosures)[-1] == ("laplace", Fraction(5), 128)  # a hit moves to the end


def test_enclosure_cache_cap_is_inclusive_and_lru(monkeypatch: pytest.MonkeyPatch, fresh_caches: None) -> None:
    a, b, c = Fraction(5), Fraction(6), Fraction(11, 2)
    sizes = {s: cdf_enclosure(s, 128).nbytes for s in (a, b, c)}
    assert sizes[c] <= sizes[b]
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", sizes[a] + sizes[b])
    nt._enclosure(a, 128)
    nt._enclosure(b, 128)
    assert list(nt._enclosures) == [(a, 128), (b, 128)]  # exactly at the cap: both kept
    nt._enclosure(a, 128)  # a is now the most recent
    nt._enclosure(c, 128)
    assert list(nt._enclosures) == [(a, 128), (c, 128)]  # the least recently used (b) went
    assert sum(e.nbytes for e in nt._enclosures.values()) <= nt.ENCLOSURE_CACHE_BYTES
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", 10)  # bigger than the cap: used once, not kept
    nt.clear_caches()
    e = nt._enclosure(Fraction(5), 128)
    assert isinstance(e, CdfEnclosure) and len(nt._enclosures) == 0


def test_table_cache_cap_is_inclusive_and_lru(monkeypatch: pytest.MonkeyPatch, fresh_caches: None) -> None:
    s5, s6, s11 = Fraction(5), Fraction(6), Fraction(11, 2)
    sizes = {s: nt.build_table(s).nbytes for s in (s5, s6, s11)}
    assert sizes[s11] <= sizes[s6]
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", sizes[s5] + sizes[s6])
    a = nt.get_table(s5)
    assert nt.get_table(s5) is a and a.sigma2 == s5
    nt.get_table(s6)
    assert list(nt._tables) == [s5, s6]  # exactly at the cap: both kept
    nt.get_table(s5)
    nt.get_table(s11)
    assert list(nt._tables) == [s5, s11]  # the least recently used (6) went
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", 10)  # one table over the cap is still kept (the newest)
    nt.get_table(s6)
    assert list(nt._tables) == [s6]
    built: list[object] = []
    got = nt.cached_table(("other", 1), lambda key: built.append(key) or a)
    assert got is a and built == [("other", 1)] and list(nt._tables) == [("other", 1)]
