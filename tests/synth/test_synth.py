"""Tests for the synthetic census generator (pipeline.synth.population)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.synth.geo import sample_ragged
from censusdp.pipeline.synth.people import COMBINATIONS, NH_MULTI_PROPENSITY, NH_SINGLE, race_profile
from censusdp.pipeline.synth.population import (
    CENRACE_VALUES,
    MICRODATA_COLUMNS,
    synthesize,
    synthesize_state,
    write_synthetic,
)

REALISM_PERSONS = 200_000

DOMAINS = {
    "GQTYPE_PL": {str(i) for i in range(8)},
    "VOTING_AGE": {"1", "2"},
    "CENHISP": {"1", "2"},
    "CENRACE": set(CENRACE_VALUES),
}


@pytest.fixture(scope="module", params=[11, 12])
def synthetic(request: pytest.FixtureRequest) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A mid-sized synthetic state, for two seeds."""
    return synthesize(REALISM_PERSONS, request.param)


def block_counts(microdata: pl.DataFrame, geography: pl.DataFrame) -> np.ndarray:
    """Persons per block, for every block in the geography (zeros included)."""
    counts = microdata.group_by("geocode").len()
    return geography.join(counts, on="geocode", how="left").fill_null(0)["len"].to_numpy()


def realism_stats(microdata: pl.DataFrame, geography: pl.DataFrame) -> dict[str, float]:
    """Statistics the realism thresholds are stated on."""
    n = microdata.height
    counts = block_counts(microdata, geography)
    top = np.sort(counts)[::-1][: max(1, counts.shape[0] // 100)]
    gq = microdata.filter(pl.col("GQTYPE_PL") != "0")
    households = microdata.filter(pl.col("GQTYPE_PL") == "0")

    # Chi-square of tract x {White alone, Black alone, other}, as statistic / degrees of freedom.
    major = (
        pl.when(pl.col("CENRACE") == "01")
        .then(pl.lit("W"))
        .when(pl.col("CENRACE") == "02")
        .then(pl.lit("B"))
        .otherwise(pl.lit("O"))
    )
    table = (
        microdata.select(pl.col("geocode").str.slice(0, 11).alias("tract"), major.alias("race"))
        .group_by("tract", "race")
        .len()
        .pivot(on="race", index="tract", values="len")
        .fill_null(0)
        .drop("tract")
        .to_numpy()
        .astype(float)
    )
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    dof = (table.shape[0] - 1) * (table.shape[1] - 1)

    return {
        "blocks_per_person": geography.height / n,
        "empty_share": float(np.mean(counts == 0)),
        "top1_share": float(top.sum() / n),
        "max_over_median_nonempty": float(counts.max() / np.median(counts[counts > 0])),
        "gq_share": gq.height / n,
        "gq_block_share": gq["geocode"].n_unique() / geography.height,
        "hh_under18": float((households["VOTING_AGE"] == "1").mean()),
        "race_chi2_per_dof": chi2 / max(dof, 1),
    }


def check_realism(stats: dict[str, float]) -> list[str]:
    """Names of the realism thresholds that ``stats`` fails (empty when all pass)."""
    rules = {
        "blocks_per_person": lambda v: v >= 0.025,  # >= 25,000 blocks per million persons
        "empty_share": lambda v: 0.15 <= v <= 0.45,
        "top1_share": lambda v: v > 0.10,
        "max_over_median_nonempty": lambda v: v > 20,
        "gq_share": lambda v: 0.015 <= v <= 0.05,
        "gq_block_share": lambda v: 0 < v < 0.02,
        "hh_under18": lambda v: 0.20 <= v <= 0.27,
        "race_chi2_per_dof": lambda v: v > 10,  # independence would give about 1
    }
    return [name for name, ok in rules.items() if not ok(stats[name])]


def uniform_synthesize(persons: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A naive generator: uniform blocks and attributes; the realism checks must reject it."""
    rng = np.random.default_rng(seed)  # test-only: synthetic data, not privacy noise
    n_blocks = persons // 40
    geocodes = pl.Series("geocode", [f"01001{t:06d}{1000 + b:04d}" for t in range(10) for b in range(n_blocks // 10)])
    micro = pl.DataFrame(
        {
            "geocode": geocodes.gather(pl.Series(rng.integers(0, geocodes.len(), persons))),
            "GQTYPE_PL": pl.Series([str(i) for i in range(8)]).gather(pl.Series(rng.integers(0, 8, persons))),
            "VOTING_AGE": pl.Series(["1", "2"]).gather(pl.Series(rng.integers(0, 2, persons))),
            "CENHISP": pl.Series(["1", "2"]).gather(pl.Series(rng.integers(0, 2, persons))),
            "CENRACE": pl.Series(list(CENRACE_VALUES)).gather(pl.Series(rng.integers(0, 63, persons))),
        }
    )
    return micro, geocodes.to_frame()


# --- shape, determinism, domains -------------------------------------------------------------------


@pytest.mark.parametrize("persons", [1_000, 1_234, 54_321])
def test_exact_row_count(persons: int) -> None:
    microdata, geography = synthesize(persons, 3)
    assert microdata.height == persons
    assert geography.height >= 1


def test_deterministic_by_seed() -> None:
    a, ga = synthesize(20_000, 5)
    b, gb = synthesize(20_000, 5)
    c, _ = synthesize(20_000, 6)
    assert a.equals(b) and ga.equals(gb)
    assert not a.equals(c)


def test_columns_and_dtypes(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, geography = synthetic
    assert microdata.columns == list(MICRODATA_COLUMNS)
    assert all(dtype == pl.Utf8 for dtype in microdata.dtypes)
    assert geography.columns == ["geocode"] and geography.dtypes == [pl.Utf8]


def test_geography_unique_sorted_and_well_formed(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, geography = synthetic
    geo = geography["geocode"]
    assert geo.is_unique().all()
    assert geo.is_sorted()
    assert geo.str.contains(r"^01\d{13}$").all()
    # The block's first digit is its block group, 1..4 of them per tract.
    assert geo.str.slice(11, 1).is_in(["1", "2", "3", "4"]).all()
    assert microdata["geocode"].is_in(geo.implode()).all()
    assert microdata["geocode"].is_sorted()


def test_values_inside_domains(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, _ = synthetic
    for column, domain in DOMAINS.items():
        assert set(microdata[column].unique().to_list()) <= domain, column
    assert microdata["geocode"].str.len_chars().eq(15).all()


def test_write_synthetic_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "out"
    files = write_synthetic(5_000, 9, out)
    assert (files.microdata, files.geography, files.units) == (out / "microdata.parquet", out / "geography.parquet",
                                                               out / "units.parquet")
    microdata, geography = synthesize(5_000, 9)
    assert pl.read_parquet(files.microdata).equals(microdata)
    assert pl.read_parquet(files.geography).equals(geography)
    assert pl.read_parquet(files.units).equals(synthesize_state(5_000, 9).units)


@pytest.mark.parametrize(
    ("persons", "seed"), [(999, 0), (10_000_001, 0), (5_000, -1), (5_000.0, 0), (True, 0), (5_000, 1.5)]
)
def test_invalid_arguments(persons: int, seed: int) -> None:
    with pytest.raises(ValueError) as info:
        synthesize(persons, seed)
    assert "\n" not in str(info.value)


# --- realism ---------------------------------------------------------------------------------------


def test_realism_thresholds(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    stats = realism_stats(*synthetic)
    assert check_realism(stats) == [], stats


def test_uniform_generator_fails_realism() -> None:
    failed = set(check_realism(realism_stats(*uniform_synthesize(REALISM_PERSONS, 1))))
    assert {"empty_share", "top1_share", "gq_share", "gq_block_share", "race_chi2_per_dof"} <= failed


def test_group_quarters_plausible(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, _ = synthetic
    gq = microdata.filter(pl.col("GQTYPE_PL") != "0")
    # No minors in adult correctional facilities (1) or nursing facilities (3).
    assert gq.filter(pl.col("GQTYPE_PL").is_in(["1", "3"]) & (pl.col("VOTING_AGE") == "1")).height == 0
    # Each GQ block is (mostly) one facility type.
    dominant = (
        gq.group_by("geocode", "GQTYPE_PL")
        .len()
        .group_by("geocode")
        .agg((pl.col("len").max() / pl.col("len").sum()).alias("share"))
    )
    assert dominant["share"].min() >= 0.9
    # Juvenile facilities, when present, hold mostly minors.
    juvenile = gq.filter(pl.col("GQTYPE_PL") == "2")
    if juvenile.height >= 20:
        assert (juvenile["VOTING_AGE"] == "1").mean() > 0.5


def test_hierarchy_sizes(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, geography = synthetic
    geo = geography["geocode"]
    assert geo.str.slice(2, 3).n_unique() >= 2  # several counties
    tract_pop = microdata.group_by(pl.col("geocode").str.slice(0, 11)).len()["len"].to_numpy()
    assert 2_000 <= np.median(tract_pop) <= 6_000
    assert tract_pop.min() >= 500 and tract_pop.max() <= 15_000
    bg_per_tract = (
        geography.group_by(geo.str.slice(0, 11).alias("tract"))
        .agg(pl.col("geocode").str.slice(11, 1).n_unique().alias("n"))["n"]
        .to_numpy()
    )
    assert bg_per_tract.min() >= 1 and bg_per_tract.max() <= 4 and bg_per_tract.mean() > 1.5


def test_race_long_tail(synthetic: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    microdata, _ = synthetic
    shares = microdata["CENRACE"].value_counts(normalize=True)
    single = shares.filter(pl.col("CENRACE") <= "06")["proportion"].sum()
    assert 0.8 < single < 0.97  # dominated by single races ...
    assert shares.height >= 25  # ... with a long tail of combinations


def test_million_persons_have_enough_blocks() -> None:
    _, geography = synthesize(1_000_000, 2)
    assert geography.height >= 25_000


# --- internals -------------------------------------------------------------------------------------


def test_sample_ragged_respects_rows_and_zero_weights() -> None:
    rng = np.random.default_rng(0)  # test-only: synthetic data, not privacy noise
    weights = np.array([0.0, 1.0, 3.0, 0.0, 0.0, 2.0, 0.0, 5.0, 0.0])
    starts = np.array([0, 4, 6])
    rows = np.repeat(np.arange(3), 20_000)
    picked = sample_ragged(rng, weights, starts, rows)
    assert (weights[picked] > 0).all()
    row_of_pick = np.searchsorted(starts, picked, side="right") - 1
    assert (row_of_pick == rows).all()
    first = picked[:20_000]
    assert abs(np.mean(first == 2) - 0.75) < 0.02


def test_race_profile_order_and_total() -> None:
    assert COMBINATIONS.shape == (57, 6)
    assert COMBINATIONS[0].tolist() == [1, 1, 0, 0, 0, 0]  # 07: White and Black
    assert COMBINATIONS[14].tolist() == [0, 0, 0, 0, 1, 1]  # 21: NHPI and Some other race
    assert COMBINATIONS[15].tolist() == [1, 1, 1, 0, 0, 0]  # 22: White, Black and AIAN
    assert COMBINATIONS[56].tolist() == [1] * 6  # 63: all six
    profile = race_profile(NH_SINGLE, NH_MULTI_PROPENSITY)
    assert profile.shape == (63,) and np.isclose(profile.sum(), 1.0) and (profile > 0).all()
