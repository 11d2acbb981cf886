"""The state of one release and its start: ``Release`` and its ``UniverseRun``s (what the stages pass forward in
memory) and ``start_release`` (the budget allocated exactly, the temporary folder made).  The stages are in
``pipeline.release.stages``, which re-exports these names.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import scipy.sparse as sp

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.budget.allocation import QueryAllocation, allocate, allocations_of, composed_rho
from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.model import ReleaseConfig, Universe
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.dp.accounting import per_person_rho
from censusdp.pipeline.dp.random_source import RandomSource
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io import manifest as mf
from censusdp.pipeline.io.measurements import ChunkLocation, level_location
from censusdp.pipeline.io.microdata import InputFiles
from censusdp.postprocess import QueryInvariant

if TYPE_CHECKING:
    from censusdp.pipeline.release.targets import LevelTargets

T = TypeVar("T")


@dataclass(frozen=True)
class Published:
    """What publish wrote that a caller shows (the flow's artifact): kept in memory, not read back."""

    final_dir: Path
    report_markdown: str
    shares_png: bytes


UNITS_DIR = "units"  # the units universe's measurements and tables, inside the run folder

# Writes GLS estimates (uncertainty/, a later layer) from the run as held in memory and its manifest.
EstimatesWriter = Callable[["Release", dict[str, Any]], object]


def require_estimates_writer(config: ReleaseConfig, write_estimates: EstimatesWriter | None) -> None:
    """``output.estimates`` needs a writer from the caller; refused before anything is read or charged."""
    if config.output.estimates and write_estimates is None:
        raise CensusDPError("output.estimates = true, but this caller passed no estimates writer "
                            "(pipeline.uncertainty.estimates.write_release_estimates)")


@dataclass
class UniverseRun:
    """One universe's share of a release (the persons, the housing units): its configuration, allocation and
    folder, and what its stages leave for the next.  Holds confidential arrays; its repr shows public facts only."""

    config: ReleaseConfig
    allocations: tuple[QueryAllocation, ...]
    work_dir: Path  # the release's temporary folder, or its units/ folder
    measurements_dir: Path | None = None  # where a re-run reads the noisy measurements (default: this run's)
    tree: GeoTree | None = None
    input_files: InputFiles | None = None  # the input files (paths, checked at file level) until measured
    chunk_plan: dict[int, list[tuple[int, int, ChunkLocation]]] = field(default_factory=dict)  # (start, stop, where)
    invariants: dict[int, list[QueryInvariant]] = field(default_factory=dict)  # published exactly
    counts: dict[int, sp.csr_matrix] = field(default_factory=dict)  # reconciled, published (above the lowest)
    targets: dict[int, LevelTargets] = field(default_factory=dict)  # GLS targets, made per chunk (full information)
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # the units': bounds on their rule answers once the persons' blocks are published, and the lowest outputs
    bounds: dict[int, Any] = field(default_factory=dict)
    lowest_outputs: Any = None
    disagreements: dict[str, int] = field(default_factory=dict)  # the units': blocks where the universes disagree

    def __repr__(self) -> str:
        return f"UniverseRun(universe={self.config.universe.value!r}, work_dir={str(self.work_dir)!r})"

    @property
    def schema(self) -> Schema:
        return self.config.schema

    @property
    def measurements(self) -> Path:
        """The folder its noisy measurements are read from."""
        return self.measurements_dir or self.work_dir / "measurements"

    @property
    def spent_rho(self) -> Fraction:
        """What the universe costs, recomputed from every query's noise through its privacy map."""
        budget = self.config.budget
        return composed_rho(self.allocations, sensitivity2_squared=budget.sensitivity2_squared,
                            sensitivity1=budget.sensitivity1)

    def measurement_entries(self, prefix: str) -> dict[str, str]:
        """The manifest's ``measurements``: each level's folder or file, ``prefix``-relative in this run's folder,
        or absolute where a re-run read them from."""
        directory = self.measurements
        return {lv.name: str(directory / level_location(directory, lv.name)) if self.measurements_dir
                else f"{prefix}/{level_location(directory, lv.name)}" for lv in self.config.levels}

    def level_allocations(self, level: int) -> list[QueryAllocation]:
        return list(allocations_of(self.allocations, self.config.levels[level].name))


@dataclass
class Release:
    """One release in progress: identity, folders, random source, charge and universes (persons first); public repr."""

    config: ReleaseConfig  # the persons' (main) configuration, which holds the units' ([units])
    rng: RandomSource
    run_id: str
    final_dir: Path
    work_dir: Path
    started_at: str
    universes: list[UniverseRun]
    write_estimates: EstimatesWriter | None = None  # GLS estimates (uncertainty/, above this layer), if configured
    ledger: PrivacyLedger | None = None  # set once the release is charged
    dataset: str | None = None  # the ledger dataset charged (the data's own, whatever the config names)
    failure_reason: str | None = None  # the ledger's category for a failure (never a row or a value)
    partition: int | None = None  # the level every universe is measured in parts at (release.measurement_plan)
    summary_tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> dictionary, level paths
    expected_errors: dict[str, Any] | None = None  # the main P.L. counts' standard errors (reconcile or tabulate)
    pending_expected_errors: Callable[[], Any] | None = None  # their computation on the runner, from the first level
    pending_figure: Callable[[], bytes] | None = None  # budget_shares.png, drawn in a thread from the first level on
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    published: Published | None = None  # set by publish

    def __repr__(self) -> str:
        return f"Release(run_id={self.run_id!r}, work_dir={str(self.work_dir)!r})"

    @property
    def persons(self) -> UniverseRun:
        return self.universes[0]

    @property
    def units(self) -> UniverseRun | None:
        return next((u for u in self.universes if u.config.universe is Universe.UNITS), None)

    @property
    def charged_rho(self) -> Fraction:
        """The per-person bound the ledger charges, caps and the manifest states: persons' rho + 4 x the units'."""
        units = self.units
        return per_person_rho(self.persons.spent_rho, units.spent_rho if units is not None else None)

    @cached_property
    def privacy(self) -> dict[Universe, dict[str, Any]]:
        """The manifest's privacy section of each universe, from the configuration alone: stated before the charge,
        so an accountant that cannot state the guarantee stops the release before anything is spent."""
        persons, units = self.persons, self.units
        sections = {self.config.universe: mf.privacy_section(
            self.config, persons.spent_rho, persons.allocations, per_person=self.charged_rho if units else None)}
        if units is not None:
            sections[units.config.universe] = mf.privacy_section(units.config, units.spent_rho, units.allocations,
                                                                 other=self.config)
        return sections


def stage_output(value: T | None, what: str) -> T:
    """What an earlier stage left on the run; a stage called out of order is refused with a public message
    (not an ``assert``, which ``python -O`` removes)."""
    if value is None:
        raise CensusDPError(f"internal error: {what} is missing: the release's stages ran out of order")
    return value


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def start_release(config: ReleaseConfig, out_root: Path, rng: RandomSource, run_id: str | None = None, *,
                  write_estimates: EstimatesWriter | None = None) -> Release:
    """Allocate the budget (exactly, checked) and create the run's temporary folder."""
    require_estimates_writer(config, write_estimates)
    run_id = run_id or new_run_id()
    out_root.mkdir(parents=True, exist_ok=True)
    final_dir = out_root / run_id
    if final_dir.exists():
        raise CensusDPError(f"{final_dir}: a run with this id already exists")
    work_dir = out_root / f".{run_id}.partial"
    work_dir.mkdir()
    return new_release(config, rng, run_id, final_dir, work_dir, mf.now(), write_estimates)


def new_release(config: ReleaseConfig, rng: RandomSource, run_id: str, final_dir: Path, work_dir: Path,
                started_at: str, write_estimates: EstimatesWriter | None = None) -> Release:
    """A release's state with its universes: the persons in ``work_dir``, the units in its ``units/`` folder."""
    universes = [UniverseRun(config, allocate(config), work_dir)]
    if config.units is not None:
        (work_dir / UNITS_DIR).mkdir(exist_ok=True)
        universes.append(UniverseRun(config.units, allocate(config.units), work_dir / UNITS_DIR))
    return Release(config, rng, run_id, final_dir, work_dir, started_at, universes, write_estimates)
