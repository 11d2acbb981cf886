"""One release as plain function calls, stage by stage (``STAGES``; the Prefect flow calls the same stages, and
ARCHITECTURE.md describes each).  Whether a release is charged never depends on a confidential value: everything
before ``charge`` looks at the files' structure and the configuration only, and a value check failing after it is a
charged, failed run whose error names a category only (``InputRejectedError``).  A failed run publishes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from censusdp.geography.tree import GeoTree, build_tree
from censusdp.pipeline.budget.ledger.charges import FailureReason
from censusdp.pipeline.config.ledger_location import public_config_raw
from censusdp.pipeline.config.model import MeasureOn, ReleaseConfig
from censusdp.pipeline.dp.random_source import RandomSource
from censusdp.pipeline.errors import CensusDPError, InputError, InputProblem, InputRejectedError
from censusdp.pipeline.io.measurements import measurements_digest, write_invariants
from censusdp.pipeline.io.microdata import InputFiles, geography_rows, geography_units, read_input_files
from censusdp.pipeline.io.summary_tables import write_summary_tables
from censusdp.pipeline.io.tables import LevelTableWriter
from censusdp.pipeline.release.charging import charge
from censusdp.pipeline.release.draws import claim_draw
from censusdp.pipeline.release.expected_errors import (
    compute_expected_errors,
    expected_errors,
    expected_errors_job,
    record_expected_errors,
)
from censusdp.pipeline.release.full_information import ReconciliationMethod, estimate
from censusdp.pipeline.release.lowest_parts import finish_lowest_outputs, lowest_outputs
from censusdp.pipeline.release.measurement_plan import (
    PARTS_DIR,
    level_plans_of,
    plan_measurement,
    run_measurement,
    shared_partition,
    validate_group,
)
from censusdp.pipeline.release.only_child import only_child_levels
from censusdp.pipeline.release.persons_units import check_same_chunks, persons_bounds_of, record_limits, units_bounds_of
from censusdp.pipeline.release.publishing import (  # noqa: F401 - COMPLETE_MARKER, SHARES_PLOT: its interface
    COMPLETE_MARKER,
    MEASURE_CLAIM,
    SHARES_PLOT,
    abandon,
    publish,
    start_budget_figure,
)
from censusdp.pipeline.release.reconcile_chunk import DISAGREEMENTS, RULE_ANSWERS, reconcile_chunk
from censusdp.pipeline.release.run import (  # noqa: F401 - part of this module's interface (run_release, the flow, tests)
    EstimatesWriter,
    Published,
    Release,
    UniverseRun,
    new_run_id,
    require_estimates_writer,
    stage_output,
    start_release,
)
from censusdp.pipeline.release.runner import make_runner, records_on_workers
from censusdp.pipeline.release.support import merge_reports
from censusdp.pipeline.release.tasks import chunk_tasks
from censusdp.pipeline.release.universes import check_same_blocks

log = logging.getLogger("censusdp")


def read_files(release: Release, universe: UniverseRun) -> None:
    """File-level checks (files readable, required columns of usable types): no value is looked at, so a failure is
    free.  Once every universe's are read, the level all are measured in parts at is chosen."""
    universe.input_files = read_input_files(universe.config)
    read = [u.input_files for u in release.universes]
    if universe is release.persons and all(files is not None for files in read):
        release.partition = shared_partition(release.config.levels, read)


def geography_tree(release: Release, run: UniverseRun, files: InputFiles) -> GeoTree:
    """The universe's tree: the units universe's (validated first) where it has the same levels and either the same
    geography file (not read again) or the same lowest-level units, so the two share one copy; else built."""
    units = release.units if run is release.persons else None
    theirs = units.input_files if units is not None and units.config.levels == run.config.levels else None
    if units is None or units.tree is None or theirs is None:
        return build_tree(run.config.levels, geography_units(files))
    if files.geography_format == theirs.geography_format and _same_file(files.geography, theirs.geography):
        return units.tree
    codes = geography_units(files)
    return units.tree if np.array_equal(units.tree.geoids[-1], codes) else build_tree(run.config.levels, codes)


def _same_file(path: Path | None, other: Path | None) -> bool:
    try:
        return path is not None and other is not None and path.samefile(other)
    except OSError:
        return False


def validate_inputs(release: Release, universe: UniverseRun, runner: Any = None) -> None:
    """Value-level checks, after the charge and before any noise: the tree, then every record, group by group where
    it will be measured, nothing kept.  A failure is charged and names its category only; every group is checked
    even after one, so how long a failing run takes does not say where."""
    stage_output(release.ledger, "the ledger charge (charge)")
    config, files = universe.config, stage_output(universe.input_files, "the input files (read_files)")
    problem: InputProblem | None = None
    try:
        universe.tree = geography_tree(release, universe, files)  # its codes not held through the groups' checks
    except InputError as error:
        problem = error.category
    except ValueError:  # the geography's own structure (codes that do not nest): public, but named by category
        problem = InputProblem.GEOGRAPHY
    if problem is None:
        try:
            plan = plan_measurement(universe.tree, files, level_plans_of(config, universe.allocations), None,
                                    config.universe.value, config.chunk_cells, None, release.partition)
        except InputError as error:
            problem = error.category
        else:
            place = runner if records_on_workers(config, runner) else make_runner("local")
            any_record = False
            for found, seen in place.map(validate_group, plan.groups):
                problem, any_record = problem or found, any_record or seen
            if problem is None and not any_record:
                problem = InputProblem.EMPTY
    if problem is not None:  # raised here, outside any handler, so no trace of the detailed error travels on
        _reject(release, problem)
    sizes = ", ".join(f"{lv.name}={universe.tree.n_nodes(i)}" for i, lv in enumerate(config.levels))
    log.info("geography tree built: %s nodes", sizes)


def _reject(release: Release, problem: InputProblem) -> None:
    """A value-level refusal: the ledger's category, and the ``censusdp check`` command that shows where."""
    config = release.config
    release.failure_reason = f"{FailureReason.INPUT_VALIDATION.value}:{problem.value}"
    geography = f" --geography {config.input.geography}" if config.input.geography else ""
    files = f"--microdata {config.input.path} --format {config.input.format}"
    if config.units is not None:
        files += f" --units {config.units.input.path}"
    raise InputRejectedError(problem, f"censusdp check {config.source} {files}{geography}")


def _warn_delta(universe: UniverseRun) -> None:
    """Def. 19.6 pitfall: delta must be much smaller than 1/n.  n is compared only when it is public (the root
    total is an invariant, read from its published value): otherwise the warning itself would disclose a bit."""
    config = universe.config
    total = next((i.query.name for i in config.invariants
                  if i.query.attributes == () and config.levels[0].name in i.levels), None)
    values = [i.values for i in universe.invariants.get(0, []) if i.name == total]
    if total is None or not values:
        universe.warnings.append("delta was not checked against 1/n: the population size is not public (no total "
                            "invariant at the root); make sure delta is much smaller than 1/n")
    elif config.budget.delta >= Fraction(1, max(1, int(values[0].sum()))):
        universe.warnings.append("delta is not much smaller than 1/n for this dataset: choose a smaller delta")
        log.warning(universe.warnings[-1])


def measure(release: Release, universe: UniverseRun, runner: Any = None) -> None:
    """Draw every level's noisy measurements and write them with the invariants, once per run (the draw is claimed
    first); the persons, measured last, record them in the ledger and mark them complete."""
    claim_draw(str(universe.work_dir), MEASURE_CLAIM)
    tree = stage_output(universe.tree, "the geography (validate_inputs, or a re-run's measurements)")
    files = stage_output(universe.input_files, "the input files (read_files)")
    config, measurements = universe.config, universe.work_dir / "measurements"
    on_workers = records_on_workers(config, runner)
    level_plans = level_plans_of(config, universe.allocations)
    log.info("measuring %d levels (%s)", tree.depth, "on the Dask workers" if on_workers else "on the driver")
    try:
        plan = plan_measurement(tree, files, level_plans, release.rng, config.universe.value, config.chunk_cells,
                                universe.work_dir / PARTS_DIR if on_workers else None, release.partition,
                                record_limits(release, universe), runner.workers if on_workers else 1)
        measured = run_measurement(plan, level_plans, tree, measurements, runner, on_workers,
                                   config.schema.n_cells, config.chunk_cells)
    except InputError as error:  # checked before any noise; a file changed since: still category only
        problem = error.category
    else:
        problem = InputProblem.PERSONS_UNITS if measured.rules_broken else None
    if problem is not None:
        _reject(release, problem)
    universe.input_files = None  # every record is measured: the inputs are no longer needed
    universe.chunk_plan.update(measured.chunk_plan)
    universe.invariants.update(measured.invariants)
    _warn_delta(universe)
    write_invariants(measurements, [(lv.name, tree.geoids[i], universe.invariants[i])
                                    for i, lv in enumerate(config.levels)])
    if universe is not release.persons:
        return
    if release.ledger is not None:  # the charge now names what it bought
        release.ledger.record_measurements(release.run_id, measurements_digest(measurements))
    # from here on the run can be finished with --resume without drawing noise again
    marker = {"run_id": release.run_id, "started_at": release.started_at, "config_source": config.source,
              "config_raw": public_config_raw(config.raw), "rho_exact": str(release.charged_rho),
              "random_source": {"name": release.rng.name, "publishable": release.rng.publishable}}
    (measurements / COMPLETE_MARKER).write_text(json.dumps(marker) + "\n")


def reconcile(release: Release, universe: UniverseRun, level: int, runner: Any = None) -> None:
    """Reconcile one level against its (already fixed) parent level, round, and write its table (the lowest level's
    by its tasks, part by part); with units, within the bounds of ``release.persons_units``."""
    tree = stage_output(universe.tree, "the geography (validate_inputs, or a re-run's measurements)")
    name = universe.config.levels[level].name
    lowest = level == tree.depth - 1
    persons, units = universe is release.persons, release.units
    if units is not None and persons and lowest:
        check_same_chunks(release, level)
    # the persons' bounds come from the units' invariants; the units' were set as the persons' blocks were published
    bounds = persons_bounds_of(release, level) if units is not None and persons else universe.bounds.get(level)
    outputs = lowest_outputs(release) if persons and lowest else None
    tasks, n_chunks = chunk_tasks(release, universe, level, outputs, bounds), len(universe.chunk_plan[level])
    log.info("level %s: reconciling %d nodes in %d chunks", name, tree.n_nodes(level), n_chunks)
    parts, reports, found, answers = [], [], [], []
    with ExitStack() as stack:  # the table's writer, then a runner of our own, closed however the level ends
        runner = runner or stack.enter_context(closing(make_runner("local")))
        if persons and level == 0:
            start_budget_figure(release)
        if persons and (outputs is not None or (level == 0 and not runner.driver_takes_next())):
            _start_expected_errors(release, universe, runner)
        writer = (stack.enter_context(closing(LevelTableWriter(universe.work_dir / "tables" / f"{name}.parquet",
                                                               universe.schema))) if outputs is None else None)
        for index, (counts, report) in enumerate(runner.map(reconcile_chunk, tasks)):
            start, stop, _ = universe.chunk_plan[level][index]  # results come in submission order: the plan's
            if writer is not None:
                writer.write_chunk(tree.geoids[level][start:stop], counts)
            parts.append(counts)
            found.append(report.pop(DISAGREEMENTS, {}))
            answers.append(report.pop(RULE_ANSWERS, None))
            reports.append(report)
        if len(parts) != n_chunks:
            raise CensusDPError("internal error: a chunk's reconciliation did not come back")
    if outputs is not None and release.pending_expected_errors is not None:
        pending, release.pending_expected_errors = release.pending_expected_errors, None
        release.expected_errors = record_expected_errors(universe, pending())
    if outputs is not None:  # with units, their lowest tasks write the summary tables
        finish_lowest_outputs(outputs, len(parts), found, persons_only=units is not None)
        if units is not None:
            units.lowest_outputs = outputs
            answers[:] = [a for a in answers if a is not None]
            units.bounds = units_bounds_of(release, answers)  # which empties ``answers``: held once
    elif lowest and universe.lowest_outputs is not None:  # the units' lowest level: every lowest output is written
        universe.disagreements = finish_lowest_outputs(universe.lowest_outputs, len(parts), found) or {}
        universe.lowest_outputs = None
    if not lowest:
        universe.counts[level] = sp.vstack(parts, format="csr")
    config = universe.config  # the diagnostics name the levels whose measurements the fit used
    used = ([lv.name for lv in config.levels] if config.reconciliation_method is ReconciliationMethod.FULL_INFORMATION
            else [name, *(config.levels[d].name for d in only_child_levels(tree, level))])
    universe.diagnostics[name] = {**merge_reports(reports), "measurements_of": used}
    if lowest and not (persons and release.config.output.estimates):
        # only the persons' GLS estimates (where configured) read them from here on; the units' are a value per block
        universe.invariants.clear()


def _start_expected_errors(release: Release, persons: UniverseRun, runner: Any) -> None:
    """The report's expected errors, started on the runner once: the design alone decides them, so they are computed
    beside the upper levels (whose one chunk leaves workers idle), or beside the lowest level's tasks where the
    driver itself runs the upper levels while a cluster starts (a re-run from measurements)."""
    if release.pending_expected_errors is None and (job := expected_errors_job(persons)) is not None:
        release.pending_expected_errors = runner.submit(compute_expected_errors, job)


def tabulate(run: Release) -> None:
    """Write every configured summary table set from the published tables just reconciled (Thm 19.25: free)."""
    persons = run.persons
    tree = stage_output(persons.tree, "the geography (validate_inputs, or a re-run's measurements)")
    names = [lv.name for lv in run.config.levels]
    counts = [persons.counts.get(level) for level in range(len(names))]  # the lowest's: written as it was reconciled
    units = None
    if run.units is not None:  # the same tree: the units universe's housing tables (H1) join the same files
        check_same_blocks(run)
        units = (run.units.schema, [run.units.counts.get(level) for level in range(len(names))])
    for tables in run.config.output.tables:
        run.summary_tables[tables.value] = write_summary_tables(run.work_dir / "tables", tables, persons.schema,
                                                                names, tree.geoids, counts, units)
        log.info("summary tables %s written for %d levels", tables.value, len(names))
    if run.expected_errors is None:  # not computed beside the reconciliation (reconcile)
        run.expected_errors = expected_errors(persons)


@dataclass(frozen=True)
class Stage:
    """One step of a release: ``name`` is its task name in Prefect (per-level runs are ``name-LEVEL``),
    ``function`` does it: ``function(release[, universe][, level][, runner])``."""

    name: str
    function: Callable[..., Any]
    per_level: bool = False  # called once per level, top-down
    needs_runner: bool = False  # also given the chunk runner (local or Dask)
    per_universe: bool = False  # called on each of the release's universes (Release.universes)
    persons_first: bool = False  # per universe, the persons before the units (else the units first)

    def calls(self, release: Release, runner: Any) -> Iterator[tuple[Any, ...]]:
        """The stage's calls' arguments, in order."""
        universes = release.universes if self.persons_first else release.universes[::-1]
        for universe in universes if self.per_universe else [None]:
            head = (release,) if universe is None else (release, universe)
            for level in range(len(release.config.levels)) if self.per_level else [None]:
                yield head + ((level,) if level is not None else ()) + ((runner,) if self.needs_runner else ())


# The one stage sequence: the plain run, the Prefect flow, post-processing re-runs and --resume iterate it.
STAGES = (
    Stage("read-files", read_files, per_universe=True),
    Stage("charge-ledger", charge, needs_runner=True),
    Stage("validate-values", validate_inputs, needs_runner=True, per_universe=True),
    Stage("measure", measure, needs_runner=True, per_universe=True),
    Stage("estimate", estimate, needs_runner=True, per_universe=True),
    # the persons first: the units are reconciled within the bounds the published persons imply
    Stage("reconcile", reconcile, per_level=True, needs_runner=True, per_universe=True, persons_first=True),
    Stage("tabulate", tabulate),
    Stage("publish", publish, needs_runner=True),
)
# a re-run or a resume from saved measurements: no data read, no noise drawn
FROM_MEASUREMENTS = tuple(s for s in STAGES if s.name in ("estimate", "reconcile", "tabulate", "publish"))

StageCall = Callable[[Stage, Callable[..., Any], tuple[Any, ...]], Any]


def replaced(stages: tuple[Stage, ...], **functions: Callable[..., Any]) -> tuple[Stage, ...]:
    """``stages`` with the named stages' functions replaced: ``replaced(STAGES, reconcile=crash)``."""
    names = {stage.name.replace("-", "_") for stage in stages}
    if unknown := set(functions) - names:
        raise ValueError(f"no such stage: {', '.join(sorted(unknown))}")
    return tuple(replace(stage, function=functions.get(stage.name.replace("-", "_"), stage.function))
                 for stage in stages)


def call_directly(stage: Stage, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return function(*args)


def run_stages(release: Release, stages: tuple[Stage, ...] = STAGES, *, call: StageCall = call_directly,
               prepare: Callable[[Release], None] | None = None) -> Path:
    """Run ``stages`` in order on ``release``, each call through ``call`` (the flow's: a Prefect task), after
    ``prepare``; return what publish returns.  Any failure abandons the release; the runner is always closed."""
    runner, result = None, None
    try:
        if prepare is not None:
            prepare(release)
        for stage in stages:
            if stage.needs_runner and runner is None:  # made once the tree is known: "auto" sizes it by the chunks
                runner = make_runner(release.config.runner, lowest_chunks(release.persons),
                                     driver_helps=release.config.measure_on is MeasureOn.AUTO)
                release.manifest_extra["runner"] = runner.name  # what ran, "auto" resolved
            for args in stage.calls(release, runner):
                result = call(stage, stage.function, args)
        return result
    except BaseException:
        abandon(release)
        raise
    finally:
        if runner is not None:
            runner.close()


def lowest_chunks(universe: UniverseRun) -> int:
    """About how many independent chunks the universe's lowest level is reconciled in, the work a runner shares out,
    from public facts only (the runner is made before the charge): a re-run's chunk plan, read with its
    measurements; else the geography file's units; without one, nothing public says there is work to share: one."""
    config = universe.config
    if universe.chunk_plan:
        return len(universe.chunk_plan[len(config.levels) - 1])
    units = geography_rows(universe.input_files) if universe.input_files is not None else None
    if units is None:
        return 1
    per_chunk = max(1, config.chunk_cells // universe.schema.n_cells)
    return max(1, -(-units // per_chunk))


def run_release(config: ReleaseConfig, out_root: Path, rng: RandomSource, run_id: str | None = None, *,
                write_estimates: EstimatesWriter | None = None, stages: tuple[Stage, ...] = STAGES) -> Path:
    """The whole release without Prefect; returns the published run directory."""
    return run_stages(start_release(config, out_root, rng, run_id, write_estimates=write_estimates), stages)
