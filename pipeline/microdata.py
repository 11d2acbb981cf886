"""Reading and validating microdata and the geography list.

Every row is either counted or the run fails with one line naming the file, the column and the row
(1-based, counting data rows after any header).  Values are never quoted in errors: a microdata value is
confidential, and error text reaches logs and Prefect's database.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.config import ReleaseConfig
from pipeline.errors import InputError

MDF_GEO_COLUMNS = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK")
GEOCODE = "__geocode"
CELL = "__cell"


@dataclass(frozen=True)
class Microdata:
    """Validated person records reduced to what the release needs: unit code and detailed cell per row."""

    path: str
    codes: pl.Series   # lowest-level unit code of every row (string)
    cells: np.ndarray  # detailed-histogram cell of every row (int64)

    def __repr__(self) -> str:  # never show records, even by accident in a log or a debugger dump
        return f"Microdata(path={self.path!r}, rows={len(self.cells)})"


def read_frame(path: Path, fmt: str) -> pl.DataFrame:
    """Read a file as it is; every format's failure becomes an InputError naming the file."""
    if not path.exists():
        raise InputError(str(path), "no such file")
    try:
        if fmt == "parquet":
            return pl.read_parquet(path)
        first = path.open("r", errors="replace").readline()
        separator = "|" if fmt == "mdf-pl94" and first.count("|") > first.count(",") else ","
        return pl.read_csv(path, infer_schema=False, separator=separator)
    except (pl.exceptions.PolarsError, OSError, ValueError) as error:
        kind = "Parquet" if fmt == "parquet" else "CSV"
        raise InputError(str(path), f"not a readable {kind} file ({type(error).__name__})") from None


def read_microdata(config: ReleaseConfig) -> Microdata:
    """Read, validate and encode the microdata named by ``config.input``."""
    if config.input.path is None:
        raise InputError(config.source, "no microdata path: set input.path or pass --microdata")
    path = config.input.path
    frame = read_frame(path, config.input.format)
    if frame.height == 0:
        raise InputError(str(path), "contains no person records")
    _check_duplicate_columns(frame, path)
    codes = _geocodes(frame, config, path)
    cells = _cells(frame, config, path)
    return Microdata(path=str(path), codes=codes, cells=cells)


def _check_duplicate_columns(frame: pl.DataFrame, path: Path) -> None:
    for column in frame.columns:
        if "_duplicated_" in column:
            raise InputError(str(path), "duplicate column name", column=column.split("_duplicated_")[0])


def _column(frame: pl.DataFrame, name: str, path: Path) -> pl.Series:
    """A required column as strings, with nulls and empty strings rejected (naming the first bad row)."""
    if name not in frame.columns:
        raise InputError(str(path), "missing column", column=name)
    series = frame.get_column(name)
    if series.dtype not in (pl.Utf8, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
                            pl.UInt64, pl.Categorical):
        raise InputError(str(path), f"has type {series.dtype}, expected text or integers", column=name)
    series = series.cast(pl.Utf8)
    bad = series.is_null() | (series.str.strip_chars() == "")
    if bad.any():
        raise InputError(str(path), "missing value", column=name, row=int(bad.arg_max()) + 1)
    return series


def _geocodes(frame: pl.DataFrame, config: ReleaseConfig, path: Path) -> pl.Series:
    width = config.levels[-1].width
    if config.input.format == "mdf-pl94":
        parts = [_column(frame, c, path) for c in MDF_GEO_COLUMNS]
        widths = (2, 3, 6, 1, 4)
        for part, w in zip(parts, widths, strict=True):
            bad = part.str.len_chars() != w
            if bad.any():
                raise InputError(str(path), f"code must have {w} characters", column=part.name,
                                 row=int(bad.arg_max()) + 1)
        state, county, tract, group, block = parts
        bad = block.str.slice(0, 1) != group
        if bad.any():
            raise InputError(str(path), "block group does not match the first digit of TABBLK",
                             column="TABBLKGRPCE", row=int(bad.arg_max()) + 1)
        codes = state + county + tract + block
        name = "TABBLKST+TABBLKCOU+TABTRACTCE+TABBLK"
    elif config.input.geocode_columns:
        parts = [_column(frame, c, path) for c in config.input.geocode_columns]
        codes = parts[0]
        for part in parts[1:]:
            codes = codes + part
        name = "+".join(config.input.geocode_columns)
    else:
        name = config.input.geocode_column
        codes = _column(frame, name, path)
    bad = codes.str.len_chars() != width
    if bad.any():
        raise InputError(str(path), f"geocode must have {width} characters (the lowest level's width)",
                         column=name, row=int(bad.arg_max()) + 1)
    bad = ~codes.str.contains(r"^[0-9A-Za-z]+$") if width else pl.Series([False])
    if bad.any():
        raise InputError(str(path), "malformed geocode (only letters and digits are allowed)", column=name,
                         row=int(bad.arg_max()) + 1)
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
                             column=attribute.column, row=int(missing.arg_max()) + 1)
        indices.append(index.to_numpy())
    return np.ravel_multi_index(tuple(indices), schema.shape).astype(np.int64)


def read_geography(path: Path, width: int) -> np.ndarray:
    """The list of every lowest-level unit (column ``geocode``), as a sorted unique string array."""
    fmt = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
    frame = read_frame(path, fmt)
    if frame.height == 0:
        raise InputError(str(path), "lists no geography units")
    codes = _column(frame, "geocode", path)
    bad = codes.str.len_chars() != width
    if bad.any():
        raise InputError(str(path), f"geocode must have {width} characters", column="geocode",
                         row=int(bad.arg_max()) + 1)
    dup = codes.is_duplicated()
    if dup.any():
        raise InputError(str(path), "duplicate geocode", column="geocode", row=int(dup.arg_max()) + 1)
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
                         column="geocode", row=int(missing.arg_max()) + 1)
    return unit.to_numpy().astype(np.int64)
