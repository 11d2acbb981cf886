"""The presets: ``pl94`` (simple shares) and ``pl94-2020`` (the 2020 production US persons configuration)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.cli.commands import preset_names, preset_text

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
    assert preset_names() == ["pl94", "pl94-2020"]
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
