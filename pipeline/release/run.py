"""The state of one release and its start: ``ReleaseRun`` (what the stages pass forward in memory) and
``start_release`` (the budget allocated exactly, the temporary folder made).  The stages are in
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
EstimatesWriter = Callable[["ReleaseRun", dict[str, Any]], object]


def require_estimates_writer(config: ReleaseConfig, write_estimates: EstimatesWriter | None) -> None:
    """``output.estimates`` needs a writer from the caller; refused before anything is read or charged."""
    if config.output.estimates and write_estimates is None:
        raise CensusDPError("output.estimates = true, but this caller passed no estimates writer "
                            "(pipeline.uncertainty.estimates.write_release_estimates)")


@dataclass
class ReleaseRun:
    """State of one release in progress.  Holds confidential arrays; its repr shows public facts only."""

    config: ReleaseConfig
    rng: RandomSource
    run_id: str
    final_dir: Path
    work_dir: Path
    allocations: tuple[QueryAllocation, ...]
    started_at: str
    tree: GeoTree | None = None
    input_files: InputFiles | None = None  # the input files (paths, checked at file level) until measured
    chunk_plan: dict[int, list[tuple[int, int, ChunkLocation]]] = field(default_factory=dict)  # (start, stop, where)
    invariants: dict[int, list[QueryInvariant]] = field(default_factory=dict)  # published exactly
    counts: dict[int, sp.csr_matrix] = field(default_factory=dict)  # reconciled, published
    targets: dict[int, LevelTargets] = field(default_factory=dict)  # GLS targets, made per chunk (full information)
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    summary_tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> dictionary, level paths
    expected_errors: dict[str, Any] | None = None  # main P.L. counts' standard errors (reconcile or tabulate)
    # their computation, started on the runner beside the lowest level's reconciliation (release.stages.reconcile)
    disagreements: dict[str, int] = field(default_factory=dict)  # (units) blocks where the universes disagree
    warnings: list[str] = field(default_factory=list)
    measurements_dir: Path | None = None  # where the noisy measurements are read from (default: this run's)
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    ledger: PrivacyLedger | None = None  # set once the run's budget is charged
    dataset: str | None = None  # the ledger dataset charged (the data's own, whatever the config names)
    failure_reason: str | None = None  # the ledger's category for a failure (never a row or a value)
    # GLS estimates of the run folder (uncertainty/, above this layer): injected by the caller when configured
    write_estimates: EstimatesWriter | None = None
    published: Published | None = None  # set by publish
    # the housing-unit universe ([units]): a run of its own in work_dir/units, charged, validated and published
    # with this one; main is False for it (no ledger record of its own, no complete marker, no publish)
    units: ReleaseRun | None = None
    main: bool = True
    partition: int | None = None  # the partition level both universes are measured at (release.measurement_plan)
    # the units universe's, tied to the persons (release.persons_units): each level's bounds on its rule answers,
    # set once the persons' blocks are published, and the lowest outputs whose summary tables its lowest tasks write
    bounds: dict[int, Any] = field(default_factory=dict)
    lowest_outputs: Any = None

    def measurement_entries(self, prefix: str) -> dict[str, str]:
        """The manifest's ``measurements``: each level's folder or file, ``prefix``-relative in this run's folder,
        or absolute where a re-run read them from."""
        read_from = self.measurements_dir
        directory = Path(read_from) if read_from else self.work_dir / "measurements"
        return {lv.name: str(directory / level_location(directory, lv.name)) if read_from
                else f"{prefix}/{level_location(directory, lv.name)}" for lv in self.config.levels}

    def __repr__(self) -> str:
        return f"ReleaseRun(run_id={self.run_id!r}, work_dir={str(self.work_dir)!r})"

    @property
    def schema(self) -> Schema:
        return self.config.schema

    @property
    def spent_rho(self) -> Fraction:
        """What the release costs, recomputed from every query's noise through its privacy map (the charge)."""
        budget = self.config.budget
        return composed_rho(self.allocations, sensitivity2_squared=budget.sensitivity2_squared,
                            sensitivity1=budget.sensitivity1)

    @property
    def charged_rho(self) -> Fraction:
        """What the ledger charges and caps for the release: its per-person bound (``per_person_rho``: the persons'
        rho plus four times the units'), the figure the manifest states."""
        return per_person_rho(self.spent_rho, self.units.spent_rho if self.units is not None else None)

    @cached_property
    def privacy(self) -> dict[Universe, dict[str, Any]]:
        """The manifest's privacy section of each universe of this (main) run: public, from the configuration
        alone.  The charge stage reads it before it charges, so an accountant that cannot state the guarantee
        stops the release before anything is spent; publish writes the same sections."""
        units = self.units
        sections = {self.config.universe: mf.privacy_section(
            self.config, self.spent_rho, self.allocations, per_person=self.charged_rho if units else None)}
        if units is not None:
            sections[units.config.universe] = mf.privacy_section(units.config, units.spent_rho, units.allocations,
                                                                 other=self.config)
        return sections

    def universes(self) -> list[ReleaseRun]:
        """The runs a per-universe stage calls, units first: the persons' run writes the complete marker last."""
        return [self.units, self] if self.units is not None else [self]

    def drop_invariants(self) -> None:
        """Called once the lowest level is reconciled: from then on only publish's GLS estimates (the main
        universe's, where configured) read the invariants held here, and their file keeps them.  The units
        universe's hold a value per block and query, on the driver until publish."""
        if not (self.main and self.config.output.estimates):
            self.invariants.clear()

    def level_allocations(self, level: int) -> list[QueryAllocation]:
        name = self.config.levels[level].name
        return list(allocations_of(self.allocations, name))


def stage_output(value: T | None, what: str) -> T:
    """What an earlier stage left on the run; a stage called out of order is refused with a public message
    (not an ``assert``, which ``python -O`` removes)."""
    if value is None:
        raise CensusDPError(f"internal error: {what} is missing: the release's stages ran out of order")
    return value


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def start_release(config: ReleaseConfig, out_root: Path, rng: RandomSource, run_id: str | None = None, *,
                  write_estimates: EstimatesWriter | None = None) -> ReleaseRun:
    """Allocate the budget (exactly, checked) and create the run's temporary folder."""
    require_estimates_writer(config, write_estimates)
    allocations = allocate(config)
    run_id = run_id or new_run_id()
    out_root.mkdir(parents=True, exist_ok=True)
    final_dir = out_root / run_id
    if final_dir.exists():
        raise CensusDPError(f"{final_dir}: a run with this id already exists")
    work_dir = out_root / f".{run_id}.partial"
    work_dir.mkdir()
    run = ReleaseRun(config=config, rng=rng, run_id=run_id, final_dir=final_dir, work_dir=work_dir,
                     allocations=allocations, started_at=mf.now(), write_estimates=write_estimates)
    attach_units(run)
    return run


def attach_units(run: ReleaseRun) -> None:
    """The units universe's run (``[units]``), sharing the random source, id and timing, in ``work_dir/units``."""
    if run.config.units is None:
        return
    (run.work_dir / UNITS_DIR).mkdir(exist_ok=True)
    run.units = ReleaseRun(config=run.config.units, rng=run.rng, run_id=run.run_id,
                           final_dir=run.final_dir / UNITS_DIR, work_dir=run.work_dir / UNITS_DIR,
                           allocations=allocate(run.config.units), started_at=run.started_at, main=False)
