"""Contract tests of the certified CDF arithmetic (pipeline.dp.cdf), continued: the discrete Laplace enclosures and
``LaplaceCdf.locate``, the Laplace difference of the split path, and every enclosure with few guard bits.  Exact
and deterministic, against mpmath at 110 digits (``tests.helpers.cdf_reference``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from censusdp.pipeline.dp import cdf as nc
from censusdp.pipeline.dp.cdf import LaplaceCdf
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers.cdf_reference import (
    assert_encloses,
    brute_locate,
    difference_cdf,
    gaussian_cdf,
    laplace_cdf,
    laplace_g,
    widen_exp_neg,
)

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
