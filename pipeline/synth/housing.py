"""Housing units and group-quarters facilities for the synthetic census generator, consistent with its persons:
at every block, occupied housing units = households, housing units >= households, and one facility of type t
exactly where persons of type t live (docs/units.md, "What synth guarantees").  Codes follow the Census 2020 MDF
unit layout: GQTYPE "000" for a housing unit, else a detailed code whose first digit is the P.L. 94-171 type (1-7,
7 and above for other noninstitutional).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.random import Generator  # synthetic data only: never privacy noise
from numpy.typing import NDArray

# P(household size = 1..7), about the 2020 census's (7 stands for 7 or more)
HOUSEHOLD_SIZE_P = np.array([0.28, 0.345, 0.155, 0.125, 0.057, 0.023, 0.015])
VACANCY_BETA = (2.0, 16.0)  # tract vacancy rate among housing units (mean 0.11; the 2020 US rate was 0.097)
EMPTY_BLOCK_HOUSING = 0.15  # P(a block without persons has vacant housing units) ...
EMPTY_BLOCK_UNITS = 2.0  # ... and then 1 + Poisson(this) of them
# P(VACS = 1..7): for rent, rented not occupied, for sale only, sold not occupied, seasonal, migrant workers, other
VACANCY_STATUS_P = np.array([0.17, 0.03, 0.06, 0.04, 0.35, 0.001, 0.349])
# the detailed GQTYPE codes of each P.L. 94-171 group-quarters type 1..7 (2020 MDF unit specification)
GQ_CODES = (("101", "102", "103", "104", "105", "106"), ("201", "202", "203"), ("301",),
            ("401", "402", "403", "404", "405"), ("501",), ("601", "602"),
            ("701", "702", "704", "706", "801", "802", "900", "901", "903", "904", "997"))
GQ_CODE_VALUES = ("000", *(code for codes in GQ_CODES for code in codes))  # "000": a housing unit
GQ_TYPES = 8  # 0 household, 1..7 group quarters (the persons' GQTYPE_PL)


@dataclass(frozen=True)
class Units:
    """One row per unit, sorted by block: block index, GQ type (0 housing unit, 1-7: RTYPE 4), its detailed GQTYPE
    code (index into ``GQ_CODE_VALUES``) and VACS (0 occupied or a facility, 1-7 vacant)."""

    block: NDArray[np.int64]
    gq_type: NDArray[np.int8]
    gq_code: NDArray[np.int64]
    vacancy: NDArray[np.int8]


def household_starts(rng: Generator, household_block: NDArray[np.int64]) -> NDArray[np.int64]:
    """Where each household begins in the block-sorted household persons: sizes drawn from HOUSEHOLD_SIZE_P laid
    end to end, cut again at every block boundary (a household never spans two blocks)."""
    n = household_block.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    mean = float(HOUSEHOLD_SIZE_P @ np.arange(1, 8))
    draws = int(1.2 * n / mean) + 16
    while True:
        cuts = np.cumsum(rng.choice(7, size=draws, p=HOUSEHOLD_SIZE_P) + 1)
        if cuts[-1] >= n:
            break
        draws *= 2
    block_starts = np.flatnonzero(np.r_[True, household_block[1:] != household_block[:-1]])
    return np.union1d(block_starts, cuts[cuts < n]).astype(np.int64)


def synthesize_units(rng: Generator, person_block: NDArray[np.int64], gqtype: NDArray[np.int8],
                     tract_index: NDArray[np.int64], n_tracts: int) -> Units:
    """The units of persons living in ``person_block`` (sorted) with GQ type ``gqtype``; ``tract_index``: by block."""
    n_blocks = tract_index.shape[0]
    household_block = person_block[gqtype == 0]
    occupied = np.bincount(household_block[household_starts(rng, household_block)], minlength=n_blocks)

    rate = rng.beta(*VACANCY_BETA, n_tracts)[tract_index]
    vacant = rng.poisson(occupied * rate / (1.0 - rate))
    persons = np.bincount(person_block, minlength=n_blocks)
    housed = (persons == 0) & (rng.random(n_blocks) < EMPTY_BLOCK_HOUSING)
    vacant[housed] += 1 + rng.poisson(EMPTY_BLOCK_UNITS, int(housed.sum()))

    facilities = np.unique(person_block[gqtype > 0] * GQ_TYPES + gqtype[gqtype > 0])
    facility_type = (facilities % GQ_TYPES).astype(np.int8)
    first = np.cumsum([1, *(len(codes) for codes in GQ_CODES)])[:-1]  # each type's first index in GQ_CODE_VALUES
    counts = np.array([len(codes) for codes in GQ_CODES])
    facility_code = first[facility_type - 1] + (rng.random(facilities.shape[0]) * counts[facility_type - 1]).astype(
        np.int64)

    block = np.r_[np.repeat(np.arange(n_blocks), occupied), np.repeat(np.arange(n_blocks), vacant),
                  facilities // GQ_TYPES].astype(np.int64)
    gq_type = np.r_[np.zeros(block.shape[0] - facilities.shape[0], np.int8), facility_type]
    gq_code = np.r_[np.zeros(block.shape[0] - facilities.shape[0], np.int64), facility_code]
    vacancy = np.r_[np.zeros(int(occupied.sum()), np.int8),
                    rng.choice(7, size=int(vacant.sum()), p=VACANCY_STATUS_P).astype(np.int8) + 1,
                    np.zeros(facilities.shape[0], np.int8)]
    order = np.argsort(block, kind="stable")
    return Units(block=block[order], gq_type=gq_type[order], gq_code=gq_code[order], vacancy=vacancy[order])
