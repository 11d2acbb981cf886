"""Under a test seed, the same rows in two input layouts (one file; partition folders under the same path) are one
dataset (the same fingerprint) with the same configuration, so the seeded stream is the same; a chunk's stream
must still never land on other counts in the other layout, or the difference of the two releases' noisy values
would give exact counts."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.histograms import all_level_histograms, lowest_histograms
from censusdp.pipeline.io.measurements import read_level_table
from censusdp.pipeline.io.microdata import validated_rows
from censusdp.pipeline.release import stages
from censusdp.pipeline.release.draws import chunk_label
from censusdp.pipeline.release.measurement_plan import partition_level
from tests.helpers.datasets import write_hive_dataset
from tests.helpers.tiny import TINY_TOML

WINDOW = 6  # noise values in a row; sigma² is at least 1,000 here: two independent windows agree with chance ~1e-12


def noise_and_truth(config_path: Path, flat: bool) -> tuple[list[int], list[int], int]:
    """Every noisy value's noise and true answer in the order they were drawn (file order), and the input's
    partition level; the tiny data written flat or partitioned by region at the same path."""
    data = config_path.parent / "microdata.parquet"
    # a region column in both layouts: the folders' values are then in the rows, and the two are one content
    frame = pl.read_parquet(config_path.parent / "flat.parquet").with_columns(
        region=pl.col("geocode").str.slice(0, 1))
    shutil.rmtree(data) if data.is_dir() else data.unlink(missing_ok=True)
    if flat:
        frame.write_parquet(data)
    else:
        write_hive_dataset(frame, data, "region")
    config = load_config(config_path)
    release = stages.start_release(config, config_path.parent / ("runs-flat" if flat else "runs-parts"),
                                   seeded_random_source(11))
    run = release.persons
    stages.read_files(release, run)
    stages.charge(release)
    stages.validate_inputs(release, run)
    assert release.dataset == "tiny" and len(release.ledger.datasets()) == 1  # one dataset: the same fingerprints
    _, units, cells = validated_rows(run.input_files)
    partitioned = partition_level(run.tree.levels, run.input_files)
    truth = all_level_histograms(run.tree, lowest_histograms(units, cells, run.tree.n_nodes(run.tree.depth - 1),
                                                             config.schema.n_cells))
    stages.measure(release, run)
    noise, answers = [], []
    for level, spec in enumerate(config.levels):
        table = read_level_table(run.work_dir / "measurements", spec.name, ["geoid", "query", "cell", "noisy_value"])
        node = {geoid: i for i, geoid in enumerate(run.tree.geoids[level].tolist())}
        by_query = {name: config.schema.marginal(config.schema.parse_query(name), truth[level])
                    for name in set(table.column("query").to_pylist())}
        for geoid, query, cell, noisy in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):
            true = int(by_query[query][node[geoid], cell])
            noise.append(noisy - true)
            answers.append(true)
    return noise, answers, partitioned


def leaking(noise_a: list[int], truth_a: list[int], noise_b: list[int], truth_b: list[int]) -> list[int]:
    """Where a run of WINDOW noise values of B repeats one of A on other true counts: there B's noisy values minus
    A's are exact differences of counts."""
    windows = {tuple(noise_a[i:i + WINDOW]): tuple(truth_a[i:i + WINDOW]) for i in range(len(noise_a) - WINDOW)}
    return [i for i in range(len(noise_b) - WINDOW)
            if windows.get(tuple(noise_b[i:i + WINDOW]), tuple(truth_b[i:i + WINDOW])) != tuple(truth_b[i:i + WINDOW])]


def test_two_layouts_of_the_same_rows_give_unrelated_noise(tiny_release: Path) -> None:
    # rho 0.004: every query's sigma² is at least 1,000, so an accidental run of WINDOW equal noise values is
    # negligible; chunks of 60 cells put several regions in one chunk of the flat layout, one in the other
    tiny_release.write_text(TINY_TOML.format(rho="0.004") + '\n[postprocess]\nchunk_cells = 60\nrunner = "local"\n')
    (tiny_release.parent / "microdata.parquet").rename(tiny_release.parent / "flat.parquet")
    noise_a, truth_a, level_a = noise_and_truth(tiny_release, flat=True)
    noise_b, truth_b, level_b = noise_and_truth(tiny_release, flat=False)
    assert (level_a, level_b) == (0, 1)  # one group, then one group per region
    assert sorted(truth_a) == sorted(truth_b)  # the same counts
    assert np.std(noise_a) > 25 and np.std(noise_b) > 25  # the spread the window's power assumes
    assert leaking(noise_a, truth_a, noise_b, truth_b) == []  # no stream lands on other counts in the other layout
    # the statistic's power: A's noise moved one value along, onto its neighbours' counts, is seen
    assert leaking(noise_a, truth_a, noise_a[1:], truth_a[:-1]) != []


def test_a_chunk_label_names_its_nodes_and_queries() -> None:
    total, detailed = (QueryAllocation("unit", q, Fraction(1), Fraction(1)) for q in ("total", "detailed"))
    labels = {chunk_label("persons", "unit", (total, detailed), 0, 2), chunk_label("persons", "unit", (total,), 0, 2),
              chunk_label("persons", "unit", (detailed, total), 0, 2), chunk_label("persons", "unit", (total,), 0, 1),
              chunk_label("units", "unit", (total,), 0, 2), chunk_label("persons", "block", (total,), 0, 2)}
    assert len(labels) == 6
