"""``censusdp evaluate --truth MICRODATA --release RUN_DIR``: accuracy of a release against the true data.

NOT PRIVATE: this reads confidential microdata; it is for synthetic or test data, its outputs are labelled as
such and written outside the run folder (metrics and methods: docs/uncertainty.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from censusdp.geography.spine import unit_lookup
from censusdp.pipeline.config.pl94_tables import Variable
from censusdp.pipeline.config.schema import DETAILED, TOTAL, Query, Schema
from censusdp.pipeline.dp.noise import gaussian_sigma2, sample_discrete_gaussian
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.errors import InputError
from censusdp.pipeline.evaluate.metrics import LABEL, METHODS, diversity_bin, entropy_bits, query_metrics
from censusdp.pipeline.io.assignments import read_assignment
from censusdp.pipeline.io.histograms import all_level_histograms, lowest_histograms
from censusdp.pipeline.io.microdata import read_microdata
from censusdp.pipeline.io.run_folder import LoadedRun, load_run, units_of
from censusdp.pipeline.io.summary_tables import housing_variables, summary_counts, table_variables, variable_matrix
from censusdp.pipeline.uncertainty.estimates import gls_estimates

DIVERSITY_ATTRIBUTES = ("hispanic", "cenrace")


def true_histograms(run: LoadedRun) -> list[np.ndarray]:
    """Dense true detailed histograms (n_nodes, n_cells) of every level, from the truth microdata (confidential)."""
    micro = read_microdata(run.config)
    unit = run.tree.lowest_index(micro.codes.to_numpy().astype(np.str_))
    if (unit < 0).any():
        raise InputError(micro.path, "has units that are not in the release's geography")
    lowest = lowest_histograms(unit, micro.cells, run.tree.n_nodes(run.tree.depth - 1), run.config.schema.n_cells)
    return all_level_histograms(run.tree, lowest)


def bottom_up(run: LoadedRun, truth_lowest: np.ndarray, seed: int) -> list[np.ndarray]:
    """Evaluation baseline, not a release: the lowest level's detailed cells measured once with the run's whole
    rho, σ² = Δ₂²/(2ρ_total) (Thm 19.37(iii)), from a seeded source, summed up the tree."""
    budget = run.config.budget
    sigma2 = gaussian_sigma2(budget.rho, budget.sensitivity2_squared)
    rng = seeded_random_source(seed)  # an evaluation baseline, not a release
    noisy = truth_lowest + sample_discrete_gaussian(sigma2, truth_lowest.size, rng=rng).reshape(truth_lowest.shape)
    return all_level_histograms(run.tree, noisy)


def evaluate(truth_path: Path, run_dir: Path, seed: int = 0, fmt: str | None = None,
             diversity: tuple[str, ...] | None = None, units_truth: Path | None = None,
             areas: Sequence[Path] = ()) -> pl.DataFrame:
    """The long-form metrics table of a run against its true microdata; each plan of ``areas`` (block-assignment
    files) adds the level ``areas:<file stem>``: its areas' totals and summary tables."""
    overrides: dict[str, Any] = {"input.path": str(Path(truth_path).resolve())}
    if fmt is not None:
        overrides["input.format"] = fmt
    run = load_run(run_dir, overrides)
    schema = run.config.schema
    truth = true_histograms(run)
    estimates = {"reconciled": [run.table(i) for i in range(run.tree.depth)],
                 "bottom_up": bottom_up(run, truth[-1], seed), "gls": gls_estimates(run).estimates}
    chosen = tuple(n for n in (diversity or DIVERSITY_ATTRIBUTES) if n in schema.names) or schema.names
    by_attributes = schema.parse_query(" * ".join(chosen))  # the attributes whose entropy bins the nodes
    rows = []
    for level, spec in enumerate(run.config.levels):
        node_bins = diversity_bin(entropy_bits(schema.marginal(by_attributes, truth[level])))
        measured = {q.name: (q, values) for q, _, values in run.measurements(level)}
        queries: dict[str, Query] = {name: q for name, (q, _) in measured.items()}
        for name in (TOTAL, DETAILED):
            queries.setdefault(name, schema.parse_query(name))
        for name, query in queries.items():
            true = schema.marginal(query, truth[level])
            found = {m: schema.marginal(query, e[level]) for m, e in estimates.items()}
            if name in measured:
                found["noisy"] = measured[name][1]
            for method in (m for m in METHODS if m in found):
                rows += _rows(method, spec.name, name, true, found[method], node_bins)
        for tables in run.config.output.tables:
            rows += summary_table_rows(schema, table_variables(tables), spec.name, truth[level],
                                       {m: e[level] for m, e in estimates.items()}, node_bins)
    lowest = {m: e[-1] for m, e in estimates.items()}
    for plan in areas:
        rows += area_rows(run, plan, truth[-1], lowest, by_attributes)
    return pl.DataFrame(rows + housing_rows(run, units_truth))


def area_rows(run: LoadedRun, plan_path: Path, truth_lowest: np.ndarray, lowest: dict[str, np.ndarray],
              by_attributes: Query) -> list[dict[str, Any]]:
    """Metrics of a plan's areas (sums of the lowest level's cells): the total and the summary tables, per method."""
    schema = run.config.schema
    plan = read_assignment(plan_path, unit_lookup(run.config.levels, run.tree.geoids[-1]))
    member = plan.members()
    true = np.asarray(member @ truth_lowest)
    found = {method: np.asarray(member @ values) for method, values in lowest.items()}
    level = f"areas:{plan.path.stem}"
    node_bins = diversity_bin(entropy_bits(schema.marginal(by_attributes, true)))
    total = schema.parse_query(TOTAL)
    rows = [row for method, values in found.items()
            for row in _rows(method, level, TOTAL, schema.marginal(total, true), schema.marginal(total, values),
                             node_bins)]
    for tables in run.config.output.tables:
        rows += summary_table_rows(schema, table_variables(tables), level, true, found, node_bins)
    return rows


def _rows(method: str, level: str, query: str, true: np.ndarray, found: np.ndarray,
          node_bins: np.ndarray) -> list[dict[str, Any]]:
    """The labelled metric rows of one method's ``found`` against ``true`` (n_nodes, q_cells) at ``level``."""
    cell_bins = np.broadcast_to(node_bins[:, None], true.shape)  # a view: no copy per method
    return [{"label": LABEL, "method": method, "level": level, "query": query, **row}
            for row in query_metrics(true, found, cell_bins)]


def housing_rows(run: LoadedRun, units_truth: Path | None) -> list[dict[str, Any]]:
    """The housing tables (H1) of a run with a units universe, against its true unit file (the recorded one, or
    ``units_truth``): the published (reconciled) and GLS figures."""
    units = units_of(run, units_truth)
    if units is None:
        return []
    truth = true_histograms(units)
    estimates = {"reconciled": [units.table(i) for i in range(units.tree.depth)], "gls": gls_estimates(units).estimates}
    rows = []
    for variables in (housing_variables(tables, units.config.schema) for tables in run.config.output.tables):
        for level, spec in enumerate(units.config.levels if variables else ()):
            no_race = np.zeros(truth[level].shape[0], dtype=np.int64)  # one diversity bin: H1 has no race
            rows += summary_table_rows(units.config.schema, variables, spec.name, truth[level],
                                       {m: e[level] for m, e in estimates.items()}, no_race)
    return rows


def summary_table_rows(schema: Schema, variables: Sequence[Variable], level: str, truth: np.ndarray,
                       estimates: dict[str, np.ndarray], node_bins: np.ndarray) -> list[dict[str, Any]]:
    """Metrics of summary-table ``variables`` at one level (query = the table's name, ``P1`` ...): every variable
    of every node, from the truth and from each method's detailed estimate summed the same way."""
    matrix = variable_matrix(schema, variables)
    true_all = summary_counts(truth, matrix)
    found_all = {method: summary_counts(values, matrix) for method, values in estimates.items()}
    rows = []
    for table in dict.fromkeys(v.table for v in variables):
        columns = [j for j, v in enumerate(variables) if v.table == table]
        for method, found in found_all.items():
            rows += _rows(method, level, table, true_all[:, columns], found[:, columns], node_bins)
    return rows


def write_evaluation(metrics: pl.DataFrame, run: dict[str, Any], out_dir: Path) -> list[Path]:
    """evaluation.parquet (with the label in its metadata), the plots and evaluation.md."""
    from censusdp.pipeline.evaluate.plots import write_plots
    from censusdp.pipeline.evaluate.report import report_markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    table = metrics.to_arrow()
    table = table.replace_schema_metadata({"censusdp.label": LABEL, "censusdp.run_id": str(run.get("run_id"))})
    parquet = out_dir / "evaluation.parquet"
    pq.write_table(table, parquet)
    plots = write_plots(metrics, run, out_dir)
    report = out_dir / "evaluation.md"
    report.write_text(report_markdown(metrics, run, [p.name for p in plots]))
    return [parquet, report, *plots]
