"""Contract tests of pipeline.dp.noise that are exact rather than statistical.

- Privacy maps (rho = Delta2^2 / (2 sigma2), Thm 19.37(iii) / CKS20 Thm 4; epsilon = Delta1 / scale, Thm 19.14)
  on exact rationals, their defaults and boundaries, and validation errors that name the parameter in full.
- CKS20 Algorithm 2 (``_laplace_attempts``): X = U + tV and Y = floor(X / s) must be computed exactly whatever
  int64 / Python-int path is taken; checked against the same steps done with Python ints on a twin seeded
  source, with t, s and V chosen so that int64 arithmetic would overflow if a guard let it through.
- CKS20 Algorithm 3's acceptance test (``_gaussian_accept``): the gamma handed to ``bernoulli_exp`` must equal
  (|y| q t - p)^2 / (2 p q t^2) exactly, as integers (never floats), on every branch (int64, per-element
  Python ints, a denominator above INT64_LIMIT, p or q t too big for int64).
- ``_fill``: the output is the accepted draws in order, batches never above ``_BATCH``.
- Dispatch and wiring: which sampler runs at the table thresholds, with which arguments, and CKS20's t.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from censusdp.pipeline.dp import bernoulli as nb
from censusdp.pipeline.dp import noise
from censusdp.pipeline.dp.noise import (
    LAPLACE_TABLE_MAX_SCALE,
    MAX_LAPLACE_SCALE,
    MAX_SIGMA2,
    TABLE_MAX_SIGMA2,
    gaussian_rho,
    gaussian_sigma2,
    laplace_epsilon,
    laplace_scale,
    sample_discrete_gaussian,
    sample_discrete_gaussian_cks,
    sample_discrete_laplace,
    sample_discrete_laplace_cks,
)
from censusdp.pipeline.dp.random_source import RandomSource, seeded_random_source

# ---- privacy maps ------------------------------------------------------------------------------------------

F = Fraction
EXACT = "such as '0.5', '1/4' or '1e-3'"  # pipeline.exact's example, in every parse error


def test_privacy_maps_take_the_sensitivity_explicitly() -> None:
    """No default sensitivity (OpenDP's makers take it as an argument): a forgotten one would price replace-one
    (Δ₂² = 2, Δ₁ = 2) as add-remove."""
    for function, parameter in ((gaussian_rho, "sensitivity2_squared"), (gaussian_sigma2, "sensitivity2_squared"),
                                (laplace_epsilon, "sensitivity1"), (laplace_scale, "sensitivity1")):
        assert inspect.signature(function).parameters[parameter].default is inspect.Parameter.empty
        with pytest.raises(TypeError):
            function(F(1, 2))


@pytest.mark.parametrize(
    ("function", "args", "expected"),
    [
        (gaussian_rho, ("1/2", 1), F(1)),
        (gaussian_rho, (F(25, 4), 2), F(4, 25)),
        (gaussian_rho, (5, 0), F(0)),
        (gaussian_rho, (1, "1/2"), F(1, 4)),  # sigma2 = 1 and a sensitivity below 1 are allowed
        (gaussian_sigma2, (F(1, 8), 1), F(4)),
        (gaussian_sigma2, (1, 1), F(1, 2)),
        (gaussian_sigma2, ("1/2", "1/3"), F(1, 3)),
        (laplace_epsilon, ("1/2", 1), F(2)),
        (laplace_epsilon, (4, 0), F(0)),
        (laplace_epsilon, (1, "1/2"), F(1, 2)),
        (laplace_epsilon, (3, 2), F(2, 3)),
        (laplace_scale, ("1/2", 1), F(2)),
        (laplace_scale, (1, 1), F(1)),
        (laplace_scale, ("1/3", "1/2"), F(3, 2)),
    ],
)
def test_privacy_maps_are_exact(function: Callable[..., Fraction], args: tuple, expected: Fraction) -> None:
    got = function(*args)
    assert type(got) is Fraction and got == expected


@given(st.fractions(min_value=F(1, 10**6), max_value=10**6), st.integers(1, 10**4))
def test_privacy_maps_invert_each_other(value: Fraction, sensitivity: int) -> None:
    assert gaussian_rho(value, sensitivity) == F(sensitivity, 2) / value
    assert gaussian_sigma2(gaussian_rho(value, sensitivity), sensitivity) == value
    assert laplace_epsilon(value, sensitivity) == sensitivity / value
    assert laplace_scale(laplace_epsilon(value, sensitivity), sensitivity) == value


ABOVE_MAX_SIGMA2 = MAX_SIGMA2 + F(1, 10**6)
ABOVE_MAX_SCALE = MAX_LAPLACE_SCALE + F(1, 10**6)
SAMPLERS_BY_PARAMETER = [(sample_discrete_gaussian, "sigma2", MAX_SIGMA2),
                         (sample_discrete_gaussian_cks, "sigma2", MAX_SIGMA2),
                         (sample_discrete_laplace, "scale", MAX_LAPLACE_SCALE),
                         (sample_discrete_laplace_cks, "scale", MAX_LAPLACE_SCALE)]

ERRORS = [
    (gaussian_rho, (0, 1), "sigma2 must be > 0, got 0"),
    (gaussian_rho, ("-1/2", 2), "sigma2 must be > 0, got -1/2"),
    (gaussian_rho, (1, -1), "sensitivity2_squared must be >= 0, got -1"),
    (gaussian_sigma2, (0, 1), "rho must be > 0, got 0"),
    (gaussian_sigma2, (1, 0), "sensitivity2_squared must be > 0, got 0"),
    (laplace_epsilon, (0, 1), "scale must be > 0, got 0"),
    (laplace_epsilon, (1, "-1/3"), "sensitivity1 must be >= 0, got -1/3"),
    (laplace_scale, (0, 1), "epsilon must be > 0, got 0"),
    (laplace_scale, ("-2", 2), "epsilon must be > 0, got -2"),
    (laplace_scale, (1, 0), "sensitivity1 must be > 0, got 0"),
    (gaussian_rho, ("abc", 1), f"sigma2: not an exact number {EXACT}: 'abc'"),
    (gaussian_rho, (1, "1/0"), f"sensitivity2_squared: not an exact number {EXACT}: '1/0'"),
    (laplace_epsilon, (1, 0.5),
     f"sensitivity1: must be exact (a Fraction, an integer or a string {EXACT}), got float"),
    *((f, ("x", 3), f"{name}: not an exact number {EXACT}: 'x'") for f, name, _ in SAMPLERS_BY_PARAMETER),
    *((f, (0, 3), f"{name} must be > 0, got 0") for f, name, _ in SAMPLERS_BY_PARAMETER),
    *((f, ("-1/2", 3), f"{name} must be > 0, got -1/2") for f, name, _ in SAMPLERS_BY_PARAMETER),
    *((f, (cap + F(1, 10**6), 3), f"{name} must be <= {cap}, got {cap + F(1, 10**6)}")
      for f, name, cap in SAMPLERS_BY_PARAMETER),
    *((f, (1, size), f"size must be an integer >= 0, got {size!r}")
      for f, _, _ in SAMPLERS_BY_PARAMETER for size in (-1, True, 2.0, "3")),
]


@pytest.mark.parametrize(("function", "args", "message"), ERRORS)
def test_errors_name_the_parameter(function: Callable[..., object], args: tuple, message: str) -> None:
    with pytest.raises(ValueError) as info:
        function(*args)
    assert str(info.value) == message


@pytest.mark.parametrize(("sampler", "name", "cap"), SAMPLERS_BY_PARAMETER)
def test_samplers_accept_their_boundaries(sampler: Callable[..., np.ndarray], name: str, cap: Fraction) -> None:
    """The cap itself, 1, a tiny value, size 0 and a numpy integer size are all valid."""
    rng = seeded_random_source(201)
    for param, size in ((cap, 2), (1, 0), (1, np.int64(3)), (F(1, 10**9), 2)):
        x = sampler(param, size, rng=rng)
        assert x.dtype == np.int64 and x.shape == (int(size),)


# ---- CKS20 Algorithm 2: X = U + tV, Y = floor(X / s), exactly -----------------------------------------------


def laplace_attempts_with_python_ints(t: int, s: int, n: int, rng: RandomSource) -> list[int]:
    """The steps of ``_laplace_attempts`` (CKS20 Algorithm 2) on the same random primitives, in Python ints."""
    u = nb.uniform_below_any(rng, t, n)
    u = u[nb.bernoulli_exp_frac(u, t, rng)]
    v = nb.geometric_exp_minus_one(u.size, rng)
    y = [(int(a) + t * int(b)) // s for a, b in zip(u, v, strict=True)]
    negative = rng.uniform_below(2, len(y)) == 1
    return [-b if neg else b for b, neg in zip(y, negative, strict=True) if not (neg and b == 0)]


LAPLACE_CASES = [
    (7, 3, 3000, 1),  # scale 7/3: all int64
    (5, 2, 2000, 1),  # s = 2
    (10, 1, 2000, 1),  # s = 1: no division
    (2**62 - 1, 2**59 + 1, 8, 150),  # u is int64 but u + tV overflows int64 once V >= 2: Python ints needed
    (2**70 + 1, 2**65 + 3, 300, 1),  # t and s beyond int64
    ((2**62 + 1) * 10**15 - 1, 2**62 + 1, 300, 1),  # scale ~ 10^15 with s > INT64_LIMIT: Y ~ 10^15 V, exact
    (3, 2**64 + 1, 300, 1),  # X in int64, s >= 2^63: Y = 0
    (2**63 - 25, 1, 1, 60),  # Y = U + tV: in int64 (even above INT64_LIMIT) when V = 0, else OverflowError
]


def outcome(run: Callable[[], list[int]]) -> list[int] | str:
    try:
        return run()
    except OverflowError:
        return "OverflowError"


@pytest.mark.parametrize(("t", "s", "n", "calls"), LAPLACE_CASES)
def test_laplace_attempts_are_exact(t: int, s: int, n: int, calls: int) -> None:
    """The same draws, in Python ints; an output that does not fit in int64 (|y| > 2^63 - 1) must raise
    OverflowError, and every other one must be returned, as int64."""
    rng, twin = seeded_random_source(202), seeded_random_source(202)
    above_int64_limit = 0
    for _ in range(calls):
        expected = laplace_attempts_with_python_ints(t, s, n, twin)
        if max(map(abs, expected), default=0) > 2**63 - 1:
            expected = "OverflowError"  # type: ignore[assignment]
        else:
            above_int64_limit += sum(abs(y) > nb.INT64_LIMIT for y in expected)

        def run() -> list[int]:
            got = noise._laplace_attempts(t, s, n, rng)
            assert isinstance(got, np.ndarray) and got.dtype == np.int64
            return got.tolist()

        assert outcome(run) == expected
    assert rng.uniform_uint64(1)[0] == twin.uniform_uint64(1)[0]
    if t == 2**63 - 25:
        assert above_int64_limit > 0  # the case is there for outputs in (INT64_LIMIT, 2^63 - 1]


def test_laplace_attempts_of_nothing() -> None:
    got = noise._laplace_attempts(7, 3, 0, seeded_random_source(203))
    assert got.dtype == np.int64 and got.shape == (0,)


# ---- CKS20 Algorithm 3: the exact gamma of the acceptance test --------------------------------------------


def _isqrt_t(p: int, q: int) -> int:
    return math.isqrt(p // q) + 1


SIGMA_A = F(2**30 + 1, 2**20 + 1)  # p, q t <= 2^31 but 2 p q t^2 > INT64_LIMIT
ACCEPT_CASES = [
    (7, 3, 2, list(range(-50, 51))),  # the usual case: all in int64
    (7, 3, 2, [0, 3, 357913940, -357913940, 357913941, -357913941, 10**15, -(4 * 10**18), 4 * 10**18]),
    (7, 3, 2, []),
    (7, 3, 2, [0, 7, -9]),  # few elements, large values: no stray index may reach the per-element path
    (SIGMA_A.numerator, SIGMA_A.denominator, _isqrt_t(SIGMA_A.numerator, SIGMA_A.denominator),
     [*range(-40, 41), 10**12, -(10**12)]),
    (2**31 - 5, 1, 46341, [0, 1, -1, 5, 46341]),  # ysafe = 0: only y = 0 in int64
    (2, 1, 2**30, [0, 1, -1, 2, 10]),  # 2 p q t^2 = INT64_LIMIT exactly
    (2**31, 1, 2**15, [0, 1, -3]),  # p = isqrt(INT64_LIMIT) and y = 0: gamma = 1 exactly
    (2**32 + 1, 1, 65537, [0, 1, -1, 100, 10**9]),  # p > isqrt(INT64_LIMIT): Python ints throughout
    (1, 2**64 + 1, 1, [0, 1, -1, 2]),  # q t > 2^63: Python ints throughout
    (3 * 10**12 + 1, 3, 10**6 + 1, [0, 10**6, -(4 * 10**18)]),  # floor(gamma) > 2^63
]


@pytest.mark.parametrize(("p", "q", "t", "ys"), ACCEPT_CASES)
def test_gaussian_accept_hands_bernoulli_exp_the_exact_gamma(
    monkeypatch: pytest.MonkeyPatch, p: int, q: int, t: int, ys: list[int]
) -> None:
    """whole + frac / den = (|y| - sigma2/t)^2 / (2 sigma2) with sigma2 = p/q, den = 2 p q t^2, 0 <= frac < den,
    all integers: the module promises no floating-point number between the random bits and the output."""
    calls: list[tuple[np.ndarray, np.ndarray, int]] = []

    def recording_bernoulli_exp(whole: np.ndarray, frac: np.ndarray, den: int, rng: RandomSource) -> np.ndarray:
        calls.append((whole.copy(), frac.copy(), den))
        return np.arange(whole.size) % 3 == 0

    monkeypatch.setattr(nb, "bernoulli_exp", recording_bernoulli_exp)
    out = noise._gaussian_accept(np.array(ys, dtype=np.int64), p, q, t, seeded_random_source(204))
    assert out.tolist() == [i % 3 == 0 for i in range(len(ys))]
    [(whole, frac, den)] = calls
    assert den == 2 * p * q * t * t
    assert whole.shape == frac.shape == (len(ys),)
    assert whole.dtype in (np.int64, object) and frac.dtype in (np.int64, object)
    for y, w, f in zip(ys, whole.tolist(), frac.tolist(), strict=True):
        assert type(w) is int and type(f) is int, (y, w, f)
        assert w >= 0 and 0 <= f < den, (y, w, f)
        assert w * den + f == (abs(y) * q * t - p) ** 2, y


# ---- _fill -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 5, 10_000, 2**20 + 3])
def test_fill_keeps_the_accepted_draws_in_order(size: int) -> None:
    """Candidates 0, 1, 2, ... in order, those = 2 (mod 3) rejected: the output is the first ``size`` kept."""
    batches: list[int] = []

    def attempt(n: int, rng: RandomSource | None) -> np.ndarray:
        assert 0 < n <= noise._BATCH and len(batches) < 100, (n, len(batches))
        start = sum(batches)
        batches.append(n)
        candidates = np.arange(start, start + n, dtype=np.int64)
        return candidates[candidates % 3 != 2]

    out = noise._fill(np.full(size, -1, dtype=np.int64), attempt, None)  # type: ignore[arg-type]
    kept = np.arange(sum(batches) + 1)
    kept = kept[kept % 3 != 2][:size]
    assert out.shape == (size,) and np.array_equal(out, kept)
    assert (size == 0) == (not batches)


# ---- dispatch and wiring -----------------------------------------------------------------------------------


class Recorder:
    def __init__(self, tag: str) -> None:
        self.tag, self.calls = tag, []

    def __call__(self, *args: object, **kwargs: object) -> np.ndarray:
        self.calls.append((args, kwargs))
        return np.full(3, len(self.tag), dtype=np.int64)


@pytest.mark.parametrize(
    ("family", "param", "path"),
    [("gaussian", TABLE_MAX_SIGMA2, "table"), ("gaussian", "1/20", "table"),
     ("gaussian", TABLE_MAX_SIGMA2 + F(1, 10**9), "cks"), ("gaussian", 10**20, "cks"),
     ("laplace", LAPLACE_TABLE_MAX_SCALE, "table"), ("laplace", "1/20", "table"),
     ("laplace", LAPLACE_TABLE_MAX_SCALE + F(1, 10**9), "cks"), ("laplace", 10**12, "cks")],
)
def test_dispatch_by_size(monkeypatch: pytest.MonkeyPatch, family: str, param: Fraction | str | int,
                          path: str) -> None:
    table, cks = Recorder("table"), Recorder("cks")
    if family == "gaussian":
        monkeypatch.setattr(noise.noise_table, "get_table", lambda s2: ("table of", s2))
        monkeypatch.setattr(noise.noise_table, "sample_table", table)
        sample, table_arg = sample_discrete_gaussian, ("table of", F(param))
    else:
        monkeypatch.setattr(noise.noise_laplace_table, "sample_laplace_table", table)
        sample, table_arg = sample_discrete_laplace, F(param)
    monkeypatch.setattr(noise, f"sample_discrete_{family}_cks", cks)
    rng = seeded_random_source(205)
    assert sample(param, np.int64(7), rng=rng).tolist() == [len(path)] * 3
    if path == "table":
        assert table.calls == [((table_arg, 7, rng), {})] and not cks.calls
    else:
        assert cks.calls == [((F(param), 7), {"rng": rng})] and not table.calls


@pytest.mark.parametrize("sampler", [sample_discrete_gaussian, sample_discrete_laplace])
def test_default_rng_is_the_production_source(monkeypatch: pytest.MonkeyPatch, sampler: Callable) -> None:
    seen: list[RandomSource] = []
    monkeypatch.setattr(noise.noise_table, "sample_table", lambda table, n, rng: seen.append(rng))
    monkeypatch.setattr(noise.noise_laplace_table, "sample_laplace_table", lambda b, n, rng: seen.append(rng))
    seeded = seeded_random_source(1)
    sampler(2, 4)
    sampler(2, 4, rng=seeded)
    assert seen[0].publishable is True and seen[1] is seeded


@pytest.mark.parametrize("sampler", [sample_discrete_gaussian_cks, sample_discrete_laplace_cks])
def test_cks_samplers_use_the_given_rng_or_the_production_source(
    monkeypatch: pytest.MonkeyPatch, sampler: Callable
) -> None:
    seen: list[RandomSource] = []

    def attempts(t: int, s: int, n: int, rng: RandomSource) -> np.ndarray:
        seen.append(rng)
        return np.arange(n, dtype=np.int64)

    monkeypatch.setattr(noise, "_laplace_attempts", attempts)
    monkeypatch.setattr(noise, "_gaussian_accept", lambda y, p, q, t, rng: np.ones(y.size, dtype=bool))
    seeded = seeded_random_source(1)
    assert sampler(2, 4).tolist() == [0, 1, 2, 3]
    assert sampler(2, 4, rng=seeded).tolist() == [0, 1, 2, 3]
    assert seen[0].publishable is True and seen[-1] is seeded


@pytest.mark.parametrize(
    ("sigma2", "t"),
    [("7/3", 2), ("1/20", 1), ("4", 3), ("99/25", 2), ("1000001", 1001), (F(10**12) + F(1, 3), 10**6 + 1)],
)
def test_cks_gaussian_uses_t_floor_sigma_plus_one_and_a_laplace_proposal(
    monkeypatch: pytest.MonkeyPatch, sigma2: str | Fraction, t: int
) -> None:
    """CKS20 Algorithm 3 with t = floor(sigma) + 1: proposals from Algorithm 2 at scale t/1, accepted by the
    test at (p, q, t); the output is the accepted proposals in order."""
    proposals: list[tuple[int, int, int]] = []
    accepts: list[tuple[int, int, int]] = []

    def attempts(t_: int, s_: int, n: int, rng: RandomSource) -> np.ndarray:
        proposals.append((t_, s_, n))
        return np.arange(n, dtype=np.int64) - 5

    def accept(y: np.ndarray, p: int, q: int, t_: int, rng: RandomSource) -> np.ndarray:
        accepts.append((p, q, t_))
        return y % 2 == 0

    monkeypatch.setattr(noise, "_laplace_attempts", attempts)
    monkeypatch.setattr(noise, "_gaussian_accept", accept)
    x = sample_discrete_gaussian_cks(sigma2, 40, rng=seeded_random_source(207))
    s2 = F(sigma2)
    assert x.tolist() == [v for v in range(-5, 200) if v % 2 == 0][:40]
    assert {(t_, s_) for t_, s_, _ in proposals} == {(t, 1)}
    assert set(accepts) == {(s2.numerator, s2.denominator, t)}


def test_cks_laplace_uses_the_scale_in_lowest_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    def attempts(t: int, s: int, n: int, rng: RandomSource) -> np.ndarray:
        seen.append((t, s))
        return np.arange(n, dtype=np.int64)

    monkeypatch.setattr(noise, "_laplace_attempts", attempts)
    assert sample_discrete_laplace_cks("14/6", 10, rng=seeded_random_source(208)).tolist() == list(range(10))
    assert set(seen) == {(7, 3)}
