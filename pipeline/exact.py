"""Exact numbers shared by every layer: the one parser of exact numbers and deltas, the defaults that must agree
everywhere, and directed rounding for display.

Parsing: ``parse_rational`` is the only place a budget, a share, a noise scale or a cap becomes a ``Fraction``
(the configuration loader, the ledger, the privacy maps and samplers and the CLI all call it) and
``parse_delta`` the only place a delta becomes a float; both raise ``ExactNumberError`` naming the parameter.
Floats are refused by default (0.1 is not one tenth: a noise scale must be the number its privacy map was
computed for); a TOML float is taken as written (``floats_as_written``: "0.1" in the file means one tenth).

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
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from censusdp.pipeline.errors import ExactNumberError

DEFAULT_DELTA = "1e-10"  # as written: reports echo it, and float(DEFAULT_DELTA) is the value used
DEFAULT_CHUNK_CELLS = 4_000_000
_EXAMPLE = "such as '0.5', '1/4' or '1e-3'"
MAX_TEXT = 400  # characters of a number written as text
MAX_EXPONENT = 1000  # |e| of a decimal exponent
_EXPONENT = re.compile(r"[eE]\s*([+-]?\d+)")


def parse_rational(value: Any, name: str, *, floats_as_written: bool = False) -> Fraction:
    """``value`` as an exact ``Fraction``: a Fraction, an integer (numpy's too) or a decimal/fraction string.

    A float is refused unless ``floats_as_written`` (a TOML float, read back through its shortest repr: the
    number the user wrote); a bool, None or anything else is refused.  Sign is not checked here.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return Fraction(int(value))
    if isinstance(value, (float, np.floating)) and floats_as_written:
        value = repr(float(value))
    if isinstance(value, str):
        if len(value) > MAX_TEXT or any(abs(int(e)) > MAX_EXPONENT for e in _EXPONENT.findall(value)):
            # Fraction("1e99999999") would build a 10^8-digit integer: a hostile file must not hang the loader
            raise ExactNumberError(name, f"longer than {MAX_TEXT} characters or an exponent beyond "
                                         f"±{MAX_EXPONENT}: {value[:40]!r}")
        try:
            return Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise ExactNumberError(name, f"not an exact number {_EXAMPLE}: {value!r}") from None
    raise ExactNumberError(name, f"must be exact (a Fraction, an integer or a string {_EXAMPLE}), "
                                 f"got {type(value).__name__}")


def parse_delta(value: Any, name: str) -> float:
    """A delta: a number strictly between 0 and 1 (a string as written, a float or a Fraction), as a float."""
    if isinstance(value, (bool, np.bool_, np.complexfloating)) or not isinstance(
            value, (str, float, int, Fraction, np.number)):
        raise ExactNumberError(name, f"must be a number strictly between 0 and 1, got {type(value).__name__}")
    try:
        delta = float(value)  # float() strips surrounding whitespace itself
    except (ValueError, OverflowError):
        delta = math.nan
    if not 0 < delta < 1:  # False for NaN too
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "an integer of over 40 digits"
        raise ExactNumberError(name, f"must be a number strictly between 0 and 1, got {shown[:60]}")
    return delta


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
    """The integer e with 10**e <= value < 10**(e+1), exactly, for value > 0.

    With a digits in the numerator and b in the denominator, 10**(a-b-1) < value < 10**(a-b+1): e is a-b or a-b-1.
    """
    e = len(str(value.numerator)) - len(str(value.denominator))
    return e if Fraction(10) ** e <= value else e - 1
