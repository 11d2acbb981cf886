"""Directed rounding for display: a privacy loss is never shown below its value, a noise level never above.

Losses (rho, epsilon, budget shares, expected errors) round up, noise levels (sigma²) down, on the exact ``Fraction``
with integer floor/ceiling (``Decimal`` only writes the result): no intermediate rounding can push a figure wrongly.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction


def float_up(value: Fraction) -> float:
    """The smallest float >= ``value``: a reported loss is never below the exact one."""
    result = float(value)
    return math.nextafter(result, math.inf) if Fraction(result) < value else result


def round_text(value: Fraction | float | int, *, up: bool, places: int | None = None,
               significant: int | None = None, strip: bool = False) -> str:
    """``value`` as a plain decimal (no exponent), rounded up (towards +inf) or down (towards -inf).

    Exactly one of ``places`` (digits after the point) or ``significant`` (>= 1); ``strip`` drops trailing zeros.
    Infinities are already bounds; NaN raises ``ValueError`` (it cannot be rounded in a safe direction).
    """
    if (places is None) == (significant is None):
        raise ValueError("give exactly one of places or significant")
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            raise ValueError("cannot round NaN in a safe direction")
        return str(value)  # "inf" or "-inf": already a bound
    exact = Fraction(value)
    if significant is None:
        shift = int(places)  # type: ignore[arg-type]  # given: exactly one of the two is None (checked above)
    elif significant < 1:
        raise ValueError(f"significant must be >= 1, got {significant}")
    else:
        shift = significant - 1 - _exponent10(abs(exact)) if exact else significant - 1
    scaled = exact * Fraction(10) ** shift
    digits = math.ceil(scaled) if up else math.floor(scaled)
    shown = Decimal(digits).scaleb(-shift)
    if strip:
        shown = shown.normalize()
    return f"{shown:f}"  # a zero normalises to "0" (no sign, no exponent)


def _exponent10(value: Fraction) -> int:
    """The integer e with 10**e <= value < 10**(e+1), exactly, for value > 0 (a-b or a-b-1, with a digits in the
    numerator and b in the denominator)."""
    e = len(str(value.numerator)) - len(str(value.denominator))
    return e if Fraction(10) ** e <= value else e - 1
