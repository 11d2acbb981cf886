"""Tests of the table sampler (pipeline.dp.gaussian_table) and its certified CDF (pipeline.dp.cdf).

The enclosures are checked against mpmath at 100 digits; the guide table against the direct decision rule;
and every rare branch (undecided U, several refinement rounds, both tails beyond the table) is forced to run
on a large share of samples by deliberately wide or short tables, with the same goodness-of-fit tests and
thresholds as tests/dp/test_noise.py.  A table with one boundary moved by 1% of the mass must fail them.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest

from censusdp.pipeline.dp import gaussian_table as nt
from censusdp.pipeline.dp.cdf import CdfEnclosure, cdf_enclosure, exp_neg
from censusdp.pipeline.dp.noise import TABLE_MAX_SIGMA2, sample_discrete_gaussian
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers import noise_laws as tn

N = tn.N
ALPHA = tn.ALPHA


def exact_cdf(sigma2: Fraction, ks: list[int], dps: int = 100) -> list[mp.mpf]:
    """F(k) with mpmath at ``dps`` digits (sums cut where terms are < 1e-(dps+10) of the total)."""
    with mp.workdps(dps + 10):
        s2 = mp.mpf(sigma2.numerator) / sigma2.denominator
        cut = int(mp.ceil(mp.sqrt(2 * s2 * (dps + 20) * mp.log(10)))) + 2
        w = [mp.exp(-mp.mpf(j * j) / (2 * s2)) for j in range(cut + 1)]
        tail = [mp.mpf(0)] * (cut + 2)  # tail[m] = sum_{j >= m} w_j
        for m in range(cut, -1, -1):
            tail[m] = tail[m + 1] + w[m]
        z = 2 * tail[0] - w[0]
        return [tail[min(-k, cut + 1)] / z if k < 0 else 1 - tail[min(k + 1, cut + 1)] / z for k in ks]


# ---- certified arithmetic --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den"), [(0, 1), (1, 1), (1, 3), (7, 2000006), (1, 2 * 10**6), (10, 1), (20, 1), (500, 7), (89, 1)]
)
@pytest.mark.parametrize("w", [64, 128, 200])
def test_exp_neg_encloses_mpmath(num: int, den: int, w: int) -> None:
    lo, hi = exp_neg(num, den, w)
    with mp.workdps(120):
        v = mp.exp(-mp.mpf(num) / den) * mp.mpf(2) ** w
        assert 0 <= lo <= v <= hi <= 2**w
    assert hi - lo <= 2


SIGMA2_ENCLOSED = [
    "1/20",
    "1/2",
    "7/3",
    "1000003/7",
    "1000000",
    "1/1000000",
    "100000000000000000001/10000000000000000000",
]


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", SIGMA2_ENCLOSED)
@pytest.mark.parametrize("prec", [128, 192])
def test_cdf_enclosure_encloses_mpmath(sigma2: str, prec: int) -> None:
    s2 = Fraction(sigma2)
    enc = cdf_enclosure(s2, prec)
    j = enc.jmax
    assert enc.g_hi[-1] <= 1  # G(J+1) < 2^-prec: nothing of weight is beyond the range
    step = max(1, j // 300)
    ks = sorted({*range(-j - 1, j + 1, step), -j - 1, -1, 0, j})
    with mp.workdps(110):  # products and comparisons at full precision
        for k, f in zip(ks, exact_cdf(s2, ks), strict=True):
            assert enc.lo(k) <= f * mp.mpf(2) ** prec <= enc.hi(k), k
            assert enc.hi(k) - enc.lo(k) <= 4, k
    for g in (enc.g_lo, enc.g_hi):
        assert all(a >= b for a, b in zip(g[:-1], g[1:], strict=True))


def test_locate_decides_only_when_certain() -> None:
    enc = cdf_enclosure(Fraction(7, 3), 128)
    for k in (-10, -3, -1, 0, 1, 5, 10):
        lo, hi = enc.lo(k), enc.hi(k)
        assert enc.locate(lo - 1, 128) == k  # U* in [lo - 1, lo) / 2^128 < F(k), and above F(k-1)
        assert enc.locate(hi, 128) == k + 1  # U* >= hi >= F(k)
        assert enc.locate(lo, 128) is None or lo == hi  # the cell holding F(k): undecided
        assert enc.locate(lo >> 64, 64) is None  # 64 bits cannot separate U* from F(k)
    assert enc.locate(0, 128) is None  # U* may lie below F(-J-1): beyond the range
    assert enc.locate(2**128 - 1, 128) is None
    with pytest.raises(ValueError):
        enc.locate(0, 129)


# ---- tables --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", ["1/20", "1/2", "7/3", "500", "1000003/7", "1000000"])
def test_default_table_bounds_and_size(sigma2: str) -> None:
    s2 = Fraction(sigma2)
    table = nt.build_table(s2)  # its speed is a benchmark's business (benchmarks/noise.py), not a unit test's
    k = table.kmax
    ks = list(range(-k - 1, k + 1))
    f = exact_cdf(s2, ks, dps=40)
    low = [int(x) for x in table.low]
    high = [int(x) + 1 for x in table.high_m1]
    with mp.workdps(50):
        for t, fk in enumerate(f):
            assert low[t] <= fk * 2**64 <= high[t], ks[t]
            assert high[t] - low[t] <= 2
        assert f[0] * 2**64 <= 1 and (1 - f[-1]) * 2**64 <= 1  # tails beyond the table: <= 2^-63 together
    assert table.nbytes <= 3 << 20


def _direct(table: nt.CdfTable, u: np.ndarray) -> np.ndarray:
    """The decision rule itself: X if #{H <= U} == #{L <= U} =: i with 0 < i < 2K+2, else the sentinel."""
    i = np.searchsorted(table.high_m1, u, side="left")
    j = np.searchsorted(table.low, u, side="right")
    ok = (i == j) & (i > 0) & (i < table.low.size)
    return np.where(ok, i - (table.kmax + 1), table.sentinel)


@pytest.mark.parametrize(("sigma2", "widen"), [("7/3", 0), ("7/3", 2**55), ("1000003/7", 2**40), ("1/20", 0)])
def test_guide_agrees_with_the_decision_rule(sigma2: str, widen: int) -> None:
    table = nt.build_table(Fraction(sigma2), widen=widen)
    cells = np.arange(table.guide.size, dtype=np.uint64)
    shift = table.shift
    span = np.uint64(1) << shift
    starts = cells << shift
    inside = seeded_random_source(30).uniform_uint64(cells.size) >> (np.uint64(64) - shift)
    start_x, end_x, mid_x = (_direct(table, u) for u in (starts, starts + span - np.uint64(1), starts + inside))
    pure = table.guide != table.sentinel
    for x in (start_x, end_x, mid_x):
        assert np.array_equal(x[pure], table.guide[pure])
    # an impure cell is impure for a reason: its two ends differ, or one end is undecided or beyond the table
    assert np.all(((start_x != end_x) | (start_x == table.sentinel) | (end_x == table.sentinel))[~pure])
    assert (~pure).mean() < 0.05 or widen


def test_table_from_bounds_validates() -> None:
    table = nt.build_table(Fraction(5))
    with pytest.raises(ValueError):
        nt.table_from_bounds(table.parameter, table.kmax + 1, table.low, table.high_m1)
    with pytest.raises(ValueError):
        nt.table_from_bounds(table.parameter, table.kmax, table.low[::-1], table.high_m1)


def test_caches_are_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    nt.clear_caches()
    monkeypatch.setattr(nt, "TABLE_CACHE_BYTES", 100_000)
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", 50_000)
    for s2 in ("5", "7/3", "500", "50"):
        nt.get_table(Fraction(s2))
    assert sum(t.nbytes for t in nt._tables.values()) <= 100_000
    assert Fraction(50) in nt._tables and Fraction(5) not in nt._tables
    assert sum(e.nbytes for e in nt._enclosures.values()) <= 50_000
    assert nt.get_table(Fraction(50)) is nt.get_table(Fraction(50))
    nt.clear_caches()


def test_worst_case_cache_memory_is_under_64_mb() -> None:
    """Both LRU caps are strict once a single entry fits, and the largest table (sigma2 = 10^6) does."""
    largest = nt.build_table(TABLE_MAX_SIGMA2)
    assert largest.nbytes <= 5 << 19 <= nt.TABLE_CACHE_BYTES
    assert cdf_enclosure(TABLE_MAX_SIGMA2, 192).nbytes <= nt.ENCLOSURE_CACHE_BYTES
    assert nt.TABLE_CACHE_BYTES + nt.ENCLOSURE_CACHE_BYTES <= 64 << 20


# ---- forced rare branches: the law must not change -----------------------------------------------------


def _widened_enclosures(monkeypatch: pytest.MonkeyPatch, first_width_bits: int) -> list[int]:
    """Make refinement round r (precision 64(r+1)) use enclosures 2^-(first_width_bits + 3(r-1)) wide: still
    valid bounds, but each round leaves ~1/8 of the samples it sees undecided, so later rounds run too."""
    real, calls = nt._enclosure, []
    monkeypatch.setattr(nt, "ENCLOSURE_CACHE_BYTES", 64 << 20)

    def widened(sigma2: Fraction, prec: int) -> CdfEnclosure:
        enc, r = real(sigma2, prec), prec // 64 - 1
        calls.append(r)
        delta, full = 1 << max(prec - first_width_bits - 3 * (r - 1), 0), 1 << prec
        return CdfEnclosure(
            sigma2, prec, [max(g - delta, 0) for g in enc.g_lo], [min(g + delta, full) for g in enc.g_hi]
        )

    monkeypatch.setattr(nt, "_enclosure", widened)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize(("sigma2", "widen_bits"), [("7/3", 55), ("1000003/7", 46)])
def test_undecided_samples_refined_over_many_rounds_are_exact(
    sigma2: str, widen_bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s2 = Fraction(sigma2)
    table = nt.build_table(s2, widen=1 << widen_bits)  # ~3-5% of U are within a widened boundary
    calls = _widened_enclosures(monkeypatch, 64 - widen_bits + 3)
    x = nt.sample_table(table, N, seeded_random_source(31))
    assert max(calls) >= 4  # rounds 1..4 at least (each ~1/8 of the previous)
    p_chi2, p_g = tn.gof_pvalues(x, tn.gaussian_law(sigma2))
    assert p_chi2 > ALPHA and p_g > ALPHA, (p_chi2, p_g)


@pytest.mark.slow
@pytest.mark.parametrize(("sigma2", "kmax", "n"), [("7/3", 3, N), ("1/2", 0, min(N, 50_000))])
def test_samples_beyond_a_short_table_are_exact(sigma2: str, kmax: int, n: int) -> None:
    """kmax = 3 at 7/3 sends ~2% of samples (|X| >= 4, both tails) through refinement; kmax = 0, ~43%."""
    table = nt.build_table(Fraction(sigma2), kmax=kmax)
    assert table.kmax == kmax
    x = nt.sample_table(table, n, seeded_random_source(32))
    assert (x < -kmax - 1).any() and (x > kmax + 1).any()
    p_chi2, p_g = tn.gof_pvalues(x, tn.gaussian_law(sigma2))
    assert p_chi2 > ALPHA and p_g > ALPHA, (p_chi2, p_g)


@pytest.mark.slow
def test_power_table_with_one_boundary_moved_fails() -> None:
    """Moving F(0) up by 1% of the probability mass (P(0) +0.01, P(1) -0.01) must be caught."""
    table = nt.build_table(Fraction(7, 3))
    t = table.kmax + 1  # boundary index of F(0)
    low, high_m1 = table.low.copy(), table.high_m1.copy()
    low[t] += np.uint64(2**64 // 100)
    high_m1[t] += np.uint64(2**64 // 100)
    wrong = nt.table_from_bounds(table.parameter, table.kmax, low, high_m1)
    x = nt.sample_table(wrong, N, seeded_random_source(33))
    p_chi2, p_g = tn.gof_pvalues(x, tn.gaussian_law("7/3"))
    assert p_chi2 < ALPHA and p_g < ALPHA, (p_chi2, p_g)


def test_refinement_gives_up_only_on_useless_enclosures(monkeypatch: pytest.MonkeyPatch) -> None:
    def useless(sigma2: Fraction, prec: int) -> CdfEnclosure:
        return CdfEnclosure(sigma2, prec, [0, 0], [1 << prec, 1 << prec])

    monkeypatch.setattr(nt, "_enclosure", useless)
    with pytest.raises(ArithmeticError):
        nt._refine(Fraction(1), np.array([2**63], dtype=np.uint64), seeded_random_source(34))


@pytest.mark.parametrize("sigma2", tn.SIGMA2S)
def test_production_tables_need_no_refinement_in_practice(sigma2: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refinement has probability ~2^-49 per sample: 10^6 samples never need it (the fast paths are it)."""

    def fail(*args: object) -> np.ndarray:
        raise AssertionError("refinement ran")

    monkeypatch.setattr(nt, "_refine", fail)
    x = sample_discrete_gaussian(sigma2, 10**6, rng=seeded_random_source(35))
    assert x.size == 10**6
