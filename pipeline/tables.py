"""Published tables: ``tables/<level>.parquet`` and the protected person file.

Table schema (long form, zero rows omitted): ``geoid`` (string; the root's is ""), one string column per
attribute holding its domain value, ``count`` (int64, > 0).  Only reconciled, rounded counts reach here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.schema import Schema


def _labelled(schema: Schema, geoids: np.ndarray, counts: np.ndarray) -> tuple[dict[str, pa.Array], np.ndarray]:
    node, cell = np.nonzero(counts)
    multi = np.unravel_index(cell, schema.shape)
    columns: dict[str, pa.Array] = {
        "geoid": pa.DictionaryArray.from_arrays(node.astype(np.int32), pa.array(geoids.tolist(), type=pa.string()))
    }
    for attribute, index in zip(schema.attributes, multi, strict=True):
        columns[attribute.name] = pa.DictionaryArray.from_arrays(index.astype(np.int32), pa.array(attribute.values))
    return columns, counts[node, cell].astype(np.int64)


def write_level_table(directory: Path, level: str, schema: Schema, geoids: np.ndarray, counts: np.ndarray) -> Path:
    """Write one level's table; dictionary-encoded columns keep large levels compact."""
    directory.mkdir(parents=True, exist_ok=True)
    columns, values = _labelled(schema, geoids, counts)
    columns["count"] = pa.array(values)
    table = pa.table(columns)
    # readers expect plain strings: decode the dictionaries in the file's logical schema
    table = table.cast(pa.schema([pa.field(name, pa.string()) for name in table.column_names[:-1]]
                                 + [pa.field("count", pa.int64())]))
    path = directory / f"{level}.parquet"
    pq.write_table(table, path)
    return path


def write_protected_microdata(path: Path, schema: Schema, geoids: np.ndarray, counts: np.ndarray,
                              geocode_parts: tuple[tuple[str, int], ...]) -> Path:
    """One row per person of the protected lowest-level table, with source column names and values.

    Columns: ``geocode`` (and, if configured, its parts such as TABBLKST/TABBLKCOU/TABTRACTCE/TABBLK), then
    each attribute under its source column name with the first source value that maps to the label.
    """
    node, cell = np.nonzero(counts)
    repeats = counts[node, cell]
    node, cell = np.repeat(node, repeats), np.repeat(cell, repeats)
    multi = np.unravel_index(cell, schema.shape)
    codes = pa.array(geoids.tolist(), type=pa.string())
    columns: dict[str, pa.Array] = {"geocode": pa.DictionaryArray.from_arrays(node.astype(np.int32), codes)}
    start = 0
    for name, width in geocode_parts:
        part = pa.array([g[start: start + width] for g in geoids.tolist()], type=pa.string())
        columns[name] = pa.DictionaryArray.from_arrays(node.astype(np.int32), part)
        start += width
    for attribute, index in zip(schema.attributes, multi, strict=True):
        inverse = {label: label for label in attribute.values}
        for source_value, label in reversed(list(attribute.mapping.items())):
            inverse[label] = source_value
        labels = pa.array([inverse[v] for v in attribute.values])
        columns[attribute.column] = pa.DictionaryArray.from_arrays(index.astype(np.int32), labels)
    table = pa.table(columns)
    table = table.cast(pa.schema([pa.field(n, pa.string()) for n in table.column_names]))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
