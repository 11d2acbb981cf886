"""One release as plain function calls, stage by stage (the Prefect flow calls the same stages).

    run = start_release(config, out_root, rng)   # budget allocated and checked, temp folder made
    read_inputs(run)                             # microdata -> tree -> histograms (confidential, in memory)
    for level: measure(run, level)               # noise drawn once, measurements written
    for level: reconcile(run, level)             # post-processing from measurements only (Thm 19.25)
    publish(run)                                 # tables, manifest, report; temp folder renamed into place

A failure anywhere removes the temporary folder: a failed run publishes nothing.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from geography.tree import GeoTree, build_tree
from pipeline import manifest as mf
from pipeline.budget import QueryAllocation, allocate, composed_rho
from pipeline.config import ReleaseConfig
from pipeline.errors import CensusDPError, InputError
from pipeline.histograms import all_level_histograms, lowest_histograms
from pipeline.measure import level_invariants, measure_level
from pipeline.measurements_io import write_invariants, write_level_measurements
from pipeline.microdata import lowest_index_of_rows, read_geography, read_microdata
from pipeline.random_source import RandomSource
from pipeline.schema import Schema
from pipeline.tables import write_level_table, write_protected_microdata
from postprocess import LevelResult, QueryInvariant, QueryMeasurement, reconcile_level

log = logging.getLogger("censusdp")


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
    histograms: list[np.ndarray] | None = None
    measurements: dict[int, list[QueryMeasurement]] = field(default_factory=dict)
    invariants: dict[int, list[QueryInvariant]] = field(default_factory=dict)
    counts: dict[int, np.ndarray] = field(default_factory=dict)
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    persons_warning: str | None = None

    def __repr__(self) -> str:
        return f"ReleaseRun(run_id={self.run_id!r}, work_dir={str(self.work_dir)!r})"

    @property
    def schema(self) -> Schema:
        return self.config.schema

    def level_allocations(self, level: int) -> list[QueryAllocation]:
        name = self.config.levels[level].name
        return [a for a in self.allocations if a.level == name]


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def start_release(config: ReleaseConfig, out_root: Path, rng: RandomSource, run_id: str | None = None) -> ReleaseRun:
    """Allocate the budget (exactly, checked) and create the run's temporary folder."""
    allocations = allocate(config)
    run_id = run_id or new_run_id()
    out_root.mkdir(parents=True, exist_ok=True)
    final_dir = out_root / run_id
    if final_dir.exists():
        raise CensusDPError(f"{final_dir}: a run with this id already exists")
    work_dir = out_root / f".{run_id}.partial"
    work_dir.mkdir()
    return ReleaseRun(config=config, rng=rng, run_id=run_id, final_dir=final_dir, work_dir=work_dir,
                      allocations=allocations, started_at=mf.now())


def read_inputs(run: ReleaseRun) -> None:
    """Validate the microdata, build the tree (from the geography file if given) and every level's histograms."""
    config = run.config
    microdata = read_microdata(config)
    width = config.levels[-1].width
    if config.input.geography is not None:
        units = read_geography(config.input.geography, width)
        source = str(config.input.geography)
    else:
        units = np.unique(microdata.codes.to_numpy().astype(np.str_))
        source = "(the microdata itself)"
    try:
        run.tree = build_tree(config.levels, units)
    except ValueError as error:
        raise InputError(source, str(error)) from None
    unit_index = lowest_index_of_rows(microdata, run.tree.geoids[-1], source)
    lowest = lowest_histograms(unit_index, microdata.cells, run.tree.n_nodes(-1), config.schema.n_cells)
    n_persons = len(microdata.cells)
    del microdata, unit_index
    if config.budget.delta >= 1 / n_persons:
        # Def. 19.6 pitfall: delta must be much smaller than 1/n; said without the exact n (confidential)
        run.persons_warning = "delta is not much smaller than 1/n for this dataset: choose a smaller delta"
        log.warning(run.persons_warning)
    run.histograms = all_level_histograms(run.tree, lowest)
    sizes = ", ".join(f"{lv.name}={run.tree.n_nodes(i)}" for i, lv in enumerate(config.levels))
    log.info("geography tree built: %s nodes", sizes)


def measure(run: ReleaseRun, level: int) -> None:
    """Draw the noisy measurements of one level and write them (with the level's invariants)."""
    assert run.tree is not None and run.histograms is not None
    name = run.config.levels[level].name
    allocations = run.level_allocations(level)
    log.info("level %s: drawing noise for %d queries on %d nodes", name, len(allocations), run.tree.n_nodes(level))
    run.measurements[level] = measure_level(run.schema, run.histograms[level], allocations, run.rng)
    write_level_measurements(run.work_dir / "measurements", name, run.tree.geoids[level],
                             run.measurements[level], [a.rho for a in allocations])
    queries = [i.query.name for i in run.config.invariants if name in i.levels]
    run.invariants[level] = level_invariants(run.schema, run.histograms[level], queries)
    if level == run.tree.depth - 1:
        run.histograms = None  # every level is measured: the true counts are no longer needed
        per_level = [(lv.name, run.tree.geoids[i], run.invariants[i]) for i, lv in enumerate(run.config.levels)]
        write_invariants(run.work_dir / "measurements", per_level)


def structural_zero_mask(config: ReleaseConfig) -> np.ndarray | None:
    """Cells fixed at zero: those matching every attribute condition of any declared structural zero."""
    if not config.structural_zeros:
        return None
    schema = config.schema
    multi = np.unravel_index(np.arange(schema.n_cells), schema.shape)
    mask = np.zeros(schema.n_cells, dtype=bool)
    for zero in config.structural_zeros:
        hit = np.ones(schema.n_cells, dtype=bool)
        for name, values in zero.items():
            attribute = schema.attribute(name)
            allowed = [attribute.values.index(v) for v in values]
            hit &= np.isin(multi[schema.names.index(name)], allowed)
        mask |= hit
    return mask


def reconcile(run: ReleaseRun, level: int) -> LevelResult:
    """Reconcile one level against its (already fixed) parent level, round, and write its table."""
    assert run.tree is not None
    name = run.config.levels[level].name
    log.info("level %s: reconciling %d nodes", name, run.tree.n_nodes(level))
    result = reconcile_level(
        run.measurements[level],
        n_cells=run.schema.n_cells,
        parent_counts=run.counts[level - 1] if level > 0 else None,
        parent_index=run.tree.parent[level] if level > 0 else None,
        invariants=run.invariants.get(level, []),
        structural_zeros=structural_zero_mask(run.config),
        solver=run.config.solver,
    )
    run.counts[level] = result.counts
    run.diagnostics[name] = result.report
    write_level_table(run.work_dir / "tables", name, run.schema, run.tree.geoids[level], result.counts)
    return result


def publish(run: ReleaseRun) -> Path:
    """Write the protected microdata, manifest and report, then move the run into place atomically."""
    assert run.tree is not None
    config = run.config
    lowest = run.tree.depth - 1
    if config.output.protected_microdata:
        write_protected_microdata(run.work_dir / "microdata.parquet", run.schema, run.tree.geoids[lowest],
                                  run.counts[lowest], config.output.geocode_parts)
    rho = composed_rho(run.allocations, config.budget.sensitivity2_squared)
    manifest = {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "finished_at": mf.now(),
        "code_version": mf.code_version(),
        "config": mf.resolved_config(config),
        "levels": [{"name": lv.name, "width": lv.width, "nodes": run.tree.n_nodes(i)}
                   for i, lv in enumerate(config.levels)],
        "privacy": mf.privacy_section(config, rho),
        "allocation": mf.allocation_section(run.allocations),
        "invariants": [{"query": i.query.name, "levels": list(i.levels), "protected": False}
                       for i in config.invariants],
        "not_protected": mf.not_protected(config),
        "random_source": {"name": run.rng.name, "publishable": run.rng.publishable},
        "warnings": [w for w in [run.persons_warning] if w],
        "measurements": {lv.name: f"measurements/{lv.name}.parquet" for lv in config.levels},
        "tables": {lv.name: f"tables/{lv.name}.parquet" for lv in config.levels},
        "reconciliation": run.diagnostics,
    }
    mf.write_manifest(run.work_dir / "manifest.json", manifest)
    (run.work_dir / "report.md").write_text(mf.report_markdown(manifest, run.allocations))
    run.work_dir.rename(run.final_dir)
    log.info("published %s", run.final_dir)
    return run.final_dir


def abandon(run: ReleaseRun) -> None:
    """Remove a failed run's temporary folder: nothing is published."""
    shutil.rmtree(run.work_dir, ignore_errors=True)


def run_release(config: ReleaseConfig, out_root: Path, rng: RandomSource, run_id: str | None = None) -> Path:
    """The whole release without Prefect; returns the published run directory."""
    run = start_release(config, out_root, rng, run_id)
    try:
        read_inputs(run)
        for level in range(len(config.levels)):
            measure(run, level)
        for level in range(len(config.levels)):
            reconcile(run, level)
        return publish(run)
    except BaseException:
        abandon(run)
        raise
