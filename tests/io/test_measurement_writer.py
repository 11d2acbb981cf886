"""The measurement file writer: row groups numbered in hand-over order, written by a background thread, workers'
parts adopted unchanged into a level folder read in node order, and a failed write raised in the caller's thread."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from censusdp.pipeline.io import measurements
from censusdp.pipeline.io.measurements import (
    ChunkLocation,
    LevelMeasurementWriter,
    adopt_part,
    level_files,
    level_location,
    measurements_digest,
    read_chunk,
    read_chunk_plan,
    read_level_table,
    read_lowest_geoids,
)
from censusdp.postprocess import QueryMeasurement


def chunk(start: int, stop: int, cells: int, seed: int) -> list[QueryMeasurement]:
    rng = np.random.default_rng(seed)
    n = stop - start
    return [QueryMeasurement("total", sp.csr_matrix(np.ones((1, cells))), rng.integers(-5, 50, (n, 1)), Fraction(2)),
            QueryMeasurement("detailed", sp.identity(cells, format="csr"), rng.integers(-5, 9, (n, cells)),
                             Fraction(9, 2))]


def made(path: Path) -> Path:
    """A writer's folder, made by its caller (a writer never creates one)."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_a_writer_never_creates_a_folder(tmp_path: Path) -> None:
    """A task still running after its run ended must not recreate the run's folder (its writer's would be gone)."""
    writer = LevelMeasurementWriter(tmp_path / "gone" / "measure-parts", "block")
    with pytest.raises(FileNotFoundError):
        writer.write_chunk(np.array(["a"]), chunk(0, 1, 2, 1), [Fraction(1), Fraction(1)])
        writer.close()
    assert not (tmp_path / "gone").exists()


def test_chunks_and_parts_read_back_in_order(tmp_path: Path) -> None:
    geoids = np.array([f"{i:03d}" for i in range(23)])
    plan = [(0, 5), (5, 6), (6, 17), (17, 23)]
    drawn = {start: chunk(start, stop, 6, start) for start, stop in plan}
    rhos = [Fraction(1, 3), Fraction(1, 7)]
    writer = LevelMeasurementWriter(made(tmp_path / "driver"), "block")  # one process: one file
    firsts = [writer.write_chunk(geoids[s:e], drawn[s], rhos) for s, e in plan]
    assert firsts == [0, 2, 4, 6] and writer.row_groups == 8
    assert writer.close() == tmp_path / "driver" / "block.parquet" and writer.file == "block.parquet"
    assert pq.ParquetFile(writer.path).metadata.num_row_groups == 8
    assert level_location(tmp_path / "driver", "block") == "block.parquet"
    # two workers' parts, adopted out of order: name order (the group's index) is node order
    workers = tmp_path / "measurements"
    for index, chunks in ((1, plan[2:]), (0, plan[:2])):
        part = LevelMeasurementWriter(made(tmp_path / f"worker{index}"), "block")
        for start, stop in chunks:
            part.write_chunk(geoids[start:stop], drawn[start], rhos)
        assert adopt_part(workers, "block", index, part.close()) == f"block/part-{index:06d}.parquet"
        assert not part.path.exists()  # moved, not copied
    assert level_files(workers, "block") == ["block/part-000000.parquet", "block/part-000001.parquet"]
    assert level_location(workers, "block") == "block"
    expected = {"driver": [(0, 5, ChunkLocation("block.parquet", 0)), (5, 6, ChunkLocation("block.parquet", 2)),
                           (6, 17, ChunkLocation("block.parquet", 4)), (17, 23, ChunkLocation("block.parquet", 6))],
                "measurements": [(0, 5, ChunkLocation("block/part-000000.parquet", 0)),
                                 (5, 6, ChunkLocation("block/part-000000.parquet", 2)),
                                 (6, 17, ChunkLocation("block/part-000001.parquet", 0)),
                                 (17, 23, ChunkLocation("block/part-000001.parquet", 2))]}
    for folder, chunks in expected.items():
        directory = tmp_path / folder
        assert read_chunk_plan(directory, "block", 2, 1) == chunks
        assert np.array_equal(read_lowest_geoids(directory, "block", 2), geoids)
        for start, stop, where in chunks:
            values = read_chunk(directory / where.file, where.row_group, [(stop - start, 1), (stop - start, 6)])
            assert all(np.array_equal(v, m.noisy) for v, m in zip(values, drawn[start], strict=True))
            assert all(v.dtype == np.int64 and not v.flags.writeable for v in values)  # views, not copies
        table = read_level_table(directory, "block", ["geoid", "noisy_value"])  # every row, node order per chunk
        rows = [(np.repeat(geoids[s:e], m.noisy.shape[1]), m.noisy.ravel()) for s, e in plan for m in drawn[s]]
        assert table.column("geoid").cast(pa.string()).to_pylist() == np.concatenate([g for g, _ in rows]).tolist()
        assert np.array_equal(table.column("noisy_value").to_numpy(), np.concatenate([v for _, v in rows]))
    with pytest.raises(FileNotFoundError, match="no measurements of level tract"):
        level_files(workers, "tract")


def test_the_digest_covers_every_part_of_a_level_folder(tmp_path: Path) -> None:
    geoids = np.array(["a", "b", "c"])
    for index in (0, 1):
        part = LevelMeasurementWriter(made(tmp_path / f"w{index}"), "block")
        part.write_chunk(geoids, chunk(0, 3, 2, index), [Fraction(1), Fraction(1)])
        adopt_part(tmp_path / "measurements", "block", index, part.close())
    digest = measurements_digest(tmp_path / "measurements")
    second = tmp_path / "measurements" / "block" / "part-000001.parquet"
    original = second.read_bytes()
    second.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert measurements_digest(tmp_path / "measurements") != digest
    second.write_bytes(original)
    assert measurements_digest(tmp_path / "measurements") == digest
    second.rename(second.with_name("part-000002.parquet"))  # the same bytes, another group
    assert measurements_digest(tmp_path / "measurements") != digest


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


def test_a_linked_level_folder_or_a_stray_part_is_refused_and_parts_keep_node_order(tmp_path: Path) -> None:
    """The ledger's digest does not follow a linked folder, so the reader refuses one (else forged parts beside a
    driver's ``block.parquet`` would be read under the digest of the original); a part is named by its group's
    index, read in numeric order past 999,999 groups."""
    geoids = np.array(["a", "b"])
    measured = tmp_path / "measurements"
    driver = LevelMeasurementWriter(made(measured), "block")
    driver.write_chunk(geoids, chunk(0, 2, 2, 1), [Fraction(1), Fraction(1)])
    driver.close()
    digest = measurements_digest(measured)
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "part-000000.parquet").write_bytes((measured / "block.parquet").read_bytes())
    (measured / "block").symlink_to(forged, target_is_directory=True)
    assert measurements_digest(measured) == digest  # what the link would have slipped past
    with pytest.raises(ValueError, match="not a link"):
        level_files(measured, "block")
    (measured / "block").unlink()
    for index in (999_999, 1_000_000, 7):
        part = LevelMeasurementWriter(made(tmp_path / f"w{index}"), "tract")
        part.write_chunk(geoids, chunk(0, 2, 2, index), [Fraction(1), Fraction(1)])
        adopt_part(measured, "tract", index, part.close())
    assert level_files(measured, "tract") == ["tract/part-000007.parquet", "tract/part-999999.parquet",
                                              "tract/part-1000000.parquet"]
    (measured / "tract" / "part-x.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="not a measurement part"):
        level_files(measured, "tract")
