"""Certified enclosures of the discrete Gaussian CDF, in integer arithmetic: the numbers behind ``noise_table``.

For X ~ N_Z(0, sigma2), P(x) = w_|x| / Z with w_j = exp(-j^2 / (2 sigma2)) and Z = w_0 + 2 sum_{j>=1} w_j,
let F(k) = P(X <= k) and G(m) = P(X <= -m) = S(m) / Z with S(m) = sum_{j>=m} w_j; by symmetry
F(k) = 1 - G(k + 1) for k >= 0.  ``cdf_enclosure(sigma2, prec)`` returns integers with
lo <= F(k) * 2^prec <= hi for every k in [-(J+1), J], where J is where the tail beyond is below 2^-prec.

Why the enclosure is certain.  No floating-point number and no library elementary function is used: every
quantity is a Python integer standing for a real number times 2^w, and each operation is an exact integer
product or sum followed by a floor (for a lower bound) or a ceiling (for an upper bound), so by induction
every lower bound is <= the real value and every upper bound is >= it.  The only transcendental input is
exp, taken from its Taylor series with an explicit bound on the truncated remainder (``_exp_series``).
The infinite sum Z is cut at J with the tail bounded by a geometric series whose ratio provably dominates
the true ratios (``cdf_enclosure``).  Widths are checked in tests (a few units of 2^-prec), and the bounds
are compared with mpmath at 100 digits -- as a cross-check only; correctness does not rest on mpmath.
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

_GUARD = 64  # working bits beyond prec: absolute rounding errors grow like J * sigma2 units (< 2^50 here)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _exp_series(num: int, den: int, g: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(x) * 2^g <= hi for x = num/den in [0, 1].

    Terms t_k = x^k / k! are built by t_k = t_{k-1} * num / (den * k), floored for the lower sum and
    ceiled for the upper one.  Truncation after term k leaves sum_{i>k} x^i/i! <= t_k * sum_{i>=1}
    (x/(k+1))^i <= t_k / k <= t_k for x <= 1, so adding the upper t_k once more bounds the remainder.
    """
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
    """(lo, hi) with 0 <= lo <= exp(-num/den) * 2^w <= hi <= 2^w, for integers num >= 0, den > 0.

    x = n + f with n = floor(x): exp(-x) = exp(-1)^n * exp(-f), each factor an enclosure of 1/exp(.) from
    ``_exp_series`` (floor(2^2g / hi) <= 2^2g / e <= ceil(2^2g / lo)), multiplied with ``_mul``.  Values are
    <= 1, so rounding errors stay additive (a few units of 2^-g each); 32 guard bits absorb them before the
    final outward rounding to w bits.  If x >= 0.7 w > w ln 2, exp(-x) < 2^-w and (0, 1) is returned.
    """
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
        """X = min{k : U* < F(k)} if it is certain for every U* in [value, value + 1) / 2^bits, else None.

        a counts boundaries surely <= U* (hi <= value 2^(prec-bits)); c counts those not surely > U*
        (lo < (value + 1) 2^(prec-bits)).  If a == c every boundary in range is decided; a >= 1 also decides
        every k below the range (F is nondecreasing) and a <= 2J+1 leaves a boundary above U* in range.
        """
        if bits > self.prec:
            raise ValueError("value has more bits than the enclosure's precision")
        shift, j = self.prec - bits, self.jmax
        idx = range(2 * j + 2)  # index t stands for k = t - (J+1)
        a = bisect.bisect_right(idx, value << shift, key=lambda t: self.hi(t - j - 1))
        c = bisect.bisect_left(idx, (value + 1) << shift, key=lambda t: self.lo(t - j - 1))
        return a - j - 1 if a == c and 1 <= a <= 2 * j + 1 else None


def cdf_enclosure(sigma2: Fraction, prec: int) -> CdfEnclosure:
    """Certified bounds of the discrete Gaussian CDF at ``prec`` bits (module docstring: why they are certain).

    Weights: w_0 = 1; w_{j+1} = w_j r_j with r_j = exp(-(2j+1)/(2 sigma2)) = c d^j, c = exp(-1/(2 sigma2)),
    d = exp(-1/sigma2), so each step is two enclosure products.  Tail: the ratios r_i decrease, so
    sum_{i>=J+1} w_i <= w_{J+1} / (1 - r_{J+1}); J is the first index where that bound is <= 2^-prec.
    Then S(m) is a reverse cumulative sum (the tail bound added to the upper sums), Z = 1 + 2 S(1), and
    G(m) = S(m) / Z is enclosed by [floor(S_lo 2^prec / Z_hi), ceil(S_hi 2^prec / Z_lo)].
    """
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
