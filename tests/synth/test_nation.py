"""The synthetic nation (pipeline.synth.nation, pipeline.synth.states): layout, consistency, determinism, memory."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.pipeline.cli import main
from censusdp.pipeline.synth import nation
from censusdp.pipeline.synth.nation import Piece, plan_nation, write_synthetic_nation
from censusdp.pipeline.synth.population import MICRODATA_COLUMNS, UNITS_COLUMNS
from censusdp.pipeline.synth.states import N_STATES, STATE_POPULATION_2020, apportion

PERSONS, STATES, PIECE, SEED = 120_000, 4, 15_000, 5


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-state nation whose states come in several pieces."""
    out = tmp_path_factory.mktemp("nation")
    write_synthetic_nation(PERSONS, SEED, out, states=STATES, piece_persons=PIECE)
    return out


def parts(folder: Path) -> list[Path]:
    """Every part file, in name order (state, then part)."""
    return sorted(folder.glob("state=*/part-*.parquet"))


def read_all(folder: Path) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in parts(folder)])


def test_state_table_is_the_2020_census() -> None:
    assert N_STATES == 51
    assert sum(pop for _, _, pop in STATE_POPULATION_2020) == 331_449_281  # 50 states and DC
    fips = [f for f, _, _ in STATE_POPULATION_2020]
    assert fips == sorted(set(fips)) and 11 in fips and 72 not in fips  # DC in, Puerto Rico out


@settings(max_examples=200, deadline=None)
@given(persons=st.integers(1_000, 10**9), states=st.integers(1, N_STATES))
def test_apportion_is_exact_and_proportional(persons: int, states: int) -> None:
    shares = apportion(persons, states)
    assert [f for f, _ in shares] == [f for f, _, _ in STATE_POPULATION_2020[:states]]
    assert sum(n for _, n in shares) == persons
    total = sum(pop for _, _, pop in STATE_POPULATION_2020[:states])
    for (_, n), (_, _, pop) in zip(shares, STATE_POPULATION_2020, strict=False):
        assert abs(n - Fraction(persons * pop, total)) < 1


@settings(max_examples=100, deadline=None)
@given(persons=st.integers(1_000, 400_000_000), states=st.integers(1, N_STATES),
       piece=st.integers(100_000, 10_000_000))
def test_plan_pieces_are_bounded_and_disjoint(persons: int, states: int, piece: int) -> None:
    if max(-(-n // piece) for _, n in apportion(persons, states)) > 500:  # more pieces than a state has counties
        with pytest.raises(ValueError, match="pieces"):
            plan_nation(persons, states, piece)
        return
    plan = plan_nation(persons, states, piece)
    assert sum(p.persons for p in plan) == persons and max(p.persons for p in plan) <= piece
    for (state, n), _ in zip(apportion(persons, states), range(states), strict=True):
        mine = [p for p in plan if p.state == state]
        assert [p.index for p in mine] == list(range(-(-n // piece)))
        assert max(p.persons for p in mine) - min(p.persons for p in mine) <= 1
        ranges = [(p.county_base, p.county_base + p.max_counties) for p in mine]
        assert ranges[0][0] == 0 and ranges[-1][1] <= 500
        assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def test_partition_layout(written: Path) -> None:
    plan = plan_nation(PERSONS, STATES, PIECE)
    expected = sorted(f"state={p.state_code}/{p.part_name}" for p in plan)
    for folder in ("microdata", "units"):
        assert [p.relative_to(written / folder).as_posix() for p in parts(written / folder)] == expected
        assert sorted(q.name for q in (written / folder).iterdir()) == sorted({e.split("/")[0] for e in expected})
    assert len({p.state for p in plan}) == STATES and len(plan) > STATES  # some states in several pieces
    columns = {"microdata": list(MICRODATA_COLUMNS), "units": list(UNITS_COLUMNS)}
    for folder, names in columns.items():
        for part in parts(written / folder):
            frame = pl.read_parquet(part)
            assert frame.columns == names and all(t == pl.Utf8 for t in frame.dtypes)
    assert pl.read_parquet(written / "geography.parquet").columns == ["geocode"]


def test_rows_carry_their_state_and_parts_are_in_geocode_order(written: Path) -> None:
    for folder in ("microdata", "units"):
        previous_last = ""
        for part in parts(written / folder):
            geocode = pl.read_parquet(part)["geocode"]
            state = part.parent.name.removeprefix("state=")
            assert (geocode.str.len_chars() == 15).all() and geocode.str.contains(r"^\d{15}$").all()
            assert (geocode.str.slice(0, 2) == state).all()
            assert geocode.is_sorted() and previous_last < geocode[0]
            previous_last = geocode[-1]


def test_totals_follow_the_apportionment(written: Path) -> None:
    counts = dict(read_all(written / "microdata").group_by(pl.col("geocode").str.slice(0, 2)).len().iter_rows())
    assert counts == {f"{fips:02d}": n for fips, n in apportion(PERSONS, STATES)}


def test_geography_lists_exactly_the_blocks(written: Path) -> None:
    blocks = pl.read_parquet(written / "geography.parquet")["geocode"]
    assert blocks.is_sorted() and blocks.n_unique() == blocks.len()
    assert blocks.str.slice(0, 2).unique().sort().to_list() == [f"{f:02d}" for f, _ in apportion(PERSONS, STATES)]
    for folder in ("microdata", "units"):
        assert read_all(written / folder)["geocode"].is_in(blocks.implode()).all()
    # every block belongs to exactly one piece: the counties of a piece's parts own its blocks
    county_part = {}
    for part in parts(written / "microdata"):
        counties = set(pl.read_parquet(part)["geocode"].str.slice(0, 5).unique().to_list())
        assert not counties & county_part.keys()  # pieces have disjoint counties
        county_part |= dict.fromkeys(counties, part.name)
    assert set(blocks.str.slice(0, 5).unique().to_list()) >= county_part.keys()
    counties = np.array([int(c[2:]) for c in blocks.str.slice(0, 5).unique().to_list()])
    assert ((counties % 2 == 1) & (counties <= 999)).all()


def test_geography_row_groups_are_the_pieces_blocks(written: Path) -> None:
    plan = plan_nation(PERSONS, STATES, PIECE)
    geography = pq.ParquetFile(written / "geography.parquet")
    assert geography.metadata.num_row_groups == len(plan)
    for i, piece in enumerate(plan):
        blocks = pl.from_arrow(geography.read_row_group(i))["geocode"]
        assert (blocks.str.slice(0, 2) == piece.state_code).all()
        county = blocks.str.slice(2, 3).cast(pl.Int64)
        low, high = 2 * piece.county_base + 1, 2 * (piece.county_base + piece.max_counties) - 1
        assert county.min() >= low and county.max() <= high
        persons = pl.read_parquet(written / "microdata" / f"state={piece.state_code}" / piece.part_name)
        assert persons["geocode"].is_in(blocks.implode()).all()


def test_units_parts_belong_to_their_pieces(written: Path) -> None:
    for persons, units in zip(parts(written / "microdata"), parts(written / "units"), strict=True):
        assert persons.relative_to(written / "microdata") == units.relative_to(written / "units")
        people = pl.read_parquet(persons)
        gq = set(people.filter(pl.col("GQTYPE_PL") != "0")["geocode"].unique().to_list())
        unit = pl.read_parquet(units)
        facilities = set(unit.filter(pl.col("RTYPE") == "4")["geocode"].unique().to_list())
        assert facilities == gq  # a facility exactly where group-quarters persons live, within the same piece


def test_deterministic_for_a_seed(written: Path, tmp_path: Path) -> None:
    again = write_synthetic_nation(PERSONS, SEED, tmp_path / "again", states=STATES, piece_persons=PIECE)
    assert again.geography.read_bytes() == (written / "geography.parquet").read_bytes()
    for folder in ("microdata", "units"):
        assert read_all(tmp_path / "again" / folder).equals(read_all(written / folder))
    other = write_synthetic_nation(PERSONS, SEED + 1, tmp_path / "other", states=STATES, piece_persons=PIECE)
    assert not read_all(other.microdata).equals(read_all(written / "microdata"))


def test_rewrite_leaves_no_stale_parts(tmp_path: Path) -> None:
    write_synthetic_nation(30_000, 1, tmp_path, states=3, piece_persons=4_000)
    (tmp_path / "microdata" / "notes.txt").write_text("kept")
    files = write_synthetic_nation(20_000, 1, tmp_path, states=2, piece_persons=50_000)
    assert [p.relative_to(files.microdata).as_posix() for p in parts(files.microdata)] == [
        "state=01/part-0000.parquet", "state=02/part-0000.parquet"]
    assert sorted(q.name for q in files.units.iterdir()) == ["state=01", "state=02"]
    assert (tmp_path / "microdata" / "notes.txt").read_text() == "kept"
    assert read_all(files.microdata).height == 20_000


def test_memory_bound_piece_by_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2M-person nation with a 60k piece limit: never more than 60k persons drawn at once, and each piece is
    written before the next one is drawn."""
    persons, limit = 2_000_000, 60_000
    drawn: list[tuple[int, int]] = []  # (persons drawn, part files already written)
    real = nation.draw_persons

    def recording(rng: np.random.Generator, n: int, **kwargs: int) -> object:
        drawn.append((n, len(parts(tmp_path / "microdata"))))
        return real(rng, n, **kwargs)

    monkeypatch.setattr(nation, "draw_persons", recording)
    seen: list[Piece] = []
    write_synthetic_nation(persons, 2, tmp_path, piece_persons=limit, on_piece=seen.append)
    expected_parts = sum(-(-n // limit) for _, n in apportion(persons))
    assert len(parts(tmp_path / "microdata")) == len(parts(tmp_path / "units")) == expected_parts == len(seen)
    assert max(n for n, _ in drawn) <= limit and sum(n for n, _ in drawn) == persons
    assert [written for _, written in drawn] == list(range(expected_parts))
    assert len({p.state for p in seen}) == N_STATES


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"persons": 999}, "persons must be between"),
    ({"states": 52}, "states must be between"),
    ({"states": 0}, "states must be between"),
    ({"seed": -1}, "seed must be"),
    ({"piece_persons": 0}, "piece_persons must be between"),
    ({"persons": 100_000_000, "piece_persons": 10_000}, "pieces"),  # California would need over 500 pieces
])
def test_out_of_range_arguments_are_refused(kwargs: dict[str, int], message: str, tmp_path: Path) -> None:
    args = {"persons": 10_000, "seed": 0, "states": 3, "piece_persons": 5_000} | kwargs
    with pytest.raises(ValueError, match=message):
        write_synthetic_nation(out_dir=tmp_path / "x", **args)
    assert not (tmp_path / "x").exists()


def test_cli_nation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--persons", "20000", "--states", "2", "--piece-persons", "9000", "--seed", "3",
                 "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / n) for n in ("microdata", "geography.parquet", "units")]
    assert [p.relative_to(tmp_path / "microdata").as_posix() for p in parts(tmp_path / "microdata")] == [
        "state=01/part-0000.parquet", "state=01/part-0001.parquet", "state=02/part-0000.parquet"]
    assert main(["synth", "--persons", "20000", "--piece-persons", "9000", "--out", str(tmp_path / "s")]) == 1
    assert "--piece-persons needs --states" in capsys.readouterr().err and not (tmp_path / "s").exists()
