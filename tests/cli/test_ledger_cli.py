"""``censusdp ledger``: the text and JSON reports, where the ledger is looked for, and its one-line errors, on both
backends (``ledger_location``); a password never reaches the output."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path

import pytest

from censusdp.pipeline.budget.ledger.charges import BudgetExceededError, PrivacyLedger
from censusdp.pipeline.cli.ledger import add_ledger, cmd_ledger
from censusdp.pipeline.dp.accounting import epsilon_cks20
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.ledgers import DELTA, HASH, password


@pytest.fixture
def filled(ledger: PrivacyLedger) -> PrivacyLedger:
    return fill(ledger)


def fill(ledger: PrivacyLedger) -> PrivacyLedger:
    ledger.ensure_dataset("pa-2020", Fraction(1))
    ledger.charge("pa-2020", "run-a", Fraction(2, 5), DELTA, HASH, True)
    ledger.set_status("run-a", "failed")
    ledger.charge("pa-2020", "run-b", Fraction(1, 3), DELTA, HASH, False)
    ledger.set_status("run-b", "published")
    with pytest.raises(BudgetExceededError):
        ledger.charge("pa-2020", "run-c", Fraction(2, 5), DELTA, HASH, True)
    ledger.ensure_dataset("nj-2020", Fraction(1, 2))
    return ledger


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser(prog="censusdp")
    add_ledger(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["ledger", *argv])
    assert args.handler is cmd_ledger and args.handler(args) == 0
    return capsys.readouterr().out


def test_cli_text(filled: PrivacyLedger, ledger_location: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(["--ledger", ledger_location], capsys)
    assert filled.location in out and "run-c" not in out
    assert password(ledger_location) is None or password(ledger_location) not in out
    lines = out.splitlines()
    row = next(line for line in lines if line.strip().startswith("run-a"))
    assert row.split()[-4:] == ["1e-10", HASH[:12], "failed", "yes"]
    assert next(line for line in lines if line.strip().startswith("run-b")).split()[-2:] == ["published", "no"]
    pa = lines[lines.index("dataset pa-2020  (epsilon at delta 1e-10)"):]
    spent = next(line for line in pa if line.strip().startswith("spent"))
    assert "0.733333 (11/15)" in spent
    eps_spent = float(spent.split()[-1])
    assert epsilon_cks20(Fraction(11, 15), DELTA) <= eps_spent < epsilon_cks20(Fraction(11, 15), DELTA) + 1e-4
    assert eps_spent < epsilon_cks20(Fraction(2, 5), DELTA) + epsilon_cks20(Fraction(1, 3), DELTA)  # not summed
    assert "dataset nj-2020" in out and "(no charges)" in out


def test_cli_json(filled: PrivacyLedger, ledger_location: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(["--ledger", ledger_location, "--dataset", "pa-2020", "--json", "--delta", "1e-6"], capsys)
    report = json.loads(out)
    assert report["ledger"] == filled.location
    assert password(ledger_location) is None or password(ledger_location) not in out
    [pa] = report["datasets"]
    assert pa["dataset"] == "pa-2020" and pa["delta"] == 1e-6
    assert (pa["cap"]["rho"], pa["spent"]["rho"], pa["remaining"]["rho"]) == ("1/1", "11/15", "4/15")
    assert pa["spent"]["epsilon"] == epsilon_cks20(Fraction(11, 15), 1e-6)  # zCDP composition, then conversion
    assert pa["remaining"]["epsilon"] == epsilon_cks20(Fraction(4, 15), 1e-6)
    assert [(c["run_id"], c["rho"], c["status"], c["publishable"]) for c in pa["charges"]] == [
        ("run-a", "2/5", "failed", True), ("run-b", "1/3", "published", False)]
    assert pa["charges"][0]["epsilon"] == epsilon_cks20(Fraction(2, 5), 1e-6)
    assert pa["charges"][0]["config_hash"] == HASH


def test_cli_env_location(filled: PrivacyLedger, ledger_location: str, capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENSUSDP_LEDGER", ledger_location)
    assert "run-a" in run_cli([], capsys)


def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user data directory under tmp_path (HOME and XDG_DATA_HOME), no $CENSUSDP_LEDGER; the default ledger."""
    from censusdp.pipeline.config.ledger_location import default_ledger_location

    monkeypatch.delenv("CENSUSDP_LEDGER", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    default = Path(default_ledger_location())
    assert default.is_relative_to(tmp_path), default  # never the real user's ledger
    return default


def test_cli_default_location(path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                              tmp_path: Path) -> None:
    """SQLite only: the default ledger is a file in the user data directory, or $CENSUSDP_LEDGER."""
    fill(PrivacyLedger(path))
    monkeypatch.setenv("CENSUSDP_LEDGER", str(path))
    assert "run-a" in run_cli([], capsys)
    default = private_home(tmp_path, monkeypatch)
    default.parent.mkdir(parents=True)
    fill(PrivacyLedger(default))
    assert "run-b" in run_cli(["--json"], capsys)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "no such file"),
    (["--ledger", "{missing}"], "no such file"),
])
def test_cli_errors_no_ledger(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                              tmp_path: Path) -> None:
    """No default ledger yet, or a missing file (SQLite only: a URL cannot be checked without connecting)."""
    default = private_home(tmp_path, monkeypatch)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv = [a.format(missing=tmp_path / "none.sqlite") for a in argv]
    with pytest.raises(CensusDPError, match=message) as info:
        cmd_ledger(argparse.Namespace(ledger=None, dataset=None, delta=None, json=False)
                   if not argv else _namespace(argv))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "none.sqlite").exists() and not default.exists()  # reading never creates a ledger


@pytest.mark.parametrize(("argv", "message"), [
    (["--ledger", "{location}", "--dataset", "tx"], "unknown dataset 'tx'"),
    (["--ledger", "{location}", "--delta", "2"], "--delta: must be a number strictly between 0 and 1"),
    (["--ledger", "{location}", "--delta", "tiny"], "strictly between 0 and 1, got 'tiny'"),
])
def test_cli_errors(filled: PrivacyLedger, ledger_location: str, argv: list[str], message: str,
                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CENSUSDP_LEDGER", raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv = [a.format(location=ledger_location) for a in argv]
    with pytest.raises(CensusDPError, match=message) as info:
        cmd_ledger(_namespace(argv))
    assert "\n" not in str(info.value)
    assert password(ledger_location) is None or password(ledger_location) not in str(info.value)


def _namespace(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="censusdp")
    add_ledger(parser.add_subparsers(dest="command"))
    return parser.parse_args(["ledger", *argv])
