"""Exact laws of the noise samplers and goodness-of-fit machinery, shared by the sampler tests.

Laws are computed with mpmath at 60 digits, the normalising constant summed until the omitted tail is below
1e-50 of it; bins are integers (or wider for large Laplace scales), tail bins with expected count < 5 merged.
Every p-value is checked against ``cks_reference.ALPHA`` (family-wise 1e-3, Bonferroni).  Samples are drawn
from a seeded source, so every failure reproduces; a few 10^7-draw samples are kept for neighbouring tests.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from fractions import Fraction

import mpmath as mp
import numpy as np
from scipy import stats

from censusdp.pipeline.dp.noise import (
    sample_discrete_gaussian,
    sample_discrete_gaussian_cks,
    sample_discrete_laplace,
    sample_discrete_laplace_cks,
)
from censusdp.pipeline.dp.random_source import seeded_random_source
from tests.helpers import cks_reference

N = int(os.environ.get("CENSUSDP_STAT_SAMPLES", "1000000"))
# the production (table) samplers are fast enough to be fitted on 10^7 draws in every CI run
N_PRODUCTION = max(N, int(os.environ.get("CENSUSDP_STAT_SAMPLES_PRODUCTION", "10000000")))


def sample_size(kind: str) -> int:
    return N_PRODUCTION if kind in ("gaussian", "laplace") else N
ALPHA = cks_reference.ALPHA
Z_CRIT = float(stats.norm.isf(ALPHA / 2))  # two-sided, ~4.3 standard errors
SIGMA2S = ["1/20", "1/2", "5", "7/3", "50", "500", "1000003/7", "1000000"]
LAPLACE_SCALES = ["1/20", "1/2", "1", "7/3", "100", "10000"]
GAUSSIAN_SAMPLERS = ["gaussian", "gaussian_cks"]  # the production sampler and the CKS20 reference path
LAPLACE_SAMPLERS = ["laplace", "laplace_cks"]
SAMPLERS = {
    "gaussian": sample_discrete_gaussian,
    "gaussian_cks": sample_discrete_gaussian_cks,
    "laplace": sample_discrete_laplace,
    "laplace_cks": sample_discrete_laplace_cks,
}


@dataclass(frozen=True)
class Law:
    lo: int  # pmf[i] is P(lo + i); support truncated where the tail is < 1e-50
    pmf: np.ndarray
    variance: float
    fourth_moment: float


def _law(weight, support: int, dps: int = 60) -> Law:
    """Symmetric law with P(x) ~ weight(|x|) on |x| <= support, normalised and moments taken at ``dps``."""
    with mp.workdps(dps):
        w = [weight(x) for x in range(support + 1)]
        z = w[0] + 2 * mp.fsum(w[1:])
        var = 2 * mp.fsum(x * x * wx for x, wx in enumerate(w)) / z
        mu4 = 2 * mp.fsum(x**4 * wx for x, wx in enumerate(w)) / z
        half = np.array([float(wx / z) for wx in w])
    return Law(-support, np.concatenate([half[:0:-1], half]), float(var), float(mu4))


@functools.cache
def gaussian_law(sigma2: str) -> Law:
    s2 = Fraction(sigma2)
    with mp.workdps(60):
        s2m = mp.mpf(s2.numerator) / s2.denominator
        support = int(mp.ceil(mp.sqrt(2 * s2m * 50 * mp.log(10)))) + 2  # exp(-x^2/(2 s2)) < 1e-50 beyond
        return _law(lambda x: mp.exp(-mp.mpf(x * x) / (2 * s2m)), support)


@functools.cache
def laplace_law(scale: str) -> Law:
    """Closed form at 60 digits: P(x) = (1 - q) / (1 + q) q^|x|, q = exp(-1/scale), listed out to where the tail is
    < 1e-50 (as for ``_law``).  P(32 i + j) = P(32 i) q^j: both factors are computed at 60 digits and rounded
    to float64, so each value is within 2 ulp of the exact one, and scale 10^4 (10^6 values) takes ~0.3 s."""
    b = Fraction(scale)
    with mp.workdps(60):
        q = mp.exp(-mp.mpf(b.denominator) / b.numerator)
        support = int(mp.ceil(50 * mp.log(10) * b.numerator / b.denominator)) + 2
        blocks = support // 32 + 1
        q32, anchor, anchors = q**32, (1 - q) / (1 + q), []
        for _ in range(blocks):
            anchors.append(float(anchor))
            anchor *= q32
        steps = np.array([float(q**j) for j in range(32)])
        var = 2 * q / (1 - q) ** 2
        mu4 = 2 * q * (1 + 10 * q + q * q) / (1 - q) ** 4
    half = (np.array(anchors)[:, None] * steps[None, :]).ravel()[: support + 1]
    return Law(-support, np.concatenate([half[:0:-1], half]), float(var), float(mu4))


def laplace_width(scale: str) -> int:
    """Bin width for Laplace tests: 1 up to scale 100; wider above, so that bins expect >= ~50 draws (with
    tens of thousands of bins expecting 5-50 each, the G statistic's chi-square approximation is biased)."""
    return max(1, int(Fraction(scale)) // 100)


@functools.lru_cache(maxsize=4)  # a few 10^7-draw samples (80 MB each) shared by neighbouring tests, no more
def draws(kind: str, param: str, n: int, seed: int) -> np.ndarray:
    return SAMPLERS[kind](param, n, rng=seeded_random_source(seed))


@functools.cache
def reference_draws(kind: str, param: str, n: int, seed: int) -> np.ndarray:
    """The pure-Python reference sample (slow: cached, shared by both Gaussian paths)."""
    return np.array(cks_reference.sample(kind, Fraction(param), n, seed=seed), dtype=np.int64)


def bins(law: Law, n: int) -> tuple[int, int]:
    """[a, b]: values with expected count >= 5 (a contiguous range for these unimodal laws)."""
    core = np.flatnonzero(law.pmf * n >= 5)
    return law.lo + int(core[0]), law.lo + int(core[-1])


def _bin_index(x: np.ndarray, a: int, b: int, width: int) -> np.ndarray:
    """Bin 0 is (-inf, a), then [a, a+width), ... up to b, and the last bin is (b, inf)."""
    return np.where(x < a, 0, np.where(x > b, (b - a) // width + 2, (np.clip(x, a, b) - a) // width + 1))


def binned_counts(x: np.ndarray, a: int, b: int, width: int = 1) -> np.ndarray:
    return np.bincount(_bin_index(x, a, b, width), minlength=(b - a) // width + 3)


def expected_counts(law: Law, n: int, a: int, b: int, width: int = 1) -> np.ndarray:
    values = np.arange(law.lo, law.lo + law.pmf.size)
    return np.bincount(_bin_index(values, a, b, width), weights=law.pmf * n, minlength=(b - a) // width + 3)


def merge_small_tails(obs: np.ndarray, exp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold a tail bin whose expected count is < 5 into its neighbour."""
    obs, exp = obs.astype(float), exp.copy()
    for tail, neighbour in ((0, 1), (-1, -2)):
        if exp[tail] < 5:
            obs[neighbour] += obs[tail]
            exp[neighbour] += exp[tail]
            obs[tail] = exp[tail] = -1
    keep = exp >= 0
    return obs[keep], exp[keep]


def gof_pvalues(x: np.ndarray, law: Law, width: int = 1) -> tuple[float, float]:
    """(chi-square p, G-test p) of samples x against the exact law, on bins ``width`` integers wide."""
    a, b = bins(law, x.size)
    b = a + (b - a) // width * width
    obs, exp = merge_small_tails(binned_counts(x, a, b, width), expected_counts(law, x.size, a, b, width))
    exp *= obs.sum() / exp.sum()  # the omitted tail mass is < 1e-50
    if obs.size < 2:  # only when CENSUSDP_STAT_SAMPLES is tiny: nothing to test (and power tests then fail)
        return 1.0, 1.0
    chi2 = stats.power_divergence(obs, exp, lambda_="pearson").pvalue
    g = stats.power_divergence(obs, exp, lambda_="log-likelihood").pvalue
    return float(chi2), float(g)
