"""Exact discrete Gaussian and discrete Laplace noise, and the privacy maps that price them.

The samplers turn independent uniform integers (``RandomSource``) into iid draws of exactly N_Z(0, sigma2) (CKS20) or
P(x) ~ exp(-|x|/scale), with no float on the way: certified-table inversion in production, CKS20's algorithms as the
reference path and above the table caps (why exact, and the two errors of probability < 1e-270 that are the only
departures from the law: docs/sampling.md).  Privacy maps take the neighbouring relation's sensitivity explicitly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from censusdp.pipeline.dp import bernoulli as nb
from censusdp.pipeline.dp import gaussian_table as noise_table
from censusdp.pipeline.dp import laplace_table as noise_laplace_table
from censusdp.pipeline.dp.random_source import RandomSource, system_random_source
from censusdp.pipeline.exact import parse_rational

MAX_SIGMA2 = Fraction(10**24)  # sigma <= 1e12: |output| < 2^63 except with probability < 1e-300
TABLE_MAX_SIGMA2 = Fraction(10**6)  # table inversion up to here (table <= 1.5 MB, built in ~0.2 s); CKS20 above
MAX_LAPLACE_SCALE = Fraction(10**15)
LAPLACE_TABLE_MAX_SCALE = Fraction(10**6)  # table inversion up to here (tables <= ~0.3 MB, built in < 0.5 s)
_INT64_MAX = (1 << 63) - 1
_BATCH = 1 << 19  # candidates per vectorised round: bounds memory, keeps arrays cache-friendly


def _positive(value: Fraction | int | str, name: str) -> Fraction:
    x = parse_rational(value, name)
    if x <= 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return x


def _nonnegative(value: Fraction | int | str, name: str) -> Fraction:
    x = parse_rational(value, name)
    if x < 0:
        raise ValueError(f"{name} must be >= 0, got {x}")
    return x


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size!r}")
    return int(size)


def gaussian_rho(sigma2: Fraction, sensitivity2_squared: Fraction | int) -> Fraction:
    """rho = Delta2^2 / (2 sigma2): N_Z(0, sigma2) added to an integer query of l2 sensitivity Delta2 is rho-zCDP
    (Thm 19.37(iii); CKS20 Thm 4)."""
    s2 = _positive(sigma2, "sigma2")
    d2 = _nonnegative(sensitivity2_squared, "sensitivity2_squared")
    return d2 / (2 * s2)


def gaussian_sigma2(rho: Fraction, sensitivity2_squared: Fraction | int) -> Fraction:
    """sigma2 = Delta2^2 / (2 rho), exactly: the inverse of ``gaussian_rho`` (Thm 19.37(iii))."""
    r = _positive(rho, "rho")
    d2 = _positive(sensitivity2_squared, "sensitivity2_squared")  # 0 would ask for no noise at all
    return d2 / (2 * r)


def laplace_epsilon(scale: Fraction, sensitivity1: Fraction | int) -> Fraction:
    """epsilon = Delta1 / scale: P(x) ~ exp(-|x|/scale) added to an integer query of l1 sensitivity Delta1 is
    epsilon-DP (Def 19.13, Thm 19.14, on Z), accounted as epsilon^2/2-zCDP (Bun & Steinke 2016, Prop 1.4)."""
    b = _positive(scale, "scale")
    d1 = _nonnegative(sensitivity1, "sensitivity1")
    return d1 / b


def laplace_scale(epsilon: Fraction, sensitivity1: Fraction | int) -> Fraction:
    """scale = Delta1 / epsilon, exactly: the inverse of ``laplace_epsilon``."""
    e = _positive(epsilon, "epsilon")
    d1 = _positive(sensitivity1, "sensitivity1")
    return d1 / e


def _laplace_attempts(t: int, s: int, n: int, rng: RandomSource) -> np.ndarray:
    """n runs of CKS20 Algorithm 2; the accepted ones (~2/3 of n), each exactly Lap_Z(t/s), iid (docs/sampling.md)."""
    u = nb.uniform_below_any(rng, t, n)
    u = u[nb.bernoulli_exp_frac(u, t, rng)]
    v = nb.geometric_exp_minus_one(u.size, rng)
    if u.dtype != object and t * (int(v.max(initial=0)) + 1) <= nb.INT64_LIMIT:
        x = u + t * v
    else:
        x = u.astype(object) + v.astype(object) * t
    if s > nb.INT64_LIMIT:
        x = x.astype(object)  # int64 // (a Python int >= 2^63) would overflow
    y = x // s if s > 1 else x
    negative = rng.uniform_below(2, y.size) == 1
    keep = ~(negative & np.asarray(y == 0, dtype=bool))
    y = nb.to_int64_if_small(np.where(negative, -y, y)[keep], _INT64_MAX)
    if y.dtype == object:
        raise OverflowError("a discrete Laplace draw does not fit in int64")
    return y


def _gaussian_accept(y: np.ndarray, p: int, q: int, t: int, rng: RandomSource) -> np.ndarray:
    """CKS20 Algorithm 3's test: accept Y with probability exp(-gamma), gamma = (|Y| q t - p)^2 / (2 p q t^2) for
    sigma2 = p/q, exactly; int64 where it provably fits, Python ints elsewhere."""
    den = 2 * p * q * t * t
    qt = q * t
    absy = np.abs(y)
    root = math.isqrt(nb.INT64_LIMIT)
    # |Y| <= ysafe implies ||Y| qt - p| <= root, so its square is <= INT64_LIMIT.
    ysafe = (root - p) // qt if p <= root and qt <= root else -1
    if absy.size and int(absy.max()) <= ysafe:  # the usual case: all in int64, no index bookkeeping
        small, big = slice(None), np.empty(0, dtype=np.int64)
    else:
        small, big = nb.split_int64(ysafe, absy)
    whole = np.zeros(y.size, dtype=np.int64)
    frac = np.empty(y.size, dtype=np.int64 if den <= nb.INT64_LIMIT else object)
    if ysafe >= 0:  # else qt or p alone is too big for int64 and every element takes the object path
        a = absy[small] * qt - p
        num = a * a
        if den <= nb.INT64_LIMIT:
            whole[small], frac[small] = np.divmod(num, den)
        else:  # num <= INT64_LIMIT < den: gamma < 1
            frac[small] = num.astype(object)
    if big.size:
        a = absy[big].astype(object) * qt - p
        num = a * a
        w = nb.to_int64_if_small(num // den)
        if w.dtype == object:
            whole = whole.astype(object)
        whole[big] = w
        frac[big] = nb.to_int64_if_small(num % den) if den <= nb.INT64_LIMIT else num % den
    return nb.bernoulli_exp(whole, frac, den, rng)


def _fill(out: np.ndarray, attempt, rng: RandomSource) -> np.ndarray:
    """Fill ``out`` with accepted draws of ``attempt(n, rng)`` batch by batch, taken by position (never by value)."""
    filled, tried, kept = 0, 0, 0
    while filled < out.size:
        need = out.size - filled
        rate = max(kept / tried, 0.05) if tried else 0.4
        batch = min(_BATCH, int(need / rate * 1.05) + 32)
        y = attempt(batch, rng)
        tried, kept = tried + batch, kept + y.size
        take = min(y.size, need)
        out[filled : filled + take] = y[:take]
        filled += take
    return out


def sample_discrete_gaussian(
    sigma2: Fraction | int | str, size: int, *, rng: RandomSource | None = None
) -> np.ndarray:
    """``size`` iid exact draws from N_Z(0, sigma2), int64: the production sampler (``rng``: the OS CSPRNG if None)."""
    s2 = _check_sigma2(sigma2)
    n = _check_size(size)
    rng = system_random_source() if rng is None else rng
    if s2 <= TABLE_MAX_SIGMA2:
        return noise_table.sample_table(noise_table.get_table(s2), n, rng)
    return sample_discrete_gaussian_cks(s2, n, rng=rng)


def _check_sigma2(sigma2: Fraction | int | str) -> Fraction:
    s2 = _positive(sigma2, "sigma2")
    if s2 > MAX_SIGMA2:
        raise ValueError(f"sigma2 must be <= {MAX_SIGMA2}, got {s2}")
    return s2


def sample_discrete_gaussian_cks(
    sigma2: Fraction | int | str, size: int, *, rng: RandomSource | None = None
) -> np.ndarray:
    """``size`` iid exact draws from N_Z(0, sigma2), int64 (CKS20 Algorithm 3, vectorised): the reference path."""
    s2 = _check_sigma2(sigma2)
    out = np.empty(_check_size(size), dtype=np.int64)
    rng = system_random_source() if rng is None else rng
    p, q = s2.numerator, s2.denominator
    t = math.isqrt(p // q) + 1  # floor(sqrt(p/q)) = isqrt(floor(p/q)) because m^2 <= x iff m^2 <= floor(x)

    def attempt(n: int, rng: RandomSource) -> np.ndarray:
        y = _laplace_attempts(t, 1, n, rng)
        return y[_gaussian_accept(y, p, q, t, rng)]

    return _fill(out, attempt, rng)


def _check_laplace_scale(scale: Fraction | int | str) -> Fraction:
    b = _positive(scale, "scale")
    if b > MAX_LAPLACE_SCALE:
        raise ValueError(f"scale must be <= {MAX_LAPLACE_SCALE}, got {b}")
    return b


def sample_discrete_laplace(
    scale: Fraction | int | str, size: int, *, rng: RandomSource | None = None
) -> np.ndarray:
    """``size`` iid exact draws with P(x) ~ exp(-|x|/scale) on Z, int64: the production sampler."""
    b = _check_laplace_scale(scale)
    n = _check_size(size)
    rng = system_random_source() if rng is None else rng
    if b <= LAPLACE_TABLE_MAX_SCALE:
        return noise_laplace_table.sample_laplace_table(b, n, rng)
    return sample_discrete_laplace_cks(b, n, rng=rng)


def sample_discrete_laplace_cks(
    scale: Fraction | int | str, size: int, *, rng: RandomSource | None = None
) -> np.ndarray:
    """``size`` iid exact draws with P(x) ~ exp(-|x|/scale) on Z, int64 (CKS20 Algorithm 2, vectorised)."""
    b = _check_laplace_scale(scale)
    out = np.empty(_check_size(size), dtype=np.int64)
    rng = system_random_source() if rng is None else rng
    t, s = b.numerator, b.denominator
    return _fill(out, lambda n, r: _laplace_attempts(t, s, n, r), rng)
