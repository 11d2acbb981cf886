"""A release with the housing-unit universe: one charge for both, H1 beside P1-P5, re-runs and --resume."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import ConfigError
from censusdp.pipeline.evaluate.compare import evaluate
from censusdp.pipeline.io import measurements
from censusdp.pipeline.io.budget_figure import budget_shares_png
from censusdp.pipeline.io.measurements import measurements_digest
from censusdp.pipeline.release import lowest_parts, stages
from censusdp.pipeline.release import run as run_module
from censusdp.pipeline.synth.population import write_synthetic
from tests.helpers.configs import edit_config
from tests.helpers.releases import cli, keeping_invariants, release, release_dir, release_with, units_config


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("units-data")
    write_synthetic(4000, 3, data)
    return data


def true_housing_units(data: Path) -> dict[str, int]:
    units = pl.read_parquet(data / "units.parquet").filter(pl.col("GQTYPE") == "000")
    return dict(units.group_by("geocode").len().iter_rows())


def test_one_charge_for_both_universes_and_h1_beside_p1(synthetic: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config_path = units_config(tmp_path, synthetic)
    # chunks of a few blocks: the lowest level's tables, microdata and disagreements are written chunk by chunk
    edit_config(config_path, {"postprocess.chunk_cells": 40000, "postprocess.runner": "local"})
    config = load_config(config_path)
    assert config.units is not None
    held = []
    real_tabulate = stages.tabulate

    def tabulate(run: stages.Release) -> None:
        held.append(run)
        real_tabulate(run)

    kept: dict[str, dict[int, Any]] = {}  # each universe's invariants as its lowest level dropped them
    monkeypatch.setattr(measurements, "INVARIANT_NODES", 50)  # the units' block invariants written in pieces
    run_dir = release_with(config_path, tabulate=tabulate, reconcile=keeping_invariants(kept))
    (release,) = held  # the driver kept no block's counts (the units' lowest tasks wrote H1 beside the persons')
    run, units = release.persons, release.units
    lowest = len(config.levels) - 1
    assert [u.config.universe.value for u in release.universes] == ["persons", "units"]
    assert lowest not in run.counts and set(run.counts) == set(range(lowest))
    assert units is not None and set(units.counts) == set(range(lowest))
    assert run.tree is units.tree  # one geography: the universes share one tree on the driver
    # the figure, drawn from the first reconciled level on, is the one the published manifest describes
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (run_dir / stages.SHARES_PLOT).read_bytes() == budget_shares_png(manifest) == release.published.shares_png
    assert release.pending_figure is None
    units_file = run_dir / "units" / "measurements" / measurements.INVARIANTS_FILE
    assert pq.ParquetFile(units_file).num_row_groups > run.tree.n_nodes(lowest) // 50  # in pieces
    read_back = measurements.read_invariants(units_file.parent, units.config, run.tree)
    as_lists = {name: {level: [(i.name, i.values.tolist()) for i in invariants] for level, invariants in found.items()}
                for name, found in kept.items()}
    assert {level: [(i.name, i.values.tolist()) for i in invariants] for level, invariants in read_back.items()} == (
        as_lists["units"])
    # once their lowest level is reconciled neither universe keeps its invariants (no estimates configured)
    assert units.invariants == {} and run.invariants == {} and set(kept) == {"persons", "units"}
    assert any(len(values) == run.tree.n_nodes(lowest) for _, values in as_lists["units"][lowest])
    assert len(run.chunk_plan[lowest]) >= 2
    parts = [lowest_parts.PART_FILE.format(i) for i in range(len(run.chunk_plan[lowest]))]
    for folder in ("tables/block.parquet", "microdata.parquet", "tables/pl94/block.parquet"):  # written by the tasks
        assert sorted(p.name for p in (run_dir / folder).iterdir()) == parts
    assert not list(run_dir.glob(f"{lowest_parts.STAGING}*"))  # the attempt's staging folder is gone
    manifest = json.loads((run_dir / "manifest.json").read_text())
    persons, units = Fraction(manifest["privacy"]["rho_exact"]), Fraction(manifest["units"]["privacy"]["rho_exact"])
    assert (persons, units) == (config.budget.rho, config.units.budget.rho)
    # the ledger charges the per-person bound the manifest states: a person's change alters at most two unit records
    per_person = manifest["privacy"]["per_person"]
    assert Fraction(per_person["rho_exact"]) == persons + 4 * units == Fraction(manifest["units"]["per_person_rho"])
    assert Fraction(manifest["ledger"]["charged_rho"]) == persons + 4 * units
    assert PrivacyLedger(config.ledger.location).spent("units-state") == persons + 4 * units
    assert "rho_persons + 4 rho_units" in per_person["statement"] and "not protected" in per_person["statement"]
    assert "housing units: hhgq at us" in per_person["statement"]  # conditioned on the invariants configured
    report = (run_dir / "report.md").read_text()
    assert f"rho_persons + 4 rho_units = {persons + 4 * units}" in report
    assert f"- Per person, with the housing units: rho = {persons + 4 * units} " in report  # the headline too
    assert {e["query"] for e in manifest["units"]["allocation"]} == {"detailed", "occupancy"}
    # the units' facility counts are facts about persons: both guarantees are conditional on every invariant of
    # both universes, and both universes list them as not protected
    every = "every invariant the release publishes (persons: total at us, state; housing units: hhgq at us, state, "
    assert every in manifest["privacy"]["guarantee"] and every in manifest["units"]["privacy"]["guarantee"]
    for notes in (manifest["not_protected"], manifest["units"]["not_protected"]):
        assert any(note.startswith("invariant hhgq at us, state, county, tract, block_group, block") for note in notes)
        assert any(note.startswith("invariant total at us, state") for note in notes)
    blocks = pl.read_parquet(run_dir / "tables" / "pl94" / "block.parquet")
    assert {"P1_001N", "P5_010N", "H1_001N", "H1_002N", "H1_003N"} <= set(blocks.columns)
    people = pl.read_parquet(run_dir / "tables" / "block.parquet")
    totals = dict(people.group_by("geoid").agg(pl.col("count").sum()).iter_rows())
    assert blocks["GEOID"].to_list() == run.tree.geoids[lowest].tolist()  # every block once, in order
    assert {g: c for g, c in blocks.select("GEOID", "P1_001N").iter_rows() if c} == totals
    assert pl.read_parquet(run_dir / "microdata.parquet").group_by("geocode").len().sort("geocode").rows() == sorted(
        totals.items())
    assert (blocks["H1_002N"] + blocks["H1_003N"] == blocks["H1_001N"]).all()
    housing = true_housing_units(synthetic)  # invariant at every level: exact, and NOT protected
    published = {g: c for g, c in blocks.select("GEOID", "H1_001N").iter_rows() if c}
    assert published == housing
    unit_table = pl.read_parquet(run_dir / "units" / "tables" / "block.parquet")
    assert unit_table.filter(pl.col("hhgq") == "0")["count"].sum() == sum(housing.values())
    assert unit_table.filter((pl.col("hhgq") != "0") & (pl.col("occupancy") == "2")).height == 0  # GQ never vacant
    dictionary = pl.read_csv(run_dir / "tables" / "pl94" / "dictionary.csv")
    assert dictionary.filter(pl.col("table") == "H1")["universe"].to_list() == ["Housing units"] * 3
    assert "## Housing-unit universe" in (run_dir / "report.md").read_text()
    # censusdp evaluate: H1 against the true unit file, recomputed here at the nation from the raw units
    metrics = evaluate(synthetic / "microdata.parquet", run_dir)
    h1 = metrics.filter((pl.col("query") == "H1") & (pl.col("metric") == "mae") & (pl.col("group") == "all"))
    assert set(h1["method"]) == {"reconciled", "gls"} and set(h1["level"]) == {lv.name for lv in config.levels}
    raw = pl.read_parquet(synthetic / "units.parquet").filter(pl.col("GQTYPE") == "000")
    true = [raw.height, raw.filter(pl.col("VACS") == "0").height, raw.filter(pl.col("VACS") != "0").height]
    nation = pl.read_parquet(run_dir / "tables" / "pl94" / "us.parquet").select("H1_001N", "H1_002N", "H1_003N").row(0)
    found = h1.filter((pl.col("level") == "us") & (pl.col("method") == "reconciled"))["value"].to_list()
    assert found == pytest.approx([np.mean(np.abs(np.array(nation) - np.array(true)))])
    # where the independently reconciled universes disagree, counted from the published tables themselves
    households = dict(people.filter(pl.col("hhgq") == "0").group_by("geoid").agg(pl.col("count").sum()).iter_rows())
    occupied = dict(unit_table.filter((pl.col("hhgq") == "0") & (pl.col("occupancy") == "1"))
                    .group_by("geoid").agg(pl.col("count").sum()).iter_rows())
    disagree = manifest["units"]["disagreements"]
    assert disagree["blocks with household persons and no occupied housing unit"] == len(
        set(households) - set(occupied))
    assert disagree["blocks with occupied housing units and no household persons"] == len(
        set(occupied) - set(households))
    assert disagree["blocks with more occupied housing units than household persons"] == sum(
        c > households.get(g, 0) for g, c in occupied.items())


def test_the_units_file_belongs_to_the_dataset_too(synthetic: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Changed persons with the same units file is still the dataset: the budget follows either file."""
    config_path = units_config(tmp_path, synthetic)
    release_dir(capsys, config_path)
    people = pl.read_parquet(synthetic / "microdata.parquet")
    people.slice(1).write_parquet(tmp_path / "fewer.parquet")  # another persons file
    (tmp_path / "other").mkdir()
    other = units_config(tmp_path / "other", synthetic, dataset="looks-new")  # the same installation ledger
    code, out, err = release(capsys, other, "--microdata", str(tmp_path / "fewer.parquet"))
    assert code == 0, err
    manifest = json.loads((Path(out.splitlines()[-1]) / "manifest.json").read_text())
    assert manifest["ledger"]["dataset"] == "units-state"  # found by the units file's fingerprint
    assert any("charged to 'units-state'" in w for w in manifest["warnings"])
    # the cap is checked against the per-person bound, persons + 4 units, not persons + units: with 4.52 left,
    # persons 2.6 and units 0.6 (2.6 + 0.6 = 3.2, but 2.6 + 2.4 = 5.0) is refused before any noise is drawn
    ledger = PrivacyLedger(load_config(config_path).ledger.location)
    assert ledger.remaining("units-state") == Fraction("10.24") - 2 * (Fraction("2.56") + 4 * Fraction("0.075"))
    costly = config_path.read_text().replace('rho = "2.56"', 'rho = "2.6"').replace('rho = "0.075"', 'rho = "0.6"')
    config_path.write_text(costly)
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    code, _, err = release(capsys, config_path)
    assert code != 0 and "cap" in err
    assert ledger.remaining("units-state") == Fraction("10.24") - 2 * (Fraction("2.56") + 4 * Fraction("0.075"))
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs  # nothing drawn, nothing left
    # and a bound over the whole cap is refused when the configuration loads, naming the key
    config_path.write_text(costly.replace('rho = "0.6"', 'rho = "1.96"'))  # 2.6 + 1.96 < 10.24 < 2.6 + 7.84
    with pytest.raises(ConfigError) as caught:
        load_config(config_path)
    assert caught.value.key == "units.rho" and "per-person bound" in str(caught.value)


def test_no_units_releases_the_persons_only(synthetic: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config_path = units_config(tmp_path, synthetic)
    run_dir = release_dir(capsys, config_path, "--no-units")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "units" not in manifest and not (run_dir / "units").exists()
    assert Fraction(manifest["ledger"]["charged_rho"]) == Fraction(manifest["privacy"]["rho_exact"])
    assert "H1_001N" not in pl.read_parquet(run_dir / "tables" / "pl94" / "block.parquet").columns


def test_units_need_the_geography_file(synthetic: Path, tmp_path: Path) -> None:
    config_path = units_config(tmp_path, synthetic)
    text = "\n".join(x for x in config_path.read_text().splitlines() if not x.startswith("geography = "))
    config_path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(config_path)
    assert caught.value.key == "input.geography" and "--no-units" in str(caught.value)
    assert load_config(config_path, {"units": None}).units is None


def test_a_rerun_and_a_resume_carry_the_units(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    config_path = units_config(tmp_path, synthetic)
    real = stages.reconcile

    def crash_in_the_units(release: stages.Release, universe: stages.UniverseRun, level: int,
                           runner: object = None) -> None:
        if universe is release.units and level == 3:
            raise RuntimeError("simulated crash")
        real(release, universe, level, runner)

    with pytest.raises(RuntimeError, match="simulated crash"):
        release_with(config_path, reconcile=crash_in_the_units)
    partial = next((tmp_path / "runs").iterdir())
    run_id = partial.name[1: -len(".partial")]
    noisy_before = pl.read_parquet(partial / "units" / "measurements" / "block.parquet")["noisy_value"].to_numpy()
    # a run charged below the per-person bound its measurements cost (by an earlier version, which charged
    # persons + units) is not finished under a manifest that would state the bound as charged
    with monkeypatch.context() as patched:
        patched.setattr(run_module, "per_person_rho", lambda persons, units: persons + 5 * units)
        code, _, err = cli(capsys, "release", str(config_path), "--resume", run_id)
    assert code != 0 and "below the per-person bound" in err and partial.exists()
    code, out, err = cli(capsys, "release", str(config_path), "--resume", run_id)
    assert code == 0, err
    final = Path(out)
    noisy_after = pl.read_parquet(final / "units" / "measurements" / "block.parquet")["noisy_value"].to_numpy()
    assert np.array_equal(noisy_before, noisy_after)  # the units' noise is not drawn twice either
    assert "H1_001N" in pl.read_parquet(final / "tables" / "pl94" / "block.parquet").columns
    resumed = json.loads((final / "manifest.json").read_text())
    assert resumed["units"]["measurements"]["block"] == "units/measurements/block.parquet"  # inside the run
    assert resumed["units"]["privacy"]["unit"] == "housing unit" and "housing unit's record" in resumed["units"][
        "privacy"]["guarantee"] and "rho_persons + 4 rho_units" in resumed["units"]["combined"]
    # the ledger vouches for both universes' measurements: one digest over both folders
    digest = measurements_digest(final / "measurements")
    with (final / "units" / "measurements" / "block.parquet").open("ab") as handle:
        handle.write(b"\0")
    assert measurements_digest(final / "measurements") != digest
    (final / "units" / "measurements" / "block.parquet").write_bytes(
        (final / "units" / "measurements" / "block.parquet").read_bytes()[:-1])
    assert measurements_digest(final / "measurements") == digest
    code, out, err = cli(capsys, "postprocess", str(final))
    assert code == 0, err
    rerun = Path(out.splitlines()[-1])
    manifest = json.loads((rerun / "manifest.json").read_text())
    assert manifest["units"]["measurements"]["block"] == str(final / "units" / "measurements" / "block.parquet")
    h1 = pl.read_parquet(rerun / "tables" / "pl94" / "block.parquet")["H1_001N"]
    assert h1.to_list() == pl.read_parquet(final / "tables" / "pl94" / "block.parquet")["H1_001N"].to_list()


def test_a_bad_unit_value_is_a_charged_failure_naming_a_category_only(synthetic: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    units = pl.read_parquet(synthetic / "units.parquet")
    secret = "999"  # a value outside the domain, after the charge: its row and value must not be told
    units.with_columns(pl.when(pl.int_range(pl.len()) == 17).then(pl.lit(secret)).otherwise(pl.col("GQTYPE"))
                       .alias("GQTYPE")).write_parquet(tmp_path / "bad-units.parquet")
    config_path = units_config(tmp_path, synthetic)
    code, out, err = release(capsys, config_path, "--units", str(tmp_path / "bad-units.parquet"))
    assert code != 0 and "after the budget was charged" in err and "--units" in err
    assert secret not in err and "row 18" not in err
    config = load_config(config_path)
    charges = PrivacyLedger(config.ledger.location).charges("units-state")
    assert [(c.status, c.reason.split(":")[0]) for c in charges] == [("failed", "input-validation")]
    assert not any(p.name[0] != "." for p in (tmp_path / "runs").iterdir())  # nothing published


def test_the_readme_sequence_finds_the_units_file_beside_the_microdata(synthetic: Path, tmp_path: Path,
                                                                      installation_ledger: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`init --preset pl94`, then `check` and `release` with --microdata and --geography only: without a units file
    beside the microdata, one line says how to give one or to leave the units out; with it, the release runs."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("microdata", "geography"):
        shutil.copy(synthetic / f"{name}.parquet", data)
    assert cli(capsys, "init", "--preset", "pl94", "--out", str(tmp_path / "pl94.toml"))[0] == 0
    files = [str(tmp_path / "pl94.toml"), "--microdata", str(data / "microdata.parquet"), "--geography",
             str(data / "geography.parquet")]
    for command in (["check", *files], ["release", *files, "--no-prefect", "--out", str(tmp_path / "runs")]):
        code, _, err = cli(capsys, *command)
        assert code == 1 and err.count("\n") == 1, err
        assert err.startswith(f"censusdp: error: {data / 'units.parquet'}: no such file") and "--units FILE" in err
        assert "--no-units" in err
    runs = tmp_path / "runs"
    assert not (runs.exists() and any(runs.iterdir())) and not installation_ledger.exists()  # before the charge
    shutil.copy(synthetic / "units.parquet", data)
    code, out, err = cli(capsys, "release", *files, "--no-prefect", "--insecure-seed", "1", "--out",
                         str(tmp_path / "runs"))
    assert code == 0, err
    assert json.loads((Path(out.splitlines()[-1]) / "manifest.json").read_text())["units"]["privacy"]["rho_exact"]
