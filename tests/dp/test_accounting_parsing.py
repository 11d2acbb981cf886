"""Exact inputs of the accountant go through ``pipeline.exact.parse_rational``: an error names the parameter."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest

from censusdp.pipeline.dp.accounting import (
    compose_zcdp,
    delta_cks20,
    group_privacy_zcdp,
    zcdp_from_pure_dp,
)
from censusdp.pipeline.errors import ExactNumberError

EXACT = "such as '0.5', '1/4' or '1e-3'"


@pytest.mark.parametrize(("call", "name", "text"), [
    (lambda: zcdp_from_pure_dp("abc"), "epsilon", "abc"),
    (lambda: compose_zcdp([Fraction(1), "2", "x/y"]), "rhos[2]", "x/y"),
    (lambda: group_privacy_zcdp("r", 2), "rho", "r"),
])
def test_malformed_exact_inputs_name_the_parameter(call: Callable[[], object], name: str, text: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        call()
    assert str(info.value) == f"{name}: not an exact number {EXACT}: {text!r}"


def test_compose_refuses_a_float_by_its_position() -> None:
    for compose in (compose_zcdp,):
        with pytest.raises(ExactNumberError) as info:
            compose([Fraction(1, 2), 0.25])
        assert info.value.name == "rhos[1]"


def test_real_inputs_name_the_parameter_when_not_numbers() -> None:
    with pytest.raises(ValueError, match=r"^rho must be a number, got 'abc'$"):
        delta_cks20("abc", 1.0)
    assert zcdp_from_pure_dp("1/2") == Fraction(1, 8)
