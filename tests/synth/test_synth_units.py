"""The synthetic units (pipeline.synth.housing): consistent with the persons block by block, seeded, deterministic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.synth.housing import GQ_CODES, HOUSEHOLD_SIZE_P, household_starts
from censusdp.pipeline.synth.population import UNITS_COLUMNS, SyntheticState, synthesize, synthesize_state

PERSONS = 60_000


@pytest.fixture(scope="module", params=[4, 5])
def state(request: pytest.FixtureRequest) -> SyntheticState:
    return synthesize_state(PERSONS, request.param)


def per_block(state: SyntheticState) -> pl.DataFrame:
    """Per block of the geography: household persons, occupied and vacant housing units, facilities."""
    persons = state.microdata.group_by("geocode").agg(
        household_persons=(pl.col("GQTYPE_PL") == "0").sum(), persons=pl.len())
    units = state.units.group_by("geocode").agg(
        occupied=((pl.col("RTYPE") == "2") & (pl.col("VACS") == "0")).sum(),
        vacant=((pl.col("RTYPE") == "2") & (pl.col("VACS") != "0")).sum(),
        facilities=(pl.col("RTYPE") == "4").sum())
    return (state.geography.join(persons, on="geocode", how="left").join(units, on="geocode", how="left")
            .fill_null(0))


def test_units_layout(state: SyntheticState) -> None:
    units = state.units
    assert units.columns == list(UNITS_COLUMNS) and all(dtype == pl.Utf8 for dtype in units.dtypes)
    assert units["geocode"].is_sorted() and units["geocode"].is_in(state.geography["geocode"].implode()).all()
    housing, facilities = units.filter(pl.col("RTYPE") == "2"), units.filter(pl.col("RTYPE") == "4")
    assert housing.height + facilities.height == units.height
    assert (housing["GQTYPE"] == "000").all() and housing["VACS"].is_in([str(v) for v in range(8)]).all()
    assert (facilities["VACS"] == "0").all()  # a facility is never vacant
    assert set(facilities["GQTYPE"].to_list()) <= {code for codes in GQ_CODES for code in codes}


def test_occupied_units_are_the_households_of_each_block(state: SyntheticState) -> None:
    """Each block's household persons live in its occupied units, 1 to 7 to a unit, about 2.4 on average; a
    block with no household person has no occupied unit."""
    blocks = per_block(state)
    people, occupied = blocks["household_persons"].to_numpy(), blocks["occupied"].to_numpy()
    assert ((occupied == 0) == (people == 0)).all()
    assert (occupied <= people).all() and (people <= 7 * occupied).all()
    assert 2.2 < people.sum() / occupied.sum() < 2.6


def test_vacant_units_and_housing_units_at_least_households(state: SyntheticState) -> None:
    blocks = per_block(state)
    housing = blocks["occupied"] + blocks["vacant"]
    assert (housing >= blocks["occupied"]).all() and blocks["vacant"].sum() > 0
    assert 0.05 < blocks["vacant"].sum() / housing.sum() < 0.2
    empty = blocks.filter(pl.col("persons") == 0)
    assert empty["vacant"].sum() > 0 and (empty["vacant"] > 0).mean() < 0.3  # some unpopulated blocks have units


def test_a_facility_of_type_t_exactly_where_persons_of_type_t_live(state: SyntheticState) -> None:
    """One occupied facility per group-quarters type present among a block's persons, and none elsewhere; its
    detailed GQTYPE code's first digit is that type (7 and above: 7)."""
    gq = state.microdata.filter(pl.col("GQTYPE_PL") != "0").select("geocode", "GQTYPE_PL").unique()
    facilities = state.units.filter(pl.col("RTYPE") == "4").select(
        "geocode", GQTYPE_PL=pl.col("GQTYPE").str.slice(0, 1).cast(pl.Int64).clip(1, 7).cast(pl.Utf8))
    assert facilities.height == gq.height > 0
    assert sorted(facilities.rows()) == sorted(gq.rows())


def test_households_never_span_blocks() -> None:
    rng = np.random.default_rng(0)
    block = np.repeat(np.arange(50), rng.integers(0, 30, 50))
    starts = household_starts(rng, block)
    sizes = np.diff(np.r_[starts, block.shape[0]])
    assert starts[0] == 0 and (sizes >= 1).all() and (sizes <= len(HOUSEHOLD_SIZE_P)).all()
    assert (block[starts] == block[np.r_[starts[1:], block.shape[0]] - 1]).all()  # first and last in one block
    new_block = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    assert set(new_block) <= set(starts.tolist())
    assert household_starts(rng, np.zeros(0, dtype=np.int64)).shape == (0,)


def test_units_are_deterministic_per_seed_and_leave_the_persons_alone() -> None:
    a, b, c = synthesize_state(20_000, 8), synthesize_state(20_000, 8), synthesize_state(20_000, 9)
    assert a.units.equals(b.units) and not a.units.equals(c.units)
    persons, geography = synthesize(20_000, 8)
    assert a.microdata.equals(persons) and a.geography.equals(geography)


def test_censusdp_synth_writes_the_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from censusdp.pipeline.cli import main

    assert main(["synth", "--persons", "3000", "--seed", "2", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / name) for name in ("microdata.parquet", "geography.parquet", "units.parquet")]
    assert pl.read_parquet(tmp_path / "units.parquet").equals(synthesize_state(3000, 2).units)
