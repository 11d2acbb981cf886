"""The expected error of the main P.L. 94-171 counts at every summary level, for the report (public values only):
per level and variable, the root mean square over the level's nodes of the exact standard error of the node's GLS
estimate (``postprocess.gls_areas``), which depends on the design only, not on the data or the noise.  The published
counts are at least as accurate with full-information reconciliation (BENCHMARKS.md), and may be less with
``level_by_level`` (the report says which).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.config.schema import Query, Schema
from censusdp.pipeline.io.summary_tables import table_variables, variable_matrix
from censusdp.pipeline.release.full_information import spec_of
from censusdp.pipeline.release.run import UniverseRun, stage_output
from censusdp.postprocess.gls_areas import PreparedPlans, mean_variances_of_plans, prepare_plans
from censusdp.postprocess.gls_stream import StreamLevel

log = logging.getLogger("censusdp")
ZERO = 1e-6  # persons: a standard error below this is an invariant's exact zero
MAIN_VARIABLES = {"P1_001N": "total", "P1_003N": "White alone", "P1_004N": "Black alone", "P1_006N": "Asian alone",
                  "P1_009N": "two or more races", "P2_002N": "Hispanic or Latino"}


@dataclass(frozen=True)
class ExpectedErrorsJob:
    """What the expected errors depend on, self-contained for a runner: the design only (public)."""

    schema: Schema
    parents: tuple[np.ndarray, ...]  # per level: each node's parent (the tree)
    n_nodes: tuple[int, ...]  # per level
    queries: tuple[tuple[tuple[Query, Fraction | float], ...], ...]  # per level: each measured query and its σ²
    invariants: dict[int, tuple[str, ...]]  # per level: the queries published exactly
    level_names: tuple[str, ...]
    reconciliation: str

    def __repr__(self) -> str:
        return f"ExpectedErrorsJob(levels={self.level_names})"


def expected_errors_job(run: UniverseRun) -> ExpectedErrorsJob | None:
    """The persons' job, or None without the pl94 tables (nothing to compute)."""
    if SummaryTables.PL94 not in run.config.output.tables:
        return None
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    schema = run.schema
    queries = tuple(tuple((schema.parse_query(a.query), a.sigma2) for a in run.level_allocations(level))
                    for level in range(tree.depth))
    return ExpectedErrorsJob(schema, tuple(tree.parent), tuple(tree.n_nodes(i) for i in range(tree.depth)), queries,
                             {level: tuple(i.name for i in found) for level, found in run.invariants.items()},
                             tuple(lv.name for lv in run.config.levels), str(run.config.reconciliation_method))


def expected_errors(run: UniverseRun) -> dict[str, Any]:
    """``{"variables": name -> label, "levels": level -> name -> root mean square standard error (persons)}``;
    empty without the pl94 tables, or when the GLS is not defined (lowest-level cells no query determines)."""
    job = expected_errors_job(run)
    return record_expected_errors(run, compute_expected_errors(job)) if job is not None else {}


def record_expected_errors(run: UniverseRun, computed: tuple[dict[str, Any], str | None]) -> dict[str, Any]:
    """A job's result for the run: its errors, and the warning of a design where they are not defined."""
    errors, problem = computed
    if problem is not None:
        log.warning("expected errors not computed: %s", problem)
        run.warnings.append(f"the report's expected errors were not computed: {problem}")
    return errors


def main_variables(schema: Schema) -> tuple[tuple[str, ...], np.ndarray]:
    """The report's variables (the main P.L. 94-171 counts) and their weights over the detailed cells (n_vars, C)."""
    variables = [v for v in table_variables(SummaryTables.PL94) if v.name in MAIN_VARIABLES]
    return tuple(v.name for v in variables), variable_matrix(schema, variables).T.toarray().astype(float)


def design_plans(job: ExpectedErrorsJob, plans: Sequence[tuple[np.ndarray, int]] = ()) -> PreparedPlans:
    """Every level's nodes as a plan (each leaf's ancestor), then ``plans``, walked up the tree once for any
    number of designs."""
    depth, n_nodes = len(job.parents), job.n_nodes
    ancestors, node = [np.zeros(0, dtype=np.int64)] * depth, np.arange(n_nodes[-1])
    for level in range(depth - 1, -1, -1):  # node: every leaf's ancestor at this level
        ancestors[level] = node
        if level:
            node = job.parents[level][node]
    every = [(ancestors[level], n_nodes[level]) for level in range(depth)] + list(plans)
    return prepare_plans(job.parents, n_nodes[-1], every)


def design_errors(job: ExpectedErrorsJob, weights: np.ndarray,
                  plans: Sequence[tuple[np.ndarray, int]] | PreparedPlans = ()) -> tuple[np.ndarray, np.ndarray]:
    """Root mean square standard errors of the GLS estimates of each variable (rows of ``weights``), over every
    level's nodes (depth, n_vars) and over each plan's areas (plans (leaf_area, n_areas), or ``design_plans``;
    (n_plans, n_vars)): the tree's covariances formed once for them all.  ``ValueError`` (public) where the GLS
    is not defined."""
    schema, depth = job.schema, len(job.parents)
    levels = [StreamLevel(job.parents[level], [(spec_of(schema, q), float(s2)) for q, s2 in job.queries[level]],
                          [spec_of(schema, schema.parse_query(name)) for name in job.invariants.get(level, ())],
                          [(0, job.n_nodes[level])]) for level in range(depth)]  # the variances need no data
    prepared = plans if isinstance(plans, PreparedPlans) else design_plans(job, plans)
    rms = np.sqrt(mean_variances_of_plans(levels, schema.shape, prepared, weights))
    rms[rms < ZERO] = 0.0  # invariant counts: exactly 0 up to the solver's rounding
    return rms[:depth], rms[depth:]


def compute_expected_errors(job: ExpectedErrorsJob) -> tuple[dict[str, Any], str | None]:
    """The job's expected errors (empty, with the reason, where the GLS is not defined), on the driver or a worker."""
    names, weights = main_variables(job.schema)
    try:
        rms, _ = design_errors(job, weights)
    except ValueError as error:  # public: a design problem (unidentifiable cells), never a data value
        return {}, str(error)
    return {"variables": {name: MAIN_VARIABLES[name] for name in names},
            "reconciliation": job.reconciliation,
            "levels": {level: {name: float(rms[i, j]) for j, name in enumerate(names)}
                       for i, level in enumerate(job.level_names)}}, None
