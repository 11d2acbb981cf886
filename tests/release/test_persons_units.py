"""Persons and units that agree: the rules hold on what a release publishes, data that break one are refused, and
the bounds are production's where production had them (release.persons_units)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.release.persons_units import level_rules, persons_bound, units_level_bounds
from censusdp.pipeline.release.support import structural_zero_mask
from censusdp.pipeline.synth.population import write_synthetic
from censusdp.postprocess import UNBOUNDED
from tests.helpers.configs import edit_config, preset_config
from tests.helpers.releases import cli, release, release_dir, release_with, units_config


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("persons-units-data")
    write_synthetic(6000, 11, data)
    return data


@pytest.mark.parametrize("preset", ["pl94", "pl94-2020"])
def test_every_level_keeps_every_rule(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      preset: str) -> None:
    config_path = units_config(tmp_path, synthetic)
    if preset == "pl94-2020":
        preset_config(config_path, preset, {"ledger.cap_rho": "1000"}, files=synthetic)
    run = release_dir(capsys, config_path)
    config = load_config(config_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert set(manifest["units"]["disagreements"].values()) == {0}
    stated = manifest["units"]["persons_per_unit"]
    assert "persons are reconciled first" in stated["order"] and len(stated["rules"]) == 8
    assert "Persons and units: the persons are reconciled first" in (run / "report.md").read_text()
    for level in config.levels:
        rules = level_rules(config, level.name, structural_zero_mask(config))
        paths = run / "tables" / f"{level.name}.parquet", run / "units" / "tables" / f"{level.name}.parquet"
        codes = np.unique(np.concatenate([pl.read_parquet(p, columns=["geoid"])["geoid"].to_numpy() for p in paths]))
        persons, units = _cells(paths[0], config.schema, codes), _cells(paths[1], config.units.schema, codes)
        people, housing = rules.persons_answers(persons), rules.units_answers(units)
        assert people.sum() > 0 and housing.sum() > 0
        assert np.all(people >= rules.min_persons * housing), level.name
        assert np.all(people <= rules.max_persons * housing), level.name


def _cells(path: Path, schema: Schema, codes: np.ndarray) -> np.ndarray:
    """A published level table (long form: geoid, one column per attribute, count; nodes with nothing left out)
    as (nodes, cells), rows in the order of ``codes``."""
    table = pl.read_parquet(path)
    row = np.searchsorted(codes, table["geoid"].to_numpy())
    index = [np.array([schema.attribute(name).values.index(v) for v in table[name].to_list()])
             for name in schema.names]
    out = np.zeros((codes.size, schema.n_cells), dtype=np.int64)
    np.add.at(out, (row, np.ravel_multi_index(index, schema.shape)), table["count"].to_numpy())
    return out


def test_data_that_break_a_rule_are_named_by_check_and_refused_after_the_charge(
        synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    units = pl.read_parquet(synthetic / "units.parquet")
    block = units.filter(pl.col("GQTYPE") != "000")["geocode"][0]
    broken = tmp_path / "units.parquet"  # a block's facilities gone: its group-quarters persons live nowhere
    units.filter(~((pl.col("geocode") == block) & (pl.col("GQTYPE") != "000"))).write_parquet(broken)
    config_path = units_config(tmp_path, synthetic, dataset="broken-units")
    config_path.write_text(config_path.read_text().replace(str(synthetic / "units.parquet"), str(broken)))
    code, _, err = cli(capsys, "check", str(config_path))
    assert code != 0 and block in err and "group quarters" in err
    code, _, err = release(capsys, config_path)
    assert code != 0 and "persons-units" in err and block not in err
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True


def test_production_bounds_with_the_total_invariant() -> None:
    """hhgq_total_lb / hhgq_total_ub where the total is invariant: a node whose only units are housing units puts
    everyone in households; a type without units gets nobody; the others leave room for one per facility."""
    config = load_config(_preset_file("pl94-2020"))
    rules = level_rules(config, "state", structural_zero_mask(config))
    assert rules is not None and rules.covers_all
    # node 0: 10 housing units only, 25 persons; node 1: 10 housing units and 2 facilities of type 3, 25 persons
    units_lower = np.array([[0] * 8, [0, 0, 0, 2, 0, 0, 0, 0]])
    units_upper = np.array([[10] + [0] * 7, [10, 0, 0, 2, 0, 0, 0, 0]])
    bound = persons_bound(rules, units_lower, units_upper, np.array([25, 25]))
    assert bound.lower[0].tolist() == [25, 0, 0, 0, 0, 0, 0, 0] and bound.upper[0].tolist() == [25] + [0] * 7
    assert bound.lower[1].tolist() == [0, 0, 0, 2, 0, 0, 0, 0]
    assert bound.upper[1].tolist() == [23, 0, 0, 25, 0, 0, 0, 0]


def test_the_units_bounds_of_a_parent_are_its_blocks_summed() -> None:
    """ceil(P / max) is superadditive and min(P, housing units) subadditive: a parent's own would leave its blocks
    no feasible share, so a parent's bounds are its blocks' summed."""
    from censusdp.geography.tree import build_tree

    config = load_config(_preset_file("pl94"))
    tree = build_tree(config.levels, np.array(["010010000001000", "010010000001001"]))
    rules = level_rules(config, None, structural_zero_mask(config))
    answers = np.zeros((2, 8), dtype=np.int64)
    answers[:, 0] = [1, 5]  # household persons; housing units 5 and 1
    lower = np.zeros((2, 8), dtype=np.int64)
    upper = np.full((2, 8), UNBOUNDED, dtype=np.int64)
    upper[:, 0] = [5, 1]
    bounds = units_level_bounds(config, rules, answers, lower, upper, tree)
    lowest = len(config.levels) - 1
    assert bounds[lowest].lower[:, 0].tolist() == [1, 1] and bounds[lowest].upper[:, 0].tolist() == [1, 1]
    assert bounds[lowest - 1].lower[0, 0] == 2 and bounds[lowest - 1].upper[0, 0] == 2


def _preset_file(preset: str) -> Path:
    import tempfile

    from censusdp.pipeline.cli.commands import preset_text

    path = Path(tempfile.mkdtemp()) / f"{preset}.toml"
    path.write_text(preset_text(preset).replace("cap_rho = ", 'cap_rho = "1000" # '))
    return path


def test_publish_checks_what_it_wrote(synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A table changed after it was written (a P1 column no longer its cells' sum): publish refuses, names the rule."""
    from censusdp.pipeline.release import stages

    real_tabulate = stages.tabulate

    def corrupting(run: stages.Release) -> None:
        real_tabulate(run)
        path = run.work_dir / "tables" / "pl94" / "county.parquet"
        table = pl.read_parquet(path)
        table.with_columns(pl.col("P1_003N") + 1).write_parquet(path)

    with pytest.raises(CensusDPError) as refused:
        release_with(units_config(tmp_path, synthetic, dataset="corrupted"), tabulate=corrupting)
    assert "breaks" in str(refused.value) and "county" in str(refused.value)
    assert not [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]


def test_units_measured_in_other_chunks_are_refused(synthetic: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The units' lowest tasks read their persons by chunk index: measurements chunked otherwise (an earlier
    version's, resumed) are refused before the lowest level is written."""
    from censusdp.pipeline.release import stages

    real_reconcile = stages.reconcile

    def regrouped(release: stages.Release, universe: stages.UniverseRun, level: int, runner: object = None) -> None:
        units = release.units
        if universe is release.persons and units is not None and level == len(release.config.levels) - 1:
            plan = units.chunk_plan[level]
            units.chunk_plan[level] = [(plan[0][0], plan[1][1], plan[0][2]), *plan[2:]]
        real_reconcile(release, universe, level, runner)

    config = units_config(tmp_path, synthetic, dataset="regrouped")
    edit_config(config, {"postprocess.chunk_cells": 40000, "postprocess.runner": "local"})
    with pytest.raises(CensusDPError, match="chunks"):
        release_with(config, reconcile=regrouped)
