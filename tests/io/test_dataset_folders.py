"""Streamed reading: a Parquet dataset folder read part by part, batch by batch, with the checks and
errors of one whole file; file-level refusals stay file-level (no body read, no charge)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.microdata import (
    InputFiles,
    encoded_rows,
    geography_units,
    read_input_files,
    validated_rows,
)
from censusdp.pipeline.io.parts import read_batches
from censusdp.pipeline.io.value_checks import sorted_codes
from tests.helpers.datasets import write_hive_dataset
from tests.helpers.tiny import tiny_microdata


def folder_files(config: Path, folder: Path, **overrides: object) -> InputFiles:
    return read_input_files(load_config(config, {"input.path": str(folder), **overrides}))


def rows_of(files: InputFiles, batch_rows: int = 1_000_000) -> list[tuple[str, int]]:
    """Every record as (unit code, cell), in reading order."""
    tree, units, cells = validated_rows(files, batch_rows=batch_rows)
    return list(zip(tree.geoids[-1][units].tolist(), cells.tolist(), strict=True))


def test_a_hive_dataset_reads_as_the_file_it_was_split_from(tiny_release: Path) -> None:
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    folder = tiny_release.parent / "microdata"
    written = write_hive_dataset(micro, folder, "region", pl.col("geocode").str.slice(0, 1))
    files = folder_files(tiny_release, folder)
    assert [p.path for p in files.parts] == written
    assert [p.partition for p in files.parts] == ["1", "1", "2", "2"]
    assert [p.hive for p in files.parts] == [(("region", "1"),)] * 2 + [(("region", "2"),)] * 2
    single = read_input_files(load_config(tiny_release))
    assert single.parts[0].partition is None and len(single.parts) == 1
    assert sorted(rows_of(files)) == sorted(rows_of(single))
    by_region = micro.sort(pl.col("geocode").str.slice(0, 1), maintain_order=True)  # the parts' order
    assert [c for c, _ in rows_of(files, batch_rows=7)] == by_region["geocode"].to_list()


def test_a_partition_column_in_the_path_only_is_a_column(tiny_release: Path) -> None:
    """Files written without their partition column (the value in the path only) read as the rows they were."""
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet").with_columns(
        REGION=pl.col("geocode").str.slice(0, 1), REST=pl.col("geocode").str.slice(1))
    micro.write_parquet(tiny_release.parent / "split.parquet")
    folder = tiny_release.parent / "microdata"
    write_hive_dataset(micro, folder, "REGION", keep_column=False)
    assert all("REGION" not in pl.read_parquet_schema(p) for p in folder.rglob("*.parquet"))
    columns = {"input.geocode_columns": ["REGION", "REST"]}
    dataset = folder_files(tiny_release, folder, **columns)
    single = folder_files(tiny_release, tiny_release.parent / "split.parquet", **columns)
    assert sorted(rows_of(dataset)) == sorted(rows_of(single))


def test_a_plain_folder_is_labelled_by_its_top_level_folders(tiny_release: Path) -> None:
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    folder = tiny_release.parent / "microdata"
    (folder / "north" / "deeper").mkdir(parents=True)
    micro.slice(0, 1000).write_parquet(folder / "north" / "deeper" / "x.parquet")
    micro.slice(1000, 1000).write_parquet(folder / "a.parquet")
    micro.slice(2000).write_parquet(folder / "z.parquet")
    (folder / "_SUCCESS").write_text("")  # a writer's marker: not a part
    files = folder_files(tiny_release, folder)
    assert [(p.path.name, p.partition) for p in files.parts] == [("a.parquet", None), ("x.parquet", "north"),
                                                                ("z.parquet", None)]
    assert sorted(rows_of(files)) == sorted(rows_of(read_input_files(load_config(tiny_release))))


def plant(path: Path, row: int, column: str, value: str | None) -> None:
    frame = pl.read_parquet(path)
    values = frame[column].cast(pl.Utf8).to_list()
    values[row - 1] = value
    frame.with_columns(pl.Series(column, values, dtype=pl.Utf8)).write_parquet(path)


def test_a_bad_value_in_the_second_part_names_that_file_and_its_row(tiny_release: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder = tiny_release.parent / "microdata"
    written = write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                                 pl.col("geocode").str.slice(0, 1))
    plant(written[1], 17, "COLOUR", "purple")
    files = folder_files(tiny_release, folder)  # file level: fine, nothing read of the bodies
    for batch_rows in (1_000_000, 5):
        with pytest.raises(InputError) as caught:
            validated_rows(files, batch_rows=batch_rows)
        error = caught.value
        assert (error.path, error.column, error.row, error.category) == (str(written[1]), "COLOUR", 17,
                                                                          InputProblem.DOMAIN)
    assert list(encoded_rows(files, 0, geography_units(files)))  # the first part alone is fine
    code = main(["check", str(tiny_release), "--microdata", str(folder)])
    err = capsys.readouterr().err
    assert code != 0 and "region=1/part-1.parquet" in err and "column COLOUR" in err and "row 17" in err, err
    assert "purple" not in err


ERRORS = [("COLOUR", "purple"), ("ADULT", None), ("geocode", "9911"), ("geocode", "1 0x"), ("geocode", "110"),
          ("COLOUR", " ")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plants=st.lists(st.tuples(st.integers(1, 300), st.sampled_from(ERRORS)), max_size=3),
       batch_rows=st.integers(1, 64), csv=st.booleans())
def test_batches_give_the_encoding_and_the_first_error_of_one_read(
        tiny_release: Path, plants: list[tuple[int, tuple[str, str | None]]], batch_rows: int, csv: bool) -> None:
    frame = pl.read_parquet(tiny_release.parent / "microdata.parquet").head(300)
    for row, (column, value) in plants:
        values = frame[column].to_list()
        values[row - 1] = value
        frame = frame.with_columns(pl.Series(column, values, dtype=pl.Utf8))
    path = tiny_release.parent / ("cut.csv" if csv else "cut.parquet")
    frame.write_csv(path) if csv else frame.write_parquet(path)
    files = read_input_files(load_config(tiny_release, {"input.path": str(path),
                                                       "input.format": "csv" if csv else "parquet"}))

    def outcome(rows: int) -> object:
        try:
            _, units, cells = validated_rows(files, batch_rows=rows)
        except InputError as error:
            return (error.path, error.column, error.row, error.category, error.problem)
        return units.tolist(), cells.tolist()

    whole = outcome(1_000_000)
    assert outcome(batch_rows) == whole
    if plants:  # the earliest planted row is the one named
        assert isinstance(whole, tuple) and whole[2] == min(row for row, _ in plants)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_no_batch_exceeds_batch_rows(tiny_release: Path, fmt: str) -> None:
    """Memory is bounded by construction: whatever the file's row groups or blocks, a batch holds at most
    ``batch_rows`` rows, and together they are every row once."""
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    path = tiny_release.parent / f"one.{fmt}"
    micro.write_csv(path) if fmt == "csv" else micro.write_parquet(path, row_group_size=micro.height)
    files = read_input_files(load_config(tiny_release, {"input.path": str(path), "input.format": fmt}))
    for batch_rows in (13, 97, 1000):  # 13: 231 batches of the 3,000 rows, the last one short
        sizes = [f.height for f in read_batches(files.parts[0], files.format, batch_rows)]
        assert max(sizes) <= batch_rows and sum(sizes) == micro.height
        batches = list(encoded_rows(files, 0, geography_units(files), batch_rows=batch_rows))
        assert max(len(b.cells) for b in batches) <= batch_rows
        assert all(b.units.dtype == np.int32 and b.cells.dtype == np.int32 for b in batches)
        assert sum(len(b.units) for b in batches) == micro.height


def test_a_type_error_in_one_part_is_refused_at_file_level_without_a_charge(
        tiny_release: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tiny_release.parent / "microdata"
    written = write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                                 pl.col("geocode").str.slice(0, 1))
    pl.read_parquet(written[2]).with_columns(pl.lit(1.5).alias("ADULT")).write_parquet(written[2])
    with pytest.raises(InputError) as caught:
        folder_files(tiny_release, folder)
    assert (caught.value.path, caught.value.column, caught.value.category) == (str(written[2]), "ADULT",
                                                                                InputProblem.COLUMN)
    code = main(["-q", "release", str(tiny_release), "--no-prefect", "--insecure-seed", "7", "--microdata",
                 str(folder)])
    err = capsys.readouterr().err
    assert code != 0 and "region=2/part-0.parquet" in err and "charged" not in err, err
    assert not installation_ledger.exists() or PrivacyLedger(installation_ledger).charges() == []


def test_a_dataset_folder_releases_like_its_file(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tiny_release.parent / "microdata"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                       pl.col("geocode").str.slice(0, 1))
    assert main(["check", str(tiny_release), "--microdata", str(folder)]) == 0
    assert "3,000 person records" in capsys.readouterr().out
    code = main(["-q", "release", str(tiny_release), "--no-prefect", "--insecure-seed", "7", "--microdata",
                 str(folder)])
    assert code == 0, capsys.readouterr().err


def test_what_a_dataset_folder_may_not_be(tiny_release: Path) -> None:
    micro, _ = tiny_microdata()
    folder = tiny_release.parent / "microdata"
    folder.mkdir()
    cases = []
    with pytest.raises(InputError, match="no Parquet file"):
        folder_files(tiny_release, folder)
    micro.write_csv(folder / "a.csv")
    with pytest.raises(InputError, match="no Parquet file"):  # a CSV file is no part of a dataset
        folder_files(tiny_release, folder)
    with pytest.raises(InputError, match="Parquet dataset only"):
        folder_files(tiny_release, folder, **{"input.format": "csv"})
    micro.write_parquet(folder / "a.parquet")
    os.symlink(folder / "a.parquet", folder / "b.parquet")
    with pytest.raises(InputError, match="symbolic link") as caught:
        folder_files(tiny_release, folder)
    cases.append(caught.value)
    (folder / "b.parquet").unlink()
    (folder / "sub").mkdir()
    os.symlink(folder.parent, folder / "sub" / "loop")  # a link to a folder: a loop, never followed
    with pytest.raises(InputError, match="symbolic link") as caught:
        folder_files(tiny_release, folder)
    cases.append(caught.value)
    assert all(c.category is InputProblem.FILE and not c.category.depends_on_values for c in cases)


def test_a_body_that_does_not_parse_is_found_after_the_file_level_checks(tiny_release: Path) -> None:
    csv = tiny_release.parent / "micro.csv"
    csv.write_text("geocode,COLOUR,ADULT\n1101,r,1\n1102,\"g,1\n")
    files = read_input_files(load_config(tiny_release, {"input.path": str(csv), "input.format": "csv"}))
    with pytest.raises(InputError) as caught:
        validated_rows(files)
    assert caught.value.category is InputProblem.FILE and "not a readable CSV file" in caught.value.problem


def test_the_units_of_a_dataset_without_a_geography_file(tiny_release: Path) -> None:
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    folder = tiny_release.parent / "microdata"
    write_hive_dataset(micro, folder, "region", pl.col("geocode").str.slice(0, 1), parts=3)
    files = folder_files(tiny_release, folder, **{"input.geography": None})
    assert geography_units(files, batch_rows=11).tolist() == sorted(micro["geocode"].unique().to_list())


def test_a_part_swapped_after_it_was_listed_is_never_read(tiny_release: Path) -> None:
    """The fingerprint charged and the rows measured are one content: a part replaced (in place, or by another
    file under its name) after ``read_input_files`` is refused by every reader, the fingerprint's included."""
    from censusdp.pipeline.io.fingerprint import data_fingerprints
    from censusdp.pipeline.io.parts import ChangedFileError

    folder = tiny_release.parent / "microdata"
    written = write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "region",
                                 pl.col("geocode").str.slice(0, 1))
    for swap in ("in place", "renamed over"):
        files = folder_files(tiny_release, folder)
        replacement = pl.read_parquet(written[1]).head(5)
        if swap == "in place":
            replacement.write_parquet(written[1])
        else:
            replacement.write_parquet(folder / "other.tmp")
            os.replace(folder / "other.tmp", written[1])
        with pytest.raises(ChangedFileError):
            data_fingerprints(files, bytes(32))
        with pytest.raises(InputError, match="changed while the release was reading it") as caught:
            validated_rows(files)
        assert caught.value.path == str(written[1]) and caught.value.category is InputProblem.FILE


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text("09aZé\u4e2d", min_size=4, max_size=4), max_size=30))
def test_sorted_codes_are_numpys_sort_whatever_their_characters(codes: list[str]) -> None:
    """The geography's codes go to numpy through one joined byte string when ASCII, else one by one: both sorted
    as numpy sorts them (UTF-8 byte order is code point order)."""
    found = sorted_codes(pl.Series(codes, dtype=pl.Utf8), 4)
    expected = np.sort(np.array(codes, dtype="<U4"))
    assert found.tolist() == expected.tolist() and (not codes or found.dtype == np.dtype("<U4"))
