"""Reading and validating microdata and the geography list, in two steps a release keeps apart (docs/input.md):
``read_input_files`` checks the files' structure only (no value decides it: it may refuse before the charge);
``geography_units`` and ``encoded_rows`` check every value, streamed (``pipeline.io.value_checks``: after the
charge, their failures depend on confidential values).  Errors name file, column and row, never a value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.geography.spine import UnitLookup, level_columns, unit_lookup
from censusdp.geography.tree import GeoTree, build_tree, fixed_width
from censusdp.pipeline.config.model import Format, ReleaseConfig, Universe
from censusdp.pipeline.errors import CensusDPError, InputError, InputProblem
from censusdp.pipeline.io.parts import InputPart, discover_parts, part_header, read_batches, read_body, read_header
from censusdp.pipeline.io.spine_codes import spine_units
from censusdp.pipeline.io.value_checks import (
    MDF_GROUP_COLUMN,
    MDF_RECORD_TYPE,
    check_type,
    encode_batch,
    geocode_columns,
)
from censusdp.pipeline.io.value_checks import geography_units as _geography_list

# Rows per batch.  A reader's transient grows with it (polars' frames, the texts a fingerprint hashes, the codes
# searched), its speed does not above this size (BENCHMARKS.md)
BATCH_ROWS = 1 << 17


@dataclass(frozen=True)
class InputFiles:
    """The input files, checked at file level only (no value read): the microdata's parts in reading order,
    their format, and the geography file (None: the units are the microdata's own codes)."""

    config: ReleaseConfig
    parts: tuple[InputPart, ...]
    format: Format
    geography: Path | None = None
    geography_format: str | None = None

    @property
    def path(self) -> Path:
        """``input.path``: the single file, or the dataset folder."""
        if self.config.input.path is None:  # read_input_files refuses a configuration without one
            raise CensusDPError("internal error: input files without a path")
        return self.config.input.path

    def __repr__(self) -> str:  # never show records
        return f"InputFiles(path={str(self.path)!r}, parts={len(self.parts)}, geography={self.geography is not None})"


@dataclass(frozen=True)
class EncodedBatch:
    """Each row's index into the lowest-level units and its detailed cell; int32 (int64 past 2^31 of them)."""

    units: np.ndarray
    cells: np.ndarray

    def __repr__(self) -> str:
        return f"EncodedBatch(rows={len(self.cells)})"


@dataclass(frozen=True)
class Microdata:
    """Validated records (persons, or units): each row's unit code and detailed cell."""

    path: str
    codes: pl.Series   # lowest-level unit code of every row (string)
    cells: np.ndarray  # detailed-histogram cell of every row (int64)

    def __repr__(self) -> str:  # never show records, even by accident in a log or a debugger dump
        return f"Microdata(path={self.path!r}, rows={len(self.cells)})"


def read_input_files(config: ReleaseConfig) -> InputFiles:
    """File-level checks of the microdata's parts and the geography file (no value decides their outcome)."""
    if config.input.path is None:
        raise InputError(config.source, "no microdata path: set input.path or pass --microdata",
                         category=InputProblem.FILE)
    fmt = config.input.format
    if config.universe is Universe.UNITS and not config.input.path.exists():
        raise InputError(str(config.input.path), "no such file: the housing units' file (next to the microdata unless "
                         "[units] path says otherwise); give --units FILE, or --no-units to release the persons only",
                         category=InputProblem.FILE)
    parts = discover_parts(config.input.path, fmt)
    required = list(geocode_columns(config)) + [a.column for a in config.schema.attributes]
    if fmt.is_mdf:
        required.append(MDF_GROUP_COLUMN)
    if fmt is Format.MDF_UNITS:
        required.append(MDF_RECORD_TYPE)
    for part in parts:
        header = part_header(part, fmt)
        for column in header:
            if "_duplicated_" in column:
                raise InputError(str(part.path), "duplicate column name", column=column.split("_duplicated_")[0],
                                 category=InputProblem.COLUMN)
        for name in dict.fromkeys(required):
            check_type(header, name, part.path)
    geography, geo_format = config.input.geography, None
    columns = level_columns(config.levels)
    if geography is None and columns:
        raise InputError(config.source, f"the levels read codes from the geography file's columns "
                         f"({', '.join(columns)}): set input.geography or pass --geography",
                         category=InputProblem.FILE)
    if geography is not None:
        geo_format = _geography_format(config, geography)
    return InputFiles(config=config, parts=parts, format=fmt, geography=geography, geography_format=geo_format)


def _geography_format(config: ReleaseConfig, geography: Path) -> str:
    """The geography file's format, its header checked for the code column and the levels' columns."""
    geo_format = "parquet" if geography.suffix.lower() in (".parquet", ".pq") else "csv"
    header = read_header(geography, geo_format)
    for name in dict.fromkeys([config.input.geography_column, *level_columns(config.levels)]):
        check_type(header, name, geography)
    return geo_format


def geography_tree(config: ReleaseConfig) -> GeoTree:
    """The tree of the geography file alone (public geography: no microdata is read)."""
    geography = config.input.geography
    if geography is None:
        raise InputError(config.source, "no geography file: the design's tree is its units (set input.geography or "
                         "pass --geography)", category=InputProblem.FILE)
    files = InputFiles(config, (), config.input.format, geography, _geography_format(config, geography))
    try:
        return build_tree(config.levels, geography_units(files))
    except ValueError as error:
        raise InputError(str(geography), str(error), category=InputProblem.GEOGRAPHY) from None


def _index_dtype(size: int) -> type[np.signedinteger]:
    return np.int32 if size <= np.iinfo(np.int32).max else np.int64


def geography_units(files: InputFiles, *, batch_rows: int = BATCH_ROWS) -> np.ndarray:
    """The sorted unique lowest-level unit codes (value level): the geography file's list, checked; without one,
    the distinct codes of every part, with every value check of ``encoded_rows`` but the listing (so a file's
    error does not depend on whether its units are listed elsewhere); EMPTY if no part has a record."""
    config = files.config
    if files.geography is not None and files.geography_format is not None:
        # the codes alone (and the levels' columns): the file's other columns are not needed, and at 8M blocks
        # not small
        column = config.input.geography_column
        columns = level_columns(config.levels)
        frame = read_body(files.geography, files.geography_format, list(dict.fromkeys([column, *columns])))
        if columns:
            return spine_units(frame, files.geography, config.levels, column)
        return _geography_list(frame, files.geography, config.levels[-1].width, column)
    codes: set[str] = set()  # empty only if no part has a record: a record always has a code ("" if missing)
    for part in files.parts:
        for offset, frame in _numbered_batches(part, files.format, batch_rows):
            codes.update(np.unique(encode_batch(frame, config, part.path, offset)[0]).tolist())
    if not codes:
        raise _empty(files)
    return np.array(sorted(codes), dtype=np.str_)


def geography_rows(files: InputFiles) -> int | None:
    """The geography file's rows (file level, public: a Parquet file's metadata, a CSV file's lines after the header);
    None without one, or where it cannot be read (``validate_inputs`` says why, after the charge)."""
    if files.geography is None:
        return None
    try:
        if files.geography_format == "parquet":
            return pq.ParquetFile(files.geography).metadata.num_rows
        with files.geography.open("rb") as handle:
            return max(0, sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b"")) - 1)
    except (OSError, ValueError, pa.ArrowException):
        return None


def lowest_lookup(config: ReleaseConfig, lowest_geoids: np.ndarray) -> UnitLookup:
    """The records' search among the sorted lowest-level units (a tree's, or a group's subtree's), made once for
    every part read against them (with column levels it sorts the units by their own codes)."""
    # fixed-width str_: a tree's lowest codes are compact (``geography.tree.LOWEST_GEOIDS``), but searching every
    # record's code among them is several times faster in this form (a group's or part's units: a small copy)
    lowest_geoids = fixed_width(lowest_geoids)
    if len(lowest_geoids) > 1 and not bool(np.all(lowest_geoids[:-1] < lowest_geoids[1:])):
        raise CensusDPError("internal error: the lowest-level units must be sorted and unique")
    return unit_lookup(config.levels, lowest_geoids)


def encoded_rows(files: InputFiles, part_index: int, lowest: np.ndarray | UnitLookup, *,
                 batch_rows: int = BATCH_ROWS) -> Iterator[EncodedBatch]:
    """Part ``part_index``'s records, every value checked and encoded, at most ``batch_rows`` per batch, in file
    order.  ``lowest``: the sorted lowest-level units, or their ``lowest_lookup``; a record whose unit is not among
    them is a GEOGRAPHY problem.  An empty part yields nothing (``validated_rows`` says EMPTY when no part has a
    record)."""
    config, part = files.config, files.parts[part_index]
    units = lowest if isinstance(lowest, UnitLookup) else lowest_lookup(config, lowest)
    source = str(files.geography) if files.geography is not None else "(the microdata itself)"
    unit_type, cell_type = _index_dtype(len(units.codes)), _index_dtype(config.schema.n_cells)
    for offset, frame in _numbered_batches(part, files.format, batch_rows):
        indices, cells = encode_batch(frame, config, part.path, offset, units, source)
        yield EncodedBatch(units=indices.astype(unit_type), cells=cells.astype(cell_type))


def _numbered_batches(part: InputPart, fmt: Format, batch_rows: int) -> Iterator[tuple[int, pl.DataFrame]]:
    """A part's batches, each with the number of the part's rows before it (errors name rows across batches)."""
    offset = 0
    for frame in read_batches(part, fmt, batch_rows):
        yield offset, frame
        offset += frame.height


def _empty(files: InputFiles) -> InputError:
    return InputError(str(files.path), f"contains no {files.config.universe.record} records",
                      category=InputProblem.EMPTY)


def validated_rows(files: InputFiles, *, batch_rows: int = BATCH_ROWS) -> tuple[GeoTree, np.ndarray, np.ndarray]:
    """Every value-level check, then the geography tree, each record's lowest-level unit index and cell (int64,
    every part's records in order: O(records) memory in integers)."""
    config = files.config
    units = geography_units(files, batch_rows=batch_rows)
    source = str(files.geography) if files.geography is not None else "(the microdata itself)"
    try:
        tree = build_tree(config.levels, units)
    except ValueError as error:
        raise InputError(source, str(error), category=InputProblem.GEOGRAPHY) from None
    unit_index, cells = _all_rows(files, tree.geoids[-1], batch_rows)
    return tree, unit_index, cells


def _all_rows(files: InputFiles, lowest_geoids: np.ndarray, batch_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Every part's encoded records, concatenated (int64); EMPTY if there is none."""
    units = lowest_lookup(files.config, lowest_geoids)
    batches = [b for index in range(len(files.parts)) for b in encoded_rows(files, index, units, batch_rows=batch_rows)]
    if sum(len(b.cells) for b in batches) == 0:
        raise _empty(files)
    return (np.concatenate([b.units for b in batches]).astype(np.int64),
            np.concatenate([b.cells for b in batches]).astype(np.int64))


def read_microdata(config: ReleaseConfig) -> Microdata:
    """Read, validate and encode the microdata named by ``config.input`` (both steps; for evaluation)."""
    files = read_input_files(config)
    units = geography_units(files)
    unit_index, cells = _all_rows(files, units, BATCH_ROWS)
    return Microdata(path=str(files.path), codes=pl.Series("__geocode", units[unit_index], dtype=pl.Utf8), cells=cells)
