"""A plain, one-sample-at-a-time CKS20 sampler in pure Python (tests only), and the shared test thresholds.

This is a line-by-line transcription of Canonne, Kamath & Steinke (2020), Algorithms 1-3, using
``fractions.Fraction`` and a seeded ``random.Random``.  It is deliberately naive: no numpy, no batching, no
int64 tricks, so that a two-sample test against ``pipeline.dp.noise`` checks the vectorised implementation
against an independent one.  ``random.Random`` is not a CSPRNG; that is fine here and nowhere else.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

# Statistical tests in tests/dp/test_noise.py and tests/dp/test_random_source.py share one family-wise error
# rate, split by Bonferroni over an upper bound on the number of p-values they compute, so
# a correct sampler fails any of them with probability below 1e-3 per full run.
FAMILY_ALPHA = 1e-3
# 127 p-values at present (scipy calls in test_noise, test_noise_table, test_noise_laplace, test_random_source,
# power tests included) plus 30 z-test comparisons of moments at the same level: 157.
N_STAT_TESTS = 160  # upper bound on the p-values computed across the noise tests
ALPHA = FAMILY_ALPHA / N_STAT_TESTS


def bernoulli(p: Fraction, rng: random.Random) -> bool:
    """Bernoulli(p) for rational 0 <= p <= 1."""
    return rng.randrange(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, rng: random.Random) -> bool:
    """Bernoulli(exp(-gamma)) for rational gamma >= 0 (CKS20 Algorithm 1)."""
    if gamma <= 1:
        k = 1
        while bernoulli(gamma / k, rng):
            k += 1
        return k % 2 == 1
    for _ in range(math.floor(gamma)):
        if not bernoulli_exp(Fraction(1), rng):
            return False
    return bernoulli_exp(gamma - math.floor(gamma), rng)


def discrete_laplace(scale: Fraction, rng: random.Random) -> int:
    """One draw with P(x) ~ exp(-|x|/scale) (CKS20 Algorithm 2 with scale = t/s)."""
    t, s = scale.numerator, scale.denominator
    while True:
        u = rng.randrange(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = bernoulli(Fraction(1, 2), rng)
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(sigma2: Fraction, rng: random.Random) -> int:
    """One draw from N_Z(0, sigma2) (CKS20 Algorithm 3 with t = floor(sigma) + 1)."""
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = discrete_laplace(Fraction(t), rng)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, rng):
            return y


def sample(kind: str, param: Fraction, n: int, seed: int) -> list[int]:
    """n draws of ``discrete_gaussian`` (kind "gaussian") or ``discrete_laplace`` (kind "laplace")."""
    rng = random.Random(seed)
    draw = discrete_gaussian if kind == "gaussian" else discrete_laplace
    return [draw(param, rng) for _ in range(n)]
