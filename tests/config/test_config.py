from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.budget.allocation import allocate
from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.errors import ConfigError
from tests.helpers.tiny import TINY_TOML


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_pl94_preset_loads_with_the_2020_shape(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, preset_text("pl94")))
    assert [lv.name for lv in config.levels] == ["us", "state", "county", "tract", "block_group", "block"]
    assert [lv.width for lv in config.levels] == [0, 2, 5, 11, 12, 15]
    assert config.schema.shape == (8, 2, 2, 63) and config.schema.n_cells == 2016
    assert config.budget.rho == Fraction(64, 25)
    assert config.budget.level_shares["state"] == Fraction(1440, 4099)
    for level in config.levels:
        names = [e.query.name for e in config.strategy[level.name]]
        assert names == ["total", "hhgq", "votingage", "hispanic", "cenrace", "votingage * hispanic * cenrace",
                         "detailed"]


def test_allocation_is_exact_and_sums_to_rho(tiny_release: Path) -> None:
    config = load_config(tiny_release)
    allocations = allocate(config)
    assert sum(a.rho for a in allocations) == config.budget.rho == 4
    root_total = next(a for a in allocations if a.level == "root" and a.query == "total")
    assert root_total.rho == Fraction(1, 2) and root_total.sigma2 == 2  # sigma² = 2/(2 rho) under replace-one


def without_invariants(text: str) -> str:
    return text[: text.index("[[invariants]]")] + text[text.index("[[structural_zeros]]"):]


def test_add_remove_halves_the_variance(tmp_path: Path) -> None:
    text = without_invariants(TINY_TOML.format(rho="4")).replace('neighbouring = "replace-one"',
                                                                 'neighbouring = "add-remove"')
    allocations = allocate(load_config(write(tmp_path, text)))
    root_total = next(a for a in allocations if a.level == "root" and a.query == "total")
    assert root_total.sigma2 == 1


def test_exact_invariants_under_add_remove_are_refused_naming_both_keys(tmp_path: Path) -> None:
    text = TINY_TOML.format(rho="4").replace('neighbouring = "replace-one"', 'neighbouring = "add-remove"')
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    message = str(caught.value)
    assert "budget.neighbouring" in message and "invariants[0]" in message and "replace-one" in message


def test_presets_use_replace_one() -> None:
    text = preset_text("pl94")
    assert 'neighbouring = "replace-one"' in text and "[[invariants]]" in text


def test_epsilon_target_is_solved_for_rho(tmp_path: Path) -> None:
    """With budget.accountant = "cks20" the target is met by the CKS20 conversion (the PLD's: tests/dp/test_pld*)."""
    text = TINY_TOML.format(rho="4").replace('rho = "4"', 'epsilon = "2"\naccountant = "cks20"')
    config = load_config(write(tmp_path, text))
    from censusdp.pipeline.dp.accounting import epsilon_cks20

    assert config.budget.rho > 0 and epsilon_cks20(config.budget.rho, 1e-10) <= 2


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('root = "1/4"', 'root = "1/3"', "budget.level_shares"),
        ('root = "1/4"', 'root = "0"', "budget.level_shares.root"),
        ('rho = "4"', 'rho = "-1"', "budget.rho"),
        ('rho = "4"', 'rho = "0"', "budget.rho"),
        ('rho = "4"', 'rho = "lots"', "budget.rho"),
        ('delta = "1e-10"', 'delta = "1.5"', "budget.delta"),
        ('"adult * colour" = "1/2"', '"adult * shape" = "1/2"', "strategy.district"),
        ('total = "1/3"', 'total = "1/2"', "strategy.region"),
        ("width = 2", "width = 1", "levels"),
        ('format = "parquet"', 'format = "xlsx"', "input.format"),
        ('neighbouring = "replace-one"', 'neighbouring = "swap"', "budget.neighbouring"),
        ('levels = ["root", "region"]', 'levels = ["region"]', "invariants[0].levels"),
        ('colour = ["blue"]', 'colour = ["purple"]', "structural_zeros[0].colour"),
        ('[output]\ndir = "runs"', '[output]\ndir = "runs"\ncolor = 1', "output.color"),
        ("[strategy.unit]\ndetailed = \"1\"", "", "strategy.unit"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    text = TINY_TOML.format(rho="4")
    assert old in text
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text.replace(old, new, 1)))
    assert caught.value.key.startswith(key), str(caught.value)
    assert "\n" not in str(caught.value)


def test_fractions_are_exact_from_decimals_and_toml_floats(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TINY_TOML.format(rho="4").replace('rho = "4"', "rho = 2.56")))
    assert config.budget.rho == Fraction(256, 100)
