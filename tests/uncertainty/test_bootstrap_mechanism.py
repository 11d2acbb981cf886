"""The parametric bootstrap re-draws each query with the mechanism the release used, at the manifest's scale."""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import censusdp.pipeline.uncertainty.bootstrap as ub
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.options import random_source
from censusdp.pipeline.dp import noise
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.release import noisy_measurements
from censusdp.pipeline.release.stages import run_release
from tests.helpers.configs import edit_config
from tests.helpers.tiny import TINY_TOML, tiny_microdata


@pytest.fixture(scope="module")
def laplace_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A replace-one release of the tiny data whose unit level is measured with the discrete Laplace."""
    folder = tmp_path_factory.mktemp("laplace_run")
    micro, geo = tiny_microdata()
    micro.write_parquet(folder / "microdata.parquet")
    geo.write_parquet(folder / "geography.parquet")
    (folder / "config.toml").write_text(TINY_TOML.format(rho="4"))
    edit_config(folder / "config.toml", {"budget.neighbouring": "replace-one", "strategy.unit.mechanism": "laplace"})
    with pytest.MonkeyPatch.context() as patch:  # a ledger of this test's own, never the user's
        patch.delenv("CENSUSDP_LEDGER", raising=False)
        patch.setenv("XDG_DATA_HOME", str(folder / "xdg"))
        (folder / "xdg" / "censusdp").mkdir(parents=True)
        yield run_release(load_config(folder / "config.toml"), folder / "runs", random_source(5))


def test_bootstrap_draws_laplace_for_a_laplace_query(laplace_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = json.loads((laplace_run / "manifest.json").read_text())
    calls: list[tuple[str, Fraction, int]] = []

    def gaussian(sigma2: Fraction, size: int, *, rng: object = None) -> np.ndarray:
        calls.append(("gaussian", Fraction(sigma2), size))
        return noise.sample_discrete_gaussian(sigma2, size, rng=rng)

    def laplace(scale: Fraction, size: int, *, rng: object = None) -> np.ndarray:
        calls.append(("laplace", Fraction(scale), size))
        return noise.sample_discrete_laplace(scale, size, rng=rng)

    # the bootstrap draws through the release's own noisy_answers (pipeline.release.noisy_measurements)
    monkeypatch.setattr(noisy_measurements, "sample_discrete_gaussian", gaussian)
    monkeypatch.setattr(noisy_measurements, "sample_discrete_laplace", laplace)
    run = load_run(laplace_run)
    truth = [run.table(level) for level in range(run.tree.depth)]
    tables = ub.replicate_tables(run, truth, seeded_random_source(1))
    # one call per query, level by level, in the manifest's order: the mechanism and public scale it records
    names = [lv.name for lv in run.config.levels]
    expected = []
    for entry in manifest["allocation"]:
        level = names.index(entry["level"])
        cells = run.config.schema.marginal(run.config.schema.parse_query(entry["query"]), truth[level]).size
        if entry["mechanism"] == "laplace":
            expected.append(("laplace", Fraction(entry["scale"]), cells))
        else:
            expected.append(("gaussian", Fraction(entry["sigma2_exact"]), cells))
    assert [e for e in expected if e[0] == "laplace"] == [("laplace", Fraction(manifest["allocation"][-1]["scale"]),
                                                          72 * 6)]
    assert calls == expected
    assert [t.shape for t in tables] == [t.shape for t in truth]


def test_laplace_run_manifest_and_report(laplace_run: Path) -> None:
    """End to end: the manifest's epsilon_pure is Δ₁/scale = 2/scale, and report.md states the guarantee."""
    manifest = json.loads((laplace_run / "manifest.json").read_text())
    unit = next(a for a in manifest["allocation"] if a["level"] == "unit")
    epsilon = Fraction(unit["epsilon_pure"])
    assert epsilon == 2 / Fraction(unit["scale"]) and Fraction(unit["rho_exact"]) == epsilon**2 / 2
    guarantee = manifest["privacy"]["guarantee"]
    assert "(replace-one)" in guarantee and "(total at root, region)" in guarantee
    assert f"- Guarantee: {guarantee}" in (laplace_run / "report.md").read_text()


def test_level_noise_reads_the_manifest(laplace_run: Path) -> None:
    run = load_run(laplace_run)
    unit = run.level_noise(run.tree.depth - 1)
    assert [(q.query.name, q.mechanism) for q in unit] == [("detailed", "laplace")]
    entry = next(a for a in run.manifest["allocation"] if a["level"] == "unit")
    assert unit[0].scale == Fraction(entry["scale"])
    assert all(q.mechanism == "gaussian" and q.scale is None for q in run.level_noise(0))
