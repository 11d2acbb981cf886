"""The noisy measurements as a public, reloadable product (Parquet).

``measurements/<level>.parquet`` (one file per level), long form, one row per node x query x cell:

| column | type | meaning |
|---|---|---|
| level | string | level name |
| geoid | string | the node's code prefix ("" for the root) |
| query | string | query name, e.g. ``votingage * hispanic * cenrace`` |
| cell | int32 | flattened index of the query's cell (C order over the query's attributes, in the order named) |
| noisy_value | int64 | true answer + exact discrete Gaussian noise |
| rho | float64 | zCDP budget of this query at this level (exact fraction in manifest.json) |
| sigma2 | float64 | noise variance (exact fraction in manifest.json) |

``measurements/invariants.parquet``: level, geoid, query, cell, value (exact, published, NOT protected).
Re-running post-processing from these files needs no microdata and spends no budget (Thm 19.25).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from postprocess import QueryInvariant, QueryMeasurement

INVARIANTS_FILE = "invariants.parquet"


def _rows(level: str, geoids: np.ndarray, query: str, values: np.ndarray) -> dict[str, pa.Array]:
    n_nodes, q_cells = values.shape
    node = np.repeat(np.arange(n_nodes, dtype=np.int32), q_cells)
    return {
        "level": pa.DictionaryArray.from_arrays(np.zeros(values.size, dtype=np.int32), pa.array([level])),
        "geoid": pa.DictionaryArray.from_arrays(node, pa.array(geoids.tolist(), type=pa.string())),
        "query": pa.DictionaryArray.from_arrays(np.zeros(values.size, dtype=np.int32), pa.array([query])),
        "cell": pa.array(np.tile(np.arange(q_cells, dtype=np.int32), n_nodes)),
    }


def write_level_measurements(directory: Path, level: str, geoids: np.ndarray,
                             measurements: Sequence[QueryMeasurement], rhos: Sequence[Fraction]) -> Path:
    """Write one level's noisy measurements; one row group per query keeps memory bounded."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{level}.parquet"
    writer = None
    for measurement, rho in zip(measurements, rhos, strict=True):
        columns = _rows(level, geoids, measurement.name, measurement.noisy)
        columns["noisy_value"] = pa.array(measurement.noisy.ravel().astype(np.int64))
        columns["rho"] = pa.array(np.full(measurement.noisy.size, float(rho)))
        columns["sigma2"] = pa.array(np.full(measurement.noisy.size, float(measurement.sigma2)))
        table = pa.table(columns)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return path


def write_invariants(directory: Path, per_level: Sequence[tuple[str, np.ndarray, Sequence[QueryInvariant]]]) -> Path:
    """Write every level's invariant values into one file (they are few: e.g. totals of the nation and states)."""
    directory.mkdir(parents=True, exist_ok=True)
    tables = []
    for level, geoids, invariants in per_level:
        for invariant in invariants:
            columns = _rows(level, geoids, invariant.name, invariant.values)
            columns["value"] = pa.array(invariant.values.ravel().astype(np.int64))
            tables.append(pa.table(columns))
    schema = pa.schema([("level", pa.dictionary(pa.int32(), pa.string())),
                        ("geoid", pa.dictionary(pa.int32(), pa.string())),
                        ("query", pa.dictionary(pa.int32(), pa.string())),
                        ("cell", pa.int32()), ("value", pa.int64())])
    table = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
    path = directory / INVARIANTS_FILE
    pq.write_table(table, path)
    return path


def read_level_values(path: Path, value_column: str, query: str, n_nodes: int, q_cells: int,
                      level: str | None = None) -> np.ndarray:
    """One query's values at one level as an (n_nodes, q_cells) array (rows in geoid order, as written)."""
    filters = [("query", "=", query)] + ([("level", "=", level)] if level is not None else [])
    table = pq.read_table(path, columns=[value_column], filters=filters)
    values = table.column(value_column).to_numpy()
    if values.size != n_nodes * q_cells:
        raise ValueError(f"{path}: query {query!r} has {values.size} values, expected {n_nodes * q_cells}")
    return values.astype(np.int64).reshape(n_nodes, q_cells)
