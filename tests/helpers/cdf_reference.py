"""Independent references for the CDF contract tests: the discrete Gaussian and Laplace CDFs in mpmath at 110 digits,
enclosure checks, and a way to widen exp(-x) bounds (still valid) so that outward rounding shows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction

import mpmath as mp
import pytest

from censusdp.pipeline.dp import cdf as nc

DPS = 110  # mpmath digits: 365 bits, far beyond the 128 + 64 bits any bound here carries


def _mpq(x: Fraction | int) -> mp.mpf:
    x = Fraction(x)
    return mp.mpf(x.numerator) / x.denominator


def gaussian_weights(sigma2: Fraction, count: int) -> list[mp.mpf]:
    """w_j = exp(-j^2 / (2 sigma2)), j = 0 .. count-1 (caller holds the working precision)."""
    s2 = _mpq(sigma2)
    return [mp.exp(-mp.mpf(j * j) / (2 * s2)) for j in range(count)]


@functools.cache
def _gaussian_tails(sigma2: Fraction) -> tuple[list[mp.mpf], mp.mpf]:
    """(tail, Z): tail[m] = sum_{j >= m} w_j up to where terms are below 1e-(DPS+20) of the total."""
    with mp.workdps(DPS + 10):
        s2 = _mpq(sigma2)
        cut = int(mp.ceil(mp.sqrt(2 * s2 * (DPS + 30) * mp.log(10)))) + 2
        w = gaussian_weights(sigma2, cut + 1)
        tail = [mp.mpf(0)] * (cut + 2)
        for m in range(cut, -1, -1):
            tail[m] = tail[m + 1] + w[m]
        return tail, 2 * tail[0] - w[0]


def gaussian_cdf(sigma2: Fraction, ks: list[int]) -> list[mp.mpf]:
    """F(k) of N_Z(0, sigma2) at DPS digits."""
    tail, z = _gaussian_tails(sigma2)
    end = len(tail) - 1
    with mp.workdps(DPS + 10):
        return [tail[min(-k, end)] / z if k < 0 else 1 - tail[min(k + 1, end)] / z for k in ks]


def laplace_g(scale: Fraction, m: int) -> mp.mpf:
    """G(m) = P(X <= -m) = q^m / (1 + q), q = exp(-1/scale)."""
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        return q**m / (1 + q)


def laplace_cdf(scale: Fraction, k: int) -> mp.mpf:
    with mp.workdps(DPS + 10):
        return laplace_g(scale, -k) if k < 0 else 1 - laplace_g(scale, k + 1)


def difference_cdf(scale: Fraction, width: int) -> list[mp.mpf]:
    """F(k), k = -W .. W-1, of D = R1 - R2 with P(r) ~ q^r on 0 <= r < W: brute force over the W^2 pairs."""
    with mp.workdps(DPS + 10):
        q = mp.exp(-1 / _mpq(scale))
        pd = {d: mp.mpf(0) for d in range(-width + 1, width)}
        for r1 in range(width):
            for r2 in range(width):
                pd[r1 - r2] += q ** (r1 + r2)
        z = mp.fsum(pd.values())
        out, acc = [], mp.mpf(0)
        for k in range(-width, width - 1):
            acc += pd.get(k, mp.mpf(0))
            out.append(acc / z)
        return [*out, mp.mpf(1)]  # F(W - 1) = 1 exactly


def assert_encloses(lo: int, value: mp.mpf, hi: int, prec: int, what: object) -> None:
    """lo <= value 2^prec <= hi, up to mpmath's own rounding (10^-(DPS-10) relative: no bound is that close)."""
    with mp.workdps(DPS + 10):
        v, slack = value * mp.mpf(2) ** prec, mp.mpf(2) ** prec * mp.mpf(10) ** (10 - DPS)
        assert lo - slack <= v <= hi + slack, (what, lo, mp.nstr(v, 40), hi)


def widen_exp_neg(monkeypatch: pytest.MonkeyPatch, bits_above_prec: int, prec: int) -> None:
    """Make ``exp_neg`` return bounds 2^(bits_above_prec - prec) wider on each side (still valid enclosures).

    The 64 guard bits normally hide which side of an enclosure a bound was built from; widened inputs make
    a lower bound built from an upper one (or the reverse) show at ``prec`` bits.
    """
    real = nc.exp_neg

    def wide(num: int, den: int, w: int) -> tuple[int, int]:
        lo, hi = real(num, den, w)
        if num == 0:
            return lo, hi
        delta = 1 << (w - prec + bits_above_prec)
        return max(lo - delta, 0), min(hi + delta, 1 << w)

    monkeypatch.setattr(nc, "exp_neg", wide)


def brute_locate(lo: Callable[[int], int], hi: Callable[[int], int], ks: range, value: int, shift: int) -> int | None:
    """The docstring's rule read literally: X = k is certain iff F(k-1) <= U* < F(k) for every U* in the cell,
    i.e. hi(k-1) <= value 2^shift and (value + 1) 2^shift <= lo(k); k ranges over ``ks``."""
    below, above = value << shift, (value + 1) << shift
    found = [k for k in ks if hi(k - 1) <= below and above <= lo(k)]
    assert len(found) <= 1
    return found[0] if found else None
