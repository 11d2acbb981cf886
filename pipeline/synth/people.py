"""Persons for the synthetic census generator: group-quarters facilities, race, ethnicity and age.

Codes follow the P.L. 94-171 PPMF layout: GQTYPE_PL 0 (household) and 1..7 (1 adult correctional, 2 juvenile,
3 nursing, 4 other institutional, 5 college housing, 6 military, 7 other noninstitutional); CENRACE 0-based here
(0..62 stands for "01".."63").
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from numpy.random import Generator  # synthetic data only: never privacy noise
from numpy.typing import NDArray

from censusdp.pipeline.synth.geo import Blocks, sample_ragged

GQ_RATE = 0.03  # expected share of persons living in group quarters

# Per GQ type 1..7: share of facilities, median and log-spread of facility size, P(person under 18).
GQ_FACILITY_SHARE = np.array([0.08, 0.04, 0.30, 0.05, 0.13, 0.03, 0.37])
GQ_MEDIAN_SIZE = np.array([350.0, 30.0, 90.0, 35.0, 300.0, 450.0, 25.0])
GQ_SIZE_SIGMA = np.array([0.9, 0.6, 0.45, 0.7, 0.9, 0.9, 0.9])
GQ_UNDER18 = np.array([0.0, 0.85, 0.0, 0.04, 0.02, 0.01, 0.10])
GQ_MAX_SIZE = 6000

N_RACES = 63
SINGLE_RACES = 6  # White, Black, AIAN, Asian, NHPI, Some other race

# State profiles: single-race shares (the rest: two or more races) and per-race propensity to appear in
# combinations (a combination's weight is the product of its races' propensities times MULTI_DECAY per race beyond two)
NH_SINGLE = np.array([0.655, 0.255, 0.006, 0.016, 0.001, 0.004])
NH_MULTI_PROPENSITY = np.array([1.0, 0.5, 0.6, 0.4, 0.05, 0.6])
H_SINGLE = np.array([0.30, 0.03, 0.02, 0.004, 0.001, 0.38])
H_MULTI_PROPENSITY = np.array([1.0, 0.2, 0.3, 0.05, 0.02, 1.5])
MULTI_DECAY = 0.15
MULTI_TILT = 0.5  # how strongly a tract's single-race mix tilts its combinations
MULTI_SPREAD = 0.3  # log-scale spread of the tract share of two or more races
STATE_HISPANIC = 0.07
COUNTY_CONCENTRATION = 8.0  # Dirichlet concentration of county race profiles around the state's
TRACT_CONCENTRATION = 10.0  # ... and of tract profiles around their county's
STATE_FLOOR = 0.05  # share of the state profile mixed into every tract: keeps a long tail everywhere

UNDER18_BETA = (40.0, 135.0)  # tract share of household persons under 18 (mean 0.229)
HISPANIC_UNDER18_BONUS = 0.08


def _combinations() -> NDArray[np.float64]:
    """Membership matrix (57 x 6) of the multi-race CENRACE categories 07..63, in Census order: two-race
    combinations in lexicographic order of the six races, then three-race, and so on up to all six."""
    combos = [c for k in range(2, SINGLE_RACES + 1) for c in combinations(range(SINGLE_RACES), k)]
    return np.array([[float(race in c) for race in range(SINGLE_RACES)] for c in combos])


COMBINATIONS = _combinations()


def race_profile(single: NDArray[np.float64], propensity: NDArray[np.float64]) -> NDArray[np.float64]:
    """Probabilities of the 63 CENRACE categories given single-race shares and combination propensities."""
    k = COMBINATIONS.sum(axis=1)
    multi = np.exp(COMBINATIONS @ np.log(propensity)) * MULTI_DECAY ** (k - 2)
    multi *= (1.0 - single.sum()) / multi.sum()
    return np.r_[single, multi]


def _dirichlet_rows(rng: Generator, alpha: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row-wise Dirichlet draws via gammas (tolerates tiny concentrations; a row of zeros stays zero)."""
    g = rng.gamma(alpha)
    s = g.sum(axis=1, keepdims=True)
    return np.divide(g, s, out=np.zeros_like(g), where=s > 0)


def tract_race_tables(rng: Generator, blocks: Blocks) -> NDArray[np.float64]:
    """Race distributions per (tract, Hispanic origin), shape ``(2 * n_tracts, 63)``: row ``2 * t`` non-Hispanic
    persons of tract ``t``, row ``2 * t + 1`` Hispanic ones.

    The single-race mix is a Dirichlet draw around a county mix, itself one around the state's (residential
    segregation); the share of two or more races varies mildly around the state's and is split among the 57
    combinations as in the state, tilted towards the races common in the tract; a little of the state profile is
    mixed in to keep a long tail.
    """
    tract_county = np.zeros(blocks.n_tracts, dtype=np.int64)
    tract_county[blocks.tract_index] = blocks.county
    county_ids, county_of_tract = np.unique(tract_county, return_inverse=True)
    n_tracts = blocks.n_tracts
    out = np.empty((2 * n_tracts, N_RACES))
    for h, (single, prop) in enumerate(((NH_SINGLE, NH_MULTI_PROPENSITY), (H_SINGLE, H_MULTI_PROPENSITY))):
        state = race_profile(single, prop)
        share = single / single.sum()
        county = _dirichlet_rows(rng, np.tile(COUNTY_CONCENTRATION * share, (county_ids.shape[0], 1)))
        tract = _dirichlet_rows(rng, TRACT_CONCENTRATION * county[county_of_tract])
        multi_total = np.minimum((1.0 - single.sum()) * rng.lognormal(0.0, MULTI_SPREAD, n_tracts), 0.5)
        tilt = 0.5 + 0.5 * tract / share  # smoothed: rare races are absent from most tracts
        multi = state[SINGLE_RACES:] * np.exp(MULTI_TILT * np.log(tilt) @ COMBINATIONS.T)
        multi *= (multi_total / multi.sum(axis=1))[:, None]
        tract_full = np.c_[tract * (1.0 - multi_total)[:, None], multi]
        out[h::2] = (1.0 - STATE_FLOOR) * tract_full + STATE_FLOOR * state
    return out


def group_quarters(rng: Generator, persons: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Draw group-quarters facilities, (GQ type 1..7, size) of each: the total size is Binomial(persons, GQ_RATE);
    sizes are lognormal by type (prisons, dorms and barracks with hundreds of persons, group homes a few dozen)."""
    target = int(rng.binomial(persons, GQ_RATE))
    if target == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    mean_size = float(GQ_FACILITY_SHARE @ (GQ_MEDIAN_SIZE * np.exp(GQ_SIZE_SIGMA**2 / 2)))
    n_cand = int(2 * target / mean_size) + 16
    while True:
        types = rng.choice(7, size=n_cand, p=GQ_FACILITY_SHARE / GQ_FACILITY_SHARE.sum())
        sizes = np.ceil(rng.lognormal(np.log(GQ_MEDIAN_SIZE[types]), GQ_SIZE_SIGMA[types]))
        sizes = np.minimum(sizes, GQ_MAX_SIZE).astype(np.int64)
        cum = np.cumsum(sizes)
        if cum[-1] >= target:
            break
        n_cand *= 2
    n_fac = int(np.searchsorted(cum, target, side="left")) + 1  # shortest prefix reaching the target
    types, sizes = types[:n_fac].astype(np.int64) + 1, sizes[:n_fac]
    sizes[-1] -= int(cum[n_fac - 1]) - target  # trim the last facility: total is exactly the target
    return types, sizes


def place_facilities(rng: Generator, n_facilities: int, n_blocks: int) -> NDArray[np.int64]:
    """Distinct blocks for the facilities (so each GQ block holds one GQ type), chosen uniformly."""
    replace = n_facilities > n_blocks  # only conceivable for tiny states; keeps the person count exact
    return rng.choice(n_blocks, size=n_facilities, replace=replace).astype(np.int64)


def person_attributes(rng: Generator, blocks: Blocks, person_block: NDArray[np.int64], gqtype: NDArray[np.int8]
                      ) -> tuple[NDArray[np.bool_], NDArray[np.bool_], NDArray[np.int64]]:
    """Draw (under 18, Hispanic, CENRACE index 0..62) for each person given block and GQ type."""
    n = person_block.shape[0]
    tract = blocks.tract_index[person_block]
    p_hisp = rng.beta(8.0 * STATE_HISPANIC, 8.0 * (1.0 - STATE_HISPANIC), blocks.n_tracts)
    hispanic = rng.random(n) < p_hisp[tract]

    table = tract_race_tables(rng, blocks)
    rows = 2 * tract + hispanic
    del tract
    race = sample_ragged(rng, table.ravel(), np.arange(table.shape[0]) * N_RACES, rows)
    race -= rows * N_RACES
    del rows

    p_u18_tract = rng.beta(*UNDER18_BETA, blocks.n_tracts)
    p_u18 = p_u18_tract[blocks.tract_index[person_block]] + HISPANIC_UNDER18_BONUS * hispanic
    gq = gqtype > 0
    p_u18[gq] = GQ_UNDER18[gqtype[gq] - 1]
    under18 = rng.random(n) < p_u18
    return under18, hispanic, race
