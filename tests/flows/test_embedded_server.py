"""The embedded Prefect server kept warm: one per PREFECT_HOME, reused by the next command, answering only with its
password, on the loopback interface, replaced when its settings differ or it died, ended once idle."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from censusdp.flows.embedded_server import FOLDER, embedded_server, stop_embedded_server, using
from censusdp.flows.settings import hardened_prefect

SEEN: set[int] = set()  # every server a test started, ended with it (kill_seen)


def started(home: Path, idle_s: float = 600.0, settings: dict | None = None) -> tuple[int, str, str]:
    """(pid, API URL, password) of the server a command in ``home`` uses, once it answers."""
    from prefect.settings import PREFECT_HOME, temporary_settings

    with hardened_prefect(), temporary_settings(updates={PREFECT_HOME: str(home), **(settings or {})}), \
            embedded_server(idle_s) as server:
        assert server is not None
        SEEN.add(server.pid)
        with using(server):
            return server.pid, server.api_url, server.password


@pytest.fixture(autouse=True)
def kill_seen() -> Iterator[None]:
    yield
    for pid in SEEN:
        if not _gone(pid):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    SEEN.clear()


def _gone(pid: int) -> bool:
    """The process has ended: reaped here if it is this process's child, else gone or a zombie. A process that
    is ending shows as a zombie a moment before its parent can reap it."""
    try:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return True
    except ChildProcessError:
        pass
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_one_warm_server_per_installation(prefect_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, PREFECT_LOGGING_LEVEL, temporary_settings

    monkeypatch.setenv("CENSUSDP_LEDGER", "postgresql://censusdp:hunter2@db.example/ledger")
    monkeypatch.setenv("PGPASSWORD", "hunter3")
    (prefect_home / FOLDER).mkdir(mode=0o755)  # left readable by an older version or a loose umask
    (tmp := prefect_home.parent / "cwd").mkdir()
    (tmp / "uvicorn.py").write_text("raise SystemExit('the working directory was imported from')\n")
    monkeypatch.chdir(tmp)
    try:
        pid, url, password = started(prefect_home)
        environment = Path(f"/proc/{pid}/environ").read_bytes()  # it outlives the command: none of its secrets
        assert b"hunter" not in environment and b"CENSUSDP_" not in environment
        assert Path(f"/proc/{pid}/cwd").resolve() != tmp.resolve()
        records = list((prefect_home / FOLDER).glob("*/server.json"))
        assert len(records) == 1 and json.loads(records[0].read_text())["pid"] == pid
        for path in (prefect_home / FOLDER, records[0].parent):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700
        assert stat.S_IMODE(records[0].stat().st_mode) == 0o600  # it holds the password
        assert url.startswith("http://127.0.0.1:")
        assert started(prefect_home)[0] == pid  # the next command finds it warm
        booted = psutil._pslinux.boot_time
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: booted() + 1.0)  # the system clock stepped
        assert started(prefect_home)[0] == pid  # the same process, not a pid taken for another
        # the API answers only with the password
        assert httpx.post(f"{url}/flows/filter", json={}, timeout=10).status_code == 401
        user, secret = password.split(":", 1)
        assert httpx.post(f"{url}/flows/filter", json={}, timeout=10, auth=(user, secret)).status_code == 200
        other_settings = {PREFECT_LOGGING_LEVEL: "ERROR"}
        other, _, _ = started(prefect_home, settings=other_settings)  # other settings: a server of their own
        assert other != pid and started(prefect_home)[0] == pid  # beside the first, which stays warm
        os.kill(other, 9)  # a dead server is replaced
        assert started(prefect_home, settings=other_settings)[0] not in (pid, other)
        with temporary_settings(updates={PREFECT_API_URL: url}), embedded_server() as server:
            assert server is None  # a configured API URL: Prefect's own choice stands
    finally:
        stop_embedded_server(prefect_home)
    assert all(_gone(json.loads(record.read_text())["pid"]) for record in (prefect_home / FOLDER).glob("*/server.json"))


@pytest.mark.slow
def test_an_idle_server_ends_and_the_next_command_starts_another(prefect_home: Path) -> None:
    try:
        pid, _, _ = started(prefect_home, idle_s=1.0)
        deadline = time.monotonic() + 30
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(pid)  # nobody held it for a second
        assert started(prefect_home)[0] != pid
    finally:
        stop_embedded_server(prefect_home)
