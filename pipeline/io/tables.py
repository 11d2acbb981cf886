"""Published tables (docs/run-folder.md): ``tables/<level>.parquet`` and the protected person file, written chunk
by chunk (at the lowest level, one part file per chunk, by its task: ``release.lowest_parts``), from reconciled,
rounded counts as sparse (nodes of the chunk x detailed cells) matrices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from censusdp.pipeline.config.schema import Schema


def _nonzero(counts: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = counts.tocsr()
    counts.eliminate_zeros()
    node = np.repeat(np.arange(counts.shape[0], dtype=np.int32), np.diff(counts.indptr))
    return node, counts.indices.astype(np.int64), counts.data.astype(np.int64)


class ChunkedParquet:
    """A Parquet file written a table at a time."""

    def __init__(self, path: Path, schema: pa.Schema, make_folder: bool = True) -> None:
        if make_folder:  # a part's writer does not: its folder gone means its run is (release.lowest_parts)
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._writer = pq.ParquetWriter(path, schema)

    def write(self, columns: dict[str, pa.Array]) -> None:
        self._writer.write_table(pa.table(columns).cast(self._writer.schema))

    def close(self) -> Path:
        self._writer.close()
        return self.path


class LevelTableWriter(ChunkedParquet):
    """tables/<level>.parquet (or, at the lowest level, one part of it): geoid, one column per attribute, count."""

    def __init__(self, path: Path, schema: Schema, make_folder: bool = True) -> None:
        fields = [pa.field("geoid", pa.string())] + [pa.field(a.name, pa.string()) for a in schema.attributes]
        super().__init__(path, pa.schema([*fields, pa.field("count", pa.int64())]), make_folder)
        self.schema = schema

    def write_chunk(self, geoids: np.ndarray, counts: sp.csr_matrix) -> None:
        node, cell, values = _nonzero(counts)
        multi = np.unravel_index(cell, self.schema.shape)
        columns: dict[str, pa.Array] = {
            "geoid": pa.DictionaryArray.from_arrays(node, pa.array(geoids.tolist(), type=pa.string())).cast(
                pa.string())}
        for attribute, index in zip(self.schema.attributes, multi, strict=True):
            columns[attribute.name] = pa.DictionaryArray.from_arrays(
                index.astype(np.int32), pa.array(attribute.values)).cast(pa.string())
        columns["count"] = pa.array(values)
        self.write(columns)


class ProtectedMicrodataWriter(ChunkedParquet):
    """One row per person of the protected lowest-level table: ``geocode`` (and its configured parts, such as
    TABBLKST), then each attribute under its source column name, as the first source value mapped to its label."""

    def __init__(self, path: Path, schema: Schema, geocode_parts: tuple[tuple[str, int], ...],
                 make_folder: bool = True) -> None:
        names = ["geocode", *[name for name, _ in geocode_parts], *[a.column for a in schema.attributes]]
        super().__init__(path, pa.schema([pa.field(n, pa.string()) for n in names]), make_folder)
        self.schema, self.geocode_parts = schema, geocode_parts
        self.source_labels = []
        for attribute in schema.attributes:
            first_source = {label: source for source, label in reversed(list(attribute.mapping.items()))}
            first_source |= {label: str(edge) for label, edge in zip(attribute.values, attribute.bins, strict=False)}
            self.source_labels.append(pa.array([first_source.get(v, v) for v in attribute.values]))

    def write_chunk(self, geoids: np.ndarray, counts: sp.csr_matrix) -> None:
        node, cell, repeats = _nonzero(counts)
        node, cell = np.repeat(node, repeats), np.repeat(cell, repeats)
        codes = geoids.tolist()
        columns: dict[str, pa.Array] = {
            "geocode": pa.DictionaryArray.from_arrays(node, pa.array(codes, type=pa.string()))}
        start = 0
        for name, width in self.geocode_parts:
            part = pa.array([g[start: start + width] for g in codes], type=pa.string())
            columns[name] = pa.DictionaryArray.from_arrays(node, part)
            start += width
        multi = np.unravel_index(cell, self.schema.shape)
        for attribute, index, labels in zip(self.schema.attributes, multi, self.source_labels, strict=True):
            columns[attribute.column] = pa.DictionaryArray.from_arrays(index.astype(np.int32), labels)
        self.write({k: v.cast(pa.string()) for k, v in columns.items()})
