"""The release as a Prefect flow: the same stages as ``pipeline.release.stages.run_release``, one task per stage and
level.  Parameters are paths and budgets only; tasks share one in-memory ``Release`` (whose repr is public), never
return data, and are never cached or persisted (NO_CACHE).
"""

from __future__ import annotations

import base64
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from prefect import State, flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.states import Failed
from prefect.utilities.annotations import quote

from censusdp.flows.settings import hardened_prefect
from censusdp.pipeline.config.options import insecure_seed_is_allowed, load_release_config, random_source
from censusdp.pipeline.errors import CensusDPError, type_only_errors
from censusdp.pipeline.release import stages
from censusdp.pipeline.uncertainty.estimates import write_release_estimates
from censusdp.postprocess import ReconciliationError

PUBLIC = (ReconciliationError,)  # its messages carry sizes and statuses only, never a count
TASK_OPTIONS = {"cache_policy": NO_CACHE, "persist_result": False, "log_prints": False, "retries": 0}

start_task = task(type_only_errors(stages.start_release, PUBLIC), name="allocate-budget", **TASK_OPTIONS)


def stage_task(stage: stages.Stage, function: Any) -> Any:
    """A stage's Prefect task: the function, its unexpected errors reported by type only."""
    return task(type_only_errors(function, PUBLIC), name=stage.name, **TASK_OPTIONS)


def call_as_task(stage: stages.Stage, function: Any, args: tuple[Any, ...]) -> Any:
    """Run a stage as its Prefect task (a per-level one named after its level), in this process."""
    run_task = stage_task(stage, function)
    release = args[0]
    universe = args[1] if stage.per_universe else release.persons
    name = stage.name if universe is release.persons else f"{stage.name}-{universe.config.universe.value}"
    if stage.per_level:
        name += f"-{release.config.levels[args[2]].name}"
    # quoted: Prefect would otherwise walk the whole in-memory release looking for futures, at every task
    quoted = [quote(arg) for arg in args]
    return run_task.with_options(task_run_name=name)(*quoted) if name != stage.name else run_task(*quoted)


# A failed run's error, for the caller that started the flow in this process (``run_release_flow``; a served
# deployment's runs keep nothing).  The flow returns a Failed state instead of raising: Prefect writes a raised
# exception into result storage whatever persist_result says.
_FAILURES: ContextVar[dict[str, BaseException] | None] = ContextVar("censusdp_failures", default=None)


@flow(name="censusdp-release", persist_result=False, log_prints=False, validate_parameters=True)
def release_flow(config_path: str, out_dir: str | None = None, microdata: str | None = None,
                 geography: str | None = None, fmt: str | None = None, rho: str | int | float | None = None,
                 runner: str | None = None, insecure_seed: int | None = None, units: str | None = None,
                 no_units: bool = False) -> str | State:
    """Release one dataset; returns the published run directory, or a Failed state with the error's public text
    (the error itself to ``run_release_flow``).  ``rho`` may be a number as
    `prefect deployment run ... -p rho=1.5` sends it (read as the decimal written)."""
    try:
        return type_only_errors(_release, PUBLIC)(config_path, out_dir, microdata, geography, fmt, rho, runner,
                                                  insecure_seed, units, no_units)
    except Exception as error:  # public by now: CensusDPError, ReconciliationError or a type-only InternalError
        context = FlowRunContext.get()
        if context is None or context.flow_run is None:  # the function called as a function, not as a flow run
            raise
        failures = _FAILURES.get()
        if failures is not None:
            failures[str(context.flow_run.id)] = error
        return Failed(message=f"{type(error).__name__}: {error}")


def _release(config_path: str, out_dir: str | None, microdata: str | None, geography: str | None, fmt: str | None,
             rho: str | int | float | None, runner: str | None, insecure_seed: int | None, units: str | None,
             no_units: bool) -> str:
    if insecure_seed is not None and not insecure_seed_is_allowed():
        # a deployment parameter alone must not switch off the CSPRNG: only the CLI's --insecure-seed flag
        raise CensusDPError("insecure_seed is for tests only: pass --insecure-seed on the censusdp command line")
    with hardened_prefect():  # again here: a deployment run may come from a worker that never entered them
        config = load_release_config(config_path, microdata, geography, fmt, rho, runner, units, no_units)
        out_root = Path(out_dir).resolve() if out_dir else config.output.dir
        run = start_task(quote(config), quote(out_root), quote(random_source(insecure_seed)),
                         write_estimates=quote(write_release_estimates))
        final_dir = stages.run_stages(run, call=call_as_task)
        if run.published is None:  # publish sets it before returning
            raise CensusDPError("internal error: the run was published without its report")
        plot = base64.b64encode(run.published.shares_png).decode()
        report = run.published.report_markdown.replace(f"({stages.SHARES_PLOT})", f"(data:image/png;base64,{plot})")
        create_markdown_artifact(key="censusdp-budget", markdown=report,
                                 description="Budget, (epsilon, delta) and reconciliation summary (public values)")
        return str(final_dir)


def run_release_flow(**parameters: Any) -> str:
    """Call the flow here; its error raised again as itself (not Prefect's FailedRun)."""
    failures: dict[str, BaseException] = {}
    token = _FAILURES.set(failures)
    try:
        state = release_flow(**parameters, return_state=True)
    finally:
        _FAILURES.reset(token)
    if state.is_failed():
        error = failures.get(str(state.state_details.flow_run_id))
        raise error if error is not None else CensusDPError(state.message or "the release flow failed")
    return state.result()
