"""Where the privacy ledger lives: one per installation, never beside the data it protects (docs/ledger.md).

A ledger next to the microdata would give every copy of the data a fresh lifetime budget.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from platformdirs import user_data_path

LEDGER_ENV = "CENSUSDP_LEDGER"
LEDGER_FILENAME = "ledger.sqlite"


def is_postgres_url(location: object) -> bool:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def _absolute(location: str) -> str:
    return location if is_postgres_url(location) else str(Path(location).expanduser().resolve())


def default_ledger_location() -> str:
    """``$CENSUSDP_LEDGER``, else the per-installation SQLite file in the user data directory."""
    env = os.environ.get(LEDGER_ENV, "").strip()
    return _absolute(env) if env else str(user_data_path("censusdp", appauthor=False) / LEDGER_FILENAME)


def prepare_location(location: str) -> None:
    """Make the folder of a ledger file (the user data directory on first use), readable by its owner only."""
    if not is_postgres_url(location):
        Path(location).parent.mkdir(parents=True, exist_ok=True, mode=0o700)


def resolve_ledger_location(configured: str | None) -> str:
    """The ledger a release is charged to; ``configured`` is ``[ledger] path`` (absolute) or None.  ``ValueError``
    (naming no secret) when it is not ``$CENSUSDP_LEDGER``: a configuration cannot move the budget elsewhere."""
    env = os.environ.get(LEDGER_ENV, "").strip()
    if env and configured and _absolute(env) != _absolute(configured):
        raise ValueError(f"names another ledger than ${LEDGER_ENV}, the installation's ledger; remove ledger.path "
                         "(a configuration cannot move the budget to a fresh ledger)")
    return default_ledger_location() if env or not configured else _absolute(configured)


def redact_url(url: str) -> str:
    """``postgresql://user@host:port/db``: the password and query string (which may hold one) removed.

    Parsed by hand, not by ``urlsplit``: a password may hold ``/``, ``?``, ``#`` or ``[`` unescaped (libpq is
    lenient), and a parser that ends the user part early would show the rest as a host.  Where the text is
    ambiguous (two ``@``, or ``?``/``#`` before the ``@``) only the scheme is shown.
    """
    if not is_postgres_url(url):
        return url  # a file path holds no credential
    scheme, rest = url.split("://", 1)
    hidden = f"{scheme}://(redacted)"
    user = ""
    if rest.count("@") > 1:
        return hidden
    if "@" in rest:
        info, rest = rest.split("@")
        if set(info) & set("?#"):
            return hidden
        name = info.split(":", 1)[0]
        user = f"{name}@" if name and not set(name) & set("/[]%") else ""
    place = rest.split("?", 1)[0].split("#", 1)[0]
    return f"{scheme}://{user}{place}"


def public_config_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of a configuration's TOML table fit to be written anywhere (manifest, measurements, Prefect):
    a ``postgresql://`` ledger URL loses its password and query string."""
    public = copy.deepcopy(raw)
    ledger = public.get("ledger")
    if isinstance(ledger, dict) and isinstance(ledger.get("path"), str):
        ledger["path"] = redact_url(ledger["path"])
    return public
