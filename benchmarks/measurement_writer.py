"""The noisy measurements' Parquet writing, as the writer lays a chunk out: every column required (the writer's
schema) against the same table with nullable columns (the layout before), alternated; CPU seconds per million rows.

    python benchmarks/measurement_writer.py --nodes 2000 --cells 2016 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.io.measurements import DELTA_CODED, DICTIONARY_COLUMNS, MEASUREMENT_SCHEMA, _constant, _rows


def chunk_table(nodes: int, cells: int, schema: pa.Schema) -> pa.Table:
    """One query of one chunk, as ``LevelMeasurementWriter.write_chunk`` builds it (public-looking values)."""
    rng = np.random.default_rng(0)
    noisy = rng.integers(-5, 30, size=(nodes, cells))
    columns = _rows("block", np.array([f"44{i:013d}" for i in range(nodes)]), "detailed", noisy)
    columns["noisy_value"] = pa.array(noisy.ravel().astype(np.int64))
    columns["rho"], columns["sigma2"] = _constant(0.123, noisy.size), _constant(4.5, noisy.size)
    return pa.table(columns, schema=schema)


def write_cpu_s(table: pa.Table, path: Path) -> float:
    started = time.process_time()
    with pq.ParquetWriter(path, table.schema, write_statistics=False, use_dictionary=DICTIONARY_COLUMNS,
                          column_encoding=DELTA_CODED) as writer:
        writer.write_table(table, row_group_size=table.num_rows)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--cells", type=int, default=2016)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    nullable = pa.schema([field.with_nullable(True) for field in MEASUREMENT_SCHEMA])
    tables = {"required (the writer's)": chunk_table(args.nodes, args.cells, MEASUREMENT_SCHEMA),
              "nullable (before)": chunk_table(args.nodes, args.cells, nullable)}
    seconds: dict[str, list[float]] = {name: [] for name in tables}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for name, table in tables.items():
                seconds[name].append(write_cpu_s(table, Path(folder) / "chunk.parquet"))
    rows = args.nodes * args.cells
    print(f"| columns ({rows:,} rows a chunk, {args.rounds} rounds) | CPU s per million rows, median |\n|---|---|")
    for name, values in seconds.items():
        print(f"| {name} | {statistics.median(values) / rows * 1e6:.4f} |")


if __name__ == "__main__":
    main()
