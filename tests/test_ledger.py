"""The privacy-loss ledger: caps enforced, exact budgets, never refunded (Thm 19.37(i), §19.7 pitfall), and its CLI."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import uuid
from fractions import Fraction
from pathlib import Path

import pytest

from pipeline.accounting import epsilon_cks20
from pipeline.errors import CensusDPError
from pipeline.ledger import (
    BudgetExceededError,
    Charge,
    PrivacyLedger,
    cap_from_epsilon_delta,
    config_hash,
    default_ledger_path,
)
from pipeline.ledger_command import add_ledger, cmd_ledger
from pipeline.ledger_store import redact_url

HASH = config_hash(b'[budget]\nrho = "1/2"\n')
DELTA = 1e-10


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / ".censusdp-ledger.sqlite"


@pytest.fixture
def ledger(path: Path) -> PrivacyLedger:
    return PrivacyLedger(path)


def charge(ledger: PrivacyLedger, run_id: str, rho: Fraction, dataset: str = "pa", publishable: bool = True) -> Charge:
    return ledger.charge(dataset, run_id, rho, DELTA, HASH, publishable)


def test_cap_is_enforced_exactly(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 2))
    charge(ledger, "r2", Fraction(1, 2))  # reaching the cap exactly is allowed
    with pytest.raises(BudgetExceededError) as info:
        charge(ledger, "r3", Fraction(1, 10**30))
    err = info.value
    assert (err.dataset, err.requested, err.remaining, err.cap) == ("pa", Fraction(1, 10**30), 0, 1)
    assert isinstance(err, CensusDPError) and "\n" not in str(err)
    assert "'pa'" in str(err) and "1/1000000000000000000000000000000" in str(err)
    assert [c.run_id for c in ledger.charges()] == ["r1", "r2"]  # the refused attempt left no trace
    assert ledger.spent("pa") == 1 and ledger.remaining("pa") == 0


def test_refusal_reports_remaining(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1, 2))
    charge(ledger, "r1", Fraction(1, 5))
    with pytest.raises(BudgetExceededError, match=r"requested rho 2/5 exceeds the remaining budget rho 3/10"):
        charge(ledger, "r2", Fraction(2, 5))
    assert ledger.remaining("pa") == Fraction(3, 10)


def test_exact_fractions_round_trip(path: Path) -> None:
    cap = cap_from_epsilon_delta(1.0, DELTA)
    first = PrivacyLedger(path)
    first.ensure_dataset("pa", cap)
    odd = [Fraction(1, 3) * cap, Fraction(10**40 + 1, 10**41) * cap]
    for i, rho in enumerate(odd):
        charge(first, f"r{i}", rho)
    last = cap - sum(odd)
    charge(first, "last", last)
    again = PrivacyLedger(path)  # a new object (and connection) reads the same exact numbers
    assert again.datasets() == {"pa": cap}
    assert [c.rho for c in again.charges("pa")] == [*odd, last]
    assert again.spent("pa") == cap and again.remaining("pa") == 0
    with sqlite3.connect(path) as conn:
        stored = [r for (r,) in conn.execute("SELECT rho FROM censusdp_charges ORDER BY seq")]
        stored_cap = conn.execute("SELECT cap_rho FROM censusdp_datasets").fetchone()[0]
    assert stored[0] == f"{odd[0].numerator}/{odd[0].denominator}" and "/" in stored_cap
    assert Fraction(stored_cap) == cap


def test_charge_record(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    c = charge(ledger, "r1", Fraction(1, 4), publishable=False)
    assert c.status == "charged" and c.publishable is False and c.config_hash == HASH
    assert c.epsilon == epsilon_cks20(Fraction(1, 4), DELTA) and c.delta == DELTA
    assert c.time.endswith("+00:00")
    assert ledger.charges("pa") == [c] and ledger.charges("other") == []


def test_status_updates(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 4))
    for status in ("published", "failed", "postprocess", "charged"):
        ledger.set_status("r1", status)
        assert ledger.charges()[0].status == status
    with pytest.raises(CensusDPError, match="status must be one of"):
        ledger.set_status("r1", "refunded")
    with pytest.raises(CensusDPError, match="no charge with run id"):
        ledger.set_status("nope", "failed")


def test_never_refunded(ledger: PrivacyLedger, path: Path) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(3, 5))
    ledger.set_status("r1", "failed")  # a failed or disappointing run still spent its budget (§19.7 pitfall)
    assert ledger.spent("pa") == Fraction(3, 5)
    with pytest.raises(BudgetExceededError):
        charge(ledger, "r2", Fraction(3, 5))
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="never"):
        conn.execute("DELETE FROM censusdp_charges")
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="never"):
        conn.execute("UPDATE censusdp_charges SET rho = '0/1'")
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="never"):
        conn.execute("UPDATE censusdp_datasets SET cap_rho = '9/1'")
    assert ledger.spent("pa") == Fraction(3, 5)


def test_postprocess_is_free(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1))
    c = charge(ledger, "pp1", Fraction(0))  # re-running post-processing from saved measurements: Thm 19.25
    ledger.set_status("pp1", "postprocess")
    assert c.epsilon == 0 and ledger.spent("pa") == 1


def test_same_run_id_twice_refused(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    ledger.ensure_dataset("nj", Fraction(1))
    charge(ledger, "r1", Fraction(1, 10))
    ledger.set_status("r1", "failed")
    for dataset in ("pa", "nj"):
        with pytest.raises(CensusDPError, match="already been charged"):
            charge(ledger, "r1", Fraction(1, 10), dataset=dataset)
    assert ledger.spent("pa") == Fraction(1, 10) and ledger.spent("nj") == 0


def test_cap_never_changed(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1, 2))
    ledger.ensure_dataset("pa", "2/4")  # the same cap again: fine
    with pytest.raises(CensusDPError, match=r"already has lifetime cap rho 1/2, not 1/3"):
        ledger.ensure_dataset("pa", Fraction(1, 3))
    ledger.ensure_dataset("nj", Fraction(3))
    assert ledger.datasets() == {"nj": 3, "pa": Fraction(1, 2)}


def test_unknown_dataset(ledger: PrivacyLedger) -> None:
    for call in (lambda: charge(ledger, "r1", Fraction(1)), lambda: ledger.spent("pa"),
                 lambda: ledger.remaining("pa")):
        with pytest.raises(CensusDPError, match="unknown dataset 'pa'"):
            call()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rho": 0.25}, "must be exact"),
    ({"rho": Fraction(-1, 4)}, "rho must be >= 0"),
    ({"rho": "x"}, "not an exact rational"),
    ({"delta": 0.0}, "delta must be"),
    ({"delta": 1.0}, "delta must be"),
    ({"config_hash": "secret value"}, "hex digest"),
    ({"run_id": "row 17: age 42\n"}, "run id must be"),
    ({"run_id": ""}, "run id must be"),
    ({"dataset": "a b"}, "dataset id must be"),
    ({"publishable": 1}, "publishable must be"),
])
def test_charge_validation(ledger: PrivacyLedger, kwargs: dict, message: str) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    args = {"dataset": "pa", "run_id": "r1", "rho": Fraction(1, 4), "delta": DELTA, "config_hash": HASH,
            "publishable": True} | kwargs
    with pytest.raises(CensusDPError, match=message):
        ledger.charge(**args)
    assert ledger.charges() == []


def test_bad_caps(ledger: PrivacyLedger) -> None:
    for cap, message in ((Fraction(0), "must be > 0"), (0.5, "must be exact"), ("-1", "must be > 0")):
        with pytest.raises(CensusDPError, match=message):
            ledger.ensure_dataset("pa", cap)


def test_cap_from_epsilon_delta() -> None:
    cap = cap_from_epsilon_delta(2.0, 1e-9)
    assert isinstance(cap, Fraction) and cap > 0 and epsilon_cks20(cap, 1e-9) <= 2.0
    with pytest.raises(CensusDPError):
        cap_from_epsilon_delta(-1.0, 1e-9)


def test_helpers(tmp_path: Path) -> None:
    assert config_hash(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    data = tmp_path / "state" / "microdata.parquet"
    assert default_ledger_path(data) == tmp_path / "state" / ".censusdp-ledger.sqlite"
    assert redact_url("postgresql://alice:s3cret@db.example:5433/ledger?password=x") == \
        "postgresql://alice@db.example:5433/ledger"


def test_bad_locations(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(CensusDPError, match="not a censusdp ledger"):
        PrivacyLedger(junk)
    with pytest.raises(CensusDPError, match="existing directory"):
        PrivacyLedger(tmp_path / "missing" / "ledger.sqlite")
    with pytest.raises(CensusDPError, match="existing directory"):
        PrivacyLedger(tmp_path)


def test_postgres_without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    with pytest.raises(CensusDPError, match=r"pip install 'psycopg\[binary\]'") as info:
        PrivacyLedger("postgresql://alice:s3cret@localhost/ledger")
    assert "s3cret" not in str(info.value)


@pytest.mark.skipif(not os.environ.get("CENSUSDP_TEST_POSTGRES_URL"), reason="no PostgreSQL server configured "
                    "(set CENSUSDP_TEST_POSTGRES_URL=postgresql://... to run)")
def test_postgres_round_trip() -> None:
    pytest.importorskip("psycopg")
    ledger = PrivacyLedger(os.environ["CENSUSDP_TEST_POSTGRES_URL"])
    dataset, run = f"test-{uuid.uuid4().hex}", uuid.uuid4().hex
    ledger.ensure_dataset(dataset, Fraction(1, 3))
    charge(ledger, f"{run}-1", Fraction(1, 7), dataset=dataset)
    ledger.set_status(f"{run}-1", "failed")
    with pytest.raises(BudgetExceededError):
        charge(ledger, f"{run}-2", Fraction(1, 3), dataset=dataset)
    with pytest.raises(CensusDPError, match="already been charged"):
        charge(ledger, f"{run}-1", Fraction(0), dataset=dataset)
    assert ledger.spent(dataset) == Fraction(1, 7) and ledger.remaining(dataset) == Fraction(4, 21)
    assert ledger.charges(dataset)[0].status == "failed"


# --- censusdp ledger ---------------------------------------------------------------------------------------


@pytest.fixture
def filled(ledger: PrivacyLedger) -> PrivacyLedger:
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


def test_cli_text(filled: PrivacyLedger, path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(["--ledger", str(path)], capsys)
    assert str(path) in out and "run-c" not in out
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


def test_cli_json(filled: PrivacyLedger, path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads(run_cli(["--ledger", str(path), "--dataset", "pa-2020", "--json", "--delta", "1e-6"], capsys))
    [pa] = report["datasets"]
    assert pa["dataset"] == "pa-2020" and pa["delta"] == 1e-6
    assert (pa["cap"]["rho"], pa["spent"]["rho"], pa["remaining"]["rho"]) == ("1/1", "11/15", "4/15")
    assert pa["spent"]["epsilon"] == epsilon_cks20(Fraction(11, 15), 1e-6)  # zCDP composition, then conversion
    assert pa["remaining"]["epsilon"] == epsilon_cks20(Fraction(4, 15), 1e-6)
    assert [(c["run_id"], c["rho"], c["status"], c["publishable"]) for c in pa["charges"]] == [
        ("run-a", "2/5", "failed", True), ("run-b", "1/3", "published", False)]
    assert pa["charges"][0]["epsilon"] == epsilon_cks20(Fraction(2, 5), 1e-6)
    assert pa["charges"][0]["config_hash"] == HASH


def test_cli_default_location(filled: PrivacyLedger, path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENSUSDP_LEDGER", str(path))
    assert "run-a" in run_cli([], capsys)
    monkeypatch.delenv("CENSUSDP_LEDGER")
    monkeypatch.chdir(path.parent)  # ./.censusdp-ledger.sqlite
    assert "run-b" in run_cli(["--json"], capsys)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "no ledger given"),
    (["--ledger", "{missing}"], "no such file"),
    (["--ledger", "{path}", "--dataset", "tx"], "unknown dataset 'tx'"),
    (["--ledger", "{path}", "--delta", "2"], "--delta must be in"),
    (["--ledger", "{path}", "--delta", "tiny"], "not a number"),
])
def test_cli_errors(filled: PrivacyLedger, path: Path, argv: list[str], message: str,
                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CENSUSDP_LEDGER", raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # no ./.censusdp-ledger.sqlite here
    argv = [a.format(path=path, missing=tmp_path / "none.sqlite") for a in argv]
    with pytest.raises(CensusDPError, match=message) as info:
        cmd_ledger(argparse.Namespace(ledger=None, dataset=None, delta=None, json=False)
                   if not argv else _namespace(argv))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates a ledger


def _namespace(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="censusdp")
    add_ledger(parser.add_subparsers(dest="command"))
    return parser.parse_args(["ledger", *argv])
