"""Full-information reconciliation (``pipeline.release.full_information``): every level fits the tree's GLS."""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release import tasks
from censusdp.pipeline.release.full_information import GLS_SCRATCH, PINNED, solve_tree, tree_targets
from censusdp.pipeline.release.reconcile_chunk import ChunkTask, fitted_measurements
from censusdp.pipeline.release.run import Release, UniverseRun
from censusdp.pipeline.uncertainty.estimates import gls_estimates
from censusdp.postprocess.gls import QuerySpec
from tests.helpers.releases import cli, release_dir


def test_a_release_fits_gls_targets_and_a_rerun_can_go_level_by_level(tiny_release: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    levels = ["root", "region", "district", "unit"]
    for name in levels:
        report = manifest["reconciliation"][name]
        assert report["measurements_of"] == levels
        assert report["rounding_marginals"] == ["total"] and report["l2_passes"] == 1
    code, out, err = cli(capsys, "postprocess", str(run_dir), "--reconciliation", "level_by_level")
    assert code == 0, err
    rerun = Path(out.splitlines()[-1])
    again = json.loads((rerun / "manifest.json").read_text())
    assert {n: again["reconciliation"][n]["measurements_of"] for n in levels} == {n: [n] for n in levels}
    assert again["config_raw"]["postprocess"]["reconciliation"] == "level_by_level"
    for parent, child in zip(levels, levels[1:], strict=False):  # both are consistent tables
        for folder in (run_dir, rerun):
            up = pl.read_parquet(folder / "tables" / f"{parent}.parquet")["count"].sum()
            assert pl.read_parquet(folder / "tables" / f"{child}.parquet")["count"].sum() == up


def test_targets_are_the_gls_estimates_weighted_by_their_mean_variance(tiny_release: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = load_run(release_dir(capsys, tiny_release))
    schema = run.config.schema
    measured = [[(q, s2, values) for q, s2, values in run.measurements(level)] for level in range(run.tree.depth)]
    result = solve_tree(schema, run.tree.parent, measured, run.invariants)
    reference = gls_estimates(run)  # the uncertainty layer's GLS of the same run
    every_level = tree_targets(run.config, result, measured)
    for level, spec in enumerate(run.config.levels):
        assert np.allclose(result.estimates[level], reference.estimates[level])
        targets = {t.name: t for t in every_level[level]}
        measured_names = {q.name for q, _, _ in measured[level]}
        assert measured_names - {"total"} <= set(targets) and "detailed" in targets
        # the total is an invariant of root and region: pinned, so no target (the constraint holds it)
        assert ("total" in targets) == (spec.name not in ("root", "region"))
        for name, target in targets.items():
            query = schema.parse_query(name)
            axes = tuple(schema.names.index(a) for a in query.attributes)
            assert np.allclose(target.noisy, result.estimate(level, QuerySpec(axes)))
            if level == run.tree.depth - 1 and name in measured_names:
                continue  # the lowest level's measured queries keep their own σ² (below)
            variance = result.query_variance(level, axes)
            assert float(target.sigma2) == pytest.approx(variance[variance > PINNED].mean(), rel=1e-9)
            assert target.sigma2 < min((s2 for q, s2, _ in measured[level] if q.name == name), default=Fraction(10**9))
    own = {q.name: s2 for q, s2, _ in measured[-1]}
    assert {t.name: t.sigma2 for t in every_level[-1] if t.name in own} == own


def test_a_partial_only_child_chain_informs_its_parent() -> None:
    """A node that is its parent's only child while its siblings' parents have several (one
    state of a nation with a single county).  Its measurements move its parent's fit, and the two stay equal."""
    from censusdp.pipeline.config.schema import Attribute, Schema

    schema = Schema((Attribute("a", "A", ("x", "y")),))
    detailed, total = schema.parse_query("detailed"), schema.parse_query("total")
    parents = [np.zeros(0, dtype=np.int64), np.array([0, 0]), np.array([0, 1, 1])]  # node 0 of level 2: only child
    rng = np.random.default_rng(3)

    def measured(shift: float) -> list:
        levels = []
        for n in (1, 2, 3):
            noisy = rng.normal(10, 1, (n, 2))
            if n == 3:
                noisy[0] += shift
            levels.append([(detailed, Fraction(1), noisy), (total, Fraction(2), noisy.sum(axis=1, keepdims=True))])
        return levels

    fits = []
    for shift in (0.0, 5.0):
        rng = np.random.default_rng(3)
        result = solve_tree(schema, parents, measured(shift), {})
        fits.append(result.estimate(1, QuerySpec((0,)))[0])  # the parent's detailed target: its GLS estimate
        assert np.allclose(result.estimates[1][0], result.estimates[2][0])  # the only child equals its parent
    assert np.all(fits[1] - fits[0] > 1)  # the child's measurements reached the parent's target


def test_chunk_tasks_compute_the_in_memory_gls_targets_and_scratch_is_never_published(
        tiny_release: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate stage streams the GLS (``postprocess.gls_stream``); each chunk task's targets are what the
    in-memory GLS (``solve_tree``, ``tree_targets``) gives for its nodes, and its scratch files are gone by publish.
    Above the lowest level a task reads its targets from the scratch files where it runs: the driver's own
    evaluation of them (``LevelTargets.chunk``), bit for bit."""
    made: dict[int, list] = {}
    plans: dict[int, list] = {}
    read_by_task: dict[tuple[int, int], list] = {}  # (level, start): the targets a task read, while scratch was there
    scratch_seen: list[bool] = []
    real = tasks._make_tasks

    def spy(release: Release, run: UniverseRun, level: int, *rest: object) -> Iterator[ChunkTask]:
        scratch_seen.append((run.work_dir / GLS_SCRATCH).is_dir())
        plans[level] = [(a, b) for a, b, _ in run.chunk_plan[level]]
        for task in real(release, run, level, *rest):
            made.setdefault(level, []).append(task)
            if task.stored_targets is not None:
                read = fitted_measurements(pickle.loads(pickle.dumps(task)))  # as a worker gets it
                on_driver = run.targets[level].chunk(task.start, task.stop)
                assert [(t.name, t.sigma2) for t in read] == [(t.name, t.sigma2) for t in on_driver]
                assert all(np.array_equal(a.noisy, b.noisy) for a, b in zip(read, on_driver, strict=True))
                read_by_task[level, task.start] = read
            yield task

    monkeypatch.setattr(tasks, "_make_tasks", spy)
    run_dir = release_dir(capsys, tiny_release)
    assert all(scratch_seen) and not (run_dir / GLS_SCRATCH).exists() and not list(run_dir.rglob("*.f64"))
    run = load_run(run_dir)
    measured = [[(q, s2, values) for q, s2, values in run.measurements(level)] for level in range(run.tree.depth)]
    expected = tree_targets(run.config, solve_tree(run.config.schema, run.tree.parent, measured, run.invariants),
                            measured)
    assert sorted(made) == list(range(run.tree.depth))
    for level, chunk in made.items():
        assert [(t.start, t.stop) for t in chunk] == plans[level]
        for task in chunk:
            # the lowest level's tasks compute their targets from the measurements they read (gls_chunk)
            lowest = level == run.tree.depth - 1
            assert (task.gls_chunk is not None) == lowest == (task.stored_targets is None)
            published = run_dir / "measurements" / Path(task.measurements_path).name  # the run folder was renamed
            targets = (fitted_measurements(dataclasses.replace(task, measurements_path=str(published))) if lowest
                       else read_by_task[level, task.start])
            assert [t.name for t in targets] == [t.name for t in expected[level]]
            for got, want in zip(targets, expected[level], strict=True):
                assert float(got.sigma2) == pytest.approx(float(want.sigma2), rel=1e-9)
                np.testing.assert_allclose(got.noisy, want.noisy[task.start:task.stop], rtol=1e-8, atol=1e-8)
                assert (got.matrix != want.matrix).nnz == 0
