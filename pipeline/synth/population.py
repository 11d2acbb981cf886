"""Synthetic census microdata in the P.L. 94-171 PPMF layout, for demos, tests and benchmarks.

``synthesize(persons, seed)`` returns person records and the full block list of one synthetic state
(code "01"): several counties, tracts of roughly 1,000-8,000 people with 1-4 block groups, about one
tabulation block per 35 persons of which a quarter or so are empty, heavy-tailed block sizes,
group quarters (about 3% of persons) concentrated in a few blocks with one facility type each, and
race / ethnicity mixes that vary by county and tract. Everything is vectorised numpy; 10 million
persons fit comfortably in memory.

This is test data, not a privacy mechanism: it uses numpy's ordinary generator on purpose.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from numpy.typing import NDArray

from pipeline.synth.geo import build_blocks
from pipeline.synth.people import group_quarters, person_attributes, place_facilities

MIN_PERSONS = 1_000
MAX_PERSONS = 10_000_000

MICRODATA_COLUMNS = ("geocode", "GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE")
GQTYPE_VALUES = tuple(str(i) for i in range(8))
VOTING_AGE_VALUES = ("1", "2")
CENHISP_VALUES = ("1", "2")
CENRACE_VALUES = tuple(f"{i:02d}" for i in range(1, 64))


def _validate(persons: int, seed: int) -> None:
    """Raise ValueError (one line) unless persons is in [MIN_PERSONS, MAX_PERSONS] and seed >= 0."""
    if isinstance(persons, bool) or not isinstance(persons, (int, np.integer)):
        raise ValueError(f"persons must be an integer, got {persons!r}")
    if not MIN_PERSONS <= persons <= MAX_PERSONS:
        raise ValueError(f"persons must be between {MIN_PERSONS:,} and {MAX_PERSONS:,}, got {persons:,}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")


def _lookup(values: tuple[str, ...] | pl.Series, codes: NDArray[np.integer]) -> pl.Series:
    """Map integer codes 0..len(values)-1 to their string values (one vectorised gather)."""
    return pl.Series(values, dtype=pl.Utf8).gather(pl.Series(codes.astype(np.uint32, copy=False)))


def synthesize(persons: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return (microdata, geography) for a synthetic state of exactly ``persons`` persons.

    Args:
        persons: number of person records, 1,000 to 10,000,000.
        seed: non-negative seed; the output is a deterministic function of (persons, seed).

    Returns:
        ``microdata``: one row per person, sorted by geocode, with Utf8 columns ``geocode`` (15-digit
        block GEOID), ``GQTYPE_PL`` ("0".."7"), ``VOTING_AGE`` ("1" under 18, "2" 18+), ``CENHISP``
        ("1" not Hispanic, "2" Hispanic) and ``CENRACE`` ("01".."63").
        ``geography``: one Utf8 column ``geocode`` listing every block, populated or not, sorted and
        unique.

    Raises:
        ValueError: if ``persons`` is out of range or ``seed`` is negative.
    """
    _validate(persons, seed)
    rng = np.random.default_rng(int(seed))  # test-only: synthetic data, not privacy noise

    gq_type, gq_size = group_quarters(rng, persons)
    blocks = build_blocks(rng, persons - int(gq_size.sum()))
    gq_block = place_facilities(rng, gq_type.shape[0], blocks.n_blocks)

    # Persons in geocode order: household persons block by block, group-quarters persons merged in.
    person_block = np.r_[np.repeat(np.arange(blocks.n_blocks), blocks.households), np.repeat(gq_block, gq_size)]
    gqtype = np.r_[np.zeros(persons - gq_size.sum(), np.int8), np.repeat(gq_type, gq_size).astype(np.int8)]
    order = np.argsort(person_block, kind="stable")
    person_block, gqtype = person_block[order], gqtype[order]
    del order

    under18, hispanic, race = person_attributes(rng, blocks, person_block, gqtype)

    block_geocodes = pl.Series("geocode", blocks.geocode_numbers()).cast(pl.Utf8).str.zfill(15)
    microdata = pl.DataFrame(
        [
            _lookup(block_geocodes, person_block).alias("geocode"),
            _lookup(GQTYPE_VALUES, gqtype).alias("GQTYPE_PL"),
            _lookup(VOTING_AGE_VALUES, (~under18).view(np.uint8)).alias("VOTING_AGE"),
            _lookup(CENHISP_VALUES, hispanic.view(np.uint8)).alias("CENHISP"),
            _lookup(CENRACE_VALUES, race).alias("CENRACE"),
        ]
    )
    geography = block_geocodes.to_frame()
    return microdata, geography


def write_synthetic(persons: int, seed: int, out_dir: Path) -> tuple[Path, Path]:
    """Write ``out_dir/microdata.parquet`` and ``out_dir/geography.parquet``; return both paths.

    ``out_dir`` (and its parents) are created if needed; existing files are overwritten.
    """
    microdata, geography = synthesize(persons, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    micro_path = out / "microdata.parquet"
    geo_path = out / "geography.parquet"
    microdata.write_parquet(micro_path)
    geography.write_parquet(geo_path)
    return micro_path, geo_path
