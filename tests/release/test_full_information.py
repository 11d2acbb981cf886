"""Full-information reconciliation (``pipeline.release.full_information``): every level fits the tree's GLS."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.io.run_folder import load_run
from pipeline.release.full_information import PINNED, level_targets, solve_tree, target_queries, tree_targets
from pipeline.uncertainty.gls import gls_estimates
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
    for level, spec in enumerate(run.config.levels):
        assert np.allclose(result.estimates[level], reference.estimates[level])
        targets = {t.name: t for t in level_targets(schema, result, level, target_queries(
            schema, measured[level], run.config.level_passes(spec.name)))}
        measured_names = {q.name for q, _, _ in measured[level]}
        assert measured_names - {"total"} <= set(targets) and "detailed" in targets
        # the total is an invariant of root and region: pinned, so no target (the constraint holds it)
        assert ("total" in targets) == (spec.name not in ("root", "region"))
        for name, target in targets.items():
            query = schema.parse_query(name)
            axes = tuple(schema.names.index(a) for a in query.attributes)
            variance = result.query_variance(level, axes)
            assert float(target.sigma2) == pytest.approx(variance[variance > PINNED].mean(), rel=1e-9)
            assert np.allclose(target.noisy, result.query_estimate(level, axes))
            assert target.sigma2 < min((s2 for q, s2, _ in measured[level] if q.name == name), default=Fraction(10**9))
    lowest = tree_targets(run.config, result, measured)[-1]  # the lowest level's measured queries: their own σ²
    own = {q.name: s2 for q, s2, _ in measured[-1]}
    assert {t.name: t.sigma2 for t in lowest if t.name in own} == own


def test_a_partial_only_child_chain_informs_its_parent() -> None:
    """Item 2 of issue 12: a node that is its parent's only child while its siblings' parents have several (one
    state of a nation with a single county).  Its measurements move its parent's fit, and the two stay equal."""
    from pipeline.config.schema import Attribute, Schema

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
        targets = level_targets(schema, result, 1, [detailed])
        fits.append(targets[0].noisy[0])
        assert np.allclose(result.estimates[1][0], result.estimates[2][0])  # the only child equals its parent
    assert np.all(fits[1] - fits[0] > 1)  # the child's measurements reached the parent's target
