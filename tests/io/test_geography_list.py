"""The geography file's list of units: sorted and unique, or refused at its first duplicated row (file order)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.value_checks import geography_units

PATH = Path("geo.parquet")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text("0123", min_size=3, max_size=3), min_size=1, max_size=30))
def test_sorted_unique_or_the_first_duplicated_row(codes: list[str]) -> None:
    frame = pl.DataFrame({"geocode": codes})
    repeated = [i for i, code in enumerate(codes) if codes.count(code) > 1]
    if not repeated:
        listed = geography_units(frame, PATH, 3)
        assert listed.dtype.kind == "U" and list(listed) == sorted(codes)
        return
    with pytest.raises(InputError, match="duplicate geocode") as caught:
        geography_units(frame, PATH, 3)
    assert caught.value.category is InputProblem.DUPLICATE
    assert caught.value.row == repeated[0] + 1 and caught.value.column == "geocode"


def test_a_duplicate_far_apart_in_file_order_is_found() -> None:
    codes = [f"{i:03d}" for i in range(500)] + ["007"]
    with pytest.raises(InputError, match="duplicate geocode") as caught:
        geography_units(pl.DataFrame({"geocode": codes}), PATH, 3)
    assert caught.value.row == 8
    assert np.array_equal(geography_units(pl.DataFrame({"geocode": codes[::-1][1:]}), PATH, 3), np.array(codes[:500]))


def test_a_ragged_csv_is_refused_when_one_column_is_read(tmp_path: Path) -> None:
    """Reading the geocode column alone still parses every field: a row longer than the header is refused, not
    cut short (the whole file's read refused it before the geography was read for one column)."""
    from censusdp.pipeline.io.parts import read_body

    path = tmp_path / "geography.csv"
    path.write_text("geocode,name\n001,a\n002,b,extra\n")
    with pytest.raises(InputError):
        read_body(path, "csv", ["geocode"])
    path.write_text("geocode,name\n001,a\n002,b\n")
    assert read_body(path, "csv", ["geocode"]).columns == ["geocode"]


def test_the_geography_files_column_follows_the_records_or_its_own_key(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A country's files name their code column `ward`: the geography file is read by the same column unless
    input.geography_column names its own; a file without it gets one line naming file and column."""
    from censusdp.pipeline.cli import main
    from tests.helpers.configs import edit_config
    from tests.helpers.tiny import TINY_TOML, tiny_microdata

    micro, geo = tiny_microdata()
    micro.rename({"geocode": "ward"}).write_parquet(tmp_path / "microdata.parquet")
    geo.rename({"geocode": "ward"}).write_parquet(tmp_path / "geography.parquet")
    geo.rename({"geocode": "WARD_CODE"}).write_parquet(tmp_path / "own.parquet")
    config = tmp_path / "config.toml"
    config.write_text(TINY_TOML.format(rho="4"))
    edit_config(config, {"input.geocode_column": "ward"})

    def release(*extra: str) -> tuple[int, str, str]:
        code = main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "1", *extra])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = release()
    assert code == 0, err
    root = pl.read_parquet(Path(out.strip().splitlines()[-1]) / "tables" / "root.parquet")
    assert root["count"].sum() == micro.height
    code, out, err = release("--geography", str(tmp_path / "own.parquet"))
    assert code == 1 and err.strip().splitlines()[-1] == (f"censusdp: error: {tmp_path / 'own.parquet'}, column ward: "
                                                          "missing column"), err
    edit_config(config, {"input.geography_column": "WARD_CODE"})
    code, out, err = release("--geography", str(tmp_path / "own.parquet"))
    assert code == 0, err
