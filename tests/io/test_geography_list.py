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
