"""The expected error of the main P.L. 94-171 counts at every summary level, for the report (public values only).

For each level and each of ``MAIN_VARIABLES``, the root mean square over the level's nodes of the exact standard
error of the node's GLS estimate (``postprocess.gls_areas``: a node is the area of the blocks below it).  It
depends on the design only (the tree, every query's σ², which queries are invariant), not on the data or the
noise, so it is known before anyone reads the tables.  It is the error of the GLS estimate, the linear unbiased
fit of every measurement (``estimates/``), not of the published counts: with full-information reconciliation
those were measured to be more accurate above and at the blocks (BENCHMARKS.md, "Areas of your own"); with
``level_by_level`` each level fits its own measurements only and may be less accurate (the report says which).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipeline.config.model import SummaryTables
from pipeline.io.summary_tables import table_variables, variable_matrix
from pipeline.release.full_information import gls_problem
from pipeline.release.run import ReleaseRun, stage_output
from postprocess.gls_areas import mean_area_variances

log = logging.getLogger("censusdp")
ZERO = 1e-6  # persons: a standard error below this is an invariant's exact zero
MAIN_VARIABLES = {"P1_001N": "total", "P1_003N": "White alone", "P1_004N": "Black alone", "P1_006N": "Asian alone",
                  "P1_009N": "two or more races", "P2_002N": "Hispanic or Latino"}


def expected_errors(run: ReleaseRun) -> dict[str, Any]:
    """``{"variables": name -> label, "levels": level -> name -> root mean square standard error (persons)}``;
    empty without the pl94 tables, or when the GLS is not defined (lowest-level cells no query determines)."""
    if SummaryTables.PL94 not in run.config.output.tables:
        return {}
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    schema = run.schema
    variables = [v for v in table_variables(SummaryTables.PL94) if v.name in MAIN_VARIABLES]
    weights = variable_matrix(schema, variables).T.toarray().astype(float)
    measured = []
    for level in range(tree.depth):
        queries = [(schema.parse_query(a.query), a.sigma2) for a in run.level_allocations(level)]
        # the variances do not depend on the data: zero-stride stand-ins of the right shape
        measured.append([(q, s2, np.broadcast_to(np.zeros(1), (tree.n_nodes(level), schema.query_cells(q))))
                         for q, s2 in queries])
    levels = gls_problem(schema, [tree.parent[level] for level in range(tree.depth)], measured, run.invariants)
    node = np.arange(tree.n_nodes(tree.depth - 1))
    out: dict[str, dict[str, float]] = {}
    try:
        for level in range(tree.depth - 1, -1, -1):  # node: every block's ancestor at this level
            rms = np.sqrt(mean_area_variances(levels, schema.shape, node, tree.n_nodes(level), weights))
            rms[rms < ZERO] = 0.0  # invariant counts: exactly 0 up to the solver's rounding
            out[run.config.levels[level].name] = {v.name: float(rms[j]) for j, v in enumerate(variables)}
            if level:
                node = tree.parent[level][node]
    except ValueError as error:  # public: a design problem (unidentifiable cells), never a data value
        log.warning("expected errors not computed: %s", error)
        run.warnings.append(f"the report's expected errors were not computed: {error}")
        return {}
    return {"variables": {v.name: MAIN_VARIABLES[v.name] for v in variables},
            "reconciliation": str(run.config.reconciliation_method),
            "levels": {spec.name: out[spec.name] for spec in run.config.levels}}
