"""Contract tests of the discrete Laplace table sampler (pipeline.dp.laplace_table): exact, no statistics.

The discrete Laplace with scale b is epsilon = Delta1 / b pure DP only if its law is exact, so each table entry
is checked against mpmath (L = floor(F 2^64), H = ceil(F 2^64)), the table lengths and the split width against
their documented rules in exact rational arithmetic, and the samplers' outputs against X = min{k : U* < F(k)}
(direct path) and X = W A + D (split path, ``sample_split``'s identity) for scripted uniforms.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from censusdp.pipeline.dp import gaussian_table as nt
from censusdp.pipeline.dp import laplace_table as nl
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers.table_reference import ScriptedSource, invert

DPS = 110
MASK = (1 << 64) - 1
LN2_UP = Fraction(6932, 10000)  # the documented bracket 0.6931 < ln 2 < 0.6932


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    nt.clear_caches()
    yield
    nt.clear_caches()


def _q(scale: Fraction) -> mp.mpf:
    return mp.exp(-mp.mpf(scale.denominator) / scale.numerator)


def laplace_cdf(scale: Fraction, ks: range) -> dict[int, mp.mpf]:
    """F(k) = q^-k / (1 + q) for k < 0, 1 - q^(k+1) / (1 + q) for k >= 0 (DPS digits)."""
    with mp.workdps(DPS + 10):
        q = _q(scale)
        return {k: q ** (-k) / (1 + q) if k < 0 else 1 - q ** (k + 1) / (1 + q) for k in ks}


def difference_cdf(scale: Fraction, width: int) -> dict[int, mp.mpf]:
    """F(k), k = -W .. W-1, of D = R1 - R2, P(r) ~ q^r on 0 <= r < W (brute force over the pairs)."""
    with mp.workdps(DPS + 10):
        q = _q(scale)
        pd = dict.fromkeys(range(-width + 1, width), mp.mpf(0))
        for r1 in range(width):
            for r2 in range(width):
                pd[r1 - r2] += q ** (r1 + r2)
        z = mp.fsum(pd.values())
        out, acc = {}, mp.mpf(0)
        for k in range(-width, width - 1):
            acc += pd.get(k, mp.mpf(0))
            out[k] = acc / z
        out[width - 1] = mp.mpf(1)
        return out


def laplace_floor_ceil(scale: Fraction, k: int) -> tuple[int, int]:
    """floor and ceil of F(k) 2^64, through the tail G = q^m / (1 + q) so that F near 1 loses no digit."""
    with mp.workdps(DPS + 10):
        q = _q(scale)
        if k < 0:
            return floor_ceil(q ** (-k) / (1 + q))
        lo, hi = floor_ceil(q ** (k + 1) / (1 + q))
        return (1 << 64) - hi, (1 << 64) - lo


def floor_ceil(f: mp.mpf) -> tuple[int, int]:
    with mp.workdps(DPS):
        v = f * mp.mpf(2) ** 64
        assert abs(v - mp.nint(v)) > mp.mpf(2) ** -50 or not 1 < v < 2**64 - 1  # no knife edge inside
        return int(mp.floor(v)), int(mp.ceil(v))


# ---- the documented sizes -----------------------------------------------------------------------------


SCALES_FOR_K = [
    Fraction(1, 20), Fraction(1, 1000), Fraction(1), Fraction(7, 3), Fraction(256), Fraction(10**6),
    Fraction(625, 13864),  # 32 * 0.6932 * b = 1 exactly: K + 1 >= 1, K = 0
    Fraction(625 * 1000001, 13864 * 1000000),  # 32 * 0.6932 * b = 1.000001: K = 1
    Fraction(625 * 3, 13864) - Fraction(1, 10**9),  # just below 3: K = 2
]


@pytest.mark.parametrize("scale", SCALES_FOR_K)
def test_default_kmax_is_the_documented_rule(scale: Fraction) -> None:
    """K = least K >= 0 with K + 1 >= 32 * 0.6932 * b; then G(K+1) <= q^(K+1) <= 2^-32 (mpmath)."""
    k = nl._default_kmax(scale)
    x = nl.TAIL_BITS * LN2_UP * scale
    assert k == max(math.ceil(x) - 1, 0) and k + 1 >= x and (k == 0 or k < x)
    if scale <= 10**6:
        with mp.workdps(50):
            assert _q(scale) ** (k + 1) <= mp.mpf(2) ** -32


SCALES_FOR_W = [
    Fraction(257), Fraction(10**4), Fraction(1), Fraction(1, 10), Fraction(1, 100),
    Fraction(9999 * 10000, 100 * 221824),  # 32 * 0.6932 * b = 99.99: W = isqrt(99) = 9
    Fraction(100005 * 10000, 1000 * 221824),  # 100.005: W = 10
]


@pytest.mark.parametrize("scale", SCALES_FOR_W)
def test_split_width_is_the_documented_rule(scale: Fraction) -> None:
    """W = max(isqrt(floor(32 * 0.6932 * b)), 2)."""
    w = nl.split_width(scale)
    assert w == max(math.isqrt(math.floor(nl.TAIL_BITS * LN2_UP * scale)), 2)
    assert w >= 2


def test_split_width_values() -> None:
    assert [nl.split_width(Fraction(b)) for b in ("1/10", "1", "257", "10000", "1000000")] == [2, 4, 75, 470, 4709]


# ---- table entries against mpmath ----------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["1/20", "1/2", "7/3", "40"])
@pytest.mark.parametrize("widen", [0, 3, 2**62])
def test_laplace_table_entries(scale: str, widen: int) -> None:
    b = Fraction(scale)
    table = nl.build_laplace_table(b, widen=widen) if widen else nl.build_laplace_table(b)
    k = table.kmax
    assert k == nl._default_kmax(b) and (table.parameter, table.law) == (b, "laplace")
    assert table.low.size == table.high_m1.size == 2 * k + 2
    for t, kk in enumerate(range(-k - 1, k + 1)):
        lo, hi = laplace_floor_ceil(b, kk)
        assert int(table.low[t]) == max(lo - widen, 0), kk
        assert int(table.high_m1[t]) + 1 == min(max(hi, 1) + widen, 1 << 64), kk


@pytest.mark.parametrize(("scale", "kmax"), [("7/3", 0), ("7/3", 5), ("1/20", 30)])
def test_laplace_table_with_given_length(scale: str, kmax: int) -> None:
    """``kmax`` sets the length (longer than the default too: the outer entries are then 0 / 1 and 2^64)."""
    b = Fraction(scale)
    table = nl.build_laplace_table(b, kmax=kmax)
    assert table.kmax == kmax and table.low.size == 2 * kmax + 2
    for t, kk in enumerate(range(-kmax - 1, kmax + 1)):
        lo, hi = laplace_floor_ceil(b, kk)
        assert (int(table.low[t]), int(table.high_m1[t]) + 1) == (lo, max(hi, 1)), kk


@pytest.mark.parametrize(("scale", "width"), [("7/3", 2), ("7/3", 5), ("1/20", 4), ("100", 9)])
@pytest.mark.parametrize("widen", [0, 3, 2**62])
def test_difference_table_entries(scale: str, width: int, widen: int, fresh_caches: None) -> None:
    """The whole support |d| < W; F(W-1) = 1 exactly, whose L is capped at 2^64 - 1."""
    b = Fraction(scale)
    table = nl.build_difference_table(b, width, widen=widen) if widen else nl.build_difference_table(b, width)
    assert (table.parameter, table.kmax, table.law) == ((b, width), width - 1, "laplace_difference")
    cdf = difference_cdf(b, width)
    for t, kk in enumerate(range(-width, width)):
        lo, hi = floor_ceil(cdf[kk])
        assert int(table.low[t]) == min(max(lo - widen, 0), MASK), kk
        assert int(table.high_m1[t]) + 1 == min(max(hi, 1) + widen, 1 << 64), kk
    assert int(table.low[-1]) == min((1 << 64) - widen, MASK)  # F(W-1) 2^64 = 2^64 is not a uint64


def test_cached_tables_have_their_own_keys(fresh_caches: None) -> None:
    a = nl.get_laplace_table(Fraction(7, 3))
    d = nl.get_difference_table(Fraction(7, 3), 4)
    assert list(nt._tables) == [("laplace", Fraction(7, 3)), ("laplace_difference", Fraction(7, 3), 4)]
    assert nl.get_laplace_table(Fraction(7, 3)) is a and nl.get_difference_table(Fraction(7, 3), 4) is d
    fresh_a, fresh_d = nl.build_laplace_table(Fraction(7, 3)), nl.build_difference_table(Fraction(7, 3), 4)
    for got, want in ((a, fresh_a), (d, fresh_d)):
        assert (got.parameter, got.kmax, got.law) == (want.parameter, want.kmax, want.law)
        assert np.array_equal(got.low, want.low) and np.array_equal(got.high_m1, want.high_m1)


# ---- sampling ------------------------------------------------------------------------------------------


def pure_cell_us(table: nt.CdfTable, cells: list[int]) -> list[int]:
    pure = np.flatnonzero(table.guide != table.sentinel)
    return [int(pure[c]) << int(table.shift) for c in cells]


def test_sample_split_is_w_a_plus_d_on_scripted_uniforms(fresh_caches: None) -> None:
    """Per chunk: n U's for A, then n for D; X = W A + D, each an inversion of its own U (refined when U sits in
    an enclosure: A's refinements draw first, then D's)."""
    b = Fraction(40)
    w = nl.split_width(b)
    a_table, d_table = nl.get_laplace_table(b / w), nl.get_difference_table(b, w)
    ua = pure_cell_us(a_table, [0, 7, -1]) + [int(a_table.low[a_table.kmax + 1])]  # the last needs refinement
    ud = [int(d_table.low[d_table.kmax])] + pure_cell_us(d_table, [3, 0, -1])  # the first needs refinement
    extra = [int(v) for v in seeded_random_source(21).uniform_uint64(2)]
    rng = ScriptedSource(ua + ud + extra)
    x = nl.sample_split(b, w, 4, rng)
    assert rng.requests == [8, 1, 1]
    fa, fd = laplace_cdf(b / w, range(-60, 61)), difference_cdf(b, w)
    a = [invert(fa, u, 64) for u in ua[:3]] + [invert(fa, (ua[3] << 64) | extra[0], 128)]
    d = [invert(fd, (ud[0] << 64) | extra[1], 128)] + [invert(fd, u, 64) for u in ud[1:]]
    assert x.tolist() == [w * ai + di for ai, di in zip(a, d, strict=True)]
    assert np.abs(x).max() > w


def test_sample_split_fast_path_over_two_chunks(fresh_caches: None) -> None:
    """Chunks whose U's all fall in pure cells take the fast path (W times A's guide value plus D's): a first
    full chunk of those, then a second short one, both filled; every value checked by inversion in mpmath."""
    b = Fraction(40)
    w = nl.split_width(b)
    a_table, d_table = nl.get_laplace_table(b / w), nl.get_difference_table(b, w)
    ua, ud = pure_cell_us(a_table, [0, 3, 11, -2, -1]), pure_cell_us(d_table, [-1, 6, 1, -3])
    n = nl._CHUNK + 2
    script: list[int] = []
    for start in (0, nl._CHUNK):
        m = min(nl._CHUNK, n - start)
        script += [ua[(start + i) % 5] for i in range(m)] + [ud[(start + i) % 4] for i in range(m)]
    rng = ScriptedSource(script)
    x = nl.sample_split(b, w, n, rng)
    assert rng.requests == [2 * nl._CHUNK, 4]
    fa, fd = laplace_cdf(b / w, range(-60, 61)), difference_cdf(b, w)
    a, d = [invert(fa, u, 64) for u in ua], [invert(fd, u, 64) for u in ud]
    assert min(d) < 0 < max(d) and min(a) < 0 < max(a)
    assert x.tolist() == [w * a[i % 5] + d[i % 4] for i in range(n)]


@pytest.mark.parametrize("bad", ["a", "d"])
def test_sample_split_with_impure_samples_on_one_side_only(bad: str, fresh_caches: None) -> None:
    """One sample whose U of A (or of D only) needs refinement: it is refined, the others keep their guide value."""
    b = Fraction(40)
    w = nl.split_width(b)
    a_table, d_table = nl.get_laplace_table(b / w), nl.get_difference_table(b, w)
    ua = pure_cell_us(a_table, [2, 9])
    ud = pure_cell_us(d_table, [4, 1])
    if bad == "a":
        ua[1] = int(a_table.low[a_table.kmax + 3])
    else:
        ud[0] = int(d_table.low[d_table.kmax - 2])
    extra = [int(v) for v in seeded_random_source(24).uniform_uint64(1)]
    rng = ScriptedSource(ua + ud + extra)
    x = nl.sample_split(b, w, 2, rng)
    assert rng.requests == [4, 1]
    fa, fd = laplace_cdf(b / w, range(-60, 61)), difference_cdf(b, w)
    refined_a, refined_d = (1 if bad == "a" else None), (0 if bad == "d" else None)
    a = [invert(fa, (u << 64) | extra[0], 128) if i == refined_a else invert(fa, u, 64) for i, u in enumerate(ua)]
    d = [invert(fd, (u << 64) | extra[0], 128) if i == refined_d else invert(fd, u, 64) for i, u in enumerate(ud)]
    assert x.tolist() == [w * ai + di for ai, di in zip(a, d, strict=True)]


def test_sample_split_matches_the_tables_over_several_chunks(fresh_caches: None) -> None:
    """Default tables (those of scale b / W and (b, W)); chunk by chunk, A's U's come first: a reference built
    from the same stream with the tables' decision rule (no U of this seed needs refinement)."""
    b = Fraction(10**4)
    w = nl.split_width(b)
    n = 2 * nl._CHUNK + 77
    x = nl.sample_split(b, w, n, seeded_random_source(22))
    a_table, d_table = nl.get_laplace_table(b / w), nl.get_difference_table(b, w)
    stream = seeded_random_source(22)
    expected = []
    for start in range(0, n, nl._CHUNK):
        m = min(nl._CHUNK, n - start)
        u = stream.uniform_uint64(2 * m)
        parts = []
        for table, uu in ((a_table, u[:m]), (d_table, u[m:])):
            i = np.searchsorted(table.high_m1, uu, side="left")
            assert np.all((i > 0) & (i < table.low.size)) and np.all(uu < table.low[np.minimum(i, table.low.size - 1)])
            parts.append(i.astype(np.int64) - (table.kmax + 1))
        expected.append(w * parts[0] + parts[1])
    assert np.array_equal(x, np.concatenate(expected))
    assert nl.sample_split(b, w, 0, seeded_random_source(22)).size == 0


@pytest.mark.parametrize(("a_value", "overflows"), [(2, False), (-2, False), (3, True), (-3, True)])
def test_sample_split_refuses_draws_that_do_not_fit_int64(a_value: int, overflows: bool) -> None:
    """With W = 2^61 + 1, |A| <= 2 keeps W A + D inside int64 and |A| = 3 could not: OverflowError, never a
    wrapped value.  A comes from refinement beyond a one-boundary-pair table (tables are a test hook)."""
    scale_a = Fraction(7, 3)
    a_table = nl.build_laplace_table(scale_a, kmax=0)
    d_table = nl.build_difference_table(Fraction(7, 3), 2)
    width = (1 << 61) + 1
    fa = laplace_cdf(scale_a, range(-60, 61))
    with mp.workdps(DPS):  # a U* in the middle of [F(a-1), F(a)): decided at 128 bits
        mid = (fa[a_value - 1] + fa[a_value]) / 2 * mp.mpf(2) ** 128
        v = int(mid)
    assert invert(fa, v, 128) == a_value
    ud = pure_cell_us(d_table, [0])
    rng = ScriptedSource([v >> 64, *ud, v & MASK])
    if overflows:
        with pytest.raises(OverflowError):
            nl.sample_split(scale_a * width, width, 1, rng, tables=(a_table, d_table))
    else:
        x = nl.sample_split(scale_a * width, width, 1, rng, tables=(a_table, d_table))
        assert x.tolist() == [a_value * width + invert(difference_cdf(Fraction(7, 3), 2), ud[0], 64)]


def test_dispatch_at_the_direct_limit(fresh_caches: None) -> None:
    """b <= DIRECT_MAX_SCALE (256 included) inverts one table; above, X = W A + D; draw for draw."""
    assert nl.DIRECT_MAX_SCALE == 256
    n = 500
    b = nl.DIRECT_MAX_SCALE
    direct = nl.sample_laplace_table(b, n, seeded_random_source(23))
    assert np.array_equal(direct, nt.sample_table(nl.get_laplace_table(b), n, seeded_random_source(23)))
    above = b + 1
    split = nl.sample_laplace_table(above, n, seeded_random_source(23))
    w = nl.split_width(above)
    assert np.array_equal(split, nl.sample_split(above, w, n, seeded_random_source(23)))
    small = nl.sample_laplace_table(Fraction(7, 3), 7, ScriptedSource(pure_cell_us(nl.get_laplace_table(Fraction(7, 3)),
                                                                                     [0, 1, 2, 3, -3, -2, -1])))
    assert small.size == 7 and small[0] < 0 < small[-1]
