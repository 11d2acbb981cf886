"""Calibration end to end: the noise a release adds is the noise its own manifest states.

On a fixture whose truth is known, for every mechanism (discrete Gaussian, discrete Laplace) and both
neighbouring relations, the release's own stages draw the measurements and the empirical second moment of
noisy - true, per level x query, is compared with the exact variance of the distribution the manifest names
(sigma2_exact for the Gaussian, scale for the Laplace).  The upper levels are measured REPS times with fresh
seeds (the root has one node: one sample per query cell per draw); the lowest level LOWEST_REPS times.

The test: z = (sum x² - n·V) / sqrt(n·(E[x⁴] - V²)), with V and E[x⁴] computed exactly from the PMF, must stay
within Z_CRIT (family-wise alpha about 3e-6 over the 24 level x query cases).  Its power is computed in the
test for every case: were the variance wrong by a factor 2 either way (the audit's mutant divided it by 4),
z would leave that band with probability > 0.99 (normal approximation; the statistic's spread scales with
the variance).
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.histograms import all_level_histograms, lowest_histograms
from censusdp.pipeline.io.microdata import validated_rows
from censusdp.pipeline.release import stages
from censusdp.pipeline.release.draws import claim_path
from tests.helpers.configs import edit_config
from tests.helpers.tiny import TINY_TOML, tiny_microdata

STRATEGY = {"root": {"detailed": "1"}, "region": {"colour": "1/2", "detailed": "1/2"},
            "district": {"total": "1/3", "detailed": "2/3"}, "unit": {"detailed": "1"}}
REPS = {"gaussian": 80, "laplace": 200}  # the Laplace's heavier tails need more draws for the same power
LOWEST_REPS = 3  # the lowest level has 360 measured cells: 1,080 samples
Z_CRIT = 5.3  # two-sided normal quantile for alpha 1.2e-7 per case; 24 cases: family-wise alpha < 3e-6


def pmf_moments(kind: str, parameter: Fraction) -> tuple[float, float]:
    """(E[X²], E[X⁴]) of the discrete Gaussian N_Z(0, sigma²) or the discrete Laplace of scale b, exactly
    enough (the support is summed until the terms vanish in double precision)."""
    p = float(parameter)
    k = np.arange(-4000, 4001, dtype=np.float64)
    weights = np.exp(-k * k / (2 * p)) if kind == "gaussian" else np.exp(-np.abs(k) / p)
    weights /= weights.sum()
    return float((weights * k**2).sum()), float((weights * k**4).sum())


def write_fixture(folder: Path, mechanism: str, neighbouring: str) -> Path:
    micro, geo = tiny_microdata()
    micro.write_parquet(folder / "microdata.parquet")
    geo.write_parquet(folder / "geography.parquet")
    text = TINY_TOML.format(rho="4")
    text = text[: text.index("[[invariants]]")] + text[text.index("[[structural_zeros]]"):]  # add-remove allows none
    (folder / "config.toml").write_text(text)
    # no one-cell query on the root or the regions: each draw gives every (level, query) at least 5 samples
    overrides: dict[str, object] = {"budget.neighbouring": neighbouring, "strategy": copy.deepcopy(STRATEGY)}
    if mechanism == "laplace":
        overrides |= {f"strategy.{level}.mechanism": "laplace" for level in ("root", "region", "district", "unit")}
    return edit_config(folder / "config.toml", overrides)


def power(n: int, variance: float, fourth: float, factor: float) -> float:
    """P(|z| >= Z_CRIT) when the noise's true variance is ``factor`` times the stated one."""
    spread = math.sqrt(n * (fourth - variance**2))
    shift = abs(n * variance * (factor - 1)) / spread
    return 0.5 * math.erfc(-(shift - Z_CRIT) / factor / math.sqrt(2))


def noise_samples(config_path: Path, reps: int) -> tuple[dict[tuple[str, str], list[np.ndarray]], dict]:
    """Run the release's stages: REPS fresh measurements of the upper levels, one of the lowest, then publish;
    returns noisy - true per (level, query) and the published manifest."""
    config = load_config(config_path)
    release = stages.start_release(config, config_path.parent / "runs", seeded_random_source(1))
    run = release.persons
    stages.read_files(release, run)
    stages.charge(release)
    stages.validate_inputs(release, run)
    assert run.tree is not None and run.input_files is not None
    files = run.input_files
    _, row_units, row_cells = validated_rows(files)
    lowest = lowest_histograms(row_units, row_cells, run.tree.n_nodes(run.tree.depth - 1), config.schema.n_cells)
    truth = all_level_histograms(run.tree, lowest)
    samples: dict[tuple[str, str], list[np.ndarray]] = {}

    def collect(level: int) -> None:
        name = config.levels[level].name
        table = pl.read_parquet(run.work_dir / "measurements" / f"{name}.parquet")
        for allocation in run.level_allocations(level):
            query = config.schema.parse_query(allocation.query)
            noisy = table.filter(pl.col("query") == allocation.query)["noisy_value"].to_numpy()
            true = config.schema.marginal(query, truth[level]).ravel()
            samples.setdefault((name, allocation.query), []).append(noisy - true)

    depth = len(config.levels)
    for rep in range(reps):  # every draw measures every level: the lowest is kept LOWEST_REPS times
        release.rng = seeded_random_source(1000 + rep)
        run.input_files = files  # measuring releases the inputs: put them back between draws
        # a release draws once; this test samples the stage many times, so it withdraws the stage's claim
        claim_path(run.work_dir, stages.MEASURE_CLAIM).unlink(missing_ok=True)
        stages.measure(release, run)
        for level in range(depth if rep < LOWEST_REPS else depth - 1):
            collect(level)
    stages.estimate(release, run)
    for level in range(depth):
        stages.reconcile(release, run, level)
    return samples, json.loads((stages.publish(release) / "manifest.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
def test_the_noise_added_matches_the_manifest(mechanism: str, neighbouring: str, tmp_path: Path) -> None:
    samples, manifest = noise_samples(write_fixture(tmp_path, mechanism, neighbouring), REPS[mechanism])
    assert manifest["privacy"]["neighbouring"] == neighbouring
    allocation = {(a["level"], a["query"]): a for a in manifest["allocation"]}
    assert set(allocation) == set(samples) and len(samples) == 6
    for key, parts in samples.items():
        entry = allocation[key]
        assert entry["mechanism"] == mechanism
        if mechanism == "gaussian":
            variance, fourth = pmf_moments("gaussian", Fraction(entry["sigma2_exact"]))
            # sigma² follows the relation: Δ₂² / (2 rho_q), exactly
            assert Fraction(entry["sigma2_exact"]) == Fraction(1 if neighbouring == "add-remove" else 2) / (
                2 * Fraction(entry["rho_exact"]))
        else:
            variance, fourth = pmf_moments("laplace", Fraction(entry["scale"]))
        x = np.concatenate(parts).astype(np.float64)
        n = x.size
        assert n >= 5 * REPS[mechanism] or key[0] == "unit", key
        spread = math.sqrt(n * (fourth - variance**2))
        z = (float((x * x).sum()) - n * variance) / spread
        assert abs(z) < Z_CRIT, f"{key}: noise variance {float((x * x).mean()):.4g}, manifest says {variance:.4g}"
        for factor in (2.0, 0.5):  # power: a variance off by 2x either way would be seen
            assert power(n, variance, fourth, factor) > 0.99, f"{key}: too few samples to see a {factor}x error"
