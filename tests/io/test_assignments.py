"""Block-assignment files: the formats read, and one clear line for each kind of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.assignments import read_assignment

BLOCKS = np.array(["440010101001000", "440010101001001", "440010102002000", "440030201001000"])


def write(tmp_path: Path, text: str, name: str = "plan.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_csv_plan_maps_blocks_to_areas_and_leaves_the_rest_out(tmp_path: Path) -> None:
    path = write(tmp_path, "GEOID,DISTRICT\n440030201001000,2\n440010101001000,10\n440010102002000,2\n")
    plan = read_assignment(path, BLOCKS)
    assert plan.area_ids == ("10", "2") and plan.n_areas == 2
    assert plan.leaf_area.tolist() == [0, -1, 1, 1]


def test_a_pipe_separated_census_block_assignment_file_and_parquet_read_alike(tmp_path: Path) -> None:
    piped = read_assignment(write(tmp_path, "BLOCKID|DISTRICT\n440010101001001|A\n440010101001000|B\n"), BLOCKS)
    pl.DataFrame({"district": ["A", "B"], "block": ["440010101001001", "440010101001000"]}).write_parquet(
        tmp_path / "plan.parquet")
    parquet = read_assignment(tmp_path / "plan.parquet", BLOCKS)
    assert piped.area_ids == parquet.area_ids == ("A", "B")
    assert piped.leaf_area.tolist() == parquet.leaf_area.tolist() == [1, 0, -1, -1]


def test_columns_can_be_named(tmp_path: Path) -> None:
    path = write(tmp_path, "note,code,plan_a\nx,440010101001000,7\ny,440030201001000,8\n")
    plan = read_assignment(path, BLOCKS, block_column="code", area_column="plan_a")
    assert plan.area_ids == ("7", "8") and plan.leaf_area.tolist() == [0, -1, -1, 1]
    with pytest.raises(InputError, match="no area column"):
        read_assignment(path, BLOCKS, block_column="code")


@pytest.mark.parametrize(("text", "message", "column", "row", "category"), [
    ("GEOID,area\n440010101001000,1\n449990101001000,1\n", "'449990101001000' is not a block of the release",
     "GEOID", 2, InputProblem.GEOGRAPHY),
    ("GEOID,area\n440010101001000,1\n440010101001001,1\n440010101001000,1\n",
     "block '440010101001000' is listed twice (rows 1 and 3)", "GEOID", 3, InputProblem.DUPLICATE),
    ("GEOID,area\n440010101001000,1\n440010101001000,2\n",
     "block '440010101001000' is in two areas ('1' at row 1, '2' at row 2)", "GEOID", 2, InputProblem.DUPLICATE),
    ("GEOID,area\n", "has no rows", None, None, InputProblem.EMPTY),
    ("GEOID,area\n440010101001000,\n", "missing value", "area", 1, InputProblem.MISSING_VALUE),
    ("a,b,c\n1,2,3\n", "no block column", None, None, InputProblem.COLUMN),
])
def test_bad_input_is_one_line_naming_file_column_and_row(tmp_path: Path, text: str, message: str,
                                                          column: str | None, row: int | None,
                                                          category: InputProblem) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_assignment(path, BLOCKS)
    error = caught.value
    assert message in str(error) and str(path) in str(error) and "\n" not in str(error)
    assert (error.column, error.row, error.category) == (column, row, category)


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_assignment(tmp_path / "nothing.csv", BLOCKS)
    with pytest.raises(InputError, match="has no rows|cannot be read"):
        read_assignment(write(tmp_path, ""), BLOCKS)


def test_unknown_blocks_can_be_skipped_and_counted(tmp_path: Path) -> None:
    """A Census file lists every block; a release without a geography file has only the populated ones."""
    path = write(tmp_path, "GEOID,area\n449990101001000,1\n440010101001000,1\n440010101001000,2\n")
    with pytest.raises(InputError, match=r"in two areas \('1' at row 2, '2' at row 3\)"):
        read_assignment(path, BLOCKS, skip_unknown=True)  # rows keep their numbers in the file
    plan = read_assignment(write(tmp_path, "GEOID,area\n449990101001000,1\n440010101001000,1\n"), BLOCKS,
                           skip_unknown=True)
    assert plan.skipped == 1 and plan.leaf_area.tolist() == [0, -1, -1, -1]
