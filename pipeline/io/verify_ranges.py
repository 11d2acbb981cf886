"""The published level tables read a range of codes at a time, so ``censusdp verify`` holds a bounded part of a
nation's blocks (docs/verify.md, "Memory").

A range ``[lo, hi)`` of codes reads the row groups that may hold a code in it and keeps exactly its rows, so the
ranges of ``code_ranges`` see every row once, whatever order the files are in (in the published node order, a row
group is read about once).  Which codes a row group holds is read from its rows, never taken from its footer's
statistics: a hand-edited footer could then hide rows from the checks.  Only the row counts come from the footers,
to size the ranges (a false one can only make a range larger).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

Bound = str | None  # a range's end: None is open (the first range also holds the rows without a code)
BUCKET_ROWS = 1 << 17  # rows of a level's persons table checked at a time, about
EVERY_CODE: tuple[Bound, Bound] = (None, None)


@dataclass(frozen=True)
class Codes:
    """The codes one row group holds: the least and greatest (None: none), and whether a row has none."""

    least: str | None
    greatest: str | None
    nulls: bool

    def meet(self, lo: Bound, hi: Bound) -> bool:
        """Whether the row group may hold a row of the range ``[lo, hi)``."""
        if self.nulls and lo is None:
            return True
        return (self.least is not None and self.greatest is not None and (hi is None or self.least < hi)
                and (lo is None or self.greatest >= lo))


class UnreadableTable(ValueError):
    """A table's file does not read (``censusdp verify`` exits 2 naming it)."""


class IndexedTable:
    """A Parquet file or folder of parts (``files``, read in that order) whose rows are read by the codes of
    ``column``; each row group's codes are read once, the first time a range other than every code is asked for."""

    def __init__(self, files: Sequence[Path], column: str, groups: Sequence[tuple[Path, int]] | None = None) -> None:
        self.files, self.column = tuple(files), column
        self.group_rows = {}  # (file, row group) -> the rows its footer counts; no footer is kept (a wide table's
        schema = None  # are megabytes each)
        for file in self.files:
            parquet = pq.ParquetFile(file)
            columns = {field.name: field.type for field in parquet.schema_arrow}  # read by name: any order
            if schema is not None and columns != schema:
                raise UnreadableTable(f"{file}: its columns are not those of the table's other parts")
            schema, footer = columns, parquet.metadata
            self.group_rows.update({(file, i): footer.row_group(i).num_rows for i in range(footer.num_row_groups)})
        self.groups = list(self.group_rows) if groups is None else list(groups)

    @property
    def rows(self) -> int:
        """The rows the footers count (only to size the ranges)."""
        return sum(self.group_rows[group] for group in self.groups)

    def split(self, column: str) -> dict[str, IndexedTable]:
        """The table's row groups by each value of ``column`` they hold (a row group of several values is in each):
        the invariants file's levels, each then read alone."""
        out: dict[str, list[tuple[Path, int]]] = {}
        for file, index, rows in self._column(column):
            for value in rows.unique().to_list():
                out.setdefault(value, []).append((file, index))
        return {value: IndexedTable(self.files, self.column, groups) for value, groups in out.items()
                if value is not None}

    @cached_property
    def codes(self) -> list[Codes]:
        """Each row group's codes, as its rows hold them."""
        out = []
        for _, _, values in self._column(self.column):
            least, greatest = values.min(), values.max()
            out.append(Codes(least if isinstance(least, str) else None, greatest if isinstance(greatest, str) else None,
                             values.null_count() > 0))
        return out

    def _column(self, column: str) -> Iterator[tuple[Path, int, pl.Series]]:
        """Each row group's values of ``column`` as text, converted as the ranges' filter converts them (``batches``),
        in the table's order (a file opened once)."""
        for file, index, frame in self._row_groups(self.groups, [column]):
            try:
                yield file, index, frame.get_column(column).cast(pl.String)
            except pl.exceptions.PolarsError:
                raise UnreadableTable(f"{file}: its {column} does not read as codes") from None

    def _row_groups(self, groups: Sequence[tuple[Path, int]], columns: Sequence[str]
                    ) -> Iterator[tuple[Path, int, pl.DataFrame]]:
        """The row groups' named columns; ``UnreadableTable`` naming the file where one does not read."""
        opened: tuple[Path, pq.ParquetFile] | None = None
        for file, index in groups:
            try:
                if opened is None or opened[0] != file:
                    opened = (file, pq.ParquetFile(file))
                frame = pl.DataFrame(pl.from_arrow(opened[1].read_row_group(index, columns=list(columns))))
            except (OSError, ValueError, pa.ArrowException, pl.exceptions.PolarsError):
                raise UnreadableTable(f"{file}: unreadable (not a Parquet file, or its row groups do not read)"
                                      ) from None
            yield file, index, frame

    def read(self, columns: Sequence[str], lo: Bound, hi: Bound, where: pl.Expr | None = None) -> pl.DataFrame:
        """The rows whose code lies in ``[lo, hi)`` (strings compared as such; with ``lo`` None also those without
        a code), the named columns; only those ``where`` holds, if given; an empty frame of those columns where
        none does."""
        return pl.concat(list(self.batches(columns, lo, hi, where)))

    def batches(self, columns: Sequence[str], lo: Bound, hi: Bound, where: pl.Expr | None = None
                ) -> Iterator[pl.DataFrame]:
        """``read``'s rows a row group at a time (at least one frame, maybe empty)."""
        wanted = list(dict.fromkeys([self.column, *columns]))
        every = (lo, hi) == EVERY_CODE
        if lo is not None and hi is not None and lo >= hi:  # no code: nothing to read (nor to index)
            held = []
        else:
            held = [group for i, group in enumerate(self.groups) if every or self.codes[i].meet(lo, hi)]
        if not held:
            empty = pq.read_schema(self.files[0]).empty_table().select(wanted)
            yield pl.DataFrame(pl.from_arrow(empty)).select(columns)
        code = pl.col(self.column).cast(pl.String)
        keep = (code >= lo if lo is not None else pl.lit(True)) & (code < hi if hi is not None else pl.lit(True))
        if lo is None:
            keep = keep | code.is_null()
        keep = keep.fill_null(False) if where is None else keep.fill_null(False) & where.fill_null(False)
        for _, _, frame in self._row_groups(held, wanted):
            try:
                yield (frame if every and where is None else frame.filter(keep)).select(columns)
            except pl.exceptions.PolarsError:  # a code that does not convert to text
                raise UnreadableTable(f"{self.files[0].parent}: a table's {self.column} does not read as codes"
                                      ) from None


def code_ranges(table: IndexedTable, width: int, bucket_rows: int = BUCKET_ROWS) -> list[tuple[Bound, Bound]]:
    """Consecutive ranges of codes covering every string (the first also the rows without one), of about
    ``bucket_rows`` of ``table``'s rows each, cut at codes of ``width`` characters (the parent level's): a parent's
    children (codes it prefixes) all fall in one range, so the children's sums are checked range by range."""
    if table.rows <= bucket_rows:
        return [EVERY_CODE]
    cuts, taken = [], 0
    order = sorted(zip(table.codes, table.groups, strict=True), key=lambda g: (g[0].least is None, g[0].least or ""))
    for codes, group in order:
        if taken >= bucket_rows and codes.least is not None and len(codes.least) >= width:
            cuts.append(codes.least[:width])
            taken = 0
        taken += table.group_rows[group]
    bounds: list[Bound] = [None, *sorted(set(cuts)), None]
    return list(zip(bounds[:-1], bounds[1:], strict=True))
