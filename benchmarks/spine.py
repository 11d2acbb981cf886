"""Release time of a spine with a column level against the prefix spine it relabels.

    python benchmarks/spine.py --data DIR [--rounds 2]

``DIR`` holds a synthetic state (``censusdp synth``).  The column spine's tract level is a column of the geography
file, each tract relabelled ``T`` + its rank (so its spine codes are 21 characters, not 15); both configurations
are the ``pl94`` preset, persons only, no Prefect, released alternately ``--rounds`` times each under
``/usr/bin/time`` (wall-clock seconds, peak resident memory).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

import polars as pl

from censusdp.pipeline.cli.commands import preset_text


def config_text(data: Path, geography: Path, folder: Path, column: bool) -> str:
    text = preset_text("pl94").replace('path = "microdata.parquet"', f'path = "{data / "microdata.parquet"}"')
    text = text.replace('geography = "geography.parquet"', f'geography = "{geography}"')
    text = text.replace('# path = "..."', f'path = "{folder / "ledger.sqlite"}"').replace('cap_rho = ',
                                                                                        'cap_rho = "1000" # ')
    text = text.replace('dir = "runs"', f'dir = "{folder / "runs"}"')
    if column:
        text = text.replace('name = "tract"\nwidth = 11', 'name = "tract"\ncolumn = "TRACT"\nwidth = 6')
    return text


def timed(config: Path) -> tuple[float, float]:
    done = subprocess.run(["/usr/bin/time", "-v", "censusdp", "-q", "release", str(config), "--no-prefect",
                           "--no-units", "--insecure-seed", "1"], capture_output=True, text=True, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    assert wall and peak, done.stderr
    seconds = int(wall[1] or 0) * 3600 + int(wall[2]) * 60 + float(wall[3])
    return seconds, int(peak[1]) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    data = args.data.resolve()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        geography = pl.read_parquet(data / "geography.parquet")
        tracts = geography["geocode"].str.slice(0, 11)
        label = "T" + (tracts.rank("dense") - 1).cast(pl.Int64).cast(pl.Utf8).str.zfill(5)
        geography.with_columns(label.alias("TRACT")).write_parquet(folder / "geography.parquet")
        configs = {}
        for name, column in (("prefix", False), ("column", True)):
            configs[name] = folder / f"{name}.toml"
            configs[name].write_text(config_text(data, folder / "geography.parquet", folder, column))
        print("| round | spine | wall (s) | peak RSS (GB) |\n|---|---|---|---|")
        for round_ in range(1, args.rounds + 1):
            for name, config in configs.items():
                seconds, peak = timed(config)
                print(f"| {round_} | {name} | {seconds:.1f} | {peak:.2f} |", flush=True)


if __name__ == "__main__":
    main()
