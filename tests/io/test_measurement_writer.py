"""The measurement file writer: row groups numbered in hand-over order, written by a background thread, parts of
another writer appended unchanged, and a failed write raised in the caller's thread."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from pipeline.io import measurements
from pipeline.io.measurements import LevelMeasurementWriter, read_chunk, read_chunk_plan, read_lowest_geoids
from postprocess import QueryMeasurement


def chunk(start: int, stop: int, cells: int, seed: int) -> list[QueryMeasurement]:
    rng = np.random.default_rng(seed)
    n = stop - start
    return [QueryMeasurement("total", sp.csr_matrix(np.ones((1, cells))), rng.integers(-5, 50, (n, 1)), Fraction(2)),
            QueryMeasurement("detailed", sp.identity(cells, format="csr"), rng.integers(-5, 9, (n, cells)),
                             Fraction(9, 2))]


def test_chunks_and_parts_read_back_in_order(tmp_path: Path) -> None:
    geoids = np.array([f"{i:03d}" for i in range(23)])
    plan = [(0, 5), (5, 6), (6, 17), (17, 23)]
    drawn = {start: chunk(start, stop, 6, start) for start, stop in plan}
    part = LevelMeasurementWriter(tmp_path / "part", "block")  # a worker's part: the last two chunks
    for start, stop in plan[2:]:
        part.write_chunk(geoids[start:stop], drawn[start], [Fraction(1, 3), Fraction(1, 7)])
    part.close()
    writer = LevelMeasurementWriter(tmp_path, "block")
    firsts = [writer.write_chunk(geoids[s:e], drawn[s], [Fraction(1, 3), Fraction(1, 7)]) for s, e in plan[:2]]
    firsts.append(writer.append_file(part.path))
    assert firsts == [0, 2, 4] and writer.row_groups == 8
    assert writer.close() == tmp_path / "block.parquet"
    assert pq.ParquetFile(writer.path).metadata.num_row_groups == 8
    assert read_chunk_plan(writer.path, 2, 1) == [(0, 5, 0), (5, 6, 2), (6, 17, 4), (17, 23, 6)]
    assert np.array_equal(read_lowest_geoids(writer.path, 2), geoids)
    for start, stop, first in read_chunk_plan(writer.path, 2, 1):
        values = read_chunk(writer.path, first, [(stop - start, 1), (stop - start, 6)])
        assert all(np.array_equal(v, m.noisy) for v, m in zip(values, drawn[start], strict=True))


def test_a_failed_write_is_raised_in_the_callers_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError("disk full")

    monkeypatch.setattr(measurements.pq, "ParquetWriter", Failing)
    geoids = np.array(["a", "b"])
    for hand_overs in (1, 50):
        writer = LevelMeasurementWriter(tmp_path, "block")
        with pytest.raises(OSError, match="disk full"):  # at a later hand-over, or at the latest when closed
            for _ in range(hand_overs):
                writer.write_chunk(geoids, chunk(0, 2, 3, 1), [Fraction(1), Fraction(1)])
            writer.close()
