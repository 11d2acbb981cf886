"""Shared fixtures: a tiny release configuration and microdata made in the test, and the real PPMF sample."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from censusdp.flows.embedded_server import stop_embedded_server
from tests.helpers.tiny import TINY_TOML, tiny_microdata

# a throw-away PostgreSQL server; ledgers; Prefect homes with a migrated database
pytest_plugins = ["tests.helpers.postgres", "tests.helpers.ledgers", "tests.helpers.prefect_home"]


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker runs Prefect on a database of its own (set before anything imports Prefect, which
    reads PREFECT_HOME when it loads): two workers' embedded servers never share one SQLite file."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix=f"prefect-home-{worker}-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The worker's warm embedded Prefect server (censusdp.flows.embedded_server) ends with its tests."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("PREFECT_HOME"):
        stop_embedded_server(Path(os.environ["PREFECT_HOME"]))


@pytest.fixture(autouse=True)
def installation_ledger(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own installation: the default ledger lives in a fresh user data directory."""
    data_home = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    monkeypatch.delenv("CENSUSDP_LEDGER", raising=False)
    return data_home / "censusdp" / "ledger.sqlite"


@pytest.fixture
def tiny_release(tmp_path: Path) -> Path:
    """A directory with config.toml, microdata.parquet and geography.parquet; returns the config path."""
    micro, geo = tiny_microdata()
    micro.write_parquet(tmp_path / "microdata.parquet")
    geo.write_parquet(tmp_path / "geography.parquet")
    config = tmp_path / "config.toml"
    config.write_text(TINY_TOML.format(rho="4"))
    return config
