"""The geography file's units as spine codes, when levels take their codes from its columns (``geography.spine``).

The file is public geography, so its errors may name rows; they name file, column and rows, as the other input
errors do.  A level's node is its own code (a column's value, or a prefix of the unit code): one that lies in two
nodes of the level above is refused, for a hierarchy that does not nest has no tree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from censusdp.geography.levels import Level
from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.value_checks import geography_units, sorted_codes

CODE = r"^[0-9A-Za-z]+$"


def _column_codes(frame: pl.DataFrame, path: Path, column: str, width: int) -> pl.Series:
    """A level's column as text, every value present, of ``width`` letters and digits."""
    codes = frame.get_column(column).cast(pl.Utf8)
    for bad, problem in ((codes.is_null() | (codes.str.strip_chars() == ""), "missing value"),
                         (codes.str.len_chars() != width, f"must have {width} characters (the level's width)"),
                         (~codes.str.contains(CODE), "malformed code (only letters and digits are allowed)")):
        bad = bad.fill_null(True)
        if bad.any():
            raise InputError(str(path), problem, column=column, row=int(bad.arg_max()) + 1,
                             category=InputProblem.GEOGRAPHY)
    return codes


def _check_nesting(nodes: pl.Series, parents: pl.Series, path: Path, level: Level, above: Level) -> None:
    """Refuse a node of ``level`` that lies in two nodes of ``above``, naming the two rows."""
    frame = pl.DataFrame({"node": nodes, "parent": parents}).with_row_index("row")
    first = frame.group_by("node", maintain_order=True).agg(pl.col("parent").first().alias("first_parent"),
                                                              pl.col("row").first().alias("first_row"))
    clash = frame.join(first, on="node").filter(pl.col("parent") != pl.col("first_parent")).sort("row").head(1)
    if clash.height:
        one, two = int(clash["first_row"][0]) + 1, int(clash["row"][0]) + 1
        column = level.column or "the unit code"
        raise InputError(str(path), f"level {level.name!r} does not nest: rows {one} and {two} put one {level.name} "
                         f"({column}) in two {above.name} nodes", column=level.column, row=two,
                         category=InputProblem.GEOGRAPHY)


def spine_units(frame: pl.DataFrame, path: Path, levels: tuple[Level, ...], column: str) -> np.ndarray:
    """The sorted spine codes of the geography file's units (``column``: their own codes), every code checked and
    every level's nesting."""
    geography_units(frame, path, levels[-1].unit_prefix, column)  # each unit once, every code well formed
    units = frame.get_column(column).cast(pl.Utf8)
    spine = pl.Series([""] * frame.height, dtype=pl.Utf8)
    unit_width = 0
    below_column = False
    for above, level in zip(levels, levels[1:], strict=False):
        if level.column is not None:
            own = _column_codes(frame, path, level.column, level.width - above.width)
            part = own
            below_column = True
        else:
            own = units.str.slice(0, level.unit_prefix)
            part = units.str.slice(unit_width, level.unit_prefix - unit_width)
            unit_width = level.unit_prefix
        if below_column and level is not levels[-1]:
            _check_nesting(own, spine, path, level, above)
        spine = spine + part
    return sorted_codes(spine, levels[-1].width)
