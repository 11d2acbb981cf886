"""A budget designed for the areas users publish: ``censusdp budget optimize --areas`` against the pl94 preset.

    python benchmarks/area_budget.py [--persons 1000000] [--data DIR] [--releases 3] [--query-shares]

1. A synthetic state of ``--persons`` (or ``--data``: microdata.parquet and geography.parquet), and a plan of areas
   that cut block groups: each area is the second half of one block group's blocks and the first half of the
   next's (blocks in code order).
2. ``censusdp budget optimize pl94.toml --areas plan.csv`` (no level's expected error of any report variable may
   grow by more than 25%), timed; its table of expected errors before and after.
3. ``--releases`` seeded releases of the preset and of the tuned configuration (persons only), and the published
   mean absolute error of the areas' totals, from ``censusdp evaluate --areas`` (EVALUATION AGAINST TRUE DATA —
   synthetic data only).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import polars as pl

from censusdp.pipeline.cli import main as cli
from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.synth.population import write_synthetic


def cut_block_groups(geography: Path, out: Path) -> int:
    """The plan: area i = the second half of block group i's blocks + the first half of block group i+1's."""
    blocks = pl.read_parquet(geography, columns=["geocode"])["geocode"].sort()
    frame = pl.DataFrame({"GEOID": blocks, "group": blocks.str.slice(0, 12)}).with_columns(
        rank=pl.int_range(pl.len()).over("group"), size=pl.len().over("group"),
        group_index=pl.col("group").rank("dense").cast(pl.Int64) - 1)
    second = frame.filter(pl.col("rank") >= pl.col("size") // 2).with_columns(area=pl.col("group_index"))
    first = frame.filter(pl.col("rank") < pl.col("size") // 2).with_columns(area=pl.col("group_index") - 1)
    last = int(frame["group_index"].max())
    plan = (pl.concat([second, first]).filter((pl.col("area") >= 0) & (pl.col("area") < last))
            .select("GEOID", area=pl.format("A{}", pl.col("area").cast(pl.Utf8).str.zfill(5))))
    plan.sort("GEOID").write_csv(out)
    return plan["area"].n_unique()


def preset_config(data: Path, folder: Path) -> Path:
    """The pl94 preset on ``data``, its ledger and runs in ``folder`` (cap raised for the benchmark's releases)."""
    text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{data / "microdata.parquet"}"')
    text = text.replace('geography = "geography.parquet"', f'geography = "{data / "geography.parquet"}"')
    text = text.replace('# path = "..."', f'path = "{folder / "ledger.sqlite"}"')
    text = text.replace('dir = "runs"', f'dir = "{folder / "runs"}"').replace('cap_rho = ', 'cap_rho = "1000" # ')
    config = folder / "pl94.toml"
    config.write_text(text.replace("protected_microdata = true", "protected_microdata = false"))
    return config


def release(config: Path, seed: int) -> Path:
    runs = config.parent / "runs"
    before = set(runs.glob("*")) if runs.exists() else set()
    assert cli(["-q", "release", str(config), "--no-prefect", "--insecure-seed", str(seed), "--no-units"]) == 0
    (run,) = set(runs.glob("*")) - before
    return run


def areas_mae(data: Path, run: Path, plan: Path) -> float:
    from censusdp.pipeline.evaluate.compare import evaluate

    metrics = evaluate(data / "microdata.parquet", run, areas=[plan])
    row = metrics.filter((pl.col("level") == f"areas:{plan.stem}") & (pl.col("method") == "reconciled")
                         & (pl.col("query") == "total") & (pl.col("metric") == "mae") & (pl.col("group") == "all"))
    return float(row["value"][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, help="a folder with microdata.parquet and geography.parquet")
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--query-shares", action="store_true", help="also tune each level's query shares")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        data = args.data or folder / "data"
        if args.data is None:
            write_synthetic(args.persons, 7, data)
        plan = folder / "plan.csv"
        print(f"plan: {cut_block_groups(data / 'geography.parquet', plan)} areas cutting block groups")
        config = preset_config(data, folder)
        started = time.perf_counter()
        extra = ["--query-shares"] if args.query_shares else []
        assert cli(["-q", "budget", "optimize", str(config), "--areas", str(plan), "--write",
                    str(folder / "tuned.toml"), *extra]) == 0
        print(f"budget optimize: {time.perf_counter() - started:.1f} s")
        table = pl.read_csv(folder / "tuned-errors.csv")
        areas = table.filter((pl.col("kind") == "areas") & (pl.col("variable") == "total")).row(0, named=True)
        worst = table.filter((pl.col("kind") == "level") & pl.col("ratio").is_not_null()).sort("ratio").row(
            -1, named=True)
        print(f"areas' expected standard error of the total: {areas['before']:.2f} -> {areas['after']:.2f} "
              f"({areas['after'] / areas['before'] - 1:+.0%}); worst level growth {worst['ratio']:.3f} "
              f"({worst['scope']} {worst['variable']})")
        print("\n| level | variable | pl94 | tuned | ratio |\n|---|---|---|---|---|")
        for row in table.filter(pl.col("kind") == "level").iter_rows(named=True):
            ratio = "" if row["ratio"] is None else f"{row['ratio']:.3f}"
            print(f"| {row['scope']} | {row['variable']} | {row['before']:.2f} | {row['after']:.2f} | {ratio} |")
        print("\n| release | pl94 areas' MAE | tuned areas' MAE |\n|---|---|---|")
        maes: dict[str, list[float]] = {"pl94": [], "tuned": []}
        for seed in range(1, args.releases + 1):
            for name, path in (("pl94", config), ("tuned", folder / "tuned.toml")):
                maes[name].append(areas_mae(data, release(path, seed), plan))
            print(f"| {seed} | {maes['pl94'][-1]:.2f} | {maes['tuned'][-1]:.2f} |")
        mean = {k: sum(v) / len(v) for k, v in maes.items()}
        print(f"| mean | {mean['pl94']:.2f} | {mean['tuned']:.2f} ({mean['tuned'] / mean['pl94'] - 1:+.0%}) |")


if __name__ == "__main__":
    main()
