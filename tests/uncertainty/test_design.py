"""A budget designed for the user's areas (``censusdp budget optimize CONFIG --areas plan.csv``): the areas' expected
error drops, no level's grows past its limit, the tuned configuration keeps ρ, no microdata is read and no budget
spent, and the errors it predicts are the ones a release of it reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.synth.population import write_synthetic
from censusdp.pipeline.uncertainty.design import growth_limits, report_variables
from tests.helpers.configs import edit_config, preset_config
from tests.helpers.releases import cli, release_dir


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic state, and a plan whose areas cut block groups: the second half of one block group's blocks
    and the first half of the next's."""
    data = tmp_path_factory.mktemp("design-data")
    write_synthetic(20000, 5, data)
    blocks = pl.read_parquet(data / "geography.parquet")["geocode"].sort()
    groups = blocks.str.slice(0, 12)
    rows = []
    names = groups.unique(maintain_order=True).to_list()
    members = {g: blocks.filter(groups == g).to_list() for g in names}
    for i, (this, after) in enumerate(zip(names, names[1:], strict=False)):
        area = members[this][len(members[this]) // 2:] + members[after][:len(members[after]) // 2]
        rows += [(block, f"A{i:03d}") for block in area]
    pl.DataFrame(rows, schema=["GEOID", "area"], orient="row").write_csv(data / "plan.csv")
    return data


def test_the_areas_error_drops_and_no_level_grows_past_its_limit(state: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = preset_config(tmp_path / "pl94.toml", "pl94", {"ledger.path": str(tmp_path / "ledger.sqlite")},
                           files=state)
    edit_config(config, {"input.path": str(tmp_path / "absent.parquet")})  # the design needs no microdata
    whole = tmp_path / "groups.csv"  # a second plan: whole block groups (a level of the spine)
    blocks = pl.read_parquet(state / "geography.parquet")["geocode"]
    pl.DataFrame({"GEOID": blocks, "area": blocks.str.slice(0, 12)}).write_csv(whole)
    code, out, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(state / "plan.csv"), "--areas",
                         str(whole), "--max-growth", "1.25", "--max-growth", "county=1.1",
                         "--write", str(tmp_path / "elsewhere" / "tuned.toml"))
    assert code == 0, err
    assert not (tmp_path / "ledger.sqlite").exists()  # no budget spent: the ledger is not even opened
    written = tmp_path / "elsewhere" / "tuned.toml"
    table = pl.read_csv(written.with_name("tuned-errors.csv"))
    assert out.splitlines()[-2:] == [str(written), str(written.with_name("tuned-errors.csv"))]
    areas = table.filter((pl.col("kind") == "areas") & (pl.col("variable") == "total")).row(0, named=True)
    assert areas["scope"] == "plan.csv" and areas["after"] < 0.8 * areas["before"]
    groups = table.filter((pl.col("scope") == "groups.csv") & (pl.col("variable") == "total")).row(0, named=True)
    block_group = table.filter((pl.col("scope") == "block_group") & (pl.col("variable") == "total")).row(0, named=True)
    assert groups["before"] == pytest.approx(block_group["before"], rel=1e-9)  # the same areas, the same errors
    assert groups["after"] == pytest.approx(block_group["after"], rel=1e-9)
    levels = table.filter((pl.col("kind") == "level") & pl.col("ratio").is_not_null())  # invariants: none
    limit = pl.when(pl.col("scope") == "county").then(1.1).otherwise(1.25)
    assert levels["variable"].n_unique() == 298  # the total and every other P.L. 94-171 variable, all capped
    assert levels.filter(pl.col("ratio") > limit).height == 0
    assert levels["ratio"].max() > 1.05  # the limits bind: the search used them
    before, after = load_config(config), load_config(written)
    assert after.budget.rho == before.budget.rho and sum(after.budget.level_shares.values()) == 1
    assert after.budget.level_shares["block"] > before.budget.level_shares["block"]
    assert written.read_text().startswith("# written by `censusdp budget optimize`")
    assert after.output.dir == before.output.dir and after.input.geography == before.input.geography  # same files
    assert after.units.budget.level_shares == before.units.budget.level_shares  # the units' design is not tuned


def test_a_release_of_the_tuned_design_reports_the_predicted_errors(state: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The predicted errors scale each query's σ² by its share: the tuned configuration's own release, whose σ²
    come from its exact allocation, reports the same expected errors per level and the same areas' errors."""
    config = preset_config(tmp_path / "pl94.toml", "pl94", {"ledger.dataset": "design-state"}, files=state)
    levels = [lv.name for lv in load_config(config).levels]  # three queries a level: a quick search of their shares
    edit_config(config, {f"strategy.{lv}": {"total": "1/4", "hispanic": "1/4", "detailed": "1/2"} for lv in levels})
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(state / "plan.csv"),
                       "--query-shares", "--write", str(tmp_path / "tuned.toml"))
    assert code == 0, err
    table = pl.read_csv(tmp_path / "tuned-errors.csv")
    tuned = load_config(tmp_path / "tuned.toml")
    assert any(e.share != f.share for lv in tuned.levels
               for e, f in zip(tuned.strategy[lv.name], load_config(config).strategy[lv.name], strict=True))
    run = release_dir(capsys, tmp_path / "tuned.toml", "--no-units")
    reported = json.loads((run / "manifest.json").read_text())["expected_errors"]["levels"]
    for level, errors in reported.items():
        predicted = table.filter((pl.col("scope") == level) & (pl.col("variable") == "total"))["after"][0]
        assert errors["P1_001N"] == pytest.approx(predicted, rel=1e-6, abs=1e-5)
        predicted = table.filter((pl.col("scope") == level) & (pl.col("variable") == "P2_002N"))["after"][0]
        assert errors["P2_002N"] == pytest.approx(predicted, rel=1e-6)
    code, out, err = cli(capsys, "areas", str(run), "--assign", str(state / "plan.csv"))
    assert code == 0, err
    areas = pl.read_parquet(out.splitlines()[-1]).filter(pl.col("variable") == "P1_001N")
    rms = float(np.sqrt((areas["std_error"] ** 2).mean()))
    predicted = table.filter((pl.col("kind") == "areas") & (pl.col("variable") == "total"))["after"][0]
    assert rms == pytest.approx(predicted, rel=1e-6)


def test_growth_limits_and_the_report_variables_of_a_census_of_ones_own(tmp_path: Path) -> None:
    levels = ["nation", "region", "ward"]
    assert growth_limits([], levels, 1.25) == dict.fromkeys(levels, 1.25)
    assert growth_limits(["1.5", "ward=1.1"], levels, 1.25) == {"nation": 1.5, "region": 1.5, "ward": 1.1}
    for bad, message in (("0.9", ">= 1"), ("x", "not F or LEVEL=F"), ("town=2", "'town' is not a level"),
                         ("inf", ">= 1")):
        with pytest.raises(CensusDPError, match=message):
            growth_limits([bad], levels, 1.25)
    from censusdp.pipeline.cli.commands import preset_text

    (tmp_path / "census.toml").write_text(preset_text("custom", "templates"))
    config = load_config(tmp_path / "census.toml")
    names, weights, shown = report_variables(config)
    assert names[0] == "total" and weights[0].sum() == config.schema.n_cells and shown == len(names)
    assert len(names) == 1 + sum(config.schema.shape) and np.all(weights[1:].sum(axis=0) == len(config.schema.shape))


def test_areas_options_need_areas_and_a_plan_names_blocks_of_the_geography(state: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = preset_config(tmp_path / "pl94.toml", "pl94", files=state)
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--weights", "block:detailed=1",
                       "--max-growth", "1.5")
    assert code != 0 and "go with --areas" in err
    (tmp_path / "plan.csv").write_text("GEOID,area\n999999999999999,A\n")
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(tmp_path / "plan.csv"))
    assert code != 0 and "is not a block of the release" in err and len(err.strip().splitlines()) == 1
    edit_config(config, {"budget.rho": None, "budget.epsilon": "2"})
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(state / "plan.csv"))
    assert code != 0 and "solved from budget.epsilon" in err
    edit_config(config, {"input.geography": None, "units": None})
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(tmp_path / "plan.csv"))
    assert code != 0 and "no geography file" in err


def test_laplace_queries_are_predicted_from_their_rounded_scales(state: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A Laplace query's variance follows its scale, rounded up to 1e-6, not 1/ρ exactly: the table's errors after
    are the written configuration's own, computed afresh from it."""
    from censusdp.pipeline.io.microdata import geography_tree
    from censusdp.pipeline.uncertainty.design import design_of, errors_at

    laplace = {"strategy.block.mechanism": "laplace", "strategy.tract.mechanism": "laplace"}
    config = preset_config(tmp_path / "pl94.toml", "pl94", {"budget.rho": "40", "ledger.cap_rho": "1000", **laplace},
                           files=state)
    code, _, err = cli(capsys, "budget", "optimize", str(config), "--areas", str(state / "plan.csv"),
                       "--max-growth", "1.1", "--write", str(tmp_path / "tuned.toml"))
    assert code == 0, err
    table = pl.read_csv(tmp_path / "tuned-errors.csv")
    tuned = load_config(tmp_path / "tuned.toml")
    design = design_of(tuned, geography_tree(tuned), [state / "plan.csv"])
    levels, plans = errors_at(design, {k: float(v) for k, v in design.level_shares.items()},
                              {k: float(v) for k, v in design.query_shares.items()})
    ours = table.filter(pl.col("kind") == "level")["after"].to_numpy().reshape(levels.shape)
    np.testing.assert_allclose(ours, levels, rtol=1e-9, atol=1e-9)
    ratios = table.filter((pl.col("kind") == "level") & pl.col("ratio").is_not_null())["ratio"]
    assert ratios.max() <= 1.1 and plans[0, 0] < table.filter(pl.col("kind") == "areas")["before"][0]
