"""Geography for the synthetic census generator: counties, tracts, block groups and blocks (vectorised numpy:
no Python-level work per person or per block)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.random import Generator  # synthetic data only: never privacy noise
from numpy.typing import NDArray

STATE_FIPS = 1  # a single synthetic state's code ("01"); a nation's states pass their own (build_blocks)
MAX_COUNTIES = 500  # county codes are odd numbers of three digits, 1..999
MEAN_TRACT_POP = 4000.0  # target mean tract population (real tracts: about 1,200-8,000 people, optimum 4,000)
PERSONS_PER_BLOCK = 35.0  # household persons per block, counting empty blocks (about 28,000 blocks per million)
BLOCK_GROUP_POP = 1500.0  # target block-group population, used to choose 1-4 block groups per tract
BLOCK_SIZE_SIGMA = 1.3  # log-scale spread of inhabited block weights (lognormal: most small, a few with hundreds)
EMPTY_BETA = (2.0, 6.0)  # Beta parameters of each tract's probability that a block is uninhabited (mean 0.25)
MAX_BLOCKS_PER_GROUP = 999  # block codes are four digits whose first is the block group


@dataclass(frozen=True)
class Blocks:
    """All tabulation blocks, in geocode order, with the household (non-group-quarters) persons of each."""

    county: NDArray[np.int64]  # county FIPS code of each block (odd numbers 1, 3, 5, ...)
    tract: NDArray[np.int64]  # six-digit tract code, as an integer (100 for "000100")
    block: NDArray[np.int64]  # four-digit block code; its first digit is the block group
    tract_index: NDArray[np.int64]  # index 0..n_tracts-1 of each block's tract (non-decreasing)
    households: NDArray[np.int64]
    n_tracts: int
    state: int = STATE_FIPS

    @property
    def n_blocks(self) -> int:
        """Number of blocks, populated or not."""
        return int(self.block.shape[0])

    def geocode_numbers(self) -> NDArray[np.int64]:
        """15-digit block GEOIDs as integers (state * 10**13 + county * 10**10 + tract * 10**4 + block)."""
        return self.state * 10**13 + self.county * 10**10 + self.tract * 10**4 + self.block


def _rank_within(groups: NDArray[np.int64]) -> NDArray[np.int64]:
    """Position of each element inside its run of equal values in a sorted ``groups`` array."""
    n = groups.shape[0]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    lengths = np.diff(np.r_[starts, n])
    return np.arange(n) - np.repeat(starts, lengths)


def sample_ragged(rng: Generator, weights: NDArray[np.float64], starts: NDArray[np.int64],
                  rows: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each sample i, an index into ``weights`` inside row ``rows[i]`` of a ragged table of categorical
    distributions (all rows end to end, row r from ``starts[r]``; each needs a positive weight), chosen with
    probability proportional to its weight (zero weights are never chosen)."""
    m = weights.shape[0]
    lengths = np.diff(np.r_[starts, m])
    row_of = np.repeat(np.arange(starts.shape[0]), lengths)
    ends = np.r_[starts[1:], m] - 1
    cs = np.cumsum(weights)
    before = np.r_[0.0, cs][starts]
    total = cs[ends] - before
    flat = (cs - before[row_of]) / total[row_of] + row_of  # in [r, r + 1] for row r, exactly r + 1 at its end
    idx = np.searchsorted(flat, rows + rng.random(rows.shape[0]), side="right")
    # Guard against row + u rounding up to row + 1: fall back to the row's last positive entry.
    last_positive = np.maximum.reduceat(np.where(weights > 0, np.arange(m), -1), starts)
    return np.minimum(idx, last_positive[rows])


def build_blocks(rng: Generator, household_persons: int, *, state: int = STATE_FIPS, county_base: int = 0,
                 max_counties: int = MAX_COUNTIES) -> Blocks:
    """Lay out counties, tracts, block groups and blocks and place ``household_persons`` in them.

    Tract populations vary lognormally around :data:`MEAN_TRACT_POP`; counties get a heavy-tailed number of tracts;
    each tract has 1-4 block groups of about ``population / PERSONS_PER_BLOCK`` blocks, a tract-dependent share of
    them uninhabited, the others receiving persons in proportion to lognormal weights.  The county numbers are
    ``county_base .. county_base + max_counties - 1`` (code ``2 * number + 1``): a state generated in pieces gives
    each piece its own range, so pieces never share a block.
    """
    if county_base < 0 or max_counties < 1 or county_base + max_counties > MAX_COUNTIES:
        raise ValueError(f"counties {county_base}..{county_base + max_counties - 1} are outside 0..{MAX_COUNTIES - 1}")
    n_tracts = max(1, round(household_persons / MEAN_TRACT_POP))
    n_counties = min(n_tracts, max(1, round(2.0 * np.sqrt(n_tracts))), max_counties)

    # Tract populations (exact total), and tracts assigned to counties: one each, the rest heavy-tailed.
    tract_w = np.clip(rng.lognormal(0.0, 0.35, n_tracts), 0.35, 1.9)
    tract_pop = rng.multinomial(household_persons, tract_w / tract_w.sum()).astype(np.int64)
    county_w = rng.pareto(1.1, n_counties) + 1.0
    extra = rng.choice(n_counties, size=n_tracts - n_counties, p=county_w / county_w.sum())
    tract_county = np.sort(np.r_[np.arange(n_counties), extra]).astype(np.int64)
    tract_code = (_rank_within(tract_county) + 1) * 100
    county_code = 2 * (county_base + tract_county) + 1

    n_bg = np.clip(np.rint(tract_pop / BLOCK_GROUP_POP + rng.uniform(-0.5, 0.5, n_tracts)), 1, 4).astype(np.int64)
    bg_tract = np.repeat(np.arange(n_tracts), n_bg)
    bg_number = _rank_within(bg_tract) + 1

    # Blocks: Poisson count per block group, at least one, at most what four digits allow.
    expected = tract_pop[bg_tract] / n_bg[bg_tract] / PERSONS_PER_BLOCK
    n_blk = np.clip(rng.poisson(expected), 1, MAX_BLOCKS_PER_GROUP).astype(np.int64)
    blk_bg = np.repeat(np.arange(bg_tract.shape[0]), n_blk)
    blk_tract = bg_tract[blk_bg]
    blk_code = bg_number[blk_bg] * 1000 + _rank_within(blk_bg)

    # Block weights: a tract-dependent share uninhabited, the rest lognormal.
    n_blocks = blk_code.shape[0]
    p_empty = rng.beta(*EMPTY_BETA, n_tracts)
    inhabited = rng.random(n_blocks) >= p_empty[blk_tract]
    tract_start = np.flatnonzero(np.r_[True, blk_tract[1:] != blk_tract[:-1]])
    inhabited[tract_start] = True  # every tract needs somewhere to put its people
    weights = rng.lognormal(0.0, BLOCK_SIZE_SIGMA, n_blocks) * inhabited

    person_tract = np.repeat(np.arange(n_tracts), tract_pop)
    person_block = sample_ragged(rng, weights, tract_start, person_tract)
    del person_tract
    households = np.bincount(person_block, minlength=n_blocks).astype(np.int64)

    return Blocks(county=county_code[blk_tract], tract=tract_code[blk_tract], block=blk_code, tract_index=blk_tract,
                  households=households, n_tracts=n_tracts, state=state)
