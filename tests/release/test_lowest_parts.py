"""The lowest level's outputs written by its tasks, one part per chunk: what a part holds, a task run twice, a part
that failed half-way, and the driver's check that every part is there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from censusdp.geography.levels import Level
from censusdp.pipeline.config.schema import Attribute, Schema
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io import summary_tables
from censusdp.pipeline.io.summary_tables import TableColumns
from censusdp.pipeline.release import lowest_parts
from censusdp.pipeline.release.lowest_parts import LowestOutputs, LowestPart, finish_lowest_outputs, write_lowest_part

SCHEMA = Schema((Attribute("colour", "COLOUR", ("blue", "red")), Attribute("adult", "ADULT", ("0", "1"))))
GEOIDS = np.array([f"4400100{i:02d}" for i in range(9)])
CHUNKS = ((0, 4), (4, 5), (5, 9))


def outputs(tmp_path: Path) -> LowestOutputs:
    folders = [tmp_path / "tables" / "block.parquet", tmp_path / "microdata.parquet", tmp_path / "staging"]
    for folder in folders:
        folder.mkdir(parents=True)
    return LowestOutputs(level_table=str(folders[0]), microdata=str(folders[1]), summary_tables=(),
                         staging=str(folders[2]), schema=SCHEMA, geocode_parts=(("STATE", 2), ("REST", 7)),
                         levels=(Level("root", 0), Level("block", 9)), units_schema=None)


def counts_of(seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)  # test-only
    return sp.csr_matrix(rng.integers(0, 3, (len(GEOIDS), SCHEMA.n_cells)) * rng.integers(0, 2, (len(GEOIDS), 1)))


def write_all(out: LowestOutputs, counts: sp.csr_matrix) -> None:
    for index in (2, 0, 1):  # as tasks finish, not in node order
        start, stop = CHUNKS[index]
        assert write_lowest_part(LowestPart(out, index, GEOIDS[start:stop]), counts[start:stop]) == {}


def test_the_parts_read_as_one_table_in_node_order(tmp_path: Path) -> None:
    out, counts = outputs(tmp_path), counts_of(1)
    write_all(out, counts)
    assert sorted(p.name for p in Path(out.level_table).iterdir()) == [f"part-00000{i}.parquet" for i in range(3)]
    table = pl.read_parquet(out.level_table)
    assert table["geoid"].to_list() == sorted(table["geoid"].to_list())  # name order is node order
    cells = np.ravel_multi_index((table["colour"].replace_strict({"blue": 0, "red": 1}).to_numpy(),
                                  table["adult"].cast(pl.Int64).to_numpy()), SCHEMA.shape)
    rows = np.searchsorted(GEOIDS, table["geoid"].to_numpy())
    assert (sp.csr_matrix((table["count"].to_numpy(), (rows, cells)), shape=counts.shape) != counts).nnz == 0
    people = pl.read_parquet(out.microdata)
    assert people.height == counts.sum()
    assert people.group_by("geocode").len().sort("geocode").rows() == [
        (g, int(n)) for g, n in zip(GEOIDS, np.asarray(counts.sum(axis=1)).ravel(), strict=True) if n]
    assert (people["STATE"] + people["REST"]).to_list() == people["geocode"].to_list()
    finish_lowest_outputs(out, len(CHUNKS), [{}] * len(CHUNKS))
    assert not Path(out.staging).exists()


def test_a_task_run_twice_leaves_one_part_with_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost worker's task runs again: the second attempt replaces the first's part, nothing is doubled; two
    attempts never stage under the same names (running at once, neither renames the other's half-written file)."""
    out, counts = outputs(tmp_path), counts_of(2)
    write_all(out, counts)
    first = pq.read_table(out.level_table)
    staged: list[list[str]] = []
    real_replace = lowest_parts.os.replace
    monkeypatch.setattr(lowest_parts.os, "replace", lambda a, b: (staged[-1].append(Path(a).name), real_replace(a, b)))
    for _ in range(2):
        staged.append([])
        write_lowest_part(LowestPart(out, 1, GEOIDS[4:5]), counts[4:5])
    assert len(staged[0]) == len(staged[1]) == 2 and not set(staged[0]) & set(staged[1])
    assert len(list(Path(out.microdata).iterdir())) == 3
    assert pq.read_table(out.level_table).equals(first)
    assert list(Path(out.staging).iterdir()) == []


def test_a_new_attempt_clears_the_folders_and_an_old_attempts_task_writes_nothing(tmp_path: Path) -> None:
    """--resume after a failed attempt whose tasks may still run on workers: the new attempt's folders start empty,
    and a task of the old one fails (its staging folder is gone, and no part writer creates one) with no part in
    place, so nothing of the old attempt is published."""
    old = outputs(tmp_path)
    write_all(old, counts_of(5))
    leftover = Path(old.staging) / "half-written.parquet"
    leftover.write_bytes(b"")
    new = dataclasses.replace(old, staging=str(tmp_path / f"{lowest_parts.STAGING}second"))
    Path(old.staging).rename(tmp_path / f"{lowest_parts.STAGING}first")  # an earlier attempt's own staging folder
    old = dataclasses.replace(old, staging=str(tmp_path / f"{lowest_parts.STAGING}first"))
    lowest_parts.prepare(new)
    assert not Path(old.staging).exists() and list(Path(new.staging).iterdir()) == []
    assert all(list(folder.iterdir()) == [] for folder in new.folders())
    with pytest.raises(FileNotFoundError):
        write_lowest_part(LowestPart(old, 0, GEOIDS[:4]), counts_of(5)[:4])
    assert all(list(folder.iterdir()) == [] for folder in new.folders()) and not Path(old.staging).exists()
    write_all(new, counts_of(6))
    finish_lowest_outputs(new, len(CHUNKS), [{}] * len(CHUNKS))


def test_a_part_that_fails_half_way_puts_nothing_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output of a chunk is written before any is renamed into its folder: a failure leaves no part, so
    the driver's check fails the run rather than publish a table without its microdata."""
    summary = (str(tmp_path / "tables" / "pl94" / "block.parquet"), (TableColumns((), sp.csc_matrix((4, 0))),))
    out = dataclasses.replace(outputs(tmp_path), summary_tables=(summary,))

    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(summary_tables.SummaryTableWriter, "write_rows", broken)
    with pytest.raises(OSError, match="disk full"):
        write_lowest_part(LowestPart(out, 0, GEOIDS[:4]), counts_of(3)[:4])
    assert list(Path(out.level_table).iterdir()) == [] and list(Path(out.microdata).iterdir()) == []
    with pytest.raises(CensusDPError, match="one part per chunk"):
        finish_lowest_outputs(out, 1, [{}])


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_the_driver_refuses_a_folder_without_exactly_one_part_per_chunk(tmp_path: Path, change: str) -> None:
    out = outputs(tmp_path)
    write_all(out, counts_of(4))
    if change == "missing":
        (Path(out.microdata) / lowest_parts.PART_FILE.format(2)).unlink()
    else:
        (Path(out.level_table) / "stray.parquet").write_bytes(b"")
    with pytest.raises(CensusDPError, match="one part per chunk"):
        finish_lowest_outputs(out, len(CHUNKS), [{}] * len(CHUNKS))
