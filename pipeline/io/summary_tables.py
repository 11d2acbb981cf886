"""Summary tables (``tables/<set>/<level>.parquet``): sums of the reconciled detailed cells, one wide row per node.

Columns: ``GEOID`` (the Census form: the level's code, the nation's "US"), then one int64 column per variable in
publication order (``P1_001N`` ...).  ``dictionary.csv`` beside them gives each variable's table, label and
universe.  Only the published integer cells are read, so every summary count is post-processing of public
values (Thm 19.25), integer and non-negative, and the tables agree with each other and with the detailed ones.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from pipeline.config.model import SummaryTables
from pipeline.config.pl94_tables import Variable, h1_schema_problem, h1_variables, pl94_variables
from pipeline.config.schema import Schema

ROWS_PER_WRITE = 20_000  # nodes per Parquet row group: bounds the dense (nodes x variables) block in memory
DICTIONARY = "dictionary.csv"


def table_variables(tables: SummaryTables) -> tuple[Variable, ...]:
    return {SummaryTables.PL94: pl94_variables}[tables]()


def variable_matrix(schema: Schema, variables: Sequence[Variable]) -> sp.csc_matrix:
    """(detailed cells x variables) 0/1: column j selects the cells that variable j sums."""
    columns = []
    for variable in variables:
        mask = np.ones(schema.shape, dtype=bool)
        for name, values in variable.cells:
            axis = schema.names.index(name)
            chosen = np.isin(np.asarray(schema.attribute(name).values), values)
            mask &= chosen.reshape([-1 if a == axis else 1 for a in range(len(schema.shape))])
        columns.append(sp.csc_matrix(mask.reshape(-1, 1).astype(np.int64)))
    return sp.hstack(columns, format="csc") if columns else sp.csc_matrix((schema.n_cells, 0), dtype=np.int64)


def census_geoid(geoid: str) -> str:
    return geoid or "US"


def summary_counts(counts: sp.spmatrix | np.ndarray, matrix: sp.csc_matrix) -> np.ndarray:
    """Dense (nodes x variables) sums of a level's detailed counts or estimates (sparse or dense, nodes x cells)."""
    product = counts @ matrix
    return product.toarray() if sp.issparse(product) else np.asarray(product)


@dataclass(frozen=True)
class TablePart:
    """Variables of one universe: their (cells x variables) matrix over its schema and its counts per level."""

    variables: tuple[Variable, ...]
    matrix: sp.csc_matrix
    counts: Sequence[sp.spmatrix]


def write_summary_table(path: Path, geoids: np.ndarray, parts: Sequence[TablePart], level: int) -> Path:
    """One level's wide table: GEOID, then every part's variables summed from that part's counts."""
    names = [v.name for part in parts for v in part.variables]
    schema = pa.schema([pa.field("GEOID", pa.string()), *(pa.field(n, pa.int64()) for n in names)])
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, max(len(geoids), 1), ROWS_PER_WRITE):
            stop = min(start + ROWS_PER_WRITE, len(geoids))
            block = np.hstack([summary_counts(part.counts[level][start:stop], part.matrix).astype(np.int64)
                               for part in parts])
            columns = [pa.array([census_geoid(str(g)) for g in geoids[start:stop]], type=pa.string())]
            columns += [pa.array(block[:, j]) for j in range(len(names))]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    return path


def write_dictionary(directory: Path, variables: Sequence[Variable]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DICTIONARY
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["variable", "table", "label", "universe"])
        out.writerows([v.name, v.table, v.label, v.universe] for v in variables)
    return path


def write_summary_tables(directory: Path, tables: SummaryTables, schema: Schema, level_names: Sequence[str],
                         geoids: Sequence[np.ndarray], counts: Sequence[sp.spmatrix],
                         units: tuple[Schema, Sequence[sp.spmatrix]] | None = None) -> dict[str, Any]:
    """Every level's table of one set and its dictionary under ``directory/<set>/``; returns, for the manifest,
    ``{"dictionary": path, "levels": {level: path}}``, paths relative to ``directory``'s parent.  ``units``
    (the units universe's schema and counts per level, same tree) adds the set's housing tables (H1)."""
    variables = table_variables(tables)
    parts = [TablePart(variables, variable_matrix(schema, variables), counts)]
    if units is not None and (housing := housing_variables(tables, units[0])):
        parts.append(TablePart(housing, variable_matrix(units[0], housing), units[1]))
    folder = directory / tables.value
    levels = {}
    for level, (name, level_geoids) in enumerate(zip(level_names, geoids, strict=True)):
        levels[name] = str(write_summary_table(folder / f"{name}.parquet", level_geoids, parts, level)
                           .relative_to(directory.parent))
    every = [v for part in parts for v in part.variables]
    return {"dictionary": str(write_dictionary(folder, every).relative_to(directory.parent)), "levels": levels}


def housing_variables(tables: SummaryTables, units_schema: Schema) -> tuple[Variable, ...]:
    """The set's tables over the units universe (H1 for pl94), if its schema can answer them; else none."""
    if tables is SummaryTables.PL94 and h1_schema_problem(units_schema) is None:
        return h1_variables()
    return ()
