"""End to end: a release's tables are consistent, non-negative integers that keep every invariant."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.config.load import load_config
from tests.helpers.configs import edit_config, preset_config
from tests.helpers.releases import release_dir
from tests.helpers.tiny import require_shared_data

OUTPUT = '[output]\ndir = "runs"'
SEED = 11  # --insecure-seed of every release here


def dense(table: pl.DataFrame, attributes: list[str]) -> dict[tuple[str, ...], int]:
    return {tuple(row[:-1]): row[-1] for row in table.select(["geoid", *attributes, "count"]).iter_rows()}


def check_consistency(run_dir: Path, levels: list[tuple[str, int]], attributes: list[str]) -> None:
    """Every cell of every level equals the sum of its children's cells; counts are positive int64."""
    tables = {name: pl.read_parquet(run_dir / "tables" / f"{name}.parquet") for name, _ in levels}
    for (parent_name, _), (child_name, width) in zip(levels, levels[1:], strict=False):
        parent, child = tables[parent_name], tables[child_name]
        assert child.schema["count"] == pl.Int64 and (child["count"] > 0).all()
        parent_width = dict(levels)[parent_name]
        summed = (child.with_columns(pl.col("geoid").str.slice(0, parent_width))
                  .group_by(["geoid", *attributes]).agg(pl.col("count").sum()))
        assert dense(summed, attributes) == dense(parent, attributes), f"{child_name} vs {parent_name}"
        assert (child["geoid"].str.len_chars() == width).all()


def test_tiny_release_is_consistent_and_keeps_invariants(tiny_release: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release, seed=SEED)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    levels = [(lv["name"], lv["width"]) for lv in manifest["levels"]]
    check_consistency(run_dir, levels, ["colour", "adult"])
    micro = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    # invariants: the root and region totals are exact
    root = pl.read_parquet(run_dir / "tables" / "root.parquet")
    assert root["count"].sum() == micro.height
    region = pl.read_parquet(run_dir / "tables" / "region.parquet").group_by("geoid").agg(pl.col("count").sum())
    truth = micro.group_by(pl.col("geocode").str.slice(0, 1).alias("geoid")).len()
    assert dict(region.iter_rows()) == dict(truth.iter_rows())
    # structural zero: no blue children anywhere
    for name, _ in levels:
        table = pl.read_parquet(run_dir / "tables" / f"{name}.parquet")
        assert table.filter((pl.col("colour") == "blue") & (pl.col("adult") == "0")).height == 0
    # every geography unit, empty ones too, was measured
    unit = pl.read_parquet(run_dir / "measurements" / "unit.parquet")
    assert unit["geoid"].n_unique() == 72
    # the manifest's allocation composes to rho, exactly
    total = sum(Fraction(a["rho_exact"]) for a in manifest["allocation"])
    assert total == Fraction(manifest["privacy"]["rho_exact"]) == 4
    assert manifest["random_source"]["publishable"] is False
    assert manifest["privacy"]["epsilon"] > manifest["privacy"]["rho"]
    assert (run_dir / "report.md").read_text().startswith("# censusdp release")


def test_measurements_file_schema(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = release_dir(capsys, tiny_release, seed=SEED)
    frame = pl.read_parquet(run_dir / "measurements" / "district.parquet")
    assert frame.columns == ["level", "geoid", "query", "cell", "noisy_value", "rho", "sigma2"]
    assert frame.schema["noisy_value"] == pl.Int64
    per_query = frame.group_by("query").agg(pl.len(), pl.col("cell").max())
    cells = dict(zip(per_query["query"], per_query["cell"], strict=True))
    assert cells == {"adult * colour": 5, "detailed": 5}


def test_seeded_runs_reproduce_and_system_runs_differ(tiny_release: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    a = release_dir(capsys, tiny_release, "--out", str(tiny_release.parent / "a"), seed=SEED)
    b = release_dir(capsys, tiny_release, "--out", str(tiny_release.parent / "b"), seed=SEED)
    read = lambda d: pl.read_parquet(d / "measurements" / "unit.parquet")["noisy_value"].to_numpy()  # noqa: E731
    assert np.array_equal(read(a), read(b))
    code = main(["-q", "release", str(tiny_release), "--no-prefect", "--out", str(tiny_release.parent / "c")])
    c = Path(capsys.readouterr().out.strip())
    assert code == 0 and not np.array_equal(read(a), read(c))
    assert json.loads((c / "manifest.json").read_text())["random_source"]["publishable"] is True


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["pl94", "pl94-2020"])
def test_perry_county_ppmf_release_with_the_pl94_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         preset: str) -> None:
    shared_data = require_shared_data()
    preset_config(tmp_path / "pl94.toml", preset, {"input.geography": None,  # the ledger: not beside shared data
                                                   "ledger.path": str(tmp_path / "ledger.sqlite")})
    run_dir = release_dir(capsys, tmp_path / "pl94.toml", "--microdata", str(shared_data), "--format", "mdf-pl94",
                          "--no-units", seed=SEED)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    levels = [(lv["name"], lv["width"]) for lv in manifest["levels"]]
    assert [n for n, _ in levels] == ["us", "state", "county", "tract", "block_group", "block"]
    check_consistency(run_dir, levels, ["hhgq", "votingage", "hispanic", "cenrace"])
    us = pl.read_parquet(run_dir / "tables" / "us.parquet")
    assert us["count"].sum() == 10588  # the total is an invariant at us and state
    people = pl.read_parquet(run_dir / "microdata.parquet")
    assert people.height == 10588
    assert {"TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK", "CENRACE"} <= set(people.columns)
    assert any("populated is NOT protected" in note for note in manifest["not_protected"])
    config = load_config(tmp_path / "pl94.toml", {"units": None})  # as released: --no-units
    assert manifest["privacy"]["rho_exact"] == str(config.budget.rho)
    check_pl94_tables(run_dir, manifest, levels)
    if preset == "pl94-2020":  # the hhinstlevels recode is measured like any query; nobody under 18 in a nursing home
        assert {(a["level"], a["query"]) for a in manifest["allocation"]} >= {("block", "hhinstlevels")}
        stored = run_dir / manifest["measurements"]["block"]  # a file, or (measured on workers) a folder of parts
        block = pl.read_parquet(stored if stored.is_file() else stored / "*.parquet")
        assert block.filter(pl.col("query") == "hhinstlevels").group_by("geoid").len()["len"].to_list() == [3] * (
            block["geoid"].n_unique())  # three groups per block
        tables = pl.concat([pl.read_parquet(run_dir / "tables" / f"{name}.parquet") for name, _ in levels])
        assert tables.filter((pl.col("hhgq") == "3") & (pl.col("votingage") == "1")).height == 0


def check_pl94_tables(run_dir: Path, manifest: dict, levels: list[tuple[str, int]]) -> None:
    """tables/pl94: one row per node with its Census GEOID, P1_001N the node's total in the detailed table."""
    assert set(manifest["summary_tables"]["pl94"]["levels"]) == {name for name, _ in levels}
    for name, width in levels:
        wide = pl.read_parquet(run_dir / manifest["summary_tables"]["pl94"]["levels"][name])
        detailed = pl.read_parquet(run_dir / "tables" / f"{name}.parquet").group_by("geoid").agg(pl.col("count").sum())
        geoids = {g or "US": c for g, c in detailed.iter_rows()}
        assert wide.height >= len(geoids) and set(wide["GEOID"].str.len_chars()) == {width or 2}
        found = dict(zip(wide["GEOID"].to_list(), wide["P1_001N"].to_list(), strict=True))
        assert {g: c for g, c in found.items() if c} == geoids
        assert (wide["P2_001N"] == wide["P1_001N"]).all() and (wide["P3_001N"] == wide["P4_001N"]).all()
    assert (run_dir / manifest["summary_tables"]["pl94"]["dictionary"]).is_file()


def test_many_small_chunks_give_a_consistent_release(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_config(tiny_release, {"postprocess.chunk_cells": 13, "postprocess.runner": "local"})
    run_dir = release_dir(capsys, tiny_release, seed=SEED)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # a chunk never splits a parent's children: one chunk per district, the smallest possible
    assert manifest["reconciliation"]["unit"]["chunks"] == 6
    assert manifest["reconciliation"]["district"]["chunks"] == 2
    check_consistency(run_dir, [(lv["name"], lv["width"]) for lv in manifest["levels"]], ["colour", "adult"])
    unit = pl.read_parquet(run_dir / "measurements" / "unit.parquet")
    assert unit.height == 72 * 6 and unit["geoid"].n_unique() == 72


def test_laplace_selected_for_one_level(tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_config(tiny_release, {"strategy.unit.mechanism": "laplace"})
    run_dir = release_dir(capsys, tiny_release, seed=SEED)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    unit = next(a for a in manifest["allocation"] if a["level"] == "unit")
    assert unit["mechanism"] == "laplace"
    epsilon = 2 / Fraction(unit["scale"])  # replace-one: L1 sensitivity 2
    assert Fraction(unit["rho_exact"]) == epsilon**2 / 2 <= 1  # allocated 4 * 1/4; the scale rounds up
    assert Fraction(unit["rho_exact"]) > Fraction(999, 1000)
    total = sum(Fraction(a["rho_exact"]) for a in manifest["allocation"])
    assert Fraction(manifest["privacy"]["rho_exact"]) == total <= 4
    check_consistency(run_dir, [(lv["name"], lv["width"]) for lv in manifest["levels"]], ["colour", "adult"])


def test_demo_runs_twice_on_its_own_ledger(tmp_path: Path, installation_ledger: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: synthetic data in a throw-away ledger, never the installation's."""
    for _ in range(2):
        assert main(["-q", "demo", "--out", str(tmp_path / "demo"), "--persons", "2000", "--no-prefect"]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["ledger"]["location"] == str(tmp_path / "demo" / "demo-ledger.sqlite")
    # the second demo wiped the first one's ledger: it holds the second run's charge alone
    assert [c.run_id for c in PrivacyLedger(manifest["ledger"]["location"]).charges()] == [run_dir.name]
    assert not installation_ledger.exists()
    # a size out of range is the user's error, one line, before anything is written
    assert main(["demo", "--out", str(tmp_path / "small"), "--persons", "300", "--no-prefect"]) == 1
    assert capsys.readouterr().err.strip() == ("censusdp: error: --persons: persons must be between 1,000 and "
                                               "10,000,000, got 300")
    assert not (tmp_path / "small" / "runs").exists()


STAGE_ORDER_DRIVER = """
import sys
from pathlib import Path
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.release import stages
release = stages.start_release(load_config(Path(sys.argv[1])), Path(sys.argv[2]), seeded_random_source(1))
run = release.persons
for stage in (lambda: stages.measure(release, run), lambda: stages.publish(release),
              lambda: stages.validate_inputs(release, run)):
    try:
        stage()
    except CensusDPError as error:
        print(error)
"""


@pytest.mark.parametrize("optimise", [[], ["-O"]])
def test_stages_out_of_order_are_refused_even_under_python_O(tiny_release: Path, tmp_path: Path,
                                                             optimise: list[str]) -> None:
    """A stage whose input an earlier stage sets refuses with one public line, not an ``assert`` (which
    ``python -O`` strips, leaving an AttributeError on None or worse)."""
    done = subprocess.run([sys.executable, *optimise, "-c", STAGE_ORDER_DRIVER, str(tiny_release), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("ran out of order" in line for line in lines), lines
    assert "geography" in lines[0] and "geography" in lines[1] and "ledger charge" in lines[2]
