"""Prefect's embedded API server (no server of your own to run), kept warm between the commands of one installation.

With no ``PREFECT_API_URL``, Prefect boots a fresh server for every command: seconds of imports and database setup,
longer than a small release.  censusdp starts Prefect's server app once per PREFECT_HOME and Prefect settings, and
reuses it (docs/prefect.md, "The embedded server"):

- its socket is bound here, on the loopback interface, before the server process starts, and handed to it: no other
  process can take the port while it boots; it asks every client for a random password (Prefect's auth string),
  kept in a file only this user reads;
- it runs with ``python -P`` in its own folder (no module of the command's working directory), with Prefect's
  settings passed as Prefect passes them (the hardened ones included) and none of the command's other variables;
- every command using it holds a shared lock on its ``lease`` (released by the kernel however the command ends); it
  ends by itself once nobody has held it for ``IDLE_S`` seconds;
- each set of Prefect settings has its own server and folder (``censusdp-server/<digest>``).
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

LOOPBACK = "127.0.0.1"
FOLDER = "censusdp-server"  # inside PREFECT_HOME: a folder per settings digest
LOG = "server.log"
IDLE_S = 600.0  # the server ends after this long with no command holding it
# what Prefect's own ephemeral server is started with (prefect.server.api.server.SubprocessASGIServer)
SERVER_ENVIRONMENT = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
# the command's variables the server may see besides Prefect's own: what a Python process needs to run
KEPT_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH",
                  "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR")
POLL_S = 0.05
DRAIN_S = 10.0  # the longest wait for Prefect's queued logs and events to reach the server after a flow


@dataclass(frozen=True)
class EmbeddedServer:
    """A running (or starting) server: where it listens, its password, and its process (pid and start time)."""

    pid: int
    started_after_boot_s: float  # when the process started, so that a reused pid is never taken for it
    port: int
    password: str = field(repr=False)

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
        while True:
            if not _is_ours(self):
                raise RuntimeError(f"Prefect's embedded server ended at start; its log is {LOG} in its folder "
                                   f"under PREFECT_HOME/{FOLDER}")
            if self.answers(1.0):  # the socket is its own since before it started: nobody else answers there
                return self.api_url
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prefect's embedded server did not answer within {timeout_s:.0f} s")
            time.sleep(POLL_S)


@contextmanager
def embedded_server(idle_s: float = IDLE_S) -> Iterator[EmbeddedServer | None]:
    """The installation's warm server for the settings in force, started now if there is none (it boots while the
    caller goes on); None when Prefect would not start one (a ``PREFECT_API_URL`` is set, or ephemeral mode is off).
    Enter it inside ``hardened_prefect``: a server is started with the settings in force."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield None
        return
    environment = _server_environment()
    folder = server_folder(Path(settings.home), _digest(environment))
    with (folder / "lease").open("a+b") as lease:
        fcntl.flock(lease, fcntl.LOCK_SH)  # before the start lock: a server ending holds the lease until it is gone
        with (folder / "start.lock").open("a+b") as starting:
            fcntl.flock(starting, fcntl.LOCK_EX)
            server = _recorded(folder)
            if server is None or not _is_ours(server):
                server = _start(folder, environment, idle_s)
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


def server_folder(home: Path, digest: str) -> Path:
    """The folder of the server for one set of settings, this user's only (its password, and locks nobody else
    may hold); a symbolic link or a folder of another user is refused."""
    folder = home / FOLDER / digest[:16]
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (folder.parent, folder):
        status = path.lstat()
        if path.is_symlink() or status.st_uid != os.getuid():
            raise RuntimeError(f"{path}: not a folder of this user's own; Prefect's embedded server keeps its "
                               "password there")
        os.chmod(path, 0o700)  # a folder made earlier, or under a loose umask
    return folder


def stop_embedded_server(home: Path) -> None:
    """End every server kept for ``home`` (a command that needs one starts another); a server a command is using
    ends too, and that command's flow fails."""
    for record in sorted((home / FOLDER).glob("*/server.json")):
        server = _recorded(record.parent)
        if server is None or not _is_ours(server):
            continue
        os.kill(server.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while _is_ours(server):
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


def _start(folder: Path, environment: dict[str, str], idle_s: float) -> EmbeddedServer:
    import psutil

    password = f"censusdp:{secrets.token_urlsafe(24)}"  # Prefect's auth string: user:password
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listening.bind((LOOPBACK, 0))
        listening.listen(128)
        kept = {name: value for name, value in os.environ.items() if name in KEPT_VARIABLES}
        with (folder / LOG).open("ab") as log:
            os.chmod(log.name, 0o600)
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", "censusdp.flows.server_process", str(listening.fileno()), str(idle_s),
                 str(folder / "lease")],
                env={**kept, **environment, "PREFECT_SERVER_API_AUTH_STRING": password}, cwd=folder,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                pass_fds=(listening.fileno(),))
        port = int(listening.getsockname()[1])
    finally:
        listening.close()  # the server process holds its own copy
    server = EmbeddedServer(process.pid, _started_after_boot_s(psutil.Process(process.pid)), port, password)
    descriptor = os.open(folder / "server.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as record:
        os.fchmod(record.fileno(), 0o600)  # whatever mode a file left there had
        record.write(json.dumps(asdict(server)))
    return server


def _recorded(folder: Path) -> EmbeddedServer | None:
    try:
        return EmbeddedServer(**json.loads((folder / "server.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _is_ours(server: EmbeddedServer) -> bool:
    """The recorded process is still running: the same pid, started at the same time, of this user."""
    import psutil

    try:
        process = psutil.Process(server.pid)
        running = process.status() != psutil.STATUS_ZOMBIE
        started = _started_after_boot_s(process)
        return running and abs(started - server.started_after_boot_s) < 0.5 and process.uids().real == os.getuid()
    except psutil.Error:
        return False


def _started_after_boot_s(process: psutil.Process) -> float:
    """Seconds from boot to the process's start. psutil's start time is the boot time read from the system clock
    plus a tick count, so it moves when the clock is stepped; this difference does not."""
    import psutil

    return process.create_time() - psutil.boot_time()
