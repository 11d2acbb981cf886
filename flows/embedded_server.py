"""Prefect's embedded API server (no server of your own to run), kept warm between the commands of one installation.

With no ``PREFECT_API_URL``, Prefect boots a fresh server for every command: seconds of imports and database setup,
longer than a small release.  censusdp starts the same server (Prefect's command, its settings passed as Prefect
passes them, the hardened ones included) once per PREFECT_HOME and reuses it (docs/prefect.md, "The embedded
server"):

- it listens on the loopback interface only and asks for a random password, kept in a file only this user reads;
- every command using it holds a shared lock on ``lease`` (released by the kernel however the command ends); the
  server ends by itself once nobody has held it for ``IDLE_S`` seconds;
- its Prefect settings are fixed at its start: a command with other settings starts a server of its own instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
FOLDER = "censusdp-server"  # inside PREFECT_HOME
LOG = "server.log"
IDLE_S = 600.0  # the server ends after this long with no command holding it
# what Prefect's own ephemeral server is started with (prefect.server.api.server.SubprocessASGIServer)
SERVER_ENVIRONMENT = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
POLL_S = 0.05
DRAIN_S = 10.0  # the longest wait for Prefect's queued logs and events to reach the server after a flow


@dataclass(frozen=True)
class EmbeddedServer:
    """A running (or starting) server: where it listens, its password, and the process to ask."""

    pid: int
    port: int
    password: str
    settings: str  # digest of the Prefect settings it was started with
    started: float  # time.time() at its start

    @property
    def api_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/api"

    def answers(self, timeout_s: float) -> bool:
        import httpx

        try:
            return httpx.get(f"{self.api_url}/health", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def ready(self, timeout_s: float) -> str:
        """Its API URL once its health check answers (it may still be starting)."""
        deadline = time.monotonic() + timeout_s
        while not self.answers(1.0):
            if not _alive(self.pid):
                raise RuntimeError(f"Prefect's embedded server ended at start; its log: PREFECT_HOME/{FOLDER}/{LOG}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prefect's embedded server did not answer within {timeout_s:.0f} s")
            time.sleep(POLL_S)
        return self.api_url


@contextmanager
def embedded_server(idle_s: float = IDLE_S) -> Iterator[EmbeddedServer | None]:
    """The installation's warm server, started now if there is none (it boots while the caller goes on); None when
    Prefect would not start one (a ``PREFECT_API_URL`` is set, or ephemeral mode is off).  Enter it inside
    ``hardened_prefect``: a server is started with the settings in force."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield None
        return
    folder = server_folder(Path(settings.home))
    with (folder / "lease").open("a+b") as lease:
        fcntl.flock(lease, fcntl.LOCK_SH)  # before the start lock: a server ending holds the lease until it is gone
        environment = _server_environment()
        digest = _digest(environment)
        with _locked(folder / "start.lock"):
            server = _recorded(folder)
            startup_s = float(settings.server.ephemeral.startup_timeout_seconds)
            if server is None or server.settings != digest or not _usable(server, startup_s):
                server = _start(folder, environment, digest, idle_s)
        yield server


@contextmanager
def using(server: EmbeddedServer | None) -> Iterator[None]:
    """Prefect pointed at ``server`` once it answers, and its queued logs and events delivered when the block ends;
    nothing changed for None (Prefect's own choice of server stands)."""
    if server is None:
        yield
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, get_current_settings, temporary_settings

    url = server.ready(float(get_current_settings().server.ephemeral.startup_timeout_seconds))
    with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: server.password}):
        try:
            yield
        finally:
            APILogWorker.drain_all(timeout=DRAIN_S, at_exit=False)
            EventsWorker.drain_all(timeout=DRAIN_S, at_exit=False)


def server_folder(home: Path) -> Path:
    """The server's folder, this user's only (its password, and locks nobody else may hold)."""
    folder = home / FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # a folder made earlier, or by someone else's umask
    return folder


def stop_embedded_server(home: Path) -> None:
    """End the server kept for ``home``, if one runs (a command that needs one starts another)."""
    folder = home / FOLDER
    server = _recorded(folder) if folder.is_dir() else None
    if server is None or not _alive(server.pid) or not _is_server_process(server.pid):
        return
    os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    while _alive(server.pid):
        if time.monotonic() > deadline:
            os.kill(server.pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(POLL_S)


def _server_environment() -> dict[str, str]:
    """Prefect's settings as environment variables, as Prefect passes them to its own server."""
    from prefect.settings import get_current_settings

    return {**SERVER_ENVIRONMENT, **get_current_settings().to_environment_variables(exclude_unset=True)}


def _digest(environment: dict[str, str]) -> str:
    import prefect

    text = json.dumps([sys.executable, prefect.__version__, sorted(environment.items())])
    return hashlib.sha256(text.encode()).hexdigest()


def _start(folder: Path, environment: dict[str, str], digest: str, idle_s: float) -> EmbeddedServer:
    port, password = _free_port(), f"censusdp:{secrets.token_urlsafe(24)}"  # Prefect's auth string: user:password
    with (folder / LOG).open("ab") as log:
        os.chmod(log.name, 0o600)
        process = subprocess.Popen(
            [sys.executable, "-m", "censusdp.flows.server_process", str(port), str(idle_s), str(folder / "lease")],
            env={**_inherited(), **environment, "PREFECT_SERVER_API_AUTH_STRING": password},
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    server = EmbeddedServer(process.pid, port, password, digest, time.time())
    descriptor = os.open(folder / "server.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as record:
        os.fchmod(record.fileno(), 0o600)  # whatever mode a file left there had
        record.write(json.dumps(server.__dict__))
    return server


def _inherited() -> dict[str, str]:
    """The command's environment without censusdp's own variables (a ledger URL may hold a password): the server
    outlives the command and needs none of them."""
    return {name: value for name, value in os.environ.items() if not name.startswith("CENSUSDP_")}


def _recorded(folder: Path) -> EmbeddedServer | None:
    try:
        return EmbeddedServer(**json.loads((folder / "server.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _usable(server: EmbeddedServer, startup_s: float) -> bool:
    """Ours and running: it answers, or it is still within its start."""
    if not _alive(server.pid) or not _is_server_process(server.pid):
        return False
    return server.answers(1.0) or time.time() - server.started < startup_s


def _is_server_process(pid: int) -> bool:
    try:
        return b"censusdp.flows.server_process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return sys.platform != "linux"  # no /proc to ask: the health check decides


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child of this process that ended is a zombie until reaped
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


@contextmanager
def _locked(path: Path) -> Iterator[Any]:
    with path.open("a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])
