"""The one parser of exact numbers and deltas, and directed rounding (``pipeline.exact``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from censusdp.pipeline.directed_rounding import _exponent10, round_text
from censusdp.pipeline.errors import CensusDPError, ExactNumberError
from censusdp.pipeline.exact import parse_delta, parse_rational

EXACT = "such as '0.5', '1/4' or '1e-3'"


@pytest.mark.parametrize(("value", "expected"), [
    ("25/4", Fraction(25, 4)), (" 0.5 ", Fraction(1, 2)), ("1e-3", Fraction(1, 1000)), ("-2", Fraction(-2)),
    (3, Fraction(3)), (np.int64(3), Fraction(3)), (np.uint8(7), Fraction(7)), (Fraction(2, 3), Fraction(2, 3)),
    (10**30, Fraction(10**30)),
])
def test_exact_values_parse_exactly(value: object, expected: Fraction) -> None:
    got = parse_rational(value, "x")
    assert got == expected and type(got) is Fraction


@pytest.mark.parametrize(("value", "kind"), [
    (0.5, "float"), (np.float64(0.5), "float64"), (True, "bool"), (np.bool_(True), "bool"), (None, "NoneType"),
    ([1], "list"), (b"1", "bytes"),
])
def test_inexact_types_are_refused_naming_the_parameter(value: object, kind: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        parse_rational(value, "sigma2")
    assert str(info.value) == (f"sigma2: must be exact (a Fraction, an integer or a string {EXACT}), got {kind}")
    assert info.value.name == "sigma2" and isinstance(info.value, CensusDPError | ValueError)


@pytest.mark.parametrize("text", ["abc", "1/0", "nan", "", "inf", "1/2/3"])
def test_malformed_strings_are_refused_naming_the_parameter(text: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        parse_rational(text, "budget.rho")
    assert str(info.value) == f"budget.rho: not an exact number {EXACT}: {text!r}"
    assert info.value.problem == f"not an exact number {EXACT}: {text!r}"


def test_floats_as_written_reads_a_toml_float_as_its_decimal() -> None:
    assert parse_rational(0.1, "x", floats_as_written=True) == Fraction(1, 10)  # not the binary 0.1000000000000000055
    assert parse_rational(np.float64(2.56), "x", floats_as_written=True) == Fraction(256, 100)
    assert parse_rational(1e-300, "x", floats_as_written=True) == Fraction(1, 10**300)
    assert parse_rational("3/7", "x", floats_as_written=True) == Fraction(3, 7)
    for value in (float("nan"), float("inf")):
        with pytest.raises(ExactNumberError, match="^x: not an exact number"):
            parse_rational(value, "x", floats_as_written=True)
    with pytest.raises(ExactNumberError, match="got bool$"):
        parse_rational(True, "x", floats_as_written=True)


@pytest.mark.parametrize(("value", "expected"), [
    ("1e-10", 1e-10), (" 1e-6 ", 1e-6), (0.5, 0.5), (Fraction(1, 4), 0.25), (np.float32(0.25), 0.25),
    ("5e-324", 5e-324), ("0.9999999", 0.9999999),
])
def test_deltas_strictly_between_0_and_1(value: object, expected: float) -> None:
    got = parse_delta(value, "--delta")
    assert got == expected and type(got) is float


@pytest.mark.parametrize(("value", "shown"), [
    ("0", "'0'"), ("1", "'1'"), (0, "0"), (1, "1"), (0.0, "0.0"), (1.0, "1.0"), ("-1e-5", "'-1e-5'"),
    ("nan", "'nan'"), ("inf", "'inf'"), ("x", "'x'"), ("1/4", "'1/4'"), ("", "''"),
    (10**400, "an integer of over 40 digits"),
    (Fraction(3, 2), "Fraction(3, 2)"),
])
def test_other_deltas_are_refused_naming_the_parameter(value: object, shown: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        parse_delta(value, "budget.delta")
    assert str(info.value) == f"budget.delta: must be a number strictly between 0 and 1, got {shown}"


@pytest.mark.parametrize(("value", "kind"), [(True, "bool"), (False, "bool"), (np.bool_(False), "bool"),
                                             (None, "NoneType"), ([0.5], "list")])
def test_deltas_of_other_types_are_refused_by_type(value: object, kind: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        parse_delta(value, "--delta")
    assert str(info.value) == f"--delta: must be a number strictly between 0 and 1, got {kind}"


def test_round_text_is_exact_and_directed() -> None:
    third = Fraction(1, 3)
    assert round_text(third, up=True, significant=6) == "0.333334"
    assert round_text(third, up=False, significant=6) == "0.333333"
    assert round_text(Fraction(2, 3), up=False, places=4) == "0.6666"
    assert round_text(-third, up=True, places=2) == "-0.33"
    assert round_text(-third, up=False, places=2) == "-0.34"
    assert round_text(123456789, up=True, significant=3) == "124000000"
    assert round_text(0.1, up=True, significant=6) == "0.100001"  # the float 0.1 is above one tenth
    assert round_text(Fraction(1, 2), up=True, significant=6, strip=True) == "0.5"
    assert round_text(0, up=True, significant=6, strip=True) == "0"
    assert round_text(float("inf"), up=True, places=4) == "inf"
    with pytest.raises(ValueError):
        round_text(float("nan"), up=True, places=4)
    with pytest.raises(ValueError):
        round_text(third, up=True)


@pytest.mark.parametrize(("value", "options", "expected"), [
    (Fraction(7), {"up": True, "significant": 1}, "7"),
    (Fraction(15, 2), {"up": True, "significant": 1}, "8"),
    (Fraction(15, 2), {"up": False, "significant": 1}, "7"),
    (0, {"up": False, "significant": 3}, "0.00"),
    (float("-inf"), {"up": False, "places": 2}, "-inf"),
    (Fraction(1, 4), {"up": True, "places": 4, "strip": True}, "0.25"),
    (Fraction(1, 4), {"up": True, "places": 4}, "0.2500"),
    (Fraction(-1, 10**9), {"up": True, "places": 2, "strip": True}, "0"),
    (Fraction(-1, 10**9), {"up": False, "places": 2}, "-0.01"),
    (12345, {"up": False, "significant": 2}, "12000"),
    (Fraction(999, 1000), {"up": True, "significant": 2}, "1.00"),
    (Fraction(1, 10**12), {"up": True, "significant": 2}, "0.0000000000010"),
    (Fraction(10**5), {"up": True, "significant": 1, "strip": True}, "100000"),
    (Fraction(3, 2), {"up": False, "places": 0}, "1"),
    (Fraction(1, 10), {"up": True, "significant": 2}, "0.10"),  # exactly a power of ten
    (Fraction(10**6), {"up": False, "significant": 2}, "1000000"),
    (Fraction(999999, 10**6), {"up": False, "significant": 2}, "0.99"),
    (0, {"up": True, "places": 3, "strip": True}, "0"),
])
def test_round_text_cases(value: object, options: dict, expected: str) -> None:
    assert round_text(value, **options) == expected  # type: ignore[arg-type]


def test_round_text_refuses_what_it_cannot_round_safely() -> None:
    for options, message in (({"significant": 0}, "significant must be >= 1, got 0"),
                             ({"places": 2, "significant": 2}, "give exactly one of places or significant"),
                             ({}, "give exactly one of places or significant")):
        with pytest.raises(ValueError) as info:
            round_text(Fraction(1, 3), up=True, **options)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(ValueError, match="^cannot round NaN in a safe direction$"):
        round_text(float("nan"), up=False, significant=3)


@given(st.fractions(min_value=Fraction(1, 10**40), max_value=Fraction(10**40)))
def test_exponent10_brackets_the_value(value: Fraction) -> None:
    e = _exponent10(value)
    assert Fraction(10) ** e <= value < Fraction(10) ** (e + 1)


@pytest.mark.parametrize(("text", "accepted"), [
    ("1e1000", True), ("1E-1000", True), ("1e+1000", True), ("1" * 400, True), (" 2.5e3 ", True),
    ("1e1001", False), ("1e-1001", False), ("1E+1001", False), ("1e99999999", False), ("1" * 401, False),
    ("1/3e2000", False),
])
def test_hostile_texts_are_refused_before_they_are_built(text: str, accepted: bool) -> None:
    """Fraction("1e99999999") would build a 10^8-digit integer; texts and exponents are bounded first."""
    if accepted:
        assert parse_rational(text, "rho") == Fraction(text.strip())
        return
    with pytest.raises(ExactNumberError) as info:
        parse_rational(text, "rho")
    assert str(info.value) == f"rho: longer than 400 characters or an exponent beyond ±1000: {text[:40]!r}"


@pytest.mark.parametrize(("value", "shown"), [
    (10**40, "an integer of over 40 digits"), (-(10**40), "an integer of over 40 digits"),
    (10**40 - 1, str(10**40 - 1)), pytest.param(10**5000, "an integer of over 40 digits", id="10^5000"),
    ("0.5" + "x" * 70, repr("0.5" + "x" * 70)[:60]),
])
def test_refused_deltas_are_shown_briefly(value: object, shown: str) -> None:
    with pytest.raises(ExactNumberError) as info:
        parse_delta(value, "d")
    assert str(info.value) == f"d: must be a number strictly between 0 and 1, got {shown}"


def test_complex_deltas_are_refused_by_type() -> None:
    for value in (np.complex128(0.5), 0.5j):
        with pytest.raises(ExactNumberError, match="got complex"):
            parse_delta(value, "d")
