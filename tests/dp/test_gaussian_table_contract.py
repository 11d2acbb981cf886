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

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from censusdp.pipeline.dp import gaussian_table as nt
from censusdp.pipeline.dp.cdf import cdf_enclosure
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers.table_reference import (
    DPS,
    MASK,
    ScriptedSource,
    digits,
    gaussian_cdf,
    invert,
)

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
    assert (table.parameter, table.law, table.low.size, table.high_m1.size) == (s2, "gaussian", 2 * k + 2, 2 * k + 2)
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


def hand_table(kmax: int, law: str = "gaussian") -> nt.CdfTable:
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
    assert (table.parameter, table.kmax) == (Fraction(1), 1)
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


def boundary_us(table: nt.CdfTable) -> list[int]:
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


def decided_at_64_bits(table: nt.CdfTable, u: int) -> bool:
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
