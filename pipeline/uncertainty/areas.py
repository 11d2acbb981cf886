"""Areas of the user's own with error bars (``censusdp areas RUN_DIR --assign FILE``): per area and variable, the
published sum, its GLS estimate with the exact standard error (cross-block covariances included), a 95% interval
for the truth and a bound on the published number's error (docs/areas.md).  Only the run's public outputs are
read, never microdata, so this is post-processing and spends no budget (Thm 19.25).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.geography.spine import unit_lookup
from censusdp.pipeline.io.assignments import Assignment, read_assignment
from censusdp.pipeline.io.run_folder import LoadedRun, load_run
from censusdp.pipeline.io.summary_tables import table_variables, variable_matrix
from censusdp.pipeline.uncertainty.estimates import open_gls
from censusdp.postprocess.gls import interval
from censusdp.postprocess.gls_areas import area_estimates, area_terms, area_variances

AREAS_DIR = "areas"
LABEL = "post-processing of public values only (published tables and noisy measurements); no budget spent"


@dataclass(frozen=True)
class AreaVariables:
    """``weights[v]``: the detailed cells variable v sums (n_vars, n_cells)."""

    names: tuple[str, ...]
    weights: np.ndarray


def area_variables(run: LoadedRun, queries: Sequence[str] = ()) -> AreaVariables:
    """The configured summary tables' variables, then every cell of each of ``queries`` (``total`` when neither
    gives any), named ``query[label × label]``."""
    schema = run.config.schema
    names: list[str] = []
    blocks: list[np.ndarray] = []
    for tables in run.config.output.tables:
        variables = table_variables(tables)
        names += [v.name for v in variables]
        blocks.append(variable_matrix(schema, variables).T.toarray())
    for text in queries or (() if names else ("total",)):
        query = schema.parse_query(text)
        labels = schema.cell_labels(query)
        names += [f"{query.name}[{' × '.join(str(part[i]) for part in labels)}]" if labels else query.name
                  for i in range(schema.query_cells(query))]
        blocks.append(schema.query_matrix(query).toarray())
    return AreaVariables(tuple(names), np.vstack(blocks).astype(float))


def area_table(run: LoadedRun, assignment: Assignment, variables: AreaVariables) -> pa.Table:
    """The areas file's table: one row per area and variable (columns: docs/areas.md)."""
    lowest = run.tree.depth - 1
    n_areas, leaf_area = assignment.n_areas, assignment.leaf_area
    published = np.asarray((assignment.members() @ run.sparse_table(lowest)) @ variables.weights.T).round().astype(
        np.int64)
    with open_gls(run) as stream:  # streamed from the measurement files: memory as the release's
        estimate = area_estimates(stream, leaf_area, n_areas, variables.weights)
        terms = area_terms(stream.levels, stream.shape, leaf_area, n_areas)
    variance = area_variances(terms, variables.weights)
    low, high = interval(estimate, variance)
    n_vars = len(variables.names)
    numbers = {"published": published, "estimate": estimate, "std_error": np.sqrt(np.maximum(variance, 0.0)),
               "ci_low": low, "ci_high": high,
               "published_error_bound": np.maximum(np.abs(published - low), np.abs(high - published))}
    return pa.table({
        "area": pa.array(np.repeat(np.asarray(assignment.area_ids, dtype=object), n_vars).tolist(), pa.string()),
        "variable": pa.DictionaryArray.from_arrays(np.tile(np.arange(n_vars, dtype=np.int32), n_areas),
                                                   pa.array(variables.names)).cast(pa.string()),
        **{name: pa.array(values.ravel()) for name, values in numbers.items()},
    })


def write_areas(run_dir: Path, assign: Path, *, out: Path | None = None, queries: Sequence[str] = (),
                block_column: str | None = None, area_column: str | None = None,
                skip_unknown: bool = False) -> tuple[Path, Assignment]:
    """Read the run and the assignment, compute every area × variable, write Parquet (default:
    ``RUN_DIR/areas/<assignment file stem>.parquet``); return its path and the assignment read."""
    run = load_run(run_dir)
    units = unit_lookup(run.config.levels, run.tree.geoids[-1])  # a plan names units by their own codes
    assignment = read_assignment(Path(assign), units, block_column=block_column, area_column=area_column,
                                 skip_unknown=skip_unknown)
    table = area_table(run, assignment, area_variables(run, queries))
    table = table.replace_schema_metadata({"censusdp.label": LABEL, "censusdp.run_id": str(run.manifest["run_id"]),
                                           "censusdp.assignment": Path(assign).name,
                                           "censusdp.skipped_rows": str(assignment.skipped)})
    path = Path(out) if out is not None else run.run_dir / AREAS_DIR / f"{Path(assign).stem}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path, assignment
