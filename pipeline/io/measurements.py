"""The noisy measurements as a public, reloadable product (Parquet; columns: docs/run-folder.md).

A level's measurements are ``measurements/<level>.parquet``, or, when several processes measured it, the folder
``measurements/<level>/`` of part files ``part-NNNNNN.parquet`` in node order (``level_files``: a worker's part
is adopted by a rename, never re-encoded).  Re-running post-processing from these files needs no microdata and
spends no budget (Thm 19.25).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.directed_rounding import float_up
from censusdp.pipeline.io.histograms import compact_counts
from censusdp.postprocess import QueryInvariant, QueryMeasurement

INVARIANTS_FILE = "invariants.parquet"
PART_FILE = "part-{:06d}.parquet"  # a level folder's parts, named by their group's index: name order is node order


@dataclass(frozen=True)
class ChunkLocation:
    """Where a chunk's measurements lie: a file of the measurements folder (``block.parquet``, or a part:
    ``block/part-000003.parquet``) and the row group of its first query there (the others follow)."""

    file: str
    row_group: int


def _rows(level: str, geoids: np.ndarray, query: str, values: np.ndarray) -> dict[str, pa.Array | pa.ChunkedArray]:
    n_nodes, q_cells = values.shape
    node = np.repeat(np.arange(n_nodes, dtype=np.int32), q_cells)
    whole_nodes = max(1, REPEATED_ROWS // max(1, q_cells))  # the cells of as many nodes as fit in a shared block
    return {
        "level": repeated(_dictionary_block(level, values.size), values.size),
        "geoid": pa.DictionaryArray.from_arrays(node, pa.array(geoids.tolist(), type=pa.string())),
        "query": repeated(_dictionary_block(query, values.size), values.size),
        "cell": repeated(pa.array(np.tile(np.arange(q_cells, dtype=np.int32), whole_nodes)), values.size),
    }


REPEATED_ROWS = 1 << 16  # a column that repeats a pattern is one block of about this many values, shared


def repeated(block: pa.Array, n: int) -> pa.ChunkedArray:
    """The first ``n`` values of ``block`` repeated end to end, as chunks that all share ``block``'s buffers: a
    constant column of a 4M-row table takes one block's memory, not 4-8 bytes a row (the file is the same)."""
    if n == 0 or len(block) == 0:
        return pa.chunked_array([block.slice(0, 0)], type=block.type)
    whole, rest = divmod(n, len(block))
    return pa.chunked_array([block] * whole + ([block.slice(0, rest)] if rest else []), type=block.type)


def _dictionary_block(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(np.zeros(min(n, REPEATED_ROWS), dtype=np.int32), pa.array([value]))


def _constant(value: float, n: int) -> pa.ChunkedArray:
    return repeated(pa.array(np.full(min(n, REPEATED_ROWS), value)), n)


DICTIONARY_COLUMNS = ["level", "geoid", "query", "rho", "sigma2"]  # a few distinct values each
_TEXT = pa.dictionary(pa.int32(), pa.string())
# every column required (never null): Parquet then writes no definition level per value
MEASUREMENT_SCHEMA = pa.schema([pa.field(name, kind, nullable=False) for name, kind in (
    ("level", _TEXT), ("geoid", _TEXT), ("query", _TEXT), ("cell", pa.int32()), ("noisy_value", pa.int64()),
    ("rho", pa.float64()), ("sigma2", pa.float64()))])
DELTA_CODED = {"cell": "DELTA_BINARY_PACKED", "noisy_value": "DELTA_BINARY_PACKED"}


class LevelMeasurementWriter:
    """Appends one level's measurements chunk by chunk: row group ``chunk_number * n_queries + query_number`` holds
    that query's values for the chunk's nodes (``read_chunk``).  One background thread writes (Parquet encoding
    releases the GIL), so drawing the next chunk's noise overlaps writing this one's; a write error is raised by
    the next ``write_chunk`` or by ``close``."""

    # tables waiting: each is one query of one chunk, up to chunk_cells rows of 16 bytes (64 MB at the default 4M
    # cells; the constant columns are shared blocks: ``repeated``); two keep the writer thread busy
    QUEUED = 2

    def __init__(self, directory: Path, level: str, file_name: str | None = None) -> None:
        # never creates the folder: a task still running after its run failed or was published cannot recreate it
        self.path = directory / (file_name or f"{level}.parquet")
        self.file = self.path.name  # relative to the measurements folder (``ChunkLocation.file``)
        self.level = level
        self.row_groups = 0
        self._writer: pq.ParquetWriter | None = None
        self._queue: queue.Queue[pa.Table | None] = queue.Queue(maxsize=self.QUEUED)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while (table := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain: the producer learns of the error at its next call
            try:
                if self._writer is None:
                    # no column statistics: the file is read by row group, never filtered (a quarter of the writing);
                    # the integers delta-coded rather than dictionary-coded (a noisy value's dictionary only grows):
                    # faster to write and much faster to read back (BENCHMARKS.md)
                    self._writer = pq.ParquetWriter(self.path, table.schema, write_statistics=False,
                                                    use_dictionary=DICTIONARY_COLUMNS, column_encoding=DELTA_CODED)
                self._writer.write_table(table, row_group_size=max(1, table.num_rows))
            except BaseException as error:  # noqa: BLE001 - re-raised in the producer's thread
                self._error = error

    def _put(self, table: pa.Table) -> None:
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"measurements-{self.level}", daemon=True)
            self._thread.start()
        self._queue.put(table)
        self.row_groups += 1

    def write_chunk(self, geoids: np.ndarray, measurements: Sequence[QueryMeasurement],
                    rhos: Sequence[Fraction]) -> int:
        """Hand over the chunk's queries; returns the index of its first row group."""
        first = self.row_groups
        for measurement, rho in zip(measurements, rhos, strict=True):
            columns = _rows(self.level, geoids, measurement.name, measurement.noisy)
            columns["noisy_value"] = pa.array(measurement.noisy.ravel().astype(np.int64))
            columns["rho"] = _constant(float_up(rho), measurement.noisy.size)
            columns["sigma2"] = _constant(float(measurement.sigma2), measurement.noisy.size)
            self._put(pa.table(columns, schema=MEASUREMENT_SCHEMA))
        return first

    def close(self) -> Path:
        """Wait for every queued table to be written and close the file; raises a write's error."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._error is not None:
            raise self._error
        return self.path


def read_chunk(path: Path, first_row_group: int, shapes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """The noisy values of consecutive row groups, one (n_nodes, q_cells) int64 array per query, read-only: a view
    of the column pyarrow read, not a copy (the driver's estimate stage reads whole chunks of the upper levels)."""
    parquet = pq.ParquetFile(path)
    out = []
    for offset, shape in enumerate(shapes):
        group = first_row_group + offset
        if parquet.metadata.row_group(group).num_rows != shape[0] * shape[1]:
            raise ValueError(f"{path}: row group {group} does not hold one query of one chunk")
        values = np.asarray(parquet.read_row_group(group, columns=["noisy_value"]).column(0).to_numpy(),
                            dtype=np.int64).reshape(shape)
        values.flags.writeable = False  # also where pyarrow had to copy (a column of several chunks)
        out.append(values)
    return out


INVARIANT_NODES = 1 << 16  # nodes per written piece: a level's invariants in bounded memory (a units block level)


def write_invariants(directory: Path, per_level: Sequence[tuple[str, np.ndarray, Sequence[QueryInvariant]]]) -> Path:
    """Write every level's invariant values into one file, ``INVARIANT_NODES`` nodes at a time (with an invariant
    at every block, a nation's are 73M rows)."""
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("level", pa.dictionary(pa.int32(), pa.string())),
                        ("geoid", pa.dictionary(pa.int32(), pa.string())),
                        ("query", pa.dictionary(pa.int32(), pa.string())),
                        ("cell", pa.int32()), ("value", pa.int64())])
    path = directory / INVARIANTS_FILE
    with pq.ParquetWriter(path, schema) as writer:
        for level, geoids, invariants in per_level:
            for invariant in invariants:
                for start in range(0, len(invariant.values), INVARIANT_NODES):
                    values = invariant.values[start:start + INVARIANT_NODES]
                    columns = _rows(level, geoids[start:start + INVARIANT_NODES], invariant.name, values)
                    columns["value"] = pa.array(values.ravel().astype(np.int64))
                    writer.write_table(pa.table(columns).cast(schema))
    return path


def level_files(directory: Path, level: str) -> list[str]:
    """A level's measurement files, relative to ``directory``, in node order: the parts of its folder, or its
    one file; a level with neither is refused."""
    folder = directory / level
    if folder.is_symlink():  # the ledger's digest does not follow a linked folder: nor does the reader
        raise ValueError(f"{folder}: a level's measurements must be a folder of the run, not a link")
    if folder.is_dir():
        parts = sorted((_part_index(path), path.name) for path in folder.glob("part-*.parquet"))
        if parts:
            return [f"{level}/{name}" for _, name in parts]
    if (directory / f"{level}.parquet").is_file():
        return [f"{level}.parquet"]
    raise FileNotFoundError(f"{directory}: no measurements of level {level}")


def _part_index(path: Path) -> int:
    """A part's group index (node order), from its name ``part-NNNNNN.parquet`` (any number of digits)."""
    digits = path.name.removeprefix("part-").removesuffix(".parquet")
    if not digits.isdigit() or path.is_symlink():
        raise ValueError(f"{path}: not a measurement part of the run (part-NNNNNN.parquet, a plain file)")
    return int(digits)


def level_location(directory: Path, level: str) -> str:
    """The level's entry in a manifest, relative to ``directory``: its folder of parts, or its file."""
    files = level_files(directory, level)
    return level if "/" in files[0] else files[0]


def adopt_part(directory: Path, level: str, index: int, part: Path) -> str:
    """Move a worker's part file of ``level`` (group ``index``) into the level's folder, unchanged (a rename on
    the run's file system); returns its ``ChunkLocation.file``."""
    folder = directory / level
    folder.mkdir(parents=True, exist_ok=True)
    name = PART_FILE.format(index)
    os.replace(part, folder / name)
    return f"{level}/{name}"


def read_chunk_plan(directory: Path, level: str, n_queries: int, first_cells: int
                    ) -> list[tuple[int, int, ChunkLocation]]:
    """A level's chunks as its measurement files lay them out: (first node, stop node, location) per chunk, from
    the row counts of each chunk's first query (``first_cells`` cells per node), no row decoded."""
    plan, start = [], 0
    for file in level_files(directory, level):
        meta = pq.ParquetFile(directory / file).metadata
        for first in range(0, meta.num_row_groups, n_queries):
            stop = start + meta.row_group(first).num_rows // first_cells
            plan.append((start, stop, ChunkLocation(file, first)))
            start = stop
    return plan


def read_lowest_geoids(directory: Path, level: str, n_queries: int) -> np.ndarray:
    """Every geoid of the lowest level's measurements, from each chunk's first row group's dictionary (no row read)."""
    codes = []
    for file in level_files(directory, level):
        parquet = pq.ParquetFile(directory / file)
        codes += [parquet.read_row_group(i, columns=["geoid"]).column(0).combine_chunks().dictionary.to_numpy(
            zero_copy_only=False) for i in range(0, parquet.metadata.num_row_groups, n_queries)]
    return np.concatenate(codes).astype(np.str_) if codes else np.zeros(0, dtype=np.str_)


def read_level_table(directory: Path, level: str, columns: Sequence[str]) -> pa.Table:
    """The level's measurement rows (the named columns), every file in node order."""
    tables = [pq.read_table(directory / file, columns=list(columns)) for file in level_files(directory, level)]
    return pa.concat_tables(tables, promote_options="default")  # earlier versions wrote the columns nullable


def read_invariants(directory: Path, config: ReleaseConfig, tree: GeoTree) -> dict[int, list[QueryInvariant]]:
    """Each level's invariant values (published exactly), one (n_nodes, q_cells) array per query, node order."""
    schema = config.schema
    table = pq.read_table(directory / INVARIANTS_FILE)
    levels, queries = table.column("level").cast(pa.string()), table.column("query").cast(pa.string())
    out: dict[int, list[QueryInvariant]] = {}
    for level, spec in enumerate(config.levels):
        out[level] = []
        for query in (i.query for i in config.invariants if spec.name in i.levels):
            rows = table.filter(pc.and_(pc.equal(levels, spec.name), pc.equal(queries, query.name)))
            values = rows.column("value").to_numpy().reshape(tree.n_nodes(level), schema.query_cells(query))
            out[level].append(QueryInvariant(name=query.name, matrix=schema.query_matrix(query),
                                             values=compact_counts(values.astype(np.int64))))
    return out


def measurements_digest(directory: Path) -> str:
    """SHA-256 of every Parquet file (relative name, size and bytes, in name order) of a measurements folder, then
    of the units universe's beside it (``../units/measurements``), if any: the ledger vouches for both."""
    digest = hashlib.sha256()
    units = directory.parent / "units" / "measurements"
    files = sorted((path.relative_to(directory).as_posix(), path) for path in directory.rglob("*.parquet"))
    if units.is_dir():
        files += sorted((f"units/{path.relative_to(units).as_posix()}", path) for path in units.rglob("*.parquet"))
    for name, path in files:
        digest.update(f"{name}\n{path.stat().st_size}\n".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
