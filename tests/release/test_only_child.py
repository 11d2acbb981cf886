"""Only-child chains (``pipeline.release.only_child``): a level whose nodes equal their parents' is not wasted."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import censusdp.pipeline.release.reconcile_chunk as rc
from censusdp.geography.levels import Level
from censusdp.geography.tree import build_tree
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release.only_child import only_child_levels
from tests.helpers.releases import release_dir
from tests.helpers.tiny import single_region_release

LEVELS = (Level("nation", 0), Level("state", 2), Level("county", 5), Level("tract", 7))


@pytest.mark.parametrize(("codes", "expected"), [
    (["0100101", "0100102", "0100201"], {0: [1], 1: [], 2: []}),  # one state of two counties
    (["1100101", "1100102"], {0: [1, 2], 1: [2], 2: []}),  # a state that is one county (DC)
    (["0100101", "0200101"], {0: [], 1: [2, 3], 2: [3]}),  # two states, each a chain down to one tract
    (["0100101", "0100201", "0200101"], {0: [], 1: [], 2: [3]}),  # every county one tract, states not chains
])
def test_only_child_levels_are_the_deeper_levels_of_equal_nodes(codes: list[str], expected: dict[int, list[int]]
                                                                 ) -> None:
    tree = build_tree(LEVELS, np.array(codes))
    assert {level: only_child_levels(tree, level) for level in expected} == expected
    assert only_child_levels(tree, tree.depth - 1) == []


def test_the_root_is_reconciled_with_its_only_childs_measurements(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[int, list[tuple[str, Fraction, np.ndarray]]] = {}
    reconcile_level = rc.reconcile_level

    def recording(measurements: list[Any], **kwargs: Any) -> Any:
        level = 0 if kwargs["parent_counts"] is None else len(seen)
        seen[level] = [(m.name, m.sigma2, m.noisy) for m in measurements]
        return reconcile_level(measurements, **kwargs)

    monkeypatch.setattr(rc, "reconcile_level", recording)
    run_dir = release_dir(capsys, single_region_release(tmp_path))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["reconciliation"]["root"]["measurements_of"] == ["root", "region"]
    assert manifest["reconciliation"]["region"]["measurements_of"] == ["region"]
    run = load_run(run_dir)
    own = [(q.name, s2, v) for q, s2, v in run.measurements(0)]
    region = [(f"region: {q.name}", s2, v) for q, s2, v in run.measurements(1)]
    assert [(n, s2) for n, s2, _ in seen[0]] == [(n, s2) for n, s2, _ in own + region]
    for (_, _, used), (_, _, saved) in zip(seen[0], own + region, strict=True):
        np.testing.assert_array_equal(used, saved)  # the region's noisy answers, as saved, for the root's node
    # the region copies the root, which now reflects both levels' measurements
    root, reg = (pl.read_parquet(run_dir / "tables" / f"{n}.parquet") for n in ("root", "region"))
    assert root.drop("geoid").sort(["colour", "adult"]).equals(reg.drop("geoid").sort(["colour", "adult"]))


def test_levels_with_several_children_use_their_own_measurements_only(tiny_release: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tiny_release.write_text(tiny_release.read_text() + '\n[postprocess]\nreconciliation = "level_by_level"\n')
    manifest = json.loads((release_dir(capsys, tiny_release) / "manifest.json").read_text())
    assert {name: d["measurements_of"] for name, d in manifest["reconciliation"].items()} == {
        name: [name] for name in ("root", "region", "district", "unit")}


def test_full_information_fits_every_level_to_the_whole_trees_measurements(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default: the GLS of the tree ties an only child to its parent, so the chain needs no special case."""
    run_dir = release_dir(capsys, single_region_release(tmp_path, "full_information"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    levels = ["root", "region", "district", "unit"]
    assert {name: d["measurements_of"] for name, d in manifest["reconciliation"].items()} == {
        name: levels for name in levels}
    root, reg = (pl.read_parquet(run_dir / "tables" / f"{n}.parquet") for n in ("root", "region"))
    assert root.drop("geoid").sort(["colour", "adult"]).equals(reg.drop("geoid").sort(["colour", "adult"]))


def test_a_postprocessing_rerun_uses_the_chain_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from censusdp.pipeline.release.finish import postprocess_run

    run_dir = release_dir(capsys, single_region_release(tmp_path))
    rerun = postprocess_run(run_dir)
    manifest = json.loads((rerun / "manifest.json").read_text())
    assert manifest["postprocess_of"] == run_dir.name
    assert manifest["reconciliation"]["root"]["measurements_of"] == ["root", "region"]
