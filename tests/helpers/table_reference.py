"""Independent references for the table-sampler contract tests: a scripted random source, the discrete Gaussian and
Laplace CDFs in mpmath at 110 digits, and inversion by the sampler's definition X = min{k : U* < F(k)}.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import mpmath as mp
import numpy as np

from censusdp.pipeline.dp.random_source import seeded_random_source

DPS = 110
MASK = (1 << 64) - 1


class ScriptedSource:
    """A RandomSource returning the given uint64 values in order; records the size of every request."""

    name = "scripted (tests only)"
    publishable = False

    def __init__(self, values: list[int], extra: int = 0) -> None:
        self._values = [int(v) for v in values]
        self._extra = extra  # values returned beyond the size asked for (a broken source)
        self.requests: list[int] = []

    def uniform_uint64(self, size: int) -> np.ndarray:
        self.requests.append(size)
        take = size + self._extra
        assert len(self._values) >= take, "script exhausted"
        out, self._values = self._values[:take], self._values[take:]
        return np.array(out, dtype=np.uint64)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        raise AssertionError("not used by the table sampler")

    def bind(self, secret: bytes) -> None:
        pass

    @property
    def left(self) -> int:
        return len(self._values)


def _mpq(x: Fraction) -> mp.mpf:
    return mp.mpf(x.numerator) / x.denominator


@functools.cache
def _gaussian_tails(sigma2: Fraction, cut: int) -> tuple[list[mp.mpf], mp.mpf]:
    """(tail, Z) with tail[m] = sum_{j >= m} w_j, w_j = exp(-j^2 / (2 sigma2)), j <= cut."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        w = [mp.exp(-mp.mpf(j * j) / (2 * s2)) for j in range(cut + 1)]
        tail = [mp.mpf(0)] * (cut + 2)
        for m in range(cut, -1, -1):
            tail[m] = tail[m + 1] + w[m]
        return tail, 2 * tail[0] - w[0]


def gaussian_cdf(sigma2: Fraction, ks: range) -> dict[int, mp.mpf]:
    """F(k) of N_Z(0, sigma2) at DPS digits for k in ks (terms below 1e-(DPS+30) of the total dropped)."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        cut = max(int(mp.ceil(mp.sqrt(2 * s2 * (DPS + 30) * mp.log(10)))), abs(ks.start), abs(ks.stop)) + 2
    tail, z = _gaussian_tails(sigma2, cut)
    with mp.workdps(DPS + 10):
        return {k: tail[-k] / z if k < 0 else 1 - tail[k + 1] / z for k in ks}


def laplace_cdf(scale: Fraction, ks: range) -> dict[int, mp.mpf]:
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        return {k: q ** (-k) / (1 + q) if k < 0 else 1 - q ** (k + 1) / (1 + q) for k in ks}


def invert(cdf: dict[int, mp.mpf], value: int, bits: int) -> int:
    """min{k : U* < F(k)} for U* = value / 2^bits (exact dyadic), searched over the keys of ``cdf``."""
    with mp.workdps(DPS + 10):
        u = mp.mpf(value) / mp.mpf(2) ** bits
        ks = sorted(cdf)
        found = [k for k in ks if u < cdf[k]]
        assert found and found[0] > ks[0], "window too small"
        return found[0]


def digits(seed: int, n: int) -> list[int]:
    return [int(v) for v in seeded_random_source(seed).uniform_uint64(n)]
