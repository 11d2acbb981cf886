"""What the accuracy benchmarks on real data share: a seeded release of a preset on a data folder, and the
mean-absolute-error table of ``censusdp evaluate``'s metrics.  Imported by the scripts beside it (run as
``python benchmarks/<script>.py``, which puts this folder on the path)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from censusdp.pipeline.cli import main
from censusdp.pipeline.cli.commands import preset_text

LEVEL_ORDER = ["us", "state", "county", "tract", "block_group", "block"]


def release(data: Path, preset: str, folder: Path, seed: int) -> Path:
    """One release of ``preset`` on ``data`` (seeded test noise, ledger and runs in ``folder``, cap raised); with
    the units universe when ``data`` has a ``units.parquet`` (synthetic data), else the persons only."""
    config = folder / f"{preset}.toml"
    text = preset_text(preset).replace('path = "microdata.parquet"', f'path = "{data / "microdata.parquet"}"')
    text = text.replace('geography = "geography.parquet"', f'geography = "{data / "geography.parquet"}"')
    text = text.replace('# path = "..."', f'path = "{folder / "ledger.sqlite"}"').replace('dir = "runs"',
                                                                                        f'dir = "{folder / "runs"}"')
    text = text.replace('cap_rho = ', 'cap_rho = "1000" # ').replace('cap_epsilon = ', 'cap_rho = "1000" # ')
    config.write_text(text.replace('protected_microdata = true', 'protected_microdata = false'))
    before = set((folder / "runs").glob("*")) if (folder / "runs").exists() else set()
    units = data / "units.parquet"
    text = config.read_text().replace("[units]\n", f'[units]\npath = "{units}"\n')
    config.write_text(text)
    extra = [] if units.exists() else ["--no-units"]  # the real data (ri2010) has no unit file
    assert main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", str(seed), *extra]) == 0
    (run_dir,) = set((folder / "runs").glob("*")) - before
    return run_dir


def mae(metrics: pl.DataFrame, method: str, label: str, queries: list[str]) -> pl.DataFrame:
    """The mean absolute error of one method's ``queries`` per level, labelled for the table's column."""
    return (metrics.filter((pl.col("method") == method) & (pl.col("metric") == "mae") & (pl.col("group") == "all")
                           & pl.col("query").is_in(queries))
            .select("level", "query", "value").with_columns(pl.lit(label).alias("method")))


def mae_table(rows: list[pl.DataFrame]) -> pl.DataFrame:
    """Averaged over the releases, one column per label, levels root first."""
    table = (pl.concat(rows).group_by("level", "query", "method").agg(pl.col("value").mean())
             .pivot(on="method", index=["level", "query"], values="value"))
    order = {name: i for i, name in enumerate(LEVEL_ORDER)}
    return table.sort(pl.col("level").replace_strict(order, default=99), "query")


def evaluated(data: Path, runs: list[tuple[str, Path]], queries: list[str]) -> list[pl.DataFrame]:
    """Each run's reconciled tables against the truth, labelled, then the last run's GLS and noisy columns (the
    runs share their measurements, so those are the same for all)."""
    from censusdp.pipeline.evaluate.compare import evaluate

    rows = []
    for label, run in runs:
        metrics = evaluate(data / "microdata.parquet", run)
        rows.append(mae(metrics, "reconciled", label, queries))
    return rows + [mae(metrics, "gls", "GLS estimate", queries), mae(metrics, "noisy", "noisy query", queries)]


def print_table(title: str, table: pl.DataFrame, columns: list[str], ratio: tuple[str, str] | None = None) -> None:
    """The markdown table of ``columns`` per level and query; ``ratio`` (a, b) adds the column a / b."""
    print(title + "\n")
    extra = [f"{ratio[0]} / {ratio[1]}"] if ratio else []
    print("| level | query | " + " | ".join(columns + extra) + " |")
    print("|---|---|" + "---|" * (len(columns) + len(extra)))
    for row in table.iter_rows(named=True):
        cells = ["" if row.get(c) is None else f"{row[c]:.3f}" for c in columns]
        if ratio:
            a, b = (row.get(c) for c in ratio)
            cells.append(f"{a / b:.2f}" if a is not None and b else "")
        print(f"| {row['level']} | {row['query']} | " + " | ".join(cells) + " |")
