"""Summary tables (``tables/<set>/<level>.parquet``, docs/tables.md): sums of the reconciled detailed cells, one
wide row per node, so every summary count is post-processing of public values (Thm 19.25), integer and
non-negative, and the tables agree with each other and with the detailed ones.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.config.persons_per_unit import selection_mask
from censusdp.pipeline.config.pl94_tables import Variable, h1_schema_problem, h1_variables, pl94_variables
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.io.tables import ChunkedParquet

ROWS_PER_WRITE = 4_096  # nodes per Parquet row group: bounds the dense (nodes x variables) block (~10 MB)
DICTIONARY = "dictionary.csv"


def table_variables(tables: SummaryTables) -> tuple[Variable, ...]:
    return {SummaryTables.PL94: pl94_variables}[tables]()


def variable_matrix(schema: Schema, variables: Sequence[Variable]) -> sp.csc_matrix:
    """(detailed cells x variables) 0/1: column j selects the cells that variable j sums."""
    columns = [np.flatnonzero(selection_mask(schema, v.cells)) for v in variables]
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *columns])
    variable = np.repeat(np.arange(len(columns)), [len(c) for c in columns])
    return sp.csc_matrix((np.ones(len(rows), dtype=np.int64), (rows, variable)), shape=(schema.n_cells, len(columns)))


def census_geoid(geoid: str) -> str:
    return geoid or "US"


def summary_counts(counts: sp.spmatrix | np.ndarray, matrix: sp.csc_matrix) -> np.ndarray:
    """Dense (nodes x variables) sums of a level's detailed counts or estimates (sparse or dense, nodes x cells)."""
    product = counts @ matrix
    return product.toarray() if sp.issparse(product) else np.asarray(product)


@dataclass(frozen=True)
class TableColumns:
    """Variables of one universe and their (cells x variables) matrix over its schema."""

    variables: tuple[Variable, ...]
    matrix: sp.csc_matrix


def table_columns(tables: SummaryTables, schema: Schema, units_schema: Schema | None = None) -> list[TableColumns]:
    """The set's columns: the persons' variables, then (``units_schema``: the units universe's, same tree) its
    housing tables (H1), when that schema can answer them."""
    variables = table_variables(tables)
    out = [TableColumns(variables, variable_matrix(schema, variables))]
    if units_schema is not None and (housing := housing_variables(tables, units_schema)):
        out.append(TableColumns(housing, variable_matrix(units_schema, housing)))
    return out


class SummaryTableWriter(ChunkedParquet):
    """One level's wide table, written as its nodes' counts arrive: GEOID, then every part's variables summed from
    that part's counts.  ``ROWS_PER_WRITE`` nodes at a time, so memory is a few MB whatever the level's size."""

    def __init__(self, path: Path, columns: Sequence[TableColumns], make_folder: bool = True) -> None:
        names = [v.name for part in columns for v in part.variables]
        self.schema = pa.schema([pa.field("GEOID", pa.string()), *(pa.field(n, pa.int64()) for n in names)])
        self.columns = tuple(columns)
        super().__init__(path, self.schema, make_folder)

    def write_rows(self, geoids: np.ndarray, counts: Sequence[sp.spmatrix]) -> None:
        """Rows for ``geoids``, from each part's counts of those nodes (same order, sparse nodes x cells)."""
        for start in range(0, len(geoids), ROWS_PER_WRITE):
            stop = min(start + ROWS_PER_WRITE, len(geoids))
            arrays = [pa.array([census_geoid(str(g)) for g in geoids[start:stop]], type=pa.string())]
            for part, part_counts in zip(self.columns, counts, strict=True):
                block = summary_counts(part_counts[start:stop], part.matrix).astype(np.int64, copy=False)
                arrays += [pa.array(np.ascontiguousarray(block[:, j])) for j in range(block.shape[1])]
            self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))


def summary_path(directory: Path, tables: SummaryTables, level: str) -> Path:
    return directory / tables.value / f"{level}.parquet"


def write_summary_tables(directory: Path, tables: SummaryTables, schema: Schema, level_names: Sequence[str],
                         geoids: Sequence[np.ndarray], counts: Sequence[sp.spmatrix | None],
                         units: tuple[Schema, Sequence[sp.spmatrix | None]] | None = None) -> dict[str, Any]:
    """Every level's table of one set and its dictionary under ``directory/<set>/``; returns, for the manifest,
    ``{"dictionary": path, "levels": {level: path}}`` (relative to ``directory``'s parent).  ``units``: the units'
    schema and counts per level (H1); a level whose ``counts`` is None was written as reconciled: only named."""
    columns = table_columns(tables, schema, units[0] if units is not None else None)
    levels = {}
    for level, (name, level_geoids) in enumerate(zip(level_names, geoids, strict=True)):
        path = summary_path(directory, tables, name)
        if counts[level] is not None:
            writer = SummaryTableWriter(path, columns)
            parts = [counts[level], *([units[1][level]] if units is not None and len(columns) > 1 else [])]
            writer.write_rows(level_geoids, parts)
            writer.close()
        levels[name] = str(path.relative_to(directory.parent))
    dictionary = directory / tables.value / DICTIONARY
    dictionary.parent.mkdir(parents=True, exist_ok=True)
    with dictionary.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["variable", "table", "label", "universe"])
        out.writerows([v.name, v.table, v.label, v.universe] for part in columns for v in part.variables)
    return {"dictionary": str(dictionary.relative_to(directory.parent)), "levels": levels}


def housing_variables(tables: SummaryTables, units_schema: Schema) -> tuple[Variable, ...]:
    """The set's tables over the units universe (H1 for pl94), if its schema can answer them; else none."""
    if tables is SummaryTables.PL94 and h1_schema_problem(units_schema) is None:
        return h1_variables()
    return ()
