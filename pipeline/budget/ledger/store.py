"""Storage backends of the privacy ledger (``pipeline.budget.ledger.charges``): SQLite files and PostgreSQL.

``transaction(write)`` yields ``sql(query, params) -> rows`` (``?`` placeholders), committed at the end of the block,
rolled back on any exception; a write makes the cap check and the insert one atomic step across processes
(docs/ledger.md).  Database errors become one-line ``CensusDPError``s that never echo a password.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from censusdp.pipeline.config.ledger_location import is_postgres_url, redact_url
from censusdp.pipeline.errors import CensusDPError

SQL = Callable[..., list[tuple[Any, ...]]]
_PG_LOCK_KEY = 0x63656E73757364  # pg_advisory_xact_lock key serialising table creation ("censusd")
_DDL = (
    "CREATE TABLE IF NOT EXISTS censusdp_datasets (id TEXT PRIMARY KEY, cap_rho TEXT NOT NULL, created TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS censusdp_charges (seq {seq}, run_id TEXT NOT NULL UNIQUE, "
    "dataset TEXT NOT NULL REFERENCES censusdp_datasets (id), charged_at TEXT NOT NULL, rho TEXT NOT NULL, "
    "delta DOUBLE PRECISION NOT NULL, epsilon DOUBLE PRECISION NOT NULL, config_hash TEXT NOT NULL, "
    "status TEXT NOT NULL CHECK (status IN ('charged', 'published', 'failed', 'postprocess')), "
    "publishable INTEGER NOT NULL CHECK (publishable IN (0, 1)), "
    # why a charged run failed (a FailureReason category), and the digest of the measurements it drew
    "reason TEXT, measurements TEXT)",
    "CREATE INDEX IF NOT EXISTS censusdp_charges_by_dataset ON censusdp_charges (dataset)",
    # keyed content fingerprints (pipeline.io.fingerprint): the same data under another name finds its dataset
    "CREATE TABLE IF NOT EXISTS censusdp_fingerprints (fingerprint TEXT PRIMARY KEY, kind TEXT NOT NULL, "
    "dataset TEXT NOT NULL REFERENCES censusdp_datasets (id), first_run TEXT NOT NULL, created TEXT NOT NULL)",
    # the ledger's secrets (the fingerprint key): readable by whoever can read the ledger, nobody else
    "CREATE TABLE IF NOT EXISTS censusdp_keys (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# SQLite only: charges are never deleted or altered (only their status), caps never changed.
_SQLITE_GUARDS = (
    "CREATE TRIGGER IF NOT EXISTS censusdp_charges_keep BEFORE DELETE ON censusdp_charges "
    "BEGIN SELECT RAISE(ABORT, 'ledger charges are never deleted'); END",
    "CREATE TRIGGER IF NOT EXISTS censusdp_charges_fixed BEFORE UPDATE OF run_id, dataset, rho, delta, epsilon, "
    "config_hash, publishable, charged_at ON censusdp_charges "
    "BEGIN SELECT RAISE(ABORT, 'ledger charges are never altered'); END",
    "CREATE TRIGGER IF NOT EXISTS censusdp_caps_fixed BEFORE UPDATE ON censusdp_datasets "
    "BEGIN SELECT RAISE(ABORT, 'ledger caps are never changed'); END",
    "CREATE TRIGGER IF NOT EXISTS censusdp_fingerprints_keep BEFORE DELETE ON censusdp_fingerprints "
    "BEGIN SELECT RAISE(ABORT, 'ledger fingerprints are never deleted'); END",
    "CREATE TRIGGER IF NOT EXISTS censusdp_fingerprints_fixed BEFORE UPDATE ON censusdp_fingerprints "
    "BEGIN SELECT RAISE(ABORT, 'ledger fingerprints are never altered'); END",
    "CREATE TRIGGER IF NOT EXISTS censusdp_keys_fixed BEFORE UPDATE ON censusdp_keys "
    "BEGIN SELECT RAISE(ABORT, 'ledger keys are never changed'); END",
)


class Store(Protocol):
    display: str
    lock_suffix: str
    charge_lock: str
    integrity_errors: tuple[type[BaseException], ...]

    def transaction(self, write: bool = True) -> AbstractContextManager[SQL]: ...


def open_store(location: str | Path) -> Store:
    """A backend for a file path (SQLite) or a ``postgresql://`` URL; tables are created if missing."""
    if is_postgres_url(location):
        return PostgresStore(str(location))
    if not isinstance(location, (str, Path)) or not str(location):
        raise CensusDPError("ledger: the location must be a file path or a postgresql:// URL")
    return SQLiteStore(Path(location).expanduser())


class SQLiteStore:
    """A ledger in one SQLite file, in WAL mode, written only inside ``BEGIN IMMEDIATE`` transactions."""

    lock_suffix = ""  # BEGIN IMMEDIATE already holds the write lock
    charge_lock = ""  # ... for the whole transaction
    integrity_errors: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,)

    def __init__(self, path: Path, busy_timeout_s: float = 60.0) -> None:
        self.path, self.display, self._timeout = path, str(path.absolute()), busy_timeout_s
        if path.is_dir() or not path.parent.is_dir():
            raise CensusDPError(f"ledger {path}: not a file in an existing directory")
        if not path.exists():  # only its owner may read it: it holds the fingerprint key
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        elif path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(0o600)  # a ledger file copied or made by hand, readable by others
        self._wal()
        with self.transaction() as sql:
            for ddl in _DDL + _SQLITE_GUARDS:
                sql(ddl.format(seq="INTEGER PRIMARY KEY AUTOINCREMENT"))

    def _wal(self) -> None:
        """Switch the file to WAL (persistent); switching needs a moment alone, so retry while it is busy."""
        deadline = time.monotonic() + self._timeout
        while True:
            conn = self._connect()
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) and "busy" not in str(error) or time.monotonic() > deadline:
                    raise CensusDPError(f"ledger {self.path}: {error}") from None
            except sqlite3.DatabaseError as error:
                raise CensusDPError(f"ledger {self.path}: not a censusdp ledger ({error})") from None
            finally:
                conn.close()
            time.sleep(0.01)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            # FULL: a charge is on disk before the commit returns (WAL's default may lose it on power loss)
            conn.execute("PRAGMA synchronous=FULL")
            return conn
        except sqlite3.OperationalError as error:
            raise CensusDPError(f"ledger {self.path}: cannot open ({error})") from None
        except sqlite3.DatabaseError as error:
            raise CensusDPError(f"ledger {self.path}: not a censusdp ledger ({error})") from None
        except sqlite3.Error as error:
            raise CensusDPError(f"ledger {self.path}: cannot open ({error})") from None

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[SQL]:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

            def sql(query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                return conn.execute(query, tuple(params)).fetchall()

            try:
                yield sql
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as error:  # SQLite's messages name no stored values
            raise CensusDPError(f"ledger {self.path}: {error}") from None
        finally:
            conn.close()


class PostgresStore:
    """A ledger in PostgreSQL (psycopg 3); a charge locks its dataset row ``FOR UPDATE``."""

    lock_suffix = " FOR UPDATE"
    # a charge looks fingerprints up before it knows which dataset row to lock: charges are serialised as a whole
    charge_lock = f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY + 1})"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise CensusDPError("ledger: a postgresql:// ledger needs psycopg; "
                                "install it with: pip install 'psycopg[binary]'") from None
        self._psycopg, self._url, self.display = psycopg, url, redact_url(url)
        self.integrity_errors = (psycopg.IntegrityError,)
        with self.transaction() as sql:
            sql("SELECT pg_advisory_xact_lock(?)", (_PG_LOCK_KEY,))  # concurrent CREATE IF NOT EXISTS can clash
            for ddl in _DDL:
                sql(ddl.format(seq="BIGSERIAL PRIMARY KEY"))

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[SQL]:
        pg = self._psycopg
        try:
            conn = pg.connect(self._url, autocommit=True, connect_timeout=10)
        except pg.Error as error:
            raise CensusDPError(f"ledger {self.display}: cannot connect ({type(error).__name__})") from None
        try:
            with conn.transaction(), conn.cursor() as cur:

                def sql(query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                    cur.execute(query.replace("?", "%s"), tuple(params))
                    return cur.fetchall() if cur.description else []

                yield sql
        except pg.IntegrityError:
            raise
        except pg.Error as error:  # the class only: server messages may quote the URL or values
            raise CensusDPError(f"ledger {self.display}: database error ({type(error).__name__})") from None
        finally:
            conn.close()
