"""Exact discrete Gaussian and discrete Laplace noise, and the privacy maps that price them.

What "correct" means here.  Given a ``RandomSource`` whose integers are independent and exactly uniform,
``sample_discrete_gaussian(sigma2, n)`` returns n independent draws whose law is *exactly* the discrete
Gaussian N_Z(0, sigma2), P(x) = exp(-x^2 / (2 sigma2)) / sum_{y in Z} exp(-y^2 / (2 sigma2)) -- not an
approximation to it, and with no floating-point number anywhere on the path from random bits to output
(floating-point samplers leak through the gaps in the set of representable values: Mironov 2012).
``sample_discrete_laplace(scale, n)`` likewise returns exact draws of P(x) proportional to exp(-|x|/scale).
The discrete Gaussian is that of Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy", NeurIPS 2020 (CKS20).  Two exact samplers produce it:
- ``sample_discrete_gaussian`` (production) inverts a uniform against certified CDF tables for sigma2 up to
  ``TABLE_MAX_SIGMA2`` (``pipeline.dp.gaussian_table``, with the certified arithmetic in ``pipeline.dp.cdf``),
  at 100+ M samples/s, and hands larger sigma2 to
- ``sample_discrete_gaussian_cks``: CKS20's Algorithms 1-3 run on numpy arrays (a few M samples/s), kept
  public as the independent reference path.
The discrete Laplace likewise: ``sample_discrete_laplace`` (production) inverts against certified tables of
its closed-form CDF for scale <= ``LAPLACE_TABLE_MAX_SCALE`` (``pipeline.dp.laplace_table``; same
exactness argument), and ``sample_discrete_laplace_cks`` (CKS20 Algorithm 2, vectorised) is the reference
path and the fallback above that.
Why each branch is exact is said next to it; the Bernoulli primitives are proved in
``pipeline.dp.bernoulli``.  The only departure from the exact law: an output that would not fit in int64
raises ``OverflowError`` (probability below 1e-300 within the caps below), and table refinement raises
``ArithmeticError`` after 15 rounds (probability below 2^-900).

Privacy (seed chapter numbering; neighbouring relation: the caller's, through the sensitivity passed in):
- discrete Gaussian on an integer query with l2 sensitivity Delta2: rho = Delta2^2 / (2 sigma2)-zCDP
  (CKS20 Theorem 4 / Proposition 5, the discrete analogue of Thm 19.37(iii));
- discrete Laplace on an integer query with l1 sensitivity Delta1: epsilon = Delta1 / scale pure DP (the
  discrete analogue of Def 19.13 / Thm 19.14), hence epsilon^2 / 2-zCDP (Bun & Steinke 2016, Prop 1.4).
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


# ---- privacy maps: small, total, exact (OpenDP style) ----------------------------------------------------


def gaussian_rho(sigma2: Fraction, sensitivity2_squared: Fraction | int) -> Fraction:
    """rho = Delta2^2 / (2 sigma2): the discrete Gaussian's zCDP cost (Thm 19.37(iii); CKS20 Thm 4).

    Guarantee: adding independent N_Z(0, sigma2) to each coordinate of an integer-valued query whose l2
    sensitivity under the chosen neighbouring relation is Delta2 is rho-zCDP.  Zero sensitivity costs 0.
    """
    s2 = _positive(sigma2, "sigma2")
    d2 = _nonnegative(sensitivity2_squared, "sensitivity2_squared")
    return d2 / (2 * s2)


def gaussian_sigma2(rho: Fraction, sensitivity2_squared: Fraction | int) -> Fraction:
    """sigma2 = Delta2^2 / (2 rho), exactly: the inverse of ``gaussian_rho`` (Thm 19.37(iii))."""
    r = _positive(rho, "rho")
    d2 = _positive(sensitivity2_squared, "sensitivity2_squared")  # 0 would ask for no noise at all
    return d2 / (2 * r)


def laplace_epsilon(scale: Fraction, sensitivity1: Fraction | int) -> Fraction:
    """epsilon = Delta1 / scale: the discrete Laplace's pure-DP cost (Def 19.13, Thm 19.14, on Z).

    Guarantee: adding P(x) ~ exp(-|x|/scale) noise to each coordinate of an integer query with l1
    sensitivity Delta1 is epsilon-DP (the ratio of the two noise laws at any output is at most
    exp(Delta1/scale), exactly as in the proof of Thm 19.14); account it as epsilon^2/2-zCDP.
    """
    b = _positive(scale, "scale")
    d1 = _nonnegative(sensitivity1, "sensitivity1")
    return d1 / b


def laplace_scale(epsilon: Fraction, sensitivity1: Fraction | int) -> Fraction:
    """scale = Delta1 / epsilon, exactly: the inverse of ``laplace_epsilon``."""
    e = _positive(epsilon, "epsilon")
    d1 = _positive(sensitivity1, "sensitivity1")
    return d1 / e


# ---- samplers ----------------------------------------------------------------------------------------


def _laplace_attempts(t: int, s: int, n: int, rng: RandomSource) -> np.ndarray:
    """n runs of CKS20 Algorithm 2; returns the accepted ones (~2/3 of n), each exactly Lap_Z(t/s), iid.

    U ~ Uniform{0..t-1} kept with probability exp(-U/t) has P(U=u) ~ exp(-u/t); V with P(V=v) ~ exp(-v)
    is independent; X = U + tV then has P(X=x) ~ exp(-x/t) on x >= 0 (x determines u and v uniquely);
    Y = floor(X/s) has P(Y=y) ~ exp(-ys/t); a fair sign B, rejecting (B=1, Y=0) so that 0 is not counted
    twice, gives P(y) ~ exp(-|y| s/t) on Z.  Rejected runs are independent of the accepted ones.
    """
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
    """CKS20 Algorithm 3's test: accept Y with probability exp(-(|Y| - sigma2/t)^2 / (2 sigma2)), exactly.

    With sigma2 = p/q, gamma = (|Y| q t - p)^2 / (2 p q t^2): an integer over a common integer, so
    ``nb.bernoulli_exp`` applies.  The numerator is computed in int64 where it provably fits and with
    Python ints elsewhere (far tails, or sigma2 with a large numerator or denominator).
    """
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
    """Fill ``out`` with accepted draws from ``attempt(n, rng)``, batch by batch.

    Taking the first ``need`` accepted draws of a batch is exact: which candidates are accepted is a
    function of independent per-candidate coins, so the accepted values are iid from the target law and
    choosing among them by position (never by value) keeps that law.
    """
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
    """``size`` iid exact draws from N_Z(0, sigma2), int64: the production sampler.

    Guarantee when added to an integer query of l2 sensitivity Delta2: ``gaussian_rho(sigma2, Delta2^2)``
    -zCDP (CKS20 Theorem 4; Thm 19.37(iii)).  For sigma2 <= ``TABLE_MAX_SIGMA2`` it inverts a uniform U*
    against a certified CDF table, refining U* lazily where 64 bits do not decide (``pipeline.dp.gaussian_table``
    says why every branch is exact; much faster than CKS20 here); larger sigma2 uses
    ``sample_discrete_gaussian_cks``.  Both have exactly the same output law; the random bits they consume
    differ.  ``rng`` defaults to the production OS-CSPRNG source.
    """
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
    """``size`` iid exact draws from N_Z(0, sigma2), int64 (CKS20 Algorithm 3, vectorised): the reference.

    Same law, hence the same guarantee, as ``sample_discrete_gaussian``: CKS20 Theorem 4, Thm 19.37(iii).

    Used by ``sample_discrete_gaussian`` above ``TABLE_MAX_SIGMA2`` and kept public as an independent exact
    path for tests.  Proposal Y ~ Lap_Z(t) with t = floor(sigma) + 1 (computed exactly as
    isqrt(floor(p/q)) + 1; any integer t > 0 gives the exact law, this t keeps acceptance high), accepted
    with probability exp(-(|Y| - sigma2/t)^2 / (2 sigma2)).  Since -|y|/t - (|y| - sigma2/t)^2/(2 sigma2)
    = -y^2/(2 sigma2) - sigma2/(2 t^2), an accepted Y has P(y) ~ exp(-y^2/(2 sigma2)): exactly N_Z(0, sigma2).
    """
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
    """``size`` iid exact draws with P(x) ~ exp(-|x|/scale) on Z, int64: the production sampler.

    Guarantee when added to an integer query of l1 sensitivity Delta1: ``laplace_epsilon(scale, Delta1)``
    pure DP (the discrete analogue of Thm 19.14; (Delta1/scale)^2/2-zCDP by Bun & Steinke 2016 Prop 1.4).
    For scale <= ``LAPLACE_TABLE_MAX_SCALE`` it inverts a uniform against certified tables of the closed-form
    CDF, refining lazily where 64 bits do not decide (``pipeline.dp.laplace_table`` says why it is exact; 5-10x
    faster than CKS20); larger scales use ``sample_discrete_laplace_cks``.  Same output law on both paths; the
    random bits consumed differ.
    """
    b = _check_laplace_scale(scale)
    n = _check_size(size)
    rng = system_random_source() if rng is None else rng
    if b <= LAPLACE_TABLE_MAX_SCALE:
        return noise_laplace_table.sample_laplace_table(b, n, rng)
    return sample_discrete_laplace_cks(b, n, rng=rng)


def sample_discrete_laplace_cks(
    scale: Fraction | int | str, size: int, *, rng: RandomSource | None = None
) -> np.ndarray:
    """``size`` iid exact draws with P(x) ~ exp(-|x|/scale) on Z, int64 (CKS20 Algorithm 2, vectorised).

    Same law, hence the same guarantee, as ``sample_discrete_laplace`` (Thm 19.14 on Z).  The reference path,
    and the production path above ``LAPLACE_TABLE_MAX_SCALE``.  With scale = t/s in
    lowest terms, see ``_laplace_attempts`` for why each step is exact.
    """
    b = _check_laplace_scale(scale)
    out = np.empty(_check_size(size), dtype=np.int64)
    rng = system_random_source() if rng is None else rng
    t, s = b.numerator, b.denominator
    return _fill(out, lambda n, r: _laplace_attempts(t, s, n, r), rng)
