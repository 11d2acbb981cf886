"""Persons and units that agree: accuracy, time and the rules' violations of seeded releases, against the truth.

    python benchmarks/persons_units.py --data DATA --preset pl94 --releases 3 --out results.json

``DATA`` holds microdata.parquet, geography.parquet and (synthetic data) units.parquet.  Per release: the wall time,
the mean absolute error of the total population at county, tract and block group (P1_001N), of the occupied
housing units (H1_002N) at every level, and of areas of 60 consecutive blocks (published, and the GLS estimate of
``censusdp areas``, with the published mean signed error), and ``censusdp verify``'s violations where the code has
it.  Only the published tables are read, so the same script measures an earlier version of the code (put its source
folder first on PYTHONPATH) against this one in one session.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import polars as pl
from real_data import LEVEL_ORDER, release

from censusdp.pipeline.cli import main as cli

AREA_BLOCKS = 60
WIDTHS = {"us": 0, "state": 2, "county": 5, "tract": 11, "block_group": 12, "block": 15}


def truth(data: Path, level: str) -> pl.DataFrame:
    """True total population (and, with units, occupied housing units) per node of ``level``."""
    width = WIDTHS[level]
    code = pl.col("geocode").str.slice(0, width) if width else pl.lit("US")
    persons = pl.scan_parquet(data / "microdata.parquet").group_by(code.alias("GEOID")).agg(pl.len().alias("true_pop"))
    out = persons.collect()
    units = data / "units.parquet"
    if units.exists():
        occupied = (pl.scan_parquet(units).filter((pl.col("GQTYPE") == "000") & (pl.col("VACS") == "0"))
                    .group_by(code.alias("GEOID")).agg(pl.len().alias("true_occupied")).collect())
        out = out.join(occupied, on="GEOID", how="full", coalesce=True)
    return out.fill_null(0)


def published(run: Path, level: str) -> pl.DataFrame:
    table = pl.read_parquet(run / "tables" / "pl94" / f"{level}.parquet")
    return table.select(["GEOID", "P1_001N", *(["H1_002N"] if "H1_002N" in table.columns else [])])


def areas(run: Path, data: Path, folder: Path) -> dict[str, float]:
    """Areas of 60 consecutive blocks (in code order): published and GLS MAE, published mean signed error."""
    blocks = pl.read_parquet(data / "geography.parquet").select(pl.col("geocode").alias("GEOID")).sort("GEOID")
    plan = blocks.with_row_index("i").with_columns((pl.col("i") // AREA_BLOCKS).cast(pl.Utf8).alias("area"))
    plan_file = folder / "areas.csv"
    plan.select("GEOID", "area").write_csv(plan_file)
    out = folder / f"areas-{run.name}.parquet"
    assert cli(["-q", "areas", str(run), "--assign", str(plan_file), "--out", str(out)]) == 0
    table = pl.read_parquet(out)
    true = (pl.read_parquet(data / "microdata.parquet", columns=["geocode"]).rename({"geocode": "GEOID"})
            .join(plan.select("GEOID", "area"), on="GEOID").group_by("area").agg(pl.len().alias("true")))
    total = table.filter(pl.col("variable").cast(pl.Utf8) == "P1_001N")
    joined = total.join(true, on="area", how="left").fill_null(0)
    return {"areas": joined.height,
            "published_mae": float((joined["published"] - joined["true"]).abs().mean()),
            "gls_mae": float((joined["estimate"] - joined["true"]).abs().mean()),
            "published_signed": float((joined["published"] - joined["true"]).mean())}


def measure(data: Path, preset: str, seed: int, folder: Path) -> dict[str, object]:
    started = time.perf_counter()
    run = release(data, preset, folder, seed)
    result: dict[str, object] = {"seconds": time.perf_counter() - started, "seed": seed}
    for level in LEVEL_ORDER:
        joined = published(run, level).join(truth(data, level), on="GEOID", how="left").fill_null(0)
        result[f"pop_mae_{level}"] = float((joined["P1_001N"] - joined["true_pop"]).abs().mean())
        if "H1_002N" in joined.columns and "true_occupied" in joined.columns:
            result[f"occupied_mae_{level}"] = float((joined["H1_002N"] - joined["true_occupied"]).abs().mean())
    result.update(areas(run, data, folder))
    try:
        from censusdp.pipeline.io.verify import verify_run  # this version's promises, checked on what it published
    except ImportError:
        result["violations"] = None
    else:
        result["violations"] = sum(check.violations for check in verify_run(run))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure(args.data.resolve(), args.preset, seed, Path(tmp)) for seed in range(1, args.releases + 1)]
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
