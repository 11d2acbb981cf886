"""Contract tests of pipeline.dp.bernoulli, the exact Bernoulli(exp(-gamma)) primitives of CKS20 Algorithm 1.

Laws: each primitive is run on a seeded source over a few hundred thousand elements per parameter and every
observed frequency must lie within Z standard errors of the exact probability (exp(-gamma), computed in float:
far more precise than the tolerance).  Z = 6.5 makes a false failure of one check less likely than 1e-10
(normal approximation: expected counts of hits and misses are >= 10^3, except gamma ~ 2^-61, where the check
demands no miss, which has probability ~1e-14), so the ~60 checks here add < 1e-8 to the suite's error rate; the
seeded source makes every run identical anyway.  The mutations these tests exist for move a
probability by far more than 6.5 standard errors (e.g. Bern((num + 1)/den) instead of Bern(num/den)).
Exact checks: ``uniform_below_any``'s big-bound path against a plain model of its documented construction
(bits-bit integers from little-endian 64-bit words, rejection at ``bound``), the int64/object helpers on
their boundaries, and the int64 fallbacks forced by lowering ``INT64_LIMIT`` as the module intends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from scipy import stats

from censusdp.pipeline.dp import bernoulli as nb
from censusdp.pipeline.dp.random_source import seeded_random_source

Z = 6.5


def assert_frequency(hits: int, n: int, p: float, what: str) -> None:
    se = math.sqrt(n * p * (1 - p))
    assert abs(hits - n * p) <= Z * se, f"{what}: {hits}/{n} = {hits / n:.5f}, exact {p:.5f}"


def assert_bool_array(x: np.ndarray, size: int) -> None:
    assert isinstance(x, np.ndarray) and x.dtype == bool and x.shape == (size,)


# ---- Bernoulli(exp(-num/den)) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("den", "nums", "n_each"),
    [
        (12, [1, 5, 6, 11, 12], 200_000),  # int64 on every round
        (2**61 + 1, [1, 2**60, 2**61 + 1], 20_000),  # den * K > INT64_LIMIT from K = 2: object bounds after round 1
        (3 * 2**62, [2**62, 3 * 2**62], 20_000),  # den > INT64_LIMIT: object uniforms from round 1
    ],
)
def test_bernoulli_exp_frac_law(den: int, nums: list[int], n_each: int) -> None:
    num = np.repeat(np.array(nums, dtype=object if den > nb.INT64_LIMIT else np.int64), n_each)
    out = nb.bernoulli_exp_frac(num, den, seeded_random_source(101))
    assert_bool_array(out, num.size)
    for i, k in enumerate(nums):
        hits = int(out[i * n_each : (i + 1) * n_each].sum())
        assert_frequency(hits, n_each, math.exp(-k / den), f"exp(-{k}/{den})")


def test_bernoulli_exp_frac_at_gamma_zero_is_always_one() -> None:
    out = nb.bernoulli_exp_frac(np.zeros(10_000, dtype=np.int64), 7, seeded_random_source(102))
    assert_bool_array(out, 10_000)
    assert out.all()
    assert_bool_array(nb.bernoulli_exp_frac(np.zeros(0, dtype=np.int64), 7, seeded_random_source(102)), 0)


def test_bernoulli_exp_frac_with_object_fallbacks_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """INT64_LIMIT = 8 < den = 12: every uniform of Algorithm 1 comes from the big-bound path."""
    monkeypatch.setattr(nb, "INT64_LIMIT", 8)
    n_each, nums = 15_000, [0, 3, 12]
    out = nb.bernoulli_exp_frac(np.repeat(np.array(nums, dtype=np.int64), n_each), 12, seeded_random_source(103))
    assert_bool_array(out, n_each * len(nums))
    for i, k in enumerate(nums):
        assert_frequency(int(out[i * n_each : (i + 1) * n_each].sum()), n_each, math.exp(-k / 12), f"{k}/12")


def test_bernoulli_exp_minus_one_law() -> None:
    n = 1_000_000
    out = nb.bernoulli_exp_minus_one(n, seeded_random_source(104))
    assert_bool_array(out, n)
    assert_frequency(int(out.sum()), n, math.exp(-1), "exp(-1)")
    assert_bool_array(nb.bernoulli_exp_minus_one(0, seeded_random_source(104)), 0)


def test_geometric_exp_minus_one_law() -> None:
    """P(V = v) = exp(-v) (1 - exp(-1))."""
    n = 1_000_000
    v = nb.geometric_exp_minus_one(n, seeded_random_source(105))
    assert v.dtype == np.int64 and v.shape == (n,) and v.min() >= 0
    counts = np.bincount(v)
    for k in range(4):
        assert_frequency(int(counts[k]), n, math.exp(-k) * (1 - math.exp(-1)), f"P(V={k})")
    assert_frequency(int((v >= 4).sum()), n, math.exp(-4), "P(V>=4)")


class ScriptedBelow:
    """A RandomSource whose ``uniform_below`` calls must come with the scripted (bound, size) and return the
    scripted values: pins down Algorithm 1 round by round."""

    name = "scripted (test only)"
    publishable = False

    def __init__(self, script: list[tuple[int, list[int]]]) -> None:
        self.script = list(script)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        assert self.script, f"unexpected call uniform_below({bound}, {size})"
        expected_bound, values = self.script.pop(0)
        assert (bound, size) == (expected_bound, len(values))
        return np.array(values, dtype=np.int64)

    def uniform_uint64(self, size: int) -> np.ndarray:
        raise AssertionError("not expected")

    def bind(self, secret: bytes) -> None:
        pass


def test_bernoulli_exp_minus_one_is_algorithm_1_at_gamma_one() -> None:
    """A_K ~ Bern(1/K) is ``uniform_below(K) == 0``; A_1 = 1 always; stopping at odd K outputs 1.  Elements stop
    at K = 2, 3, 4, 5 in turn."""
    src = ScriptedBelow([(2, [1, 0, 0, 0]), (3, [1, 0, 0]), (4, [3, 0]), (5, [4])])
    assert nb.bernoulli_exp_minus_one(4, src).tolist() == [False, True, False, True]  # type: ignore[arg-type]
    assert not src.script


def test_bernoulli_exp_frac_is_algorithm_1() -> None:
    """A_K ~ Bern(num / (den K)) is ``uniform_below(den K) < num``; stopping at odd K outputs 1.  num = 3, 3, 0, 5
    over den = 5: the elements stop at K = 3, 1, 1 and 4."""
    src = ScriptedBelow([(5, [2, 3, 0, 4]), (10, [2, 4]), (15, [3, 4]), (20, [5])])
    out = nb.bernoulli_exp_frac(np.array([3, 3, 0, 5], dtype=np.int64), 5, src)  # type: ignore[arg-type]
    assert out.tolist() == [True, True, True, False]
    assert not src.script


# ---- Bernoulli(exp(-(whole + frac/den))) ------------------------------------------------------------------

CASES = [(0, 2), (1, 0), (1, 3), (2, 1), (3, 4)]  # (whole, frac) with den = 5


@pytest.mark.parametrize("dtype", [np.int64, object])
def test_bernoulli_exp_law(dtype: type) -> None:
    n_each, den = 150_000, 5
    whole = np.repeat(np.array([w for w, _ in CASES], dtype=dtype), n_each)
    frac = np.repeat(np.array([f for _, f in CASES], dtype=dtype), n_each)
    out = nb.bernoulli_exp(whole, frac, den, seeded_random_source(106))
    assert_bool_array(out, whole.size)
    for i, (w, f) in enumerate(CASES):
        hits = int(out[i * n_each : (i + 1) * n_each].sum())
        assert_frequency(hits, n_each, math.exp(-(w + f / den)), f"exp(-({w} + {f}/{den}))")


def test_bernoulli_exp_edges() -> None:
    rng = seeded_random_source(107)
    zero = np.zeros(5000, dtype=np.int64)
    assert nb.bernoulli_exp(zero, zero, 3, rng).all()  # exp(0) = 1
    huge = np.array([10**30, 2**62, 10**6] * 1000, dtype=object)
    out = nb.bernoulli_exp(huge, np.zeros(huge.size, dtype=object), 3, rng)
    assert_bool_array(out, huge.size)
    assert not out.any()
    assert_bool_array(nb.bernoulli_exp(zero[:0], zero[:0], 3, rng), 0)


# ---- uniform_below_any -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [1, 3, 2**40 + 1, nb.INT64_LIMIT])
def test_uniform_below_any_uses_the_source_up_to_int64_limit(bound: int) -> None:
    got = nb.uniform_below_any(seeded_random_source(108), bound, 1000)
    assert got.dtype == np.int64
    assert np.array_equal(got, seeded_random_source(108).uniform_below(bound, 1000))


def model_below_any(words: Iterator[int], bound: int, size: int) -> list[int]:
    """Rows of ceil(bits / 64) words, word i weighted 2^(64 i), masked to bits = bit_length(bound - 1), and kept
    if < bound, row after row until ``size`` are kept."""
    bits = (bound - 1).bit_length()
    per_row = -(-bits // 64)
    out: list[int] = []
    while len(out) < size:
        value = sum(next(words) << (64 * i) for i in range(per_row)) & ((1 << bits) - 1)
        if value < bound:
            out.append(value)
    return out


BIG_BOUNDS = [2**62 + 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 3 * 2**64, 2**70 - 1, 2**70, 3 * 2**100 + 7,
              2**128, 2**128 + 1, 5 * 2**190 + 3]


@pytest.mark.parametrize("bound", BIG_BOUNDS)
def test_uniform_below_any_big_bounds_follow_the_documented_construction(bound: int) -> None:
    src = seeded_random_source(109)
    words = iter(int(w) for w in seeded_random_source(109).uniform_uint64(60_000))
    for size in (1, 5, 2000, 0, 3):
        got = nb.uniform_below_any(src, bound, size)
        assert got.dtype == object and got.shape == (size,)
        assert all(type(v) is int for v in got)
        assert got.tolist() == model_below_any(words, bound, size)
    assert int(src.uniform_uint64(1)[0]) == next(words)  # the source is left exactly where the model is


class ScriptedSource:
    """A RandomSource handing out given 64-bit words, to put chosen values on the rejection boundary."""

    name = "scripted (test only)"
    publishable = False

    def __init__(self, words: list[int]) -> None:
        self._words = iter(words)

    def uniform_uint64(self, size: int) -> np.ndarray:
        return np.array([next(self._words) for _ in range(size)], dtype=np.uint64)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        raise AssertionError("not expected for a big bound")

    def bind(self, secret: bytes) -> None:
        pass


@pytest.mark.parametrize("bound", [2**64 + 5, 3 * 2**100 + 7])
def test_uniform_below_any_rejects_the_bound_itself(bound: int) -> None:
    """The row equal to ``bound`` is rejected, ``bound - 1`` and 0 are kept."""
    per_row = -(-(bound - 1).bit_length() // 64)

    def row(value: int) -> list[int]:
        return [(value >> (64 * i)) & (2**64 - 1) for i in range(per_row)]

    src = ScriptedSource(row(bound) + row(bound - 1) + row(bound) + row(0) + row(1))
    assert nb.uniform_below_any(src, bound, 3).tolist() == [bound - 1, 0, 1]  # type: ignore[arg-type]


def test_uniform_below_any_is_uniform_with_int64_limit_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bound 100 > INT64_LIMIT = 64 takes the big-bound path: a chi-square test over the 100 values
    (threshold 1e-10: a correct sampler fails it with probability 1e-10)."""
    monkeypatch.setattr(nb, "INT64_LIMIT", 64)
    x = nb.uniform_below_any(seeded_random_source(110), 100, 100_000)
    assert x.dtype == object and min(x) >= 0 and max(x) <= 99
    counts = np.bincount(x.astype(np.int64), minlength=100)
    assert counts.size == 100 and stats.chisquare(counts).pvalue > 1e-10


# ---- int64 / object helpers ----------------------------------------------------------------------------

LIMIT = nb.INT64_LIMIT


@pytest.mark.parametrize(
    ("values", "limit", "converted"),
    [
        ([5, -5], None, True),
        ([LIMIT, -LIMIT], None, True),  # |value| <= limit: int64
        ([LIMIT + 1], None, False),
        ([0, -(LIMIT + 1)], None, False),
        ([LIMIT + 1, 0], None, False),
        ([10, -10], 10, True),
        ([11], 10, False),
        ([-11, 3], 10, False),
        ([5], 3, False),  # an explicit limit is used, not INT64_LIMIT
        ([2**63 - 1, -(2**63 - 1)], 2**63 - 1, True),  # above INT64_LIMIT when the caller says so
        ([1], 0, False),
        ([], None, True),  # nothing to check: int64
        ([], 0, True),
    ],
)
def test_to_int64_if_small_on_object_arrays(values: list[int], limit: int | None, converted: bool) -> None:
    arr = np.array(values, dtype=object)
    out = nb.to_int64_if_small(arr, limit)
    assert out.dtype == (np.int64 if converted else object)
    assert out.shape == arr.shape and [int(v) for v in out] == values


@pytest.mark.parametrize("arr", [np.array([1, -2], dtype=np.int32), np.array([2**63 + 1], dtype=np.uint64),
                                 np.array([LIMIT + 5, -LIMIT - 5], dtype=np.int64), np.array([], dtype=np.int64)])
def test_to_int64_if_small_leaves_other_dtypes_unchanged(arr: np.ndarray) -> None:
    out = nb.to_int64_if_small(arr, 0)
    assert out.dtype == arr.dtype and np.array_equal(out, arr)
    assert nb.to_int64_if_small(arr).dtype == arr.dtype


def test_split_int64_splits_on_absolute_value() -> None:
    small, big = nb.split_int64(5, np.array([-6, -5, 0, 5, 6, 7, 4], dtype=np.int64))
    assert small.tolist() == [1, 2, 3, 6] and big.tolist() == [0, 4, 5]
    small, big = nb.split_int64(-1, np.array([0, 3], dtype=np.int64))
    assert small.tolist() == [] and big.tolist() == [0, 1]
