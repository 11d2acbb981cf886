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

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import mpmath as mp
import pytest

from pipeline.dp import cdf as nc
from pipeline.dp.cdf import CdfEnclosure, LaplaceCdf
from pipeline.dp.random_source import seeded_random_source

DPS = 110  # mpmath digits: 365 bits, far beyond the 128 + 64 bits any bound here carries


def _mpq(x: Fraction | int) -> mp.mpf:
    x = Fraction(x)
    return mp.mpf(x.numerator) / x.denominator


def gaussian_weights(sigma2: Fraction, count: int) -> list[mp.mpf]:
    """w_j = exp(-j^2 / (2 sigma2)), j = 0 .. count-1 (caller holds the working precision)."""
    s2 = _mpq(sigma2)
    return [mp.exp(-mp.mpf(j * j) / (2 * s2)) for j in range(count)]


@functools.cache
def _gaussian_tails(sigma2: Fraction) -> tuple[list[mp.mpf], mp.mpf]:
    """(tail, Z): tail[m] = sum_{j >= m} w_j up to where terms are below 1e-(DPS+20) of the total."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        cut = int(mp.ceil(mp.sqrt(2 * s2 * (DPS + 30) * mp.log(10)))) + 2
        w = gaussian_weights(sigma2, cut + 1)
        tail = [mp.mpf(0)] * (cut + 2)
        for m in range(cut, -1, -1):
            tail[m] = tail[m + 1] + w[m]
        return tail, 2 * tail[0] - w[0]


def gaussian_cdf(sigma2: Fraction, ks: list[int]) -> list[mp.mpf]:
    """F(k) of N_Z(0, sigma2) at DPS digits."""
    tail, z = _gaussian_tails(sigma2)
    end = len(tail) - 1
    with mp.workdps(DPS + 10):
        return [tail[min(-k, end)] / z if k < 0 else 1 - tail[min(k + 1, end)] / z for k in ks]


def laplace_g(scale: Fraction, m: int) -> mp.mpf:
    """G(m) = P(X <= -m) = q^m / (1 + q), q = exp(-1/scale)."""
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        return q**m / (1 + q)


def laplace_cdf(scale: Fraction, k: int) -> mp.mpf:
    with mp.workdps(DPS + 10):
        return laplace_g(scale, -k) if k < 0 else 1 - laplace_g(scale, k + 1)


def difference_cdf(scale: Fraction, width: int) -> list[mp.mpf]:
    """F(k), k = -W .. W-1, of D = R1 - R2 with P(r) ~ q^r on 0 <= r < W: brute force over the W^2 pairs."""
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        pd = {d: mp.mpf(0) for d in range(-width + 1, width)}
        for r1 in range(width):
            for r2 in range(width):
                pd[r1 - r2] += q ** (r1 + r2)
        z = mp.fsum(pd.values())
        out, acc = [], mp.mpf(0)
        for k in range(-width, width - 1):
            acc += pd.get(k, mp.mpf(0))
            out.append(acc / z)
        return [*out, mp.mpf(1)]  # F(W - 1) = 1 exactly


def assert_encloses(lo: int, value: mp.mpf, hi: int, prec: int, what: object) -> None:
    """lo <= value 2^prec <= hi, up to mpmath's own rounding (10^-(DPS-10) relative: no bound is that close)."""
    with mp.workdps(DPS + 10):
        v, slack = value * mp.mpf(2) ** prec, mp.mpf(2) ** prec * mp.mpf(10) ** (10 - DPS)
        assert lo - slack <= v <= hi + slack, (what, lo, mp.nstr(v, 40), hi)


def widen_exp_neg(monkeypatch: pytest.MonkeyPatch, bits_above_prec: int, prec: int) -> None:
    """Make ``exp_neg`` return bounds 2^(bits_above_prec - prec) wider on each side (still valid enclosures).

    The 64 guard bits normally hide which side of an enclosure a bound was built from; widened inputs make
    a lower bound built from an upper one (or the reverse) show at ``prec`` bits.
    """
    real = nc.exp_neg

    def wide(num: int, den: int, w: int) -> tuple[int, int]:
        lo, hi = real(num, den, w)
        if num == 0:
            return lo, hi
        delta = 1 << (w - prec + bits_above_prec)
        return max(lo - delta, 0), min(hi + delta, 1 << w)

    monkeypatch.setattr(nc, "exp_neg", wide)


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


def brute_locate(lo: Callable[[int], int], hi: Callable[[int], int], ks: range, value: int, shift: int) -> int | None:
    """The docstring's rule read literally: X = k is certain iff F(k-1) <= U* < F(k) for every U* in the cell,
    i.e. hi(k-1) <= value 2^shift and (value + 1) 2^shift <= lo(k); k ranges over ``ks``."""
    below, above = value << shift, (value + 1) << shift
    found = [k for k in ks if hi(k - 1) <= below and above <= lo(k)]
    assert len(found) <= 1
    return found[0] if found else None


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


# ---- discrete Laplace ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qm", "q", "w", "prec"),
    [
        ((300, 310), (700, 760), 10, 6),
        ((0, 1024), (0, 1024), 10, 6),
        ((5, 9), (1000, 1024), 10, 12),
        ((2**69, 2**69 + 2**60), (2**68, 2**69), 70, 20),
        ((1024, 1024), (1, 3), 10, 8),
    ],
)
def test_laplace_g_is_the_outward_rounded_corner(qm: tuple[int, int], q: tuple[int, int], w: int, prec: int) -> None:
    """G(m) 2^prec = q^m 2^prec / (1 + q) is increasing in q^m and decreasing in q: the lower bound takes
    (low q^m, high q), the upper (high q^m, low q), each rounded outward, the upper capped at 2^prec."""
    lo, hi = nc._laplace_g(qm, q, w, prec)
    one = 1 << w
    assert lo == math.floor(Fraction(qm[0] << prec, one + q[1]))
    assert hi == min(math.ceil(Fraction(qm[1] << prec, one + q[0])), 1 << prec)


LAPLACE_SCALES = ["1/20", "1/2", "7/3", "100", "1000003/7"]


@pytest.mark.parametrize("scale", LAPLACE_SCALES)
@pytest.mark.parametrize("prec", [0, 1, 8, 64, 128])
def test_laplace_bounds_are_certified_at_every_precision(scale: str, prec: int) -> None:
    b = Fraction(scale)
    ms = [1, 2, 3, 5, 13, 40]
    g_lo, g_hi = nc.laplace_g_bounds(b, prec, 40)
    assert len(g_lo) == len(g_hi) == 40
    cdf = nc.laplace_cdf(b, prec)
    assert (cdf.scale, cdf.prec) == (b, prec)
    for m in ms:
        g = laplace_g(b, m)
        assert_encloses(g_lo[m - 1], g, g_hi[m - 1], prec, m)
        assert g_hi[m - 1] - g_lo[m - 1] <= 4
        lo, hi = cdf.g(m)
        assert_encloses(lo, g, hi, prec, m)
        assert hi - lo <= 4
    for k in (-40, -7, -2, -1, 0, 1, 2, 7, 40):
        assert_encloses(cdf.lo(k), laplace_cdf(b, k), cdf.hi(k), prec, k)


@pytest.mark.parametrize("scale", ["1/20", "7/3", "100"])
def test_laplace_bounds_round_outward_from_wide_exp_bounds(scale: str, monkeypatch: pytest.MonkeyPatch) -> None:
    b, prec = Fraction(scale), 64
    widen_exp_neg(monkeypatch, 4, prec)
    g_lo, g_hi = nc.laplace_g_bounds(b, prec, 30)
    cdf = LaplaceCdf(b, prec)
    for m in range(1, 31):
        g = laplace_g(b, m)
        assert_encloses(g_lo[m - 1], g, g_hi[m - 1], prec, m)
        assert_encloses(*cdf.g(m)[:1], g, cdf.g(m)[1], prec, m)
    for k in range(-30, 30):
        assert_encloses(cdf.lo(k), laplace_cdf(b, k), cdf.hi(k), prec, k)


@pytest.mark.parametrize("widen", [False, True])
def test_laplace_cdf_lo_hi_follow_the_closed_form(widen: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """F(k) = G(-k) for k < 0 and F(k) = 1 - G(k + 1) for k >= 0, read off the same G bounds (also when the
    exp bounds are wide, where a different but valid formula would give different numbers)."""
    prec = 64
    if widen:
        widen_exp_neg(monkeypatch, 20, prec)
    cdf = LaplaceCdf(Fraction(7, 3), prec)
    full = 1 << prec
    for k in range(-6, 6):
        if k < 0:
            assert (cdf.lo(k), cdf.hi(k)) == cdf.g(-k)
        else:
            assert (cdf.lo(k), cdf.hi(k)) == (full - cdf.g(k + 1)[1], full - cdf.g(k + 1)[0])


def test_laplace_cdf_memo_is_used_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds are memoised (each G(m) costs one exp_neg) and the memo never holds more than _MEMO_MAX."""
    calls: list[int] = []
    real = nc.exp_neg

    def counting(num: int, den: int, w: int) -> tuple[int, int]:
        calls.append(num)
        return real(num, den, w)

    monkeypatch.setattr(nc, "exp_neg", counting)
    cdf = LaplaceCdf(Fraction(5, 2), 64)
    cdf._MEMO_MAX = 8  # type: ignore[misc]  (the class cap, shrunk for this instance)
    calls.clear()
    first = cdf.g(3)
    assert cdf.g(3) == first and len(calls) == 1 and 3 in cdf._memo
    for m in range(1, 30):
        cdf.g(m)
        assert len(cdf._memo) <= 8
    assert cdf.g(29) == cdf._memo[29]
    assert len(LaplaceCdf(Fraction(5, 2), 64)._memo) == 0 and LaplaceCdf._MEMO_MAX == 4096


def random_values(bits: int, seed: int, n: int) -> list[int]:
    """n uniform values of ``bits`` <= 128 bits (the top bits of 128-bit draws)."""
    heads, tails = seeded_random_source(seed).uniform_uint64(n), seeded_random_source(seed + 1000).uniform_uint64(n)
    return [((int(h) << 64) | int(t)) >> (128 - bits) for h, t in zip(heads, tails, strict=True)]


def edge_values(cdf: LaplaceCdf, bits: int, ks: range) -> set[int]:
    """Values (``bits`` wide) on both sides of every boundary F(k), k in ks, and the ends."""
    shift = cdf.prec - bits
    values = {0, 1, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1}
    for k in ks:
        for edge in (cdf.lo(k), cdf.hi(k)):
            values |= {max((edge >> shift) + d, 0) for d in (-1, 0, 1)} - {1 << bits}
    return values


def laplace_values(cdf: LaplaceCdf, bits: int, ks: range, seed: int) -> list[int]:
    return sorted(edge_values(cdf, bits, ks) | set(random_values(bits, seed, 200)))


@pytest.mark.parametrize(("scale", "prec", "bits"), [("7/3", 128, 64), ("7/3", 64, 64), ("1/2", 128, 128)])
@pytest.mark.parametrize("hint", [None, -(10**6), -37, 0, 3, 10**6])
def test_laplace_locate_matches_the_rule_from_any_hint(
    scale: str, prec: int, bits: int, hint: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer never depends on where the search starts (the float hint only saves steps)."""
    cdf = LaplaceCdf(Fraction(scale), prec)
    reach = int(prec * 0.7 * Fraction(scale)) + 10  # F(k) within 2^-prec of 0 or 1 beyond this
    ks = range(-reach, reach + 1)
    values = laplace_values(cdf, bits, range(-12, 12), 8)
    expected = [brute_locate(cdf.lo, cdf.hi, ks, v, prec - bits) for v in values]
    if hint is not None:
        monkeypatch.setattr(LaplaceCdf, "_hint", lambda self, value, bits: hint)
    assert [cdf.locate(v, bits) for v in values] == expected


@pytest.mark.parametrize("scale", ["1/20", "1/2", "7/3", "100", "1000003/7"])
@pytest.mark.parametrize("bits", [64, 128])
def test_laplace_hint_is_the_answer_away_from_boundaries(scale: str, bits: int) -> None:
    """The float starting point saves ``locate`` its search: it is X itself for uniform values (their float level
    is within 1e-13 of an integer with probability ~1e-13 each), and within one of X next to a boundary."""
    cdf = LaplaceCdf(Fraction(scale), 192)
    checked = 0
    for v in random_values(bits, 9, 300):
        x = cdf.locate(v, bits)
        if x is not None:
            checked += 1
            assert cdf._hint(v, bits) == x, (v, x)
    assert checked > 250
    for v in edge_values(cdf, bits, range(-5, 5)):
        x = cdf.locate(v, bits)
        assert x is None or abs(cdf._hint(v, bits) - x) <= 1, (v, x, cdf._hint(v, bits))


# ---- the difference D = R1 - R2 of the split path -----------------------------------------------------


@pytest.mark.parametrize(("scale", "width"), [("7/3", 1), ("7/3", 2), ("1/20", 3), ("7/3", 5), ("100", 7)])
@pytest.mark.parametrize("prec", [0, 1, 8, 64, 128])
def test_difference_enclosure_is_certified(scale: str, width: int, prec: int) -> None:
    b = Fraction(scale)
    enc = nc.laplace_difference_enclosure((b, width), prec)
    assert enc.sigma2 == (b, width) and enc.prec == prec and enc.jmax == width - 1
    assert len(enc.g_lo) == len(enc.g_hi) == width  # G(m), m = 1 .. W
    assert enc.g_lo[-1] == enc.g_hi[-1] == 0  # G(W) = 0: the whole support
    f = difference_cdf(b, width)
    for t, k in enumerate(range(-width, width)):
        assert_encloses(enc.lo(k), f[t], enc.hi(k), prec, k)
        assert enc.hi(k) - enc.lo(k) <= 8, k


@pytest.mark.parametrize(("scale", "width"), [("7/3", 3), ("1/2", 4), ("100", 6)])
def test_difference_enclosure_rounds_outward_from_wide_exp_bounds(
    scale: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, prec = Fraction(scale), 64
    widen_exp_neg(monkeypatch, 4, prec)
    enc = nc.laplace_difference_enclosure((b, width), prec)
    f = difference_cdf(b, width)
    for t, k in enumerate(range(-width, width)):
        assert_encloses(enc.lo(k), f[t], enc.hi(k), prec, k)


# ---- few guard bits: every rounding step shows ----------------------------------------------------------


@pytest.mark.parametrize("prec", [16, 64])
def test_enclosures_stay_certain_with_few_guard_bits(prec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Certainty rests on outward rounding alone, not on the 64 guard bits (those keep bounds tight, and let the
    Gaussian tail bound reach 2^-prec): with 2 guard bits (Gaussian) or none (Laplace, whose bounds need no tail
    bound) a floor or ceiling taken on the wrong side, or a sum started above zero, shows at the output
    precision, and every bound must still hold."""
    monkeypatch.setattr(nc, "_GUARD", 2)
    for sigma2 in ("1/2", "1", "7/3", "50"):
        s2 = Fraction(sigma2)
        enc = nc.cdf_enclosure(s2, prec)
        ks = list(range(-enc.jmax - 1, enc.jmax + 1))
        for k, f in zip(ks, gaussian_cdf(s2, ks), strict=True):
            assert_encloses(enc.lo(k), f, enc.hi(k), prec, (sigma2, k))
    monkeypatch.setattr(nc, "_GUARD", 0)
    for scale in ("1/2", "7/3", "40"):
        b = Fraction(scale)
        g_lo, g_hi = nc.laplace_g_bounds(b, prec, 60)
        cdf = LaplaceCdf(b, prec)
        for m in range(1, 61):
            assert_encloses(g_lo[m - 1], laplace_g(b, m), g_hi[m - 1], prec, (scale, m))
            assert_encloses(cdf.g(m)[0], laplace_g(b, m), cdf.g(m)[1], prec, (scale, m))
    for scale, width in (("7/3", 4), ("40", 9), ("1/20", 9), ("100", 3)):
        b = Fraction(scale)
        enc = nc.laplace_difference_enclosure((b, width), prec)
        f = difference_cdf(b, width)
        for t, k in enumerate(range(-width, width)):
            assert_encloses(enc.lo(k), f[t], enc.hi(k), prec, (scale, k))
        assert enc.g_lo[-1] == enc.g_hi[-1] == 0
