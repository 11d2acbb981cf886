"""Reading unit microdata: Parquet and CSV through the readers persons use (a units ``ReleaseConfig`` is a
configuration like any), and the Census 2020 MDF unit layout (``mdf-units``) with its own rules and errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.errors import InputError, InputProblem
from censusdp.pipeline.io.microdata import read_input_files, read_microdata, validated_rows
from tests.helpers.tiny import TINY_TOML, TINY_UNITS_TOML, tiny_microdata

HEADER = "SCHEMA_TYPE_CODE|SCHEMA_BUILD_ID|TABBLKST|TABBLKCOU|TABTRACTCE|TABBLKGRPCE|TABBLK|RTYPE|GQTYPE|TEN|VACS"
# A hand-written file in the 2020 MDF unit layout: two blocks of tract 010500 in county 105 of state 01.
MDF_UNITS = f"""{HEADER}
MUD|1.0.0|01|105|010500|1|1001|2|000|1|0
MUD|1.0.0|01|105|010500|1|1001|2|000|2|0
MUD|1.0.0|01|105|010500|1|1001|2|000|0|5
MUD|1.0.0|01|105|010500|1|1001|4|301|0|0
MUD|1.0.0|01|105|010500|2|2003|2|000|0|1
MUD|1.0.0|01|105|010500|2|2003|4|501|0|0
MUD|1.0.0|01|105|010500|2|2003|4|997|0|0
"""
# detailed cell = hhgq * 2 + (occupancy - 1), in the pl94 presets' units schema (8 x 2)
MDF_CELLS = [0, 0, 1, 6, 1, 10, 14]
MDF_CODES = ["011050105001001"] * 4 + ["011050105002003"] * 3


def units_config(folder: Path, preset: str = "pl94", fmt: str = "parquet", path: str = "units.parquet"
                 ) -> ReleaseConfig:
    """The preset's units universe reading ``folder/path`` (reading the records alone needs no geography file, but
    a configuration with units names one)."""
    text = preset_text(preset)
    text = text.replace('format = "parquet"                  # parquet | csv | mdf-units', f'format = "{fmt}" #')
    (folder / "c.toml").write_text(text.replace("[units]\n", f'[units]\npath = "{path}"\n'))
    units = load_config(folder / "c.toml").units
    assert units is not None and units.input.format == fmt
    return dataclasses.replace(units, input=dataclasses.replace(units.input, geography=None))  # the records alone


def test_a_hand_written_mdf_unit_file(tmp_path: Path) -> None:
    (tmp_path / "units.txt").write_text(MDF_UNITS)
    units = read_microdata(units_config(tmp_path, fmt="mdf-units", path="units.txt"))
    assert units.codes.to_list() == MDF_CODES and units.cells.tolist() == MDF_CELLS


def test_the_mdf_unit_layout_comma_separated_and_as_parquet(tmp_path: Path) -> None:
    """The same records as CSV (mdf-units reads either separator), and as Parquet with the same columns plus a
    geocode (format parquet: the attributes' mapping tables read the MDF codes in any format)."""
    (tmp_path / "units.csv").write_text(MDF_UNITS.replace("|", ","))
    units = read_microdata(units_config(tmp_path, fmt="mdf-units", path="units.csv"))
    assert units.codes.to_list() == MDF_CODES and units.cells.tolist() == MDF_CELLS
    frame = pl.read_csv(tmp_path / "units.csv", infer_schema=False)
    frame.with_columns(geocode=pl.concat_str("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")).write_parquet(
        tmp_path / "units.parquet")
    units = read_microdata(units_config(tmp_path, preset="pl94-2020"))
    assert units.codes.to_list() == MDF_CODES and units.cells.tolist() == MDF_CELLS


def test_the_pl94_mdf_unit_file_with_hh_status(tmp_path: Path) -> None:
    """The P.L. 94-171 MDF unit file has RTYPE and HH_STATUS (0 not a housing unit, 1 occupied, 2 vacant) but no
    group-quarters type: read with a schema of its own (record type x occupancy), its HH_STATUS rule checked."""
    text = TINY_TOML.format(rho="4") + TINY_UNITS_TOML.replace('format = "csv"', 'format = "mdf-units"').replace(
        'column = "KIND"', 'column = "RTYPE"\nmapping = { "2" = "0", "4" = "1" }').replace(
        'column = "OCC"', 'column = "HH_STATUS"').replace('mapping = { o = "1", v = "2" }',
                                                          'mapping = { "0" = "1", "1" = "1", "2" = "2" }')
    levels = "[[levels]]\nname = \"unit\"\nwidth = 4"
    text = text.replace(levels, "[[levels]]\nname = \"unit\"\nwidth = 15")
    (tmp_path / "c.toml").write_text(text)
    units = load_config(tmp_path / "c.toml").units
    assert units is not None
    units = dataclasses.replace(units, input=dataclasses.replace(units.input, geography=None))  # the records alone
    rows = ["MUD|1|44|007|000100|1|1001|2|1", "MUD|1|44|007|000100|1|1001|2|2", "MUD|1|44|007|000100|1|1001|4|0"]
    (tmp_path / "units.csv").write_text("SCHEMA_TYPE_CODE|SCHEMA_BUILD_ID|TABBLKST|TABBLKCOU|TABTRACTCE|TABBLKGRPCE|"
                                        "TABBLK|RTYPE|HH_STATUS\n" + "\n".join(rows) + "\n")
    assert read_microdata(units).cells.tolist() == [0, 1, 2]
    (tmp_path / "units.csv").write_text((tmp_path / "units.csv").read_text().replace("|2|2\n", "|2|0\n"))
    with pytest.raises(InputError) as caught:
        read_microdata(units)
    assert (caught.value.column, caught.value.row, caught.value.category) == ("HH_STATUS", 2, InputProblem.LAYOUT)


def mdf_with(row: int, column: str, value: str) -> str:
    """MDF_UNITS with one value replaced (row 1-based among the records)."""
    lines = MDF_UNITS.splitlines()
    fields = lines[row].split("|")
    fields[HEADER.split("|").index(column)] = value
    lines[row] = "|".join(fields)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("text", "column", "row", "category", "problem"), [
    (mdf_with(2, "RTYPE", "3"), "RTYPE", 2, InputProblem.DOMAIN, "must be 2 (housing unit) or 4 (group quarters)"),
    (mdf_with(3, "GQTYPE", "301"), "GQTYPE", 3, InputProblem.LAYOUT, "must be 000 for a housing unit"),
    (mdf_with(4, "GQTYPE", "000"), "GQTYPE", 4, InputProblem.LAYOUT, "must be 000 for a housing unit"),
    (mdf_with(6, "VACS", "4"), "VACS", 6, InputProblem.LAYOUT, "never vacant"),
    (mdf_with(5, "GQTYPE", "999"), "GQTYPE", 5, InputProblem.DOMAIN, "outside the domain of attribute hhgq"),
    (mdf_with(1, "VACS", "8"), "VACS", 1, InputProblem.DOMAIN, "outside the domain of attribute occupancy"),
    (mdf_with(7, "VACS", ""), "VACS", 7, InputProblem.MISSING_VALUE, "missing value"),
    (mdf_with(5, "RTYPE", ""), "RTYPE", 5, InputProblem.MISSING_VALUE, "missing value"),
    (mdf_with(3, "TABBLKGRPCE", "2"), "TABBLKGRPCE", 3, InputProblem.GEOCODE, "block group does not match"),
    (mdf_with(2, "TABBLK", "101"), "TABBLK", 2, InputProblem.GEOCODE, "must have 4 characters"),
    (HEADER + "\n", None, None, InputProblem.EMPTY, "contains no unit records"),
])
def test_mdf_unit_errors_name_file_column_and_row(tmp_path: Path, text: str, column: str | None, row: int | None,
                                                  category: InputProblem, problem: str) -> None:
    (tmp_path / "units.txt").write_text(text)
    files = read_input_files(units_config(tmp_path, fmt="mdf-units", path="units.txt"))  # structure: fine
    with pytest.raises(InputError) as caught:
        validated_rows(files)
    error = caught.value
    assert (error.path, error.column, error.row, error.category) == (str(tmp_path / "units.txt"), column, row,
                                                                      category), str(error)
    assert problem in error.problem and category.depends_on_values


@pytest.mark.parametrize("column", ["RTYPE", "TABBLKGRPCE", "VACS"])
def test_a_missing_mdf_unit_column_is_a_file_level_refusal(tmp_path: Path, column: str) -> None:
    """Without its record type (or a column the schema reads) the file is refused from its header alone: before
    any charge, whatever the values."""
    frame = pl.read_csv(MDF_UNITS.encode(), separator="|", infer_schema=False).drop(column)
    frame.write_csv(tmp_path / "units.txt", separator="|")
    with pytest.raises(InputError) as caught:
        read_input_files(units_config(tmp_path, fmt="mdf-units", path="units.txt"))
    assert (caught.value.column, caught.value.category) == (column, InputProblem.COLUMN)


def test_units_as_csv_through_the_persons_readers(tmp_path: Path) -> None:
    """The tiny release's units universe (CSV with a mapping table), against the persons' geography file: every
    unit's block is listed, and the tree is the persons' one."""
    micro, geo = tiny_microdata()
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    blocks = geo["geocode"].to_list()
    rows = [(blocks[i % len(blocks)], "1" if i % 9 == 0 else "0", "o" if i % 9 == 0 or i % 4 else "v")
            for i in range(200)]
    pl.DataFrame(rows, schema=["geocode", "KIND", "OCC"], orient="row").write_csv(tmp_path / "units.csv")
    (tmp_path / "c.toml").write_text(TINY_TOML.format(rho="4") + TINY_UNITS_TOML)
    config = load_config(tmp_path / "c.toml")
    assert config.units is not None
    tree, unit_index, cells = validated_rows(read_input_files(config.units))
    persons_tree = validated_rows(read_input_files(config))[0]
    assert [g.tolist() for g in tree.geoids] == [g.tolist() for g in persons_tree.geoids]
    expected = [int(k) * 2 + (0 if o == "o" else 1) for _, k, o in rows]
    assert cells.tolist() == expected
    assert tree.geoids[-1][unit_index].tolist() == [b for b, _, _ in rows]
    pl.DataFrame(rows, schema=["geocode", "KIND", "OCC"], orient="row").with_columns(OCC=pl.lit("x")).write_csv(
        tmp_path / "units.csv")
    with pytest.raises(InputError) as caught:
        read_microdata(config.units)
    assert (caught.value.column, caught.value.row, caught.value.category) == ("OCC", 1, InputProblem.DOMAIN)


def test_synthetic_units_read_with_the_presets(tmp_path: Path) -> None:
    """``censusdp synth``'s units.parquet, read by both presets' units universe against the synthetic geography."""
    from censusdp.pipeline.synth.population import write_synthetic

    files = write_synthetic(4_000, 7, tmp_path)
    frame = pl.read_parquet(files.units)
    for preset in ("pl94", "pl94-2020"):
        (tmp_path / "c.toml").write_text(preset_text(preset))
        config = load_config(tmp_path / "c.toml")
        assert config.units is not None and config.units.input.path == files.units
        tree, unit_index, cells = validated_rows(read_input_files(config.units))
        assert len(cells) == frame.height and len(tree.geoids[-1]) == pl.read_parquet(files.geography).height
        hhgq, occupancy = np.unravel_index(cells, config.units.schema.shape)
        assert (hhgq == (frame["GQTYPE"].str.slice(0, 1).cast(pl.Int64).clip(0, 7)).to_numpy()).all()
        assert (occupancy == (frame["VACS"] != "0").cast(pl.Int64).to_numpy()).all()
        assert not ((hhgq > 0) & (occupancy == 1)).any()  # the structural zero holds in the data
