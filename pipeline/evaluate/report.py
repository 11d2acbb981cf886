"""``evaluation.md``: the evaluation's markdown report (NOT PRIVATE; it embeds the PNG plots)."""

from __future__ import annotations

from typing import Any

import polars as pl

from censusdp.pipeline.config.model import SummaryTables
from censusdp.pipeline.evaluate.metrics import DIVERSITY_BINS, LABEL, METHODS, SIZE_BINS, method_values
from censusdp.pipeline.evaluate.plots import METHOD_NAME
from censusdp.pipeline.io.summary_tables import table_variables


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}" if abs(value) < 100 else f"{value:,.1f}"


def _by_level(metrics: pl.DataFrame, run: dict[str, Any], query: str, metric: str) -> list[str]:
    lines = ["| level | " + " | ".join(METHOD_NAME[m] for m in METHODS) + " |", "|---" * (len(METHODS) + 1) + "|"]
    for level in (lv["name"] for lv in run["levels"]):
        values = method_values(metrics, level, query, metric)
        lines.append(f"| {level} | " + " | ".join(_cell(values.get(m)) for m in METHODS) + " |")
    return lines


def _by_bin(metrics: pl.DataFrame, level: str, group: str, bins: tuple[str, ...]) -> list[str]:
    lines = [f"| {group} bin | cells | " + " | ".join(f"bias / MAE: {METHOD_NAME[m]}" for m in METHODS) + " |",
             "|---" * (len(METHODS) + 2) + "|"]
    for name in bins:
        rows = metrics.filter((pl.col("level") == level) & (pl.col("query") == "detailed")
                              & (pl.col("group") == group) & (pl.col("bin") == name))
        values = {(r["method"], r["metric"]): r["value"] for r in rows.iter_rows(named=True)}
        n = rows["n"].max() if rows.height else 0
        cells = [f"{_cell(values.get((m, 'bias')))} / {_cell(values.get((m, 'mae')))}" for m in METHODS]
        lines.append(f"| {name} | {n or 0:,} | " + " | ".join(cells) + " |")
    return lines


def _summary_tables(metrics: pl.DataFrame, run: dict[str, Any]) -> list[str]:
    """Per summary table (P1 ...), the mean absolute error over its variables by level."""
    names = {v.table for tables in SummaryTables for v in table_variables(tables)} | {"H1"}
    lines = []
    for table in (t for t in dict.fromkeys(metrics["query"].to_list()) if t in names):
        lines += [f"## Summary table {table}: mean absolute error over its variables by level", "",
                  *_by_level(metrics, run, table, "mae"), ""]
    return lines


def report_markdown(metrics: pl.DataFrame, run: dict[str, Any], plots: list[str]) -> str:
    """The report: label, what was compared, tables by level and by bin, the plots."""
    lowest = run["levels"][-1]["name"]
    privacy = run.get("privacy", {})
    lines = [f"# {LABEL}", "",
             f"**{LABEL}.** This report compares release `{run.get('run_id')}` with the true microdata it was made "
             "from. It is for synthetic or test data only and must never be published with a release.", "",
             f"- total rho: {privacy.get('rho_exact', '?')}, epsilon {privacy.get('epsilon', float('nan')):.3f} "
             f"at delta {privacy.get('delta', '?')}",
             f"- random source of the release: {run.get('random_source', {}).get('name', '?')}",
             "- methods: noisy measurements (only the queries measured at a level); reconciled tables (published); "
             "GLS estimates (unbiased, unrounded, `postprocess.gls`); bottom-up baseline (EVALUATION ONLY: the lowest "
             "level's detailed query with the whole rho, sigma² = Δ²/(2ρ), summed up the tree)", "",
             "## Total population: mean absolute error by level", "", *_by_level(metrics, run, "total", "mae"), "",
             "## Detailed cells: mean absolute error by level", "", *_by_level(metrics, run, "detailed", "mae"), "",
             "## Detailed cells: root mean squared error by level", "", *_by_level(metrics, run, "detailed", "rmse"),
             "", "## Detailed cells: mean total-variation distance of node histograms", "",
             *_by_level(metrics, run, "detailed", "tvd"), "",
             f"## Bias by size of the true count ({lowest}, detailed cells)", "",
             *_by_bin(metrics, lowest, "size", SIZE_BINS), "",
             f"## Bias by diversity of the area ({lowest}, detailed cells)", "",
             *_by_bin(metrics, lowest, "diversity", DIVERSITY_BINS), "",
             *_summary_tables(metrics, run),
             "## Plots", ""]
    lines += [f"![{name}]({name})" for name in plots]
    lines += ["", f"All metrics, every level and query: `evaluation.parquet` (long form). {LABEL}.", ""]
    return "\n".join(lines)
