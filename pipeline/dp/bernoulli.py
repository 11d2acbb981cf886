"""Exact, vectorised Bernoulli(exp(-gamma)) for rational gamma: the building block of ``pipeline.dp.noise``.

CKS20 Algorithm 1 on numpy arrays: each output bit is exactly Bernoulli(exp(-gamma)), independently, with no float
(docs/sampling.md).  Values go in int64 arrays only up to ``INT64_LIMIT`` = 2^62, every product or sum numpy will form
bounded beforehand, so nothing wraps at 2^63; larger ones use object arrays of Python ints (``split_int64``).
"""

from __future__ import annotations

import numpy as np

from censusdp.pipeline.dp.random_source import RandomSource

INT64_LIMIT = 1 << 62  # module attribute (not a default argument) so tests can monkeypatch it


def uniform_below_any(rng: RandomSource, bound: int, size: int) -> np.ndarray:
    """Exact uniform integers on [0, bound): int64 when ``bound <= INT64_LIMIT``, else an object array."""
    if bound <= INT64_LIMIT:
        return rng.uniform_below(bound, size)
    # Big bound: build ``bits``-bit integers from 64-bit words and reject those >= bound (acceptance >= 1/2).
    bits = (bound - 1).bit_length()
    words = -(-bits // 64)
    mask = (1 << bits) - 1
    out = np.empty(size, dtype=object)
    filled = 0
    while filled < size:
        raw = rng.uniform_uint64((size - filled) * words).reshape(size - filled, words)
        vals = [sum(int(w) << (64 * i) for i, w in enumerate(row)) & mask for row in raw]
        vals = [v for v in vals if v < bound]
        out[filled : filled + len(vals)] = vals
        filled += len(vals)
    return out


def to_int64_if_small(values: np.ndarray, limit: int | None = None) -> np.ndarray:
    """Object array -> int64 when every |value| <= ``limit`` (default ``INT64_LIMIT``), else unchanged."""
    limit = INT64_LIMIT if limit is None else limit
    if values.dtype != object or values.size == 0:
        return values.astype(np.int64) if values.dtype == object else values
    if max(abs(int(values.max())), abs(int(values.min()))) <= limit:
        return values.astype(np.int64)
    return values


def bernoulli_exp_frac(num: np.ndarray, den: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) elementwise, for integers 0 <= num <= den (CKS20 Algorithm 1)."""
    # K = 1 runs on the whole array (stopping there outputs 1); later rounds write only the survivors' odd K
    going = np.asarray(uniform_below_any(rng, den, num.size) < num, dtype=bool)
    result = ~going
    active = np.flatnonzero(going)
    r = num[active]
    k = 2
    while active.size:
        a = np.asarray(uniform_below_any(rng, den * k, active.size) < r, dtype=bool)  # A_K ~ Bern(gamma/K)
        if k % 2 == 1:
            result[active[~a]] = True  # stopped at odd K
        active, r = active[a], r[a]
        k += 1
    return result


def bernoulli_exp_minus_one(size: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(-1)): Algorithm 1 at gamma = 1, where A_K ~ Bern(1/K) is uniform_below(K) == 0."""
    # A_1 ~ Bern(1) is always 1, so every element reaches K = 2; stopping there (even K) outputs 0.
    result = np.zeros(size, dtype=bool)
    active = np.flatnonzero(rng.uniform_below(2, size) == 0)
    k = 3
    while active.size:
        a = rng.uniform_below(k, active.size) == 0
        if k % 2 == 1:
            result[active[~a]] = True
        active = active[a]
        k += 1
    return result


def geometric_exp_minus_one(size: int, rng: RandomSource) -> np.ndarray:
    """V = number of Bernoulli(exp(-1)) successes before the first failure: P(V >= v) = exp(-v) exactly."""
    ok = bernoulli_exp_minus_one(size, rng)
    v = ok.astype(np.int64)
    active = np.flatnonzero(ok)
    while active.size:
        ok = bernoulli_exp_minus_one(active.size, rng)
        active = active[ok]
        v[active] += 1
    return v


def bernoulli_exp(whole: np.ndarray, frac: np.ndarray, den: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(-gamma)) elementwise, gamma = whole + frac/den with whole >= 0, 0 <= frac < den."""
    alive = np.ones(whole.size, dtype=bool)
    # exp(-1)^floor(gamma): one Bernoulli(exp(-1)) per unit up to the first failure (a few dozen rounds at most)
    idx = np.flatnonzero(np.asarray(whole > 0, dtype=bool))
    left = whole[idx]
    while idx.size:
        ok = bernoulli_exp_minus_one(idx.size, rng)
        alive[idx[~ok]] = False
        idx, left = idx[ok], left[ok] - 1
        more = np.asarray(left > 0, dtype=bool)
        idx, left = idx[more], left[more]
    survivors = np.flatnonzero(alive)
    alive[survivors] = bernoulli_exp_frac(frac[survivors], den, rng)
    return alive


def split_int64(limit_abs: int, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of elements with |value| <= limit_abs (int64-safe) and of the rest (for the object path)."""
    small = np.abs(values) <= limit_abs
    return np.flatnonzero(small), np.flatnonzero(~small)
