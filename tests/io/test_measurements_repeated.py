"""``io.measurements.repeated``: a column that repeats a block is the block's values end to end, cut at n, with
every chunk sharing the block's buffers; a measurement file written with such columns reads back exactly the
long-form table one array per column would give."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.io.measurements import MEASUREMENT_SCHEMA, REPEATED_ROWS, LevelMeasurementWriter, repeated
from censusdp.postprocess import QueryMeasurement


@settings(max_examples=80, deadline=None)
@given(block=st.lists(st.integers(-5, 5), min_size=1, max_size=9), n=st.integers(0, 60))
def test_the_block_repeats_end_to_end_and_is_cut_at_n(block: list[int], n: int) -> None:
    values = pa.array(block, type=pa.int64())
    column = repeated(values, n)
    assert column.type == pa.int64() and len(column) == n
    assert column.to_pylist() == (block * (n // len(block) + 1))[:n]
    # every chunk is a view of the one block: no value is copied
    assert {chunk.buffers()[1].address for chunk in column.chunks} <= {values.buffers()[1].address}
    assert column.num_chunks == max(1, -(-n // len(block)))


def test_a_written_chunk_reads_back_as_the_plain_long_form(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n_nodes, q_cells = 3, REPEATED_ROWS // 2 + 7  # a cell block of one node, cut inside a node's last repeat
    noisy = rng.integers(-50, 50, (n_nodes, q_cells))
    total = rng.integers(0, 9, (n_nodes, 1))
    writer = LevelMeasurementWriter(tmp_path, "tract")
    geoids = np.array(["01001", "01002", "01003"])
    writer.write_chunk(geoids, [QueryMeasurement("detailed", None, noisy, Fraction(9, 2)),  # type: ignore[arg-type]
                                QueryMeasurement("total", None, total, Fraction(1, 3))],  # type: ignore[arg-type]
                       [Fraction(1, 7), Fraction(2, 7)])
    table = pq.read_table(writer.close())
    assert table.schema.field("cell").type == pa.int32() and table.schema.field("rho").type == pa.float64()
    assert table.schema.field("level").type == pa.dictionary(pa.int32(), pa.string())
    # every column required: no definition level is written per value
    assert table.column_names == MEASUREMENT_SCHEMA.names and not any(f.nullable for f in table.schema)
    assert all(pq.ParquetFile(writer.path).schema.column(i).max_definition_level == 0 for i in range(7))
    rows = table.num_rows
    assert rows == noisy.size + total.size
    assert table["level"].to_pylist() == ["tract"] * rows
    assert table["query"].to_pylist() == ["detailed"] * noisy.size + ["total"] * total.size
    assert table["geoid"].to_pylist() == [g for g in geoids for _ in range(q_cells)] + geoids.tolist()
    assert table["cell"].to_pylist() == list(range(q_cells)) * n_nodes + [0] * n_nodes
    assert table["noisy_value"].to_pylist() == noisy.ravel().tolist() + total.ravel().tolist()
    assert table["sigma2"].to_pylist() == [4.5] * noisy.size + [1 / 3] * total.size
    assert all(r >= 1 / 7 for r in table["rho"].to_pylist()[:noisy.size])
    assert pq.ParquetFile(writer.path).metadata.num_row_groups == 2  # one row group per (chunk, query)
