"""Exact numbers shared by every layer: the defaults that must agree everywhere, and directed rounding for display.

Defaults: ``DEFAULT_DELTA`` (the delta at which epsilon is reported when a configuration or command gives none)
and ``DEFAULT_CHUNK_CELLS`` (cells per chunk of a level: ~32 MB of int64 per query array).

Directed rounding for display: a privacy loss is never shown below its value, a noise level never above.

Reports round numbers to a few digits, and rounding to nearest can understate a privacy loss (rho = 1/3 shown
as 0.333333 is less than what was spent).  Every figure is therefore rounded in the direction that cannot make
the release look more private than it is: losses (rho, epsilon, shares of the budget, expected errors) up,
noise levels (sigma²) down.  Rounding is exact: the value is first made an exact ``Fraction`` (a float's binary
value converts exactly), the rounded decimal is found with integer floor/ceiling on it, and ``decimal.Decimal``
only writes the result, so no intermediate rounding can push a figure the wrong way.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

DEFAULT_DELTA = "1e-10"  # as written: reports echo it, and float(DEFAULT_DELTA) is the value used
DEFAULT_CHUNK_CELLS = 4_000_000


def round_text(value: Fraction | float | int, *, up: bool, places: int | None = None,
               significant: int | None = None, strip: bool = False) -> str:
    """``value`` as a plain decimal (no exponent), rounded up (towards +inf) or down (towards -inf).

    Give exactly one of ``places`` (digits after the point) or ``significant`` (significant digits, >= 1).
    ``strip`` drops trailing zeros after the point.  Infinities are written ``inf``/``-inf`` (already a bound);
    NaN raises ``ValueError``: a loss that is not a number cannot be rounded in a safe direction.
    """
    if (places is None) == (significant is None):
        raise ValueError("give exactly one of places or significant")
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            raise ValueError("cannot round NaN in a safe direction")
        return "inf" if value > 0 else "-inf"
    exact = Fraction(value)
    if significant is not None:
        if significant < 1:
            raise ValueError(f"significant must be >= 1, got {significant}")
        places = significant - 1 - _exponent10(abs(exact)) if exact else significant - 1
    assert places is not None
    scaled = exact * Fraction(10) ** places
    digits = math.ceil(scaled) if up else math.floor(scaled)
    shown = Decimal(digits).scaleb(-places)
    if strip:
        shown = shown.normalize()
    text = f"{shown:f}"
    return "0" if strip and Decimal(text) == 0 else text


def _exponent10(value: Fraction) -> int:
    """The integer e with 10**e <= value < 10**(e+1), exactly, for value > 0."""
    e = len(str(value.numerator)) - len(str(value.denominator))
    while Fraction(10) ** e > value:
        e -= 1
    while Fraction(10) ** (e + 1) <= value:
        e += 1
    return e
