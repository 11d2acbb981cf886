"""The expected error of the main P.L. 94-171 counts at every summary level, for the report (public values only):
per level and variable, the root mean square over the level's nodes of the exact standard error of the node's GLS
estimate (``postprocess.gls_areas``), which depends on the design only, not on the data or the noise.  The published
counts are at least as accurate with full-information reconciliation (BENCHMARKS.md), and may be less with
``level_by_level`` (the report says which).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.config.schema import Query, Schema
from censusdp.pipeline.io.summary_tables import table_variables, variable_matrix
from censusdp.pipeline.release.full_information import spec_of
from censusdp.pipeline.release.run import UniverseRun, stage_output
from censusdp.postprocess.gls_areas import mean_area_variances
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
    queries: tuple[tuple[tuple[Query, Fraction], ...], ...]  # per level: each measured query and its σ²
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


def compute_expected_errors(job: ExpectedErrorsJob) -> tuple[dict[str, Any], str | None]:
    """The job's expected errors (empty, with the reason, where the GLS is not defined), on the driver or a worker."""
    schema = job.schema
    variables = [v for v in table_variables(SummaryTables.PL94) if v.name in MAIN_VARIABLES]
    weights = variable_matrix(schema, variables).T.toarray().astype(float)
    depth, n_nodes = len(job.parents), job.n_nodes
    levels = [StreamLevel(job.parents[level], [(spec_of(schema, q), float(s2)) for q, s2 in job.queries[level]],
                          [spec_of(schema, schema.parse_query(name)) for name in job.invariants.get(level, ())],
                          [(0, n_nodes[level])]) for level in range(depth)]  # the variances need no data
    node = np.arange(n_nodes[-1])
    out: dict[str, dict[str, float]] = {}
    try:
        for level in range(depth - 1, -1, -1):  # node: every block's ancestor at this level
            rms = np.sqrt(mean_area_variances(levels, schema.shape, node, n_nodes[level], weights))
            rms[rms < ZERO] = 0.0  # invariant counts: exactly 0 up to the solver's rounding
            out[job.level_names[level]] = {v.name: float(rms[j]) for j, v in enumerate(variables)}
            if level:
                node = job.parents[level][node]
    except ValueError as error:  # public: a design problem (unidentifiable cells), never a data value
        return {}, str(error)
    return {"variables": {v.name: MAIN_VARIABLES[v.name] for v in variables},
            "reconciliation": job.reconciliation,
            "levels": {name: out[name] for name in job.level_names}}, None
