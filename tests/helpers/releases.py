"""Release helpers shared by the tests: the CLI in process, a seeded release, its published run folder, and a
release with stages replaced."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.config.options import insecure_seed_allowed, load_release_config, random_source
from censusdp.pipeline.release.stages import STAGES, Release, UniverseRun, reconcile, replaced, run_release
from censusdp.pipeline.uncertainty.estimates import write_release_estimates
from tests.helpers.configs import preset_config


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err


def release(capsys: pytest.CaptureFixture[str], config: Path, *extra: str, seed: int = 5) -> tuple[int, str, str]:
    return cli(capsys, "release", str(config), "--no-prefect", "--insecure-seed", str(seed), *extra)


def release_dir(capsys: pytest.CaptureFixture[str], config: Path, *extra: str, seed: int = 5) -> Path:
    """A seeded release that must succeed; returns the published run folder (the last line printed)."""
    code, out, err = release(capsys, config, *extra, seed=seed)
    assert code == 0, err
    return Path(out.splitlines()[-1])


def release_with(config: Path, seed: int = 5, **functions: Callable[..., Any]) -> Path:
    """``censusdp release CONFIG --no-prefect --insecure-seed SEED`` with the named stages' functions replaced
    (``stages.replaced``); returns the published folder, or raises what the release raised."""
    loaded = load_release_config(str(config))
    with insecure_seed_allowed():
        return run_release(loaded, loaded.output.dir, random_source(seed), write_estimates=write_release_estimates,
                           stages=replaced(STAGES, **functions))


def units_config(folder: Path, data: Path, dataset: str = "units-state") -> Path:
    """The pl94 preset (with its [units] universe) on a synthetic state's files (the test's installation ledger)."""
    return preset_config(folder / "pl94.toml", "pl94", {"ledger.dataset": dataset}, files=data)


def keeping_invariants(kept: dict[str, dict[int, Any]]) -> Callable[..., None]:
    """A ``reconcile`` that records each universe's invariants (by universe name) before its lowest level drops
    them, then reconciles as the release does."""

    def reconcile_keeping(release: Release, universe: UniverseRun, level: int, runner: object = None) -> None:
        if level == len(release.config.levels) - 1:
            kept[universe.config.universe.value] = dict(universe.invariants)
        reconcile(release, universe, level, runner)

    return reconcile_keeping
