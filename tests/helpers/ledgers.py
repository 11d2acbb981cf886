"""Ledger fixtures and helpers shared by the ledger tests (a pytest plugin, loaded by tests/conftest.py).

``ledger`` runs on both backends through ``ledger_location`` (tests/helpers/postgres.py); ``path`` is a SQLite
file for the SQLite-only tests.
"""

from __future__ import annotations

import sqlite3
from fractions import Fraction
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from pipeline.budget.ledger.charges import Charge, PrivacyLedger, config_hash

HASH = config_hash(b'[budget]\nrho = "1/2"\n')
DELTA = 1e-10


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A SQLite ledger file, for the SQLite-only tests."""
    return tmp_path / ".censusdp-ledger.sqlite"


@pytest.fixture
def ledger(ledger_location: str) -> PrivacyLedger:
    """A new ledger on each backend: a SQLite file, then a fresh PostgreSQL database."""
    return PrivacyLedger(ledger_location)


def charge(ledger: PrivacyLedger, run_id: str, rho: Fraction, dataset: str = "pa", publishable: bool = True) -> Charge:
    return ledger.charge(dataset, run_id, rho, DELTA, HASH, publishable)


def is_postgres_url(location: str | Path) -> bool:
    return str(location).startswith("postgresql://")


def raw_rows(location: str | Path, query: str) -> list[tuple[Any, ...]]:
    """Rows exactly as stored, read past the ledger API: sqlite3 for a file, psycopg for a URL."""
    if is_postgres_url(location):
        import psycopg

        with psycopg.connect(str(location)) as conn:
            return conn.execute(query).fetchall()
    with sqlite3.connect(location) as conn:
        return conn.execute(query).fetchall()


def password(location: str | Path) -> str | None:
    """The password in a PostgreSQL URL (the test server's URLs always carry one), else None."""
    return urlsplit(location).password if is_postgres_url(location) else None
