"""Upgrading from ledgers of the earlier layout, and re-runs from saved measurements (postprocess, --resume):
they find the ledger from the user's side and vouch only for what the ledger charged."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.cli import main
from censusdp.pipeline.release import stages
from tests.helpers.releases import cli, release, release_with


def test_postprocess_is_publishable_only_for_the_measurements_the_ledger_charged(
        tiny_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "release", str(tiny_release), "--no-prefect")  # the OS source: publishable
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    assert code == 0 and manifest["random_source"]["publishable"] is True
    code, again, _ = cli(capsys, "postprocess", out)
    assert code == 0 and json.loads((Path(again) / "manifest.json").read_text())["random_source"]["publishable"]
    code, again, _ = cli(capsys, "postprocess", out, "--ledger", str(tmp_path / "elsewhere.sqlite"))
    assert code == 0  # a ledger without the run's charge vouches for nothing
    assert json.loads((Path(again) / "manifest.json").read_text())["random_source"]["publishable"] is False
    code, seeded, _ = release(capsys, tiny_release)  # a seeded run, its manifest edited to claim the other's id
    edited = json.loads((Path(seeded) / "manifest.json").read_text())
    edited["run_id"], edited["random_source"]["publishable"] = manifest["run_id"], True
    (Path(seeded) / "manifest.json").write_text(json.dumps(edited))
    code, again, _ = cli(capsys, "postprocess", seeded)
    assert code == 0
    assert json.loads((Path(again) / "manifest.json").read_text())["random_source"]["publishable"] is False


def crash(release: stages.Release, universe: stages.UniverseRun, level: int,
        runner: object = None) -> None:
    raise RuntimeError("simulated crash")


def test_resume_and_postprocess_refuse_a_recorded_configuration_the_ledger_did_not_charge(
        tiny_release: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Edited recorded configurations would publish a false guarantee (the third review)."""
    with pytest.raises(RuntimeError, match="simulated crash"):  # after the measurements were saved
        release_with(tiny_release, reconcile=crash)
    partial = next((tiny_release.parent / "runs").iterdir())
    marker_path = partial / "measurements" / "complete.json"
    marker = json.loads(marker_path.read_text())
    marker["config_raw"]["budget"]["neighbouring"] = "add-remove"
    marker["config_raw"].pop("invariants")
    marker_path.write_text(json.dumps(marker))
    code, _, err = cli(capsys, "release", str(tiny_release), "--resume", partial.name[1:-len(".partial")])
    assert code != 0 and "not the one the ledger charged" in err
    code, out, _ = release(capsys, tiny_release)
    manifest_path = Path(out) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["config_raw"]["budget"]["rho"] = "1/100"
    manifest_path.write_text(json.dumps(manifest))
    code, _, err = cli(capsys, "postprocess", out)
    assert code != 0 and "not the one the ledger charged" in err


def test_postprocess_never_takes_its_ledger_from_the_runs_files(
        tiny_release: Path, tmp_path: Path, installation_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = release(capsys, tiny_release)
    manifest_path = Path(out) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["ledger"]["location"] = str(tmp_path / "forged.sqlite")
    manifest_path.write_text(json.dumps(manifest))
    code, again, _ = cli(capsys, "postprocess", out)
    assert code == 0 and not (tmp_path / "forged.sqlite").exists()
    assert [c.status for c in PrivacyLedger(installation_ledger).charges()] == ["published", "postprocess"]


def test_the_rejection_says_how_to_check_the_very_files_released(
        tiny_release: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tiny_release.parent / "bad.parquet"
    frame = pl.read_parquet(tiny_release.parent / "microdata.parquet")
    frame.with_columns(pl.lit("purple").alias("COLOUR")).write_parquet(bad)
    code, _, err = release(capsys, tiny_release, "--microdata", str(bad))
    assert code != 0
    command = err.split("can see where with: ", 1)[1].strip().split()
    assert command[:2] == ["censusdp", "check"]
    code = main(command[1:])
    assert code != 0 and "bad.parquet, column COLOUR, row 1" in capsys.readouterr().err
