"""The bootstrap reconciles each replicate as the release did: with the only-child levels' measurements too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import censusdp.pipeline.uncertainty.bootstrap as ub
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.run_folder import load_run
from tests.helpers.releases import release_dir
from tests.helpers.tiny import single_region_release


def test_a_replicate_uses_the_chain_the_release_used(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = load_run(release_dir(capsys, single_region_release(tmp_path)))
    assert run.manifest["reconciliation"]["root"]["measurements_of"] == ["root", "region"]
    names: list[list[str]] = []
    reconcile_level = ub.reconcile_level

    def recording(measurements: list[Any], **kwargs: Any) -> Any:
        names.append([m.name for m in measurements])
        return reconcile_level(measurements, **kwargs)

    monkeypatch.setattr(ub, "reconcile_level", recording)
    truth = [run.table(level) for level in range(run.tree.depth)]
    tables = ub.replicate_tables(run, truth, seeded_random_source(3))
    region = [q.query.name for q in run.level_noise(1)]
    assert names[0] == [q.query.name for q in run.level_noise(0)] + [f"region: {n}" for n in region]
    assert names[1] == region and len(names) == run.tree.depth
    assert (tables[0] == tables[1]).all()  # the region is the root's only child
