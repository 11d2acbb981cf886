"""The ledger's storage backends (``pipeline.budget.ledger.store``): file permissions, WAL, locking and upgrades.

The ledger file holds the fingerprint key, so only its owner may read it; its charges must be ordered, durable and
serialised (a charge's cap check and insert are one atomic step, Thm 19.37(i) counts every charge), while reads are
never blocked by a charge in progress.  Opening a ledger of an earlier layout adds the newer columns.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from censusdp.pipeline.budget.ledger.charges import PrivacyLedger
from censusdp.pipeline.budget.ledger.store import _DDL, SQLiteStore, open_store
from censusdp.pipeline.config.ledger_location import redact_url
from censusdp.pipeline.errors import CensusDPError
from tests.helpers.ledgers import HASH, charge, is_postgres_url, password, raw_rows


@contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# --- where a ledger lives ---------------------------------------------------------------------------------


@pytest.mark.parametrize("location", [123, None, "", b"ledger.sqlite"])
def test_a_location_must_be_a_path_or_url(location: Any) -> None:
    with pytest.raises(CensusDPError, match="the location must be a file path or a postgresql:// URL"):
        open_store(location)


def test_a_path_location_is_a_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    store = open_store("~/ledger.sqlite")  # expanded, like a shell would
    assert isinstance(store, SQLiteStore) and store.display == str(tmp_path / "ledger.sqlite")
    assert (tmp_path / "ledger.sqlite").is_file()
    assert isinstance(open_store(tmp_path / "other.sqlite"), SQLiteStore)


@pytest.mark.parametrize("where", ["a directory", "in a missing directory"])
def test_not_a_file_in_an_existing_directory(tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "a directory" else tmp_path / "missing" / "ledger.sqlite"
    with pytest.raises(CensusDPError, match="not a file in an existing directory"):
        SQLiteStore(path)
    assert not (tmp_path / "missing").exists()


# --- only its owner may read it (it holds the fingerprint key) ---------------------------------------------


def test_a_new_ledger_file_is_the_owners_only(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with umask(0o022):
        PrivacyLedger(path)
    assert mode(path) == 0o600


def test_an_earlier_ledger_readable_by_others_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    PrivacyLedger(path).ensure_dataset("pa", Fraction(1))
    path.chmod(0o644)
    ledger = PrivacyLedger(path)
    assert mode(path) == 0o600
    assert ledger.datasets() == {"pa": 1}  # the file itself was kept, with its contents


def test_a_private_ledger_keeps_its_mode(tmp_path: Path) -> None:
    """Only a ledger readable by group or others is changed: an owner-only mode is the owner's choice."""
    path = tmp_path / "ledger.sqlite"
    PrivacyLedger(path)
    path.chmod(0o700)
    PrivacyLedger(path)
    assert mode(path) == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_another_users_ledger_is_not_chmodded(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    PrivacyLedger(path)
    path.chmod(0o644)
    os.chown(path, 54321, -1)
    PrivacyLedger(path)
    assert mode(path) == 0o644


# --- WAL, durability, order ------------------------------------------------------------------------------------


def test_sqlite_ledger_is_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    store = SQLiteStore(path)
    with sqlite3.connect(path) as conn:  # WAL is persistent: a plain connection sees it
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn = store._connect()
    try:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.isolation_level is None  # transactions are the store's own BEGIN ... COMMIT
    finally:
        conn.close()


def test_the_location_shown_has_no_password(ledger_location: str) -> None:
    store = open_store(ledger_location)
    if is_postgres_url(ledger_location):
        secret = password(ledger_location)
        assert secret and store.display == redact_url(ledger_location) and secret not in store.display
        assert store.display.startswith("postgresql://censusdp@/censusdp_test_")
    else:
        assert store.display == str(Path(ledger_location).absolute())
    with pytest.raises(CensusDPError) as info, store.transaction(write=False) as sql:
        sql("SELECT * FROM no_such_table")
    assert str(info.value).startswith(f"ledger {store.display}: ") and "\n" not in str(info.value)
    assert not password(ledger_location) or password(ledger_location) not in str(info.value)


def test_charges_are_numbered_in_order(ledger_location: str) -> None:
    ledger = PrivacyLedger(ledger_location)
    ledger.ensure_dataset("pa", Fraction(1))
    for i in range(3):
        charge(ledger, f"r{i}", Fraction(1, 10))
    seqs = [s for (s,) in raw_rows(ledger_location, "SELECT seq FROM censusdp_charges ORDER BY run_id")]
    assert seqs == [1, 2, 3]


def test_a_committed_write_is_seen_by_a_new_store(ledger_location: str) -> None:
    store = open_store(ledger_location)
    with store.transaction() as sql:
        sql("INSERT INTO censusdp_datasets (id, cap_rho, created) VALUES (?, ?, ?)", ("pa", "1/2", "now"))
    with open_store(ledger_location).transaction(write=False) as sql:
        assert sql("SELECT id, cap_rho FROM censusdp_datasets") == [("pa", "1/2")]


def test_a_failed_transaction_leaves_nothing(ledger_location: str) -> None:
    store = open_store(ledger_location)
    with pytest.raises(RuntimeError), store.transaction() as sql:
        sql("INSERT INTO censusdp_datasets (id, cap_rho, created) VALUES (?, ?, ?)", ("pa", "1/2", "now"))
        raise RuntimeError("boom")
    assert raw_rows(ledger_location, "SELECT id FROM censusdp_datasets") == []


# --- upgrading a ledger of the first layout ---------------------------------------------------------------------


def test_a_ledger_of_the_first_layout_gets_the_new_columns(ledger_location: str) -> None:
    if is_postgres_url(ledger_location):
        import psycopg

        connect, seq = psycopg.connect, "BIGSERIAL PRIMARY KEY"
    else:
        connect, seq = sqlite3.connect, "INTEGER PRIMARY KEY AUTOINCREMENT"
    with connect(ledger_location) as conn:
        for ddl in _DDL:
            conn.execute(ddl.format(seq=seq))
        conn.execute("INSERT INTO censusdp_datasets VALUES ('pa', '1/1', 'then')")
        conn.execute("INSERT INTO censusdp_charges (run_id, dataset, charged_at, rho, delta, epsilon, config_hash,"
                     f" status, publishable) VALUES ('old', 'pa', 'then', '1/4', 1e-10, 1.5, '{HASH}', 'published', 1)")
    ledger = PrivacyLedger(ledger_location)
    [old] = ledger.charges()
    assert (old.run_id, old.rho, old.status, old.reason, old.measurements) == ("old", Fraction(1, 4), "published",
                                                                                None, None)
    ledger.set_status("old", "failed", "run-error")
    ledger.record_measurements("old", "ab" * 32)
    again = PrivacyLedger(ledger_location)  # opening an upgraded ledger again changes nothing
    [old] = again.charges()
    assert (old.status, old.reason, old.measurements) == ("failed", "run-error", "ab" * 32)


# --- the SQLite busy handling -----------------------------------------------------------------------------------


class _FakeConnection:
    """Stands for a SQLite connection whose ``PRAGMA journal_mode`` fails with the given errors, then works."""

    def __init__(self, errors: list[Exception], journal: str, log: list[str]) -> None:
        self.errors, self.journal, self.log = errors, journal, log

    def execute(self, query: str) -> Any:
        self.log.append(query.lower())  # SQL keywords and pragma names are case-insensitive
        if self.errors:
            raise self.errors.pop(0)
        return self

    def fetchone(self) -> tuple[str]:
        return (self.journal,)

    def close(self) -> None:
        self.log.append("close")


def _faked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errors: list[Exception], journal: str = "wal",
           timeout_s: float = 30.0) -> tuple[SQLiteStore, list[str]]:
    store = SQLiteStore(tmp_path / "ledger.sqlite", busy_timeout_s=timeout_s)
    log: list[str] = []
    monkeypatch.setattr(store, "_connect", lambda: _FakeConnection(errors, journal, log))
    return store, log


@pytest.mark.parametrize("message", ["database is locked", "database is busy"])
def test_switching_to_wal_is_retried_while_the_file_is_busy(message: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store, log = _faked(tmp_path, monkeypatch, [sqlite3.OperationalError(message)] * 2, journal="delete")
    store._wal()
    assert log == ["pragma journal_mode", "close"] * 2 + ["pragma journal_mode", "pragma journal_mode=wal", "close"]


def test_a_file_already_in_wal_is_left_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, log = _faked(tmp_path, monkeypatch, [])
    store._wal()
    assert log == ["pragma journal_mode", "close"]


@pytest.mark.parametrize(("error", "message"), [
    (sqlite3.OperationalError("disk I/O error"), r"ledger .*ledger.sqlite: disk I/O error$"),
    (sqlite3.DatabaseError("file is not a database"), "not a censusdp ledger"),
])
def test_other_errors_are_not_retried(error: Exception, message: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store, log = _faked(tmp_path, monkeypatch, [error, error, error])
    with pytest.raises(CensusDPError, match=message):
        store._wal()
    assert log == ["pragma journal_mode", "close"]


def test_busy_past_the_timeout_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, log = _faked(tmp_path, monkeypatch, [sqlite3.OperationalError("database is locked")] * 10**6,
                        timeout_s=0.05)
    with pytest.raises(CensusDPError, match="database is locked"):
        store._wal()
    assert 2 <= log.count("close") < 10**6


def test_a_blocked_writer_waits_the_configured_busy_timeout(tmp_path: Path) -> None:
    """A write transaction waits for the write lock at most ``busy_timeout_s`` (here 0.2 s, SQLite's default
    would be 5 s), then fails with one line naming the ledger, and nothing of it is kept."""
    path = tmp_path / "ledger.sqlite"
    store = SQLiteStore(path, busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(CensusDPError, match="database is locked") as info, store.transaction() as sql:
            sql("INSERT INTO censusdp_datasets (id, cap_rho, created) VALUES ('pa', '1/1', 'now')")
        assert time.monotonic() - started < 4.0  # the configured 0.2 s, far from SQLite's default 5 s
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with store.transaction(write=False) as sql:
        assert sql("SELECT id FROM censusdp_datasets") == []


# --- PostgreSQL: the row lock of a charge ------------------------------------------------------------------------


def _lock_waits(url: str, worker: threading.Thread, timeout_s: float = 60.0) -> bool:
    """True as soon as some session of this database waits for a lock; False if ``worker`` ends first."""
    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                      "AND wait_event_type = 'Lock'").fetchone()
            if waiting and waiting[0]:
                return True
            if not worker.is_alive():
                return False
            time.sleep(0.01)
    raise AssertionError("neither a lock wait nor the end of the call")


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, outcome


def test_postgres_charge_locks_the_dataset_row(postgres_url: str) -> None:
    """The cap check of a charge reads the dataset row ``FOR UPDATE``: it waits while another transaction holds
    that row, so two charges on one dataset cannot both pass the check."""
    import psycopg

    ledger = PrivacyLedger(postgres_url)
    ledger.ensure_dataset("pa", Fraction(1))
    with psycopg.connect(postgres_url) as holder:
        holder.execute("SELECT 1 FROM censusdp_datasets WHERE id = 'pa' FOR NO KEY UPDATE")
        worker, outcome = _in_thread(lambda: charge(ledger, "r1", Fraction(1, 2)))
        assert _lock_waits(postgres_url, worker), f"the charge did not wait for the row lock: {outcome}"
        holder.rollback()
    worker.join(60)
    assert not worker.is_alive() and outcome and outcome[0].run_id == "r1"
    assert ledger.spent("pa") == Fraction(1, 2)


def test_postgres_reads_do_not_wait_for_a_charge_in_progress(postgres_url: str) -> None:
    import psycopg

    ledger = PrivacyLedger(postgres_url)
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 4))
    with psycopg.connect(postgres_url) as holder:
        holder.execute("SELECT 1 FROM censusdp_datasets WHERE id = 'pa' FOR UPDATE")
        for read in (lambda: ledger.spent("pa"), lambda: ledger.remaining("pa")):
            worker, outcome = _in_thread(read)
            assert not _lock_waits(postgres_url, worker), "a read waited for a charge in progress"
            worker.join(60)
            assert outcome and outcome[0] in (Fraction(1, 4), Fraction(3, 4))
        holder.rollback()


def test_sqlite_reads_do_not_wait_for_a_charge_in_progress(tmp_path: Path) -> None:
    """WAL: while another process holds the write lock, every read of the ledger still answers at once."""
    path = tmp_path / "ledger.sqlite"
    ledger = PrivacyLedger(path)
    ledger.ensure_dataset("pa", Fraction(1))
    charge(ledger, "r1", Fraction(1, 4))
    ledger._store._timeout = 0.1  # type: ignore[attr-defined]  # a blocked call fails fast instead of waiting 60 s
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        assert ledger.spent("pa") == Fraction(1, 4) and ledger.remaining("pa") == Fraction(3, 4)
        assert [c.run_id for c in ledger.charges()] == ["r1"] and ledger.datasets() == {"pa": 1}
        with pytest.raises(CensusDPError, match="database is locked"):
            charge(ledger, "r2", Fraction(1, 4))  # a write does wait (and here gives up)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
