"""Privacy accounting: composing budgets and converting zCDP to (epsilon, delta) for reports.

zCDP (Def 19.36): rho adds (Thm 19.37(i)) and is the max over disjoint parts (as Prop 19.30).  Reports use CKS20
Corollary 13, with Bun-Steinke and the pure-DP tools (Thm 19.26, 19.27, 19.31) alongside.  Fractions stay exact;
conversions run in mpmath at 50 digits and round the safe way: an epsilon or delta up (any order alpha gives a valid
bound, so an imperfect optimiser errs safely too), a rho derived from a target down.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from fractions import Fraction

import mpmath as mp

from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.exact import parse_rational

_DPS = 50
_BISECTIONS = 220  # halves a bracket of width <= 2^64 to below 10^-45

Number = Fraction | int | float


def _real(
    value: Number | str,
    name: str,
    *,
    low: float = 0.0,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> mp.mpf:
    """A finite number in [low, high] (ends optionally open) as an mpf; ValueError naming ``name``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, (str, Fraction)):
        try:
            value = parse_rational(value, name)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    elif isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
    if not isinstance(value, (int, float, Fraction)) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < low or (low_open and value == low) or value > high or (high_open and value == high):
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo}{low}, {high}{hi}, got {value}")
    if isinstance(value, Fraction):
        return mp.mpf(value.numerator) / value.denominator
    return mp.mpf(value)


def _up(x: mp.mpf, slack: float = 0.0) -> float:
    """The smallest float >= x * (1 + slack + 1e-40) (the 1e-40 covers mpmath's own rounding)."""
    x = x + abs(x) * (mp.mpf(slack) + mp.mpf(10) ** -40)
    f = float(x)
    return math.nextafter(f, math.inf) if mp.mpf(f) < x else f


def _bisect(f: Callable[[mp.mpf], mp.mpf], lo: mp.mpf, hi: mp.mpf) -> mp.mpf:
    """Root of an increasing f with f(lo) < 0 <= f(hi)."""
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return hi


def _bracket_above(f: Callable[[mp.mpf], mp.mpf], start: mp.mpf) -> mp.mpf:
    hi = start
    while f(hi) < 0:
        hi *= 2
    return hi


def delta_cks20(rho: Number, epsilon: float) -> float:
    """delta such that rho-zCDP implies (epsilon, delta)-DP (CKS20 Corollary 13), rounded up: the inf over alpha > 1
    of exp((alpha-1)(alpha rho - epsilon)) / (alpha-1) * (1 - 1/alpha)^alpha, where its log's derivative is 0."""
    with mp.workdps(_DPS):
        r = _real(rho, "rho")
        e = _real(epsilon, "epsilon")
        if r == 0:
            return 0.0

        def slope(a: mp.mpf) -> mp.mpf:
            return (2 * a - 1) * r - e + mp.log1p(-1 / a)

        a = _bisect(slope, mp.mpf(1), _bracket_above(slope, mp.mpf(2)))
        # In logs with log1p: for tiny rho, alpha > 10^50 and (1 - 1/alpha)^alpha would round to 1, not 1/e.
        delta = mp.exp((a - 1) * (a * r - e) - mp.log(a - 1) + a * mp.log1p(-1 / a))
        return min(1.0, _up(delta))


def epsilon_cks20(rho: Number, delta: float) -> float:
    """epsilon such that rho-zCDP implies (epsilon, delta)-DP (CKS20 Corollary 13), rounded up: the min over alpha > 1
    of alpha rho + (ln(1/delta) + (alpha-1) ln(1 - 1/alpha) - ln alpha) / (alpha - 1), with a 1e-15 relative margin
    so that delta_cks20(rho, result) <= delta despite rounding."""
    with mp.workdps(_DPS):
        r = _real(rho, "rho")
        lg = mp.log(1 / _real(delta, "delta", low_open=True, high=1.0, high_open=True))
        if r == 0:
            return 0.0
        a = _bisect(
            lambda a: r * (a - 1) ** 2 - (lg - mp.log(a)),
            mp.mpf(1),
            _bracket_above(lambda a: r * (a - 1) ** 2 - (lg - mp.log(a)), mp.mpf(2)),
        )
        eps = a * r + (lg + (a - 1) * mp.log1p(-1 / a) - mp.log(a)) / (a - 1)
        return max(0.0, _up(eps, slack=1e-15))


def epsilon_bun_steinke(rho: Number, delta: float) -> float:
    """rho + 2 sqrt(rho ln(1/delta)): Bun & Steinke 2016, Prop 1.3 (looser than CKS20), rounded up."""
    with mp.workdps(_DPS):
        r = _real(rho, "rho")
        lg = mp.log(1 / _real(delta, "delta", low_open=True, high=1.0, high_open=True))
        return _up(r + 2 * mp.sqrt(r * lg))


def rho_for_epsilon_delta(epsilon: float, delta: float) -> Fraction:
    """The largest rho (rounded down) whose CKS20 conversion gives at most ``epsilon`` at ``delta``: the sup over
    alpha, rounded down to the fraction with the smallest denominator within 1e-6 (relative) below (so sigma2 is
    cheap to sample exactly), and checked against ``epsilon_cks20``, which rounds up."""
    with mp.workdps(_DPS):
        e = _real(epsilon, "epsilon", low_open=True)
        lg = mp.log(1 / _real(delta, "delta", low_open=True, high=1.0, high_open=True))

        # alpha's optimal rho (lg - ln alpha)/(alpha-1)^2 and its epsilon decrease: solve epsilon = e in ln(alpha-1)
        def excess(u: mp.mpf) -> mp.mpf:
            a = 1 + mp.exp(u)
            rr = (lg - mp.log(a)) / (a - 1) ** 2
            return e - (a * rr + (lg + (a - 1) * mp.log1p(-1 / a) - mp.log(a)) / (a - 1))

        a = 1 + mp.exp(_bisect(excess, mp.mpf(-100), mp.log(mp.exp(lg) - 1)))
        best = (e - ((lg - mp.log(a)) / (a - 1) + mp.log1p(-1 / a))) / a
        exact = Fraction(*best.as_integer_ratio())  # signed: man_exp would drop the sign
    if exact <= 0:
        raise ValueError(f"epsilon = {epsilon} is too small to express a positive rho")
    # a 1e-12 margin: the exact inverse of a rounded-up epsilon_cks20(r, delta) lies a few 1e-16 above r
    lo, hi = exact * (1 - Fraction(1, 10**6)), exact * (1 - Fraction(1, 10**12))
    while True:
        rho = _simplest_between(lo, hi)
        if epsilon_cks20(rho, delta) <= epsilon:  # the definition, with the same rounding reports use
            return rho
        hi = rho * (1 - Fraction(1, 10**12))  # not reached in practice; keeps the contract unconditional
        lo = min(lo, hi * (1 - Fraction(1, 10**6)))


def cap_from_epsilon_delta(epsilon: float, delta: float) -> Fraction:
    """The largest exact rho cap whose CKS20 conversion is at most (epsilon, delta) (``rho_for_epsilon_delta``)."""
    try:
        return rho_for_epsilon_delta(epsilon, delta)
    except ValueError as error:
        raise CensusDPError(f"ledger: cannot build a rho cap: {error}") from None


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in [lo, hi], 0 < lo <= hi (continued fractions)."""
    whole = math.floor(lo)
    if whole == lo or whole + 1 <= hi:
        return Fraction(whole if whole == lo else whole + 1)
    return whole + 1 / _simplest_between(1 / (hi - whole), 1 / (lo - whole))


def zcdp_from_pure_dp(epsilon: Number) -> Fraction | float:
    """epsilon-DP implies epsilon^2/2-zCDP (Bun & Steinke 2016, Prop 1.4); exact for Fraction or int."""
    if isinstance(epsilon, (Fraction, int, str)) and not isinstance(epsilon, bool):
        e = parse_rational(epsilon, "epsilon")
        if e < 0:
            raise ValueError(f"epsilon must be >= 0, got {e}")
        return e * e / 2
    with mp.workdps(_DPS):
        e = _real(epsilon, "epsilon")
        return _up(e * e / 2)


def compose_zcdp(rhos: Iterable[Fraction]) -> Fraction:
    """Sequential (adaptive) composition: rho adds (Thm 19.37(i)).  Exact; floats refused."""
    total = Fraction(0)
    for i, rho in enumerate(rhos):
        r = parse_rational(rho, f"rhos[{i}]")
        if r < 0:
            raise ValueError(f"rhos[{i}] must be >= 0, got {r}")
        total += r
    return total


def basic_composition(epsilons: Iterable[float], deltas: Iterable[float]) -> tuple[float, float]:
    """(sum epsilon_j, sum delta_j) for adaptive composition (Thm 19.26), summed exactly, rounded up."""
    eps, dels = list(epsilons), list(deltas)
    if len(eps) != len(dels):
        raise ValueError(f"epsilons and deltas must have the same length, got {len(eps)} and {len(dels)}")
    with mp.workdps(_DPS):
        e = mp.fsum(_real(x, f"epsilons[{i}]") for i, x in enumerate(eps))
        d = mp.fsum(_real(x, f"deltas[{i}]", high=1.0) for i, x in enumerate(dels))
        return _up(e), min(1.0, _up(d))


def advanced_composition(epsilon0: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
    """k-fold adaptive composition of (epsilon0, delta)-DP (Thm 19.27), rounded up: (epsilon', k delta + delta')."""
    _check_k(k)
    with mp.workdps(_DPS):
        e0 = _real(epsilon0, "epsilon0")
        d = _real(delta, "delta", high=1.0)
        dp = _real(delta_prime, "delta_prime", low_open=True, high=1.0, high_open=True)
        eps = mp.sqrt(2 * k * mp.log(1 / dp)) * e0 + k * e0 * mp.expm1(e0)
        return _up(eps), min(1.0, _up(k * d + dp))


def group_privacy_zcdp(rho: Number, k: int) -> Number:
    """rho-zCDP gives k^2 rho-zCDP for groups of k records (Bun & Steinke 2016, Prop 1.9)."""
    _check_k(k)
    if isinstance(rho, float):
        with mp.workdps(_DPS):
            return _up(_real(rho, "rho") * k * k)
    r = parse_rational(rho, "rho")
    if r < 0:
        raise ValueError(f"rho must be >= 0, got {r}")
    return r * k * k


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


# How many times the units' rho one person's change can cost (``per_person_rho``, where the proof is).
UNITS_LOSS_FACTOR = 4


def per_person_rho(persons_rho: Fraction, units_rho: Fraction | None) -> Fraction:
    """The release's zCDP bound for one person (what the ledger charges and caps, and the manifest states):
    persons_rho + 4 units_rho for datasets that differ in one person's record (the neighbouring relation) and keep
    every invariant either universe publishes (proof: docs/units.md); ``persons_rho`` without a units universe."""
    if units_rho is None:
        return persons_rho
    return persons_rho + UNITS_LOSS_FACTOR * units_rho
