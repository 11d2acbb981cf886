"""A synthetic nation (the 50 states and DC, up to a billion persons) written in bounded memory: each state made by
the single-state generator (``draw_persons``) in pieces, each piece drawn, written and dropped before the next.
Layout and memory: docs/commands.md.  Pieces of a state have disjoint county ranges, in piece order, so every part
holds whole counties and no block belongs to two pieces; each piece draws from streams of its own, so a state's data
depends on the seed, its FIPS code, its person count and the piece size only.
This is test data, not a privacy mechanism: it uses numpy's ordinary generator on purpose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.synth.geo import MAX_COUNTIES
from censusdp.pipeline.synth.population import MAX_PERSONS, MIN_PERSONS, SyntheticFiles, draw_persons, draw_units
from censusdp.pipeline.synth.states import N_STATES, apportion

PIECE_PERSONS = 5_000_000  # default largest piece: its peak memory is in BENCHMARKS.md ("Synthetic nation")
MAX_NATION_PERSONS = 1_000_000_000
PERSONS_STREAM = 1  # last word of a piece's seed: never 0, as trailing zeros would alias shorter seeds
UNITS_STREAM = 2
GEOGRAPHY_SCHEMA = pa.schema([pa.field("geocode", pa.string())])


@dataclass(frozen=True)
class Piece:
    """The ``index``-th piece (0-based) of a state: ``persons`` persons in counties ``county_base`` onwards."""

    state: int
    index: int
    persons: int
    county_base: int
    max_counties: int

    @property
    def state_code(self) -> str:
        """Two-digit state FIPS, as in geocodes and partition names."""
        return f"{self.state:02d}"

    @property
    def part_name(self) -> str:
        """File name of the piece's part, in each of microdata/ and units/."""
        return f"part-{self.index:04d}.parquet"


def plan_nation(persons: int, states: int = N_STATES, piece_persons: int = PIECE_PERSONS) -> list[Piece]:
    """Every piece of the nation, in geocode order (state by state, pieces in county order): a state of ``n``
    persons is cut into ``ceil(n / piece_persons)`` pieces of equal size give or take one, sharing its 500 county
    numbers equally.  ValueError if an argument is out of range or a state would need more pieces than counties."""
    for name, value in (("persons", persons), ("states", states), ("piece_persons", piece_persons)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if not MIN_PERSONS <= persons <= MAX_NATION_PERSONS:
        raise ValueError(f"persons must be between {MIN_PERSONS:,} and {MAX_NATION_PERSONS:,}, got {persons:,}")
    if not 1 <= piece_persons <= MAX_PERSONS:
        raise ValueError(f"piece_persons must be between 1 and {MAX_PERSONS:,}, got {piece_persons:,}")
    pieces = []
    for state, n in apportion(int(persons), int(states)):
        k = -(-n // piece_persons)
        if n < 1 or k > MAX_COUNTIES:
            raise ValueError(f"state {state:02d} would have {n:,} persons in {k:,} pieces: choose a larger "
                             f"piece size or a total for which every state has 1 to {MAX_COUNTIES} pieces")
        width = MAX_COUNTIES // k
        pieces += [Piece(state=state, index=i, persons=n // k + (i < n % k), county_base=i * width,
                         max_counties=width) for i in range(k)]
    return pieces


def write_synthetic_nation(persons: int, seed: int, out_dir: Path, states: int = N_STATES,
                           piece_persons: int = PIECE_PERSONS,
                           on_piece: Callable[[Piece], None] | None = None) -> SyntheticFiles:
    """Write a nation of exactly ``persons`` persons (1,000 to 1,000,000,000, shared among the first ``states``
    states by FIPS code as in 2020), a deterministic function of the arguments, under ``out_dir``:
    ``microdata/state=SS/part-NNNN.parquet``, ``units/`` likewise (their earlier part files removed first) and
    ``geography.parquet``; return their paths.  ``piece_persons`` bounds the persons drawn at once (the memory);
    ``on_piece`` is called after each piece is written.  ValueError if an argument is out of range.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    plan = plan_nation(persons, states, piece_persons)
    out = Path(out_dir)
    files = SyntheticFiles(microdata=out / "microdata", geography=out / "geography.parquet", units=out / "units")
    for folder in (files.microdata, files.units):
        _clear_parts(folder)
    out.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(files.geography, GEOGRAPHY_SCHEMA, compression="zstd") as geography_writer:
        for piece in plan:
            _write_piece(piece, int(seed), files, geography_writer)
            if on_piece is not None:
                on_piece(piece)
    return files


def _write_piece(piece: Piece, seed: int, files: SyntheticFiles, geography_writer: pq.ParquetWriter) -> None:
    """Draw one piece, write its microdata and units parts and append its blocks to the geography."""
    rng = np.random.default_rng([seed, piece.state, piece.index, PERSONS_STREAM])  # test-only: synthetic data
    microdata, geography, drawn = draw_persons(rng, piece.persons, state=piece.state,
                                               county_base=piece.county_base, max_counties=piece.max_counties)
    partition = f"state={piece.state_code}"
    (files.microdata / partition).mkdir(parents=True, exist_ok=True)
    microdata.write_parquet(files.microdata / partition / piece.part_name)
    del microdata
    units_rng = np.random.default_rng([seed, piece.state, piece.index, UNITS_STREAM])  # test-only
    units = draw_units(units_rng, geography, drawn)
    del drawn
    (files.units / partition).mkdir(parents=True, exist_ok=True)
    units.write_parquet(files.units / partition / piece.part_name)
    del units
    geography_writer.write_table(geography.to_arrow().cast(GEOGRAPHY_SCHEMA))


def _clear_parts(folder: Path) -> None:
    """Remove the part files (and then-empty state folders) an earlier nation left in ``folder``; nothing else."""
    if not folder.is_dir():
        return
    for part in folder.glob("state=*/part-*.parquet"):
        part.unlink()
    for partition in folder.glob("state=*"):
        if partition.is_dir() and not any(partition.iterdir()):
            partition.rmdir()
