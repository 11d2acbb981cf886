"""Apply the hardened Prefect settings (flows/prefect.toml) before Prefect is imported anywhere.

The privacy-relevant settings are forced, not defaulted: a user's profile cannot turn result persistence
back on for censusdp flows.  Where Prefect runs (API URL, home folder) stays the user's choice; without an
API URL Prefect uses its embedded local server on SQLite under PREFECT_HOME.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

SETTINGS_FILE = Path(__file__).with_name("prefect.toml")


def hardened_environment() -> dict[str, str]:
    """The PREFECT_* variables that flows/prefect.toml stands for."""
    table = tomllib.loads(SETTINGS_FILE.read_text())
    env = {}
    for section, values in table.items():
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            env[f"PREFECT_{section.upper()}_{key.upper()}"] = text
    return env


def apply_hardened_settings() -> None:
    os.environ.update(hardened_environment())
    # not a privacy setting, so only a default: the embedded server can take longer than Prefect's 20 s to
    # start on a busy 2-core machine, and a batch job should wait rather than fail
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
