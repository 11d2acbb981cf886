"""Turning command-line options into config overrides and a random source (shared by the CLI and the flows)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.dp.random_source import RandomSource, seeded_random_source, system_random_source


def release_overrides(microdata: str | None = None, geography: str | None = None, fmt: str | None = None,
                      rho: str | int | float | None = None, runner: str | None = None, units: str | None = None,
                      no_units: bool = False) -> dict[str, Any]:
    """Dotted-key overrides; paths given on the command line are made absolute (relative to the cwd).
    ``units``: the units universe's file (``units.path``); ``no_units``: release the persons only (the
    ``[units]`` table is dropped, so nothing of it is read or charged)."""
    overrides: dict[str, Any] = {}
    if no_units:
        overrides["units"] = None
    elif units is not None:
        overrides["units.path"] = str(Path(units).resolve())
    if microdata is not None:
        overrides["input.path"] = str(Path(microdata).resolve())
    if geography is not None:
        overrides["input.geography"] = str(Path(geography).resolve())
    if fmt is not None:
        overrides["input.format"] = fmt
    if runner is not None:
        overrides["postprocess.runner"] = runner
    if rho is not None:
        overrides["budget.rho"] = rho
        overrides["budget.epsilon"] = None  # --rho replaces a configured (epsilon, delta) target
    return overrides


def load_release_config(config_path: str, microdata: str | None = None, geography: str | None = None,
                        fmt: str | None = None, rho: str | int | float | None = None,
                        runner: str | None = None, units: str | None = None, no_units: bool = False
                        ) -> ReleaseConfig:
    return load_config(config_path, release_overrides(microdata, geography, fmt, rho, runner, units, no_units))


_insecure_seed_allowed = False  # True only inside the CLI's --insecure-seed call (``insecure_seed_allowed``)


@contextmanager
def insecure_seed_allowed() -> Iterator[None]:
    """Within this block (the CLI's ``--insecure-seed`` call, nothing else) the flow accepts the seed it is given.
    A process-wide flag, not an environment variable: no other process inherits it; Prefect's threads see it."""
    global _insecure_seed_allowed
    previous, _insecure_seed_allowed = _insecure_seed_allowed, True
    try:
        yield
    finally:
        _insecure_seed_allowed = previous


def insecure_seed_is_allowed() -> bool:
    return _insecure_seed_allowed


def random_source(insecure_seed: int | None) -> RandomSource:
    """The OS CSPRNG, unless a seed is given explicitly (tests only: such a run is marked not publishable)."""
    return system_random_source() if insecure_seed is None else seeded_random_source(insecure_seed)
