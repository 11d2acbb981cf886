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

from censusdp.pipeline.dp.accounting import (
    UNITS_LOSS_FACTOR,
    _real,
    _up,
    advanced_composition,
    basic_composition,
    compose_zcdp,
    delta_cks20,
    epsilon_bun_steinke,
    epsilon_cks20,
    group_privacy_zcdp,
    per_person_rho,
    rho_for_epsilon_delta,
    zcdp_from_pure_dp,
)
from tests.helpers.accounting_reference import (
    EPS_SLACK,
    REF_DPS,
    exact,
    mpf_of,
    ref_delta_cks20,
    ref_epsilon_cks20,
    reported,
)

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
        lambda: zcdp_from_pure_dp(0.0),
        lambda: group_privacy_zcdp(0.0, 1),
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


def test_the_per_person_bound_adds_four_times_the_units_rho() -> None:
    """A person's change moves every units query by at most twice its calibrated sensitivity: 4 rho_units at most
    (a Laplace query's), added to the persons' rho; without units, the persons' rho alone."""
    assert per_person_rho(Fraction(4), Fraction(1, 2)) == Fraction(6)
    assert per_person_rho(Fraction(4), None) == Fraction(4)
    assert per_person_rho(Fraction(0), Fraction(1, 3)) == Fraction(4, 3)
    assert per_person_rho(Fraction(2, 7), Fraction(0)) == Fraction(2, 7) and UNITS_LOSS_FACTOR == 4
