"""The lowest level's published outputs (its table, the protected microdata, each summary table set's lowest level),
written by its reconciliation tasks as one part file per chunk, staged and renamed into place once complete
(docs/dask.md).  Post-processing of published counts only (Thm 19.25).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from censusdp.geography.levels import Level
from censusdp.geography.spine import unit_codes
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.summary_tables import SummaryTableWriter, TableColumns, summary_path, table_columns
from censusdp.pipeline.io.tables import LevelTableWriter, ProtectedMicrodataWriter
from censusdp.pipeline.release.run import Release
from censusdp.pipeline.release.universes import check_same_blocks, disagreements, disagreements_apply

PART_FILE = "part-{:06d}.parquet"  # a chunk's part of each lowest output: name order is node order
STAGING = ".lowest-parts-"  # + an attempt's token, under the run's work_dir: parts renamed into place when complete
MICRODATA = "microdata.parquet"


@dataclass(frozen=True)
class LowestOutputs:
    """Where the lowest level's outputs go and what they hold (public: paths, schemas, columns)."""

    level_table: str  # tables/<lowest>.parquet, a folder of parts
    microdata: str | None  # microdata.parquet, a folder of parts (None: not configured)
    summary_tables: tuple[tuple[str, tuple[TableColumns, ...]], ...]  # (folder, its columns) per configured set
    staging: str
    schema: Schema
    geocode_parts: tuple[tuple[str, int], ...]
    levels: tuple[Level, ...]  # the protected microdata's rows carry unit codes, not spine codes
    units_schema: Schema | None  # the units universe's, when its disagreements with the persons are counted
    with_units: bool = False  # a units universe: its lowest tasks write the summary tables (H1 is theirs)

    def folders(self, summaries: bool = True) -> list[Path]:
        names = (self.level_table, self.microdata, *(f for f, _ in self.summary_tables if summaries))
        return [Path(f) for f in names if f]


@dataclass(frozen=True)
class LowestPart:
    """One chunk's share of the lowest outputs: its index and its nodes' geoids."""

    outputs: LowestOutputs
    index: int
    geoids: np.ndarray

    def __repr__(self) -> str:
        return f"LowestPart(index={self.index}, nodes={len(self.geoids)})"


def lowest_outputs(release: Release) -> LowestOutputs:
    """The persons' lowest outputs for this attempt, their folders made empty (``prepare``)."""
    run, config, work = release.persons, release.config, release.work_dir
    check_same_blocks(release)  # the units' blocks are paired with these by position
    units_schema = release.units.schema if release.units is not None else None
    lowest = config.levels[-1].name
    outputs = LowestOutputs(
        level_table=str(work / "tables" / f"{lowest}.parquet"),
        microdata=str(work / MICRODATA) if config.output.protected_microdata else None,
        summary_tables=tuple((str(summary_path(work / "tables", tables, lowest)),
                              tuple(table_columns(tables, run.schema, units_schema)))
                             for tables in config.output.tables),
        staging=str(work / f"{STAGING}{uuid.uuid4().hex}"), schema=run.schema,
        geocode_parts=config.output.geocode_parts, levels=config.levels,
        units_schema=units_schema if units_schema is not None and disagreements_apply(run.schema, units_schema)
        else None, with_units=units_schema is not None)
    prepare(outputs)
    return outputs


def prepare(outputs: LowestOutputs) -> None:
    """Empty output folders and this attempt's staging folder; earlier attempts' staging folders (and parts) go."""
    staging = Path(outputs.staging)
    for earlier in staging.parent.glob(f"{STAGING}*"):
        shutil.rmtree(earlier, ignore_errors=True)
    for folder in outputs.folders():
        shutil.rmtree(folder, ignore_errors=True) if folder.is_dir() else folder.unlink(missing_ok=True)
        folder.mkdir(parents=True)
    staging.mkdir(parents=True)


PERSONS_COUNTS = "persons-{:06d}.npz"  # in the staging folder: a chunk's persons, for its units' task (H1)


def write_lowest_part(part: LowestPart, counts: sp.csr_matrix) -> dict[str, int]:
    """Write the chunk's part of every lowest output; with a units universe the summary tables (H1) are the units'
    task's, so the persons' counts wait for it in the staging folder."""
    outputs = part.outputs
    with _staged_parts(part) as staged:
        writers = [(LevelTableWriter(staged(outputs.level_table), outputs.schema, make_folder=False), part.geoids)]
        if outputs.microdata is not None:
            writers.append((ProtectedMicrodataWriter(staged(outputs.microdata), outputs.schema, outputs.geocode_parts,
                                                     make_folder=False), unit_codes(outputs.levels, part.geoids)))
        for writer, codes in writers:
            writer.write_chunk(codes, counts)
            writer.close()
        if outputs.with_units:
            pending = staged(outputs.staging, PERSONS_COUNTS.format(part.index))
            with open(pending, "wb") as handle:  # a file object: np.savez would add its own suffix
                sp.save_npz(handle, counts)
        else:
            _write_summaries(part, staged, [counts])
    return {}


def write_units_part(part: LowestPart, units_counts: sp.csr_matrix) -> dict[str, int]:
    """The units' lowest task: the chunk's summary tables from its staged persons and its units; its disagreements."""
    outputs = part.outputs
    counts = sp.load_npz(Path(outputs.staging) / PERSONS_COUNTS.format(part.index)).tocsr()
    with _staged_parts(part) as staged:
        _write_summaries(part, staged, [counts, units_counts])
    if outputs.units_schema is None:
        return {}
    return disagreements(outputs.schema, outputs.units_schema, counts, units_counts)


@contextmanager
def _staged_parts(part: LowestPart) -> Iterator[Callable[..., Path]]:
    """Names in the staging folder for this attempt's files, renamed into place once all are written."""
    name, staging = PART_FILE.format(part.index), Path(part.outputs.staging)
    token = uuid.uuid4().hex  # this task attempt's own names: a second attempt of the task never shares them
    written: list[tuple[Path, Path]] = []

    def staged(folder: str, target: str = name) -> Path:
        source = staging / f"{token}-{len(written)}-{target}"
        written.append((source, Path(folder) / target))
        return source

    yield staged
    for source, target in written:  # each part complete before it is in place
        os.replace(source, target)


def _write_summaries(part: LowestPart, staged: Callable[..., Path], sources: list[sp.csr_matrix]) -> None:
    for folder, columns in part.outputs.summary_tables:
        writer = SummaryTableWriter(staged(folder), columns, make_folder=False)
        writer.write_rows(np.asarray(part.geoids), sources[:len(columns)])  # H1: the units' counts
        writer.close()


def finish_lowest_outputs(outputs: LowestOutputs, n_chunks: int, found: Iterable[Mapping[str, int]],
                          persons_only: bool = False) -> dict[str, int] | None:
    """Once every task is back: check every output holds one part per chunk, remove the staging folder and return
    the summed disagreements (None if not counted); ``persons_only``: before the units' tasks, nothing removed."""
    expected = {PART_FILE.format(i) for i in range(n_chunks)}
    for folder in outputs.folders(summaries=not persons_only):
        if {p.name for p in folder.iterdir()} != expected:
            raise CensusDPError(f"internal error: {folder.name} does not hold one part per chunk of the lowest level")
    if persons_only:
        return None
    shutil.rmtree(outputs.staging, ignore_errors=True)
    total: Counter[str] = Counter()
    for counts in found:
        total.update(counts)
    return dict(total) if outputs.units_schema is not None else None
