"""Replicates reconciled together, as copies of the tree side by side, get the tables each would get alone: the
same problems, solved together, so equal up to the solver's tolerance, which can tip a tie in the rounding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import censusdp.pipeline.uncertainty.bootstrap as ub
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.run_folder import load_run
from tests.helpers.configs import edit_config
from tests.helpers.releases import release_dir


@pytest.mark.parametrize("method", ["full_information", "level_by_level"])
def test_a_batch_of_replicates_is_each_replicate_alone(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    edit_config(tiny_release, {"postprocess.reconciliation": method})
    assert load_config(tiny_release).reconciliation_method.value == method
    run = load_run(release_dir(capsys, tiny_release))
    truth = [run.table(level) for level in range(run.tree.depth)]
    offsets = [np.random.default_rng(r).integers(-6, 7, 10_000) for r in range(3)]  # noqa: NPY002 - a stand-in
    batch = {"count": 1}

    def stand_in(answers: np.ndarray, *args: Any) -> np.ndarray:
        """Each replicate's 'noise': its own fixed offsets, whichever way the replicates are stacked."""
        rows = answers.shape[0] // batch["count"]
        parts = [answers[r * rows:(r + 1) * rows] + offsets[batch["first"] + r][:answers[r * rows:(r + 1) * rows]
                 .size].reshape(rows, -1) for r in range(batch["count"])]
        return np.concatenate(parts)

    monkeypatch.setattr(ub, "noisy_answers", stand_in)
    alone = []
    for r in range(3):
        batch.update(count=1, first=r)
        alone.append(ub.replicate_tables(run, truth, seeded_random_source(1)))
    batch.update(count=3, first=0)
    together = ub.replicate_tables(run, truth, seeded_random_source(1), count=3)
    differences = []
    for level, stacked in enumerate(together):
        assert stacked.shape == (3 * truth[level].shape[0], truth[level].shape[1])
        differences += [np.abs(table - alone[r][level]).ravel() for r, table in enumerate(np.split(stacked, 3))]
    difference = np.concatenate(differences)
    assert difference.max() <= 1 and (difference > 0).mean() < 0.25, np.bincount(difference)  # tips of ties only
