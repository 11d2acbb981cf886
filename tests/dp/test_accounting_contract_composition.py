"""Contract tests of pipeline.dp.accounting, continued: rho for an (epsilon, delta) target, exact zCDP compositions,
pure-DP composition (Thm 19.26, 19.27), Renyi (Thm 19.37) and group privacy (Thm 19.31), each against the
independent references of ``tests.helpers.accounting_reference`` (reported floats rounded up, exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.dp import accounting
from censusdp.pipeline.dp.accounting import (
    _simplest_between,
    advanced_composition,
    basic_composition,
    compose_zcdp,
    epsilon_cks20,
    rho_for_epsilon_delta,
    zcdp_from_pure_dp,
)
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.accounting_reference import (
    REF_DPS,
    exact,
    mpf_of,
    ref_epsilon_cks20,
    ref_rho_max,
    reported,
    simplest_by_search,
    simplest_by_stern_brocot,
    window,
)

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


def test_zcdp_composition_is_exact_and_accepts_zero() -> None:
    """Thm 19.37(i): rho adds; a zero rho is a valid (free) mechanism."""
    assert compose_zcdp([Fraction(0), Fraction(1, 3), "1/6", 2]) == Fraction(5, 2)
    assert compose_zcdp([]) == 0 and compose_zcdp([0]) == 0


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
