"""Contract tests of pipeline.dp.accounting, written against independent computations.

Every float the module reports is "rounded up": the smallest float >= x * (1 + slack + 1e-40), x the exact bound
(module docstring, ``_up``).  The references below compute x with mpmath at 80 digits (or exactly with
``Fraction``) and round with ``Fraction`` arithmetic, so a reported value must equal the reference exactly; a
value one ulp low would understate a privacy loss.  Errors must be one ``ValueError`` line that names the
offending parameter and the admissible range.  Theorem numbers refer to the seed chapter (shared/seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.dp import accounting
from pipeline.dp.accounting import (
    _real,
    _simplest_between,
    _up,
    advanced_composition,
    advanced_composition_epsilon0,
    basic_composition,
    compose_parallel_zcdp,
    compose_zcdp,
    delta_cks20,
    epsilon_bun_steinke,
    epsilon_cks20,
    group_privacy_epsilon,
    group_privacy_epsilon_delta,
    group_privacy_zcdp,
    renyi_gaussian_epsilon,
    rho_for_epsilon_delta,
    zcdp_from_pure_dp,
)
from pipeline.errors import CensusDPError

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


# ---------------------------------------------------------------- errors: one line naming the parameter


def _calls() -> list[tuple[Callable[[], object], str]]:
    return [
        (lambda: delta_cks20(-1, 0.5), "rho must be in [0.0, inf], got -1"),
        (lambda: delta_cks20(1, -0.5), "epsilon must be in [0.0, inf], got -0.5"),
        (lambda: delta_cks20(True, 0.5), "rho must be a number, got True"),
        (lambda: delta_cks20(1, False), "epsilon must be a number, got False"),
        (lambda: delta_cks20(math.nan, 0.5), "rho must be a finite number, got nan"),
        (lambda: delta_cks20(1, math.inf), "epsilon must be a finite number, got inf"),
        (lambda: delta_cks20(1, -math.inf), "epsilon must be a finite number, got -inf"),
        (lambda: delta_cks20(None, 0.5), "rho must be a finite number, got None"),
        (lambda: delta_cks20(Decimal("0.5"), 0.5), "rho must be a finite number, got Decimal('0.5')"),
        (lambda: delta_cks20(Fraction(-1, 3), 0.5), "rho must be in [0.0, inf], got -1/3"),
        (lambda: delta_cks20("-1/3", 0.5), "rho must be in [0.0, inf], got -1/3"),
        (lambda: delta_cks20(np.float64(-0.5), 0.5), "rho must be in [0.0, inf], got -0.5"),
        (lambda: delta_cks20(np.int64(-2), 0.5), "rho must be in [0.0, inf], got -2"),
        (lambda: epsilon_cks20(1, 0.0), "delta must be in (0.0, 1.0), got 0.0"),
        (lambda: epsilon_cks20(1, 1), "delta must be in (0.0, 1.0), got 1"),
        (lambda: epsilon_cks20(1, 1.0), "delta must be in (0.0, 1.0), got 1.0"),
        (lambda: epsilon_cks20(-0.5, 0.1), "rho must be in [0.0, inf], got -0.5"),
        (lambda: epsilon_bun_steinke(1, 0), "delta must be in (0.0, 1.0), got 0"),
        (lambda: epsilon_bun_steinke(1, 1.0), "delta must be in (0.0, 1.0), got 1.0"),
        (lambda: epsilon_bun_steinke(-1, 0.5), "rho must be in [0.0, inf], got -1"),
        (lambda: rho_for_epsilon_delta(0.0, 1e-6), "epsilon must be in (0.0, inf], got 0.0"),
        (lambda: rho_for_epsilon_delta(-1.0, 1e-6), "epsilon must be in (0.0, inf], got -1.0"),
        (lambda: rho_for_epsilon_delta(1.0, 0.0), "delta must be in (0.0, 1.0), got 0.0"),
        (lambda: rho_for_epsilon_delta(1.0, 1.0), "delta must be in (0.0, 1.0), got 1.0"),
        (lambda: zcdp_from_pure_dp(-0.5), "epsilon must be in [0.0, inf], got -0.5"),
        (lambda: zcdp_from_pure_dp(math.inf), "epsilon must be a finite number, got inf"),
        (lambda: zcdp_from_pure_dp(Fraction(-1, 2)), "epsilon must be >= 0, got -1/2"),
        (lambda: zcdp_from_pure_dp(-1), "epsilon must be >= 0, got -1"),
        (lambda: zcdp_from_pure_dp("-1/2"), "epsilon must be >= 0, got -1/2"),
        (lambda: compose_zcdp([Fraction(1), Fraction(-1)]), "rhos[1] must be >= 0, got -1"),
        (lambda: compose_parallel_zcdp([Fraction(1), 2, Fraction(-1)]), "rhos[2] must be >= 0, got -1"),
        (lambda: basic_composition([0.1, -0.1], [0, 0]), "epsilons[1] must be in [0.0, inf], got -0.1"),
        (lambda: basic_composition([0.1, 0.2], [0.0, 1.5]), "deltas[1] must be in [0.0, 1.0], got 1.5"),
        (lambda: basic_composition([0.1], [-0.5]), "deltas[0] must be in [0.0, 1.0], got -0.5"),
        (lambda: basic_composition([0.1], []), "epsilons and deltas must have the same length, got 1 and 0"),
        (lambda: advanced_composition(-0.1, 0, 1, 0.5), "epsilon0 must be in [0.0, inf], got -0.1"),
        (lambda: advanced_composition(0.1, 1.5, 1, 0.5), "delta must be in [0.0, 1.0], got 1.5"),
        (lambda: advanced_composition(0.1, -0.1, 1, 0.5), "delta must be in [0.0, 1.0], got -0.1"),
        (lambda: advanced_composition(0.1, 0, 1, 0.0), "delta_prime must be in (0.0, 1.0), got 0.0"),
        (lambda: advanced_composition(0.1, 0, 1, 1.0), "delta_prime must be in (0.0, 1.0), got 1.0"),
        (lambda: advanced_composition(0.1, 0, 1, 1.5), "delta_prime must be in (0.0, 1.0), got 1.5"),
        (lambda: advanced_composition(0.1, 0, 0, 0.5), "k must be an integer >= 1, got 0"),
        (lambda: advanced_composition_epsilon0(0.0, 1, 0.5), "epsilon_total must be in (0.0, inf], got 0.0"),
        (lambda: advanced_composition_epsilon0(-1.0, 1, 0.5), "epsilon_total must be in (0.0, inf], got -1.0"),
        (lambda: advanced_composition_epsilon0(1.0, 1, 0.0), "delta_prime must be in (0.0, 1.0), got 0.0"),
        (lambda: advanced_composition_epsilon0(1.0, 1, 1.0), "delta_prime must be in (0.0, 1.0), got 1.0"),
        (lambda: advanced_composition_epsilon0(1.0, 1, 2.0), "delta_prime must be in (0.0, 1.0), got 2.0"),
        (lambda: advanced_composition_epsilon0(1.0, True, 0.5), "k must be an integer >= 1, got True"),
        (lambda: renyi_gaussian_epsilon(1, 0.0, 0.5), "sigma must be in (0.0, inf], got 0.0"),
        (lambda: renyi_gaussian_epsilon(1, -1.0, 0.5), "sigma must be in (0.0, inf], got -1.0"),
        (lambda: renyi_gaussian_epsilon(1, 1.0, 0.0), "delta must be in (0.0, 1.0), got 0.0"),
        (lambda: renyi_gaussian_epsilon(1, 1.0, 1.0), "delta must be in (0.0, 1.0), got 1.0"),
        (lambda: renyi_gaussian_epsilon(1, 1.0, 1.5), "delta must be in (0.0, 1.0), got 1.5"),
        (lambda: renyi_gaussian_epsilon(1, 1.0, 0.5, -1.0), "sensitivity2 must be in [0.0, inf], got -1.0"),
        (lambda: renyi_gaussian_epsilon(2.0, 1.0, 0.5), "k must be an integer >= 1, got 2.0"),  # type: ignore[arg-type]
        (lambda: group_privacy_epsilon(-0.5, 2), "epsilon must be in [0.0, inf], got -0.5"),
        (lambda: group_privacy_epsilon(Fraction(-1, 2), 2), "epsilon must be >= 0, got -1/2"),
        (lambda: group_privacy_epsilon("-1/2", 2), "epsilon must be >= 0, got -1/2"),  # type: ignore[arg-type]
        (lambda: group_privacy_epsilon(1, 0), "k must be an integer >= 1, got 0"),
        (lambda: group_privacy_epsilon_delta(-0.5, 0.1, 2), "epsilon must be in [0.0, inf], got -0.5"),
        (lambda: group_privacy_epsilon_delta(0.5, 1.5, 2), "delta must be in [0.0, 1.0], got 1.5"),
        (lambda: group_privacy_epsilon_delta(0.5, 0.1, -1), "k must be an integer >= 1, got -1"),
        (lambda: group_privacy_zcdp(-0.5, 2), "rho must be in [0.0, inf], got -0.5"),
        (lambda: group_privacy_zcdp(Fraction(-1, 2), 2), "rho must be >= 0, got -1/2"),
        (lambda: group_privacy_zcdp(1, "3"), "k must be an integer >= 1, got '3'"),  # type: ignore[arg-type]
        (lambda: group_privacy_zcdp(1, False), "k must be an integer >= 1, got False"),
    ]


@pytest.mark.parametrize(("call", "message"), _calls(), ids=[m for _, m in _calls()])
def test_invalid_input_is_one_line_naming_parameter_and_range(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "call",
    [
        lambda: epsilon_cks20(1, 0.999999),  # delta just inside (0, 1)
        lambda: epsilon_cks20(1, 5e-324),
        lambda: delta_cks20(0, 0),  # the closed ends [0, inf) of rho and epsilon
        lambda: basic_composition([0.0], [1.0]),  # delta = 1 is a (vacuous) valid delta
        lambda: advanced_composition(0.0, 1.0, 1, 0.5),
        lambda: group_privacy_epsilon_delta(0.0, 1.0, 1),
        lambda: renyi_gaussian_epsilon(1, 1.0, 0.5, 0.0),
        lambda: zcdp_from_pure_dp(0.0),
        lambda: group_privacy_zcdp(0.0, 1),
        lambda: group_privacy_epsilon(0.0, 1),
    ],
)
def test_boundary_values_are_accepted(call: Callable[[], object]) -> None:
    call()


# ---------------------------------------------------------------- _real and _up, the two primitives


def test_real_converts_every_accepted_type_exactly() -> None:
    with mp.workdps(50):
        third = mp.mpf(1) / 3
        assert _real(Fraction(1, 3), "x") == third and _real("1/3", "x") == third  # not the float 1/3
        assert _real(np.int64(7), "x") == 7 and _real(np.float64(0.25), "x") == mp.mpf(0.25)
        assert _real(10**30, "x") == mp.mpf(10) ** 30
        assert _real(0.1, "x") == mp.mpf(0.1)  # the float's exact binary value
        assert _real(1, "x", high=1.0) == 1 and _real(0, "x") == 0
        for value in (1.0, 1, Fraction(1)):  # the closed upper end is admissible, the open one is not
            assert _real(value, "x", high=1.0) == 1
            with pytest.raises(ValueError, match=r"^x must be in \[0\.0, 1\.0\), got 1"):
                _real(value, "x", high=1.0, high_open=True)
        with pytest.raises(ValueError, match=r"^x must be in \(0\.0, inf\], got 0$"):
            _real(0, "x", low_open=True)
        with pytest.raises(ValueError, match=r"^x must be in \[2, 3\], got 1$"):
            _real(1, "x", low=2, high=3)


@pytest.mark.parametrize("slack", [Fraction(0), EPS_SLACK])
@pytest.mark.parametrize(
    "value",
    [Fraction(1, 3), Fraction(1, 2), Fraction(0), Fraction(-1, 3), Fraction(10**20 + 1), Fraction(1, 10**300),
     Fraction(1, 2) * (1 - Fraction(5, 10**41)), 3 * (1 - Fraction(2, 10**41))],  # just below a float: the 1e-40
)                                                                                # margin carries them over it
def test_up_is_the_smallest_float_above_the_margin(value: Fraction, slack: Fraction) -> None:
    with mp.workdps(50):
        assert _up(mpf_of(value), float(slack)) == reported(value, slack)
        assert _up(mp.mpf(0.5)) == math.nextafter(0.5, 1)  # an exact float still moves up: the 1e-40 cover


# ---------------------------------------------------------------- CKS20 and Bun-Steinke conversions


CKS20_CASES = [(0.05, 0.25), (0.5, 1.0), (2.0, 3.0), (Fraction(1, 3), 0.5), (1e-4, 0.01), (10.0, 20.0), (30.0, 1.0)]


@pytest.mark.parametrize(("rho", "epsilon"), CKS20_CASES)
def test_delta_cks20_is_the_rounded_up_infimum(rho: Any, epsilon: float) -> None:
    """CKS20 Corollary 13 against an independent 80-digit minimisation."""
    assert delta_cks20(rho, epsilon) == min(1.0, reported(ref_delta_cks20(rho, epsilon)))


def test_delta_cks20_is_capped_at_one_and_zero_at_rho_zero() -> None:
    # the infimum is 1 - O(e^-100) here: rounded up it would be 1.0000000000000002 without the cap
    assert delta_cks20(100, 0) == 1.0 and delta_cks20(1000.0, 0.0) == 1.0
    assert delta_cks20(0, 0) == 0.0 and delta_cks20(0, 5) == 0.0 and delta_cks20(Fraction(0), 0.5) == 0.0


EPS_CASES = [(1, 1e-6), (0.5, 1e-10), (Fraction(1, 3), 1e-6), (0.01, 1e-5), (5.0, 1e-12), (0.2, 0.3), (2, 0.5),
             (100.0, 1e-300)]


@pytest.mark.parametrize(("rho", "delta"), EPS_CASES)
def test_epsilon_cks20_is_the_rounded_up_minimum(rho: Any, delta: float) -> None:
    """CKS20 Corollary 13 solved for epsilon (with its 1e-15 margin) against an 80-digit minimisation."""
    expected = reported(ref_epsilon_cks20(rho, delta), EPS_SLACK)
    assert expected > 0
    assert epsilon_cks20(rho, delta) == expected
    assert delta_cks20(rho, expected) <= delta


def test_epsilon_cks20_is_zero_when_rho_alone_gives_the_delta() -> None:
    """Tiny rho gives (0, delta)-DP for a large delta: the unclamped minimum is negative, the report is 0."""
    assert ref_epsilon_cks20(1e-6, 0.9) < 0 and ref_epsilon_cks20(1e-3, 0.3) < 0
    assert epsilon_cks20(1e-3, 0.3) == 0.0
    assert epsilon_cks20(1e-6, 0.9) == 0.0 and epsilon_cks20(0, 1e-10) == 0.0 and epsilon_cks20(0.0, 0.5) == 0.0


@pytest.mark.parametrize(("rho", "delta"), [(0.5, 1e-10), (Fraction(1, 3), 1e-6), (2, 0.5), (0, 0.5)])
def test_epsilon_bun_steinke_is_rounded_up(rho: Any, delta: float) -> None:
    with mp.workdps(REF_DPS):
        r = mpf_of(exact(rho))
        expected = reported(r + 2 * mp.sqrt(r * -mp.log(mpf_of(exact(delta)))))
    assert epsilon_bun_steinke(rho, delta) == expected


# ---------------------------------------------------------------- rho for an (epsilon, delta) target


def bounded_conversion(limit: int) -> Callable[[Any, float], float]:
    """epsilon_cks20, failing the test after ``limit`` calls (rho_for_epsilon_delta needs one in practice)."""
    calls = 0

    def counted(rho: Any, delta: float) -> float:
        nonlocal calls
        calls += 1
        assert calls <= limit, "rho_for_epsilon_delta does not settle"
        return epsilon_cks20(rho, delta)

    return counted


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (2.0, 1e-10), (0.3, 1e-9), (10.0, 1e-3)])
def test_rho_for_epsilon_delta_is_the_simplest_fraction_just_below_the_largest_rho(
        monkeypatch: pytest.MonkeyPatch, epsilon: float, delta: float) -> None:
    """The documented answer: the smallest-denominator fraction in [R (1 - 1e-6), R (1 - 1e-12)], R the
    largest rho whose CKS20 epsilon at delta is epsilon (found here by inverting the conversion)."""
    monkeypatch.setattr(accounting, "epsilon_cks20", bounded_conversion(1))
    rho = rho_for_epsilon_delta(epsilon, delta)
    assert rho == simplest_by_stern_brocot(*window(ref_rho_max(epsilon, delta)))
    assert epsilon_cks20(rho, delta) <= epsilon


@pytest.mark.parametrize(
    ("above", "expected"),
    [(Fraction(0), Fraction(500000, 1000001)),  # the round trip of rho = 1/2 stays below 1/2 ...
     (Fraction(6, 10**13), Fraction(500000, 1000001)),  # ... and so does a maximum 6e-13 above it (the margin)
     (Fraction(15, 10**13), Fraction(1, 2))],  # 1.5e-12 above 1/2: 1/2 is in the window and admissible
)
def test_rho_for_epsilon_delta_keeps_its_margin_below_the_largest_rho(monkeypatch: pytest.MonkeyPatch,
                                                                     above: Fraction, expected: Fraction) -> None:
    """Targets whose largest rho is 1/2 (1 + above): the window [R (1 - 1e-6), R (1 - 1e-12)] holds 1/2 only when
    R is more than 1e-12 above it.  The margin absorbs the rounding-up of epsilons (docstring)."""
    delta = 1e-10
    if above:
        epsilon = float(ref_epsilon_cks20(Fraction(1, 2) * (1 + above), delta))  # to nearest: R within 1e-15
    else:
        epsilon = epsilon_cks20(Fraction(1, 2), delta)
    top = ref_rho_max(epsilon, delta)
    assert abs(top / (Fraction(1, 2) * (1 + above)) - 1) < Fraction(1, 10**14)
    monkeypatch.setattr(accounting, "epsilon_cks20", bounded_conversion(1))
    rho = rho_for_epsilon_delta(epsilon, delta)
    assert rho == simplest_by_stern_brocot(*window(top)) == expected
    assert epsilon_cks20(rho, delta) <= epsilon


def _fallback_schedule(first_lo: Fraction, first_hi: Fraction, admissible: Callable[[Fraction], bool]) -> Fraction:
    """The documented retry: after a refused candidate, search [min(lo, hi'(1 - 1e-6)), hi'] with
    hi' = candidate (1 - 1e-12)."""
    lo, hi = first_lo, first_hi
    while True:
        rho = simplest_by_stern_brocot(lo, hi)
        if admissible(rho):
            return rho
        hi = rho * (1 - Fraction(1, 10**12))
        lo = min(lo, hi * (1 - Fraction(1, 10**6)))


@pytest.mark.parametrize("refuse_below", [Fraction(1), 1 - Fraction(1, 10**7), 1 - Fraction(2, 10**6)])
def test_rho_for_epsilon_delta_retries_below_a_refused_candidate(monkeypatch: pytest.MonkeyPatch,
                                                                  refuse_below: Fraction) -> None:
    """The final check ("the definition, with the same rounding reports use") is never failed by the real
    conversion, so a stricter stand-in refuses candidates: the answer must still pass the check and be the
    next candidate of the documented schedule, never above a refused one."""
    epsilon, delta = 1.0, 1e-6
    first = rho_for_epsilon_delta(epsilon, delta)
    top = ref_rho_max(epsilon, delta)
    threshold = first * refuse_below  # refuse `first` itself, or everything down to 1e-7 / 2e-6 below it
    calls: list[Fraction] = []

    def stricter(rho: Fraction, d: float) -> float:
        calls.append(rho)
        assert len(calls) < 100, "rho_for_epsilon_delta does not settle"
        assert d == delta
        return epsilon if rho < threshold else math.nextafter(epsilon, math.inf)

    monkeypatch.setattr(accounting, "epsilon_cks20", stricter)
    rho = rho_for_epsilon_delta(epsilon, delta)
    expected = _fallback_schedule(*window(top), lambda r: r < threshold)
    assert rho == expected and rho < threshold and len(calls) >= 2 and calls[0] == first
    assert all(c >= threshold for c in calls[:-1]) and calls[-1] == rho
    assert rho >= threshold * (1 - Fraction(3, 10**6))  # it does not give away more than the margins


def test_rho_for_epsilon_delta_retry_window_ends_just_below_the_refused_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round trip of rho = 3/4 at delta = 1e-10 with its first candidate refused: the retry searches up to
    1e-12 below the refused candidate, and here that end point decides the answer (2e-12 would give another)."""
    delta = 1e-10
    epsilon = epsilon_cks20(Fraction(3, 4), delta)
    first = rho_for_epsilon_delta(epsilon, delta)
    lo, _ = window(ref_rho_max(epsilon, delta))
    calls: list[Fraction] = []

    def refuse_first(rho: Fraction, d: float) -> float:
        calls.append(rho)
        assert len(calls) < 100, "rho_for_epsilon_delta does not settle"
        return epsilon if rho < first else math.nextafter(epsilon, math.inf)

    monkeypatch.setattr(accounting, "epsilon_cks20", refuse_first)
    rho = rho_for_epsilon_delta(epsilon, delta)
    hi = first * (1 - Fraction(1, 10**12))
    assert rho == simplest_by_stern_brocot(min(lo, hi * (1 - Fraction(1, 10**6))), hi) == Fraction(125003, 166671)
    assert calls == [first, rho]
    lower = first * (1 - Fraction(2, 10**12))
    assert simplest_by_stern_brocot(min(lo, lower * (1 - Fraction(1, 10**6))), lower) != rho


def test_rho_for_tiny_epsilon_is_positive_and_admissible() -> None:
    rho = rho_for_epsilon_delta(1e-30, 1e-10)  # a tiny rho already gives (0, 1e-10)-DP (see above)
    assert 0 < rho < Fraction(1, 10**19) and epsilon_cks20(rho, 1e-10) == 0.0


@settings(max_examples=60, deadline=None)
@given(lo_num=st.integers(1, 10**6), lo_den=st.integers(1, 10**4), width=st.fractions(0, 1, max_denominator=10**6))
def test_simplest_between_has_the_smallest_denominator(lo_num: int, lo_den: int, width: Fraction) -> None:
    lo = Fraction(lo_num, lo_den)
    hi = lo + width
    assert _simplest_between(lo, hi) == simplest_by_search(lo, hi) == simplest_by_stern_brocot(lo, hi)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [(Fraction(3), Fraction(3), 3), (Fraction(1, 2), Fraction(3, 2), 1),
     (Fraction(3, 10), Fraction(2, 5), Fraction(1, 3)), (Fraction(5, 2), Fraction(7, 2), 3),
     (Fraction(7, 3), Fraction(7, 3), Fraction(7, 3)),
     (Fraction(2), Fraction(9, 2), 2), (Fraction(1, 1000), Fraction(1, 999), Fraction(1, 999))],
)
def test_simplest_between_examples(lo: Fraction, hi: Fraction, expected: Fraction) -> None:
    assert _simplest_between(lo, hi) == expected


# ---------------------------------------------------------------- exact compositions of zCDP budgets


def test_zcdp_compositions_are_exact_and_accept_zero() -> None:
    """Thm 19.37(i) (rho adds) and the parallel max (Prop 19.30); a zero rho is a valid (free) mechanism."""
    assert compose_zcdp([Fraction(0), Fraction(1, 3), "1/6", 2]) == Fraction(5, 2)
    assert compose_zcdp([]) == 0 and compose_zcdp([0]) == 0
    assert compose_parallel_zcdp([Fraction(0), Fraction(1, 3), "1/2"]) == Fraction(1, 2)
    assert compose_parallel_zcdp([0, 0]) == 0 and compose_parallel_zcdp(iter([Fraction(2, 7)])) == Fraction(2, 7)
    assert isinstance(compose_parallel_zcdp([]), Fraction)


@pytest.mark.parametrize(
    ("epsilon", "expected"),
    [(Fraction(1, 3), Fraction(1, 18)), ("1/3", Fraction(1, 18)), (3, Fraction(9, 2)), (0, 0), ("0", 0)],
)
def test_zcdp_from_pure_dp_is_exact_for_exact_input(epsilon: Any, expected: Fraction) -> None:
    """Bun & Steinke 2016 Prop 1.4: epsilon-DP is epsilon^2/2-zCDP; exact input gives an exact Fraction."""
    result = zcdp_from_pure_dp(epsilon)
    assert result == expected and isinstance(result, Fraction)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.7, 1e-200, 0.0])
def test_zcdp_from_pure_dp_rounds_floats_up(epsilon: float) -> None:
    assert zcdp_from_pure_dp(epsilon) == reported(exact(epsilon) ** 2 / 2)


# ---------------------------------------------------------------- pure-DP composition and group privacy


def test_basic_composition_sums_exactly_and_rounds_up() -> None:
    """Thm 19.26: (sum epsilon_j, sum delta_j), the sums exact, then rounded up; delta capped at 1."""
    eps, dels = [0.1, 0.2, 0.3, 1e-9], [1e-6, 0.0, 2e-6, 0.25]
    assert basic_composition(eps, dels) == (reported(sum(map(exact, eps), Fraction(0))),
                                            reported(sum(map(exact, dels), Fraction(0))))
    assert basic_composition(iter([0.5]), iter([0.5])) == (reported(Fraction(1, 2)), reported(Fraction(1, 2)))
    assert basic_composition([0.0, 0.0], [0.6, 0.7]) == (0.0, 1.0)
    assert basic_composition([0.0], [1.0]) == (0.0, 1.0) and basic_composition([], []) == (0.0, 0.0)


@pytest.mark.parametrize(("epsilon0", "delta", "k", "delta_prime"),
                         [(0.1, 1e-8, 10, 1e-6), (0.5, 0.0, 1, 0.5), (2.0, 0.25, 3, 0.125), (0.0183, 1e-9, 100, 1e-6)])
def test_advanced_composition_is_theorem_19_27_rounded_up(epsilon0: float, delta: float, k: int,
                                                          delta_prime: float) -> None:
    with mp.workdps(REF_DPS):
        e0 = mpf_of(exact(epsilon0))
        eps = mp.sqrt(2 * k * -mp.log(mpf_of(exact(delta_prime)))) * e0 + k * e0 * (mp.exp(e0) - 1)
    expected_delta = min(1.0, reported(k * exact(delta) + exact(delta_prime)))
    assert advanced_composition(epsilon0, delta, k, delta_prime) == (reported(eps), expected_delta)


def test_advanced_composition_caps_delta_at_one() -> None:
    assert advanced_composition(0.1, 0.5, 3, 0.5)[1] == 1.0 and advanced_composition(0.1, 1.0, 1, 0.5)[1] == 1.0


def bounded_calls(composition: Callable[[float, float, int, float], tuple[float, float]]
                  ) -> Callable[[float, float, int, float], tuple[float, float]]:
    """The composition, failing the test instead of looping for ever (the search needs a handful of calls)."""
    calls = 0

    def counted(epsilon0: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
        nonlocal calls
        calls += 1
        assert calls < 1000, "advanced_composition_epsilon0 does not terminate"
        return composition(epsilon0, delta, k, delta_prime)

    return counted


@pytest.mark.parametrize(("epsilon_total", "k", "delta_prime"),
                         [(1.0, 100, 1e-6), (0.5, 7, 1e-3), (3.0, 1, 0.5), (10.0, 2, 0.1), (1e-3, 1000, 1e-9),
                          (2.0, 50, 1e-8), (0.25, 3, 0.01), (5.0, 10, 1e-4), (0.1, 1, 0.9)])
def test_advanced_composition_epsilon0_is_the_largest_admissible_float(monkeypatch: pytest.MonkeyPatch,
                                                                       epsilon_total: float, k: int,
                                                                       delta_prime: float) -> None:
    """The returned epsilon0 composes (Thm 19.27, as reported) to at most epsilon_total, and the next float up
    does not: nothing is given away and nothing is overspent."""
    monkeypatch.setattr(accounting, "advanced_composition", bounded_calls(accounting.advanced_composition))
    e0 = advanced_composition_epsilon0(epsilon_total, k, delta_prime)
    assert advanced_composition(e0, 0.0, k, delta_prime)[0] <= epsilon_total
    assert advanced_composition(math.nextafter(e0, math.inf), 0.0, k, delta_prime)[0] > epsilon_total


@pytest.mark.parametrize("extra_ulps", [1, 3, 40])
def test_advanced_composition_epsilon0_steps_down_until_admissible(monkeypatch: pytest.MonkeyPatch,
                                                                   extra_ulps: int) -> None:
    """The final loop makes the contract hold whatever the bisection returned: with a stand-in composition that
    reports a few ulps more, the answer is still the largest float the (stand-in) composition admits."""
    real = accounting.advanced_composition

    def pessimistic(epsilon0: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
        eps, d = real(epsilon0, delta, k, delta_prime)
        for _ in range(extra_ulps):
            eps = math.nextafter(eps, math.inf)
        return eps, d

    pessimistic = bounded_calls(pessimistic)

    unpatched = advanced_composition_epsilon0(1.0, 100, 1e-6)
    expected = unpatched
    while pessimistic(expected, 0.0, 100, 1e-6)[0] > 1.0:
        expected = math.nextafter(expected, 0.0)
    assert expected < unpatched or extra_ulps < 40  # 40 ulps more always moves the answer down
    monkeypatch.setattr(accounting, "advanced_composition", pessimistic)
    e0 = advanced_composition_epsilon0(1.0, 100, 1e-6)
    assert e0 == expected
    assert pessimistic(math.nextafter(e0, math.inf), 0.0, 100, 1e-6)[0] > 1.0


@pytest.mark.parametrize(("k", "sigma", "delta", "sensitivity2"),
                         [(100, 10.0, 1e-6, 1.0), (3, 2.0, 1e-5, 1.5), (1, 0.5, 0.25, 2.0), (7, 30.0, 1e-9, 0.5)])
def test_renyi_gaussian_epsilon_is_theorem_19_37(k: int, sigma: float, delta: float, sensitivity2: float) -> None:
    """Thm 19.37 (i)-(iii): k alpha Delta^2/(2 sigma^2) + ln(1/delta)/(alpha-1) at the optimal alpha (a float),
    evaluated at that float and rounded up."""
    with mp.workdps(REF_DPS):
        d, s, lg = mpf_of(exact(sensitivity2)), mpf_of(exact(sigma)), -mp.log(mpf_of(exact(delta)))
        per_alpha = k * d * d / (2 * s * s)
        alpha = float(1 + mp.sqrt(lg / per_alpha))
        a = mpf_of(exact(alpha))
        expected = reported(per_alpha * a + lg / (a - 1))
    assert renyi_gaussian_epsilon(k, sigma, delta, sensitivity2) == (expected, alpha)


def test_renyi_gaussian_epsilon_with_zero_sensitivity_is_free() -> None:
    assert renyi_gaussian_epsilon(5, 1.0, 0.5, 0.0) == (0.0, math.inf)
    assert renyi_gaussian_epsilon(5, 1.0, 0.5, 0) == (0.0, math.inf)


def test_group_privacy_is_theorem_19_31_rounded_up() -> None:
    """Thm 19.31 (epsilon and (epsilon, delta)) and Bun-Steinke Prop 1.9 (rho k^2); exact input stays exact."""
    assert group_privacy_epsilon(0.1, 3) == reported(exact(0.1) * 3)
    assert group_privacy_epsilon(Fraction(2, 7), 3) == Fraction(6, 7)
    assert group_privacy_epsilon("1/2", 5) == Fraction(5, 2)  # type: ignore[arg-type]
    assert group_privacy_epsilon(2, 3) == 6 and group_privacy_epsilon(0, 4) == 0
    assert group_privacy_epsilon(0.0, 4) == 0.0
    assert group_privacy_epsilon(np.float64(0.1), 3) == reported(exact(0.1) * 3)
    assert group_privacy_zcdp(0.1, 3) == reported(exact(0.1) * 9)
    assert group_privacy_zcdp(Fraction(2, 7), 3) == Fraction(18, 7) and group_privacy_zcdp("1/3", 2) == Fraction(4, 3)
    assert group_privacy_zcdp(0, 4) == 0 and group_privacy_zcdp(Fraction(1, 5), 1) == Fraction(1, 5)
    for epsilon, delta, k in [(0.5, 1e-8, 3), (0.3, 0.01, 2), (2.0, 1e-6, 1), (1.5, 1e-10, 4)]:
        with mp.workdps(REF_DPS):
            e = mpf_of(exact(epsilon))
            expected_delta = min(1.0, reported(k * mp.exp((k - 1) * e) * mpf_of(exact(delta))))
        assert group_privacy_epsilon_delta(epsilon, delta, k) == (reported(k * exact(epsilon)), expected_delta)
    assert group_privacy_epsilon_delta(1.0, 0.2, 3) == (reported(Fraction(3)), 1.0)  # 3 e^2 0.2 > 1: capped


def test_a_ledger_cap_from_epsilon_delta_is_the_exact_conversion() -> None:
    """``cap_from_epsilon_delta``: the ledger's cap for an (epsilon, delta) target is ``rho_for_epsilon_delta``
    exactly (a Fraction), and an impossible target is one line naming the ledger, no traceback text."""
    for epsilon, delta in ((1.0, 1e-10), (2.5, 1e-6), (0.1, 0.5), (2.0, 1e-9)):
        cap = accounting.cap_from_epsilon_delta(epsilon, delta)
        assert type(cap) is Fraction and cap == accounting.rho_for_epsilon_delta(epsilon, delta)
        assert accounting.epsilon_cks20(cap, delta) <= epsilon
    with pytest.raises(CensusDPError) as info:
        accounting.cap_from_epsilon_delta(-1.0, 1e-9)
    text = str(info.value)
    assert "\n" not in text and text.startswith("ledger: cannot build a rho cap: ") and "epsilon" in text, text
