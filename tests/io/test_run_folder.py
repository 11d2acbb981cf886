"""The one loader of a run folder (``pipeline.io.run_folder``) and the measurement files' layout, read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.measurements import read_chunk_plan
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release import stages
from tests.helpers.releases import release_dir, release_with


def test_the_layout_read_back_is_the_one_the_release_wrote(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With chunks of 6 cells (one node each) every level spans several chunks: the plan read from a level's
    file equals the plan the release held, and the tree read back equals the release's."""
    tiny_release.write_text(tiny_release.read_text() + "\n[postprocess]\nchunk_cells = 6\nrunner = \"local\"\n")
    held: list[stages.Release] = []
    real_publish = stages.publish

    def publish(run: stages.Release, runner: object = None) -> Path:
        held.append(run)
        return real_publish(run, runner)

    run_dir = release_with(tiny_release, publish=publish)
    run = held[0].persons
    assert run.tree is not None
    loaded = load_run(run_dir)
    schema = run.config.schema
    for level, spec in enumerate(run.config.levels):
        allocations = run.level_allocations(level)
        first_cells = schema.query_cells(schema.parse_query(allocations[0].query))
        plan = read_chunk_plan(run_dir / "measurements", spec.name, len(allocations), first_cells)
        assert plan == run.chunk_plan[level]
        np.testing.assert_array_equal(loaded.tree.geoids[level], run.tree.geoids[level])
    assert len(run.chunk_plan[run.tree.depth - 1]) > 2


def test_a_run_folder_is_overridden_like_a_configuration(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    run_dir = release_dir(capsys, tiny_release)
    assert load_run(run_dir).config.solver == "auto"
    assert load_run(run_dir, {"postprocess.solver": "cvxpy"}).config.solver == "cvxpy"
    assert load_run(run_dir, {"postprocess.solver": None}).config.solver == "auto"  # None: the default again
    with pytest.raises(CensusDPError, match="manifest.json: not a censusdp run folder"):
        load_run(tmp_path)
