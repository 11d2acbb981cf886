"""Attributes from integer ranges (``bins``): labels, the top-coded last bin, and values outside every bin."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.config.load import parse_config
from censusdp.pipeline.errors import ConfigError
from tests.helpers.tiny import TINY_TOML, tiny_microdata

AGE = '\n[[attributes]]\nname = "age"\ncolumn = "AGE"\nbins = {bins}\n'


def with_age(bins: str = "[0, 18, 65]", extra: str = "") -> dict:
    text = TINY_TOML.format(rho="4")
    at = text.index("[strategy.root]")
    return tomllib.loads(text[:at] + AGE.format(bins=bins) + extra + "\n" + text[at:])


def test_bins_are_labelled_by_range_and_the_last_is_top_coded() -> None:
    age = parse_config(with_age(), "c.toml", Path(".")).schema.attribute("age")
    assert age.values == ("0-17", "18-64", "65+") and age.bins == (0, 18, 65)
    named = parse_config(with_age("[0, 5]", 'values = ["young", "old"]'), "c.toml", Path("."))
    assert named.schema.attribute("age").values == ("young", "old")
    assert parse_config(with_age("[0, 1, 2]"), "c.toml", Path(".")).schema.attribute("age").values == ("0", "1", "2+")


@pytest.mark.parametrize(("bins", "extra", "key"), [
    ("[18, 0]", "", "bins"), ("[]", "", "bins"), ('["0", "5"]', "", "bins"), ("[0, 1.5]", "", "bins"),
    ("[0, 5]", 'values = ["one"]', "values"), ("[0, 5]", 'values = ["a", "a"]', "values"),
    ("[0, 5]", 'mapping = { x = "0-4" }', "mapping"),
])
def test_bad_bins_name_their_key(bins: str, extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(with_age(bins, extra), "c.toml", Path("."))
    assert caught.value.key.endswith(f".{key}") and "\n" not in str(caught.value)


def test_a_release_counts_ages_by_bin_and_check_names_a_value_outside_every_bin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    micro, geo = tiny_microdata()
    ages = np.random.default_rng(3).integers(0, 101, micro.height)  # test-only
    micro = micro.with_columns(pl.Series("AGE", ages))
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    text = TINY_TOML.format(rho="4")
    at = text.index("[strategy.root]")
    config = tmp_path / "config.toml"
    config.write_text(text[:at] + AGE.format(bins="[0, 18, 65]") + "\n" + text[at:])
    assert main(["-q", "release", str(config), "--no-prefect", "--insecure-seed", "1"]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    unit = pl.read_parquet(run_dir / "tables" / "unit.parquet")
    assert sorted(unit["age"].cast(pl.Utf8).unique()) == ["0-17", "18-64", "65+"]
    assert unit["count"].sum() == micro.height  # the total is invariant at the root
    micro.with_columns(pl.Series("AGE", [*ages[:6].tolist(), -1, *ages[7:].tolist()])).write_parquet(
        tmp_path / "bad.parquet")
    code = main(["check", str(config), "--microdata", str(tmp_path / "bad.parquet")])
    err = capsys.readouterr().err
    assert code == 1 and "row 7" in err and "AGE" in err and "outside the domain of attribute age" in err, err
