"""The privacy section is stated before the charge: a release whose certified accountant works only past its old
support releases and is printed by ``budget``, and an accountant that fails stops the release before anything
is spent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.config.ledger_location import default_ledger_location
from censusdp.pipeline.io import manifest
from tests.helpers.releases import cli, release_dir
from tests.helpers.tiny import TINY_TOML


def small_sigma(config: Path) -> Path:
    """Add-remove, no invariants, rho 30, the detailed query only, equal level shares: every level's query has
    rho_q = 7.5, where the accountant's old support put mass > delta at +infinity and raised after the charge."""
    text = TINY_TOML.format(rho="30").replace('neighbouring = "replace-one"', 'neighbouring = "add-remove"')
    head, strategy = text.split("[strategy.root]")
    strategy = strategy[strategy.index("[[structural_zeros]]"):]  # the invariants go too
    levels = "".join(f'[strategy.{name}]\ndetailed = "1"\n\n' for name in ("root", "region", "district", "unit"))
    config.write_text(head + levels + strategy)
    return config


def test_a_small_sigma_release_publishes_and_budget_prints_it(tiny_release: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = small_sigma(tiny_release)
    code, out, err = cli(capsys, "budget", str(config))
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("epsilon_pld = "))
    assert "certified privacy curve" in line
    run_dir = release_dir(capsys, config)
    privacy = json.loads((run_dir / "manifest.json").read_text())["privacy"]
    assert privacy["rho_exact"] == "30" and "epsilon_pld_note" not in privacy
    printed = float(line.split()[2])  # the same certified figure, rounded up to 6 places
    assert privacy["epsilon_pld"] <= printed <= privacy["epsilon_pld"] + 1e-6
    assert privacy["epsilon_pld"] < privacy["epsilon"]  # tighter than CKS20 from rho alone


def test_an_accountant_that_fails_stops_the_release_before_the_charge(tiny_release: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise ValueError("the accountant failed")

    monkeypatch.setattr(manifest, "epsilon_pld_of", failing)
    code, _, err = cli(capsys, "release", str(tiny_release), "--no-prefect", "--insecure-seed", "3")
    assert code != 0 and "ValueError" in err
    assert PrivacyLedger(default_ledger_location()).charges() == []  # nothing spent
    assert not (tiny_release.parent / "runs").exists() or not any((tiny_release.parent / "runs").iterdir())
