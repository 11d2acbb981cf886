"""The one parser of exact numbers (budgets, shares, noise scales, caps) and deltas, and the default delta.

Floats are refused by default: 0.1 is not one tenth, and a noise scale must be the number its privacy map was
computed for.  ``DEFAULT_DELTA`` is the delta epsilon is reported at when a configuration or command gives none.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import numpy as np

from censusdp.pipeline.errors import ExactNumberError

DEFAULT_DELTA = "1e-10"  # as written: reports echo it, and float(DEFAULT_DELTA) is the value used
_EXAMPLE = "such as '0.5', '1/4' or '1e-3'"
MAX_TEXT = 400  # characters of a number written as text
MAX_EXPONENT = 1000  # |e| of a decimal exponent
_EXPONENT = re.compile(r"[eE]\s*([+-]?\d+)")


def parse_rational(value: Any, name: str, *, floats_as_written: bool = False) -> Fraction:
    """``value`` as an exact ``Fraction``: a Fraction, an integer (numpy's too) or a decimal/fraction string; a
    float only with ``floats_as_written`` (a TOML float, read through its shortest repr); the sign is not checked."""
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
