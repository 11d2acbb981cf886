"""The two ways a release ends: published (manifest, report and figure written, every promise checked on the files,
then one rename into place) or abandoned (nothing published, the charge kept and marked failed)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from censusdp.pipeline.budget.ledger.charges import ChargeStatus, FailureReason
from censusdp.pipeline.config.ledger_location import public_config_raw
from censusdp.pipeline.io import manifest as mf
from censusdp.pipeline.io.budget_figure import budget_shares_png
from censusdp.pipeline.io.verify import require_promises_kept
from censusdp.pipeline.release.draws import claim_path
from censusdp.pipeline.release.full_information import discard_targets
from censusdp.pipeline.release.run import Published, Release, stage_output
from censusdp.pipeline.release.universes import units_markdown, units_section

log = logging.getLogger("censusdp")
COMPLETE_MARKER = "complete.json"  # written last by the measure stage: every measurement is saved
SHARES_PLOT = "budget_shares.png"
MEASURE_CLAIM = ".measure"  # the measure stage's claim in the run's temporary folder (release.draws.claim_draw)


def publish(run: Release, runner: Any = None) -> Path:
    """Write the manifest and report, check every promise on the files (level by level on the ``runner``, if any),
    then move the run into place atomically."""
    persons = run.persons
    tree = stage_output(persons.tree, "the geography (validate_inputs, or a re-run's measurements)")
    config = run.config
    manifest = {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "finished_at": mf.now(),
        "code_version": mf.code_version(),
        "config": mf.resolved_config(config),
        "config_raw": public_config_raw(config.raw),
        "levels": [{"name": lv.name, "width": lv.width, **({"column": lv.column} if lv.column else {}),
                    "nodes": tree.n_nodes(i)} for i, lv in enumerate(config.levels)],
        "privacy": run.privacy[config.universe],
        "allocation": allocation_of(run),
        "invariants": mf.invariants_section(config),
        "not_protected": mf.not_protected(config),
        "random_source": {"name": run.rng.name, "publishable": run.rng.publishable},
        "warnings": persons.warnings,
        "measurements": persons.measurement_entries("measurements"),
        "tables": {lv.name: f"tables/{lv.name}.parquet" for lv in config.levels},
        "summary_tables": run.summary_tables,
        "expected_errors": run.expected_errors or {},
        "reconciliation": persons.diagnostics,
        **({"units": units_section(run)} if run.units is not None else {}),
        "ledger": ledger_section(run),
        **run.manifest_extra,
    }
    mf.write_manifest(run.work_dir / "manifest.json", manifest)
    report = mf.report_markdown(manifest, persons.allocations)
    if run.units is not None:
        report += units_markdown(manifest["units"], str(run.charged_rho))
    report += f"\n![budget shares by level and query]({SHARES_PLOT})\n"
    (run.work_dir / "report.md").write_text(report)
    if config.output.estimates and run.write_estimates is not None:  # required at start_release
        run.write_estimates(run, manifest)  # GLS estimates with standard errors: post-processing (Thm 19.25)
    for universe in run.universes:  # the measure stage's claim is the run's own bookkeeping, not published
        claim_path(universe.work_dir, MEASURE_CLAIM).unlink(missing_ok=True)
    drawn = start_budget_figure(run)  # drawing since the first reconciled level, unless publish is called alone
    # recomputed from the files as written (public: any process may read them): a broken one publishes nothing
    require_promises_kept(run.work_dir, runner.map if runner is not None else map)
    shares_png, run.pending_figure = drawn(), None
    (run.work_dir / SHARES_PLOT).write_bytes(shares_png)
    run.work_dir.rename(run.final_dir)
    run.published = Published(run.final_dir, report, shares_png)
    ledger, run.ledger = run.ledger, None  # published: from here on a failure must not mark the run failed
    if ledger is not None:
        try:
            ledger.set_status(run.run_id, ChargeStatus.PUBLISHED)
        except Exception as error:  # noqa: BLE001 - the run is out; its charge stands either way
            log.warning("published, but the ledger status could not be updated (%s)", type(error).__name__)
    log.info("published %s", run.final_dir)
    return run.final_dir


def allocation_of(run: Release) -> list[dict[str, Any]]:
    """The manifest's ``allocation``: each level and query's rho and sigma² (public, from the configuration)."""
    return mf.allocation_section(run.persons.allocations, sensitivity1=run.config.budget.sensitivity1)


def start_budget_figure(run: Release) -> Callable[[], bytes]:
    """Start drawing ``budget_shares.png`` (the manifest's levels and allocation: public values) in a thread of its
    own, once per run: from the first reconciled level on, while the driver mostly waits for its runner, so that it
    competes with none of publish's own work.  Returns the call that waits for it (``Release.pending_figure``)."""
    if run.pending_figure is None:
        manifest = {"levels": [{"name": level.name} for level in run.config.levels], "allocation": allocation_of(run)}
        drawing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget-figure")
        run.pending_figure = drawing.submit(budget_shares_png, manifest).result
        drawing.shutdown(wait=False)  # the thread ends once the figure is drawn
    return run.pending_figure


def ledger_section(run: Release) -> dict[str, Any] | None:
    """Where the release was charged and what: ``charged_rho`` is the ledger's own record of the charge."""
    if run.ledger is None:
        return None
    dataset = run.dataset or run.config.ledger.dataset
    entry = run.ledger.charge_of(run.run_id)
    return {"location": run.ledger.location, "dataset": dataset, "configured_dataset": run.config.ledger.dataset,
            "cap_rho": str(run.ledger.datasets()[dataset]), "remaining_rho": str(run.ledger.remaining(dataset)),
            "charged": entry is not None, "charged_rho": str(entry.rho) if entry is not None else None}


def abandon(run: Release) -> None:
    """A failed run publishes nothing; its charge stays and is marked failed.  If every measurement was saved, the
    temporary folder is kept for ``release --resume RUN_ID`` (no new noise); otherwise it is removed."""
    if run.ledger is not None:
        run.ledger.set_status(run.run_id, ChargeStatus.FAILED, run.failure_reason or FailureReason.RUN_ERROR.value)
    run.pending_expected_errors = run.pending_figure = None
    for universe in run.universes:
        discard_targets(universe)  # the GLS scratch files (public, but never published)
        universe.input_files = None
    if run.persons.measurements_dir is None and (run.work_dir / "measurements" / COMPLETE_MARKER).exists():
        log.warning("run %s failed after its measurements were saved: finish it with --resume %s",
                    run.run_id, run.run_id)
        return
    shutil.rmtree(run.work_dir, ignore_errors=True)
