"""A throw-away PostgreSQL server for the ledger tests (a pytest plugin, loaded by ``tests/conftest.py``).

Fixtures:

* ``postgres_server`` (session): the server.  ``$CENSUSDP_TEST_POSTGRES_URL`` names an existing one (its user
  must be allowed to create roles and databases); otherwise a private server is made with ``initdb`` in a
  temporary directory and started with ``pg_ctl``, listening on a UNIX socket in that directory only (no TCP),
  as the ``postgres`` user when the tests run as root (PostgreSQL refuses to run as root).  It is stopped
  (``pg_ctl stop -m immediate``) and its directory removed at the end of the session.  Started lazily: only a
  test that asks for it pays.  The binaries are found through ``$PG_BINDIR``, then ``pg_config --bindir``,
  then ``/usr/lib/postgresql/*/bin`` (newest first), then ``initdb`` on the PATH.  When no server can be had,
  the tests that need one are skipped, except under ``$CI``, where they fail: CI must test both backends.
* ``postgres_url`` (function): a fresh, empty database on that server, owned by the role ``censusdp``, as a
  credentialed URL ``postgresql://censusdp:<password>@/<db>?host=<socket dir>&port=5432``.  The password is
  random per session (trust authentication ignores it on the private server); it is there so that tests can
  check that a password never reaches output or errors.  The database is dropped after the test.
* ``ledger_location`` (function, params ``sqlite`` and ``postgresql``): a new ledger location as a ``str``,
  a SQLite file under ``tmp_path`` or a ``postgres_url``.  Only the ``postgresql`` param starts the server.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest

URL_ENV = "CENSUSDP_TEST_POSTGRES_URL"
BINDIR_ENV = "PG_BINDIR"
ROLE = "censusdp"
SUPERUSER = "postgres"
PORT = 5432  # only names the socket file (.s.PGSQL.5432) in our private directory: no TCP, no clash
START_TIMEOUT_S = 60
_SETTINGS = {  # small and quiet: the test machine has 2 cores; fsync stays on (a realistic server)
    "listen_addresses": "",
    "port": str(PORT),
    "shared_buffers": "16MB",
    "max_connections": "40",
    "autovacuum": "off",
    "max_wal_senders": "0",
    "wal_level": "minimal",
    "log_min_messages": "warning",
}


class ServerUnavailable(Exception):
    """No PostgreSQL server could be had; the message says why."""


@dataclass
class PostgresServer:
    """A running server: ``admin`` is a conninfo allowed to create roles and databases."""

    admin: str
    host: str | None  # a socket directory or a host name; None: libpq's default
    port: str | None
    extra: dict[str, str] = field(default_factory=dict)  # other connection parameters of an external server
    password: str = field(default_factory=lambda: "pw-" + secrets.token_urlsafe(18))

    def connect_admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin, autocommit=True, connect_timeout=10)

    def create_role(self) -> None:
        """The login role ``censusdp`` with this session's password (created, or its password reset)."""
        from psycopg import sql

        with self.connect_admin() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            conn.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(self.password)))

    def create_database(self) -> str:
        """A new empty database owned by ``censusdp``; returns its name."""
        from psycopg import sql

        name = f"censusdp_test_{uuid.uuid4().hex[:16]}"
        with self.connect_admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(ROLE)))
        return name

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        with self.connect_admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def url(self, dbname: str) -> str:
        """``postgresql://censusdp:<password>@/<dbname>?host=...&port=...``: host and port in the query string,
        which libpq reads for socket directories and host names alike (an explicit port: $PGPORT cannot interfere)."""
        query = {k: v for k, v in (("host", self.host), ("port", self.port)) if v} | self.extra
        tail = "?" + urlencode(query, quote_via=quote, safe="/") if query else ""
        return f"postgresql://{quote(ROLE)}:{quote(self.password, safe='')}@/{quote(dbname)}{tail}"


class _PrivateServer:
    """``initdb`` + ``pg_ctl start`` in a temporary directory; ``stop()`` is idempotent and safe at exit."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.data: Path | None = None
        self.pg_ctl: Path | None = None
        self.owner_pid = os.getpid()
        self.stopped = False

    def start(self) -> PostgresServer:
        bindir = find_bindir()
        initdb, self.pg_ctl = bindir / "initdb", bindir / "pg_ctl"
        as_user = _run_as()
        base = tempfile.gettempdir()
        if len(base) > 60 and os.path.isdir("/tmp"):  # a socket path must stay under ~107 bytes
            base = "/tmp"
        self.root = Path(tempfile.mkdtemp(prefix="censusdp-pg-", dir=base))
        atexit.register(self.stop)
        if as_user is not None:
            os.chown(self.root, as_user[0], as_user[1])
        self.data, log = self.root / "data", self.root / "server.log"
        _run([str(initdb), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C",
              "--no-sync", "--no-instructions"], as_user, "initdb")
        settings = _SETTINGS | {"unix_socket_directories": str(self.root)}
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# censusdp tests\n")
            conf.writelines(f"{k} = '{v.replace(chr(39), chr(39) * 2)}'\n" for k, v in settings.items())
        try:
            _run([str(self.pg_ctl), "-D", str(self.data), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S), "-s",
                  "start"], as_user, "pg_ctl start")
        except ServerUnavailable as error:
            raise ServerUnavailable(f"{error}; server log: {_tail(log)}") from None
        server = PostgresServer(admin=f"host={self.root} port={PORT} user={SUPERUSER} dbname=postgres",
                                host=str(self.root), port=str(PORT))
        _wait_ready(server, log)
        return server

    def stop(self) -> None:
        if self.stopped or os.getpid() != self.owner_pid or self.root is None:
            return
        self.stopped = True
        try:
            if self.data is not None and (self.data / "postmaster.pid").exists():
                _stop_postmaster(self.pg_ctl, self.data)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def find_bindir() -> Path:
    """The directory holding initdb and pg_ctl: $PG_BINDIR, pg_config --bindir, /usr/lib/postgresql/*/bin, PATH."""
    given = os.environ.get(BINDIR_ENV)
    if given:
        if _has_tools(Path(given)):
            return Path(given)
        raise ServerUnavailable(f"${BINDIR_ENV}={given} holds no initdb and pg_ctl")
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += [Path(p) for p in sorted(versions, key=_version_key, reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for candidate in candidates:
        if _has_tools(candidate):
            return candidate
    raise ServerUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found: set $PG_BINDIR, put pg_config "
                            f"on the PATH, install them (apt-get install postgresql) or set ${URL_ENV}")


def _has_tools(directory: Path) -> bool:
    return all(os.access(directory / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres"))


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", Path(path).parent.name)) or (0,)


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) of the ``postgres`` user when we are root (PostgreSQL refuses to run as root), else None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise ServerUnavailable(f"running as root, and there is no {SUPERUSER!r} user to run PostgreSQL as "
                                "(PostgreSQL refuses to run as root)") from None
    return entry.pw_uid, entry.pw_gid


def _run(argv: list[str], as_user: tuple[int, int] | None, what: str) -> None:
    user = {} if as_user is None else {"user": as_user[0], "group": as_user[1], "extra_groups": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C", "LANG": "C"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30, env=env,
                              cwd="/", check=False, **user)
    except (OSError, subprocess.SubprocessError) as error:
        raise ServerUnavailable(f"{what} could not run: {error}") from None
    if done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split())[-600:]
        raise ServerUnavailable(f"{what} failed (exit {done.returncode}): {message}")


def _wait_ready(server: PostgresServer, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with server.connect_admin() as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as error:
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the server did not accept connections: {error}; "
                                        f"server log: {_tail(log)}") from None
            time.sleep(0.1)


def _stop_postmaster(pg_ctl: Path | None, data: Path) -> None:
    """``pg_ctl stop -m immediate``; if that fails, SIGQUIT (immediate shutdown) then SIGKILL the postmaster."""
    pid = _postmaster_pid(data)
    if pg_ctl is not None:
        with contextlib.suppress(ServerUnavailable):
            _run([str(pg_ctl), "-D", str(data), "-m", "immediate", "-w", "-t", "30", "-s", "stop"], _run_as(),
                 "pg_ctl stop")
            return
    if pid is None:
        return
    for sig, wait_s in ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tail(log: Path, chars: int = 800) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").splitlines())[-chars:] or "(empty)"
    except OSError:
        return "(none)"


def _external(url: str) -> PostgresServer:
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except Exception as error:  # noqa: BLE001 - psycopg raises ProgrammingError; the URL may hold a password
        raise ServerUnavailable(f"${URL_ENV} is not a valid connection URL ({type(error).__name__})") from None
    extra = {k: v for k, v in params.items() if k not in ("host", "hostaddr", "port", "user", "password", "dbname")}
    return PostgresServer(admin=url, host=params.get("host"), port=params.get("port"), extra=extra)


def _unavailable(reason: str) -> None:
    """Skip the test, or fail it under CI, where both ledger backends must be tested."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL test server unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL test server: {reason}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL server with the role ``censusdp`` (see the module docstring)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'psycopg[binary]')")
    private = None
    try:
        url = os.environ.get(URL_ENV)
        if url:
            server = _external(url)
        else:
            private = _PrivateServer()
            server = private.start()
        server.create_role()
    except ServerUnavailable as error:
        if private is not None:
            private.stop()
        _unavailable(str(error))
    except Exception as error:  # noqa: BLE001 - e.g. psycopg errors creating the role; never echo a URL
        if private is not None:
            private.stop()
        _unavailable(f"setting the server up failed: {type(error).__name__}: {error}")
    try:
        yield server
    finally:
        if private is not None:
            private.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database on the test server: ``postgresql://censusdp:<password>@/<db>?host=<socket dir>&port=5432``."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"], ids=["sqlite", "postgresql"])
def ledger_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty ledger location: a SQLite file path, or a fresh PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return request.getfixturevalue("postgres_url")
