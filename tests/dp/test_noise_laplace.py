"""Tests of the table sampler for the discrete Laplace (pipeline.dp.laplace_table) and its certified CDFs.

Goodness of fit of both paths at scales 1/20 .. 10^4 is in tests/dp/test_noise.py.  Here: the certified bounds
against mpmath at 100 digits; ``LaplaceCdf.locate`` deciding only when certain, from any starting hint; the
guides against the decision rule; every rare branch (undecided U over several refinement rounds, samples
beyond short tables, on the direct path and on both tables of the split path X = W A + D) forced on a large
share of samples and checked with the same goodness-of-fit tests and thresholds; wrong tables that must fail;
a two-sample test of the table path against the CKS20 path; dispatch and the shared cache cap.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from censusdp.pipeline.dp import gaussian_table as nt
from censusdp.pipeline.dp import laplace_table as nl
from censusdp.pipeline.dp import noise
from censusdp.pipeline.dp.cdf import CdfEnclosure, LaplaceCdf, laplace_difference_enclosure, laplace_g_bounds
from censusdp.pipeline.dp.noise import sample_discrete_laplace, sample_discrete_laplace_cks
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers import noise_laws as tn

N = tn.N
ALPHA = tn.ALPHA
N_FORCED = min(N, 200_000)  # forced-refinement runs: the refinement path is Python, ~10-50 us a sample


def exact_g(scale: Fraction, ms: list[int], dps: int = 100) -> list[mp.mpf]:
    """G(m) = q^m / (1 + q) with mpmath at ``dps`` digits."""
    with mp.workdps(dps + 10):
        q = mp.exp(-mp.mpf(scale.denominator) / scale.numerator)
        return [q**m / (1 + q) for m in ms]


def exact_difference_cdf(scale: Fraction, width: int, dps: int = 100) -> list[mp.mpf]:
    """F(k) of D = R1 - R2 for k = -W .. W-1, P(d) ~ q^|d| - q^(2W - |d|), by brute force at ``dps`` digits."""
    with mp.workdps(dps + 10):
        q = mp.exp(-mp.mpf(scale.denominator) / scale.numerator)
        w = [q ** abs(d) - q ** (2 * width - abs(d)) for d in range(-width + 1, width)]
        z = mp.fsum(w)
        out, acc = [mp.mpf(0)], mp.mpf(0)
        for x in w[:-1]:
            acc += x
            out.append(acc / z)
        return out + [mp.mpf(1)]


# ---- certified bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scale", ["1/20", "1/2", "7/3", "100", "1000003/7", "100000000000000000001/10000000000000000000"]
)
@pytest.mark.parametrize("prec", [128, 192])
def test_laplace_bounds_enclose_mpmath(scale: str, prec: int) -> None:
    b = Fraction(scale)
    ms = [1, 2, 3, 7, 50, 400]
    g_lo, g_hi = laplace_g_bounds(b, prec, max(ms))
    cdf = LaplaceCdf(b, prec)
    with mp.workdps(110):
        for m, g in zip(ms, exact_g(b, ms), strict=True):
            v = g * mp.mpf(2) ** prec
            assert g_lo[m - 1] <= v <= g_hi[m - 1], m
            assert g_hi[m - 1] - g_lo[m - 1] <= 4
            lo, hi = cdf.g(m)
            assert lo <= v <= hi and hi - lo <= 4, m
            assert cdf.lo(-m) == lo and cdf.hi(m - 1) == (1 << prec) - lo  # F(-m) = G(m), F(m-1) = 1 - G(m)


@pytest.mark.parametrize(("scale", "width"), [("7/3", 5), ("10000", 470), ("1000003/7", 60)])
@pytest.mark.parametrize("prec", [128, 256])
def test_difference_enclosure_encloses_mpmath(scale: str, width: int, prec: int) -> None:
    b = Fraction(scale)
    enc = laplace_difference_enclosure((b, width), prec)
    assert enc.jmax == width - 1 and enc.g_lo[-1] == enc.g_hi[-1] == 0  # G(W) = 0: the whole support
    ks = list(range(-width, width))
    step = max(1, len(ks) // 60)
    f = exact_difference_cdf(b, width)
    with mp.workdps(110):
        for t in [*range(0, len(ks), step), len(ks) - 1]:
            v = f[t] * mp.mpf(2) ** prec
            assert enc.lo(ks[t]) <= v <= enc.hi(ks[t]), ks[t]
            assert enc.hi(ks[t]) - enc.lo(ks[t]) <= 8


def test_laplace_locate_decides_only_when_certain(monkeypatch: pytest.MonkeyPatch) -> None:
    cdf = LaplaceCdf(Fraction(7, 3), 128)
    for k in (-40, -10, -1, 0, 1, 9, 40, 150):
        lo, hi = cdf.lo(k), cdf.hi(k)
        assert cdf.locate(lo - 1, 128) == k  # just below F(k), above F(k-1)
        assert cdf.locate(hi, 128) == k + 1
        assert cdf.locate(lo, 128) is None or lo == hi
        assert cdf.locate(lo >> 64, 64) is None
    assert cdf.locate(1 << 60, 128) < -100 and cdf.locate(2**128 - (1 << 60), 128) > 100  # beyond any table
    assert cdf.locate(0, 128) is None  # U* < 2^-128: F(k) for every k below is not certainly <= U*
    values = [int(v) for v in seeded_random_source(40).uniform_uint64(200)]
    expected = [cdf.locate(v, 64) for v in values]
    for bad in (-(10**6), 0, 10**6):  # any starting point gives the same answers
        monkeypatch.setattr(LaplaceCdf, "_hint", lambda self, value, bits, bad=bad: bad)
        assert [cdf.locate(v, 64) for v in values] == expected
    with pytest.raises(ValueError):
        cdf.locate(0, 129)


# ---- tables --------------------------------------------------------------------------------------------


def _direct(table: nt.CdfTable, u: np.ndarray) -> np.ndarray:
    i = np.searchsorted(table.high_m1, u, side="left")
    j = np.searchsorted(table.low, u, side="right")
    ok = (i == j) & (i > 0) & (i < table.low.size)
    return np.where(ok, i - (table.kmax + 1), table.sentinel)


@pytest.mark.parametrize(
    "table",
    [
        lambda: nl.build_laplace_table(Fraction(7, 3)),
        lambda: nl.build_laplace_table(Fraction(100), widen=2**50),
        lambda: nl.build_laplace_table(Fraction(1, 20)),
        lambda: nl.build_difference_table(Fraction(10000), 470),
    ],
)
def test_guides_agree_with_the_decision_rule(table) -> None:
    table = table()
    cells = np.arange(table.guide.size, dtype=np.uint64)
    shift = table.shift
    starts = cells << shift
    inside = seeded_random_source(41).uniform_uint64(cells.size) >> (np.uint64(64) - shift)
    pure = table.guide != table.sentinel
    for u in (starts, starts + (np.uint64(1) << shift) - np.uint64(1), starts + inside):
        assert np.array_equal(_direct(table, u)[pure], table.guide[pure])


def test_default_table_sizes_and_bounds() -> None:
    """Direct tables cover all but <= 2^-31 of the mass; F(k) 2^64 in [L, H], H - L <= 2; sizes stay small."""
    for scale in ("1/20", "7/3", "256"):
        b = Fraction(scale)
        table = nl.build_laplace_table(b)
        k = table.kmax
        g = exact_g(b, [k + 1, 1], dps=40)
        assert g[0] <= 2**-32  # G(K + 1): each tail
        ms = list(range(k + 1, 0, -1))  # boundaries F(-K-1) .. F(-1) = G(K+1) .. G(1)
        with mp.workdps(50):
            for t, gm in enumerate(exact_g(b, ms, dps=40)):
                assert int(table.low[t]) <= gm * 2**64 <= int(table.high_m1[t]) + 1
                assert int(table.high_m1[t]) + 1 - int(table.low[t]) <= 2
    assert nl.get_laplace_table(nl.DIRECT_MAX_SCALE).nbytes <= 2 << 20  # ~1.2 MB: 11k boundaries, 1 MB guide
    big = noise.LAPLACE_TABLE_MAX_SCALE
    w = nl.split_width(big)
    assert nl.get_laplace_table(big / w).nbytes + nl.get_difference_table(big, w).nbytes <= 3 << 20  # ~2.4 MB


def test_laplace_tables_share_the_gaussian_lru(monkeypatch: pytest.MonkeyPatch) -> None:
    """One LRU, one byte cap: a Laplace table evicts the least recently used Gaussian one (sizes ~9-18 KB)."""
    nt.clear_caches()
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", 40_000)
    nt.get_table(Fraction(5))
    sample_discrete_laplace(Fraction(7, 3), 10, rng=seeded_random_source(42))
    assert Fraction(5) in nt._tables and ("laplace", Fraction(7, 3)) in nt._tables
    sample_discrete_laplace(2, 10, rng=seeded_random_source(42))
    assert Fraction(5) not in nt._tables and ("laplace", Fraction(2)) in nt._tables
    assert sum(t.nbytes for t in nt._tables.values()) <= 40_000
    nt.clear_caches()


def test_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above LAPLACE_TABLE_MAX_SCALE the production sampler is the CKS path, draw for draw; below, not."""
    monkeypatch.setattr(noise, "LAPLACE_TABLE_MAX_SCALE", Fraction(4))
    for scale, same in (("5", True), ("4", False)):
        x = sample_discrete_laplace(scale, 1000, rng=seeded_random_source(43))
        assert np.array_equal(x, sample_discrete_laplace_cks(scale, 1000, rng=seeded_random_source(43))) == same
    monkeypatch.setattr(nl, "DIRECT_MAX_SCALE", Fraction(2))  # the split path at small scale, exactly too
    y = sample_discrete_laplace("7/3", 1000, rng=seeded_random_source(44))
    assert nl.split_width(Fraction(7, 3)) == 7 and np.abs(y).max() > 7  # W A + D reaches past one block


# ---- forced rare branches: the law must not change -----------------------------------------------------


class _WideLaplaceCdf(LaplaceCdf):
    def __init__(self, scale: Fraction, prec: int, delta: int) -> None:
        super().__init__(scale, prec)
        self._delta = delta

    def g(self, m: int) -> tuple[int, int]:
        lo, hi = super().g(m)
        return max(lo - self._delta, 0), min(hi + self._delta, 1 << self.prec)


def _widened_enclosures(monkeypatch: pytest.MonkeyPatch, first_width_bits: int) -> list[tuple[str, int]]:
    """Refinement round r (precision 64(r+1)) gets bounds 2^-(first_width_bits + 3(r-1)) wide, for both laws:
    still valid, but each round leaves ~1/8 of its samples undecided, so later rounds run too."""
    real, calls = nt._enclosure, []
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", 64 << 20)

    def widened(param, prec: int, law: str = "gaussian"):
        r = prec // 64 - 1
        calls.append((law, r))
        delta, full = 1 << max(prec - first_width_bits - 3 * (r - 1), 0), 1 << prec
        if law == "laplace":
            return _WideLaplaceCdf(param, prec, delta)
        enc = real(param, prec, law)
        lows, highs = [max(g - delta, 0) for g in enc.g_lo], [min(g + delta, full) for g in enc.g_hi]
        return CdfEnclosure(param, prec, lows, highs)

    monkeypatch.setattr(nt, "_enclosure", widened)
    return calls


def _split_tables(scale: Fraction, **kw) -> tuple[int, nt.CdfTable, nt.CdfTable]:
    w = nl.split_width(scale)
    a_kw = {k: v for k, v in kw.items() if k in ("widen", "kmax")}
    d_kw = {k: v for k, v in kw.items() if k == "widen"}
    return w, nl.build_laplace_table(scale / w, **a_kw), nl.build_difference_table(scale, w, **d_kw)


def _assert_fits(x: np.ndarray, scale: str) -> None:
    p_chi2, p_g = tn.gof_pvalues(x, tn.laplace_law(scale), tn.laplace_width(scale))
    assert p_chi2 > ALPHA and p_g > ALPHA, (p_chi2, p_g)


@pytest.mark.slow
def test_undecided_samples_refined_over_many_rounds_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct table at 7/3 and both split tables at 10^4, widened so that ~2-4% of U are undecided."""
    direct = nl.build_laplace_table(Fraction(7, 3), widen=1 << 53)
    w, a_table, d_table = _split_tables(Fraction(10000), widen=1 << 50)
    calls = _widened_enclosures(monkeypatch, 64 - 53 + 3)
    x = nt.sample_table(direct, N_FORCED, seeded_random_source(45))
    assert max(r for law, r in calls if law == "laplace") >= 4
    _assert_fits(x, "7/3")
    calls.clear()
    y = nl.sample_split(Fraction(10000), w, N_FORCED, seeded_random_source(46), tables=(a_table, d_table))
    assert {law for law, r in calls if r >= 3} == {"laplace", "laplace_difference"}
    _assert_fits(y, "10000")


@pytest.mark.slow
def test_samples_beyond_short_tables_are_exact() -> None:
    """kmax = 6 at 7/3 sends ~6% of samples (|X| >= 7, both tails) through refinement; A's table at 10^4 (scale
    10^4 / 470) cut at kmax = 75 (of ~470) sends ~3% of A there."""
    table = nl.build_laplace_table(Fraction(7, 3), kmax=6)
    x = nt.sample_table(table, N_FORCED, seeded_random_source(47))
    assert (x < -7).any() and (x > 7).any()
    _assert_fits(x, "7/3")
    w, a_table, d_table = _split_tables(Fraction(10000), kmax=75)
    y = nl.sample_split(Fraction(10000), w, N_FORCED, seeded_random_source(48), tables=(a_table, d_table))
    assert (y < -77 * w).any() and (y > 77 * w).any()
    _assert_fits(y, "10000")


def _moved(table: nt.CdfTable, t: int, mass: float) -> nt.CdfTable:
    low, high_m1 = table.low.copy(), table.high_m1.copy()
    low[t] += np.uint64(int(2**64 * mass))
    high_m1[t] += np.uint64(int(2**64 * mass))
    return nt.table_from_bounds(table.parameter, table.kmax, low, high_m1, law=table.law)


@pytest.mark.slow
def test_power_wrong_tables_fail() -> None:
    """F(0) moved up by 1% of the mass in the direct table at 7/3, and by 0.1% in D's table at 10^4 (P(D = 0) is
    ~0.2%), must fail: the first on the usual bins, the second on X mod W = D mod W, whose exact law is folded
    from the exact PMF."""
    table = nl.build_laplace_table(Fraction(7, 3))
    x = nt.sample_table(_moved(table, table.kmax + 1, 0.01), N, seeded_random_source(49))
    p_chi2, p_g = tn.gof_pvalues(x, tn.laplace_law("7/3"))
    assert p_chi2 < ALPHA and p_g < ALPHA, (p_chi2, p_g)
    w, a_table, d_table = _split_tables(Fraction(10000))
    wrong = (a_table, _moved(d_table, d_table.kmax + 1, 0.001))
    y = nl.sample_split(Fraction(10000), w, N, seeded_random_source(50), tables=wrong)
    law = tn.laplace_law("10000")
    obs = np.bincount(y % w, minlength=w)
    exp = np.bincount(np.arange(law.lo, law.lo + law.pmf.size) % w, weights=law.pmf * N, minlength=w)
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    assert p < ALPHA, p


@pytest.mark.slow
@pytest.mark.parametrize(("scale", "width"), [("7/3", 1), ("10000", 200)])
def test_table_path_homogeneous_with_cks_path(scale: str, width: int) -> None:
    """Chi-square homogeneity of the two exact samplers (bins fixed from the exact law, each expecting >= 5)."""
    n = min(N, 500_000)
    x = tn.draws("laplace", scale, n, 51)
    y = tn.draws("laplace_cks", scale, n, 52)
    law = tn.laplace_law(scale)
    a, b = tn.bins(law, n * width)
    b = a + (b - a) // width * width
    table = np.array([tn.binned_counts(x, a, b, width), tn.binned_counts(y, a, b, width)])
    table = table[:, table.sum(axis=0) > 0]
    p = stats.chi2_contingency(table, correction=False).pvalue
    assert p > ALPHA, p


@pytest.mark.parametrize("scale", [Fraction(1, 10**6), Fraction(1, 10**30)])
@pytest.mark.parametrize("kind", ["laplace", "laplace_cks"])
def test_tiny_scale_is_all_zeros(kind: str, scale: Fraction) -> None:
    """P(x != 0) = 2q / (1 + q) < 1e-400000: q = exp(-10^6) is certified below 2^-200 (a two-boundary table)."""
    assert not tn.SAMPLERS[kind](scale, 10_000, rng=seeded_random_source(53)).any()
