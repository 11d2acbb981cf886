"""The report's expected errors depend on the design only, so they start on the runner with the persons' first
level's reconciliation (on Dask, a worker computes them beside the upper levels, each one chunk on one worker), the
lowest level collects them and ``tabulate`` does not compute them again; a design where they are not defined gives a
warning, not a failure."""

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


def test_started_with_the_first_level_and_not_computed_again(tmp_path: Path,
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
    # once, before the persons' first level's tasks; then every level of the persons, and the units' levels
    # (reconciled after the persons, within the bounds the published persons imply)
    assert calls.count(("submit", "compute_expected_errors")) == 1 and len(reconciled) == 2 * len(config.levels)
    assert ("map", "reconcile_chunk") not in calls[:started] and calls[started + 1] == ("map", "reconcile_chunk")
    assert release.pending_expected_errors is None  # collected with the persons' lowest level
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
