"""Tests of pipeline.dp.accounting: published values, the seed chapter's worked examples, conservative
rounding, and monotonicity (hypothesis)."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from censusdp.pipeline.dp import accounting
from censusdp.pipeline.dp.accounting import (
    delta_cks20,
    epsilon_bun_steinke,
    epsilon_cks20,
    group_privacy_zcdp,
    rho_for_epsilon_delta,
    zcdp_from_pure_dp,
)
from censusdp.pipeline.errors import ExactNumberError

RHOS = st.floats(min_value=1e-4, max_value=50.0, allow_nan=False)
DELTAS = st.floats(min_value=1e-15, max_value=0.5, allow_nan=False)


def test_cks20_known_values() -> None:
    assert delta_cks20(0.05, 0.25) == pytest.approx(0.0817727531036956, rel=1e-9)
    eps = epsilon_cks20(0.5, 1e-10)
    assert eps == pytest.approx(6.839329413120849, rel=1e-9)
    assert delta_cks20(0.5, eps) <= 1e-10  # the reported epsilon is never below the true one


def test_bun_steinke_known_values() -> None:
    assert epsilon_bun_steinke(0.5, 1e-10) == pytest.approx(7.286140424415112, rel=1e-9)
    assert epsilon_bun_steinke(1, math.exp(-1)) == pytest.approx(3.0, rel=1e-12)
    assert epsilon_cks20(0.5, 1e-10) < epsilon_bun_steinke(0.5, 1e-10)


def test_exact_fraction_inputs() -> None:
    assert epsilon_cks20(Fraction(1, 2), 1e-10) == epsilon_cks20(0.5, 1e-10)
    assert epsilon_cks20("1/2", 1e-10) == epsilon_cks20(0.5, 1e-10)
    assert epsilon_cks20(0, 1e-10) == 0.0 and delta_cks20(0, 1.0) == 0.0


def test_basic_composition_and_group_privacy() -> None:
    assert accounting.basic_composition([0.1, 0.2, 0.3], [1e-6, 0.0, 2e-6]) == pytest.approx((0.6, 3e-6))
    eps, delta = accounting.basic_composition([0.1] * 10, [0.0] * 10)
    assert eps >= 1.0 and eps == pytest.approx(1.0) and delta == 0.0  # rounded up, never down
    assert group_privacy_zcdp(Fraction(1, 10), 3) == Fraction(9, 10)
    assert group_privacy_zcdp(0.1, 3) >= 0.9 and group_privacy_zcdp(0.1, 3) == pytest.approx(0.9)


def test_zcdp_composition_exact() -> None:
    rhos = [Fraction(1, 3), Fraction(1, 6), Fraction(1, 2)]
    assert accounting.compose_zcdp(rhos) == 1
    assert zcdp_from_pure_dp(Fraction(1, 2)) == Fraction(1, 8) and zcdp_from_pure_dp(1) == Fraction(1, 2)
    assert zcdp_from_pure_dp(0.1) >= 0.005 and zcdp_from_pure_dp(0.1) == pytest.approx(0.005)


def test_rho_for_epsilon_delta_round_trip_known() -> None:
    rho = rho_for_epsilon_delta(epsilon_cks20(Fraction(1, 2), 1e-10), 1e-10)
    assert rho <= Fraction(1, 2) and float(rho) == pytest.approx(0.5, rel=2e-6)
    assert rho.denominator <= 10**7
    assert epsilon_cks20(rho_for_epsilon_delta(1.0, 1e-6), 1e-6) <= 1.0


@settings(max_examples=40, deadline=None)
@given(num=st.integers(1, 5000), den=st.integers(1, 1000), delta=st.floats(1e-15, 0.05))
def test_rho_for_epsilon_delta_round_trip(num: int, den: int, delta: float) -> None:
    r = Fraction(num, den)
    eps = epsilon_cks20(r, delta)
    assume(eps > 0)  # tiny rho with large delta is already (0, delta)-DP; no rho "for" epsilon 0
    back = rho_for_epsilon_delta(eps, delta)
    assert back <= r and back >= r * (1 - Fraction(2, 10**6))
    assert epsilon_cks20(back, delta) <= eps


@settings(max_examples=40, deadline=None)
@given(r1=RHOS, r2=RHOS, delta=DELTAS)
def test_epsilon_increases_with_rho(r1: float, r2: float, delta: float) -> None:
    lo, hi = sorted((r1, r2))
    assert epsilon_cks20(lo, delta) <= epsilon_cks20(hi, delta)
    assert epsilon_bun_steinke(lo, delta) <= epsilon_bun_steinke(hi, delta)


@settings(max_examples=40, deadline=None)
@given(rho=RHOS, d1=DELTAS, d2=DELTAS)
def test_epsilon_decreases_with_delta(rho: float, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    assert epsilon_cks20(rho, lo) >= epsilon_cks20(rho, hi)
    assert epsilon_cks20(rho, lo) <= epsilon_bun_steinke(rho, lo) * (1 + 1e-12)  # CKS20 is the tighter one


@settings(max_examples=40, deadline=None)
@given(rho=RHOS, delta=DELTAS)
def test_epsilon_is_conservative(rho: float, delta: float) -> None:
    """The true delta at the reported epsilon is <= delta (delta_cks20 itself rounds up, by <= 1 ulp)."""
    assert delta_cks20(rho, epsilon_cks20(rho, delta)) <= delta * (1 + 1e-12)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: epsilon_cks20(-1, 1e-6), "rho"),
        (lambda: epsilon_cks20(1, 0.0), "delta"),
        (lambda: epsilon_cks20(1, 1.0), "delta"),
        (lambda: epsilon_cks20(math.nan, 1e-6), "rho"),
        (lambda: delta_cks20(1, -0.5), "epsilon"),
        (lambda: epsilon_bun_steinke(1, 2.0), "delta"),
        (lambda: rho_for_epsilon_delta(0.0, 1e-6), "epsilon"),
        (lambda: rho_for_epsilon_delta(1.0, 0.0), "delta"),
        (lambda: accounting.compose_zcdp([Fraction(1), Fraction(-1)]), "rhos"),
        (lambda: accounting.basic_composition([0.1], [0.1, 0.2]), "same length"),
        (lambda: accounting.advanced_composition(0.1, 0.0, 0, 1e-6), "k"),
        (lambda: group_privacy_zcdp(1, 0), "k"),
        (lambda: group_privacy_zcdp(Fraction(-1), 2), "rho"),
        (lambda: zcdp_from_pure_dp(Fraction(-1, 2)), "epsilon"),
        (lambda: epsilon_cks20(True, 1e-6), "rho"),
    ],
)
def test_validation_errors_name_the_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_compose_refuses_floats() -> None:
    with pytest.raises(ExactNumberError, match=r"^rhos\[0\]: must be exact .*got float$"):
        accounting.compose_zcdp([0.5])


def reference_delta(rho: Fraction | float, epsilon: float) -> mp.mpf:
    """CKS20 Corollary 13's delta at 300 digits, written from the formula (no log1p): at that precision
    1 - 1/alpha is exact enough for every order alpha below 10^250, which covers rho down to 10^-400."""
    with mp.workdps(300):
        r = mp.mpf(rho.numerator) / rho.denominator if isinstance(rho, Fraction) else mp.mpf(rho)
        e = mp.mpf(epsilon)
        lo, hi = mp.mpf(1), mp.mpf(2)
        while (2 * hi - 1) * r - e + mp.log(1 - 1 / hi) < 0:
            hi *= 2
        for _ in range(2000):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if (2 * mid - 1) * r - e + mp.log(1 - 1 / mid) < 0 else (lo, mid)
        return mp.exp((hi - 1) * (hi * r - e)) / (hi - 1) * (1 - 1 / hi) ** hi


TINY_RHOS = [Fraction(1, 10**400), 1e-300, 1e-150, 3.0018652698241398e-102, 1e-60, 1e-20, 1e-8, 0.3, 40.0]


@pytest.mark.parametrize("rho", TINY_RHOS)
@pytest.mark.parametrize("c", [0.0, 0.5, 3.0, 8.0])
def test_delta_is_never_below_the_bound_at_any_rho(rho: Fraction | float, c: float) -> None:
    """At epsilon = c sqrt(rho) (delta ~ sqrt(rho) there, a normal float for every rho listed) the reported delta
    is the 300-digit bound rounded up by at most 1e-12.  1 - 1/alpha evaluated at 50 digits rounds to 1 for
    rho below ~1e-90, which once reported deltas ~20% too small (1.239e-51 for 1.486e-51 at rho = 3e-102,
    epsilon = 1e-60)."""
    epsilon = c * math.sqrt(float(rho))
    ref = reference_delta(rho, epsilon)
    assert mp.mpf(10) ** -300 < ref < 1
    got = delta_cks20(rho, epsilon)
    assert ref <= got <= ref * (1 + mp.mpf(10) ** -12)


@pytest.mark.parametrize("rho", TINY_RHOS)
@pytest.mark.parametrize("delta", [1e-5, 1e-12])
def test_epsilon_holds_at_any_rho(rho: Fraction | float, delta: float) -> None:
    """The 300-digit delta at the reported epsilon is <= delta, and 1e-9 less epsilon would exceed it
    (unless epsilon is 0, reachable when delta is above the bound at epsilon = 0)."""
    eps = epsilon_cks20(rho, delta)
    assert reference_delta(rho, eps) <= delta
    if eps > 0:
        assert reference_delta(rho, eps * (1 - 1e-9)) > delta
    else:
        assert reference_delta(rho, 0.0) <= delta


@pytest.mark.parametrize("epsilon", [1e-300, 1e-30, 1e-3, 2.0])
def test_rho_for_a_target_holds_against_the_reference(epsilon: float) -> None:
    rho = rho_for_epsilon_delta(epsilon, 1e-10)
    assert rho > 0 and reference_delta(rho, epsilon) <= 1e-10


def test_unparseable_budget_names_the_argument() -> None:
    with pytest.raises(ValueError, match="rho must be a number"):
        epsilon_cks20("one half", 1e-6)
