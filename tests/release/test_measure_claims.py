"""A measurement task draws at most once per run: Dask re-runs a task whose worker (or whose result's worker) was
lost, and a second attempt must neither draw fresh noise on the same counts nor write it beside the run; a
straggler after the run ended creates nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.release import group_tasks, stages
from censusdp.pipeline.release.draws import MeasurementRepeatedError, check_claimed
from censusdp.pipeline.release.group_tasks import measure_group, measure_upper
from censusdp.pipeline.release.measurement_plan import PARTS_DIR, MeasurementPlan, level_plans_of, plan_measurement
from tests.helpers.datasets import write_hive_dataset


def worker_plan(tiny_release: Path) -> tuple[stages.UniverseRun, MeasurementPlan]:
    """A charged, validated run of the tiny release partitioned by region, planned as for Dask workers (each
    group writes its parts into the run's parts folder)."""
    folder = tiny_release.parent / "partitioned"
    write_hive_dataset(pl.read_parquet(tiny_release.parent / "microdata.parquet"), folder, "part",
                       pl.col("geocode").str.slice(0, 1))
    config = load_config(tiny_release, {"input.path": str(folder), "postprocess.chunk_cells": 60,
                                         "postprocess.runner": "local"})
    release = stages.start_release(config, tiny_release.parent / "runs", seeded_random_source(4))
    run = release.persons
    stages.read_files(release, run)
    stages.charge(release)
    stages.validate_inputs(release, run)
    plan = plan_measurement(run.tree, run.input_files, level_plans_of(config, run.allocations), release.rng, "persons",
                            config.chunk_cells, run.work_dir / PARTS_DIR)
    assert plan.upper is not None and len(plan.groups) >= 2
    return run, plan


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_attempt_of_a_group_draws_nothing_and_leaves_nothing(tiny_release: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run, plan = worker_plan(tiny_release)
    draws = []
    real = group_tasks.measure_level
    monkeypatch.setattr(group_tasks, "measure_level", lambda *a: draws.append(1) or real(*a))
    task = plan.groups[0]
    measured, total = measure_group(task)
    first_draws = len(draws)
    assert first_draws > 0 and all(part is not None for part in measured.parts[1:])
    parts_dir = run.work_dir / PARTS_DIR
    claim = parts_dir / "000000.claim"
    assert claim.stat().st_mode & 0o777 == 0o600 and len(claim.read_text()) == 16  # its own, a fresh attempt id
    before = files_under(run.work_dir)
    with pytest.raises(MeasurementRepeatedError, match="ran twice"):
        measure_group(task)  # the same group again: Dask's re-run after a lost worker
    assert len(draws) == first_draws  # nothing drawn
    assert files_under(run.work_dir) == before  # nothing written, nothing changed
    # only the claiming attempt's parts are adopted; a part under another attempt's name is refused
    assert check_claimed(str(parts_dir), 0, Path(measured.parts[1])) == Path(measured.parts[1])
    forged = parts_dir / measured.parts[1].rsplit("/", 1)[-1].replace("-", "-f", 1)
    for where, index, part in ((str(parts_dir), 0, forged), (str(parts_dir), 1, Path(measured.parts[1])),
                               (None, 0, Path(measured.parts[1]))):  # another attempt, an unclaimed group, no folder
        with pytest.raises(CensusDPError, match="its claim does not name"):
            check_claimed(where, index, part)
    # the upper levels' task claims its draw too
    measure_upper(plan.upper, [total] + [np.zeros_like(total)] * (len(plan.groups) - 1))
    upper_draws = len(draws)
    with pytest.raises(MeasurementRepeatedError):
        measure_upper(plan.upper, [total])
    assert len(draws) == upper_draws


def test_a_straggler_after_the_run_ended_creates_nothing(tiny_release: Path) -> None:
    run, plan = worker_plan(tiny_release)
    final = run.work_dir.with_name("published")
    run.work_dir.rename(final)  # the run published (renamed into place) while a task of it was still queued
    for task in (plan.groups[1], plan.upper):
        with pytest.raises(MeasurementRepeatedError, match="after its run ended"):
            measure_group(task) if task is plan.groups[1] else measure_upper(task, [])
    assert not run.work_dir.exists()  # the partial folder was not recreated
    assert not (final / PARTS_DIR).exists() or not any((final / PARTS_DIR).iterdir())


def test_the_measure_stage_runs_once_per_run(tiny_release: Path) -> None:
    """Whatever runs the stage (a retried flow task, a caller's mistake), a run's measurements are drawn once."""
    release = stages.start_release(load_config(tiny_release), tiny_release.parent / "runs", seeded_random_source(6))
    run = release.persons
    stages.read_files(release, run)
    stages.charge(release)
    stages.validate_inputs(release, run)
    stages.measure(release, run)
    measured = files_under(run.work_dir / "measurements")
    with pytest.raises(MeasurementRepeatedError, match="ran twice"):
        stages.measure(release, run)
    assert files_under(run.work_dir / "measurements") == measured
