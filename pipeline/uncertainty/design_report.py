"""``censusdp budget optimize CONFIG --areas plan.csv``: the tuned configuration and its table of expected errors
before and after, for every level and every plan (``pipeline.uncertainty.design``).  Reads no microdata and spends
no budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from censusdp.pipeline.budget.optimize import write_shares
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.io.microdata import geography_tree
from censusdp.pipeline.uncertainty.design import EXACT, Design, Tuned, design_of, growth_limits, tune

DEFAULT_GROWTH = 1.25


@dataclass(frozen=True)
class AreaBudget:
    """The result: the design, the tuned shares, the table (one row per level or plan and variable) and where the
    configuration and the table were written (None: not written)."""

    design: Design
    tuned: Tuned
    table: pl.DataFrame
    config_path: Path | None
    table_path: Path | None


def error_table(design: Design, tuned: Tuned) -> pl.DataFrame:
    """Expected root mean square standard errors before and after, per level or plan and variable."""
    rows = []
    scopes = [("level", lv.name) for lv in design.config.levels] + [("areas", p.path.name) for p in design.plans]
    before = [*tuned.levels_before, *tuned.plans_before]
    after = [*tuned.levels_after, *tuned.plans_after]
    floor = EXACT * max(float(np.max(before)), 1e-300)  # below: an invariant's zero, no ratio
    for (kind, name), old, new in zip(scopes, before, after, strict=True):
        for variable, a, b in zip(design.variables, old, new, strict=True):
            rows.append({"kind": kind, "scope": name, "variable": variable, "before": float(a), "after": float(b),
                         "ratio": float(b / a) if a > floor else None})
    return pl.DataFrame(rows, schema={"kind": pl.Utf8, "scope": pl.Utf8, "variable": pl.Utf8, "before": pl.Float64,
                                      "after": pl.Float64, "ratio": pl.Float64})


def optimize_for_areas(config_path: str | Path, plans: Sequence[str | Path], *, max_growth: Sequence[str] = (),
                       with_queries: bool = False, geography: Path | None = None,
                       out_path: str | Path | None = None) -> AreaBudget:
    """Tune ``config_path``'s shares for the plans; with ``out_path``, write the configuration there and the table
    beside it (``<stem>-errors.csv``)."""
    config = load_config(config_path, {"input.geography": str(Path(geography).resolve())} if geography else None)
    design = design_of(config, geography_tree(config), [Path(p) for p in plans])
    levels = [lv.name for lv in config.levels]
    tuned = tune(design, growth_limits(max_growth, levels, DEFAULT_GROWTH), with_queries)
    table = error_table(design, tuned)
    written = table_path = None
    if out_path is not None:
        why = f"areas {', '.join(p.path.name for p in design.plans)}, max growth " + ", ".join(max_growth or
                                                                                             [f"{DEFAULT_GROWTH:g}"])
        written = write_shares(config_path, tuned.level_shares, tuned.query_shares, out_path, why)
        table_path = written.with_name(f"{written.stem}-errors.csv")
        table.write_csv(table_path)
    return AreaBudget(design, tuned, table, written, table_path)


def summary_lines(result: AreaBudget) -> list[str]:
    """What the command prints: the shares, then the table in markdown (standard errors in persons)."""
    tuned = result.tuned
    lines = ["level shares: " + ", ".join(f"{k}={v}" for k, v in tuned.level_shares.items())]
    changed = {k: v for k, v in tuned.query_shares.items() if v != result.design.query_shares[k]}
    lines += [f"  {lv}:{q} = {v}" for (lv, q), v in changed.items()]
    lines += ["", "| kind | scope | variable | before | after | ratio |", "|---|---|---|---|---|---|"]
    shown = set(result.design.variables[:result.design.shown])
    for row in result.table.filter(pl.col("variable").is_in(shown)).iter_rows(named=True):
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.3f}"
        lines.append(f"| {row['kind']} | {row['scope']} | {row['variable']} | {row['before']:.3f} | "
                     f"{row['after']:.3f} | {ratio} |")
    worst = result.table.filter(pl.col("kind") == "level").drop_nulls("ratio").sort("ratio").tail(1)
    if worst.height:
        row = worst.row(0, named=True)
        lines.append(f"worst growth of a level's expected error over all {len(result.design.variables)} variables: "
                     f"{row['ratio']:.3f} ({row['scope']} {row['variable']})")
    lines.append(f"({tuned.evaluations} designs evaluated; expected root mean square standard errors of the GLS "
                 "estimates, in persons; no data read, no budget spent)")
    return lines + [str(p) for p in (result.config_path, result.table_path) if p is not None]
