"""Independent references for the accounting contract tests: exact ``Fraction`` helpers and mpmath at 80 digits
(CKS20 Corollary 13 and its inverse), rounded up with ``Fraction`` arithmetic as pipeline.dp.accounting documents.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath as mp

REF_DPS = 80
MARGIN = Fraction(1, 10**40)  # the documented cover for mpmath's own rounding
EPS_SLACK = Fraction(1e-15)  # epsilon_cks20's documented relative margin (the float 1e-15, exactly)


# ---------------------------------------------------------------- exact helpers (no mpmath rounding involved)


def exact(x: Any) -> Fraction:
    """The exact rational value of a float, int, Fraction or numeric string."""
    return Fraction(x) if not isinstance(x, float) else Fraction(*x.as_integer_ratio())


def mpf_to_fraction(x: mp.mpf) -> Fraction:
    """The exact value of an mpf (whatever the working precision now: no re-rounding)."""
    sign, man, exp, _ = x._mpf_  # (mpf.man_exp drops the sign)
    return (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)


def mpf_of(q: Fraction) -> mp.mpf:
    return mp.mpf(q.numerator) / q.denominator


def ceil_float(q: Fraction) -> float:
    """The smallest float >= q (Fraction -> float rounds to nearest, exactly)."""
    f = float(q)
    return math.nextafter(f, math.inf) if Fraction(f) < q else f


def reported(x: mp.mpf | Fraction, slack: Fraction = Fraction(0)) -> float:
    """What the module must report for the exact bound x: the smallest float >= x + |x| (slack + 1e-40)."""
    q = x if isinstance(x, Fraction) else mpf_to_fraction(x)
    return ceil_float(q + abs(q) * (slack + MARGIN))


def simplest_by_search(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in [lo, hi] (smallest numerator among those), by trying
    denominators 1, 2, ... in turn (for intervals whose answer has a modest denominator)."""
    q = 1
    while True:
        p = -(-lo.numerator * q // lo.denominator)  # ceil(lo q)
        if Fraction(p, q) <= hi:
            return Fraction(p, q)
        q += 1


def simplest_by_stern_brocot(lo: Fraction, hi: Fraction) -> Fraction:
    """The first fraction in [lo, hi] met going down the Stern-Brocot tree (the simplest one), 0 < lo <= hi;
    runs of moves in one direction are taken in one step."""
    (lp, lq), (rp, rq) = (0, 1), (1, 0)
    while True:
        mp_, mq = lp + rp, lq + rq
        if Fraction(mp_, mq) < lo:  # go right: left <- left + k right, the largest k staying below lo
            k = math.ceil((lo * lq - lp) / (rp - lo * rq)) - 1
            lp, lq = lp + k * rp, lq + k * rq
        elif Fraction(mp_, mq) > hi:  # go left: right <- right + k left, the largest k staying above hi
            k = math.ceil((rp - hi * rq) / (hi * lq - lp)) - 1
            rp, rq = rp + k * lp, rq + k * lq
        else:
            return Fraction(mp_, mq)


def window(top: Fraction) -> tuple[Fraction, Fraction]:
    """rho_for_epsilon_delta's documented window below the largest admissible rho."""
    return top * (1 - Fraction(1, 10**6)), top * (1 - Fraction(1, 10**12))


# ---------------------------------------------------------------- mpmath references at 80 digits


def root(f: Callable[[mp.mpf], mp.mpf], lo: mp.mpf, hi: mp.mpf) -> mp.mpf:
    """The root of f between lo and hi (signs differ), by mpmath's Illinois (regula falsi) solver."""
    assert f(lo) < 0 < f(hi)
    return mp.findroot(f, (lo, hi), solver="illinois", verify=False, maxsteps=500)


def ref_delta_cks20(rho: Any, epsilon: Any) -> mp.mpf:
    """CKS20 Corollary 13: delta = inf_a exp((a-1)(a rho - eps)) / (a-1) (1 - 1/a)^a, minimised where the
    derivative of its log, (2a-1) rho - eps + ln(1 - 1/a), vanishes."""
    with mp.workdps(REF_DPS):
        r, e = mpf_of(exact(rho)), mpf_of(exact(epsilon))
        hi = max(mp.mpf(2), (e + 1) / r + 1)  # (2a-1) r >= a r >= e + 1 > e + ln 2 there: the slope is positive
        a = root(lambda a: (2 * a - 1) * r - e + mp.log(1 - 1 / a), 1 + mp.mpf(10) ** -20, hi)
        return +(mp.exp((a - 1) * (a * r - e)) / (a - 1) * (1 - 1 / a) ** a)


def ref_epsilon_cks20(rho: Any, delta: Any) -> mp.mpf:
    """min_a a rho + (ln(1/delta) + (a-1) ln(1 - 1/a) - ln a) / (a-1), CKS20 Corollary 13 solved for epsilon;
    the minimum is where rho (a-1)^2 = ln(1/delta) - ln a."""
    with mp.workdps(REF_DPS):
        r, lg = mpf_of(exact(rho)), -mp.log(mpf_of(exact(delta)))
        hi = 2 + mp.sqrt(lg / r)  # r (a-1)^2 > lg >= lg - ln a there
        a = root(lambda a: r * (a - 1) ** 2 - lg + mp.log(a), 1 + mp.mpf(10) ** -20, hi)
        eps = a * r + (lg + (a - 1) * mp.log(1 - 1 / a) - mp.log(a)) / (a - 1)
        for nearby in (a * (1 - mp.mpf(10) ** -9), a * (1 + mp.mpf(10) ** -9)):  # it is a minimum
            assert nearby * r + (lg + (nearby - 1) * mp.log(1 - 1 / nearby) - mp.log(nearby)) / (nearby - 1) > eps
        return +eps


def ref_rho_max(epsilon: float, delta: float) -> Fraction:
    """The largest rho with ref_epsilon_cks20(rho, delta) = epsilon, by inverting the conversion."""
    with mp.workdps(REF_DPS):
        e = mpf_of(exact(epsilon))
        hi = mp.mpf(1)
        while ref_epsilon_cks20(mpf_to_fraction(hi), delta) < e:
            hi *= 4
        return mpf_to_fraction(root(lambda x: ref_epsilon_cks20(mpf_to_fraction(x), delta) - e, hi / 10**9, hi))
