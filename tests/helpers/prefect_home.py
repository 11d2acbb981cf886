"""``prefect_home``: a PREFECT_HOME of the test's own holding an already migrated database.

Prefect migrates a new database at its server's first start, about 10 s of CPU on this machine; the tests that
run Prefect in a subprocess each want a home of their own (nothing of another test in the database they scan).
The database is migrated once per session, by whichever xdist worker asks first (the others wait on a lock), and
copied.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from censusdp.flows.embedded_server import stop_embedded_server

MIGRATE = ("import asyncio; from prefect.server.database import provide_database_interface; "
           "asyncio.run(provide_database_interface().create_db())")


@pytest.fixture(scope="session")
def migrated_prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = tmp_path_factory.getbasetemp().parent  # the session's folder, above each xdist worker's
    template = shared / "prefect-home-migrated"
    with open(shared / "prefect-home-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (template / "prefect.db").is_file():
            env = {**os.environ, "PREFECT_HOME": str(template)}
            env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
            subprocess.run([sys.executable, "-c", MIGRATE], env=env, check=True, capture_output=True, timeout=300)
    return template


@pytest.fixture
def prefect_home(migrated_prefect_home: Path, tmp_path: Path) -> Iterator[Path]:
    """The home; the warm embedded server a command started in it ends with the test."""
    home = tmp_path / "prefect-home"
    shutil.copytree(migrated_prefect_home, home)
    yield home
    stop_embedded_server(home)
