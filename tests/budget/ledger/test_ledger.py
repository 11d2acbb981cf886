"""The privacy-loss ledger: caps enforced, exact budgets, never refunded (Thm 19.37(i), §19.7 pitfall), and its CLI.

Every test of ledger storage runs on both backends through the ``ledger_location`` fixture
(``tests/helpers/postgres.py``): a SQLite file and a fresh database on a throw-away PostgreSQL server.  Tests
of SQLite-only details (its guard triggers, a corrupt file, the default file) use the ``path`` fixture.
"""

from __future__ import annotations

import sqlite3
import sys
from fractions import Fraction
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from censusdp.pipeline.budget.ledger.charges import (
    BudgetExceededError,
    PrivacyLedger,
    config_hash,
)
from censusdp.pipeline.config.ledger_location import redact_url
from censusdp.pipeline.dp.accounting import cap_from_epsilon_delta, epsilon_cks20
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.ledgers import DELTA, HASH, charge, is_postgres_url, password, raw_rows


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


def test_exact_fractions_round_trip(ledger_location: str) -> None:
    cap = cap_from_epsilon_delta(1.0, DELTA)
    first = PrivacyLedger(ledger_location)
    first.ensure_dataset("pa", cap)
    odd = [Fraction(1, 3) * cap, Fraction(10**40 + 1, 10**41) * cap]
    for i, rho in enumerate(odd):
        charge(first, f"r{i}", rho)
    last = cap - sum(odd)
    charge(first, "last", last)
    again = PrivacyLedger(ledger_location)  # a new object (and connection) reads the same exact numbers
    assert again.datasets() == {"pa": cap}
    assert [c.rho for c in again.charges("pa")] == [*odd, last]
    assert again.spent("pa") == cap and again.remaining("pa") == 0
    stored = [r for (r,) in raw_rows(ledger_location, "SELECT rho FROM censusdp_charges ORDER BY seq")]
    [(stored_cap,)] = raw_rows(ledger_location, "SELECT cap_rho FROM censusdp_datasets")
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


def test_never_refunded(ledger: PrivacyLedger) -> None:
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(3, 5))
    ledger.set_status("r1", "failed")  # a failed or disappointing run still spent its budget (§19.7 pitfall)
    assert ledger.spent("pa") == Fraction(3, 5)
    with pytest.raises(BudgetExceededError):
        charge(ledger, "r2", Fraction(3, 5))
    assert ledger.spent("pa") == Fraction(3, 5) and ledger.remaining("pa") == Fraction(2, 5)


def test_sqlite_guards_forbid_rewrites(path: Path) -> None:
    """SQLite only: the file's triggers refuse deleting or altering a charge and changing a cap."""
    ledger = PrivacyLedger(path)
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(3, 5))
    ledger.set_status("r1", "failed")
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
    ({"rho": "x"}, "not an exact number"),
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


def test_helpers(tmp_path: Path) -> None:
    assert config_hash(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert redact_url("postgresql://alice:s3cret@db.example:5433/ledger?password=x") == \
        "postgresql://alice@db.example:5433/ledger"


def test_bad_locations(tmp_path: Path) -> None:  # SQLite only: a corrupt file, a missing directory
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    # "not a database": since PRAGMA synchronous=FULL runs on opening, SQLite's own words come first
    with pytest.raises(CensusDPError, match="not a censusdp ledger|file is not a database"):
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


def test_round_trip(ledger_location: str) -> None:
    ledger = PrivacyLedger(ledger_location)
    dataset, run = "test-set", "0123abcd"
    ledger.ensure_dataset(dataset, Fraction(1, 3))
    charge(ledger, f"{run}-1", Fraction(1, 7), dataset=dataset)
    ledger.set_status(f"{run}-1", "failed")
    with pytest.raises(BudgetExceededError):
        charge(ledger, f"{run}-2", Fraction(1, 3), dataset=dataset)
    with pytest.raises(CensusDPError, match="already been charged"):
        charge(ledger, f"{run}-1", Fraction(0), dataset=dataset)
    assert ledger.spent(dataset) == Fraction(1, 7) and ledger.remaining(dataset) == Fraction(4, 21)
    assert ledger.charges(dataset)[0].status == "failed"
    reopened = PrivacyLedger(ledger_location)  # what was committed is there for the next connection
    assert reopened.spent(dataset) == Fraction(1, 7) and [c.run_id for c in reopened.charges()] == [f"{run}-1"]


def test_location_hides_password(ledger_location: str) -> None:
    ledger = PrivacyLedger(ledger_location)
    if is_postgres_url(ledger_location):
        secret = password(ledger_location)
        assert secret and secret not in ledger.location
        assert ledger.location == redact_url(ledger_location) and ledger.location.startswith("postgresql://censusdp@")
    else:
        assert ledger.location == str(Path(ledger_location).absolute())


def test_postgres_unreachable_database(postgres_url: str) -> None:
    """A database that does not exist: one-line error, naming the URL without its password."""
    parts = urlsplit(postgres_url)
    missing = parts._replace(path=parts.path + "_missing").geturl()
    with pytest.raises(CensusDPError, match="cannot connect") as info:
        PrivacyLedger(missing)
    assert parts.password and parts.password not in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("password", ["Sec[ret", "s3cr/et", "p?w#d", "a@b:c", "pw%40x"])
def test_redact_url_shows_no_part_of_any_password(password: str) -> None:
    for url in (f"postgresql://censusdp:{password}@db.example:5433/ledger?sslmode=require",
                f"postgresql://censusdp:{password}@/ledger?host=/run/pg&password={password}"):
        shown = redact_url(url)
        assert shown == "postgresql://(redacted)" or shown.startswith("postgresql://censusdp@") and \
            shown.endswith("/ledger"), shown
        assert not any(part in shown for part in password.replace("@", " ").replace("/", " ").split() if
                       len(part) > 1 and part not in ("censusdp", "ledger")), shown
    assert redact_url("/var/lib/censusdp/ledger.sqlite") == "/var/lib/censusdp/ledger.sqlite"
