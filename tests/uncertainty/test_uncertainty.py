"""GLS estimates of a run folder, the parametric bootstrap, and the coverage of the GLS 95% intervals."""

from __future__ import annotations

import argparse
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.geography.levels import Level
from censusdp.geography.tree import build_tree
from censusdp.pipeline.cli import main
from censusdp.pipeline.cli.uncertainty import add_uncertainty
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.noise import sample_discrete_gaussian
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release import group_tasks, stages
from censusdp.pipeline.synth.population import synthesize
from censusdp.pipeline.uncertainty.bootstrap import bootstrap_intervals
from censusdp.pipeline.uncertainty.estimates import gls_estimates, write_estimates
from censusdp.postprocess import QueryInvariant, QueryMeasurement
from censusdp.postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, interval, solve_gls
from censusdp.postprocess.gls_algebra import QuerySpec, answer
from tests.helpers.configs import edit_config
from tests.helpers.releases import keeping_invariants, release_dir, release_with


def test_write_estimates_of_a_run(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release)
    paths = write_estimates(run_dir)
    assert {p.name for p in paths} == {f"{n}.parquet" for n in ("root", "region", "district", "unit")}
    root = pl.read_parquet(run_dir / "estimates" / "root.parquet")
    assert root.columns == ["geoid", "colour", "adult", "estimate", "std_error", "ci_low", "ci_high"]
    assert root.height == 6 and (root["ci_low"] < root["estimate"]).all()
    queries = pl.read_parquet(run_dir / "estimates" / "queries" / "region.parquet")
    totals = queries.filter(pl.col("query") == "total")
    # the total is an invariant at root and region: estimated exactly, with zero standard error
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    expected = micro.group_by(pl.col("geocode").str.slice(0, 1)).len().sort("geocode")["len"].to_numpy()
    np.testing.assert_allclose(totals.sort("geoid")["estimate"].to_numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(totals["std_error"].to_numpy(), 0, atol=1e-9)
    # consistent: the units' estimates add up to their districts'
    unit = pl.read_parquet(run_dir / "estimates" / "unit.parquet")
    district = pl.read_parquet(run_dir / "estimates" / "district.parquet")
    summed = (unit.with_columns(pl.col("geoid").cast(pl.String).str.slice(0, 2))
              .group_by(["geoid", "colour", "adult"]).agg(pl.col("estimate").sum()).sort(["geoid", "colour", "adult"]))
    joined = district.with_columns(pl.col("geoid").cast(pl.String)).sort(["geoid", "colour", "adult"])
    np.testing.assert_allclose(summed["estimate"].to_numpy(), joined["estimate"].to_numpy(), atol=1e-6)
    assert (unit["std_error"] > 0).all()


def test_bootstrap_of_a_run(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release)
    summary = bootstrap_intervals(run_dir, replicates=3, seed=1)
    assert set(summary["levels"]) == {"root", "region", "district", "unit"}
    # the total is an invariant at root and region only: every replicate keeps it there, not below
    assert summary["levels"]["root"]["sd_total"] == 0 and summary["levels"]["region"]["sd_total"] == 0
    assert summary["levels"]["district"]["sd_total"] > 0 and summary["levels"]["unit"]["sd_total"] > 0
    unit = pl.read_parquet(run_dir / "bootstrap" / "unit.parquet")
    # fresh noise in every replicate: the unit level has no invariant, so most cells move between replicates
    # (93% with these seeds; identical replicates would give 0)
    assert (unit["boot_sd"] > 0).mean() > 0.8
    # every published cell is reported, under its own geoid and attribute values, with its published count
    keys = ["geoid", "colour", "adult"]
    table = pl.read_parquet(run_dir / "tables" / "unit.parquet").select(*keys, published=pl.col("count"))
    reported = (unit.filter(pl.col("published") > 0).with_columns(pl.col(keys).cast(pl.String))
                .select(*keys, "published"))
    assert reported.sort(keys).rows() == table.with_columns(pl.col(keys).cast(pl.String)).sort(keys).rows()
    with pytest.raises(ValueError):
        bootstrap_intervals(run_dir, replicates=1)


def test_gls_from_files_equals_gls_from_memory(tiny_release: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The GLS fit of a run folder read back (``load_run``) equals the GLS fit of the same release's noisy
    measurements and invariants as the release held them in memory, before anything was written."""
    drawn: dict[str, list[list[QueryMeasurement]]] = {}  # per level name: one list of measurements per chunk
    held: list[stages.Release] = []
    kept: dict[str, dict[int, list[QueryInvariant]]] = {}  # dropped after the lowest level: kept here instead
    real_measure, real_publish = group_tasks.measure_level, stages.publish

    def measure_level(schema, histograms, allocations, rng):  # the real one, keeping what it drew
        out = real_measure(schema, histograms, allocations, rng)
        drawn.setdefault(allocations[0].level, []).append(out)
        return out

    def publish(run: stages.Release, runner: object = None) -> Path:
        held.append(run)
        return real_publish(run, runner)

    monkeypatch.setattr(group_tasks, "measure_level", measure_level)
    run_dir = release_with(tiny_release, publish=publish, reconcile=keeping_invariants(kept))
    held_invariants = kept["persons"]
    assert not (run_dir / "estimates").exists()  # nothing written until write_estimates is called
    (release,) = held
    memory = release.persons
    assert memory.tree is not None
    schema = memory.config.schema
    levels = []
    for level, spec in enumerate(memory.config.levels):
        chunks = drawn[spec.name]
        queries = []
        for q, allocation in enumerate(memory.level_allocations(level)):
            query = schema.parse_query(allocation.query)
            assert {chunk[q].name for chunk in chunks} == {query.name}
            axes = tuple(schema.names.index(a) for a in query.attributes)
            queries.append(GlsQuery(axes, float(allocation.sigma2), np.concatenate([c[q].noisy for c in chunks])))
        invariants = [GlsInvariant(tuple(schema.names.index(a) for a in schema.parse_query(i.name).attributes),
                                   i.values) for i in held_invariants.get(level, [])]
        levels.append(GlsLevel(memory.tree.parent[level], queries, invariants))
    from_memory = solve_gls(levels, schema.shape)

    run = load_run(run_dir)
    from_files = gls_estimates(run)
    assert sum(len(i) for i in run.invariants.values()) == 2  # the total at root and region
    for level in range(run.tree.depth):
        assert from_files.estimates[level].shape == (run.tree.n_nodes(level), 6)
        np.testing.assert_allclose(from_files.estimates[level], from_memory.estimates[level], rtol=0, atol=1e-9)
        np.testing.assert_allclose(from_files.query_variance(level), from_memory.query_variance(level),
                                   rtol=1e-12, atol=0)
        # consistent: every level adds up to the root
        np.testing.assert_allclose(from_files.estimates[level].sum(), from_files.estimates[0].sum(), rtol=1e-9)


# --- coverage on synthetic data: pl94 schema, six levels, a tiny strategy, repeated noisy measurements -------

SHAPE = (8, 2, 2, 63)
LEVELS = tuple(Level(n, w) for n, w in (("us", 0), ("state", 2), ("county", 5), ("tract", 11),
                                        ("block_group", 12), ("block", 15)))
STRATEGY = (((), Fraction(7, 3)), ((1, 2, 3), Fraction(9, 2)), ((0, 1, 2, 3), Fraction(6)))  # (axes, σ²)


def synthetic_levels() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """True detailed histograms of every level of a synthetic state, and the tree's parent arrays."""
    micro, geography = synthesize(8000, seed=3)
    tree = build_tree(LEVELS, geography["geocode"].to_numpy())
    unit = tree.lowest_index(micro["geocode"].to_numpy().astype(np.str_))
    index = [micro[c].cast(pl.Int64).to_numpy() - offset for c, offset in
             (("GQTYPE_PL", 0), ("VOTING_AGE", 1), ("CENHISP", 1), ("CENRACE", 1))]
    cells = np.ravel_multi_index(tuple(index), SHAPE)
    truth = [np.zeros((tree.n_nodes(i), int(np.prod(SHAPE)))) for i in range(tree.depth)]
    np.add.at(truth[-1], (unit, cells), 1)
    for level in range(tree.depth - 1, 0, -1):
        truth[level - 1] = tree.aggregate_up(level, truth[level])
    return truth, list(tree.parent)


@pytest.fixture(scope="module")
def synthetic_truth() -> tuple[list[np.ndarray], list[np.ndarray]]:
    return synthetic_levels()


def coverage(truth: list[np.ndarray], parents: list[np.ndarray], replicates: int, scale: float) -> float:
    """Share of (node, detailed cell) pairs at tract level and above whose 95% GLS interval covers the truth."""
    rng = seeded_random_source(2024)
    hits = total = 0
    for _ in range(replicates):
        levels = []
        for level, (counts, parent) in enumerate(zip(truth, parents, strict=True)):
            queries = []
            for axes, sigma2 in STRATEGY:
                answers = answer(counts, SHAPE, QuerySpec(axes))
                noise = sample_discrete_gaussian(sigma2, answers.size, rng=rng).reshape(answers.shape)
                queries.append(GlsQuery(axes, float(sigma2), answers + noise))
            invariants = [GlsInvariant((), answer(counts, SHAPE, QuerySpec(())))] if level <= 1 else []
            levels.append(GlsLevel(parent, queries, invariants))
        result = solve_gls(levels, SHAPE)
        for level in range(4):  # us, state, county, tract
            variance = np.repeat(result.query_variance(level)[:, None], truth[level].shape[1], axis=1)
            low, high = interval(result.estimates[level], variance * scale**2)
            hits += int(np.count_nonzero((low <= truth[level]) & (truth[level] <= high)))
            total += truth[level].size
    return hits / total


def test_gls_intervals_cover_the_truth_95_percent(synthetic_truth) -> None:
    truth, parents = synthetic_truth
    assert truth[3].shape[0] >= 2  # several tracts
    rate = coverage(truth, parents, replicates=12, scale=1.0)
    assert 0.93 <= rate <= 0.97, rate


def test_coverage_check_fails_for_a_wrong_variance(synthetic_truth) -> None:
    truth, parents = synthetic_truth
    rate = coverage(truth, parents, replicates=3, scale=0.5)  # half the standard error
    assert rate < 0.80, rate


def test_estimates_of_a_postprocess_run_match(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``censusdp postprocess`` folder points at the original measurements: the same GLS estimates."""
    run_dir = release_dir(capsys, tiny_release)
    assert main(["-q", "postprocess", str(run_dir)]) == 0
    again = Path(capsys.readouterr().out.strip().splitlines()[-1])
    first, second = gls_estimates(load_run(run_dir)), gls_estimates(load_run(again))
    for a, b in zip(first.estimates, second.estimates, strict=True):
        np.testing.assert_array_equal(a, b)
    assert write_estimates(again)[0].exists()


def test_uncertainty_command(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release)
    parser = argparse.ArgumentParser()
    add_uncertainty(parser.add_subparsers())
    args = parser.parse_args(["uncertainty", str(run_dir), "--bootstrap", "2", "--seed", "4"])
    assert args.handler(args) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.endswith("estimates/unit.parquet") for line in printed)
    assert any(line.endswith("bootstrap/unit.parquet") for line in printed)


def test_a_release_writes_its_own_estimates(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``output.estimates = true``: the release writes, from what it holds in memory, exactly the estimates that
    ``write_estimates`` computes from the published folder read back."""
    config = edit_config(tiny_release, {"output.estimates": True}, tiny_release.with_name("estimates.toml"))
    run_dir = release_dir(capsys, config)
    written = {p.relative_to(run_dir): pl.read_parquet(p) for p in sorted((run_dir / "estimates").rglob("*.parquet"))}
    assert len(written) == 8  # cells and queries at each of the 4 levels
    shutil.rmtree(run_dir / "estimates")
    write_estimates(run_dir)
    for relative, frame in written.items():
        assert frame.equals(pl.read_parquet(run_dir / relative)), relative


def test_estimates_without_a_writer_are_refused_before_anything(tiny_release: Path, tmp_path: Path) -> None:
    """A caller that asks for estimates without passing their writer is refused at start: no folder, no charge."""
    config = edit_config(tiny_release, {"output.estimates": True}, tiny_release.with_name("estimates.toml"))
    out = tmp_path / "out"
    with pytest.raises(CensusDPError, match="no estimates writer"):
        stages.start_release(load_config(config), out, seeded_random_source(1))
    assert not out.exists() or not any(out.iterdir())


def test_a_design_the_gls_cannot_solve_leaves_nothing_behind(tiny_release: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells no query of the lowest level determines (level-by-level reconciliation publishes them): the GLS is
    refused, and neither its scratch folder nor an empty ``estimates/`` stays behind."""
    edit_config(tiny_release, {"strategy.unit": {"colour": "1"}, "postprocess.reconciliation": "level_by_level"})
    run_dir = release_dir(capsys, tiny_release)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    with pytest.raises(ValueError, match="not identifiable"):
        write_estimates(run_dir)
    assert list(scratch.iterdir()) == [] and not (run_dir / "estimates").exists()


def test_measurements_rewritten_into_other_row_groups_are_named(tiny_release: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The estimates read a level chunk by chunk as the release wrote it: a file rewritten into other row groups
    is refused with one line naming it, not read wrongly."""
    import pyarrow.parquet as pq

    run_dir = release_dir(capsys, tiny_release)
    path = run_dir / "measurements" / "unit.parquet"
    pq.write_table(pq.read_table(path), path, row_group_size=30)
    with pytest.raises(CensusDPError, match="unit.parquet: its row groups are not the release's chunks"):
        write_estimates(run_dir)
