"""Synthetic census microdata in the P.L. 94-171 PPMF layout, for demos, tests and benchmarks: one synthetic state
(code "01") of up to 10 million persons, its every block, and the housing units and facilities they live in.

This is test data, not a privacy mechanism: it uses numpy's ordinary generator on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from numpy.typing import NDArray

from censusdp.pipeline.synth.geo import MAX_COUNTIES, STATE_FIPS, Blocks, build_blocks
from censusdp.pipeline.synth.housing import GQ_CODE_VALUES, synthesize_units
from censusdp.pipeline.synth.people import group_quarters, person_attributes, place_facilities

MIN_PERSONS = 1_000
MAX_PERSONS = 10_000_000

MICRODATA_COLUMNS = ("geocode", "GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE")
GQTYPE_VALUES = tuple(str(i) for i in range(8))
VOTING_AGE_VALUES = ("1", "2")
CENHISP_VALUES = ("1", "2")
CENRACE_VALUES = tuple(f"{i:02d}" for i in range(1, 64))
UNITS_COLUMNS = ("geocode", "RTYPE", "GQTYPE", "VACS")  # the 2020 MDF unit layout's codes (pipeline.synth.housing)
UNITS_STREAM = 1  # the units' generator is seeded with (seed, UNITS_STREAM): the persons' draws stay as they were


@dataclass(frozen=True)
class SyntheticState:
    """A synthetic state: persons, every block, and the units (housing units and facilities) of those blocks."""

    microdata: pl.DataFrame
    geography: pl.DataFrame
    units: pl.DataFrame


@dataclass(frozen=True)
class SyntheticFiles:
    """Where ``write_synthetic`` put them."""

    microdata: Path
    geography: Path
    units: Path


@dataclass(frozen=True)
class Drawn:
    """What the units are drawn from: the blocks, each person's block index (sorted) and GQ type."""

    blocks: Blocks
    person_block: NDArray[np.int64]
    gqtype: NDArray[np.int8]


def _persons(persons: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame, Drawn]:
    """A single state's persons and blocks (state "01", seeded with ``seed`` alone), and what its units need;
    ValueError (one line) unless persons is in [MIN_PERSONS, MAX_PERSONS] and seed >= 0."""
    if isinstance(persons, bool) or not isinstance(persons, (int, np.integer)):
        raise ValueError(f"persons must be an integer, got {persons!r}")
    if not MIN_PERSONS <= persons <= MAX_PERSONS:
        raise ValueError(f"persons must be between {MIN_PERSONS:,} and {MAX_PERSONS:,}, got {persons:,}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return draw_persons(np.random.default_rng(int(seed)), persons)  # test-only: synthetic data, not privacy noise


def _lookup(values: tuple[str, ...] | pl.Series, codes: NDArray[np.integer]) -> pl.Series:
    """Map integer codes 0..len(values)-1 to their string values (one vectorised gather)."""
    return pl.Series(values, dtype=pl.Utf8).gather(pl.Series(codes.astype(np.uint32, copy=False)))


def synthesize(persons: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(microdata, geography) of a synthetic state of exactly ``persons`` persons (1,000 to 10,000,000), a
    deterministic function of (persons, seed); ValueError if either is out of range.  ``microdata``: one row per
    person, sorted by geocode, with Utf8 columns ``geocode`` (15-digit block GEOID), ``GQTYPE_PL`` ("0".."7"),
    ``VOTING_AGE`` ("1" under 18, "2" 18+), ``CENHISP`` ("1" not Hispanic, "2" Hispanic) and ``CENRACE``
    ("01".."63").  ``geography``: one Utf8 column ``geocode``, every block, populated or not, sorted.
    """
    microdata, geography, _ = _persons(persons, seed)
    return microdata, geography


def synthesize_state(persons: int, seed: int) -> SyntheticState:
    """``synthesize``'s persons and blocks (the same for the same arguments) and their units: one row per housing
    unit or occupied group-quarters facility, sorted by geocode, with Utf8 columns ``geocode``, ``RTYPE``,
    ``GQTYPE`` and ``VACS`` in the MDF codes (``pipeline.synth.housing``)."""
    microdata, geography, drawn = _persons(persons, seed)
    rng = np.random.default_rng([int(seed), UNITS_STREAM])  # test-only: synthetic data, not privacy noise
    return SyntheticState(microdata=microdata, geography=geography, units=draw_units(rng, geography, drawn))


def draw_units(rng: np.random.Generator, geography: pl.DataFrame, drawn: Drawn) -> pl.DataFrame:  # test-only
    """The units frame (``synthesize_state``) of persons ``drawn`` in the blocks of ``geography``, from ``rng``."""
    units = synthesize_units(rng, drawn.person_block, drawn.gqtype, drawn.blocks.tract_index, drawn.blocks.n_tracts)
    block_geocodes = geography.get_column("geocode")
    return pl.DataFrame([
        _lookup(block_geocodes, units.block).alias("geocode"),
        _lookup(("2", "4"), (units.gq_type > 0).view(np.uint8)).alias("RTYPE"),
        _lookup(GQ_CODE_VALUES, units.gq_code).alias("GQTYPE"),
        _lookup(tuple(str(v) for v in range(8)), units.vacancy).alias("VACS"),
    ])


def draw_persons(rng: np.random.Generator,  # test-only: synthetic people for demos and tests, never noise
                 persons: int, *, state: int = STATE_FIPS, county_base: int = 0, max_counties: int = MAX_COUNTIES
                 ) -> tuple[pl.DataFrame, pl.DataFrame, Drawn]:
    """(microdata, geography, drawn) of ``persons`` persons in state ``state``, drawn from ``rng``, both frames
    sorted by geocode; the county numbers are ``county_base`` onwards (``build_blocks``)."""
    gq_type, gq_size = group_quarters(rng, persons)
    blocks = build_blocks(rng, persons - int(gq_size.sum()), state=state, county_base=county_base,
                          max_counties=max_counties)
    gq_block = place_facilities(rng, gq_type.shape[0], blocks.n_blocks)

    # Persons in geocode order: household persons block by block, group-quarters persons merged in.
    person_block = np.r_[np.repeat(np.arange(blocks.n_blocks), blocks.households), np.repeat(gq_block, gq_size)]
    gqtype = np.r_[np.zeros(persons - gq_size.sum(), np.int8), np.repeat(gq_type, gq_size).astype(np.int8)]
    order = np.argsort(person_block, kind="stable")
    person_block, gqtype = person_block[order], gqtype[order]
    del order

    under18, hispanic, race = person_attributes(rng, blocks, person_block, gqtype)

    block_geocodes = pl.Series("geocode", blocks.geocode_numbers()).cast(pl.Utf8).str.zfill(15)
    microdata = pl.DataFrame([
        _lookup(block_geocodes, person_block).alias("geocode"),
        _lookup(GQTYPE_VALUES, gqtype).alias("GQTYPE_PL"),
        _lookup(VOTING_AGE_VALUES, (~under18).view(np.uint8)).alias("VOTING_AGE"),
        _lookup(CENHISP_VALUES, hispanic.view(np.uint8)).alias("CENHISP"),
        _lookup(CENRACE_VALUES, race).alias("CENRACE"),
    ])
    geography = block_geocodes.to_frame()
    return microdata, geography, Drawn(blocks=blocks, person_block=person_block, gqtype=gqtype)


def write_synthetic(persons: int, seed: int, out_dir: Path) -> SyntheticFiles:
    """Write ``synthesize_state``'s frames to ``out_dir`` (created if needed; existing files are overwritten) as
    ``microdata.parquet``, ``geography.parquet`` and ``units.parquet``; return their paths."""
    state = synthesize_state(persons, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = SyntheticFiles(microdata=out / "microdata.parquet", geography=out / "geography.parquet",
                           units=out / "units.parquet")
    state.microdata.write_parquet(files.microdata)
    state.geography.write_parquet(files.geography)
    state.units.write_parquet(files.units)
    return files
