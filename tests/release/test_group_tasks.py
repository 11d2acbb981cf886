"""Measurement by groups (``release.measurement_plan``, ``release.group_tasks``): which level the partitions name, the
plan's groups and noise streams, a partitioned release's invariants and measurements, and a row outside its
partition refused by category."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from censusdp.pipeline.cli import main
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source, system_random_source
from censusdp.pipeline.io.histograms import all_level_histograms, lowest_histograms
from censusdp.pipeline.io.microdata import read_input_files, validated_rows
from censusdp.pipeline.release import stages
from censusdp.pipeline.release.group_tasks import share_chunks
from censusdp.pipeline.release.measurement_plan import (
    group_shares,
    level_plans_of,
    partition_level,
    plan_measurement,
    run_measurement,
)
from tests.helpers.datasets import write_hive_dataset


def partitioned(tiny_release: Path, width: int = 1) -> Path:
    folder = tiny_release.parent / f"partitioned-{width}"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "part",
                       pl.col("geocode").str.slice(0, width))
    return folder


def test_the_partition_level_is_the_level_the_labels_name(tiny_release: Path) -> None:
    single = load_config(tiny_release)
    files = read_input_files(single)
    tree = validated_rows(files)[0]
    assert partition_level(tree.levels, files) == 0
    by_region = read_input_files(load_config(tiny_release, {"input.path": str(partitioned(tiny_release))}))
    assert partition_level(tree.levels, by_region) == 1
    by_district = read_input_files(load_config(tiny_release, {"input.path": str(partitioned(tiny_release, 2))}))
    assert partition_level(tree.levels, by_district) == 2


def test_the_plan_has_a_group_per_partition_node_and_a_stream_per_chunk(tiny_release: Path) -> None:
    config = load_config(tiny_release, {"input.path": str(partitioned(tiny_release)), "postprocess.chunk_cells": 60,
                                         "postprocess.runner": "local"})
    files = read_input_files(config)
    tree = validated_rows(files)[0]
    plans = level_plans_of(config, stages.start_release(config, tiny_release.parent / "runs",
                                                        seeded_random_source(1)).persons.allocations)
    seeded = plan_measurement(tree, files, plans, seeded_random_source(1), "persons", 60, None)
    again = plan_measurement(tree, files, plans, seeded_random_source(1), "persons", 60, None)
    assert seeded.partition_level == 1 and len(seeded.groups) == tree.n_nodes(1)
    assert [g.first[0] for g in seeded.groups] == list(range(tree.n_nodes(1)))
    assert all(len(g.parts) == 2 for g in seeded.groups)  # two part files per region
    keys = [k for g in seeded.groups for level in g.keys for k in level] + [k for level in seeded.upper.keys
                                                                            for k in level]
    assert len(set(keys)) == len(keys) and all(isinstance(k, bytes) for k in keys)  # one stream per chunk
    assert [g.keys for g in again.groups] == [g.keys for g in seeded.groups]  # the same seed, the same streams
    # every level's chunks cover its nodes once, never splitting a parent's children inside a group
    for group in seeded.groups:
        for level, chunks in enumerate(group.chunks):
            assert chunks[0][0] == 0 and chunks[-1][1] == group.subtree.n_nodes(level)
            assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:], strict=False))
    production = plan_measurement(tree, files, plans, system_random_source(), "persons", 60, None)
    assert all(k is None for g in production.groups for level in g.keys for k in level)  # each worker's own OS keys


def test_a_partitioned_release_measures_every_level_of_the_true_histograms(tiny_release: Path) -> None:
    config = load_config(tiny_release, {"input.path": str(partitioned(tiny_release)), "postprocess.chunk_cells": 60,
                                         "postprocess.runner": "local"})
    release = stages.start_release(config, tiny_release.parent / "runs", seeded_random_source(2))
    run = release.persons
    stages.read_files(release, run)
    stages.charge(release)
    stages.validate_inputs(release, run)
    _, units, cells = validated_rows(run.input_files)
    truth = all_level_histograms(run.tree, lowest_histograms(units, cells, run.tree.n_nodes(3), config.schema.n_cells))
    stages.measure(release, run)
    for level, spec in enumerate(config.levels):
        plan = run.chunk_plan[level]
        assert [(a, b) for a, b, _ in plan][0][0] == 0 and plan[-1][1] == run.tree.n_nodes(level)
        table = pl.read_parquet(run.work_dir / "measurements" / f"{spec.name}.parquet")
        assert table["geoid"].cast(pl.Utf8).unique(maintain_order=True).to_list() == run.tree.geoids[level].tolist()
        for invariant in run.invariants.get(level, []):  # exact, from the group that holds the node
            assert np.array_equal(invariant.values, (truth[level] @ invariant.matrix.T.toarray()).astype(np.int64))
    # the partition level is written in chunks of whole families (its parents' children together)
    boundaries = run.tree.child_offsets(1)
    assert all(start in boundaries and stop in boundaries for start, stop, _ in run.chunk_plan[1])


def test_a_row_outside_its_partition_is_refused_by_category(tiny_release: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = partitioned(tiny_release)
    part = sorted(folder.glob("part=1/*.parquet"))[0]
    frame = pl.read_parquet(part)
    moved = frame.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("2") + pl.col("geocode")
                                                                          .str.slice(1)).otherwise(pl.col("geocode"))
                               .alias("geocode"))
    moved.write_parquet(part)
    code = main(["-q", "release", str(tiny_release), "--no-prefect", "--insecure-seed", "4", "--microdata",
                 str(folder)])
    err = capsys.readouterr().err
    assert code != 0 and "geography" in err and "charged" in err
    assert str(part) not in err and "row 4" not in err  # the release names the category only


@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=40), shares=st.integers(1, 6))
def test_shares_split_a_level_s_chunks_into_contiguous_runs_of_about_equal_nodes(sizes: list[int],
                                                                                  shares: int) -> None:
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    chunks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    owned = [share_chunks(chunks, share, shares) for share in range(shares)]
    assert sorted(i for mine in owned for i in mine) == list(range(len(chunks)))  # each chunk once
    for mine in owned:
        assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True  # contiguous
        nodes = sum(sizes[i] for i in mine)
        assert nodes <= bounds[-1] / shares + max(sizes)  # no share holds much more than its part


def test_group_shares_split_only_large_groups_and_never_beyond_the_workers_or_chunks() -> None:
    assert group_shares(1000, 1000, 16, 1) == 1  # one worker: one task a group
    assert group_shares(1000, 1000, 16, 2) == 2  # the whole tree on two workers: halves
    assert group_shares(1000, 1000, 1, 2) == 1  # one lowest chunk: nothing to share
    assert group_shares(410, 1000, 16, 2) == 2 and group_shares(220, 1000, 16, 2) == 1  # a large state, a small one
    assert group_shares(1000, 1000, 64, 8) == 8


def test_a_group_measured_in_shares_writes_the_measurements_of_one_task(tiny_release: Path) -> None:
    """The same plan shared among tasks (as on two workers) lays out exactly the same measurements and invariants,
    every chunk drawn from its own stream whichever task draws it."""
    config = load_config(tiny_release, {"postprocess.chunk_cells": 60, "postprocess.runner": "local"})
    release = stages.start_release(config, tiny_release.parent / "runs", seeded_random_source(1))
    plans = level_plans_of(config, release.persons.allocations)
    files = read_input_files(config)
    tree = validated_rows(files)[0]
    laid_out = {}
    for workers in (1, 3):
        plan = plan_measurement(tree, files, plans, seeded_random_source(1), "persons", 60, None, workers=workers)
        assert len(plan.groups) == (1 if workers == 1 else 3) and [g.index for g in plan.groups] == list(
            range(len(plan.groups)))
        folder = tiny_release.parent / f"measured-{workers}"
        measured = run_measurement(plan, plans, tree, folder, None, False, config.schema.n_cells, 60)
        laid_out[workers] = (measured, {f.name: pl.read_parquet(f) for f in sorted(folder.glob("*.parquet"))})
    (one, one_files), (shared, shared_files) = laid_out[1], laid_out[3]
    assert [[(a, b) for a, b, _ in one.chunk_plan[level]] for level in range(tree.depth)] == [
        [(a, b) for a, b, _ in shared.chunk_plan[level]] for level in range(tree.depth)]
    for level in range(tree.depth):
        for mine, theirs in zip(one.invariants[level], shared.invariants[level], strict=True):
            assert np.array_equal(mine.values, theirs.values)
    assert one_files.keys() == shared_files.keys() and all(one_files[n].equals(shared_files[n]) for n in one_files)


class _BootingRunner:
    """A Dask runner whose cluster never finishes starting, with the driver helping: every task runs here (any use
    of its client fails the test)."""

    name, workers, window = "dask-local:3", 3, 4

    def driver_takes_next(self) -> bool:
        return True

    @property
    def client(self) -> None:
        raise AssertionError("a task went to the cluster while the driver was to run it")


def test_a_helping_driver_measures_the_workers_tasks_as_they_would(tiny_release: Path) -> None:
    """While a local cluster starts, the driver runs the workers' group tasks itself (``dask_measure``): their parts
    are adopted and the measurements are those the driver's own writers lay out."""
    config = load_config(tiny_release, {"postprocess.chunk_cells": 60, "postprocess.runner": "local"})
    release = stages.start_release(config, tiny_release.parent / "runs", seeded_random_source(1))
    plans = level_plans_of(config, release.persons.allocations)
    files = read_input_files(config)
    tree = validated_rows(files)[0]
    laid_out = []
    for runner, parts in ((None, None), (_BootingRunner(), tiny_release.parent / "helped-parts")):
        plan = plan_measurement(tree, files, plans, seeded_random_source(1), "persons", 60, parts,
                                workers=1 if runner is None else runner.workers)
        folder = tiny_release.parent / f"helped-{runner is not None}"
        measured = run_measurement(plan, plans, tree, folder, runner, runner is not None, config.schema.n_cells, 60)
        levels = {f.relative_to(folder).parts[0].removesuffix(".parquet") for f in folder.rglob("*.parquet")}
        laid_out.append((measured, {name: pl.concat([pl.read_parquet(f) for f in sorted(
            [*folder.glob(f"{name}.parquet"), *folder.glob(f"{name}/*.parquet")])]) for name in levels}))
    (alone, alone_files), (helped, helped_files) = laid_out
    assert len({p[2].file for level in helped.chunk_plan.values() for p in level}) > len(alone_files)  # parts
    assert not (tiny_release.parent / "helped-parts").exists()  # collected and removed
    for level in range(tree.depth):
        assert [(a, b) for a, b, _ in alone.chunk_plan[level]] == [(a, b) for a, b, _ in helped.chunk_plan[level]]
        for mine, theirs in zip(alone.invariants[level], helped.invariants[level], strict=True):
            assert np.array_equal(mine.values, theirs.values)
    assert alone_files.keys() == helped_files.keys()
    for name, frame in alone_files.items():
        assert frame.equals(helped_files[name]), name
