"""Finishing from saved measurements: ``censusdp postprocess RUN_DIR`` (a new run folder, a zero-rho ledger entry)
and ``censusdp release --resume RUN_ID`` (the run's own id and its one charge).  Both read the noisy measurements,
the invariants and the configuration, never the microdata, and draw no noise: post-processing (Thm 19.25).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from censusdp.geography.tree import build_tree
from censusdp.pipeline.budget.ledger.charges import Charge, ChargeStatus, PrivacyLedger, config_digest
from censusdp.pipeline.config.ledger_location import default_ledger_location
from censusdp.pipeline.config.load import apply_overrides, parse_recorded_config
from censusdp.pipeline.config.model import ReleaseConfig
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.io.measurements import (
    level_location,
    measurements_digest,
    read_chunk_plan,
    read_invariants,
    read_lowest_geoids,
)
from censusdp.pipeline.io.run_folder import read_record
from censusdp.pipeline.release import stages
from censusdp.pipeline.release.lowest_parts import MICRODATA
from censusdp.pipeline.release.run import UNITS_DIR, Release, UniverseRun, new_release


class RecordedSource:
    """Stands in for the random source of a run whose noise was already drawn; refuses to draw more."""

    can_draw = False

    def __init__(self, name: str, publishable: bool) -> None:
        self.name, self.publishable = name, publishable

    def uniform_uint64(self, size: int) -> np.ndarray:
        raise AssertionError("post-processing must not draw noise")

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        raise AssertionError("post-processing must not draw noise")

    def bind(self, secret: bytes) -> None:
        raise AssertionError("post-processing is never charged")


def load_measured(run: UniverseRun, measurements: Path) -> None:
    """Rebuild a universe's tree, each level's chunk plan and the invariants from a measurements folder."""
    schema, config = run.schema, run.config
    n_queries = len(run.level_allocations(-1))
    run.tree = build_tree(config.levels, read_lowest_geoids(measurements, config.levels[-1].name, n_queries))
    for level, spec in enumerate(config.levels):
        queries = [schema.parse_query(a.query) for a in run.level_allocations(level)]
        plan = read_chunk_plan(measurements, spec.name, len(queries), schema.query_cells(queries[0]))
        if not plan or plan[-1][1] != run.tree.n_nodes(level):
            raise CensusDPError(f"{measurements / level_location(measurements, spec.name)}: does not match the run's "
                                "geography")
        run.chunk_plan[level] = plan
    run.invariants = read_invariants(measurements, config, run.tree)


def _reconcile_and_publish(release: Release, source_dir: Path, rerun: bool) -> Path:
    """The stages from the GLS on, for every universe; a re-run (``rerun``) reads the measurements where they lie in
    ``source_dir``, the published run (each universe's folder where its work folder is: the units' in units/)."""
    if rerun:
        for universe in release.universes:
            universe.measurements_dir = source_dir / universe.work_dir.relative_to(release.work_dir) / "measurements"

    def prepare(loaded: Release) -> None:
        for universe in loaded.universes:
            load_measured(universe, universe.measurements)

    return stages.run_stages(release, stages.FROM_MEASUREMENTS, prepare=prepare)


def postprocess_run(run_dir: Path, out_root: Path | None = None, solver: str | None = None,
                    runner: str | None = None, ledger: str | None = None, *,
                    write_estimates: stages.EstimatesWriter | None = None, reconciliation: str | None = None
                    ) -> Path:
    """Re-run reconciliation and rounding on ``run_dir``'s measurements (any ``reconciliation`` is free); returns the
    new run folder.  The ledger is never one a run's files name; without the run's charge there, not publishable."""
    run_dir = run_dir.resolve()
    manifest = read_record(run_dir / "manifest.json", "not a censusdp run folder (no readable manifest.json)")
    config, book, charge = _recorded(manifest["config_raw"], manifest["run_id"], str(run_dir / "manifest.json"),
                                     Path(manifest["config"]["source"]).parent, ledger or default_ledger_location(),
                                     solver, runner, reconciliation)
    source = RecordedSource(**manifest["random_source"])
    if not _vouched(charge, run_dir / "measurements"):
        source.publishable = False  # the ledger, not an editable manifest, says whether the noise was seeded
    release = stages.start_release(config, (out_root or run_dir.parent).resolve(), source,
                                   write_estimates=write_estimates)
    release.manifest_extra = {"postprocess_of": manifest["run_id"], "charged_rho": "0", "note":
                              "post-processing of the measurements named above: no noise drawn, no budget spent"}
    if charge is not None:  # a zero-rho entry, so the ledger shows every run on the dataset
        book.charge(charge.dataset, release.run_id, 0, config.budget.delta, config_digest(config.raw),
                    source.publishable)
        book.set_status(release.run_id, ChargeStatus.POSTPROCESS)
    return _reconcile_and_publish(release, run_dir, rerun=True)


def _recorded(raw: dict[str, Any], run_id: str, source: str, base: Path, ledger_location: str,
              solver: str | None, runner: str | None, reconciliation: str | None = None
              ) -> tuple[ReleaseConfig, PrivacyLedger, Charge | None]:
    """A run's recorded configuration (only the solver and runner may change), the user's ledger and the run's charge
    there, which must be of that configuration: an edited manifest would state a guarantee the measurements lack."""
    recorded_digest = config_digest(raw)
    apply_overrides(raw, {f"postprocess.{key}": value for key, value in (
        ("solver", solver), ("runner", runner), ("reconciliation", reconciliation)) if value is not None})
    # None keeps the recorded value; the charge's digest is of the recorded table, taken before
    config = parse_recorded_config(raw, source, base=base, ledger_location=ledger_location)
    ledger = PrivacyLedger(config.ledger.location)
    charge = ledger.charge_of(run_id)
    if charge is not None and charge.config_hash != recorded_digest:
        raise CensusDPError(f"run {run_id}: its recorded configuration is not the one the ledger charged (edited?); "
                            "nothing was published")
    return config, ledger, charge


def _vouched(charge: Charge | None, measurements: Path) -> bool:
    """Publishable only if the ledger charged these very measurements (their digest) to a CSPRNG run: a run id
    or a flag edited in a manifest vouches for nothing."""
    return (charge is not None and charge.publishable and charge.measurements is not None
            and charge.measurements == measurements_digest(measurements))


def resume_release(out_root: Path, run_id: str, ledger_location: str, solver: str | None = None,
                   runner: str | None = None, *, write_estimates: stages.EstimatesWriter | None = None) -> Path:
    """Finish run ``run_id`` from its saved measurements, under its existing charge and with the configuration they
    were drawn with; the ledger (the user's, never one the run's files name) must have charged the rho they spent."""
    work_dir = out_root / f".{run_id}.partial"
    marker = read_record(work_dir / "measurements" / stages.COMPLETE_MARKER,
                   f"cannot resume run {run_id}: its measurements were not all saved; start a new release")
    config, ledger, charge = _recorded(marker["config_raw"], run_id, marker["config_source"],
                                       Path(marker["config_source"]).parent, ledger_location, solver, runner)
    if charge is None:
        raise CensusDPError(f"cannot resume run {run_id}: the ledger {ledger.location} has no charge for it")
    stages.require_estimates_writer(config, write_estimates)
    if str(charge.rho) != marker["rho_exact"]:
        raise CensusDPError(f"cannot resume run {run_id}: its measurements spent rho {marker['rho_exact']} but the "
                            f"ledger charged {charge.rho}")
    for leftover in ("tables", MICRODATA, "manifest.json", "report.md", f"{UNITS_DIR}/tables"):
        path = work_dir / leftover
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    recorded = RecordedSource(marker["random_source"]["name"], _vouched(charge, work_dir / "measurements"))
    release = new_release(config, recorded, run_id, out_root / run_id, work_dir, marker.get("started_at", ""),
                          write_estimates)
    release.ledger, release.dataset = ledger, charge.dataset
    if charge.rho < release.charged_rho:  # charged by an earlier version (persons + units): it would overstate it
        raise CensusDPError(f"cannot resume run {run_id}: the ledger charged it rho {charge.rho}, below the per-person "
                            f"bound its measurements cost ({release.charged_rho}); start a new release")
    release.manifest_extra = {"resumed": True}
    return _reconcile_and_publish(release, work_dir, rerun=False)
