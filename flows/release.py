"""The release as a Prefect flow: the same stages as ``pipeline.release.stages.run_release``, one task per
stage and level.

Parameters are paths and budgets only.  Tasks share one in-memory ``ReleaseRun`` (whose repr is public) and
never return data; results are not persisted and inputs are never hashed for caching (NO_CACHE).
"""

from __future__ import annotations

import base64
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.settings import hardened_prefect
from pipeline.config.model import ReleaseConfig
from pipeline.config.options import insecure_seed_is_allowed, load_release_config, random_source
from pipeline.errors import CensusDPError, type_only_errors
from pipeline.release import stages
from pipeline.release.runner import make_runner
from pipeline.uncertainty.gls import write_estimates
from postprocess import ReconciliationError

PUBLIC = (ReconciliationError,)  # its messages carry sizes and statuses only, never a count
TASK_OPTIONS = {"cache_policy": NO_CACHE, "persist_result": False, "log_prints": False, "retries": 0}

start_task = task(type_only_errors(stages.start_release, PUBLIC), name="allocate-budget", **TASK_OPTIONS)
read_task = task(type_only_errors(stages.read_files, PUBLIC), name="read-files", **TASK_OPTIONS)
charge_task = task(type_only_errors(stages.charge, PUBLIC), name="charge-ledger", **TASK_OPTIONS)
validate_task = task(type_only_errors(stages.validate_inputs, PUBLIC), name="validate-values", **TASK_OPTIONS)
measure_task = task(type_only_errors(stages.measure, PUBLIC), name="measure", **TASK_OPTIONS)
reconcile_task = task(type_only_errors(stages.reconcile, PUBLIC), name="reconcile", **TASK_OPTIONS)
publish_task = task(type_only_errors(stages.publish, PUBLIC), name="publish", **TASK_OPTIONS)


@flow(name="censusdp-release", persist_result=False, log_prints=False, validate_parameters=True)
def release_flow(config_path: str, out_dir: str | None = None, microdata: str | None = None,
                 geography: str | None = None, fmt: str | None = None, rho: str | int | float | None = None,
                 runner: str | None = None, insecure_seed: int | None = None) -> str:
    """Release one dataset: returns the path of the published run directory.

    With a Dask runner, each reconcile task maps its chunks on a Dask client (workers import no Prefect, so
    no ephemeral server is started per worker; they receive file locations and public values only).
    ``rho`` may be a number as `prefect deployment run ... -p rho=1.5` sends it (read as the decimal written).
    """
    if insecure_seed is not None and not insecure_seed_is_allowed():
        # a deployment parameter alone must not switch off the CSPRNG: only the CLI's --insecure-seed flag
        raise CensusDPError("insecure_seed is for tests only: pass --insecure-seed on the censusdp command line")
    with hardened_prefect():  # again here: a deployment run may come from a worker that never entered them
        return _release(load_release_config(config_path, microdata, geography, fmt, rho, runner), out_dir,
                        insecure_seed)


def _release(config: ReleaseConfig, out_dir: str | None, insecure_seed: int | None) -> str:
    out_root = Path(out_dir).resolve() if out_dir else config.output.dir
    run = start_task(config, out_root, random_source(insecure_seed), write_estimates=write_estimates)
    chunk_runner = None
    try:
        chunk_runner = make_runner(config.runner)
        read_task(run)
        charge_task(run)
        validate_task(run)
        for level, spec in enumerate(config.levels):
            measure_task.with_options(task_run_name=f"measure-{spec.name}")(run, level)
        for level, spec in enumerate(config.levels):
            reconcile_task.with_options(task_run_name=f"reconcile-{spec.name}")(run, level, chunk_runner)
        final_dir = publish_task(run)
    except BaseException:
        stages.abandon(run)
        raise
    finally:
        if chunk_runner is not None:
            chunk_runner.close()
    report = (final_dir / "report.md").read_text()
    plot = base64.b64encode((final_dir / stages.SHARES_PLOT).read_bytes()).decode()
    report = report.replace(f"({stages.SHARES_PLOT})", f"(data:image/png;base64,{plot})")
    create_markdown_artifact(key="censusdp-budget", markdown=report,
                             description="Budget, (epsilon, delta) and reconciliation summary (public values)")
    return str(final_dir)
