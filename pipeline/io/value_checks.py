"""Value-level checks of one batch of microdata rows, and its encoding to (lowest-level unit, detailed cell).

Every check looks at the whole batch before any error is raised, and the error is the earliest bad row's (ties:
the first check, in the order docs/input.md lists), so it does not depend on how a file is cut into batches.
Errors name the file, the column and the 1-based row within the file; values are never quoted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from censusdp.geography.spine import UnitLookup
from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.model import Format, ReleaseConfig
from censusdp.pipeline.config.persons_per_unit import rules_matrix
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import InputError, InputProblem

MDF_GEO_COLUMNS = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")
MDF_GROUP_COLUMN = "TABBLKGRPCE"
MDF_WIDTHS = {"TABBLKST": 2, "TABBLKCOU": 3, "TABTRACTCE": 6, "TABBLKGRPCE": 1, "TABBLK": 4}
# The 2020 MDF unit layout (docs/units.md; the DAS's MDF_Unit validators): RTYPE 2 a housing unit, 4 group quarters;
# the columns that must agree with it where the file has them: rows where they disagree, and the rule.
MDF_RECORD_TYPE = "RTYPE"
MDF_RECORD_TYPES = {"2": "housing unit", "4": "group quarters"}
MDF_UNIT_RULES: dict[str, tuple[Callable[[pl.Series, pl.Series], pl.Series], str]] = {
    "GQTYPE": (lambda gq, value: gq == (value == "000"),
               "must be 000 for a housing unit (RTYPE 2) and a group-quarters type for group quarters (RTYPE 4)"),
    "VACS": (lambda gq, value: gq & (value != "0"), "must be 0 for group quarters (RTYPE 4): they are never vacant"),
    "HH_STATUS": (lambda gq, value: gq != (value == "0"),
                  "must be 0 (not a housing unit) for group quarters (RTYPE 4) and only for them"),
}
TYPES = (pl.Null, pl.Utf8, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64,
         pl.Categorical)


def geocode_columns(config: ReleaseConfig) -> tuple[str, ...]:
    """The columns whose concatenation is a record's lowest-level unit code."""
    if config.input.format.is_mdf:
        return MDF_GEO_COLUMNS
    return config.input.geocode_columns or (config.input.geocode_column,)


def check_type(schema: dict[str, pl.DataType], name: str, path: Path) -> None:
    """A required column is present and of a usable type (text or integers; Null, the type of a column whose
    values are all missing, is left for the value checks)."""
    if name not in schema:
        raise InputError(str(path), "missing column", column=name, category=InputProblem.COLUMN)
    if schema[name] not in TYPES:
        raise InputError(str(path), f"has type {schema[name]}, expected text or integers", column=name,
                         category=InputProblem.COLUMN)


class FirstProblem:
    """The earliest bad row seen so far among the checks of a batch (ties: the check seen first)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset
        self.first: tuple[int, str, str | None, InputProblem] | None = None  # row in the batch, problem, column

    def see(self, bad: pl.Series, problem: str, column: str, category: InputProblem) -> None:
        bad = bad.fill_null(False)  # a missing value is its own check's problem, never another's
        if bad.any() and (self.first is None or int(bad.arg_max()) < self.first[0]):
            self.first = (int(bad.arg_max()), problem, column, category)

    def raise_any(self) -> None:
        if self.first is not None:
            row, problem, column, category = self.first
            raise InputError(str(self.path), problem, column=column, row=self.offset + row + 1, category=category)


def _text(frame: pl.DataFrame, name: str, path: Path, problems: FirstProblem) -> pl.Series:
    """A required column as text, its missing values (null or blank) seen as problems."""
    check_type(dict(frame.schema), name, path)
    series = frame.get_column(name).cast(pl.Utf8)
    problems.see(series.is_null() | (series.str.strip_chars() == ""), "missing value", name,
                 InputProblem.MISSING_VALUE)
    return series


def _geocodes(frame: pl.DataFrame, config: ReleaseConfig, path: Path, problems: FirstProblem) -> pl.Series:
    width = config.levels[-1].unit_prefix
    columns = geocode_columns(config)
    parts = [_text(frame, c, path, problems) for c in columns]
    if config.input.format.is_mdf:
        group = _text(frame, MDF_GROUP_COLUMN, path, problems)
        for part in [*parts, group]:
            problems.see(part.str.len_chars() != MDF_WIDTHS[part.name],
                         f"code must have {MDF_WIDTHS[part.name]} characters", part.name, InputProblem.GEOCODE)
        problems.see(parts[-1].str.slice(0, 1) != group, "block group does not match the first digit of TABBLK",
                     MDF_GROUP_COLUMN, InputProblem.GEOCODE)
    codes = sum(parts[1:], start=parts[0])
    name = "+".join(columns)
    problems.see(codes.str.len_chars() != width, f"geocode must have {width} characters (the lowest level's width)",
                 name, InputProblem.GEOCODE)
    if width:
        problems.see(~codes.str.contains(r"^[0-9A-Za-z]+$"),
                     "malformed geocode (only letters and digits are allowed)", name, InputProblem.GEOCODE)
    return codes


def _indices(frame: pl.DataFrame, config: ReleaseConfig, path: Path, problems: FirstProblem) -> list[pl.Series]:
    indices = []
    for attribute in config.schema.attributes:
        series = _text(frame, attribute.column, path, problems)
        if attribute.bins:  # an integer's bin: the last edge at or below it (none below the first edge)
            number = series.str.strip_chars().cast(pl.Int64, strict=False)
            index = pl.Series(np.searchsorted(attribute.bins, number.fill_null(attribute.bins[0] - 1).to_numpy(),
                                              side="right") - 1, dtype=pl.Int64)
            index = index.set((index < 0) | number.is_null(), None)  # outside every bin, or not an integer
        else:
            index = series.replace_strict(attribute.source_to_index(), default=None, return_dtype=pl.Int64)
        problems.see(index.is_null() & series.is_not_null(), f"value outside the domain of attribute "
                     f"{attribute.name}", attribute.column, InputProblem.DOMAIN)
        indices.append(index)
    return indices


def _unit_records(frame: pl.DataFrame, path: Path, problems: FirstProblem) -> None:
    """The MDF unit layout's rules: every record a housing unit or group quarters, ``MDF_UNIT_RULES`` kept."""
    record = _text(frame, MDF_RECORD_TYPE, path, problems)
    problems.see(~record.is_in(list(MDF_RECORD_TYPES)) & record.is_not_null(),
                 "must be 2 (housing unit) or 4 (group quarters)", MDF_RECORD_TYPE, InputProblem.DOMAIN)
    gq = record == "4"
    for column, (disagrees, rule) in MDF_UNIT_RULES.items():
        if column in frame.columns:
            problems.see(disagrees(gq, _text(frame, column, path, problems)), rule, column, InputProblem.LAYOUT)


def encode_batch(frame: pl.DataFrame, config: ReleaseConfig, path: Path, offset: int,
                 units: UnitLookup | None = None, geography_source: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Check every value of a batch (rows ``offset + 1 ...`` of ``path``) and encode it: the rows' lowest-level
    unit codes (a string array; their units' indices in the tree when ``units`` is given) and detailed cells
    (int64).  Raises the ``InputError`` of the earliest bad row."""
    problems = FirstProblem(path, offset)
    codes = _geocodes(frame, config, path, problems)
    indices = _indices(frame, config, path, problems)
    if config.input.format is Format.MDF_UNITS:
        _unit_records(frame, path, problems)
    code_array = codes.fill_null("").to_numpy().astype(np.str_)
    encoded: np.ndarray = code_array
    if units is not None:
        encoded, found = units.find(code_array)
        problems.see(pl.Series(~found), f"geocode is not a unit of the geography file {geography_source}",
                     "geocode", InputProblem.GEOGRAPHY)
    problems.raise_any()
    cells = (np.ravel_multi_index(tuple(i.to_numpy() for i in indices), config.schema.shape).astype(np.int64)
             if indices else np.zeros(frame.height, dtype=np.int64))
    return encoded, cells


def geography_units(frame: pl.DataFrame, path: Path, width: int, column: str = "geocode") -> np.ndarray:
    """The geography file's lowest-level units (its code ``column``), as a sorted unique string array."""
    if frame.height == 0:
        raise InputError(str(path), "lists no geography units", category=InputProblem.GEOGRAPHY)
    problems = FirstProblem(path, 0)
    codes = _text(frame, column, path, problems)
    problems.raise_any()
    bad = codes.str.len_chars() != width
    if bad.any():
        raise InputError(str(path), f"{column} must have {width} characters", column=column,
                         row=int(bad.arg_max()) + 1, category=InputProblem.GEOGRAPHY)
    # duplicates are neighbours once sorted (the sort is needed anyway): no hash table of every code; only a file
    # that has one looks for the first in file order
    ordered = codes.sort()
    if len(ordered) > 1 and bool((ordered.slice(1) == ordered.slice(0, len(ordered) - 1)).any()):
        raise InputError(str(path), f"duplicate {column}", column=column,
                         row=int(codes.is_duplicated().arg_max()) + 1, category=InputProblem.DUPLICATE)
    return sorted_codes(ordered, width)


def sorted_codes(codes: pl.Series, width: int) -> np.ndarray:
    """Codes of ``width`` characters, sorted, as a numpy unicode array.  ASCII codes (every byte a character) go
    through one joined byte string, not a Python string per code."""
    ordered = codes if codes.flags["SORTED_ASC"] else codes.sort()  # a sort flagged by polars is not redone
    if width and len(ordered) and bool((ordered.str.len_bytes() == width).all()):
        joined = ordered.str.join("").item().encode("ascii")
        return np.frombuffer(joined, dtype=f"S{width}").astype(f"<U{width}")
    return ordered.to_numpy().astype(np.str_)


def persons_units_problem(config: ReleaseConfig, tree: GeoTree, persons: tuple[np.ndarray, np.ndarray],
                          units: tuple[np.ndarray, np.ndarray]) -> str | None:
    """The first lowest-level unit (in code order) whose records break a ``[[units.persons_per_unit]]`` rule, named
    with the rule, or None.  ``persons``/``units``: every record's lowest-level unit index and cell.  For the
    curator (``censusdp check``): it names a block of the confidential data."""
    if config.units is None or not config.persons_per_unit:
        return None
    rules = config.persons_per_unit
    n_blocks = tree.n_nodes(tree.depth - 1)

    def per_block(schema: Schema, selections: list[Any], records: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """(blocks, rules) counts of the records in each rule's cells."""
        index, cells = records
        by_cell = sp.csr_matrix((np.ones(len(cells), dtype=np.int64), (index, cells)), shape=(n_blocks, schema.n_cells))
        return (by_cell @ rules_matrix(schema, selections).T.astype(np.int64)).toarray()

    people = per_block(config.schema, [r.persons for r in rules], persons)
    housing = per_block(config.units.schema, [r.units for r in rules], units)
    low = np.array([r.min_persons for r in rules]) * housing
    high = np.array([r.max_persons for r in rules]) * housing
    bad = (people < low) | (people > high)
    if not bad.any():
        return None
    block, i = (int(v[0]) for v in np.nonzero(bad))
    rule = rules[i]
    return (f"{tree.geoids[-1][block]}: rule {rule.name!r} ([[units.persons_per_unit]]) is broken: every unit of its "
            f"units cells must hold {rule.min_persons} to {rule.max_persons} of its persons, and this block has "
            f"{int(people[block, i])} such persons in {int(housing[block, i])} such units")
