"""Certified enclosures of the discrete Gaussian and Laplace CDFs, in integer arithmetic: the numbers behind the tables.

Integers lo <= F(k) 2^prec <= hi, F the CDF; G(m) = P(X <= -m), so F(k) = 1 - G(k + 1) for k >= 0.  They are certain:
every quantity is an integer standing for a real times 2^w, every operation an exact product or sum then a floor
(lower bound) or ceiling (upper bound), and no float or library function is used (docs/sampling.md).
"""

from __future__ import annotations

import bisect
import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

_GUARD = 64  # working bits beyond prec: absolute rounding errors grow like J * sigma2 units (< 2^50 here)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _exp_series(num: int, den: int, g: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(x) * 2^g <= hi for x = num/den in [0, 1]: Taylor terms floored for lo, ceiled for hi;
    the remainder after term k is <= t_k / k <= t_k (x <= 1), so the upper t_k is added once more."""
    t_lo = t_hi = s_lo = s_hi = 1 << g
    k = 0
    while t_hi > 1 or k < 2:
        k += 1
        t_lo = t_lo * num // (den * k)
        t_hi = _ceil_div(t_hi * num, den * k)
        s_lo += t_lo
        s_hi += t_hi
    return s_lo, s_hi + t_hi


def _mul(a: tuple[int, int], b: tuple[int, int], g: int) -> tuple[int, int]:
    """Enclosure of the product of two nonnegative numbers held as g-bit fixed-point enclosures."""
    return (a[0] * b[0]) >> g, _ceil_div(a[1] * b[1], 1 << g)


def exp_neg(num: int, den: int, w: int) -> tuple[int, int]:
    """(lo, hi) with 0 <= lo <= exp(-num/den) * 2^w <= hi <= 2^w for integers num >= 0, den > 0: exp(-1)^floor(x)
    exp(-frac(x)), each 1/``_exp_series`` rounded outward, 32 guard bits; (0, 1) once x >= 0.7 w > w ln 2."""
    if num == 0:
        return 1 << w, 1 << w
    if 10 * num >= 7 * w * den:
        return 0, 1
    g = w + 32
    whole, rem = divmod(num, den)
    lo, hi = _exp_series(rem, den, g)
    result = ((1 << 2 * g) // hi, _ceil_div(1 << 2 * g, lo))
    if whole:
        lo, hi = _exp_series(1, 1, g)
        base = ((1 << 2 * g) // hi, _ceil_div(1 << 2 * g, lo))
        while whole:  # square-and-multiply on enclosures
            if whole & 1:
                result = _mul(result, base, g)
            base = _mul(base, base, g)
            whole >>= 1
    return result[0] >> (g - w), min(_ceil_div(result[1], 1 << (g - w)), 1 << w)


@dataclass(frozen=True, eq=False)
class CdfEnclosure:
    """g_lo[m-1] <= G(m) * 2^prec <= g_hi[m-1] for m = 1 .. J+1, both nonincreasing in m; G(J+1) < 2^-prec."""

    sigma2: Fraction
    prec: int
    g_lo: list[int]
    g_hi: list[int]

    @cached_property
    def nbytes(self) -> int:
        """Memory held: the two lists and their integers."""
        return sum(sys.getsizeof(g) + sum(map(sys.getsizeof, g)) for g in (self.g_lo, self.g_hi))

    @property
    def jmax(self) -> int:
        return len(self.g_lo) - 1

    def lo(self, k: int) -> int:
        """Lower bound of F(k) * 2^prec, -(J+1) <= k <= J."""
        return self.g_lo[-k - 1] if k < 0 else (1 << self.prec) - self.g_hi[k]

    def hi(self, k: int) -> int:
        """Upper bound of F(k) * 2^prec, -(J+1) <= k <= J."""
        return self.g_hi[-k - 1] if k < 0 else (1 << self.prec) - self.g_lo[k]

    def locate(self, value: int, bits: int) -> int | None:
        """X = min{k : U* < F(k)} if it is certain for every U* in [value, value + 1) / 2^bits, else None: a counts
        boundaries surely <= U*, c those not surely > U*; a == c in [1, 2J+1] decides every k (F nondecreasing)."""
        if bits > self.prec:
            raise ValueError("value has more bits than the enclosure's precision")
        shift, j = self.prec - bits, self.jmax
        idx = range(2 * j + 2)  # index t stands for k = t - (J+1)
        a = bisect.bisect_right(idx, value << shift, key=lambda t: self.hi(t - j - 1))
        c = bisect.bisect_left(idx, (value + 1) << shift, key=lambda t: self.lo(t - j - 1))
        return a - j - 1 if a == c and 1 <= a <= 2 * j + 1 else None


def cdf_enclosure(sigma2: Fraction, prec: int) -> CdfEnclosure:
    """Certified bounds of the discrete Gaussian CDF at ``prec`` bits, for k in [-(J+1), J]: w_{j+1} = w_j r_j with
    decreasing ratios r_j = c d^j, so the tail beyond J, <= w_{J+1} / (1 - r_{J+1}), is below 2^-prec."""
    p, q = sigma2.numerator, sigma2.denominator
    w = prec + _GUARD
    one = 1 << w
    c = exp_neg(q, 2 * p, w)
    d = exp_neg(q, p, w)
    w_lo, w_hi = [one], [one]
    r_lo, r_hi = c
    target = 1 << (w - prec)
    while True:
        n_lo, n_hi = (w_lo[-1] * r_lo) >> w, _ceil_div(w_hi[-1] * r_hi, one)  # w_{j+1}
        r_lo, r_hi = (r_lo * d[0]) >> w, _ceil_div(r_hi * d[1], one)  # r_{j+1}
        if r_hi < one:
            tail = _ceil_div(n_hi * one, one - r_hi)  # >= sum_{i >= j+1} w_i
            if tail <= target:
                break
        w_lo.append(n_lo)
        w_hi.append(n_hi)
    jmax = len(w_lo) - 1
    s_lo, s_hi = [0] * (jmax + 2), [0] * (jmax + 2)  # index m: S(m) for m = 0 .. J+1 (index 0 unused)
    s_hi[jmax + 1] = tail
    for m in range(jmax, 0, -1):
        s_lo[m] = s_lo[m + 1] + w_lo[m]
        s_hi[m] = s_hi[m + 1] + w_hi[m]
    z_lo, z_hi = one + 2 * s_lo[1], one + 2 * s_hi[1]
    full = 1 << prec
    g_lo = [(s << prec) // z_hi for s in s_lo[1:]]
    g_hi = [min(_ceil_div(s << prec, z_lo), full) for s in s_hi[1:]]
    enc = CdfEnclosure(sigma2, prec, g_lo, g_hi)
    if enc.lo(-1) > enc.lo(0) or enc.hi(-1) > enc.hi(0):  # G(1) < 1/2 - P(0)/2: only if widths exceed P(0)
        raise ArithmeticError(f"CDF enclosure at {prec} bits too wide for sigma2 = {sigma2}")
    return enc


# The discrete Laplace, q = exp(-1/scale): G(m) = P(X <= -m) = q^m / (1 + q) for m >= 0 (docs/sampling.md).


def _laplace_g(qm: tuple[int, int], q: tuple[int, int], w: int, prec: int) -> tuple[int, int]:
    """Enclosure of G(m) 2^prec = q^m 2^prec / (1 + q), from w-bit enclosures of q^m and q (outward rounding)."""
    full = 1 << prec
    return (qm[0] << prec) // ((1 << w) + q[1]), min(_ceil_div(qm[1] << prec, (1 << w) + q[0]), full)


def laplace_g_bounds(scale: Fraction, prec: int, mmax: int) -> tuple[list[int], list[int]]:
    """(g_lo, g_hi) with g_lo[m-1] <= G(m) 2^prec <= g_hi[m-1] for m = 1 .. mmax (the table builder's path); q^m by
    recurrence on (prec + 64)-bit enclosures, rounded outward: errors < 2^-40 of 2^-prec for mmax < 2^20."""
    t, s = scale.numerator, scale.denominator  # 1/scale = s/t
    w = prec + _GUARD
    one = 1 << w
    q = exp_neg(s, t, w)
    p_lo, p_hi = q
    g_lo, g_hi = [], []
    for _ in range(mmax):
        lo, hi = _laplace_g((p_lo, p_hi), q, w, prec)
        g_lo.append(lo)
        g_hi.append(hi)
        p_lo, p_hi = (p_lo * q[0]) >> w, min(_ceil_div(p_hi * q[1], one), one)
    return g_lo, g_hi


class LaplaceCdf:
    """Certified bounds of the discrete Laplace CDF at ``prec`` bits for *every* k, on demand: refinement's enclosure
    (``CdfEnclosure.locate``'s contract); a float only chooses where ``locate`` starts, integer bounds decide."""

    _MEMO_MAX = 4096

    def __init__(self, scale: Fraction, prec: int) -> None:
        self.scale, self.prec = scale, prec
        self._w = prec + _GUARD
        self._t, self._s = scale.numerator, scale.denominator
        self._q = exp_neg(self._s, self._t, self._w)
        self._memo: dict[int, tuple[int, int]] = {}

    @property
    def nbytes(self) -> int:
        return 4096 + self._MEMO_MAX * (3 * sys.getsizeof(1 << self.prec) + 64)  # the memo at its cap

    def g(self, m: int) -> tuple[int, int]:
        """(lo, hi) of G(m) 2^prec, m >= 1."""
        got = self._memo.get(m)
        if got is None:
            if len(self._memo) >= self._MEMO_MAX:
                self._memo.clear()
            got = self._memo[m] = _laplace_g(exp_neg(m * self._s, self._t, self._w), self._q, self._w, self.prec)
        return got

    def lo(self, k: int) -> int:
        return self.g(-k)[0] if k < 0 else (1 << self.prec) - self.g(k + 1)[1]

    def hi(self, k: int) -> int:
        return self.g(-k)[1] if k < 0 else (1 << self.prec) - self.g(k + 1)[0]

    def _hint(self, value: int, bits: int) -> int:
        """Roughly min{k : U* < F(k)} for U* ~ value / 2^bits, from floats (only a starting point)."""
        log_q = -self._s / self._t
        half = value < 1 << (bits - 1)
        rest = value if half else (1 << bits) - value  # U* or 1 - U*, times 2^bits
        log_u = (math.log(rest) if rest > 0 else -1.0) - bits * math.log(2) + math.log1p(math.exp(log_q))
        level = log_u / log_q  # F(-m) = q^m / (1 + q) = U*  (left) or 1 - F(k) = q^(k+1) / (1 + q) (right)
        if not math.isfinite(level):
            return 0
        return -max(math.ceil(level) - 1, 0) if half else max(math.floor(level), 0)

    def locate(self, value: int, bits: int) -> int | None:
        """X = min{k : U* < F(k)} if certain for every U* in [value, value + 1) / 2^bits, else None: from the hint,
        step (doubling) down or up while that is certain, then X = k iff F(k-1) <= U* < F(k) is certain."""
        if bits > self.prec:
            raise ValueError("value has more bits than the enclosure's precision")
        shift = self.prec - bits
        below, above = value << shift, (value + 1) << shift
        k = self._hint(value, bits)
        lo_k, hi_k = None, None  # bracket: X > lo_k and X <= hi_k once known
        step = 1
        while True:
            if above <= self.lo(k - 1):  # X <= k - 1
                hi_k = k - 1
                k = k - step if lo_k is None else max((lo_k + hi_k + 1) // 2, lo_k + 1)
            elif self.hi(k) <= below:  # X >= k + 1
                lo_k = k
                k = k + step if hi_k is None else (lo_k + hi_k + 1) // 2
            else:
                return k if self.hi(k - 1) <= below and above <= self.lo(k) else None
            step *= 2
            if lo_k is not None and hi_k is not None:
                k = min(max(k, lo_k + 1), hi_k)


def laplace_cdf(scale: Fraction, prec: int) -> LaplaceCdf:
    return LaplaceCdf(scale, prec)


def laplace_difference_enclosure(param: tuple[Fraction, int], prec: int) -> CdfEnclosure:
    """Certified CDF of D = R1 - R2, R1, R2 iid with P(r) ~ q^r on 0 <= r < W (q = exp(-1/scale)): weights
    q^|d| - q^(2W - |d|) for |d| < W, rounded outward, then as ``cdf_enclosure``; J = W - 1 covers the support."""
    scale, width = param
    t, s = scale.numerator, scale.denominator
    w = prec + _GUARD
    one = 1 << w
    q = exp_neg(s, t, w)
    p_lo, p_hi = [one], [one]
    for _ in range(2 * width):
        p_lo.append((p_lo[-1] * q[0]) >> w)
        p_hi.append(min(_ceil_div(p_hi[-1] * q[1], one), one))
    w_lo = [max(p_lo[j] - p_hi[2 * width - j], 0) for j in range(width)]
    w_hi = [p_hi[j] - p_lo[2 * width - j] for j in range(width)]
    s_lo, s_hi = [0] * (width + 1), [0] * (width + 1)  # index m: S(m), m = 0 .. W (S(W) = 0)
    for m in range(width - 1, 0, -1):
        s_lo[m] = s_lo[m + 1] + w_lo[m]
        s_hi[m] = s_hi[m + 1] + w_hi[m]
    z_lo, z_hi = w_lo[0] + 2 * s_lo[1], w_hi[0] + 2 * s_hi[1]
    full = 1 << prec
    g_lo = [(x << prec) // z_hi for x in s_lo[1:]]
    g_hi = [min(_ceil_div(x << prec, z_lo), full) for x in s_hi[1:]]
    return CdfEnclosure(param, prec, g_lo, g_hi)  # type: ignore[arg-type]  (the label is (scale, W) here)
