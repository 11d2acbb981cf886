"""The presets: ``pl94`` (simple shares) and ``pl94-2020`` (the 2020 production US persons configuration)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.cli import main
from censusdp.pipeline.cli.commands import bundled_names, preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.config.model import Format, ReleaseConfig, Universe
from censusdp.pipeline.config.options import load_release_config

F = Fraction
RHO_2020 = F(293764, 114921)
LEVEL_SHARES_2020 = {"us": F(104, 4099), "state": F(1440, 4099), "county": F(447, 4099), "tract": F(687, 4099),
                     "block_group": F(1256, 4099), "block": F(165, 4099)}
# (level, query) -> share of the total rho, g x q, from ProductionCandidate20210527US_mult8_add02_dsepJune3 and the
# geolevel proportions of person_US.ini (uscensusbureau/DAS_2020_Redistricting_Production_Code)
PRODUCTION_SHARES = {
    ("us", "detailed"): F(104, 4099) * F(189, 241),
    ("us", "votingage * hispanic * cenrace"): F(104, 4099) * F(26, 241),
    ("state", "total"): F(1440, 4099) * F(3773, 4097),
    ("county", "votingage * hispanic * cenrace"): F(447, 4099) * F(101, 4097),
    ("tract", "total"): F(687, 4099) * F(1567, 4102),
    ("tract", "hispanic * cenrace"): F(687, 4099) * F(1933, 4102),
    ("tract", "cenrace"): F(687, 4099) * F(4, 2051),
    ("block_group", "hispanic * cenrace"): F(1256, 4099) * F(1055, 4099),
    ("block_group", "detailed"): F(1256, 4099) * F(1288, 4099),
    ("block", "hhinstlevels"): F(165, 4099) * F(5, 4097),
    ("block", "detailed"): F(165, 4099) * F(3945, 4097),
}


def test_both_presets_are_offered() -> None:
    assert bundled_names() == ["pl94", "pl94-2020"]
    with pytest.raises(Exception, match="available: pl94, pl94-2020"):
        preset_text("pl94-2010")


def test_budget_of_pl94_2020_is_the_production_allocation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--preset", "pl94-2020", "--out", str(tmp_path / "pl94-2020.toml")]) == 0
    capsys.readouterr()
    assert main(["budget", str(tmp_path / "pl94-2020.toml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert F(report["rho_exact"]) == RHO_2020 == 1 / F(339, 542) ** 2 and report["neighbouring"] == "replace-one"
    rows = {(a["level"], a["query"]): a for a in report["allocation"]}
    assert len(rows) == 65 and ("us", "total") not in rows  # 11 queries per level, no total at the US level
    for level, share in LEVEL_SHARES_2020.items():
        assert sum(F(a["rho_exact"]) for (lv, _), a in rows.items() if lv == level) == RHO_2020 * share
    for key, share in PRODUCTION_SHARES.items():
        rho_q = F(rows[key]["rho_exact"])
        assert rho_q == RHO_2020 * share, key
        assert F(rows[key]["sigma2_exact"]) == 1 / rho_q  # replace-one: sigma² = Δ₂²/(2 rho_q) = 1/rho_q
    assert sum(F(a["rho_exact"]) for a in rows.values()) == RHO_2020
    assert report["invariants"] == [{"query": "total", "levels": ["us", "state"], "protected": False}]
    assert abs(report["epsilon_cks20"] - 17.14) < 0.01  # the production certificate's epsilon at delta 1e-10


# The 2020 production housing-unit run ("P.L. 94-171 Redistricting Data US Units", configuration unit_US.ini as
# printed in docs/certificates/DAS-PL94171-PRODUCTION-RUN1A-202106241420-US-Units.certificate.pdf of
# uscensusbureau/DAS_2020_Redistricting_Production_Code): global_scale and geolevel_budget_prop
UNITS_RHO_2020 = 1 / F(12343, 3379) ** 2
UNITS_LEVEL_SHARES_2020 = {"us": F(1, 205), "state": F(1, 205), "county": F(7, 82), "tract": F(364, 1025),
                           "block_group": F(1759, 4100), "block": F(99, 820)}
LEVELS = ["us", "state", "county", "tract", "block_group", "block"]


def preset_config(tmp_path: Path, name: str) -> ReleaseConfig:
    path = tmp_path / f"{name}.toml"
    path.write_text(preset_text(name))
    return load_config(path)


def test_the_units_file_is_beside_the_microdata_unless_named(tmp_path: Path) -> None:
    """The preset names no units file: it is units.parquet beside the persons' microdata, wherever that is."""
    (tmp_path / "pl94.toml").write_text(preset_text("pl94"))
    elsewhere = tmp_path / "data" / "people.parquet"
    config = load_release_config(str(tmp_path / "pl94.toml"), microdata=str(elsewhere))
    assert config.units is not None and config.units.input.path == tmp_path / "data" / "units.parquet"
    named = load_release_config(str(tmp_path / "pl94.toml"), microdata=str(elsewhere), units=str(tmp_path / "u.csv"))
    assert named.units is not None and named.units.input.path == tmp_path / "u.csv"
    own_text = preset_text("pl94").replace("[units]\n", '[units]\npath = "own/units.parquet"\n')
    (tmp_path / "own.toml").write_text(own_text)
    own = load_release_config(str(tmp_path / "own.toml"), microdata=str(elsewhere))
    assert own.units is not None and own.units.input.path == tmp_path / "own" / "units.parquet"


@pytest.mark.parametrize("name", ["pl94", "pl94-2020"])
def test_both_presets_have_a_units_universe(tmp_path: Path, name: str) -> None:
    config = preset_config(tmp_path, name)
    units = config.units
    assert units is not None and units.universe is Universe.UNITS
    assert units.input.path == tmp_path / "units.parquet" and units.input.format is Format.PARQUET
    assert units.input.geography == config.input.geography and units.levels == config.levels
    assert [(a.name, a.column, a.values) for a in units.schema.attributes] == [
        ("hhgq", "GQTYPE", tuple(str(t) for t in range(8))), ("occupancy", "VACS", ("1", "2"))]
    for level in LEVELS:
        entries = units.strategy[level]
        assert [e.query.name for e in entries] == ["detailed", "occupancy"] and sum(e.share for e in entries) == 1
    # housing units and facilities by type exact everywhere (not protected); facilities are never vacant
    assert [(i.query.name, i.levels) for i in units.invariants] == [("hhgq", tuple(LEVELS))]
    assert units.structural_zeros == ({"hhgq": tuple(str(t) for t in range(1, 8)), "occupancy": ("2",)},)
    assert units.budget.rho < config.budget.rho / 20  # small next to the persons' (docs/units.md)
    assert config.ledger.cap_rho >= config.budget.rho + units.budget.rho  # the ledger is charged both


@pytest.mark.parametrize("name", ["pl94", "pl94-2020"])
def test_units_mappings_follow_the_mdf_codes(tmp_path: Path, name: str) -> None:
    """GQTYPE: "000" a housing unit, else the first digit of the detailed code, 7 for 7 and above (the rule the
    production reader checks its table against, cef_2020_dhcp_reader.hhgq_recode); VACS: 0 occupied, 1-7 vacant."""
    units = preset_config(tmp_path, name).units
    assert units is not None
    hhgq = units.schema.attribute("hhgq").mapping
    assert hhgq["000"] == "0" and len(hhgq) == 30
    assert all(label == str(min(int(code) // 100, 7)) for code, label in hhgq.items() if code != "000")
    assert {label for label in hhgq.values()} == {str(t) for t in range(8)}
    assert units.schema.attribute("occupancy").mapping == {"0": "1", **{str(v): "2" for v in range(1, 8)}}


def test_pl94_2020_units_are_the_production_housing_unit_run(tmp_path: Path) -> None:
    from censusdp.pipeline.dp.accounting import epsilon_cks20

    config = preset_config(tmp_path, "pl94-2020")
    units = config.units
    assert units is not None
    assert units.budget.rho == UNITS_RHO_2020 == F(11417641, 152349649)
    assert units.budget.level_shares == UNITS_LEVEL_SHARES_2020 and sum(UNITS_LEVEL_SHARES_2020.values()) == 1
    assert abs(epsilon_cks20(units.budget.rho, 1e-10) - 2.47) < 0.01  # the certificate's "h1 2.47"
    assert config.ledger.cap_rho == RHO_2020 + 4 * UNITS_RHO_2020  # one release's per-person bound
    assert units.level_passes("block").rounding == ()  # production rounds the cells in one pass


def test_pl94_units_take_the_persons_level_shares(tmp_path: Path) -> None:
    config = preset_config(tmp_path, "pl94")
    assert config.units is not None and config.units.budget.rho == F(3, 40)
    assert config.units.budget.level_shares == config.budget.level_shares
