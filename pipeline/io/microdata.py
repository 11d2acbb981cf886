"""Reading and validating microdata and the geography list, in two steps that a release keeps apart.

1. ``read_input_files`` (file level): each file exists, its header (CSV) or schema (Parquet) is readable, and it
   has the required columns with usable types.  Its outcome depends on the files' structure and the
   configuration only, not on any person's values, so a release may run it before the ledger charge and refuse
   without charging.  It also reads the body, but a body that does not parse (a stray quote, an unquoted comma
   inside a value) depends on values: that failure is kept and reported by step 2, after the charge.
2. ``validate_input`` (value level): no missing values, geocodes of the right width and form, values inside
   the configured domains, geography codes unique and of the right width, every person's unit listed.  Its
   outcome depends on confidential values, so a release runs it only after the charge (a failure there is a
   charged failure, ``pipeline.release.stages``); ``censusdp check`` runs both steps for the data curator.

Errors name the file, the column and the row (1-based, counting data rows after any header) and carry an
``InputProblem`` category; values are never quoted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from geography.tree import GeoTree, build_tree
from pipeline.config.model import Format, ReleaseConfig
from pipeline.errors import CensusDPError, InputError, InputProblem

MDF_GEO_COLUMNS = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")
MDF_GROUP_COLUMN = "TABBLKGRPCE"
MDF_WIDTHS = {"TABBLKST": 2, "TABBLKCOU": 3, "TABTRACTCE": 6, "TABBLKGRPCE": 1, "TABBLK": 4}
# The 2020 MDF unit layout (docs/units.md; the DAS production code's MDF_Unit validators): RTYPE 2 is a housing unit,
# 4 a group-quarters facility.  The columns that must agree with it, where the file has them (the full unit file has
# GQTYPE and VACS, the P.L. 94-171 one HH_STATUS): rows where they disagree, and the rule, as a message.
MDF_RECORD_TYPE = "RTYPE"
MDF_RECORD_TYPES = {"2": "housing unit", "4": "group quarters"}
MDF_UNIT_RULES: dict[str, tuple[Callable[[pl.Series, pl.Series], pl.Series], str]] = {
    "GQTYPE": (lambda gq, value: gq == (value == "000"),
               "must be 000 for a housing unit (RTYPE 2) and a group-quarters type for group quarters (RTYPE 4)"),
    "VACS": (lambda gq, value: gq & (value != "0"), "must be 0 for group quarters (RTYPE 4): they are never vacant"),
    "HH_STATUS": (lambda gq, value: gq != (value == "0"),
                  "must be 0 (not a housing unit) for group quarters (RTYPE 4) and only for them"),
}
GEOCODE = "__geocode"
_TYPES = (pl.Null, pl.Utf8, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64,
          pl.Categorical)


@dataclass(frozen=True)
class InputFiles:
    """The input files read as they are (confidential), checked at file level only."""

    config: ReleaseConfig
    microdata: pl.DataFrame | None  # None if its body did not parse (``unreadable`` says why)
    geography: pl.DataFrame | None
    unreadable: InputError | None = None  # a body that did not parse: reported after the charge

    @property
    def parts(self) -> tuple[InputPart, ...]:
        path = self.config.input.path
        return (InputPart(path),) if path is not None else ()

    def __repr__(self) -> str:  # never show records
        rows = None if self.microdata is None else self.microdata.height
        return f"InputFiles(rows={rows}, geography={self.geography is not None})"


@dataclass(frozen=True)
class InputPart:
    """One file of the input: its path and its partition value (hive folders ``name=value``), None if none."""

    path: Path
    partition: str | None = None


@dataclass(frozen=True)
class EncodedBatch:
    """Validated records of one batch (confidential): unit index among the given lowest-level units, detailed cell."""

    units: np.ndarray
    cells: np.ndarray

    def __repr__(self) -> str:
        return f"EncodedBatch(rows={len(self.cells)})"


def encoded_rows(files: InputFiles, part: int, lowest_geoids: np.ndarray) -> Iterator[EncodedBatch]:
    """Every value check of one part, then its records encoded against ``lowest_geoids`` (a record whose unit is
    not among them is an error)."""
    microdata, _ = validate_input(files)
    source = str(files.config.input.geography) if files.config.input.geography else "(the microdata itself)"
    yield EncodedBatch(lowest_index_of_rows(microdata, lowest_geoids, source), microdata.cells)


def geography_units(files: InputFiles) -> np.ndarray:
    """The sorted lowest-level units of the geography file (or, without one, of the microdata)."""
    return validate_input(files)[1]


@dataclass(frozen=True)
class Microdata:
    """Validated records (persons, or units) reduced to what the release needs: unit code and detailed cell per
    row."""

    path: str
    codes: pl.Series   # lowest-level unit code of every row (string)
    cells: np.ndarray  # detailed-histogram cell of every row (int64)

    def __repr__(self) -> str:  # never show records, even by accident in a log or a debugger dump
        return f"Microdata(path={self.path!r}, rows={len(self.cells)})"


def _separator(path: Path, fmt: str) -> str:
    first = path.open("r", errors="replace").readline()
    return "|" if fmt in (Format.MDF_PL94, Format.MDF_UNITS) and first.count("|") > first.count(",") else ","


def _unreadable(path: Path, fmt: str, error: Exception) -> InputError:
    kind = "Parquet" if fmt == "parquet" else "CSV"
    return InputError(str(path), f"not a readable {kind} file ({type(error).__name__})", category=InputProblem.FILE)


def read_header(path: Path, fmt: str) -> dict[str, pl.DataType]:
    """The file's columns and types, from its Parquet schema or CSV header only (no value is read)."""
    if not path.exists():
        raise InputError(str(path), "no such file", category=InputProblem.FILE)
    if not path.resolve().is_file():  # a folder or a glob would read several files as one: other "data"
        raise InputError(str(path), "not a file (a folder or a pattern is not accepted)", category=InputProblem.FILE)
    try:
        with path.open("rb") as handle:  # a handle: no glob or folder expansion by the reader
            if fmt == "parquet":
                return dict(pl.read_parquet_schema(handle))
            frame = pl.read_csv(handle, infer_schema=False, separator=_separator(path, fmt), n_rows=0)
        return dict(frame.schema)
    except (pl.exceptions.PolarsError, OSError, ValueError) as error:
        raise _unreadable(path, fmt, error) from None


def read_body(path: Path, fmt: str) -> pl.DataFrame:
    """The whole file as it is (a file whose header was read); a failure here depends on values."""
    try:
        with path.open("rb") as handle:
            if fmt == "parquet":
                return pl.read_parquet(handle)
            return pl.read_csv(handle, infer_schema=False, separator=_separator(path, fmt))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001 - a polars panic too: reported after the charge, by type
        raise _unreadable(path, fmt, error) from None


def geocode_columns(config: ReleaseConfig) -> tuple[str, ...]:
    """The columns whose concatenation is a person's lowest-level unit code."""
    if config.input.format.is_mdf:
        return MDF_GEO_COLUMNS
    return config.input.geocode_columns or (config.input.geocode_column,)


def read_input_files(config: ReleaseConfig) -> InputFiles:
    """File-level checks of the microdata and the geography file (no value decides their outcome)."""
    if config.input.path is None:
        raise InputError(config.source, "no microdata path: set input.path or pass --microdata",
                         category=InputProblem.FILE)
    path, fmt = config.input.path, config.input.format
    header = read_header(path, fmt)
    for column in header:
        if "_duplicated_" in column:
            raise InputError(str(path), "duplicate column name", column=column.split("_duplicated_")[0],
                             category=InputProblem.COLUMN)
    required = list(geocode_columns(config)) + [a.column for a in config.schema.attributes]
    if fmt.is_mdf:
        required.append(MDF_GROUP_COLUMN)
    if fmt is Format.MDF_UNITS:
        required.append(MDF_RECORD_TYPE)
    for name in dict.fromkeys(required):
        _check_type(header, name, path)
    geography, geo_format = None, None
    if config.input.geography is not None:
        geo_path = config.input.geography
        geo_format = "parquet" if geo_path.suffix.lower() in (".parquet", ".pq") else "csv"
        _check_type(read_header(geo_path, geo_format), "geocode", geo_path)
    # a body that does not parse is kept for after the charge: whether it parses depends on its values
    microdata, unreadable = None, None
    try:
        microdata = read_body(path, fmt)
        if config.input.geography is not None and geo_format is not None:
            geography = read_body(config.input.geography, geo_format)
    except InputError as error:
        unreadable = error
    return InputFiles(config=config, microdata=microdata, geography=geography, unreadable=unreadable)


def validate_input(files: InputFiles) -> tuple[Microdata, np.ndarray]:
    """Value-level checks; returns the encoded microdata and the sorted lowest-level units of the geography
    file (or, without one, those of the microdata)."""
    config, path = files.config, files.config.input.path
    if files.unreadable is not None:
        raise files.unreadable
    frame = files.microdata
    if path is None or frame is None:  # read_input_files refuses a configuration without a path
        raise CensusDPError("internal error: validating input files that were never read")
    if frame.height == 0:
        raise InputError(str(path), f"contains no {config.universe.record} records", category=InputProblem.EMPTY)
    microdata = Microdata(path=str(path), codes=_geocodes(frame, config, path), cells=_cells(frame, config, path))
    if config.input.format is Format.MDF_UNITS:
        _check_unit_records(frame, path)
    width = config.levels[-1].width
    if files.geography is not None and config.input.geography is not None:
        units = _geography_units(files.geography, config.input.geography, width)
    else:
        units = np.unique(microdata.codes.to_numpy().astype(np.str_))
    return microdata, units


def validated_rows(files: InputFiles) -> tuple[GeoTree, np.ndarray, np.ndarray]:
    """Every value-level check, then the geography tree, each person's lowest-level unit index and cell."""
    config = files.config
    microdata, units = validate_input(files)
    source = str(config.input.geography) if config.input.geography is not None else "(the microdata itself)"
    try:
        tree = build_tree(config.levels, units)
    except ValueError as error:
        raise InputError(source, str(error), category=InputProblem.GEOGRAPHY) from None
    return tree, lowest_index_of_rows(microdata, tree.geoids[-1], source), microdata.cells


def read_microdata(config: ReleaseConfig) -> Microdata:
    """Read, validate and encode the microdata named by ``config.input`` (both steps; for evaluation)."""
    return validate_input(read_input_files(config))[0]


def _check_type(schema: dict[str, pl.DataType], name: str, path: Path) -> None:
    """A required column is present and of a usable type (text or integers; Null, the type of a column whose
    values are all missing, is left for the value checks)."""
    if name not in schema:
        raise InputError(str(path), "missing column", column=name, category=InputProblem.COLUMN)
    if schema[name] not in _TYPES:
        raise InputError(str(path), f"has type {schema[name]}, expected text or integers", column=name,
                         category=InputProblem.COLUMN)


def _typed_column(frame: pl.DataFrame, name: str, path: Path) -> pl.Series:
    """A required column (checked by ``_check_type``) as strings."""
    _check_type(dict(frame.schema), name, path)
    return frame.get_column(name).cast(pl.Utf8)


def _column(frame: pl.DataFrame, name: str, path: Path) -> pl.Series:
    """A required column as strings, with nulls and empty strings rejected (naming the first bad row)."""
    series = _typed_column(frame, name, path)
    bad = series.is_null() | (series.str.strip_chars() == "")
    if bad.any():
        raise InputError(str(path), "missing value", column=name, row=int(bad.arg_max()) + 1,
                         category=InputProblem.MISSING_VALUE)
    return series


def _geocode_error(path: Path, problem: str, column: str, bad: pl.Series) -> InputError:
    return InputError(str(path), problem, column=column, row=int(bad.arg_max()) + 1, category=InputProblem.GEOCODE)


def _geocodes(frame: pl.DataFrame, config: ReleaseConfig, path: Path) -> pl.Series:
    width = config.levels[-1].width
    columns = geocode_columns(config)
    parts = [_column(frame, c, path) for c in columns]
    if config.input.format.is_mdf:
        group = _column(frame, MDF_GROUP_COLUMN, path)
        for part in [*parts, group]:
            bad = part.str.len_chars() != MDF_WIDTHS[part.name]
            if bad.any():
                raise _geocode_error(path, f"code must have {MDF_WIDTHS[part.name]} characters", part.name, bad)
        bad = parts[-1].str.slice(0, 1) != group
        if bad.any():
            raise _geocode_error(path, "block group does not match the first digit of TABBLK", MDF_GROUP_COLUMN, bad)
    codes = parts[0]
    for part in parts[1:]:
        codes = codes + part
    name = "+".join(columns)
    bad = codes.str.len_chars() != width
    if bad.any():
        raise _geocode_error(path, f"geocode must have {width} characters (the lowest level's width)", name, bad)
    bad = ~codes.str.contains(r"^[0-9A-Za-z]+$") if width else pl.Series([False])
    if bad.any():
        raise _geocode_error(path, "malformed geocode (only letters and digits are allowed)", name, bad)
    return codes.rename(GEOCODE)


def _cells(frame: pl.DataFrame, config: ReleaseConfig, path: Path) -> np.ndarray:
    schema = config.schema
    indices = []
    for attribute in schema.attributes:
        series = _column(frame, attribute.column, path)
        lookup = attribute.source_to_index()
        index = series.replace_strict(lookup, default=None, return_dtype=pl.Int64)
        missing = index.is_null()
        if missing.any():
            raise InputError(str(path), f"value outside the domain of attribute {attribute.name}",
                             column=attribute.column, row=int(missing.arg_max()) + 1, category=InputProblem.DOMAIN)
        indices.append(index.to_numpy())
    return np.ravel_multi_index(tuple(indices), schema.shape).astype(np.int64)


def _check_unit_records(frame: pl.DataFrame, path: Path) -> None:
    """The MDF unit layout's own rules: every record a housing unit or group quarters, and the columns that
    depend on which (``MDF_UNIT_RULES``) agreeing with it.  After the attribute checks: a value outside an
    attribute's domain is reported as such first."""
    record = _column(frame, MDF_RECORD_TYPE, path)
    bad = ~record.is_in(list(MDF_RECORD_TYPES))
    if bad.any():
        raise InputError(str(path), "must be 2 (housing unit) or 4 (group quarters)", column=MDF_RECORD_TYPE,
                         row=int(bad.arg_max()) + 1, category=InputProblem.DOMAIN)
    gq = record == "4"
    for column, (disagrees, rule) in MDF_UNIT_RULES.items():
        if column in frame.columns:
            bad = disagrees(gq, _column(frame, column, path))
            if bad.any():
                raise InputError(str(path), rule, column=column, row=int(bad.arg_max()) + 1,
                                 category=InputProblem.LAYOUT)


def _geography_units(frame: pl.DataFrame, path: Path, width: int) -> np.ndarray:
    """The list of every lowest-level unit (column ``geocode``), as a sorted unique string array."""
    if frame.height == 0:
        raise InputError(str(path), "lists no geography units", category=InputProblem.GEOGRAPHY)
    codes = _column(frame, "geocode", path)
    bad = codes.str.len_chars() != width
    if bad.any():
        raise InputError(str(path), f"geocode must have {width} characters", column="geocode",
                         row=int(bad.arg_max()) + 1, category=InputProblem.GEOGRAPHY)
    dup = codes.is_duplicated()
    if dup.any():
        raise InputError(str(path), "duplicate geocode", column="geocode", row=int(dup.arg_max()) + 1,
                         category=InputProblem.DUPLICATE)
    return np.sort(codes.to_numpy().astype(np.str_))


def lowest_index_of_rows(microdata: Microdata, lowest_geoids: np.ndarray, geography_source: str) -> np.ndarray:
    """Each row's index among the lowest-level units; a row whose unit is not listed is an error."""
    units = pl.DataFrame({GEOCODE: pl.Series(lowest_geoids.tolist(), dtype=pl.Utf8),
                          "__unit": np.arange(len(lowest_geoids), dtype=np.int64)})
    joined = pl.DataFrame({GEOCODE: microdata.codes}).join(units, on=GEOCODE, how="left", maintain_order="left")
    unit = joined.get_column("__unit")
    missing = unit.is_null()
    if missing.any():
        raise InputError(microdata.path, f"geocode is not a unit of the geography file {geography_source}",
                         column="geocode", row=int(missing.arg_max()) + 1, category=InputProblem.GEOGRAPHY)
    return unit.to_numpy().astype(np.int64)
