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

from censusdp.pipeline.budget.ledger.charges import Charge, PrivacyLedger, config_hash

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


A, B, C = "a1" * 32, "b2" * 32, "c3" * 32  # fingerprints (keyed digests) of three pieces of data
OTHER_HASH = config_hash(b"another configuration")


def release(ledger: PrivacyLedger, run_id: str, rho: Fraction, fingerprints: dict[str, str], dataset: str = "pa",
            cap: Fraction | str = Fraction(1)) -> Charge:
    return ledger.charge_release(dataset, cap, fingerprints, run_id, rho, DELTA, HASH, True)


def fingerprint_rows(ledger_location: str) -> list[tuple[Any, ...]]:
    return raw_rows(ledger_location, "SELECT fingerprint, kind, dataset, first_run FROM censusdp_fingerprints "
                                     "ORDER BY fingerprint")


def one_line_naming(error: pytest.ExceptionInfo[BaseException], *names: str) -> str:
    text = str(error.value)
    assert "\n" not in text and text.startswith("ledger"), text
    for name in names:
        assert name in text, text
    return text
