"""The report's expected errors depend on the design only, so they start on the runner with the lowest level's
reconciliation (on Dask, a worker computes them while the blocks are reconciled) and ``tabulate`` only collects
them; a design where they are not defined gives a warning, not a failure."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.release import expected_errors as expected_module
from censusdp.pipeline.release import stages
from censusdp.pipeline.release.expected_errors import compute_expected_errors, expected_errors, expected_errors_job
from censusdp.pipeline.release.runner import LocalRunner
from censusdp.pipeline.synth.population import write_synthetic
from tests.helpers.configs import preset_config
from tests.helpers.releases import keeping_invariants


class RecordingRunner(LocalRunner):
    """The local runner, recording what it was handed and in which order."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def map(self, fn: Any, tasks: Any) -> Any:
        self.calls.append(("map", fn.__name__))
        return super().map(fn, tasks)

    def submit(self, fn: Any, task: Any) -> Any:
        self.calls.append(("submit", fn.__name__))
        return super().submit(fn, task)


def pl94_config(tmp_path: Path) -> Path:
    files = write_synthetic(1500, 4, tmp_path / "data")
    config = tmp_path / "pl94.toml"  # the preset's text (not `censusdp init`: the CLI would set up the log's handler)
    return preset_config(config, "pl94", files=files)


def test_started_with_the_lowest_level_and_collected_by_tabulate(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(stages, "make_runner", lambda spec, chunks=1, **_: RecordingRunner(calls))
    held = []
    real_tabulate = stages.tabulate

    def tabulate_spy(run: stages.Release) -> None:
        held.append(run)
        real_tabulate(run)

    def not_here(run: stages.UniverseRun) -> dict[str, Any]:
        raise AssertionError("tabulate computed the expected errors again")

    kept: dict[str, dict[int, Any]] = {}  # the invariants, dropped after each lowest level (the job has them)
    monkeypatch.setattr(stages, "expected_errors", not_here)
    config = load_config(pl94_config(tmp_path))
    stages.run_release(config, tmp_path / "runs", seeded_random_source(3),
                       stages=stages.replaced(stages.STAGES, tabulate=tabulate_spy, reconcile=keeping_invariants(kept)))
    (release,) = held
    run = release.persons
    assert kept["persons"] and not run.invariants
    run.invariants = kept["persons"]
    reconciled = [call for call in calls if call == ("map", "reconcile_chunk")]
    started = calls.index(("submit", "compute_expected_errors"))
    # once, before the persons' lowest level's tasks, after every other level of the persons; then the units' levels
    # (reconciled after the persons, within the bounds the published persons imply)
    assert calls.count(("submit", "compute_expected_errors")) == 1 and len(reconciled) == 2 * len(config.levels)
    after = calls[started + 2:].count(("map", "reconcile_chunk"))
    assert calls[started + 1] == ("map", "reconcile_chunk") and after == len(config.levels)
    assert release.expected_errors == expected_errors(run) and release.expected_errors["levels"]["block"]["P1_001N"] > 0


def test_a_design_without_them_warns_instead_of_failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing measured at the blocks: the GLS does not determine their cells, so no expected error is defined."""
    held = []
    real_tabulate = stages.tabulate
    spy = stages.replaced(stages.STAGES, tabulate=lambda run: (held.append(run), real_tabulate(run)))
    stages.run_release(load_config(pl94_config(tmp_path)), tmp_path / "runs", seeded_random_source(3), stages=spy)
    run = held[0].persons
    run.warnings.clear()
    job = expected_errors_job(run)
    assert job is not None
    unmeasured = dataclasses.replace(job, queries=(*job.queries[:-1], ()))
    errors, problem = compute_expected_errors(unmeasured)
    assert errors == {} and problem
    assert expected_module.record_expected_errors(run, (errors, problem)) == {}
    assert run.warnings == [f"the report's expected errors were not computed: {problem}"]
