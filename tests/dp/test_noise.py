"""Tests of pipeline.dp.noise: the exact samplers against their exact laws, and the privacy maps.

Statistical tests compare against the PMF computed with mpmath at 60 digits, with the normalising constant
summed until the omitted tail is below 1e-50 of it.  Bins are integers; tail bins with expected count < 5
are merged.  Every p-value is checked against ``cks_reference.ALPHA`` (family-wise 1e-3, Bonferroni), and
the seeded source makes every failure reproducible.  The same tests must reject deliberately wrong
samplers at the same sample size (``test_power_*``), so passing means something.  Every discrete Gaussian
check runs on both exact paths: ``sample_discrete_gaussian`` (table inversion for sigma2 <= 10^6; its rare
branches are forced in tests/dp/test_gaussian_table.py) and ``sample_discrete_gaussian_cks`` (CKS20 rejection);
likewise every discrete Laplace check runs on ``sample_discrete_laplace`` (table inversion; rare branches
forced in tests/dp/test_noise_laplace.py) and ``sample_discrete_laplace_cks`` (CKS20 Algorithm 2).
Sample sizes: the goodness-of-fit tests of the production samplers use 10^7 draws per parameter in every
run; the CKS reference paths and the other tests use CENSUSDP_STAT_SAMPLES (default 10^6; 10^7 for a
thorough run).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from censusdp.pipeline.dp import bernoulli as noise_bernoulli
from censusdp.pipeline.dp import noise
from censusdp.pipeline.dp.noise import (
    sample_discrete_gaussian,
    sample_discrete_gaussian_cks,
    sample_discrete_laplace,
    sample_discrete_laplace_cks,
)
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.errors import ExactNumberError
from tests.helpers.noise_laws import (
    ALPHA,
    GAUSSIAN_SAMPLERS,
    LAPLACE_SAMPLERS,
    LAPLACE_SCALES,
    SAMPLERS,
    SIGMA2S,
    Z_CRIT,
    N,
    binned_counts,
    bins,
    draws,
    expected_counts,
    gaussian_law,
    gof_pvalues,
    laplace_law,
    laplace_width,
    reference_draws,
    sample_size,
)

# ---- goodness of fit -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", SIGMA2S)
@pytest.mark.parametrize("kind", GAUSSIAN_SAMPLERS)
def test_discrete_gaussian_matches_exact_pmf(kind: str, sigma2: str) -> None:
    p_chi2, p_g = gof_pvalues(draws(kind, sigma2, sample_size(kind), 1), gaussian_law(sigma2))
    assert p_chi2 > ALPHA and p_g > ALPHA, (p_chi2, p_g)


@pytest.mark.slow
@pytest.mark.parametrize("scale", LAPLACE_SCALES)
@pytest.mark.parametrize("kind", LAPLACE_SAMPLERS)
def test_discrete_laplace_matches_exact_pmf(kind: str, scale: str) -> None:
    p_chi2, p_g = gof_pvalues(draws(kind, scale, sample_size(kind), 2), laplace_law(scale), laplace_width(scale))
    assert p_chi2 > ALPHA and p_g > ALPHA, (p_chi2, p_g)


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", SIGMA2S[1:])  # at 1/20 the sample variance is ~Poisson(90)/n: no CLT
@pytest.mark.parametrize("kind", GAUSSIAN_SAMPLERS)
def test_discrete_gaussian_moments(kind: str, sigma2: str) -> None:
    """Mean 0 and E[x^2] = exact variance, each within Z_CRIT standard errors (CLT at n = 10^6, with the
    standard error of the second moment from the exact fourth moment)."""
    x = draws(kind, sigma2, N, 1).astype(float)
    law = gaussian_law(sigma2)
    assert abs(x.mean()) <= Z_CRIT * math.sqrt(law.variance / N)
    m2 = float(np.mean(x * x))
    assert abs(m2 - law.variance) <= Z_CRIT * math.sqrt((law.fourth_moment - law.variance**2) / N)


# ---- power: the same tests reject wrong samplers -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", ["1/20", "1/2"])
def test_power_rounded_continuous_gaussian_fails(sigma2: str) -> None:
    """np.rint of a float normal is not the discrete Gaussian (TV 0.044 at sigma2 = 1/2)."""
    gen = np.random.default_rng(3)  # test-only
    x = np.rint(gen.normal(0.0, math.sqrt(float(Fraction(sigma2))), N)).astype(np.int64)
    p_chi2, p_g = gof_pvalues(x, gaussian_law(sigma2))
    assert p_chi2 < ALPHA and p_g < ALPHA, (p_chi2, p_g)


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", ["1/2", "5", "500", "1000003/7", "1000000"])
@pytest.mark.parametrize("kind", GAUSSIAN_SAMPLERS)
def test_power_wrong_variance_fails(kind: str, sigma2: str) -> None:
    """The exact sampler at 1.05 * sigma2 (or sigma2 / 1.05, to stay on the table path), tested against the law
    at sigma2, must fail."""
    factor = Fraction(105, 100)
    if kind == "gaussian" and Fraction(sigma2) * factor > noise.TABLE_MAX_SIGMA2:
        factor = 1 / factor
    wrong = str(Fraction(sigma2) * factor)
    p_chi2, p_g = gof_pvalues(draws(kind, wrong, N, 4), gaussian_law(sigma2))
    assert p_chi2 < ALPHA and p_g < ALPHA, (p_chi2, p_g)


@pytest.mark.slow
@pytest.mark.parametrize("kind", LAPLACE_SAMPLERS)
def test_power_wrong_laplace_scale_fails(kind: str) -> None:
    p_chi2, p_g = gof_pvalues(draws(kind, "21/20", N, 5), laplace_law("1"))
    assert p_chi2 < ALPHA and p_g < ALPHA, (p_chi2, p_g)


# ---- two-sample test against the pure-Python reference ------------------------------------------------

REFERENCE_CASES = [
    *(
        (kind, sigma2, width)
        for kind in GAUSSIAN_SAMPLERS
        for sigma2, width in (("5", 1), ("7/3", 1), ("1000003/7", 40))
    ),
    *(("laplace", "7/3", 1), ("laplace_cks", "7/3", 1)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "param", "width"), REFERENCE_CASES)
def test_homogeneous_with_pure_python_reference(kind: str, param: str, width: int) -> None:
    """Chi-square homogeneity of the vectorised sampler and tests/helpers/cks_reference.py (bins fixed in advance
    from the exact law so that each reference cell expects >= 5; wide bins at large sigma)."""
    n_ref = 30_000
    ref = reference_draws(kind.removesuffix("_cks"), param, n_ref, 7)
    fast = draws(kind, param, N, 8)
    law = laplace_law(param) if kind == "laplace" else gaussian_law(param)
    a, b = bins(law, n_ref * width)
    b = a + (b - a) // width * width
    table = np.array([binned_counts(ref, a, b, width), binned_counts(fast, a, b, width)])
    exp_ref = expected_counts(law, n_ref, a, b, width)
    keep = exp_ref >= 5
    table = np.concatenate([table[:, keep], table[:, ~keep].sum(axis=1, keepdims=True)], axis=1)
    table = table[:, table.sum(axis=0) > 0]
    p = stats.chi2_contingency(table, correction=False).pvalue
    assert p > ALPHA, p


# ---- rare branches -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_object_fallback_paths_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """With INT64_LIMIT lowered, every int64 overflow guard of the CKS20 path trips: big uniform bounds,
    per-element Python-int numerators, object fractional parts, object X = U + tV.  The law must not change."""
    n = min(N, 100_000)
    monkeypatch.setattr(noise_bernoulli, "INT64_LIMIT", 2**6)
    x = sample_discrete_gaussian_cks("7/3", n, rng=seeded_random_source(9))
    assert min(gof_pvalues(x, gaussian_law("7/3"))) > ALPHA
    monkeypatch.setattr(noise_bernoulli, "INT64_LIMIT", 2**4)
    y = sample_discrete_laplace_cks("7/3", n, rng=seeded_random_source(10))
    assert min(gof_pvalues(y, laplace_law("7/3"))) > ALPHA


@pytest.mark.parametrize("kind", LAPLACE_SAMPLERS)
def test_laplace_with_huge_numerator_and_denominator(kind: str) -> None:
    """scale = (10^20 + 1)/10^19: t and s both exceed int64, so (CKS path) U, X and X // s are Python ints, and
    (table path) q = exp(-s/t) is enclosed from a big-integer ratio."""
    scale = "100000000000000000001/10000000000000000000"
    x = SAMPLERS[kind](scale, 20_000, rng=seeded_random_source(14))
    assert min(gof_pvalues(x, laplace_law(scale))) > ALPHA


def test_output_overflow_is_an_error_not_a_wrapped_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise_bernoulli, "INT64_LIMIT", 2**4)  # X = U + tV is built from Python ints
    monkeypatch.setattr(noise, "_INT64_MAX", 3)  # ... and must then fit in the (pretend) int64 range
    with pytest.raises(OverflowError):
        sample_discrete_laplace_cks(100, 1000, rng=seeded_random_source(15))


def test_huge_sigma2_uses_python_ints_and_has_right_moments() -> None:
    """sigma2 = 10^12 + 1/3 (above TABLE_MAX_SIGMA2, so CKS20): 2 p q t^2 ~ 1.8e25 exceeds int64, so the
    natural object path runs."""
    s2 = Fraction(10**12) + Fraction(1, 3)
    n = 20_000
    x = sample_discrete_gaussian(s2, n, rng=seeded_random_source(11)).astype(float)
    var = float(s2)  # N_Z's variance equals sigma2 to within exp(-2 pi^2 sigma2) here
    assert abs(x.mean()) <= Z_CRIT * math.sqrt(var / n)
    assert abs(np.mean(x * x) - var) <= Z_CRIT * math.sqrt(2 * var**2 / n)


@pytest.mark.parametrize("sigma2", [Fraction(1, 10**6), Fraction(1, 10**30)])
@pytest.mark.parametrize("kind", GAUSSIAN_SAMPLERS)
def test_tiny_sigma2_is_all_zeros(kind: str, sigma2: Fraction) -> None:
    """P(x != 0) < 2 exp(-1/(2 sigma2)) < 1e-200: floor(gamma) is huge and 2pqt^2 may exceed int64; the table
    has two boundaries, F(-1) and F(0), and exp(-1/(2 sigma2)) certified below 2^-200."""
    assert not SAMPLERS[kind](sigma2, 10_000, rng=seeded_random_source(12)).any()


def test_dispatch_uses_cks_above_table_max(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise, "TABLE_MAX_SIGMA2", Fraction(4))
    for s2, same in (("5", True), ("4", False)):
        x = sample_discrete_gaussian(s2, 1000, rng=seeded_random_source(16))
        assert np.array_equal(x, sample_discrete_gaussian_cks(s2, 1000, rng=seeded_random_source(16))) == same


def test_bernoulli_exp_edge_values() -> None:
    rng = seeded_random_source(13)
    assert noise_bernoulli.bernoulli_exp_frac(np.zeros(1000, dtype=np.int64), 7, rng).all()  # exp(0) = 1
    whole = np.full(1000, 10**6, dtype=np.int64)
    assert not noise_bernoulli.bernoulli_exp(whole, np.zeros(1000, dtype=np.int64), 3, rng).any()


# ---- API, validation, determinism ----------------------------------------------------------------------


def test_privacy_maps_exact() -> None:
    assert noise.gaussian_rho(Fraction(1, 2), 1) == 1
    assert noise.gaussian_rho(Fraction(25, 4), 2) == Fraction(4, 25)
    assert noise.gaussian_rho(5, 0) == 0
    assert noise.gaussian_sigma2(Fraction(1, 8), 2) == 8
    for s2 in (Fraction(7, 3), Fraction(1000003, 7), Fraction(1, 20)):
        assert noise.gaussian_sigma2(noise.gaussian_rho(s2, 2), 2) == s2
    assert noise.laplace_epsilon(Fraction(1, 2), 3) == 6 and noise.laplace_epsilon(4, 0) == 0
    assert noise.laplace_scale(noise.laplace_epsilon(Fraction(7, 3), 1), 1) == Fraction(7, 3)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: noise.gaussian_rho(0, 1), "sigma2"),
        (lambda: noise.gaussian_rho(-1, 1), "sigma2"),
        (lambda: noise.gaussian_rho(1, -1), "sensitivity2_squared"),
        (lambda: noise.gaussian_sigma2(0, 1), "rho"),
        (lambda: noise.gaussian_sigma2(1, 0), "sensitivity2_squared"),
        (lambda: noise.laplace_epsilon(0, 1), "scale"),
        (lambda: sample_discrete_gaussian(0, 3), "sigma2"),
        (lambda: sample_discrete_gaussian("-1/2", 3), "sigma2"),
        (lambda: sample_discrete_gaussian(10**25, 3), "sigma2"),
        (lambda: sample_discrete_gaussian(1, -1), "size"),
        (lambda: sample_discrete_gaussian_cks(0, 3), "sigma2"),
        (lambda: sample_discrete_gaussian_cks(10**25, 3), "sigma2"),
        (lambda: sample_discrete_gaussian_cks(1, -1), "size"),
        (lambda: sample_discrete_laplace(0, 3), "scale"),
        (lambda: sample_discrete_laplace(10**16, 3), "scale"),
        (lambda: sample_discrete_laplace(1, -1), "size"),
        (lambda: sample_discrete_laplace_cks(0, 3), "scale"),
        (lambda: sample_discrete_laplace_cks(10**16, 3), "scale"),
    ],
)
def test_validation_errors_name_the_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_samplers_refuse_floats() -> None:
    for sampler, name in ((sample_discrete_gaussian, "sigma2"), (sample_discrete_gaussian_cks, "sigma2"),
                          (sample_discrete_laplace, "scale"), (sample_discrete_laplace_cks, "scale")):
        with pytest.raises(ExactNumberError, match=f"^{name}: must be exact .*got float$"):
            sampler(0.5, 3)


def test_shapes_dtypes_and_determinism() -> None:
    for sampler in SAMPLERS.values():
        assert sampler(5, 0).shape == (0,)
        x = sampler("7/3", 1001, rng=seeded_random_source(5))
        assert x.dtype == np.int64 and x.shape == (1001,)
        assert np.array_equal(x, sampler("7/3", 1001, rng=seeded_random_source(5)))
        assert sampler(5, 50).dtype == np.int64  # default rng: the OS CSPRNG source


def test_no_numpy_random_in_library_noise_code() -> None:
    paths = sorted(Path(noise.__file__).parent.glob("*.py"))  # the imported package's files, wherever installed
    assert len(paths) >= 8  # samplers, tables, random source, accounting: the whole privacy layer
    for path in paths:
        used = r"(np|numpy)\.random\.\w+\(|^\s*(import|from)\s+(random|numpy\.random)\b"
        assert not re.search(used, path.read_text(), re.M), path
