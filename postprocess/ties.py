"""Random tie-breaking for the rounding: which of several equally good cells gets the extra person.

Index order would always favour the first child (the lowest block code): with the run's random source, independent
of the microdata (Thm 19.25), ties go in random order; without one, in index order, so a re-run gives the same table.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

FRACTION_BITS = 32  # fractional parts are compared on a grid of 2^-32: closer ones are ties
_KEY_BITS = 31  # random key bits below the quantised fraction (32 + 31 < 64)


@runtime_checkable
class TieSource(Protocol):
    """The part of ``pipeline.dp.random_source.RandomSource`` the rounding uses."""

    def uniform_uint64(self, size: int) -> np.ndarray:
        """``size`` independent integers, uniform on [0, 2^64), dtype uint64."""
        ...

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        """``size`` independent integers, uniform on [0, bound), dtype int64."""
        ...


def check_source(rng: object | None) -> TieSource | None:
    if rng is not None and not isinstance(rng, TieSource):
        raise ValueError("rng must have uniform_uint64(size) and uniform_below(bound, size) methods")
    return rng


def priority(fraction: np.ndarray, rng: TieSource | None) -> np.ndarray:
    """uint64 sort keys, ascending = larger fractional part first, equal parts in random order (without ``rng``: in
    index order, under a stable sort).  Closer fractions are ties: the L1 objective moves by < 2^-31 per swap."""
    scaled = np.rint(np.clip(fraction, 0.0, 1.0) * float(1 << FRACTION_BITS)).astype(np.uint64)
    keys = (np.uint64(1 << FRACTION_BITS) - scaled) << np.uint64(_KEY_BITS)
    if rng is not None and fraction.size:
        random = np.asarray(rng.uniform_uint64(fraction.size), dtype=np.uint64).reshape(fraction.shape)
        keys |= random >> np.uint64(64 - _KEY_BITS)
    return keys


def cost_jitter(size: int, rng: TieSource | None) -> np.ndarray:
    """Random perturbation in [0, 2^-20) of LP costs: equal costs become distinct, in random order; below half a
    step of ``snap_costs``'s 2^-19 grid, it never reorders costs that differ."""
    if rng is None or size == 0:
        return np.zeros(size)
    return np.asarray(rng.uniform_uint64(size) >> np.uint64(11), dtype=np.float64) * 2.0**-73


def snap_costs(cost: np.ndarray) -> np.ndarray:
    return np.rint(cost * 2.0**19) * 2.0**-19
