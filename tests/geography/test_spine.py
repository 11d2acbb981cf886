"""Levels from the geography file's columns: any nested hierarchy is a spine.  A spine whose middle level is a
column, not a prefix of the block code, releases the same tables (P.L. tables, areas) as the prefix spine it
relabels, and a hierarchy that does not nest is refused naming its rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.geography.levels import Level
from censusdp.geography.spine import unit_codes, unit_lookup
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import ConfigError, InputError
from censusdp.pipeline.io.spine_codes import spine_units
from censusdp.pipeline.synth.population import write_synthetic
from tests.helpers.configs import edit_config, preset_config
from tests.helpers.releases import cli, release_dir

PATH = Path("geo.parquet")
# root / region (2 characters of the unit code) / district (a column, 3 characters) / ward (the unit, 6)
SPINE = (Level("nation", 0), Level("region", 2), Level("district", 5, "DIST", 2), Level("ward", 9, None, 6))


def test_spine_codes_put_each_levels_own_code_in_turn_and_find_units_by_theirs() -> None:
    frame = pl.DataFrame({"ward": ["AA0002", "AA0001", "BB0001", "AA0003"], "DIST": ["Z01", "Z01", "A07", "B02"]})
    spine = spine_units(frame, PATH, SPINE, "ward")
    assert spine.tolist() == ["AAB020003", "AAZ010001", "AAZ010002", "BBA070001"]  # region, district, the rest
    assert unit_codes(SPINE, spine).tolist() == ["AA0003", "AA0001", "AA0002", "BB0001"]
    position, found = unit_lookup(SPINE, spine).find(np.array(["AA0002", "BB0001", "AA0009"]))
    assert found.tolist() == [True, True, False] and position[:2].tolist() == [2, 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text("ab", min_size=2, max_size=2), st.text("xyz", min_size=3, max_size=3)),
                min_size=1, max_size=25, unique_by=lambda pair: pair[0]))
def test_a_district_in_two_regions_is_refused_naming_both_rows(pairs: list[tuple[str, str]]) -> None:
    """Units ``RR`` + 4 digits; a district (column) in two regions (the units' first characters) does not nest."""
    frame = pl.DataFrame({"ward": [f"{r}{i:04d}" for i, (r, _) in enumerate(pairs)], "DIST": [d for _, d in pairs]})
    first_region: dict[str, tuple[str, int]] = {}
    clash = None
    for row, (region, district) in enumerate(pairs, start=1):
        seen = first_region.setdefault(district, (region, row))
        if seen[0] != region and clash is None:
            clash = (seen[1], row)
    if clash is None:
        assert len(spine_units(frame, PATH, SPINE, "ward")) == len(pairs)
        return
    with pytest.raises(InputError) as caught:
        spine_units(frame, PATH, SPINE, "ward")
    assert f"rows {clash[0]} and {clash[1]}" in str(caught.value) and caught.value.row == clash[1]
    assert caught.value.column == "DIST" and "district" in str(caught.value)


@pytest.mark.parametrize(("district", "problem"), [("Z1", "must have 3 characters"), (None, "missing value"),
                                                   ("Z-1", "malformed code")])
def test_a_bad_column_code_names_file_column_and_row(district: str | None, problem: str) -> None:
    frame = pl.DataFrame({"ward": ["AA0001", "AA0002"], "DIST": ["Z01", district]})
    with pytest.raises(InputError, match=problem) as caught:
        spine_units(frame, PATH, SPINE, "ward")
    assert (caught.value.column, caught.value.row) == ("DIST", 2)


def test_a_column_level_needs_a_width_and_may_be_neither_root_nor_units(tmp_path: Path) -> None:
    config = preset_config(tmp_path / "c.toml", "pl94")
    levels = load_config(config).raw["levels"]
    levels[1] = {"name": "state", "column": "PLACE", "width": 5}
    edit_config(config, {"levels": levels})
    assert [(lv.width, lv.column, lv.unit_prefix) for lv in load_config(config).levels] == [
        (0, None, 0), (5, "PLACE", 0), (10, None, 5), (16, None, 11), (17, None, 12), (20, None, 15)]
    for bad, key in (([{"name": "us", "width": 0, "column": "X"}, {"name": "block", "width": 15}], "levels[0].column"),
                     ([{"name": "us", "width": 0}, {"name": "block", "width": 15, "column": "X"}], "levels"),
                     ([{"name": "us", "width": 0}, {"name": "p", "width": 0, "column": "X"},
                       {"name": "block", "width": 15}], "levels[1].width")):
        edit_config(config, {"levels": bad})
        with pytest.raises(ConfigError) as caught:
            load_config(config)
        assert caught.value.key == key


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("spine-data")
    write_synthetic(6000, 3, data)
    return data


def _tract_label(blocks: pl.Series) -> pl.Series:
    """Each block's tract relabelled ``T`` + its rank among the tracts: the tract's order kept, its code not."""
    tracts = blocks.str.slice(0, 11)
    return "T" + (tracts.rank("dense") - 1).cast(pl.Int64).cast(pl.Utf8).str.zfill(5)


def test_a_column_tract_level_releases_the_prefix_spines_tables(state: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """With noise too small to round to anything (σ² ~ 1e-5), both spines publish the true counts: every level's
    table and P.L. table, and an area plan's sums, are the same once codes are mapped, and the protected microdata
    is the same; the manifest names the column."""
    geography = pl.read_parquet(state / "geography.parquet")
    geography.with_columns(_tract_label(geography["geocode"]).alias("TRACT")).write_parquet(tmp_path / "geo.parquet")
    exact = {"budget.rho": "100000", "ledger.cap_rho": "1000000"}
    prefix = preset_config(tmp_path / "prefix.toml", "pl94", {**exact, "ledger.dataset": "spine-prefix"}, files=state)
    column = preset_config(tmp_path / "column.toml", "pl94", {**exact, "ledger.dataset": "spine-column",
                                                               "input.geography": str(tmp_path / "geo.parquet")},
                           files=state)
    levels = load_config(column).raw["levels"]
    levels[3] = {"name": "tract", "column": "TRACT", "width": 6}
    edit_config(column, {"levels": levels})
    runs = [release_dir(capsys, path, "--no-units") for path in (prefix, column)]

    blocks = geography["geocode"]
    relabel = dict(zip(blocks.str.slice(0, 11), _tract_label(blocks), strict=True))

    def spine(code: str, level: str) -> str:  # the column spine's code of a prefix spine's node
        if level in ("us", "state", "county"):
            return code
        return code[:5] + relabel[code[:11]] + (code[5:] if level != "tract" else "")

    manifest = json.loads((runs[1] / "manifest.json").read_text())
    assert [lv.get("column") for lv in manifest["levels"]] == [None, None, None, "TRACT", None, None]
    for level in ("us", "state", "county", "tract", "block_group", "block"):
        for table in (f"tables/{level}.parquet", f"tables/pl94/{level}.parquet"):
            ours, theirs = (pl.read_parquet(run / table) for run in runs)
            key = "geoid" if "geoid" in ours.columns else "GEOID"
            ours = ours.with_columns(pl.col(key).map_elements(lambda c, lv=level: spine(c, lv), pl.Utf8))
            assert ours.sort(ours.columns).equals(theirs.sort(theirs.columns)), table
    assert pl.read_parquet(runs[0] / "tables/block.parquet")["count"].sum() == 6000
    people = [pl.read_parquet(run / "microdata.parquet") for run in runs]  # rows carry unit codes
    assert people[0].height == 6000 and people[0].sort(people[0].columns).equals(people[1].sort(people[1].columns))

    plan = tmp_path / "plan.csv"  # areas named by block codes, which cut across tracts
    pl.DataFrame({"GEOID": blocks, "area": blocks.str.slice(9, 2)}).write_csv(plan)
    sums = []
    for run in runs:
        code, out, err = cli(capsys, "areas", str(run), "--assign", str(plan))
        assert code == 0, err
        sums.append(pl.read_parquet(out.splitlines()[-1]).select("area", "variable", "published")
                    .sort("area", "variable"))
    assert sums[0].equals(sums[1]) and sums[0]["published"].sum() > 0
