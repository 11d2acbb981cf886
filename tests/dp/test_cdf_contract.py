"""Contract tests of the certified CDF arithmetic (pipeline.dp.cdf), exact and deterministic.

Everything the exact samplers decide rests on integer enclosures lo <= F(k) 2^prec <= hi being *certain*
(CKS20's discrete Gaussian, whose privacy map is the discrete analogue of Thm 19.37(iii) of the seed chapter,
holds only for the exact law).  These tests pin that contract down at every level, against mpmath at
100+ digits as the independent computation:
- the primitives (ceiling division, exp series, enclosure product, exp(-x)) at small and large widths,
  including degenerate ones (0 bits, x = 0, x just above 0, x at the 0.7 w cut-off);
- the Gaussian, Laplace and Laplace-difference enclosures at 0 .. 128 bits, including J (the cut) exactly;
- outward rounding: fed deliberately *wide* (still valid) exp bounds, or computed with the guard bits cut to
  2 (or 0), each enclosure must stay valid, so a lower bound built from an upper one (or vice versa) is caught
  even though the 64 guard bits hide it normally;
- the inclusive cut rule for J, at a knife-edge sigma2 found by bisection;
- ``locate`` against a brute-force reading of its docstring, from any starting hint.
No statistics: every assertion is exact, so nothing here can fail by chance.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest

from censusdp.pipeline.dp import cdf as nc
from censusdp.pipeline.dp.cdf import CdfEnclosure, LaplaceCdf
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers.cdf_reference import (
    DPS,
    _mpq,
    assert_encloses,
    brute_locate,
    gaussian_cdf,
    widen_exp_neg,
)

# ---- primitives ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"), [(0, 1), (1, 1), (7, 2), (8, 2), (-7, 2), (1, 3), (2, 3), (5, 7), (2**70 + 1, 2**64), (2**70, 2**64)]
)
def test_ceil_div_is_the_exact_ceiling(a: int, b: int) -> None:
    assert nc._ceil_div(a, b) == math.ceil(Fraction(a, b))


EXP_SERIES_X = [(0, 1), (1, 1), (1, 2), (1, 3), (2, 3), (1, 1000), (999, 1000), (7, 9), (1, 2**40), (5, 6)]


@pytest.mark.parametrize("g", [0, 1, 2, 3, 5, 8, 33, 64, 100])
def test_exp_series_encloses_exp(g: int) -> None:
    """(lo, hi) encloses exp(x) 2^g for x in [0, 1]; the remainder bound keeps hi within a few units."""
    for num, den in EXP_SERIES_X:
        lo, hi = nc._exp_series(num, den, g)
        with mp.workdps(DPS):
            v = mp.exp(mp.mpf(num) / den) * mp.mpf(2) ** g
            assert lo <= v <= hi, (num, den, g, lo, hi)
            assert v - lo <= 2 * g + 8 and hi - v <= 2 * g + 8, (num, den, g)
        if num == 0:
            assert (lo, hi) == (1 << g, 1 << g)


@pytest.mark.parametrize(
    ("a", "b", "g"),
    [
        ((5, 7), (11, 13), 3),
        ((0, 1), (9, 9), 2),
        ((2**64 - 1, 2**64), (3 << 62, (3 << 62) + 5), 64),
        ((1, 1), (1, 1), 1),
    ],
)
def test_mul_rounds_the_product_outward(a: tuple[int, int], b: tuple[int, int], g: int) -> None:
    lo, hi = nc._mul(a, b, g)
    assert lo == math.floor(Fraction(a[0] * b[0], 1 << g))
    assert hi == math.ceil(Fraction(a[1] * b[1], 1 << g))


EXP_NEG_X = [
    (1, 1), (1, 2), (1, 3), (2, 3), (1, 1000), (999, 1000), (7, 9), (10, 1), (20, 1), (45, 1), (65, 1), (89, 1),
    (500, 7), (7, 1), (13, 2), (3, 1), (6, 1), (12345, 1000),
]


@pytest.mark.parametrize("w", [0, 1, 2, 5, 10, 64, 100, 128])
def test_exp_neg_encloses_and_is_tight(w: int) -> None:
    """0 <= lo <= exp(-x) 2^w <= hi <= 2^w with hi - lo <= 2, for x of every size relative to w."""
    cases = [*EXP_NEG_X, (1, 2 ** (w + 40)), (1, 2 ** (w + 20) + 1), (3, 2 ** (w + 35)), (2**w, 3)]
    cases += [(c * w, 100) for c in (60, 63, 65, 68, 69, 70, 71, 75, 79, 80, 85)]  # around the 0.7 w cut
    for num, den in cases:
        lo, hi = nc.exp_neg(num, den, w)
        with mp.workdps(DPS):
            v = mp.exp(-mp.mpf(num) / den) * mp.mpf(2) ** w
            assert 0 <= lo <= v <= hi <= 2**w, (num, den, w, lo, hi)
        assert hi - lo <= 2, (num, den, w)


@pytest.mark.parametrize("w", [0, 1, 7, 64, 192])
def test_exp_neg_exact_cases(w: int) -> None:
    """exp(0) = 1 exactly; x >= 0.7 w (so exp(-x) < 2^-w) gives (0, 1) exactly; both ends of the cut."""
    for den in (1, 3, 10**9):
        assert nc.exp_neg(0, den, w) == (1 << w, 1 << w)
    for num, den in ((7 * w + 10, 10), (7 * w, 10), (10 * w, 1), (2**80, 1)):
        if num == 0:
            continue
        assert nc.exp_neg(num, den, w) == (0, 1), (num, den)


# ---- discrete Gaussian --------------------------------------------------------------------------------


def gaussian_cut(sigma2: Fraction, prec: int) -> int:
    """J from its definition, in mpmath: the first j >= 0 with w_{j+1} / (1 - r_{j+1}) <= 2^-prec, where
    r_i = exp(-(2i+1)/(2 sigma2)) bounds the ratios beyond (asserts the rule is not on a knife edge)."""
    with mp.workdps(DPS):
        s2, target = _mpq(sigma2), mp.mpf(2) ** -prec

        def ratio(j: int) -> mp.mpf:  # the bound over the target: decreasing in j
            bound = mp.exp(-mp.mpf((j + 1) ** 2) / (2 * s2)) / (1 - mp.exp(-mp.mpf(2 * j + 3) / (2 * s2)))
            return bound / target

        lo, hi = -1, 1  # ratio(lo) > 1 (or lo = -1), ratio(hi) <= 1
        while ratio(hi) > 1:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ratio(mid) > 1 else (lo, mid)
        assert abs(ratio(hi) - 1) > mp.mpf(10) ** -12 and (hi == 0 or abs(ratio(hi - 1) - 1) > mp.mpf(10) ** -12)
        return hi


SIGMA2S = ["1/20", "1/2", "1", "7/3", "50", "1000003/7"]


@pytest.mark.parametrize("sigma2", SIGMA2S)
@pytest.mark.parametrize("prec", [0, 1, 8, 64, 128])
def test_cdf_enclosure_is_certified_at_every_precision(sigma2: str, prec: int) -> None:
    s2 = Fraction(sigma2)
    enc = nc.cdf_enclosure(s2, prec)
    assert enc.sigma2 == s2 and enc.prec == prec
    j = enc.jmax
    assert j == gaussian_cut(s2, prec) and len(enc.g_lo) == len(enc.g_hi) == j + 1
    assert enc.g_hi[-1] <= 1  # G(J+1) < 2^-prec
    step = max(1, j // 60)
    ks = sorted({*range(-j - 1, j + 1, step), -j - 1, -2, -1, 0, 1, j} & set(range(-j - 1, j + 1)))
    for k, f in zip(ks, gaussian_cdf(s2, ks), strict=True):
        assert_encloses(enc.lo(k), f, enc.hi(k), prec, k)
        assert enc.hi(k) - enc.lo(k) <= 4, k
    for g in (enc.g_lo, enc.g_hi):
        assert all(a >= b for a, b in zip(g[:-1], g[1:], strict=True))
        assert all(0 <= x <= 1 << prec for x in g)


def test_cdf_enclosure_cut_rule_is_inclusive() -> None:
    """J is the first j whose certified tail bound is <= 2^-prec (inclusive).  At 0 bits (w = 64) the first bound
    is ceil(c_hi 2^64 / (2^64 - r_hi)) with c = exp(-1/(2 sigma2)), r = c d, d = exp(-1/sigma2), which equals
    2^64 (the target) exactly when c_hi + r_hi = 2^64 (y + y^3 = 1: sigma2 ~ 1.31); bisection on sigma2 finds
    such a point of the very arithmetic ``cdf_enclosure`` uses, where J must be 0."""
    one = 1 << 64

    def first_bound_sum(s2: Fraction) -> int:
        c = nc.exp_neg(s2.denominator, 2 * s2.numerator, 64)[1]
        d = nc.exp_neg(s2.denominator, s2.numerator, 64)[1]
        return c + nc._ceil_div(c * d, one)

    a, b = Fraction(13, 10), Fraction(132, 100)
    assert first_bound_sum(a) < one < first_bound_sum(b)
    for _ in range(300):
        m = Fraction(round((a + b) / 2 * 2**200), 2**200)
        v = first_bound_sum(m)
        if v == one:
            break
        a, b = (m, b) if v < one else (a, m)
    else:
        pytest.fail("no sigma2 on the knife edge")
    assert nc.cdf_enclosure(m, 0).jmax == 0
    assert nc.cdf_enclosure(b, 0).jmax == 1  # just above the edge the bound exceeds 1


@pytest.mark.parametrize("sigma2", ["1/2", "7/3", "50"])
def test_cdf_enclosure_rounds_outward_from_wide_exp_bounds(sigma2: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """exp bounds 16 units of 2^-64 wide: every weight, ratio, sum and quotient must keep its side."""
    s2, prec = Fraction(sigma2), 64
    widen_exp_neg(monkeypatch, 4, prec)
    enc = nc.cdf_enclosure(s2, prec)
    ks = list(range(-enc.jmax - 1, enc.jmax + 1))
    for k, f in zip(ks, gaussian_cdf(s2, ks), strict=True):
        assert_encloses(enc.lo(k), f, enc.hi(k), prec, k)


def test_enclosures_stay_in_range_from_uninformative_lower_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """exp lower bounds of 0 (valid, useless): the upper bounds of G must still be capped at 2^prec."""
    real = nc.exp_neg
    monkeypatch.setattr(nc, "exp_neg", lambda num, den, w: (0, real(num, den, w)[1]))
    for prec in (8, 64):
        enc = nc.cdf_enclosure(Fraction(7, 3), prec)
        assert all(0 <= lo <= hi <= 1 << prec for lo, hi in zip(enc.g_lo, enc.g_hi, strict=True))
        assert enc.g_hi[0] == 1 << prec and enc.lo(0) == 0
        diff = nc.laplace_difference_enclosure((Fraction(100), 5), prec)  # q ~ 0.99: S_hi(1) > Z_lo here
        assert all(0 <= lo <= hi <= 1 << prec for lo, hi in zip(diff.g_lo, diff.g_hi, strict=True))
        assert diff.g_hi[0] == 1 << prec and diff.lo(0) == 0


# ---- CdfEnclosure: lo, hi, locate ----------------------------------------------------------------------

# a hand-made enclosure at 8 bits, J = 3, every bound distinct: F(-4..3) in [0,1], [10,12], [40,44], [100,104],
# [152,156], [212,216], [244,246], [255,256] (x 2^-8)
HAND = CdfEnclosure(Fraction(1), 8, [100, 40, 10, 0], [104, 44, 12, 1])
HAND_BOUNDS = [(0, 1), (10, 12), (40, 44), (100, 104), (152, 156), (212, 216), (244, 246), (255, 256)]


def test_cdf_enclosure_lo_hi_read_the_right_entries() -> None:
    assert HAND.jmax == 3
    assert [(HAND.lo(k), HAND.hi(k)) for k in range(-4, 4)] == HAND_BOUNDS


@pytest.mark.parametrize("bits", [8, 7, 5, 2, 0])
def test_locate_on_a_hand_made_enclosure_matches_the_rule(bits: int) -> None:
    ks = range(-3, 4)  # k - 1 >= -(J+1) and k <= J
    for value in range(1 << bits):
        assert HAND.locate(value, bits) == brute_locate(HAND.lo, HAND.hi, ks, value, 8 - bits), value


@pytest.mark.parametrize(("sigma2", "prec", "bits"), [("7/3", 64, 64), ("7/3", 128, 64), ("1/2", 128, 128)])
def test_locate_at_every_boundary_matches_the_rule(sigma2: str, prec: int, bits: int) -> None:
    enc = nc.cdf_enclosure(Fraction(sigma2), prec)
    j, shift = enc.jmax, prec - bits
    values = {0, 1, (1 << bits) - 1, (1 << bits) - 2, 1 << (bits - 1)}
    for k in range(-j - 1, j + 1):
        for edge in (enc.lo(k), enc.hi(k)):
            base = edge >> shift
            values |= {max(base + d, 0) for d in (-2, -1, 0, 1, 2)} - {1 << bits}
    values |= {int(v) >> (64 - bits) if bits < 64 else int(v) for v in seeded_random_source(7).uniform_uint64(300)}
    ks = range(-j, j + 1)
    for value in sorted(values):
        assert enc.locate(value, bits) == brute_locate(enc.lo, enc.hi, ks, value, shift), value


def test_locate_refuses_more_bits_than_the_precision() -> None:
    assert HAND.locate(250, 8) == 3 and HAND.locate(255, 8) is None  # bits == prec is allowed
    with pytest.raises(ValueError, match="bits"):
        HAND.locate(0, 9)
    with pytest.raises(ValueError, match="bits"):
        LaplaceCdf(Fraction(2), 64).locate(0, 65)
    assert LaplaceCdf(Fraction(2), 64).locate(1 << 63, 64) is not None
